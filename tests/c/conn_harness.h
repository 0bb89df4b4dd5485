/* A connection of a real worker over one end of a socketpair, for the C
 * tests and the fuzz drivers that drive whole connections (test_h2conn.c,
 * test_wsconn.c, tests/fuzz/fuzz_conn.c). Every call that creates, starts
 * or drives a connection is here, so a change to how an accepted socket
 * becomes a connection is made in one place. The including file sets up
 * `worker` (ps_worker_init) and tears it down. */
#ifndef PS_TEST_CONN_HARNESS_H
#define PS_TEST_CONN_HARNESS_H

#include <stdint.h>
#include <sys/socket.h>

#include "serve/h1conn.h"
#include "serve/worker.h"

static ps_worker_t worker;

/* Makes fd a connection of the worker as the listener makes an accepted
 * socket one (a unix-socket peer), and lets it read what already arrived.
 * Returns 0, or -1 when out of memory. */
static inline int start_conn(int fd)
{
    struct sockaddr_storage peer = {.ss_family = AF_UNIX};
    ps_h1conn_t *c = ps_h1conn_new(&worker, fd, &peer, sizeof(sa_family_t), 1);
    if (c == NULL)
        return -1;
    ps_sock_link(&c->s);
    ps_h1conn_accepted(c);
    return 0;
}

/* One turn of the loop that does not wait: ready watchers run, output held
 * back is sent and closed connections are freed. */
static inline void run_loop_once(void)
{
    ev_run(worker.loop, EVRUN_NOWAIT);
}

/* The connections still open. */
static inline uint32_t live_conns(void)
{
    return worker.nconns;
}

#endif
