/* The master process: forks the workers and supervises them (signals,
 * heartbeats, respawn, recycling, rolling restart, graceful stop).
 *
 * The master and its workers share one array of ps_slot_t (an anonymous
 * shared mapping made before the first fork). A worker writes its own slot
 * (heartbeat once a second, ready, retire, the request in progress); the
 * master reads them once a second. Nothing here includes Python.h: the bridge
 * reaches the interpreter through ps_master_ops_t.
 */
#ifndef PS_MASTER_H
#define PS_MASTER_H

#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

#include "master/metrics.h"

#define PS_SLOT_METHOD_LEN 16
#define PS_SLOT_PATH_LEN 120
#define PS_MASTER_MAX_SLOTS 256

/* One worker's shared record. Written by the worker, read by the master,
 * reset by the master before each fork. */
typedef struct {
    volatile double heartbeat;      /* CLOCK_MONOTONIC seconds, once a second */
    volatile uint64_t requests;     /* requests dispatched so far */
    volatile uint64_t max_requests; /* retire after this many (0: never) */
    volatile uint32_t ready;        /* the worker's loop is running */
    volatile uint32_t retire;       /* the worker asks to be replaced */
    volatile uint32_t busy;         /* a request is being dispatched */
    volatile uint32_t release;      /* 1: release the --reuse-port lane (master.c); 2: done */
    volatile uint32_t final_stop;   /* the master is stopping: no worker comes after */
    /* The stop is SIGTERM's: the worker drains first (--drain-delay), set
     * by the master before it signals; a foreign manager's slot (the
     * gunicorn worker) has it from the start. */
    volatile uint32_t drain;
    volatile int32_t master_pid;   /* the master's pid, set before the fork */
    volatile uint32_t reopen_logs; /* USR1 came before ready: the worker reopens at start */
    char method[PS_SLOT_METHOD_LEN];
    char path[PS_SLOT_PATH_LEN];
    /* --metrics-bind: the worker's counters (the master's shared mapping,
     * set before the fork), or NULL. */
    ps_metrics_t *metrics;
} ps_slot_t;

typedef enum { PS_LOG_DEBUG, PS_LOG_INFO, PS_LOG_WARNING, PS_LOG_ERROR } ps_log_level_t;

typedef struct {
    /* Optional: worker `number` (1-based: the lowest number no other worker in
     * service holds) is about to be forked; runs with the master's normal
     * signal mask, before before_fork. */
    void (*pre_fork)(void *data, int number);
    /* Around fork(): the interpreter's fork hooks. */
    void (*before_fork)(void *data);
    void (*after_fork_parent)(void *data);
    /* In the child, right after fork: never returns (it exits the process).
     * own_fds are the worker's lane sockets (--reuse-port), nown of them. */
    void (*run_worker)(void *data, int number, ps_slot_t *slot, const int *own_fds, uint32_t nown);
    void (*log)(void *data, ps_log_level_t level, const char *msg);
    /* USR1: reopen the master's own log files. */
    void (*reopen_logs)(void *data);
    /* With cfg.reload, once a second: returns 1 when the code changed. */
    int (*poll_reload)(void *data);
    /* The master's loop exists (e.g. to release the GIL while it waits). */
    void (*prepare_loop)(void *data, struct ev_loop *loop);
    /* Optional. HUP, before the rolling restart: returns 0 to go on, -1 to
     * keep the workers as they are (it logged why, e.g. a renewed TLS
     * certificate that does not load). */
    int (*check_restart)(void *data);
    /* Optional. Every master tick (0.1 to 1 s apart), e.g. to rotate the
     * workers' shared TLS ticket keys. */
    void (*on_tick)(void *data);
} ps_master_ops_t;

typedef struct {
    uint32_t workers;
    double timeout; /* watchdog, seconds; 0 disables */
    double graceful_timeout;
    uint64_t max_requests;
    uint64_t max_requests_jitter;
    uint64_t max_rss_kib; /* 0: no limit */
    int reload;           /* development: restart on code changes, never exit 3 */
    /* --reuse-port: the TCP listeners among listen_fds that have SO_REUSEPORT
     * set get a lane each per worker (see master.c); backlog is theirs. */
    int reuse_port;
    const int *listen_fds;
    uint32_t nlisten;
    int backlog;
    /* --metrics-bind: the endpoint's listening socket, served from the
     * master's loop (workers do not keep it), or -1. */
    int metrics_fd;
    /* --drain-delay: a SIGTERM lets the workers serve this long (their
     * health checks answer 503) before their graceful stop. */
    double drain_delay;
} ps_master_config_t;

/* The exit status of the master: 0 after a stop, 3 when a worker could not
 * boot, 1 on a system error before any worker ran. */
int ps_master_run(const ps_master_config_t *cfg, const ps_master_ops_t *ops, void *data);

/* Monotonic seconds, comparable between processes. */
double ps_master_now(void);

#endif
