/* Error logging from C into Python's logging (pyserver.error), and the
 * access log: one line format for every request, WSGI or ASGI, answered or
 * rejected (the line itself is made by csrc/codec/accesslog.c). */
#include <stdarg.h>
#include <stdio.h>

#include <errno.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "bridge.h"

static void log_with(PyObject *logger, const char *level, PyObject *exc, const char *fmt,
                     va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    PyObject *meth = NULL, *text = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    meth = PyObject_GetAttrString(logger, level);
    if (meth == NULL)
        goto error;
    text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (text == NULL)
        goto error;
    args = PyTuple_Pack(1, text);
    if (args == NULL)
        goto error;
    if (exc != NULL) {
        kwargs = Py_BuildValue("{s:O}", "exc_info", exc);
        if (kwargs == NULL)
            goto error;
    }
    res = PyObject_Call(meth, args, kwargs);
    if (res == NULL)
        goto error;
    goto done;
error:
    /* Logging itself failed: say so on stderr rather than lose both. */
    PyErr_Clear();
    fprintf(stderr, "pyserver: %s\n", msg);
done:
    Py_XDECREF(meth);
    Py_XDECREF(text);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(res);
}

void ps_log_exception(PyObject *logger, const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    va_list ap;
    va_start(ap, fmt);
    log_with(logger, "error", value, fmt, ap);
    va_end(ap);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

void ps_log_error(PyObject *logger, const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* keep a pending exception aside */
    va_list ap;
    va_start(ap, fmt);
    log_with(logger, "error", NULL, fmt, ap);
    va_end(ap);
    PyErr_Restore(type, value, tb);
}

void ps_log_info(PyObject *logger, const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    va_list ap;
    va_start(ap, fmt);
    log_with(logger, "info", NULL, fmt, ap);
    va_end(ap);
    PyErr_Restore(type, value, tb);
}

/* ---- the access log ---- */

struct ps_access_log {
    PyObject *info;        /* access_logger.info */
    ps_alog_t *prog;       /* the compiled format */
    ps_alog_t *fields;     /* the JSON fields: prog itself for JSON lines, else its own */
    ps_buf_t line;         /* reused for every line */
    PyObject *kwnames;     /* ("extra",): every line hands the fields to the formatter */
    PyObject *fields_type; /* JSON lines: pyserver.logconfig.AccessFields, else NULL */
    PyObject *line_name;   /* "line", its attribute for the JSON text */
    PyObject **names;      /* the JSON fields' names, interned */
    size_t nnames;
    int pid;
};

/* Compiles fmt (str) or raises ValueError naming the bad atom. Returns the
 * program (ps_alog_free it) or NULL with an exception. */
static ps_alog_t *compile_format(PyObject *fmt)
{
    char err[PS_ALOG_ERROR_MAX];
    ps_alog_t *prog = NULL;
    Py_ssize_t n;
    const char *s = PyUnicode_Check(fmt) ? PyUnicode_AsUTF8AndSize(fmt, &n) : NULL;
    if (s == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "access_log_format must be str");
        return NULL;
    }
    int rc = ps_alog_compile(s, (size_t)n, &prog, err);
    if (rc == -ENOMEM)
        PyErr_NoMemory();
    else if (rc < 0)
        PyErr_Format(PyExc_ValueError, "access log format: %s", err);
    return rc < 0 ? NULL : prog;
}

PyObject *ps_access_log_check(PyObject *module, PyObject *fmt)
{
    PS_UNUSED(module);
    ps_alog_t *prog = compile_format(fmt);
    if (prog == NULL)
        return NULL;
    ps_alog_free(prog);
    Py_RETURN_NONE;
}

/* module.name, imported: a new reference or NULL with an exception. */
static PyObject *import_attr(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module);
    PyObject *attr = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    return attr;
}

int ps_access_log_new(PyObject *logger, PyObject *fmt, ps_access_log_t **out)
{
    ps_access_log_t *log = PyMem_Calloc(1, sizeof(*log));
    *out = NULL;
    if (log == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    log->pid = (int)getpid(); /* settings are read in the serving process */
    if ((log->prog = compile_format(fmt)) == NULL ||
        (log->info = PyObject_GetAttrString(logger, "info")) == NULL)
        goto error;
    /* Whatever the line's format, the record carries the request's fields (method, path,
     * status, duration...), so a structured formatter or a %(method)s format can use them. */
    if (ps_alog_is_json(log->prog)) {
        log->fields = log->prog;
        if ((log->fields_type = import_attr("pyserver.logconfig", "AccessFields")) == NULL ||
            (log->line_name = PyUnicode_InternFromString("line")) == NULL)
            goto error;
    } else {
        char err[PS_ALOG_ERROR_MAX];
        if (ps_alog_compile("json", 4, &log->fields, err) < 0) {
            PyErr_NoMemory();
            goto error;
        }
    }
    log->nnames = ps_alog_nfields(log->fields);
    log->names = PyMem_Calloc(log->nnames, sizeof(PyObject *));
    if (log->names == NULL || (log->kwnames = Py_BuildValue("(s)", "extra")) == NULL)
        goto error;
    for (size_t i = 0; i < log->nnames; i++) {
        const char *name = ps_alog_field_name(log->fields, i);
        if ((log->names[i] = PyUnicode_InternFromString(name)) == NULL)
            goto error;
    }
    *out = log;
    return 0;
error:
    if (log->names == NULL && !PyErr_Occurred())
        PyErr_NoMemory();
    ps_access_log_free(log);
    return -1;
}

void ps_access_log_free(ps_access_log_t *log)
{
    if (log == NULL)
        return;
    for (size_t i = 0; log->names && i < log->nnames; i++)
        Py_XDECREF(log->names[i]);
    PyMem_Free(log->names);
    Py_XDECREF(log->kwnames);
    Py_XDECREF(log->fields_type);
    Py_XDECREF(log->line_name);
    Py_XDECREF(log->info);
    if (log->fields != log->prog)
        ps_alog_free(log->fields);
    ps_alog_free(log->prog);
    ps_buf_free(&log->line);
    PyMem_Free(log);
}

/* A str of code points below 256 or bytes, as bytes (borrowed). */
static int header_bytes(PyObject *o, ps_slice_t *out)
{
    if (PyBytes_Check(o)) {
        *out = (ps_slice_t){PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o)};
        return 1;
    }
    if (PyUnicode_Check(o) && PyUnicode_KIND(o) == PyUnicode_1BYTE_KIND) {
        *out = (ps_slice_t){(const char *)PyUnicode_1BYTE_DATA(o), (size_t)PyUnicode_GET_LENGTH(o)};
        return 1;
    }
    return 0;
}

#define RESP_HEADERS_MAX 64

/* The response headers the application gave (a WSGI list of (str, str), an
 * ASGI iterable of [bytes, bytes]) as slices into h, without copying; the
 * ones that are neither are left out. Returns the count. */
static size_t view_response_headers(PyObject *headers, ps_header_t *h)
{
    size_t n = 0;
    if (headers == NULL || !(PyList_Check(headers) || PyTuple_Check(headers)))
        return 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    for (Py_ssize_t i = 0; i < count && n < RESP_HEADERS_MAX; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(headers, i);
        if (!(PyList_Check(item) || PyTuple_Check(item)) || PySequence_Fast_GET_SIZE(item) != 2)
            continue;
        if (header_bytes(PySequence_Fast_GET_ITEM(item, 0), &h[n].name) &&
            header_bytes(PySequence_Fast_GET_ITEM(item, 1), &h[n].value))
            n++;
    }
    return n;
}

/* The record's extras: the request's fields by name. New reference or NULL.
 * For JSON lines, an AccessFields (a dict) that is also the record's message. */
static PyObject *json_extras(ps_access_log_t *log, const ps_alog_entry_t *e)
{
    PyObject *d = log->fields_type ? PyObject_CallNoArgs(log->fields_type) : PyDict_New();
    for (size_t i = 0; d != NULL && i < log->nnames; i++) {
        ps_alog_value_t v;
        PyObject *value;
        if (ps_alog_field(log->fields, e, i, &v) < 0)
            value = PyErr_NoMemory();
        else if (v.kind == PS_ALOG_ABSENT)
            continue; /* a field that is left out rather than null */
        else if (v.kind == PS_ALOG_NULL)
            value = Py_NewRef(Py_None);
        else if (v.kind == PS_ALOG_STR)
            value = PyUnicode_DecodeLatin1(v.str.base, (Py_ssize_t)v.str.len, NULL);
        else if (v.kind == PS_ALOG_INT)
            value = PyLong_FromUnsignedLongLong(v.num);
        else
            value = PyFloat_FromDouble((double)v.num / 1e9);
        if (ps_py_set_new(d, log->names[i], value) < 0)
            Py_CLEAR(d);
    }
    return d;
}

/* Formats and logs one line; failures are dropped (never raises). */
static void write_line(ps_access_log_t *log, const ps_alog_entry_t *e)
{
    PyObject *text = NULL, *extras = NULL, *res = NULL, *args[2];
    if (ps_alog_format(log->prog, e, &log->line) < 0)
        goto done;
    text = PyUnicode_DecodeLatin1(log->line.data, (Py_ssize_t)log->line.len, NULL);
    if (text == NULL)
        goto done;
    if ((extras = json_extras(log, e)) == NULL)
        goto done;
    if (log->fields_type != NULL) {
        /* The JSON line is the fields' str(): a %(message)s handler writes it, and a
         * structured formatter takes the dict as the fields, not a JSON string to encode
         * again. */
        if (PyObject_SetAttr(extras, log->line_name, text) < 0)
            goto done;
        Py_SETREF(text, Py_NewRef(extras));
    }
    args[0] = text;
    args[1] = extras;
    res = PyObject_Vectorcall(log->info, args, 1, log->kwnames);
done:
    if (res == NULL)
        PyErr_Clear();
    Py_XDECREF(res);
    Py_XDECREF(extras);
    Py_XDECREF(text);
    ps_buf_shrink(&log->line, 16384);
}

/* Logs x's request. resp_headers: the application's (borrowed), or NULL.
 * A pending exception stays pending. */
static void log_request(ps_access_log_t *log, ps_exchange_t *x, ps_slice_t fwd, int status,
                        PyObject *resp_headers, int rejected)
{
    char host[INET6_ADDRSTRLEN];
    ps_header_t resp[RESP_HEADERS_MAX];
    ps_alog_entry_t e = {.port = -1, .status = status, .pid = log->pid};
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!ps_exchange_request_line(x, &e.method, &e.target, &e.version))
        e.method.base = NULL;
    if (x->req != NULL && x->req->head_complete) {
        e.headers = x->req->headers;
        e.nheaders = x->req->nheaders;
        e.request_id = x->req->request_id;
    }
    if (fwd.base != NULL) {
        e.host = (ps_slice_t){fwd.base, PS_MIN(fwd.len, 256)};
        e.port = 0;
    } else if (!x->is_unix && ps_net_format_address(x->peer, host, &e.port) == 0) {
        e.host = (ps_slice_t){host, strlen(host)};
    }
    if (ps_alog_wants_response_headers(log->prog)) {
        e.resp_headers = resp;
        e.nresp_headers = view_response_headers(resp_headers, resp);
    }
    e.body_bytes = rejected ? 0 : x->body_sent;
    e.duration_ns = rejected || x->log_start == 0 ? 0 : ps_alog_clock() - x->log_start;
    e.now = ev_now(ps_worker_loop(x->worker));
    write_line(log, &e);
    PyErr_Restore(type, value, tb);
}

void ps_log_access(ps_access_log_t *log, ps_exchange_t *x, ps_slice_t fwd_client, int status,
                   PyObject *resp_headers)
{
    log_request(log, x, fwd_client, status, resp_headers, 0);
}

/* ---- rejected requests ---- */

int ps_rejects_init(ps_rejects_t *r, ps_access_log_t *access_log, PyObject *error_logger)
{
    memset(r, 0, sizeof(*r));
    ev_init(&r->summary, NULL);
    r->access_log = access_log;
    PyObject *on = PyObject_CallMethod(error_logger, "isEnabledFor", "i", 20);
    if (on == NULL)
        return -1;
    int enabled = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (enabled < 0)
        return -1;
    if (enabled && (r->error_info = PyObject_GetAttrString(error_logger, "info")) == NULL)
        return -1;
    return 0;
}

void ps_rejects_clear(ps_rejects_t *r)
{
    Py_CLEAR(r->error_info);
}

/* Appends s to out (room for cap bytes, NUL included) with control bytes,
 * non-ASCII, '"' and '\\' as \xHH, so a hostile request cannot forge log
 * lines. Returns the new length. */
static size_t append_escaped(char *out, size_t len, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n && len + 5 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
            out[len++] = '\\';
            out[len++] = 'x';
            out[len++] = hex[ch >> 4];
            out[len++] = hex[ch & 15];
        } else {
            out[len++] = (char)ch;
        }
    }
    out[len] = '\0';
    return len;
}

#define PEER_MAX (256 * 4 + 16)

/* "METHOD TARGET HTTP/x.y" when the request line was read, else "-". */
static void format_request_line(ps_exchange_t *x, char *out, size_t cap)
{
    ps_slice_t m, t, v;
    if (!ps_exchange_request_line(x, &m, &t, &v)) {
        snprintf(out, cap, "-");
        return;
    }
    size_t len = append_escaped(out, 0, cap, m.base, m.len);
    len = append_escaped(out, len, cap, " ", 1);
    len = append_escaped(out, len, cap, t.base, PS_MIN(t.len, 4096));
    len = append_escaped(out, len, cap, " HTTP/", 6);
    append_escaped(out, len, cap, v.base, v.len);
}

/* The client as the reason line shows it: "address:port", an IPv6 address
 * in brackets ("[::1]:8000"), "-" over a unix socket. */
static void format_client(const ps_exchange_t *x, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN];
    int port = 0;
    if (x->is_unix || ps_net_format_address(x->peer, host, &port) < 0)
        snprintf(out, cap, "-");
    else if (x->peer->ss_family == AF_INET6)
        snprintf(out, cap, "[%s]:%d", host, port);
    else
        snprintf(out, cap, "%s:%d", host, port);
}

/* Calls a logger method with one str; failures are dropped (never raises). */
static void emit(PyObject *meth, const char *fmt, ...)
{
    char msg[4096 + 1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    PyObject *text = PyUnicode_DecodeLatin1(msg, (Py_ssize_t)strlen(msg), NULL);
    PyObject *res = text ? PyObject_CallOneArg(meth, text) : NULL;
    if (res == NULL)
        PyErr_Clear();
    Py_XDECREF(res);
    Py_XDECREF(text);
}

static void write_summary(ps_rejects_t *r)
{
    if (r->suppressed && r->error_info)
        emit(r->error_info,
             "Suppressed %u rejections in the last second (at most %d logged a second)",
             r->suppressed, PS_REJECT_LINES_PER_SECOND);
    r->suppressed = 0;
}

static void on_summary(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_rejects_t *r = ps_container_of(t, ps_rejects_t, summary);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_py_loop_gil();
    write_summary(r);
}

/* One more reason line in this second? Counts the ones that are not, and
 * makes sure their summary follows when the second is over. */
static int reason_line_allowed(ps_rejects_t *r, ps_exchange_t *x)
{
    struct ev_loop *loop = ps_worker_loop(x->worker);
    ev_tstamp now = ev_now(loop);
    if (now >= r->window_end) {
        r->window_end = now + 1.0;
        r->lines = 0;
    }
    if (r->lines < PS_REJECT_LINES_PER_SECOND) {
        r->lines++;
        return 1;
    }
    if (r->suppressed++ == 0 && !ev_is_active(&r->summary)) {
        r->loop = loop;
        ev_timer_init(&r->summary, on_summary, PS_MAX(r->window_end - now, 1e-3), 0.0);
        ev_timer_start(loop, &r->summary);
    }
    return 0;
}

void ps_rejects_log(ps_rejects_t *r, ps_exchange_t *x, int status, const char *reason)
{
    int access = r->access_log != NULL && x->app_data == NULL;
    /* Counted first: past the rate limit nothing is formatted for it. */
    int why = r->error_info != NULL && reason_line_allowed(r, x);
    if (access)
        log_request(r->access_log, x, (ps_slice_t){NULL, 0}, status, NULL, 1);
    if (!why)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* a pending exception stays pending */
    char line[4096 + 128], peer[PEER_MAX];
    format_request_line(x, line, sizeof(line));
    format_client(x, peer, sizeof(peer));
    if (line[0] == '-' && line[1] == '\0')
        emit(r->error_info, "Rejected %d from %s: %s", status, peer, reason ? reason : "refused");
    else
        emit(r->error_info, "Rejected %d \"%s\" from %s: %s", status, line, peer,
             reason ? reason : "refused");
    PyErr_Restore(type, value, tb);
}

void ps_rejects_stop(ps_rejects_t *r)
{
    if (r->loop != NULL && ev_is_active(&r->summary))
        ev_timer_stop(r->loop, &r->summary);
    write_summary(r);
}
