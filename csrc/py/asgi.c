/* The ASGI layer (HTTP, ASGI 3, spec 2.4): scope, receive() and send() as C
 * awaitables, one asyncio task per request.
 *
 * receive() and send() finish without suspending whenever they can: body
 * bytes already buffered, output the socket accepts. Only when they must
 * wait do they hand the task a real asyncio Future, resolved from the
 * connection's callbacks (on_body, on_writable, on_disconnect), so that
 * cancellation and timeouts behave as asyncio code expects.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "bridge.h"
#include "asgi_ws.h"

#define MAX_STACK_HEADERS 32

enum {
    S_TYPE,
    S_ASGI,
    S_HTTP_VERSION,
    S_METHOD,
    S_SCHEME,
    S_PATH,
    S_RAW_PATH,
    S_QUERY_STRING,
    S_ROOT_PATH,
    S_HEADERS,
    S_CLIENT,
    S_SERVER,
    S_STATE,
    S_EXTENSIONS,
    S_BODY,
    S_MORE_BODY,
    S_STATUS,
    S_TRAILERS,
    S_MORE_TRAILERS,
    S_PATH_KEY,
    S_LINKS,
    S_HTTP,
    S_HTTP_REQUEST,
    S_HTTP_DISCONNECT,
    S_RESPONSE_START,
    S_RESPONSE_BODY,
    S_RESPONSE_PATHSEND,
    S_RESPONSE_TRAILERS,
    S_RESPONSE_EARLY_HINT,
    S_ADD_DONE_CALLBACK,
    S_CANCELLED,
    S_EXCEPTION,
    S_DONE,
    S_SET_RESULT,
    S_SET_EXCEPTION,
    S_LOOP,
    S_HTTPS,
    S_TLS,
    S_CLIENT_CERT_CHAIN,
    S_EAGER_START,
    S_CALL_SOON,
    S_CONTEXT_KW,
    S_COUNT
};

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

struct ps_asgi {
    ps_module_state_t *st;
    ps_worker_t *w;
    PyObject *app;
    PyObject *loop;
    PyObject *create_task;
    PyObject *create_future;
    PyObject *task_type;       /* asyncio.Task */
    PyObject *cancelled_error; /* asyncio.CancelledError */
    PyObject *task_kwnames;    /* ("loop", "context"); ("loop",) before 3.11 */
    PyObject *eager_kwnames;   /* ("loop", "eager_start", "context"): 3.12 and later */
    PyObject *base_context;    /* the context the server started in */
    PyObject *current_task;    /* asyncio.current_task */
    PyObject *current_tasks;   /* asyncio.tasks._current_tasks when a dict, else NULL */
    PyObject *reraise;         /* a callable that raises its argument, for the loop to run */
    PyObject *loop_stop;
    PyObject *tasks; /* set: the request tasks whose application has not ended */
    PyObject *state; /* lifespan state, copied into each scope */
    PyObject *error_logger;
    ps_access_log_t *access_log; /* NULL when off (borrowed from the settings) */
    ps_rejects_t rejects;
    ps_py_refusals_t refusals; /* PROXY protocol failures logged (request.c) */
    PyObject *disconnected;    /* ClientDisconnected, an OSError subclass */
    PyObject *s[S_COUNT];
    PyObject *versions[3]; /* "1.0", "1.1", "2" */
    PyObject *root_path;
    PyObject *root_path_bytes;
    PyObject *asgi_template;
    PyObject *extensions_template;
    PyObject *scope_template; /* an HTTP scope's keys in order (values None but type) */
    PyObject *empty_bytes;
    ps_py_cache_t cache; /* methods, header names */
    uint32_t limit_concurrency;
    uint32_t active;
    unsigned stop_sent : 1;
    struct ps_asgi_ws_strings *ws_strings; /* asgi_ws.c's, made with the first upgrade */
};

typedef struct {
    PyObject_HEAD ps_exchange_t *x; /* NULL once detached: response complete or client gone */
    ps_asgi_t *ctx;
    PyObject *receive_waiter; /* Future a receive() waits on */
    PyObject *send_waiter;    /* Future a send() waits on */
    PyObject *headers;        /* from http.response.start */
    ps_slice_t fwd_client; /* a forwarded client as sent, for the access log (into the request) */
    int status;
    int sendfile_fd;
    /* A body message sent in parts (send_held): its buffer while held
     * (held.obj set), where its rest starts, its Content-Length (-1:
     * none) and more_body. */
    Py_buffer held;
    Py_ssize_t held_off;
    int64_t held_length;
    unsigned held_more : 1;
    unsigned started : 1;       /* http.response.start received */
    unsigned head_sent : 1;     /* the head went to the connection */
    unsigned body_done : 1;     /* more_body=False was delivered to receive() */
    unsigned complete : 1;      /* the response is complete */
    unsigned disconnected : 1;  /* the client went away first */
    unsigned want_trailers : 1; /* the app announced trailers */
    unsigned te_trailers : 1;   /* the client accepts trailers */
    ps_asgi_ws_t *ws;           /* a WebSocket upgrade (asgi_ws.c), owned */
} CycleObject;

typedef struct {
    PyObject_HEAD PyObject *value;
} ReadyObject;

typedef struct {
    PyObject_HEAD ps_asgi_t *ctx;
} ServerObject;

/* ---- small helpers ---- */

/* An awaitable that is already done: awaiting it returns value without
 * suspending the task. Steals value. */
static PyObject *ready(ps_asgi_t *ctx, PyObject *value)
{
    if (value == NULL)
        return NULL;
    PyTypeObject *tp = ctx->st->ready_type;
    ReadyObject *r = (ReadyObject *)tp->tp_alloc(tp, 0);
    if (r == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    r->value = value;
    return (PyObject *)r;
}

static PySendResult Ready_send(PyObject *op, PyObject *arg, PyObject **result)
{
    ReadyObject *self = (ReadyObject *)op;
    PS_UNUSED(arg);
    *result = Py_NewRef(self->value ? self->value : Py_None);
    return PYGEN_RETURN;
}

static PyObject *Ready_iternext(PyObject *op)
{
    ReadyObject *self = (ReadyObject *)op;
    PyObject *v = self->value ? self->value : Py_None;
    if (v == Py_None) {
        PyErr_SetNone(PyExc_StopIteration);
    } else {
        PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, v);
        if (exc) {
            PyErr_SetObject(PyExc_StopIteration, exc);
            Py_DECREF(exc);
        }
    }
    return NULL;
}

static void Ready_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    Py_XDECREF(((ReadyObject *)op)->value);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot Ready_slots[] = {
    {Py_am_await, PyObject_SelfIter}, {Py_am_send, Ready_send},
    {Py_tp_iter, PyObject_SelfIter},  {Py_tp_iternext, Ready_iternext},
    {Py_tp_dealloc, Ready_dealloc},   {0, NULL},
};

static PyType_Spec Ready_spec = {
    .name = "pyserver._core.Ready",
    .basicsize = sizeof(ReadyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Ready_slots,
};

static PyObject *new_future(ps_asgi_t *ctx)
{
    return PyObject_CallNoArgs(ctx->create_future);
}

/* Resolves *slot (a Future) with value unless it is done; clears the slot.
 * Returns 1 when value was delivered, 0 when there was no Future or it was
 * done (cancelled: its task gave up waiting). Never leaves an exception.
 * Method names are interned: the type's method cache only hits for the
 * same name object. */
static int resolve(ps_asgi_t *ctx, PyObject **slot, PyObject *value, int as_exception)
{
    PyObject *fut = *slot;
    int delivered = 0;
    if (fut == NULL)
        return 0;
    *slot = NULL;
    PyObject *done = PyObject_CallMethodNoArgs(fut, ctx->s[S_DONE]);
    if (done != NULL && done == Py_False) {
        PyObject *name = ctx->s[as_exception ? S_SET_EXCEPTION : S_SET_RESULT];
        PyObject *r = PyObject_CallMethodOneArg(fut, name, value);
        delivered = r != NULL;
        Py_XDECREF(r);
    }
    Py_XDECREF(done);
    PyErr_Clear();
    Py_DECREF(fut);
    return delivered;
}

/* A send() waiting on *slot learns the client is gone: ClientDisconnected.
 * Never leaves an exception. */
static void fail_waiter(ps_asgi_t *ctx, PyObject **slot)
{
    if (*slot == NULL)
        return;
    PyObject *exc = PyObject_CallFunction(ctx->disconnected, "s", "the client disconnected");
    if (exc) {
        resolve(ctx, slot, exc, 1);
        Py_DECREF(exc);
    }
    PyErr_Clear();
}

/* The Future a receive() or send() waits on: the one in *slot while it is
 * pending, else (none, or one cancelled by a wait_for that gave up) a new
 * one put there. New reference or NULL. */
static PyObject *waiter(ps_asgi_t *ctx, PyObject **slot)
{
    if (*slot != NULL) {
        PyObject *done = PyObject_CallMethodNoArgs(*slot, ctx->s[S_DONE]);
        if (done == NULL)
            return NULL;
        int pending = done == Py_False;
        Py_DECREF(done);
        if (pending)
            return Py_NewRef(*slot);
        Py_CLEAR(*slot);
    }
    if ((*slot = new_future(ctx)) == NULL)
        return NULL;
    return Py_NewRef(*slot);
}

static PyObject *message(ps_asgi_t *ctx, int type)
{
    PyObject *m = PyDict_New();
    if (m && PyDict_SetItem(m, ctx->s[S_TYPE], ctx->s[type]) < 0)
        Py_CLEAR(m);
    return m;
}

/* ---- scope ---- */

static PyObject *build_headers(ps_asgi_t *ctx, const ps_request_t *r, int *te_trailers)
{
    PyObject *list = PyList_New((Py_ssize_t)r->nheaders);
    if (list == NULL)
        return NULL;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        const ps_header_t *h = &r->headers[i];
        PyObject *name = ps_py_header_name(&ctx->cache, h->name);
        PyObject *value =
            name ? PyBytes_FromStringAndSize(h->value.base, (Py_ssize_t)h->value.len) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, name, value) : NULL;
        Py_XDECREF(name);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, pair);
        if (h->name.len == 2 && PS_SLICE_IEQ(h->name, "te") &&
            memmem(h->value.base, h->value.len, "trailers", 8) != NULL)
            *te_trailers = 1;
    }
    return list;
}

static PyObject *method_str(ps_asgi_t *ctx, const ps_request_t *r)
{
    return ps_py_method(&ctx->cache, r);
}

/* path (decoded UTF-8) and raw_path (as sent) both include the root path:
 * a request that arrives with it (a proxy that keeps the prefix) is taken
 * as is, one that arrives without it (a proxy that strips the prefix) gets
 * it put back, so root_path is always a prefix of path, as the spec says. */
static int add_paths(ps_asgi_t *ctx, PyObject *scope, ps_slice_t path)
{
    char stack[1024];
    char *decoded = path.len < sizeof(stack) ? stack : PyMem_Malloc(path.len + 1);
    if (decoded == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t dlen = ps_http_percent_decode(path.base, path.len, decoded);
    const char *rp = PyBytes_AS_STRING(ctx->root_path_bytes);
    size_t rl = (size_t)PyBytes_GET_SIZE(ctx->root_path_bytes);
    int prefixed = rl == 0 || (dlen >= rl && memcmp(decoded, rp, rl) == 0 &&
                               (dlen == rl || decoded[rl] == '/'));
    PyObject *p = PyUnicode_DecodeUTF8(decoded, (Py_ssize_t)dlen, "replace");
    if (decoded != stack)
        PyMem_Free(decoded);
    PyObject *raw = PyBytes_FromStringAndSize(path.base, (Py_ssize_t)path.len);
    if (p && !prefixed) {
        Py_SETREF(p, PyUnicode_Concat(ctx->root_path, p));
        if (raw) {
            PyObject *joined = PyBytes_FromObject(ctx->root_path_bytes);
            PyBytes_ConcatAndDel(&joined, raw);
            raw = joined;
        }
    }
    if (p == NULL || raw == NULL) {
        Py_XDECREF(p);
        Py_XDECREF(raw);
        return -1;
    }
    int rc = PyDict_SetItem(scope, ctx->s[S_PATH], p) < 0 ||
                     PyDict_SetItem(scope, ctx->s[S_RAW_PATH], raw) < 0
                 ? -1
                 : 0;
    Py_DECREF(p);
    Py_DECREF(raw);
    return rc;
}

/* (host, port) of an absolute-form target, which names the server (RFC
 * 9112 section 3.2.2). New reference, or NULL with an exception. */
static PyObject *target_server(const ps_request_t *r)
{
    PyObject *host =
        PyUnicode_DecodeLatin1(r->target_host.base, (Py_ssize_t)r->target_host.len, NULL);
    return host ? Py_BuildValue("(Ni)", host, (int)r->target_port) : NULL;
}

/* scope["extensions"]["tls"]: the ASGI TLS extension (HTTP and WebSocket
 * scopes). What it holds does not change during a connection: it is built
 * on the connection's first request and kept with its addresses; each
 * request gets a copy (and its own copy of a non-empty client chain, a
 * list the application could change). Returns 0 or -1 with an exception. */
static int add_tls(ps_asgi_t *ctx, PyObject *scope, ps_exchange_t *x, ps_py_addresses_t *a)
{
    PyObject *ext = PyDict_GetItemWithError(scope, ctx->s[S_EXTENSIONS]); /* borrowed */
    if (ext == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (a->tls_ext == NULL && (a->tls_ext = ps_py_tls_extension(x->tls)) == NULL)
        return -1;
    PyObject *value = PyDict_Copy(a->tls_ext);
    if (value == NULL)
        return -1;
    PyObject *chain = PyDict_GetItemWithError(value, ctx->s[S_CLIENT_CERT_CHAIN]); /* borrowed */
    int rc = 0;
    if (chain && PyList_Check(chain) && PyList_GET_SIZE(chain) > 0)
        rc = ps_py_set_new(value, ctx->s[S_CLIENT_CERT_CHAIN],
                           PyList_GetSlice(chain, 0, PyList_GET_SIZE(chain)));
    else if (chain == NULL && PyErr_Occurred())
        rc = -1;
    rc = rc < 0 ? -1 : PyDict_SetItem(ext, ctx->s[S_TLS], value);
    Py_DECREF(value);
    return rc;
}

/* The host a trusted proxy said the client asked for: the "host" field of
 * headers becomes "name[:port]" (added when the request had none), and the
 * scope's server (name, port), the port the scheme's default when only a
 * name came. Returns 0 or -1 with an exception. */
static int forwarded_host(ps_asgi_t *ctx, PyObject *scope, const ps_proxy_result_t *fwd, int https)
{
    PyObject *headers = PyDict_GetItemWithError(scope, ctx->s[S_HEADERS]); /* borrowed */
    if (headers == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int port = fwd->port ? fwd->port : (https ? 443 : 80);
    ps_slice_t name = fwd->host;
    if (name.base == NULL) { /* a port alone, and the request has no Host field */
        PyObject *server = PyDict_GetItemWithError(scope, ctx->s[S_SERVER]); /* borrowed */
        if (server == NULL || !PyTuple_Check(server) || PyTuple_GET_SIZE(server) != 2)
            return PyErr_Occurred() ? -1 : 0;
        return ps_py_set_new(scope, ctx->s[S_SERVER],
                             Py_BuildValue("(Oi)", PyTuple_GET_ITEM(server, 0), port));
    }
    char suffix[8] = "";
    int slen = fwd->port ? snprintf(suffix, sizeof(suffix), ":%d", port) : 0;
    PyObject *value = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)name.len + slen);
    if (value) {
        memcpy(PyBytes_AS_STRING(value), name.base, name.len);
        memcpy(PyBytes_AS_STRING(value) + name.len, suffix, (size_t)slen);
    }
    PyObject *pair = value ? Py_BuildValue("(y#N)", "host", (Py_ssize_t)4, value) : NULL;
    if (pair == NULL)
        return -1;
    Py_ssize_t i, n = PyList_GET_SIZE(headers);
    for (i = 0; i < n; i++) {
        PyObject *h = PyTuple_GET_ITEM(PyList_GET_ITEM(headers, i), 0);
        if (PyBytes_GET_SIZE(h) == 4 && memcmp(PyBytes_AS_STRING(h), "host", 4) == 0)
            break;
    }
    int rc = i < n ? PyList_SetItem(headers, i, pair) : PyList_Append(headers, pair);
    if (i == n)
        Py_DECREF(pair);
    if (rc < 0)
        return -1;
    if (name.len >= 2 && name.base[0] == '[') { /* the server's host is an address, unbracketed */
        name.base++;
        name.len -= 2;
    }
    return ps_py_set_new(scope, ctx->s[S_SERVER],
                         Py_BuildValue("(s#i)", name.base, (Py_ssize_t)name.len, port));
}

/* fwd: what a trusted proxy said (the scheme, the client: then kept by the
 * cycle for the access log; the host). */
static PyObject *build_scope(ps_asgi_t *ctx, ps_exchange_t *x, CycleObject *cycle,
                             const ps_proxy_result_t *fwd)
{
    ps_request_t *r = x->req;
    ps_py_addresses_t *a = ps_py_addresses(&ctx->cache, x);
    if (a == NULL)
        return NULL;
    PyObject **s = ctx->s;
    int https = fwd->scheme == PS_SCHEME_HTTPS || (fwd->scheme == PS_SCHEME_NONE && x->secure);
    PyObject *scheme = https ? s[S_HTTPS] : s[S_HTTP];
    PyObject *client = a->client, *forwarded = NULL; /* borrowed; owned */
    if (ps_unlikely(fwd->client.base != NULL)) {
        cycle->fwd_client = fwd->client;
        if ((forwarded = ps_py_forwarded_client(&ctx->cache, fwd->client, fwd->client_port)) ==
            NULL)
            return NULL;
        client = forwarded;
    }
    PyObject *scope = PyDict_Copy(ctx->scope_template); /* its keys, no resizing */
    if (scope == NULL)
        goto error;
    ps_slice_t path, query;
    ps_http_split_target(r->target, &path, &query);
    if (path.len == 0)
        path = PS_SLICE_LIT("/");
    int te = 0;
    if (ps_py_set_new(scope, s[S_ASGI], PyDict_Copy(ctx->asgi_template)) < 0 ||
        PyDict_SetItem(scope, s[S_HTTP_VERSION], ctx->versions[x->http2 ? 2 : r->http_minor & 1]) <
            0 ||
        ps_py_set_new(scope, s[S_METHOD], method_str(ctx, r)) < 0 ||
        PyDict_SetItem(scope, s[S_SCHEME], scheme) < 0 || add_paths(ctx, scope, path) < 0 ||
        ps_py_set_new(scope, s[S_QUERY_STRING],
                      PyBytes_FromStringAndSize(query.base, (Py_ssize_t)query.len)) < 0 ||
        PyDict_SetItem(scope, s[S_ROOT_PATH], ctx->root_path) < 0 ||
        ps_py_set_new(scope, s[S_HEADERS], build_headers(ctx, r, &te)) < 0 ||
        PyDict_SetItem(scope, s[S_CLIENT], client) < 0 ||
        (ps_likely(r->target_host.base == NULL)
             ? PyDict_SetItem(scope, s[S_SERVER], a->server)
             : ps_py_set_new(scope, s[S_SERVER], target_server(r))) < 0 ||
        ps_py_set_new(scope, s[S_EXTENSIONS], PyDict_Copy(ctx->extensions_template)) < 0 ||
        (ctx->state && ps_py_set_new(scope, s[S_STATE], PyDict_Copy(ctx->state)) < 0))
        goto error;
    cycle->te_trailers = te || x->http2; /* HTTP/2 carries trailers whatever TE says */
    if (ps_unlikely(fwd->host.base || fwd->port) &&
        forwarded_host(ctx, scope, fwd, scheme == s[S_HTTPS]) < 0)
        goto error;
    if (cycle->ws && ps_asgi_ws_scope(cycle->ws, scope) < 0)
        goto error;
    if (ps_unlikely(x->tls != NULL) && add_tls(ctx, scope, x, a) < 0)
        goto error;
    Py_XDECREF(forwarded);
    return scope;
error:
    Py_XDECREF(scope);
    Py_XDECREF(forwarded);
    return NULL;
}

/* ---- the request cycle ---- */

/* Cuts the cycle from its connection and drops the connection's reference
 * (which may free the cycle: callers touch it no more). */
static void detach(CycleObject *cycle)
{
    ps_exchange_t *x = cycle->x;
    if (x == NULL)
        return;
    if (cycle->ws)
        ps_asgi_ws_detached(cycle->ws);
    cycle->x = NULL;
    x->app_data = NULL;
    Py_DECREF(cycle);
}

/* A receive() still waiting learns the exchange is over. Nothing is built
 * when none waits, which is the usual case. */
static void wake_receiver(CycleObject *cycle)
{
    if (cycle->receive_waiter == NULL)
        return;
    PyObject *m = message(cycle->ctx, S_HTTP_DISCONNECT);
    if (m) {
        resolve(cycle->ctx, &cycle->receive_waiter, m, 0);
        Py_DECREF(m);
    }
    PyErr_Clear();
}

/* The response is complete: log, detach, let the connection move on. A
 * pending receive() learns the exchange is over. */
static void complete(CycleObject *cycle)
{
    ps_exchange_t *x = cycle->x;
    ps_asgi_t *ctx = cycle->ctx;
    cycle->complete = 1;
    if (ctx->access_log)
        ps_log_access(ctx->access_log, x, cycle->fwd_client, x->status, cycle->headers);
    wake_receiver(cycle);
    Py_INCREF(cycle);
    detach(cycle);
    ps_exchange_end(x); /* may start the next pipelined request */
    Py_DECREF(cycle);
}

/* The client went away, or the connection failed. */
static void lose(CycleObject *cycle)
{
    ps_asgi_t *ctx = cycle->ctx;
    cycle->disconnected = 1;
    if (cycle->ws)
        ps_asgi_ws_lost(cycle->ws); /* takes what the session still holds */
    Py_INCREF(cycle);
    detach(cycle);
    wake_receiver(cycle);
    fail_waiter(ctx, &cycle->send_waiter);
    if (cycle->held.obj)
        PyBuffer_Release(&cycle->held);
    if (cycle->sendfile_fd >= 0) {
        close(cycle->sendfile_fd);
        cycle->sendfile_fd = -1;
    }
    Py_DECREF(cycle);
}

/* The http.request message for what the body buffer holds now. */
static PyObject *body_message(CycleObject *cycle, ps_exchange_t *x)
{
    ps_asgi_t *ctx = cycle->ctx;
    ps_buf_t *b = x->body;
    PyObject *m = message(ctx, S_HTTP_REQUEST);
    if (m == NULL)
        return NULL;
    PyObject *body = PyBytes_FromStringAndSize(ps_buf_head(b), (Py_ssize_t)ps_buf_size(b));
    if (body == NULL || PyDict_SetItem(m, ctx->s[S_BODY], body) < 0) {
        Py_XDECREF(body);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(body);
    ps_buf_consume(b, ps_buf_size(b));
    int more = !x->req->message_complete;
    if (PyDict_SetItem(m, ctx->s[S_MORE_BODY], more ? Py_True : Py_False) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (!more)
        cycle->body_done = 1;
    return m;
}

static PyObject *Cycle_receive(PyObject *op, PyObject *unused)
{
    CycleObject *self = (CycleObject *)op;
    ps_asgi_t *ctx = self->ctx;
    ps_exchange_t *x = self->x;
    PS_UNUSED(unused);
    if (self->ws)
        return ps_asgi_ws_receive(self->ws);
    if (x == NULL)
        return ready(ctx, message(ctx, S_HTTP_DISCONNECT));
    if (self->body_done) {
        /* Nothing more will come but the end of the exchange. */
        if (self->receive_waiter == NULL && (self->receive_waiter = new_future(ctx)) == NULL)
            return NULL;
        return Py_NewRef(self->receive_waiter);
    }
    int rc = ps_exchange_body_want(x);
    if (rc > 0)
        return ready(ctx, body_message(self, x));
    if (rc < 0)
        return ready(ctx, message(ctx, S_HTTP_DISCONNECT));
    if (self->receive_waiter == NULL && (self->receive_waiter = new_future(ctx)) == NULL)
        return NULL;
    return Py_NewRef(self->receive_waiter);
}

/* ---- send() ---- */

/* Views an ASGI header list (any iterable of pairs) as slices into its
 * bytes objects. *hs is a stack array of room entries or a PyMem block the
 * caller frees. *keep holds the pairs (a list made from an iterator is
 * their only owner): a new reference the caller drops once done with the
 * slices. Returns the count, or -1 with an exception (*hs as given:
 * nothing to free; *keep NULL). */
static Py_ssize_t view_headers(PyObject *headers, ps_header_t **hs, size_t room, size_t extra,
                               PyObject **keep)
{
    PyObject *seq = PySequence_Fast(headers, "headers must be a sequence of pairs");
    *keep = NULL;
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    ps_header_t *given = *hs;
    if ((size_t)n + extra > room) {
        ps_header_t *big = PyMem_Malloc(((size_t)n + extra) * sizeof(ps_header_t));
        if (big == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        *hs = big;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *name, *value;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
            name = PyTuple_GET_ITEM(pair, 0);
            value = PyTuple_GET_ITEM(pair, 1);
        } else if (PyList_Check(pair) && PyList_GET_SIZE(pair) == 2) {
            name = PyList_GET_ITEM(pair, 0);
            value = PyList_GET_ITEM(pair, 1);
        } else {
            PyErr_SetString(PyExc_TypeError, "each header must be a [name, value] pair");
            goto error;
        }
        if (!PyBytes_Check(name) || !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "header names and values must be bytes");
            goto error;
        }
        (*hs)[i].name = (ps_slice_t){PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name)};
        (*hs)[i].value = (ps_slice_t){PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value)};
    }
    *keep = seq;
    return n;
error:
    if (*hs != given) {
        PyMem_Free(*hs);
        *hs = given;
    }
    Py_DECREF(seq);
    return -1;
}

/* Maps a core write result to what send() returns. */
static PyObject *after_write(CycleObject *self, int rc)
{
    if (rc == PS_WRITE_PENDING) {
        if (self->send_waiter == NULL && (self->send_waiter = new_future(self->ctx)) == NULL)
            return NULL;
        return Py_NewRef(self->send_waiter);
    }
    if (rc < 0) {
        /* The socket broke: close it now; the cycle hears it as a disconnect. */
        if (self->x)
            ps_exchange_abort(self->x);
        PyErr_SetString(self->ctx->disconnected, "the client disconnected");
        return NULL;
    }
    return ready(self->ctx, Py_NewRef(Py_None));
}

/* Sends the head held since http.response.start with the first body bytes.
 * length >= 0 announces a body of that size when the app gave no length. */
static int send_head(CycleObject *self, const char *body, size_t len, int64_t length)
{
    ps_header_t stack[MAX_STACK_HEADERS + 1], *hs = stack;
    char status_line[64], length_text[24];
    PyObject *keep;
    Py_ssize_t n = view_headers(self->headers, &hs, MAX_STACK_HEADERS + 1, 1, &keep);
    if (n < 0)
        return -EINVAL;
    int st = self->status;
    int bodyless = st < 200 || st == 204 || st == 304;
    if (length >= 0 && !bodyless) {
        int has_length = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (PS_SLICE_IEQ(hs[i].name, "content-length"))
                has_length = 1;
        if (!has_length) {
            int l = snprintf(length_text, sizeof(length_text), "%lld", (long long)length);
            hs[n].name = PS_SLICE_LIT("content-length");
            hs[n++].value = (ps_slice_t){length_text, (size_t)l};
        }
    }
    /* "%d %s" without snprintf (st is 100..999, checked by send_start) */
    const char *reason = ps_http_reason_phrase(st);
    size_t rl = PS_MIN(strlen(reason), sizeof(status_line) - 4);
    status_line[0] = (char)('0' + st / 100), status_line[1] = (char)('0' + st / 10 % 10);
    status_line[2] = (char)('0' + st % 10), status_line[3] = ' ';
    memcpy(status_line + 4, reason, rl);
    int sl = (int)(4 + rl);
    int rc =
        ps_exchange_start(self->x, (ps_slice_t){status_line, (size_t)sl}, hs, (size_t)n, body, len);
    if (hs != stack)
        PyMem_Free(hs);
    Py_DECREF(keep);
    if (rc == -EINVAL)
        PyErr_Format(PyExc_ValueError, "invalid status or header in http.response.start: %d %R", st,
                     self->headers);
    else
        self->head_sent = 1;
    return rc;
}

static PyObject *send_start(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.start sent twice");
        return NULL;
    }
    PyObject *status = PyDict_GetItemWithError(msg, ctx->s[S_STATUS]); /* borrowed */
    if (status == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "http.response.start needs a status");
        return NULL;
    }
    long code = PyLong_AsLong(status);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    if (code < 100 || code > 999) {
        PyErr_Format(PyExc_ValueError, "invalid status %ld", code);
        return NULL;
    }
    PyObject *headers = PyDict_GetItemWithError(msg, ctx->s[S_HEADERS]);
    if (headers == NULL && PyErr_Occurred())
        return NULL;
    PyObject *trailers = PyDict_GetItemWithError(msg, ctx->s[S_TRAILERS]);
    if (trailers == NULL && PyErr_Occurred())
        return NULL;
    self->status = (int)code;
    self->want_trailers = trailers != NULL && PyObject_IsTrue(trailers) == 1;
    Py_XSETREF(self->headers, headers ? Py_NewRef(headers) : PyList_New(0));
    if (self->headers == NULL)
        return NULL;
    self->started = 1;
    return ready(ctx, Py_NewRef(Py_None));
}

static int get_flag(ps_asgi_t *ctx, PyObject *msg, int key)
{
    PyObject *v = PyDict_GetItemWithError(msg, ctx->s[key]);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return PyObject_IsTrue(v);
}

/* The body is complete; with trailers announced (and accepted) the
 * response ends with the trailers message instead. */
static void body_finished(CycleObject *self)
{
    if (!(self->want_trailers && self->te_trailers))
        complete(self);
}

/* Sends the held body message's rest, x->write_piece bytes a call, while
 * the exchange takes them at once. Returns the last write's result
 * (PS_WRITE_PENDING with bytes left: on_writable resumes), or -errno;
 * -EINVAL with an exception set. Releases the buffer once all is sent. */
static int send_held(CycleObject *self)
{
    size_t piece = self->x->write_piece;
    int rc = PS_WRITE_DONE;
    while (self->held_off < self->held.len) {
        const char *p = (const char *)self->held.buf + self->held_off;
        size_t n = PS_MIN(piece, (size_t)(self->held.len - self->held_off));
        if (!self->head_sent)
            rc = send_head(self, p, n, self->held_length);
        else
            rc = ps_exchange_write(self->x, p, n);
        if (rc < 0)
            break;
        self->held_off += (Py_ssize_t)n;
        if (rc == PS_WRITE_PENDING && self->held_off < self->held.len)
            return rc;
    }
    PyBuffer_Release(&self->held);
    return rc;
}

static PyObject *send_body(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (!self->started) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.body before http.response.start");
        return NULL;
    }
    PyObject *body = PyDict_GetItemWithError(msg, ctx->s[S_BODY]);
    if (body == NULL && PyErr_Occurred())
        return NULL;
    if (body == NULL)
        body = ctx->empty_bytes;
    Py_buffer view;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int more = get_flag(ctx, msg, S_MORE_BODY);
    if (more < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int rc;
    /* A single body message: its size is the Content-Length. */
    int64_t length = more || (self->want_trailers && self->te_trailers) ? -1 : view.len;
    size_t piece = self->x->write_piece;
    if (piece && (size_t)view.len > piece) {
        /* In parts: send() completes once the last one is taken. */
        self->held = view;
        self->held_off = 0;
        self->held_length = length;
        self->held_more = more;
        rc = send_held(self);
        if (rc == PS_WRITE_PENDING && self->held.obj)
            return after_write(self, rc);
    } else if (!self->head_sent) {
        rc = send_head(self, view.buf, (size_t)view.len, length);
        PyBuffer_Release(&view);
    } else {
        rc = ps_exchange_write(self->x, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    if (rc == -EINVAL)
        return NULL;
    if (rc >= 0 && !more) {
        body_finished(self);
        rc = PS_WRITE_DONE; /* the rest is the connection's to flush */
    }
    return after_write(self, rc);
}

static PyObject *send_pathsend(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (!self->started || self->head_sent) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.pathsend must follow the start");
        return NULL;
    }
    PyObject *path = PyDict_GetItemWithError(msg, ctx->s[S_PATH_KEY]);
    PyObject *fspath = NULL;
    if (path == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "http.response.pathsend needs a path");
        return NULL;
    }
    if (!PyUnicode_FSConverter(path, &fspath))
        return NULL;
    int fd = open(PyBytes_AS_STRING(fspath), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        errno = errno ? errno : EINVAL;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        Py_DECREF(fspath);
        return NULL;
    }
    Py_DECREF(fspath);
    self->x->file_follows = 1; /* the head leaves with the file */
    int rc = send_head(self, NULL, 0, st.st_size);
    self->x->file_follows = 0; /* (send_head may fail before the start) */
    if (rc >= 0)
        rc = ps_exchange_sendfile(self->x, fd, 0, (uint64_t)st.st_size);
    if (rc == PS_WRITE_PENDING) {
        self->sendfile_fd = fd; /* closed, and the response completed, in on_writable */
        return after_write(self, rc);
    }
    close(fd);
    if (rc == -EINVAL)
        return NULL;
    if (rc >= 0)
        complete(self);
    return after_write(self, rc);
}

static PyObject *send_trailers(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (!self->want_trailers || !self->head_sent) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.trailers was not announced");
        return NULL;
    }
    if (!self->te_trailers) /* the client did not ask for trailers: drop them */
        return ready(ctx, Py_NewRef(Py_None));
    PyObject *headers = PyDict_GetItemWithError(msg, ctx->s[S_HEADERS]);
    if (headers == NULL && PyErr_Occurred())
        return NULL;
    int more = get_flag(ctx, msg, S_MORE_TRAILERS);
    if (more < 0)
        return NULL;
    if (more) {
        PyErr_SetString(PyExc_NotImplementedError, "more_trailers is not supported");
        return NULL;
    }
    ps_header_t stack[MAX_STACK_HEADERS], *hs = stack;
    PyObject *keep = NULL;
    Py_ssize_t n = headers ? view_headers(headers, &hs, MAX_STACK_HEADERS, 0, &keep) : 0;
    if (n < 0)
        return NULL;
    ps_exchange_t *x = self->x;
    Py_INCREF(self);
    self->complete = 1;
    if (ctx->access_log)
        ps_log_access(ctx->access_log, x, self->fwd_client, x->status, self->headers);
    detach(self);
    int rc = ps_exchange_end_with_trailers(x, hs, (size_t)n);
    if (hs != stack)
        PyMem_Free(hs);
    Py_XDECREF(keep);
    Py_DECREF(self);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, "invalid trailer field");
        return NULL;
    }
    return ready(ctx, Py_NewRef(Py_None));
}

static PyObject *send_early_hint(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (self->head_sent)
        return ready(ctx, Py_NewRef(Py_None));
    PyObject *links = PyDict_GetItemWithError(msg, ctx->s[S_LINKS]);
    if (links == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return ready(ctx, Py_NewRef(Py_None));
    }
    PyObject *seq = PySequence_Fast(links, "links must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    ps_header_t stack[MAX_STACK_HEADERS], *hs = stack;
    PyObject *rv = NULL;
    if ((size_t)n > MAX_STACK_HEADERS && (hs = PyMem_Malloc((size_t)n * sizeof(*hs))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *link = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len;
        const char *s;
        if (PyBytes_Check(link)) { /* the spec's type; str is accepted too */
            s = PyBytes_AS_STRING(link);
            len = PyBytes_GET_SIZE(link);
        } else if ((s = PyUnicode_AsUTF8AndSize(link, &len)) == NULL) {
            goto done;
        }
        hs[i].name = PS_SLICE_LIT("Link");
        hs[i].value = (ps_slice_t){s, (size_t)len};
    }
    int rc = ps_exchange_informational(self->x, PS_SLICE_LIT("103 Early Hints"), hs, (size_t)n);
    rv = after_write(self, rc == -EINVAL ? PS_WRITE_DONE : rc);
done:
    if (hs != stack)
        PyMem_Free(hs);
    Py_DECREF(seq);
    return rv;
}

static PyObject *Cycle_send(PyObject *op, PyObject *msg)
{
    CycleObject *self = (CycleObject *)op;
    ps_asgi_t *ctx = self->ctx;
    if (!PyDict_Check(msg)) {
        PyErr_SetString(PyExc_TypeError, "send() takes a message dict");
        return NULL;
    }
    PyObject *type = PyDict_GetItemWithError(msg, ctx->s[S_TYPE]); /* borrowed */
    if (type == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "the message has no type");
        return NULL;
    }
    if (!PyUnicode_Check(type)) { /* else each PyUnicode_Compare below would raise */
        PyErr_Format(PyExc_TypeError, "the message type must be str, not %.100s",
                     Py_TYPE(type)->tp_name);
        return NULL;
    }
    if (self->ws)
        return ps_asgi_ws_send(self->ws, type, msg);
    if (self->complete) {
        /* Trailers the client never asked for were dropped with the body. */
        if (self->want_trailers && !self->te_trailers &&
            PyUnicode_Compare(type, ctx->s[S_RESPONSE_TRAILERS]) == 0)
            return ready(ctx, Py_NewRef(Py_None));
        PyErr_Format(PyExc_RuntimeError, "%R sent after the response completed", type);
        return NULL;
    }
    if (self->x == NULL) {
        PyErr_SetString(ctx->disconnected, "the client disconnected");
        return NULL;
    }
    PyObject **s = ctx->s;
    if (PyUnicode_Compare(type, s[S_RESPONSE_BODY]) == 0)
        return send_body(self, msg);
    if (PyUnicode_Compare(type, s[S_RESPONSE_START]) == 0)
        return send_start(self, msg);
    if (PyUnicode_Compare(type, s[S_RESPONSE_PATHSEND]) == 0)
        return send_pathsend(self, msg);
    if (PyUnicode_Compare(type, s[S_RESPONSE_TRAILERS]) == 0)
        return send_trailers(self, msg);
    if (PyUnicode_Compare(type, s[S_RESPONSE_EARLY_HINT]) == 0)
        return send_early_hint(self, msg);
    if (PyErr_Occurred())
        return NULL;
    PyErr_Format(PyExc_RuntimeError, "unexpected ASGI message type %R", type);
    return NULL;
}

/* The application's coroutine ended: exc is what it raised (NULL when it
 * returned, or when it was cancelled). Whatever it left undone is answered:
 * a 500 when nothing was sent, else the connection closes. */
static void app_finished(CycleObject *self, PyObject *exc, int cancelled)
{
    ps_asgi_t *ctx = self->ctx;
    ps_exchange_t *x = self->x;
    if (ctx->active > 0)
        ctx->active--;
    if (exc != NULL) {
        /* A send() after the client's close (a WebSocket's race, too) is not the
         * application's error. */
        int quiet =
            (self->disconnected || self->ws) && PyErr_GivenExceptionMatches(exc, ctx->disconnected);
        if (!quiet) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            if (x) {
                ps_request_t *r = x->req;
                ps_log_exception(ctx->error_logger, "Exception in ASGI application (%.*s %.*s)",
                                 (int)r->method.len, r->method.base,
                                 (int)PS_MIN(r->target.len, 200), r->target.base);
            } else {
                ps_log_exception(ctx->error_logger, "Exception in ASGI application");
            }
        }
    } else if (x && !self->complete && !cancelled && !(self->ws && ps_asgi_ws_accepted(self->ws))) {
        ps_request_t *r = x->req;
        ps_log_error(ctx->error_logger,
                     "ASGI application returned without %s the response (%.*s %.*s)",
                     self->head_sent ? "completing" : "starting", (int)r->method.len,
                     r->method.base, (int)PS_MIN(r->target.len, 200), r->target.base);
    }
    if (x != NULL && !self->complete) {
        Py_INCREF(self);
        /* An accepted WebSocket closes (1000, or 1011 after an exception). */
        int closed = self->ws && ps_asgi_ws_finished(self->ws, exc != NULL);
        /* Every answered request gets its access line: the 500 written here, or
         * the status of a response cut short. */
        if (!closed && ctx->access_log)
            ps_log_access(ctx->access_log, x, self->fwd_client, self->head_sent ? x->status : 500,
                          self->headers);
        detach(self);
        if (closed)
            ; /* the connection finishes the close handshake by itself */
        else if (self->head_sent)
            ps_exchange_abort(x);
        else
            ps_exchange_send_error(x, 500);
        Py_DECREF(self);
    }
    PyErr_Clear();
}

/* ---- the coroutine the task runs ----
 *
 * The task steps an AppCall, which steps the application's coroutine and,
 * when it ends, finishes the request in that same step: no done callback,
 * so no second trip through call_soon per request. An exception the
 * application raised is logged and answered here, so the task itself ends
 * cleanly; cancellation is passed on so the task shows as cancelled. */
typedef struct {
    PyObject_HEAD PyObject *inner; /* the application's coroutine, NULL once it ended */
    CycleObject *cycle;
    PyObject *task; /* borrowed: the task stepping this, in ctx->tasks until the end */
} AppCallObject;

/* asyncio keeps only weak references to tasks: a request task waiting on a
 * future that nothing else holds (a StreamReader's waiter: its protocol
 * holds the reader weakly) would be collected mid-request. ctx->tasks holds
 * each one until its application ends; this lets it go. */
static void release_task(AppCallObject *self)
{
    PyObject *task = self->task;
    ps_asgi_t *ctx = self->cycle->ctx;
    self->task = NULL;
    if (task != NULL && ctx->tasks != NULL && PySet_Discard(ctx->tasks, task) < 0)
        PyErr_WriteUnraisable(task);
}

/* Ends the application's run after a step that did not yield. */
static PySendResult appcall_ended(AppCallObject *self, PySendResult r, PyObject **result)
{
    CycleObject *cycle = self->cycle;
    Py_CLEAR(self->inner);
    release_task(self);
    if (r == PYGEN_RETURN) {
        app_finished(cycle, NULL, 0);
        return r;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    int cancelled = value && PyErr_GivenExceptionMatches(value, cycle->ctx->cancelled_error);
    app_finished(cycle, cancelled ? NULL : value, cancelled);
    if (cancelled) {
        PyErr_Restore(type, value, tb);
        return PYGEN_ERROR;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PySendResult AppCall_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    AppCallObject *self = (AppCallObject *)op;
    if (self->inner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
    PySendResult r = PyIter_Send(self->inner, arg, result);
    return r == PYGEN_NEXT ? r : appcall_ended(self, r, result);
}

/* The Python face of a send result: a yielded value, or StopIteration. */
static PyObject *send_result(PySendResult r, PyObject *result)
{
    if (r == PYGEN_NEXT)
        return result;
    if (r == PYGEN_RETURN) {
        if (result == Py_None) {
            PyErr_SetNone(PyExc_StopIteration);
        } else {
            PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
            if (stop) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
        }
        Py_DECREF(result);
    }
    return NULL;
}

static PyObject *AppCall_send(PyObject *op, PyObject *arg)
{
    PyObject *result = NULL;
    PySendResult r = AppCall_am_send(op, arg, &result);
    return send_result(r, result);
}

static PyObject *AppCall_iternext(PyObject *op)
{
    return AppCall_send(op, Py_None);
}

static PyObject *AppCall_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    AppCallObject *self = (AppCallObject *)op;
    if (self->inner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *meth = PyObject_GetAttrString(self->inner, "throw");
    if (meth == NULL)
        return NULL;
    PyObject *yielded = PyObject_Vectorcall(meth, args, (size_t)nargs, NULL);
    Py_DECREF(meth);
    if (yielded != NULL)
        return yielded;
    PyObject *result = NULL;
    PySendResult r = PYGEN_ERROR;
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        result = value ? PyObject_GetAttrString(value, "value") : Py_NewRef(Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (result == NULL)
            return NULL;
        r = PYGEN_RETURN;
    }
    r = appcall_ended(self, r, &result);
    return send_result(r, result);
}

static PyObject *AppCall_close(PyObject *op, PyObject *unused)
{
    AppCallObject *self = (AppCallObject *)op;
    PS_UNUSED(unused);
    if (self->inner == NULL)
        Py_RETURN_NONE;
    PyObject *res = PyObject_CallMethod(self->inner, "close", NULL);
    Py_CLEAR(self->inner);
    release_task(self);
    app_finished(self->cycle, NULL, 1);
    return res;
}

static int AppCall_traverse(PyObject *op, visitproc visit, void *arg)
{
    AppCallObject *self = (AppCallObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->inner);
    Py_VISIT(self->cycle);
    return 0;
}

static int AppCall_clear(PyObject *op)
{
    AppCallObject *self = (AppCallObject *)op;
    Py_CLEAR(self->inner);
    Py_CLEAR(self->cycle);
    return 0;
}

static void AppCall_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    AppCall_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef AppCall_methods[] = {
    {"send", AppCall_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))AppCall_throw, METH_FASTCALL, NULL},
    {"close", AppCall_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot AppCall_slots[] = {
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, AppCall_am_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, AppCall_iternext},
    {Py_tp_methods, AppCall_methods},
    {Py_tp_traverse, AppCall_traverse},
    {Py_tp_clear, AppCall_clear},
    {Py_tp_dealloc, AppCall_dealloc},
    {0, NULL},
};

static PyType_Spec AppCall_spec = {
    .name = "pyserver._core.AppCall",
    .basicsize = sizeof(AppCallObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = AppCall_slots,
};

static PyMethodDef receive_def = {"receive", Cycle_receive, METH_NOARGS, "ASGI receive()"};
static PyMethodDef send_def = {"send", Cycle_send, METH_O, "ASGI send(message)"};

static int Cycle_traverse(PyObject *op, visitproc visit, void *arg)
{
    CycleObject *self = (CycleObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->receive_waiter);
    Py_VISIT(self->send_waiter);
    Py_VISIT(self->headers);
    Py_VISIT(self->held.obj);
    if (self->ws)
        return ps_asgi_ws_traverse(self->ws, visit, arg);
    return 0;
}

static int Cycle_clear(PyObject *op)
{
    CycleObject *self = (CycleObject *)op;
    Py_CLEAR(self->receive_waiter);
    Py_CLEAR(self->send_waiter);
    Py_CLEAR(self->headers);
    if (self->held.obj)
        PyBuffer_Release(&self->held);
    if (self->ws)
        ps_asgi_ws_clear(self->ws);
    return 0;
}

static void Cycle_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    CycleObject *self = (CycleObject *)op;
    PyObject_GC_UnTrack(op);
    if (self->sendfile_fd >= 0)
        close(self->sendfile_fd);
    Cycle_clear(op);
    ps_asgi_ws_free(self->ws);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot Cycle_slots[] = {
    {Py_tp_traverse, Cycle_traverse},
    {Py_tp_clear, Cycle_clear},
    {Py_tp_dealloc, Cycle_dealloc},
    {0, NULL},
};

static PyType_Spec Cycle_spec = {
    .name = "pyserver._core.HTTPCycle",
    .basicsize = sizeof(CycleObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Cycle_slots,
};

/* ---- for asgi_ws.c (asgi_ws.h) ---- */

PyObject *ps_asgi_ready(ps_asgi_t *ctx, PyObject *value)
{
    return ready(ctx, value);
}

PyObject *ps_asgi_waiter(ps_asgi_t *ctx, PyObject **slot)
{
    return waiter(ctx, slot);
}

int ps_asgi_resolve(ps_asgi_t *ctx, PyObject **slot, PyObject *value, int as_exception)
{
    return resolve(ctx, slot, value, as_exception);
}

void ps_asgi_fail_waiter(ps_asgi_t *ctx, PyObject **slot)
{
    fail_waiter(ctx, slot);
}

PyObject *ps_asgi_disconnected_error(ps_asgi_t *ctx)
{
    return ctx->disconnected;
}

struct ps_asgi_ws_strings **ps_asgi_ws_strings_slot(ps_asgi_t *ctx)
{
    return &ctx->ws_strings;
}

Py_ssize_t ps_asgi_view_headers(PyObject *headers, ps_header_t **hs, size_t room, PyObject **keep)
{
    return view_headers(headers, hs, room, 0, keep);
}

void ps_asgi_cycle_log(PyObject *cycle, int status)
{
    CycleObject *self = (CycleObject *)cycle;
    if (self->ctx->access_log && self->x)
        ps_log_access(self->ctx->access_log, self->x, self->fwd_client, status, self->headers);
}

void ps_asgi_cycle_refuse(PyObject *cycle, int status)
{
    CycleObject *self = (CycleObject *)cycle;
    ps_exchange_t *x = self->x;
    if (x == NULL)
        return;
    ps_asgi_cycle_log(cycle, status);
    self->complete = 1;
    Py_INCREF(self);
    detach(self);
    ps_exchange_send_error(x, status);
    Py_DECREF(self);
}

PyObject *ps_asgi_cycle_deny(PyObject *cycle, PyObject *msg, int start)
{
    CycleObject *self = (CycleObject *)cycle;
    if (self->complete) {
        PyErr_SetString(PyExc_RuntimeError, "the denial response is already complete");
        return NULL;
    }
    if (self->x == NULL) {
        PyErr_SetString(self->ctx->disconnected, "the client disconnected");
        return NULL;
    }
    return start ? send_start(self, msg) : send_body(self, msg);
}

/* ---- connection callbacks ---- */

/* ---- the task's first step, at once ----
 *
 * A request's task takes its first step from the connection's callback,
 * not at the loop's next turn (what Python 3.12 calls an eager task). The
 * response of an application that waits for nothing is out before the
 * next connection's request is parsed, and its objects are freed before
 * that request's are made: no trip through the ready queue, and under load
 * far fewer garbage collections (the objects of a whole batch of requests
 * no longer pile up between two turns of the loop). The task is the
 * current task during that step, as during any other. Python 3.12 and
 * later: Task(eager_start=True). Before: the step Task() schedules is taken
 * from the loop's call_soon() and run (not in asyncio's debug mode, where
 * asyncio's own call_soon() queues it).
 *
 * Never from inside another task's step (a pipelined request parsed after a
 * send() completed the one before it): that request's task waits for the
 * next turn, so steps never nest. Nor for a WebSocket, whose handshake
 * belongs to the loop's turn. */
static int may_step_now(ps_asgi_t *ctx)
{
    if (ctx->current_tasks != NULL) { /* asyncio's own {loop: task}: no Python frame */
        PyObject *task = PyDict_GetItemWithError(ctx->current_tasks, ctx->loop); /* borrowed */
        if (task == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return task == NULL;
    }
    if (ctx->current_task == NULL)
        return 0;
    PyObject *task = PyObject_CallOneArg(ctx->current_task, ctx->loop);
    if (task == NULL) {
        PyErr_Clear();
        return 0;
    }
    int idle = task == Py_None;
    Py_DECREF(task);
    return idle;
}

static PyObject *reraise(PyObject *unused, PyObject *exc)
{
    PS_UNUSED(unused);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    return NULL;
}

static PyMethodDef reraise_def = {"reraise", reraise, METH_O, "Raises its argument."};

/* The exception set, raised by a step run from a connection callback, goes
 * to the loop, which raises it at its next turn, where it would have met a
 * step of its own: SystemExit and KeyboardInterrupt end run_forever(),
 * another goes to the loop's exception handler. Clears it. */
static void defer_exception(ps_asgi_t *ctx)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *r = value ? PyObject_CallMethodObjArgs(ctx->loop, ctx->s[S_CALL_SOON], ctx->reraise,
                                                     value, NULL)
                        : NULL;
    if (r == NULL)
        PyErr_WriteUnraisable(ctx->loop);
    Py_XDECREF(r);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Before Python 3.12: the first step Task() scheduled, taken from the
 * loop's call_soon() (evselector.c), runs here. */
static void run_taken_step(ps_asgi_t *ctx, ps_step_capture_t *cap)
{
    PyObject *step = cap->callback, *context = cap->context;
    cap->callback = cap->context = NULL;
    if (PyContext_Enter(context) == 0) {
        PyObject *r = PyObject_CallNoArgs(step);
        if (PyContext_Exit(context) < 0)
            Py_CLEAR(r);
        if (r == NULL)
            defer_exception(ctx);
        Py_XDECREF(r);
    } else {
        defer_exception(ctx);
    }
    Py_DECREF(step);
    Py_DECREF(context);
}

static int start_task(ps_asgi_t *ctx, ps_exchange_t *x, CycleObject *cycle,
                      const ps_proxy_result_t *fwd)
{
    PyObject *scope = NULL, *receive = NULL, *send = NULL, *coro = NULL, *task = NULL;
    AppCallObject *call = NULL;
    int rc = -1;
    scope = build_scope(ctx, x, cycle, fwd);
    if (scope == NULL)
        goto error;
    receive = PyCFunction_New(&receive_def, (PyObject *)cycle);
    send = PyCFunction_New(&send_def, (PyObject *)cycle);
    if (receive == NULL || send == NULL)
        goto error;
    PyObject *args[3] = {scope, receive, send};
    coro = PyObject_Vectorcall(ctx->app, args, 3, NULL);
    if (coro == NULL)
        goto error;
    call = (AppCallObject *)ctx->st->appcall_type->tp_alloc(ctx->st->appcall_type, 0);
    if (call == NULL)
        goto error;
    call->inner = Py_NewRef(coro);
    call->cycle = (CycleObject *)Py_NewRef(cycle);
    /* asyncio.Task(call, loop=loop, context=...) directly: loop.create_task
     * adds only a Python frame around the same call. Each task gets a copy
     * of the context the server started in, not of the current one: a
     * request parsed while another request's task runs (the one before it
     * on the connection, completed by its send()) must not inherit what that
     * request set in its context variables. */
    int now = cycle->ws == NULL && may_step_now(ctx);
    /* Before 3.12, armed while Task() runs: the first step it schedules. */
    ps_step_capture_t taken = {ctx->loop, NULL, NULL};
    ctx->active++; /* before the step: the application may end in it */
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *context = PyContext_Copy(ctx->base_context);
    if (context == NULL) {
        ctx->active--;
        goto error;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (now) {
        PyObject *targs[4] = {(PyObject *)call, ctx->loop, Py_True, context};
        task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->eager_kwnames);
    } else
#endif
    {
        PyObject *targs[3] = {(PyObject *)call, ctx->loop, context};
        ctx->st->step_capture = now ? &taken : NULL;
        task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->task_kwnames);
        ctx->st->step_capture = NULL;
    }
    Py_DECREF(context);
#else /* 3.10: the task copies the current context */
    if (PyContext_Enter(ctx->base_context) < 0) {
        ctx->active--;
        goto error;
    }
    PyObject *targs[2] = {(PyObject *)call, ctx->loop};
    ctx->st->step_capture = now ? &taken : NULL;
    task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->task_kwnames);
    ctx->st->step_capture = NULL;
    if (PyContext_Exit(ctx->base_context) < 0)
        Py_CLEAR(task);
#endif
    /* never to run: Task() failed after scheduling it */
    if (task == NULL && taken.callback != NULL) {
        Py_CLEAR(taken.callback);
        Py_CLEAR(taken.context);
    }
    if (task == NULL) {
        /* Only a step can raise what must reach the loop's caller. */
        if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
            PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
            defer_exception(ctx);
        if (call->inner == NULL) { /* the request is over */
            PyErr_Clear();
            rc = 0;
            goto error;
        }
        ctx->active--;
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the request's task was interrupted");
        goto error;
    }
    if (call->inner != NULL) { /* still to run, or waiting (after an eager first step) */
        if (PySet_Add(ctx->tasks, task) == 0)
            call->task = task;
        else /* out of memory: it runs unprotected, as a plain asyncio task would */
            PyErr_WriteUnraisable(task);
    }
    if (taken.callback != NULL)
        run_taken_step(ctx, &taken);
    rc = 0;
error:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(coro);
    Py_XDECREF(call);
    Py_XDECREF(task);
    return rc;
}

static void on_request(ps_exchange_t *x)
{
    ps_asgi_t *ctx = x->handler_data;
    if (ctx->access_log)
        x->log_start = ps_alog_clock();
    ps_proxy_result_t fwd;
    if (ps_py_forwarded(x, &fwd) < 0)
        return;
    /* Like uvicorn: tasks in progress or open connections (this one
     * included) over the limit. */
    uint32_t limit = ctx->limit_concurrency;
    if (limit && (ctx->active >= limit || ps_worker_connections(x->worker) > limit)) {
        ps_exchange_reject(x, 503, "concurrency limit reached");
        return;
    }
    ps_ws_handshake_t hs;
    int upgrade = PS_WS_HS_NONE;
    if (x->req->upgrade && ps_worker_config(x->worker)->ws_enabled &&
        (upgrade = ps_wsconn_check(x, &hs)) < 0)
        return; /* refused with a 400 or 426 */
    CycleObject *cycle = (CycleObject *)ctx->st->cycle_type->tp_alloc(ctx->st->cycle_type, 0);
    if (cycle == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a request");
        ps_exchange_send_error(x, 500);
        return;
    }
    cycle->ctx = ctx;
    cycle->x = x;
    cycle->sendfile_fd = -1;
    x->app_data = cycle; /* the connection's reference */
    if (upgrade == PS_WS_HS_OK &&
        (cycle->ws = ps_asgi_ws_new(ctx, (PyObject *)cycle, x, &hs)) == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a WebSocket");
        detach(cycle);
        ps_exchange_send_error(x, 500);
        return;
    }
    if (start_task(ctx, x, cycle, &fwd) < 0) {
        ps_log_exception(ctx->error_logger, "Exception in ASGI application (%.*s %.*s)",
                         (int)x->req->method.len, x->req->method.base,
                         (int)PS_MIN(x->req->target.len, 200), x->req->target.base);
        if (ctx->access_log)
            ps_log_access(ctx->access_log, x, fwd.client, 500, NULL);
        detach(cycle);
        ps_exchange_send_error(x, 500);
    }
}

static void on_body(ps_exchange_t *x)
{
    CycleObject *cycle = x->app_data;
    if (cycle == NULL || cycle->receive_waiter == NULL)
        return;
    PyObject *m = body_message(cycle, x);
    if (m == NULL) {
        PyErr_Clear();
        return;
    }
    resolve(cycle->ctx, &cycle->receive_waiter, m, 0);
    Py_DECREF(m);
}

static void on_writable(ps_exchange_t *x)
{
    CycleObject *cycle = x->app_data;
    if (cycle == NULL)
        return;
    Py_INCREF(cycle);
    if (cycle->held.obj) {
        int more = cycle->held_more, rc = send_held(cycle);
        if (rc < 0) { /* the stream is gone: the disconnect follows */
            if (cycle->held.obj)
                PyBuffer_Release(&cycle->held);
            ps_exchange_abort(x);
            Py_DECREF(cycle);
            return;
        }
        if (cycle->held.obj) { /* more parts wait for the next on_writable */
            Py_DECREF(cycle);
            return;
        }
        if (!more)
            body_finished(cycle);
    }
    resolve(cycle->ctx, &cycle->send_waiter, Py_None, 0);
    if (cycle->sendfile_fd >= 0) {
        close(cycle->sendfile_fd);
        cycle->sendfile_fd = -1;
        complete(cycle);
    }
    Py_DECREF(cycle);
}

static void on_disconnect(ps_exchange_t *x)
{
    if (x->app_data)
        lose(x->app_data);
}

static void dispose(ps_exchange_t *x)
{
    if (x->app_data)
        lose(x->app_data);
    ps_py_addresses_free(x);
}

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    ps_asgi_t *ctx = x->handler_data;
    ps_rejects_log(&ctx->rejects, x, status, reason);
}

/* A --static file the core answered: its access line (the client is the
 * peer: forwarded headers are not read for it). */
static void on_served(ps_exchange_t *x, int status)
{
    ps_asgi_t *ctx = x->handler_data;
    if (ctx->access_log)
        ps_log_access(ctx->access_log, x, ps_py_served_client(x), status, NULL);
}

static void on_refused(ps_exchange_t *x, const char *reason)
{
    ps_asgi_t *ctx = x->handler_data;
    ps_py_log_refused(ctx->error_logger, &ctx->refusals, x, reason);
}

const ps_handler_t ps_asgi_handler = {
    .on_request = on_request,
    .on_writable = on_writable,
    .on_disconnect = on_disconnect,
    .dispose = dispose,
    .on_body = on_body,
    .on_rejected = on_rejected,
    .on_refused = on_refused,
    .on_served = on_served,
    .async = 1,
};

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

/* What each scope starts as, a copy of: the keys build_scope() sets, in
 * its order, so that filling them in never resizes the dict. Returns 0 or
 * -1 with an exception. */
static int make_scope_template(ps_asgi_t *ctx)
{
    static const int keys[] = {S_TYPE,   S_ASGI,     S_HTTP_VERSION, S_METHOD,    S_SCHEME,
                               S_PATH,   S_RAW_PATH, S_QUERY_STRING, S_ROOT_PATH, S_HEADERS,
                               S_CLIENT, S_SERVER,   S_EXTENSIONS};
    PyObject *t = PyDict_New();
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < PS_ARRAY_LEN(keys); i++)
        if (PyDict_SetItem(t, ctx->s[keys[i]], keys[i] == S_TYPE ? ctx->s[S_HTTP] : Py_None) < 0)
            goto error;
    if (ctx->state && PyDict_SetItem(t, ctx->s[S_STATE], Py_None) < 0)
        goto error;
    Py_XSETREF(ctx->scope_template, t);
    return 0;
error:
    Py_DECREF(t);
    return -1;
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
    Py_XSETREF(ctx->task_type, PyObject_GetAttrString(asyncio, "Task"));
    Py_XSETREF(ctx->cancelled_error, PyObject_GetAttrString(asyncio, "CancelledError"));
    Py_XSETREF(ctx->current_task, PyObject_GetAttrString(asyncio, "current_task"));
    if (ctx->cancelled_error == NULL || ctx->current_task == NULL) {
        Py_DECREF(asyncio);
        return NULL;
    }
    PyObject *tasks = PyObject_GetAttrString(asyncio, "tasks");
    PyObject *current = tasks ? PyObject_GetAttrString(tasks, "_current_tasks") : NULL;
    Py_XDECREF(tasks);
    PyErr_Clear(); /* a Python without it: current_task() is asked */
    Py_XSETREF(ctx->current_tasks,
               current && PyDict_CheckExact(current) ? Py_NewRef(current) : NULL);
    Py_XDECREF(current);
    Py_DECREF(asyncio);
#if PY_VERSION_HEX >= 0x030B0000
    Py_XSETREF(ctx->task_kwnames, PyTuple_Pack(2, ctx->s[S_LOOP], ctx->s[S_CONTEXT_KW]));
#else
    Py_XSETREF(ctx->task_kwnames, PyTuple_Pack(1, ctx->s[S_LOOP]));
#endif
    Py_XSETREF(ctx->eager_kwnames,
               PyTuple_Pack(3, ctx->s[S_LOOP], ctx->s[S_EAGER_START], ctx->s[S_CONTEXT_KW]));
    Py_XSETREF(ctx->reraise, PyCFunction_New(&reraise_def, NULL));
    Py_XSETREF(ctx->base_context, PyContext_CopyCurrent());
    if (ctx->task_type == NULL || ctx->task_kwnames == NULL || ctx->eager_kwnames == NULL ||
        ctx->reraise == NULL || ctx->base_context == NULL)
        return NULL;
    Py_XSETREF(ctx->state, args[1] == Py_None ? NULL : Py_NewRef(args[1]));
    if (ctx->state && !PyDict_Check(ctx->state)) {
        PyErr_SetString(PyExc_TypeError, "state must be a dict");
        return NULL;
    }
    if (make_scope_template(ctx) < 0)
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
    st->cycle_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Cycle_spec, NULL);
    st->ready_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Ready_spec, NULL);
    st->server_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Server_spec, NULL);
    st->appcall_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &AppCall_spec, NULL);
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
