/* libFuzzer driver for csrc/codec/http1.c: the request parser and the checks on
 * response heads. Build and run with `make fuzz` (scripts/fuzz.sh).
 *
 * Byte 0 says how the rest arrives: bits 0-5 the piece size (0: all at
 * once, else 1..63 bytes per read) and bit 6 tight or roomy limits. The
 * bytes are fed the way a connection feeds them (unparsed bytes are fed
 * again with the next piece, the body is taken at every pause, the next
 * request follows ps_http1_next(), a request not kept alive ends it) and:
 *   - every accepted request must keep the parser's promises (token names,
 *     clean values, one Host on HTTP/1.1, body length as framed, limits);
 *     its method is a token, exactly llhttp's name when it has an id and
 *     HEAD-ness is the exact method HEAD; its target is origin-form (not
 *     with CONNECT, which is never accepted), "*" with OPTIONS, or an
 *     http(s) absolute-form whose authority parses, names target_host and
 *     is the one Host field; the request line and head fit their limits;
 *   - every error must be a status with a canned answer, and stay final;
 *   - feeding the same bytes in one piece must give the same requests and
 *     end the same way (an error's status may differ: a limit can be hit
 *     in pieces before a syntax error is seen in a whole feed);
 * Every accepted request is also read the way a trusted proxy's request is
 * (csrc/codec/proxy.c), in uvicorn's mode and in gunicorn's: the client taken from
 * X-Forwarded-For must be a trimmed item of one of its values, and the
 * scheme one of the known ones.
 * Then the input is read as a response head for ps_http_scan_head (first
 * line: the status; next lines: "name: value"), and whatever it accepts,
 * ps_http1_write_head must turn into a head that strict llhttp parses.
 * Then the input is read as a trust list for ps_proxy_init, and last as an
 * authority for ps_http_parse_authority. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec/http1.h"
#include "codec/proxy.h"
#include "fuzz.h"

static const ps_http1_limits_t tight_limits = {.max_request_line = 64,
                                               .max_fields = 8,
                                               .max_field_size = 64,
                                               .max_head = 200,
                                               .max_body = 256};
static const ps_http1_limits_t roomy_limits = {.max_request_line = 8190,
                                               .max_fields = 100,
                                               .max_field_size = 8190,
                                               .max_head = 65536,
                                               .max_body = 1 << 20};

#define BODY_HIGH 16

/* ---- a digest of what a connection sees --------------------------------- */

/* The bytes of a buffer; never NULL + 0 for one that has no storage yet. */
static ps_slice_t buf_bytes(const ps_buf_t *b)
{
    return b->data ? (ps_slice_t){ps_buf_head(b), ps_buf_size(b)} : (ps_slice_t){"", 0};
}

/* ---- what a parsed request promises -------------------------------------- */

static int is_field_byte(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static void check_field(const ps_header_t *f, const ps_http1_limits_t *lim)
{
    INVARIANT(f->name.len > 0);
    INVARIANT(f->name.len + f->value.len <= lim->max_field_size);
    for (size_t i = 0; i < f->name.len; i++)
        INVARIANT(fuzz_is_tchar((unsigned char)f->name.base[i]));
    for (size_t i = 0; i < f->value.len; i++)
        INVARIANT(is_field_byte((unsigned char)f->value.base[i]));
    if (f->value.len > 0) {
        char first = f->value.base[0], last = f->value.base[f->value.len - 1];
        INVARIANT(first != ' ' && first != '\t' && last != ' ' && last != '\t');
    }
}

static int name_is(ps_slice_t name, const char *lit)
{
    return ps_slice_ieq(name, lit, strlen(lit));
}

static int slice_is(ps_slice_t s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.base, lit, s.len) == 0;
}

static void check_method(const ps_request_t *r)
{
    INVARIANT(r->method.len > 0);
    for (size_t i = 0; i < r->method.len; i++)
        INVARIANT(fuzz_is_tchar((unsigned char)r->method.base[i]));
    INVARIANT(ps_http_is_token(r->method));
    if (r->method_id != PS_METHOD_OTHER)
        INVARIANT(slice_is(r->method, llhttp_method_name((llhttp_method_t)r->method_id)));
    else
        INVARIANT(!slice_is(r->method, "GET") && !slice_is(r->method, "HEAD") &&
                  !slice_is(r->method, "POST") && !slice_is(r->method, "CONNECT"));
    INVARIANT(r->is_head == slice_is(r->method, "HEAD"));
    INVARIANT(r->method_id != HTTP_CONNECT); /* always answered 501 */
}

static int inside(ps_slice_t part, ps_slice_t whole);

/* The target's form fits the method; an absolute-form authority is the Host
 * field's value and names target_host. Returns the Host field's index when
 * the target is absolute-form, else -1. */
static int check_target(const ps_request_t *r)
{
    ps_slice_t t = r->target;
    INVARIANT(t.len > 0);
    for (size_t i = 0; i < t.len; i++) {
        unsigned char c = (unsigned char)t.base[i];
        INVARIANT(c > 0x20 && c != 0x7f);
    }
    if (t.base[0] == '/') {
        INVARIANT(r->target_host.base == NULL);
        return -1;
    }
    if (t.base[0] == '*') {
        INVARIANT(t.len == 1 && slice_is(r->method, "OPTIONS"));
        INVARIANT(r->target_host.base == NULL);
        return -1;
    }
    size_t skip = t.len >= 7 && strncasecmp(t.base, "http://", 7) == 0 ? 7 : 8;
    INVARIANT(skip == 7 || (t.len >= 8 && strncasecmp(t.base, "https://", 8) == 0));
    INVARIANT(r->target_host.base != NULL && r->target_host.len > 0);
    int host_index = -1, hosts = 0;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (name_is(r->headers[i].name, "host")) {
            host_index = (int)i;
            hosts++;
        }
    INVARIANT(hosts == 1);
    ps_slice_t authority = r->headers[host_index].value, host;
    int port;
    INVARIANT(authority.base == t.base + skip && authority.len <= t.len - skip);
    INVARIANT(ps_http_parse_authority(authority, &host, &port) == 0);
    INVARIANT(inside(host, authority));
    INVARIANT(host.base == r->target_host.base && host.len == r->target_host.len);
    INVARIANT(r->target_port == (port >= 0 ? port : skip == 7 ? 80 : 443));
    return host_index;
}

static void check_request(const ps_request_t *r, const ps_http1_limits_t *lim, uint64_t body_total)
{
    int hosts = 0, has_te = 0, has_cl = 0, long_cl = 0;
    INVARIANT(r->head_complete && r->message_complete);
    check_method(r);
    int abs_host = check_target(r);
    /* "METHOD SP TARGET SP HTTP/1.x" */
    INVARIANT(r->method.len + 1 + r->target.len + 9 <= lim->max_request_line);
    /* The head held at least the request line, each field as "name:value"
     * and the CRLFs (the Host field of an absolute-form target may have
     * been added or rewritten, so it is not counted). */
    uint64_t head_min = r->method.len + 1 + r->target.len + 9 + 2 + 2;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if ((int)i != abs_host)
            head_min += r->headers[i].name.len + 1 + r->headers[i].value.len + 2;
    INVARIANT(lim->max_head == 0 || head_min <= lim->max_head);
    INVARIANT(r->http_minor <= 1);
    INVARIANT(r->nheaders <= lim->max_fields + (abs_host >= 0));
    for (uint32_t i = 0; i < r->nheaders; i++) {
        const ps_header_t *f = &r->headers[i];
        if ((int)i != abs_host)
            check_field(f, lim);
        hosts += name_is(f->name, "host");
        has_te |= name_is(f->name, "transfer-encoding");
        if (name_is(f->name, "content-length")) {
            has_cl = 1;
            long_cl |= f->value.len > 18;
        }
    }
    INVARIANT(r->http_minor == 0 ? hosts <= 1 : hosts == 1);
    INVARIANT(!(has_te && has_cl));
    INVARIANT(has_te == r->chunked);
    INVARIANT(has_cl == (r->content_length >= 0));
    if (r->content_length >= 0)
        INVARIANT(r->body_received == (uint64_t)r->content_length);
    else if (!r->chunked)
        INVARIANT(r->body_received == 0);
    INVARIANT(body_total == r->body_received);
    INVARIANT(r->body_received <= lim->max_body);
    INVARIANT(!r->upgrade || !r->keep_alive);
    /* What the request parser accepts, the response checks accept too. */
    ps_head_info_t info;
    if (!long_cl) {
        INVARIANT(ps_http_scan_head(PS_SLICE_LIT("200 OK"), r->headers, r->nheaders, &info) == 0);
        INVARIANT(info.content_length == r->content_length);
    }
}

static void check_error(ps_http1_parser_t *p, int status)
{
    INVARIANT(p->error_reason != NULL); /* every refusal says why, for the log */
    INVARIANT(status == 400 || status == 413 || status == 414 || status == 431 || status == 501 ||
              status == 505);
    ps_slice_t answer = ps_http1_error_response(status);
    char start[16];
    int n = snprintf(start, sizeof(start), "HTTP/1.1 %d ", status);
    INVARIANT(answer.len > (size_t)n && memcmp(answer.base, start, (size_t)n) == 0);
    size_t used;
    INVARIANT(ps_http1_feed(p, "GET / HTTP/1.1\r\n", 16, &used) == PS_HTTP1_ERROR);
    INVARIANT(p->error_status == status);
}

/* ---- proxy headers ----------------------------------------------------- */

static ps_proxy_t uvicorn_mode, gunicorn_mode;

static void init_proxies(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    static const char list[] = "127.0.0.1, 10.0.0.0/8, ::1, 2001:db8::/32, 192.168.1.7";
    INVARIANT(ps_proxy_init(&uvicorn_mode, list, sizeof(list) - 1, NULL, NULL) == 0);
    INVARIANT(ps_proxy_init(&gunicorn_mode, "*", 1, NULL, NULL) == 0);
    INVARIANT(ps_proxy_add_scheme_header(&gunicorn_mode, "X-Forwarded-Proto", 17, "https", 5) == 0);
    INVARIANT(ps_proxy_add_scheme_header(&gunicorn_mode, "X-Forwarded-Ssl", 15, "on", 2) == 0);
}

static int inside(ps_slice_t part, ps_slice_t whole)
{
    return part.base >= whole.base && part.base + part.len <= whole.base + whole.len;
}

static void check_proxy(const ps_proxy_t *p, const ps_request_t *r)
{
    ps_proxy_result_t res;
    int rc = ps_proxy_apply(p, r, &res);
    INVARIANT(rc == 0 || (rc == -EPROTO && p->secure_headers));
    if (rc < 0)
        return;
    INVARIANT(res.scheme <= PS_SCHEME_HTTPS);
    if (res.client.base == NULL)
        return;
    INVARIANT(res.client.len > 0 && res.client.len <= PS_PROXY_MAX_HOST);
    char first = res.client.base[0], last = res.client.base[res.client.len - 1];
    INVARIANT(first != ' ' && first != '\t' && last != ' ' && last != '\t');
    INVARIANT(memchr(res.client.base, ',', res.client.len) == NULL);
    int found = 0;
    for (uint32_t i = 0; i < r->nheaders && !found; i++)
        found = name_is(r->headers[i].name, "x-forwarded-for") &&
                inside(res.client, r->headers[i].value);
    INVARIANT(found);
    /* The rightmost untrusted hop is never a trusted one (unless all are). */
    (void)ps_proxy_host_trusted(p, res.client.base, res.client.len);
}

static void check_trust_list(const uint8_t *data, size_t len)
{
    ps_proxy_t p;
    size_t bad_off = 0, bad_len = 0;
    int rc = ps_proxy_init(&p, (const char *)data, len, &bad_off, &bad_len);
    INVARIANT(rc == 0 || rc == -EINVAL);
    if (rc == -EINVAL) {
        INVARIANT(bad_off + bad_len <= len && bad_len > 0);
        INVARIANT(p.nnets == 0 && !p.trust_all);
        return;
    }
    /* Whatever the list names, it trusts. */
    for (size_t start = 0, i = 0; i <= len; i++) {
        if (i < len && data[i] != ',')
            continue;
        size_t a = start, b = i;
        while (a < b && (data[a] == ' ' || data[a] == '\t'))
            a++;
        while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t'))
            b--;
        if (b > a && memchr(data + a, '/', b - a) == NULL)
            INVARIANT(ps_proxy_host_trusted(&p, (const char *)data + a, b - a));
        start = i + 1;
    }
    ps_proxy_free(&p);
}

/* ---- authorities ------------------------------------------------------- */

static void check_authority(const uint8_t *data, size_t len)
{
    ps_slice_t a = {(const char *)data, len}, host = {0};
    int port = -2;
    if (ps_http_parse_authority(a, &host, &port) < 0)
        return;
    INVARIANT(host.len > 0 && inside(host, a));
    INVARIANT(port >= -1 && port <= 65535);
    INVARIANT(memchr(a.base, '@', a.len) == NULL && memchr(a.base, '/', a.len) == NULL);
    for (size_t i = 0; i < a.len; i++)
        INVARIANT(a.base[i] > 0x20 && a.base[i] < 0x7f);
    if (a.base[0] == '[')
        INVARIANT(host.base == a.base + 1 && host.base[host.len] == ']');
    else
        INVARIANT(host.base == a.base && memchr(host.base, ':', host.len) == NULL);
    const char *rest = host.base + host.len + (a.base[0] == '[');
    size_t rest_len = (size_t)(a.base + a.len - rest);
    if (port < 0)
        INVARIANT(rest_len == 0 || (rest_len == 1 && rest[0] == ':'));
    else
        INVARIANT(rest_len >= 2 && rest[0] == ':');
}

/* ---- feeding like a connection ---------------------------------------------- */

static void digest_request(uint64_t *h, const ps_request_t *r, const ps_buf_t *body)
{
    fuzz_mix_slice(h, r->method);
    fuzz_mix_slice(h, r->target);
    fuzz_mix_u64(h, r->http_minor);
    fuzz_mix_u64(h, (uint64_t)r->keep_alive << 3 | r->chunked << 2 | r->expect_continue << 1 |
                        r->upgrade);
    fuzz_mix_u64(h, (uint64_t)r->content_length);
    fuzz_mix_u64(h, r->nheaders);
    for (uint32_t i = 0; i < r->nheaders; i++) {
        fuzz_mix_slice(h, r->headers[i].name);
        fuzz_mix_slice(h, r->headers[i].value);
    }
    fuzz_mix_slice(h, buf_bytes(body));
}

/* Returns the digest of everything the connection saw. */
static uint64_t run_connection(const uint8_t *data, size_t len, size_t piece,
                               const ps_http1_limits_t *lim)
{
    ps_http1_parser_t p;
    ps_buf_t body = {0}, got = {0};
    uint64_t h = 14695981039346656037ULL;
    size_t off = 0, avail = 0;
    const char *in = (const char *)data;
    ps_http1_init(&p, lim, &body, BODY_HIGH);
    for (size_t guard = 0;; guard++) {
        INVARIANT(guard <= 4 * len + 64); /* every turn must make progress */
        size_t used = (size_t)-1;
        int rc = ps_http1_feed(&p, in + off, avail - off, &used);
        INVARIANT(used <= avail - off);
        off += used;
        ps_buf_append_slice(&got, buf_bytes(&body));
        ps_buf_reset(&body);
        if (rc == PS_HTTP1_ERROR) {
            check_error(&p, p.error_status);
            fuzz_mix_u64(&h, 3);
            break;
        }
        if (rc == PS_HTTP1_PAUSED) {
            if (!p.req.message_complete)
                continue; /* the body was taken: go on */
            check_request(&p.req, lim, ps_buf_size(&got));
            check_proxy(&uvicorn_mode, &p.req);
            check_proxy(&gunicorn_mode, &p.req);
            digest_request(&h, &p.req, &got);
            ps_buf_reset(&got);
            if (!p.req.keep_alive) {
                fuzz_mix_u64(&h, 1);
                break;
            }
            ps_http1_next(&p);
            continue;
        }
        INVARIANT(rc == PS_HTTP1_MORE && off == avail);
        if (avail == len) {
            fuzz_mix_u64(&h, 2);
            break;
        }
        avail = piece == 0 || len - avail < piece ? len : avail + piece;
    }
    ps_http1_free(&p);
    ps_buf_free(&body);
    ps_buf_free(&got);
    return h;
}

/* ---- response heads ---------------------------------------------------- */

static int on_head_done(llhttp_t *h)
{
    *(int *)h->data = 1;
    return 0;
}

static int has_ctl(ps_slice_t s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.base[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 1;
    }
    return 0;
}

/* Splits data into a status line and up to 16 "name: value" lines. */
static size_t split_head(const char *s, size_t len, ps_slice_t *status, ps_header_t *h)
{
    const char *end = s + len;
    const char *nl = memchr(s, '\n', len);
    const char *e = nl ? nl : end;
    size_t n = 0;
    *status = (ps_slice_t){s, (size_t)(e - s)};
    s = nl ? nl + 1 : end;
    while (s < end && n < 16) {
        nl = memchr(s, '\n', (size_t)(end - s));
        e = nl ? nl : end;
        const char *colon = memchr(s, ':', (size_t)(e - s));
        const char *v = colon ? colon + 1 : e;
        if (v < e && *v == ' ')
            v++;
        h[n].name = (ps_slice_t){s, (size_t)((colon ? colon : e) - s)};
        h[n].value = (ps_slice_t){v, (size_t)(e - v)};
        n++;
        s = nl ? nl + 1 : end;
    }
    return n;
}

static void check_response_head(const uint8_t *data, size_t len)
{
    ps_slice_t status;
    ps_header_t h[16];
    ps_head_info_t info;
    size_t n = split_head((const char *)data, len, &status, h);
    if (ps_http_scan_head(status, h, n, &info) < 0)
        return;
    INVARIANT(info.status >= 100 && info.status <= 999);
    int known_gap = has_ctl(status), cls = 0;
    for (size_t i = 0; i < n; i++) {
        INVARIANT(h[i].name.len > 0);
        for (size_t k = 0; k < h[i].name.len; k++)
            INVARIANT(fuzz_is_tchar((unsigned char)h[i].name.base[k]));
        for (size_t k = 0; k < h[i].value.len; k++) {
            char c = h[i].value.base[k];
            INVARIANT(c != '\r' && c != '\n' && c != 0);
        }
        known_gap |= has_ctl(h[i].value);
        cls += name_is(h[i].name, "content-length");
    }
    /* Known, reported: CTL/DEL in values pass the check, and identical
     * duplicate Content-Length lines are passed on; strict clients refuse
     * both. Everything else accepted must parse as a response. */
    if (known_gap || cls > 1)
        return;
    ps_buf_t out = {0};
    INVARIANT(ps_http1_write_head(&out, status, h, n, NULL, 0) == 0);
    llhttp_settings_t settings;
    llhttp_settings_init(&settings);
    settings.on_headers_complete = on_head_done;
    llhttp_t client;
    int done = 0;
    llhttp_init(&client, HTTP_RESPONSE, &settings);
    client.data = &done;
    llhttp_errno_t err = llhttp_execute(&client, ps_buf_head(&out), ps_buf_size(&out));
    if (!((err == HPE_OK || err == HPE_PAUSED_UPGRADE) && done)) {
        fprintf(stderr, "llhttp refused the head: %s (%s)\n", llhttp_errno_name(err),
                llhttp_get_error_reason(&client));
        INVARIANT(!"a head accepted by ps_http_scan_head parses as a response");
    }
    ps_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    init_proxies();
    size_t piece = data[0] & 63;
    const ps_http1_limits_t *lim = data[0] & 64 ? &tight_limits : &roomy_limits;
    data++;
    size--;
    uint64_t split = run_connection(data, size, piece, lim);
    uint64_t whole = run_connection(data, size, 0, lim);
    INVARIANT(split == whole);
    check_response_head(data, size);
    check_trust_list(data, size);
    check_authority(data, size);
    return 0;
}
