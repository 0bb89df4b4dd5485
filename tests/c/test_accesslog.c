/* Unit tests of csrc/codec/accesslog.c: compiling gunicorn's atoms and formatting
 * text and JSON lines, without Python. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/accesslog.h"
#include "check.h"
#include "base/common.h"

static const ps_header_t request_headers[] = {
    {PS_SLICE_LIT("Host"), PS_SLICE_LIT("example.test")},
    {PS_SLICE_LIT("User-Agent"), PS_SLICE_LIT("ua \"q\" \\ \xff\t")},
    {PS_SLICE_LIT("Referer"), PS_SLICE_LIT("http://r/")},
    /* bob:secret */
    {PS_SLICE_LIT("Authorization"), PS_SLICE_LIT("Basic Ym9iOnNlY3JldA==")},
    {PS_SLICE_LIT("X-Odd"), PS_SLICE_LIT("a\x01"
                                         "b\x7f"
                                         "c\xc3\xa9")},
};

static const ps_header_t response_headers[] = {
    {PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain")},
};

static ps_alog_entry_t entry(void)
{
    return (ps_alog_entry_t){
        .method = PS_SLICE_LIT("GET"),
        .target = PS_SLICE_LIT("/a%20b/c?x=1&y=%41"),
        .version = PS_SLICE_LIT("1.1"),
        .headers = request_headers,
        .nheaders = PS_ARRAY_LEN(request_headers),
        .resp_headers = response_headers,
        .nresp_headers = PS_ARRAY_LEN(response_headers),
        .host = PS_SLICE_LIT("127.0.0.1"),
        .port = 5000,
        .status = 200,
        .body_bytes = 13,
        .duration_ns = 2123456789,
        .now = 1000000000.0, /* 2001-09-09 01:46:40 UTC */
        .pid = 42,
    };
}

/* Formats e with fmt and compares with the expected line. */
static void check_line(const char *fmt, const ps_alog_entry_t *e, const char *expected)
{
    char err[PS_ALOG_ERROR_MAX];
    ps_alog_t *p = NULL;
    ps_buf_t out = {0};
    if (!CHECK_EQ(ps_alog_compile(fmt, strlen(fmt), &p, err), 0)) {
        fprintf(stderr, "    %s: %s\n", fmt, err);
        return;
    }
    CHECK_EQ(ps_alog_format(p, e, &out), 0);
    check_mem_eq_at(out.data, out.len, expected, strlen(expected), __FILE__, __LINE__, fmt);
    /* A second run reuses the buffer and gives the same line. */
    CHECK_EQ(ps_alog_format(p, e, &out), 0);
    check_mem_eq_at(out.data, out.len, expected, strlen(expected), __FILE__, __LINE__, fmt);
    ps_buf_free(&out);
    ps_alog_free(p);
}

static void test_every_atom(void)
{
    ps_alog_entry_t e = entry();
    check_line("%(h)s|%(l)s|%(u)s|%(t)s|%(r)s|%(m)s|%(U)s|%(q)s|%(H)s|%(s)s|%(B)s|%(b)s", &e,
               "127.0.0.1|-|bob|[09/Sep/2001:01:46:40 +0000]|GET /a%20b/c?x=1&y=%41 HTTP/1.1|GET|"
               "/a b/c|x=1&y=%41|HTTP/1.1|200|13|13");
    check_line("%(f)s|%(a)s|%(T)s|%(D)s|%(M)s|%(L)s|%(p)s|%(client)s", &e,
               "http://r/|ua \\x22q\\x22 \\x5c \\xff\\x09|2|2123456|2123|2.123456|<42>|"
               "127.0.0.1:5000");
    check_line("%({x-odd}i)s|%({X-ODD}i)s|%({content-type}o)s|%({missing}i)s|%({missing}o)s", &e,
               "a\\x01b\\x7fc\\xc3\\xa9|a\\x01b\\x7fc\\xc3\\xa9|text/plain|-|-");
    check_line("%({remote_addr}e)s %({remote_port}e)s %({request_method}e)s %({path_info}e)s "
               "%({query_string}e)s %({raw_uri}e)s %({server_protocol}e)s %({http_user_agent}e)s",
               &e,
               "127.0.0.1 5000 GET /a b/c x=1&y=%41 /a%20b/c?x=1&y=%41 HTTP/1.1 "
               "ua \\x22q\\x22 \\x5c \\xff\\x09");
    check_line("100%% %(s)s%%", &e, "100% 200%");
    check_line("no atoms at all", &e, "no atoms at all");
    check_line("", &e, "");
}

static void test_missing_values(void)
{
    ps_alog_entry_t e = entry();
    /* A request refused before its line was read, over a unix socket. */
    e.method = e.target = e.version = (ps_slice_t){NULL, 0};
    e.headers = NULL;
    e.nheaders = 0;
    e.resp_headers = NULL;
    e.host = (ps_slice_t){NULL, 0};
    e.port = -1;
    e.body_bytes = 0;
    e.duration_ns = 999;
    check_line("%(h)s %(client)s %(u)s \"%(r)s\" %(m)s %(U)s %(q)s %(H)s %(B)s %(b)s %(a)s "
               "%({content-type}o)s %({remote_port}e)s %(L)s %(D)s",
               &e, "- - - \"-\" - - - - 0 - - - - 0.000000 0");
}

static void test_numbers(void)
{
    ps_alog_entry_t e = entry();
    e.body_bytes = UINT64_MAX;
    e.duration_ns = 1000050999; /* 1 s 50 us: the microseconds are zero-padded */
    e.status = 999;
    e.port = 65535;
    check_line("%(B)s %(L)s %(D)s %(M)s %(T)s %(s)s %(client)s", &e,
               "18446744073709551615 1.000050 1000050 1000 1 999 127.0.0.1:65535");
    e.body_bytes = 10;
    e.duration_ns = 0;
    check_line("%(b)s %(L)s %(D)s", &e, "10 0.000000 0");
}

static void test_clients(void)
{
    ps_alog_entry_t e = entry();
    e.host = PS_SLICE_LIT("::1");
    e.port = 8000;
    check_line("%(h)s %(client)s", &e, "::1 [::1]:8000");
    e.host = PS_SLICE_LIT("203.0.113.7"); /* forwarded: port 0 */
    e.port = 0;
    check_line("%(client)s", &e, "203.0.113.7:0");
}

static void test_basic_auth(void)
{
    static const struct {
        const char *value, *user;
    } cases[] = {
        {"Basic Ym9iOnNlY3JldA==", "bob"},
        {"basic   Ym9iOnNlY3JldA", "bob"}, /* case, spaces, no padding */
        {"Basic OnNlY3JldA==", ""},        /* ":secret": an empty user */
        {"Basic Ym9i", "-"},               /* "bob": no colon */
        {"Basic !!!!", "-"},               /* not base64 */
        {"Bearer Ym9iOnNlY3JldA==", "-"},
        {"Basic", "-"},
        {"Basic w6k6eA==", "\\xc3\\xa9"}, /* "\xc3\xa9:x" */
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        ps_header_t h = {PS_SLICE_LIT("authorization"), {cases[i].value, strlen(cases[i].value)}};
        ps_alog_entry_t e = entry();
        e.headers = &h;
        e.nheaders = 1;
        check_line("%(u)s", &e, cases[i].user);
    }
}

static void test_absolute_form_path(void)
{
    ps_alog_entry_t e = entry();
    e.target = PS_SLICE_LIT("http://example.test:8080/p%2Fq?z");
    check_line("%(U)s %(q)s", &e, "/p/q z");
    e.target = PS_SLICE_LIT("http://example.test");
    check_line("[%(U)s] [%(q)s]", &e, "[] []");
    e.target = PS_SLICE_LIT("*");
    check_line("%(U)s", &e, "*");
    e.target = PS_SLICE_LIT("/bad%zz%4");
    check_line("%(U)s", &e, "/bad%zz%4");
}

static void test_json(void)
{
    ps_alog_entry_t e = entry();
    check_line("json", &e,
               "{\"time\": \"2001-09-09T01:46:40+00:00\", \"client\": \"127.0.0.1:5000\", "
               "\"remote_addr\": \"127.0.0.1\", \"remote_port\": 5000, \"user\": \"bob\", "
               "\"request\": \"GET /a%20b/c?x=1&y=%41 HTTP/1.1\", \"method\": \"GET\", "
               "\"path\": \"/a b/c\", \"query\": \"x=1&y=%41\", \"protocol\": \"HTTP/1.1\", "
               "\"status\": 200, \"bytes\": 13, \"duration\": 2.123456, "
               "\"referer\": \"http://r/\", "
               "\"user_agent\": \"ua \\\"q\\\" \\\\ \\u00ff\\u0009\", \"pid\": 42}");
    e.method = e.target = e.version = (ps_slice_t){NULL, 0};
    e.headers = NULL;
    e.host = (ps_slice_t){NULL, 0};
    e.port = -1;
    check_line("json", &e,
               "{\"time\": \"2001-09-09T01:46:40+00:00\", \"client\": null, "
               "\"remote_addr\": null, \"remote_port\": null, \"user\": null, "
               "\"request\": null, \"method\": null, \"path\": null, \"query\": null, "
               "\"protocol\": null, \"status\": 200, \"bytes\": 13, \"duration\": 2.123456, "
               "\"referer\": null, \"user_agent\": null, \"pid\": 42}");

    char err[PS_ALOG_ERROR_MAX];
    ps_alog_t *p = NULL;
    CHECK_EQ(ps_alog_compile("json", 4, &p, err), 0);
    CHECK(ps_alog_is_json(p));
    CHECK_EQ(ps_alog_nfields(p), 19);
    CHECK(strcmp(ps_alog_field_name(p, 0), "time") == 0);
    ps_alog_value_t v;
    e = entry();
    CHECK_EQ(ps_alog_field(p, &e, 3, &v), 0);
    CHECK(v.kind == PS_ALOG_INT && v.num == 5000 && strcmp(v.name, "remote_port") == 0);
    CHECK_EQ(ps_alog_field(p, &e, 12, &v), 0);
    CHECK(v.kind == PS_ALOG_SECONDS && v.num == 2123456789);
    CHECK_EQ(ps_alog_field(p, &e, 14, &v), 0);
    CHECK(v.kind == PS_ALOG_STR);
    CHECK_SLICE_EQ(v.str, "ua \"q\" \\ \xff\t");
    ps_alog_free(p);
}

/* --request-id: the ID and a valid traceparent's ids, in text atoms and as
 * JSON fields that are left out (not null) when they have no value. */
static void test_request_id_and_trace(void)
{
    static const ps_header_t traced[] = {
        {PS_SLICE_LIT("Traceparent"),
         PS_SLICE_LIT("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
    };
    static const ps_header_t bad_trace[] = {
        {PS_SLICE_LIT("traceparent"),
         PS_SLICE_LIT("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")},
    };
    ps_alog_entry_t e = entry();
    check_line("%(rid)s %(trace_id)s %(parent_id)s", &e, "- - -");
    e.headers = traced;
    e.nheaders = 1;
    check_line("%(trace_id)s", &e, "-"); /* read only with --request-id */
    e.request_id = PS_SLICE_LIT("abc-123");
    check_line("%(rid)s %(trace_id)s %(parent_id)s", &e,
               "abc-123 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7");
    e.method = e.target = e.version = (ps_slice_t){NULL, 0};
    e.host = (ps_slice_t){NULL, 0};
    e.port = -1;
    check_line("json", &e,
               "{\"time\": \"2001-09-09T01:46:40+00:00\", \"client\": null, "
               "\"remote_addr\": null, \"remote_port\": null, \"user\": null, "
               "\"request\": null, \"method\": null, \"path\": null, \"query\": null, "
               "\"protocol\": null, \"status\": 200, \"bytes\": 13, \"duration\": 2.123456, "
               "\"referer\": null, \"user_agent\": null, \"pid\": 42, "
               "\"request_id\": \"abc-123\", \"trace_id\": \"4bf92f3577b34da6a3ce929d0e0e4736\", "
               "\"parent_id\": \"00f067aa0ba902b7\"}");
    e.headers = bad_trace;
    check_line("%(rid)s %(trace_id)s %(parent_id)s", &e, "abc-123 - -");
    char err[PS_ALOG_ERROR_MAX];
    ps_alog_t *p = NULL;
    CHECK_EQ(ps_alog_compile("json", 4, &p, err), 0);
    ps_alog_value_t v;
    CHECK_EQ(ps_alog_field(p, &e, 16, &v), 0);
    CHECK(v.kind == PS_ALOG_STR && strcmp(v.name, "request_id") == 0);
    CHECK_EQ(ps_alog_field(p, &e, 17, &v), 0);
    CHECK(v.kind == PS_ALOG_ABSENT && strcmp(v.name, "trace_id") == 0);
    ps_buf_t out = {0};
    CHECK_EQ(ps_alog_format(p, &e, &out), 0);
    CHECK_EQ(ps_buf_append(&out, "", 1), 0);
    CHECK(strstr(out.data, "trace_id") == NULL && strstr(out.data, "request_id") != NULL);
    ps_buf_free(&out);
    ps_alog_free(p);
}

static void test_errors(void)
{
    static const struct {
        const char *fmt, *message;
    } cases[] = {
        {"%(zz)s", "unknown atom %(zz)s"},
        {"%(x)s", "unknown atom %(x)s"},
        {"%(h)d", "%(h) must be followed by 's'"},
        {"%(h)", "%(h) must be followed by 's'"},
        {"50%", "a '%' at offset 2"},
        {"%s", "a '%' at offset 0"},
        {"%(h", "a '%' at offset 0"},
        {"%({a}x)s", "unknown atom %({a}x)s"},
        {"%({}i)s", "unknown atom %({}i)s"},
        {"%({secret_key}e)s", "%({secret_key}e)s: not a request variable"},
        {"JSON", "a"}, /* "json" only in lower case; "JSON" is a literal line */
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        char err[PS_ALOG_ERROR_MAX];
        ps_alog_t *p = NULL;
        int rc = ps_alog_compile(cases[i].fmt, strlen(cases[i].fmt), &p, err);
        if (strcmp(cases[i].fmt, "JSON") == 0) {
            CHECK_EQ(rc, 0);
            CHECK(p != NULL && !ps_alog_is_json(p));
            ps_alog_free(p);
            continue;
        }
        CHECK_EQ(rc, -EINVAL);
        CHECK(p == NULL);
        if (!CHECK(strstr(err, cases[i].message) != NULL))
            fprintf(stderr, "    %s: %s\n", cases[i].fmt, err);
    }
    ps_alog_t *p = NULL;
    char err[PS_ALOG_ERROR_MAX];
    CHECK_EQ(ps_alog_compile("%({content-type}o)s", 19, &p, err), 0);
    CHECK(ps_alog_wants_response_headers(p));
    ps_alog_free(p);
    CHECK_EQ(ps_alog_compile("%({content-type}i)s", 19, &p, err), 0);
    CHECK(!ps_alog_wants_response_headers(p));
    ps_alog_free(p);
}

static void test_clock(void)
{
    uint64_t a = ps_alog_clock(), b = ps_alog_clock();
    CHECK(a > 0 && b >= a);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    test_every_atom();
    test_missing_values();
    test_numbers();
    test_clients();
    test_basic_auth();
    test_absolute_form_path();
    test_json();
    test_request_id_and_trace();
    test_errors();
    test_clock();
    return check_finish("test_accesslog");
}
