/* The ASGI HTTP scope: a copy of a template with the layer's keys in
 * order, filled from the exchange (target, headers, addresses, TLS, what a
 * trusted proxy forwarded). */
#include "asgi.h"

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
PyObject *ps_asgi_scope(ps_asgi_t *ctx, ps_exchange_t *x, CycleObject *cycle,
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

/* What each scope starts as, a copy of: the keys ps_asgi_scope() sets, in
 * its order, so that filling them in never resizes the dict. Returns 0 or
 * -1 with an exception. */
int ps_asgi_scope_template(ps_asgi_t *ctx)
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
