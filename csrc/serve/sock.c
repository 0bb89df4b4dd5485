/* One accepted socket under whatever protocol speaks over it (see sock.h):
 * its watchers, output queue, held output, linger and close. */
#define _GNU_SOURCE
#include "serve/sock.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "base/common.h"
#include "serve/exchange.h"
#include "serve/wstate.h"

/* After an answer, input is drained this long before the close. */
#define LINGER_SECONDS 2.0
/* A sendfile is done in pieces of this size (the loop moves between them). */
#define SENDFILE_CHUNK (4 * 1024 * 1024)

static void on_read(struct ev_loop *loop, ev_io *io, int revents);
static void on_write(struct ev_loop *loop, ev_io *io, int revents);
static void on_timer(struct ev_loop *loop, ev_timer *t, int revents);

void ps_sock_init(ps_sock_t *s, ps_worker_t *w, int fd, const struct sockaddr_storage *peer,
                  socklen_t peer_len, int is_unix, const ps_sock_proto_t *proto, void *data)
{
    s->w = w;
    s->fd = fd;
    ps_transport_init_plain(&s->t, fd);
    s->proto = s->owner = proto;
    s->data = data;
    s->is_unix = is_unix != 0;
    s->sf_fd = -1;
    memcpy(&s->peer, peer, peer_len);
    s->peer_len = peer_len;
    ev_io_init(&s->rio, on_read, fd, EV_READ);
    ev_io_init(&s->wio, on_write, fd, EV_WRITE);
    ev_init(&s->timer, on_timer);
    s->timer.repeat = w->cfg.timeout_keep_alive;
    ev_timer_again(w->loop, &s->timer);
    if (w->metrics)
        PS_METRICS_ADD(w->metrics->conns_opened, 1);
}

void ps_sock_link(ps_sock_t *s)
{
    ps_worker_t *w = s->w;
    s->next = w->conns;
    if (w->conns)
        w->conns->prev = s;
    w->conns = s;
    w->nconns++;
}

void ps_sock_set_proto(ps_sock_t *s, const ps_sock_proto_t *proto, void *data)
{
    struct ev_loop *loop = s->w->loop;
    ev_io_stop(loop, &s->rio);
    ev_io_stop(loop, &s->wio);
    ev_timer_stop(loop, &s->timer);
    s->proto = proto;
    s->data = data;
}

void ps_sock_free(ps_sock_t *s)
{
    if (s->proto != s->owner && s->proto->free)
        s->proto->free(s, s->data);
    ps_buf_free(&s->rbuf);
    ps_buf_free(&s->wbuf);
}

void ps_sock_release(ps_sock_t *s)
{
    s->owner->free(s, NULL);
}

int ps_sock_local_address(ps_sock_t *s, struct sockaddr_storage *ss, socklen_t *len)
{
    if (s->local_len) {
        memcpy(ss, s->local, s->local_len);
        *len = s->local_len;
        return 0;
    }
    *len = sizeof(*ss);
    return getsockname(s->fd, (struct sockaddr *)ss, len) < 0 ? -errno : 0;
}

/* ---- the TLS prelude ---- */

int ps_sock_start_tls(ps_sock_t *s, ps_tls_ctx_t *ctx)
{
    int rc = ps_transport_init_tls(&s->t, s->fd, ctx);
    if (rc < 0)
        return rc;
    s->handshaking = 1;
    ps_sock_timer_again(s, s->w->cfg.timeout_tls_handshake);
    return 0;
}

int ps_sock_handshake(ps_sock_t *s)
{
    struct ev_loop *loop = s->w->loop;
    int rc = ps_transport_handshake(&s->t);
    if (rc == PS_IO_WANT_WRITE) {
        ev_io_start(loop, &s->wio);
        return PS_SOCK_HS_WAIT;
    }
    ev_io_stop(loop, &s->wio);
    if (rc == PS_IO_WANT_READ)
        return PS_SOCK_HS_WAIT;
    if (rc == PS_TLS_PLAINTEXT) {
        ps_transport_downgrade(&s->t);
        s->handshaking = 0;
        return PS_SOCK_HS_PLAINTEXT;
    }
    if (rc == -EPROTO)
        return PS_SOCK_HS_FAILED;
    if (rc != PS_TLS_DONE)
        return PS_SOCK_HS_GONE;
    s->handshaking = 0;
    return PS_SOCK_HS_DONE;
}

/* ---- input ---- */

ssize_t ps_sock_read(ps_sock_t *s, char *dst, size_t cap)
{
    ssize_t n = ps_transport_read(&s->t, dst, cap);
    if (n > 0 && s->w->metrics)
        PS_METRICS_ADD(s->w->metrics->bytes_in, n);
    return n;
}

void ps_sock_start_reading(ps_sock_t *s)
{
    ev_io_start(s->w->loop, &s->rio);
    if (ps_unlikely(ps_transport_pending(&s->t)))
        ev_feed_event(s->w->loop, &s->rio, EV_READ);
}

void ps_sock_stop_reading(ps_sock_t *s)
{
    ev_io_stop(s->w->loop, &s->rio);
}

void ps_sock_feed_read(ps_sock_t *s)
{
    ev_feed_event(s->w->loop, &s->rio, EV_READ);
}

void ps_sock_feed_write(ps_sock_t *s)
{
    ev_feed_event(s->w->loop, &s->wio, EV_WRITE);
}

/* Lingering: reads and drops what the peer still sends; its close (or an
 * error) closes the socket. */
static void drain(ps_sock_t *s)
{
    for (;;) {
        ssize_t n = ps_sock_read(s, s->w->scratch, sizeof(s->w->scratch));
        if (n > 0)
            continue;
        if (n != PS_IO_WANT_READ && n != PS_IO_WANT_WRITE)
            ps_sock_close(s);
        return;
    }
}

static void on_read(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_sock_t *s = ps_container_of(io, ps_sock_t, rio);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    if (ps_unlikely(s->lingering)) {
        drain(s);
        return;
    }
    s->proto->on_read(s);
}

static void on_write(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_sock_t *s = ps_container_of(io, ps_sock_t, wio);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    if (ps_unlikely(s->closed))
        return;
    s->proto->on_write(s); /* also while lingering: a protocol may finish its state */
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_sock_t *s = ps_container_of(t, ps_sock_t, timer);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    if (s->lingering) {
        ps_sock_close(s);
        return;
    }
    s->proto->on_timer(s);
}

/* ---- timer ---- */

void ps_sock_timer_again(ps_sock_t *s, double seconds)
{
    if (seconds <= 0) {
        ev_timer_stop(s->w->loop, &s->timer);
        return;
    }
    s->timer.repeat = seconds;
    ev_timer_again(s->w->loop, &s->timer);
}

void ps_sock_timer_at(ps_sock_t *s, ev_tstamp at)
{
    struct ev_loop *loop = s->w->loop;
    ev_timer_stop(loop, &s->timer);
    if (at > 0) {
        ev_timer_set(&s->timer, PS_MAX(at - ev_now(loop), 1e-3), 0);
        ev_timer_start(loop, &s->timer);
    }
}

/* ---- output ---- */

void ps_sock_start_writing(ps_sock_t *s)
{
    if (!ev_is_active(&s->wio)) {
        ev_io_start(s->w->loop, &s->wio);
        ps_sock_timer_again(s, s->w->cfg.timeout_request_header);
    }
}

void ps_sock_stop_writing(ps_sock_t *s)
{
    ev_io_stop(s->w->loop, &s->wio);
}

int ps_sock_write_now(ps_sock_t *s, const struct iovec *iov, int n)
{
    struct iovec v[8];
    int k = 0;
    size_t queued = ps_buf_size(&s->wbuf);
    size_t total = queued;
    if (s->failed)
        return -EPIPE;
    if (queued)
        v[k++] = (struct iovec){ps_buf_head(&s->wbuf), queued};
    for (int i = 0; i < n; i++) {
        v[k++] = iov[i];
        total += iov[i].iov_len;
    }
    size_t sent = 0;
    if (!ev_is_active(&s->wio) && s->sf_fd < 0) {
        ssize_t r = ps_transport_writev(&s->t, v, k);
        if (r < 0 && r != PS_IO_WANT_WRITE && r != PS_IO_WANT_READ) {
            s->failed = 1;
            return (int)r;
        }
        sent = r < 0 ? 0 : (size_t)r;
        if (s->w->metrics)
            PS_METRICS_ADD(s->w->metrics->bytes_out, sent);
    }
    PS_ASSERT(sent <= total);
    if (sent == total) {
        ps_buf_reset(&s->wbuf);
        return PS_WRITE_DONE;
    }
    size_t from_queue = PS_MIN(sent, queued);
    ps_buf_consume(&s->wbuf, from_queue);
    size_t skip = sent - from_queue;
    for (int i = queued ? 1 : 0; i < k; i++) {
        if (skip >= v[i].iov_len) {
            skip -= v[i].iov_len;
            continue;
        }
        if (ps_buf_append(&s->wbuf, (char *)v[i].iov_base + skip, v[i].iov_len - skip) < 0) {
            s->failed = 1;
            return -ENOMEM;
        }
        skip = 0;
    }
    ps_sock_start_writing(s);
    return PS_WRITE_PENDING;
}

/* The pending sendfile, in pieces. Returns 0 when it is done, 1 when the
 * socket is full, -errno when the client is gone or the file shrank. */
static int flush_file(ps_sock_t *s)
{
    while (s->sf_left) {
        /* Over TLS without kernel TLS, a bounded pread and encrypt loop. */
        ssize_t r =
            ps_transport_sendfile(&s->t, s->sf_fd, s->sf_off, PS_MIN(s->sf_left, SENDFILE_CHUNK));
        if (r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ)
            return 1;
        if (r < 0) {
            s->failed = 1;
            return (int)r;
        }
        if (r == 0) { /* the file shrank under us: the response is short */
            s->failed = 1;
            return -EIO;
        }
        s->sf_off += r;
        s->sf_left -= (uint64_t)r;
        if (s->w->metrics)
            PS_METRICS_ADD(s->w->metrics->bytes_out, r);
    }
    return 0;
}

int ps_sock_flush(ps_sock_t *s)
{
    for (;;) {
        while (ps_buf_size(&s->wbuf)) {
            ssize_t r = ps_transport_send(&s->t, ps_buf_head(&s->wbuf), ps_buf_size(&s->wbuf),
                                          s->sf_fd >= 0 && s->sf_left > 0);
            if (r == PS_IO_WANT_WRITE || r == PS_IO_WANT_READ)
                return 1;
            if (r < 0) {
                s->failed = 1;
                return (int)r;
            }
            if (s->w->metrics)
                PS_METRICS_ADD(s->w->metrics->bytes_out, r);
            ps_buf_consume(&s->wbuf, (size_t)r);
        }
        if (s->sf_fd < 0)
            return 0;
        int rc = flush_file(s);
        if (rc != 0)
            return rc;
        s->sf_fd = -1;
        if (!s->sf_trailer)
            return 0;
        s->sf_trailer = 0;
        if (ps_buf_append(&s->wbuf, "\r\n", 2) < 0)
            return -ENOMEM;
    }
}

int ps_sock_wait(ps_sock_t *s, short events)
{
    if (ps_transport_blocked(&s->t) & PS_TRANSPORT_WRITE_WANTS_READ)
        events = POLLIN; /* TLS: the write waits for the peer's bytes */
    struct pollfd pfd = {.fd = s->fd, .events = events};
    int ms = (int)(s->w->cfg.timeout_request_header * 1000);
    for (;;) {
        int rc = poll(&pfd, 1, ms > 0 ? ms : -1);
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

/* ---- output held until the loop sleeps ----
 *
 * A small write is not sent at once: it is queued and its socket put on
 * the worker's held list, and ps_sock_flush_held() sends the list before
 * the loop polls again. The requests of one iteration then run their Python
 * back to back and their responses leave back to back, so the client is
 * woken once for a burst instead of once per response (each wake-up is a
 * scheduler round trip charged to the writer), and the interpreter and the
 * kernel's network path do not take turns in the caches. The delay is
 * bounded: a response waits for at most HOLD_CONNS others, and anything
 * larger than HOLD_BYTES goes out at once with what was held before it. */
#define HOLD_BYTES (16 * 1024)
#define HOLD_CONNS 32
/* ... and an application call is not started while output has waited this
 * long (ns): a response waits for at most one slow request after it. */
#define HOLD_NS 1000000u

/* Sends the held output of the sockets that held some since the last
 * pass, without moving any of them on (that is the flush's job): a failure
 * leaves the socket failed, a full socket starts its write watcher. */
static void write_held(ps_worker_t *w)
{
    for (ps_sock_t *s = w->held; s; s = s->next_held) {
        if (!s->held_new)
            continue;
        s->held_new = 0;
        if (s->closed || ev_is_active(&s->wio))
            continue;
        if (ps_sock_flush(s) == 1)
            ps_sock_start_writing(s);
    }
    w->held_new = 0;
}

/* Queues the iovecs behind what is held already and puts s on the held
 * list. Returns PS_WRITE_DONE or -ENOMEM. */
static int hold(ps_sock_t *s, const struct iovec *iov, int n)
{
    ps_worker_t *w = s->w;
    if (!s->held_new && w->held_new >= HOLD_CONNS)
        write_held(w); /* this socket's output starts the next group */
    for (int i = 0; i < n; i++) {
        if (ps_buf_append(&s->wbuf, iov[i].iov_base, iov[i].iov_len) < 0) {
            s->failed = 1;
            return -ENOMEM;
        }
    }
    if (!s->held) {
        s->held = 1;
        s->next_held = w->held;
        w->held = s;
    }
    if (!s->held_new) {
        s->held_new = 1;
        if (w->held_new++ == 0)
            w->held_since = ps_metrics_clock();
    }
    return PS_WRITE_DONE;
}

void ps_sock_write_overdue(ps_worker_t *w)
{
    if (w->held_new && ps_metrics_clock() - w->held_since >= HOLD_NS)
        write_held(w);
}

int ps_sock_send(ps_sock_t *s, const struct iovec *iov, int n)
{
    if (s->failed)
        return -EPIPE;
    if (ev_is_active(&s->wio) || s->sf_fd >= 0)
        return ps_sock_write_now(s, iov, n);
    size_t total = ps_buf_size(&s->wbuf);
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (total > HOLD_BYTES)
        return ps_sock_write_now(s, iov, n);
    return hold(s, iov, n);
}

void ps_sock_flush_held(ps_worker_t *w)
{
    while (w->held) {
        ps_sock_t *s = w->held;
        w->held = s->next_held;
        s->next_held = NULL;
        s->held = 0;
        s->held_new = 0;
        /* A lingering or closed socket, or one handed to another protocol
         * (which took the queued bytes along), has nothing held. */
        if (s->closed || s->lingering || s->proto != s->owner || ev_is_active(&s->wio))
            continue;
        int rc = ps_sock_flush(s);
        if (rc < 0) {
            ps_sock_close(s);
            continue;
        }
        if (rc == 1) {
            ps_sock_start_writing(s);
            continue;
        }
        if (s->proto->on_flushed)
            s->proto->on_flushed(s);
    }
    w->held_new = 0;
}

/* ---- the end ---- */

void ps_sock_linger(ps_sock_t *s)
{
    ps_transport_shutdown(&s->t);
    s->lingering = 1;
    ev_io_stop(s->w->loop, &s->wio);
    ev_io_start(s->w->loop, &s->rio);
    ev_timer_stop(s->w->loop, &s->timer);
    ev_timer_set(&s->timer, LINGER_SECONDS, 0);
    ev_timer_start(s->w->loop, &s->timer);
}

/* Leaves the worker's live list for its dead one; the worker may then
 * accept again, or be done with a stop. */
void ps_sock_close(ps_sock_t *s)
{
    if (s->closed)
        return;
    /* Output held for the flush (see hold()) would have been in the kernel's
     * buffer by now: it leaves before the close, as that would have. */
    if (s->held && !s->failed && ps_buf_size(&s->wbuf) > 0 && !ev_is_active(&s->wio))
        ps_sock_flush(s);
    const ps_sock_proto_t *proto = s->proto, *owner = s->owner;
    if (owner->before_close)
        owner->before_close(s);
    if (proto != owner && proto->before_close)
        proto->before_close(s);
    struct ev_loop *loop = s->w->loop;
    ev_io_stop(loop, &s->rio);
    ev_io_stop(loop, &s->wio);
    ev_timer_stop(loop, &s->timer);
    ps_transport_close(&s->t);
    s->fd = -1;
    s->closed = 1;
    s->failed = 1;
    if (proto != owner && proto->after_close)
        proto->after_close(s);
    if (s->w->metrics)
        PS_METRICS_ADD(s->w->metrics->conns_closed, 1);
    s->w->conn_closed(s->w, s);
    if (owner->after_close)
        owner->after_close(s);
}

void ps_sock_stop_idle(ps_sock_t *s)
{
    if (s->proto->stop_idle)
        s->proto->stop_idle(s);
}
