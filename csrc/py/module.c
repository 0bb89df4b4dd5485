/* pyserver._core: module init, serve() (one worker) and run_master(). */
#include <errno.h>
#include <signal.h>

#include "master/master.h"
#include "bridge.h"

/* This process's slot in the master's shared memory, set in a worker right
 * after fork; NULL in a single-process server. A per-process fact, which is
 * why it is not module state: serve() attaches it to its worker. */
static ps_slot_t *worker_slot;

typedef struct {
    PyThreadState *tstate;
    /* --threads: the loop takes the GIL back only when a callback runs
     * Python (ps_py_loop_gil), so that its network work goes on while an
     * application thread runs. */
    unsigned lazy : 1;
    unsigned released : 1; /* the loop let go of the GIL and has not taken it back */
} gil_state_t;

/* The worker loop's, while serve() runs one with --threads; else NULL. */
static gil_state_t *lazy_gil;

/* libev calls these around its poll so other Python threads run while the
 * worker waits for the network. */
static void release_gil(struct ev_loop *loop)
{
    gil_state_t *g = ev_userdata(loop);
    if (!g->released) {
        g->released = 1;
        g->tstate = PyEval_SaveThread();
    }
}

static void acquire_gil(struct ev_loop *loop)
{
    gil_state_t *g = ev_userdata(loop);
    if (!g->lazy) {
        PyEval_RestoreThread(g->tstate);
        g->released = 0;
    }
}

void ps_py_loop_gil(void)
{
    gil_state_t *g = lazy_gil;
    if (g != NULL && g->released) {
        PyEval_RestoreThread(g->tstate);
        g->released = 0;
    }
}

/* check_forwarded_allow_ips(value): raises ValueError naming the first
 * invalid item of a trust list; returns None when it is valid. */
static PyObject *check_forwarded_allow_ips(PyObject *module, PyObject *value)
{
    PS_UNUSED(module);
    ps_proxy_t p;
    if (ps_py_parse_trust_list(value, &p) < 0)
        return NULL;
    ps_proxy_free(&p);
    Py_RETURN_NONE;
}

/* Adds the sockets' fds as listeners (this worker's own ones when `own`).
 * Returns the number added, or -1 with an exception. */
static Py_ssize_t add_listeners(ps_worker_t *w, PyObject *sockets, int own)
{
    int *fds;
    Py_ssize_t n = ps_py_read_fds(sockets, "sockets must be a sequence", &fds);
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
    ps_py_loop_gil();
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

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    supervisor_t *sup = ps_container_of(t, supervisor_t, timer);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_py_loop_gil();
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

/* Takes the supervision settings; sup->on_tick stays NULL when there are none. */
static void supervisor_init(supervisor_t *sup, const ps_py_settings_t *s)
{
    memset(sup, 0, sizeof(*sup));
    if (s->on_tick == NULL && s->on_stop_signal == NULL)
        return;
    sup->on_tick = Py_XNewRef(s->on_tick);
    sup->on_stop_signal = Py_XNewRef(s->on_stop_signal);
    sup->logger = Py_NewRef(s->error_logger);
    sup->slot.max_requests = s->sup_max_requests;
    /* A foreign manager's SIGTERM does not say whether another worker takes
     * over: each one drains (--drain-delay). */
    sup->slot.drain = 1;
    ev_timer_init(&sup->timer, on_tick, s->tick_interval, s->tick_interval);
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

/* What one serve() call's worker calls back (ps_worker_hooks_t). */
typedef struct {
    supervisor_t *sup;
    ps_asgi_t *actx;  /* NULL for WSGI */
    PyObject *on_hup; /* config.on_hup (borrowed from the settings), or NULL */
    PyObject *logger; /* the error logger (borrowed from the settings) */
} serve_hooks_data_t;

static void hook_stop_signal(void *data, int signum)
{
    serve_hooks_data_t *d = data;
    ps_py_loop_gil();
    if (d->sup->on_stop_signal)
        on_stop_signal(d->sup, signum);
}

/* The stop signal's line: what is being drained, and for how long, so that
 * the wait before "Finished" is explained. */
static void hook_stopping(void *data, int signum, uint32_t conns, int quick,
                          double graceful_timeout)
{
    serve_hooks_data_t *d = data;
    const char *name = signum == SIGINT ? "int" : signum == SIGTERM ? "term" : "quit";
    char limit[48] = "no time limit";
    if (graceful_timeout > 0)
        snprintf(limit, sizeof(limit), "up to %g s", graceful_timeout);
    ps_py_loop_gil();
    if (quick && conns > 0)
        ps_log_info(d->logger, "Handling signal: %s: closing %u connection%s now", name, conns,
                    conns == 1 ? "" : "s");
    else if (conns == 0)
        ps_log_info(d->logger, "Handling signal: %s: no connection open, stopping", name);
    else if (d->actx)
        ps_log_info(d->logger,
                    "Handling signal: %s: draining %u request%s in progress on %u connection%s "
                    "(%s)",
                    name, ps_asgi_active(d->actx), ps_asgi_active(d->actx) == 1 ? "" : "s", conns,
                    conns == 1 ? "" : "s", limit);
    else
        ps_log_info(d->logger, "Handling signal: %s: draining %u connection%s (%s)", name, conns,
                    conns == 1 ? "" : "s", limit);
}

/* --drain-delay: the drain's line, so that the wait before the stop is explained. */
static void hook_draining(void *data, int signum, double delay)
{
    serve_hooks_data_t *d = data;
    PS_UNUSED(signum);
    ps_py_loop_gil();
    ps_log_info(d->logger,
                "Handling signal: term: draining for %g s (the health check answers 503; "
                "another TERM or an INT ends the drain), then stopping gracefully",
                delay);
}

static void hook_drained(void *data)
{
    serve_hooks_data_t *d = data;
    ps_py_loop_gil();
    if (d->actx)
        ps_asgi_drained(d->actx);
}

/* USR1 reopens the log files, except under gunicorn: its own handler
 * does that there. */
static const ps_worker_hooks_t serve_hooks = {
    .reopen_logs = reopen_logs,
    .stop_signal = hook_stop_signal,
    .stopping = hook_stopping,
    .draining = hook_draining,
    .drained = hook_drained,
};

/* SIGHUP in a single process: config.on_hup() records that the server is
 * to be started again once serve() returns, or returns False to refuse
 * (the TLS files do not load): then the server serves on (-1). */
static int hook_reload(void *data)
{
    serve_hooks_data_t *d = data;
    ps_py_loop_gil();
    PyObject *res = PyObject_CallNoArgs(d->on_hup);
    if (res == NULL)
        ps_log_exception(d->logger, "pyserver: config.on_hup failed");
    int refused = res == Py_False;
    Py_XDECREF(res);
    return refused ? -1 : 0;
}

/* A single process that reloads on SIGHUP (no master, no foreign manager). */
static const ps_worker_hooks_t single_hooks = {
    .reopen_logs = reopen_logs,
    .stop_signal = hook_stop_signal,
    .stopping = hook_stopping,
    .draining = hook_draining,
    .drained = hook_drained,
    .reload = hook_reload,
};

static const ps_worker_hooks_t supervised_hooks = {
    .stop_signal = hook_stop_signal,
    .draining = hook_draining,
    .drained = hook_drained,
};

/* --metrics-bind in a single process: the process's own counters, shown
 * by an endpoint on its worker's loop. */
typedef struct {
    ps_metrics_t counters;
    ps_metrics_server_t *server;
} single_metrics_t;

static int render_single(void *data, ps_buf_t *out)
{
    single_metrics_t *sm = data;
    const ps_metrics_t *live[1] = {&sm->counters};
    ps_metrics_worker_t me = {1, (int)getpid(), ps_metrics_rss((int)getpid())};
    ps_metrics_view_t v = {live, 1, NULL, NULL, &me, 1};
    return ps_metrics_render(&v, out);
}

/* Starts the endpoint on w's loop. Returns the state to free after the
 * worker ran, or NULL with an exception. */
static single_metrics_t *single_metrics_start(ps_worker_t *w, int fd)
{
    single_metrics_t *sm = PyMem_RawCalloc(1, sizeof(*sm));
    if (sm != NULL)
        sm->server = ps_metrics_server_new(w->loop, fd, render_single, sm);
    if (sm == NULL || sm->server == NULL) {
        PyMem_RawFree(sm);
        PyErr_NoMemory();
        return NULL;
    }
    ps_worker_set_metrics(w, &sm->counters);
    return sm;
}

static void single_metrics_free(single_metrics_t *sm)
{
    if (sm == NULL)
        return;
    ps_metrics_server_free(sm->server);
    PyMem_RawFree(sm);
}

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
    ps_py_settings_t set;
    if (ps_py_settings_load(args[2], &set) < 0)
        return NULL;
    int asgi = set.asgi;
    /* --asgi-app: the WSGI application with an ASGI one beside it, which
     * runs the loop (asyncio) as an ASGI application alone would. */
    int hybrid = !asgi && set.asgi_app != NULL;
    ps_wsgi_t *ctx = NULL;
    ps_asgi_t *actx = NULL;
    ps_hybrid_t *hy = NULL;
    ps_worker_t *w = NULL;
    PyObject *result = NULL;
    serve_hooks_data_t hooks_data = {NULL, NULL, NULL, NULL};
    single_metrics_t *metrics = NULL;
    /* Heap-allocated like the worker: its timer must not move while the loop runs. */
    supervisor_t *sup = PyMem_RawMalloc(sizeof(*sup));
    if (sup == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    supervisor_init(sup, &set);
    if (asgi || hybrid)
        actx = ps_asgi_new(st, module, asgi ? args[0] : set.asgi_app, &set);
    if (!asgi && (!hybrid || actx != NULL))
        ctx = ps_wsgi_new(st, args[0], &set);
    if (hybrid && ctx != NULL)
        hy = ps_hybrid_new(ctx, actx, &set);
    if ((ctx == NULL && actx == NULL) || (hybrid && hy == NULL))
        goto done;
    w = PyMem_RawMalloc(sizeof(*w));
    if (w == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    hooks_data.sup = sup;
    hooks_data.actx = actx;
    hooks_data.on_hup = set.on_hup;
    hooks_data.logger = set.error_logger;
    const ps_worker_hooks_t *hooks = sup->on_tick != NULL                        ? &supervised_hooks
                                     : worker_slot == NULL && set.on_hup != NULL ? &single_hooks
                                                                                 : &serve_hooks;
    int rc = asgi     ? ps_worker_init(w, &set.core, &ps_asgi_handler, actx, hooks, &hooks_data)
             : hybrid ? ps_worker_init(w, &set.core, &ps_hybrid_handler, hy, hooks, &hooks_data)
                      : ps_worker_init(w, &set.core, &ps_wsgi_handler, ctx, hooks, &hooks_data);
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
    for (uint32_t i = 0; i < set.nbound; i++)
        ps_worker_shut_at_stop(w, set.bound_fds[i]);
    for (uint32_t i = 0; i < set.nproxyproto; i++)
        ps_worker_proxy_protocol(w, set.proxyproto_fds[i]);
    for (uint32_t i = 0; i < set.nuwsgi; i++)
        ps_worker_uwsgi(w, set.uwsgi_fds[i]);
    for (uint32_t i = 0; i < set.nredirect; i++)
        ps_worker_redirect_https(w, set.redirect_fds[i]);
    if (worker_slot != NULL)
        ps_worker_attach_slot(w, worker_slot);
    else if (set.master.metrics_fd >= 0 &&
             (metrics = single_metrics_start(w, set.master.metrics_fd)) == NULL)
        goto done;
    ps_py_tls_ring_attach(w->loop, set.tls); /* under a master: its shared ticket keys */
    supervisor_start(sup, w);
    if (!asgi && ps_wsgi_attach(ctx, w) < 0)
        goto done;

    /* The lazy GIL policy is for a loop that runs no Python of its own:
     * with asyncio on it (ASGI, hybrid) the GIL comes back after each poll. */
    gil_state_t gil = {NULL, !asgi && !hybrid && ps_wsgi_threaded(ctx), 0};
    ev_set_userdata(w->loop, &gil);
    ev_set_loop_release_cb(w->loop, release_gil, acquire_gil);
    if (gil.lazy)
        lazy_gil = &gil;
    struct sigaction saved[5];
    const int sigs[5] = {SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGHUP};
    for (int i = 0; i < 5; i++)
        sigaction(sigs[i], NULL, &saved[i]);
    if (asgi || hybrid) {
        ps_asgi_attach(actx, w);
        result = ps_asgi_run(actx, args[2]);
    } else {
        ps_worker_run(w);
        ps_py_loop_gil();
        lazy_gil = NULL;
        result = Py_NewRef(Py_None);
    }
    for (int i = 0; i < 5; i++)
        sigaction(sigs[i], &saved[i], NULL);
done:
    if (sup != NULL) {
        supervisor_free(sup); /* first: it stops its timer on the worker's loop */
        PyMem_RawFree(sup);
    }
    single_metrics_free(metrics); /* before the worker's loop goes */
    if (w != NULL) {
        ps_py_tls_ring_detach();
        ps_wsgi_detach(ctx);
        ps_asgi_detach(actx);
        ps_worker_free(w);
        PyMem_RawFree(w);
    }
    ps_hybrid_free(hy);
    ps_wsgi_free(ctx);
    ps_asgi_free(actx);
    ps_py_settings_free(&set); /* last: the worker read its proxy settings */
    return result;
}

/* The master's side of the bridge: everything one run_master() call needs. */
typedef struct {
    gil_state_t gil;        /* first: the loop's userdata for release_gil/acquire_gil */
    PyObject *spawn_worker; /* borrowed from run_master's arguments */
    PyObject *logger;       /* borrowed from the settings */
    PyObject *poll_reload;  /* borrowed; None without --reload */
    PyObject *config;       /* borrowed: run_master's */
    PyObject *pre_fork;     /* borrowed; None without a pre_fork hook */
} master_ctx_t;

/* pre_fork(number) before each fork (gunicorn's pre_fork hook); a raising
 * one is logged and the worker forked all the same. */
static void m_pre_fork(void *data, int number)
{
    master_ctx_t *ctx = data;
    if (ctx->pre_fork == Py_None)
        return;
    PyObject *res = PyObject_CallFunction(ctx->pre_fork, "i", number);
    if (res == NULL)
        ps_log_exception(ctx->logger, "pyserver: pre_fork failed");
    Py_XDECREF(res);
}

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
static void m_run_worker(void *data, int number, ps_slot_t *slot, const int *own_fds, uint32_t nown)
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
        res = PyObject_CallFunction(ctx->spawn_worker, "iO", number, fds);
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

/* HUP: the new workers load the TLS files again; when they do not load
 * (a renewal gone wrong), the old workers keep serving. */
static int m_check_restart(void *data)
{
    master_ctx_t *ctx = data;
    if (ps_py_check_tls(ctx->config) == 0)
        return 0;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *why = text ? PyUnicode_AsUTF8(text) : NULL;
    PyErr_Clear();
    ps_log_error(ctx->logger,
                 "Not restarting the workers: %s; they keep serving with the files they loaded",
                 why ? why : "the TLS files do not load");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
}

static void m_on_tick(void *data)
{
    PS_UNUSED(data);
    ps_py_tls_ring_rotate();
}

static const ps_master_ops_t master_ops = {
    .pre_fork = m_pre_fork,
    .before_fork = m_before_fork,
    .after_fork_parent = m_after_fork_parent,
    .run_worker = m_run_worker,
    .log = m_log,
    .reopen_logs = m_reopen_logs,
    .poll_reload = m_poll_reload,
    .prepare_loop = m_prepare_loop,
    .check_restart = m_check_restart,
    .on_tick = m_on_tick,
};

/* run_master(config, spawn_worker, poll_reload=None, pre_fork=None): forks
 * config.workers workers, each calling spawn_worker(number) in the child,
 * and supervises them until a stop signal. poll_reload(), called once a
 * second when given, returns true to restart the workers; pre_fork(number)
 * runs in the master before each fork. Returns the exit status (0, or 3
 * when a worker cannot boot and there is no reloader). */
static PyObject *run_master(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PS_UNUSED(module);
    if (nargs < 2 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError,
                        "run_master(config, spawn_worker, poll_reload=None, pre_fork=None)");
        return NULL;
    }
    ps_py_settings_t set;
    if (ps_py_settings_load(args[0], &set) < 0)
        return NULL;
    PyObject *poll = nargs >= 3 ? args[2] : Py_None;
    PyObject *pre_fork = nargs == 4 ? args[3] : Py_None;
    set.master.reload = poll != Py_None;
    master_ctx_t ctx = {{NULL}, args[1], set.error_logger, poll, args[0], pre_fork};
    if (set.tls != NULL && ps_py_tls_ring_create(set.tls_ticket_rotation) < 0) {
        ps_py_settings_free(&set);
        return NULL;
    }
    int rc = ps_master_run(&set.master, &master_ops, &ctx);
    ps_py_settings_free(&set);
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(rc);
}

/* check_tls(config): raises ValueError when config's TLS certificate,
 * key, password, CA file or cipher list does not load. */
static PyObject *check_tls(PyObject *module, PyObject *config)
{
    PS_UNUSED(module);
    return ps_py_check_tls(config) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyMethodDef module_methods[] = {
    {"check_tls", check_tls, METH_O,
     "check_tls(config)\n--\n\nRaise ValueError if the TLS settings do not load."},
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
     "serve(app, sockets, config, own_sockets=())\n--\n\nServe app on the listening sockets "
     "until stopped."},
    {"check_forwarded_allow_ips", check_forwarded_allow_ips, METH_O,
     "check_forwarded_allow_ips(value)\n--\n\nRaise ValueError if the trust list is "
     "invalid."},
    {"check_access_log_format", ps_access_log_check, METH_O,
     "check_access_log_format(fmt)\n--\n\nRaise ValueError if fmt (gunicorn's atoms, or "
     "\"json\") does not compile."},
    {"run_master", (PyCFunction)(void (*)(void))run_master, METH_FASTCALL,
     "run_master(config, spawn_worker, poll_reload=None, pre_fork=None)\n--\n\nFork and "
     "supervise the "
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
    if (ps_evloop_init_type(module) < 0)
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
