/* Unit tests of csrc/master/metrics.c: counting, folding, the exposition text and
 * the endpoint (on a real loop and a loopback socket). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/buf.h"
#include "check.h"
#include "base/common.h"
#include "master/metrics.h"

static ps_slice_t s(const char *text)
{
    return (ps_slice_t){text, strlen(text)};
}

static void test_requests_counted_by_method_and_class(void)
{
    ps_metrics_t m;
    memset(&m, 0, sizeof(m));
    ps_metrics_request(&m, s("GET"), 200, 1000);
    ps_metrics_request(&m, s("GET"), 404, 1000);
    ps_metrics_request(&m, s("POST"), 503, 1000);
    ps_metrics_request(&m, s("get"), 200, 1000); /* methods are case-sensitive */
    ps_metrics_request(&m, s("PROPFIND"), 101, 1000);
    ps_metrics_request(&m, s("OPTIONS"), 204, 1000);
    ps_metrics_request(&m, s("GET"), 0, 1000);   /* no response: not counted */
    ps_metrics_request(&m, s("GET"), 600, 1000); /* not a status */
    CHECK_EQ(m.requests[PS_METRICS_GET][1], 1);
    CHECK_EQ(m.requests[PS_METRICS_GET][3], 1);
    CHECK_EQ(m.requests[PS_METRICS_POST][4], 1);
    CHECK_EQ(m.requests[PS_METRICS_OTHER_METHOD][1], 1);
    CHECK_EQ(m.requests[PS_METRICS_OTHER_METHOD][0], 1);
    CHECK_EQ(m.requests[PS_METRICS_OPTIONS][1], 1);
    uint64_t total = 0;
    for (int b = 0; b < PS_METRICS_BUCKETS; b++)
        total += m.duration[b];
    CHECK_EQ(total, 6);
    CHECK_EQ(m.duration_ns, 6000);
}

static void test_durations_land_in_their_bucket(void)
{
    ps_metrics_t m;
    memset(&m, 0, sizeof(m));
    ps_metrics_request(&m, s("GET"), 200, 1000000);        /* exactly 1 ms: le="0.001" */
    ps_metrics_request(&m, s("GET"), 200, 1000001);        /* le="0.0025" */
    ps_metrics_request(&m, s("GET"), 200, 300000000);      /* 0.3 s: le="0.5" */
    ps_metrics_request(&m, s("GET"), 200, 60000000000ull); /* a minute: +Inf */
    CHECK_EQ(m.duration[0], 1);
    CHECK_EQ(m.duration[1], 1);
    CHECK_EQ(m.duration[8], 1);
    CHECK_EQ(m.duration[PS_METRICS_BUCKETS - 1], 1);
}

static void test_rejections_by_status(void)
{
    ps_metrics_t m;
    memset(&m, 0, sizeof(m));
    ps_metrics_rejected(&m, 400);
    ps_metrics_rejected(&m, 431);
    ps_metrics_rejected(&m, 431);
    ps_metrics_rejected(&m, 418);
    CHECK_EQ(m.rejected[PS_METRICS_REJ_BAD_REQUEST], 1);
    CHECK_EQ(m.rejected[PS_METRICS_REJ_HEADER_TOO_LARGE], 2);
    CHECK_EQ(m.rejected[PS_METRICS_REJ_OTHER], 1);
}

static int contains(const ps_buf_t *b, const char *needle)
{
    return memmem(ps_buf_head(b), ps_buf_size(b), needle, strlen(needle)) != NULL;
}

static void test_render_sums_live_and_folded_blocks(void)
{
    ps_metrics_t a, b, folded;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&folded, 0, sizeof(folded));
    ps_metrics_request(&a, s("GET"), 200, 1000);
    ps_metrics_request(&b, s("GET"), 200, 1000);
    ps_metrics_t dead;
    memset(&dead, 0, sizeof(dead));
    ps_metrics_request(&dead, s("GET"), 200, 1000);
    dead.conns_opened = 5;
    dead.conns_closed = 3; /* a killed worker's connections are gone, not open */
    ps_metrics_fold(&folded, &dead);
    a.conns_opened = 2;
    a.conns_closed = 1;
    const ps_metrics_t *live[2] = {&a, &b};
    uint64_t restarts[PS_METRICS_RESTARTS] = {[PS_METRICS_RESTART_CRASH] = 1};
    ps_metrics_worker_t workers[2] = {{1, 10, 4096}, {2, 11, 8192}};
    ps_metrics_view_t v = {live, 2, &folded, restarts, workers, 2};
    ps_buf_t out = {0};
    CHECK_EQ(ps_metrics_render(&v, &out), 0);
    CHECK(contains(&out, "pyserver_requests_total{method=\"GET\",status=\"2xx\"} 3\n"));
    CHECK(contains(&out, "pyserver_request_duration_seconds_count 3\n"));
    CHECK(contains(&out, "pyserver_request_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
    CHECK(contains(&out, "pyserver_request_duration_seconds_sum 0.000003000\n"));
    CHECK(contains(&out, "pyserver_connections_total 7\n"));
    CHECK(contains(&out, "pyserver_open_connections 1\n"));
    CHECK(contains(&out, "pyserver_worker_restarts_total{cause=\"crash\"} 1\n"));
    CHECK(contains(&out, "pyserver_worker_rss_bytes{worker=\"2\"} 8192\n"));
    CHECK(contains(&out, "# TYPE pyserver_request_duration_seconds histogram\n"));
    CHECK(!contains(&out, "status=\"4xx\"")); /* only the series that counted something */
    /* No master: no restarts family. */
    ps_metrics_view_t single = {live, 1, NULL, NULL, workers, 1};
    ps_buf_reset(&out);
    CHECK_EQ(ps_metrics_render(&single, &out), 0);
    CHECK(!contains(&out, "pyserver_worker_restarts_total"));
    CHECK(contains(&out, "pyserver_requests_total{method=\"GET\",status=\"2xx\"} 1\n"));
    ps_buf_free(&out);
}

/* ---- the endpoint ---- */

static int render_calls;

static int render_fixed(void *data, ps_buf_t *out)
{
    render_calls++;
    return ps_buf_append(out, data, strlen(data));
}

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        return -1;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* Runs the loop until fd has reached EOF (the server closed or shut down
 * its side); returns what it sent, or NULL after ~5 s. */
static char *exchange(struct ev_loop *loop, int fd, const char *req, size_t reqlen)
{
    static char got[65536];
    size_t n = 0;
    if (reqlen && write(fd, req, reqlen) != (ssize_t)reqlen)
        return NULL;
    for (int i = 0; i < 5000; i++) {
        ev_run(loop, EVRUN_NOWAIT);
        ssize_t r = read(fd, got + n, sizeof(got) - 1 - n);
        if (r == 0) {
            got[n] = '\0';
            return got;
        }
        if (r > 0)
            n += (size_t)r;
        else
            poll(NULL, 0, 1);
    }
    return NULL;
}

static void test_endpoint_answers_and_refuses(void)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int port = 0, lfd = listen_loopback(&port);
    CHECK(lfd >= 0);
    ps_metrics_server_t *srv = ps_metrics_server_new(loop, lfd, render_fixed, "x_total 1\n");
    CHECK(srv != NULL);
    static const struct {
        const char *req, *start;
    } cases[] = {
        {"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.0 200 OK\r\n"},
        {"GET /metrics?x=1 HTTP/1.0\n\n", "HTTP/1.0 200 OK\r\n"},
        {"GET /metricsx HTTP/1.1\r\n\r\n", "HTTP/1.0 404 "},
        {"DELETE /metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 405 "},
        {"GET /metrics\r\n\r\n", "HTTP/1.0 400 "},
        {"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.0 400 "},
        {" / HTTP/1.1\r\n\r\n", "HTTP/1.0 400 "},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        int fd = connect_loopback(port);
        char *got = exchange(loop, fd, cases[i].req, strlen(cases[i].req));
        CHECK(got != NULL && strncmp(got, cases[i].start, strlen(cases[i].start)) == 0);
        if (got && strncmp(cases[i].start, "HTTP/1.0 200", 12) == 0)
            CHECK(strstr(got, "\r\n\r\nx_total 1\n") != NULL);
        close(fd);
    }
    CHECK_EQ(render_calls, 2);
    /* A head that never ends: 431 once HEAD_MAX bytes are in. */
    char big[5000];
    memset(big, 'a', sizeof(big));
    memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
    int fd = connect_loopback(port);
    char *got = exchange(loop, fd, big, sizeof(big));
    CHECK(got != NULL && strncmp(got, "HTTP/1.0 431 ", 13) == 0);
    close(fd);
    /* A client gone half-way costs nothing. */
    fd = connect_loopback(port);
    CHECK_EQ(write(fd, "GET /met", 8), 8);
    close(fd);
    for (int i = 0; i < 20; i++)
        ev_run(loop, EVRUN_NOWAIT);
    /* The watchers do not keep the loop alive. */
    CHECK_EQ(ev_run(loop, 0), 0);
    /* A scrape in progress is closed with the server. */
    fd = connect_loopback(port);
    for (int i = 0; i < 20; i++)
        ev_run(loop, EVRUN_NOWAIT);
    ps_metrics_server_free(srv);
    got = exchange(loop, fd, NULL, 0);
    CHECK(got != NULL && got[0] == '\0');
    close(fd);
    close(lfd);
    ev_loop_destroy(loop);
}

int main(void)
{
    test_requests_counted_by_method_and_class();
    test_durations_land_in_their_bucket();
    test_rejections_by_status();
    test_render_sums_live_and_folded_blocks();
    test_endpoint_answers_and_refuses();
    return check_finish("test_metrics");
}
