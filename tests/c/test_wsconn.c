/* csrc/serve/wsconn.c over a socketpair, without a network and without an
 * interpreter: a connection on one end, started as the listener starts an
 * accepted socket; on the other end the test writes a client's upgrade
 * request and masked frames by hand and reads the server's frames. The
 * handler is asynchronous, as the ASGI layer is: it accepts the upgrade
 * with ps_wsconn_accept and echoes every message.
 *
 * The loop runs on this thread, one non-waiting turn at a time, between
 * the client's writes and reads. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "conn_harness.h"
#include "serve/exchange.h"
#include "serve/worker.h"
#include "codec/ws.h"
#include "serve/wsconn.h"

/* ---- the application: an echo ------------------------------------------------------- */

static int accepted; /* marks app_data of an exchange that became a WebSocket */

static struct {
    int upgrades, messages, closes, disconnects;
    ps_ws_event_t close; /* the last close event (its data is not kept) */
    char close_reason[128];
} app;

static void on_events(ps_wsconn_t *wc, void *data)
{
    ps_exchange_t *x = data;
    ps_ws_event_t ev;
    while (ps_wsconn_next_event(wc, &ev)) {
        if (ev.type == PS_WS_EV_CLOSE) {
            app.closes++;
            app.close = ev;
            snprintf(app.close_reason, sizeof(app.close_reason), "%.*s", (int)ev.data.len,
                     ev.data.base);
            ps_wsconn_release(wc);
            x->app_data = NULL;
            return;
        }
        app.messages++;
        if (ev.data.len == 9 && memcmp(ev.data.base, "close4000", 9) == 0) {
            CHECK_EQ(ps_wsconn_close(wc, 4000, "bye", 3), 0); /* the server closes first */
            continue;
        }
        CHECK(ps_wsconn_send(wc, ev.type, ev.data.base, ev.data.len) >= 0);
    }
}

static void on_ws_writable(ps_wsconn_t *wc, void *data)
{
    PS_UNUSED(wc), PS_UNUSED(data);
}

static const ps_wsconn_ops_t echo_ops = {.on_events = on_events, .on_writable = on_ws_writable};

static void on_request(ps_exchange_t *x)
{
    ps_ws_handshake_t hs;
    int rc = ps_wsconn_check(x, &hs);
    if (rc < 0)
        return; /* refused with a 400 or 426 */
    if (rc == PS_WS_HS_NONE) {
        ps_header_t h = {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("5")};
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &h, 1, "plain", 5) >= 0);
        ps_exchange_end(x);
        return;
    }
    app.upgrades++;
    x->app_data = &accepted;
    CHECK_EQ(ps_wsconn_accept(x, &hs, (ps_slice_t){"", 0}, NULL, 0, &echo_ops, x), 0);
    CHECK(ps_wsconn_of(x) != NULL);
}

static void on_body(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static void on_writable(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

/* The connection ended before the application took the close event. */
static void on_disconnect(ps_exchange_t *x)
{
    app.disconnects++;
    if (x->app_data == &accepted) {
        ps_wsconn_t *wc = ps_wsconn_of(x);
        if (wc)
            ps_wsconn_release(wc);
        x->app_data = NULL;
    }
}

static void dispose(ps_exchange_t *x)
{
    CHECK(x->app_data == NULL);
}

static const ps_handler_t handler = {
    .on_request = on_request,
    .on_body = on_body,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .async = 1,
};

/* ---- the client ----------------------------------------------------------------------- */

static int cfd = -1;
static unsigned char in[1 << 16]; /* what the server sent, not parsed yet */
static size_t inlen;
static int eof;

/* RFC 6455's example key and its accept value. */
#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static const char upgrade_request[] = "GET /chat HTTP/1.1\r\nHost: example.com\r\n"
                                      "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                      "Sec-WebSocket-Key: " KEY "\r\n"
                                      "Sec-WebSocket-Version: 13\r\n\r\n";

/* Reads what arrived (one loop turn first); returns 1 when anything did. */
static int client_read(void)
{
    run_loop_once();
    int moved = 0;
    for (;;) {
        ssize_t n = read(cfd, in + inlen, sizeof(in) - inlen);
        if (n == 0)
            eof = 1;
        if (n <= 0)
            return moved;
        inlen += (size_t)n;
        moved = 1;
    }
}

/* Waits (about a second at most) until the server sent at least n bytes
 * or closed. */
static void wait_for(size_t n)
{
    for (int i = 0; i < 200 && inlen < n && !eof; i++)
        if (!client_read())
            poll(NULL, 0, 5);
}

/* A few turns with nothing awaited: what the server would still send. */
static void settle(void)
{
    for (int i = 0; i < 10; i++)
        client_read();
}

/* The first n bytes the server sent hold s. */
static int contains(size_t n, const char *s)
{
    return memmem(in, n, s, strlen(s)) != NULL;
}

static void client_write(const void *p, size_t n)
{
    CHECK_EQ(write(cfd, p, n), (long long)n);
}

#define MAX_PAYLOAD 1024 /* the longest frame a test sends or expects */

/* Writes a client frame: masked unless told, any first byte (FIN, RSV,
 * opcode), a payload of at most MAX_PAYLOAD bytes. */
static void send_frame(uint8_t first, const char *payload, size_t n, int masked)
{
    unsigned char f[4 + 4 + MAX_PAYLOAD];
    static const unsigned char mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    size_t len = 0;
    if (!CHECK(n <= MAX_PAYLOAD))
        return;
    f[len++] = first;
    f[len++] = (unsigned char)((masked ? 0x80 : 0) | (n < 126 ? n : 126));
    if (n >= 126) { /* the 16-bit length */
        f[len++] = (unsigned char)(n >> 8);
        f[len++] = (unsigned char)(n & 0xff);
    }
    if (masked) {
        memcpy(f + len, mask, 4);
        len += 4;
    }
    for (size_t i = 0; i < n; i++)
        f[len++] = (unsigned char)payload[i] ^ (masked ? mask[i % 4] : 0);
    client_write(f, len);
}

static void send_close(uint16_t code, const char *reason)
{
    char p[125];
    p[0] = (char)(code >> 8);
    p[1] = (char)(code & 0xff);
    size_t n = strlen(reason);
    memcpy(p + 2, reason, n);
    send_frame(0x88, p, 2 + n, 1);
}

typedef struct {
    uint8_t first; /* FIN, RSV and opcode */
    int masked;
    size_t len;
    unsigned char payload[MAX_PAYLOAD];
} frame_t;

/* Takes the next whole frame the server sent, waiting for it. Returns 1, or
 * 0 when none came. */
static int take_frame(frame_t *f)
{
    wait_for(2);
    if (inlen < 2)
        return 0;
    size_t len = in[1] & 0x7f, hdr = 2;
    if (len == 126) {
        wait_for(4);
        len = (size_t)in[2] << 8 | in[3];
        hdr = 4;
    }
    if (!CHECK(len <= sizeof(f->payload)))
        return 0;
    wait_for(hdr + len);
    if (inlen < hdr + len)
        return 0;
    f->first = in[0];
    f->masked = (in[1] & 0x80) != 0;
    f->len = len;
    memcpy(f->payload, in + hdr, len);
    memmove(in, in + hdr + len, inlen - hdr - len);
    inlen -= hdr + len;
    return 1;
}

/* The client connects and upgrades; the 101 head is read and checked. */
static void client_open(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("client_open");
        exit(2);
    }
    cfd = sv[1];
    inlen = 0;
    eof = 0;
    memset(&app, 0, sizeof(app));
    client_write(upgrade_request, sizeof(upgrade_request) - 1);
    if (start_conn(sv[0]) < 0) {
        perror("start_conn");
        exit(2);
    }
    const char *end = NULL;
    for (int i = 0; i < 200 && end == NULL && !eof; i++) {
        if (!client_read())
            poll(NULL, 0, 5);
        end = memmem(in, inlen, "\r\n\r\n", 4);
    }
    CHECK(end != NULL);
    if (end == NULL)
        return;
    size_t head = (size_t)(end + 4 - (const char *)in);
    CHECK(strncmp((const char *)in, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0);
    CHECK(contains(head, "\r\nSec-WebSocket-Accept: " ACCEPT "\r\n"));
    CHECK(contains(head, "\r\nUpgrade: websocket\r\n"));
    memmove(in, in + head, inlen - head);
    inlen -= head;
}

/* The client goes away; the connection must close and be freed. */
static void client_close(void)
{
    close(cfd);
    cfd = -1;
    for (int i = 0; i < 10 && live_conns() > 0; i++)
        run_loop_once();
    CHECK_EQ(live_conns(), 0);
}

/* ---- the tests ------------------------------------------------------------------------ */

static void test_upgrade_answers_101_with_the_accept_key(void)
{
    client_open();
    CHECK_EQ(app.upgrades, 1);
    settle();
    CHECK_EQ(inlen, 0); /* nothing after the head until the client speaks */
    CHECK(!eof);
    client_close();
    CHECK_EQ(app.disconnects, 1); /* the application heard the client leave */
}

static void test_text_message_is_echoed(void)
{
    frame_t f;
    client_open();
    send_frame(0x81, "hello", 5, 1);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x81); /* FIN, text */
    CHECK(!f.masked);
    CHECK_MEM_EQ(f.payload, f.len, "hello");
    CHECK_EQ(app.messages, 1);
    client_close();
}

static void test_ping_is_answered_with_pong(void)
{
    frame_t f;
    client_open();
    send_frame(0x89, "are you there", 13, 1);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x8a); /* FIN, pong */
    CHECK_MEM_EQ(f.payload, f.len, "are you there");
    CHECK_EQ(app.messages, 0); /* the session answers pings itself */
    client_close();
}

/* The client's close is echoed with its code, then the server half-closes
 * and the application hears the code. */
static void test_client_close_handshake_keeps_the_code(void)
{
    frame_t f;
    client_open();
    send_close(4001, "done");
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x88);
    CHECK(f.len >= 2 && (f.payload[0] << 8 | f.payload[1]) == 4001);
    wait_for(1);
    CHECK(eof); /* the server shut its side after the close handshake */
    CHECK_EQ(inlen, 0);
    CHECK_EQ(app.closes, 1);
    CHECK_EQ(app.close.origin, PS_WS_CLOSE_PEER);
    CHECK_EQ(app.close.code, 4001);
    CHECK(strcmp(app.close_reason, "done") == 0);
    client_close();
}

/* The application closes with a code and reason; the client answers and
 * the server ends the connection. */
static void test_server_close_handshake_sends_code_and_reason(void)
{
    frame_t f;
    client_open();
    send_frame(0x81, "close4000", 9, 1);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x88);
    CHECK(f.len == 5 && (f.payload[0] << 8 | f.payload[1]) == 4000);
    CHECK(f.len == 5 && memcmp(f.payload + 2, "bye", 3) == 0);
    CHECK(!eof); /* waiting for the client's close */
    send_close(4000, "");
    wait_for(1);
    CHECK(eof);
    CHECK_EQ(app.closes, 1);
    CHECK_EQ(app.close.code, 4000);
    client_close();
}

/* A binary message long enough for a 16-bit length comes back unchanged,
 * with the same length form. */
static void test_binary_message_with_16_bit_length_is_echoed(void)
{
    char msg[300];
    frame_t f;
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (char)i;
    client_open();
    send_frame(0x82, msg, sizeof(msg), 1);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x82);
    CHECK_EQ(f.len, sizeof(msg));
    CHECK(f.len == sizeof(msg) && memcmp(f.payload, msg, sizeof(msg)) == 0);
    client_close();
}

/* A text message in three frames, with a ping between two of them, comes
 * back whole, after the pong. */
static void test_fragmented_message_is_reassembled(void)
{
    frame_t f;
    client_open();
    send_frame(0x01, "hel", 3, 1); /* text, not final */
    send_frame(0x89, "p", 1, 1);   /* a control frame may come between */
    send_frame(0x00, "lo ", 3, 1); /* continuation */
    send_frame(0x80, "there", 5, 1);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x8a);
    CHECK_MEM_EQ(f.payload, f.len, "p");
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x81);
    CHECK_MEM_EQ(f.payload, f.len, "hello there");
    CHECK_EQ(app.messages, 1);
    client_close();
}

/* Frames a server must refuse: each fails the connection with close 1002
 * and nothing reaches the application but the close. */
static void fails_with_1002(uint8_t first, const char *payload, size_t n, int masked)
{
    frame_t f;
    client_open();
    send_frame(first, payload, n, masked);
    CHECK(take_frame(&f));
    CHECK_EQ(f.first, 0x88);
    CHECK(f.len >= 2 && (f.payload[0] << 8 | f.payload[1]) == 1002);
    wait_for(1);
    CHECK(eof);
    CHECK_EQ(app.messages, 0);
    CHECK_EQ(app.closes, 1);
    CHECK_EQ(app.close.origin, PS_WS_CLOSE_FAILED);
    CHECK_EQ(app.close.code, 1002);
    client_close();
}

static void test_invalid_frames_get_close_1002(void)
{
    fails_with_1002(0x83, "x", 1, 1);     /* a reserved opcode */
    fails_with_1002(0xc1, "x", 1, 1);     /* RSV1 without an extension */
    fails_with_1002(0x81, "hello", 5, 0); /* a client frame that is not masked */
    fails_with_1002(0x80, "x", 1, 1);     /* a continuation with no message */
}

/* A handshake with another version is refused with 426 and the version the
 * server speaks, and never reaches the application as a WebSocket. */
static void test_wrong_version_is_refused_with_426(void)
{
    static const char req[] = "GET /chat HTTP/1.1\r\nHost: example.com\r\n"
                              "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Key: " KEY "\r\n"
                              "Sec-WebSocket-Version: 8\r\n\r\n";
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("socketpair");
        exit(2);
    }
    cfd = sv[1];
    inlen = 0;
    eof = 0;
    memset(&app, 0, sizeof(app));
    client_write(req, sizeof(req) - 1);
    if (start_conn(sv[0]) < 0) {
        perror("start_conn");
        exit(2);
    }
    wait_for(sizeof(in));
    CHECK(eof);
    CHECK(inlen > 13 && strncmp((const char *)in, "HTTP/1.1 426 ", 13) == 0);
    CHECK(contains(inlen, "\r\nSec-WebSocket-Version: 13\r\n"));
    CHECK_EQ(app.upgrades, 0);
    client_close();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in the Python process that runs the worker */
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
        .ws_enabled = 1,
        .ws_max_size = 1 << 20,
        .ws_max_queue = 32,
    };
    if (ps_worker_init(&worker, &cfg, &handler, NULL, NULL, NULL) < 0) {
        fprintf(stderr, "test_wsconn: cannot make a worker\n");
        return 2;
    }
    test_upgrade_answers_101_with_the_accept_key();
    test_text_message_is_echoed();
    test_ping_is_answered_with_pong();
    test_client_close_handshake_keeps_the_code();
    test_server_close_handshake_sends_code_and_reason();
    test_binary_message_with_16_bit_length_is_echoed();
    test_fragmented_message_is_reassembled();
    test_invalid_frames_get_close_1002();
    test_wrong_version_is_refused_with_426();
    run_loop_once();
    ps_worker_free(&worker);
    return check_finish("test_wsconn");
}
