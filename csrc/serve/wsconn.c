/* A socket in WebSocket mode (see wsconn.h), plugged in as a sock.h
 * protocol: its reads feed the session, its write events flush the
 * session's output, its timer runs pings and the close timeout; the
 * final linger is the socket's. */
#define _GNU_SOURCE
#include "serve/wsconn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"
#include "serve/sock.h"
#include "base/date.h"
#include "serve/wstate.h"

/* on_writable is owed once the output is back under this. */
#define LOW_WATER (16 * 1024)
/* After our close frame, the peer has this long to answer with its own. */
#define CLOSE_TIMEOUT 10.0
/* Input the session did not take yet (a full event queue) stays in s->rbuf;
 * an emptied one shrinks back to this. */
#define RBUF_KEEP (16 * 1024)

struct ps_wsconn {
    ps_sock_t *s; /* handed over by the upgrade; freed with it */
    ps_ws_t ws;
    ps_ws_limits_t limits;
    const ps_wsconn_ops_t *ops; /* NULL once released */
    void *data;
    ev_tstamp next_ping;      /* 0: none planned */
    ev_tstamp pong_deadline;  /* 0: no ping outstanding */
    ev_tstamp close_deadline; /* our close frame waits for the peer's until then */
    ev_tstamp armed;          /* the deadline the timer runs for; 0: stopped */
    uint32_t pongs_at_ping;
    uint32_t ping_seq;
    uint16_t final_code;
    unsigned writable_owed : 1;
    unsigned broken : 1; /* a write failed: the connection closes from the loop */
};

static const ps_sock_proto_t ws_proto;

static const ps_slice_t server_line = PS_SLICE_LIT("Server: pyserver\r\n");

int ps_wsconn_check(ps_exchange_t *x, ps_ws_handshake_t *hs)
{
    if (ps_exchange_sock(x) == NULL) /* a shared socket (HTTP/2) does not upgrade */
        return PS_WS_HS_NONE;
    int rc = ps_ws_check_request(x->req, hs);
    if (rc == PS_WS_HS_OK || rc == PS_WS_HS_NONE)
        return rc;
    ps_exchange_reject_response(x, rc, hs->reason ? hs->reason : "invalid WebSocket handshake",
                                ps_ws_reject_response(rc));
    return -1;
}

static void rearm(ps_wsconn_t *wc)
{
    ps_sock_t *s = wc->s;
    /* No new ping while one is unanswered. */
    ev_tstamp ping = wc->pong_deadline > 0 ? 0 : wc->next_ping;
    ev_tstamp at = 0, d[3] = {ping, wc->pong_deadline, wc->close_deadline};
    if (s->lingering)
        return; /* the socket's linger owns the timer */
    for (int i = 0; i < 3; i++)
        if (d[i] > 0 && (at == 0 || d[i] < at))
            at = d[i];
    /* Most reads and writes leave the deadlines as they were. */
    if (at == wc->armed && (at > 0) == (ev_is_active(&s->timer) != 0))
        return;
    wc->armed = at;
    ps_sock_timer_at(s, at);
}

/* Writes the session's output. Returns 0 when all of it is out, 1 when
 * the socket is full (wio is then watching), -errno when the peer is gone
 * (never closes). */
static int flush_out(ps_wsconn_t *wc)
{
    ps_sock_t *s = wc->s;
    ps_buf_t *out = ps_ws_output(&wc->ws);
    if (wc->broken)
        return -EPIPE;
    while (ps_buf_size(out)) {
        ssize_t r = ps_transport_write(&s->t, ps_buf_head(out), ps_buf_size(out));
        if (r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ) {
            /* TLS: a write that waits for input is retried by ws_on_read. */
            ev_io_start(s->w->loop, &s->wio);
            return 1;
        }
        if (r < 0) {
            wc->broken = 1;
            return (int)r;
        }
        if (s->w->metrics)
            PS_METRICS_ADD(s->w->metrics->bytes_out, r);
        ps_buf_consume(out, (size_t)r);
    }
    ps_sock_stop_writing(s);
    return 0;
}

/* The close handshake is over (or failed): the socket lingers (sock.c), so
 * that our close frame is not destroyed by a reset. */
static void start_linger(ps_wsconn_t *wc)
{
    wc->next_ping = wc->pong_deadline = wc->close_deadline = 0;
    ps_sock_linger(wc->s);
}

/* The peer is gone: the bridge hears of it through on_disconnect. */
static void lost(ps_wsconn_t *wc)
{
    if (wc->final_code == 0) /* else the application hears that code (a ping timeout) */
        ps_ws_eof(&wc->ws);
    ps_sock_close(wc->s);
}

/* After the loop read or wrote: flush, tell the bridge, move the close
 * handshake on. May close the connection. */
static void progress(ps_wsconn_t *wc)
{
    ps_sock_t *s = wc->s;
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
    if (s->closed)
        return;
    if (ps_ws_queued(&wc->ws) > 0 && wc->ops)
        wc->ops->on_events(wc, wc->data);
    if (s->closed)
        return;
    if (ps_ws_want_read(&wc->ws) && !s->lingering)
        ev_io_start(s->w->loop, &s->rio);
    if (!s->lingering && ps_ws_done(&wc->ws) && ps_buf_size(ps_ws_output(&wc->ws)) == 0)
        start_linger(wc);
    else if (!s->lingering && wc->ws.close_sent && wc->close_deadline == 0)
        wc->close_deadline = ev_now(s->w->loop) + CLOSE_TIMEOUT;
    rearm(wc);
}

/* Has the loop call progress() soon, from outside the bridge's call. */
static void later(ps_wsconn_t *wc)
{
    ps_sock_feed_write(wc->s);
}

ps_wsconn_t *ps_wsconn_of(ps_exchange_t *x)
{
    ps_sock_t *s = ps_exchange_sock(x);
    return s && s->proto == &ws_proto ? s->data : NULL;
}

int ps_wsconn_accept(ps_exchange_t *x, const ps_ws_handshake_t *hs, ps_slice_t subprotocol,
                     const ps_header_t *h, size_t n, const ps_wsconn_ops_t *ops, void *data)
{
    ps_sock_t *s = ps_exchange_sock(x);
    if (s == NULL)
        return -EINVAL;
    ps_worker_t *w = s->w;
    struct ev_loop *loop = w->loop;
    if (s->failed || s->closed || s->proto == &ws_proto)
        return -EPIPE;
    ps_wsconn_t *wc = calloc(1, sizeof(*wc));
    if (wc == NULL)
        return -ENOMEM;
    wc->s = s;
    wc->limits.max_message = w->cfg.ws_max_size;
    wc->limits.max_queue = w->cfg.ws_max_queue;
    ps_ws_deflate_t d;
    memset(&d, 0, sizeof(d));
    if (w->cfg.ws_deflate) {
        ps_ws_deflate_config_t dc = PS_WS_DEFLATE_DEFAULTS;
        dc.level = (int8_t)w->cfg.ws_deflate_level;
        if (!ps_ws_negotiate_deflate(x->req, &dc, &d))
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
    /* What the carrier still had queued goes first, then the 101. */
    ps_buf_t *out = ps_ws_output(&wc->ws);
    if ((ps_buf_size(&s->wbuf) && /* never allocated when nothing was queued */
         (rc = ps_buf_append(out, ps_buf_head(&s->wbuf), ps_buf_size(&s->wbuf))) < 0) ||
        (rc = ps_ws_write_accept(out, hs->key, subprotocol, &d, h, n, extra, ne)) < 0 ||
        (rc = ps_exchange_upgrade(x)) < 0) {
        ps_ws_free(&wc->ws);
        free(wc);
        return rc;
    }
    ps_buf_reset(&s->wbuf);
    ps_ws_set_storage(&wc->ws, ops->storage);
    wc->ops = ops;
    wc->data = data;
    ps_sock_set_proto(s, &ws_proto, wc);
    if (w->metrics)
        PS_METRICS_ADD(w->metrics->ws_opened, 1);
    if (w->cfg.ws_ping_interval > 0)
        wc->next_ping = ev_now(loop) + w->cfg.ws_ping_interval;
    if (flush_out(wc) < 0) {
        later(wc); /* the head is lost with the connection */
        return 0;
    }
    ev_io_start(loop, &s->rio);
    if (ps_buf_size(&s->rbuf) > 0) /* frames sent right after the request */
        ps_sock_feed_read(s);
    rearm(wc);
    return 0;
}

/* Feeds what waits in s->rbuf (and the session's own leftovers). Returns 0
 * or -ENOMEM. */
static int feed_pending(ps_wsconn_t *wc)
{
    ps_sock_t *s = wc->s;
    size_t used = 0;
    int rc = ps_ws_feed(&wc->ws, ps_buf_head(&s->rbuf), ps_buf_size(&s->rbuf), &used);
    ps_buf_consume(&s->rbuf, used);
    if (ps_buf_size(&s->rbuf) == 0)
        ps_buf_shrink(&s->rbuf, RBUF_KEEP);
    return rc;
}

/* The read watcher (ws_proto; the socket drains a lingering one itself).
 * May close s. */
static void ws_on_read(ps_sock_t *s)
{
    ps_wsconn_t *wc = s->data;
    struct ev_loop *loop = s->w->loop;
    char *scratch = s->w->scratch;
    if (feed_pending(wc) < 0) {
        lost(wc);
        return;
    }
    if (ps_ws_want_read(&wc->ws) && ps_buf_size(&s->rbuf) == 0) {
        ssize_t n = ps_sock_read(s, scratch, sizeof(s->w->scratch));
        if (n == PS_IO_WANT_WRITE) {
            ev_io_start(loop, &s->wio); /* TLS: ws_on_write retries the read */
            n = PS_IO_WANT_READ;
        }
        if (n == 0 || (n < 0 && n != PS_IO_WANT_READ)) {
            lost(wc);
            return;
        }
        if (n > 0) {
            size_t used = 0;
            if (ps_ws_feed(&wc->ws, scratch, (size_t)n, &used) < 0 ||
                (used < (size_t)n &&
                 ps_buf_append(&s->rbuf, scratch + used, (size_t)n - used) < 0)) {
                lost(wc);
                return;
            }
        }
    }
    if (!ps_ws_want_read(&wc->ws))
        ps_sock_stop_reading(s); /* the application has enough to read */
    else if (ps_unlikely(ps_transport_pending(&s->t)))
        ps_sock_feed_read(s); /* TLS: decrypted input waits */
    if (wc->pong_deadline > 0 && wc->ws.pongs_received != wc->pongs_at_ping)
        wc->pong_deadline = 0;
    progress(wc);
}

/* The write watcher (ws_proto). May close s. */
static void ws_on_write(ps_sock_t *s)
{
    if (ps_unlikely(!s->lingering &&
                    (ps_transport_blocked(&s->t) & PS_TRANSPORT_READ_WANTS_WRITE))) {
        ws_on_read(s); /* TLS: a read that waited for this */
        if (s->closed)
            return;
    }
    progress(s->data);
}

/* The timer (ws_proto): pings, their timeout, the close timeout. May close
 * s. */
static void ws_on_timer(ps_sock_t *s)
{
    ps_wsconn_t *wc = s->data;
    ps_config_t *cfg = &s->w->cfg;
    ev_tstamp now = ev_now(s->w->loop);
    if (wc->close_deadline > 0 && now >= wc->close_deadline) {
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
    ps_sock_t *s = wc->s;
    int had_room = ps_ws_want_read(&wc->ws);
    int r = ps_ws_next_event(&wc->ws, ev);
    if (r && s->w->metrics && (ev->type == PS_WS_EV_TEXT || ev->type == PS_WS_EV_BINARY))
        PS_METRICS_ADD(s->w->metrics->ws_messages_in, 1);
    if (r && !had_room && ps_ws_want_read(&wc->ws) && !s->closed && !s->lingering) {
        /* The queue had stopped the reading: what waits is fed from the loop. */
        ev_io_start(s->w->loop, &s->rio);
        ev_feed_event(s->w->loop, &s->rio, EV_READ);
    }
    return r;
}

/* After the bridge queued output: write what the socket takes now. */
static int after_send(ps_wsconn_t *wc)
{
    ps_sock_t *s = wc->s;
    if (!ev_is_active(&s->wio)) {
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
    ps_sock_t *s = wc->s;
    struct iovec iov[2];
    int rc = ps_ws_send_prepare(&wc->ws, type, data, len, 0, iov);
    if (rc < 0)
        return rc;
    ssize_t r = ps_transport_writev(&s->t, iov, 2);
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
    ps_sock_t *s = wc->s;
    int rc;
    if (s->closed || wc->broken)
        return -EPIPE;
    if (s->t.ssl == NULL && !ev_is_active(&s->wio) && !ps_ws_want_write(&wc->ws))
        rc = send_direct(wc, type, data, len);
    else
        rc = ps_ws_send(&wc->ws, type, data, len, 0);
    if (rc < 0)
        return rc;
    if (wc->s->w->metrics)
        PS_METRICS_ADD(wc->s->w->metrics->ws_messages_out, 1);
    return after_send(wc);
}

int ps_wsconn_close(ps_wsconn_t *wc, uint16_t code, const char *reason, size_t len)
{
    if (wc->s->closed)
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
    ps_sock_t *s = wc->s;
    ps_ws_event_t ev;
    wc->ops = NULL;
    wc->data = NULL;
    wc->writable_owed = 0;
    if (s->closed)
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
    if (wc->s->closed || wc->ws.close_sent)
        return;
    if (ps_ws_send_close(&wc->ws, 1001, NULL, 0) == 0)
        later(wc);
}

/* The socket is closed (ws_proto). */
static void ws_after_close(ps_sock_t *s)
{
    if (s->w->metrics)
        PS_METRICS_ADD(s->w->metrics->ws_closed, 1);
}

/* A graceful stop (ws_proto): closes once the peer answers. */
static void ws_stop_idle(ps_sock_t *s)
{
    ps_wsconn_going_away(s->data);
}

/* The socket is being freed (ws_proto). */
static void ws_free(ps_sock_t *s, void *data)
{
    ps_wsconn_t *wc = data;
    PS_UNUSED(s);
    ps_ws_free(&wc->ws);
    free(wc);
}

static const ps_sock_proto_t ws_proto = {
    .on_read = ws_on_read,
    .on_write = ws_on_write,
    .on_timer = ws_on_timer,
    .after_close = ws_after_close,
    .stop_idle = ws_stop_idle,
    .free = ws_free,
};
