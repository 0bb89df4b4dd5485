/* pyserver._core: module init, serve() (one worker) and run_master(). */
#include <errno.h>
#include <signal.h>

#include "../master.h"
#include "bridge.h"

/* This process's slot in the master's shared memory, set in a worker right
 * after fork; NULL in a single-process server. A per-process fact, which is
 * why it is not module state: serve() attaches it to its worker. */
static ps_slot_t *worker_slot;

typedef struct {
    PyThreadState *tstate;
} gil_state_t;

/* libev calls these around its poll so other Python threads run while the
 * worker waits for the network. */
static void release_gil(struct ev_loop *loop)
{
    gil_state_t *g = ev_userdata(loop);
    g->tstate = PyEval_SaveThread();
}

static void acquire_gil(struct ev_loop *loop)
{
    gil_state_t *g = ev_userdata(loop);
    PyEval_RestoreThread(g->tstate);
}

/* Reads a number attribute of config; returns -1 with an exception. */
static int get_double(PyObject *config, const char *name, double *out)
{
    PyObject *v = PyObject_GetAttrString(config, name);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int get_bool(PyObject *config, const char *name, int *out)
{
    PyObject *v = PyObject_GetAttrString(config, name);
    if (v == NULL)
        return -1;
    *out = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *out < 0 ? -1 : 0;
}

static int get_optional_double(PyObject *config, const char *name, double dflt, double *out)
{
    if (!PyObject_HasAttrString(config, name)) {
        *out = dflt;
        return 0;
    }
    return get_double(config, name, out);
}

/* Like get_optional_double; None reads as 0. */
static int get_optional_seconds(PyObject *config, const char *name, double dflt, double *out)
{
    *out = dflt;
    PyObject *v = PyObject_GetAttrString(config, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    *out = v == Py_None ? 0 : PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* The WebSocket settings (--ws, --ws-*); absent attributes keep the
 * defaults. */
static int read_ws_config(PyObject *config, ps_config_t *cfg)
{
    double size, queue;
    int deflate = 1;
    cfg->ws_enabled = 1;
    PyObject *mode = PyObject_GetAttrString(config, "ws");
    if (mode == NULL) {
        PyErr_Clear();
    } else {
        cfg->ws_enabled =
            !(PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "none") == 0);
        Py_DECREF(mode);
    }
    if (PyObject_HasAttrString(config, "ws_per_message_deflate") &&
        get_bool(config, "ws_per_message_deflate", &deflate) < 0)
        return -1;
    if (get_optional_seconds(config, "ws_max_size", 16 << 20, &size) < 0 ||
        get_optional_seconds(config, "ws_max_queue", 32, &queue) < 0 ||
        get_optional_seconds(config, "ws_ping_interval", 20.0, &cfg->ws_ping_interval) < 0 ||
        get_optional_seconds(config, "ws_ping_timeout", 20.0, &cfg->ws_ping_timeout) < 0)
        return -1;
    if (size < 0 || queue < 0 || cfg->ws_ping_interval < 0 || cfg->ws_ping_timeout < 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: WebSocket limits must not be negative");
        return -1;
    }
    cfg->ws_deflate = deflate != 0;
    cfg->ws_max_size = (uint64_t)PS_MIN(size, (double)(1ULL << 62));
    cfg->ws_max_queue = (uint32_t)PS_MIN(queue, 1 << 24);
    return 0;
}

static int read_config(PyObject *config, ps_config_t *cfg)
{
    double line, fields, field_size, head, body, conns, spool;
    int server_header, date_header;
    memset(cfg, 0, sizeof(*cfg));
    if (get_double(config, "limit_request_line", &line) < 0 ||
        get_double(config, "limit_request_fields", &fields) < 0 ||
        get_double(config, "limit_request_field_size", &field_size) < 0 ||
        get_optional_double(config, "limit_request_head", 65536, &head) < 0 ||
        get_double(config, "limit_request_body", &body) < 0 ||
        get_double(config, "timeout_keep_alive", &cfg->timeout_keep_alive) < 0 ||
        get_optional_double(config, "timeout_request_header", 60.0, &cfg->timeout_request_header) <
            0 ||
        get_optional_double(config, "timeout_request_body", 30.0, &cfg->timeout_request_body) < 0 ||
        get_optional_double(config, "body_spool_threshold", 1 << 20, &spool) < 0 ||
        get_optional_double(config, "graceful_timeout", 30.0, &cfg->graceful_timeout) < 0 ||
        get_optional_double(config, "limit_connections", 10000, &conns) < 0 ||
        get_bool(config, "server_header", &server_header) < 0 ||
        get_bool(config, "date_header", &date_header) < 0)
        return -1;
    if (line < 1 || fields < 1 || field_size < 1 || head < 1 || body < 0 || conns < 1 ||
        spool < 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: request limits must be positive");
        return -1;
    }
    cfg->limits.max_request_line = (uint32_t)PS_MIN(line, 1 << 20);
    cfg->limits.max_fields = (uint32_t)PS_MIN(fields, 1 << 16);
    cfg->limits.max_field_size = (uint32_t)PS_MIN(field_size, 1 << 20);
    cfg->limits.max_head = (uint32_t)PS_MIN(head, 1 << 30);
    cfg->limits.max_body = (uint64_t)body;
    cfg->body_spool_threshold = (uint64_t)PS_MIN(spool, (double)(1ULL << 62));
    cfg->limit_connections = (uint32_t)PS_MIN(conns, 1 << 24);
    cfg->server_header = server_header != 0;
    cfg->date_header = date_header != 0;
    return read_ws_config(config, cfg);
}

/* Parses a forwarded_allow_ips string into p. Returns 0, or -1 with a
 * ValueError naming the bad item (or MemoryError). */
static int parse_trust_list(PyObject *value, ps_proxy_t *p)
{
    Py_ssize_t n;
    const char *text = PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, &n) : NULL;
    if (text == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "forwarded_allow_ips must be str, not %.100s",
                         Py_TYPE(value)->tp_name);
        return -1;
    }
    size_t off = 0, len = 0;
    int rc = ps_proxy_init(p, text, (size_t)n, &off, &len);
    if (rc == -ENOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (rc < 0) {
        PyObject *item = PyUnicode_DecodeUTF8(text + off, (Py_ssize_t)len, "replace");
        if (item)
            PyErr_Format(PyExc_ValueError,
                         "invalid IP address or network %R (expected IP addresses or CIDR "
                         "networks separated by commas, or *)",
                         item);
        Py_XDECREF(item);
        return -1;
    }
    return 0;
}

/* Adds config.secure_scheme_headers (a mapping of header name to the value
 * meaning https) to p. Returns 0 or -1 with an exception. */
static int read_scheme_headers(PyObject *mapping, ps_proxy_t *p)
{
    PyObject *items = PyMapping_Items(mapping);
    if (items == NULL)
        return -1;
    p->secure_headers = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *pair = PyList_GET_ITEM(items, i); /* borrowed */
        Py_ssize_t nlen, vlen;
        const char *name = NULL, *value = NULL;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
            PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) &&
            PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &nlen);
            value = name ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 1), &vlen) : NULL;
        } else {
            PyErr_SetString(PyExc_TypeError, "secure_scheme_headers must map str to str");
        }
        int rc =
            value ? ps_proxy_add_scheme_header(p, name, (size_t)nlen, value, (size_t)vlen) : -1;
        if (rc == -ENOMEM)
            PyErr_NoMemory();
        else if (rc == -EINVAL)
            PyErr_SetString(PyExc_ValueError, "secure_scheme_headers: empty header name");
        if (rc < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

/* Reads config.proxy_headers, forwarded_allow_ips and secure_scheme_headers
 * (all optional: absent means off). *on is set when proxy headers are read;
 * p is then initialised and the caller frees it. Returns 0 or -1 with an
 * exception (p freed). */
static int read_proxy(PyObject *config, ps_proxy_t *p, int *on)
{
    PyObject *ips = NULL, *table = NULL;
    *on = 0;
    if (PyObject_HasAttrString(config, "proxy_headers") &&
        get_bool(config, "proxy_headers", on) < 0)
        return -1;
    if (!*on)
        return 0;
    ips = PyObject_HasAttrString(config, "forwarded_allow_ips")
              ? PyObject_GetAttrString(config, "forwarded_allow_ips")
              : PyUnicode_FromString("127.0.0.1,::1");
    if (ips == NULL || parse_trust_list(ips, p) < 0)
        goto error;
    if (PyObject_HasAttrString(config, "secure_scheme_headers")) {
        table = PyObject_GetAttrString(config, "secure_scheme_headers");
        if (table == NULL)
            goto error_free;
        if (table != Py_None && read_scheme_headers(table, p) < 0)
            goto error_free;
    }
    Py_DECREF(ips);
    Py_XDECREF(table);
    return 0;
error_free:
    ps_proxy_free(p);
error:
    *on = 0;
    Py_XDECREF(ips);
    Py_XDECREF(table);
    return -1;
}

/* check_forwarded_allow_ips(value): raises ValueError naming the first
 * invalid item of a trust list; returns None when it is valid. */
static PyObject *check_forwarded_allow_ips(PyObject *module, PyObject *value)
{
    PS_UNUSED(module);
    ps_proxy_t p;
    if (parse_trust_list(value, &p) < 0)
        return NULL;
    ps_proxy_free(&p);
    Py_RETURN_NONE;
}

/* The descriptors of a sequence of sockets (or ints) into a new array
 * (PyMem_Free it; never NULL on success). Returns the count, or -1 with an
 * exception. */
static Py_ssize_t read_fds(PyObject *items, const char *what, int **out)
{
    PyObject *seq = PySequence_Fast(items, what);
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int *fds = PyMem_Malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (fds == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        fds[i] = PyObject_AsFileDescriptor(PySequence_Fast_GET_ITEM(seq, i));
        if (fds[i] < 0) {
            PyMem_Free(fds);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = fds;
    return n;
}

/* Adds the sockets' fds as listeners (this worker's own ones when `own`).
 * Returns the number added, or -1 with an exception. */
static Py_ssize_t add_listeners(ps_worker_t *w, PyObject *sockets, int own)
{
    int *fds;
    Py_ssize_t n = read_fds(sockets, "sockets must be a sequence", &fds);
    if (n < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = own ? ps_worker_add_own_listener(w, fds[i]) : ps_worker_add_listener(w, fds[i]);
        if (rc < 0) {
            errno = -rc;
            PyErr_SetFromErrno(PyExc_OSError);
            n = -1;
            break;
        }
    }
    PyMem_Free(fds);
    return n;
}

/* config.bound_fds (optional): the listeners pyserver bound itself, shut
 * down at the server's last stop (see ps_worker_shut_at_stop). */
static int mark_bound_listeners(ps_worker_t *w, PyObject *config)
{
    if (!PyObject_HasAttrString(config, "bound_fds"))
        return 0;
    PyObject *bound = PyObject_GetAttrString(config, "bound_fds");
    if (bound == NULL)
        return -1;
    int *fds;
    Py_ssize_t n = read_fds(bound, "config.bound_fds must be a sequence", &fds);
    Py_DECREF(bound);
    if (n < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        ps_worker_shut_at_stop(w, fds[i]);
    PyMem_Free(fds);
    return 0;
}

/* Calls pyserver.workers_proc.reopen_logs(); errors are printed, not raised. */
static void call_reopen_logs(void)
{
    PyObject *mod = PyImport_ImportModule("pyserver.workers_proc");
    PyObject *res = mod ? PyObject_CallMethod(mod, "reopen_logs", NULL) : NULL;
    if (res == NULL)
        PyErr_Print();
    Py_XDECREF(res);
    Py_XDECREF(mod);
}

/* SIGUSR1 in a worker (the loop holds the GIL in its callbacks). */
static void reopen_logs(void *data)
{
    PS_UNUSED(data);
    call_reopen_logs();
}

/* Supervision by a foreign process manager (the gunicorn worker class):
 * config.on_tick(retire) is called every config.tick_interval seconds from
 * the worker's loop and stops the worker gracefully when it returns true;
 * config.on_stop_signal(signum) runs before the worker acts on SIGINT,
 * SIGTERM or SIGQUIT. Without pyserver's master, the worker gets a slot of
 * its own so that the core counts requests against config.max_requests (no
 * cost per request beyond the slot wrapper) and watches its parent. */
typedef struct {
    ev_timer timer;
    ps_worker_t *w;
    PyObject *on_tick;        /* owned; NULL when not supervised */
    PyObject *on_stop_signal; /* owned; NULL when absent */
    PyObject *logger;         /* owned */
    ps_slot_t slot;           /* this process's own slot, when there is no master */
} supervisor_t;

/* Gets the optional callable attribute `name` of config (new reference in
 * *out, NULL when absent or None). Returns 0 or -1 with an exception. */
static int get_optional_callable(PyObject *config, const char *name, PyObject **out)
{
    *out = NULL;
    if (!PyObject_HasAttrString(config, name))
        return 0;
    PyObject *v = PyObject_GetAttrString(config, name);
    if (v == NULL)
        return -1;
    if (v == Py_None) {
        Py_DECREF(v);
        return 0;
    }
    if (!PyCallable_Check(v)) {
        Py_DECREF(v);
        PyErr_Format(PyExc_TypeError, "pyserver: config.%s must be callable", name);
        return -1;
    }
    *out = v;
    return 0;
}

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    supervisor_t *sup = ps_container_of(t, supervisor_t, timer);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    /* Python-level signal handlers (gunicorn's SIGUSR1 and SIGABRT) run
     * here when no request ran Python code since the signal arrived. */
    if (PyErr_CheckSignals() < 0)
        ps_log_exception(sup->logger, "pyserver: a signal handler failed");
    PyObject *res = PyObject_CallOneArg(sup->on_tick, sup->slot.retire ? Py_True : Py_False);
    if (res == NULL) {
        ps_log_exception(sup->logger, "pyserver: config.on_tick failed");
        return;
    }
    int stop = PyObject_IsTrue(res);
    Py_DECREF(res);
    if (stop < 0)
        ps_log_exception(sup->logger, "pyserver: config.on_tick returned no truth value");
    else if (stop)
        ps_worker_stop(sup->w);
}

static void on_stop_signal(supervisor_t *sup, int signum)
{
    PyObject *res = PyObject_CallFunction(sup->on_stop_signal, "i", signum);
    if (res == NULL)
        ps_log_exception(sup->logger, "pyserver: config.on_stop_signal failed");
    Py_XDECREF(res);
}

/* Reads the supervision attributes of config. Returns 0 or -1 with an
 * exception; sup->on_tick stays NULL when config has none. */
static int supervisor_init(supervisor_t *sup, PyObject *config)
{
    double interval, max_requests;
    memset(sup, 0, sizeof(*sup));
    if (get_optional_callable(config, "on_tick", &sup->on_tick) < 0 ||
        get_optional_callable(config, "on_stop_signal", &sup->on_stop_signal) < 0)
        return -1;
    if (sup->on_tick == NULL && sup->on_stop_signal == NULL)
        return 0;
    if (get_optional_double(config, "tick_interval", 1.0, &interval) < 0 ||
        get_optional_double(config, "max_requests", 0.0, &max_requests) < 0)
        return -1;
    if (!(interval > 0) || !(max_requests >= 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "pyserver: tick_interval must be positive, max_requests not negative");
        return -1;
    }
    sup->logger = PyObject_GetAttrString(config, "error_logger");
    if (sup->logger == NULL)
        return -1;
    sup->slot.max_requests = max_requests > 1e18 ? (uint64_t)1e18 : (uint64_t)max_requests;
    ev_timer_init(&sup->timer, on_tick, interval, interval);
    return 0;
}

/* Before the loop runs: the own slot when there is no master, the tick. */
static void supervisor_start(supervisor_t *sup, ps_worker_t *w)
{
    sup->w = w;
    if (sup->on_tick == NULL)
        return;
    if (worker_slot == NULL)
        ps_worker_attach_slot(w, &sup->slot);
    ev_timer_start(w->loop, &sup->timer);
    ev_unref(w->loop); /* the tick alone does not keep the loop alive */
}

static void supervisor_free(supervisor_t *sup)
{
    if (sup->w && ev_is_active(&sup->timer)) {
        ev_ref(sup->w->loop);
        ev_timer_stop(sup->w->loop, &sup->timer);
    }
    Py_CLEAR(sup->on_tick);
    Py_CLEAR(sup->on_stop_signal);
    Py_CLEAR(sup->logger);
}

/* 1 when config.interface is "asgi", 0 when not, -1 with an exception. */
static int is_asgi(PyObject *config)
{
    PyObject *iface = PyObject_GetAttrString(config, "interface");
    if (iface == NULL)
        return -1;
    int rc = PyUnicode_Check(iface) && PyUnicode_CompareWithASCIIString(iface, "asgi") == 0;
    Py_DECREF(iface);
    return rc;
}

/* What one serve() call's worker calls back (ps_worker_hooks_t). */
typedef struct {
    supervisor_t *sup;
    ps_asgi_t *actx; /* NULL for WSGI */
} serve_hooks_data_t;

static void hook_stop_signal(void *data, int signum)
{
    serve_hooks_data_t *d = data;
    if (d->sup->on_stop_signal)
        on_stop_signal(d->sup, signum);
}

static void hook_drained(void *data)
{
    serve_hooks_data_t *d = data;
    if (d->actx)
        ps_asgi_drained(d->actx);
}

/* USR1 reopens the log files, except under gunicorn: its own handler
 * does that there. */
static const ps_worker_hooks_t serve_hooks = {
    .reopen_logs = reopen_logs,
    .stop_signal = hook_stop_signal,
    .drained = hook_drained,
};

static const ps_worker_hooks_t supervised_hooks = {
    .stop_signal = hook_stop_signal,
    .drained = hook_drained,
};

/* serve(app, sockets, config, own_sockets=()): runs one worker on the
 * current thread until a stop signal; returns None. own_sockets are this
 * worker's SO_REUSEPORT listeners (see ps_worker_add_own_listener). The
 * optional config.on_tick, tick_interval, on_stop_signal and max_requests
 * put the worker under a foreign process manager (see supervisor_t). */
static PyObject *serve(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "serve(app, sockets, config, own_sockets=())");
        return NULL;
    }
    ps_module_state_t *st = PyModule_GetState(module);
    ps_config_t cfg;
    if (read_config(args[2], &cfg) < 0)
        return NULL;
    int asgi = is_asgi(args[2]);
    if (asgi < 0)
        return NULL;
    ps_proxy_t proxy;
    int proxy_on;
    if (read_proxy(args[2], &proxy, &proxy_on) < 0)
        return NULL;
    ps_wsgi_t *ctx = NULL;
    ps_asgi_t *actx = NULL;
    ps_worker_t *w = NULL;
    PyObject *result = NULL;
    serve_hooks_data_t hooks_data = {NULL, NULL};
    /* Heap-allocated like the worker: its timer must not move while the loop runs. */
    supervisor_t *sup = PyMem_RawMalloc(sizeof(*sup));
    if (sup == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (supervisor_init(sup, args[2]) < 0)
        goto done;
    if (asgi)
        actx = ps_asgi_new(st, module, args[0], args[2]);
    else
        ctx = ps_wsgi_new(st, args[0], args[2]);
    if (ctx == NULL && actx == NULL)
        goto done;
    w = PyMem_RawMalloc(sizeof(*w));
    if (w == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    cfg.proxy = proxy_on ? &proxy : NULL;
    hooks_data.sup = sup;
    hooks_data.actx = actx;
    const ps_worker_hooks_t *hooks = sup->on_tick == NULL ? &serve_hooks : &supervised_hooks;
    int rc = asgi ? ps_worker_init(w, &cfg, &ps_asgi_handler, actx, hooks, &hooks_data)
                  : ps_worker_init(w, &cfg, &ps_wsgi_handler, ctx, hooks, &hooks_data);
    if (rc < 0) {
        PyMem_RawFree(w);
        w = NULL;
        errno = -rc;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    Py_ssize_t nshared = add_listeners(w, args[1], 0);
    Py_ssize_t nown = nshared < 0 || nargs < 4 ? 0 : add_listeners(w, args[3], 1);
    if (nshared < 0 || nown < 0)
        goto done;
    if (nshared + nown == 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: no listening socket");
        goto done;
    }
    if (mark_bound_listeners(w, args[2]) < 0)
        goto done;
    if (worker_slot != NULL)
        ps_worker_attach_slot(w, worker_slot);
    supervisor_start(sup, w);

    gil_state_t gil = {NULL};
    ev_set_userdata(w->loop, &gil);
    ev_set_loop_release_cb(w->loop, release_gil, acquire_gil);
    struct sigaction saved[4];
    const int sigs[4] = {SIGINT, SIGTERM, SIGQUIT, SIGUSR1};
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], NULL, &saved[i]);
    if (asgi) {
        ps_asgi_attach(actx, w);
        result = ps_asgi_run(actx, args[2]);
    } else {
        ps_worker_run(w);
        result = Py_NewRef(Py_None);
    }
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], &saved[i], NULL);
done:
    if (sup != NULL) {
        supervisor_free(sup); /* first: it stops its timer on the worker's loop */
        PyMem_RawFree(sup);
    }
    if (w != NULL) {
        ps_wsgi_detach(ctx);
        ps_asgi_detach(actx);
        ps_worker_free(w);
        PyMem_RawFree(w);
    }
    if (proxy_on)
        ps_proxy_free(&proxy);
    ps_wsgi_free(ctx);
    ps_asgi_free(actx);
    return result;
}

/* The master's side of the bridge: everything one run_master() call needs. */
typedef struct {
    gil_state_t gil;        /* first: the loop's userdata for release_gil/acquire_gil */
    PyObject *spawn_worker; /* borrowed from run_master's arguments */
    PyObject *logger;       /* owned */
    PyObject *poll_reload;  /* borrowed; None without --reload */
} master_ctx_t;

static void m_before_fork(void *data)
{
    PS_UNUSED(data);
    PyOS_BeforeFork();
}

static void m_after_fork_parent(void *data)
{
    PS_UNUSED(data);
    PyOS_AfterFork_Parent();
}

/* In the new worker process: spawn_worker(number, own_fds) imports the app
 * and serves; it ends the process itself. Anything else exits with status 1. */
static void m_run_worker(void *data, int index, ps_slot_t *slot, const int *own_fds, uint32_t nown)
{
    master_ctx_t *ctx = data;
    PyOS_AfterFork_Child();
    worker_slot = slot;
    PyObject *res = NULL;
    PyObject *fds = PyTuple_New(nown);
    for (uint32_t i = 0; fds != NULL && i < nown; i++) {
        PyObject *fd = PyLong_FromLong(own_fds[i]);
        if (fd == NULL)
            Py_CLEAR(fds);
        else
            PyTuple_SET_ITEM(fds, i, fd);
    }
    if (fds != NULL)
        res = PyObject_CallFunction(ctx->spawn_worker, "iO", index + 1, fds);
    Py_XDECREF(fds);
    if (res == NULL)
        PyErr_Print();
    Py_XDECREF(res);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

static void m_log(void *data, ps_log_level_t level, const char *msg)
{
    master_ctx_t *ctx = data;
    static const char *const methods[] = {"debug", "info", "warning", "error"};
    PyObject *res = PyObject_CallMethod(ctx->logger, methods[level], "s", msg);
    if (res == NULL) {
        PyErr_Clear();
        fprintf(stderr, "pyserver: %s\n", msg);
    }
    Py_XDECREF(res);
}

static void m_reopen_logs(void *data)
{
    PS_UNUSED(data);
    call_reopen_logs();
}

/* Calls poll_reload(); a raising poller is logged and counts as "no change". */
static int m_poll_reload(void *data)
{
    master_ctx_t *ctx = data;
    PyObject *res = PyObject_CallNoArgs(ctx->poll_reload);
    if (res == NULL) {
        ps_log_exception(ctx->logger, "pyserver: the reloader failed");
        return 0;
    }
    int changed = PyObject_IsTrue(res);
    Py_DECREF(res);
    if (changed < 0) {
        PyErr_Clear();
        return 0;
    }
    return changed;
}

static void m_prepare_loop(void *data, struct ev_loop *loop)
{
    master_ctx_t *ctx = data;
    ev_set_userdata(loop, &ctx->gil);
    ev_set_loop_release_cb(loop, release_gil, acquire_gil);
}

static const ps_master_ops_t master_ops = {
    .before_fork = m_before_fork,
    .after_fork_parent = m_after_fork_parent,
    .run_worker = m_run_worker,
    .log = m_log,
    .reopen_logs = m_reopen_logs,
    .poll_reload = m_poll_reload,
    .prepare_loop = m_prepare_loop,
};

static int get_count(PyObject *config, const char *name, uint64_t max, uint64_t *out)
{
    double v;
    if (get_optional_double(config, name, 0.0, &v) < 0)
        return -1;
    if (!(v >= 0)) {
        PyErr_Format(PyExc_ValueError, "pyserver: %s must not be negative", name);
        return -1;
    }
    *out = v > (double)max ? max : (uint64_t)v;
    return 0;
}

/* The fds of config.sockets into a new array (PyMem_Free it); the master
 * opens --reuse-port lanes next to its TCP ones. */
static int read_listen_fds(PyObject *config, ps_master_config_t *mc)
{
    PyObject *sockets = PyObject_GetAttrString(config, "sockets");
    if (sockets == NULL)
        return -1;
    int *fds;
    Py_ssize_t n = read_fds(sockets, "config.sockets must be a sequence", &fds);
    Py_DECREF(sockets);
    if (n < 0)
        return -1;
    mc->listen_fds = fds;
    mc->nlisten = (uint32_t)n;
    return 0;
}

static int read_master_config(PyObject *config, ps_master_config_t *mc)
{
    uint64_t workers, max_rss_mib, backlog;
    int reuse_port;
    memset(mc, 0, sizeof(*mc));
    if (get_count(config, "workers", PS_MASTER_MAX_SLOTS / 2, &workers) < 0 ||
        get_optional_double(config, "timeout", 30.0, &mc->timeout) < 0 ||
        get_optional_double(config, "graceful_timeout", 30.0, &mc->graceful_timeout) < 0 ||
        get_count(config, "max_requests", UINT64_MAX / 2, &mc->max_requests) < 0 ||
        get_count(config, "max_requests_jitter", UINT64_MAX / 2, &mc->max_requests_jitter) < 0 ||
        get_count(config, "max_rss", UINT64_MAX / 4096, &max_rss_mib) < 0 ||
        get_count(config, "backlog", INT32_MAX, &backlog) < 0 ||
        get_bool(config, "reuse_port", &reuse_port) < 0)
        return -1;
    mc->workers = (uint32_t)PS_MAX(workers, 1);
    mc->max_rss_kib = max_rss_mib * 1024;
    mc->backlog = backlog ? (int)backlog : 2048;
    mc->reuse_port = reuse_port;
    return mc->reuse_port ? read_listen_fds(config, mc) : 0;
}

/* run_master(config, spawn_worker, poll_reload=None): forks config.workers
 * workers, each calling spawn_worker(number) in the child, and supervises
 * them until a stop signal. poll_reload(), called once a second when given,
 * returns true to restart the workers. Returns the exit status (0, or 3 when
 * a worker cannot boot and there is no reloader). */
static PyObject *run_master(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PS_UNUSED(module);
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run_master(config, spawn_worker, poll_reload=None)");
        return NULL;
    }
    ps_master_config_t mc;
    if (read_master_config(args[0], &mc) < 0)
        return NULL;
    PyObject *poll = nargs == 3 ? args[2] : Py_None;
    mc.reload = poll != Py_None;
    master_ctx_t ctx = {{NULL}, args[1], NULL, poll};
    ctx.logger = PyObject_GetAttrString(args[0], "error_logger");
    if (ctx.logger == NULL) {
        PyMem_Free((void *)mc.listen_fds);
        return NULL;
    }
    int rc = ps_master_run(&mc, &master_ops, &ctx);
    Py_DECREF(ctx.logger);
    PyMem_Free((void *)mc.listen_fds);
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(rc);
}

static PyMethodDef module_methods[] = {
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
     "serve(app, sockets, config, own_sockets=())\n--\n\nServe app on the listening sockets "
     "until stopped."},
    {"check_forwarded_allow_ips", check_forwarded_allow_ips, METH_O,
     "check_forwarded_allow_ips(value)\n--\n\nRaise ValueError if the trust list is "
     "invalid."},
    {"run_master", (PyCFunction)(void (*)(void))run_master, METH_FASTCALL,
     "run_master(config, spawn_worker, poll_reload=None)\n--\n\nFork and supervise the "
     "workers until stopped; "
     "return the exit status."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module)
{
    ps_module_state_t *st = PyModule_GetState(module);
    if (ps_wsgi_init_types(module, st) < 0)
        return -1;
    if (ps_asgi_init_types(module, st) < 0)
        return -1;
    if (ps_evselector_init_type(module, st) < 0)
        return -1;
    if (PyModule_AddStringConstant(
            module, "LLHTTP_VERSION",
            Py_STRINGIFY(LLHTTP_VERSION_MAJOR) "." Py_STRINGIFY(
                LLHTTP_VERSION_MINOR) "." Py_STRINGIFY(LLHTTP_VERSION_PATCH)) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "LIBEV_VERSION_MAJOR", ev_version_major());
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ps_module_state_t *st = PyModule_GetState(module);
    Py_VISIT(st->request_type);
    Py_VISIT(st->input_type);
    Py_VISIT(st->errors_type);
    Py_VISIT(st->file_wrapper_type);
    Py_VISIT(st->cycle_type);
    Py_VISIT(st->ready_type);
    Py_VISIT(st->server_type);
    Py_VISIT(st->appcall_type);
    Py_VISIT(st->evselector_type);
    return 0;
}

static int module_clear(PyObject *module)
{
    ps_module_state_t *st = PyModule_GetState(module);
    Py_CLEAR(st->request_type);
    Py_CLEAR(st->input_type);
    Py_CLEAR(st->errors_type);
    Py_CLEAR(st->file_wrapper_type);
    Py_CLEAR(st->cycle_type);
    Py_CLEAR(st->ready_type);
    Py_CLEAR(st->server_type);
    Py_CLEAR(st->appcall_type);
    Py_CLEAR(st->evselector_type);
    return 0;
}

static void module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyserver._core",
    .m_doc = "The C core of pyserver: event loop, HTTP/1 and the WSGI bridge.",
    .m_size = sizeof(ps_module_state_t),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&module_def);
}
