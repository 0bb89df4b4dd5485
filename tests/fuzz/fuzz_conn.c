/* libFuzzer driver for a whole connection (csrc/serve/sock.c with the protocols over it,
 * h1conn.c, h2conn.c and wsconn.c): a client's bytes through a socketpair into a connection on a
 * real libev loop, served by an asynchronous application stub (as the ASGI
 * layer serves: no interpreter). The input reaches every protocol a plain
 * listener speaks: HTTP/1 requests and pipelines, HTTP/2 by prior
 * knowledge (the client preface), `Upgrade: h2c`, and WebSocket upgrades
 * followed by frames. FUZZ_TARGETS=conn in scripts/fuzz.sh.
 *
 * Byte 0 says how the rest arrives: bits 0-5 the piece size (0: all at
 * once, else 1..63 bytes per write, a loop turn after each), bit 6 whether
 * the client half-closes (shutdown) before it closes, bit 7 whether it
 * reads the answers as they come or only at the end. Checked:
 *   - the first answer is HTTP/1 ("HTTP/1.") unless the input opened with
 *     the HTTP/2 preface, and then it is the server's SETTINGS frame;
 *   - after a half-close the server ends the connection within a few loop
 *     turns (nothing waits for a client that can send no more);
 *   - once the client is gone every connection is closed and freed within
 *     a few turns, and (ASan) nothing leaks.
 * The application, by target: /body reads the body as it arrives and
 * answers its size; /stream answers in pieces and ends with trailers;
 * /early sends 103 first; /reject, /abort and /error refuse; a WebSocket
 * upgrade is accepted and its messages echoed (one closes, from the
 * server's side); anything else is "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"
#include "conn_harness.h"
#include "serve/exchange.h"
#include "codec/http2.h"
#include "serve/reqid.h"
#include "serve/worker.h"
#include "serve/wsconn.h"
#include "fuzz.h"

/* ---- the application ---------------------------------------------------------------- */

static int in_progress; /* marks app_data of an exchange whose response is not over */
static int accepted;    /* ... of an exchange that became a WebSocket */

static void finish(ps_exchange_t *x, const char *body)
{
    ps_header_t h = {PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain")};
    x->app_data = NULL;
    if (ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &h, 1, body, strlen(body)) >= 0)
        ps_exchange_end(x);
}

static void read_body(ps_exchange_t *x)
{
    while (ps_exchange_body_want(x) == 1) {
        ps_buf_consume(x->body, ps_buf_size(x->body));
        if (x->req->message_complete) {
            char text[24];
            snprintf(text, sizeof(text), "%llu", (unsigned long long)x->req->body_received);
            finish(x, text);
            return;
        }
    }
}

static void on_events(ps_wsconn_t *wc, void *data)
{
    ps_exchange_t *x = data;
    ps_ws_event_t ev;
    while (ps_wsconn_next_event(wc, &ev)) {
        if (ev.type == PS_WS_EV_CLOSE) {
            ps_wsconn_release(wc);
            x->app_data = NULL;
            return;
        }
        if (ev.data.len == 5 && memcmp(ev.data.base, "close", 5) == 0)
            ps_wsconn_close(wc, 4000, "bye", 3);
        else if (ps_wsconn_send(wc, ev.type, ev.data.base, ev.data.len) < 0)
            return;
    }
}

static void on_ws_writable(ps_wsconn_t *wc, void *data)
{
    PS_UNUSED(wc), PS_UNUSED(data);
}

static const ps_wsconn_ops_t echo_ops = {.on_events = on_events, .on_writable = on_ws_writable};

static void upgrade(ps_exchange_t *x, const ps_ws_handshake_t *hs)
{
    x->app_data = &accepted;
    ps_slice_t sub = hs->nsubprotocols ? hs->subprotocols[0] : (ps_slice_t){"", 0};
    if (ps_wsconn_accept(x, hs, sub, NULL, 0, &echo_ops, x) < 0) {
        x->app_data = NULL;
        ps_exchange_send_error(x, 500);
    }
}

static void on_request(ps_exchange_t *x)
{
    ps_slice_t t = x->req->target;
    ps_ws_handshake_t hs;
    int ws = x->req->upgrade ? ps_wsconn_check(x, &hs) : PS_WS_HS_NONE;
    if (ws < 0)
        return; /* refused with a 400 or 426 */
    if (ws == PS_WS_HS_OK) {
        upgrade(x, &hs);
        return;
    }
    x->app_data = &in_progress;
    if (PS_SLICE_IEQ(t, "/body")) {
        read_body(x);
    } else if (PS_SLICE_IEQ(t, "/stream")) {
        ps_header_t trailer = {PS_SLICE_LIT("X-Sum"), PS_SLICE_LIT("1")};
        x->app_data = NULL;
        if (ps_exchange_start(x, PS_SLICE_LIT("200 OK"), NULL, 0, "one ", 4) >= 0 &&
            ps_exchange_write(x, "two", 3) >= 0)
            ps_exchange_end_with_trailers(x, &trailer, 1);
    } else if (PS_SLICE_IEQ(t, "/early")) {
        ps_header_t link = {PS_SLICE_LIT("Link"), PS_SLICE_LIT("</a.css>; rel=preload")};
        ps_exchange_informational(x, PS_SLICE_LIT("103 Early Hints"), &link, 1);
        finish(x, "early");
    } else if (PS_SLICE_IEQ(t, "/reject")) {
        x->app_data = NULL;
        ps_exchange_reject(x, 503, "fuzz refusal");
    } else if (PS_SLICE_IEQ(t, "/abort")) {
        x->app_data = NULL;
        ps_exchange_abort(x);
    } else if (PS_SLICE_IEQ(t, "/error")) {
        x->app_data = NULL;
        ps_exchange_send_error(x, 500);
    } else {
        finish(x, "ok");
    }
}

static void on_body(ps_exchange_t *x)
{
    if (x->app_data == &in_progress)
        read_body(x);
}

static void on_writable(ps_exchange_t *x)
{
    PS_UNUSED(x); /* every response is queued whole at once */
}

static void on_disconnect(ps_exchange_t *x)
{
    if (x->app_data == &accepted) {
        ps_wsconn_t *wc = ps_wsconn_of(x);
        if (wc)
            ps_wsconn_release(wc);
    }
    x->app_data = NULL;
}

static void dispose(ps_exchange_t *x)
{
    INVARIANT(x->app_data == NULL); /* the layer heard of every exchange it held */
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

#define TURNS 64 /* loop turns a check allows: far more than any answer needs */

static struct {
    int fd;
    int eof;
    size_t got;              /* bytes the server sent */
    unsigned char first[24]; /* the first of them */
} client;

/* Reads (and drops) what the server sent, keeping its first bytes. */
static void client_read(void)
{
    char buf[16384];
    for (;;) {
        ssize_t n = read(client.fd, buf, sizeof(buf));
        if (n == 0)
            client.eof = 1;
        if (n <= 0)
            return;
        if (client.got < sizeof(client.first))
            memcpy(client.first + client.got, buf,
                   PS_MIN((size_t)n, sizeof(client.first) - client.got));
        client.got += (size_t)n;
    }
}

/* Writes all of p, turning the loop while the socket is full. Returns 0, or
 * -1 when the server stopped reading for good (or is gone). */
static int client_write(const uint8_t *p, size_t n, int reads)
{
    for (int turns = 0; n > 0 && turns < TURNS;) {
        ssize_t w = write(client.fd, p, n);
        if (w < 0 && errno != EAGAIN)
            return -1;
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        run_loop_once();
        client_read(); /* a server blocked on its output reads on once it drains */
        turns++;
    }
    if (n > 0)
        return -1;
    run_loop_once();
    if (reads)
        client_read();
    return 0;
}

static void check_first_answer(int h2)
{
    if (client.got == 0)
        return;
    if (h2) {
        /* A frame header: length, type SETTINGS, no flags, stream 0. */
        INVARIANT(client.got >= 9);
        INVARIANT(client.first[3] == 0x04 && client.first[4] == 0);
        INVARIANT(memcmp(client.first + 5, "\0\0\0\0", 4) == 0);
    } else {
        INVARIANT(memcmp(client.first, "HTTP/1.", PS_MIN(client.got, 7)) == 0);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    PS_UNUSED(argc), PS_UNUSED(argv);
    signal(SIGPIPE, SIG_IGN); /* as in the Python process that runs the worker */
    /* Small limits, so that inputs reach them. */
    ps_config_t cfg = {
        .limits = {.max_request_line = 512,
                   .max_fields = 16,
                   .max_field_size = 512,
                   .max_head = 4096,
                   .max_body = 2048},
        .timeout_keep_alive = 5,
        .timeout_request_header = 5,
        .timeout_request_body = 5,
        .body_spool_threshold = 1024,
        .graceful_timeout = 1,
        .limit_connections = 100,
        .server_header = 1,
        .ws_enabled = 1,
        .ws_deflate = 1,
        .ws_deflate_level = 6,
        .ws_max_size = 1024,
        .ws_max_queue = 4,
        .h2c = 1,
        .h2c_upgrade = 1,
        /* Every request's X-Request-ID and X-Request-Start are replaced or
         * added (serve/reqid.c) in the room the protocols leave. */
        .reqid = PS_REQID_ID | PS_REQID_START,
    };
    ps_h2_limits_default(&cfg.h2);
    cfg.h2.max_concurrent_streams = 8;
    cfg.h2.max_body = cfg.limits.max_body;
    if (ps_worker_init(&worker, &cfg, &handler, NULL, NULL, NULL) < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = data[0] & 63;
    int half_close = (data[0] & 0x40) != 0, reads = (data[0] & 0x80) == 0;
    data++;
    size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    memset(&client, 0, sizeof(client));
    client.fd = sv[1];
    if (start_conn(sv[0]) < 0)
        abort();
    for (size_t off = 0; off < size;) {
        size_t n = piece == 0 ? size - off : PS_MIN(piece, size - off);
        if (client_write(data + off, n, reads) < 0)
            break;
        off += n;
    }
    run_loop_once();
    client_read();
    int h2 = size >= ps_h2_preface.len && memcmp(data, ps_h2_preface.base, ps_h2_preface.len) == 0;
    check_first_answer(h2);
    if (half_close) {
        shutdown(client.fd, SHUT_WR);
        for (int i = 0; i < TURNS && !client.eof; i++) {
            run_loop_once();
            client_read();
        }
        INVARIANT(client.eof);
    }
    close(client.fd);
    for (int i = 0; i < TURNS && live_conns() > 0; i++)
        run_loop_once();
    INVARIANT(live_conns() == 0);
    return 0;
}
