/* Shared by the files of the CPython bridge. */
#ifndef PS_BRIDGE_H
#define PS_BRIDGE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <string.h>

#include "base/common.h"
#include "serve/worker.h"
#include "serve/encode.h"
#include "base/net.h"
#include "codec/accesslog.h"
#include "net/transport.h"

/* A task's first step, taken from the loop's call_soon() instead of queued
 * (evloop.c), for the ASGI layer to run at once (asgi_task.c): armed with
 * loop set and callback NULL around an asyncio.Task() call. */
typedef struct {
    PyObject *loop;     /* borrowed: only this loop's call_soon() is taken */
    PyObject *callback; /* the task's step, once taken (owned) */
    PyObject *context;  /* the context it runs in (owned) */
} ps_step_capture_t;

typedef struct {
    ps_step_capture_t *step_capture; /* armed, or NULL */
    PyTypeObject *request_type;
    PyTypeObject *input_type;
    PyTypeObject *errors_type;
    PyTypeObject *file_wrapper_type;
    /* ASGI */
    PyTypeObject *cycle_type;
    PyTypeObject *ready_type;
    PyTypeObject *server_type;
    PyTypeObject *appcall_type;
    PyTypeObject *evselector_type;
} ps_module_state_t;

/* d[key] = value, stealing value (NULL: an exception is set, -1). Returns 0
 * or -1 with an exception. */
static inline int ps_py_set_new(PyObject *d, PyObject *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* The access log of one serve() call (log.c): the compiled format and the
 * logger's info method. */
typedef struct ps_access_log ps_access_log_t;

/* ---- settings.c: every Config attribute C reads, read once ---- */

/* What serve() and run_master() take from a Config. */
typedef struct {
    ps_config_t core; /* the worker's; core.proxy is &proxy or NULL */
    ps_proxy_t proxy; /* initialised when proxy_ready */
    int proxy_ready;
    ps_tls_ctx_t *tls;          /* --ssl-certfile's context (core.tls), or NULL */
    double tls_ticket_rotation; /* seconds between a master's new ticket keys */
    ps_master_config_t master;  /* run_master's; listen_fds PyMem_Malloc'd (reuse_port) */
    int asgi;                   /* interface is "asgi" */
    /* --asgi-app beside a WSGI application (config.loaded_asgi_app), or
     * NULL; and --asgi-path's prefixes as a tuple of bytes (owned). */
    PyObject *asgi_app;
    PyObject *asgi_paths;
    int multiprocess;            /* workers > 1 (wsgi.multiprocess) */
    uint32_t limit_concurrency;  /* 0: no limit */
    uint32_t threads;            /* WSGI application threads (1: the loop's own) */
    int wsgi_errors_level;       /* logging level of wsgi.errors lines */
    PyObject *wsgi_errors_write; /* callable writing wsgi.errors text as it comes, or NULL */
    PyObject *root_path;         /* str, "" for None */
    PyObject *url_scheme;
    PyObject *error_logger;
    ps_access_log_t *access_log; /* NULL when access_log is false (owned) */
    /* Supervision by a foreign process manager (the gunicorn worker). */
    PyObject *on_tick;        /* callable, or NULL */
    PyObject *on_stop_signal; /* callable, or NULL */
    PyObject *on_hup;         /* callable, or NULL: SIGHUP reloads a single process */
    double tick_interval;     /* seconds, positive when supervised */
    uint64_t sup_max_requests;
    int *bound_fds; /* the listeners pyserver bound itself; PyMem_Malloc'd */
    uint32_t nbound;
    int *proxyproto_fds; /* the listeners that speak the PROXY protocol; PyMem_Malloc'd */
    uint32_t nproxyproto;
    int *uwsgi_fds; /* the listeners that speak uwsgi; PyMem_Malloc'd */
    uint32_t nuwsgi;
    int *redirect_fds; /* --redirect-http's listeners; PyMem_Malloc'd */
    uint32_t nredirect;
    char *hsts;          /* --hsts: its header line (core.hsts_line); PyMem_Malloc'd, or NULL */
    ps_static_t statics; /* --static mounts (core.statics), initialised when statics_ready */
    int statics_ready;
    /* --health-check-path as UTF-8 bytes (core.health_path points into it), or NULL. */
    PyObject *health_path;
    ps_encode_cfg_t compress; /* --compress (core.compress points here when on) */
} ps_py_settings_t;

/* Reads, validates and converts every attribute of config C uses into s
 * (owned references and arrays: ps_py_settings_free). Returns 0, or -1 with
 * an exception (s freed). */
int ps_py_settings_load(PyObject *config, ps_py_settings_t *s);
void ps_py_settings_free(ps_py_settings_t *s);
/* Loads config's TLS files (read afresh) and settings as a worker would,
 * and drops the context, keeping the files' text when they loaded (see
 * ps_py_tls_ctx_new): returns 0, or -1 with a ValueError saying what is
 * wrong. */
int ps_py_check_tls(PyObject *config);
/* Parses a forwarded_allow_ips string into p (ps_proxy_free it). Returns 0,
 * or -1 with a ValueError naming the bad item, TypeError or MemoryError. */
int ps_py_parse_trust_list(PyObject *value, ps_proxy_t *p);
/* The descriptors of a sequence of sockets (or ints) into a new array
 * (PyMem_Free it; never NULL on success). Returns the count, or -1 with an
 * exception. */
Py_ssize_t ps_py_read_fds(PyObject *items, const char *what, int **out);

/* Everything one serve() call needs, alive for its duration. */
typedef struct ps_wsgi ps_wsgi_t;

/* Adds the WSGI types to the module. Returns 0 or -1 with an exception. */
int ps_wsgi_init_types(PyObject *module, ps_module_state_t *st);
/* Builds the WSGI layer for one serve() call. Returns NULL with an exception. */
ps_wsgi_t *ps_wsgi_new(ps_module_state_t *st, PyObject *app, const ps_py_settings_t *s);
/* After ps_worker_init (and ps_worker_attach_slot): with --threads N > 1,
 * starts the N application threads. Returns 0 or -1 with an exception. */
int ps_wsgi_attach(ps_wsgi_t *ctx, ps_worker_t *w);
/* Before the worker's loop is destroyed: stops the layer's timers and
 * threads. */
void ps_wsgi_detach(ps_wsgi_t *ctx);
/* 1 when ps_wsgi_attach started application threads. */
int ps_wsgi_threaded(const ps_wsgi_t *ctx);
void ps_wsgi_free(ps_wsgi_t *ctx);
extern const ps_handler_t ps_wsgi_handler;

/* ---- pool.c: the WSGI layer's application threads ---- */

typedef struct ps_pool ps_pool_t;
/* Runs one job on a pool thread, with the GIL; leaves no exception. The
 * pool calls release(job) after run(job), once the job is no longer the
 * thread's (ps_pool_thread_t.job). */
typedef void (*ps_pool_run_fn)(void *job, void *data);
/* On the loop thread (the GIL not necessarily held: ps_py_loop_gil): a
 * thread woke the loop (ps_pool_wake), or finished a job and is idle
 * again. */
typedef void (*ps_pool_notify_fn)(void *data);

typedef struct {
    ps_pool_t *pool;
    pthread_t tid;
    unsigned long ident; /* threading.get_ident() of the thread */
    char name[32];       /* pyserver-thread-N, also threading's name */
    void *job;           /* the job it runs, NULL when idle (read with the GIL) */
    double started;      /* when it took the job (ev_time) */
} ps_pool_thread_t;

/* Starts n threads (after fork: in the worker) whose wake-ups reach the
 * loop. Returns the pool, or NULL with an exception. */
ps_pool_t *ps_pool_new(struct ev_loop *loop, uint32_t n, ps_pool_run_fn run, ps_pool_run_fn release,
                       ps_pool_notify_fn notify, void *data);
/* Loop thread: queues job for the next free thread (see pool.c for when
 * a thread is woken). Returns 0, or -EAGAIN when the queue is full (the
 * caller keeps the job and retries on notify). */
int ps_pool_push(ps_pool_t *p, void *job);
/* Any thread: notify runs on the loop soon (a no-op once stopping). */
void ps_pool_wake(ps_pool_t *p);
/* The threads, for the watchdog (n of them). */
ps_pool_thread_t *ps_pool_threads(ps_pool_t *p, uint32_t *n);
/* Stops the threads, waiting up to `wait` seconds (GIL released) for the
 * ones inside a job. Returns 0, or -EBUSY when a thread is still running
 * the application: it and the pool are then left alive (so is whatever its
 * job uses), as the process is ending. */
int ps_pool_free(ps_pool_t *p, double wait);

/* The ASGI layer. */
typedef struct ps_asgi ps_asgi_t;
int ps_asgi_init_types(PyObject *module, ps_module_state_t *st);
/* Builds the ASGI layer for one serve() call. Returns NULL with an exception. */
ps_asgi_t *ps_asgi_new(ps_module_state_t *st, PyObject *module, PyObject *app,
                       const ps_py_settings_t *s);
void ps_asgi_attach(ps_asgi_t *ctx, ps_worker_t *w);
/* The worker's graceful stop finished its last connection (its drained
 * hook): stops asyncio's loop once Server.start() has run. */
void ps_asgi_drained(ps_asgi_t *ctx);
/* Requests whose application has not ended. */
uint32_t ps_asgi_active(const ps_asgi_t *ctx);
/* Before the worker's loop is destroyed: stops the layer's timers. */
void ps_asgi_detach(ps_asgi_t *ctx);
PyObject *ps_asgi_run(ps_asgi_t *ctx, PyObject *config);
void ps_asgi_free(ps_asgi_t *ctx);
PyObject *ps_asgi_server_new(ps_asgi_t *ctx);
void ps_asgi_server_release(PyObject *server);
extern const ps_handler_t ps_asgi_handler;

/* ---- hybrid.c: a WSGI and an ASGI application on one worker ---- */

/* The handler_data of a worker with both (--asgi-app): WebSocket upgrades
 * and requests under an --asgi-path prefix go to the ASGI layer, the rest
 * to the WSGI layer. */
typedef struct ps_hybrid ps_hybrid_t;

/* Borrows both layers and s's prefixes (they must outlive it). Returns
 * NULL with an exception. */
ps_hybrid_t *ps_hybrid_new(ps_wsgi_t *wsgi, ps_asgi_t *asgi, const ps_py_settings_t *s);
void ps_hybrid_free(ps_hybrid_t *h);
extern const ps_handler_t ps_hybrid_handler;

/* The selector core over a libev loop (evselector.c). New reference. */
PyObject *ps_evselector_new(ps_module_state_t *st, struct ev_loop *loop);

/* ---- tls.c: what a TLS connection's requests show ---- */

/* The ASGI "tls" scope extension of t (a finished handshake). New
 * reference, or NULL with an exception. */
PyObject *ps_py_tls_extension(const ps_transport_t *t);
/* HTTPS=on, SSL_PROTOCOL, SSL_CIPHER and, when the client sent a
 * certificate, SSL_CLIENT_CERT (PEM), SSL_CLIENT_S_DN (RFC 4514) and
 * SSL_CLIENT_VERIFY into env. Returns 0 or -1 with an exception. */
int ps_py_tls_environ(PyObject *env, const ps_transport_t *t);
/* Under a master: the session ticket keys its workers share. The master
 * makes the ring before the first fork (rotation: seconds between new
 * keys; the last PS_TLS_MAX_TICKET_KEYS still decrypt) and rotates it from
 * its tick; each worker installs the ring in its context and checks it once
 * a second. Create returns 0 or -1 with an exception; the rest never fail. */
int ps_py_tls_ring_create(double rotation);
void ps_py_tls_ring_rotate(void);
void ps_py_tls_ring_attach(struct ev_loop *loop, ps_tls_ctx_t *ctx);
void ps_py_tls_ring_detach(void);
/* A context for s. The text of its files is kept from the last context
 * built from the files themselves: fresh (the start's check and each HUP's)
 * reads them and, when they load, keeps their text in place of the old; a
 * worker (fresh 0) builds from the kept text when s names the same files,
 * so one respawned after a refused HUP serves what the master accepted
 * last, never the files it refused. Returns NULL with the reason in err. */
ps_tls_ctx_t *ps_py_tls_ctx_new(const ps_tls_settings_t *s, int fresh, char *err, size_t errlen);

/* ---- request.c: what both interfaces take from an exchange ---- */

typedef enum {
    PS_PY_WSGI, /* header names as environ keys (str), addresses as str */
    PS_PY_ASGI, /* header names as lower-case bytes, addresses as tuples */
} ps_py_kind_t;

#define PS_PY_NAME_SLOTS 256
#define PS_PY_NAME_MAX 64

typedef struct {
    char name[PS_PY_NAME_MAX]; /* the transformed key */
    uint8_t len;
    PyObject *obj;
} ps_py_name_slot_t;

/* One interface's caches (it lives as long as the layer). */
typedef struct {
    ps_py_kind_t kind;
    PyObject *content_type, *content_length; /* WSGI's two keys without HTTP_ */
    PyObject *methods[64];                   /* by llhttp method id */
    ps_py_name_slot_t names[PS_PY_NAME_SLOTS];
} ps_py_cache_t;

/* Returns 0 or -1 with an exception (then call ps_py_cache_clear). */
int ps_py_cache_init(ps_py_cache_t *c, ps_py_kind_t kind);
void ps_py_cache_clear(ps_py_cache_t *c);
/* The slow paths of the two below (request.c): a key made and put in its
 * slot, and a name too long to cache. New reference or NULL. */
PyObject *ps_py_cache_fill(ps_py_cache_t *c, const char *key, size_t n, uint32_t h);
PyObject *ps_py_long_name(ps_py_cache_t *c, ps_slice_t name);

/* The request method as str, exactly as sent: a method llhttp has no id
 * for (PS_METHOD_OTHER) is never cached. Returns a new reference, or NULL
 * with an exception. Inline: it runs for every request. */
static inline PyObject *ps_py_method(ps_py_cache_t *c, const ps_request_t *r)
{
    if (r->method_id < PS_ARRAY_LEN(c->methods)) {
        PyObject **slot = &c->methods[r->method_id];
        if (*slot == NULL)
            *slot = PyUnicode_FromStringAndSize(r->method.base, (Py_ssize_t)r->method.len);
        return Py_XNewRef(*slot);
    }
    return PyUnicode_FromStringAndSize(r->method.base, (Py_ssize_t)r->method.len);
}

static inline PyObject *ps_py_cached_name(ps_py_cache_t *c, const char *key, size_t n, uint32_t h)
{
    ps_py_name_slot_t *slot = &c->names[h % PS_PY_NAME_SLOTS];
    if (slot->obj && slot->len == n && memcmp(slot->name, key, n) == 0)
        return Py_NewRef(slot->obj);
    return ps_py_cache_fill(c, key, n, h);
}

/* A request header's name in the kind's shape, from a bounded cache: WSGI
 * "HTTP_" + upper case with '-' as '_' (CONTENT_TYPE, CONTENT_LENGTH as
 * they are), ASGI lower-case bytes. Returns a new reference, NULL with an
 * exception, or (WSGI) NULL without one for a name with '_', which would
 * pass for one with '-' and must not reach the application. Inline: it
 * runs for every header of every request. */
static inline PyObject *ps_py_header_name(ps_py_cache_t *c, ps_slice_t name)
{
    char key[PS_PY_NAME_MAX];
    uint32_t h = 2166136261u;
    if (c->kind == PS_PY_WSGI) {
        if (name.len == 12 && PS_SLICE_IEQ(name, "content-type"))
            return Py_NewRef(c->content_type);
        if (name.len == 14 && PS_SLICE_IEQ(name, "content-length"))
            return Py_NewRef(c->content_length);
        if (memchr(name.base, '_', name.len) != NULL)
            return NULL;
        if (5 + name.len > sizeof(key))
            return ps_py_long_name(c, name);
        memcpy(key, "HTTP_", 5);
        for (size_t i = 0; i < name.len; i++) {
            char ch = name.base[i];
            ch = ch == '-' ? '_' : (ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch);
            key[5 + i] = ch;
            h = (h ^ (uint8_t)ch) * 16777619u;
        }
        return ps_py_cached_name(c, key, 5 + name.len, h);
    }
    if (name.len > sizeof(key))
        return ps_py_long_name(c, name);
    for (size_t i = 0; i < name.len; i++) {
        char ch = name.base[i];
        ch = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        key[i] = ch;
        h = (h ^ (uint8_t)ch) * 16777619u;
    }
    return ps_py_cached_name(c, key, name.len, h);
}

/* The exchange's addresses in the kind's shape, made on its connection's
 * first request and kept in x->conn_data (free with ps_py_addresses_free).
 * Over a unix socket both kinds say the same: the server is the socket's
 * path and there is no client address. A connection that carries both
 * kinds (--asgi-app) keeps the second kind's addresses in `other`. */
typedef struct ps_py_addresses ps_py_addresses_t;
struct ps_py_addresses {
    PyObject *client;      /* WSGI REMOTE_ADDR ("" on a unix socket); ASGI (host, port) or None */
    PyObject *client_port; /* WSGI REMOTE_PORT, NULL on a unix socket; ASGI NULL */
    PyObject *server; /* WSGI SERVER_NAME (address or path); ASGI (host, port) or [path, None] */
    PyObject *server_port; /* WSGI SERVER_PORT ("" on a unix socket); ASGI NULL */
    PyObject *tls_ext;     /* ASGI over TLS: the "tls" scope extension, once built; else NULL */
    ps_py_kind_t kind;
    ps_py_addresses_t *other; /* the other kind's, or NULL (owned) */
};

/* Returns the addresses (borrowed from x), or NULL with an exception. */
ps_py_addresses_t *ps_py_addresses(const ps_py_cache_t *c, ps_exchange_t *x);
void ps_py_addresses_free(ps_exchange_t *x);

/* A connection closed before its first request (handler on_refused): one
 * WARNING line on error_logger naming the peer and the reason, at most
 * PS_REFUSED_LINES_PER_SECOND a second per worker; the next line after a
 * second with lines dropped says how many. Never raises; a pending
 * exception stays pending. */
#define PS_REFUSED_LINES_PER_SECOND 10
typedef struct {
    double window_end; /* CLOCK_MONOTONIC seconds */
    uint32_t lines;    /* logged in the window */
    uint32_t dropped;  /* not logged since the last line */
} ps_py_refusals_t;
void ps_py_log_refused(PyObject *error_logger, ps_py_refusals_t *r, ps_exchange_t *x,
                       const char *reason);

/* Reads a trusted proxy's headers into *fwd (all zero when the peer is not
 * trusted). Returns 0, or -1 after rejecting the request with 400 when the
 * headers disagree or a Forwarded field is malformed. */
int ps_py_forwarded_apply(ps_exchange_t *x, ps_proxy_result_t *fwd);
static inline int ps_py_forwarded(ps_exchange_t *x, ps_proxy_result_t *fwd)
{
    memset(fwd, 0, sizeof(*fwd));
    return x->proxy ? ps_py_forwarded_apply(x, fwd) : 0;
}
/* The client a trusted proxy forwarded, for the access line of a request
 * the core answered itself (a --static hit): base NULL when none, or when
 * the proxy's headers do not parse (the peer is logged then; an app
 * request would have been refused with 400). */
static inline ps_slice_t ps_py_served_client(ps_exchange_t *x)
{
    ps_proxy_result_t fwd;
    if (x->proxy == NULL || ps_proxy_apply(x->proxy, x->req, &fwd) < 0)
        return (ps_slice_t){NULL, 0};
    return fwd.client;
}
/* The forwarded client: WSGI its host as str, ASGI (host, port), port 0
 * when none was forwarded. New reference, or NULL with an exception. */
PyObject *ps_py_forwarded_client(const ps_py_cache_t *c, ps_slice_t client, int port);

/* Logging through Python's logging module. */
/* Logs the pending exception with its traceback on `logger` and clears it. */
void ps_log_exception(PyObject *logger, const char *fmt, ...);
/* In a worker loop's callback (module.c): takes the GIL back if the loop
 * let go of it and, with --threads, has not taken it since (a no-op
 * otherwise). Whatever runs Python from the loop calls it first. */
void ps_py_loop_gil(void);
/* Logs a plain message at ERROR level; a pending exception stays pending. */
void ps_log_error(PyObject *logger, const char *fmt, ...);
/* The same at INFO level. */
void ps_log_info(PyObject *logger, const char *fmt, ...);

/* Compiles fmt (config.access_log_format: gunicorn's atoms, or "json")
 * for logger's info method. Returns 0 with *out set (ps_access_log_free
 * it), or -1 with an exception (ValueError naming a bad atom). */
int ps_access_log_new(PyObject *logger, PyObject *fmt, ps_access_log_t **out);
void ps_access_log_free(ps_access_log_t *log);
/* _core.check_access_log_format(fmt): ValueError when fmt does not compile. */
PyObject *ps_access_log_check(PyObject *module, PyObject *fmt);

/* Logs x's request, the same line for WSGI and ASGI (csrc/codec/accesslog.h has
 * the atoms): the client is the peer, or the one a trusted proxy forwarded
 * (fwd_client.base set, port 0); resp_headers the application's response
 * headers (borrowed; NULL: none) for %({name}o)s; the duration runs from
 * x->log_start. Never raises; a pending exception stays pending. */
void ps_log_access(ps_access_log_t *log, ps_exchange_t *x, ps_slice_t fwd_client, int status,
                   PyObject *resp_headers);

/* Rejected requests (ps_exchange_reject): one access line each, like any
 * other request, and a reason line on the error logger at INFO, at most
 * PS_REJECT_LINES_PER_SECOND a second per worker; the dropped ones are
 * counted and summed up in one line once that second is over. */
#define PS_REJECT_LINES_PER_SECOND 10

typedef struct {
    ps_access_log_t *access_log; /* NULL: no access lines (borrowed) */
    PyObject *error_info;        /* error_logger.info, NULL when it drops INFO (owned) */
    struct ev_loop *loop;        /* the summary timer's, once it was started */
    ev_timer summary;            /* fires at the end of a second with lines dropped */
    ev_tstamp window_end;        /* the end of the current one-second window */
    uint32_t lines;              /* reason lines logged in the window */
    uint32_t suppressed;         /* reason lines dropped in it */
} ps_rejects_t;

/* access_log: the layer's, NULL when the access log is off (borrowed).
 * Reads error_logger's level once. Returns 0 or -1 with an exception. */
int ps_rejects_init(ps_rejects_t *r, ps_access_log_t *access_log, PyObject *error_logger);
/* Logs a rejection of x's request; nothing at all when both logs are off.
 * The access line is left out while the layer has the request (app_data
 * set): the layer writes that one. Never raises. */
void ps_rejects_log(ps_rejects_t *r, ps_exchange_t *x, int status, const char *reason);
/* Before the worker's loop goes away: writes a pending summary and stops
 * the timer. */
void ps_rejects_stop(ps_rejects_t *r);
void ps_rejects_clear(ps_rejects_t *r);

/* The libev selector (evselector.c), continued. ps_evselector_new above
 * builds an EvSelectorCore that borrows `loop` (the loop must already have
 * the GIL release callbacks installed). */
/* Adds pyserver._core.EvSelectorCore. Returns 0 or -1 with an exception. */
int ps_evselector_init_type(PyObject *module, ps_module_state_t *st);
/* Stops every watcher of an EvSelectorCore and forgets its loop (idempotent,
 * never raises). Call before destroying a borrowed loop, in case Python
 * still holds the selector; a no-op while it polls. */
void ps_evselector_close(PyObject *core);

/* ---- evloop.c ---- */

/* Adds pyserver._core.EvLoopHelpers (asyncio.BaseEventLoop's hot methods in
 * C, for pyserver.evselector.EvEventLoop). Returns 0 or -1 with an
 * exception. */
int ps_evloop_init_type(PyObject *module);

#endif
