/* The ASGI layer: one per serve() call, and the server object
 * pyserver.asgi_runner drives (start accepting once asyncio's loop runs,
 * finish). Requests: asgi_http.c (HTTP), asgi_ws.c (WebSocket); their
 * scope asgi_scope.c, their awaitables asgi_awaitables.c, their tasks
 * asgi_task.c.
 */
#include "asgi.h"

static const char *const str_names[S_COUNT] = {
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "headers",
    "client",
    "server",
    "state",
    "extensions",
    "body",
    "more_body",
    "status",
    "trailers",
    "more_trailers",
    "path",
    "links",
    "http",
    "http.request",
    "http.disconnect",
    "http.response.start",
    "http.response.body",
    "http.response.pathsend",
    "http.response.trailers",
    "http.response.early_hint",
    "add_done_callback",
    "cancelled",
    "exception",
    "done",
    "set_result",
    "set_exception",
    "loop",
    "https",
    "tls",
    "client_cert_chain",
    "eager_start",
    "call_soon",
    "context",
};

typedef struct {
    PyObject_HEAD ps_asgi_t *ctx;
} ServerObject;

/* ---- the server object the runner drives ---- */

/* The worker's graceful stop finished its last connection: stop asyncio's
 * loop so the runner can run lifespan shutdown. This may run inside a task
 * step (the last response completing), so asyncio is told directly rather
 * than through libev, which might otherwise block with nothing to wait for. */
uint32_t ps_asgi_active(const ps_asgi_t *ctx)
{
    return ctx->active;
}

void ps_asgi_drained(ps_asgi_t *ctx)
{
    if (ctx->stop_sent || ctx->loop_stop == NULL)
        return;
    ctx->stop_sent = 1;
    PyObject *r = PyObject_CallNoArgs(ctx->loop_stop);
    if (r == NULL)
        PyErr_Clear();
    Py_XDECREF(r);
}

static PyObject *Server_start(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    ps_asgi_t *ctx = ((ServerObject *)op)->ctx;
    if (ctx == NULL || nargs != 2) {
        PyErr_SetString(PyExc_RuntimeError, "start(loop, state) on a live server");
        return NULL;
    }
    Py_XSETREF(ctx->loop, Py_NewRef(args[0]));
    Py_XSETREF(ctx->create_task, PyObject_GetAttrString(args[0], "create_task"));
    Py_XSETREF(ctx->create_future, PyObject_GetAttrString(args[0], "create_future"));
    Py_XSETREF(ctx->loop_stop, PyObject_GetAttrString(args[0], "stop"));
    if (!ctx->create_task || !ctx->create_future || !ctx->loop_stop)
        return NULL;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (asyncio == NULL)
        return NULL;
    Py_XSETREF(ctx->cancelled_error, PyObject_GetAttrString(asyncio, "CancelledError"));
    int rc = ctx->cancelled_error ? ps_asgi_task_init(ctx, asyncio) : -1;
    Py_DECREF(asyncio);
    if (rc < 0)
        return NULL;
    Py_XSETREF(ctx->state, args[1] == Py_None ? NULL : Py_NewRef(args[1]));
    if (ctx->state && !PyDict_Check(ctx->state)) {
        PyErr_SetString(PyExc_TypeError, "state must be a dict");
        return NULL;
    }
    if (ps_asgi_scope_template(ctx) < 0)
        return NULL;
    ps_worker_start(ctx->w);
    Py_RETURN_NONE;
}

static PyObject *Server_finish(PyObject *op, PyObject *unused)
{
    ps_asgi_t *ctx = ((ServerObject *)op)->ctx;
    PS_UNUSED(unused);
    if (ctx == NULL)
        Py_RETURN_NONE;
    ps_worker_finish(ctx->w);
    Py_RETURN_NONE;
}

static PyMethodDef Server_methods[] = {
    {"start", (PyCFunction)(void (*)(void))Server_start, METH_FASTCALL,
     "start(loop, state): accept connections; requests run as tasks on loop."},
    {"finish", Server_finish, METH_NOARGS, "Close what is left and stop accepting."},
    {NULL, NULL, 0, NULL},
};

static void Server_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot Server_slots[] = {
    {Py_tp_methods, Server_methods},
    {Py_tp_dealloc, Server_dealloc},
    {0, NULL},
};

static PyType_Spec Server_spec = {
    .name = "pyserver._core.AsgiServer",
    .basicsize = sizeof(ServerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Server_slots,
};

int ps_asgi_init_types(PyObject *module, ps_module_state_t *st)
{
    st->cycle_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ps_asgi_cycle_spec, NULL);
    st->ready_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ps_asgi_ready_spec, NULL);
    st->server_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Server_spec, NULL);
    st->appcall_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &ps_asgi_appcall_spec, NULL);
    if (!st->cycle_type || !st->ready_type || !st->server_type || !st->appcall_type)
        return -1;
    PyObject *exc = PyErr_NewExceptionWithDoc(
        "pyserver._core.ClientDisconnected",
        "send() after the client went away (an OSError the server does not log).", PyExc_OSError,
        NULL);
    if (exc == NULL || PyModule_AddObjectRef(module, "ClientDisconnected", exc) < 0) {
        Py_XDECREF(exc);
        return -1;
    }
    Py_DECREF(exc);
    return 0;
}

/* ---- setup ---- */

void ps_asgi_free(ps_asgi_t *ctx)
{
    if (ctx == NULL)
        return;
    Py_XDECREF(ctx->app);
    Py_XDECREF(ctx->loop);
    Py_XDECREF(ctx->create_task);
    Py_XDECREF(ctx->create_future);
    Py_XDECREF(ctx->task_type);
    Py_XDECREF(ctx->cancelled_error);
    Py_XDECREF(ctx->task_kwnames);
    Py_XDECREF(ctx->eager_kwnames);
    Py_XDECREF(ctx->base_context);
    Py_XDECREF(ctx->current_task);
    Py_XDECREF(ctx->current_tasks);
    Py_XDECREF(ctx->reraise);
    Py_XDECREF(ctx->loop_stop);
    Py_CLEAR(ctx->tasks); /* NULL first: tasks freed with the set must not touch it */
    Py_XDECREF(ctx->state);
    Py_XDECREF(ctx->error_logger);
    ps_rejects_clear(&ctx->rejects);
    Py_XDECREF(ctx->disconnected);
    for (int i = 0; i < S_COUNT; i++)
        Py_XDECREF(ctx->s[i]);
    Py_XDECREF(ctx->versions[0]);
    Py_XDECREF(ctx->versions[1]);
    Py_XDECREF(ctx->versions[2]);
    Py_XDECREF(ctx->root_path);
    Py_XDECREF(ctx->root_path_bytes);
    Py_XDECREF(ctx->asgi_template);
    Py_XDECREF(ctx->extensions_template);
    Py_XDECREF(ctx->scope_template);
    Py_XDECREF(ctx->empty_bytes);
    ps_asgi_ws_strings_free(ctx->ws_strings);
    ps_py_cache_clear(&ctx->cache);
    PyMem_Free(ctx);
}

static int read_logging(ps_asgi_t *ctx, const ps_py_settings_t *s)
{
    ctx->error_logger = Py_NewRef(s->error_logger);
    ctx->access_log = s->access_log;
    return ps_rejects_init(&ctx->rejects, ctx->access_log, ctx->error_logger);
}

ps_asgi_t *ps_asgi_new(ps_module_state_t *st, PyObject *module, PyObject *app,
                       const ps_py_settings_t *s)
{
    ps_asgi_t *ctx = PyMem_Calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return (ps_asgi_t *)PyErr_NoMemory();
    ctx->st = st;
    ctx->app = Py_NewRef(app);
    if (ps_py_cache_init(&ctx->cache, PS_PY_ASGI) < 0)
        goto error;
    for (int i = 0; i < S_COUNT; i++)
        if ((ctx->s[i] = PyUnicode_InternFromString(str_names[i])) == NULL)
            goto error;
    ctx->versions[0] = PyUnicode_InternFromString("1.0");
    ctx->versions[1] = PyUnicode_InternFromString("1.1");
    ctx->versions[2] = PyUnicode_InternFromString("2");
    ctx->empty_bytes = PyBytes_FromStringAndSize("", 0);
    ctx->disconnected = PyObject_GetAttrString(module, "ClientDisconnected");
    ctx->asgi_template = Py_BuildValue("{s:s,s:s}", "version", "3.0", "spec_version", "2.4");
    ctx->extensions_template = Py_BuildValue("{s:{},s:{},s:{}}", "http.response.pathsend",
                                             "http.response.trailers", "http.response.early_hint");
    ctx->tasks = PySet_New(NULL);
    if (!ctx->versions[0] || !ctx->versions[1] || !ctx->versions[2] || !ctx->empty_bytes ||
        !ctx->disconnected || !ctx->asgi_template || !ctx->extensions_template || !ctx->tasks ||
        read_logging(ctx, s) < 0)
        goto error;
    ctx->root_path = Py_NewRef(s->root_path);
    if ((ctx->root_path_bytes = PyUnicode_AsUTF8String(ctx->root_path)) == NULL)
        goto error;
    ctx->limit_concurrency = s->limit_concurrency;
    return ctx;
error:
    ps_asgi_free(ctx);
    return NULL;
}

void ps_asgi_attach(ps_asgi_t *ctx, ps_worker_t *w)
{
    ctx->w = w;
}

void ps_asgi_detach(ps_asgi_t *ctx)
{
    if (ctx != NULL)
        ps_rejects_stop(&ctx->rejects);
}

PyObject *ps_asgi_server_new(ps_asgi_t *ctx)
{
    ServerObject *s = (ServerObject *)ctx->st->server_type->tp_alloc(ctx->st->server_type, 0);
    if (s)
        s->ctx = ctx;
    return (PyObject *)s;
}

void ps_asgi_server_release(PyObject *server)
{
    ((ServerObject *)server)->ctx = NULL;
}

/* Serves the worker's connections with asyncio's loop on a selector over
 * the same libev loop, through pyserver.asgi_runner. Returns the runner's
 * exit code as an int object, or NULL with an exception. */
PyObject *ps_asgi_run(ps_asgi_t *ctx, PyObject *config)
{
    PyObject *runner = NULL, *core = NULL, *server = NULL, *result = NULL;
    runner = PyImport_ImportModule("pyserver.asgi_runner");
    if (runner == NULL)
        goto done;
    core = ps_evselector_new(ctx->st, ctx->w->loop);
    if (core == NULL)
        goto done;
    server = ps_asgi_server_new(ctx);
    if (server == NULL)
        goto done;
    result = PyObject_CallMethod(runner, "run", "OOOO", ctx->app, core, config, server);
    ps_asgi_server_release(server);
    ps_evselector_close(core);
done:
    Py_XDECREF(runner);
    Py_XDECREF(core);
    Py_XDECREF(server);
    return result;
}
