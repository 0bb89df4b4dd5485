/* Error logging from C into Python's logging (pyserver.error), and the
 * access log: one line format for every request, WSGI or ASGI, answered or
 * rejected. */
#include <stdarg.h>
#include <stdio.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "bridge.h"

static void log_with(PyObject *logger, PyObject *exc, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    PyObject *meth = NULL, *text = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    meth = PyObject_GetAttrString(logger, "error");
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
    log_with(logger, value, fmt, ap);
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
    log_with(logger, NULL, fmt, ap);
    va_end(ap);
    PyErr_Restore(type, value, tb);
}

/* ---- rejected requests ---- */

int ps_rejects_init(ps_rejects_t *r, PyObject *access_info, PyObject *error_logger)
{
    memset(r, 0, sizeof(*r));
    ev_init(&r->summary, NULL);
    r->access_info = Py_XNewRef(access_info);
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
    Py_CLEAR(r->access_info);
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

/* The client as the access log shows it: "address:port", an IPv6 address
 * in brackets ("[::1]:8000"), "-" over a unix socket; a forwarded client
 * (fwd.base set) with port 0. */
static void format_client(const ps_exchange_t *x, ps_slice_t fwd, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN];
    int port = 0;
    if (fwd.base != NULL) {
        int v6 = memchr(fwd.base, ':', fwd.len) != NULL;
        size_t len = append_escaped(out, 0, cap, "[", v6);
        len = append_escaped(out, len, cap, fwd.base, PS_MIN(fwd.len, 256));
        snprintf(out + len, cap - len, "%s:0", v6 ? "]" : "");
    } else if (x->is_unix || ps_net_format_address(x->peer, host, &port) < 0) {
        snprintf(out, cap, "-");
    } else if (x->peer->ss_family == AF_INET6) {
        snprintf(out, cap, "[%s]:%d", host, port);
    } else {
        snprintf(out, cap, "%s:%d", host, port);
    }
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
    int access = r->access_info != NULL && x->app_data == NULL;
    /* Counted first: past the rate limit nothing is formatted for it. */
    int why = r->error_info != NULL && reason_line_allowed(r, x);
    if (!access && !why)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* a pending exception stays pending */
    char line[4096 + 128], peer[PEER_MAX];
    format_request_line(x, line, sizeof(line));
    format_client(x, (ps_slice_t){NULL, 0}, peer, sizeof(peer));
    if (access)
        emit(r->access_info, "%s - \"%s\" %d", peer, line, status);
    if (why) {
        if (line[0] == '-' && line[1] == '\0')
            emit(r->error_info, "Rejected %d from %s: %s", status, peer,
                 reason ? reason : "refused");
        else
            emit(r->error_info, "Rejected %d \"%s\" from %s: %s", status, line, peer,
                 reason ? reason : "refused");
    }
    PyErr_Restore(type, value, tb);
}

void ps_log_access(PyObject *access_info, ps_exchange_t *x, ps_slice_t fwd_client, int status)
{
    char line[4096 + 128], client[PEER_MAX];
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* a pending exception stays pending */
    format_request_line(x, line, sizeof(line));
    format_client(x, fwd_client, client, sizeof(client));
    emit(access_info, "%s - \"%s\" %d", client, line, status);
    PyErr_Restore(type, value, tb);
}

void ps_rejects_stop(ps_rejects_t *r)
{
    if (r->loop != NULL && ev_is_active(&r->summary))
        ev_timer_stop(r->loop, &r->summary);
    write_summary(r);
}
