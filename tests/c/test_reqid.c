/* Unit tests of csrc/serve/reqid.c: X-Request-ID and X-Request-Start kept from a
 * trusted peer when valid, else replaced (never added beside the client's), in
 * the room a protocol leaves past nheaders. */
#include <string.h>

#include "check.h"
#include "serve/reqid.h"

#define MAX_FIELDS 8

typedef struct {
    ps_request_t r;
    ps_header_t h[MAX_FIELDS + PS_REQUEST_ADDED_FIELDS];
} req_t;

static void setup(req_t *q, const ps_header_t *fields, uint32_t n)
{
    memset(q, 0, sizeof(*q));
    memcpy(q->h, fields, n * sizeof(*fields));
    q->r.headers = q->h;
    q->r.nheaders = n;
}

/* The values of name's fields in order, as a count and the first. */
static int values(const req_t *q, const char *name, ps_slice_t *first)
{
    int n = 0;
    for (uint32_t i = 0; i < q->r.nheaders; i++)
        if (ps_slice_ieq(q->r.headers[i].name, name, strlen(name)) &&
            strlen(name) == q->r.headers[i].name.len && n++ == 0)
            *first = q->r.headers[i].value;
    return n;
}

static int is_hex32(ps_slice_t v)
{
    if (v.len != 32)
        return 0;
    for (size_t i = 0; i < 32; i++)
        if (!((v.base[i] >= '0' && v.base[i] <= '9') || (v.base[i] >= 'a' && v.base[i] <= 'f')))
            return 0;
    return 1;
}

static void test_generated_when_absent(void)
{
    static const ps_header_t f[] = {{PS_SLICE_LIT("Host"), PS_SLICE_LIT("a")}};
    req_t q;
    ps_slice_t v = {0};
    setup(&q, f, 1);
    ps_reqid_take(&q.r, PS_REQID_ID | PS_REQID_START, 1);
    CHECK_EQ(q.r.nheaders, 3);
    CHECK_EQ(values(&q, "x-request-id", &v), 1);
    CHECK(is_hex32(v) && v.base == q.r.request_id.base && v.len == q.r.request_id.len);
    CHECK_EQ(values(&q, "x-request-start", &v), 1);
    CHECK(v.len == 18 && memcmp(v.base, "t=", 2) == 0);
    char first[32];
    memcpy(first, q.r.request_id.base, 32);
    setup(&q, f, 1);
    ps_reqid_take(&q.r, PS_REQID_ID, 0);
    CHECK_EQ(q.r.nheaders, 2);
    CHECK(memcmp(first, q.r.request_id.base, 32) != 0);
}

static void test_kept_from_a_trusted_peer(void)
{
    static const ps_header_t f[] = {
        {PS_SLICE_LIT("X-Request-Id"), PS_SLICE_LIT("edge-1")},
        {PS_SLICE_LIT("X-Request-Start"), PS_SLICE_LIT("t=1700000000.123")},
    };
    req_t q;
    ps_slice_t v = {0};
    setup(&q, f, 2);
    ps_reqid_take(&q.r, PS_REQID_ID | PS_REQID_START, 1);
    CHECK_EQ(q.r.nheaders, 2);
    CHECK_SLICE_EQ(q.r.request_id, "edge-1");
    CHECK_EQ(values(&q, "x-request-start", &v), 1);
    CHECK_SLICE_EQ(v, "t=1700000000.123");
    /* The same from an untrusted peer: both replaced in place. */
    setup(&q, f, 2);
    ps_reqid_take(&q.r, PS_REQID_ID | PS_REQID_START, 0);
    CHECK_EQ(q.r.nheaders, 2);
    CHECK(is_hex32(q.r.request_id) && q.r.headers[0].value.base == q.r.request_id.base);
    CHECK(q.r.headers[1].value.len == 18 && q.r.headers[1].value.base != f[1].value.base);
}

static void test_duplicates_and_invalid_replaced(void)
{
    static const ps_header_t f[] = {
        {PS_SLICE_LIT("x-request-id"), PS_SLICE_LIT("one")},
        {PS_SLICE_LIT("Accept"), PS_SLICE_LIT("*/*")},
        {PS_SLICE_LIT("X-REQUEST-ID"), PS_SLICE_LIT("two")},
        {PS_SLICE_LIT("Cookie"), PS_SLICE_LIT("c=1")},
        {PS_SLICE_LIT("x-request-id"), PS_SLICE_LIT("three")},
    };
    req_t q;
    ps_slice_t v = {0};
    setup(&q, f, 5);
    ps_reqid_take(&q.r, PS_REQID_ID, 1);
    CHECK_EQ(q.r.nheaders, 3); /* the first takes the new value, the others go */
    CHECK_EQ(values(&q, "x-request-id", &v), 1);
    CHECK(is_hex32(v));
    CHECK_SLICE_EQ(q.r.headers[1].name, "Accept"); /* the order of the rest is kept */
    CHECK_SLICE_EQ(q.r.headers[2].name, "Cookie");
    static const ps_header_t bad[] = {{PS_SLICE_LIT("x-request-id"), PS_SLICE_LIT("a b")}};
    setup(&q, bad, 1);
    ps_reqid_take(&q.r, PS_REQID_ID, 1);
    CHECK(q.r.nheaders == 1 && is_hex32(q.r.request_id));
}

/* A head with every field the limit allows still has room for both. */
static void test_room_past_a_full_head(void)
{
    ps_header_t f[MAX_FIELDS];
    for (int i = 0; i < MAX_FIELDS; i++)
        f[i] = (ps_header_t){PS_SLICE_LIT("X-Filler"), PS_SLICE_LIT("v")};
    req_t q;
    setup(&q, f, MAX_FIELDS);
    ps_reqid_take(&q.r, PS_REQID_ID | PS_REQID_START, 0);
    CHECK_EQ(q.r.nheaders, MAX_FIELDS + 2);
}

static void test_response_carries_it_unless_the_app_set_one(void)
{
    static const ps_header_t own[] = {{PS_SLICE_LIT("X-Request-ID"), PS_SLICE_LIT("app")}};
    static const ps_header_t other[] = {{PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("x")}};
    ps_request_t r = {0};
    CHECK(!ps_reqid_respond(&r, other, 1)); /* off */
    r.request_id = PS_SLICE_LIT("id");
    CHECK(ps_reqid_respond(&r, other, 1));
    CHECK(ps_reqid_respond(&r, NULL, 0));
    CHECK(!ps_reqid_respond(&r, own, 1));
}

int main(void)
{
    test_generated_when_absent();
    test_kept_from_a_trusted_peer();
    test_duplicates_and_invalid_replaced();
    test_room_past_a_full_head();
    test_response_carries_it_unless_the_app_set_one();
    return check_finish("test_reqid");
}
