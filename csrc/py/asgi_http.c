/* ASGI over HTTP (ASGI 3, spec 2.4): a request's cycle, its receive() and
 * send(), the end of the application's run, and the handler the core calls
 * for each request (a WebSocket upgrade goes on in asgi_ws.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asgi.h"

/* A new message dict {"type": <type>}. New reference or NULL. */
static PyObject *message(ps_asgi_t *ctx, int type)
{
    PyObject *m = PyDict_New();
    if (m && PyDict_SetItem(m, ctx->s[S_TYPE], ctx->s[type]) < 0)
        Py_CLEAR(m);
    return m;
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
        ps_asgi_resolve(cycle->ctx, &cycle->receive_waiter, m, 0);
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
    ps_asgi_fail_waiter(ctx, &cycle->send_waiter);
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
        return ps_asgi_ready(ctx, message(ctx, S_HTTP_DISCONNECT));
    if (self->body_done) {
        /* Nothing more will come but the end of the exchange. */
        if (self->receive_waiter == NULL &&
            (self->receive_waiter = ps_asgi_new_future(ctx)) == NULL)
            return NULL;
        return Py_NewRef(self->receive_waiter);
    }
    int rc = ps_exchange_body_want(x);
    if (rc > 0)
        return ps_asgi_ready(ctx, body_message(self, x));
    if (rc < 0)
        return ps_asgi_ready(ctx, message(ctx, S_HTTP_DISCONNECT));
    if (self->receive_waiter == NULL && (self->receive_waiter = ps_asgi_new_future(ctx)) == NULL)
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
        if (self->send_waiter == NULL &&
            (self->send_waiter = ps_asgi_new_future(self->ctx)) == NULL)
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
    return ps_asgi_ready(self->ctx, Py_NewRef(Py_None));
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
    return ps_asgi_ready(ctx, Py_NewRef(Py_None));
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
        return ps_asgi_ready(ctx, Py_NewRef(Py_None));
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
    return ps_asgi_ready(ctx, Py_NewRef(Py_None));
}

static PyObject *send_early_hint(CycleObject *self, PyObject *msg)
{
    ps_asgi_t *ctx = self->ctx;
    if (self->head_sent)
        return ps_asgi_ready(ctx, Py_NewRef(Py_None));
    PyObject *links = PyDict_GetItemWithError(msg, ctx->s[S_LINKS]);
    if (links == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return ps_asgi_ready(ctx, Py_NewRef(Py_None));
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
            return ps_asgi_ready(ctx, Py_NewRef(Py_None));
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
void ps_asgi_app_finished(CycleObject *self, PyObject *exc, int cancelled)
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

PyType_Spec ps_asgi_cycle_spec = {
    .name = "pyserver._core.HTTPCycle",
    .basicsize = sizeof(CycleObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Cycle_slots,
};

/* ---- for asgi_ws.c (asgi_ws.h) ---- */

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

/* Calls the application for cycle and runs what it returns as a task.
 * Returns 0, or -1 with an exception (the caller answers 500). */
static int start_app(ps_asgi_t *ctx, ps_exchange_t *x, CycleObject *cycle,
                     const ps_proxy_result_t *fwd)
{
    PyObject *scope = NULL, *receive = NULL, *send = NULL, *coro = NULL;
    int rc = -1;
    scope = ps_asgi_scope(ctx, x, cycle, fwd);
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
    rc = ps_asgi_task_start(ctx, cycle, coro);
error:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(coro);
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
    if (start_app(ctx, x, cycle, &fwd) < 0) {
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
    ps_asgi_resolve(cycle->ctx, &cycle->receive_waiter, m, 0);
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
    ps_asgi_resolve(cycle->ctx, &cycle->send_waiter, Py_None, 0);
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
