/* Accepting: a worker's listening sockets, the accept gate that spreads
 * shared sockets over workers without a thundering herd (EPOLLEXCLUSIVE),
 * ACCEPT_BATCH connections per wakeup, and the EMFILE trick: a reserve
 * descriptor given back to accept-and-close one connection instead of
 * spinning on a listener that stays readable. */
#ifndef PS_LISTENER_H
#define PS_LISTENER_H

#include <sys/socket.h>

#include <ev.h>

typedef struct ps_worker ps_worker_t;

/* One listening socket of a worker. */

typedef struct ps_listener {
    ev_io io;
    ps_worker_t *w;
    int fd;
    int is_unix;
    int own;                /* this worker's SO_REUSEPORT socket (its lane; see master.c) */
    int shut_at_stop;       /* bound by this server: released at its last stop (listener.c) */
    int released;           /* drained and shut down: never watched again */
    int gated;              /* registered through the worker's accept gate (EPOLLEXCLUSIVE) */
    struct ps_tls_ctx *tls; /* its connections speak TLS with this context, or NULL */
    int proxy_protocol;     /* connections start with a PROXY header (--proxy-protocol) */
    int uwsgi;              /* connections speak uwsgi, not HTTP (uwsgi://, --protocol uwsgi) */
    int redirect;           /* plain HTTP whose requests are sent to https (--redirect-http) */
    /* The bound address when it is a specific one: then it is every accepted
     * connection's local address too, and no getsockname is needed. */
    struct sockaddr_storage local;
    socklen_t local_len;
} ps_listener_t;

/* Called by the worker (worker.c) on its own state. */
/* Makes the gate's eventfd and lets libev register it (epoll only). */
void ps_listener_gate_open(ps_worker_t *w);
void ps_listener_gate_close(ps_worker_t *w);
/* Starts watching the listeners (through the gate where it can). */
void ps_listener_start(ps_worker_t *w);
void ps_listener_finish(ps_worker_t *w);
/* Stops or resumes accepting (the connection limit, a stop). */
void ps_listener_set_accepting(ps_worker_t *w, int on);
/* Releases the listeners whose time has come at a stop (see listener.c). */
void ps_listener_release(ps_worker_t *w);
/* Out of descriptors: closes *reserve_fd, accepts one connection from lfd
 * and closes it at once, then opens the reserve again (-1 when it cannot).
 * The peer sees its connection closed rather than a server spinning. */
void ps_listener_shed(int *reserve_fd, int lfd);

/* Called by the bridge (through worker.h) to give a worker its sockets. */
int ps_worker_add_listener(ps_worker_t *w, int fd);
/* A listener of this worker's --reuse-port lane. Under a master it is left
 * to the worker's replacement, unless the master closes the lane (or is
 * gone): then its queue is accepted to the last connection and the socket
 * shut down, so the kernel sends new connections to the other sockets. */
int ps_worker_add_own_listener(ps_worker_t *w, int fd);
/* The listener fd, and the --reuse-port lanes bound to its address, speak
 * the PROXY protocol (see ps_h1conn_expect_proxy_header). */
void ps_worker_proxy_protocol(ps_worker_t *w, int fd);
/* The listener fd (and this worker's own lane of its address) speaks the
 * uwsgi protocol (nginx's uwsgi_pass) instead of HTTP. */
void ps_worker_uwsgi(ps_worker_t *w, int fd);
/* The listener fd (and this worker's own lane of its address) speaks plain
 * HTTP, whatever the TLS settings, and answers every request with a
 * redirect to the same URL in https (see ps_h1conn_redirect_https). */
void ps_worker_redirect_https(ps_worker_t *w, int fd);
/* The listener fd was bound by this server, not inherited: at the server's
 * last stop it is shut down, so that new connections are refused at once. */
void ps_worker_shut_at_stop(ps_worker_t *w, int fd);

#endif
