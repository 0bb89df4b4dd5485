#define _GNU_SOURCE
#include "serve/h1conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/common.h"
#include "base/date.h"
#include "codec/proxyproto.h"
#include "serve/wstate.h"
#include "serve/body.h"
#include "serve/h2conn.h"
#include "serve/reqid.h"

/* The parser pauses once this much decoded body waits for an asynchronous
 * application. */
#define BODY_HIGH (256 * 1024)
/* Buffers larger than this are released when a connection goes idle. */
#define KEEP_BUF (64 * 1024)
/* The read buffer only passes input on to the parser: an idle connection
 * keeps no more of it than an ordinary head needs, whatever a large head or
 * body made it grow to. */
#define KEEP_RBUF (16 * 1024)
/* Input read ahead while an asynchronous application runs (pipelined
 * requests, or nothing but the client's close). */
#define READ_AHEAD (64 * 1024)

static void on_read(ps_sock_t *s);
static int take_proxy_header(ps_h1conn_t *c);
static void on_write(ps_sock_t *s);
static void process(ps_h1conn_t *c);
static void complete(ps_h1conn_t *c);
static int flush(ps_h1conn_t *c);
static void after_handler(ps_h1conn_t *c);
static int parse(ps_h1conn_t *c);
static void answer_error(ps_h1conn_t *c, int status, const char *reason);
static void refuse(ps_h1conn_t *c, const char *reason);
static void set_proxied_client(ps_h1conn_t *c, const ps_proxyproto_t *pp);

/* --metrics-bind: the request in progress is over, answered with status. */
static void count_request(ps_h1conn_t *c, int status)
{
    ps_metrics_t *m = c->s.w->metrics;
    if (m == NULL || c->metrics_start == 0)
        return;
    if (!c->x.unmetered) /* the health check's: counted apart (worker.c) */
        ps_metrics_request(m, ps_h1conn_request(c)->method, status,
                           ps_metrics_clock() - c->metrics_start);
    c->metrics_start = 0;
}

/* The states each state may move to (bit per enum ps_h1conn_state), checked
 * under PS_DEBUG_ASSERTS (unused, and not emitted, otherwise). */
#define S(x) (1u << (x))
static const uint8_t next_states[] __attribute__((unused)) = {
    [PS_H1CONN_IDLE] = S(PS_H1CONN_IDLE) | S(PS_H1CONN_BODY) | S(PS_H1CONN_APP) |
                       S(PS_H1CONN_LINGER) | S(PS_H1CONN_H2) | S(PS_H1CONN_CLOSED),
    [PS_H1CONN_BODY] =
        S(PS_H1CONN_APP) | S(PS_H1CONN_LINGER) | S(PS_H1CONN_H2) | S(PS_H1CONN_CLOSED),
    [PS_H1CONN_APP] = S(PS_H1CONN_IDLE) | S(PS_H1CONN_FLUSH) | S(PS_H1CONN_LINGER) |
                      S(PS_H1CONN_WS) | S(PS_H1CONN_CLOSED),
    [PS_H1CONN_FLUSH] = S(PS_H1CONN_IDLE) | S(PS_H1CONN_LINGER) | S(PS_H1CONN_CLOSED),
    [PS_H1CONN_LINGER] = S(PS_H1CONN_CLOSED),
    [PS_H1CONN_WS] = S(PS_H1CONN_CLOSED), /* the socket is another protocol's now */
    [PS_H1CONN_H2] = S(PS_H1CONN_CLOSED),
    [PS_H1CONN_CLOSED] = 0,
};
#undef S

static inline void set_state(ps_h1conn_t *c, enum ps_h1conn_state s)
{
    PS_ASSERT(c->state < PS_ARRAY_LEN(next_states) && (next_states[c->state] & (1u << s)));
    c->state = (uint8_t)s;
}

/* A write, end or abort called from outside a handler callback (an asyncio
 * task of an asynchronous layer) moves the connection on by itself. */
static void kick(ps_h1conn_t *c)
{
    if (c->in_handler || c->state != PS_H1CONN_APP)
        return;
    after_handler(c);
    if (c->state == PS_H1CONN_IDLE)
        process(c);
}

static const ps_slice_t server_line = PS_SLICE_LIT("Server: pyserver\r\n");
static const ps_slice_t chunked_line = PS_SLICE_LIT("Transfer-Encoding: chunked\r\n");
static const ps_slice_t close_line = PS_SLICE_LIT("Connection: close\r\n");
static const ps_exchange_ops_t ps_http1_exchange_ops;
static const ps_slice_t keep_alive_line = PS_SLICE_LIT("Connection: keep-alive\r\n");

static const ps_sock_proto_t h1_proto;

ps_h1conn_t *ps_h1conn_new(ps_worker_t *w, int fd, const struct sockaddr_storage *peer,
                           socklen_t peer_len, int is_unix)
{
    ps_h1conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    ps_sock_init(&c->s, w, fd, peer, peer_len, is_unix, &h1_proto, c);
    ps_body_spool_init(&c->spool);
    c->resp_left = -1;
    /* A unix-socket peer is trusted whatever address the kernel reports. */
    const ps_proxy_t *proxy = w->cfg.proxy;
    int trusted = proxy != NULL &&
                  (c->s.is_unix || ps_proxy_peer_trusted(proxy, (struct sockaddr *)peer, peer_len));
    c->x = (ps_exchange_t){
        .ops = &ps_http1_exchange_ops,
        .req = &c->parser.req,
        .body = &c->body,
        .worker = w,
        .handler_data = w->handler_data,
        .proxy = trusted ? proxy : NULL,
        .peer = &c->s.peer,
        .peer_len = peer_len,
        .is_unix = c->s.is_unix,
        .compress = w->cfg.compress,
    };
    c->async = w->async;
    /* A synchronous request's parser pauses once the body passes the spool
     * threshold, so that the body goes to the file from then on. */
    size_t high = BODY_HIGH;
    if (!w->async)
        high = (size_t)PS_MIN(w->cfg.body_spool_threshold, (uint64_t)SIZE_MAX - 1) + 1;
    ps_http1_init(&c->parser, &w->cfg.limits, &c->body, high);
    return c;
}

/* Closes the spool file, if any: its bytes are gone with it. */
static void drop_spool(ps_h1conn_t *c)
{
    ps_body_spool_drop(&c->spool);
}

/* The socket's free (h1_proto): the layer lets go of the connection's
 * exchange, then the socket (and a protocol it was handed to) and the
 * connection go. */
static void h1_free(ps_sock_t *s, void *data)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    PS_UNUSED(data);
    s->w->handler->dispose(&c->x);
    ps_encode_release(&c->x);
    ps_sock_free(s);
    drop_spool(c);
    ps_http1_free(&c->parser);
    if (c->uw) {
        ps_uwsgi_free(c->uw);
        free(c->uw);
    }
    ps_buf_free(&c->body);
    free(c);
}

static void arm_timer(ps_h1conn_t *c, double seconds)
{
    ps_sock_timer_again(&c->s, seconds);
}

/* The socket is about to close (h1_proto): the application threads'
 * requests (--threads) hear of it first, as a thread may read the body or
 * the transport until the layer detaches it. */
static void h1_before_close(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    c->tell_app = c->x.app_data != NULL && !c->in_handler;
    if (c->tell_app && c->x.deferred) {
        s->w->handler->on_disconnect(&c->x);
        c->tell_app = 0;
    }
}

/* The socket is closed (h1_proto): when the application is mid-response
 * and not on the stack, it hears of it through on_disconnect. */
static void h1_after_close(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    c->x.tls = NULL;
    drop_spool(c);
    set_state(c, PS_H1CONN_CLOSED);
    count_request(c, c->x.status);
    if (c->tell_app)
        s->w->handler->on_disconnect(&c->x);
}

/* Half-closes after an answer and drains what the client still sends
 * (ps_sock_linger). */
static void linger(ps_h1conn_t *c)
{
    set_state(c, PS_H1CONN_LINGER);
    ps_sock_linger(&c->s);
}

/* A graceful stop (h1_proto): closes the connection if it is between
 * requests. */
static void h1_stop_idle(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    if (c->state == PS_H1CONN_IDLE && !c->head_started && ps_buf_size(&c->s.rbuf) == 0)
        ps_h1conn_close(c);
}

/* ---- output ---- */

static void start_writing(ps_h1conn_t *c)
{
    ps_sock_start_writing(&c->s);
}

static int write_now(ps_h1conn_t *c, const struct iovec *iov, int n)
{
    return ps_sock_write_now(&c->s, iov, n);
}

static int flush(ps_h1conn_t *c)
{
    return ps_sock_flush(&c->s);
}

/* Held output (sock.c) went out: a response that was complete moves the
 * connection on to its next request (h1_proto). May close c and run
 * application code (a pipelined request). */
static void h1_on_flushed(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    if (c->state == PS_H1CONN_FLUSH) {
        complete(c);
        if (c->state == PS_H1CONN_IDLE)
            process(c); /* pipelined requests */
    }
}

/* Holds a small write for the flush before the loop sleeps (sock.c);
 * anything else goes out now, after what was held. */
static int send_iov(ps_h1conn_t *c, const struct iovec *iov, int n)
{
    return ps_sock_send(&c->s, iov, n);
}

int ps_h1conn_start_response(ps_h1conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n,
                             const char *body, size_t len)
{
    ps_head_info_t info;
    ps_request_t *r = ps_h1conn_request(c);
    if (c->s.failed)
        return -EPIPE;
    if (c->resp_started || ps_http_scan_head(status, h, n, &info) < 0)
        return -EINVAL;
    c->x.status = info.status;
    if (info.conn_close || !r->message_complete)
        c->keep_alive = 0;
    ps_slice_t extra[8]; /* chunked, date, server, hsts, connection, the request ID's 3 */
    size_t ne = 0;
    if (r->is_head || info.status < 200 || info.status == 204 || info.status == 304) {
        c->resp_no_body = 1;
    } else if (info.content_length >= 0) {
        c->resp_left = info.content_length;
    } else if (r->http_minor == 1 && ps_likely(c->uw == NULL)) {
        c->resp_chunked = 1;
        extra[ne++] = chunked_line;
    } else {
        c->keep_alive = 0; /* the end of the body is the end of the connection */
    }
    if (c->s.w->cfg.date_header && !info.has_date)
        extra[ne++] = ps_date_header((time_t)ev_now(c->s.w->loop));
    if (c->s.w->cfg.server_header && !info.has_server)
        extra[ne++] = server_line;
    if (ps_unlikely(c->s.w->cfg.hsts_line.len) && c->s.t.ssl != NULL && !info.has_sts)
        extra[ne++] = c->s.w->cfg.hsts_line;
    if (!c->keep_alive)
        extra[ne++] = close_line;
    else if (r->http_minor == 0)
        extra[ne++] = keep_alive_line;
    if (ps_reqid_respond(r, h, n)) {
        extra[ne++] = PS_SLICE_LIT("X-Request-ID: ");
        extra[ne++] = r->request_id;
        extra[ne++] = PS_SLICE_LIT("\r\n");
    }
    PS_ASSERT(ne <= PS_ARRAY_LEN(extra));
    if (ps_http1_write_head(&c->s.wbuf, status, h, n, extra, ne) < 0)
        return -ENOMEM;
    c->resp_started = 1;
    if (c->x.file_follows && len == 0 && !c->resp_no_body)
        return PS_WRITE_DONE; /* queued: flush() sends it with MSG_MORE before the file */
    return ps_h1conn_write(c, body, len);
}

int ps_h1conn_write(ps_h1conn_t *c, const char *data, size_t len)
{
    if (c->s.failed)
        return -EPIPE;
    if (c->resp_no_body)
        len = 0;
    if (c->resp_left >= 0) {
        len = PS_MIN(len, (uint64_t)c->resp_left); /* never more than announced */
        c->resp_left -= (int64_t)len;
    }
    if (len == 0) {
        if (ps_buf_size(&c->s.wbuf) == 0)
            return PS_WRITE_DONE;
        return send_iov(c, NULL, 0);
    }
    if (c->resp_chunked) {
        char size_line[PS_HTTP1_CHUNK_HEAD_MAX];
        size_t sl = ps_http1_chunk_head(size_line, len);
        struct iovec v[3] = {{size_line, sl}, {(void *)data, len}, {"\r\n", 2}};
        return send_iov(c, v, 3);
    }
    struct iovec v = {(void *)data, len};
    return send_iov(c, &v, 1);
}

int ps_h1conn_write_blocking(ps_h1conn_t *c, const char *data, size_t len)
{
    int rc = ps_h1conn_write(c, data, len);
    while (rc == PS_WRITE_PENDING) {
        rc = ps_sock_wait(&c->s, POLLOUT);
        if (rc < 0) {
            c->s.failed = 1;
            return rc;
        }
        rc = flush(c);
        if (rc == 0) {
            ev_io_stop(c->s.w->loop, &c->s.wio);
            ev_timer_stop(c->s.w->loop, &c->s.timer);
        }
    }
    return rc;
}

int ps_h1conn_sendfile(ps_h1conn_t *c, int fd, int64_t offset, uint64_t count)
{
    if (c->s.failed)
        return -EPIPE;
    if (c->resp_no_body)
        count = 0;
    if (c->resp_left >= 0) {
        count = PS_MIN(count, (uint64_t)c->resp_left);
        c->resp_left -= (int64_t)count;
    }
    if (count == 0)
        return ps_h1conn_write(c, NULL, 0);
    if (c->resp_chunked) {
        char size_line[PS_HTTP1_CHUNK_HEAD_MAX];
        size_t sl = ps_http1_chunk_head(size_line, count);
        if (ps_buf_append(&c->s.wbuf, size_line, sl) < 0)
            return -ENOMEM;
        c->s.sf_trailer = 1;
    }
    c->s.sf_fd = fd;
    c->s.sf_off = offset;
    c->s.sf_left = count;
    if (ev_is_active(&c->s.wio))
        return PS_WRITE_PENDING;
    int rc = flush(c);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        start_writing(c);
        return PS_WRITE_PENDING;
    }
    return PS_WRITE_DONE;
}

void ps_h1conn_end(ps_h1conn_t *c)
{
    c->resp_ended = 1;
    if (!c->s.failed) {
        if (c->resp_chunked) {
            struct iovec v = {PS_HTTP1_LAST_CHUNK, sizeof(PS_HTTP1_LAST_CHUNK) - 1};
            send_iov(c, &v, 1);
        } else if (c->resp_left > 0) {
            c->keep_alive = 0; /* shorter than announced: only a close can say so */
        }
    }
    kick(c);
}

int ps_h1conn_end_with_trailers(ps_h1conn_t *c, const ps_header_t *h, size_t n)
{
    if (!c->resp_chunked || c->s.failed) {
        ps_h1conn_end(c);
        return 0;
    }
    int rc = ps_http1_write_last_chunk(&c->s.wbuf, h, n);
    if (rc == -EINVAL)
        return rc;
    if (rc < 0)
        goto oom;
    c->resp_chunked = 0; /* the last chunk is queued: nothing more to frame */
    send_iov(c, NULL, 0);
    c->resp_ended = 1;
    kick(c);
    return 0;
oom:
    c->s.failed = 1;
    ps_h1conn_abort(c);
    return -ENOMEM;
}

void ps_h1conn_abort(ps_h1conn_t *c)
{
    c->aborted = 1;
    c->keep_alive = 0;
    kick(c);
}

int ps_h1conn_send_informational(ps_h1conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n)
{
    ps_head_info_t info;
    if (c->s.failed)
        return -EPIPE;
    if (c->resp_started || ps_http_scan_head(status, h, n, &info) < 0 || info.status >= 200 ||
        info.status < 102 || ps_h1conn_request(c)->http_minor == 0 || c->uw)
        return -EINVAL; /* nginx's uwsgi module reads one head: no 1xx */
    if (ps_http1_write_head(&c->s.wbuf, status, h, n, NULL, 0) < 0)
        return -ENOMEM;
    return write_now(c, NULL, 0); /* a hint or a go-ahead is worth nothing late */
}

/* Sends a complete canned response s (with Connection: close). */
static void send_canned(ps_h1conn_t *c, int status, ps_slice_t s)
{
    if (c->resp_started) {
        ps_h1conn_abort(c);
        return;
    }
    struct iovec v = {(void *)s.base, s.len};
    c->resp_started = 1;
    c->x.status = status;
    c->keep_alive = 0;
    send_iov(c, &v, 1);
    c->resp_ended = 1;
    kick(c);
}

void ps_h1conn_send_error(ps_h1conn_t *c, int status)
{
    send_canned(c, status, ps_http1_error_response(status));
}

void ps_h1conn_reject_response(ps_h1conn_t *c, int status, const char *reason, ps_slice_t response)
{
    if (c->s.w->handler->on_rejected && !c->resp_started)
        c->s.w->handler->on_rejected(&c->x, status, reason);
    if (c->s.w->metrics && !c->resp_started)
        ps_metrics_rejected(c->s.w->metrics, status);
    send_canned(c, status, response);
}

void ps_h1conn_reject(ps_h1conn_t *c, int status, const char *reason)
{
    ps_h1conn_reject_response(c, status, reason, ps_http1_error_response(status));
}

/* ---- input ---- */

/* Starts the read watcher. Input a TLS session already holds is not seen
 * by a poll of the socket: the watcher is then fed an event at once. */
static void start_reading(ps_h1conn_t *c)
{
    ps_sock_start_reading(&c->s);
}

/* Parses buffered input. Returns PS_HTTP1_* */
static int parse(ps_h1conn_t *c)
{
    size_t used = 0;
    int rc;
    if (ps_unlikely(c->uw != NULL))
        rc = ps_uwsgi_feed(c->uw, ps_buf_head(&c->s.rbuf), ps_buf_size(&c->s.rbuf), &used);
    else
        rc = ps_http1_feed(&c->parser, ps_buf_head(&c->s.rbuf), ps_buf_size(&c->s.rbuf), &used);
    if (used)
        c->head_started = 1;
    PS_ASSERT(used <= ps_buf_size(&c->s.rbuf));
    ps_buf_consume(&c->s.rbuf, used);
    return rc;
}

/* After parse() returned PS_HTTP1_ERROR: the answer and why. */
static int parse_status(const ps_h1conn_t *c)
{
    return c->uw ? c->uw->error_status : c->parser.error_status;
}

static const char *parse_reason(const ps_h1conn_t *c)
{
    return c->uw ? c->uw->error_reason : c->parser.error_reason;
}

/* A synchronous request's body as it arrives: it stays in c->body up to the
 * spool threshold; once the body is larger, what is buffered and everything
 * after goes to the spool file. Returns 0 or -errno (no spool file, or a
 * failed write). */
static int spool_body(ps_h1conn_t *c)
{
    return ps_body_spool(&c->spool, &c->body, ps_h1conn_request(c)->body_received,
                         c->s.w->cfg.body_spool_threshold, KEEP_BUF);
}

int ps_h1conn_body_fill(ps_h1conn_t *c)
{
    return ps_body_fill(&c->spool, &c->body);
}

/* While an asynchronous application runs, the connection keeps reading:
 * body bytes up to the high-water mark, then (once the body is complete)
 * only enough to notice the client's close. */
static void update_reading(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    if ((c->state != PS_H1CONN_APP && c->state != PS_H1CONN_FLUSH) || c->s.failed || !c->async)
        return;
    int want = r->message_complete ? ps_buf_size(&c->s.rbuf) < READ_AHEAD
                                   : ps_buf_size(&c->body) < BODY_HIGH;
    if (want)
        start_reading(c);
    else
        ev_io_stop(c->s.w->loop, &c->s.rio);
}

/* A malformed, oversized or stalled body while an asynchronous application
 * runs: the application hears a disconnect, the client gets the error (if
 * no response started; else the connection closes). May close c. */
static void body_failed(ps_h1conn_t *c, int status, const char *reason)
{
    c->error_status = status;
    c->keep_alive = 0;
    if (c->x.app_data)
        c->s.w->handler->on_disconnect(&c->x);
    c->in_handler = 1;
    ps_h1conn_reject(c, status, reason);
    c->in_handler = 0;
    after_handler(c);
}

int ps_h1conn_body_want(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    if (c->s.failed)
        return -ECONNRESET;
    if (c->error_status)
        return -EPROTO;
    if (ps_buf_size(&c->body) == 0 && !r->message_complete && ps_buf_size(&c->s.rbuf) > 0 &&
        parse(c) == PS_HTTP1_ERROR) {
        body_failed(c, parse_status(c), parse_reason(c));
        return -EPROTO;
    }
    if (ps_buf_size(&c->body) > 0 || r->message_complete)
        return 1;
    if (r->expect_continue && !c->continue_sent && !c->resp_started) {
        struct iovec v = {(void *)ps_http1_continue.base, ps_http1_continue.len};
        c->continue_sent = 1;
        if (write_now(c, &v, 1) < 0)
            return -ECONNRESET;
    }
    c->body_wanted = 1;
    update_reading(c);
    arm_timer(c, c->s.w->cfg.timeout_request_body); /* until a read adds body bytes */
    return 0;
}

/* Input while an asynchronous application runs. May close c. */
static void read_during_app(ps_h1conn_t *c, const char *data, size_t n)
{
    ps_request_t *r = ps_h1conn_request(c);
    if (ps_buf_append(&c->s.rbuf, data, n) < 0) {
        ps_h1conn_close(c);
        return;
    }
    if (!r->message_complete && parse(c) == PS_HTTP1_ERROR) {
        body_failed(c, parse_status(c), parse_reason(c));
        return;
    }
    if (c->body_wanted && (ps_buf_size(&c->body) > 0 || r->message_complete)) {
        c->body_wanted = 0;
        if (!ev_is_active(&c->s.wio))
            ev_timer_stop(c->s.w->loop, &c->s.timer);
        c->in_handler = 1;
        c->s.w->handler->on_body(&c->x);
        c->in_handler = 0;
        after_handler(c);
        if (c->state == PS_H1CONN_IDLE) {
            process(c);
            return;
        }
    }
    update_reading(c);
}

/* ---- HTTP/2 takes the socket over (h2conn.h) ---- */

/* After h2conn.c took the socket (it may have closed it already). */
static void switched_to_h2(ps_h1conn_t *c)
{
    if (c->state != PS_H1CONN_CLOSED)
        set_state(c, PS_H1CONN_H2);
}

/* Hands the socket to HTTP/2 with preread (the preface and what followed,
 * or nothing). Returns 0, or -1 when out of memory (c is then closed).
 * May close c. */
static int start_h2(ps_h1conn_t *c, const char *preread, size_t n)
{
    if (ps_h2conn_start(&c->s, &c->x, preread, n) < 0) {
        ps_h1conn_close(c);
        return -1;
    }
    switched_to_h2(c);
    return 0;
}

/* ---- TLS ---- */

/* nginx's answer, in clear text, to clear-text HTTP on a TLS port. */
#define PLAIN_BODY "The plain HTTP request was sent to HTTPS port\n"
static const ps_slice_t plain_response = PS_SLICE_LIT("HTTP/1.1 400 Bad Request\r\n"
                                                      "Content-Type: text/plain\r\n"
                                                      "Content-Length: 46\r\n"
                                                      "Connection: close\r\n"
                                                      "\r\n" PLAIN_BODY);
_Static_assert(sizeof(PLAIN_BODY) - 1 == 46, "Content-Length of the plain-HTTP answer");

int ps_h1conn_start_tls(ps_h1conn_t *c, ps_tls_ctx_t *ctx)
{
    return ps_sock_start_tls(&c->s, ctx);
}

ps_slice_t ps_h1conn_alpn(const ps_h1conn_t *c)
{
    return ps_tls_alpn(&c->s.t);
}

/* Clear-text HTTP on a TLS port: answered in clear (the session is
 * dropped) and logged once as a rejection; the request is drained by the
 * linger. May close c. */
static void answer_plaintext(ps_h1conn_t *c)
{
    set_state(c, PS_H1CONN_APP);
    ev_io_stop(c->s.w->loop, &c->s.rio);
    c->in_handler = 1;
    ps_h1conn_reject_response(c, 400, "The plain HTTP request was sent to HTTPS port",
                              plain_response);
    c->in_handler = 0;
    after_handler(c);
}

static void refuse(ps_h1conn_t *c, const char *reason);

/* One step of the TLS handshake, on either watcher. Returns 0 when it is
 * done and the caller goes on reading (a TLS 1.3 client's request can come
 * with its Finished), 1 when it waits or c was answered or closed. A
 * failed handshake (garbage, a refused client certificate) costs only c,
 * and one line (the reason) in the error log. */
static int handshake(ps_h1conn_t *c)
{
    switch (ps_sock_handshake(&c->s)) {
    case PS_SOCK_HS_WAIT:
        return 1;
    case PS_SOCK_HS_PLAINTEXT:
        answer_plaintext(c);
        return 1;
    case PS_SOCK_HS_FAILED: {
        char why[192];
        snprintf(why, sizeof(why), "TLS handshake failed: %s", c->s.t.reason);
        refuse(c, why);
        return 1;
    }
    case PS_SOCK_HS_GONE:
        ps_h1conn_close(c);
        return 1;
    default: /* PS_SOCK_HS_DONE */
        break;
    }
    c->x.secure = 1;
    c->x.tls = &c->s.t;
    ps_slice_t alpn = ps_h1conn_alpn(c);
    if (alpn.len == 2 && memcmp(alpn.base, "h2", 2) == 0) {
        /* HTTP/2 takes the connection over; input the session already
         * decrypted (the client preface can come with its Finished) is
         * read by its first read event. */
        if (start_h2(c, NULL, 0) == 0 && ps_transport_pending(&c->s.t))
            ps_sock_feed_read(&c->s);
        return 1;
    }
    if (c->s.w->cfg.h2_only) {
        answer_error(c, 505, "HTTP/1 is off (--http 2)");
        return 1;
    }
    arm_timer(c, c->s.w->cfg.timeout_keep_alive);
    return 0;
}

/* TLS, before on_read reads: the handshake, or a write that waits for the
 * peer's bytes. Returns 0 to read, 1 when c was handled (maybe closed). */
static int tls_before_read(ps_h1conn_t *c)
{
    if (c->s.handshaking)
        return handshake(c);
    if ((ps_transport_blocked(&c->s.t) & PS_TRANSPORT_WRITE_WANTS_READ) &&
        ev_is_active(&c->s.wio)) {
        on_write(&c->s);
        return c->state == PS_H1CONN_CLOSED;
    }
    return 0;
}

/* TLS, before on_write flushes: a handshake step or a read that waited
 * for the socket to be writable goes first. Returns 0 to flush, 1 when
 * that was all (c may be closed). */
static int tls_before_write(ps_h1conn_t *c)
{
    if (!c->s.handshaking && !(ps_transport_blocked(&c->s.t) & PS_TRANSPORT_READ_WANTS_WRITE))
        return 0;
    if (ps_buf_size(&c->s.wbuf) == 0 && c->s.sf_fd < 0)
        ev_io_stop(c->s.w->loop, &c->s.wio); /* it watched for the read's sake only */
    on_read(&c->s);
    return 1;
}

/* ---- the uwsgi protocol (uwsgi listeners) ---- */

int ps_h1conn_speak_uwsgi(ps_h1conn_t *c)
{
    ps_worker_t *w = c->s.w;
    const ps_proxy_t *trust = w->cfg.uwsgi_trust;
    if (!c->s.is_unix &&
        (trust == NULL ||
         !ps_proxy_peer_trusted(trust, (struct sockaddr *)&c->s.peer, c->s.peer_len))) {
        refuse(c, "an untrusted peer spoke to a uwsgi listener (see --forwarded-allow-ips)");
        return -1;
    }
    c->uw = malloc(sizeof(*c->uw));
    if (c->uw == NULL) {
        ps_h1conn_close(c);
        return -1;
    }
    size_t high = BODY_HIGH;
    if (!w->async)
        high = (size_t)PS_MIN(w->cfg.body_spool_threshold, (uint64_t)SIZE_MAX - 1) + 1;
    ps_uwsgi_init(c->uw, &w->cfg.uwsgi_limits, &c->body, high);
    c->x.req = &c->uw->req;
    return 0;
}

/* "on", "1" or "yes" (any case): how CGI gateways say HTTPS. */
static int https_on(ps_slice_t v)
{
    return (v.len == 2 && strncasecmp(v.base, "on", 2) == 0) || (v.len == 1 && v.base[0] == '1') ||
           (v.len == 3 && strncasecmp(v.base, "yes", 3) == 0);
}

/* REMOTE_ADDR and REMOTE_PORT as an address; returns 0, or -1 when they
 * are not an IP address and a port (nginx on a unix socket sends "unix:"). */
static int uwsgi_client(ps_slice_t addr, ps_slice_t port, ps_proxyproto_t *pp)
{
    char text[INET6_ADDRSTRLEN];
    int p = port.len == 0 ? 0 : ps_parse_port(port.base, port.len);
    if (addr.len == 0 || addr.len >= sizeof(text) || p < 0)
        return -1;
    memcpy(text, addr.base, addr.len);
    text[addr.len] = '\0';
    memset(pp, 0, sizeof(*pp));
    struct sockaddr_in *in = (struct sockaddr_in *)&pp->src;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&pp->src;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)p);
        pp->src_len = sizeof(*in);
    } else if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p);
        pp->src_len = sizeof(*in6);
    } else {
        return -1;
    }
    return 0;
}

/* The packet is in: its variables say who the client is (the peer, a
 * trusted nginx, knows): REMOTE_ADDR and REMOTE_PORT become the peer, as a
 * PROXY header's client does; HTTPS=on or REQUEST_SCHEME=https make the
 * scheme https; SERVER_NAME and SERVER_PORT name the server;
 * SERVER_PROTOCOL HTTP/2 the version the application is told. */
static void take_uwsgi_vars(ps_h1conn_t *c)
{
    const ps_uwsgi_cgi_t *cgi = &c->uw->cgi;
    ps_proxyproto_t pp;
    if (uwsgi_client(cgi->remote_addr, cgi->remote_port, &pp) == 0)
        set_proxied_client(c, &pp);
    if (https_on(cgi->https) ||
        (cgi->request_scheme.len == 5 && strncasecmp(cgi->request_scheme.base, "https", 5) == 0))
        c->x.secure = 1;
    if (cgi->server_name.base != NULL && cgi->server_name.len > 0) {
        c->x.server_name = cgi->server_name;
        c->x.server_port = cgi->server_port;
    }
    c->x.http2 = c->uw->http_major == 2; /* the client spoke HTTP/2 to nginx */
}

/* ---- the PROXY protocol (--proxy-protocol listeners) ---- */

void ps_h1conn_expect_proxy_header(ps_h1conn_t *c)
{
    const ps_proxy_t *trust = c->s.w->cfg.proxyproto_trust;
    int trusted = c->s.is_unix ||
                  (trust != NULL &&
                   ps_proxy_peer_trusted(trust, (struct sockaddr *)&c->s.peer, c->s.peer_len));
    c->proxyproto = trusted ? PS_H1CONN_PP_EXPECT : PS_H1CONN_PP_REFUSE;
    if (trusted)
        arm_timer(c, c->s.w->cfg.timeout_request_header);
}

/* Closes a connection refused before its first request, after the layer
 * logged why (one line). */
static void refuse(ps_h1conn_t *c, const char *reason)
{
    if (c->s.w->handler->on_refused)
        c->s.w->handler->on_refused(&c->x, reason);
    ps_h1conn_close(c);
}

/* The PROXY header's client becomes the peer; whether its own proxy
 * headers are read is decided again for it. */
static void set_proxied_client(ps_h1conn_t *c, const ps_proxyproto_t *pp)
{
    const ps_proxy_t *proxy = c->s.w->cfg.proxy;
    memcpy(&c->s.peer, &pp->src, pp->src_len);
    c->s.peer_len = c->x.peer_len = pp->src_len;
    /* x.is_unix says the client has no address and the server is a path. */
    c->x.is_unix = c->s.is_unix && pp->src.ss_family == AF_UNIX;
    c->x.proxy = proxy && ps_proxy_peer_trusted(proxy, (struct sockaddr *)&c->s.peer, c->s.peer_len)
                     ? proxy
                     : NULL;
}

/* Settles the PROXY header at the start of rbuf: the one a trusted peer
 * owes, or the one an untrusted peer may not send. Returns 1 when settled
 * (the HTTP bytes follow in rbuf), 0 when more bytes are needed, -1 when
 * the connection was closed. */
static int take_proxy_header(ps_h1conn_t *c)
{
    const char *b = ps_buf_head(&c->s.rbuf);
    size_t n = ps_buf_size(&c->s.rbuf);
    if (c->proxyproto == PS_H1CONN_PP_REFUSE) {
        int sent = ps_proxyproto_detect(b, n);
        if (sent == 0)
            return 0;
        if (sent > 0) {
            refuse(c, "an untrusted peer sent a PROXY header");
            return -1;
        }
        c->proxyproto = PS_H1CONN_PP_NONE; /* a direct client: plain HTTP */
        return 1;
    }
    ps_proxyproto_t pp;
    int len = ps_proxyproto_parse(b, n, &pp);
    if (len == 0)
        return 0;
    if (len < 0) {
        refuse(c, "a trusted peer sent no valid PROXY header");
        return -1;
    }
    ps_buf_consume(&c->s.rbuf, (size_t)len);
    c->proxyproto = PS_H1CONN_PP_NONE;
    if (!pp.local)
        set_proxied_client(c, &pp);
    arm_timer(c, c->s.w->cfg.timeout_keep_alive);
    return 1;
}

void ps_h1conn_accepted(ps_h1conn_t *c)
{
    on_read(&c->s);
    /* Whatever state the first bytes left it in, a connection that is not
     * closed and not handed to a synchronous application keeps reading. */
    if (c->state == PS_H1CONN_CLOSED || ev_is_active(&c->s.rio))
        return;
    if (c->state == PS_H1CONN_IDLE || c->state == PS_H1CONN_BODY || c->state == PS_H1CONN_LINGER)
        start_reading(c);
    else
        update_reading(c);
}

/* The read watcher (h1_proto). May close c. */
static void on_read(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    ps_worker_t *w = s->w;
    struct ev_loop *loop = w->loop;
    if (ps_unlikely(c->x.deferred) && s->t.ssl == NULL) {
        ev_io_stop(loop, &s->rio); /* see after_handler: it waits for the response */
        return;
    }
    if (ps_unlikely(c->s.t.ssl != NULL) && tls_before_read(c) != 0)
        return;
    ssize_t n = ps_sock_read(s, w->scratch, sizeof(w->scratch));
    if (n == PS_IO_WANT_READ)
        return;
    if (n == PS_IO_WANT_WRITE) { /* TLS: on_write retries the read */
        ev_io_start(loop, &c->s.wio);
        return;
    }
    if (n <= 0) {
        ps_h1conn_close(c);
        return;
    }
    if (c->state == PS_H1CONN_APP || c->state == PS_H1CONN_FLUSH) {
        read_during_app(c, w->scratch, (size_t)n);
        return;
    }
    if (ps_buf_append(&c->s.rbuf, w->scratch, (size_t)n) < 0) {
        ps_h1conn_close(c);
        return;
    }
    if (ps_unlikely(c->proxyproto) && take_proxy_header(c) <= 0)
        return;
    /* HTTP/2 with prior knowledge: the client preface as the first bytes
     * (never on a --redirect-http listener: it only redirects, in HTTP/1). */
    if (w->cfg.h2c && c->s.requests == 0 && !c->head_started && c->state == PS_H1CONN_IDLE &&
        ps_likely(c->uw == NULL) && !c->redirect) {
        int p = ps_h2_is_preface(ps_buf_head(&c->s.rbuf), ps_buf_size(&c->s.rbuf));
        if (p == -EAGAIN)
            return; /* a prefix of it: wait for the rest */
        if (p == 1) {
            ps_buf_t in = c->s.rbuf;
            c->s.rbuf = (ps_buf_t){0};
            start_h2(c, ps_buf_head(&in), ps_buf_size(&in));
            ps_buf_free(&in);
            return;
        }
        if (w->cfg.h2_only) {
            answer_error(c, 505, "HTTP/1 is off (--http 2)");
            return;
        }
    }
    process(c);
    /* What the parser took is in its arena now: an incomplete head is held
     * once, not also in a read buffer left at its largest read. */
    ps_buf_shrink(&c->s.rbuf, KEEP_RBUF);
    if (ps_unlikely(ps_transport_pending(&c->s.t)) && ev_is_active(&c->s.rio))
        ev_feed_event(loop, &c->s.rio, EV_READ); /* more than one read's worth decrypted */
}

/* ---- the request cycle ---- */

static void reset_for_next(ps_h1conn_t *c)
{
    ps_http1_next(&c->parser);
    ps_buf_reset(&c->body);
    set_state(c, PS_H1CONN_IDLE);
    c->resp_started = c->resp_ended = c->resp_chunked = c->resp_no_body = 0;
    c->continue_sent = c->head_started = c->body_wanted = 0;
    c->head_deadline = 0;
    c->x.status = 0;
    c->x.body_sent = 0;
    c->x.deferred = c->x.file_follows = c->x.unmetered = 0;
    ps_encode_release(&c->x);
    c->resp_left = -1;
    ps_buf_shrink(&c->body, KEEP_BUF);
    ps_buf_shrink(&c->s.wbuf, KEEP_BUF);
    ps_buf_shrink(&c->s.rbuf, KEEP_RBUF);
    ps_http1_shrink(&c->parser);
}

/* The response is out. Either go on to the next request or close. */
static void complete(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    count_request(c, c->x.status);
    if (!c->keep_alive || !r->message_complete || c->s.w->stopping) {
        int unread = ps_buf_size(&c->s.rbuf) > 0 || !r->message_complete || c->x.status >= 400;
        if (unread)
            linger(c);
        else
            ps_h1conn_close(c);
        return;
    }
    reset_for_next(c);
    start_reading(c);
}

/* Decides what follows a handler callback. May close the connection. */
static void after_handler(ps_h1conn_t *c)
{
    if (c->state == PS_H1CONN_CLOSED)
        return;
    if (c->aborted || c->s.failed) {
        ps_h1conn_close(c);
        return;
    }
    if (c->resp_ended) {
        /* A synchronous application is done with its buffered body. */
        if (!c->async) {
            drop_spool(c);
            ps_buf_reset(&c->body);
            ps_buf_shrink(&c->body, KEEP_BUF);
        }
        if (ps_buf_size(&c->s.wbuf) > 0 || c->s.sf_fd >= 0) {
            set_state(c, PS_H1CONN_FLUSH);
            if (c->s.held && c->s.sf_fd < 0 && !ev_is_active(&c->s.wio)) {
                /* ps_sock_flush_held() sends it before the loop sleeps and
                 * completes the exchange; a timer that fired in this same
                 * iteration was for what came before this response. */
                ev_clear_pending(c->s.w->loop, &c->s.timer);
                return;
            }
            if (!c->async)
                ev_io_stop(c->s.w->loop, &c->s.rio); /* the next request waits for the flush */
            start_writing(c);
        } else {
            complete(c);
        }
        return;
    }
    if (c->async) {
        update_reading(c); /* the layer writes when its application sends */
    } else if (c->x.deferred) {
        /* The application runs on another thread and has the whole body:
         * nothing to read, and the layer writes when it has output. Over
         * plain TCP the read watcher stays on (no epoll_ctl per request):
         * on_read stops it if input comes before the response is out. */
        if (c->s.t.ssl != NULL)
            ev_io_stop(c->s.w->loop, &c->s.rio);
        ev_timer_stop(c->s.w->loop, &c->s.timer);
    } else {
        ev_io_stop(c->s.w->loop, &c->s.rio);
        start_writing(c); /* on_writable asks the application for more */
    }
}

static void dispatch(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    if (r->upgrade && c->s.w->cfg.h2c_upgrade) { /* Upgrade: h2c */
        int rc = ps_h2conn_upgrade(&c->s, &c->x, r);
        if (rc == 0) {
            switched_to_h2(c);
            return;
        }
        if (rc < 0) {
            answer_error(c, 400, "invalid HTTP2-Settings");
            return;
        }
    }
    set_state(c, PS_H1CONN_APP);
    c->keep_alive = r->keep_alive && !c->s.w->stopping;
    if (c->s.w->metrics) {
        c->metrics_start = ps_metrics_clock();
        if (c->s.requests > 0)
            PS_METRICS_ADD(c->s.w->metrics->keepalive_reused, 1);
    }
    c->s.requests++;
    c->body_wanted = 0;
    /* A synchronous application runs on this stack, so no watcher fires
     * before it returns; after_handler then stops reading or re-arms the
     * timer as what follows needs, usually neither: the next request. */
    if (c->async)
        ev_timer_stop(c->s.w->loop, &c->s.timer);
    ps_sock_write_overdue(c->s.w);
    c->in_handler = 1;
    c->s.w->handler->on_request(&c->x);
    c->in_handler = 0;
    after_handler(c);
}

/* Refuses the request being read (reason: static words for the log) and
 * closes after the answer. May close c. */
static void answer_error(ps_h1conn_t *c, int status, const char *reason)
{
    set_state(c, PS_H1CONN_APP);
    ev_io_stop(c->s.w->loop, &c->s.rio);
    c->in_handler = 1;
    ps_h1conn_reject(c, status, reason);
    c->in_handler = 0;
    after_handler(c);
}

/* --redirect-http: answers the request just read with a redirect to its
 * https URL, 301 for GET and HEAD, 308 (the method and body kept) for the
 * others, without reading a body: then the connection closes after the
 * answer. A bad or missing Host gets 400. The application never sees it.
 * May close c. */
static void answer_redirect(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    ps_slice_t host = {NULL, 0};
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (r->headers[i].name.len == 4 && PS_SLICE_IEQ(r->headers[i].name, "host"))
            host = r->headers[i].value;
    ps_buf_t location = {0};
    int rc = ps_http_https_location(&location, host, r->target, c->s.w->cfg.redirect_port);
    if (rc < 0) {
        ps_buf_free(&location);
        answer_error(c, rc == -EINVAL ? 400 : 503,
                     rc == -EINVAL ? "bad Host for the https redirect" : "out of memory");
        return;
    }
    int get = r->method_id == HTTP_GET || r->method_id == HTTP_HEAD;
    ps_slice_t status =
        get ? PS_SLICE_LIT("301 Moved Permanently") : PS_SLICE_LIT("308 Permanent Redirect");
    ps_header_t h[] = {
        {PS_SLICE_LIT("Location"), {ps_buf_head(&location), ps_buf_size(&location)}},
        {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("0")},
    };
    set_state(c, PS_H1CONN_APP);
    ev_io_stop(c->s.w->loop, &c->s.rio);
    c->keep_alive = r->keep_alive && !c->s.w->stopping;
    c->in_handler = 1;
    if (ps_h1conn_start_response(c, status, h, PS_ARRAY_LEN(h), NULL, 0) < 0)
        c->s.failed = 1;
    ps_h1conn_end(c);
    c->in_handler = 0;
    ps_buf_free(&location);
    after_handler(c);
}

/* A synchronous request whose body is still to come: the loop reads it, so
 * a client that waits for "100 Continue" gets it now that the head is
 * accepted. Returns 0, or -1 when the client is gone (c is then closed). */
static int expect_body(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    if (!r->expect_continue || r->http_minor == 0 || c->continue_sent)
        return 0;
    c->continue_sent = 1;
    struct iovec v = {(void *)ps_http1_continue.base, ps_http1_continue.len};
    if (write_now(c, &v, 1) < 0) {
        ps_h1conn_close(c);
        return -1;
    }
    return 0;
}

/* Parses what arrived and dispatches complete requests, one at a time, until
 * it must wait for the client or for the application. May close c. */
static void process(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    ps_worker_t *w = c->s.w;
    int progress = 0; /* body bytes arrived: the body's no-progress clock restarts */
    while (c->state == PS_H1CONN_IDLE || c->state == PS_H1CONN_BODY) {
        uint64_t before = r->body_received;
        if (ps_buf_size(&c->s.rbuf) > 0 && parse(c) == PS_HTTP1_ERROR) {
            answer_error(c, parse_status(c), parse_reason(c));
            return;
        }
        if (r->body_received != before)
            progress = 1;
        if (!r->head_complete) {
            if (!c->head_started) {
                arm_timer(c, w->cfg.timeout_keep_alive);
                return;
            }
            /* One deadline for the whole head, not a clock reset by every
             * read: a head sent a byte at a time must not hold the
             * connection for longer than --timeout-request-header. */
            ev_tstamp now = ev_now(w->loop);
            if (c->head_deadline == 0)
                c->head_deadline = now + w->cfg.timeout_request_header;
            arm_timer(c, PS_MAX(c->head_deadline - now, 1e-3));
            return;
        }
        if (c->state == PS_H1CONN_IDLE) {
            if (ps_unlikely(c->redirect)) {
                answer_redirect(c);
                return;
            }
            set_state(c, PS_H1CONN_BODY);
            progress = 1;
            if (ps_unlikely(c->uw != NULL))
                take_uwsgi_vars(c);
            if (ps_unlikely(w->cfg.reqid != 0))
                ps_reqid_take(r, w->cfg.reqid, c->x.proxy != NULL || c->uw != NULL);
            c->async = ps_worker_route(w, &c->x);
            if (!c->async && !r->message_complete && expect_body(c) < 0)
                return;
        }
        /* An asynchronous application receives the body as it arrives. A
         * synchronous one reads it with blocking calls, which must never
         * wait for a client: the loop reads the whole body first, into
         * memory or the spool file. */
        if (c->async) {
            dispatch(c);
            continue;
        }
        if (spool_body(c) < 0) {
            answer_error(c, 500, "request body spool file failed");
            return;
        }
        if (r->message_complete) {
            dispatch(c);
            continue;
        }
        if (ps_buf_size(&c->s.rbuf) > 0)
            continue; /* the parser paused at the spool threshold */
        if (progress)
            arm_timer(c, w->cfg.timeout_request_body);
        return;
    }
}

/* The write watcher (h1_proto). May close c. */
static void on_write(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    struct ev_loop *loop = s->w->loop;
    if (ps_unlikely(c->s.t.ssl != NULL) && tls_before_write(c) != 0)
        return;
    int rc = flush(c);
    if (rc < 0) {
        ps_h1conn_close(c);
        return;
    }
    if (rc == 1) {
        arm_timer(c, c->s.w->cfg.timeout_request_header); /* progress resets the clock */
        return;
    }
    ev_io_stop(loop, &c->s.wio);
    ev_timer_stop(loop, &c->s.timer);
    /* Output is out: a body still awaited is back on its own clock. */
    if (c->state == PS_H1CONN_BODY || c->body_wanted)
        arm_timer(c, c->s.w->cfg.timeout_request_body);
    if (c->state == PS_H1CONN_APP) {
        c->in_handler = 1;
        c->s.w->handler->on_writable(&c->x);
        c->in_handler = 0;
        after_handler(c);
    } else if (c->state == PS_H1CONN_FLUSH) {
        complete(c);
    }
    if (c->state == PS_H1CONN_IDLE)
        process(c);
}

/* The timer fired, maybe only because the loop was busy (a synchronous
 * application ran for that long) or because libev runs timers before the
 * read watcher in the same iteration, while input waited on the socket.
 * Reads what is waiting first. Returns 1 when nothing arrived (the timeout
 * is real), 0 when input moved the connection on (or closed it). */
static int nothing_arrived(ps_h1conn_t *c)
{
    ps_request_t *r = ps_h1conn_request(c);
    uint64_t requests = c->s.requests, received = r->body_received;
    int state = c->state, started = c->head_started;
    on_read(&c->s);
    return c->state == state && c->s.requests == requests && r->body_received == received &&
           c->head_started == started;
}

/* The timer (h1_proto). May close c. */
static void on_timer(ps_sock_t *s)
{
    ps_h1conn_t *c = (ps_h1conn_t *)s;
    switch (c->state) {
    case PS_H1CONN_IDLE:
        if (c->s.handshaking) /* --timeout-tls-handshake */
            ps_h1conn_close(c);
        else if (c->proxyproto == PS_H1CONN_PP_EXPECT)
            refuse(c, "no PROXY header from a trusted peer in time");
        else if (c->head_started)
            answer_error(c, 408, "request head deadline");
        else if (nothing_arrived(c)) /* else sent by the deadline: answered, not reset */
            ps_h1conn_close(c);
        break;
    case PS_H1CONN_BODY:
        if (nothing_arrived(c))
            answer_error(c, 408, "request body deadline");
        break;
    case PS_H1CONN_APP:
        /* An asynchronous application waits for a body that stopped coming. */
        if (c->body_wanted && !ev_is_active(&c->s.wio)) {
            if (nothing_arrived(c) && c->body_wanted)
                body_failed(c, 408, "request body deadline");
            break;
        }
        ps_h1conn_close(c);
        break;
    default:
        ps_h1conn_close(c);
        break;
    }
}

/* ---- the exchange calls over HTTP/1 (exchange.h) ------------------------- */

static int x_body_fill(ps_exchange_t *x)
{
    return ps_h1conn_body_fill(ps_h1conn_of(x));
}

static int x_body_want(ps_exchange_t *x)
{
    return ps_h1conn_body_want(ps_h1conn_of(x));
}

static int x_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                   const char *body, size_t len)
{
    return ps_h1conn_start_response(ps_h1conn_of(x), status, h, n, body, len);
}

static int x_write(ps_exchange_t *x, const char *data, size_t len)
{
    return ps_h1conn_write(ps_h1conn_of(x), data, len);
}

static int x_write_blocking(ps_exchange_t *x, const char *data, size_t len)
{
    return ps_h1conn_write_blocking(ps_h1conn_of(x), data, len);
}

static int x_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count)
{
    return ps_h1conn_sendfile(ps_h1conn_of(x), fd, offset, count);
}

static int x_informational(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n)
{
    return ps_h1conn_send_informational(ps_h1conn_of(x), status, h, n);
}

static int x_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n)
{
    return ps_h1conn_end_with_trailers(ps_h1conn_of(x), h, n);
}

static void x_end(ps_exchange_t *x)
{
    ps_h1conn_end(ps_h1conn_of(x));
}

static void x_abort(ps_exchange_t *x)
{
    ps_h1conn_abort(ps_h1conn_of(x));
}

static void x_send_error(ps_exchange_t *x, int status)
{
    ps_h1conn_send_error(ps_h1conn_of(x), status);
}

static void x_reject(ps_exchange_t *x, int status, const char *reason)
{
    ps_h1conn_reject(ps_h1conn_of(x), status, reason);
}

static int x_local_address(ps_exchange_t *x, struct sockaddr_storage *ss, socklen_t *len)
{
    return ps_sock_local_address(&ps_h1conn_of(x)->s, ss, len);
}

static int x_request_line(ps_exchange_t *x, ps_slice_t *method, ps_slice_t *target,
                          ps_slice_t *version)
{
    ps_h1conn_t *c = ps_h1conn_of(x);
    if (ps_likely(c->uw == NULL))
        return ps_http1_request_line(&c->parser, method, target, version);
    if (!c->uw->req.head_complete)
        return 0;
    *method = c->uw->req.method;
    *target = c->uw->req.target;
    *version = c->uw->req.http_minor ? PS_SLICE_LIT("1.1") : PS_SLICE_LIT("1.0");
    return 1;
}

static int x_client_gone(ps_exchange_t *x)
{
    return ps_h1conn_of(x)->s.failed;
}

static ps_sock_t *x_sock(ps_exchange_t *x)
{
    return &ps_h1conn_of(x)->s;
}

/* The response is a protocol switch (101): from now on the socket is
 * another protocol's, which sends the queued output first. */
static int x_upgrade(ps_exchange_t *x)
{
    ps_h1conn_t *c = ps_h1conn_of(x);
    if (c->s.failed || c->state != PS_H1CONN_APP || c->resp_started)
        return -EPIPE;
    set_state(c, PS_H1CONN_WS);
    c->resp_started = 1;
    c->x.status = 101;
    c->body_wanted = 0;
    count_request(c, 101);
    return 0;
}

static void x_reject_response(ps_exchange_t *x, int status, const char *reason, ps_slice_t response)
{
    ps_h1conn_reject_response(ps_h1conn_of(x), status, reason, response);
}

static const ps_exchange_ops_t ps_http1_exchange_ops = {
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
    .sock = x_sock,
    .upgrade = x_upgrade,
    .reject_response = x_reject_response,
};

static const ps_sock_proto_t h1_proto = {
    .on_read = on_read,
    .on_write = on_write,
    .on_timer = on_timer,
    .on_flushed = h1_on_flushed,
    .before_close = h1_before_close,
    .after_close = h1_after_close,
    .stop_idle = h1_stop_idle,
    .free = h1_free,
};
