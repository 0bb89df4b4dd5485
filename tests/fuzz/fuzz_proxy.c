/* libFuzzer driver for csrc/codec/proxy.c: what a trusted proxy's headers say
 * (RFC 7239 Forwarded, X-Forwarded-For/-Proto/-Host/-Port, gunicorn's
 * secure_scheme_headers). Build and run with `make fuzz` (scripts/fuzz.sh;
 * FUZZ_TARGETS=proxy for this one).
 *
 * Byte 0 picks the trust list (bits 0-1) and gunicorn's table (bit 2); the
 * rest is header lines "name:value" separated by '\n'. Checked:
 *   - the result is 0 or one of PS_PROXY_E*, and has a reason;
 *   - every slice of the result lies inside the input, the client is at
 *     most PS_PROXY_MAX_HOST long, a client port comes with a client;
 *   - a forwarded host is a host again (ps_proxy_split_host accepts it
 *     with no port of its own);
 *   - applying twice gives the same result.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "codec/proxy.h"
#include "fuzz.h"

#define MAX_HEADERS 32

static const char *const lists[] = {"127.0.0.1", "*", "10.0.0.0/8,127.0.0.1,::1", ""};

static int inside(ps_slice_t s, const uint8_t *data, size_t size)
{
    if (s.base == NULL)
        return s.len == 0;
    const char *b = (const char *)data;
    return s.base >= b && s.base + s.len <= b + size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ps_proxy_t p;
    const char *list = lists[data[0] & 3];
    if (ps_proxy_init(&p, list, strlen(list), NULL, NULL) < 0)
        return 0;
    if ((data[0] & 4) && (ps_proxy_add_scheme_header(&p, "X-FORWARDED-PROTO", 17, "https", 5) < 0 ||
                          ps_proxy_add_scheme_header(&p, "X-FORWARDED-SSL", 15, "on", 2) < 0)) {
        ps_proxy_free(&p);
        return 0;
    }
    ps_header_t headers[MAX_HEADERS];
    ps_request_t r;
    memset(&r, 0, sizeof(r));
    r.headers = headers;
    const char *s = (const char *)data + 1, *end = (const char *)data + size;
    while (s < end && r.nheaders < MAX_HEADERS) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *line_end = nl ? nl : end;
        const char *colon = memchr(s, ':', (size_t)(line_end - s));
        if (colon) {
            headers[r.nheaders].name = (ps_slice_t){s, (size_t)(colon - s)};
            headers[r.nheaders].value = (ps_slice_t){colon + 1, (size_t)(line_end - colon - 1)};
            r.nheaders++;
        }
        s = nl ? nl + 1 : end;
    }
    ps_proxy_result_t a, b;
    int rc = ps_proxy_apply(&p, &r, &a);
    INVARIANT(rc == 0 || rc == PS_PROXY_ESCHEME || rc == PS_PROXY_ECONFLICT ||
              rc == PS_PROXY_EMALFORMED);
    INVARIANT(ps_proxy_reason(rc) != NULL);
    INVARIANT(ps_proxy_apply(&p, &r, &b) == rc);
    if (rc == 0) {
        INVARIANT(memcmp(&a, &b, sizeof(a)) == 0);
        INVARIANT(a.scheme <= PS_SCHEME_HTTPS);
        INVARIANT(inside(a.client, data, size) && inside(a.host, data, size));
        INVARIANT(a.client.len <= PS_PROXY_MAX_HOST);
        INVARIANT(a.client.base != NULL || a.client_port == 0);
        if (a.host.base) {
            ps_slice_t name;
            uint16_t port;
            INVARIANT(ps_proxy_split_host(a.host, &name, &port) == 0);
            INVARIANT(port == 0 && name.base == a.host.base && name.len == a.host.len);
        }
    }
    ps_proxy_free(&p);
    return 0;
}
