/* A socket in HTTP/2 mode (see h2conn.h), plugged in as a sock.h protocol:
 * its reads feed the session, its write events write frames (and run
 * stream events an exchange call queued from outside the loop's
 * callbacks), the timer runs the idle, write, zero-window and request-body
 * deadlines, the final GOAWAY of a graceful stop and the last linger. */
#define _GNU_SOURCE
#include "serve/h2conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "base/common.h"
#include "serve/sock.h"
#include "base/date.h"
#include "codec/http.h"
#include "codec/http2.h"
#include "serve/body.h"
#include "serve/reqid.h"
#include "serve/wstate.h"

/* The frame buffer shrinks back to this once written. */
#define OUT_KEEP (16 * 1024)
/* A synchronous stream's body buffer is kept up to this between streams. */
#define BODY_KEEP (16 * 1024)
/* Exchanges kept for the next streams. */
#define KEEP_SPARE 32
/* A graceful stop's final GOAWAY follows the PING's ACK, or this long. */
#define FINAL_GOAWAY_AFTER 1.0

typedef struct h2x h2x_t;

/* One stream's exchange. */
struct h2x {
    ps_exchange_t x;
    ps_h2conn_t *hc;
    ps_h2_stream_t *st;           /* NULL once the stream is over */
    ps_buf_t body;                /* synchronous layers: the buffered body; else empty */
    ps_body_spool_t spool;        /* synchronous layers: the body past the spool threshold */
    uint64_t metrics_start;       /* --metrics-bind: when on_request was called */
    ev_tstamp body_at;            /* body bytes last came, or the layer began waiting */
    h2x_t *next;                  /* in the dead or the spare list */
    h2x_t *prev_live, *next_live; /* the connection's streams with a head dispatched */
    h2x_t *next_held;             /* in the connection's held requests */
    unsigned dispatched : 1;      /* on_request was called */
    unsigned held : 1;            /* waits in the held list (start_request) */
    unsigned extra : 1;           /* counted in the worker's h2_extra_streams */
    unsigned body_wanted : 1;     /* on_body is owed */
    unsigned reset : 1;           /* we reset the stream: the client is gone for the layer */
    unsigned borrowed : 1;        /* x.conn_data is the connection's (cx->conn_data) */
    unsigned async : 1;           /* its layer is asynchronous (ps_worker_route) */
};

struct ps_h2conn {
    ps_sock_t *sock;              /* handed over by HTTP/1; frees hc with itself */
    ps_exchange_t *cx;            /* the connection's exchange (HTTP/1's): its TLS facts, trusted
                                   * proxy and the layer's per-connection state */
    ps_h2_session_t *s;           /* NULL once the connection closed */
    ps_buf_t out;                 /* frames the kernel did not take yet */
    h2x_t *live;                  /* streams whose head was dispatched, until they close */
    h2x_t *dead;                  /* streams over: disposed at the next safe point */
    h2x_t *spare;                 /* released exchanges, reused */
    h2x_t *held_head, *held_tail; /* requests waiting for the output to drain, in order */
    uint32_t running;             /* streams dispatched to the layer and not closed */
    size_t nspare;
    ev_tstamp last_read;      /* the idle deadline counts from here */
    ev_tstamp write_since;    /* the socket has been full since (0: it is not) */
    ev_tstamp going_away_at;  /* the graceful stop's GOAWAY notice went out */
    ev_tstamp body_due;       /* the earliest stream body deadline, or 0 */
    unsigned in_progress : 1; /* progress() is on the stack */
    unsigned broken : 1;      /* a write failed: the connection closes from the loop */
    unsigned fatal : 1;       /* the session gave up: write its GOAWAY and close */
    unsigned final_sent : 1;
};

static const ps_exchange_ops_t h2_exchange_ops;
static ps_h2_stream_t *usable(h2x_t *e);
/* The request an exchange points to once its stream is gone. */
static ps_request_t no_request = {.content_length = -1};

static inline h2x_t *h2x_of(ps_exchange_t *x)
{
    return (h2x_t *)((char *)x - offsetof(h2x_t, x));
}

/* ---- socket I/O: the one read and the one writev of HTTP/2 mode ----------- */

/* Reads once, through the connection's transport (plain or TLS). Returns
 * bytes read, 0 at EOF, -errno (-EAGAIN: nothing yet; over TLS also a read
 * that waits for the socket to take a write, which renegotiation being off
 * leaves to post-handshake messages only). */
static ssize_t h2_read(ps_h2conn_t *hc, char *dst, size_t cap)
{
    ssize_t n = ps_transport_read(&hc->sock->t, dst, cap);
    if (n > 0 && hc->sock->w->metrics)
        PS_METRICS_ADD(hc->sock->w->metrics->bytes_in, n);
    return n == PS_IO_WANT_WRITE ? -EAGAIN : n;
}

/* Writes once. Returns bytes written or -errno (-EAGAIN: the socket is full). */
static ssize_t h2_writev(ps_h2conn_t *hc, const struct iovec *iov, int n)
{
    ssize_t r = ps_transport_writev(&hc->sock->t, iov, n);
    if (r > 0 && hc->sock->w->metrics)
        PS_METRICS_ADD(hc->sock->w->metrics->bytes_out, r);
    return r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ ? -EAGAIN : r;
}

/* ---- output ---------------------------------------------------------------- */

/* Pulls frames from the session and writes them until the socket is full
 * or nothing is left. Returns 0 (all out), 1 (the socket is full: wio is
 * watching) or -errno (never closes). */
static int write_out(ps_h2conn_t *hc)
{
    ps_sock_t *sk = hc->sock;
    struct ev_loop *loop = sk->w->loop;
    if (hc->broken || hc->s == NULL)
        return -EPIPE;
    for (;;) {
        if (ps_buf_size(&hc->out) == 0) {
            ps_buf_reset(&hc->out);
            int rc = ps_h2_flush(hc->s, &hc->out, ev_now(loop));
            if (rc < 0)
                return rc;
            if (ps_buf_size(&hc->out) == 0)
                break;
        }
        struct iovec v = {ps_buf_head(&hc->out), ps_buf_size(&hc->out)};
        ssize_t r = h2_writev(hc, &v, 1);
        if (r == -EAGAIN) {
            if (hc->write_since == 0)
                hc->write_since = ev_now(loop);
            ev_io_start(loop, &sk->wio);
            return 1;
        }
        if (r < 0)
            return (int)r;
        ps_buf_consume(&hc->out, (size_t)r);
        hc->write_since = 0;
    }
    ev_io_stop(loop, &sk->wio);
    hc->write_since = 0;
    ps_buf_shrink(&hc->out, OUT_KEEP);
    return 0;
}

/* Has the loop run progress() soon, from outside this file's callbacks. */
static void later(ps_h2conn_t *hc)
{
    ev_feed_event(hc->sock->w->loop, &hc->sock->wio, EV_WRITE);
}

/* After an exchange call from outside the loop's callbacks (an asyncio
 * task): the loop writes what it queued, with whatever the other tasks of
 * this turn queue, before it polls again (one write for many streams, not
 * one per call); stream events it caused run from the loop, never under
 * the caller. */
static void kick(ps_h2conn_t *hc)
{
    if (hc->in_progress || hc->sock->closed || hc->s == NULL)
        return;
    later(hc);
}

/* A stream's body deadline starts (or moves): the connection's timer
 * learns of it when it is the earliest. */
static void body_wait(h2x_t *e)
{
    ps_h2conn_t *hc = e->hc;
    double t = hc->sock->w->cfg.timeout_request_body;
    e->body_at = ev_now(hc->sock->w->loop);
    if (t > 0 && (hc->body_due == 0 || e->body_at + t < hc->body_due))
        hc->body_due = e->body_at + t;
}

/* ---- the connection -------------------------------------------------------- */

static void free_h2x(h2x_t *e)
{
    ps_encode_release(&e->x);
    ps_buf_free(&e->body);
    free(e);
}

/* Disposes of the exchanges of finished streams (a safe point: no handler
 * callback is on the stack). */
static void free_dead(ps_h2conn_t *hc)
{
    const ps_handler_t *handler = hc->sock->w->handler;
    while (hc->dead) {
        h2x_t *e = hc->dead;
        hc->dead = e->next;
        if (e->borrowed)
            e->x.conn_data = NULL; /* the connection's exchange frees it */
        handler->dispose(&e->x);
        ps_encode_release(&e->x);
        if (hc->nspare >= KEEP_SPARE) {
            free_h2x(e);
            continue;
        }
        ps_buf_reset(&e->body);
        ps_buf_shrink(&e->body, BODY_KEEP);
        e->next = hc->spare;
        hc->spare = e;
        hc->nspare++;
    }
}

static void drop_spool(h2x_t *e)
{
    ps_body_spool_drop(&e->spool);
}

static void start_linger(ps_h2conn_t *hc)
{
    ps_sock_linger(hc->sock);
}

/* Sets the timer to the nearest deadline: idle (no stream open), the
 * socket full or the client's window shut for the write deadline, the
 * final GOAWAY. */
static void rearm(ps_h2conn_t *hc)
{
    ps_sock_t *sk = hc->sock;
    const ps_config_t *cfg = &sk->w->cfg;
    ev_tstamp at = 0, d[5] = {0, 0, 0, 0, 0};
    if (ps_h2_open_streams(hc->s) == 0 && cfg->timeout_keep_alive > 0)
        d[0] = hc->last_read + cfg->timeout_keep_alive;
    else if (hc->body_due > 0 && cfg->timeout_request_body > 0)
        d[4] = hc->body_due;
    double stalled = ps_h2_stalled_since(hc->s);
    if (cfg->timeout_request_header > 0) {
        if (hc->write_since > 0)
            d[1] = hc->write_since + cfg->timeout_request_header;
        if (stalled > 0)
            d[2] = stalled + cfg->timeout_request_header;
    }
    if (hc->going_away_at > 0 && !hc->final_sent)
        d[3] = hc->going_away_at + FINAL_GOAWAY_AFTER;
    for (size_t i = 0; i < PS_ARRAY_LEN(d); i++)
        if (d[i] > 0 && (at == 0 || d[i] < at))
            at = d[i];
    ps_sock_timer_at(sk, at);
}

static void run_request(h2x_t *e);

/* 1 when a held request may start: the streams' queued output dropped
 * under its bound. */
static int may_release(ps_h2conn_t *hc)
{
    return hc->held_head != NULL && !ps_h2_output_full(hc->s);
}

/* From progress(): starts held requests, in the order they came, while
 * the output stays under its bound (each may queue more). */
static void release_held(ps_h2conn_t *hc)
{
    while (may_release(hc) && !hc->broken) {
        h2x_t *e = hc->held_head;
        hc->held_head = e->next_held;
        if (hc->held_head == NULL)
            hc->held_tail = NULL;
        e->held = 0;
        e->next_held = NULL;
        run_request(e);
    }
}

/* From the loop's callbacks only: disposes of finished exchanges, runs
 * stream events, writes frames, and closes (or lingers) when the session
 * is over. May close the connection. */
static void progress(ps_h2conn_t *hc)
{
    ps_sock_t *sk = hc->sock;
    if (sk->closed || hc->in_progress)
        return;
    free_dead(hc);
    if (hc->sock->lingering)
        return;
    int rc = 0;
    if (!hc->broken) {
        hc->in_progress = 1;
        do {
            ps_h2_dispatch(hc->s);
            release_held(hc);
            rc = write_out(hc);
        } while (rc >= 0 && !hc->broken && (ps_h2_has_events(hc->s) || may_release(hc)));
        hc->in_progress = 0;
    }
    if (rc < 0 || hc->broken) {
        ps_sock_close(sk);
        return;
    }
    if (rc == 0 && (hc->fatal || ps_h2_may_close(hc->s))) {
        start_linger(hc);
        return;
    }
    rearm(hc);
}

static ps_h2conn_t *h2conn_new(ps_sock_t *sk, ps_exchange_t *cx);
static const ps_sock_proto_t h2_proto;
/* Hands sk to HTTP/2 with hc, feeds preread and runs what follows. May
 * close sk. */
static void switch_to(ps_sock_t *sk, ps_h2conn_t *hc, const char *preread, size_t n)
{
    ps_worker_t *w = sk->w;
    struct ev_loop *loop = w->loop;
    ps_sock_set_proto(sk, &h2_proto, hc);
    hc->last_read = ev_now(loop);
    if (w->stopping)
        ps_h2conn_going_away(hc);
    if (n && ps_h2_feed(hc->s, preread, n, ev_now(loop)) < 0)
        hc->fatal = 1;
    ev_io_start(loop, &sk->rio);
    progress(hc);
}

int ps_h2conn_start(ps_sock_t *sk, ps_exchange_t *cx, const char *preread, size_t n)
{
    ps_h2conn_t *hc = h2conn_new(sk, cx);
    if (hc == NULL)
        return -ENOMEM;
    switch_to(sk, hc, preread, n);
    return 0;
}

/* 1 when the comma-separated list v holds token t (case-insensitive). */
static int has_token(ps_slice_t v, const char *t)
{
    size_t tl = strlen(t), i = 0;
    while (i < v.len) {
        while (i < v.len && (v.base[i] == ' ' || v.base[i] == '\t' || v.base[i] == ','))
            i++;
        size_t start = i;
        while (i < v.len && v.base[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v.base[end - 1] == ' ' || v.base[end - 1] == '\t'))
            end--;
        if (end - start == tl && ps_slice_ieq((ps_slice_t){v.base + start, tl}, t, tl))
            return 1;
    }
    return 0;
}

int ps_h2conn_upgrade(ps_sock_t *sk, ps_exchange_t *cx, const ps_request_t *r)
{
    ps_slice_t upgrade = {NULL, 0}, settings = {NULL, 0};
    int nsettings = 0;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        if (PS_SLICE_IEQ(r->headers[i].name, "upgrade"))
            upgrade = r->headers[i].value;
        else if (PS_SLICE_IEQ(r->headers[i].name, "http2-settings"))
            settings = r->headers[i].value, nsettings++;
    }
    /* A request with a body stays HTTP/1 (the server may ignore an upgrade,
     * RFC 9110 7.8), and so does one that is not exactly an h2c upgrade. */
    if (upgrade.base == NULL || !has_token(upgrade, "h2c") || nsettings != 1 ||
        !r->message_complete || r->body_received > 0 || r->http_minor != 1)
        return 1;
    ps_h2conn_t *hc = h2conn_new(sk, cx);
    if (hc == NULL)
        return 1;
    if (ps_buf_append_slice(&hc->out, ps_h2_upgrade_response) < 0 ||
        ps_h2_upgrade(hc->s, settings, r) == NULL) {
        ps_h2_session_free(hc->s);
        ps_buf_free(&hc->out);
        free(hc);
        return -EINVAL;
    }
    /* Bytes after the request (the client's preface, if it did not wait
     * for the 101) are the session's. */
    ps_buf_t rest = sk->rbuf;
    sk->rbuf = (ps_buf_t){0};
    switch_to(sk, hc, ps_buf_head(&rest), ps_buf_size(&rest));
    ps_buf_free(&rest);
    return 0;
}

void ps_h2conn_going_away(ps_h2conn_t *hc)
{
    if (hc->going_away_at > 0 || hc->s == NULL)
        return;
    hc->going_away_at = ev_now(hc->sock->w->loop);
    ps_h2_shutdown(hc->s);
    later(hc);
}

/* The socket is closing or closed (h2_proto): every stream the interface
 * layer holds hears on_disconnect; a synchronous layer's before the socket
 * closes (its application threads may still use it). */
static void h2conn_closed(ps_h2conn_t *hc)
{
    hc->broken = 1;
    if (hc->in_progress || hc->s == NULL)
        return; /* ps_h2conn_free ends the session */
    ps_h2_session_t *s = hc->s;
    ps_h2_session_free(s); /* on_close(DISCONNECT) for every stream */
    hc->s = NULL;
}

static void h2_before_close(ps_sock_t *sk)
{
    if (!sk->w->async)
        h2conn_closed(sk->data);
}

static void h2_after_close(ps_sock_t *sk)
{
    h2conn_closed(sk->data);
}

/* A graceful stop (h2_proto): GOAWAY; closes once its streams are done. */
static void h2_stop_idle(ps_sock_t *sk)
{
    ps_h2conn_going_away(sk->data);
}

/* The socket is being freed (h2_proto): disposes of the streams' exchanges
 * and frees hc. */
static void h2_free(ps_sock_t *sk, void *data)
{
    ps_h2conn_t *hc = data;
    PS_UNUSED(sk);
    if (hc->s) {
        ps_h2_session_free(hc->s);
        hc->s = NULL;
    }
    free_dead(hc);
    while (hc->spare) {
        h2x_t *e = hc->spare;
        hc->spare = e->next;
        free_h2x(e);
    }
    ps_buf_free(&hc->out);
    free(hc);
}

/* ---- the loop's callbacks ---------------------------------------------------- */

/* The read watcher (h2_proto; the socket drains a lingering one itself).
 * May close sk. */
static void h2_on_read(ps_sock_t *sk)
{
    ps_h2conn_t *hc = sk->data;
    ps_worker_t *w = sk->w;
    struct ev_loop *loop = w->loop;
    ssize_t n = h2_read(hc, w->scratch, sizeof(w->scratch));
    if (n == -EAGAIN)
        return;
    if (n <= 0) {
        ps_sock_close(sk); /* the streams hear on_disconnect */
        return;
    }
    hc->last_read = ev_now(loop);
    if (!hc->fatal && ps_h2_feed(hc->s, w->scratch, (size_t)n, ev_now(loop)) < 0)
        hc->fatal = 1; /* a GOAWAY is queued: write it, then close */
    if (hc->fatal)
        ev_io_stop(loop, &sk->rio);
    progress(hc);
    /* TLS input already decrypted would not wake the loop: read it now. */
    if (ps_unlikely(!sk->closed && !hc->fatal && ps_transport_pending(&sk->t)))
        ps_sock_feed_read(sk);
}

/* The write watcher (h2_proto), also fed by later(). May close sk. */
static void h2_on_write(ps_sock_t *sk)
{
    progress(sk->data);
}

/* 1 when the stream waits for request body bytes from the client: an
 * asynchronous layer asked for them, a synchronous one is not running yet
 * (it gets the whole body first). */
static int awaits_body(h2x_t *e)
{
    ps_h2_stream_t *st = usable(e);
    if (st == NULL || st->req.message_complete || e->x.status)
        return 0;
    return e->async ? e->body_wanted : !e->dispatched;
}

/* --timeout-request-body, per stream: a stream that waited that long for
 * body bytes with none coming fails like a stalled HTTP/1 body (the layer
 * hears a disconnect; the client gets 408, or a reset once a response
 * started). Only that stream: the others, and the connection, go on. Sets
 * body_due to the next deadline. */
static void body_deadline(ps_h2conn_t *hc, ev_tstamp now)
{
    const ps_handler_t *handler = hc->sock->w->handler;
    double t = hc->sock->w->cfg.timeout_request_body;
    hc->body_due = 0;
    for (h2x_t *e = hc->live, *next; e; e = next) {
        next = e->next_live;
        if (!awaits_body(e))
            continue;
        if (now - e->body_at < t) {
            if (hc->body_due == 0 || e->body_at + t < hc->body_due)
                hc->body_due = e->body_at + t;
            continue;
        }
        e->body_wanted = 0;
        if (e->x.app_data)
            handler->on_disconnect(&e->x);
        ps_exchange_reject(&e->x, 408, "request body deadline");
    }
}

/* The timer (h2_proto): the write, idle, body and graceful-stop
 * deadlines. May close sk. */
static void h2_on_timer(ps_sock_t *sk)
{
    ps_h2conn_t *hc = sk->data;
    const ps_config_t *cfg = &sk->w->cfg;
    ev_tstamp now = ev_now(sk->w->loop);
    double stalled = ps_h2_stalled_since(hc->s);
    ev_tstamp wd = cfg->timeout_request_header;
    if (wd > 0 && ((hc->write_since > 0 && now - hc->write_since >= wd) ||
                   (stalled > 0 && now - stalled >= wd))) {
        ps_sock_close(sk); /* a client that stopped reading, or never opens its window */
        return;
    }
    if (hc->body_due > 0 && now >= hc->body_due && cfg->timeout_request_body > 0)
        body_deadline(hc, now);
    if (hc->going_away_at > 0 && !hc->final_sent && now - hc->going_away_at >= FINAL_GOAWAY_AFTER) {
        hc->final_sent = 1;
        ps_h2_shutdown(hc->s);
    }
    if (ps_h2_open_streams(hc->s) == 0 && cfg->timeout_keep_alive > 0 &&
        now - hc->last_read >= cfg->timeout_keep_alive) {
        /* Idle: GOAWAY, then the close once it is written. */
        if (hc->going_away_at == 0) {
            hc->going_away_at = now;
            ps_h2_shutdown(hc->s);
        }
        if (!hc->final_sent) {
            hc->final_sent = 1;
            ps_h2_shutdown(hc->s);
        }
        hc->fatal = 1;
    }
    progress(hc);
}

/* ---- streams ------------------------------------------------------------------ */

static h2x_t *h2x_new(ps_h2conn_t *hc, ps_h2_stream_t *st)
{
    ps_sock_t *sk = hc->sock;
    ps_worker_t *w = sk->w;
    h2x_t *e = hc->spare;
    ps_buf_t body = {0};
    if (e) {
        hc->spare = e->next;
        hc->nspare--;
        body = e->body;
    } else if ((e = malloc(sizeof(*e))) == NULL) {
        return NULL;
    }
    memset(e, 0, sizeof(*e));
    e->body = body;
    e->hc = hc;
    e->st = st;
    ps_body_spool_init(&e->spool);
    e->async = w->async;
    e->x = (ps_exchange_t){
        .ops = &h2_exchange_ops,
        .req = &st->req,
        .body = w->async ? &st->body : &e->body,
        .worker = w,
        .handler_data = w->handler_data,
        .proxy = hc->cx->proxy,
        .peer = &sk->peer,
        .peer_len = sk->peer_len,
        .is_unix = sk->is_unix,
        .secure = hc->cx->secure,
        .tls = hc->cx->tls,
        .http2 = 1,
        .write_piece = w->cfg.h2.stream_output_high,
        .compress = w->cfg.compress,
    };
    /* The layer's per-connection state (the addresses) is built by the
     * first stream and shared by the next ones. */
    if (hc->cx->conn_data) {
        e->x.conn_data = hc->cx->conn_data;
        e->borrowed = 1;
    }
    return e;
}

static void run_request(h2x_t *e)
{
    ps_h2conn_t *hc = e->hc;
    ps_sock_t *sk = hc->sock;
    e->dispatched = 1;
    if (e->hc->running++ > 0) { /* counted before on_request: its limit sees this one */
        e->extra = 1;
        sk->w->h2_extra_streams++;
    }
    if (sk->w->metrics) {
        e->metrics_start = ps_metrics_clock();
        if (sk->requests > 0)
            PS_METRICS_ADD(sk->w->metrics->keepalive_reused, 1);
    }
    sk->requests++;
    sk->w->handler->on_request(&e->x);
    if (!e->borrowed && e->x.conn_data && hc->cx->conn_data == NULL) {
        hc->cx->conn_data = e->x.conn_data; /* owned by the connection's exchange from now on */
        e->borrowed = 1;
    }
}

/* Runs a request whose head (and, for a synchronous layer, body) is in,
 * or holds it while the connection's streams hold more response bytes
 * than their bound: a client that stops reading then holds back the
 * requests it sends next, as an HTTP/1 connection reads no next request
 * while a response waits, instead of having every one of them produced
 * into the worker's memory. progress() starts it once the output drains. */
static void start_request(h2x_t *e)
{
    ps_h2conn_t *hc = e->hc;
    if (hc->held_head == NULL && !ps_h2_output_full(hc->s)) {
        run_request(e);
        return;
    }
    e->held = 1;
    if (hc->held_tail)
        hc->held_tail->next_held = e;
    else
        hc->held_head = e;
    hc->held_tail = e;
}

/* Takes e out of the held list (its stream closed first). */
static void unhold(h2x_t *e)
{
    ps_h2conn_t *hc = e->hc;
    h2x_t *prev = NULL;
    for (h2x_t *p = hc->held_head; p && p != e; p = p->next_held)
        prev = p;
    if (prev)
        prev->next_held = e->next_held;
    else
        hc->held_head = e->next_held;
    if (hc->held_tail == e)
        hc->held_tail = prev;
    e->held = 0;
    e->next_held = NULL;
}

/* A synchronous stream's body as it arrives: out of the session's buffer
 * (which gives the window back) into e->body up to the spool threshold,
 * past it into the spool file. Returns 0 or -errno. */
static int take_body(h2x_t *e)
{
    ps_h2_stream_t *st = e->st;
    const ps_config_t *cfg = &e->hc->sock->w->cfg;
    size_t n = ps_buf_size(&st->body);
    if (n && ps_buf_append(&e->body, ps_buf_head(&st->body), n) < 0)
        return -ENOMEM;
    ps_h2_body_consume(st, n);
    return ps_body_spool(&e->spool, &e->body, st->req.body_received, cfg->body_spool_threshold,
                         BODY_KEEP);
}

static void cb_head(ps_h2_stream_t *st, void *ud)
{
    ps_h2conn_t *hc = ud;
    ps_worker_t *w = hc->sock->w;
    h2x_t *e = h2x_new(hc, st);
    if (e == NULL) {
        ps_h2_abort(st, NGHTTP2_INTERNAL_ERROR);
        return;
    }
    st->data = e;
    if (ps_unlikely(w->cfg.reqid != 0))
        ps_reqid_take(&st->req, w->cfg.reqid, e->x.proxy != NULL);
    e->next_live = hc->live;
    if (hc->live)
        hc->live->prev_live = e;
    hc->live = e;
    uint64_t max = w->cfg.limits.max_body;
    if (max && st->req.content_length >= 0 && (uint64_t)st->req.content_length > max) {
        ps_exchange_reject(&e->x, 413, "request body too large");
        return;
    }
    /* The layer's choice decides where the body goes: to it as it comes,
     * or into e->body (and the spool file) until it is whole. */
    e->async = ps_worker_route(w, &e->x);
    e->x.body = e->async ? &st->body : &e->body;
    if (e->async)
        start_request(e);
    else if (!st->req.message_complete)
        body_wait(e); /* the body event follows (dispatch_stream): run once it is whole */
}

static void cb_body(ps_h2_stream_t *st, void *ud)
{
    ps_h2conn_t *hc = ud;
    h2x_t *e = st->data;
    if (e == NULL)
        return;
    if (!e->async) {
        if (e->dispatched || e->held || e->x.status)
            return;
        e->body_at = ev_now(hc->sock->w->loop); /* bytes came: its deadline moves on */
        if (take_body(e) < 0) {
            ps_exchange_reject(&e->x, 500, "request body spool file failed");
            return;
        }
        if (st->req.message_complete)
            start_request(e);
        return;
    }
    e->body_at = ev_now(hc->sock->w->loop);
    if (e->body_wanted && e->x.app_data) {
        e->body_wanted = 0;
        hc->sock->w->handler->on_body(&e->x);
    }
}

static void cb_writable(ps_h2_stream_t *st, void *ud)
{
    ps_h2conn_t *hc = ud;
    h2x_t *e = st->data;
    /* Only once a file given to sendfile is read to its end: the caller
     * keeps its descriptor open until on_writable. */
    if (e == NULL || e->x.app_data == NULL || ps_h2_sendfile_busy(st))
        return;
    hc->sock->w->handler->on_writable(&e->x);
}

static void cb_close(ps_h2_stream_t *st, void *ud, int why)
{
    ps_h2conn_t *hc = ud;
    h2x_t *e = st->data;
    PS_UNUSED(why);
    st->data = NULL;
    if (e == NULL)
        return;
    if (e->held)
        unhold(e);
    /* A reset, an abort or the connection's end while the layer still
     * holds the request: ASGI's http.disconnect, WSGI's close(). */
    if (e->x.app_data)
        hc->sock->w->handler->on_disconnect(&e->x);
    ps_metrics_t *m = hc->sock->w->metrics;
    if (m && e->dispatched && e->metrics_start && !e->x.unmetered)
        ps_metrics_request(m, e->x.req->method, e->x.status, ps_metrics_clock() - e->metrics_start);
    if (e->dispatched) {
        hc->running--;
        if (e->extra) {
            e->extra = 0;
            hc->sock->w->h2_extra_streams--;
        }
    }
    if (e->prev_live)
        e->prev_live->next_live = e->next_live;
    else if (hc->live == e)
        hc->live = e->next_live;
    if (e->next_live)
        e->next_live->prev_live = e->prev_live;
    e->prev_live = e->next_live = NULL;
    e->st = NULL;
    e->x.req = &no_request;
    e->x.body = &e->body;
    ps_buf_reset(&e->body);
    drop_spool(e);
    e->next = hc->dead;
    hc->dead = e;
}

static void cb_rejected(ps_h2_stream_t *st, void *ud, int status)
{
    ps_h2conn_t *hc = ud;
    const ps_handler_t *handler = hc->sock->w->handler;
    h2x_t *e = h2x_new(hc, st);
    if (e == NULL)
        return;
    e->x.status = status;
    if (handler->on_rejected)
        handler->on_rejected(&e->x, status, "header list too large");
    if (hc->sock->w->metrics)
        ps_metrics_rejected(hc->sock->w->metrics, status);
    e->st = NULL;
    e->x.req = &no_request;
    e->next = hc->dead;
    hc->dead = e;
}

static const ps_h2_callbacks_t h2_callbacks = {
    .on_head = cb_head,
    .on_body = cb_body,
    .on_writable = cb_writable,
    .on_close = cb_close,
    .on_rejected = cb_rejected,
};

static ps_h2conn_t *h2conn_new(ps_sock_t *sk, ps_exchange_t *cx)
{
    ps_h2conn_t *hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return NULL;
    hc->sock = sk;
    hc->cx = cx;
    hc->s = ps_h2_session_new(&sk->w->cfg.h2, &h2_callbacks, hc);
    if (hc->s == NULL) {
        free(hc);
        return NULL;
    }
    return hc;
}

/* ---- the exchange calls over HTTP/2 (exchange.h) --------------------------- */

/* The stream when it can still carry the response, else NULL. */
static ps_h2_stream_t *usable(h2x_t *e)
{
    if (e->st == NULL || e->st->closed || e->reset || e->hc->broken)
        return NULL;
    return e->st;
}

static int x_body_fill(ps_exchange_t *x)
{
    h2x_t *e = h2x_of(x);
    return ps_body_fill(&e->spool, &e->body);
}

static int x_body_want(ps_exchange_t *x)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return -ECONNRESET;
    ps_h2_body_sync(st); /* what the layer read reopens the window */
    if (ps_h2_want_write(e->hc->s))
        kick(e->hc);
    if (ps_buf_size(&st->body) > 0 || st->req.message_complete)
        return 1;
    e->body_wanted = 1;
    body_wait(e);
    return 0;
}

static int x_write(ps_exchange_t *x, const char *data, size_t len)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return -EPIPE;
    int rc = ps_h2_write(st, data, len);
    if (rc < 0)
        return rc;
    kick(e->hc);
    return rc == 1 ? PS_WRITE_PENDING : PS_WRITE_DONE;
}

static int x_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                   const char *body, size_t len)
{
    h2x_t *e = h2x_of(x);
    ps_h2conn_t *hc = e->hc;
    const ps_config_t *cfg = &hc->sock->w->cfg;
    ps_head_info_t info;
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return -EPIPE;
    if (x->status || ps_http_scan_head(status, h, n, &info) < 0 || info.status < 200)
        return -EINVAL;
    ps_header_t extra[4]; /* date, server, hsts, x-request-id */
    size_t k = 0;
    if (cfg->date_header && !info.has_date) {
        ps_slice_t d = ps_date_header((time_t)ev_now(hc->sock->w->loop)); /* "Date: ...\r\n" */
        extra[k++] = (ps_header_t){PS_SLICE_LIT("date"), {d.base + 6, d.len - 8}};
    }
    if (cfg->server_header && !info.has_server)
        extra[k++] = (ps_header_t){PS_SLICE_LIT("server"), PS_SLICE_LIT("pyserver")};
    if (ps_unlikely(cfg->hsts_value.len) && hc->sock->t.ssl != NULL && !info.has_sts)
        extra[k++] = (ps_header_t){PS_SLICE_LIT("strict-transport-security"), cfg->hsts_value};
    if (ps_reqid_respond(x->req, h, n))
        extra[k++] = (ps_header_t){PS_SLICE_LIT("x-request-id"), x->req->request_id};
    int rc = ps_h2_respond_scanned(st, &info, h, n, extra, k, 0);
    if (rc < 0)
        return rc;
    x->status = info.status;
    return x_write(x, body, len);
}

/* WSGI's write(): see h2conn.h. */
static int x_write_blocking(ps_exchange_t *x, const char *data, size_t len)
{
    h2x_t *e = h2x_of(x);
    ps_h2conn_t *hc = e->hc;
    ps_sock_t *sk = hc->sock;
    int rc = x_write(x, data, len);
    if (rc == PS_WRITE_DONE && usable(e) && ps_h2_write_blocked(e->st))
        rc = PS_WRITE_PENDING; /* earlier bytes still wait (a call with no data) */
    double wd = sk->w->cfg.timeout_request_header;
    double last = ev_time();
    while (rc == PS_WRITE_PENDING) {
        ps_h2_stream_t *st = usable(e);
        if (st == NULL)
            return -EPIPE;
        if (!ps_h2_write_blocked(st))
            return PS_WRITE_DONE;
        size_t before = ps_h2_queued(st);
        int w = write_out(hc);
        if (w < 0) {
            hc->broken = 1;
            later(hc);
            return -EPIPE;
        }
        if (ps_h2_queued(st) < before)
            last = ev_time(); /* progress: the deadline counts from here */
        if (!ps_h2_write_blocked(st))
            return PS_WRITE_DONE;
        double left = wd > 0 ? last + wd - ev_time() : 1.0;
        if (left <= 0) {
            e->reset = 1;
            ps_h2_abort(st, NGHTTP2_CANCEL);
            kick(hc);
            return -ETIMEDOUT;
        }
        struct pollfd pfd = {.fd = sk->fd, .events = POLLIN};
        if (ps_buf_size(&hc->out))
            pfd.events |= POLLOUT;
        /* TLS may hold decrypted input that a poll of the socket misses. */
        int pending = ps_transport_pending(&sk->t);
        int pr = pending ? 1 : poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
            return -errno;
        if (pending || (pr > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)))) {
            ssize_t n = h2_read(hc, sk->w->scratch, sizeof(sk->w->scratch));
            if (n == 0 || (n < 0 && n != -EAGAIN) ||
                (n > 0 && ps_h2_feed(hc->s, sk->w->scratch, (size_t)n, ev_time()) < 0)) {
                if (n > 0)
                    hc->fatal = 1;
                else
                    hc->broken = 1;
                later(hc);
                return -EPIPE;
            }
            if (n > 0)
                hc->last_read = ev_time(); /* a WINDOW_UPDATE may have come */
        }
    }
    return rc;
}

static int x_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return -EPIPE;
    int rc = ps_h2_sendfile(st, fd, (off_t)offset, count);
    if (rc < 0)
        return rc;
    kick(e->hc);
    return PS_WRITE_PENDING; /* on_writable once the file is read */
}

static int x_informational(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    ps_head_info_t info;
    if (st == NULL)
        return -EPIPE;
    if (x->status || ps_http_scan_head(status, h, n, &info) < 0)
        return -EINVAL;
    int rc = ps_h2_info(st, info.status, h, n);
    if (rc < 0)
        return rc;
    kick(e->hc);
    return PS_WRITE_DONE;
}

static void x_end(ps_exchange_t *x)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return;
    ps_h2_end(st); /* -EIO: shorter than its content-length, reset instead */
    kick(e->hc);
}

static int x_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n)
{
    h2x_t *e = h2x_of(x);
    ps_h2_stream_t *st = usable(e);
    if (st == NULL)
        return 0;
    int rc = ps_h2_trailers(st, h, n);
    if (rc == -EINVAL)
        return rc;
    kick(e->hc);
    return 0;
}

static void x_abort(ps_exchange_t *x)
{
    h2x_t *e = h2x_of(x);
    if (e->st == NULL || e->st->closed)
        return;
    e->reset = 1;
    ps_h2_abort(e->st, NGHTTP2_INTERNAL_ERROR);
    kick(e->hc);
}

static void x_send_error(ps_exchange_t *x, int status)
{
    h2x_t *e = h2x_of(x);
    if (usable(e) == NULL)
        return;
    if (x->status) {
        x_abort(x);
        return;
    }
    char line[64], body[64], clen[24];
    const char *reason = ps_http_reason_phrase(status);
    int ll = snprintf(line, sizeof(line), "%d %s", status, reason);
    int bl = snprintf(body, sizeof(body), "%s\n", reason[0] ? reason : "Error");
    int cl = snprintf(clen, sizeof(clen), "%d", bl);
    ps_header_t h[2] = {
        {PS_SLICE_LIT("content-type"), PS_SLICE_LIT("text/plain; charset=utf-8")},
        {PS_SLICE_LIT("content-length"), {clen, (size_t)cl}},
    };
    if (x_start(x, (ps_slice_t){line, (size_t)ll}, h, 2, body, (size_t)bl) < 0) {
        x_abort(x);
        return;
    }
    x_end(x);
}

static void x_reject(ps_exchange_t *x, int status, const char *reason)
{
    const ps_handler_t *handler = h2x_of(x)->hc->sock->w->handler;
    if (handler->on_rejected && !x->status)
        handler->on_rejected(x, status, reason);
    if (h2x_of(x)->hc->sock->w->metrics && !x->status)
        ps_metrics_rejected(h2x_of(x)->hc->sock->w->metrics, status);
    x_send_error(x, status);
}

static int x_local_address(ps_exchange_t *x, struct sockaddr_storage *ss, socklen_t *len)
{
    return ps_sock_local_address(h2x_of(x)->hc->sock, ss, len);
}

static int x_request_line(ps_exchange_t *x, ps_slice_t *method, ps_slice_t *target,
                          ps_slice_t *version)
{
    ps_request_t *r = x->req;
    if (!r->head_complete)
        return 0;
    *method = r->method;
    *target = r->target;
    *version = PS_SLICE_LIT("2.0");
    return 1;
}

static int x_client_gone(ps_exchange_t *x)
{
    return usable(h2x_of(x)) == NULL;
}

static const ps_exchange_ops_t h2_exchange_ops = {
    .body_fill = x_body_fill,
    .body_want = x_body_want,
    .start = x_start,
    .write = x_write,
    .write_blocking = x_write_blocking,
    .sendfile = x_sendfile,
    .informational = x_informational,
    .end_with_trailers = x_end_with_trailers,
    .end = x_end,
    .abort = x_abort,
    .send_error = x_send_error,
    .reject = x_reject,
    .local_address = x_local_address,
    .request_line = x_request_line,
    .client_gone = x_client_gone,
};

static const ps_sock_proto_t h2_proto = {
    .on_read = h2_on_read,
    .on_write = h2_on_write,
    .on_timer = h2_on_timer,
    .before_close = h2_before_close,
    .after_close = h2_after_close,
    .stop_idle = h2_stop_idle,
    .free = h2_free,
};
