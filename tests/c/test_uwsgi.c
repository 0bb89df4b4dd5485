/* Unit tests of csrc/codec/uwsgi.c: uwsgi packets as nginx's uwsgi_params send
 * them, fed whole, split at every byte and a byte at a time; the request
 * they make; the limits; every malformed packet. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "codec/uwsgi.h"

static const ps_uwsgi_limits_t limits = {
    .max_packet = 0, .max_vars = 0, .max_var_size = 0, .max_body = 1 << 20};

/* ---- packets ------------------------------------------------------------- */

typedef struct {
    unsigned char data[70000];
    size_t len;
} packet_t;

static void put_u16(unsigned char *p, size_t v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

/* A packet from "KEY", "value" pairs ending in NULL, then body bytes. */
static void build(packet_t *p, int modifier1, const char **vars, const char *body, size_t body_len)
{
    size_t o = 4;
    for (size_t i = 0; vars && vars[i]; i += 2) {
        size_t k = strlen(vars[i]), v = strlen(vars[i + 1]);
        put_u16(p->data + o, k);
        memcpy(p->data + o + 2, vars[i], k);
        o += 2 + k;
        put_u16(p->data + o, v);
        memcpy(p->data + o + 2, vars[i + 1], v);
        o += 2 + v;
    }
    p->data[0] = (unsigned char)modifier1;
    put_u16(p->data + 1, o - 4);
    p->data[3] = 0;
    if (body_len)
        memcpy(p->data + o, body, body_len);
    p->len = o + body_len;
}

/* ---- feeding ------------------------------------------------------------- */

typedef struct {
    ps_uwsgi_parser_t p;
    ps_buf_t body, got;
    int rc;
    size_t used; /* input consumed in all */
} run_t;

/* Feeds the bytes in pieces of `piece` (0: at once) after a first piece of
 * `first` bytes, the way a connection does: unconsumed bytes are fed again,
 * the body is taken at every pause. Ends at an error, at the end of the
 * request, or when the input is used up. */
static void run(run_t *t, const ps_uwsgi_limits_t *lim, const unsigned char *in, size_t len,
                size_t first, size_t piece, size_t body_high)
{
    memset(&t->body, 0, sizeof(t->body));
    memset(&t->got, 0, sizeof(t->got));
    ps_uwsgi_init(&t->p, lim, &t->body, body_high);
    size_t off = 0, avail = first ? PS_MIN(first, len) : piece ? PS_MIN(piece, len) : len;
    t->used = 0;
    for (int guard = 0; guard < 1000000; guard++) {
        size_t used = 0;
        t->rc = ps_uwsgi_feed(&t->p, (const char *)in + off, avail - off, &used);
        off += used;
        if (ps_buf_size(&t->body)) {
            ps_buf_append(&t->got, ps_buf_head(&t->body), ps_buf_size(&t->body));
            ps_buf_reset(&t->body);
        }
        if (t->rc == PS_UWSGI_ERROR || t->p.req.message_complete)
            break;
        if (t->rc == PS_UWSGI_PAUSED)
            continue;
        if (avail == len)
            break;
        avail = piece == 0 ? len : PS_MIN(avail + piece, len);
    }
    t->used = off;
}

static void run_free(run_t *t)
{
    ps_uwsgi_free(&t->p);
    ps_buf_free(&t->body);
    ps_buf_free(&t->got);
}

static ps_slice_t header(const ps_request_t *r, const char *name)
{
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (ps_slice_ieq(r->headers[i].name, name, strlen(name)))
            return r->headers[i].value;
    return (ps_slice_t){NULL, 0};
}

static int count_headers(const ps_request_t *r, const char *name)
{
    int n = 0;
    for (uint32_t i = 0; i < r->nheaders; i++)
        n += ps_slice_ieq(r->headers[i].name, name, strlen(name));
    return n;
}

/* Everything a request says, as text, to compare runs. */
static void describe(const run_t *t, char *out, size_t cap)
{
    const ps_request_t *r = &t->p.req;
    int n = snprintf(out, cap, "rc=%d status=%d ", t->rc, t->p.error_status);
    if (t->rc != PS_UWSGI_ERROR && r->head_complete) {
        n += snprintf(out + n, cap - (size_t)n, "%.*s %.*s 1.%d cl=%lld done=%d [",
                      (int)r->method.len, r->method.base, (int)r->target.len, r->target.base,
                      r->http_minor, (long long)r->content_length, r->message_complete);
        for (uint32_t i = 0; i < r->nheaders && (size_t)n < cap; i++)
            n += snprintf(out + n, cap - (size_t)n, "%.*s=%.*s;", (int)r->headers[i].name.len,
                          r->headers[i].name.base, (int)r->headers[i].value.len,
                          r->headers[i].value.base);
        if ((size_t)n < cap)
            n += snprintf(out + n, cap - (size_t)n, "] body=%.*s", (int)ps_buf_size(&t->got),
                          t->got.data ? ps_buf_head(&t->got) : "");
    }
}

/* Feeds pkt whole, at every two-piece split, and a byte at a time, with a
 * small body high-water mark too; every way must say the same. Leaves the
 * whole-feed run in *t (the caller frees it). */
static void run_all_ways(run_t *t, const ps_uwsgi_limits_t *lim, const packet_t *pkt)
{
    static char a[8192], b[8192];
    run(t, lim, pkt->data, pkt->len, 0, 0, 1 << 20);
    describe(t, a, sizeof(a));
    for (size_t split = 1; split < pkt->len; split++) {
        run_t s;
        run(&s, lim, pkt->data, pkt->len, split, 0, 1 << 20);
        describe(&s, b, sizeof(b));
        if (!CHECK(strcmp(a, b) == 0))
            fprintf(stderr, "    split at %zu:\n    %s\n    %s\n", split, a, b);
        run_free(&s);
    }
    for (size_t high = 1; high <= 3; high++) {
        run_t s;
        run(&s, lim, pkt->data, pkt->len, 0, 1, high);
        describe(&s, b, sizeof(b));
        if (!CHECK(strcmp(a, b) == 0))
            fprintf(stderr, "    byte by byte (high %zu):\n    %s\n    %s\n", high, a, b);
        run_free(&s);
    }
}

/* ---- nginx's request ----------------------------------------------------- */

/* What `include uwsgi_params;` sends for a POST through HTTPS, with the
 * client's header fields after it. */
/* clang-format off */
static const char *nginx_vars[] = {
    "QUERY_STRING", "a=1&b=%20",
    "REQUEST_METHOD", "POST",
    "CONTENT_TYPE", "application/x-www-form-urlencoded",
    "CONTENT_LENGTH", "11",
    "REQUEST_URI", "/app/p%C3%A4th?a=1&b=%20",
    "PATH_INFO", "/app/p\xc3\xa4th",
    "DOCUMENT_ROOT", "/usr/share/nginx/html",
    "SERVER_PROTOCOL", "HTTP/1.1",
    "REQUEST_SCHEME", "https",
    "HTTPS", "on",
    "REMOTE_ADDR", "203.0.113.9",
    "REMOTE_PORT", "51234",
    "SERVER_PORT", "443",
    "SERVER_NAME", "example.com",
    "HTTP_HOST", "example.com",
    "HTTP_USER_AGENT", "curl/8.0",
    "HTTP_ACCEPT", "*/*",
    "HTTP_X_FORWARDED_FOR", "198.51.100.1",
    "HTTP_COOKIE", "a=1",
    "HTTP_COOKIE", "b=2",
    "HTTP_CONTENT_TYPE", "application/x-www-form-urlencoded",
    "HTTP_CONTENT_LENGTH", "11",
    "HTTP_TRANSFER_ENCODING", "chunked",
    "HTTP_EXPECT", "100-continue",
    "HTTP_Transfer-Encoding", "chunked",
    NULL,
};
/* clang-format on */

static void test_nginx_request(void)
{
    packet_t pkt;
    run_t t;
    build(&pkt, 0, nginx_vars, "hello=world", 11);
    run_all_ways(&t, &limits, &pkt);
    const ps_request_t *r = &t.p.req;
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_EQ(t.used, pkt.len);
    CHECK(r->head_complete && r->message_complete);
    CHECK_SLICE_EQ(r->method, "POST");
    CHECK_EQ(r->method_id, HTTP_POST);
    CHECK(!r->is_head && !r->keep_alive && !r->chunked && !r->expect_continue && !r->upgrade);
    CHECK_SLICE_EQ(r->target, "/app/p%C3%A4th?a=1&b=%20");
    CHECK_EQ(r->http_minor, 1);
    CHECK_EQ(t.p.http_major, 1);
    CHECK_EQ(r->content_length, 11);
    CHECK_EQ(r->body_received, 11);
    CHECK_MEM_EQ(ps_buf_head(&t.got), ps_buf_size(&t.got), "hello=world");
    /* Header fields from HTTP_*, named as HTTP/1 would name them. */
    CHECK_SLICE_EQ(header(r, "host"), "example.com");
    CHECK_SLICE_EQ(header(r, "user-agent"), "curl/8.0");
    CHECK_SLICE_EQ(header(r, "accept"), "*/*");
    CHECK_SLICE_EQ(header(r, "x-forwarded-for"), "198.51.100.1");
    CHECK_EQ(count_headers(r, "cookie"), 2);
    CHECK_SLICE_EQ(header(r, "content-type"), "application/x-www-form-urlencoded");
    CHECK_SLICE_EQ(header(r, "content-length"), "11");
    CHECK_EQ(count_headers(r, "content-type"), 1);   /* CONTENT_TYPE, not HTTP_CONTENT_TYPE */
    CHECK_EQ(count_headers(r, "content-length"), 1); /* CONTENT_LENGTH frames the body */
    CHECK_EQ(count_headers(r, "transfer-encoding"), 0);
    CHECK_EQ(count_headers(r, "expect"), 0);
    CHECK_EQ(r->nheaders, 8);
    for (uint32_t i = 0; i < r->nheaders; i++) {
        CHECK(ps_http_valid_field(r->headers[i].name, r->headers[i].value));
        for (size_t k = 0; k < r->headers[i].name.len; k++)
            CHECK(!(r->headers[i].name.base[k] >= 'A' && r->headers[i].name.base[k] <= 'Z'));
    }
    CHECK_SLICE_EQ(header(r, "user-agent"), "curl/8.0");
    /* The CGI variables the bridge takes. */
    const ps_uwsgi_cgi_t *c = &t.p.cgi;
    CHECK_SLICE_EQ(c->remote_addr, "203.0.113.9");
    CHECK_SLICE_EQ(c->remote_port, "51234");
    CHECK_SLICE_EQ(c->server_name, "example.com");
    CHECK_SLICE_EQ(c->server_port, "443");
    CHECK_SLICE_EQ(c->https, "on");
    CHECK_SLICE_EQ(c->request_scheme, "https");
    CHECK_SLICE_EQ(c->path_info, "/app/p\xc3\xa4th");
    CHECK_SLICE_EQ(c->query_string, "a=1&b=%20");
    CHECK_SLICE_EQ(c->server_protocol, "HTTP/1.1");
    CHECK_SLICE_EQ(c->request_uri, "/app/p%C3%A4th?a=1&b=%20");
    CHECK(c->script_name.base == NULL);
    /* Every variable stays readable, keys as sent. */
    CHECK_EQ(t.p.nvars, 25);
    CHECK_SLICE_EQ(ps_uwsgi_var(&t.p, "DOCUMENT_ROOT", 13), "/usr/share/nginx/html");
    CHECK_SLICE_EQ(ps_uwsgi_var(&t.p, "HTTP_USER_AGENT", 15), "curl/8.0");
    CHECK_SLICE_EQ(ps_uwsgi_var(&t.p, "HTTP_COOKIE", 11), "a=1");
    CHECK(ps_uwsgi_var(&t.p, "NOPE", 4).base == NULL);
    CHECK(ps_uwsgi_var(&t.p, "http_host", 9).base == NULL); /* case-sensitive */
    /* The request is all there is: what follows is not read. */
    size_t used = 99;
    CHECK_EQ(ps_uwsgi_feed(&t.p, "GET / HTTP/1.1\r\n", 16, &used), PS_UWSGI_PAUSED);
    CHECK_EQ(used, 0);
    run_free(&t);

    /* Bytes after the body are left unconsumed. */
    packet_t more;
    build(&more, 0, nginx_vars, "hello=worldEXTRA", 16);
    run(&t, &limits, more.data, more.len, 0, 0, 1 << 20);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_EQ(t.used, more.len - 5);
    CHECK_MEM_EQ(ps_buf_head(&t.got), ps_buf_size(&t.got), "hello=world");
    run_free(&t);
}

static void test_get_variants(void)
{
    packet_t pkt;
    run_t t;
    /* A GET without a body or CONTENT_LENGTH, HTTP/1.0. */
    const char *get[] = {"REQUEST_METHOD", "GET",       "REQUEST_URI", "/", "SERVER_PROTOCOL",
                         "HTTP/1.0",       "HTTP_HOST", "h",           NULL};
    build(&pkt, 0, get, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK(t.p.req.message_complete);
    CHECK_EQ(t.p.req.content_length, -1);
    CHECK_EQ(t.p.req.http_minor, 0);
    CHECK_EQ(t.p.req.method_id, HTTP_GET);
    CHECK_EQ(count_headers(&t.p.req, "content-length"), 0);
    run_free(&t);
    /* An empty CONTENT_LENGTH and CONTENT_TYPE (nginx sends both for a GET). */
    const char *empty[] = {"REQUEST_METHOD", "HEAD", "REQUEST_URI", "/x", "CONTENT_LENGTH", "",
                           "CONTENT_TYPE",   "",     NULL};
    build(&pkt, 0, empty, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK(t.p.req.is_head);
    CHECK_EQ(t.p.req.content_length, -1);
    CHECK_EQ(t.p.req.nheaders, 0);
    run_free(&t);
    /* CONTENT_LENGTH 0. */
    const char *zero[] = {"REQUEST_METHOD", "POST", "REQUEST_URI", "/",
                          "CONTENT_LENGTH", "0",    NULL};
    build(&pkt, 0, zero, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_EQ(t.p.req.content_length, 0);
    CHECK_SLICE_EQ(header(&t.p.req, "content-length"), "0");
    run_free(&t);
    /* No REQUEST_URI: PATH_INFO encoded again, then QUERY_STRING. */
    const char *cgi[] = {"REQUEST_METHOD", "GET",     "PATH_INFO", "/a b/%/\xc3\xa4?#",
                         "QUERY_STRING",   "x=1&y=2", NULL};
    build(&pkt, 0, cgi, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_SLICE_EQ(t.p.req.target, "/a%20b/%25/%C3%A4%3F%23?x=1&y=2");
    CHECK_EQ(t.p.req.http_minor, 1); /* no SERVER_PROTOCOL: 1.1 */
    run_free(&t);
    const char *empty_uri[] = {"REQUEST_METHOD", "GET", "REQUEST_URI", "", "PATH_INFO", "",
                               "QUERY_STRING",   "",    NULL};
    build(&pkt, 0, empty_uri, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_SLICE_EQ(t.p.req.target, "/");
    run_free(&t);
    /* HTTP/2 through nginx: the version is kept for the bridge. */
    const char *h2[] = {"REQUEST_METHOD",  "GET",      "REQUEST_URI", "/",
                        "SERVER_PROTOCOL", "HTTP/2.0", NULL};
    build(&pkt, 0, h2, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_EQ(t.p.http_major, 2);
    CHECK_SLICE_EQ(t.p.cgi.server_protocol, "HTTP/2.0");
    run_free(&t);
    /* Any method token is carried as sent. */
    const char *custom[] = {"REQUEST_METHOD", "PURGE-ALL", "REQUEST_URI", "/", NULL};
    build(&pkt, 0, custom, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_SLICE_EQ(t.p.req.method, "PURGE-ALL");
    CHECK_EQ(t.p.req.method_id, PS_METHOD_OTHER);
    run_free(&t);
    /* Raw bytes above 0x7f pass, as they do over HTTP/1. */
    const char *raw[] = {"REQUEST_METHOD", "GET", "REQUEST_URI", "/\xc3\xa4?q=\xff", NULL};
    build(&pkt, 0, raw, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_SLICE_EQ(t.p.req.target, "/\xc3\xa4?q=\xff");
    run_free(&t);
    const char *star[] = {"REQUEST_METHOD", "OPTIONS", "REQUEST_URI", "*", NULL};
    build(&pkt, 0, star, NULL, 0);
    run_all_ways(&t, &limits, &pkt);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK_SLICE_EQ(t.p.req.target, "*");
    run_free(&t);
    /* A body bigger than the high-water mark pauses and resumes. */
    static char big[50000];
    memset(big, 'z', sizeof(big));
    char len[16];
    snprintf(len, sizeof(len), "%zu", sizeof(big));
    const char *post[] = {"REQUEST_METHOD", "PUT", "REQUEST_URI", "/up",
                          "CONTENT_LENGTH", len,   NULL};
    build(&pkt, 0, post, big, sizeof(big));
    run(&t, &limits, pkt.data, pkt.len, 0, 4096, 1000);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    CHECK(t.p.req.message_complete);
    CHECK_EQ(ps_buf_size(&t.got), sizeof(big));
    CHECK_EQ(t.p.req.body_received, sizeof(big));
    run_free(&t);
    /* Body not all there yet: MORE, not complete. */
    run(&t, &limits, pkt.data, pkt.len - 1, 0, 0, 1 << 20);
    CHECK_EQ(t.rc, PS_UWSGI_MORE);
    CHECK(t.p.req.head_complete && !t.p.req.message_complete);
    CHECK_EQ(t.p.req.body_received, sizeof(big) - 1);
    run_free(&t);
    /* A packet that is not all there yet: MORE, no head. */
    build(&pkt, 0, get, NULL, 0);
    for (size_t n = 0; n < pkt.len; n++) {
        run(&t, &limits, pkt.data, n, 0, 0, 1 << 20);
        CHECK_EQ(t.rc, PS_UWSGI_MORE);
        CHECK(!t.p.req.head_complete);
        CHECK_EQ(t.used, n);
        run_free(&t);
    }
    /* discard_body: the body is counted, not kept. */
    build(&pkt, 0, nginx_vars, "hello=world", 11);
    memset(&t, 0, sizeof(t));
    ps_uwsgi_init(&t.p, &limits, &t.body, 1 << 20);
    t.p.discard_body = 1;
    size_t used;
    CHECK_EQ(ps_uwsgi_feed(&t.p, (const char *)pkt.data, pkt.len, &used), PS_UWSGI_PAUSED);
    CHECK_EQ(ps_buf_size(&t.body), 0);
    CHECK_EQ(t.p.req.body_received, 11);
    run_free(&t);
}

/* ---- bad packets --------------------------------------------------------- */

static void expect_error(const ps_uwsgi_limits_t *lim, const packet_t *pkt, int status,
                         const char *reason, int line)
{
    run_t t;
    run_all_ways(&t, lim, pkt);
    int ok = t.rc == PS_UWSGI_ERROR && t.p.error_status == status && t.p.error_reason &&
             strcmp(t.p.error_reason, reason) == 0;
    if (!CHECK(ok))
        fprintf(stderr, "    line %d: rc %d status %d reason %s (want %d %s)\n", line, t.rc,
                t.p.error_status, t.p.error_reason ? t.p.error_reason : "-", status, reason);
    /* An error is final. */
    size_t used = 0;
    CHECK_EQ(ps_uwsgi_feed(&t.p, "x", 1, &used), PS_UWSGI_ERROR);
    CHECK_EQ(t.p.error_status, status);
    run_free(&t);
}

#define EXPECT_ERROR(lim, pkt, status, reason)                                                     \
    expect_error((lim), (pkt), (status), (reason), __LINE__)

static void test_bad_packets(void)
{
    packet_t pkt;
    const char *get[] = {"REQUEST_METHOD", "GET", "REQUEST_URI", "/", NULL};
    build(&pkt, 5, get, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "unsupported uwsgi modifier1");
    build(&pkt, 0, NULL, NULL, 0); /* an empty packet */
    EXPECT_ERROR(&limits, &pkt, 400, "no REQUEST_METHOD");
    const char *nomethod[] = {"REQUEST_URI", "/", NULL};
    build(&pkt, 0, nomethod, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "no REQUEST_METHOD");
    static const char *const bad_methods[] = {"", "G T", "GET\r\n", "G(ET", "\xc3\xa4"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_methods); i++) {
        const char *v[] = {"REQUEST_METHOD", bad_methods[i], "REQUEST_URI", "/", NULL};
        build(&pkt, 0, v, NULL, 0);
        EXPECT_ERROR(&limits, &pkt, 400, "invalid method");
    }
    const char *connect[] = {"REQUEST_METHOD", "CONNECT", "REQUEST_URI", "/", NULL};
    build(&pkt, 0, connect, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 501, "CONNECT is not served");
    static const char *const bad_uris[] = {"x", "/a b", "/a\r\nb", "/\x7f", "/a\tb", "http://h/"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_uris); i++) {
        const char *v[] = {"REQUEST_METHOD", "GET", "REQUEST_URI", bad_uris[i], NULL};
        build(&pkt, 0, v, NULL, 0);
        EXPECT_ERROR(&limits, &pkt, 400, "invalid REQUEST_URI");
    }
    const char *star_get[] = {"REQUEST_METHOD", "GET", "REQUEST_URI", "*", NULL};
    build(&pkt, 0, star_get, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "invalid REQUEST_URI");
    static const char *const bad_lengths[] = {"-1", "1x", " 1", "0x10", "1234567890123456789"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_lengths); i++) {
        const char *v[] = {"REQUEST_METHOD", "POST", "CONTENT_LENGTH", bad_lengths[i], NULL};
        build(&pkt, 0, v, NULL, 0);
        EXPECT_ERROR(&limits, &pkt, 400, "invalid CONTENT_LENGTH");
    }
    const char *big_body[] = {"REQUEST_METHOD", "POST", "CONTENT_LENGTH", "1048577", NULL};
    build(&pkt, 0, big_body, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 413, "body too large");
    static const char *const bad_protocols[] = {"HTTP/1.2", "http/1.1", "SPDY/3", "HTTP/1.1 "};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_protocols); i++) {
        const char *v[] = {"REQUEST_METHOD", "GET", "SERVER_PROTOCOL", bad_protocols[i], NULL};
        build(&pkt, 0, v, NULL, 0);
        EXPECT_ERROR(&limits, &pkt, 400, "invalid SERVER_PROTOCOL");
    }
    const char *bad_value[] = {"REQUEST_METHOD", "GET", "HTTP_X_EVIL", "a\r\nInjected: 1", NULL};
    build(&pkt, 0, bad_value, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "invalid header value");
    static const char *const bad_names[] = {"HTTP_A B", "HTTP_A:B", "HTTP_\xc3\xa4", "HTTP_A\r\n"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_names); i++) {
        const char *v[] = {"REQUEST_METHOD", "GET", bad_names[i], "x", NULL};
        build(&pkt, 0, v, NULL, 0);
        EXPECT_ERROR(&limits, &pkt, 400, "invalid header name");
    }
    const char *nul_value[] = {"REQUEST_METHOD", "GET", "HTTP_X", "a", NULL};
    build(&pkt, 0, nul_value, NULL, 0);
    pkt.data[pkt.len - 1] = '\0'; /* the value "a" becomes NUL */
    EXPECT_ERROR(&limits, &pkt, 400, "invalid header value");
    const char *bad_ctype[] = {"REQUEST_METHOD", "GET", "CONTENT_TYPE", "text/plain\n", NULL};
    build(&pkt, 0, bad_ctype, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "invalid CONTENT_TYPE");
    /* An empty key. */
    const char *empty_key[] = {"REQUEST_METHOD", "GET", "", "x", NULL};
    build(&pkt, 0, empty_key, NULL, 0);
    EXPECT_ERROR(&limits, &pkt, 400, "empty uwsgi variable name");

    /* Structure: truncated lengths and lengths past the packet. */
    build(&pkt, 0, get, NULL, 0);
    packet_t cut = pkt;
    put_u16(cut.data + 1, pkt.len - 4 + 1); /* one stray byte at the end: half a length */
    cut.data[cut.len++] = 0x05;
    EXPECT_ERROR(&limits, &cut, 400, "truncated uwsgi variable");
    cut = pkt;
    put_u16(cut.data + 1, pkt.len - 4 + 2); /* a key length with no key */
    cut.data[cut.len++] = 0x05;
    cut.data[cut.len++] = 0x00;
    EXPECT_ERROR(&limits, &cut, 400, "uwsgi variable past the packet");
    cut = pkt;
    put_u16(cut.data + 4, 200); /* the first key runs past the packet */
    EXPECT_ERROR(&limits, &cut, 400, "uwsgi variable past the packet");
    cut = pkt;
    put_u16(cut.data + 4 + 2 + 14, 300); /* the first value runs past the packet */
    EXPECT_ERROR(&limits, &cut, 400, "uwsgi variable past the packet");
    cut = pkt;
    put_u16(cut.data + 1, pkt.len - 4 - 1); /* the packet ends inside the last value */
    EXPECT_ERROR(&limits, &cut, 400, "uwsgi variable past the packet");

    /* Limits. */
    ps_uwsgi_limits_t small = limits;
    small.max_packet = 30;
    build(&pkt, 0, get, NULL, 0); /* 4 + 2+14+2+3 + 2+11+2+1 = 41 */
    EXPECT_ERROR(&small, &pkt, 431, "uwsgi packet too large");
    small.max_packet = (uint32_t)(pkt.len - 4);
    run_t t;
    run(&t, &small, pkt.data, pkt.len, 0, 0, 1 << 20);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED); /* exactly at the limit */
    run_free(&t);
    small = limits;
    small.max_vars = 1;
    EXPECT_ERROR(&small, &pkt, 431, "too many uwsgi variables");
    small.max_vars = 2;
    run(&t, &small, pkt.data, pkt.len, 0, 0, 1 << 20);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    run_free(&t);
    small = limits;
    small.max_var_size = 16; /* REQUEST_METHOD + GET is 17 */
    EXPECT_ERROR(&small, &pkt, 431, "uwsgi variable too large");
    small.max_var_size = 17;
    run(&t, &small, pkt.data, pkt.len, 0, 0, 1 << 20);
    CHECK_EQ(t.rc, PS_UWSGI_PAUSED);
    run_free(&t);
    small = limits;
    small.max_packet = 70000; /* above the format's own limit: 65535 */
    static char huge[65535];
    memset(huge, 'v', sizeof(huge));
    huge[65535 - 2 - 6 - 2] = '\0'; /* one variable of 65535 bytes in all */
    const char *full[] = {"HTTP_X", huge, NULL};
    build(&pkt, 0, full, NULL, 0);
    CHECK_EQ(pkt.len, 4 + 65535);
    run(&t, &small, pkt.data, pkt.len, 0, 0, 1 << 20);
    CHECK_EQ(t.p.error_status, 400); /* parsed, then no REQUEST_METHOD: the size was fine */
    run_free(&t);
}

int main(void)
{
    test_nginx_request();
    test_get_variants();
    test_bad_packets();
    return check_finish("test_uwsgi");
}
