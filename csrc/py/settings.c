/* The settings C takes from a Config: every attribute read here, once, by
 * ps_py_settings_load; nothing else in the bridge reads the Config. Every
 * name read is a field Config declares (tests/test_config_fields.py checks
 * the names this file passes to its helpers against Config). */
#include <errno.h>

#include "codec/compress.h"
#include "master/master.h"
#include "bridge.h"
#include "serve/reqid.h"

/* The attribute `name` of config (new reference), or NULL with an exception. */
static PyObject *get_obj(PyObject *config, const char *name)
{
    return PyObject_GetAttrString(config, name);
}

/* Reads a number attribute of config; returns -1 with an exception. */
static int get_double(PyObject *config, const char *name, double *out)
{
    PyObject *v = get_obj(config, name);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Like get_double; None reads as 0. */
static int get_seconds(PyObject *config, const char *name, double *out)
{
    PyObject *v = get_obj(config, name);
    if (v == NULL)
        return -1;
    *out = v == Py_None ? 0 : PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int get_bool(PyObject *config, const char *name, int *out)
{
    PyObject *v = get_obj(config, name);
    if (v == NULL)
        return -1;
    *out = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *out < 0 ? -1 : 0;
}

/* The optional callable attribute `name` of config (new reference in *out,
 * NULL when None). Returns 0 or -1 with an exception. */
static int get_callable(PyObject *config, const char *name, PyObject **out)
{
    PyObject *v = get_obj(config, name);
    *out = NULL;
    if (v == NULL)
        return -1;
    if (v == Py_None) {
        Py_DECREF(v);
        return 0;
    }
    if (!PyCallable_Check(v)) {
        Py_DECREF(v);
        PyErr_Format(PyExc_TypeError, "pyserver: config.%s must be callable", name);
        return -1;
    }
    *out = v;
    return 0;
}

/* A count: not negative, clamped to max. Returns 0 or -1 with a ValueError. */
static int to_count(double v, const char *name, uint64_t max, uint64_t *out)
{
    if (!(v >= 0)) {
        PyErr_Format(PyExc_ValueError, "pyserver: %s must not be negative", name);
        return -1;
    }
    *out = v > (double)max ? max : (uint64_t)v;
    return 0;
}

static int get_count(PyObject *config, const char *name, uint64_t max, uint64_t *out)
{
    double v;
    return get_double(config, name, &v) < 0 ? -1 : to_count(v, name, max, out);
}

Py_ssize_t ps_py_read_fds(PyObject *items, const char *what, int **out)
{
    PyObject *seq = PySequence_Fast(items, what);
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int *fds = PyMem_Malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (fds == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        fds[i] = PyObject_AsFileDescriptor(PySequence_Fast_GET_ITEM(seq, i));
        if (fds[i] < 0) {
            PyMem_Free(fds);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = fds;
    return n;
}

/* The fds of the sequence attribute `name` into *fds (PyMem_Free it).
 * Returns 0 or -1 with an exception. */
static int get_fds(PyObject *config, const char *name, int **fds, uint32_t *n)
{
    PyObject *v = get_obj(config, name);
    if (v == NULL)
        return -1;
    char what[64];
    snprintf(what, sizeof(what), "config.%s must be a sequence", name);
    Py_ssize_t count = ps_py_read_fds(v, what, fds);
    Py_DECREF(v);
    if (count < 0)
        return -1;
    *n = (uint32_t)count;
    return 0;
}

int ps_py_parse_trust_list(PyObject *value, ps_proxy_t *p)
{
    Py_ssize_t n;
    const char *text = PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, &n) : NULL;
    if (text == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "forwarded_allow_ips must be str, not %.100s",
                         Py_TYPE(value)->tp_name);
        return -1;
    }
    size_t off = 0, len = 0;
    int rc = ps_proxy_init(p, text, (size_t)n, &off, &len);
    if (rc == -ENOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (rc < 0) {
        PyObject *item = PyUnicode_DecodeUTF8(text + off, (Py_ssize_t)len, "replace");
        if (item)
            PyErr_Format(PyExc_ValueError,
                         "invalid IP address or network %R (expected IP addresses or CIDR "
                         "networks separated by commas, or *)",
                         item);
        Py_XDECREF(item);
        return -1;
    }
    return 0;
}

/* Adds secure_scheme_headers (a mapping of header name to the value meaning
 * https) to p. Returns 0 or -1 with an exception. */
static int read_scheme_headers(PyObject *mapping, ps_proxy_t *p)
{
    PyObject *items = PyMapping_Items(mapping);
    if (items == NULL)
        return -1;
    p->secure_headers = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *pair = PyList_GET_ITEM(items, i); /* borrowed */
        Py_ssize_t nlen, vlen;
        const char *name = NULL, *value = NULL;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
            PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) &&
            PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &nlen);
            value = name ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 1), &vlen) : NULL;
        } else {
            PyErr_SetString(PyExc_TypeError, "secure_scheme_headers must map str to str");
        }
        int rc =
            value ? ps_proxy_add_scheme_header(p, name, (size_t)nlen, value, (size_t)vlen) : -1;
        if (rc == -ENOMEM)
            PyErr_NoMemory();
        else if (rc == -EINVAL)
            PyErr_SetString(PyExc_ValueError, "secure_scheme_headers: empty header name");
        if (rc < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

/* proxy_headers, forwarded_allow_ips, secure_scheme_headers and
 * proxy_protocol_fds, uwsgi_fds: s->proxy is initialised when proxy headers
 * are on or a listener speaks the PROXY protocol or uwsgi, and s->core.proxy,
 * s->core.proxyproto_trust and s->core.uwsgi_trust point at it when they are.
 * Returns 0 or -1 with an exception. */
static int load_proxy(PyObject *config, ps_py_settings_t *s)
{
    int on;
    if (get_bool(config, "proxy_headers", &on) < 0 ||
        get_fds(config, "proxy_protocol_fds", &s->proxyproto_fds, &s->nproxyproto) < 0 ||
        get_fds(config, "uwsgi_fds", &s->uwsgi_fds, &s->nuwsgi) < 0)
        return -1;
    if (!on && s->nproxyproto == 0 && s->nuwsgi == 0)
        return 0;
    PyObject *ips = get_obj(config, "forwarded_allow_ips");
    if (ips == NULL || ps_py_parse_trust_list(ips, &s->proxy) < 0) {
        Py_XDECREF(ips);
        return -1;
    }
    Py_DECREF(ips);
    s->proxy_ready = 1; /* from here on, ps_py_settings_free frees it */
    if (s->nproxyproto)
        s->core.proxyproto_trust = &s->proxy;
    if (s->nuwsgi)
        s->core.uwsgi_trust = &s->proxy;
    if (!on)
        return 0;
    s->core.proxy = &s->proxy;
    PyObject *table = get_obj(config, "secure_scheme_headers");
    int rc = table == NULL ? -1 : table == Py_None ? 0 : read_scheme_headers(table, &s->proxy);
    Py_XDECREF(table);
    return rc;
}

/* The WebSocket settings (--ws, --ws-*): ws is "auto" or "none"; None for
 * a ping interval or timeout reads as 0 (off). */
static int load_ws(PyObject *config, ps_config_t *cfg)
{
    double size, queue, level;
    int deflate;
    PyObject *mode = get_obj(config, "ws");
    if (mode == NULL)
        return -1;
    cfg->ws_enabled =
        !(PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "none") == 0);
    Py_DECREF(mode);
    if (get_bool(config, "ws_per_message_deflate", &deflate) < 0 ||
        get_seconds(config, "ws_max_size", &size) < 0 ||
        get_seconds(config, "ws_max_queue", &queue) < 0 ||
        get_seconds(config, "ws_deflate_level", &level) < 0 ||
        get_seconds(config, "ws_ping_interval", &cfg->ws_ping_interval) < 0 ||
        get_seconds(config, "ws_ping_timeout", &cfg->ws_ping_timeout) < 0)
        return -1;
    if (level < 0 || level > 9) {
        PyErr_SetString(PyExc_ValueError, "pyserver: ws_deflate_level must be 0 to 9");
        return -1;
    }
    if (size < 0 || queue < 0 || cfg->ws_ping_interval < 0 || cfg->ws_ping_timeout < 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: WebSocket limits must not be negative");
        return -1;
    }
    cfg->ws_deflate = deflate != 0;
    cfg->ws_deflate_level = (uint8_t)level;
    cfg->ws_max_size = (uint64_t)PS_MIN(size, (double)(1ULL << 62));
    cfg->ws_max_queue = (uint32_t)PS_MIN(queue, 1 << 24);
    return 0;
}

/* The flood bounds (--http2-max-new-streams ... --http2-max-continuations),
 * each at least 1; Config has checked their ranges already. */
static int load_h2_floods(PyObject *config, ps_h2_limits_t *l)
{
    uint64_t opened, resets, control, empty, window, continuations;
    if (get_count(config, "http2_max_new_streams", 1 << 24, &opened) < 0 ||
        get_count(config, "http2_max_resets", 1 << 24, &resets) < 0 ||
        get_count(config, "http2_max_control_frames", 1 << 24, &control) < 0 ||
        get_count(config, "http2_max_empty_frames", 1 << 24, &empty) < 0 ||
        get_count(config, "http2_max_window_updates", 1 << 24, &window) < 0 ||
        get_count(config, "http2_max_continuations", 1 << 16, &continuations) < 0)
        return -1;
    l->max_new_streams = (uint32_t)PS_MAX(opened, 1);
    l->max_resets = (uint32_t)PS_MAX(resets, 1);
    l->max_control = (uint32_t)PS_MAX(control, 1);
    l->max_empty_data = (uint32_t)PS_MAX(empty, 1);
    l->max_window_updates = (uint32_t)PS_MAX(window, 1);
    l->max_continuations = (uint32_t)PS_MAX(continuations, 1);
    return 0;
}

/* The HTTP/2 settings (--http, --http2-*), over the defaults of
 * ps_h2_limits_default. */
static int load_h2(PyObject *config, ps_config_t *cfg)
{
    uint64_t streams, headers, stream_window, conn_window;
    PyObject *mode = get_obj(config, "http");
    if (mode == NULL)
        return -1;
    int only1 = PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "1") == 0;
    int only2 = PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "2") == 0;
    Py_DECREF(mode);
    if (get_count(config, "http2_max_concurrent_streams", 1 << 20, &streams) < 0 ||
        get_count(config, "http2_max_headers_size", 1 << 24, &headers) < 0 ||
        get_count(config, "http2_initial_stream_window_size", INT32_MAX, &stream_window) < 0 ||
        get_count(config, "http2_initial_connection_window_size", INT32_MAX, &conn_window) < 0)
        return -1;
    ps_h2_limits_default(&cfg->h2);
    cfg->h2c = !only1;
    cfg->h2c_upgrade = !only1 && !only2;
    cfg->h2_only = only2;
    cfg->h2.max_concurrent_streams = (uint32_t)PS_MAX(streams, 1);
    cfg->h2.max_header_list_size = (uint32_t)PS_MAX(headers, 1024);
    cfg->h2.max_header_block = cfg->h2.max_header_list_size + 16384;
    cfg->h2.max_header_fields = cfg->limits.max_fields;
    cfg->h2.stream_window = (uint32_t)PS_MAX(stream_window, 1024);
    cfg->h2.connection_window = (uint32_t)PS_MAX(conn_window, 65535);
    cfg->h2.max_body = cfg->limits.max_body;
    return load_h2_floods(config, &cfg->h2);
}

/* The core's part (ps_config_t), but for the proxy. */
static int load_core(PyObject *config, ps_py_settings_t *s, double graceful_timeout)
{
    ps_config_t *cfg = &s->core;
    double line, fields, field_size, head, body, conns, spool;
    int server_header, date_header, request_id, request_start;
    if (get_double(config, "limit_request_line", &line) < 0 ||
        get_double(config, "limit_request_fields", &fields) < 0 ||
        get_double(config, "limit_request_field_size", &field_size) < 0 ||
        get_double(config, "limit_request_head", &head) < 0 ||
        get_double(config, "limit_request_body", &body) < 0 ||
        get_double(config, "timeout_keep_alive", &cfg->timeout_keep_alive) < 0 ||
        get_double(config, "timeout_request_header", &cfg->timeout_request_header) < 0 ||
        get_double(config, "timeout_request_body", &cfg->timeout_request_body) < 0 ||
        get_double(config, "body_spool_threshold", &spool) < 0 ||
        get_double(config, "limit_connections", &conns) < 0 ||
        get_bool(config, "server_header", &server_header) < 0 ||
        get_bool(config, "date_header", &date_header) < 0 ||
        get_bool(config, "request_id", &request_id) < 0 ||
        get_bool(config, "request_start_header", &request_start) < 0)
        return -1;
    if (line < 1 || fields < 1 || field_size < 1 || head < 1 || body < 0 || conns < 1 ||
        spool < 0) {
        PyErr_SetString(PyExc_ValueError, "pyserver: request limits must be positive");
        return -1;
    }
    cfg->limits.max_request_line = (uint32_t)PS_MIN(line, 1 << 20);
    cfg->limits.max_fields = (uint32_t)PS_MIN(fields, 1 << 16);
    cfg->limits.max_field_size = (uint32_t)PS_MIN(field_size, 1 << 20);
    cfg->limits.max_head = (uint32_t)PS_MIN(head, 1 << 30);
    cfg->limits.max_body = (uint64_t)body;
    /* uwsgi (nginx's uwsgi_pass): the packet is the head (at most 64 KiB, as
     * nginx's uwsgi_buffer_size allows), its variables the header fields
     * plus the CGI ones nginx's uwsgi_params sends, a variable as large as
     * the request line (REQUEST_URI) or a field. */
    cfg->uwsgi_limits.max_packet = (uint32_t)PS_MIN(head, PS_UWSGI_MAX_PACKET);
    cfg->uwsgi_limits.max_vars = cfg->limits.max_fields + PS_UWSGI_CGI_VARS;
    cfg->uwsgi_limits.max_var_size =
        PS_MAX(cfg->limits.max_request_line, cfg->limits.max_field_size) + 32;
    cfg->uwsgi_limits.max_body = cfg->limits.max_body;
    cfg->body_spool_threshold = (uint64_t)PS_MIN(spool, (double)(1ULL << 62));
    cfg->limit_connections = (uint32_t)PS_MIN(conns, 1 << 24);
    cfg->graceful_timeout = graceful_timeout;
    cfg->server_header = server_header != 0;
    cfg->date_header = date_header != 0;
    cfg->reqid = (request_id ? PS_REQID_ID : 0) | (request_start ? PS_REQID_START : 0);
    if (load_h2(config, cfg) < 0)
        return -1;
    return load_ws(config, cfg);
}

/* The str-or-None attribute `name` (a new reference in objs[*n], kept by
 * the caller until its text is used) as UTF-8 in *out, NULL for None.
 * Returns 0 or -1 with an exception. */
static int get_text(PyObject *config, const char *name, PyObject **objs, int *n, const char **out)
{
    PyObject *v = get_obj(config, name);
    *out = NULL;
    if (v == NULL)
        return -1;
    objs[(*n)++] = v;
    if (v == Py_None)
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "pyserver: config.%s must be str or None", name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(v);
    return *out ? 0 : -1;
}

/* The str, list-of-str or None attribute `name` (a new reference in
 * objs[*n], kept by the caller until the text is used) as UTF-8 into
 * out[0..*count), at most max of them. Returns 0 or -1 with an exception. */
static int get_texts(PyObject *config, const char *name, PyObject **objs, int *n, const char **out,
                     int max, int *count)
{
    PyObject *v = get_obj(config, name);
    *count = 0;
    if (v == NULL)
        return -1;
    objs[(*n)++] = v;
    if (v == Py_None)
        return 0;
    if (PyUnicode_Check(v)) {
        *count = 1;
        return (out[0] = PyUnicode_AsUTF8(v)) ? 0 : -1;
    }
    if (!PyList_Check(v) && !PyTuple_Check(v)) {
        PyErr_Format(PyExc_TypeError, "pyserver: config.%s must be a list of str", name);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(v);
    if (len > max) {
        PyErr_Format(PyExc_ValueError, "pyserver: config.%s: at most %d values", name, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(v, i); /* borrowed; v keeps it */
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "pyserver: config.%s must be a list of str", name);
            return -1;
        }
        if ((out[i] = PyUnicode_AsUTF8(item)) == NULL)
            return -1;
    }
    *count = (int)len;
    return 0;
}

/* --ssl-certfile and --ssl-keyfile: the pairs into ts (their text kept
 * alive by objs). Every certificate with its key, or no keys at all (each
 * file holds its own). Returns 0 or -1 with an exception. */
static int get_pairs(PyObject *config, PyObject **objs, int *nobj, ps_tls_settings_t *ts)
{
    const char *certs[PS_TLS_MAX_CERTS], *keys[PS_TLS_MAX_CERTS];
    int nkeys;
    if (get_texts(config, "ssl_certfile", objs, nobj, certs, PS_TLS_MAX_CERTS, &ts->ncerts) < 0 ||
        get_texts(config, "ssl_keyfile", objs, nobj, keys, PS_TLS_MAX_CERTS, &nkeys) < 0)
        return -1;
    if (nkeys != 0 && nkeys != ts->ncerts) {
        PyErr_Format(PyExc_ValueError,
                     "TLS: %d certificate files and %d key files: give one key file per "
                     "certificate, in the same order",
                     ts->ncerts, nkeys);
        return -1;
    }
    for (int i = 0; i < ts->ncerts; i++)
        ts->certs[i] = (ps_tls_cert_t){certs[i], nkeys ? keys[i] : NULL};
    return 0;
}

/* --ssl-*: a TLS context in s->tls (and s->core.tls) when ssl_certfile is
 * set, loaded now (fresh: from the files, else from the text kept since the
 * last check when the names match; see ps_py_tls_ctx_new): a bad
 * certificate, key, password or cipher list is a ValueError naming it
 * ("pyserver: TLS: cannot load ..."). Returns 0 or -1 with an exception. */
static int load_tls(PyObject *config, ps_py_settings_t *s, int fresh)
{
    PyObject *objs[8];
    int nobj = 0, rc = -1;
    const char *version = NULL;
    double reqs;
    ps_tls_settings_t ts;
    memset(&ts, 0, sizeof(ts));
    if (get_double(config, "timeout_tls_handshake", &s->core.timeout_tls_handshake) < 0 ||
        get_double(config, "ssl_ticket_rotation", &s->tls_ticket_rotation) < 0 ||
        get_pairs(config, objs, &nobj, &ts) < 0)
        goto done;
    if (ts.ncerts == 0) {
        rc = 0;
        goto done;
    }
    if (get_text(config, "ssl_keyfile_password", objs, &nobj, &ts.key_password) < 0 ||
        get_text(config, "ssl_ca_certs", objs, &nobj, &ts.ca_certs) < 0 ||
        get_text(config, "ssl_ciphers", objs, &nobj, &ts.ciphers) < 0 ||
        get_text(config, "ssl_version", objs, &nobj, &version) < 0 ||
        get_double(config, "ssl_cert_reqs", &reqs) < 0)
        goto done;
    ts.cert_reqs = (int)reqs;
    ts.min_version = version && strcmp(version, "TLSv1.3") == 0 ? 0x0304 : 0x0303;
    /* ALPN follows --http: h2 first unless HTTP/1.1 only; h2 alone for "2". */
    PyObject *mode = get_obj(config, "http");
    if (mode == NULL)
        goto done;
    int only1 = PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "1") == 0;
    int only2 = PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "2") == 0;
    Py_DECREF(mode);
    static const char alpn_both[] = "\x02h2\x08http/1.1", alpn_h2[] = "\x02h2";
    if (only2) {
        ts.alpn = alpn_h2;
        ts.alpn_len = sizeof(alpn_h2) - 1;
    } else if (!only1) {
        ts.alpn = alpn_both;
        ts.alpn_len = sizeof(alpn_both) - 1;
    }
    char err[512];
    s->tls = ps_py_tls_ctx_new(&ts, fresh, err, sizeof(err));
    if (s->tls == NULL) {
        PyErr_Format(PyExc_ValueError, "TLS: %s", err);
        goto done;
    }
    s->core.tls = s->tls;
    rc = 0;
done:
    for (int i = 0; i < nobj; i++)
        Py_DECREF(objs[i]);
    return rc;
}

/* --hsts and --redirect-http: the Strict-Transport-Security line, built
 * once here (s->hsts, PyMem_Malloc'd) for the protocols to add as it is,
 * and the redirect listeners with the HTTPS port they name. Returns 0 or
 * -1 with an exception. */
static int load_https(PyObject *config, ps_py_settings_t *s)
{
    static const char name[] = "Strict-Transport-Security: ";
    PyObject *obj = NULL;
    const char *value;
    uint64_t port;
    int nobj = 0;
    if (get_fds(config, "redirect_fds", &s->redirect_fds, &s->nredirect) < 0 ||
        get_count(config, "redirect_https_port", 65535, &port) < 0 ||
        get_text(config, "hsts", &obj, &nobj, &value) < 0)
        goto error;
    s->core.redirect_port = (uint16_t)port;
    if (value != NULL) {
        size_t n = strlen(value), len = sizeof(name) - 1 + n + 2;
        if ((s->hsts = PyMem_Malloc(len)) == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        memcpy(s->hsts, name, sizeof(name) - 1);
        memcpy(s->hsts + sizeof(name) - 1, value, n);
        memcpy(s->hsts + len - 2, "\r\n", 2);
        s->core.hsts_line = (ps_slice_t){s->hsts, len};
        s->core.hsts_value = (ps_slice_t){s->hsts + sizeof(name) - 1, n};
    }
    Py_XDECREF(obj);
    return 0;
error:
    Py_XDECREF(obj);
    return -1;
}

int ps_py_check_tls(PyObject *config)
{
    ps_py_settings_t s;
    memset(&s, 0, sizeof(s));
    int rc = load_tls(config, &s, 1);
    ps_tls_ctx_free(s.tls);
    return rc;
}

/* The master's part (run_master), but for graceful_timeout and max_requests. */
static int load_master(PyObject *config, ps_master_config_t *mc, double workers)
{
    uint64_t nworkers, max_rss_mib, backlog;
    int reuse_port;
    if (to_count(workers, "workers", PS_MASTER_MAX_SLOTS / 2, &nworkers) < 0 ||
        get_double(config, "timeout", &mc->timeout) < 0 ||
        get_count(config, "max_requests_jitter", UINT64_MAX / 2, &mc->max_requests_jitter) < 0 ||
        get_count(config, "max_rss", UINT64_MAX / 4096, &max_rss_mib) < 0 ||
        get_count(config, "backlog", INT32_MAX, &backlog) < 0 ||
        get_bool(config, "reuse_port", &reuse_port) < 0)
        return -1;
    double metrics_fd;
    if (get_double(config, "metrics_fd", &metrics_fd) < 0)
        return -1;
    mc->metrics_fd = metrics_fd >= 0 && metrics_fd <= INT32_MAX ? (int)metrics_fd : -1;
    mc->workers = (uint32_t)PS_MAX(nworkers, 1);
    mc->max_rss_kib = max_rss_mib * 1024;
    mc->backlog = backlog ? (int)backlog : 2048;
    mc->reuse_port = reuse_port;
    if (!reuse_port)
        return 0;
    int *fds;
    if (get_fds(config, "sockets", &fds, &mc->nlisten) < 0)
        return -1;
    mc->listen_fds = fds;
    return 0;
}

/* --asgi-app and --asgi-path: s->asgi_app (NULL without one) and
 * s->asgi_paths, the prefixes as UTF-8 bytes. A config without the
 * attributes has neither. Returns 0 or -1 with an exception. */
static int load_asgi_side(PyObject *config, ps_py_settings_t *s)
{
    PyObject *paths = NULL, *seq = NULL;
    int rc = -1;
    if (!PyObject_HasAttrString(config, "loaded_asgi_app"))
        return 0;
    if (get_callable(config, "loaded_asgi_app", &s->asgi_app) < 0 || s->asgi_app == NULL)
        return s->asgi_app == NULL && !PyErr_Occurred() ? 0 : -1;
    if ((paths = get_obj(config, "asgi_paths")) == NULL ||
        (seq = PySequence_Fast(paths, "pyserver: config.asgi_paths must be a list")) == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((s->asgi_paths = PyTuple_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyUnicode_AsUTF8String(PySequence_Fast_GET_ITEM(seq, i));
        if (b == NULL)
            goto done;
        PyTuple_SET_ITEM(s->asgi_paths, i, b);
    }
    rc = 0;
done:
    Py_XDECREF(paths);
    Py_XDECREF(seq);
    return rc;
}

/* The interface layers' part: interface, root_path, url_scheme,
 * limit_concurrency, the loggers. */
static int load_bridge(PyObject *config, ps_py_settings_t *s)
{
    PyObject *iface = get_obj(config, "interface");
    if (iface == NULL)
        return -1;
    s->asgi = PyUnicode_Check(iface) && PyUnicode_CompareWithASCIIString(iface, "asgi") == 0;
    Py_DECREF(iface);
    if (load_asgi_side(config, s) < 0)
        return -1;

    if ((s->root_path = get_obj(config, "root_path")) == NULL)
        return -1;
    if (s->root_path == Py_None) {
        Py_SETREF(s->root_path, PyUnicode_FromString(""));
        if (s->root_path == NULL)
            return -1;
    }
    if (!PyUnicode_Check(s->root_path)) {
        PyErr_SetString(PyExc_TypeError, "pyserver: config.root_path must be str");
        return -1;
    }
    if ((s->url_scheme = get_obj(config, "url_scheme")) == NULL)
        return -1;

    PyObject *lc = get_obj(config, "limit_concurrency");
    if (lc == NULL)
        return -1;
    long long n = lc == Py_None ? 0 : PyLong_AsLongLong(lc);
    Py_DECREF(lc);
    if (n == -1 && PyErr_Occurred())
        return -1;
    s->limit_concurrency = n > 0 ? (uint32_t)PS_MIN(n, UINT32_MAX) : 0;

    double threads;
    if (get_double(config, "threads", &threads) < 0)
        return -1;
    s->threads = threads >= 1 && threads <= 1024 ? (uint32_t)threads : 1;

    double errors_level;
    if (get_double(config, "wsgi_errors_level", &errors_level) < 0)
        return -1;
    s->wsgi_errors_level = (int)errors_level;

    int access_log;
    if ((s->error_logger = get_obj(config, "error_logger")) == NULL ||
        get_bool(config, "access_log", &access_log) < 0)
        return -1;
    if (!access_log) /* Config turns it off too when the access logger drops INFO */
        return 0;
    PyObject *access_logger = get_obj(config, "access_logger");
    PyObject *fmt = access_logger ? get_obj(config, "access_log_format") : NULL;
    int rc = fmt ? ps_access_log_new(access_logger, fmt, &s->access_log) : -1;
    Py_XDECREF(access_logger);
    Py_XDECREF(fmt);
    return rc;
}

/* --static, --static-max-age, --static-strict, --static-precompressed: s->statics (and
 * s->core.statics) when static names mounts ("PREFIX=DIR" strings, DIR
 * opened now). Returns 0 or -1 with a ValueError naming the bad mount. */
static int load_static(PyObject *config, ps_py_settings_t *s)
{
    int strict, precompressed;
    PyObject *mounts = get_obj(config, "static");
    PyObject *age = mounts ? get_obj(config, "static_max_age") : NULL;
    PyObject *seq = NULL;
    int rc = -1;
    if (age == NULL || get_bool(config, "static_strict", &strict) < 0 ||
        get_bool(config, "static_precompressed", &precompressed) < 0)
        goto done;
    if ((seq = PySequence_Fast(mounts, "pyserver: config.static must be a list")) == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(seq) == 0) {
        rc = 0;
        goto done;
    }
    ps_static_init(&s->statics);
    s->statics_ready = 1; /* from here on, ps_py_settings_free frees it */
    s->statics.strict = strict != 0;
    s->statics.precompressed = precompressed != 0;
    if (age != Py_None) {
        long long n = PyLong_AsLongLong(age);
        if (n == -1 && PyErr_Occurred())
            goto done;
        s->statics.max_age = n < 0 ? -1 : n;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_ssize_t len;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const char *spec = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : NULL;
        if (spec == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "pyserver: config.static items must be str");
            goto done;
        }
        int err = ps_static_add(&s->statics, spec, (size_t)len);
        if (err == -ENOMEM) {
            PyErr_NoMemory();
            goto done;
        }
        if (err < 0) {
            PyErr_Format(PyExc_ValueError, "--static %s: %s", spec,
                         err == -EINVAL   ? "expected PREFIX=DIR, PREFIX an absolute URL path"
                         : err == -EEXIST ? "the prefix is mounted twice"
                                          : strerror(-err));
            goto done;
        }
    }
    if (ps_static_load_mime(&s->statics, "/etc/mime.types") == -ENOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    s->core.statics = &s->statics;
    rc = 0;
done:
    Py_XDECREF(mounts);
    Py_XDECREF(age);
    Py_XDECREF(seq);
    return rc;
}

/* --health-check-path and --drain-delay: s->core.health_path (into
 * s->health_path, kept until the settings are freed), the worker's and
 * the master's drain delay. Returns 0 or -1 with an exception. */
static int load_health(PyObject *config, ps_py_settings_t *s)
{
    double delay;
    PyObject *path = get_obj(config, "health_check_path");
    if (path == NULL || get_seconds(config, "drain_delay", &delay) < 0)
        goto error;
    if (!(delay >= 0)) {
        PyErr_SetString(PyExc_ValueError, "pyserver: drain_delay must not be negative");
        goto error;
    }
    s->core.drain_delay = s->master.drain_delay = delay;
    if (path != Py_None) {
        if (!PyUnicode_Check(path)) {
            PyErr_SetString(PyExc_TypeError, "pyserver: config.health_check_path must be str");
            goto error;
        }
        if ((s->health_path = PyUnicode_AsUTF8String(path)) == NULL)
            goto error;
        s->core.health_path = (ps_slice_t){PyBytes_AS_STRING(s->health_path),
                                           (size_t)PyBytes_GET_SIZE(s->health_path)};
    }
    Py_DECREF(path);
    return 0;
error:
    Py_XDECREF(path);
    return -1;
}

/* --compress-types into c->types. Returns 0 or -1 with an exception. */
static int load_compress_types(PyObject *config, ps_encode_cfg_t *c)
{
    const char *types[PS_ENCODE_MAX_TYPES];
    PyObject *obj = NULL;
    int nobj = 0, n, rc = -1;
    if (get_texts(config, "compress_types", &obj, &nobj, types, PS_ENCODE_MAX_TYPES, &n) < 0)
        goto done;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(types[i]);
        if (len == 0 || len >= PS_ENCODE_TYPE_LEN) {
            PyErr_Format(PyExc_ValueError, "--compress-types: a bad type '%s'", types[i]);
            goto done;
        }
        memcpy(c->types[c->ntypes++], types[i], len + 1);
    }
    rc = 0;
done:
    Py_XDECREF(obj);
    return rc;
}

/* --compress and its settings: s->compress, and s->core.compress when on.
 * Returns 0 or -1 with an exception. */
static int load_compress(PyObject *config, ps_py_settings_t *s)
{
    int on;
    double min_size, fail_after;
    ps_encode_cfg_t *c = &s->compress;
    if (get_bool(config, "compress", &on) < 0)
        return -1;
    if (!on)
        return 0;
    PyObject *level = get_obj(config, "compress_level");
    if (level == NULL)
        return -1;
    c->level = PS_COMPRESS_LEVEL_DEFAULT;
    if (level != Py_None)
        c->level = (int)PyLong_AsLong(level);
    Py_DECREF(level);
    if (PyErr_Occurred() || get_double(config, "compress_min_size", &min_size) < 0 ||
        get_double(config, "compress_fail_after", &fail_after) < 0 ||
        load_compress_types(config, c) < 0)
        return -1;
    c->min_size = min_size > 0 ? (uint64_t)min_size : 0;
    c->fail_after = fail_after > 0 ? (uint64_t)fail_after : 0;
    c->offered =
        PS_CODING_BIT(PS_CODING_BR) | PS_CODING_BIT(PS_CODING_ZSTD) | PS_CODING_BIT(PS_CODING_GZIP);
    s->core.compress = c;
    return 0;
}

int ps_py_settings_load(PyObject *config, ps_py_settings_t *s)
{
    double graceful_timeout, max_requests, workers;
    memset(s, 0, sizeof(*s));
    /* Read once, used by both the worker's part and the master's. */
    if (get_double(config, "graceful_timeout", &graceful_timeout) < 0 ||
        get_double(config, "max_requests", &max_requests) < 0 ||
        get_double(config, "workers", &workers) < 0)
        goto error;
    s->multiprocess = workers > 1;
    s->master.graceful_timeout = graceful_timeout;
    if (to_count(max_requests, "max_requests", UINT64_MAX / 2, &s->master.max_requests) < 0 ||
        load_core(config, s, graceful_timeout) < 0 || load_proxy(config, s) < 0 ||
        load_master(config, &s->master, workers) < 0 || load_bridge(config, s) < 0 ||
        load_tls(config, s, 0) < 0 || load_https(config, s) < 0 || load_static(config, s) < 0 ||
        load_health(config, s) < 0 || load_compress(config, s) < 0)
        goto error;

    /* Supervision by a foreign process manager (the gunicorn worker). */
    if (get_callable(config, "on_tick", &s->on_tick) < 0 ||
        get_callable(config, "on_stop_signal", &s->on_stop_signal) < 0 ||
        get_callable(config, "on_hup", &s->on_hup) < 0 ||
        get_callable(config, "wsgi_errors_write", &s->wsgi_errors_write) < 0 ||
        get_double(config, "tick_interval", &s->tick_interval) < 0)
        goto error;
    if ((s->on_tick || s->on_stop_signal) && !(s->tick_interval > 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "pyserver: tick_interval must be positive, max_requests not negative");
        goto error;
    }
    s->sup_max_requests = max_requests > 1e18 ? (uint64_t)1e18 : (uint64_t)max_requests;

    if (get_fds(config, "bound_fds", &s->bound_fds, &s->nbound) < 0)
        goto error;
    return 0;
error:
    ps_py_settings_free(s);
    return -1;
}

void ps_py_settings_free(ps_py_settings_t *s)
{
    if (s->proxy_ready)
        ps_proxy_free(&s->proxy);
    s->proxy_ready = 0;
    s->core.proxy = NULL;
    ps_tls_ctx_free(s->tls);
    s->tls = s->core.tls = NULL;
    s->core.proxyproto_trust = NULL;
    if (s->statics_ready)
        ps_static_free(&s->statics);
    s->statics_ready = 0;
    s->core.statics = NULL;
    s->core.compress = NULL;
    PyMem_Free(s->proxyproto_fds);
    s->proxyproto_fds = NULL;
    s->core.uwsgi_trust = NULL;
    PyMem_Free(s->uwsgi_fds);
    s->uwsgi_fds = NULL;
    PyMem_Free(s->redirect_fds);
    s->redirect_fds = NULL;
    PyMem_Free(s->hsts);
    s->hsts = NULL;
    s->core.hsts_line = s->core.hsts_value = (ps_slice_t){NULL, 0};
    PyMem_Free((void *)s->master.listen_fds);
    s->master.listen_fds = NULL;
    PyMem_Free(s->bound_fds);
    s->bound_fds = NULL;
    Py_CLEAR(s->root_path);
    Py_CLEAR(s->url_scheme);
    Py_CLEAR(s->error_logger);
    ps_access_log_free(s->access_log);
    s->access_log = NULL;
    Py_CLEAR(s->on_tick);
    Py_CLEAR(s->on_stop_signal);
    Py_CLEAR(s->on_hup);
    Py_CLEAR(s->wsgi_errors_write);
    Py_CLEAR(s->asgi_app);
    Py_CLEAR(s->asgi_paths);
    s->core.health_path = (ps_slice_t){NULL, 0};
    Py_CLEAR(s->health_path);
}
