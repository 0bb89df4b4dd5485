/* csrc/serve/h2conn.c over a socketpair, without a network and without an
 * interpreter: a connection on one end, started as the listener starts an
 * accepted socket, an nghttp2 client session on the other end (or frames
 * written by hand), and an asynchronous handler that answers through the
 * ps_exchange_* calls only, as the ASGI layer does.
 *
 * The loop runs on this thread, one non-waiting turn at a time, between
 * the client's writes and reads (see pump()). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "check.h"
#include "base/common.h"
#include "conn_harness.h"
#include "serve/exchange.h"
#include "codec/http2.h"
#include "serve/worker.h"

/* ---- the application -------------------------------------------------------------- */

#define BIG_LEN 100000
static char big[BIG_LEN]; /* the /big response: a pattern the client checks */

static int in_progress; /* marks app_data of an exchange whose response is not over */

static struct {
    int requests, disconnects, disposed; /* disposed: of HTTP/2 streams */
    int live_at_release;                 /* /hold exchanges still open when /release arrived */
    ps_exchange_t *held;                 /* /hold's exchange, answered by /release */
    ps_exchange_t *big;                  /* /big's exchange, written as the window allows */
    size_t big_off;
    uint64_t body_read; /* /size: request body bytes the application read */
    int http2;          /* the last request's exchange said HTTP/2 */
} app;

static void respond(ps_exchange_t *x, const char *body)
{
    char length[24];
    snprintf(length, sizeof(length), "%zu", strlen(body));
    ps_header_t h = {PS_SLICE_LIT("Content-Length"), {length, strlen(length)}};
    CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &h, 1, body, strlen(body)) >= 0);
    ps_exchange_end(x);
    x->app_data = NULL;
}

/* Writes /big's body a piece at a time until the stream pushes back. */
static void write_big(ps_exchange_t *x)
{
    size_t piece = x->write_piece ? x->write_piece : BIG_LEN;
    while (app.big_off < BIG_LEN) {
        size_t n = PS_MIN(piece, BIG_LEN - app.big_off);
        int rc = ps_exchange_write(x, big + app.big_off, n);
        if (rc < 0)
            return;
        app.big_off += n;
        if (rc == PS_WRITE_PENDING)
            return; /* on_writable brings the rest */
    }
    ps_exchange_end(x);
    x->app_data = NULL;
    app.big = NULL;
}

/* /size: reads the body as it arrives, then answers its size. */
static void read_body(ps_exchange_t *x)
{
    while (ps_exchange_body_want(x) == 1) {
        size_t n = ps_buf_size(x->body);
        app.body_read += n;
        ps_buf_consume(x->body, n);
        if (x->req->message_complete && ps_buf_size(x->body) == 0) {
            char text[24];
            snprintf(text, sizeof(text), "%llu", (unsigned long long)app.body_read);
            respond(x, text);
            return;
        }
    }
}

/*  /         "hello"
 *  /hold     no answer until /release comes on another stream
 *  /release  "released", then "held" for /hold
 *  /big      BIG_LEN bytes, written as flow control allows
 *  /size     the size of the request body, read as it arrives */
static void on_request(ps_exchange_t *x)
{
    ps_slice_t t = x->req->target;
    app.requests++;
    app.http2 = x->http2;
    x->app_data = &in_progress;
    if (PS_SLICE_IEQ(t, "/hold")) {
        app.held = x;
    } else if (PS_SLICE_IEQ(t, "/release")) {
        app.live_at_release = app.held != NULL;
        respond(x, "released");
        if (app.held) {
            respond(app.held, "held");
            app.held = NULL;
        }
    } else if (PS_SLICE_IEQ(t, "/big")) {
        app.big = x;
        app.big_off = 0;
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), NULL, 0, "", 0) >= 0);
        write_big(x);
    } else if (PS_SLICE_IEQ(t, "/size")) {
        app.body_read = 0;
        read_body(x);
    } else {
        respond(x, "hello");
    }
}

static void on_body(ps_exchange_t *x)
{
    if (x->app_data == &in_progress)
        read_body(x);
}

static void on_writable(ps_exchange_t *x)
{
    if (x == app.big)
        write_big(x);
}

static void on_disconnect(ps_exchange_t *x)
{
    app.disconnects++;
    if (x == app.held)
        app.held = NULL;
    if (x == app.big)
        app.big = NULL;
    x->app_data = NULL;
}

static void dispose(ps_exchange_t *x)
{
    app.disposed += x->http2;
    CHECK(x->app_data == NULL); /* every response ended, or the layer heard it was lost */
}

static const ps_handler_t handler = {
    .on_request = on_request,
    .on_body = on_body,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .async = 1,
};

/* ---- the client --------------------------------------------------------------------- */

#define NSTREAMS 8
#define BODY_MAX (BIG_LEN + 1)

typedef struct {
    int status, closed;
    uint32_t close_code;
    size_t len;
    char body[BODY_MAX];
} stream_rec_t;

typedef struct {
    int fd;
    nghttp2_session *ng;
    int eof;
    int first_frame; /* the type of the server's first frame, -1 before it */
    int settings, settings_acks, goaways, rsts;
    int stream_window_updates; /* WINDOW_UPDATE frames for a stream, not the connection */
    ps_buf_t out;              /* what the client could not write yet */
    uint32_t goaway_code;
    stream_rec_t st[NSTREAMS];
} client_t;

static client_t cl;

static stream_rec_t *rec(int32_t id)
{
    return &cl.st[(id / 2) % NSTREAMS];
}

static int c_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                       size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(flags), PS_UNUSED(ud), PS_UNUSED(vlen);
    if (nlen == 7 && memcmp(name, ":status", 7) == 0)
        rec(frame->hd.stream_id)->status = atoi((const char *)value);
    return 0;
}

static int c_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                     size_t len, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(flags), PS_UNUSED(ud);
    stream_rec_t *r = rec(id);
    size_t n = PS_MIN(len, BODY_MAX - r->len);
    memcpy(r->body + r->len, data, n);
    r->len += n;
    return 0;
}

static int c_on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(ud);
    rec(id)->closed = 1;
    rec(id)->close_code = code;
    return 0;
}

static int c_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(ud);
    if (cl.first_frame < 0)
        cl.first_frame = frame->hd.type;
    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            cl.settings_acks++;
        else
            cl.settings++;
        break;
    case NGHTTP2_GOAWAY:
        cl.goaways++;
        cl.goaway_code = frame->goaway.error_code;
        break;
    case NGHTTP2_RST_STREAM:
        cl.rsts++;
        break;
    case NGHTTP2_WINDOW_UPDATE:
        cl.stream_window_updates += frame->hd.stream_id != 0;
        break;
    }
    return 0;
}

/* A request body sent from memory. */
static const char *upload;
static size_t upload_left;

static ssize_t c_read_upload(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    PS_UNUSED(ng), PS_UNUSED(id), PS_UNUSED(src), PS_UNUSED(ud);
    size_t n = PS_MIN(upload_left, length);
    memcpy(buf, upload, n);
    upload += n;
    upload_left -= n;
    if (upload_left == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* A socketpair: the test's end in cl.fd, a connection on the other, which
 * reads `first` (an HTTP/1 request, or nothing) as soon as it starts. */
static void client_connect(const char *first)
{
    int sv[2];
    memset(&cl, 0, sizeof(cl));
    cl.first_frame = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("socketpair");
        exit(2);
    }
    cl.fd = sv[1];
    CHECK_EQ(write(cl.fd, first, strlen(first)), (long long)strlen(first));
    if (start_conn(sv[0]) < 0) {
        perror("start_conn");
        exit(2);
    }
}

/* The client's HTTP/2 session; its SETTINGS (iv) are queued, not sent yet. */
static void client_session(const nghttp2_settings_entry *iv, size_t niv, int manual_window)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c_on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c_on_frame_recv);
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, manual_window);
    nghttp2_session_client_new2(&cl.ng, cbs, NULL, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(cl.ng, NGHTTP2_FLAG_NONE, iv, niv);
}

/* A connection and a client that speaks HTTP/2 with prior knowledge. */
static void client_open(const nghttp2_settings_entry *iv, size_t niv, int manual_window)
{
    client_connect("");
    client_session(iv, niv, manual_window);
}

/* The client goes away; the connection must close and be freed. */
static void client_close(void)
{
    nghttp2_session_del(cl.ng);
    ps_buf_free(&cl.out);
    close(cl.fd);
    for (int i = 0; i < 10 && live_conns() > 0; i++)
        run_loop_once();
    CHECK_EQ(live_conns(), 0);
}

static int32_t request(const char *method, const char *path, const char *body, size_t len)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"example.com", 10, 11, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
    };
    if (body == NULL)
        return nghttp2_submit_request(cl.ng, NULL, nv, PS_ARRAY_LEN(nv), NULL, NULL);
    upload = body;
    upload_left = len;
    nghttp2_data_provider prd = {.read_callback = c_read_upload};
    return nghttp2_submit_request(cl.ng, NULL, nv, PS_ARRAY_LEN(nv), &prd, NULL);
}

/* Writes what the client has to send, as far as the socket takes it; the
 * rest waits in cl.out (at most about 64 KiB is taken from the session). */
static int client_send(void)
{
    int moved = 0;
    const uint8_t *p;
    ssize_t n;
    while (ps_buf_size(&cl.out) < (1 << 16) && (n = nghttp2_session_mem_send(cl.ng, &p)) > 0)
        CHECK_EQ(ps_buf_append(&cl.out, p, (size_t)n), 0);
    while (ps_buf_size(&cl.out) > 0) {
        ssize_t w = write(cl.fd, ps_buf_head(&cl.out), ps_buf_size(&cl.out));
        if (w <= 0)
            break;
        moved = 1;
        ps_buf_consume(&cl.out, (size_t)w);
    }
    return moved;
}

/* Reads what the server wrote and gives it to the client session. */
static int client_recv(void)
{
    char buf[16384];
    int moved = 0;
    for (;;) {
        ssize_t n = read(cl.fd, buf, sizeof(buf));
        if (n == 0)
            cl.eof = 1;
        if (n <= 0)
            return moved;
        moved = 1;
        CHECK_EQ(nghttp2_session_mem_recv(cl.ng, (const uint8_t *)buf, (size_t)n), n);
    }
}

/* Moves bytes both ways, a loop turn between, until *count reaches want,
 * the server closed, or about a second passed. Returns whether it did. */
static int pump_to(const int *count, int want)
{
    for (int i = 0; i < 200 && *count < want && !cl.eof; i++) {
        int moved = client_send();
        run_loop_once();
        moved |= client_recv();
        if (!moved) {
            struct pollfd pfd = {cl.fd, POLLIN, 0};
            poll(&pfd, 1, 5);
        }
    }
    return *count >= want;
}

/* Until a flag or count is non-zero. */
static int pump(const int *flag)
{
    return pump_to(flag, 1);
}

/* One exchange of bytes both ways, a loop turn between. */
static void turn(void)
{
    client_send();
    run_loop_once();
    client_recv();
}

/* A few turns with nothing awaited: what the server would still send. */
static void settle(void)
{
    for (int i = 0; i < 10; i++)
        turn();
}

static const nghttp2_settings_entry no_push[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};

/* ---- the tests ---------------------------------------------------------------------- */

static void test_preface_and_settings_are_exchanged(void)
{
    client_open(no_push, 1, 0);
    CHECK(pump(&cl.settings_acks));
    CHECK_EQ(cl.first_frame, NGHTTP2_SETTINGS); /* the server's preface */
    CHECK_EQ(cl.settings, 1);
    CHECK_EQ(cl.settings_acks, 1); /* ours was acknowledged */
    settle();
    CHECK_EQ(cl.goaways, 0);
    CHECK(!cl.eof);
    CHECK_EQ(live_conns(), 1);
    client_close();
}

static void test_get_is_answered_on_stream_1(void)
{
    int before = app.requests;
    client_open(no_push, 1, 0);
    int32_t id = request("GET", "/", NULL, 0);
    CHECK_EQ(id, 1);
    CHECK(pump(&rec(id)->closed));
    CHECK_EQ(rec(id)->status, 200);
    CHECK_MEM_EQ(rec(id)->body, rec(id)->len, "hello");
    CHECK_EQ(rec(id)->close_code, NGHTTP2_NO_ERROR);
    CHECK_EQ(app.requests, before + 1);
    CHECK(app.http2);
    client_close();
}

/* Stream 1 waits in the application while stream 3 is served; the answer
 * to 3 releases 1. */
static void test_two_streams_run_side_by_side(void)
{
    client_open(no_push, 1, 0);
    int32_t hold = request("GET", "/hold", NULL, 0);
    int32_t release = request("GET", "/release", NULL, 0);
    CHECK_EQ(hold, 1);
    CHECK_EQ(release, 3);
    CHECK(pump(&rec(hold)->closed));
    CHECK(rec(release)->closed);
    CHECK_EQ(app.live_at_release, 1);
    CHECK_EQ(rec(hold)->status, 200);
    CHECK_MEM_EQ(rec(hold)->body, rec(hold)->len, "held");
    CHECK_EQ(rec(release)->status, 200);
    CHECK_MEM_EQ(rec(release)->body, rec(release)->len, "released");
    client_close();
}

/* A client's RST_STREAM reaches the application as on_disconnect of that
 * stream only: the connection serves the next stream. */
static void test_client_reset_disconnects_one_stream(void)
{
    client_open(no_push, 1, 0);
    int requests = app.requests, disconnects = app.disconnects;
    int32_t hold = request("GET", "/hold", NULL, 0);
    CHECK(pump_to(&app.requests, requests + 1));
    CHECK(app.held != NULL);
    nghttp2_submit_rst_stream(cl.ng, NGHTTP2_FLAG_NONE, hold, NGHTTP2_CANCEL);
    CHECK(pump_to(&app.disconnects, disconnects + 1));
    settle();
    CHECK_EQ(app.disconnects, disconnects + 1); /* that stream's only */
    CHECK(app.held == NULL);
    int32_t next = request("GET", "/", NULL, 0);
    CHECK(pump(&rec(next)->closed));
    CHECK_EQ(rec(next)->status, 200);
    CHECK_MEM_EQ(rec(next)->body, rec(next)->len, "hello");
    CHECK_EQ(cl.goaways, 0);
    client_close();
}

/* The preface must be followed by a SETTINGS frame: anything else ends the
 * connection with GOAWAY PROTOCOL_ERROR, and the socket closes. */
static void test_bad_preface_gets_goaway(void)
{
    int sv[2], requests = app.requests;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0 ||
        start_conn(sv[0]) < 0) {
        perror("test_bad_preface_gets_goaway");
        exit(2);
    }
    static const char bad[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                              "\x00\x00\x08\x06\x00\x00\x00\x00\x00" /* PING, not SETTINGS */
                              "12345678";
    CHECK_EQ(write(sv[1], bad, sizeof(bad) - 1), (long long)sizeof(bad) - 1);
    unsigned char out[4096];
    size_t len = 0;
    int eof = 0;
    for (int i = 0; i < 200 && !eof && len < sizeof(out); i++) {
        run_loop_once();
        ssize_t n = read(sv[1], out + len, sizeof(out) - len);
        if (n > 0)
            len += (size_t)n;
        else if (n == 0)
            eof = 1;
        else
            poll(NULL, 0, 5);
    }
    CHECK(eof);
    /* The frames the server sent: a GOAWAY with PROTOCOL_ERROR among them. */
    int goaway = 0;
    uint32_t code = 0xffffffff;
    for (size_t off = 0; off + 9 <= len;) {
        size_t flen = (size_t)out[off] << 16 | (size_t)out[off + 1] << 8 | out[off + 2];
        if (off + 9 + flen > len)
            break;
        if (out[off + 3] == NGHTTP2_GOAWAY && flen >= 8) {
            const unsigned char *p = out + off + 9 + 4;
            goaway++;
            code = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        }
        off += 9 + flen;
    }
    CHECK_EQ(goaway, 1);
    CHECK_EQ(code, NGHTTP2_PROTOCOL_ERROR);
    CHECK_EQ(app.requests, requests); /* nothing reached the application */
    close(sv[1]);
    for (int i = 0; i < 10 && live_conns() > 0; i++)
        run_loop_once();
    CHECK_EQ(live_conns(), 0);
}

/* base64url without padding (RFC 7540 3.2.1's HTTP2-Settings). */
static size_t base64url(const uint8_t *p, size_t n, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t len = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        size_t chars = n - i >= 3 ? 4 : n - i + 1;
        for (size_t k = 0; k < chars; k++)
            out[len++] = abc[(v >> (18 - 6 * k)) & 63];
    }
    out[len] = '\0';
    return len;
}

/* An HTTP/1.1 request with `Upgrade: h2c` is answered 101, then over
 * HTTP/2 as stream 1, and the connection goes on in HTTP/2. */
static void test_h2c_upgrade_answers_on_stream_1(void)
{
    uint8_t payload[64];
    char settings[128], req[512];
    ssize_t plen = nghttp2_pack_settings_payload(payload, sizeof(payload), no_push, 1);
    CHECK(plen > 0);
    base64url(payload, (size_t)plen, settings);
    snprintf(req, sizeof(req),
             "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, HTTP2-Settings\r\n"
             "Upgrade: h2c\r\nHTTP2-Settings: %s\r\n\r\n",
             settings);
    client_connect(req);
    char in[4096];
    size_t len = 0;
    const char *end = NULL;
    for (int i = 0; i < 200 && end == NULL && len < sizeof(in); i++) {
        run_loop_once();
        ssize_t n = read(cl.fd, in + len, sizeof(in) - len);
        if (n > 0)
            len += (size_t)n;
        else
            poll(NULL, 0, 5);
        end = memmem(in, len, "\r\n\r\n", 4);
    }
    CHECK(end != NULL);
    if (end == NULL) {
        close(cl.fd);
        return;
    }
    CHECK(strncmp(in, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0);
    size_t head = (size_t)(end + 4 - in);
    CHECK(memmem(in, head, "\r\nUpgrade: h2c\r\n", 16) != NULL);
    client_session(no_push, 1, 0);
    CHECK_EQ(nghttp2_session_upgrade2(cl.ng, payload, (size_t)plen, 0, NULL), 0);
    if (len > head) /* the server's frames right after the 101 */
        CHECK_EQ(nghttp2_session_mem_recv(cl.ng, (const uint8_t *)in + head, len - head),
                 (long long)(len - head));
    CHECK(pump(&rec(1)->closed));
    CHECK_EQ(rec(1)->status, 200);
    CHECK_MEM_EQ(rec(1)->body, rec(1)->len, "hello");
    int32_t next = request("GET", "/", NULL, 0);
    CHECK_EQ(next, 3);
    CHECK(pump(&rec(next)->closed));
    CHECK_MEM_EQ(rec(next)->body, rec(next)->len, "hello");
    CHECK_EQ(cl.goaways, 0);
    client_close();
}

/* The server sends no more than the client's window, and the rest once a
 * WINDOW_UPDATE opens it. */
static void test_response_waits_for_window_update(void)
{
    static const nghttp2_settings_entry small[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1000}};
    client_open(small, 2, 1);
    int32_t id = request("GET", "/big", NULL, 0);
    CHECK(pump(&cl.settings_acks));
    for (int i = 0; i < 200 && rec(id)->len < 1000; i++) {
        turn();
        poll(NULL, 0, 1);
    }
    settle();
    CHECK_EQ(rec(id)->len, 1000); /* the window, not a byte more */
    CHECK(!rec(id)->closed);
    CHECK(app.big != NULL); /* the application waits for on_writable */
    nghttp2_submit_window_update(cl.ng, NGHTTP2_FLAG_NONE, id, BIG_LEN);
    nghttp2_submit_window_update(cl.ng, NGHTTP2_FLAG_NONE, 0, BIG_LEN); /* the connection's */
    CHECK(pump(&rec(id)->closed));
    CHECK_EQ(rec(id)->status, 200);
    CHECK_EQ(rec(id)->len, BIG_LEN);
    CHECK(memcmp(rec(id)->body, big, BIG_LEN) == 0);
    CHECK(app.big == NULL);
    client_close();
}

/* A request body larger than the server's initial window arrives whole:
 * the server opens the window as the application reads. */
static void test_request_body_gets_window_updates(void)
{
    static char body[300 * 1024];
    memset(body, 'b', sizeof(body));
    client_open(no_push, 1, 0);
    int32_t id = request("POST", "/size", body, sizeof(body));
    CHECK(pump(&rec(id)->closed));
    CHECK_EQ(rec(id)->status, 200);
    CHECK_MEM_EQ(rec(id)->body, rec(id)->len, "307200");
    CHECK(cl.stream_window_updates > 0); /* 300 KiB went through a 256 KiB window */
    client_close();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in the Python process that runs the worker */
    for (size_t i = 0; i < BIG_LEN; i++)
        big[i] = (char)('a' + i % 26);
    ps_config_t cfg = {
        .limits = {.max_request_line = 8190,
                   .max_fields = 100,
                   .max_field_size = 8190,
                   .max_body = 1 << 20},
        .timeout_keep_alive = 5,
        .timeout_request_header = 5,
        .timeout_request_body = 5,
        .body_spool_threshold = 1 << 20,
        .graceful_timeout = 1,
        .limit_connections = 100,
        .h2c = 1,
        .h2c_upgrade = 1,
    };
    ps_h2_limits_default(&cfg.h2);
    if (ps_worker_init(&worker, &cfg, &handler, NULL, NULL, NULL) < 0) {
        fprintf(stderr, "test_h2conn: cannot make a worker\n");
        return 2;
    }
    test_preface_and_settings_are_exchanged();
    test_get_is_answered_on_stream_1();
    test_two_streams_run_side_by_side();
    test_client_reset_disconnects_one_stream();
    test_bad_preface_gets_goaway();
    test_h2c_upgrade_answers_on_stream_1();
    test_response_waits_for_window_update();
    test_request_body_gets_window_updates();
    run_loop_once();
    CHECK_EQ(app.disposed, app.requests); /* every stream's exchange was disposed, once */
    ps_worker_free(&worker);
    return check_finish("test_h2conn");
}
