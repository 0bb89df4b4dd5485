/* --request-id and --request-start-header (reqid.h). */
#include "serve/reqid.h"

#include <stdio.h>
#include <time.h>

#include "base/random.h"
#include "codec/trace.h"

static const ps_slice_t id_name = PS_SLICE_LIT("x-request-id");
static const ps_slice_t start_name = PS_SLICE_LIT("x-request-start");

/* The index of name's first field in r, or -1; *count gets how many there are. */
static int find_field(const ps_request_t *r, ps_slice_t name, int *count)
{
    int first = -1;
    *count = 0;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        ps_slice_t n = r->headers[i].name;
        if (n.len == name.len && ps_slice_ieq(n, name.base, name.len)) {
            first = first < 0 ? (int)i : first;
            (*count)++;
        }
    }
    return first;
}

/* Leaves r one name field with value (base NULL: none): the first one present
 * takes it and the others go, the order of the rest kept; or it is appended
 * in the room the protocol left. */
static void set_field(ps_request_t *r, ps_slice_t name, int first, ps_slice_t value)
{
    if (first < 0) {
        if (value.base != NULL)
            r->headers[r->nheaders++] = (ps_header_t){name, value};
        return;
    }
    uint32_t k = (uint32_t)first;
    if (value.base != NULL)
        r->headers[k++].value = value;
    for (uint32_t i = (uint32_t)first + 1; i < r->nheaders; i++) {
        ps_slice_t n = r->headers[i].name;
        if (!(n.len == name.len && ps_slice_ieq(n, name.base, name.len)))
            r->headers[k++] = r->headers[i];
    }
    r->nheaders = k;
}

/* The one field a trusted proxy sent, when it is valid; base NULL otherwise. */
static ps_slice_t trusted_value(const ps_request_t *r, int trusted, int first, int count)
{
    ps_slice_t v = {NULL, 0};
    if (trusted && count == 1 && ps_request_id_valid(r->headers[first].value))
        v = r->headers[first].value;
    return v;
}

static void take_id(ps_request_t *r, int trusted)
{
    int count;
    int first = find_field(r, id_name, &count);
    ps_slice_t v = trusted_value(r, trusted, first, count);
    uint8_t random[16];
    if (v.base == NULL && ps_random_fill(random, sizeof(random)) == 0) {
        ps_request_id_format(random, r->request_id_buf);
        v = (ps_slice_t){r->request_id_buf, PS_REQUEST_ID_HEX};
    }
    set_field(r, id_name, first, v);
    r->request_id = v;
}

/* X-Request-Start: t=<microseconds since the epoch>, what New Relic, Datadog
 * and Scout read as the moment the request reached the server stack. */
static void take_start(ps_request_t *r, int trusted)
{
    int count;
    int first = find_field(r, start_name, &count);
    ps_slice_t v = trusted_value(r, trusted, first, count);
    if (v.base == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long us = (unsigned long long)ts.tv_sec * 1000000u + ts.tv_nsec / 1000;
        int n = snprintf(r->request_start_buf, sizeof(r->request_start_buf), "t=%llu", us);
        v = (ps_slice_t){r->request_start_buf, (size_t)n};
    }
    set_field(r, start_name, first, v);
}

void ps_reqid_take(ps_request_t *r, unsigned what, int trusted)
{
    if (what & PS_REQID_ID)
        take_id(r, trusted);
    if (what & PS_REQID_START)
        take_start(r, trusted);
}

int ps_reqid_absent(const ps_header_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name.len == id_name.len && ps_slice_ieq(h[i].name, id_name.base, id_name.len))
            return 0;
    return 1;
}
