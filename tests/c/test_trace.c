/* Unit tests of csrc/codec/trace.c: request IDs kept or refused, generated IDs,
 * and the traceparent parser against W3C Trace Context's rules. */
#include <string.h>

#include "check.h"
#include "codec/trace.h"

static ps_slice_t s(const char *text)
{
    return (ps_slice_t){text, strlen(text)};
}

static const char *const GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void test_request_ids_kept(void)
{
    CHECK(ps_request_id_valid(s("a")));
    CHECK(ps_request_id_valid(s("5c7e3d1a-0b7f-4c41-9d8e-2a1f3b4c5d6e")));
    CHECK(ps_request_id_valid(s("req:42/x=y+z@host~!")));
    char longest[PS_REQUEST_ID_MAX + 1];
    memset(longest, 'x', sizeof(longest));
    CHECK(ps_request_id_valid((ps_slice_t){longest, PS_REQUEST_ID_MAX}));
    CHECK(!ps_request_id_valid((ps_slice_t){longest, PS_REQUEST_ID_MAX + 1}));
}

static void test_request_ids_refused(void)
{
    CHECK(!ps_request_id_valid(s("")));
    CHECK(!ps_request_id_valid(s("a b")));
    CHECK(!ps_request_id_valid(s("a\tb")));
    CHECK(!ps_request_id_valid(s("a\r\nSet-Cookie: x")));
    CHECK(!ps_request_id_valid(s("quote\"d")));
    CHECK(!ps_request_id_valid(s("back\\slash")));
    CHECK(!ps_request_id_valid(s("caf\xc3\xa9")));
    CHECK(!ps_request_id_valid((ps_slice_t){"a\0b", 3}));
    CHECK(!ps_request_id_valid(s("\x7f")));
}

static void test_generated_ids_are_hex(void)
{
    uint8_t random[16];
    char out[PS_REQUEST_ID_HEX];
    for (int i = 0; i < 16; i++)
        random[i] = (uint8_t)(i * 17);
    ps_request_id_format(random, out);
    CHECK(memcmp(out, "00112233445566778899aabbccddeeff", PS_REQUEST_ID_HEX) == 0);
    CHECK(ps_request_id_valid((ps_slice_t){out, PS_REQUEST_ID_HEX}));
}

static void test_traceparent_parsed(void)
{
    ps_traceparent_t t;
    CHECK_EQ(ps_traceparent_parse(s(GOOD), &t), 0);
    CHECK(t.trace_id.len == 32 && memcmp(t.trace_id.base, GOOD + 3, 32) == 0);
    CHECK(t.parent_id.len == 16 && memcmp(t.parent_id.base, "00f067aa0ba902b7", 16) == 0);
    CHECK_EQ(t.flags, 1);
    CHECK_EQ(ps_traceparent_parse(s("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), &t),
             0);
    CHECK_EQ(t.flags, 0);
    /* A later version may carry more after a '-'. */
    CHECK_EQ(
        ps_traceparent_parse(s("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what"), &t),
        0);
    CHECK_EQ(t.flags, 9);
    CHECK_EQ(ps_traceparent_parse(s("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), &t),
             0);
}

static void test_traceparent_refused(void)
{
    static const char *const bad[] = {
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_traceparent_t t;
        if (!CHECK_EQ(ps_traceparent_parse(s(bad[i]), &t), -1))
            fprintf(stderr, "  accepted: %s\n", bad[i]);
        CHECK(t.trace_id.base == NULL);
    }
}

int main(void)
{
    test_request_ids_kept();
    test_request_ids_refused();
    test_generated_ids_are_hex();
    test_traceparent_parsed();
    test_traceparent_refused();
    return check_finish("test_trace");
}
