/* What WSGI and ASGI both take from an exchange, written once: the client
 * and server addresses, what a trusted proxy forwarded, the cached header
 * names and the cached methods. The two interfaces differ only in the
 * Python shapes, chosen by the cache's kind. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "bridge.h"

int ps_py_cache_init(ps_py_cache_t *c, ps_py_kind_t kind)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    if (kind != PS_PY_WSGI)
        return 0;
    c->content_type = PyUnicode_InternFromString("CONTENT_TYPE");
    c->content_length = PyUnicode_InternFromString("CONTENT_LENGTH");
    return c->content_type && c->content_length ? 0 : -1;
}

void ps_py_cache_clear(ps_py_cache_t *c)
{
    for (size_t i = 0; i < PS_ARRAY_LEN(c->methods); i++)
        Py_CLEAR(c->methods[i]);
    for (size_t i = 0; i < PS_PY_NAME_SLOTS; i++)
        Py_CLEAR(c->names[i].obj);
    Py_CLEAR(c->content_type);
    Py_CLEAR(c->content_length);
}

/* WSGI: an interned str; ASGI: bytes. New reference or NULL. */
static PyObject *make_key(ps_py_kind_t kind, const char *key, size_t n)
{
    if (kind != PS_PY_WSGI)
        return PyBytes_FromStringAndSize(key, (Py_ssize_t)n);
    PyObject *s = PyUnicode_FromStringAndSize(key, (Py_ssize_t)n);
    if (s)
        PyUnicode_InternInPlace(&s);
    return s;
}

PyObject *ps_py_cache_fill(ps_py_cache_t *c, const char *key, size_t n, uint32_t h)
{
    ps_py_name_slot_t *slot = &c->names[h % PS_PY_NAME_SLOTS];
    PyObject *result = make_key(c->kind, key, n);
    if (result == NULL)
        return NULL;
    Py_XSETREF(slot->obj, Py_NewRef(result)); /* a colliding name replaces the slot */
    memcpy(slot->name, key, n);
    slot->len = (uint8_t)n;
    return result;
}

PyObject *ps_py_long_name(ps_py_cache_t *c, ps_slice_t name)
{
    size_t n = (c->kind == PS_PY_WSGI ? 5 : 0) + name.len;
    char *key = PyMem_Malloc(n);
    if (key == NULL)
        return PyErr_NoMemory();
    char *p = key;
    if (c->kind == PS_PY_WSGI) {
        memcpy(key, "HTTP_", 5);
        p += 5;
    }
    for (size_t i = 0; i < name.len; i++) {
        char ch = name.base[i];
        if (c->kind == PS_PY_WSGI)
            ch = ch == '-' ? '_' : (ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch);
        else
            ch = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        p[i] = ch;
    }
    PyObject *result = make_key(c->kind, key, n);
    PyMem_Free(key);
    return result;
}

/* ---- addresses ---- */

static void addresses_free(ps_py_addresses_t *a)
{
    if (a->other)
        addresses_free(a->other);
    Py_XDECREF(a->client);
    Py_XDECREF(a->client_port);
    Py_XDECREF(a->server);
    Py_XDECREF(a->server_port);
    Py_XDECREF(a->tls_ext);
    PyMem_Free(a);
}

void ps_py_addresses_free(ps_exchange_t *x)
{
    if (x->conn_data)
        addresses_free(x->conn_data);
    x->conn_data = NULL;
}

/* One address as the kind wants it: WSGI a host str and a port str, ASGI
 * a (host, port) tuple in *host. Returns 0 or -1 with an exception. */
static int ip_objects(ps_py_kind_t kind, const struct sockaddr_storage *ss, PyObject **host,
                      PyObject **port)
{
    char text[INET6_ADDRSTRLEN];
    int p;
    if (ps_net_format_address(ss, text, &p) < 0) {
        *host = kind == PS_PY_WSGI ? PyUnicode_FromString("") : Py_NewRef(Py_None);
        return *host ? 0 : -1;
    }
    if (kind != PS_PY_WSGI) {
        *host = Py_BuildValue("(si)", text, p);
        return *host ? 0 : -1;
    }
    *host = PyUnicode_FromString(text);
    *port = *host ? PyUnicode_FromFormat("%d", p) : NULL;
    return *port ? 0 : -1;
}

/* A unix socket: the path the listener is bound to, no client address.
 * WSGI: SERVER_NAME the path, SERVER_PORT and REMOTE_ADDR "", no
 * REMOTE_PORT; ASGI: server [path, None], client None. */
static int unix_objects(ps_py_kind_t kind, ps_exchange_t *x, ps_py_addresses_t *a)
{
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    memset(&local, 0, sizeof(local));
    const struct sockaddr_un *un = (const struct sockaddr_un *)&local;
    if (ps_exchange_local_address(x, &local, &len) < 0 || len <= sizeof(sa_family_t))
        len = 0;
    ((char *)&local)[PS_MIN((size_t)len, sizeof(local) - 1)] = '\0';
    PyObject *path = PyUnicode_DecodeFSDefault(len ? un->sun_path : "");
    if (path == NULL)
        return -1;
    if (kind == PS_PY_WSGI) {
        a->server = path;
        a->server_port = PyUnicode_FromString("");
        a->client = PyUnicode_FromString("");
        return a->server_port && a->client ? 0 : -1;
    }
    a->server = Py_BuildValue("[NO]", path, Py_None);
    a->client = Py_NewRef(Py_None);
    return a->server ? 0 : -1;
}

/* Over a unix socket, the IP client a PROXY header named replaces the
 * empty one. Returns 0 or -1 with an exception. */
static int proxied_client(ps_py_kind_t kind, ps_exchange_t *x, ps_py_addresses_t *a)
{
    if (x->peer->ss_family != AF_INET && x->peer->ss_family != AF_INET6)
        return 0;
    Py_CLEAR(a->client);
    return ip_objects(kind, x->peer, &a->client, &a->client_port);
}

/* The server a gateway named (uwsgi's SERVER_NAME and SERVER_PORT): WSGI
 * the name and the port as sent, ASGI (name, port), the port None when it
 * is not a number. Returns 0 or -1 with an exception. */
static int gateway_server(ps_py_kind_t kind, ps_exchange_t *x, ps_py_addresses_t *a)
{
    ps_slice_t name = x->server_name, port = x->server_port;
    Py_CLEAR(a->server);
    Py_CLEAR(a->server_port);
    if (kind == PS_PY_WSGI) {
        a->server = PyUnicode_DecodeLatin1(name.base, (Py_ssize_t)name.len, NULL);
        a->server_port =
            PyUnicode_DecodeLatin1(port.base ? port.base : "", (Py_ssize_t)port.len, NULL);
        return a->server && a->server_port ? 0 : -1;
    }
    long p = port.len > 0 && port.len <= 5 ? 0 : -1;
    for (size_t i = 0; p >= 0 && i < port.len; i++)
        p = port.base[i] >= '0' && port.base[i] <= '9' ? p * 10 + (port.base[i] - '0') : -1;
    PyObject *host = PyUnicode_DecodeLatin1(name.base, (Py_ssize_t)name.len, NULL);
    if (host == NULL)
        return -1;
    a->server = p >= 0 && p <= 65535 ? Py_BuildValue("(Nl)", host, p)
                                     : Py_BuildValue("(NO)", host, Py_None);
    return a->server ? 0 : -1;
}

ps_py_addresses_t *ps_py_addresses(const ps_py_cache_t *c, ps_exchange_t *x)
{
    ps_py_addresses_t *first = x->conn_data;
    if (ps_likely(first != NULL) && ps_likely(first->kind == c->kind))
        return first;
    if (first != NULL && first->other != NULL)
        return first->other; /* the connection carries both kinds */
    ps_py_addresses_t *a = PyMem_Calloc(1, sizeof(*a));
    if (a == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    a->kind = c->kind;
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    local.ss_family = AF_UNIX;
    int rc = x->is_unix ? 0 : ps_exchange_local_address(x, &local, &len);
    if (rc < 0) {
        errno = -rc;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    if (ps_unlikely(local.ss_family == AF_UNIX)) {
        if (unix_objects(c->kind, x, a) < 0 || proxied_client(c->kind, x, a) < 0)
            goto error;
    } else if (ip_objects(c->kind, &local, &a->server, &a->server_port) < 0 ||
               ip_objects(c->kind, x->peer, &a->client, &a->client_port) < 0) {
        goto error;
    }
    if (ps_unlikely(x->server_name.base != NULL) && gateway_server(c->kind, x, a) < 0)
        goto error;
    if (first != NULL)
        first->other = a;
    else
        x->conn_data = a;
    return a;
error:
    addresses_free(a);
    return NULL;
}

/* ---- connections refused before a request ---- */

/* 1 when the rate limit lets one more line through. */
static int refusal_allowed(ps_py_refusals_t *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (now >= r->window_end) {
        r->window_end = now + 1.0;
        r->lines = 0;
    }
    if (r->lines >= PS_REFUSED_LINES_PER_SECOND) {
        r->dropped++;
        return 0;
    }
    r->lines++;
    return 1;
}

void ps_py_log_refused(PyObject *error_logger, ps_py_refusals_t *r, ps_exchange_t *x,
                       const char *reason)
{
    char host[INET6_ADDRSTRLEN];
    int port;
    if (!refusal_allowed(r))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* keep a pending exception aside */
    char more[48] = "";
    if (r->dropped)
        snprintf(more, sizeof(more), " (and %u more not logged)", r->dropped);
    PyObject *res;
    if (ps_net_format_address(x->peer, host, &port) < 0)
        res = PyObject_CallMethod(error_logger, "warning", "sss",
                                  "Closed a connection on a unix socket: %s%s", reason, more);
    else
        res = PyObject_CallMethod(error_logger, "warning", "ssiss",
                                  strchr(host, ':') ? "Closed the connection from [%s]:%d: %s%s"
                                                    : "Closed the connection from %s:%d: %s%s",
                                  host, port, reason, more);
    r->dropped = 0;
    if (res == NULL)
        PyErr_WriteUnraisable(error_logger);
    Py_XDECREF(res);
    PyErr_Restore(type, value, tb);
}

/* ---- what a trusted proxy forwarded ---- */

int ps_py_forwarded_apply(ps_exchange_t *x, ps_proxy_result_t *fwd)
{
    int rc = ps_proxy_apply(x->proxy, x->req, fwd);
    if (rc < 0) {
        ps_exchange_reject(x, 400, ps_proxy_reason(rc));
        return -1;
    }
    return 0;
}

PyObject *ps_py_forwarded_client(const ps_py_cache_t *c, ps_slice_t client, int port)
{
    PyObject *host = PyUnicode_DecodeLatin1(client.base, (Py_ssize_t)client.len, NULL);
    if (host == NULL || c->kind == PS_PY_WSGI)
        return host;
    return Py_BuildValue("(Ni)", host, port);
}
