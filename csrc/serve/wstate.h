/* A worker's state, as the code under it reads it: the settings
 * (ps_config_t), the loop, the handler, the live, dead and held sockets
 * and the counters. The connections (sock.c and the protocols over it)
 * and the listeners include this, not worker.h: what drives the worker
 * (worker.c: run, stop, signals, heartbeat) sits above them and includes
 * their headers, so no include goes back up. */
#ifndef PS_WSTATE_H
#define PS_WSTATE_H

#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

#include "serve/exchange.h"
#include "codec/http1.h"
#include "codec/http2.h"
#include "master/master.h"
#include "serve/static.h"
#include "codec/uwsgi.h"

typedef struct ps_worker ps_worker_t;
typedef struct ps_sock ps_sock_t;
typedef struct ps_tls_ctx ps_tls_ctx_t;

typedef struct {
    ps_http1_limits_t limits;
    double timeout_keep_alive;     /* idle time between requests */
    double timeout_request_header; /* time to send a head; also a stalled send */
    double timeout_request_body;   /* a body that makes no progress this long gets 408 */
    /* Synchronous layers: a body larger than this is spooled to a file while
     * it arrives; smaller ones are held in memory. */
    uint64_t body_spool_threshold;
    double graceful_timeout;
    uint32_t limit_connections;
    /* Proxy headers: whose X-Forwarded-* to believe (NULL: nobody's); it
     * must outlive the worker. */
    const ps_proxy_t *proxy;
    /* --proxy-protocol listeners: whose PROXY headers to take (NULL when no
     * listener has it); it must outlive the worker. */
    const ps_proxy_t *proxyproto_trust;
    /* uwsgi listeners: the peers (the nginx in front) that may speak it and
     * whose REMOTE_ADDR and HTTPS are believed; unix-socket peers always
     * may. NULL when no listener speaks uwsgi; it must outlive the worker. */
    const ps_proxy_t *uwsgi_trust;
    ps_uwsgi_limits_t uwsgi_limits;
    unsigned server_header : 1;
    unsigned date_header : 1;
    uint8_t reqid; /* --request-id, --request-start-header: PS_REQID_* bits (serve/reqid.h) */
    /* WebSockets (asynchronous layers; wsconn.c) */
    unsigned ws_enabled : 1;  /* --ws auto: upgrades get a websocket scope */
    unsigned ws_deflate : 1;  /* --ws-per-message-deflate */
    uint8_t ws_deflate_level; /* --ws-deflate-level: zlib level of what we compress */
    uint64_t ws_max_size;     /* bytes of one message, 0: no limit */
    uint32_t ws_max_queue;    /* messages received, not yet read by the app */
    double ws_ping_interval;  /* 0: no pings */
    double ws_ping_timeout;   /* a ping unanswered this long closes with 1011 (0: never) */
    /* HTTP/2 (h2conn.c) */
    unsigned h2c : 1;         /* cleartext HTTP/2 by prior knowledge (the client preface) */
    unsigned h2c_upgrade : 1; /* HTTP/1.1 `Upgrade: h2c` */
    unsigned h2_only : 1;     /* --http 2: an HTTP/1 request gets 505 */
    ps_h2_limits_t h2;
    /* TLS (transport.h): the context of the TCP listeners (unix ones stay
     * plain), NULL for none; it must outlive the worker. */
    ps_tls_ctx_t *tls;
    double timeout_tls_handshake; /* a handshake not done by then closes the connection */
    /* --hsts: "Strict-Transport-Security: max-age=N\r\n" and its value alone,
     * added to every TLS response without one; empty: off. It must outlive
     * the worker. */
    ps_slice_t hsts_line;
    ps_slice_t hsts_value;
    /* --redirect-http: the HTTPS port its redirects name (443: none named). */
    uint16_t redirect_port;
    /* --static mounts, answered by the core before the interface layer is
     * called (NULL or no mounts: none); it must outlive the worker. */
    const ps_static_t *statics;
    /* --health-check-path: answered by the core (worker.c), never by the
     * interface layer; base NULL: none. It must outlive the worker. */
    ps_slice_t health_path;
    /* --drain-delay: after a SIGTERM, serve on this many seconds, the
     * health check answering 503, before the graceful stop (0: none). */
    double drain_delay;
    /* --compress: what to compress and how (NULL: nothing); it must outlive
     * the worker. */
    const ps_encode_cfg_t *compress;
} ps_config_t;

/* What the worker calls in the code that runs it: each optional, on the
 * loop thread, with ps_worker_init's hooks_data. */
typedef struct {
    /* SIGUSR1: reopen log files. NULL leaves SIGUSR1 to someone else. */
    void (*reopen_logs)(void *data);
    /* SIGINT, SIGTERM or SIGQUIT arrived, before the worker acts on it
     * (the gunicorn worker runs its worker_int hook here). */
    void (*stop_signal)(void *data, int signum);
    /* ... and once the worker acted on it: conns are the connections still
     * open (a graceful stop closes the idle ones of a single process first),
     * given up to graceful_timeout seconds (0: no limit), or closed now when quick. */
    void (*stopping)(void *data, int signum, uint32_t conns, int quick, double graceful_timeout);
    /* A SIGTERM began a drain (--drain-delay): the worker serves on for
     * delay seconds, its health check answering 503, before the stop. */
    void (*draining)(void *data, int signum, double delay);
    /* A stop finished its last connection (the ASGI layer stops asyncio's
     * loop, which may be waiting outside libev). */
    void (*drained)(void *data);
    /* SIGHUP in a single process: unless it returns -1 (the reload is
     * refused and the worker serves on), the worker stops gracefully,
     * keeping its listening sockets open, and the code that runs it starts
     * the new server on them (see pyserver/reexec.py). NULL leaves SIGHUP
     * alone. */
    int (*reload)(void *data);
} ps_worker_hooks_t;

struct ps_worker {
    struct ev_loop *loop;
    ps_config_t cfg;
    const ps_handler_t *handler;
    void *handler_data;
    struct ps_listener *listeners; /* listener.h */
    uint32_t nlisteners;
    ps_sock_t *conns;    /* live connections (their sockets, sock.h) */
    ps_sock_t *dead;     /* closed, freed before the loop sleeps */
    ps_sock_t *held;     /* output held back until the loop sleeps (sock.c) */
    uint32_t held_new;   /* ... of which so many held some since the last pass */
    uint64_t held_since; /* ... the first of those since (ps_metrics_clock) */
    uint32_t nconns;
    /* HTTP/2 requests in progress beyond the first of their connection
     * (h2conn.c): with nconns, what a synchronous layer's concurrency
     * limit counts. */
    uint32_t h2_extra_streams;
    unsigned stopping : 1;
    unsigned reloading : 1; /* the stop is a single process's reload (SIGHUP) */
    unsigned async : 1;     /* handler->async, kept here for the hot path */
    /* handler->route of the interface layer (not of a wrapper), or NULL:
     * then every request is async as above. */
    int (*route)(ps_exchange_t *x);
    unsigned accepting : 1;
    /* A final stop began (SIGTERM or SIGINT, not a reload): the health
     * check answers 503. With --drain-delay, drain_timer runs until the
     * graceful stop (stopping) follows. */
    unsigned draining : 1;
    int reserve_fd; /* spare descriptor for the EMFILE case */
    /* The accept gate (see listener.c): shared listeners sit in libev's epoll set
     * with EPOLLEXCLUSIVE, reported to libev as events of gate_fd. */
    int gate_fd;        /* an eventfd never written; -1 when there is no gate */
    int gate_epfd;      /* libev's epoll set */
    uint64_t gate_data; /* the epoll data libev registered gate_fd with */
    ev_io gate;
    ev_timer gate_check;
    ev_prepare prepare;
    ev_signal sigint, sigterm, sigquit, sigusr1, sighup;
    ev_timer stop_timer;
    ev_timer idle_grace;  /* a single process's reload: idle connections closed after 1 s */
    ev_timer drain_timer; /* --drain-delay: the graceful stop once it fires */
    /* Under a master (ps_worker_attach_slot): the shared slot, the handler
     * the slot wrapper forwards to, and the master's pid to watch. */
    ps_slot_t *slot;
    const ps_handler_t *inner_handler;
    /* --static: the handler the static layer forwards to (what it does not
     * answer itself); NULL without mounts. */
    const ps_handler_t *static_inner;
    /* --health-check-path: the handler the health check forwards every
     * other request to, and its own table (a copy of that handler's with
     * on_request replaced); health_inner is NULL without the path. */
    const ps_handler_t *health_inner;
    ps_handler_t health_handler;
    pid_t ppid;
    ev_timer heartbeat;
    ev_tstamp stop_started;         /* graceful stop under a master: when it began */
    ps_metrics_t *metrics;          /* --metrics-bind: this worker's counters, or NULL */
    const ps_worker_hooks_t *hooks; /* never NULL (an empty table) */
    void *hooks_data;
    /* A socket closed (sock.c): moves it to the dead list, resumes
     * accepting or ends a stop (set by ps_worker_init; worker.c). */
    void (*conn_closed)(ps_worker_t *w, ps_sock_t *s);
    char scratch[64 * 1024]; /* every read lands here first */
};

/* --metrics-bind in a single process: the worker counts into m (it must
 * outlive the worker). Under a master, ps_worker_attach_slot takes the
 * slot's block instead. */
static inline void ps_worker_set_metrics(ps_worker_t *w, ps_metrics_t *m)
{
    w->metrics = m;
}

/* The worker's live connections (the interface layers' concurrency limits). */
static inline uint32_t ps_worker_connections(const ps_worker_t *w)
{
    return w->nconns;
}

/* Requests that hold the worker: a connection counts once, with or without
 * a request (as over HTTP/1), and an HTTP/2 connection once per request in
 * progress beyond its first (its streams run side by side). */
static inline uint32_t ps_worker_load(const ps_worker_t *w)
{
    return w->nconns + w->h2_extra_streams;
}

/* For the protocols, once x's head is complete: 1 when the request is
 * answered asynchronously (its body read as it arrives), 0 when the layer
 * takes it with the whole body buffered. Asks the layer only when it
 * carries both kinds (handler->route). */
static inline int ps_worker_route(ps_worker_t *w, ps_exchange_t *x)
{
    return ps_unlikely(w->route != NULL) ? w->route(x) : w->async;
}

/* The worker's libev loop. */
static inline struct ev_loop *ps_worker_loop(const ps_worker_t *w)
{
    return w->loop;
}

/* The worker's settings (the interface layers read the WebSocket ones). */
static inline const ps_config_t *ps_worker_config(const ps_worker_t *w)
{
    return &w->cfg;
}

#endif
