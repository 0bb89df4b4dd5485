/* The WSGI environ (PEP 3333): the base environ made once per serve()
 * call, and each request's copy of it filled from the exchange (target,
 * addresses, headers, TLS, what a trusted proxy forwarded). */
#include "wsgi.h"

static const char *const key_names[K_COUNT] = {
    "REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO",   "QUERY_STRING",    "CONTENT_TYPE",
    "CONTENT_LENGTH", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "REMOTE_ADDR",
    "REMOTE_PORT",    "RAW_URI",     "wsgi.input",  "wsgi.url_scheme",
};

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
PyObject *ps_wsgi_environ(ps_wsgi_t *ctx, ps_exchange_t *x, RequestObject *req,
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

/* ---- the base environ ---- */

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
    PyObject *errors = ps_wsgi_errors_new(ctx, s);
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

int ps_wsgi_environ_init(ps_wsgi_t *ctx, const ps_py_settings_t *s)
{
    for (int i = 0; i < K_COUNT; i++)
        if ((ctx->keys[i] = PyUnicode_InternFromString(key_names[i])) == NULL)
            return -1;
    ctx->protocols[0] = PyUnicode_InternFromString("HTTP/1.0");
    ctx->protocols[1] = PyUnicode_InternFromString("HTTP/1.1");
    ctx->protocols[2] = PyUnicode_InternFromString("HTTP/2");
    ctx->empty = PyUnicode_FromString("");
    ctx->zero = PyUnicode_InternFromString("0");
    ctx->schemes[PS_SCHEME_HTTP] = PyUnicode_InternFromString("http");
    ctx->schemes[PS_SCHEME_HTTPS] = PyUnicode_InternFromString("https");
    if (!ctx->protocols[0] || !ctx->protocols[1] || !ctx->protocols[2] || !ctx->empty ||
        !ctx->zero || !ctx->schemes[PS_SCHEME_HTTP] || !ctx->schemes[PS_SCHEME_HTTPS])
        return -1;
    PyObject *root_path = strip_root_path(ctx, s->root_path);
    if (root_path == NULL)
        return -1;
    ctx->base_environ = make_base_environ(ctx, s, root_path);
    Py_DECREF(root_path);
    return ctx->base_environ ? 0 : -1;
}

void ps_wsgi_environ_clear(ps_wsgi_t *ctx)
{
    Py_CLEAR(ctx->base_environ);
    for (int i = 0; i < K_COUNT; i++)
        Py_CLEAR(ctx->keys[i]);
    for (int i = 0; i < 3; i++)
        Py_CLEAR(ctx->protocols[i]);
    Py_CLEAR(ctx->empty);
    Py_CLEAR(ctx->zero);
    Py_CLEAR(ctx->schemes[PS_SCHEME_HTTP]);
    Py_CLEAR(ctx->schemes[PS_SCHEME_HTTPS]);
    PyMem_Free(ctx->root_path);
    ctx->root_path = NULL;
}
