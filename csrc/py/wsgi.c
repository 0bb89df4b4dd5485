/* The WSGI layer (PEP 3333): one per serve() call, and the handler the
 * core calls for each request. The application runs on the worker's loop
 * thread (wsgi_response.c), or with --threads N > 1 on application threads
 * while the loop keeps the socket I/O (wsgi_threads.c); wsgi_environ.c
 * builds the environ, wsgi_types.c has the Python types.
 */
#include <errno.h>

#include "wsgi.h"

static void on_request(ps_exchange_t *x)
{
    ps_wsgi_t *ctx = x->handler_data;
    if (ctx->access_log)
        x->log_start = ps_alog_clock();
    ps_proxy_result_t fwd;
    if (ps_py_forwarded(x, &fwd) < 0)
        return;
    /* What the limit bounds is the open connections, this one included
     * (uvicorn counts connections or tasks): with --threads, every request
     * in a thread or waiting for one holds its connection, so it counts;
     * an HTTP/2 connection counts once per stream in progress. */
    if (ctx->limit_concurrency && ps_worker_load(x->worker) > ctx->limit_concurrency) {
        ps_exchange_reject(x, 503, "concurrency limit reached");
        return;
    }
    if (ctx->pool) {
        if (ps_wsgi_threads_dispatch(ctx, x, &fwd) < 0) {
            ps_py_loop_gil();
            PyErr_NoMemory();
            ps_log_exception(ctx->error_logger, "Cannot start a request");
            ps_exchange_send_error(x, 500);
        }
        return;
    }
    RequestObject *req = ps_wsgi_request_new(ctx, x);
    if (req == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a request");
        ps_exchange_send_error(x, 500);
        return;
    }
    x->app_data = req; /* owns the reference until ps_wsgi_request_done() */
    PyObject *environ = ps_wsgi_environ(ctx, x, req, &fwd);
    if (environ == NULL) {
        ps_wsgi_fail(req);
        return;
    }
    PyObject *args[2] = {environ, (PyObject *)req};
    PyObject *result = PyObject_Vectorcall(ctx->app, args, 2, NULL);
    Py_DECREF(environ);
    if (result == NULL) {
        ps_wsgi_fail(req);
        return;
    }
    req->result = result;
    ps_wsgi_start_body(req);
}

static void on_writable(ps_exchange_t *x)
{
    if (x->app_data == NULL)
        return;
    if (((ps_wsgi_t *)x->handler_data)->nthreads > 1) { /* a job, even once the pool is gone */
        ps_wsgi_threads_writable(x);
        return;
    }
    RequestObject *req = x->app_data;
    if (req->sendfile_fd >= 0) {
        req->sendfile_fd = -1;
        ps_wsgi_finish(req);
        return;
    }
    ps_wsgi_pump(req);
}

static void request_gone(ps_exchange_t *x)
{
    if (((ps_wsgi_t *)x->handler_data)->nthreads > 1) /* a job, even once the pool is gone */
        ps_wsgi_threads_detach(x, x->status);
    else
        ps_wsgi_request_done(x->app_data);
}

static void on_disconnect(ps_exchange_t *x)
{
    if (x->app_data)
        request_gone(x);
}

static void dispose(ps_exchange_t *x)
{
    if (x->app_data)
        request_gone(x);
    if (x->conn_data)
        ps_py_loop_gil(); /* with threads the loop may not hold it */
    ps_py_addresses_free(x);
}

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    ps_wsgi_t *ctx = x->handler_data;
    ps_py_loop_gil();
    ps_rejects_log(&ctx->rejects, x, status, reason);
}

/* A --static file the core answered: its access line (the client is the
 * peer: forwarded headers are not read for it). */
static void on_served(ps_exchange_t *x, int status)
{
    ps_wsgi_t *ctx = x->handler_data;
    if (ctx->access_log) {
        ps_slice_t client = ps_py_served_client(x);
        ps_py_loop_gil(); /* with threads the loop may not hold it */
        ps_log_access(ctx->access_log, x, client, status, NULL);
    }
}

static void on_refused(ps_exchange_t *x, const char *reason)
{
    ps_wsgi_t *ctx = x->handler_data;
    ps_py_loop_gil();
    ps_py_log_refused(ctx->error_logger, &ctx->refusals, x, reason);
}

const ps_handler_t ps_wsgi_handler = {
    .on_request = on_request,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .on_rejected = on_rejected,
    .on_refused = on_refused,
    .on_served = on_served,
};

/* ---- setup ---- */

ps_wsgi_t *ps_wsgi_new(ps_module_state_t *st, PyObject *app, const ps_py_settings_t *s)
{
    ps_wsgi_t *ctx = PyMem_Calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return (ps_wsgi_t *)PyErr_NoMemory();
    ctx->st = st;
    ctx->app = Py_NewRef(app);
    if (ps_py_cache_init(&ctx->cache, PS_PY_WSGI) < 0)
        goto error;
    ctx->close_name = PyUnicode_InternFromString("close");
    ctx->error_logger = Py_NewRef(s->error_logger);
    if (!ctx->close_name || !ctx->error_logger)
        goto error;
    ctx->access_log = s->access_log;
    if (ps_rejects_init(&ctx->rejects, ctx->access_log, ctx->error_logger) < 0)
        goto error;
    ctx->limit_concurrency = s->limit_concurrency;
    ctx->nthreads = s->threads;
    ctx->write_wait = 2 * s->core.timeout_request_header;
    ctx->timeout = s->master.timeout;
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->moved, NULL);
    if (ps_wsgi_environ_init(ctx, s) < 0)
        goto error;
    return ctx;
error:
    ps_wsgi_free(ctx);
    return NULL;
}

int ps_wsgi_attach(ps_wsgi_t *ctx, ps_worker_t *w)
{
    if (ctx->nthreads <= 1)
        return 0;
    return ps_wsgi_threads_start(ctx, w);
}

int ps_wsgi_threaded(const ps_wsgi_t *ctx)
{
    return ctx != NULL && ctx->pool != NULL;
}

void ps_wsgi_detach(ps_wsgi_t *ctx)
{
    if (ctx == NULL)
        return;
    ps_rejects_stop(&ctx->rejects);
    if (ctx->pool != NULL)
        ps_wsgi_threads_stop(ctx);
}

void ps_wsgi_free(ps_wsgi_t *ctx)
{
    if (ctx == NULL || ctx->abandoned)
        return;
    ps_wsgi_threads_free(ctx);
    pthread_cond_destroy(&ctx->moved);
    pthread_mutex_destroy(&ctx->mu);
    Py_XDECREF(ctx->app);
    Py_XDECREF(ctx->error_logger);
    ps_rejects_clear(&ctx->rejects);
    ps_wsgi_environ_clear(ctx);
    ps_py_cache_clear(&ctx->cache);
    Py_XDECREF(ctx->close_name);
    PyMem_Free(ctx);
}
