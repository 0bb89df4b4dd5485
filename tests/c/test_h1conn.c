/* Loopback tests of csrc/serve/h1conn.c, csrc/serve/worker.c and csrc/serve/listener.c: a real
 * worker on 127.0.0.1 with a small C handler, and a client thread that sends raw requests and
 * compares the raw answers byte for byte.
 *
 * The worker runs on the main thread; the client thread stops it through an
 * ev_async when it is done. A watchdog timer and alarm() bound the run. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "serve/h1conn.h"
#include "serve/worker.h"

/* h1conn.c's high-water mark for a request body waiting for the application. */
#define CONN_BODY_HIGH (256 * 1024)
#define CLIENT_TIMEOUT_SECONDS 3
/* The worker's body_spool_threshold: larger bodies go to a spool file. */
#define SPOOL_THRESHOLD 1000

static struct {
    ps_worker_t w;
    ev_async stop;
    ev_timer watchdog;
    int listen_fd;
    int port;
    int watchdog_fired;
} server;

/* ---- the handler: a tiny application ------------------------------------ */

static void respond(ps_exchange_t *x, const ps_header_t *extra, size_t nextra, const char *body,
                    size_t len)
{
    char length[24];
    ps_header_t h[4];
    size_t n = 0;
    snprintf(length, sizeof(length), "%zu", len);
    h[n++] = (ps_header_t){PS_SLICE_LIT("Content-Length"), {length, strlen(length)}};
    for (size_t i = 0; i < nextra && n < PS_ARRAY_LEN(h); i++)
        h[n++] = extra[i];
    if (ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, n, body, len) == -EINVAL) {
        ps_exchange_send_error(x, 500);
        return;
    }
    ps_exchange_end(x);
}

/* Reads the whole body through ps_exchange_body_fill() and answers its size;
 * with `detail`, "<size> <sum> mem|spool": a checksum of its bytes and
 * whether it came from a spool file. The body is complete before on_request. */
static void answer_body_size(ps_exchange_t *x, int detail)
{
    ps_request_t *r = x->req;
    uint64_t total = 0, sum = 0;
    int spooled = ps_h1conn_of(x)->spool.fd >= 0;
    CHECK(r->message_complete);
    for (;;) {
        if (ps_exchange_body_fill(x) < 0) {
            ps_exchange_send_error(x, 500);
            return;
        }
        size_t n = ps_buf_size(x->body);
        if (n == 0)
            break;
        const unsigned char *p = (const unsigned char *)ps_buf_head(x->body);
        for (size_t i = 0; i < n; i++)
            sum = sum * 31 + p[i];
        total += n;
        ps_buf_consume(x->body, n);
    }
    char text[64];
    int len = detail ? snprintf(text, sizeof(text), "%llu %llu %s", (unsigned long long)total,
                                (unsigned long long)sum, spooled ? "spool" : "mem")
                     : snprintf(text, sizeof(text), "%llu", (unsigned long long)total);
    respond(x, NULL, 0, text, (size_t)len);
}

/*  /          "hello" with Content-Length
 *  /chunked   "hello world" in two writes without a length (chunked on 1.1)
 *  /size      the size of the request body, read by the application
 *  /sum       its size, a checksum and "mem" or "spool" (where it was held)
 *  /slow      "slow", after blocking the loop for 1.5 s
 *  /close     "hello" with Connection: close from the application
 *  /bad-head  an invalid header name from the application
 *  anything else: the target itself, so pipelined answers can be told apart */
static void on_request(ps_exchange_t *x)
{
    ps_request_t *r = x->req;
    ps_slice_t t = r->target;
    if (PS_SLICE_IEQ(t, "/")) {
        respond(x, NULL, 0, "hello", 5);
    } else if (PS_SLICE_IEQ(t, "/chunked")) {
        int rc = ps_exchange_start(x, PS_SLICE_LIT("200 OK"), NULL, 0, "hello", 5);
        if (rc >= 0)
            ps_exchange_write(x, " world", 6);
        ps_exchange_end(x);
    } else if (PS_SLICE_IEQ(t, "/size")) {
        answer_body_size(x, 0);
    } else if (PS_SLICE_IEQ(t, "/sum")) {
        answer_body_size(x, 1);
    } else if (PS_SLICE_IEQ(t, "/slow")) {
        usleep(1500 * 1000); /* a synchronous application that keeps the loop busy */
        respond(x, NULL, 0, "slow", 4);
    } else if (PS_SLICE_IEQ(t, "/close")) {
        ps_header_t h = {PS_SLICE_LIT("Connection"), PS_SLICE_LIT("close")};
        respond(x, &h, 1, "hello", 5);
    } else if (PS_SLICE_IEQ(t, "/bad-head")) {
        ps_header_t h = {PS_SLICE_LIT("Bad Name"), PS_SLICE_LIT("x")};
        respond(x, &h, 1, "hello", 5);
    } else {
        respond(x, NULL, 0, t.base, t.len);
    }
}

/* Every response above ends inside on_request: nothing more to produce. */
static void on_writable(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static void on_disconnect(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static void dispose(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

/* What on_rejected last heard (written by the server thread before the
 * answer is sent, read by the client thread after it arrived). */
static struct {
    int count;
    int status;
    const char *reason;
} rejected;

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    PS_UNUSED(x);
    __atomic_store_n(&rejected.status, status, __ATOMIC_RELAXED);
    __atomic_store_n(&rejected.reason, reason, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rejected.count, 1, __ATOMIC_RELEASE);
}

static const ps_handler_t hello_handler = {
    .on_request = on_request,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .on_rejected = on_rejected,
};

/* ---- the server's side ------------------------------------------------- */

static void on_stop(struct ev_loop *loop, ev_async *a, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(a);
    PS_UNUSED(revents);
    ps_worker_stop(&server.w);
}

static void on_watchdog(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(t);
    PS_UNUSED(revents);
    server.watchdog_fired = 1;
    ps_worker_stop(&server.w);
    ev_break(loop, EVBREAK_ALL);
}

static int listen_loopback(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("listen_loopback");
        exit(2);
    }
    server.port = ntohs(a.sin_port);
    return fd;
}

static void server_start(void)
{
    ps_config_t cfg = {
        .limits = {.max_request_line = 8190,
                   .max_fields = 100,
                   .max_field_size = 1024,
                   .max_body = 1 << 20},
        .timeout_keep_alive = 0.5,
        .timeout_request_header = 0.5,
        .timeout_request_body = 1.0,
        .body_spool_threshold = SPOOL_THRESHOLD,
        .graceful_timeout = 1.0,
        .limit_connections = 100,
        .server_header = 0,
        .date_header = 0,
    };
    server.listen_fd = listen_loopback();
    if (ps_worker_init(&server.w, &cfg, &hello_handler, NULL, NULL, NULL) < 0 ||
        ps_worker_add_listener(&server.w, server.listen_fd) < 0) {
        fprintf(stderr, "test_conn: cannot start the worker\n");
        exit(2);
    }
    ev_async_init(&server.stop, on_stop);
    ev_async_start(server.w.loop, &server.stop);
    ev_timer_init(&server.watchdog, on_watchdog, 20.0, 0.0);
    ev_timer_start(server.w.loop, &server.watchdog);
}

static void server_finish(void)
{
    ev_async_stop(server.w.loop, &server.stop);
    ev_timer_stop(server.w.loop, &server.watchdog);
    ps_worker_free(&server.w);
    close(server.listen_fd);
}

/* ---- the client's side ------------------------------------------------- */

static int client_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)server.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = CLIENT_TIMEOUT_SECONDS};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        perror("client_connect");
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return; /* the checks on the answer tell what went wrong */
        p += r;
        n -= (size_t)r;
    }
}

static void send_str(int fd, const char *s)
{
    send_all(fd, s, strlen(s));
}

/* Reads until `want` bytes, the end of the stream or the timeout. */
static size_t recv_upto(int fd, char *buf, size_t want)
{
    size_t got = 0;
    while (got < want) {
        ssize_t r = recv(fd, buf + got, want - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* 1 when the server closed: the next read sees the end of the stream. */
static int closed_by_server(int fd)
{
    char c;
    ssize_t r;
    do
        r = recv(fd, &c, 1, 0);
    while (r < 0 && errno == EINTR);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* Reads as many bytes as `lit` holds and compares them. */
#define CHECK_ANSWER(fd, lit)                                                                      \
    do {                                                                                           \
        char answer_[sizeof(lit) + 64];                                                            \
        size_t got_ = recv_upto((fd), answer_, sizeof(lit) - 1);                                   \
        CHECK_MEM_EQ(answer_, got_, lit);                                                          \
    } while (0)

#define HELLO "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
#define HELLO_GET "GET / HTTP/1.1\r\nHost: t\r\n\r\n"

static void test_get_is_answered_and_kept_alive(void)
{
    int fd = client_connect();
    send_str(fd, HELLO_GET);
    CHECK_ANSWER(fd, HELLO);
    send_str(fd, HELLO_GET);
    CHECK_ANSWER(fd, HELLO);
    close(fd);
}

static void test_pipelined_requests_are_answered_in_order(void)
{
    int fd = client_connect();
    send_str(fd, "GET /one HTTP/1.1\r\nHost: t\r\n\r\n"
                 "POST /size HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                 "GET /two HTTP/1.1\r\nHost: t\r\n\r\n"
                 "GET /chunked HTTP/1.1\r\nHost: t\r\n\r\n"
                 "GET /three HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n/one"
                     "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n5"
                     "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n/two"
                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                     "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n/three");
    close(fd);
}

static void test_request_sent_byte_by_byte_is_answered(void)
{
    const char req[] = "POST /size HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "3;x=y\r\nabc\r\n0\r\n\r\n";
    int fd = client_connect();
    for (size_t i = 0; i < sizeof(req) - 1; i++) {
        send_all(fd, req + i, 1);
        usleep(200);
    }
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n3");
    close(fd);
}

static void test_chunked_response_is_framed(void)
{
    int fd = client_connect();
    send_str(fd, "GET /chunked HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    send_str(fd, HELLO_GET);
    CHECK_ANSWER(fd, HELLO);
    close(fd);
}

static void test_http10_unframed_response_ends_with_close(void)
{
    int fd = client_connect();
    send_str(fd, "GET /chunked HTTP/1.0\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello world");
    CHECK(closed_by_server(fd));
    close(fd);
}

static void test_http10_keep_alive_is_honoured(void)
{
    int fd = client_connect();
    send_str(fd, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n"
                     "hello");
    send_str(fd, "GET / HTTP/1.0\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    CHECK(closed_by_server(fd));
    close(fd);
}

static void test_head_response_has_no_body(void)
{
    int fd = client_connect();
    send_str(fd, "HEAD / HTTP/1.1\r\nHost: t\r\n\r\n" HELLO_GET);
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" HELLO);
    close(fd);
}

static void test_connection_close_request_is_closed_after_the_answer(void)
{
    int fd = client_connect();
    send_str(fd, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" HELLO_GET);
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    CHECK(closed_by_server(fd));
    close(fd);
}

static void test_application_connection_close_is_honoured(void)
{
    int fd = client_connect();
    send_str(fd, "GET /close HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    CHECK(closed_by_server(fd));
    close(fd);
}

/* Sends `req`, expects the canned answer for `status`, then the close. */
static void check_error_answer(const char *req, size_t len, int status, int line)
{
    ps_slice_t want = ps_http1_error_response(status);
    char got[512];
    int fd = client_connect();
    send_all(fd, req, len);
    size_t n = recv_upto(fd, got, want.len);
    check_mem_eq_at(got, n, want.base, want.len, __FILE__, line, "the canned error answer");
    check_at(closed_by_server(fd), __FILE__, line, "closed after the error answer");
    close(fd);
}

#define CHECK_ERROR_ANSWER(req, status) check_error_answer(req, sizeof(req) - 1, status, __LINE__)

static void test_bad_requests_get_their_error_and_a_close(void)
{
    CHECK_ERROR_ANSWER("GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n", 400);
    CHECK_ERROR_ANSWER("GET / HTTP/1.1\r\n\r\n", 400);
    CHECK_ERROR_ANSWER("GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505);
    CHECK_ERROR_ANSWER("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 400);
    CHECK_ERROR_ANSWER("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                       501);
    CHECK_ERROR_ANSWER("CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\n\r\n", 501);
    CHECK_ERROR_ANSWER("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n", 413);
    CHECK_ERROR_ANSWER("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400);
}

static void test_oversized_header_gets_431(void)
{
    char req[3000];
    int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(req + n, 'b', 2000);
    memcpy(req + n + 2000, "\r\n\r\n", 4);
    check_error_answer(req, (size_t)n + 2004, 431, __LINE__);
}

static void test_good_request_then_bad_one_answers_both(void)
{
    int fd = client_connect();
    ps_slice_t bad = ps_http1_error_response(400);
    send_str(fd, HELLO_GET "GET / HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n");
    CHECK_ANSWER(fd, HELLO);
    char got[512];
    size_t n = recv_upto(fd, got, bad.len);
    CHECK(n == bad.len && memcmp(got, bad.base, n) == 0);
    CHECK(closed_by_server(fd));
    close(fd);
}

static void test_bad_body_read_by_the_application_gets_400(void)
{
    int fd = client_connect();
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\nzz\r\n");
    ps_slice_t want = ps_http1_error_response(400);
    char got[512];
    size_t n = recv_upto(fd, got, want.len);
    CHECK(n == want.len && memcmp(got, want.base, n) == 0);
    CHECK(closed_by_server(fd));
    close(fd);
}

static void test_invalid_response_head_becomes_500(void)
{
    check_error_answer("GET /bad-head HTTP/1.1\r\nHost: t\r\n\r\n",
                       sizeof("GET /bad-head HTTP/1.1\r\nHost: t\r\n\r\n") - 1, 500, __LINE__);
}

static void test_request_bodies_reach_the_application(void)
{
    int fd = client_connect();
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n11");
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n11");
    close(fd);
}

static void test_expect_continue_gets_100_before_the_body(void)
{
    int fd = client_connect();
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                 "Content-Length: 3\r\n\r\n");
    CHECK_ANSWER(fd, "HTTP/1.1 100 Continue\r\n\r\n");
    send_str(fd, "abc");
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n3");
    close(fd);
}

/* A body that fills h1conn.c's high-water mark exactly: the parser pauses on
 * its last byte and reports the message complete only on one more feed. */
static void check_large_body(size_t size)
{
    char head[128];
    int hl = snprintf(head, sizeof(head),
                      "POST /size HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", size);
    char *body = malloc(size);
    memset(body, 'x', size);
    int fd = client_connect();
    send_all(fd, head, (size_t)hl);
    send_all(fd, body, size);
    char want[128], got[128];
    int wl = snprintf(want, sizeof(want), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%zu",
                      snprintf(NULL, 0, "%zu", size), size);
    size_t n = recv_upto(fd, got, (size_t)wl);
    int ok = n == (size_t)wl && memcmp(got, want, n) == 0;
    CHECK(ok);
    close(fd);
    free(body);
}

static void test_large_bodies_reach_the_application(void)
{
    check_large_body(CONN_BODY_HIGH - 1);
    check_large_body(CONN_BODY_HIGH + 100000);
    check_large_body(CONN_BODY_HIGH);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&pause, NULL);
}

/* A body held in memory (up to the threshold) and one spooled (past it)
 * reach the application byte for byte, with either framing. */
static void check_spooled_body(size_t size, int chunked, const char *where)
{
    char *body = malloc(size + 1);
    uint64_t sum = 0;
    for (size_t i = 0; i < size; i++) {
        body[i] = (char)('a' + i % 23);
        sum = sum * 31 + (unsigned char)body[i];
    }
    char head[160];
    int hl = chunked
                 ? snprintf(head, sizeof(head),
                            "POST /sum HTTP/1.1\r\nHost: t\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n%zx\r\n",
                            size)
                 : snprintf(head, sizeof(head),
                            "POST /sum HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", size);
    int fd = client_connect();
    send_all(fd, head, (size_t)hl);
    send_all(fd, body, size);
    if (chunked)
        send_str(fd, "\r\n0\r\n\r\n");
    char text[64], want[160], got[160];
    int tl = snprintf(text, sizeof(text), "%zu %llu %s", size, (unsigned long long)sum, where);
    int wl =
        snprintf(want, sizeof(want), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", tl, text);
    size_t n = recv_upto(fd, got, (size_t)wl);
    int ok = n == (size_t)wl && memcmp(got, want, n) == 0;
    if (!ok)
        fprintf(stderr, "check_spooled_body(%zu, %d): got %.*s\n", size, chunked, (int)n, got);
    CHECK(ok);
    close(fd);
    free(body);
}

static void test_bodies_past_the_threshold_are_spooled(void)
{
    for (int chunked = 0; chunked < 2; chunked++) {
        check_spooled_body(SPOOL_THRESHOLD - 1, chunked, "mem");
        check_spooled_body(SPOOL_THRESHOLD + 1, chunked, "spool");
        check_spooled_body(300000, chunked, "spool");
    }
    check_spooled_body(SPOOL_THRESHOLD, 0, "mem");
}

/* A client that asked for "100 Continue" and then sends nothing: the loop
 * waits for its body, not the application, so another client is answered
 * at once and the stalled one gets 408 once timeout_request_body passes. */
static void test_stalled_body_gets_408_and_costs_no_one_else(void)
{
    int stalled = client_connect();
    double start = now_seconds();
    send_str(stalled, "POST /size HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                      "Content-Length: 5\r\n\r\nab");
    CHECK_ANSWER(stalled, "HTTP/1.1 100 Continue\r\n\r\n");
    int other = client_connect();
    send_str(other, HELLO_GET);
    CHECK_ANSWER(other, HELLO);
    close(other);
    char got[512];
    CHECK(recv(stalled, got, sizeof(got), MSG_DONTWAIT) < 0); /* still waiting for its body */
    CHECK(now_seconds() - start < 1.0);
    ps_slice_t want = ps_http1_error_response(408);
    size_t n = recv_upto(stalled, got, want.len);
    CHECK(n == want.len && memcmp(got, want.base, n) == 0);
    CHECK(closed_by_server(stalled));
    close(stalled);
}

/* The body's clock restarts on each read that adds body bytes, and only
 * then: a body trickled a byte at a time is served, while a chunk-size line
 * that grows an extension forever gets 408. */
static void test_body_clock_counts_progress_only(void)
{
    int fd = client_connect();
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        sleep_ms(300); /* 1.5 s in all, each gap under timeout_request_body */
        send_str(fd, "x");
    }
    CHECK_ANSWER(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n5");
    close(fd);

    fd = client_connect();
    double start = now_seconds();
    send_str(fd, "POST /size HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5;ext=");
    char got[512];
    ssize_t r = -1;
    for (int i = 0; i < 20 && r < 0; i++) {
        sleep_ms(200);
        send_str(fd, "a");
        r = recv(fd, got, sizeof(got), MSG_DONTWAIT);
    }
    ps_slice_t want = ps_http1_error_response(408);
    CHECK(r == (ssize_t)want.len && memcmp(got, want.base, want.len) == 0);
    CHECK(now_seconds() - start < 2.5);
    close(fd);
}

/* While a slow application keeps the loop busy past timeout_request_body,
 * another client goes on sending its body: the bytes waiting in its socket
 * count as progress, so that body is served, not answered 408. */
static void test_body_sent_while_the_loop_was_busy_is_not_a_stall(void)
{
    int uploader = client_connect();
    send_str(uploader, "POST /size HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello");
    sleep_ms(100); /* the worker has the head and the first half */
    int slow = client_connect();
    send_str(slow, "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    sleep_ms(500);
    send_str(uploader, "world");
    CHECK_ANSWER(slow, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow");
    CHECK_ANSWER(uploader, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n10");
    close(slow);
    close(uploader);
}

static void test_idle_connection_is_closed_after_keep_alive_timeout(void)
{
    int fd = client_connect();
    send_str(fd, HELLO_GET);
    CHECK_ANSWER(fd, HELLO);
    CHECK(closed_by_server(fd)); /* within timeout_keep_alive, not the client's 3 s */
    close(fd);
}

static void test_slow_request_head_gets_408(void)
{
    int fd = client_connect();
    send_str(fd, "GET / HTTP/1.1\r\nHost: t\r\n");
    ps_slice_t want = ps_http1_error_response(408);
    char got[512];
    size_t n = recv_upto(fd, got, want.len);
    CHECK(n == want.len && memcmp(got, want.base, n) == 0);
    CHECK(closed_by_server(fd));
    close(fd);
}

static void check_rejected(int count, int status, const char *reason, int line)
{
    int got = __atomic_load_n(&rejected.count, __ATOMIC_ACQUIRE);
    const char *why = __atomic_load_n(&rejected.reason, __ATOMIC_RELAXED);
    if (!CHECK_EQ(got, count) || !CHECK_EQ(rejected.status, status) ||
        !CHECK(why != NULL && strcmp(why, reason) == 0))
        fprintf(stderr, "  from line %d: reason %s, expected %s\n", line, why, reason);
}

/* Every canned refusal reaches the handler once, with its reason; a good
 * request does not. */
static void test_rejections_reach_the_handler_with_a_reason(void)
{
    int base = __atomic_load_n(&rejected.count, __ATOMIC_ACQUIRE);
    CHECK_ERROR_ANSWER("GET / HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", 400);
    check_rejected(base + 1, 400, "more than one Host", __LINE__);
    int fd = client_connect();
    send_str(fd, HELLO_GET);
    CHECK_ANSWER(fd, HELLO);
    close(fd);
    check_rejected(base + 1, 400, "more than one Host", __LINE__);
    CHECK_ERROR_ANSWER("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n", 413);
    check_rejected(base + 2, 413, "body too large", __LINE__);
    test_slow_request_head_gets_408();
    check_rejected(base + 3, 408, "request head deadline", __LINE__);
}

/* A head that keeps arriving a line at a time still has one deadline
 * (0.5 s here): the 408 comes after a few lines, not after the last. */
static void test_head_trickled_a_line_at_a_time_gets_408(void)
{
    int fd = client_connect();
    send_str(fd, "GET / HTTP/1.1\r\nHost: t\r\n");
    ps_slice_t want = ps_http1_error_response(408);
    char got[512];
    int lines = 0;
    ssize_t n = -1;
    for (; lines < 15; lines++) {
        struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
        n = recv(fd, got, sizeof(got), MSG_DONTWAIT);
        if (n >= 0)
            break;
        send_str(fd, "X-Slow: 1\r\n");
    }
    CHECK(lines < 15);
    CHECK(n == (ssize_t)want.len && memcmp(got, want.base, want.len) == 0);
    close(fd);
}

/* The listener is in the worker's epoll set through the accept gate; when
 * it drops out of the set (as when libev rebuilds it), the worker puts it
 * back within a second and the next connection is served. */
static void test_listener_dropped_from_epoll_is_registered_again(void)
{
    CHECK(server.w.listeners[0].gated);
    CHECK_EQ(epoll_ctl(server.w.gate_epfd, EPOLL_CTL_DEL, server.listen_fd, NULL), 0);
    int fd = client_connect();
    send_str(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    char got[512];
    size_t n = recv_upto(fd, got, 12);
    CHECK(n == 12 && memcmp(got, "HTTP/1.1 200", 12) == 0);
    close(fd);
}

static void *client_main(void *arg)
{
    PS_UNUSED(arg);
    test_get_is_answered_and_kept_alive();
    test_listener_dropped_from_epoll_is_registered_again();
    test_pipelined_requests_are_answered_in_order();
    test_request_sent_byte_by_byte_is_answered();
    test_chunked_response_is_framed();
    test_http10_unframed_response_ends_with_close();
    test_http10_keep_alive_is_honoured();
    test_head_response_has_no_body();
    test_connection_close_request_is_closed_after_the_answer();
    test_application_connection_close_is_honoured();
    test_bad_requests_get_their_error_and_a_close();
    test_oversized_header_gets_431();
    test_good_request_then_bad_one_answers_both();
    test_bad_body_read_by_the_application_gets_400();
    test_invalid_response_head_becomes_500();
    test_request_bodies_reach_the_application();
    test_expect_continue_gets_100_before_the_body();
    test_large_bodies_reach_the_application();
    test_bodies_past_the_threshold_are_spooled();
    test_stalled_body_gets_408_and_costs_no_one_else();
    test_body_clock_counts_progress_only();
    test_body_sent_while_the_loop_was_busy_is_not_a_stall();
    test_idle_connection_is_closed_after_keep_alive_timeout();
    test_rejections_reach_the_handler_with_a_reason(); /* with the slow head's 408 */
    test_head_trickled_a_line_at_a_time_gets_408();
    ev_async_send(server.w.loop, &server.stop);
    return NULL;
}

int main(void)
{
    pthread_t client;
    alarm(60); /* last resort: the watchdog below should end a stuck run */
    server_start();
    if (pthread_create(&client, NULL, client_main, NULL) != 0) {
        fprintf(stderr, "test_conn: cannot start the client thread\n");
        return 2;
    }
    ps_worker_run(&server.w);
    pthread_join(client, NULL);
    CHECK(!server.watchdog_fired);
    CHECK_EQ(server.w.nconns, 0);
    server_finish();
    return check_finish("test_h1conn");
}
