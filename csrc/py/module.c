/* pyserver._core: module init and serve(). */
#include <signal.h>

#include "bridge.h"

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

static int read_config(PyObject *config, ps_config_t *cfg)
{
    double line, fields, field_size, body, conns;
    int server_header, date_header;
    memset(cfg, 0, sizeof(*cfg));
    if (get_double(config, "limit_request_line", &line) < 0 ||
        get_double(config, "limit_request_fields", &fields) < 0 ||
        get_double(config, "limit_request_field_size", &field_size) < 0 ||
        get_double(config, "limit_request_body", &body) < 0 ||
        get_double(config, "timeout_keep_alive", &cfg->timeout_keep_alive) < 0 ||
        get_optional_double(config, "timeout_request_header", 60.0, &cfg->timeout_request_header) <
            0 ||
        get_optional_double(config, "graceful_timeout", 30.0, &cfg->graceful_timeout) < 0 ||
        get_optional_double(config, "limit_connections", 10000, &conns) < 0 ||
        get_bool(config, "server_header", &server_header) < 0 ||
        get_bool(config, "date_header", &date_header) < 0)
        return -1;
    if (line < 1 || fields < 1 || field_size < 1 || body < 0 || conns < 1) {
        PyErr_SetString(PyExc_ValueError, "pyserver: request limits must be positive");
        return -1;
    }
    cfg->limits.max_request_line = (uint32_t)PS_MIN(line, 1 << 20);
    cfg->limits.max_fields = (uint32_t)PS_MIN(fields, 1 << 16);
    cfg->limits.max_field_size = (uint32_t)PS_MIN(field_size, 1 << 20);
    cfg->limits.max_body = (uint64_t)body;
    cfg->limit_connections = (uint32_t)PS_MIN(conns, 1 << 24);
    cfg->server_header = server_header != 0;
    cfg->date_header = date_header != 0;
    return 0;
}

static int add_listeners(ps_worker_t *w, PyObject *sockets)
{
    PyObject *seq = PySequence_Fast(sockets, "sockets must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *fileno = PyObject_CallMethod(PySequence_Fast_GET_ITEM(seq, i), "fileno", NULL);
        if (fileno == NULL)
            goto error;
        long fd = PyLong_AsLong(fileno);
        Py_DECREF(fileno);
        if (fd == -1 && PyErr_Occurred())
            goto error;
        int rc = ps_worker_add_listener(w, (int)fd);
        if (rc < 0) {
            errno = -rc;
            PyErr_SetFromErrno(PyExc_OSError);
            goto error;
        }
    }
    Py_DECREF(seq);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: no listening socket");
        return -1;
    }
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

/* serve(app, sockets, config): runs one worker on the current thread until a
 * stop signal; returns None. */
static PyObject *serve(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "serve(app, sockets, config)");
        return NULL;
    }
    ps_module_state_t *st = PyModule_GetState(module);
    ps_config_t cfg;
    if (read_config(args[2], &cfg) < 0)
        return NULL;
    ps_wsgi_t *ctx = ps_wsgi_new(st, args[0], args[2]);
    if (ctx == NULL)
        return NULL;
    ps_worker_t *w = PyMem_RawMalloc(sizeof(*w));
    if (w == NULL) {
        ps_wsgi_free(ctx);
        return PyErr_NoMemory();
    }
    int rc = ps_worker_init(w, &cfg, &ps_wsgi_handler, ctx);
    if (rc < 0) {
        PyMem_RawFree(w);
        ps_wsgi_free(ctx);
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *result = NULL;
    if (add_listeners(w, args[1]) < 0)
        goto done;

    gil_state_t gil = {NULL};
    ev_set_userdata(w->loop, &gil);
    ev_set_loop_release_cb(w->loop, release_gil, acquire_gil);
    struct sigaction saved[3];
    const int sigs[3] = {SIGINT, SIGTERM, SIGQUIT};
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], NULL, &saved[i]);
    ps_worker_run(w);
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &saved[i], NULL);
    result = Py_NewRef(Py_None);
done:
    ps_worker_free(w);
    PyMem_RawFree(w);
    ps_wsgi_free(ctx);
    return result;
}

static PyMethodDef module_methods[] = {
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
     "serve(app, sockets, config)\n--\n\nServe app on the listening sockets until stopped."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module)
{
    ps_module_state_t *st = PyModule_GetState(module);
    if (ps_wsgi_init_types(module, st) < 0)
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
    return 0;
}

static int module_clear(PyObject *module)
{
    ps_module_state_t *st = PyModule_GetState(module);
    Py_CLEAR(st->request_type);
    Py_CLEAR(st->input_type);
    Py_CLEAR(st->errors_type);
    Py_CLEAR(st->file_wrapper_type);
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
