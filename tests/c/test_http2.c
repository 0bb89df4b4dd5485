/* Tests of csrc/codec/http2.c: a server session driven by an nghttp2 client
 * session through an in-memory pipe, and by frames written by hand for
 * what the nghttp2 client refuses to send (invalid heads, floods).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "check.h"
#include "base/common.h"
#include "codec/http2.h"

/* ---- the application side: what the server's callbacks saw --------------- */

enum { APP_RECORD, APP_HELLO, APP_ECHO };

#define NREC 1024

typedef struct {
    int heads, closes, writable, bodies;
    int close_why;
    uint32_t error_code;
    char method[16], target[64], host[64], scheme[8];
    uint32_t nheaders;
    int64_t content_length;
    int complete;
    ps_buf_t body;
    ps_h2_stream_t *st; /* while open */
} srec_t;

static srec_t srec[NREC];
static int app_mode;
static int app_consume = 1; /* APP_ECHO reads the body as it comes */

static srec_t *rec_of(int32_t id)
{
    return &srec[id % NREC];
}

static void copy_slice(char *dst, size_t cap, ps_slice_t s)
{
    size_t n = s.len < cap - 1 ? s.len : cap - 1;
    memcpy(dst, s.base, n);
    dst[n] = 0;
}

static void respond_text(ps_h2_stream_t *st, const char *text)
{
    ps_header_t h[] = {{PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain")},
                       {PS_SLICE_LIT("Connection"), PS_SLICE_LIT("keep-alive")}};
    CHECK_EQ(ps_h2_respond(st, 200, h, 2, 0), 0);
    ps_h2_write(st, text, strlen(text));
    CHECK_EQ(ps_h2_end(st), 0);
}

static void echo_body(ps_h2_stream_t *st)
{
    srec_t *r = rec_of(st->id);
    if (app_consume && ps_buf_size(&st->body)) {
        ps_buf_append(&r->body, ps_buf_head(&st->body), ps_buf_size(&st->body));
        ps_h2_body_consume(st, ps_buf_size(&st->body));
    }
    if (st->req.message_complete && !st->response_started) {
        CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
        ps_h2_write(st, ps_buf_head(&r->body), ps_buf_size(&r->body));
        ps_h2_end(st);
    }
}

static void on_head(ps_h2_stream_t *st, void *ud)
{
    PS_UNUSED(ud);
    srec_t *r = rec_of(st->id);
    r->heads++;
    r->st = st;
    copy_slice(r->method, sizeof(r->method), st->req.method);
    copy_slice(r->target, sizeof(r->target), st->req.target);
    copy_slice(r->scheme, sizeof(r->scheme), st->scheme);
    for (uint32_t i = 0; i < st->req.nheaders; i++)
        if (PS_SLICE_IEQ(st->req.headers[i].name, "host"))
            copy_slice(r->host, sizeof(r->host), st->req.headers[i].value);
    r->nheaders = st->req.nheaders;
    r->content_length = st->req.content_length;
    if (app_mode == APP_HELLO)
        respond_text(st, "hello");
}

static void on_body(ps_h2_stream_t *st, void *ud)
{
    PS_UNUSED(ud);
    srec_t *r = rec_of(st->id);
    r->bodies++;
    r->complete = st->req.message_complete;
    if (app_mode == APP_ECHO)
        echo_body(st);
}

static void on_writable(ps_h2_stream_t *st, void *ud)
{
    PS_UNUSED(ud);
    rec_of(st->id)->writable++;
}

static void on_close(ps_h2_stream_t *st, void *ud, int why)
{
    PS_UNUSED(ud);
    srec_t *r = rec_of(st->id);
    r->closes++;
    r->close_why = why;
    r->error_code = st->error_code;
    r->st = NULL;
}

static int rejections, last_rejected_status;
static char rejected_target[64];

static void on_rejected(ps_h2_stream_t *st, void *ud, int status)
{
    PS_UNUSED(ud);
    rejections++;
    last_rejected_status = status;
    copy_slice(rejected_target, sizeof(rejected_target), st->req.target);
}

static const ps_h2_callbacks_t app_cb = {on_head, on_body, on_writable, on_close, on_rejected};

/* ---- the client side --------------------------------------------------------- */

typedef struct {
    int status, info_status, closed;
    uint32_t rst;
    ps_buf_t body;
    char trailer[64];
    char link[64];
    int has_connection, has_content_type;
    int got_headers;
} crec_t;

static crec_t crec[NREC];
static uint32_t client_goaway = 0xffffffff;
static int32_t client_goaway_last = -1;
static int client_goaways;

static int c_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                       size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(flags), PS_UNUSED(ud);
    crec_t *c = &crec[frame->hd.stream_id % NREC];
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        int st = atoi((const char *)value);
        if (st < 200)
            c->info_status = st;
        else
            c->status = st;
    } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS && c->status) {
        snprintf(c->trailer, sizeof(c->trailer), "%.*s=%.*s", (int)nlen, name, (int)vlen, value);
    } else if (nlen == 4 && memcmp(name, "link", 4) == 0) {
        snprintf(c->link, sizeof(c->link), "%.*s", (int)vlen, value);
    } else if (nlen == 10 && memcmp(name, "connection", 10) == 0) {
        c->has_connection = 1;
    } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
        c->has_content_type = 1;
    }
    return 0;
}

static int c_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                     size_t len, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(flags), PS_UNUSED(ud);
    ps_buf_append(&crec[id % NREC].body, data, len);
    return 0;
}

static int c_on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(ud);
    crec[id % NREC].closed = 1;
    crec[id % NREC].rst = code;
    return 0;
}

static int c_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(ud);
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        client_goaways++;
        client_goaway = frame->goaway.error_code;
        client_goaway_last = frame->goaway.last_stream_id;
    } else if (frame->hd.type == NGHTTP2_HEADERS) {
        crec[frame->hd.stream_id % NREC].got_headers++;
    }
    return 0;
}

/* A request body the client sends from memory. */
typedef struct {
    const char *p;
    size_t left;
} upload_t;

static upload_t uploads[NREC];
static upload_t upool[4096];
static int unext;

static ssize_t c_read_upload(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(id), PS_UNUSED(ud);
    upload_t *u = src->ptr;
    size_t n = u->left < length ? u->left : length;
    memcpy(buf, u->p, n);
    u->p += n;
    u->left -= n;
    if (!u->left)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static nghttp2_session *client_new(const nghttp2_settings_entry *iv, size_t niv)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_session *c;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c_on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c_on_frame_recv);
    nghttp2_session_client_new(&c, cbs, NULL);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(c, NGHTTP2_FLAG_NONE, iv, niv);
    return c;
}

static int32_t client_request(nghttp2_session *c, const char *method, const char *path,
                              const char *body, size_t blen, const nghttp2_nv *extra, size_t nextra)
{
    nghttp2_nv nv[32] = {
        {(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
        {(uint8_t *)":authority", (uint8_t *)"example.com", 10, 11, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
    };
    size_t n = 4;
    for (size_t i = 0; i < nextra; i++)
        nv[n++] = extra[i];
    if (!body)
        return nghttp2_submit_request(c, NULL, nv, n, NULL, NULL);
    upload_t *u = &upool[unext++ % 4096];
    *u = (upload_t){body, blen};
    nghttp2_data_provider prd = {.source.ptr = u, .read_callback = c_read_upload};
    return nghttp2_submit_request(c, NULL, nv, n, &prd, NULL);
}

/* ---- the pipe ------------------------------------------------------------------ */

static double now = 1000.0;
static ps_buf_t s_out;

static int server_turn(ps_h2_session_t *s, const uint8_t *p, size_t n)
{
    int rc = 0;
    if (n)
        rc = ps_h2_feed(s, (const char *)p, n, now);
    ps_h2_dispatch(s);
    int frc = ps_h2_flush(s, &s_out, now);
    ps_h2_dispatch(s);
    return rc ? rc : frc;
}

/* Moves bytes both ways until neither side has any. Returns the last
 * ps_h2_feed result. */
static int pump(ps_h2_session_t *s, nghttp2_session *c)
{
    int rc = 0;
    for (int round = 0; round < 10000; round++) {
        int moved = 0;
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c, &p)) > 0) {
            moved = 1;
            int r = server_turn(s, p, (size_t)n);
            if (r)
                rc = r;
        }
        server_turn(s, NULL, 0);
        if (ps_buf_size(&s_out)) {
            moved = 1;
            nghttp2_session_mem_recv(c, (const uint8_t *)ps_buf_head(&s_out), ps_buf_size(&s_out));
            ps_buf_consume(&s_out, ps_buf_size(&s_out));
        }
        if (!moved)
            break;
    }
    return rc;
}

static void reset_records(void)
{
    for (int i = 0; i < NREC; i++) {
        ps_buf_free(&srec[i].body);
        ps_buf_free(&crec[i].body);
    }
    memset(srec, 0, sizeof(srec));
    memset(crec, 0, sizeof(crec));
    memset(uploads, 0, sizeof(uploads));
    client_goaway = 0xffffffff;
    client_goaway_last = -1;
    client_goaways = 0;
    rejections = 0;
    ps_buf_reset(&s_out);
    app_mode = APP_RECORD;
    app_consume = 1;
}

static ps_h2_limits_t limits;

static ps_h2_session_t *server_new(void)
{
    return ps_h2_session_new(&limits, &app_cb, NULL);
}

/* ---- raw frames ------------------------------------------------------------------ */

static ps_buf_t raw;
static nghttp2_hd_inflater *inflater; /* decodes the server's HEADERS in raw tests */

static void frame(uint8_t type, uint8_t flags, uint32_t sid, const void *payload, size_t n)
{
    uint8_t hd[9] = {
        (uint8_t)(n >> 16),   (uint8_t)(n >> 8),    (uint8_t)n,          type,        flags,
        (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    ps_buf_append(&raw, hd, 9);
    ps_buf_append(&raw, payload, n);
}

static void hpack_int(ps_buf_t *b, uint8_t first, int prefix, size_t v)
{
    size_t max = (1u << prefix) - 1;
    uint8_t c;
    if (v < max) {
        c = (uint8_t)(first | v);
        ps_buf_append(b, &c, 1);
        return;
    }
    c = (uint8_t)(first | max);
    ps_buf_append(b, &c, 1);
    v -= max;
    while (v >= 128) {
        c = (uint8_t)(v % 128 + 128);
        ps_buf_append(b, &c, 1);
        v /= 128;
    }
    c = (uint8_t)v;
    ps_buf_append(b, &c, 1);
}

/* A literal field: without indexing (0x00) or with incremental indexing
 * (0x40), new name, no Huffman. */
static void hpack_lit(ps_buf_t *b, uint8_t kind, const char *name, const char *value, size_t vlen)
{
    ps_buf_append(b, &kind, 1);
    hpack_int(b, 0, 7, strlen(name));
    ps_buf_append(b, name, strlen(name));
    hpack_int(b, 0, 7, vlen);
    ps_buf_append(b, value, vlen);
}

static void hpack_request(ps_buf_t *b, const char *method, const char *path)
{
    hpack_lit(b, 0, ":method", method, strlen(method));
    hpack_lit(b, 0, ":scheme", "https", 5);
    hpack_lit(b, 0, ":authority", "example.com", 11);
    hpack_lit(b, 0, ":path", path, strlen(path));
}

static void raw_start(void)
{
    ps_buf_reset(&raw);
    if (inflater)
        nghttp2_hd_inflate_del(inflater);
    nghttp2_hd_inflate_new(&inflater);
    ps_buf_append(&raw, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
    frame(NGHTTP2_SETTINGS, 0, 0, NULL, 0);
}

static void raw_headers(uint32_t sid, int end_stream, const ps_buf_t *block)
{
    frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (end_stream ? NGHTTP2_FLAG_END_STREAM : 0),
          sid, ps_buf_head(block), ps_buf_size(block));
}

static void raw_rst(uint32_t sid, uint32_t code)
{
    uint8_t p[4] = {(uint8_t)(code >> 24), (uint8_t)(code >> 16), (uint8_t)(code >> 8),
                    (uint8_t)code};
    frame(NGHTTP2_RST_STREAM, 0, sid, p, 4);
}

/* What the server answered, frame by frame. */
typedef struct {
    uint32_t rst[NREC];
    int nrst;
    uint32_t goaway, goaway_last;
    int goaways;
    int headers[NREC];
    int status[NREC];
} seen_t;

static void scan_output(const ps_buf_t *out, seen_t *seen)
{
    memset(seen, 0, sizeof(*seen));
    seen->goaway = 0xffffffff;
    const uint8_t *p = (const uint8_t *)ps_buf_head(out);
    size_t n = ps_buf_size(out);
    while (n >= 9) {
        size_t len = (size_t)p[0] << 16 | (size_t)p[1] << 8 | p[2];
        uint8_t type = p[3];
        uint32_t sid =
            ((uint32_t)p[5] << 24 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 8 | p[8]) & 0x7fffffff;
        if (n < 9 + len)
            break;
        const uint8_t *q = p + 9;
        if (type == NGHTTP2_RST_STREAM && len == 4) {
            seen->rst[sid % NREC] =
                (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
            seen->nrst++;
        } else if (type == NGHTTP2_GOAWAY && len >= 8) {
            seen->goaway_last =
                ((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3]) &
                0x7fffffff;
            seen->goaway = (uint32_t)q[4] << 24 | (uint32_t)q[5] << 16 | (uint32_t)q[6] << 8 | q[7];
            seen->goaways++;
        } else if (type == NGHTTP2_HEADERS) {
            seen->headers[sid % NREC]++;
            const uint8_t *in = q;
            size_t inlen = len;
            for (;;) {
                nghttp2_nv nv;
                int fl = 0;
                ssize_t r = nghttp2_hd_inflate_hd2(inflater, &nv, &fl, in, inlen, 1);
                if (r < 0)
                    break;
                in += r;
                inlen -= (size_t)r;
                if ((fl & NGHTTP2_HD_INFLATE_EMIT) && nv.namelen == 7 &&
                    memcmp(nv.name, ":status", 7) == 0)
                    seen->status[sid % NREC] = atoi((const char *)nv.value);
                if (fl & NGHTTP2_HD_INFLATE_FINAL) {
                    nghttp2_hd_inflate_end_headers(inflater);
                    break;
                }
                if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && inlen == 0)
                    break;
            }
        }
        p += 9 + len;
        n -= 9 + len;
    }
}

/* Feeds raw to a fresh server session and collects its answer. */
static int raw_run(ps_h2_session_t *s, seen_t *seen)
{
    ps_buf_reset(&s_out);
    int rc = server_turn(s, (const uint8_t *)ps_buf_head(&raw), ps_buf_size(&raw));
    ps_buf_reset(&raw);
    scan_output(&s_out, seen);
    return rc;
}

/* ---- the tests ----------------------------------------------------------------- */

static void test_preface(void)
{
    CHECK_EQ(ps_h2_is_preface(NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN), 1);
    CHECK_EQ(ps_h2_is_preface("PRI * HTTP/2.0\r\n", 16), -EAGAIN);
    CHECK_EQ(ps_h2_is_preface("GET / HTTP/1.1\r\n", 16), 0);
    reset_records();
    ps_h2_session_t *s = server_new();
    CHECK_EQ(ps_h2_feed(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, now), -EPROTO);
    ps_h2_session_free(s);
}

static void test_simple_get(void)
{
    reset_records();
    app_mode = APP_HELLO;
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/hello?x=1", NULL, 0, NULL, 0);
    pump(s, c);
    srec_t *r = rec_of(id);
    CHECK_EQ(r->heads, 1);
    CHECK(strcmp(r->method, "GET") == 0);
    CHECK(strcmp(r->target, "/hello?x=1") == 0);
    CHECK(strcmp(r->host, "example.com") == 0);
    CHECK(strcmp(r->scheme, "https") == 0);
    CHECK_EQ(r->content_length, -1);
    CHECK_EQ(r->closes, 1);
    CHECK_EQ(r->close_why, PS_H2_CLOSE_DONE);
    crec_t *cr = &crec[id];
    CHECK_EQ(cr->status, 200);
    CHECK_MEM_EQ(ps_buf_head(&cr->body), ps_buf_size(&cr->body), "hello");
    CHECK(cr->has_content_type);
    CHECK(!cr->has_connection);
    CHECK_EQ(cr->rst, NGHTTP2_NO_ERROR);
    CHECK_EQ(ps_h2_open_streams(s), 0);
    /* a second request on the same connection reuses the stream storage */
    id = client_request(c, "HEAD", "/", NULL, 0, NULL, 0);
    pump(s, c);
    CHECK_EQ(crec[id].status, 200);
    CHECK_EQ(ps_buf_size(&crec[id].body), 0);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* The consumer reads slowly: the client can send only what the window
 * allows, and other streams go on meanwhile. */
static void test_post_flow_control(void)
{
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.stream_window = 16384;
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    pump(s, c); /* our SETTINGS acknowledged: the small window applies */
    size_t total = 100000;
    char *body = malloc(total);
    for (size_t i = 0; i < total; i++)
        body[i] = (char)('a' + i % 26);
    char cl[16];
    snprintf(cl, sizeof(cl), "%zu", total);
    nghttp2_nv extra[] = {{(uint8_t *)"content-length", (uint8_t *)cl, 14, strlen(cl), 0}};
    nghttp2_data_provider prd = {.read_callback = c_read_upload};
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"h", 10, 1, 0},
        {(uint8_t *)":path", (uint8_t *)"/up", 5, 3, 0},
        extra[0],
    };
    upload_t up = {body, total};
    prd.source.ptr = &up;
    int32_t id = nghttp2_submit_request(c, NULL, nv, 5, &prd, NULL);
    pump(s, c);
    srec_t *r = rec_of(id);
    CHECK_EQ(r->heads, 1);
    CHECK_EQ(r->content_length, (int64_t)total);
    ps_h2_stream_t *st = r->st;
    CHECK(st != NULL);
    CHECK_EQ(ps_buf_size(&st->body), 16384);
    CHECK_EQ(st->req.body_received, 16384);
    /* another stream is served while this one waits */
    app_mode = APP_HELLO;
    int32_t id2 = client_request(c, "GET", "/other", NULL, 0, NULL, 0);
    pump(s, c);
    CHECK_EQ(crec[id2].status, 200);
    app_mode = APP_RECORD;
    /* reading half the window lets as much more in (nghttp2 sends
     * WINDOW_UPDATE once half the window is consumed), never more */
    ps_buf_t got = {0};
    ps_buf_append(&got, ps_buf_head(&st->body), 4096);
    ps_h2_body_consume(st, 4096);
    pump(s, c);
    CHECK_EQ(st->req.body_received, 16384);
    ps_buf_append(&got, ps_buf_head(&st->body), 4096);
    ps_h2_body_consume(st, 4096);
    pump(s, c);
    CHECK(ps_buf_size(&st->body) <= 16384);
    CHECK(st->req.body_received <= 16384 + 8192);
    CHECK(st->req.body_received > 16384);
    for (int i = 0; i < 1000 && st->req.body_received < total / 2; i++) {
        size_t n = ps_buf_size(&st->body);
        CHECK(n <= 16384);
        ps_buf_append(&got, ps_buf_head(&st->body), n);
        ps_h2_body_consume(st, n);
        pump(s, c);
    }
    /* a reader that takes the rest out of the buffer itself, then says so */
    for (int i = 0; i < 1000 && ps_buf_size(&st->body); i++) {
        ps_buf_append(&got, ps_buf_head(&st->body), ps_buf_size(&st->body));
        ps_buf_consume(&st->body, ps_buf_size(&st->body));
        ps_h2_body_sync(st);
        pump(s, c);
    }
    CHECK(st->req.message_complete);
    CHECK_EQ(ps_buf_size(&got), total);
    CHECK(ps_buf_size(&got) == total && memcmp(ps_buf_head(&got), body, total) == 0);
    CHECK_EQ(ps_h2_respond(st, 204, NULL, 0, 1), 0);
    pump(s, c);
    CHECK_EQ(crec[id].status, 204);
    CHECK_EQ(r->close_why, PS_H2_CLOSE_DONE);
    ps_buf_free(&got);
    free(body);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
    limits = saved;
}

/* Many streams upload at once, their DATA frames interleaved; each gets its
 * own body back. */
static void test_concurrent_streams(void)
{
    reset_records();
    app_mode = APP_ECHO;
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    enum { N = 80, LEN = 40000 };
    static char bodies[N][LEN];
    int32_t ids[N];
    nghttp2_data_provider prd = {.read_callback = c_read_upload};
    for (int i = 0; i < N; i++) {
        memset(bodies[i], 'A' + i % 50, LEN);
        snprintf(bodies[i], 16, "stream %02d", i % 100);
        uploads[i] = (upload_t){bodies[i], LEN};
        prd.source.ptr = &uploads[i];
        nghttp2_nv nv[] = {
            {(uint8_t *)":method", (uint8_t *)"PUT", 7, 3, 0},
            {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
            {(uint8_t *)":authority", (uint8_t *)"h", 10, 1, 0},
            {(uint8_t *)":path", (uint8_t *)"/echo", 5, 5, 0},
        };
        ids[i] = nghttp2_submit_request(c, NULL, nv, 4, &prd, NULL);
    }
    pump(s, c);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        crec_t *cr = &crec[ids[i] % NREC];
        if (cr->status == 200 && ps_buf_size(&cr->body) == LEN &&
            memcmp(ps_buf_head(&cr->body), bodies[i], LEN) == 0 &&
            rec_of(ids[i])->close_why == PS_H2_CLOSE_DONE && rec_of(ids[i])->bodies > 1)
            ok++;
    }
    CHECK_EQ(ok, N);
    CHECK_EQ(ps_h2_open_streams(s), 0);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* The producer has nothing yet: DEFERRED, then resumed by each write. */
static void test_streaming_and_trailers(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/stream", NULL, 0, NULL, 0);
    pump(s, c);
    ps_h2_stream_t *st = rec_of(id)->st;
    CHECK(st != NULL);
    ps_header_t link = {PS_SLICE_LIT("Link"), PS_SLICE_LIT("</a.css>; rel=preload")};
    CHECK_EQ(ps_h2_info(st, 103, &link, 1), 0);
    pump(s, c);
    CHECK_EQ(crec[id].info_status, 103);
    CHECK(strcmp(crec[id].link, "</a.css>; rel=preload") == 0);
    CHECK_EQ(crec[id].status, 0);
    CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
    CHECK_EQ(ps_h2_info(st, 103, NULL, 0), -EINVAL); /* after the final head */
    pump(s, c);
    CHECK_EQ(crec[id].status, 200);
    CHECK_EQ(ps_buf_size(&crec[id].body), 0);
    CHECK(!crec[id].closed);
    CHECK(ps_h2_stalled_since(s) == 0); /* nothing waits: not a stall */
    CHECK_EQ(ps_h2_write(st, "one,", 4), 0);
    pump(s, c);
    CHECK_MEM_EQ(ps_buf_head(&crec[id].body), ps_buf_size(&crec[id].body), "one,");
    CHECK_EQ(ps_h2_write(st, "two", 3), 0);
    ps_header_t tr = {PS_SLICE_LIT("Grpc-Status"), PS_SLICE_LIT("0")};
    CHECK_EQ(ps_h2_trailers(st, &tr, 1), 0);
    CHECK_EQ(ps_h2_write(st, "late", 4), -EINVAL);
    pump(s, c);
    CHECK_MEM_EQ(ps_buf_head(&crec[id].body), ps_buf_size(&crec[id].body), "one,two");
    CHECK(strcmp(crec[id].trailer, "grpc-status=0") == 0);
    CHECK(crec[id].closed);
    CHECK_EQ(rec_of(id)->close_why, PS_H2_CLOSE_DONE);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* HEAD, 204 and 304 never carry a body; a content-length bounds the body
 * and a body that ends short of it resets the stream. */
static void test_no_body_and_content_length(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t head = client_request(c, "HEAD", "/h", NULL, 0, NULL, 0);
    int32_t none = client_request(c, "GET", "/204", NULL, 0, NULL, 0);
    int32_t longer = client_request(c, "GET", "/long", NULL, 0, NULL, 0);
    int32_t shorter = client_request(c, "GET", "/short", NULL, 0, NULL, 0);
    pump(s, c);
    ps_header_t cl5 = {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("5")};
    ps_header_t cl9 = {PS_SLICE_LIT("content-length"), PS_SLICE_LIT("9")};
    ps_header_t bad = {PS_SLICE_LIT("content-length"), PS_SLICE_LIT("5x")};
    ps_h2_stream_t *st = rec_of(head)->st;
    CHECK_EQ(ps_h2_respond(st, 200, &cl5, 1, 0), 0);
    CHECK_EQ(ps_h2_write(st, "hello", 5), 0); /* accepted and dropped */
    CHECK_EQ(ps_h2_end(st), 0);
    st = rec_of(none)->st;
    CHECK_EQ(ps_h2_respond(st, 204, NULL, 0, 0), 0);
    CHECK_EQ(ps_h2_write(st, "body", 4), 0);
    CHECK_EQ(ps_h2_trailers(st, &cl5, 1), 0);
    st = rec_of(longer)->st;
    CHECK_EQ(ps_h2_respond(st, 200, &bad, 1, 0), -EINVAL);
    CHECK_EQ(ps_h2_respond(st, 200, &cl5, 1, 0), 0);
    CHECK_EQ(ps_h2_write(st, "hel", 3), 0);
    CHECK_EQ(ps_h2_write(st, "lo, world", 9), 0); /* "lo" fits, the rest is dropped */
    CHECK_EQ(ps_h2_end(st), 0);
    st = rec_of(shorter)->st;
    CHECK_EQ(ps_h2_respond(st, 200, &cl9, 1, 0), 0);
    CHECK_EQ(ps_h2_write(st, "four", 4), 0);
    CHECK_EQ(ps_h2_end(st), -EIO);
    pump(s, c);
    CHECK_EQ(crec[head].status, 200);
    CHECK_EQ(ps_buf_size(&crec[head].body), 0);
    CHECK(crec[head].closed && crec[head].rst == 0);
    CHECK_EQ(crec[none].status, 204);
    CHECK_EQ(ps_buf_size(&crec[none].body), 0);
    CHECK(crec[none].closed && crec[none].rst == 0);
    CHECK_MEM_EQ(ps_buf_head(&crec[longer].body), ps_buf_size(&crec[longer].body), "hello");
    CHECK(crec[longer].closed && crec[longer].rst == 0);
    CHECK(crec[shorter].closed);
    CHECK_EQ(crec[shorter].rst, NGHTTP2_INTERNAL_ERROR);
    CHECK_EQ(rec_of(shorter)->close_why, PS_H2_CLOSE_ABORTED);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* ps_h2_write reports the high-water mark; on_writable follows the drain.
 * A file goes out in pieces through pread. */
static void test_backpressure_and_sendfile(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/file", NULL, 0, NULL, 0);
    pump(s, c);
    ps_h2_stream_t *st = rec_of(id)->st;
    CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
    static char big[100000];
    memset(big, 'x', sizeof(big));
    CHECK_EQ(ps_h2_write(st, big, sizeof(big)), 1);
    pump(s, c);
    CHECK(rec_of(id)->writable >= 1);
    char path[] = "/tmp/test_http2_XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    static char file[300000];
    for (size_t i = 0; i < sizeof(file); i++)
        file[i] = (char)(i * 7);
    CHECK_EQ(write(fd, file, sizeof(file)), (ssize_t)sizeof(file));
    int before = rec_of(id)->writable;
    CHECK_EQ(ps_h2_sendfile(st, fd, 1000, sizeof(file) - 1000), 0);
    CHECK(ps_h2_sendfile_busy(st));
    pump(s, c);
    CHECK(!ps_h2_sendfile_busy(st));
    CHECK(rec_of(id)->writable > before);
    CHECK_EQ(ps_h2_end(st), 0);
    pump(s, c);
    CHECK_EQ(ps_buf_size(&crec[id].body), sizeof(big) + sizeof(file) - 1000);
    CHECK(memcmp(ps_buf_head(&crec[id].body) + sizeof(big), file + 1000, sizeof(file) - 1000) == 0);
    CHECK_EQ(rec_of(id)->close_why, PS_H2_CLOSE_DONE);
    close(fd);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* The client resets a stream in the middle of its response; the server
 * resets another. */
static void test_resets(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/a", NULL, 0, NULL, 0);
    int32_t id2 = client_request(c, "GET", "/b", NULL, 0, NULL, 0);
    pump(s, c);
    ps_h2_stream_t *st = rec_of(id)->st;
    CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
    ps_h2_write(st, "part", 4);
    pump(s, c);
    CHECK_EQ(ps_buf_size(&crec[id].body), 4);
    nghttp2_submit_rst_stream(c, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    pump(s, c);
    CHECK_EQ(rec_of(id)->closes, 1);
    CHECK_EQ(rec_of(id)->close_why, PS_H2_CLOSE_RESET);
    CHECK_EQ(rec_of(id)->error_code, NGHTTP2_CANCEL);
    CHECK(rec_of(id)->st == NULL); /* the exchange dropped its pointer */
    ps_h2_stream_t *st2 = rec_of(id2)->st;
    CHECK_EQ(ps_h2_abort(st2, NGHTTP2_INTERNAL_ERROR), 0);
    pump(s, c);
    CHECK_EQ(rec_of(id2)->close_why, PS_H2_CLOSE_ABORTED);
    CHECK_EQ(crec[id2].rst, NGHTTP2_INTERNAL_ERROR);
    CHECK_EQ(ps_h2_open_streams(s), 0);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* Unread bodies of reset streams give their bytes back to the connection
 * window: later uploads still go through. */
static void test_connection_window_not_leaked(void)
{
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.stream_window = 65535;
    limits.connection_window = 131072;
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    static char body[400000];
    memset(body, 'b', sizeof(body));
    int32_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = client_request(c, "POST", "/x", body, 65535, NULL, 0);
    pump(s, c);
    for (int i = 0; i < 3; i++)
        if (rec_of(ids[i])->st)
            ps_h2_abort(rec_of(ids[i])->st, NGHTTP2_CANCEL);
    pump(s, c);
    app_mode = APP_ECHO;
    int32_t id = client_request(c, "POST", "/y", body, sizeof(body), NULL, 0);
    pump(s, c);
    CHECK_EQ(crec[id].status, 200);
    CHECK_EQ(ps_buf_size(&crec[id].body), sizeof(body));
    nghttp2_session_del(c);
    ps_h2_session_free(s);
    limits = saved;
}

static ssize_t c_read_small(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    return c_read_upload(ng, id, buf, length < 100 ? length : 100, flags, src, ud);
}

static ssize_t c_pad_full(nghttp2_session *ng, const nghttp2_frame *frame, size_t max, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(frame), PS_UNUSED(ud);
    return (ssize_t)max;
}

/* DATA padded to whole frames: the padding is given back to the windows
 * too, or this upload (5 MB of frames for 30 kB of body) would stall. */
static void test_padded_upload(void)
{
    reset_records();
    app_mode = APP_ECHO;
    ps_h2_session_t *s = server_new();
    nghttp2_session_callbacks *cbs;
    nghttp2_session *c;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
    nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
    nghttp2_session_callbacks_set_select_padding_callback(cbs, c_pad_full);
    nghttp2_session_client_new(&c, cbs, NULL);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(c, NGHTTP2_FLAG_NONE, NULL, 0);
    static char body[30000];
    memset(body, 'p', sizeof(body));
    upload_t up = {body, sizeof(body)};
    nghttp2_data_provider prd = {.source.ptr = &up, .read_callback = c_read_small};
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"h", 10, 1, 0},
        {(uint8_t *)":path", (uint8_t *)"/pad", 5, 4, 0},
    };
    int32_t id = nghttp2_submit_request(c, NULL, nv, 4, &prd, NULL);
    pump(s, c);
    CHECK_EQ(crec[id].status, 200);
    CHECK_EQ(ps_buf_size(&crec[id].body), sizeof(body));
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

static void test_max_body(void)
{
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.max_body = 1000;
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    static char body[5000];
    int32_t id = client_request(c, "POST", "/x", body, sizeof(body), NULL, 0);
    pump(s, c);
    CHECK_EQ(crec[id].rst, NGHTTP2_CANCEL);
    CHECK(rec_of(id)->closes <= 1);
    CHECK_EQ(ps_h2_open_streams(s), 0);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
    limits = saved;
}

/* Heads nghttp2's client would never send: each costs its stream a
 * RST_STREAM PROTOCOL_ERROR and never reaches the application. */
static void test_header_validation(void)
{
    struct {
        const char *name, *value;
        int drop; /* 1: leave out :path */
    } cases[] = {
        {"X-Upper", "1", 0},    {"connection", "keep-alive", 0},
        {"keep-alive", "5", 0}, {"transfer-encoding", "chunked", 0},
        {"upgrade", "h2c", 0},  {"te", "gzip", 0},
        {"bad name", "1", 0},   {"x-ok", "bad\r\nvalue", 0},
        {"x-ok", "1", 1},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        reset_records();
        ps_h2_session_t *s = server_new();
        ps_buf_t block = {0};
        hpack_lit(&block, 0, ":method", "GET", 3);
        hpack_lit(&block, 0, ":scheme", "https", 5);
        hpack_lit(&block, 0, ":authority", "h", 1);
        if (!cases[i].drop)
            hpack_lit(&block, 0, ":path", "/", 1);
        hpack_lit(&block, 0, cases[i].name, cases[i].value, strlen(cases[i].value));
        raw_start();
        raw_headers(1, 1, &block);
        seen_t seen;
        raw_run(s, &seen);
        if (!CHECK_EQ(seen.rst[1], NGHTTP2_PROTOCOL_ERROR))
            fprintf(stderr, "  case %zu: %s: %s\n", i, cases[i].name, cases[i].value);
        CHECK_EQ(rec_of(1)->heads, 0);
        CHECK_EQ(seen.goaways, 0);
        /* the connection goes on: a good request on stream 3 */
        app_mode = APP_HELLO;
        ps_buf_reset(&block);
        hpack_request(&block, "GET", "/");
        raw_headers(3, 1, &block);
        raw_run(s, &seen);
        CHECK_EQ(rec_of(3)->heads, 1);
        CHECK_EQ(seen.headers[3], 1);
        ps_buf_free(&block);
        ps_h2_session_free(s);
    }
    /* te: trailers is allowed, and a content-length DATA disagrees with */
    reset_records();
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "POST", "/");
    hpack_lit(&block, 0, "te", "trailers", 8);
    hpack_lit(&block, 0, "content-length", "10", 2);
    raw_start();
    raw_headers(1, 0, &block);
    frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "12345", 5);
    seen_t seen;
    raw_run(s, &seen);
    CHECK_EQ(rec_of(1)->heads, 1);
    CHECK_EQ(seen.rst[1], NGHTTP2_PROTOCOL_ERROR);
    CHECK_EQ(rec_of(1)->closes, 1);
    CHECK_EQ(rec_of(1)->close_why, PS_H2_CLOSE_RESET);
    ps_buf_free(&block);
    ps_h2_session_free(s);
}

/* Too many fields, or a decoded list over the limit (an HPACK bomb: one
 * 4000-byte entry in the dynamic table referenced by one-byte indexes):
 * 431, and the connection goes on. */
/* More streams at once than SETTINGS_MAX_CONCURRENT_STREAMS, after our
 * SETTINGS are acknowledged: the extra ones never reach the application
 * and are refused one by one (RFC 9113 5.1.2: a stream error); the
 * connection goes on. */
static void test_max_concurrent_streams(void)
{
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.max_concurrent_streams = 10;
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "GET", "/");
    raw_start();
    frame(NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0); /* our SETTINGS apply */
    for (uint32_t i = 0; i < 15; i++)
        raw_headers(101 + 2 * i, 1, &block);
    seen_t seen;
    raw_run(s, &seen);
    int heads = 0;
    for (uint32_t i = 0; i < 15; i++)
        heads += rec_of(101 + 2 * i)->heads;
    CHECK_EQ(heads, 10);
    CHECK_EQ(seen.goaway, 0xffffffff);
    for (uint32_t i = 10; i < 15; i++)
        CHECK_EQ(seen.rst[101 + 2 * i], NGHTTP2_REFUSED_STREAM);
    CHECK_EQ(ps_h2_open_streams(s), 10);
    ps_buf_free(&block);
    ps_h2_session_free(s);
    limits = saved;
}

static void test_header_list_limits(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "GET", "/");
    static char v[4000];
    memset(v, 'v', sizeof(v));
    hpack_lit(&block, 0x40, "x-bomb", v, sizeof(v)); /* now dynamic index 62 */
    for (int i = 0; i < 2000; i++)
        ps_buf_append(&block, "\xbe", 1);
    raw_start();
    raw_headers(1, 1, &block);
    seen_t seen;
    raw_run(s, &seen);
    CHECK_EQ(seen.status[1], 431);
    CHECK_EQ(rec_of(1)->heads, 0);
    CHECK_EQ(rejections, 1);
    CHECK_EQ(last_rejected_status, 431);
    CHECK(strcmp(rejected_target, "/") == 0);
    CHECK_EQ(seen.goaways, 0);
    ps_buf_reset(&block);
    hpack_request(&block, "GET", "/");
    char name[16];
    for (int i = 0; i < 150; i++) {
        snprintf(name, sizeof(name), "x-f%d", i);
        hpack_lit(&block, 0, name, "1", 1);
    }
    raw_headers(3, 1, &block);
    raw_run(s, &seen);
    CHECK_EQ(seen.status[3], 431);
    CHECK_EQ(rec_of(3)->heads, 0);
    CHECK_EQ(rejections, 2);
    app_mode = APP_HELLO;
    ps_buf_reset(&block);
    hpack_request(&block, "GET", "/");
    raw_headers(5, 1, &block);
    raw_run(s, &seen);
    CHECK_EQ(rec_of(5)->heads, 1);
    CHECK_EQ(seen.status[5], 200);
    ps_buf_free(&block);
    ps_h2_session_free(s);
}

static void expect_calm(const char *what, seen_t *seen, int rc, ps_h2_session_t *s)
{
    if (!CHECK_EQ(seen->goaway, NGHTTP2_ENHANCE_YOUR_CALM))
        fprintf(stderr, "  attack: %s\n", what);
    CHECK_EQ(rc, -EPROTO);
    CHECK(ps_h2_may_close(s));
}

/* CVE-2023-44487: HEADERS then RST_STREAM, over and over. */
static void test_rapid_reset(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "GET", "/");
    raw_start();
    for (uint32_t i = 0; i < 1000; i++) {
        raw_headers(1 + 2 * i, 1, &block);
        raw_rst(1 + 2 * i, NGHTTP2_CANCEL);
    }
    seen_t seen;
    int rc = raw_run(s, &seen);
    expect_calm("rapid reset", &seen, rc, s);
    CHECK(rec_of(1)->heads == 0); /* nothing reached the application */
    ps_h2_session_free(s);
    /* streams opened (and answered) faster than the budget */
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.max_new_streams = 50;
    s = server_new();
    raw_start();
    for (uint32_t i = 0; i < 60; i++)
        raw_headers(1 + 2 * i, 1, &block);
    rc = raw_run(s, &seen);
    expect_calm("new streams", &seen, rc, s);
    ps_h2_session_free(s);
    /* the same number spread over time is fine */
    reset_records();
    app_mode = APP_HELLO;
    s = server_new();
    raw_start();
    for (uint32_t i = 0; i < 120; i++) {
        raw_headers(1 + 2 * i, 1, &block);
        if (i % 40 == 39) {
            rc = raw_run(s, &seen);
            CHECK_EQ(rc, 0);
            now += 1.5;
        }
    }
    CHECK_EQ(seen.goaways, 0);
    CHECK_EQ(rec_of(239)->heads, 1);
    ps_h2_session_free(s);
    limits = saved;
    ps_buf_free(&block);
}

/* CVE-2024-27316 / CVE-2024-28182: a header block that never ends. */
static void test_continuation_flood(void)
{
    for (int bytes = 0; bytes < 2; bytes++) {
        reset_records();
        ps_h2_limits_t saved = limits;
        if (bytes)
            limits.max_continuations = 100000; /* only the byte bound is left */
        ps_h2_session_t *s = server_new();
        ps_buf_t block = {0};
        hpack_request(&block, "GET", "/");
        raw_start();
        frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, ps_buf_head(&block),
              ps_buf_size(&block));
        int rc = 0, i;
        seen_t seen = {0};
        for (i = 0; i < 10000 && rc == 0; i++) {
            ps_buf_t piece = {0};
            char name[16];
            snprintf(name, sizeof(name), "x-c%d", i);
            static char v[1000];
            memset(v, 'c', sizeof(v));
            hpack_lit(&piece, 0, name, v, bytes ? sizeof(v) : 0);
            frame(NGHTTP2_CONTINUATION, 0, 1, ps_buf_head(&piece), ps_buf_size(&piece));
            ps_buf_free(&piece);
            rc = raw_run(s, &seen);
        }
        expect_calm(bytes ? "CONTINUATION bytes" : "CONTINUATION frames", &seen, rc, s);
        /* cut off by our count (nghttp2's own, where it has one, is twice it) */
        if (!bytes)
            CHECK_EQ(i, limits.max_continuations + 1);
        else
            CHECK(i <= (int)(limits.max_header_block / 1000) + 1);
        CHECK_EQ(rec_of(1)->heads, 0);
        ps_buf_free(&block);
        ps_h2_session_free(s);
        limits = saved;
    }
}

static void test_control_floods(void)
{
    for (int kind = 0; kind < 4; kind++) {
        reset_records();
        ps_h2_session_t *s = server_new();
        raw_start();
        ps_buf_t block = {0};
        if (kind == 3) {
            hpack_request(&block, "POST", "/");
            raw_headers(1, 0, &block);
        }
        /* in batches, the server's answers read in between: a client
         * that reads its ACKs, so only our budget can stop it */
        seen_t seen = {0};
        int rc = 0;
        for (int i = 0; i < 500 && rc == 0; i++) {
            if (kind == 0)
                frame(NGHTTP2_SETTINGS, 0, 0, NULL, 0);
            else if (kind == 1)
                frame(NGHTTP2_PING, 0, 0, "12345678", 8);
            else if (kind == 2)
                frame(NGHTTP2_PRIORITY, 0, 1, "\0\0\0\0\x10", 5);
            else
                frame(NGHTTP2_DATA, 0, 1, NULL, 0);
            if (i % 20 == 19)
                rc = raw_run(s, &seen);
        }
        static const char *names[] = {"SETTINGS", "PING", "PRIORITY", "empty DATA"};
        expect_calm(names[kind], &seen, rc, s);
        ps_buf_free(&block);
        ps_h2_session_free(s);
    }
    /* Within the budget over time (50 PINGs a second for 5 s): fine. */
    reset_records();
    ps_h2_session_t *ok = server_new();
    raw_start();
    for (int sec = 0; sec < 5; sec++) {
        for (int i = 0; i < 50; i++)
            frame(NGHTTP2_PING, 0, 0, "12345678", 8);
        seen_t seen;
        CHECK_EQ(raw_run(ok, &seen), 0);
        CHECK_EQ(seen.goaways, 0);
        now += 1.01;
    }
    ps_h2_session_free(ok);
    /* A client that sends PINGs within the budget but never reads the
     * ACKs: nghttp2's outbound ACK bound ends it. */
    reset_records();
    ps_h2_limits_t saved = limits;
    limits.max_control = 100000;
    ps_h2_session_t *s = server_new();
    raw_start();
    for (int i = 0; i < 300; i++)
        frame(NGHTTP2_PING, 0, 0, "12345678", 8);
    int rc = ps_h2_feed(s, ps_buf_head(&raw), ps_buf_size(&raw), now);
    CHECK_EQ(rc, -EPROTO);
    ps_buf_reset(&raw);
    ps_h2_session_free(s);
    limits = saved;
}

/* The client never opens its window: the session says since when output
 * has been stuck, and it clears once the window opens. */
static void test_zero_window_stall(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0};
    nghttp2_session *c = client_new(&iv, 1);
    int32_t id = client_request(c, "GET", "/", NULL, 0, NULL, 0);
    pump(s, c);
    ps_h2_stream_t *st = rec_of(id)->st;
    CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
    ps_h2_write(st, "stuck", 5);
    now += 1;
    double t0 = now;
    pump(s, c);
    CHECK(ps_h2_stalled_since(s) == t0);
    now += 5;
    pump(s, c);
    CHECK(ps_h2_stalled_since(s) == t0); /* still the same start */
    CHECK_EQ(ps_buf_size(&crec[id].body), 0);
    nghttp2_submit_window_update(c, NGHTTP2_FLAG_NONE, id, 100);
    pump(s, c);
    CHECK_MEM_EQ(ps_buf_head(&crec[id].body), ps_buf_size(&crec[id].body), "stuck");
    CHECK(ps_h2_stalled_since(s) == 0);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* A client stream id near 2^31: served, then GOAWAY NO_ERROR naming it. */
static void test_stream_id_exhaustion(void)
{
    reset_records();
    app_mode = APP_HELLO;
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "GET", "/");
    raw_start();
    uint32_t sid = 0x7fffffff - 100;
    raw_headers(sid, 1, &block);
    seen_t seen;
    CHECK_EQ(raw_run(s, &seen), 0);
    CHECK_EQ(seen.status[sid % NREC], 200);
    CHECK_EQ(seen.goaway, NGHTTP2_NO_ERROR);
    CHECK_EQ(seen.goaway_last, sid);
    CHECK(ps_h2_may_close(s));
    ps_buf_free(&block);
    ps_h2_session_free(s);
}

/* Frames on stream ids nghttp2 has forgotten (it keeps no closed streams),
 * which it would ignore without a word: HEADERS on a lower id than an
 * earlier stream's is GOAWAY PROTOCOL_ERROR (RFC 9113 5.1.1), on a stream
 * that ended both ways GOAWAY STREAM_CLOSED, on one the client reset
 * RST_STREAM STREAM_CLOSED (the connection goes on), and on one we reset
 * nothing (its frames may have been in flight). DATA, which nghttp2 drops
 * before any callback, the same: GOAWAY STREAM_CLOSED after both ways
 * ended, RST_STREAM STREAM_CLOSED after the client's reset. */
static void test_stale_streams(void)
{
    for (int kind = 0; kind < 6; kind++) {
        reset_records();
        app_mode = kind == 2 || kind == 5 ? APP_RECORD : APP_HELLO;
        ps_h2_session_t *s = server_new();
        ps_buf_t block = {0}, post = {0};
        hpack_request(&block, "GET", "/");
        hpack_request(&post, "POST", "/");
        hpack_lit(&post, 0, "content-length", "2", 1);
        raw_start();
        seen_t seen;
        int rc;
        if (kind == 0) {
            raw_headers(5, 1, &block);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.status[5], 200);
            raw_headers(3, 1, &block);
            rc = raw_run(s, &seen);
            CHECK_EQ(rc, -EPROTO);
            CHECK_EQ(seen.goaway, NGHTTP2_PROTOCOL_ERROR);
            CHECK_EQ(rec_of(3)->heads, 0);
        } else if (kind == 1) {
            raw_headers(1, 1, &block);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.status[1], 200);
            raw_headers(1, 1, &block);
            CHECK_EQ(raw_run(s, &seen), -EPROTO);
            CHECK_EQ(seen.goaway, NGHTTP2_STREAM_CLOSED);
        } else if (kind == 2) {
            raw_headers(1, 1, &block);
            raw_rst(1, NGHTTP2_CANCEL);
            CHECK_EQ(raw_run(s, &seen), 0);
            raw_headers(1, 1, &block);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.rst[1], NGHTTP2_STREAM_CLOSED);
            CHECK_EQ(seen.goaways, 0);
        } else if (kind == 4) {
            raw_headers(1, 1, &block);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.status[1], 200);
            frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "x", 1);
            CHECK_EQ(raw_run(s, &seen), -EPROTO);
            CHECK_EQ(seen.goaway, NGHTTP2_STREAM_CLOSED);
        } else if (kind == 5) {
            raw_headers(1, 0, &post);
            raw_rst(1, NGHTTP2_CANCEL);
            CHECK_EQ(raw_run(s, &seen), 0);
            frame(NGHTTP2_DATA, 0, 1, "12", 2);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.rst[1], NGHTTP2_STREAM_CLOSED);
            CHECK_EQ(seen.goaways, 0);
        } else {
            raw_headers(1, 0, &post);
            frame(NGHTTP2_DATA, 0, 1, "12345", 5);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.rst[1], NGHTTP2_PROTOCOL_ERROR);
            ps_buf_t trailer = {0};
            hpack_lit(&trailer, 0, "x-t", "1", 1);
            raw_headers(1, 1, &trailer);
            frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "6", 1);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.goaways, 0);
            CHECK_EQ(seen.nrst, 0);
            ps_buf_free(&trailer);
        }
        if (kind >= 2 && kind != 4) { /* the connection goes on */
            app_mode = APP_HELLO;
            raw_headers(3, 1, &block);
            CHECK_EQ(raw_run(s, &seen), 0);
            CHECK_EQ(seen.status[3], 200);
        }
        ps_buf_free(&block);
        ps_buf_free(&post);
        ps_h2_session_free(s);
    }
}

/* RFC 9113 6.9.2: a SETTINGS_INITIAL_WINDOW_SIZE change that takes an open
 * stream's send window past 2^31-1 is a connection error
 * FLOW_CONTROL_ERROR (nghttp2 alone resets the stream). */
static void test_initial_window_overflow(void)
{
    reset_records();
    app_mode = APP_RECORD;
    ps_h2_session_t *s = server_new();
    ps_buf_t block = {0};
    hpack_request(&block, "POST", "/");
    raw_start();
    raw_headers(1, 0, &block);
    uint32_t inc = 0x7fffffffu - 65535;
    uint8_t wu[4] = {(uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc};
    frame(NGHTTP2_WINDOW_UPDATE, 0, 1, wu, 4);
    seen_t seen;
    CHECK_EQ(raw_run(s, &seen), 0);
    CHECK_EQ(seen.goaways, 0);
    uint8_t iv[6] = {0, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0, 1, 0, 0}; /* 65536 */
    frame(NGHTTP2_SETTINGS, 0, 0, iv, 6);
    CHECK_EQ(raw_run(s, &seen), -EPROTO);
    CHECK_EQ(seen.goaway, NGHTTP2_FLOW_CONTROL_ERROR);
    ps_buf_free(&block);
    ps_h2_session_free(s);
}

static void test_graceful_shutdown(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/slow", NULL, 0, NULL, 0);
    pump(s, c);
    ps_h2_stream_t *st = rec_of(id)->st;
    ps_h2_shutdown(s);
    pump(s, c); /* notice, PING, its ACK, the final GOAWAY */
    CHECK_EQ(client_goaway, NGHTTP2_NO_ERROR);
    CHECK_EQ(client_goaway_last, id);
    CHECK(client_goaways >= 2);
    CHECK(!ps_h2_may_close(s)); /* stream 1 is still open */
    CHECK_EQ(ps_h2_respond(st, 200, NULL, 0, 0), 0);
    ps_h2_write(st, "bye", 3);
    ps_h2_end(st);
    pump(s, c);
    CHECK_MEM_EQ(ps_buf_head(&crec[id].body), ps_buf_size(&crec[id].body), "bye");
    CHECK(ps_h2_may_close(s));
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

/* A stream still held by the application when the connection goes. */
static void test_disconnect(void)
{
    reset_records();
    ps_h2_session_t *s = server_new();
    nghttp2_session *c = client_new(NULL, 0);
    int32_t id = client_request(c, "GET", "/", NULL, 0, NULL, 0);
    pump(s, c);
    CHECK(rec_of(id)->st != NULL);
    ps_h2_session_free(s);
    CHECK_EQ(rec_of(id)->close_why, PS_H2_CLOSE_DISCONNECT);
    CHECK_EQ(rec_of(id)->closes, 1);
    nghttp2_session_del(c);
}

static void test_h2c_upgrade(void)
{
    reset_records();
    app_mode = APP_HELLO;
    ps_h2_session_t *s = server_new();
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 10},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535}};
    uint8_t payload[64];
    ssize_t n = nghttp2_pack_settings_payload(payload, sizeof(payload), iv, 2);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char enc[128];
    size_t k = 0;
    for (ssize_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)payload[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)payload[i + 1] << 8;
        if (i + 2 < n)
            v |= payload[i + 2];
        enc[k++] = b64[v >> 18 & 63];
        enc[k++] = b64[v >> 12 & 63];
        if (i + 1 < n)
            enc[k++] = b64[v >> 6 & 63];
        if (i + 2 < n)
            enc[k++] = b64[v & 63];
    }
    ps_header_t hdrs[] = {{PS_SLICE_LIT("Host"), PS_SLICE_LIT("up.example")},
                          {PS_SLICE_LIT("Connection"), PS_SLICE_LIT("Upgrade, HTTP2-Settings")},
                          {PS_SLICE_LIT("Upgrade"), PS_SLICE_LIT("h2c")},
                          {PS_SLICE_LIT("HTTP2-Settings"), {enc, k}},
                          {PS_SLICE_LIT("X-Kept"), PS_SLICE_LIT("yes")}};
    ps_request_t req = {0};
    req.method = PS_SLICE_LIT("GET");
    req.target = PS_SLICE_LIT("/up");
    req.headers = hdrs;
    req.nheaders = 5;
    req.content_length = -1;
    CHECK(ps_h2_upgrade(s, PS_SLICE_LIT("!!bad!!"), &req) == NULL);
    ps_h2_stream_t *st = ps_h2_upgrade(s, (ps_slice_t){enc, k}, &req);
    CHECK(st != NULL);
    nghttp2_session *c = client_new(NULL, 0);
    CHECK_EQ(nghttp2_session_upgrade2(c, payload, (size_t)n, 0, NULL), 0);
    pump(s, c);
    srec_t *r = rec_of(1);
    CHECK_EQ(r->heads, 1);
    CHECK(strcmp(r->target, "/up") == 0);
    CHECK(strcmp(r->host, "up.example") == 0);
    CHECK_EQ(r->nheaders, 2); /* host and x-kept */
    CHECK_EQ(crec[1].status, 200);
    CHECK_MEM_EQ(ps_buf_head(&crec[1].body), ps_buf_size(&crec[1].body), "hello");
    CHECK_EQ(r->close_why, PS_H2_CLOSE_DONE);
    nghttp2_session_del(c);
    ps_h2_session_free(s);
}

int main(void)
{
    ps_h2_limits_default(&limits);
    test_preface();
    test_simple_get();
    test_post_flow_control();
    test_concurrent_streams();
    test_streaming_and_trailers();
    test_no_body_and_content_length();
    test_backpressure_and_sendfile();
    test_resets();
    test_connection_window_not_leaked();
    test_max_body();
    test_padded_upload();
    test_header_validation();
    test_header_list_limits();
    test_max_concurrent_streams();
    test_rapid_reset();
    test_continuation_flood();
    test_control_floods();
    test_zero_window_stall();
    test_stream_id_exhaustion();
    test_stale_streams();
    test_initial_window_overflow();
    test_graceful_shutdown();
    test_disconnect();
    test_h2c_upgrade();
    reset_records();
    ps_buf_free(&s_out);
    ps_buf_free(&raw);
    if (inflater)
        nghttp2_hd_inflate_del(inflater);
    return check_finish("test_http2");
}
