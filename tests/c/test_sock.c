/* The protocol-neutral socket (csrc/serve/sock.c) without a network and without
 * HTTP: a toy protocol on one end of a socketpair, driven by the test on
 * the other end through a real worker's loop. Reads, writes (held until
 * the loop sleeps, sent at once when large, queued when the socket is
 * full), timers, the handover to another protocol, the linger and the
 * close with its hooks and the safe-point free. */
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
#include "serve/exchange.h"
#include "serve/sock.h"
#include "serve/worker.h"

static ps_worker_t worker;

/* What the protocols saw, in order (one letter per event). */
static struct {
    char log[256];
    size_t len;
    char in[64 * 1024];
    size_t in_len;
    int reads, writes, timers, flushed, freed, handed_freed;
} seen;

static void note(char ev)
{
    if (seen.len < sizeof(seen.log) - 1)
        seen.log[seen.len++] = ev;
    seen.log[seen.len] = '\0';
}

/* The toy protocol: it owns the socket and keeps what it reads. */
typedef struct {
    ps_sock_t s;
} toy_t;

static void toy_read(ps_sock_t *s)
{
    seen.reads++;
    for (;;) {
        ssize_t n = ps_sock_read(s, seen.in + seen.in_len, sizeof(seen.in) - seen.in_len);
        if (n > 0) {
            seen.in_len += (size_t)n;
            continue;
        }
        if (n == 0 || (n != PS_IO_WANT_READ && n != PS_IO_WANT_WRITE))
            ps_sock_close(s);
        return;
    }
}

static void toy_write(ps_sock_t *s)
{
    seen.writes++;
    int rc = ps_sock_flush(s);
    if (rc < 0)
        ps_sock_close(s);
    else if (rc == 0)
        ps_sock_stop_writing(s);
}

static void toy_timer(ps_sock_t *s)
{
    PS_UNUSED(s);
    seen.timers++;
}

static void toy_flushed(ps_sock_t *s)
{
    PS_UNUSED(s);
    seen.flushed++;
}

static void toy_before_close(ps_sock_t *s)
{
    PS_UNUSED(s);
    note('b');
}

static void toy_after_close(ps_sock_t *s)
{
    CHECK(s->closed && s->fd < 0);
    note('a');
}

static void toy_free(ps_sock_t *s, void *data)
{
    PS_UNUSED(data);
    seen.freed++;
    ps_sock_free(s);
    free(s);
}

static const ps_sock_proto_t toy_proto = {
    .on_read = toy_read,
    .on_write = toy_write,
    .on_timer = toy_timer,
    .on_flushed = toy_flushed,
    .before_close = toy_before_close,
    .after_close = toy_after_close,
    .free = toy_free,
};

/* A second protocol the socket can be handed to. */
static int handed_data;

static void handed_read(ps_sock_t *s)
{
    CHECK(s->data == &handed_data);
    note('r');
    toy_read(s);
}

static void handed_before_close(ps_sock_t *s)
{
    PS_UNUSED(s);
    note('B');
}

static void handed_after_close(ps_sock_t *s)
{
    PS_UNUSED(s);
    note('A');
}

static void handed_free(ps_sock_t *s, void *data)
{
    PS_UNUSED(s);
    CHECK(data == &handed_data);
    seen.handed_freed++;
}

static const ps_sock_proto_t handed_proto = {
    .on_read = handed_read,
    .on_write = toy_write,
    .on_timer = toy_timer,
    .before_close = handed_before_close,
    .after_close = handed_after_close,
    .free = handed_free,
};

/* A socket on sv[0], linked into the worker; the test keeps sv[1]. */
static ps_sock_t *open_sock(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("socketpair");
        exit(2);
    }
    toy_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        exit(2);
    struct sockaddr_storage peer = {.ss_family = AF_UNIX};
    ps_sock_init(&t->s, &worker, sv[0], &peer, sizeof(sa_family_t), 1, &toy_proto, t);
    ps_sock_link(&t->s);
    memset(&seen, 0, sizeof(seen));
    return &t->s;
}

/* Runs the loop's iterations (without waiting) a few times. */
static void spin(void)
{
    for (int i = 0; i < 3; i++)
        ev_run(worker.loop, EVRUN_NOWAIT);
}

/* Reads what the peer end has now (non-blocking); returns bytes, 0 at EOF,
 * -1 when nothing is there. */
static ssize_t peer_read(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap, MSG_DONTWAIT);
    return n < 0 ? -1 : n;
}

/* Ends a test: the peer goes, the socket closes and is freed at the safe
 * point. */
static void finish(ps_sock_t *s, int peer_fd)
{
    ps_sock_start_reading(s);
    close(peer_fd);
    spin();
    CHECK_EQ(worker.nconns, 0);
    CHECK(worker.conns == NULL && worker.dead == NULL);
}

static void test_reads_reach_the_protocol(void)
{
    int sv[2];
    ps_sock_t *s = open_sock(sv);
    ps_sock_start_reading(s);
    CHECK_EQ(write(sv[1], "hello", 5), 5);
    spin();
    CHECK(seen.reads >= 1);
    CHECK(seen.in_len == 5 && memcmp(seen.in, "hello", 5) == 0);
    CHECK(!s->closed);
    close(sv[1]);
    spin(); /* EOF: the toy closes, the worker frees it */
    CHECK_EQ(strcmp(seen.log, "ba"), 0);
    CHECK_EQ(seen.freed, 1);
    CHECK_EQ(worker.nconns, 0);
}

/* A small write waits for the loop's prepare (the held list), then goes
 * out with the protocol told (on_flushed). */
static void test_small_writes_are_held_until_the_loop_sleeps(void)
{
    int sv[2];
    char buf[64];
    ps_sock_t *s = open_sock(sv);
    struct iovec v[2] = {{"ab", 2}, {"cd", 2}};
    CHECK_EQ(ps_sock_send(s, v, 2), PS_WRITE_DONE);
    CHECK(s->held);
    CHECK_EQ(peer_read(sv[1], buf, sizeof(buf)), -1); /* nothing sent yet */
    struct iovec w = {"ef", 2};
    CHECK_EQ(ps_sock_send(s, &w, 1), PS_WRITE_DONE);
    ev_run(worker.loop, EVRUN_NOWAIT);
    CHECK(!s->held);
    CHECK_EQ(seen.flushed, 1);
    ssize_t n = peer_read(sv[1], buf, sizeof(buf));
    CHECK(n == 6 && memcmp(buf, "abcdef", 6) == 0);
    finish(s, sv[1]);
}

/* A write larger than what is held goes out at once, after the held bytes. */
static void test_large_writes_go_out_at_once(void)
{
    int sv[2];
    static char big[32 * 1024], buf[64 * 1024];
    memset(big, 'x', sizeof(big));
    ps_sock_t *s = open_sock(sv);
    struct iovec v = {"head", 4};
    CHECK_EQ(ps_sock_send(s, &v, 1), PS_WRITE_DONE);
    struct iovec b = {big, sizeof(big)};
    CHECK_EQ(ps_sock_send(s, &b, 1), PS_WRITE_DONE);
    CHECK_EQ(ps_buf_size(&s->wbuf), 0);
    size_t got = 0;
    ssize_t n;
    while ((n = peer_read(sv[1], buf + got, sizeof(buf) - got)) > 0)
        got += (size_t)n;
    CHECK_EQ(got, 4 + sizeof(big));
    CHECK(memcmp(buf, "head", 4) == 0 && buf[4] == 'x' && buf[got - 1] == 'x');
    finish(s, sv[1]);
}

/* A full socket queues the rest and watches for writability; the
 * protocol's on_write sends it once the peer reads. */
static void test_a_full_socket_queues_and_resumes(void)
{
    int sv[2];
    static char chunk[256 * 1024], buf[64 * 1024];
    memset(chunk, 'y', sizeof(chunk));
    ps_sock_t *s = open_sock(sv);
    int rc = PS_WRITE_DONE;
    size_t sent = 0;
    for (int i = 0; i < 64 && rc == PS_WRITE_DONE; i++) {
        struct iovec v = {chunk, sizeof(chunk)};
        rc = ps_sock_write_now(s, &v, 1);
        sent += sizeof(chunk);
    }
    CHECK_EQ(rc, PS_WRITE_PENDING);
    CHECK(ps_buf_size(&s->wbuf) > 0);
    CHECK(ev_is_active(&s->wio));
    size_t got = 0;
    for (int i = 0; i < 10000 && got < sent; i++) {
        ssize_t n = peer_read(sv[1], buf, sizeof(buf));
        if (n > 0)
            got += (size_t)n;
        ev_run(worker.loop, EVRUN_NOWAIT);
    }
    CHECK_EQ(got, sent);
    CHECK(seen.writes >= 1);
    CHECK_EQ(ps_buf_size(&s->wbuf), 0);
    finish(s, sv[1]);
}

static void test_the_timer_reaches_the_protocol(void)
{
    int sv[2];
    ps_sock_t *s = open_sock(sv);
    ps_sock_timer_at(s, ev_now(worker.loop) + 0.01);
    for (int i = 0; i < 100 && seen.timers == 0; i++)
        ev_run(worker.loop, EVRUN_ONCE);
    CHECK_EQ(seen.timers, 1);
    ps_sock_timer_again(s, 0); /* stops it */
    CHECK(!ev_is_active(&s->timer));
    finish(s, sv[1]);
}

/* After the handover the other protocol hears the events, and at the
 * close both protocols' hooks run: the owner's around the other's. */
static void test_handover_and_close_hooks(void)
{
    int sv[2];
    ps_sock_t *s = open_sock(sv);
    ps_sock_set_proto(s, &handed_proto, &handed_data);
    CHECK(s->owner == &toy_proto && s->proto == &handed_proto);
    ps_sock_start_reading(s);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    spin();
    CHECK(seen.in_len == 1);
    close(sv[1]);
    spin();
    CHECK_EQ(strcmp(seen.log, "rrbBAa"), 0);
    CHECK_EQ(seen.handed_freed, 1);
    CHECK_EQ(seen.freed, 1);
    CHECK_EQ(worker.nconns, 0);
}

/* Lingering: the socket is shut down for writing (the peer reads EOF),
 * what the peer still sends is read and dropped, its close closes. */
static void test_linger_drains_then_closes(void)
{
    int sv[2];
    char buf[16];
    ps_sock_t *s = open_sock(sv);
    ps_sock_linger(s);
    CHECK(s->lingering);
    CHECK_EQ(peer_read(sv[1], buf, sizeof(buf)), 0); /* our FIN */
    CHECK_EQ(write(sv[1], "late", 4), 4);
    spin();
    CHECK(!s->closed);
    CHECK_EQ(seen.reads, 0); /* the socket drained it, not the protocol */
    CHECK_EQ(seen.in_len, 0);
    close(sv[1]);
    spin();
    CHECK_EQ(strcmp(seen.log, "ba"), 0);
    CHECK_EQ(worker.nconns, 0);
}

/* A peer that never closes is dropped when the linger times out. */
static void test_linger_times_out(void)
{
    int sv[2];
    ps_sock_t *s = open_sock(sv);
    ps_sock_linger(s);
    ev_tstamp start = ev_time();
    for (int i = 0; i < 100 && worker.nconns > 0; i++)
        ev_run(worker.loop, EVRUN_ONCE);
    CHECK_EQ(worker.nconns, 0);
    CHECK(ev_time() - start < 5);
    CHECK_EQ(seen.timers, 0); /* the protocol's timer never fired */
    CHECK_EQ(strcmp(seen.log, "ba"), 0);
    ev_run(worker.loop, EVRUN_NOWAIT);
    CHECK_EQ(seen.freed, 1);
    close(sv[1]);
}

/* Output held when the socket closes leaves before the close. */
static void test_held_output_leaves_before_the_close(void)
{
    int sv[2];
    char buf[16];
    ps_sock_t *s = open_sock(sv);
    struct iovec v = {"bye", 3};
    CHECK_EQ(ps_sock_send(s, &v, 1), PS_WRITE_DONE);
    ps_sock_close(s);
    CHECK(s->closed);
    ssize_t n = peer_read(sv[1], buf, sizeof(buf));
    CHECK(n == 3 && memcmp(buf, "bye", 3) == 0);
    CHECK_EQ(peer_read(sv[1], buf, sizeof(buf)), 0);
    CHECK_EQ(ps_sock_send(s, &v, 1), -EPIPE);
    spin();
    CHECK_EQ(seen.flushed, 0); /* a closed socket is not moved on */
    CHECK_EQ(seen.freed, 1);
    close(sv[1]);
}

static void on_request(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static void on_dispose(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static const ps_handler_t handler = {
    .on_request = on_request,
    .on_writable = on_request,
    .on_disconnect = on_request,
    .dispose = on_dispose,
};

int main(void)
{
    ps_config_t cfg = {
        .timeout_keep_alive = 5,
        .timeout_request_header = 5,
        .timeout_request_body = 5,
        .graceful_timeout = 1,
        .limit_connections = 100,
    };
    if (ps_worker_init(&worker, &cfg, &handler, NULL, NULL, NULL) < 0) {
        fprintf(stderr, "test_sock: cannot make a worker\n");
        return 2;
    }
    test_reads_reach_the_protocol();
    test_small_writes_are_held_until_the_loop_sleeps();
    test_large_writes_go_out_at_once();
    test_a_full_socket_queues_and_resumes();
    test_the_timer_reaches_the_protocol();
    test_handover_and_close_hooks();
    test_linger_drains_then_closes();
    test_linger_times_out();
    test_held_output_leaves_before_the_close();
    ps_worker_free(&worker);
    return check_finish("test_sock");
}
