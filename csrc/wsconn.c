/* A connection in WebSocket mode (see wsconn.h). The connection's watchers
 * are taken over: rio feeds the session, wio flushes its output, the timer
 * runs pings, the close timeout and the final linger. */
#define _GNU_SOURCE
#include "wsconn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "conn.h"
#include "date.h"
#include "worker.h"

/* on_writable is owed once the output is back under this. */
#define LOW_WATER (16 * 1024)
/* After our close frame, the peer has this long to answer with its own. */
#define CLOSE_TIMEOUT 10.0
/* After the close handshake, input is drained this long before the close. */
#define LINGER_SECONDS 2.0
/* Input the session did not take yet (a full event queue) stays in c->rbuf;
 * an emptied one shrinks back to this. */
#define RBUF_KEEP (16 * 1024)

struct ps_wsconn {
    ps_conn_t *c;
    ps_ws_t ws;
    ps_ws_limits_t limits;
    const ps_wsconn_ops_t *ops; /* NULL once released */
    void *data;
    ev_tstamp next_ping;       /* 0: none planned */
    ev_tstamp pong_deadline;   /* 0: no ping outstanding */
    ev_tstamp close_deadline;  /* our close frame waits for the peer's until then */
    ev_tstamp linger_deadline; /* draining input before the TCP close */
    ev_tstamp armed;           /* the deadline the timer runs for; 0: stopped */
    uint32_t pongs_at_ping;
    uint32_t ping_seq;
    uint16_t final_code;
    unsigned writable_owed : 1;
    unsigned lingering : 1;
    unsigned broken : 1; /* a write failed: the connection closes from the loop */
};

static void ws_on_read(struct ev_loop *loop, ev_io *io, int revents);
static void ws_on_write(struct ev_loop *loop, ev_io *io, int revents);
static void ws_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

static const ps_slice_t server_line = PS_SLICE_LIT("Server: pyserver\r\n");

int ps_wsconn_check(ps_exchange_t *x, ps_ws_handshake_t *hs)
{
    if (!ps_conn_owns(x)) /* only HTTP/1 connections upgrade */
        return PS_WS_HS_NONE;
    ps_conn_t *c = ps_conn_of(x);
    int rc = ps_ws_check_request(ps_conn_request(c), hs);
    if (rc == PS_WS_HS_OK || rc == PS_WS_HS_NONE)
        return rc;
    ps_conn_reject_response(c, rc, hs->reason ? hs->reason : "invalid WebSocket handshake",
                            ps_ws_reject_response(rc));
    return -1;
}

static void rearm(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    struct ev_loop *loop = c->w->loop;
    /* No new ping while one is unanswered. */
    ev_tstamp ping = wc->pong_deadline > 0 ? 0 : wc->next_ping;
    ev_tstamp at = 0, d[4] = {ping, wc->pong_deadline, wc->close_deadline, wc->linger_deadline};
    for (int i = 0; i < 4; i++)
        if (d[i] > 0 && (at == 0 || d[i] < at))
            at = d[i];
    /* Most reads and writes leave the deadlines as they were. */
    if (at == wc->armed && (at > 0) == (ev_is_active(&c->timer) != 0))
        return;
    wc->armed = at;
    ev_timer_stop(loop, &c->timer);
    if (at > 0) {
        ev_timer_set(&c->timer, PS_MAX(at - ev_now(loop), 1e-3), 0);
        ev_timer_start(loop, &c->timer);
    }
}

/* Writes the session's output. Returns 0 when all of it is out, 1 when
 * the socket is full (wio is then watching), -errno when the peer is gone
 * (never closes). */
static int flush_out(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    ps_buf_t *out = ps_ws_output(&wc->ws);
    if (wc->broken)
        return -EPIPE;
    while (ps_buf_size(out)) {
        ssize_t r = ps_transport_write(&c->t, ps_buf_head(out), ps_buf_size(out));
        if (r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ) {
            /* TLS: a write that waits for input is retried by ws_on_read. */
            ev_io_start(c->w->loop, &c->wio);
            return 1;
        }
        if (r < 0) {
            wc->broken = 1;
            return (int)r;
        }
        if (c->w->metrics)
            PS_METRICS_ADD(c->w->metrics->bytes_out, r);
        ps_buf_consume(out, (size_t)r);
    }
    ev_io_stop(c->w->loop, &c->wio);
    return 0;
}

/* The close handshake is over (or failed): half-close and drain the
 * peer's input for a while, so that our close frame is not destroyed by a
 * reset. */
static void start_linger(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    ps_transport_shutdown(&c->t);
    wc->lingering = 1;
    wc->next_ping = wc->pong_deadline = wc->close_deadline = 0;
    wc->linger_deadline = ev_now(c->w->loop) + LINGER_SECONDS;
    ev_io_stop(c->w->loop, &c->wio);
    ev_io_start(c->w->loop, &c->rio);
}

/* The peer is gone: the bridge hears of it through on_disconnect. */
static void lost(ps_wsconn_t *wc)
{
    if (wc->final_code == 0) /* else the application hears that code (a ping timeout) */
        ps_ws_eof(&wc->ws);
    ps_conn_close(wc->c);
}

/* After the loop read or wrote: flush, tell the bridge, move the close
 * handshake on. May close the connection. */
static void progress(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    int rc = flush_out(wc);
    if (rc < 0) {
        lost(wc);
        return;
    }
    size_t pending = ps_buf_size(ps_ws_output(&wc->ws));
    if (wc->writable_owed && pending <= LOW_WATER && wc->ops) {
        wc->writable_owed = 0;
        wc->ops->on_writable(wc, wc->data);
    }
    if (c->state != PS_CONN_WS)
        return;
    if (ps_ws_queued(&wc->ws) > 0 && wc->ops)
        wc->ops->on_events(wc, wc->data);
    if (c->state != PS_CONN_WS)
        return;
    if (ps_ws_want_read(&wc->ws) && !wc->lingering)
        ev_io_start(c->w->loop, &c->rio);
    if (!wc->lingering && ps_ws_done(&wc->ws) && ps_buf_size(ps_ws_output(&wc->ws)) == 0)
        start_linger(wc);
    else if (!wc->lingering && wc->ws.close_sent && wc->close_deadline == 0)
        wc->close_deadline = ev_now(c->w->loop) + CLOSE_TIMEOUT;
    rearm(wc);
}

/* Has the loop call progress() soon, from outside the bridge's call. */
static void later(ps_wsconn_t *wc)
{
    ev_feed_event(wc->c->w->loop, &wc->c->wio, EV_WRITE);
}

ps_wsconn_t *ps_wsconn_of(ps_exchange_t *x)
{
    return ps_conn_owns(x) ? ps_conn_of(x)->ws : NULL;
}

int ps_wsconn_accept(ps_exchange_t *x, const ps_ws_handshake_t *hs, ps_slice_t subprotocol,
                     const ps_header_t *h, size_t n, const ps_wsconn_ops_t *ops, void *data)
{
    if (!ps_conn_owns(x))
        return -EINVAL;
    ps_conn_t *c = ps_conn_of(x);
    ps_worker_t *w = c->w;
    struct ev_loop *loop = w->loop;
    if (c->failed || c->state == PS_CONN_CLOSED || c->ws != NULL || c->resp_started)
        return -EPIPE;
    ps_wsconn_t *wc = calloc(1, sizeof(*wc));
    if (wc == NULL)
        return -ENOMEM;
    wc->c = c;
    wc->limits.max_message = w->cfg.ws_max_size;
    wc->limits.max_queue = w->cfg.ws_max_queue;
    ps_ws_deflate_t d;
    memset(&d, 0, sizeof(d));
    if (w->cfg.ws_deflate) {
        ps_ws_deflate_config_t dc = PS_WS_DEFLATE_DEFAULTS;
        dc.level = (int8_t)w->cfg.ws_deflate_level;
        if (!ps_ws_negotiate_deflate(ps_conn_request(c), &dc, &d))
            memset(&d, 0, sizeof(d));
    }
    int rc = ps_ws_init(&wc->ws, &wc->limits, d.enabled ? &d : NULL);
    if (rc < 0) {
        free(wc);
        return rc;
    }
    ps_slice_t extra[2];
    size_t ne = 0;
    if (w->cfg.date_header)
        extra[ne++] = ps_date_header((time_t)ev_now(loop));
    if (w->cfg.server_header)
        extra[ne++] = server_line;
    ps_buf_t *out = ps_ws_output(&wc->ws);
    if ((rc = ps_buf_append(out, ps_buf_head(&c->wbuf), ps_buf_size(&c->wbuf))) < 0 ||
        (rc = ps_ws_write_accept(out, hs->key, subprotocol, &d, h, n, extra, ne)) < 0) {
        ps_ws_free(&wc->ws);
        free(wc);
        return rc;
    }
    ps_buf_reset(&c->wbuf);
    ps_ws_set_storage(&wc->ws, ops->storage);
    wc->ops = ops;
    wc->data = data;
    ps_conn_set_ws(c, wc);
    c->resp_started = 1;
    c->x.status = 101;
    c->body_wanted = 0;
    ev_io_stop(loop, &c->rio);
    ev_io_stop(loop, &c->wio);
    ev_timer_stop(loop, &c->timer);
    ev_io_init(&c->rio, ws_on_read, c->fd, EV_READ);
    ev_io_init(&c->wio, ws_on_write, c->fd, EV_WRITE);
    ev_init(&c->timer, ws_on_timer);
    if (w->cfg.ws_ping_interval > 0)
        wc->next_ping = ev_now(loop) + w->cfg.ws_ping_interval;
    if (flush_out(wc) < 0) {
        later(wc); /* the head is lost with the connection */
        return 0;
    }
    ev_io_start(loop, &c->rio);
    if (ps_buf_size(&c->rbuf) > 0) /* frames sent right after the request */
        ev_feed_event(loop, &c->rio, EV_READ);
    rearm(wc);
    return 0;
}

/* Feeds what waits in c->rbuf (and the session's own leftovers). Returns 0
 * or -ENOMEM. */
static int feed_pending(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    size_t used = 0;
    int rc = ps_ws_feed(&wc->ws, ps_buf_head(&c->rbuf), ps_buf_size(&c->rbuf), &used);
    ps_buf_consume(&c->rbuf, used);
    if (ps_buf_size(&c->rbuf) == 0)
        ps_buf_shrink(&c->rbuf, RBUF_KEEP);
    return rc;
}

static void ws_on_read(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_conn_t *c = ps_container_of(io, ps_conn_t, rio);
    ps_wsconn_t *wc = c->ws;
    char *scratch = c->w->scratch;
    PS_UNUSED(revents);
    if (wc->lingering) {
        for (;;) {
            ssize_t n = ps_transport_read(&c->t, scratch, sizeof(c->w->scratch));
            if (n > 0 && c->w->metrics)
                PS_METRICS_ADD(c->w->metrics->bytes_in, n);
            if (n > 0)
                continue;
            if (n == PS_IO_WANT_READ || n == PS_IO_WANT_WRITE)
                return;
            ps_conn_close(c);
            return;
        }
    }
    if (feed_pending(wc) < 0) {
        lost(wc);
        return;
    }
    if (ps_ws_want_read(&wc->ws) && ps_buf_size(&c->rbuf) == 0) {
        ssize_t n = ps_transport_read(&c->t, scratch, sizeof(c->w->scratch));
        if (n == PS_IO_WANT_WRITE) {
            ev_io_start(loop, &c->wio); /* TLS: ws_on_write retries the read */
            n = PS_IO_WANT_READ;
        }
        if (n == 0 || (n < 0 && n != PS_IO_WANT_READ)) {
            lost(wc);
            return;
        }
        if (n > 0) {
            size_t used = 0;
            if (c->w->metrics)
                PS_METRICS_ADD(c->w->metrics->bytes_in, n);
            if (ps_ws_feed(&wc->ws, scratch, (size_t)n, &used) < 0 ||
                (used < (size_t)n &&
                 ps_buf_append(&c->rbuf, scratch + used, (size_t)n - used) < 0)) {
                lost(wc);
                return;
            }
        }
    }
    if (!ps_ws_want_read(&wc->ws))
        ev_io_stop(loop, &c->rio); /* the application has enough to read */
    else if (ps_unlikely(ps_transport_pending(&c->t)))
        ev_feed_event(loop, &c->rio, EV_READ); /* TLS: decrypted input waits */
    if (wc->pong_deadline > 0 && wc->ws.pongs_received != wc->pongs_at_ping)
        wc->pong_deadline = 0;
    progress(wc);
}

static void ws_on_write(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_conn_t *c = ps_container_of(io, ps_conn_t, wio);
    PS_UNUSED(revents);
    if (c->state != PS_CONN_WS)
        return;
    if (ps_unlikely(ps_transport_blocked(&c->t) & PS_TRANSPORT_READ_WANTS_WRITE)) {
        ws_on_read(loop, &c->rio, EV_READ); /* TLS: a read that waited for this */
        if (c->state != PS_CONN_WS)
            return;
    }
    progress(c->ws);
}

static void ws_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_conn_t *c = ps_container_of(t, ps_conn_t, timer);
    ps_wsconn_t *wc = c->ws;
    ps_config_t *cfg = &c->w->cfg;
    ev_tstamp now = ev_now(loop);
    PS_UNUSED(revents);
    if ((wc->lingering && now >= wc->linger_deadline) ||
        (wc->close_deadline > 0 && now >= wc->close_deadline)) {
        lost(wc);
        return;
    }
    if (wc->pong_deadline > 0 && now >= wc->pong_deadline) {
        wc->pong_deadline = 0;
        wc->next_ping = 0;
        if (wc->ws.pongs_received == wc->pongs_at_ping &&
            ps_ws_send_close(&wc->ws, 1011, "keepalive ping timeout", 22) == 0) {
            wc->final_code = 1011;
            wc->close_deadline = now + PS_MIN(CLOSE_TIMEOUT, cfg->ws_ping_timeout);
        }
    }
    if (wc->next_ping > 0 && now >= wc->next_ping && wc->pong_deadline == 0) {
        char payload[4];
        uint32_t seq = ++wc->ping_seq;
        memcpy(payload, &seq, sizeof(seq));
        wc->next_ping = now + cfg->ws_ping_interval; /* the next one, once this one is answered */
        if (ps_ws_send_ping(&wc->ws, payload, sizeof(payload)) == 0) {
            wc->pongs_at_ping = wc->ws.pongs_received;
            if (cfg->ws_ping_timeout > 0)
                wc->pong_deadline = now + cfg->ws_ping_timeout;
        }
    }
    progress(wc);
}

int ps_wsconn_next_event(ps_wsconn_t *wc, ps_ws_event_t *ev)
{
    ps_conn_t *c = wc->c;
    int had_room = ps_ws_want_read(&wc->ws);
    int r = ps_ws_next_event(&wc->ws, ev);
    if (r && c->w->metrics && (ev->type == PS_WS_EV_TEXT || ev->type == PS_WS_EV_BINARY))
        PS_METRICS_ADD(c->w->metrics->ws_messages_in, 1);
    if (r && !had_room && ps_ws_want_read(&wc->ws) && c->state == PS_CONN_WS && !wc->lingering) {
        /* The queue had stopped the reading: what waits is fed from the loop. */
        ev_io_start(c->w->loop, &c->rio);
        ev_feed_event(c->w->loop, &c->rio, EV_READ);
    }
    return r;
}

/* After the bridge queued output: write what the socket takes now. */
static int after_send(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    if (!ev_is_active(&c->wio)) {
        int rc = flush_out(wc);
        if (rc < 0) {
            later(wc); /* closes from the loop */
            return -EPIPE;
        }
    }
    if (ps_buf_size(ps_ws_output(&wc->ws)) > PS_WSCONN_HIGH_WATER) {
        wc->writable_owed = 1;
        return PS_WRITE_PENDING;
    }
    return PS_WRITE_DONE;
}

/* Nothing waits to be written on a plain connection: the frame goes out
 * with one writev from the caller's buffer, and only what the socket did
 * not take is copied into the output. Returns 0, or -errno like
 * ps_ws_send() (-EPIPE once the write failed: the connection closes from
 * the loop). */
static int send_direct(ps_wsconn_t *wc, int type, const void *data, size_t len)
{
    ps_conn_t *c = wc->c;
    struct iovec iov[2];
    int rc = ps_ws_send_prepare(&wc->ws, type, data, len, 0, iov);
    if (rc < 0)
        return rc;
    ssize_t r = ps_transport_writev(&c->t, iov, 2);
    if (r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ) {
        r = 0;
    } else if (r < 0) {
        wc->broken = 1;
        later(wc);
        return -EPIPE;
    }
    return ps_ws_send_rest(&wc->ws, iov, (size_t)r);
}

int ps_wsconn_send(ps_wsconn_t *wc, int type, const void *data, size_t len)
{
    ps_conn_t *c = wc->c;
    int rc;
    if (c->state != PS_CONN_WS || wc->broken)
        return -EPIPE;
    if (c->t.ssl == NULL && !ev_is_active(&c->wio) && !ps_ws_want_write(&wc->ws))
        rc = send_direct(wc, type, data, len);
    else
        rc = ps_ws_send(&wc->ws, type, data, len, 0);
    if (rc < 0)
        return rc;
    if (wc->c->w->metrics)
        PS_METRICS_ADD(wc->c->w->metrics->ws_messages_out, 1);
    return after_send(wc);
}

int ps_wsconn_close(ps_wsconn_t *wc, uint16_t code, const char *reason, size_t len)
{
    if (wc->c->state != PS_CONN_WS)
        return -EPIPE;
    int rc = ps_ws_send_close(&wc->ws, code, reason, len);
    if (rc < 0)
        return rc;
    after_send(wc);
    later(wc); /* the close timeout, or the linger */
    return 0;
}

void ps_wsconn_release(ps_wsconn_t *wc)
{
    ps_conn_t *c = wc->c;
    ps_ws_event_t ev;
    wc->ops = NULL;
    wc->data = NULL;
    wc->writable_owed = 0;
    if (c->state != PS_CONN_WS)
        return;
    /* Nobody takes events any more: a full queue must not keep the peer's
     * close frame unread. */
    while (ps_wsconn_next_event(wc, &ev))
        if (ev.handle != NULL)
            wc->ws.storage->release(ev.handle);
    if (!wc->ws.close_sent)
        ps_wsconn_close(wc, 1000, NULL, 0);
}

uint16_t ps_wsconn_final_code(const ps_wsconn_t *wc)
{
    if (wc->final_code)
        return wc->final_code;
    if (wc->ws.failed)
        return wc->ws.close_code_sent;
    return 1006;
}

void ps_wsconn_going_away(ps_wsconn_t *wc)
{
    if (wc->c->state != PS_CONN_WS || wc->ws.close_sent)
        return;
    if (ps_ws_send_close(&wc->ws, 1001, NULL, 0) == 0)
        later(wc);
}

void ps_wsconn_free(ps_wsconn_t *wc)
{
    ps_ws_free(&wc->ws);
    free(wc);
}
