/* A WSGI and an ASGI application on one worker (--asgi-app).
 *
 * The worker's handler is this table; its handler_data a ps_hybrid_t. Once
 * a request's head is complete the protocol asks route(): a WebSocket
 * upgrade, or a path under an --asgi-path prefix, goes to the ASGI layer
 * (answered from asyncio tasks, body read as it comes), anything else to
 * the WSGI layer (whole body buffered first, then the loop thread or an
 * application thread). route() sets x->handler_data to the chosen layer's
 * context, which is also how the later callbacks find their layer: both
 * layers read their context from there.
 *
 * With --threads 1 the WSGI application runs on the loop's thread, inside
 * asyncio's run_forever(): its callbacks run with asyncio's running loop
 * unset, so that sync-only code (Django's ORM refuses to run where an event
 * loop is running) sees the plain thread it would under WSGI alone.
 */
#include "bridge.h"

struct ps_hybrid {
    ps_wsgi_t *wsgi;      /* borrowed */
    ps_asgi_t *asgi;      /* borrowed */
    ps_slice_t *prefixes; /* --asgi-path, no trailing slash ("/" alone: every path) */
    size_t nprefixes;
    /* asyncio._get_running_loop and _set_running_loop, when the WSGI
     * application runs on the loop's thread (--threads 1); else NULL. */
    PyObject *get_running_loop;
    PyObject *set_running_loop;
};

ps_hybrid_t *ps_hybrid_new(ps_wsgi_t *wsgi, ps_asgi_t *asgi, const ps_py_settings_t *s)
{
    ps_hybrid_t *h = PyMem_Calloc(1, sizeof(*h));
    if (h == NULL)
        return (ps_hybrid_t *)PyErr_NoMemory();
    h->wsgi = wsgi;
    h->asgi = asgi;
    Py_ssize_t n = s->asgi_paths ? PyTuple_GET_SIZE(s->asgi_paths) : 0;
    if (n > 0 && (h->prefixes = PyMem_Calloc((size_t)n, sizeof(*h->prefixes))) == NULL) {
        PyMem_Free(h);
        return (ps_hybrid_t *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyTuple_GET_ITEM(s->asgi_paths, i); /* borrowed: the settings keep it */
        h->prefixes[i] = (ps_slice_t){PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)};
    }
    h->nprefixes = (size_t)n;
    if (s->threads <= 1) {
        PyObject *asyncio = PyImport_ImportModule("asyncio");
        if (asyncio != NULL) {
            h->get_running_loop = PyObject_GetAttrString(asyncio, "_get_running_loop");
            h->set_running_loop = PyObject_GetAttrString(asyncio, "_set_running_loop");
            Py_DECREF(asyncio);
        }
        if (h->get_running_loop == NULL || h->set_running_loop == NULL) {
            ps_hybrid_free(h);
            return NULL;
        }
    }
    return h;
}

void ps_hybrid_free(ps_hybrid_t *h)
{
    if (h == NULL)
        return;
    Py_XDECREF(h->get_running_loop);
    Py_XDECREF(h->set_running_loop);
    PyMem_Free(h->prefixes);
    PyMem_Free(h);
}

/* 1 when the comma-separated list v holds token (any case). */
static int has_token(ps_slice_t v, const char *token, size_t len)
{
    size_t i = 0;
    while (i < v.len) {
        while (i < v.len && (v.base[i] == ' ' || v.base[i] == '\t' || v.base[i] == ','))
            i++;
        size_t start = i;
        while (i < v.len && v.base[i] != ',' && v.base[i] != ' ' && v.base[i] != '\t')
            i++;
        if (i - start == len && strncasecmp(v.base + start, token, len) == 0)
            return 1;
    }
    return 0;
}

/* An HTTP/1 request asking for a WebSocket (Upgrade: websocket). */
static int wants_websocket(const ps_request_t *r)
{
    if (!r->upgrade)
        return 0;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        ps_slice_t name = r->headers[i].name;
        if (name.len == 7 && strncasecmp(name.base, "upgrade", 7) == 0 &&
            has_token(r->headers[i].value, "websocket", 9))
            return 1;
    }
    return 0;
}

/* The path of a request target, with its query: an absolute-form target
 * ("http://host/p?q") loses its scheme and authority. */
static ps_slice_t target_path(ps_slice_t t)
{
    if (t.len > 0 && t.base[0] == '/')
        return t;
    const char *p = t.len > 3 ? memmem(t.base, t.len, "://", 3) : NULL;
    if (p == NULL)
        return t;
    const char *end = t.base + t.len;
    const char *slash = memchr(p + 3, '/', (size_t)(end - p - 3));
    return slash ? (ps_slice_t){slash, (size_t)(end - slash)} : (ps_slice_t){"/", 1};
}

/* 1 when path is prefix itself or lies under it ("/events" takes
 * "/events", "/events/x" and "/events?x", not "/eventsx"). */
static int under(ps_slice_t path, ps_slice_t prefix)
{
    if (prefix.len == 1) /* "/" */
        return 1;
    if (path.len < prefix.len || memcmp(path.base, prefix.base, prefix.len) != 0)
        return 0;
    return path.len == prefix.len || path.base[prefix.len] == '/' || path.base[prefix.len] == '?';
}

/* The handler's route(): 1 (ASGI) for a WebSocket upgrade or a path under
 * a prefix, else 0 (WSGI); x->handler_data is set to that layer's context.
 * Runs no Python. */
static int on_route(ps_exchange_t *x)
{
    ps_hybrid_t *h = x->worker->handler_data;
    int asgi = wants_websocket(x->req);
    if (!asgi && h->nprefixes > 0) {
        ps_slice_t path = target_path(x->req->target);
        for (size_t i = 0; i < h->nprefixes && !asgi; i++)
            asgi = under(path, h->prefixes[i]);
    }
    x->handler_data = asgi ? (void *)h->asgi : (void *)h->wsgi;
    return asgi;
}

/* The layer that has x: the one route() chose, else (a connection refused
 * or a request rejected before its head was routed) the WSGI layer, which
 * logs those as the ASGI layer would. */
static const ps_handler_t *side(ps_exchange_t *x)
{
    ps_hybrid_t *h = x->worker->handler_data;
    if (x->handler_data == h->asgi)
        return &ps_asgi_handler;
    x->handler_data = h->wsgi;
    return &ps_wsgi_handler;
}

/* Sets asyncio's running loop of this thread to loop; 0, or -1 when that
 * failed (the exception is reported as unraisable). */
static int set_running_loop(ps_hybrid_t *h, PyObject *loop)
{
    PyObject *r = PyObject_CallOneArg(h->set_running_loop, loop);
    if (r == NULL) {
        PyErr_WriteUnraisable(h->set_running_loop);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Calls one of the layers' callbacks that may run application code: a
 * WSGI one on the loop's thread runs outside asyncio's running loop (see
 * the top of the file), which is put back after. May close the connection
 * (as fn may). */
static void call(ps_exchange_t *x, void (*fn)(ps_exchange_t *x))
{
    ps_hybrid_t *h = x->worker->handler_data;
    if (h->get_running_loop == NULL || x->handler_data != h->wsgi) {
        fn(x);
        return;
    }
    PyObject *loop = PyObject_CallNoArgs(h->get_running_loop);
    if (loop == NULL)
        PyErr_WriteUnraisable(h->get_running_loop);
    if (loop == NULL || loop == Py_None || set_running_loop(h, Py_None) < 0) {
        Py_XDECREF(loop);
        fn(x);
        return;
    }
    fn(x);
    set_running_loop(h, loop);
    Py_DECREF(loop);
}

static void on_request(ps_exchange_t *x)
{
    call(x, side(x)->on_request);
}

static void on_writable(ps_exchange_t *x)
{
    call(x, side(x)->on_writable);
}

static void on_disconnect(ps_exchange_t *x)
{
    call(x, side(x)->on_disconnect);
}

static void dispose(ps_exchange_t *x)
{
    call(x, side(x)->dispose);
}

static void on_body(ps_exchange_t *x)
{
    const ps_handler_t *layer = side(x);
    if (layer->on_body)
        layer->on_body(x);
}

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    side(x)->on_rejected(x, status, reason);
}

static void on_refused(ps_exchange_t *x, const char *reason)
{
    side(x)->on_refused(x, reason);
}

static void on_served(ps_exchange_t *x, int status)
{
    side(x)->on_served(x, status);
}

/* Not async: a request is synchronous unless route() says otherwise. */
const ps_handler_t ps_hybrid_handler = {
    .on_request = on_request,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .on_body = on_body,
    .on_rejected = on_rejected,
    .on_refused = on_refused,
    .on_served = on_served,
    .route = on_route,
};
