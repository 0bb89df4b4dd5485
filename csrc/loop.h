/* A worker: one libev loop, its listening sockets and its connections. */
#ifndef PS_LOOP_H
#define PS_LOOP_H

#include <stdint.h>

#include <ev.h>

#include "conn.h"
#include "http1.h"

typedef struct {
    ps_http1_limits_t limits;
    double timeout_keep_alive;     /* idle time between requests */
    double timeout_request_header; /* time to send a head; also a stalled body or send */
    double graceful_timeout;
    uint32_t limit_connections;
    unsigned server_header : 1;
    unsigned date_header : 1;
} ps_config_t;

typedef struct {
    ev_io io;
    ps_worker_t *w;
    int fd;
    int is_unix;
} ps_listener_t;

struct ps_worker {
    struct ev_loop *loop;
    ps_config_t cfg;
    const ps_handler_t *handler;
    void *handler_data;
    ps_listener_t *listeners;
    uint32_t nlisteners;
    ps_conn_t *conns; /* live connections */
    ps_conn_t *dead;  /* closed, freed before the loop sleeps */
    uint32_t nconns;
    unsigned stopping : 1;
    unsigned accepting : 1;
    int reserve_fd; /* spare descriptor for the EMFILE case */
    ev_prepare prepare;
    ev_signal sigint, sigterm, sigquit;
    ev_timer stop_timer;
    char scratch[64 * 1024]; /* every read lands here first */
};

/* Returns 0 or -errno. */
int ps_worker_init(ps_worker_t *w, const ps_config_t *cfg, const ps_handler_t *handler,
                   void *handler_data);
int ps_worker_add_listener(ps_worker_t *w, int fd);
/* Runs until a stop signal and every connection is done. */
void ps_worker_run(ps_worker_t *w);
/* Stops accepting and finishes in-flight requests (graceful stop). */
void ps_worker_stop(ps_worker_t *w);
void ps_worker_free(ps_worker_t *w);

/* Internal to the core: connection bookkeeping. */
void ps_worker_conn_closed(ps_worker_t *w, ps_conn_t *c);

#endif
