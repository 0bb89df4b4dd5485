/* Prometheus metrics: the counters a worker keeps, and the endpoint that
 * shows them (--metrics-bind).
 *
 * Each worker owns one ps_metrics_t. Under a master the blocks live in a
 * shared mapping made before the first fork, one per worker slot; in a
 * single process the block is the process's own. Only the owning worker
 * writes its block, on its loop thread: an increment is a relaxed load and
 * a relaxed store (no lock, no atomic read-modify-write), and the reader
 * (the master, or the single process's endpoint) reads with relaxed loads,
 * so it sees each counter whole, if a moment old.
 *
 * The endpoint is a tiny HTTP/1.0 responder on its own listening socket
 * (ps_metrics_server_t): one response per connection, bounded reads, every
 * socket non-blocking, a deadline per connection; it never blocks the loop
 * that runs it. It renders the exposition text (format 0.0.4) through a
 * callback, so the master can sum its workers' blocks and the single
 * process can show its own.
 */
#ifndef PS_METRICS_H
#define PS_METRICS_H

#include <stdint.h>
#include <time.h>

#include <ev.h>

#include "base/buf.h"

/* Request methods with a label of their own; the rest count as "other". */
enum {
    PS_METRICS_GET,
    PS_METRICS_HEAD,
    PS_METRICS_POST,
    PS_METRICS_PUT,
    PS_METRICS_DELETE,
    PS_METRICS_PATCH,
    PS_METRICS_OPTIONS,
    PS_METRICS_CONNECT,
    PS_METRICS_TRACE,
    PS_METRICS_OTHER_METHOD,
    PS_METRICS_METHODS
};

/* Status classes 1xx..5xx. */
#define PS_METRICS_CLASSES 5

/* Request duration buckets (upper bounds in seconds, see metrics.c); the
 * last one is +Inf. */
#define PS_METRICS_BUCKETS 14

/* Why the server refused a request (by the status of its canned answer). */
enum {
    PS_METRICS_REJ_BAD_REQUEST,      /* 400 */
    PS_METRICS_REJ_TIMEOUT,          /* 408 */
    PS_METRICS_REJ_BODY_TOO_LARGE,   /* 413 */
    PS_METRICS_REJ_URI_TOO_LONG,     /* 414 */
    PS_METRICS_REJ_UPGRADE_REQUIRED, /* 426 (WebSocket version) */
    PS_METRICS_REJ_HEADER_TOO_LARGE, /* 431 */
    PS_METRICS_REJ_SERVER_ERROR,     /* 500 (a spool file failed) */
    PS_METRICS_REJ_NOT_IMPLEMENTED,  /* 501 */
    PS_METRICS_REJ_OVERLOADED,       /* 503 (--limit-concurrency) */
    PS_METRICS_REJ_HTTP_VERSION,     /* 505 */
    PS_METRICS_REJ_OTHER,
    PS_METRICS_REJECTS
};

/* Why the master replaced a worker. */
enum {
    PS_METRICS_RESTART_CRASH,        /* exited or killed without being asked */
    PS_METRICS_RESTART_WATCHDOG,     /* --timeout */
    PS_METRICS_RESTART_MAX_REQUESTS, /* --max-requests */
    PS_METRICS_RESTART_MAX_RSS,      /* --max-rss */
    PS_METRICS_RESTART_HUP,          /* SIGHUP rolling restart */
    PS_METRICS_RESTART_RELOAD,       /* --reload saw a change */
    PS_METRICS_RESTARTS
};

/* One worker's counters. Every field is a count that only grows. */
typedef struct {
    uint64_t requests[PS_METRICS_METHODS][PS_METRICS_CLASSES];
    uint64_t duration[PS_METRICS_BUCKETS]; /* per bucket, not cumulative */
    uint64_t duration_ns;                  /* the sum of the durations */
    uint64_t bytes_in, bytes_out;          /* on client connections, after TLS */
    uint64_t conns_opened, conns_closed;
    uint64_t keepalive_reused; /* requests after the first on a connection */
    uint64_t rejected[PS_METRICS_REJECTS];
    uint64_t ws_opened, ws_closed;
    uint64_t ws_messages_in, ws_messages_out;
    uint64_t health_checks; /* --health-check-path requests, answered by the core */
} ps_metrics_t;

/* A counter of the owning worker grows by n (see the top of the file).
 * field is evaluated twice. */
#define PS_METRICS_ADD(field, n)                                                                   \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (uint64_t)(n),        \
                     __ATOMIC_RELAXED)

/* The monotonic clock in nanoseconds (request durations). */
static inline uint64_t ps_metrics_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Counts one request answered with status (its class; 0 and codes outside
 * 100..599 are not counted), its method and its duration. */
void ps_metrics_request(ps_metrics_t *m, ps_slice_t method, int status, uint64_t duration_ns);
/* Counts a request the server refused with a canned answer of status. */
void ps_metrics_rejected(ps_metrics_t *m, int status);

/* Adds every counter of src to dst (a dead worker's block folded into the
 * master's totals); reads src with relaxed loads. */
void ps_metrics_fold(ps_metrics_t *dst, const ps_metrics_t *src);

/* What an exposition shows besides the summed counters. */
typedef struct {
    uint32_t index; /* the worker's number (1-based) */
    int pid;
    uint64_t rss_bytes;
} ps_metrics_worker_t;

typedef struct {
    const ps_metrics_t *const *live; /* the live workers' blocks */
    uint32_t nlive;
    const ps_metrics_t *folded; /* the exited workers' totals, or NULL */
    const uint64_t *restarts;   /* PS_METRICS_RESTARTS counts, or NULL (no master) */
    const ps_metrics_worker_t *workers;
    uint32_t nworkers;
} ps_metrics_view_t;

/* Writes the exposition text of v (format 0.0.4) to out. Returns 0 or -ENOMEM. */
int ps_metrics_render(const ps_metrics_view_t *v, ps_buf_t *out);

/* Resident memory of pid in bytes, or 0 when it cannot be read. */
uint64_t ps_metrics_rss(int pid);

/* ---- the endpoint ---- */

typedef struct ps_metrics_server ps_metrics_server_t;

/* Fills out with the exposition text for one scrape. Returns 0 or -errno. */
typedef int (*ps_metrics_render_fn)(void *data, ps_buf_t *out);

/* Serves GET /metrics on the listening socket fd (made non-blocking here,
 * not owned) from loop. Its watchers do not keep the loop alive. Returns
 * NULL on OOM. */
ps_metrics_server_t *ps_metrics_server_new(struct ev_loop *loop, int fd,
                                           ps_metrics_render_fn render, void *data);
/* Stops accepting and closes the scrapes in progress. */
void ps_metrics_server_free(ps_metrics_server_t *s);
/* In a child forked from the loop's process: closes the scrapes' sockets
 * and frees s without touching the loop (the child does not serve it). */
void ps_metrics_server_forget(ps_metrics_server_t *s);

#endif
