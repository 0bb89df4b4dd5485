/* tlsload: a load client that opens a new TLS 1.3 connection for every request.
 *
 *     tlsload -p PORT [-h 127.0.0.1] [-u /] [-c 100] [-d 10] [-r]
 *
 * C connection slots, each in a loop: connect, TLS 1.3 handshake, one
 * `GET PATH HTTP/1.1` with `Connection: close`, read the answer to its end (Content-Length
 * or EOF), send close_notify, close, start again. With -r each handshake offers a session
 * ticket the server sent earlier, the newest one not used yet, each ticket once (as RFC 8446
 * C.4 asks of clients; servers may accept a ticket only once): TLS 1.3 resumption, PSK
 * with a fresh ECDHE, no certificate, no signature. A handshake with no unused ticket
 * left is a full one. Without -r every handshake is a full one. The server's
 * certificate is not checked against a CA (its CertificateVerify signature is, as in every
 * handshake). One thread, epoll, non-blocking sockets; it prints its own CPU time so a
 * reader can see when the client limits the figure.
 *
 * Prints one JSON object: requests answered in the measured period, requests/s, latency
 * from the connect() to the last byte of the answer (p50/p99/max ms), errors (failed
 * connects, handshakes and reads), non-2xx answers, handshakes that offered a ticket and
 * that the server resumed, the protocol
 * version, the client's CPU seconds and CPU share. Exit status 0 when at least one
 * request was answered.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HIST_US 10          /* histogram bucket width, microseconds */
#define HIST_BUCKETS 500000 /* up to 5 s; slower answers count in the last */
#define IN_CAP 65536

enum state { CONNECTING, HANDSHAKE, WRITING, READING };

struct slot {
    int fd;
    SSL *ssl;
    int offered; /* a ticket was offered in this handshake */
    enum state state;
    double started;
    size_t out_off;
    char in[IN_CAP];
    size_t in_len;
};

static SSL_CTX *ctx;
#define TICKETS 4096
static SSL_SESSION *tickets[TICKETS]; /* unused tickets the server sent (-r), a stack */
static int n_tickets;
static int resume;
static struct sockaddr_in addr;
static char request[1024];
static size_t request_len;
static int ep;
static unsigned long *hist;
static long answered, errors, non_2xx, resumed, handshakes, offered;
static double measure_from, measure_to;
static char first_error[256];
static char version[32];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void note_error(const char *what)
{
    double t = now();
    if (t >= measure_from && t < measure_to)
        errors++;
    if (!first_error[0]) {
        unsigned long e = ERR_peek_error();
        snprintf(first_error, sizeof first_error, "%s%s%s%s", what, e ? ": " : "",
                 e ? ERR_reason_error_string(e) : "", errno && !e ? strerror(errno) : "");
    }
    ERR_clear_error();
}

/* Keeps a session (ticket) the server sent, dropping the oldest when full; returns 1:
 * OpenSSL must not free it. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    (void)ssl;
    if (n_tickets == TICKETS) {
        SSL_SESSION_free(tickets[0]);
        memmove(tickets, tickets + 1, (TICKETS - 1) * sizeof *tickets);
        n_tickets--;
    }
    tickets[n_tickets++] = sess;
    return 1;
}

static void slot_close(struct slot *s)
{
    if (s->ssl) {
        SSL_free(s->ssl);
        s->ssl = NULL;
    }
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
}

/* Starts the slot's next connection; returns 0, or -1 when socket() or connect() fails
 * at once (counted as an error, the caller retries later). */
static int slot_start(struct slot *s)
{
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        note_error("socket");
        return -1;
    }
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->started = now();
    s->in_len = 0;
    s->out_off = 0;
    if (connect(s->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
        note_error("connect");
        slot_close(s);
        return -1;
    }
    s->state = CONNECTING;
    s->offered = 0;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = s};
    epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
    return 0;
}

static void want(struct slot *s, int events)
{
    struct epoll_event ev = {.events = (unsigned)events, .data.ptr = s};
    epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
}

/* The answer in s->in is complete: 1 yes, 0 not yet (EOF ends a body without a length). */
static int answer_complete(struct slot *s, int eof)
{
    char *end = memmem(s->in, s->in_len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - s->in) + 4;
    const char *p = s->in;
    long length = -1;
    while ((p = memchr(p, '\n', head - (size_t)(p - s->in))) != NULL) {
        p++;
        if (strncasecmp(p, "content-length:", 15) == 0) {
            length = strtol(p + 15, NULL, 10);
            break;
        }
    }
    if (length < 0)
        return eof;
    return s->in_len >= head + (size_t)length;
}

static void finish(struct slot *s)
{
    double t = now();
    if (t >= measure_from && t < measure_to) {
        answered++;
        if (s->in_len < 12 || strncmp(s->in + 9, "2", 1) != 0)
            non_2xx++;
        long us = (long)((t - s->started) * 1e6);
        long b = us / HIST_US;
        hist[b < HIST_BUCKETS ? b : HIST_BUCKETS - 1]++;
        handshakes++;
        offered += s->offered;
        if (SSL_session_reused(s->ssl))
            resumed++;
    }
    if (!version[0])
        snprintf(version, sizeof version, "%s", SSL_get_version(s->ssl));
    SSL_shutdown(s->ssl); /* close_notify, not waiting for the server's */
    slot_close(s);
}

/* Moves the slot on as far as it goes without blocking; restarts it when done or failed. */
static void step(struct slot *s)
{
    for (;;) {
        if (s->state == CONNECTING) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err) {
                errno = err;
                note_error("connect");
                goto restart;
            }
            s->ssl = SSL_new(ctx);
            SSL_set_fd(s->ssl, s->fd);
            if (resume && n_tickets > 0) { /* the newest unused ticket, used once */
                SSL_SESSION *t = tickets[--n_tickets];
                s->offered = 1;
                SSL_set_session(s->ssl, t);
                SSL_SESSION_free(t);
            }
            s->state = HANDSHAKE;
        }
        if (s->state == HANDSHAKE) {
            int rc = SSL_connect(s->ssl);
            if (rc <= 0) {
                int e = SSL_get_error(s->ssl, rc);
                if (e == SSL_ERROR_WANT_READ)
                    return want(s, EPOLLIN);
                if (e == SSL_ERROR_WANT_WRITE)
                    return want(s, EPOLLOUT);
                note_error("handshake");
                goto restart;
            }
            s->state = WRITING;
        }
        if (s->state == WRITING) {
            int rc = SSL_write(s->ssl, request + s->out_off, (int)(request_len - s->out_off));
            if (rc <= 0) {
                int e = SSL_get_error(s->ssl, rc);
                if (e == SSL_ERROR_WANT_READ)
                    return want(s, EPOLLIN);
                if (e == SSL_ERROR_WANT_WRITE)
                    return want(s, EPOLLOUT);
                note_error("write");
                goto restart;
            }
            s->out_off += (size_t)rc;
            if (s->out_off < request_len)
                continue;
            s->state = READING;
            want(s, EPOLLIN);
        }
        if (s->state == READING) {
            if (s->in_len == IN_CAP) {
                note_error("answer larger than 64 KiB");
                goto restart;
            }
            int rc = SSL_read(s->ssl, s->in + s->in_len, (int)(IN_CAP - s->in_len));
            if (rc <= 0) {
                int e = SSL_get_error(s->ssl, rc);
                if (e == SSL_ERROR_WANT_READ)
                    return;
                if (e == SSL_ERROR_WANT_WRITE)
                    return want(s, EPOLLOUT);
                if ((e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL) &&
                    answer_complete(s, 1)) {
                    ERR_clear_error();
                    finish(s);
                    goto next;
                }
                note_error("read");
                goto restart;
            }
            s->in_len += (size_t)rc;
            if (answer_complete(s, 0)) {
                finish(s);
                goto next;
            }
        }
    }
restart:
    slot_close(s);
next:
    if (now() < measure_to)
        slot_start(s);
}

static double percentile(unsigned long total, double q)
{
    unsigned long want_n = (unsigned long)(q * (double)total), seen = 0;
    for (long b = 0; b < HIST_BUCKETS; b++) {
        seen += hist[b];
        if (seen > want_n)
            return (double)(b * HIST_US + HIST_US / 2) / 1e3;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *path = "/";
    int port = 0, conns = 100, opt;
    double duration = 10;
    while ((opt = getopt(argc, argv, "h:p:u:c:d:r")) != -1) {
        switch (opt) {
        case 'h':
            host = optarg;
            break;
        case 'p':
            port = atoi(optarg);
            break;
        case 'u':
            path = optarg;
            break;
        case 'c':
            conns = atoi(optarg);
            break;
        case 'd':
            duration = atof(optarg);
            break;
        case 'r':
            resume = 1;
            break;
        default:
            fprintf(stderr, "usage: tlsload -p PORT [-h HOST] [-u PATH] [-c N] [-d S] [-r]\n");
            return 2;
        }
    }
    if (port <= 0 || conns <= 0 || duration <= 0) {
        fprintf(stderr, "tlsload: -p PORT is required; -c and -d must be positive\n");
        return 2;
    }
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tlsload: -h takes an IPv4 address\n");
        return 2;
    }
    request_len = (size_t)snprintf(request, sizeof request,
                                   "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n",
                                   path, host, port);
    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, new_session);
    hist = calloc(HIST_BUCKETS, sizeof *hist);
    struct slot *slots = calloc((size_t)conns, sizeof *slots);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!hist || !slots || ep < 0 || !ctx) {
        fprintf(stderr, "tlsload: out of memory\n");
        return 1;
    }
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    measure_from = t0;
    measure_to = t0 + duration;
    for (int i = 0; i < conns; i++) {
        slots[i].fd = -1;
        slot_start(&slots[i]);
    }
    struct epoll_event evs[256];
    while (now() < measure_to) {
        int n = epoll_wait(ep, evs, 256, 50);
        for (int i = 0; i < n; i++)
            step(evs[i].data.ptr);
        for (int i = 0; i < conns; i++) /* slots whose start failed at once */
            if (slots[i].fd < 0 && now() < measure_to)
                slot_start(&slots[i]);
    }
    double elapsed = now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                 (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    double max_ms = 0;
    for (long b = HIST_BUCKETS - 1; b >= 0; b--)
        if (hist[b]) {
            max_ms = (double)((b + 1) * HIST_US) / 1e3;
            break;
        }
    for (int i = 0; i < conns; i++)
        slot_close(&slots[i]);
    for (char *c = first_error; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = ' ';
    printf("{\"requests\": %ld, \"rps\": %.1f, \"duration_s\": %.3f, \"p50_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"errors\": %ld, \"non_2xx\": %ld, "
           "\"handshakes\": %ld, \"offered\": %ld, \"resumed\": %ld, \"resume_offered\": %s, "
           "\"tls\": \"%s\", "
           "\"client_cpu_s\": %.3f, \"client_cpu_pct\": %.1f, \"first_error\": \"%s\"}\n",
           answered, (double)answered / elapsed, elapsed, percentile((unsigned long)answered, 0.5),
           percentile((unsigned long)answered, 0.99), max_ms, errors, non_2xx, handshakes, offered,
           resumed, resume ? "true" : "false", version, cpu, 100.0 * cpu / elapsed, first_error);
    return answered > 0 ? 0 : 1;
}
