/* Prometheus metrics (metrics.h): counting, the exposition text, and the
 * endpoint that serves it. */
#define _GNU_SOURCE
#include "master/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"

/* The endpoint's bounds: the request head it reads, the scrapes it serves
 * at once, the connections it accepts per wakeup, how long a scrape may
 * take (read and write), how long it drains the client's input after the
 * answer, and how long it waits after running out of descriptors. */
#define HEAD_MAX 4096
#define MAX_SCRAPES 16
#define ACCEPTS_PER_WAKEUP 16
#define SCRAPE_DEADLINE 5.0
#define DRAIN_SECONDS 1.0
#define ACCEPT_RETRY 1.0

/* The upper bounds of the duration buckets, in nanoseconds and as shown. */
static const uint64_t bucket_ns[PS_METRICS_BUCKETS - 1] = {
    1000000,   2500000,   5000000,    10000000,   25000000,   50000000,    100000000,
    250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000,
};
static const char *const bucket_le[PS_METRICS_BUCKETS] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
    "0.25",  "0.5",    "1",     "2.5",  "5",     "10",   "+Inf",
};

static const char *const method_names[PS_METRICS_METHODS] = {
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
};

static const struct {
    int status;
    const char *reason;
} reject_labels[PS_METRICS_REJECTS] = {
    [PS_METRICS_REJ_BAD_REQUEST] = {400, "bad_request"},
    [PS_METRICS_REJ_TIMEOUT] = {408, "timeout"},
    [PS_METRICS_REJ_BODY_TOO_LARGE] = {413, "body_too_large"},
    [PS_METRICS_REJ_URI_TOO_LONG] = {414, "uri_too_long"},
    [PS_METRICS_REJ_UPGRADE_REQUIRED] = {426, "upgrade_required"},
    [PS_METRICS_REJ_HEADER_TOO_LARGE] = {431, "header_too_large"},
    [PS_METRICS_REJ_SERVER_ERROR] = {500, "server_error"},
    [PS_METRICS_REJ_NOT_IMPLEMENTED] = {501, "not_implemented"},
    [PS_METRICS_REJ_OVERLOADED] = {503, "overloaded"},
    [PS_METRICS_REJ_HTTP_VERSION] = {505, "http_version"},
    [PS_METRICS_REJ_OTHER] = {0, "other"},
};

static const char *const restart_causes[PS_METRICS_RESTARTS] = {
    [PS_METRICS_RESTART_CRASH] = "crash",
    [PS_METRICS_RESTART_WATCHDOG] = "watchdog",
    [PS_METRICS_RESTART_MAX_REQUESTS] = "max-requests",
    [PS_METRICS_RESTART_MAX_RSS] = "max-rss",
    [PS_METRICS_RESTART_HUP] = "hup",
    [PS_METRICS_RESTART_RELOAD] = "reload",
};

/* ---- counting ---- */

static int method_index(ps_slice_t m)
{
#define IS(lit) (m.len == sizeof(lit) - 1 && memcmp(m.base, lit, sizeof(lit) - 1) == 0)
    switch (m.len) {
    case 3:
        return IS("GET") ? PS_METRICS_GET : IS("PUT") ? PS_METRICS_PUT : PS_METRICS_OTHER_METHOD;
    case 4:
        return IS("POST")   ? PS_METRICS_POST
               : IS("HEAD") ? PS_METRICS_HEAD
                            : PS_METRICS_OTHER_METHOD;
    case 5:
        return IS("PATCH")   ? PS_METRICS_PATCH
               : IS("TRACE") ? PS_METRICS_TRACE
                             : PS_METRICS_OTHER_METHOD;
    case 6:
        return IS("DELETE") ? PS_METRICS_DELETE : PS_METRICS_OTHER_METHOD;
    case 7:
        return IS("OPTIONS")   ? PS_METRICS_OPTIONS
               : IS("CONNECT") ? PS_METRICS_CONNECT
                               : PS_METRICS_OTHER_METHOD;
    default:
        return PS_METRICS_OTHER_METHOD;
    }
#undef IS
}

void ps_metrics_request(ps_metrics_t *m, ps_slice_t method, int status, uint64_t duration_ns)
{
    if (status < 100 || status > 599)
        return;
    int i = method_index(method); /* once: PS_METRICS_ADD names its field twice */
    PS_METRICS_ADD(m->requests[i][status / 100 - 1], 1);
    int b = 0;
    while (b < PS_METRICS_BUCKETS - 1 && duration_ns > bucket_ns[b])
        b++;
    PS_METRICS_ADD(m->duration[b], 1);
    PS_METRICS_ADD(m->duration_ns, duration_ns);
}

void ps_metrics_rejected(ps_metrics_t *m, int status)
{
    int r = PS_METRICS_REJ_OTHER;
    for (int i = 0; i < PS_METRICS_REJ_OTHER; i++)
        if (reject_labels[i].status == status)
            r = i;
    PS_METRICS_ADD(m->rejected[r], 1);
}

/* ps_metrics_t is nothing but uint64_t counters: summed word by word. */
#define NWORDS (sizeof(ps_metrics_t) / sizeof(uint64_t))

static uint64_t word(const ps_metrics_t *m, size_t i)
{
    return __atomic_load_n(&((const uint64_t *)m)[i], __ATOMIC_RELAXED);
}

void ps_metrics_fold(ps_metrics_t *dst, const ps_metrics_t *src)
{
    for (size_t i = 0; i < NWORDS; i++)
        ((uint64_t *)dst)[i] += word(src, i);
}

/* The sum of every live block and the folded one. */
static void sum_view(const ps_metrics_view_t *v, ps_metrics_t *sum)
{
    memset(sum, 0, sizeof(*sum));
    if (v->folded)
        ps_metrics_fold(sum, v->folded);
    for (uint32_t i = 0; i < v->nlive; i++)
        ps_metrics_fold(sum, v->live[i]);
}

/* ---- the exposition text ---- */

typedef struct {
    ps_buf_t *out;
    int rc;
} writer_t;

static void emit(writer_t *wr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(writer_t *wr, const char *fmt, ...)
{
    if (wr->rc < 0)
        return;
    for (size_t room = 256;; room *= 2) {
        if (ps_buf_reserve(wr->out, room) < 0) {
            wr->rc = -ENOMEM;
            return;
        }
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(wr->out->data + wr->out->len, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            wr->rc = -EINVAL;
            return;
        }
        if ((size_t)n < room) {
            wr->out->len += (size_t)n;
            return;
        }
    }
}

static void family(writer_t *wr, const char *name, const char *type, const char *help)
{
    emit(wr, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void scalar(writer_t *wr, const char *name, const char *type, const char *help,
                   uint64_t value)
{
    family(wr, name, type, help);
    emit(wr, "%s %" PRIu64 "\n", name, value);
}

static void render_requests(writer_t *wr, const ps_metrics_t *sum)
{
    family(wr, "pyserver_requests_total", "counter",
           "Requests handed to the application, by method and response status class.");
    for (int m = 0; m < PS_METRICS_METHODS; m++)
        for (int c = 0; c < PS_METRICS_CLASSES; c++)
            if (sum->requests[m][c])
                emit(wr, "pyserver_requests_total{method=\"%s\",status=\"%dxx\"} %" PRIu64 "\n",
                     method_names[m], c + 1, sum->requests[m][c]);
    family(wr, "pyserver_request_duration_seconds", "histogram",
           "Time from a request's dispatch to the end of its response.");
    uint64_t cumulative = 0;
    for (int b = 0; b < PS_METRICS_BUCKETS; b++) {
        cumulative += sum->duration[b];
        emit(wr, "pyserver_request_duration_seconds_bucket{le=\"%s\"} %" PRIu64 "\n", bucket_le[b],
             cumulative);
    }
    emit(wr, "pyserver_request_duration_seconds_sum %" PRIu64 ".%09" PRIu64 "\n",
         sum->duration_ns / 1000000000u, sum->duration_ns % 1000000000u);
    emit(wr, "pyserver_request_duration_seconds_count %" PRIu64 "\n", cumulative);
    family(wr, "pyserver_rejected_requests_total", "counter",
           "Requests the server refused with a canned answer, by reason and status.");
    for (int r = 0; r < PS_METRICS_REJECTS; r++) {
        if (reject_labels[r].status)
            emit(wr, "pyserver_rejected_requests_total{reason=\"%s\",status=\"%d\"} %" PRIu64 "\n",
                 reject_labels[r].reason, reject_labels[r].status, sum->rejected[r]);
        else
            emit(wr,
                 "pyserver_rejected_requests_total{reason=\"%s\",status=\"other\"} %" PRIu64 "\n",
                 reject_labels[r].reason, sum->rejected[r]);
    }
}

static void render_connections(writer_t *wr, const ps_metrics_view_t *v, const ps_metrics_t *sum)
{
    /* Open now: only the live workers' connections are. */
    uint64_t open = 0, ws_open = 0;
    for (uint32_t i = 0; i < v->nlive; i++) {
        const ps_metrics_t *m = v->live[i];
        const size_t opened = offsetof(ps_metrics_t, conns_opened) / sizeof(uint64_t);
        const size_t closed = offsetof(ps_metrics_t, conns_closed) / sizeof(uint64_t);
        const size_t ws_opened = offsetof(ps_metrics_t, ws_opened) / sizeof(uint64_t);
        const size_t ws_closed = offsetof(ps_metrics_t, ws_closed) / sizeof(uint64_t);
        uint64_t c = word(m, closed), o = word(m, opened); /* closed first: never above opened */
        open += o >= c ? o - c : 0;
        c = word(m, ws_closed);
        o = word(m, ws_opened);
        ws_open += o >= c ? o - c : 0;
    }
    scalar(wr, "pyserver_received_bytes_total", "counter",
           "Bytes received on client connections (after TLS decryption).", sum->bytes_in);
    scalar(wr, "pyserver_sent_bytes_total", "counter",
           "Bytes sent on client connections (before TLS encryption).", sum->bytes_out);
    scalar(wr, "pyserver_connections_total", "counter", "Client connections accepted.",
           sum->conns_opened);
    scalar(wr, "pyserver_open_connections", "gauge", "Client connections open now.", open);
    scalar(wr, "pyserver_keepalive_requests_total", "counter",
           "Requests that reused a keep-alive connection (every request after a connection's "
           "first).",
           sum->keepalive_reused);
    scalar(wr, "pyserver_websocket_connections_total", "counter", "WebSocket connections accepted.",
           sum->ws_opened);
    scalar(wr, "pyserver_open_websocket_connections", "gauge", "WebSocket connections open now.",
           ws_open);
    scalar(wr, "pyserver_websocket_messages_received_total", "counter",
           "WebSocket messages received from clients.", sum->ws_messages_in);
    scalar(wr, "pyserver_websocket_messages_sent_total", "counter",
           "WebSocket messages sent to clients.", sum->ws_messages_out);
    scalar(wr, "pyserver_health_checks_total", "counter",
           "Health check requests (--health-check-path) the server answered itself; not in "
           "pyserver_requests_total.",
           sum->health_checks);
}

static void render_workers(writer_t *wr, const ps_metrics_view_t *v)
{
    if (v->restarts) {
        family(wr, "pyserver_worker_restarts_total", "counter",
               "Workers the master replaced, by cause.");
        for (int i = 0; i < PS_METRICS_RESTARTS; i++)
            emit(wr, "pyserver_worker_restarts_total{cause=\"%s\"} %" PRIu64 "\n",
                 restart_causes[i], v->restarts[i]);
    }
    scalar(wr, "pyserver_workers", "gauge", "Worker processes running.", v->nworkers);
    family(wr, "pyserver_worker_rss_bytes", "gauge", "Resident memory of each worker process.");
    for (uint32_t i = 0; i < v->nworkers; i++)
        emit(wr, "pyserver_worker_rss_bytes{worker=\"%u\"} %" PRIu64 "\n", v->workers[i].index,
             v->workers[i].rss_bytes);
}

int ps_metrics_render(const ps_metrics_view_t *v, ps_buf_t *out)
{
    ps_metrics_t sum;
    writer_t wr = {out, 0};
    sum_view(v, &sum);
    render_requests(&wr, &sum);
    render_connections(&wr, v, &sum);
    render_workers(&wr, v);
    return wr.rc;
}

uint64_t ps_metrics_rss(int pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/statm", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    if (n != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ---- the endpoint ---- */

enum { SCRAPE_READ, SCRAPE_WRITE, SCRAPE_DRAIN };

typedef struct scrape scrape_t;

struct scrape {
    ps_metrics_server_t *s;
    int fd;
    int state;
    ev_io io;
    ev_timer timer;
    size_t nin;
    ps_buf_t out; /* the whole response */
    scrape_t *prev, *next;
    char in[HEAD_MAX];
};

struct ps_metrics_server {
    struct ev_loop *loop;
    int fd;
    ev_io io;
    ev_timer retry; /* out of descriptors: accept again later */
    ps_metrics_render_fn render;
    void *data;
    scrape_t *scrapes;
    uint32_t nscrapes;
    ps_buf_t body; /* reused by every scrape */
};

/* Every watcher of the endpoint is unreferenced while active: the loop it
 * shares ends when the server's own work does. These start and stop them
 * keeping libev's count right. */
static void io_start(struct ev_loop *loop, ev_io *w)
{
    if (ev_is_active(w))
        return;
    ev_io_start(loop, w);
    ev_unref(loop);
}

static void io_stop(struct ev_loop *loop, ev_io *w)
{
    if (!ev_is_active(w))
        return;
    ev_ref(loop);
    ev_io_stop(loop, w);
}

static void timer_start(struct ev_loop *loop, ev_timer *t, double after)
{
    if (ev_is_active(t)) {
        ev_ref(loop);
        ev_timer_stop(loop, t);
    }
    ev_timer_set(t, after, 0);
    ev_timer_start(loop, t);
    ev_unref(loop);
}

static void timer_stop(struct ev_loop *loop, ev_timer *t)
{
    if (!ev_is_active(t))
        return;
    ev_ref(loop);
    ev_timer_stop(loop, t);
}

static void scrape_close(scrape_t *sc)
{
    ps_metrics_server_t *s = sc->s;
    io_stop(s->loop, &sc->io);
    timer_stop(s->loop, &sc->timer);
    close(sc->fd);
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        s->scrapes = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    s->nscrapes--;
    ps_buf_free(&sc->out);
    free(sc);
}

static const char *const status_lines[] = {
    [2] = "200 OK",
    [4] = "400 Bad Request",
    [5] = "404 Not Found",
    [6] = "405 Method Not Allowed",
    [7] = "431 Request Header Fields Too Large",
    [8] = "500 Internal Server Error",
};

/* Queues the whole response: status line (an index of status_lines), the
 * fields and the body (sent only when with_body). Returns 0 or -ENOMEM. */
static int respond(scrape_t *sc, int line, const char *type, const char *body, size_t len,
                   int with_body)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status_lines[line], type, len, line == 6 ? "Allow: GET, HEAD\r\n" : "");
    if (ps_buf_append(&sc->out, head, (size_t)n) < 0 ||
        (with_body && ps_buf_append(&sc->out, body, len) < 0))
        return -ENOMEM;
    return 0;
}

static int respond_error(scrape_t *sc, int line)
{
    const char *text = status_lines[line];
    char body[64];
    int n = snprintf(body, sizeof(body), "%s\n", text + 4);
    return respond(sc, line, "text/plain; charset=utf-8", body, (size_t)n, 1);
}

/* Decides the answer to the head in sc->in (complete, or as much of it as
 * fits). Returns 0 or -ENOMEM. */
static int answer(scrape_t *sc, int complete)
{
    if (!complete)
        return respond_error(sc, 7);
    const char *p = sc->in, *end = memchr(p, '\n', sc->nin);
    size_t line = (size_t)(end - p);
    if (line > 0 && p[line - 1] == '\r')
        line--;
    const char *sp1 = memchr(p, ' ', line);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', line - (size_t)(sp1 + 1 - p)) : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == p || sp2 == sp1 + 1)
        return respond_error(sc, 4);
    size_t mlen = (size_t)(sp1 - p), tlen = (size_t)(sp2 - sp1 - 1);
    size_t vlen = line - (size_t)(sp2 + 1 - p);
    const char *target = sp1 + 1, *version = sp2 + 1;
    if (vlen != 8 || memcmp(version, "HTTP/1.", 7) != 0 || (version[7] != '0' && version[7] != '1'))
        return respond_error(sc, 4);
    for (size_t i = 0; i < line; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] >= 0x7f)
            return respond_error(sc, 4);
    int head = mlen == 4 && memcmp(p, "HEAD", 4) == 0;
    int get = mlen == 3 && memcmp(p, "GET", 3) == 0;
    int path = tlen >= 8 && memcmp(target, "/metrics", 8) == 0 && (tlen == 8 || target[8] == '?');
    if (!path)
        return respond_error(sc, 5);
    if (!get && !head)
        return respond_error(sc, 6);
    ps_buf_reset(&sc->s->body);
    if (sc->s->render(sc->s->data, &sc->s->body) < 0)
        return respond_error(sc, 8);
    return respond(sc, 2, "text/plain; version=0.0.4; charset=utf-8", ps_buf_head(&sc->s->body),
                   ps_buf_size(&sc->s->body), get);
}

/* 1 when sc->in holds a whole head (an empty line ends it). */
static int head_complete(const scrape_t *sc)
{
    for (size_t i = 0; i + 1 < sc->nin; i++) {
        if (sc->in[i] != '\n')
            continue;
        if (sc->in[i + 1] == '\n' ||
            (i + 2 < sc->nin && sc->in[i + 1] == '\r' && sc->in[i + 2] == '\n'))
            return 1;
    }
    return 0;
}

/* Writes what the socket takes; once all is out, half-closes and drains.
 * May close sc. */
static void scrape_write(scrape_t *sc)
{
    while (ps_buf_size(&sc->out)) {
        ssize_t n = send(sc->fd, ps_buf_head(&sc->out), ps_buf_size(&sc->out), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* the write watcher calls again */
        if (n <= 0) {
            scrape_close(sc);
            return;
        }
        ps_buf_consume(&sc->out, (size_t)n);
    }
    /* Drain what the client still sends, so that our close does not reset
     * the answer away before it reads it. */
    shutdown(sc->fd, SHUT_WR);
    sc->state = SCRAPE_DRAIN;
    io_stop(sc->s->loop, &sc->io);
    ev_io_set(&sc->io, sc->fd, EV_READ);
    io_start(sc->s->loop, &sc->io);
    timer_start(sc->s->loop, &sc->timer, DRAIN_SECONDS);
}

/* Reads the head (at most HEAD_MAX bytes), then answers. May close sc. */
static void scrape_read(scrape_t *sc)
{
    for (;;) {
        ssize_t n = recv(sc->fd, sc->in + sc->nin, sizeof(sc->in) - sc->nin, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            scrape_close(sc);
            return;
        }
        sc->nin += (size_t)n;
        int complete = head_complete(sc);
        if (complete || sc->nin == sizeof(sc->in)) {
            if (answer(sc, complete) < 0) {
                scrape_close(sc);
                return;
            }
            sc->state = SCRAPE_WRITE;
            io_stop(sc->s->loop, &sc->io);
            ev_io_set(&sc->io, sc->fd, EV_WRITE);
            io_start(sc->s->loop, &sc->io);
            scrape_write(sc);
            return;
        }
    }
}

static void on_scrape_io(struct ev_loop *loop, ev_io *io, int revents)
{
    scrape_t *sc = ps_container_of(io, scrape_t, io);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    if (sc->state == SCRAPE_READ) {
        scrape_read(sc);
    } else if (sc->state == SCRAPE_WRITE) {
        scrape_write(sc);
    } else {
        char buf[4096];
        ssize_t n = recv(sc->fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            scrape_close(sc);
    }
}

static void on_scrape_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    scrape_close(ps_container_of(t, scrape_t, timer));
}

static void add_scrape(ps_metrics_server_t *s, int fd)
{
    scrape_t *sc = s->nscrapes < MAX_SCRAPES ? malloc(sizeof(*sc)) : NULL;
    if (sc == NULL) {
        close(fd); /* over the bound (or out of memory): this scraper retries */
        return;
    }
    memset(sc, 0, offsetof(scrape_t, in));
    sc->s = s;
    sc->fd = fd;
    sc->state = SCRAPE_READ;
    sc->next = s->scrapes;
    if (s->scrapes)
        s->scrapes->prev = sc;
    s->scrapes = sc;
    s->nscrapes++;
    ev_io_init(&sc->io, on_scrape_io, fd, EV_READ);
    ev_init(&sc->timer, on_scrape_timer);
    io_start(s->loop, &sc->io);
    timer_start(s->loop, &sc->timer, SCRAPE_DEADLINE);
}

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_metrics_server_t *s = ps_container_of(io, ps_metrics_server_t, io);
    PS_UNUSED(revents);
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            add_scrape(s, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            io_stop(loop, &s->io); /* the listener would wake us at once, forever */
            timer_start(loop, &s->retry, ACCEPT_RETRY);
        }
        return;
    }
}

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_metrics_server_t *s = ps_container_of(t, ps_metrics_server_t, retry);
    PS_UNUSED(revents);
    io_start(loop, &s->io);
}

ps_metrics_server_t *ps_metrics_server_new(struct ev_loop *loop, int fd,
                                           ps_metrics_render_fn render, void *data)
{
    ps_metrics_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->loop = loop;
    s->fd = fd;
    s->render = render;
    s->data = data;
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    ev_io_init(&s->io, on_accept, fd, EV_READ);
    ev_init(&s->retry, on_retry);
    io_start(loop, &s->io);
    return s;
}

void ps_metrics_server_free(ps_metrics_server_t *s)
{
    if (s == NULL)
        return;
    while (s->scrapes)
        scrape_close(s->scrapes);
    io_stop(s->loop, &s->io);
    timer_stop(s->loop, &s->retry);
    ps_buf_free(&s->body);
    free(s);
}

void ps_metrics_server_forget(ps_metrics_server_t *s)
{
    if (s == NULL)
        return;
    while (s->scrapes) {
        scrape_t *sc = s->scrapes;
        s->scrapes = sc->next;
        close(sc->fd);
        ps_buf_free(&sc->out);
        free(sc);
    }
    ps_buf_free(&s->body);
    free(s);
}
