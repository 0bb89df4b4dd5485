/* The ASGI websocket scope (spec 2.4 of the websocket messages, with the
 * websocket.http.response extension): receive() and send() of an upgrade
 * request's cycle (see asgi_ws.h). Like HTTP's, they finish without
 * suspending whenever a message is waiting or the output is under its
 * high-water mark, and otherwise hand the task a Future resolved from the
 * connection's callbacks. */
#include <errno.h>
#include <string.h>

#include "asgi_ws.h"

enum {
    W_TYPE,
    W_WEBSOCKET,
    W_CONNECT,
    W_ACCEPT,
    W_RECEIVE,
    W_SEND,
    W_CLOSE,
    W_DISCONNECT,
    W_RESPONSE_START,
    W_RESPONSE_BODY,
    W_TEXT,
    W_BYTES,
    W_CODE,
    W_REASON,
    W_SUBPROTOCOL,
    W_SUBPROTOCOLS,
    W_HEADERS,
    W_SCHEME,
    W_METHOD,
    W_EXTENSIONS,
    W_HTTPS,
    W_WS,
    W_WSS,
    W_COUNT
};

static const char *const w_names[W_COUNT] = {
    "type",
    "websocket",
    "websocket.connect",
    "websocket.accept",
    "websocket.receive",
    "websocket.send",
    "websocket.close",
    "websocket.disconnect",
    "websocket.http.response.start",
    "websocket.http.response.body",
    "text",
    "bytes",
    "code",
    "reason",
    "subprotocol",
    "subprotocols",
    "headers",
    "scheme",
    "method",
    "extensions",
    "https",
    "ws",
    "wss",
};

struct ps_asgi_ws_strings {
    PyObject *s[W_COUNT];
    PyObject *empty_str;
    PyObject *extensions; /* {"websocket.http.response": {}} */
};

struct ps_asgi_ws {
    ps_asgi_t *ctx;
    struct ps_asgi_ws_strings *str;
    PyObject *cycle;  /* borrowed: the cycle owns this */
    ps_exchange_t *x; /* NULL once the cycle is cut from its connection */
    ps_wsconn_t *wc;  /* after the accept */
    ps_ws_handshake_t hs;
    PyObject *receive_waiter;
    PyObject *send_waiter;
    PyObject *pending; /* list: messages left when the connection went away, or not taken */
    PyObject *last;    /* the websocket.disconnect receive() returns from then on */
    unsigned connect_sent : 1;
    unsigned accepted : 1;
    unsigned denied : 1;     /* a denial response started */
    unsigned close_sent : 1; /* websocket.close from the application */
};

#define S(ws, i) ((ws)->str->s[i])

static const ps_wsconn_ops_t ws_ops;

void ps_asgi_ws_strings_free(struct ps_asgi_ws_strings *st)
{
    if (st == NULL)
        return;
    for (int i = 0; i < W_COUNT; i++)
        Py_XDECREF(st->s[i]);
    Py_XDECREF(st->empty_str);
    Py_XDECREF(st->extensions);
    PyMem_Free(st);
}

static struct ps_asgi_ws_strings *strings(ps_asgi_t *ctx)
{
    struct ps_asgi_ws_strings **slot = ps_asgi_ws_strings_slot(ctx);
    if (*slot)
        return *slot;
    struct ps_asgi_ws_strings *st = PyMem_Calloc(1, sizeof(*st));
    if (st == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < W_COUNT; i++)
        if ((st->s[i] = PyUnicode_InternFromString(w_names[i])) == NULL)
            goto error;
    st->empty_str = PyUnicode_FromStringAndSize("", 0);
    st->extensions = Py_BuildValue("{s:{}}", "websocket.http.response");
    if (st->empty_str == NULL || st->extensions == NULL)
        goto error;
    *slot = st;
    return st;
error:
    ps_asgi_ws_strings_free(st);
    return NULL;
}

ps_asgi_ws_t *ps_asgi_ws_new(ps_asgi_t *ctx, PyObject *cycle, ps_exchange_t *x,
                             const ps_ws_handshake_t *hs)
{
    struct ps_asgi_ws_strings *st = strings(ctx);
    if (st == NULL)
        return NULL;
    ps_asgi_ws_t *ws = PyMem_Calloc(1, sizeof(*ws));
    if (ws == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    ws->ctx = ctx;
    ws->str = st;
    ws->cycle = cycle;
    ws->x = x;
    ws->hs = *hs;
    return ws;
}

void ps_asgi_ws_clear(ps_asgi_ws_t *ws)
{
    Py_CLEAR(ws->receive_waiter);
    Py_CLEAR(ws->send_waiter);
    Py_CLEAR(ws->pending);
    Py_CLEAR(ws->last);
}

void ps_asgi_ws_free(ps_asgi_ws_t *ws)
{
    if (ws == NULL)
        return;
    ps_asgi_ws_clear(ws);
    PyMem_Free(ws);
}

int ps_asgi_ws_traverse(ps_asgi_ws_t *ws, visitproc visit, void *arg)
{
    Py_VISIT(ws->receive_waiter);
    Py_VISIT(ws->send_waiter);
    Py_VISIT(ws->pending);
    Py_VISIT(ws->last);
    return 0;
}

int ps_asgi_ws_accepted(const ps_asgi_ws_t *ws)
{
    return ws->accepted;
}

/* ---- scope ---- */

/* The client's subprotocols as a list of str. New reference or NULL. */
static PyObject *subprotocols(const ps_asgi_ws_t *ws)
{
    PyObject *subs = PyList_New((Py_ssize_t)ws->hs.nsubprotocols);
    if (subs == NULL)
        return NULL;
    for (uint32_t i = 0; i < ws->hs.nsubprotocols; i++) {
        ps_slice_t p = ws->hs.subprotocols[i];
        PyObject *s = PyUnicode_DecodeLatin1(p.base, (Py_ssize_t)p.len, NULL);
        if (s == NULL) {
            Py_DECREF(subs);
            return NULL;
        }
        PyList_SET_ITEM(subs, i, s);
    }
    return subs;
}

int ps_asgi_ws_scope(ps_asgi_ws_t *ws, PyObject *scope)
{
    PyObject *scheme = PyDict_GetItemWithError(scope, S(ws, W_SCHEME)); /* borrowed */
    if (scheme == NULL && PyErr_Occurred())
        return -1;
    int secure = scheme && PyUnicode_Compare(scheme, S(ws, W_HTTPS)) == 0;
    if (PyDict_SetItem(scope, S(ws, W_TYPE), S(ws, W_WEBSOCKET)) < 0 ||
        PyDict_SetItem(scope, S(ws, W_SCHEME), S(ws, secure ? W_WSS : W_WS)) < 0 ||
        ps_py_set_new(scope, S(ws, W_SUBPROTOCOLS), subprotocols(ws)) < 0 ||
        ps_py_set_new(scope, S(ws, W_EXTENSIONS), PyDict_Copy(ws->str->extensions)) < 0)
        return -1;
    if (PyDict_DelItem(scope, S(ws, W_METHOD)) < 0) /* not in a websocket scope */
        PyErr_Clear();
    return 0;
}

/* ---- messages ---- */

static PyObject *type_message(ps_asgi_ws_t *ws, int type)
{
    PyObject *m = PyDict_New();
    if (m && PyDict_SetItem(m, S(ws, W_TYPE), S(ws, type)) < 0)
        Py_CLEAR(m);
    return m;
}

static PyObject *disconnect_message(ps_asgi_ws_t *ws, unsigned code, ps_slice_t reason)
{
    PyObject *m = type_message(ws, W_DISCONNECT);
    if (m == NULL)
        return NULL;
    if (ps_py_set_new(m, S(ws, W_CODE), PyLong_FromUnsignedLong(code)) < 0 ||
        ps_py_set_new(m, S(ws, W_REASON),
                      PyUnicode_DecodeUTF8(reason.base, (Py_ssize_t)reason.len, "replace")) < 0)
        Py_CLEAR(m);
    return m;
}

/* The str of a text event (valid UTF-8: the session checked it). ASCII is
 * copied into a new str as it is, without decoding it again. New reference
 * or NULL. */
static PyObject *text_of(const ps_ws_event_t *ev)
{
    Py_ssize_t len = (Py_ssize_t)ev->data.len;
    if (!ev->ascii)
        return PyUnicode_DecodeUTF8(ev->data.base, len, NULL);
    PyObject *s = PyUnicode_New(len, 127);
    if (s != NULL)
        memcpy(PyUnicode_1BYTE_DATA(s), ev->data.base, (size_t)len);
    return s;
}

/* Large binary messages are unmasked straight into a new bytes object
 * (ws.h's ps_ws_storage_t): the handle is the object. Called on the loop
 * thread, which holds the GIL in ASGI mode. */
static void *bytes_alloc(size_t len, void **handle)
{
    ps_py_loop_gil();
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (b == NULL) {
        PyErr_Clear(); /* the session keeps the message itself */
        return NULL;
    }
    *handle = b;
    return PyBytes_AS_STRING(b);
}

static void bytes_release(void *handle)
{
    ps_py_loop_gil();
    Py_DECREF((PyObject *)handle);
}

static const ps_ws_storage_t bytes_storage = {.alloc = bytes_alloc, .release = bytes_release};

/* The bytes of a binary event: the event's own object when the session
 * unmasked it into one (ownership passes here), else a copy. New reference
 * or NULL. */
static PyObject *bytes_of(const ps_ws_event_t *ev)
{
    if (ev->handle != NULL)
        return ev->handle;
    return PyBytes_FromStringAndSize(ev->data.base, (Py_ssize_t)ev->data.len);
}

/* The message for a session event; a close makes it the last one. A
 * binary event's handle is consumed whatever happens. */
static PyObject *event_message(ps_asgi_ws_t *ws, const ps_ws_event_t *ev)
{
    if (ev->type == PS_WS_EV_CLOSE) {
        PyObject *m = disconnect_message(ws, ev->code, ev->data);
        if (m)
            Py_XSETREF(ws->last, Py_NewRef(m));
        return m;
    }
    PyObject *m = type_message(ws, W_RECEIVE);
    if (m == NULL) {
        if (ev->handle != NULL)
            Py_DECREF((PyObject *)ev->handle);
        return NULL;
    }
    int rc;
    if (ev->type == PS_WS_EV_TEXT)
        rc = ps_py_set_new(m, S(ws, W_TEXT), text_of(ev));
    else
        rc = ps_py_set_new(m, S(ws, W_BYTES), bytes_of(ev));
    if (rc < 0)
        Py_CLEAR(m);
    return m;
}

/* Keeps m for receive(), before (first) or after the messages held.
 * Returns 0 or -1 with an exception. */
static int hold(ps_asgi_ws_t *ws, PyObject *m, int first)
{
    if (ws->pending == NULL && (ws->pending = PyList_New(0)) == NULL)
        return -1;
    return first ? PyList_Insert(ws->pending, 0, m) : PyList_Append(ws->pending, m);
}

/* The next message receive() returns without waiting, or NULL (no
 * exception) when it must wait. */
static PyObject *next_message(ps_asgi_ws_t *ws)
{
    if (!ws->connect_sent) {
        ws->connect_sent = 1;
        return type_message(ws, W_CONNECT);
    }
    if (ws->pending && PyList_GET_SIZE(ws->pending) > 0) {
        PyObject *m = Py_NewRef(PyList_GET_ITEM(ws->pending, 0));
        if (PySequence_DelItem(ws->pending, 0) < 0)
            Py_CLEAR(m);
        return m;
    }
    if (ws->last)
        return Py_NewRef(ws->last);
    if (ws->x == NULL) { /* the denial went out, or the client left first */
        ws->last = disconnect_message(ws, 1006, (ps_slice_t){"", 0});
        return ws->last ? Py_NewRef(ws->last) : NULL;
    }
    ps_ws_event_t ev;
    if (ws->wc && ps_wsconn_next_event(ws->wc, &ev))
        return event_message(ws, &ev);
    return NULL;
}

PyObject *ps_asgi_ws_receive(ps_asgi_ws_t *ws)
{
    PyObject *m = next_message(ws);
    if (m != NULL)
        return ps_asgi_ready(ws->ctx, m);
    if (PyErr_Occurred())
        return NULL;
    return ps_asgi_waiter(ws->ctx, &ws->receive_waiter);
}

/* A waiting receive() gets the next message, if there is one. A message
 * its cancelled Future could not take is the next receive()'s. */
static void wake_receiver(ps_asgi_ws_t *ws)
{
    if (ws->receive_waiter == NULL)
        return;
    PyObject *m = next_message(ws);
    if (m && !ps_asgi_resolve(ws->ctx, &ws->receive_waiter, m, 0) && m != ws->last)
        hold(ws, m, 1); /* out of memory: the message is lost */
    Py_XDECREF(m);
    PyErr_Clear();
}

static void on_events(ps_wsconn_t *wc, void *data)
{
    PS_UNUSED(wc);
    wake_receiver(data);
}

static void on_writable(ps_wsconn_t *wc, void *data)
{
    ps_asgi_ws_t *ws = data;
    PS_UNUSED(wc);
    ps_asgi_resolve(ws->ctx, &ws->send_waiter, Py_None, 0);
}

static const ps_wsconn_ops_t ws_ops = {
    .on_events = on_events, .on_writable = on_writable, .storage = &bytes_storage};

void ps_asgi_ws_lost(ps_asgi_ws_t *ws)
{
    if (ws->wc && ws->last == NULL) {
        /* Until a close event (event_message makes it ws->last). */
        ps_ws_event_t ev;
        while (ws->last == NULL && ps_wsconn_next_event(ws->wc, &ev)) {
            PyObject *m = event_message(ws, &ev);
            int rc = m && m != ws->last ? hold(ws, m, 0) : 0;
            Py_XDECREF(m);
            if (m == NULL || rc < 0)
                break;
        }
        if (ws->last == NULL)
            ws->last = disconnect_message(ws, ps_wsconn_final_code(ws->wc), (ps_slice_t){"", 0});
        PyErr_Clear();
    }
    ps_asgi_ws_detached(ws);
    wake_receiver(ws);
    ps_asgi_fail_waiter(ws->ctx, &ws->send_waiter);
}

void ps_asgi_ws_detached(ps_asgi_ws_t *ws)
{
    if (ws->wc)
        ps_wsconn_release(ws->wc);
    ws->wc = NULL;
    ws->x = NULL;
}

/* ---- send() ---- */

static PyObject *disconnected(ps_asgi_ws_t *ws)
{
    PyErr_SetString(ps_asgi_disconnected_error(ws->ctx), "the client disconnected");
    return NULL;
}

static PyObject *done(ps_asgi_ws_t *ws)
{
    return ps_asgi_ready(ws->ctx, Py_NewRef(Py_None));
}

/* An optional str item of msg as UTF-8 (NULL and *len 0 when absent or
 * None). Returns 0 or -1 with an exception. */
static int get_text(PyObject *msg, PyObject *key, const char **text, Py_ssize_t *len)
{
    *text = NULL;
    *len = 0;
    PyObject *v = PyDict_GetItemWithError(msg, key);
    if (v == NULL || v == Py_None)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%U must be str, not %.100s", key, Py_TYPE(v)->tp_name);
        return -1;
    }
    *text = PyUnicode_AsUTF8AndSize(v, len);
    return *text ? 0 : -1;
}

static PyObject *send_accept(ps_asgi_ws_t *ws, PyObject *msg)
{
    if (ws->accepted || ws->denied) {
        PyErr_SetString(PyExc_RuntimeError, "websocket.accept after the handshake was answered");
        return NULL;
    }
    /* The headers first: an iterable of them runs Python, which could take
     * the subprotocol out of msg or the client away. */
    PyObject *headers = PyDict_GetItemWithError(msg, S(ws, W_HEADERS));
    if (headers == NULL && PyErr_Occurred())
        return NULL;
    ps_header_t stack[16], *hs = stack;
    PyObject *keep = NULL;
    Py_ssize_t n =
        headers && headers != Py_None ? ps_asgi_view_headers(headers, &hs, 16, &keep) : 0;
    if (n < 0)
        return NULL;
    const char *sub;
    Py_ssize_t sublen;
    int rc = -EPIPE;
    if (get_text(msg, S(ws, W_SUBPROTOCOL), &sub, &sublen) < 0)
        goto release;
    if (ws->x != NULL)
        rc = ps_wsconn_accept(ws->x, &ws->hs, (ps_slice_t){sub ? sub : "", (size_t)sublen}, hs,
                              (size_t)n, &ws_ops, ws);
    if (rc == -EINVAL)
        PyErr_SetString(PyExc_ValueError, "invalid subprotocol or header in websocket.accept");
    else if (rc == -ENOMEM)
        PyErr_NoMemory();
    else if (rc < 0)
        disconnected(ws);
release:
    if (hs != stack)
        PyMem_Free(hs);
    Py_XDECREF(keep);
    if (rc < 0)
        return NULL;
    ws->accepted = 1;
    ws->wc = ps_wsconn_of(ws->x);
    ps_asgi_cycle_log(ws->cycle, 101);
    return done(ws);
}

static PyObject *send_data(ps_asgi_ws_t *ws, PyObject *msg)
{
    if (!ws->accepted) {
        PyErr_SetString(PyExc_RuntimeError, "websocket.send before websocket.accept");
        return NULL;
    }
    if (ws->close_sent) {
        PyErr_SetString(PyExc_RuntimeError, "websocket.send after websocket.close");
        return NULL;
    }
    if (ws->wc == NULL)
        return disconnected(ws);
    PyObject *bytes = PyDict_GetItemWithError(msg, S(ws, W_BYTES));
    if (bytes == NULL && PyErr_Occurred())
        return NULL;
    int rc;
    if (bytes != NULL && bytes != Py_None) {
        Py_buffer view;
        if (PyObject_GetBuffer(bytes, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        rc = ps_wsconn_send(ws->wc, PS_WS_EV_BINARY, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    } else {
        const char *text;
        Py_ssize_t len;
        if (get_text(msg, S(ws, W_TEXT), &text, &len) < 0)
            return NULL;
        if (text == NULL) {
            PyErr_SetString(PyExc_ValueError, "websocket.send needs bytes or text");
            return NULL;
        }
        rc = ps_wsconn_send(ws->wc, PS_WS_EV_TEXT, text, (size_t)len);
    }
    if (rc == PS_WRITE_DONE)
        return done(ws);
    if (rc == PS_WRITE_PENDING)
        return ps_asgi_waiter(ws->ctx, &ws->send_waiter);
    if (rc == -ENOMEM)
        return PyErr_NoMemory();
    return disconnected(ws);
}

static PyObject *send_close(ps_asgi_ws_t *ws, PyObject *msg)
{
    if (!ws->accepted) {
        if (ws->denied) {
            PyErr_SetString(PyExc_RuntimeError, "websocket.close during a denial response");
            return NULL;
        }
        /* Refused before the handshake: 403, as uvicorn answers. */
        ws->denied = 1;
        ps_asgi_cycle_refuse(ws->cycle, 403);
        return done(ws);
    }
    if (ws->close_sent)
        return done(ws);
    long code = 1000;
    PyObject *v = PyDict_GetItemWithError(msg, S(ws, W_CODE));
    if (v == NULL && PyErr_Occurred())
        return NULL;
    if (v != NULL && v != Py_None && (code = PyLong_AsLong(v)) == -1 && PyErr_Occurred())
        return NULL;
    const char *reason;
    Py_ssize_t len;
    if (get_text(msg, S(ws, W_REASON), &reason, &len) < 0)
        return NULL;
    if (code < 1000 || code > 4999 || len > 123 ||
        (code != 1000 && !ps_ws_valid_close_code((unsigned)code))) {
        PyErr_Format(PyExc_ValueError, "invalid close code %ld or reason (at most 123 bytes)",
                     code);
        return NULL;
    }
    ws->close_sent = 1;
    if (ws->wc)
        ps_wsconn_close(ws->wc, (uint16_t)code, reason, (size_t)len);
    return done(ws);
}

PyObject *ps_asgi_ws_send(ps_asgi_ws_t *ws, PyObject *type, PyObject *msg)
{
    if (PyUnicode_Compare(type, S(ws, W_SEND)) == 0)
        return send_data(ws, msg);
    if (PyUnicode_Compare(type, S(ws, W_ACCEPT)) == 0)
        return send_accept(ws, msg);
    if (PyUnicode_Compare(type, S(ws, W_CLOSE)) == 0)
        return send_close(ws, msg);
    int start = PyUnicode_Compare(type, S(ws, W_RESPONSE_START)) == 0;
    if (start || PyUnicode_Compare(type, S(ws, W_RESPONSE_BODY)) == 0) {
        if (ws->accepted) {
            PyErr_SetString(PyExc_RuntimeError, "a denial response after websocket.accept");
            return NULL;
        }
        ws->denied = 1;
        return ps_asgi_cycle_deny(ws->cycle, msg, start);
    }
    if (PyErr_Occurred())
        return NULL;
    PyErr_Format(PyExc_RuntimeError, "unexpected ASGI message type %R for a websocket", type);
    return NULL;
}

int ps_asgi_ws_finished(ps_asgi_ws_t *ws, int raised)
{
    if (!ws->accepted) {
        if (!ws->denied)
            ps_asgi_cycle_log(ws->cycle, 500);
        return 0;
    }
    if (ws->wc && !ws->close_sent)
        ps_wsconn_close(ws->wc, raised ? 1011 : 1000, NULL, 0);
    ws->close_sent = 1;
    return 1;
}
