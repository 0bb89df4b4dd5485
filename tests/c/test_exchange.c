/* The exchange layer (csrc/serve/exchange.h) over HTTP/1, without a network and
 * without an interpreter: a connection on one end of a socketpair, fed by
 * the test on the other end, answered by a handler that uses only the
 * ps_exchange_* calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "serve/h1conn.h"
#include "serve/exchange.h"
#include "serve/worker.h"

static int marker; /* the handler_data every exchange must carry */

static struct {
    int requests, rejected, disposed, reject_status;
    const char *reject_reason;
    void *disposed_conn_data;
} seen;

static void check_request_fields(ps_exchange_t *x)
{
    CHECK(x->handler_data == &marker);
    CHECK(x->proxy == NULL); /* no trust list: nobody's forwarded headers count */
    CHECK(x->is_unix);
    CHECK(x->peer != NULL);
    CHECK_EQ(x->status, 0);
    CHECK(x->app_data == NULL);
    ps_slice_t m, t, v;
    CHECK(ps_exchange_request_line(x, &m, &t, &v));
    CHECK(m.base == x->req->method.base && t.len == x->req->target.len);
    CHECK_SLICE_EQ(v, "1.1");
    CHECK(!ps_exchange_client_gone(x));
}

static void on_request(ps_exchange_t *x)
{
    ps_request_t *r = x->req;
    seen.requests++;
    check_request_fields(x);
    static int conn_data_token;
    x->conn_data = &conn_data_token;
    ps_header_t length = {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("2")};
    if (PS_SLICE_IEQ(r->target, "/hello")) {
        CHECK_SLICE_EQ(r->method, "GET");
        int found = 0;
        for (uint32_t i = 0; i < r->nheaders; i++)
            found |=
                PS_SLICE_IEQ(r->headers[i].name, "x-y") && PS_SLICE_IEQ(r->headers[i].value, "z");
        CHECK(found);
        CHECK_EQ(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &length, 1, "hi", 2), PS_WRITE_DONE);
        CHECK_EQ(x->status, 200);
        ps_exchange_end(x);
    } else if (PS_SLICE_IEQ(r->target, "/chunked")) {
        ps_header_t trailer = {PS_SLICE_LIT("X-T"), PS_SLICE_LIT("1")};
        ps_header_t bad = {PS_SLICE_LIT("Bad Name"), PS_SLICE_LIT("1")};
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), NULL, 0, "", 0) >= 0);
        CHECK(ps_exchange_write(x, "abc", 3) >= 0);
        CHECK_EQ(ps_exchange_end_with_trailers(x, &bad, 1), -EINVAL);
        CHECK_EQ(ps_exchange_end_with_trailers(x, &trailer, 1), 0);
    } else if (PS_SLICE_IEQ(r->target, "/early")) {
        ps_header_t link = {PS_SLICE_LIT("Link"), PS_SLICE_LIT("</s.css>")};
        CHECK(ps_exchange_informational(x, PS_SLICE_LIT("103 Early Hints"), &link, 1) >= 0);
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &length, 1, "ok", 2) >= 0);
        CHECK_EQ(ps_exchange_informational(x, PS_SLICE_LIT("103 Early Hints"), &link, 1), -EINVAL);
        ps_exchange_end(x);
    } else if (PS_SLICE_IEQ(r->target, "/body")) {
        CHECK(r->message_complete); /* a synchronous layer gets the whole body first */
        CHECK(ps_exchange_body_fill(x) == 0);
        CHECK(ps_buf_size(x->body) == 5 && memcmp(ps_buf_head(x->body), "hello", 5) == 0);
        ps_buf_consume(x->body, 5);
        CHECK_EQ(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &length, 1, "ok", 2), PS_WRITE_DONE);
        ps_exchange_end(x);
    } else if (PS_SLICE_IEQ(r->target, "/bad-head")) {
        ps_header_t bad = {PS_SLICE_LIT("Bad Name"), PS_SLICE_LIT("x")};
        CHECK_EQ(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), &bad, 1, "", 0), -EINVAL);
        CHECK_EQ(x->status, 0); /* nothing was sent */
        ps_exchange_send_error(x, 500);
    } else {
        ps_exchange_reject(x, 503, "test refusal");
    }
}

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
    seen.disposed++;
    seen.disposed_conn_data = x->conn_data;
    x->conn_data = NULL;
}

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    CHECK(x->handler_data == &marker);
    seen.rejected++;
    seen.reject_status = status;
    seen.reject_reason = reason;
}

static const ps_handler_t handler = {
    .on_request = on_request,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .on_rejected = on_rejected,
};

static ps_worker_t worker;

/* A connection on sv[0] as the listener would make it; the test keeps sv[1]. */
static int open_conn(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    struct sockaddr_storage peer = {.ss_family = AF_UNIX};
    ps_h1conn_t *c = ps_h1conn_new(&worker, sv[0], &peer, sizeof(sa_family_t), 1);
    if (c == NULL)
        return -1;
    ps_sock_link(&c->s);
    return 0;
}

/* Sends req, lets the connection read it, and returns what came back
 * within a short time (NUL-terminated, static). */
static const char *exchange(const char *req)
{
    static char out[4096];
    int sv[2];
    if (open_conn(sv) < 0) {
        perror("open_conn");
        exit(2);
    }
    CHECK_EQ(write(sv[1], req, strlen(req)), (long long)strlen(req));
    ps_h1conn_accepted((ps_h1conn_t *)worker.conns);
    size_t len = 0;
    for (int i = 0; i < 20 && len < sizeof(out) - 1; i++) {
        ev_run(worker.loop, EVRUN_NOWAIT);
        ssize_t n = read(sv[1], out + len, sizeof(out) - 1 - len);
        if (n > 0)
            len += (size_t)n;
        else if (n == 0)
            break;
        else
            poll(NULL, 0, 5);
    }
    out[len] = '\0';
    close(sv[1]);
    ev_run(worker.loop, EVRUN_NOWAIT); /* the peer's close: the connection goes */
    return out;
}

static void test_a_response_is_head_and_body(void)
{
    const char *out = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nX-Y: z\r\n\r\n");
    CHECK(strcmp(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi") == 0);
}

static void test_chunked_response_ends_with_trailers(void)
{
    const char *out = exchange("GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(strcmp(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n") == 0);
}

static void test_early_hints_come_before_the_response(void)
{
    const char *out = exchange("GET /early HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(
        strncmp(out, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\n",
                strlen("HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\n")) ==
        0);
}

static void test_synchronous_layer_reads_the_buffered_body(void)
{
    const char *out = exchange("POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    CHECK(strcmp(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") == 0);
}

static void test_invalid_head_sends_nothing_then_a_canned_error(void)
{
    const char *out = exchange("GET /bad-head HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(strncmp(out, "HTTP/1.1 500 ", 13) == 0);
    CHECK(strstr(out, "Connection: close\r\n") != NULL);
}

static void test_reject_tells_the_layer_and_closes(void)
{
    int before = seen.rejected;
    const char *out = exchange("GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(strncmp(out, "HTTP/1.1 503 ", 13) == 0);
    CHECK(strstr(out, "Connection: close\r\n") != NULL);
    CHECK_EQ(seen.rejected, before + 1);
    CHECK_EQ(seen.reject_status, 503);
    CHECK(seen.reject_reason && strcmp(seen.reject_reason, "test refusal") == 0);
}

/* A bad request never reaches on_request, only on_rejected. */
static void test_bad_request_is_rejected_before_the_layer(void)
{
    int requests = seen.requests, rejected = seen.rejected;
    const char *out = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n");
    CHECK(strncmp(out, "HTTP/1.1 400 ", 13) == 0);
    CHECK_EQ(seen.requests, requests);
    CHECK_EQ(seen.rejected, rejected + 1);
    CHECK_EQ(seen.reject_status, 400);
}

/* Every connection's exchange is disposed once, with the layer's
 * per-connection state still on it. */
static void test_each_exchange_is_disposed_with_its_state(void)
{
    ev_run(worker.loop, EVRUN_NOWAIT); /* what earlier tests left is freed first */
    int before = seen.disposed;
    exchange("GET /hello HTTP/1.1\r\nHost: x\r\nX-Y: z\r\n\r\n");
    ev_run(worker.loop, EVRUN_NOWAIT); /* the safe point frees it */
    CHECK_EQ(seen.disposed, before + 1);
    CHECK(seen.disposed_conn_data != NULL);
    CHECK_EQ(worker.nconns, 0);
}

int main(void)
{
    ps_config_t cfg = {
        .limits = {.max_request_line = 8190,
                   .max_fields = 100,
                   .max_field_size = 1024,
                   .max_body = 1 << 20},
        .timeout_keep_alive = 5,
        .timeout_request_header = 5,
        .timeout_request_body = 5,
        .body_spool_threshold = 1 << 20,
        .graceful_timeout = 1,
        .limit_connections = 100,
    };
    if (ps_worker_init(&worker, &cfg, &handler, &marker, NULL, NULL) < 0) {
        fprintf(stderr, "test_exchange: cannot make a worker\n");
        return 2;
    }
    test_a_response_is_head_and_body();
    test_chunked_response_ends_with_trailers();
    test_early_hints_come_before_the_response();
    test_synchronous_layer_reads_the_buffered_body();
    test_invalid_head_sends_nothing_then_a_canned_error();
    test_reject_tells_the_layer_and_closes();
    test_bad_request_is_rejected_before_the_layer();
    test_each_exchange_is_disposed_with_its_state();
    ps_worker_free(&worker);
    return check_finish("test_exchange");
}
