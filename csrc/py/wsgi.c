/* The WSGI layer (PEP 3333): environ, start_response, wsgi.input,
 * wsgi.errors, wsgi.file_wrapper and the response iteration.
 *
 * The application runs on the worker's loop thread. A response iterable is
 * pulled one item at a time; when the socket is full the pull stops and
 * resumes from on_writable, so a slow client never makes the server hold
 * more than one item of output.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "bridge.h"

#include <structmember.h>

#define MAX_STACK_HEADERS 32

enum {
    K_REQUEST_METHOD,
    K_SCRIPT_NAME,
    K_PATH_INFO,
    K_QUERY_STRING,
    K_CONTENT_TYPE,
    K_CONTENT_LENGTH,
    K_SERVER_NAME,
    K_SERVER_PORT,
    K_SERVER_PROTOCOL,
    K_REMOTE_ADDR,
    K_REMOTE_PORT,
    K_RAW_URI,
    K_WSGI_INPUT,
    K_URL_SCHEME,
    K_COUNT
};

static const char *const key_names[K_COUNT] = {
    "REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO",   "QUERY_STRING",    "CONTENT_TYPE",
    "CONTENT_LENGTH", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "REMOTE_ADDR",
    "REMOTE_PORT",    "RAW_URI",     "wsgi.input",  "wsgi.url_scheme",
};

struct ps_wsgi {
    ps_module_state_t *st;
    PyObject *app;
    PyObject *base_environ;
    PyObject *error_logger;
    ps_access_log_t *access_log; /* NULL when off (borrowed from the settings) */
    ps_rejects_t rejects;
    ps_py_refusals_t refusals;  /* PROXY protocol failures logged (request.c) */
    uint32_t limit_concurrency; /* open connections above it get 503 (0: no limit) */
    PyObject *keys[K_COUNT];
    PyObject *protocols[3]; /* "HTTP/1.0", "HTTP/1.1", "HTTP/2" */
    PyObject *empty;
    PyObject *close_name; /* "close", interned: the type's method cache hits */
    PyObject *comma;
    PyObject *zero;       /* "0": REMOTE_PORT of a forwarded client */
    PyObject *schemes[3]; /* by PS_SCHEME_*: NULL, "http", "https" */
    char *root_path;      /* UTF-8, no trailing slash */
    size_t root_path_len;
    ps_py_cache_t cache; /* methods, header names */
    /* --threads N > 1 (see "the thread pool" below); pool NULL otherwise. */
    uint32_t nthreads;
    ps_pool_t *pool;
    pthread_mutex_t mu;                   /* the jobs' shared fields, ready */
    pthread_cond_t moved;                 /* one of those changed: waiting threads re-check */
    struct wsgi_job *ready;               /* results for the loop (under mu) */
    struct wsgi_job *waiting, *wait_tail; /* requests no thread took yet (loop) */
    uint32_t waiters;                     /* threads waiting on moved (under mu) */
    /* Finished jobs kept for the next requests (a malloc and a free from
     * two threads per request less): pushed by any thread, taken by the
     * loop a whole list at a time; free_count bounds them by JOB_CACHE. */
    struct wsgi_job *free_shared; /* atomic */
    struct wsgi_job *free_local;  /* loop */
    uint32_t free_count;          /* atomic: jobs in both lists */
    double write_wait;            /* the longest a thread waits for its output to drain */
    double timeout;               /* the watchdog's --timeout under a master, else 0 */
    struct ev_loop *loop;
    ev_timer watchdog;
    unsigned abandoned : 1; /* a thread outlived the worker: ctx stays allocated */
};

typedef struct RequestObject {
    PyObject_HEAD vectorcallfunc vectorcall;
    ps_exchange_t *x; /* NULL once the request is over */
    ps_wsgi_t *ctx;
    PyObject *status;
    PyObject *headers;
    PyObject *result;      /* what the application returned: close() is called on it */
    PyObject *iter;        /* iterator over result, NULL for lists and tuples */
    Py_ssize_t index;      /* next item when result is a list or tuple */
    PyObject *input;       /* the wsgi.input object */
    ps_slice_t fwd_client; /* a forwarded client as sent, for the access log (into the request) */
    int64_t known_length;  /* body length known up front, or -1 */
    int64_t given_length;  /* the Content-Length the application gave, or -1 */
    int sendfile_fd;       /* >= 0 while a file_wrapper is being sent */
    PyObject *item;        /* a response item part sent (send_item), or NULL */
    Py_ssize_t item_off;   /* where the rest of item starts */
    unsigned headers_sent : 1;
    unsigned done : 1;
    /* On a pool thread (--threads): what it shares with the loop. x is
     * then the thread's view (GIL), and headers_sent says the head was
     * posted. */
    struct wsgi_job *job;
} RequestObject;

typedef struct {
    PyObject_HEAD ps_exchange_t *x; /* NULL once the request is over */
    ps_wsgi_t *ctx;
} InputObject;

typedef struct {
    PyObject_HEAD PyObject *logger;
    int level;       /* config.wsgi_errors_level: lines are logged at it, as they are */
    PyObject *write; /* or, when set, the text goes to it as it comes (gunicorn's way) */
} ErrorsObject;

typedef struct {
    PyObject_HEAD PyObject *filelike;
    Py_ssize_t blksize;
} FileWrapperObject;

static void request_done(RequestObject *req);

/* A Content-Length value: its digits, or -1 when it is not one (the core refuses those). */
static int64_t decimal(ps_slice_t s)
{
    int64_t v = 0;
    if (s.len == 0 || s.len > 18)
        return -1;
    for (size_t i = 0; i < s.len; i++) {
        if (s.base[i] < '0' || s.base[i] > '9')
            return -1;
        v = v * 10 + (s.base[i] - '0');
    }
    return v;
}

/* ---- helpers ---- */

/* A str of code points below 256 as its latin-1 bytes, without copying.
 * Returns 0, or -1 with an exception. */
static int latin1_view(PyObject *s, const char *what, ps_slice_t *out)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(s)->tp_name);
        return -1;
    }
    if (PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND) {
        PyErr_Format(PyExc_ValueError, "%s must be latin-1: %R", what, s);
        return -1;
    }
    out->base = (const char *)PyUnicode_1BYTE_DATA(s);
    out->len = (size_t)PyUnicode_GET_LENGTH(s);
    return 0;
}

static PyObject *latin1(const char *s, size_t n)
{
    return PyUnicode_DecodeLatin1(s, (Py_ssize_t)n, NULL);
}

/* ---- environ ---- */

static PyObject *port_str(int port)
{
    return PyUnicode_FromFormat("%d", port);
}

/* Adds one header, joining a repeated one with ", ". Returns 0 or -1. */
static int add_header(ps_wsgi_t *ctx, PyObject *env, const ps_header_t *h)
{
    PyObject *key = ps_py_header_name(&ctx->cache, h->name);
    if (key == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *value = latin1(h->value.base, h->value.len);
    int rc = -1;
    if (value == NULL)
        goto done;
    PyObject *old = PyDict_SetDefault(env, key, value); /* borrowed */
    if (old == NULL)
        goto done;
    rc = 0;
    if (old != value) {
        PyObject *joined = PyUnicode_FromFormat("%U, %U", old, value);
        rc = joined ? PyDict_SetItem(env, key, joined) : -1;
        Py_XDECREF(joined);
    }
done:
    Py_DECREF(key);
    Py_XDECREF(value);
    return rc;
}

static int set_item(PyObject *env, PyObject *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(env, key, value);
    Py_DECREF(value);
    return rc;
}

/* PATH_INFO (percent-decoded, latin-1, minus the root path), QUERY_STRING
 * and RAW_URI from the request target. Returns 0 or -1. */
static int add_target(ps_wsgi_t *ctx, PyObject *env, ps_slice_t target)
{
    ps_slice_t path_s, query_s;
    ps_http_split_target(target, &path_s, &query_s);
    const char *path = path_s.base, *query = query_s.base;
    const char *path_end = path + path_s.len, *query_end = query + query_s.len;
    size_t plen = (size_t)(path_end - path);
    char stack[1024];
    char *decoded = plen < sizeof(stack) ? stack : PyMem_Malloc(plen + 1);
    if (decoded == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t dlen = ps_http_percent_decode(path, plen, decoded);
    size_t skip = 0;
    size_t rl = ctx->root_path_len;
    if (rl && dlen >= rl && memcmp(decoded, ctx->root_path, rl) == 0 &&
        (dlen == rl || decoded[rl] == '/'))
        skip = rl;
    if (plen == 0) {
        decoded[0] = '/'; /* absolute-form without a path means "/" */
        dlen = 1;
    }
    int rc = set_item(env, ctx->keys[K_PATH_INFO], latin1(decoded + skip, dlen - skip));
    if (decoded != stack)
        PyMem_Free(decoded);
    if (rc < 0)
        return -1;
    if (query_end > query)
        rc = set_item(env, ctx->keys[K_QUERY_STRING], latin1(query, (size_t)(query_end - query)));
    else
        rc = PyDict_SetItem(env, ctx->keys[K_QUERY_STRING], ctx->empty);
    if (rc < 0)
        return -1;
    return set_item(env, ctx->keys[K_RAW_URI], latin1(target.base, target.len));
}

static PyObject *method_str(ps_wsgi_t *ctx, const ps_request_t *r)
{
    return ps_py_method(&ctx->cache, r);
}

/* What a trusted proxy said: the scheme, and the client, whose address
 * req keeps for the access log. Returns 0 or -1 with an exception. */
static int add_forwarded(ps_wsgi_t *ctx, PyObject *env, RequestObject *req,
                         const ps_proxy_result_t *fwd)
{
    PyObject **k = ctx->keys;
    if (fwd->scheme != PS_SCHEME_NONE &&
        PyDict_SetItem(env, k[K_URL_SCHEME], ctx->schemes[fwd->scheme]) < 0)
        return -1;
    if (fwd->client.base == NULL)
        return 0;
    req->fwd_client = fwd->client;
    if (set_item(env, k[K_REMOTE_ADDR], ps_py_forwarded_client(&ctx->cache, fwd->client, 0)) < 0)
        return -1;
    if (fwd->client_port)
        return set_item(env, k[K_REMOTE_PORT], port_str(fwd->client_port));
    return PyDict_SetItem(env, k[K_REMOTE_PORT], ctx->zero);
}

/* The host a trusted proxy said the client asked for, as werkzeug's ProxyFix
 * sets it: HTTP_HOST "name[:port]", SERVER_NAME the name, SERVER_PORT the
 * forwarded port or the scheme's default. Runs after the headers are in env.
 * Returns 0 or -1 with an exception. */
static int add_forwarded_host(ps_wsgi_t *ctx, PyObject *env, const ps_proxy_result_t *fwd)
{
    PyObject **k = ctx->keys;
    int port = fwd->port;
    if (fwd->host.base) {
        PyObject *name = latin1(fwd->host.base, fwd->host.len);
        PyObject *full =
            name && port ? PyUnicode_FromFormat("%U:%d", name, port) : Py_XNewRef(name);
        if (full == NULL || PyDict_SetItemString(env, "HTTP_HOST", full) < 0) {
            Py_XDECREF(name);
            Py_XDECREF(full);
            return -1;
        }
        Py_DECREF(full);
        if (set_item(env, k[K_SERVER_NAME], name) < 0)
            return -1;
    }
    if (port == 0) {
        PyObject *scheme = PyDict_GetItemWithError(env, k[K_URL_SCHEME]); /* borrowed */
        if (scheme == NULL && PyErr_Occurred())
            return -1;
        int https = scheme && PyUnicode_Compare(scheme, ctx->schemes[PS_SCHEME_HTTPS]) == 0;
        port = https ? 443 : 80;
    }
    return set_item(env, k[K_SERVER_PORT], port_str(port));
}

static int add_server(PyObject *env, PyObject **k, const ps_py_addresses_t *a)
{
    if (PyDict_SetItem(env, k[K_SERVER_NAME], a->server) < 0)
        return -1;
    return PyDict_SetItem(env, k[K_SERVER_PORT], a->server_port);
}

/* An absolute-form target names the server (RFC 9112 section 3.2.2), as
 * it names the Host field. Returns 0 or -1 with an exception. */
static int add_target_server(PyObject *env, PyObject **k, const ps_request_t *r)
{
    if (set_item(env, k[K_SERVER_NAME], latin1(r->target_host.base, r->target_host.len)) < 0)
        return -1;
    return set_item(env, k[K_SERVER_PORT], port_str(r->target_port));
}

/* Returns a new environ dict, or NULL with an exception. */
static PyObject *build_environ(ps_wsgi_t *ctx, ps_exchange_t *x, RequestObject *req,
                               const ps_proxy_result_t *fwd)
{
    ps_request_t *r = x->req;
    ps_py_addresses_t *a = ps_py_addresses(&ctx->cache, x);
    if (a == NULL)
        return NULL;
    PyObject *env = PyDict_Copy(ctx->base_environ);
    if (env == NULL)
        return NULL;
    PyObject **k = ctx->keys;
    if (set_item(env, k[K_REQUEST_METHOD], method_str(ctx, r)) < 0 ||
        add_target(ctx, env, r->target) < 0 ||
        PyDict_SetItem(env, k[K_SERVER_PROTOCOL],
                       ctx->protocols[x->http2 ? 2 : r->http_minor & 1]) < 0 ||
        (ps_likely(r->target_host.base == NULL) ? add_server(env, k, a)
                                                : add_target_server(env, k, r)) < 0 ||
        PyDict_SetItem(env, k[K_REMOTE_ADDR], a->client) < 0 ||
        (a->client_port ? PyDict_SetItem(env, k[K_REMOTE_PORT], a->client_port)
                        : PyDict_DelItem(env, k[K_REMOTE_PORT])) < 0 ||
        PyDict_SetItem(env, k[K_WSGI_INPUT], req->input) < 0)
        goto error;
    if (ps_unlikely(x->tls != NULL) &&
        (PyDict_SetItem(env, k[K_URL_SCHEME], ctx->schemes[PS_SCHEME_HTTPS]) < 0 ||
         ps_py_tls_environ(env, x->tls) < 0))
        goto error;
    /* A gateway said the client came over TLS (uwsgi's HTTPS=on). */
    if (ps_unlikely(x->secure && x->tls == NULL) &&
        PyDict_SetItem(env, k[K_URL_SCHEME], ctx->schemes[PS_SCHEME_HTTPS]) < 0)
        goto error;
    if ((fwd->scheme != PS_SCHEME_NONE || fwd->client.base) &&
        add_forwarded(ctx, env, req, fwd) < 0)
        goto error;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (add_header(ctx, env, &r->headers[i]) < 0)
            goto error;
    if (ps_unlikely(fwd->host.base || fwd->port) && add_forwarded_host(ctx, env, fwd) < 0)
        goto error;
    return env;
error:
    Py_DECREF(env);
    return NULL;
}

/* ---- the response ---- */

enum {
    SEND_ERROR = -1, /* a Python exception is set */
    SEND_GONE = -2,  /* the client went away */
};

/* The request is over: calls close() on the response, logs it, detaches the
 * Python objects from the connection and drops the connection's reference
 * to req (which may free it). */
static void request_done(RequestObject *req)
{
    ps_exchange_t *x = req->x;
    ps_wsgi_t *ctx = req->ctx;
    if (x == NULL)
        return;
    PyObject *result = req->result;
    if (result && !PyList_CheckExact(result) && !PyTuple_CheckExact(result)) {
        PyObject *close = PyObject_GetAttr(result, ctx->close_name);
        if (close == NULL) {
            PyErr_Clear();
        } else {
            PyObject *res = PyObject_CallNoArgs(close);
            Py_DECREF(close);
            if (res == NULL)
                ps_log_exception(ctx->error_logger, "Exception in close() of the WSGI response");
            Py_XDECREF(res);
        }
    }
    if (ctx->access_log && x->status)
        ps_log_access(ctx->access_log, x, req->fwd_client, x->status, req->headers);
    ((InputObject *)req->input)->x = NULL;
    req->x = NULL;
    x->app_data = NULL;
    Py_CLEAR(req->item);
    Py_CLEAR(req->iter);
    Py_CLEAR(req->result);
    Py_DECREF(req);
}

/* The application failed (exception pending): 500 if nothing was sent,
 * else the connection closes. */
static void fail(RequestObject *req)
{
    ps_exchange_t *x = req->x;
    ps_request_t *r = x->req;
    if (ps_exchange_client_gone(x)) {
        PyErr_Clear(); /* the client left; the application only noticed */
    } else {
        ps_log_exception(req->ctx->error_logger, "Exception in WSGI application (%.*s %.*s)",
                         (int)r->method.len, r->method.base, (int)PS_MIN(r->target.len, 200),
                         r->target.base);
        if (req->headers_sent)
            ps_exchange_abort(x);
        else
            ps_exchange_send_error(x, 500);
    }
    request_done(req);
}

static int map_write(int rc)
{
    return rc >= 0 ? rc : SEND_GONE;
}

/* The head start_response gave, as views into its Python strings (valid
 * while req->status and req->headers hold them): the status, the fields,
 * and a Content-Length when the application's iterable has a known length
 * and named none (1xx, 204 and 304 carry no body and so no length of one). */
typedef struct {
    ps_slice_t status;
    ps_header_t *h; /* stack, or PyMem_Malloc'd past MAX_STACK_HEADERS */
    size_t n;
    size_t strings; /* bytes of the status and of every name and value */
    ps_header_t stack[MAX_STACK_HEADERS + 1];
    char length[24];
} head_view_t;

static void head_view_free(head_view_t *v)
{
    if (v->h != v->stack)
        PyMem_Free(v->h);
}

/* Fills v. Returns 0, or -1 with a Python exception (v freed). */
static int head_view(RequestObject *req, head_view_t *v)
{
    v->h = v->stack;
    v->n = 0;
    if (req->status == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the application did not call start_response()");
        return -1;
    }
    if (latin1_view(req->status, "status", &v->status) < 0)
        return -1;
    v->strings = v->status.len;
    Py_ssize_t count = PyList_GET_SIZE(req->headers);
    if (count > MAX_STACK_HEADERS) {
        v->h = PyMem_Malloc((size_t)(count + 1) * sizeof(*v->h));
        if (v->h == NULL) {
            v->h = v->stack;
            PyErr_NoMemory();
            return -1;
        }
    }
    ps_header_t *hs = v->h;
    int has_length = 0;
    size_t n = 0;
    for (Py_ssize_t i = 0; i < count && i < PyList_GET_SIZE(req->headers); i++) {
        PyObject *item = PyList_GET_ITEM(req->headers, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_TypeError, "response headers must be (name, value) tuples: %R",
                         item);
            head_view_free(v);
            return -1;
        }
        if (latin1_view(PyTuple_GET_ITEM(item, 0), "header name", &hs[n].name) < 0 ||
            latin1_view(PyTuple_GET_ITEM(item, 1), "header value", &hs[n].value) < 0) {
            head_view_free(v);
            return -1;
        }
        if (PS_SLICE_IEQ(hs[n].name, "content-length")) {
            has_length = 1;
            req->given_length = decimal(hs[n].value);
        }
        v->strings += hs[n].name.len + hs[n].value.len;
        n++;
    }
    const char *code = v->status.base;
    int bodyless = code[0] == '1' || (v->status.len >= 3 &&
                                      (memcmp(code, "204", 3) == 0 || memcmp(code, "304", 3) == 0));
    if (!has_length && req->known_length >= 0 && !bodyless) {
        int l = snprintf(v->length, sizeof(v->length), "%lld", (long long)req->known_length);
        hs[n].name = PS_SLICE_LIT("Content-Length");
        hs[n].value = (ps_slice_t){v->length, (size_t)l};
        v->strings += hs[n].name.len + hs[n].value.len;
        n++;
    }
    v->n = n;
    return 0;
}

/* Sends the head from start_response's status and headers together with
 * the first body bytes. Returns PS_WRITE_*, SEND_ERROR or SEND_GONE. */
static int send_head(RequestObject *req, const char *body, size_t len)
{
    head_view_t v;
    if (head_view(req, &v) < 0)
        return SEND_ERROR;
    int rc = ps_exchange_start(req->x, v.status, v.h, v.n, body, len);
    if (rc == -EINVAL) {
        PyErr_Format(PyExc_ValueError, "invalid status or header in the response: %R %R",
                     req->status, req->headers);
        rc = SEND_ERROR;
    } else {
        req->headers_sent = 1;
        rc = map_write(rc);
    }
    head_view_free(&v);
    return rc;
}

static int send_body(RequestObject *req, const char *data, size_t len)
{
    if (!req->headers_sent)
        return send_head(req, data, len);
    return map_write(ps_exchange_write(req->x, data, len));
}

/* A body shorter than the Content-Length the application gave: the connection
 * closes after it (only a close can tell the client), and the log says why. */
static void check_length(RequestObject *req)
{
    ps_exchange_t *x = req->x;
    ps_request_t *r = x->req;
    if (req->given_length < 0 || x->body_sent >= (uint64_t)req->given_length ||
        PS_SLICE_IEQ(r->method, "HEAD") || x->status == 204 || x->status == 304)
        return;
    ps_log_error(req->ctx->error_logger,
                 "WSGI application sent %llu of the %lld body bytes its Content-Length "
                 "announced (%.*s %.*s): the connection is closed",
                 (unsigned long long)x->body_sent, (long long)req->given_length, (int)r->method.len,
                 r->method.base, (int)PS_MIN(r->target.len, 200), r->target.base);
}

/* Sends item's bytes from off. A protocol that takes at most
 * x->write_piece bytes a call gets them piece by piece while it says
 * PS_WRITE_DONE; when it says PS_WRITE_PENDING with bytes left, req->item
 * keeps the item (a new reference) and where its rest starts, for the
 * next pump. Returns as send_body. */
static int send_item(RequestObject *req, PyObject *item, Py_ssize_t off)
{
    const char *p = PyBytes_AS_STRING(item);
    size_t left = (size_t)(PyBytes_GET_SIZE(item) - off), piece = req->x->write_piece;
    if (piece == 0 || left <= piece)
        return send_body(req, p + off, left);
    int rc;
    do {
        size_t n = PS_MIN(left, piece);
        rc = send_body(req, p + off, n);
        off += (Py_ssize_t)n;
        left -= n;
    } while (rc == PS_WRITE_DONE && left > 0);
    if (rc == PS_WRITE_PENDING && left > 0) {
        req->item = Py_NewRef(item);
        req->item_off = off;
    }
    return rc;
}

/* The body is complete. */
static void finish(RequestObject *req)
{
    if (!req->headers_sent) {
        req->known_length = 0; /* nothing was produced */
        int rc = send_head(req, NULL, 0);
        if (rc == SEND_ERROR) {
            fail(req);
            return;
        }
    }
    check_length(req);
    ps_exchange_end(req->x);
    request_done(req);
}

/* Inlined into pump() as it was before the thread pool used it too: the
 * loop thread's path pays no call for it. */
static inline __attribute__((always_inline)) PyObject *next_item(RequestObject *req)
{
    if (req->iter)
        return PyIter_Next(req->iter);
    PyObject *r = req->result;
    if (PyList_CheckExact(r)) {
        if (req->index >= PyList_GET_SIZE(r))
            return NULL;
        return Py_NewRef(PyList_GET_ITEM(r, req->index++));
    }
    if (req->index >= PyTuple_GET_SIZE(r))
        return NULL;
    return Py_NewRef(PyTuple_GET_ITEM(r, req->index++));
}

/* Pulls items from the response and sends them until the socket is full
 * (on_writable resumes) or the response ends. Ends with req released. */
static void pump(RequestObject *req)
{
    for (;;) {
        PyObject *item = req->item; /* the rest of one sent in part, first */
        Py_ssize_t off = req->item_off;
        req->item = NULL;
        if (item == NULL) {
            off = 0;
            item = next_item(req);
            if (item == NULL) {
                if (PyErr_Occurred())
                    fail(req);
                else
                    finish(req);
                return;
            }
            if (!PyBytes_Check(item)) {
                PyErr_Format(PyExc_TypeError, "response items must be bytes, not %.100s",
                             Py_TYPE(item)->tp_name);
                Py_DECREF(item);
                fail(req);
                return;
            }
        }
        int rc = PyBytes_GET_SIZE(item) > off ? send_item(req, item, off) : PS_WRITE_DONE;
        Py_DECREF(item);
        if (rc == SEND_ERROR) {
            fail(req);
            return;
        }
        if (rc == SEND_GONE) {
            request_done(req);
            return;
        }
        if (rc == PS_WRITE_PENDING)
            return;
    }
}

/* The regular file under req's wsgi.file_wrapper: its fd and current
 * position, and req->known_length set to the bytes left. Returns 1, or 0
 * (no exception) when it is not a regular file to sendfile(2) from. */
static int sendfile_source(RequestObject *req, int *fd_out, long long *off_out)
{
    FileWrapperObject *fw = (FileWrapperObject *)req->result;
    PyObject *res = PyObject_CallMethod(fw->filelike, "fileno", NULL);
    long fd = res ? PyLong_AsLong(res) : -1;
    Py_XDECREF(res);
    struct stat st;
    if (fd < 0 || fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        PyErr_Clear();
        return 0;
    }
    /* tell() knows about the file object's read buffer; lseek does not. */
    res = PyObject_CallMethod(fw->filelike, "tell", NULL);
    long long off = res ? PyLong_AsLongLong(res) : -1;
    Py_XDECREF(res);
    if (off < 0) {
        PyErr_Clear();
        off = lseek((int)fd, 0, SEEK_CUR);
        if (off < 0)
            return 0;
    }
    req->known_length = st.st_size > off ? st.st_size - off : 0;
    *fd_out = (int)fd;
    *off_out = off;
    return 1;
}

/* A wsgi.file_wrapper over a regular file goes out with sendfile(2) from
 * the file's current position. Returns 1 when handled, 0 to iterate it. */
static int try_sendfile(RequestObject *req)
{
    int fd;
    long long off;
    if (!sendfile_source(req, &fd, &off))
        return 0;
    ps_exchange_t *x = req->x;
    x->file_follows = 1; /* the head leaves with the file */
    int rc = send_head(req, NULL, 0);
    x->file_follows = 0; /* (send_head may fail before the start) */
    if (rc >= 0)
        rc = map_write(ps_exchange_sendfile(x, fd, off, (uint64_t)req->known_length));
    if (rc == SEND_ERROR)
        fail(req);
    else if (rc == SEND_GONE)
        request_done(req);
    else if (rc == PS_WRITE_PENDING)
        req->sendfile_fd = (int)fd;
    else
        finish(req);
    return 1;
}

static void start_body(RequestObject *req)
{
    PyObject *r = req->result;
    if (Py_IS_TYPE(r, req->ctx->st->file_wrapper_type) && try_sendfile(req))
        return;
    if (PyList_CheckExact(r) || PyTuple_CheckExact(r)) {
        /* A sized body: announce its length rather than chunk it. */
        Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
        PyObject **items = PySequence_Fast_ITEMS(r);
        int64_t total = 0;
        for (Py_ssize_t i = 0; i < n && total >= 0; i++)
            total = PyBytes_Check(items[i]) ? total + PyBytes_GET_SIZE(items[i]) : -1;
        req->known_length = total;
    } else {
        req->iter = PyObject_GetIter(r);
        if (req->iter == NULL) {
            fail(req);
            return;
        }
    }
    pump(req);
}

/* ---- the thread pool (--threads N > 1) ----
 *
 * The loop thread parses the request and buffers its body; a pool thread
 * (pool.c) builds the environ, calls the application, iterates the
 * response into C chunks (the head with the first bytes, or a whole list
 * response, in one) and calls close(). The loop writes the chunks without
 * the GIL: with threads it takes the GIL only when a callback runs Python
 * (ps_py_loop_gil), so its network work goes on while an application
 * thread runs and a request costs it no GIL switch.
 *
 * A job (wsgi_job_t) is what the two share, under ctx->mu: the chunks,
 * the backpressure counts and the flags. The exchange is the loop's; the
 * thread reads it (environ, wsgi.input, the exception log) with the GIL,
 * until it posts its last chunk. The loop detaches a request from its
 * thread with the GIL while the thread may still read the exchange (the
 * client went away, a write failed), so a thread never sees one the loop
 * is changing or freeing; after the thread's last post it does without.
 * The thread waits without the GIL, on ctx->moved, while its output is
 * over the high-water mark or the socket is full. */

static RequestObject *request_new(ps_wsgi_t *ctx, ps_exchange_t *x);

/* Bytes a thread may have posted and not yet written before it waits. */
#define POSTED_HIGH (64 * 1024)

/* Output a thread posted: body bytes, after the response head in the
 * first one (the head's strings are copied after the headers array). */
typedef struct wsgi_chunk {
    struct wsgi_chunk *next;
    char *data; /* len body bytes */
    size_t len;
    ps_slice_t status; /* the head: status.base != NULL */
    ps_header_t *h;
    size_t nh;
} wsgi_chunk_t;

/* A job's own room for its first chunk: a small response's head and body
 * need no allocation. */
#define JOB_INLINE 1024

/* Finished jobs the pool keeps for reuse at most. */
#define JOB_CACHE 256

typedef struct wsgi_job {
    ps_wsgi_t *ctx;
    ps_exchange_t *x;            /* the loop's: NULL once it is done with the request */
    RequestObject *req;          /* the thread's while it runs it (GIL) */
    ps_proxy_result_t fwd;       /* what a trusted proxy forwarded (loop, on_request) */
    PyObject *log_headers;       /* the response headers, for the access line (GIL) */
    struct wsgi_job *next_ready; /* in ctx->ready (under ctx->mu) */
    struct wsgi_job *next_wait;  /* in ctx->waiting (loop) */
    int sendfile_fd;             /* loop: >= 0 while a file goes out (on_writable ends) */
    unsigned head_sent : 1;      /* loop: the head is out */
    unsigned seen_end : 1; /* loop: deliver saw t_end or t_failed (the thread reads x no more) */
    /* Under ctx->mu. */
    wsgi_chunk_t *out, *out_tail; /* posted, not written yet */
    size_t posted;                /* bytes in out */
    int sf_fd;                    /* with t_end: the file_wrapper's file to send, or -1 */
    int64_t sf_off;
    uint64_t sf_len;
    int refs; /* atomic: the loop's, the thread's (or the waiting list's), ctx->ready's */
    unsigned scheduled : 1; /* in ctx->ready */
    unsigned blocked : 1;   /* the connection's output waits for the socket */
    unsigned loop_done : 1; /* the loop is done with the request: stop producing */
    unsigned t_end : 1;     /* the thread posted its last chunk: the body is complete */
    unsigned t_failed : 1;  /* ... or the application failed (logged): 500 or close */
    /* The thread's (set in t_chunk without the lock, cleared on reuse): a
     * byte of its own, not a bit beside the ones above, which the loop
     * changes under ctx->mu meanwhile (a bit field shares their word). */
    unsigned char inline_used; /* inline holds a chunk */
    struct wsgi_job *next_free;
    union {
        max_align_t align;
        char bytes[JOB_INLINE];
    } inline_chunk; /* last: a reused job is cleared up to here */
} wsgi_job_t;

/* Any thread: frees chunk c of job (the inline one stays with the job). */
static void chunk_free(wsgi_job_t *job, wsgi_chunk_t *c)
{
    if ((char *)c != job->inline_chunk.bytes)
        PyMem_RawFree(c);
}

/* Loop thread: a cleared job, reused or new, or NULL. */
static wsgi_job_t *job_new(ps_wsgi_t *ctx)
{
    wsgi_job_t *job = ctx->free_local;
    if (job == NULL)
        job = __atomic_exchange_n(&ctx->free_shared, NULL, __ATOMIC_ACQUIRE);
    if (job == NULL) {
        job = PyMem_RawMalloc(sizeof(*job));
    } else {
        ctx->free_local = job->next_free;
        __atomic_fetch_sub(&ctx->free_count, 1, __ATOMIC_RELAXED);
    }
    if (job != NULL)
        memset(job, 0, offsetof(wsgi_job_t, inline_chunk));
    return job;
}

/* Any thread: job's last reference is gone; keeps it for reuse or frees it. */
static void job_free(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    for (wsgi_chunk_t *c = job->out, *next; c != NULL; c = next) {
        next = c->next;
        chunk_free(job, c);
    }
    if (__atomic_add_fetch(&ctx->free_count, 1, __ATOMIC_RELAXED) <= JOB_CACHE) {
        /* A push only: the loop takes the whole list, so no ABA. */
        wsgi_job_t *head = __atomic_load_n(&ctx->free_shared, __ATOMIC_RELAXED);
        do
            job->next_free = head;
        while (!__atomic_compare_exchange_n(&ctx->free_shared, &head, job, 1, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED));
        return;
    }
    __atomic_fetch_sub(&ctx->free_count, 1, __ATOMIC_RELAXED);
    PyMem_RawFree(job);
}

/* ps_wsgi_free: the kept jobs. */
static void free_jobs(ps_wsgi_t *ctx)
{
    wsgi_job_t *lists[2] = {ctx->free_local, ctx->free_shared};
    for (int i = 0; i < 2; i++)
        for (wsgi_job_t *j = lists[i], *next; j != NULL; j = next) {
            next = j->next_free;
            PyMem_RawFree(j);
        }
    ctx->free_local = ctx->free_shared = NULL;
}

static void log_app_exception(ps_wsgi_t *ctx, ps_exchange_t *x)
{
    ps_request_t *r = x->req;
    ps_log_exception(ctx->error_logger, "Exception in WSGI application (%.*s %.*s)",
                     (int)r->method.len, r->method.base, (int)PS_MIN(r->target.len, 200),
                     r->target.base);
}

/* Any thread: drops a reference to job (the last frees it). */
static void job_unref(wsgi_job_t *job)
{
    if (__atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) == 0)
        job_free(job);
}

/* Loop thread: the request is over for the connection (answered or gone).
 * Writes its access line with `status`, detaches it from x and drops the
 * loop's reference; the thread stops producing. Idempotent. */
static void t_detach(wsgi_job_t *job, int status)
{
    ps_exchange_t *x = job->x;
    ps_wsgi_t *ctx = job->ctx;
    if (x == NULL)
        return;
    int early = 0; /* its thread may still read x */
    if (!job->seen_end) {
        pthread_mutex_lock(&ctx->mu);
        early = !job->t_end && !job->t_failed;
        pthread_mutex_unlock(&ctx->mu);
    }
    if (early || ctx->access_log)
        ps_py_loop_gil();
    if (early && job->req != NULL) {
        ((InputObject *)job->req->input)->x = NULL;
        job->req->x = NULL;
    }
    job->x = NULL;
    x->app_data = NULL;
    /* With the GIL when early: the thread, stopped, sets no log_headers. */
    if (ctx->access_log && status)
        ps_log_access(ctx->access_log, x, job->fwd.client, status, job->log_headers);
    if (job->log_headers)
        Py_CLEAR(job->log_headers);
    pthread_mutex_lock(&ctx->mu);
    job->loop_done = 1;
    if (ctx->waiters)
        pthread_cond_broadcast(&ctx->moved);
    pthread_mutex_unlock(&ctx->mu);
    job_unref(job);
}

/* Loop thread: the body is complete; ends the response. */
static void t_finish(wsgi_job_t *job)
{
    ps_exchange_t *x = job->x;
    t_detach(job, x->status);
    ps_exchange_end(x); /* may move on to the next request at once */
}

/* Loop thread: the file_wrapper's file goes out with sendfile(2). */
static void t_sendfile(wsgi_job_t *job, int fd, int64_t off, uint64_t len)
{
    ps_exchange_t *x = job->x;
    int rc = map_write(ps_exchange_sendfile(x, fd, off, len));
    if (rc == SEND_GONE) {
        t_detach(job, x->status);
        ps_exchange_abort(x);
    } else if (rc == PS_WRITE_PENDING) {
        job->sendfile_fd = fd; /* on_writable finishes */
    } else {
        t_finish(job);
    }
}

/* Loop thread: the application's head was refused (nothing was sent). */
static void t_bad_head(wsgi_job_t *job, const wsgi_chunk_t *c)
{
    ps_exchange_t *x = job->x;
    char msg[300];
    snprintf(msg, sizeof(msg), "invalid status or header in the response: %.*s (%zu headers)",
             (int)PS_MIN(c->status.len, 200), c->status.base, c->nh);
    ps_py_loop_gil();
    PyErr_SetString(PyExc_ValueError, msg);
    log_app_exception(job->ctx, x);
    t_detach(job, 500);
    ps_exchange_send_error(x, 500);
}

/* Loop thread: writes what the thread posted, then acts on its end or
 * failure. Returns with job possibly detached. Needs no GIL. */
static void deliver(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    ps_exchange_t *x = job->x;
    pthread_mutex_lock(&ctx->mu);
    wsgi_chunk_t *c = job->out;
    job->out = job->out_tail = NULL;
    int end = job->t_end, failed = job->t_failed, sf_fd = job->sf_fd;
    pthread_mutex_unlock(&ctx->mu);
    job->seen_end = end || failed;
    int rc = PS_WRITE_DONE, pending = 0;
    size_t written = 0;
    while (c != NULL) {
        wsgi_chunk_t *next = c->next;
        if (rc >= 0 && c->status.base != NULL) {
            /* A file_wrapper's file follows at once: the head leaves with it. */
            x->file_follows = next == NULL && end && !failed && sf_fd >= 0;
            rc = ps_exchange_start(x, c->status, c->h, c->nh, c->data, c->len);
            if (rc == -EINVAL) {
                for (wsgi_chunk_t *n; next != NULL; next = n) {
                    n = next->next;
                    chunk_free(job, next);
                }
                t_bad_head(job, c);
                chunk_free(job, c);
                return;
            }
            job->head_sent = rc >= 0;
        } else if (rc >= 0 && c->len) {
            rc = ps_exchange_write(x, c->data, c->len);
        }
        pending |= rc == PS_WRITE_PENDING;
        written += c->len;
        chunk_free(job, c);
        c = next;
    }
    if (rc >= 0 && !end && !failed) {
        /* Room for the thread (once it ended, or when the request ends
         * here, t_detach tells it). */
        pthread_mutex_lock(&ctx->mu);
        job->posted -= written;
        if (pending)
            job->blocked = 1;
        if (ctx->waiters)
            pthread_cond_broadcast(&ctx->moved);
        pthread_mutex_unlock(&ctx->mu);
    }
    if (rc < 0) {
        t_detach(job, x->status);
        ps_exchange_abort(x);
    } else if (failed) {
        t_detach(job, job->head_sent ? x->status : 500);
        if (job->head_sent)
            ps_exchange_abort(x);
        else
            ps_exchange_send_error(x, 500);
    } else if (end && sf_fd >= 0) {
        t_sendfile(job, sf_fd, job->sf_off, job->sf_len);
    } else if (end) {
        t_finish(job);
    }
}

/* Loop thread (the pool's notify): delivers the threads' results, then
 * hands waiting requests to the threads. Needs no GIL. A job scheduled
 * meanwhile finds ctx->ready empty and wakes the loop again (schedule). */
static void pool_notify(void *data)
{
    ps_wsgi_t *ctx = data;
    pthread_mutex_lock(&ctx->mu);
    wsgi_job_t *list = ctx->ready;
    ctx->ready = NULL;
    for (wsgi_job_t *j = list; j != NULL; j = j->next_ready)
        j->scheduled = 0;
    pthread_mutex_unlock(&ctx->mu);
    while (list) {
        wsgi_job_t *job = list;
        list = job->next_ready;
        if (job->x)
            deliver(job);
        job_unref(job);
    }
    while (ctx->waiting) {
        wsgi_job_t *job = ctx->waiting;
        if (job->x != NULL && ps_pool_push(ctx->pool, job) < 0)
            break;
        ctx->waiting = job->next_wait;
        job->next_wait = NULL;
        if (ctx->waiting == NULL)
            ctx->wait_tail = NULL;
        if (job->x == NULL)
            job_unref(job); /* gone before a thread took it */
    }
}

/* Pool thread, under ctx->mu: puts job in ctx->ready. Returns 1 when the
 * loop must be woken for it: the list was empty, so no wake-up for it is
 * on its way (the loop empties the list under the lock, then delivers). */
static int schedule_locked(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    if (job->scheduled)
        return 0;
    job->scheduled = 1;
    __atomic_add_fetch(&job->refs, 1, __ATOMIC_RELAXED); /* ctx->ready's */
    int first = ctx->ready == NULL;
    job->next_ready = ctx->ready;
    ctx->ready = job;
    return first;
}

/* Pool thread: the loop should look at job soon. */
static void schedule(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    pthread_mutex_lock(&ctx->mu);
    int wake = schedule_locked(job);
    pthread_mutex_unlock(&ctx->mu);
    if (wake)
        ps_pool_wake(ctx->pool);
}

enum { WAIT_ROOM, WAIT_DRAINED, WAIT_DONE };

/* Pool thread: waits without the GIL until the request has room for more
 * output (WAIT_ROOM), has written everything (WAIT_DRAINED) or is over for
 * the loop (WAIT_DONE). Returns 0, or -1 when the loop is done with it
 * (the client is gone, or the write deadline passed). */
static int t_wait(RequestObject *req, int until)
{
    ps_wsgi_t *ctx = req->ctx;
    wsgi_job_t *job = req->job;
    int done, timed_out = 0;
    /* Most of the time there is room: no GIL switch for it. */
    pthread_mutex_lock(&ctx->mu);
    done = job->loop_done;
    int ready = done || (until == WAIT_ROOM && job->posted < POSTED_HIGH && !job->blocked) ||
                (until == WAIT_DRAINED && job->posted == 0 && !job->blocked);
    int unannounced = !job->scheduled && job->out != NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (ready)
        return done ? -1 : 0;
    if (unannounced)
        schedule(job); /* t_body's quiet posts: the loop must write them */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)ctx->write_wait + 1;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&ctx->mu);
    ctx->waiters++;
    for (;;) {
        done = job->loop_done;
        if (done || (until == WAIT_ROOM && job->posted < POSTED_HIGH && !job->blocked) ||
            (until == WAIT_DRAINED && job->posted == 0 && !job->blocked))
            break;
        if (pthread_cond_timedwait(&ctx->moved, &ctx->mu, &deadline) == ETIMEDOUT) {
            timed_out = 1;
            break;
        }
    }
    ctx->waiters--;
    pthread_mutex_unlock(&ctx->mu);
    Py_END_ALLOW_THREADS if (timed_out && !done && until != WAIT_DONE && req->x != NULL)
    {
        /* The client stopped reading: the loop closes. */
        req->x = NULL;
        ((InputObject *)req->input)->x = NULL;
        pthread_mutex_lock(&ctx->mu);
        job->t_failed = 1;
        pthread_mutex_unlock(&ctx->mu);
        schedule(job);
        return -1;
    }
    return done ? -1 : 0;
}

/* Pool thread: a chunk of room bytes, after the head from start_response's
 * status and headers when the head is not out yet (the response's
 * Content-Length added when req->known_length says it). Returns it, or
 * NULL with an exception. */
static wsgi_chunk_t *t_chunk(RequestObject *req, size_t room)
{
    head_view_t v;
    ps_slice_t status = {NULL, 0};
    ps_header_t *hs = NULL;
    size_t n = 0, strings = 0;
    wsgi_chunk_t *c = NULL;
    if (!req->headers_sent) {
        if (head_view(req, &v) < 0)
            return NULL;
        status = v.status;
        hs = v.h;
        n = v.n;
        strings = v.strings;
    }
    size_t size = sizeof(*c) + n * sizeof(ps_header_t) + strings + room;
    wsgi_job_t *job = req->job;
    if (!job->inline_used && size <= JOB_INLINE) {
        job->inline_used = 1;
        c = (wsgi_chunk_t *)job->inline_chunk.bytes;
    } else {
        c = PyMem_RawMalloc(size);
    }
    if (c == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    c->next = NULL;
    c->h = (ps_header_t *)(c + 1);
    c->nh = n;
    char *p = (char *)(c->h + n);
    c->status = (ps_slice_t){NULL, 0};
    if (status.base != NULL) {
        memcpy(p, status.base, status.len);
        c->status = (ps_slice_t){p, status.len};
        p += status.len;
        for (size_t i = 0; i < n; i++) {
            memcpy(p, hs[i].name.base, hs[i].name.len);
            c->h[i].name = (ps_slice_t){p, hs[i].name.len};
            p += hs[i].name.len;
            memcpy(p, hs[i].value.base, hs[i].value.len);
            c->h[i].value = (ps_slice_t){p, hs[i].value.len};
            p += hs[i].value.len;
        }
        req->headers_sent = 1;
        if (req->ctx->access_log && req->job->log_headers == NULL)
            req->job->log_headers = Py_NewRef(req->headers);
    }
    c->data = p;
    c->len = room;
done:
    if (hs != NULL)
        head_view_free(&v);
    return c;
}

/* Pool thread: hands a chunk to the loop, waking it when `wake` (else the
 * end of the body, or a wait for room, does). Returns 0, or -1 when the
 * request is over for the loop (the chunk is dropped). */
static int t_post(RequestObject *req, wsgi_chunk_t *c, int wake)
{
    wsgi_job_t *job = req->job;
    if (req->x == NULL) {
        chunk_free(job, c);
        return -1;
    }
    pthread_mutex_lock(&req->ctx->mu);
    if (job->out_tail)
        job->out_tail->next = c;
    else
        job->out = c;
    job->out_tail = c;
    job->posted += c->len;
    wake = wake && schedule_locked(job);
    pthread_mutex_unlock(&req->ctx->mu);
    if (wake)
        ps_pool_wake(req->ctx->pool);
    return 0;
}

/* Pool thread: the thread's last post (c may be NULL): the body is
 * complete, or the application failed. It reads the exchange no more. */
static void t_last(RequestObject *req, wsgi_chunk_t *c, int failed)
{
    wsgi_job_t *job = req->job;
    if (req->x == NULL) {
        if (c != NULL)
            chunk_free(job, c);
        return;
    }
    req->x = NULL;
    ((InputObject *)req->input)->x = NULL;
    pthread_mutex_lock(&req->ctx->mu);
    if (c != NULL) {
        if (job->out_tail)
            job->out_tail->next = c;
        else
            job->out = c;
        job->out_tail = c;
        job->posted += c->len;
    }
    if (failed)
        job->t_failed = 1;
    else
        job->t_end = 1;
    int wake = schedule_locked(job);
    pthread_mutex_unlock(&req->ctx->mu);
    if (wake)
        ps_pool_wake(req->ctx->pool);
}

/* Pool thread: the application raised (exception pending). */
static void t_fail(RequestObject *req)
{
    if (req->x == NULL) {
        PyErr_Clear(); /* the client left; the application only noticed */
        return;
    }
    log_app_exception(req->ctx, req->x);
    t_last(req, NULL, 1);
}

/* Pool thread: the head, if it is not out, and the end. */
static void t_end(RequestObject *req)
{
    wsgi_chunk_t *c = NULL;
    if (!req->headers_sent) {
        req->known_length = 0; /* nothing was produced */
        if ((c = t_chunk(req, 0)) == NULL) {
            t_fail(req);
            return;
        }
    }
    t_last(req, c, 0);
}

/* Pool thread: a file_wrapper over a regular file is sent by the loop
 * with sendfile(2); the thread waits until it is out (the wrapper's
 * close() closes the file). Returns 1 when handled, 0 to iterate it. */
static int t_try_sendfile(RequestObject *req)
{
    int fd;
    long long off;
    if (!sendfile_source(req, &fd, &off))
        return 0;
    if (req->x == NULL)
        return 1;
    wsgi_chunk_t *c = t_chunk(req, 0);
    if (c == NULL) {
        t_fail(req);
        return 1;
    }
    wsgi_job_t *job = req->job;
    pthread_mutex_lock(&req->ctx->mu);
    job->sf_fd = fd;
    job->sf_off = off;
    job->sf_len = (uint64_t)req->known_length;
    pthread_mutex_unlock(&req->ctx->mu);
    t_last(req, c, 0);
    t_wait(req, WAIT_DONE);
    return 1;
}

/* Pool thread: iterates the response into the loop's hands. */
static void t_body(RequestObject *req)
{
    PyObject *r = req->result;
    if (Py_IS_TYPE(r, req->ctx->st->file_wrapper_type) && t_try_sendfile(req))
        return;
    if (PyList_CheckExact(r) || PyTuple_CheckExact(r)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
        PyObject **items = PySequence_Fast_ITEMS(r);
        int64_t total = 0;
        for (Py_ssize_t i = 0; i < n && total >= 0; i++)
            total = PyBytes_Check(items[i]) ? total + PyBytes_GET_SIZE(items[i]) : -1;
        req->known_length = total;
        if (total >= 0 && total <= POSTED_HIGH) {
            /* All there: the head, the body and the end in one chunk. */
            wsgi_chunk_t *c = t_chunk(req, (size_t)total);
            if (c == NULL) {
                t_fail(req);
                return;
            }
            char *p = c->data;
            for (Py_ssize_t i = 0; i < n; i++) {
                memcpy(p, PyBytes_AS_STRING(items[i]), (size_t)PyBytes_GET_SIZE(items[i]));
                p += PyBytes_GET_SIZE(items[i]);
            }
            t_last(req, c, 0);
            return;
        }
    } else if ((req->iter = PyObject_GetIter(r)) == NULL) {
        t_fail(req);
        return;
    }
    for (;;) {
        PyObject *item = next_item(req);
        if (item == NULL)
            break;
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "response items must be bytes, not %.100s",
                         Py_TYPE(item)->tp_name);
            Py_DECREF(item);
            break;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        wsgi_chunk_t *c = len ? t_chunk(req, (size_t)len) : NULL;
        if (c != NULL)
            memcpy(c->data, PyBytes_AS_STRING(item), (size_t)len);
        Py_DECREF(item);
        if (len && c == NULL)
            break;
        /* An iterator's items go as they come (a stream may wait between
         * them); a long list's wake the loop when the thread must wait. */
        if ((c != NULL && t_post(req, c, req->iter != NULL) < 0) || t_wait(req, WAIT_ROOM) < 0)
            break;
    }
    if (PyErr_Occurred())
        t_fail(req);
    else if (req->x != NULL)
        t_end(req);
}

/* Pool thread: calls close() on the response, as PEP 3333 asks, on the
 * thread that ran the application (frameworks end their request there). */
static void t_close(RequestObject *req)
{
    PyObject *result = req->result;
    if (result && !PyList_CheckExact(result) && !PyTuple_CheckExact(result)) {
        PyObject *res = PyObject_CallMethodNoArgs(result, req->ctx->close_name);
        if (res == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
        else if (res == NULL)
            ps_log_exception(req->ctx->error_logger, "Exception in close() of the WSGI response");
        Py_XDECREF(res);
    }
    Py_CLEAR(req->iter);
    Py_CLEAR(req->result);
}

/* Pool thread (the pool's run): one request, from the environ to close().
 * pool_release drops the thread's reference to the job. */
static void pool_run(void *p_job, void *data)
{
    wsgi_job_t *job = p_job;
    ps_wsgi_t *ctx = data;
    ps_exchange_t *x = job->x; /* with the GIL: the loop clears it only with it, until t_last */
    if (x == NULL)
        return;
    RequestObject *req = request_new(ctx, x);
    if (req == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a request");
        pthread_mutex_lock(&ctx->mu);
        job->t_failed = 1;
        pthread_mutex_unlock(&ctx->mu);
        schedule(job);
        return;
    }
    req->job = job;
    job->req = req;
    PyObject *environ = build_environ(ctx, x, req, &job->fwd);
    if (environ == NULL) {
        t_fail(req);
    } else {
        PyObject *args[2] = {environ, (PyObject *)req};
        PyObject *result = PyObject_Vectorcall(ctx->app, args, 2, NULL);
        if (result == NULL) {
            t_fail(req);
        } else {
            req->result = result;
            t_body(req);
        }
        Py_DECREF(environ);
    }
    t_close(req);
    job->req = NULL;
    req->job = NULL;
    req->x = NULL;
    ((InputObject *)req->input)->x = NULL;
    Py_DECREF(req);
}

static void pool_release(void *job, void *data)
{
    PS_UNUSED(data);
    job_unref(job);
}

/* Loop thread: hands the request to a thread, or keeps it until one is
 * free. Needs no GIL. Returns 0 or -ENOMEM. */
static int t_dispatch(ps_wsgi_t *ctx, ps_exchange_t *x, const ps_proxy_result_t *fwd)
{
    wsgi_job_t *job = job_new(ctx);
    if (job == NULL)
        return -ENOMEM;
    job->ctx = ctx;
    job->x = x;
    job->fwd = *fwd;
    job->sendfile_fd = job->sf_fd = -1;
    job->refs = 2; /* the loop's and the thread's (or the waiting list's) */
    x->app_data = job;
    x->deferred = 1;
    if (ctx->waiting == NULL && ps_pool_push(ctx->pool, job) == 0)
        return 0;
    if (ctx->wait_tail)
        ctx->wait_tail->next_wait = job;
    else
        ctx->waiting = job;
    ctx->wait_tail = job;
    return 0;
}

/* The stack of a thread as text ("" when it cannot be had). New
 * reference, or NULL with an exception. */
static PyObject *thread_stack(unsigned long ident)
{
    PyObject *text = NULL, *d = NULL, *key = NULL, *mod = NULL, *lines = NULL, *empty = NULL;
    PyObject *frames = PySys_GetObject("_current_frames"); /* borrowed */
    if (frames == NULL || (d = PyObject_CallNoArgs(frames)) == NULL ||
        (key = PyLong_FromUnsignedLong(ident)) == NULL)
        goto done;
    PyObject *frame = PyDict_GetItemWithError(d, key); /* borrowed */
    if (frame == NULL) {
        text = PyErr_Occurred() ? NULL : PyUnicode_FromString("");
        goto done;
    }
    if ((mod = PyImport_ImportModule("traceback")) == NULL ||
        (lines = PyObject_CallMethod(mod, "format_stack", "O", frame)) == NULL ||
        (empty = PyUnicode_FromString("")) == NULL)
        goto done;
    text = PyUnicode_Join(empty, lines);
done:
    Py_XDECREF(d);
    Py_XDECREF(key);
    Py_XDECREF(mod);
    Py_XDECREF(lines);
    Py_XDECREF(empty);
    return text;
}

/* Logs the request stuck on thread t and where it is. Never raises. */
static void log_stuck(ps_wsgi_t *ctx, ps_pool_thread_t *t, ps_slice_t method, ps_slice_t target,
                      int seconds)
{
    PyObject *m = latin1(method.base, method.len);
    PyObject *p = latin1(target.base, PS_MIN(target.len, 200));
    PyObject *stack = thread_stack(t->ident);
    PyObject *msg =
        m && p && stack
            ? PyUnicode_FromFormat("WORKER TIMEOUT (pid %d): %s has run %U %U for %d s, "
                                   "in:\n%U",
                                   (int)getpid(), t->name, m, p, seconds, stack)
            : NULL;
    PyObject *res = msg ? PyObject_CallMethod(ctx->error_logger, "error", "sO", "%s", msg) : NULL;
    if (res == NULL)
        PyErr_Print();
    Py_XDECREF(res);
    Py_XDECREF(msg);
    Py_XDECREF(stack);
    Py_XDECREF(p);
    Py_XDECREF(m);
}

/* Loop thread, once a second under a master's --timeout: a request that
 * has run on a thread for longer is logged with the thread's Python stack,
 * and the worker aborts as the master's watchdog would make it (its
 * SIGABRT handler prints every thread and exits; the master replaces it). */
static void on_watchdog(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_wsgi_t *ctx = ps_container_of(t, ps_wsgi_t, watchdog);
    PS_UNUSED(revents);
    uint32_t n;
    ps_py_loop_gil(); /* the threads' jobs are read with it */
    ps_pool_thread_t *ts = ps_pool_threads(ctx->pool, &n);
    double now = ev_time();
    PS_UNUSED(loop);
    for (uint32_t i = 0; i < n; i++) {
        wsgi_job_t *job = ts[i].job;
        if (job == NULL || now - ts[i].started < ctx->timeout)
            continue;
        ps_slice_t m = PS_SLICE_LIT("-"), p = PS_SLICE_LIT("-");
        if (job->x) {
            m = job->x->req->method;
            p = job->x->req->target;
        }
        log_stuck(ctx, &ts[i], m, p, (int)(now - ts[i].started));
        ev_timer_stop(loop, t);
        raise(SIGABRT);
        if (PyErr_CheckSignals() < 0)
            PyErr_Print();
        return;
    }
}

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
        if (t_dispatch(ctx, x, &fwd) < 0) {
            ps_py_loop_gil();
            PyErr_NoMemory();
            ps_log_exception(ctx->error_logger, "Cannot start a request");
            ps_exchange_send_error(x, 500);
        }
        return;
    }
    RequestObject *req = request_new(ctx, x);
    if (req == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a request");
        ps_exchange_send_error(x, 500);
        return;
    }
    x->app_data = req; /* owns the reference until request_done() */
    PyObject *environ = build_environ(ctx, x, req, &fwd);
    if (environ == NULL) {
        fail(req);
        return;
    }
    PyObject *args[2] = {environ, (PyObject *)req};
    PyObject *result = PyObject_Vectorcall(ctx->app, args, 2, NULL);
    Py_DECREF(environ);
    if (result == NULL) {
        fail(req);
        return;
    }
    req->result = result;
    start_body(req);
}

/* Loop thread, with threads: the output drained (no GIL needed). */
static void t_on_writable(wsgi_job_t *job)
{
    if (job->sendfile_fd >= 0) {
        job->sendfile_fd = -1;
        t_finish(job);
        return;
    }
    pthread_mutex_lock(&job->ctx->mu);
    job->blocked = 0; /* the thread may produce more */
    if (job->ctx->waiters)
        pthread_cond_broadcast(&job->ctx->moved);
    pthread_mutex_unlock(&job->ctx->mu);
}

static void on_writable(ps_exchange_t *x)
{
    if (x->app_data == NULL)
        return;
    if (((ps_wsgi_t *)x->handler_data)->nthreads > 1) { /* a job, even once the pool is gone */
        t_on_writable(x->app_data);
        return;
    }
    RequestObject *req = x->app_data;
    if (req->sendfile_fd >= 0) {
        req->sendfile_fd = -1;
        finish(req);
        return;
    }
    pump(req);
}

static void request_gone(ps_exchange_t *x)
{
    if (((ps_wsgi_t *)x->handler_data)->nthreads > 1) /* a job, even once the pool is gone */
        t_detach(x->app_data, x->status);
    else
        request_done(x->app_data);
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

/* ---- start_response (the Request type) ---- */

static PyObject *Request_write(PyObject *op, PyObject *data);

static PyMethodDef write_def = {"write", Request_write, METH_O, "Write body bytes (blocking)."};

/* start_response(status, headers, exc_info=None), called through vectorcall
 * so that no argument tuple is built. Returns the write() callable. */
static PyObject *Request_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    RequestObject *self = (RequestObject *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *exc_info = Py_None;
    if (kwnames && PyTuple_GET_SIZE(kwnames) == 1 && nargs == 2 &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "exc_info") == 0) {
        exc_info = args[2];
    } else if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "start_response() takes status, headers, exc_info");
        return NULL;
    } else if (nargs == 3) {
        exc_info = args[2];
    } else if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "start_response() takes 2 or 3 arguments");
        return NULL;
    }
    PyObject *status = args[0], *headers = args[1];
    if (exc_info != Py_None) {
        if (!PyTuple_Check(exc_info) || PyTuple_GET_SIZE(exc_info) != 3) {
            PyErr_SetString(PyExc_TypeError, "exc_info must be a (type, value, traceback) tuple");
            return NULL;
        }
        if (self->headers_sent) {
            /* Too late to change the response: re-raise, as PEP 3333 says. */
            PyObject *tb = PyTuple_GET_ITEM(exc_info, 2);
            PyErr_Restore(Py_NewRef(PyTuple_GET_ITEM(exc_info, 0)),
                          Py_NewRef(PyTuple_GET_ITEM(exc_info, 1)),
                          tb == Py_None ? NULL : Py_NewRef(tb));
            return NULL;
        }
    } else if (self->status != NULL) {
        PyErr_SetString(PyExc_AssertionError,
                        "start_response() called a second time without exc_info");
        return NULL;
    }
    if (!PyUnicode_Check(status)) {
        PyErr_SetString(PyExc_TypeError, "status must be str");
        return NULL;
    }
    if (!PyList_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a list");
        return NULL;
    }
    Py_XSETREF(self->status, Py_NewRef(status));
    Py_XSETREF(self->headers, Py_NewRef(headers));
    return PyCFunction_New(&write_def, op);
}

/* write(data): the imperative body API of PEP 3333; blocks until sent. */
static PyObject *Request_write(PyObject *op, PyObject *data)
{
    RequestObject *self = (RequestObject *)op;
    if (!PyBytes_Check(data)) {
        PyErr_Format(PyExc_TypeError, "write() takes bytes, not %.100s", Py_TYPE(data)->tp_name);
        return NULL;
    }
    ps_exchange_t *x = self->x;
    if (x == NULL) {
        PyErr_SetString(PyExc_OSError, "write() after the response ended");
        return NULL;
    }
    if (self->status == NULL) {
        PyErr_SetString(PyExc_AssertionError, "write() before start_response()");
        return NULL;
    }
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    if (len == 0 && self->headers_sent)
        Py_RETURN_NONE;
    if (self->ctx->pool) {
        /* On a pool thread: the loop writes it; wait until it has. */
        wsgi_chunk_t *c = t_chunk(self, (size_t)len);
        if (c == NULL)
            return NULL;
        memcpy(c->data, PyBytes_AS_STRING(data), (size_t)len);
        if (t_post(self, c, 1) < 0 || t_wait(self, WAIT_DRAINED) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ConnectionResetError, "the client closed the connection");
            return NULL;
        }
        Py_RETURN_NONE;
    }
    int rc = send_body(self, PyBytes_AS_STRING(data), (size_t)len);
    if (rc == SEND_ERROR)
        return NULL;
    if (rc == PS_WRITE_PENDING) {
        Py_BEGIN_ALLOW_THREADS rc = map_write(ps_exchange_write_blocking(x, NULL, 0));
        Py_END_ALLOW_THREADS
    }
    if (rc == SEND_GONE) {
        PyErr_SetString(PyExc_ConnectionResetError, "the client closed the connection");
        return NULL;
    }
    Py_RETURN_NONE;
}

static int Request_traverse(PyObject *op, visitproc visit, void *arg)
{
    RequestObject *self = (RequestObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->status);
    Py_VISIT(self->headers);
    Py_VISIT(self->result);
    Py_VISIT(self->iter);
    Py_VISIT(self->item);
    Py_VISIT(self->input);
    return 0;
}

static int Request_clear(PyObject *op)
{
    RequestObject *self = (RequestObject *)op;
    Py_CLEAR(self->status);
    Py_CLEAR(self->headers);
    Py_CLEAR(self->result);
    Py_CLEAR(self->iter);
    Py_CLEAR(self->item);
    Py_CLEAR(self->input);
    return 0;
}

static void Request_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    Request_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMemberDef Request_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(RequestObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Request_slots[] = {
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, Request_members},
    {Py_tp_traverse, Request_traverse},
    {Py_tp_clear, Request_clear},
    {Py_tp_dealloc, Request_dealloc},
    {Py_tp_doc, "start_response(status, headers, exc_info=None) for one request."},
    {0, NULL},
};

static PyType_Spec Request_spec = {
    .name = "pyserver._core.StartResponse",
    .basicsize = sizeof(RequestObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Request_slots,
};

/* ---- wsgi.input ---- */

/* Makes sure body bytes are buffered, or the body is over. The connection
 * read the whole body before the application was called, so this never
 * waits for the client; a spooled body is read back from its file. Returns
 * 0, or -1 with an exception (the spool file cannot be read). */
static int input_fill(InputObject *self)
{
    ps_exchange_t *x = self->x;
    if (x == NULL || ps_buf_size(x->body) > 0)
        return 0;
    int rc = ps_exchange_body_fill(x);
    if (rc == 0)
        return 0;
    errno = -rc;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

static ps_buf_t *input_body(InputObject *self)
{
    return self->x ? self->x->body : NULL;
}

static int parse_size(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *size)
{
    *size = -1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "expected at most one argument");
        return -1;
    }
    if (nargs == 1 && args[0] != Py_None) {
        *size = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (*size == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* Reads up to size bytes (all of the body when size < 0), or up to and
 * including a newline when line is set. */
static PyObject *input_read(InputObject *self, Py_ssize_t size, int line)
{
    ps_buf_t acc = {0};
    PyObject *result = NULL;
    for (;;) {
        if (size >= 0 && acc.len >= (size_t)size)
            break;
        if (input_fill(self) < 0)
            goto done;
        ps_buf_t *b = input_body(self);
        size_t avail = b ? ps_buf_size(b) : 0;
        if (avail == 0)
            break;
        size_t take = size < 0 ? avail : PS_MIN(avail, (size_t)size - acc.len);
        int complete = size >= 0 && acc.len + take == (size_t)size;
        if (line) {
            char *nl = memchr(ps_buf_head(b), '\n', take);
            if (nl) {
                take = (size_t)(nl - ps_buf_head(b)) + 1;
                complete = 1;
            }
        }
        if (acc.len == 0 && complete) { /* all in one piece: no second copy */
            result = PyBytes_FromStringAndSize(ps_buf_head(b), (Py_ssize_t)take);
            if (result)
                ps_buf_consume(b, take);
            goto done;
        }
        if (ps_buf_append(&acc, ps_buf_head(b), take) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        ps_buf_consume(b, take);
        if (complete)
            break;
    }
    result = PyBytes_FromStringAndSize(acc.data, (Py_ssize_t)acc.len);
done:
    ps_buf_free(&acc);
    return result;
}

static PyObject *Input_read(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t size;
    if (parse_size(args, nargs, &size) < 0)
        return NULL;
    return input_read((InputObject *)op, size, 0);
}

static PyObject *Input_readline(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t size;
    if (parse_size(args, nargs, &size) < 0)
        return NULL;
    return input_read((InputObject *)op, size, 1);
}

static PyObject *Input_readlines(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t hint;
    if (parse_size(args, nargs, &hint) < 0)
        return NULL;
    PyObject *lines = PyList_New(0);
    Py_ssize_t total = 0;
    while (lines) {
        PyObject *line = input_read((InputObject *)op, -1, 1);
        if (line == NULL) {
            Py_CLEAR(lines);
            break;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(line);
        if (n == 0 || PyList_Append(lines, line) < 0) {
            Py_DECREF(line);
            if (n != 0)
                Py_CLEAR(lines);
            break;
        }
        Py_DECREF(line);
        total += n;
        if (hint > 0 && total >= hint)
            break;
    }
    return lines;
}

static PyObject *Input_iternext(PyObject *op)
{
    PyObject *line = input_read((InputObject *)op, -1, 1);
    if (line != NULL && PyBytes_GET_SIZE(line) == 0) {
        Py_DECREF(line);
        return NULL;
    }
    return line;
}

static void Input_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef Input_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Input_read, METH_FASTCALL, "read(size=-1)"},
    {"readline", (PyCFunction)(void (*)(void))Input_readline, METH_FASTCALL, "readline(size=-1)"},
    {"readlines", (PyCFunction)(void (*)(void))Input_readlines, METH_FASTCALL,
     "readlines(hint=-1)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Input_slots[] = {
    {Py_tp_methods, Input_methods},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, Input_iternext},
    {Py_tp_dealloc, Input_dealloc},
    {Py_tp_doc, "wsgi.input: the request body, read by the server before the application runs "
                "(held in memory, or in a spool file past --body-spool-threshold)."},
    {0, NULL},
};

static PyType_Spec Input_spec = {
    .name = "pyserver._core.Input",
    .basicsize = sizeof(InputObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Input_slots,
};

static RequestObject *request_new(ps_wsgi_t *ctx, ps_exchange_t *x)
{
    PyTypeObject *rt = ctx->st->request_type, *it = ctx->st->input_type;
    RequestObject *req = (RequestObject *)rt->tp_alloc(rt, 0);
    if (req == NULL)
        return NULL;
    InputObject *in = (InputObject *)it->tp_alloc(it, 0);
    if (in == NULL) {
        Py_DECREF(req);
        return NULL;
    }
    in->x = x;
    in->ctx = ctx;
    req->input = (PyObject *)in;
    req->vectorcall = Request_vectorcall;
    req->x = x;
    req->ctx = ctx;
    req->known_length = -1;
    req->given_length = -1;
    req->sendfile_fd = -1;
    return req;
}

/* ---- wsgi.errors ---- */

static PyObject *Errors_write(PyObject *op, PyObject *s)
{
    ErrorsObject *self = (ErrorsObject *)op;
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "wsgi.errors.write() takes str");
        return NULL;
    }
    if (self->write != NULL) {
        PyObject *res = PyObject_CallOneArg(self->write, s);
        if (res == NULL)
            return NULL;
        Py_DECREF(res);
        return PyLong_FromSsize_t(PyUnicode_GET_LENGTH(s));
    }
    PyObject *text = PyObject_CallMethod(s, "rstrip", NULL);
    if (text == NULL)
        return NULL;
    PyObject *res = Py_NewRef(Py_None);
    if (PyUnicode_GET_LENGTH(text) > 0) {
        Py_DECREF(res);
        res = PyObject_CallMethod(self->logger, "log", "isO", self->level, "%s", text);
    }
    Py_DECREF(text);
    if (res == NULL)
        return NULL;
    Py_DECREF(res);
    return PyLong_FromSsize_t(PyUnicode_GET_LENGTH(s));
}

static PyObject *Errors_writelines(PyObject *op, PyObject *seq)
{
    PyObject *it = PyObject_GetIter(seq), *item;
    if (it == NULL)
        return NULL;
    while ((item = PyIter_Next(it)) != NULL) {
        PyObject *res = Errors_write(op, item);
        Py_DECREF(item);
        if (res == NULL) {
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(res);
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Errors_flush(PyObject *op, PyObject *unused)
{
    PS_UNUSED(op);
    PS_UNUSED(unused);
    Py_RETURN_NONE;
}

static int Errors_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((ErrorsObject *)op)->logger);
    Py_VISIT(((ErrorsObject *)op)->write);
    return 0;
}

static int Errors_clear(PyObject *op)
{
    Py_CLEAR(((ErrorsObject *)op)->logger);
    Py_CLEAR(((ErrorsObject *)op)->write);
    return 0;
}

static void Errors_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    Errors_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef Errors_methods[] = {
    {"write", Errors_write, METH_O, "Log text on the error log."},
    {"writelines", Errors_writelines, METH_O, "Log each string."},
    {"flush", Errors_flush, METH_NOARGS, "Nothing to flush (each write is flushed)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Errors_slots[] = {
    {Py_tp_methods, Errors_methods},
    {Py_tp_traverse, Errors_traverse},
    {Py_tp_clear, Errors_clear},
    {Py_tp_dealloc, Errors_dealloc},
    {Py_tp_doc, "wsgi.errors: writes go to the pyserver.error logger."},
    {0, NULL},
};

static PyType_Spec Errors_spec = {
    .name = "pyserver._core.Errors",
    .basicsize = sizeof(ErrorsObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Errors_slots,
};

/* ---- wsgi.file_wrapper ---- */

static int FileWrapper_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    FileWrapperObject *self = (FileWrapperObject *)op;
    static char *kwlist[] = {"filelike", "blksize", NULL};
    PyObject *filelike;
    Py_ssize_t blksize = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n:FileWrapper", kwlist, &filelike, &blksize))
        return -1;
    Py_XSETREF(self->filelike, Py_NewRef(filelike));
    self->blksize = blksize > 0 ? blksize : 8192;
    return 0;
}

static PyObject *FileWrapper_iternext(PyObject *op)
{
    FileWrapperObject *self = (FileWrapperObject *)op;
    if (self->filelike == NULL)
        return NULL;
    PyObject *data = PyObject_CallMethod(self->filelike, "read", "n", self->blksize);
    if (data != NULL && PyObject_Length(data) == 0) {
        Py_DECREF(data);
        return NULL;
    }
    return data;
}

static PyObject *FileWrapper_close(PyObject *op, PyObject *unused)
{
    FileWrapperObject *self = (FileWrapperObject *)op;
    PS_UNUSED(unused);
    if (self->filelike && PyObject_HasAttrString(self->filelike, "close"))
        return PyObject_CallMethod(self->filelike, "close", NULL);
    Py_RETURN_NONE;
}

static int FileWrapper_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((FileWrapperObject *)op)->filelike);
    return 0;
}

static int FileWrapper_clear(PyObject *op)
{
    Py_CLEAR(((FileWrapperObject *)op)->filelike);
    return 0;
}

static void FileWrapper_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    FileWrapper_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef FileWrapper_methods[] = {
    {"close", FileWrapper_close, METH_NOARGS, "Close the wrapped file."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot FileWrapper_slots[] = {
    {Py_tp_init, FileWrapper_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, FileWrapper_iternext},
    {Py_tp_methods, FileWrapper_methods},
    {Py_tp_traverse, FileWrapper_traverse},
    {Py_tp_clear, FileWrapper_clear},
    {Py_tp_dealloc, FileWrapper_dealloc},
    {Py_tp_doc, "wsgi.file_wrapper(filelike, blksize=8192): sent with sendfile(2) when the "
                "file is a regular file."},
    {0, NULL},
};

static PyType_Spec FileWrapper_spec = {
    .name = "pyserver._core.FileWrapper",
    .basicsize = sizeof(FileWrapperObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = FileWrapper_slots,
};

int ps_wsgi_init_types(PyObject *module, ps_module_state_t *st)
{
    st->request_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Request_spec, NULL);
    st->input_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Input_spec, NULL);
    st->errors_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Errors_spec, NULL);
    st->file_wrapper_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &FileWrapper_spec, NULL);
    if (!st->request_type || !st->input_type || !st->errors_type || !st->file_wrapper_type)
        return -1;
    return PyModule_AddType(module, st->file_wrapper_type);
}

/* ---- setup ---- */

static int set_str(PyObject *d, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* Every request sets these keys. Present in the base environ, they make
 * each request's copy replace values instead of inserting keys; two spare
 * keys, added and deleted, leave the copy room for ~20 headers before it
 * would have to grow. Only speed depends on this, never behaviour. */
static int add_placeholders(ps_wsgi_t *ctx, PyObject *env)
{
    static const int always[] = {K_REQUEST_METHOD, K_PATH_INFO,   K_QUERY_STRING, K_SERVER_PROTOCOL,
                                 K_SERVER_NAME,    K_SERVER_PORT, K_REMOTE_ADDR,  K_REMOTE_PORT,
                                 K_RAW_URI,        K_WSGI_INPUT};
    for (size_t i = 0; i < PS_ARRAY_LEN(always); i++)
        if (PyDict_SetItem(env, ctx->keys[always[i]], ctx->empty) < 0)
            return -1;
    if (PyDict_SetItemString(env, "pyserver.spare1", Py_None) < 0 ||
        PyDict_SetItemString(env, "pyserver.spare2", Py_None) < 0 ||
        PyDict_DelItemString(env, "pyserver.spare1") < 0 ||
        PyDict_DelItemString(env, "pyserver.spare2") < 0)
        return -1;
    return 0;
}

static PyObject *make_base_environ(ps_wsgi_t *ctx, const ps_py_settings_t *s, PyObject *root_path)
{
    PyObject *env = PyDict_New();
    if (env == NULL)
        return NULL;
    PyObject *errors = NULL;
    ErrorsObject *eo = (ErrorsObject *)ctx->st->errors_type->tp_alloc(ctx->st->errors_type, 0);
    if (eo) {
        eo->logger = Py_NewRef(ctx->error_logger);
        eo->level = s->wsgi_errors_level;
        eo->write = Py_XNewRef(s->wsgi_errors_write);
        errors = (PyObject *)eo;
    }
    if (errors == NULL || set_str(env, "wsgi.version", Py_BuildValue("(ii)", 1, 0)) < 0 ||
        PyDict_SetItemString(env, "wsgi.url_scheme", s->url_scheme) < 0 ||
        PyDict_SetItemString(env, "wsgi.errors", errors) < 0 ||
        PyDict_SetItemString(env, "wsgi.multithread", s->threads > 1 ? Py_True : Py_False) < 0 ||
        PyDict_SetItemString(env, "wsgi.multiprocess", s->multiprocess ? Py_True : Py_False) < 0 ||
        PyDict_SetItemString(env, "wsgi.run_once", Py_False) < 0 ||
        PyDict_SetItemString(env, "wsgi.input_terminated", Py_True) < 0 ||
        PyDict_SetItemString(env, "wsgi.file_wrapper", (PyObject *)ctx->st->file_wrapper_type) <
            0 ||
        PyDict_SetItemString(env, "SCRIPT_NAME", root_path) < 0 ||
        set_str(env, "SERVER_SOFTWARE", PyUnicode_FromString("pyserver")) < 0 ||
        add_placeholders(ctx, env) < 0)
        Py_CLEAR(env);
    Py_XDECREF(errors);
    return env;
}

/* root_path without its trailing slashes, as str and as UTF-8 bytes. */
static PyObject *strip_root_path(ps_wsgi_t *ctx, PyObject *rp)
{
    PyObject *stripped = PyObject_CallMethod(rp, "rstrip", "s", "/");
    if (stripped == NULL)
        return NULL;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(stripped, &n);
    if (utf8 == NULL || (ctx->root_path = PyMem_Malloc((size_t)n + 1)) == NULL) {
        Py_DECREF(stripped);
        return utf8 ? PyErr_NoMemory() : NULL;
    }
    memcpy(ctx->root_path, utf8, (size_t)n + 1);
    ctx->root_path_len = (size_t)n;
    return stripped;
}

ps_wsgi_t *ps_wsgi_new(ps_module_state_t *st, PyObject *app, const ps_py_settings_t *s)
{
    ps_wsgi_t *ctx = PyMem_Calloc(1, sizeof(*ctx));
    PyObject *root_path = NULL;
    if (ctx == NULL)
        return (ps_wsgi_t *)PyErr_NoMemory();
    ctx->st = st;
    ctx->app = Py_NewRef(app);
    if (ps_py_cache_init(&ctx->cache, PS_PY_WSGI) < 0)
        goto error;
    for (int i = 0; i < K_COUNT; i++)
        if ((ctx->keys[i] = PyUnicode_InternFromString(key_names[i])) == NULL)
            goto error;
    ctx->protocols[0] = PyUnicode_InternFromString("HTTP/1.0");
    ctx->protocols[1] = PyUnicode_InternFromString("HTTP/1.1");
    ctx->protocols[2] = PyUnicode_InternFromString("HTTP/2");
    ctx->empty = PyUnicode_FromString("");
    ctx->close_name = PyUnicode_InternFromString("close");
    ctx->zero = PyUnicode_InternFromString("0");
    ctx->schemes[PS_SCHEME_HTTP] = PyUnicode_InternFromString("http");
    ctx->schemes[PS_SCHEME_HTTPS] = PyUnicode_InternFromString("https");
    ctx->error_logger = Py_NewRef(s->error_logger);
    if (!ctx->protocols[0] || !ctx->protocols[1] || !ctx->protocols[2] || !ctx->empty ||
        !ctx->close_name || !ctx->zero || !ctx->schemes[PS_SCHEME_HTTP] ||
        !ctx->schemes[PS_SCHEME_HTTPS] || !ctx->error_logger)
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
    root_path = strip_root_path(ctx, s->root_path);
    if (root_path == NULL)
        goto error;
    ctx->base_environ = make_base_environ(ctx, s, root_path);
    if (ctx->base_environ == NULL)
        goto error;
    Py_DECREF(root_path);
    return ctx;
error:
    Py_XDECREF(root_path);
    ps_wsgi_free(ctx);
    return NULL;
}

int ps_wsgi_attach(ps_wsgi_t *ctx, ps_worker_t *w)
{
    if (ctx->nthreads <= 1)
        return 0;
    ctx->loop = ps_worker_loop(w);
    ctx->pool = ps_pool_new(ctx->loop, ctx->nthreads, pool_run, pool_release, pool_notify, ctx);
    if (ctx->pool == NULL)
        return -1;
    /* Under a master the loop stays responsive while a thread is stuck, so
     * the master's heartbeat watchdog cannot see it: this one does. */
    if (w->slot != NULL && ctx->timeout > 0) {
        ev_timer_init(&ctx->watchdog, on_watchdog, 1.0, 1.0);
        ev_timer_start(ctx->loop, &ctx->watchdog);
        ev_unref(ctx->loop);
    }
    return 0;
}

/* Drops the requests the loop will not look at any more (all detached). */
static void drop_lists(ps_wsgi_t *ctx)
{
    while (ctx->ready) {
        wsgi_job_t *job = ctx->ready;
        ctx->ready = job->next_ready;
        job->scheduled = 0;
        job_unref(job);
    }
    while (ctx->waiting) {
        wsgi_job_t *job = ctx->waiting;
        ctx->waiting = job->next_wait;
        job_unref(job);
    }
    ctx->wait_tail = NULL;
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
    if (ctx->pool == NULL)
        return;
    if (ev_is_active(&ctx->watchdog)) {
        ev_ref(ctx->loop);
        ev_timer_stop(ctx->loop, &ctx->watchdog);
    }
    /* Every request is over for the loop; a thread may still be in a
     * close(). One still in the application (the graceful timeout closed
     * its connection) keeps ctx alive: it is left, as the process ends. */
    if (ps_pool_free(ctx->pool, 2.0) < 0) {
        ctx->abandoned = 1;
        return;
    }
    ctx->pool = NULL;
    drop_lists(ctx);
}

void ps_wsgi_free(ps_wsgi_t *ctx)
{
    if (ctx == NULL || ctx->abandoned)
        return;
    free_jobs(ctx);
    pthread_cond_destroy(&ctx->moved);
    pthread_mutex_destroy(&ctx->mu);
    Py_XDECREF(ctx->app);
    Py_XDECREF(ctx->base_environ);
    Py_XDECREF(ctx->error_logger);
    ps_rejects_clear(&ctx->rejects);
    for (int i = 0; i < K_COUNT; i++)
        Py_XDECREF(ctx->keys[i]);
    ps_py_cache_clear(&ctx->cache);
    Py_XDECREF(ctx->protocols[0]);
    Py_XDECREF(ctx->protocols[1]);
    Py_XDECREF(ctx->protocols[2]);
    Py_XDECREF(ctx->empty);
    Py_XDECREF(ctx->close_name);
    Py_XDECREF(ctx->zero);
    Py_XDECREF(ctx->schemes[PS_SCHEME_HTTP]);
    Py_XDECREF(ctx->schemes[PS_SCHEME_HTTPS]);
    PyMem_Free(ctx->root_path);
    PyMem_Free(ctx);
}
