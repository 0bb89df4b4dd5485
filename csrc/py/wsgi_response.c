/* The WSGI response on the loop thread: start_response's head, the body
 * pulled from the application's iterable one item at a time, a
 * wsgi.file_wrapper over a regular file sent with sendfile(2), and the end
 * of the request (close(), the access line).
 *
 * A response iterable is pulled one item at a time; when the socket is full
 * the pull stops and resumes from on_writable, so a slow client never makes
 * the server hold more than one item of output. With --threads the
 * application's thread does the pulling instead (wsgi_threads.c).
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wsgi.h"

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

/* The request is over: calls close() on the response, logs it, detaches the
 * Python objects from the connection and drops the connection's reference
 * to req (which may free it). */
void ps_wsgi_request_done(RequestObject *req)
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
void ps_wsgi_fail(RequestObject *req)
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
    ps_wsgi_request_done(req);
}

void ps_wsgi_head_view_free(head_view_t *v)
{
    if (v->h != v->stack)
        PyMem_Free(v->h);
}

/* Fills v. Returns 0, or -1 with a Python exception (v freed). */
int ps_wsgi_head_view(RequestObject *req, head_view_t *v)
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
            ps_wsgi_head_view_free(v);
            return -1;
        }
        if (latin1_view(PyTuple_GET_ITEM(item, 0), "header name", &hs[n].name) < 0 ||
            latin1_view(PyTuple_GET_ITEM(item, 1), "header value", &hs[n].value) < 0) {
            ps_wsgi_head_view_free(v);
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
    if (ps_wsgi_head_view(req, &v) < 0)
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
    ps_wsgi_head_view_free(&v);
    return rc;
}

int ps_wsgi_send_body(RequestObject *req, const char *data, size_t len)
{
    if (!req->headers_sent)
        return send_head(req, data, len);
    return map_write(ps_exchange_write(req->x, data, len));
}

/* A body shorter than the Content-Length the application gave: the
 * connection closes after it (only a close can tell the client), and the
 * log says why. A HEAD, 204 or 304 has no body to fall short. */
void ps_wsgi_log_short_body(ps_wsgi_t *ctx, ps_exchange_t *x, int64_t given)
{
    ps_request_t *r = x->req;
    if (PS_SLICE_IEQ(r->method, "HEAD") || x->status == 204 || x->status == 304)
        return;
    ps_py_loop_gil();
    ps_log_error(ctx->error_logger,
                 "WSGI application sent %llu of the %lld body bytes its Content-Length "
                 "announced (%.*s %.*s): the connection is closed",
                 (unsigned long long)x->body_sent, (long long)given, (int)r->method.len,
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
        return ps_wsgi_send_body(req, p + off, left);
    int rc;
    do {
        size_t n = PS_MIN(left, piece);
        rc = ps_wsgi_send_body(req, p + off, n);
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
void ps_wsgi_finish(RequestObject *req)
{
    if (!req->headers_sent) {
        req->known_length = 0; /* nothing was produced */
        int rc = send_head(req, NULL, 0);
        if (rc == SEND_ERROR) {
            ps_wsgi_fail(req);
            return;
        }
    }
    ps_wsgi_check_length(req->ctx, req->x, req->given_length);
    ps_exchange_end(req->x);
    ps_wsgi_request_done(req);
}

/* Pulls items from the response and sends them until the socket is full
 * (on_writable resumes) or the response ends. Ends with req released. */
void ps_wsgi_pump(RequestObject *req)
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
                    ps_wsgi_fail(req);
                else
                    ps_wsgi_finish(req);
                return;
            }
            if (!PyBytes_Check(item)) {
                PyErr_Format(PyExc_TypeError, "response items must be bytes, not %.100s",
                             Py_TYPE(item)->tp_name);
                Py_DECREF(item);
                ps_wsgi_fail(req);
                return;
            }
        }
        int rc = PyBytes_GET_SIZE(item) > off ? send_item(req, item, off) : PS_WRITE_DONE;
        Py_DECREF(item);
        if (rc == SEND_ERROR) {
            ps_wsgi_fail(req);
            return;
        }
        if (rc == SEND_GONE) {
            ps_wsgi_request_done(req);
            return;
        }
        if (rc == PS_WRITE_PENDING)
            return;
    }
}

/* The regular file under req's wsgi.file_wrapper: its fd and current
 * position, and req->known_length set to the bytes left. Returns 1, or 0
 * (no exception) when it is not a regular file to sendfile(2) from. */
int ps_wsgi_sendfile_source(RequestObject *req, int *fd_out, long long *off_out)
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
    if (!ps_wsgi_sendfile_source(req, &fd, &off))
        return 0;
    ps_exchange_t *x = req->x;
    x->file_follows = 1; /* the head leaves with the file */
    int rc = send_head(req, NULL, 0);
    x->file_follows = 0; /* (send_head may fail before the start) */
    if (rc >= 0)
        rc = map_write(ps_exchange_sendfile(x, fd, off, (uint64_t)req->known_length));
    if (rc == SEND_ERROR)
        ps_wsgi_fail(req);
    else if (rc == SEND_GONE)
        ps_wsgi_request_done(req);
    else if (rc == PS_WRITE_PENDING)
        req->sendfile_fd = (int)fd;
    else
        ps_wsgi_finish(req);
    return 1;
}

void ps_wsgi_start_body(RequestObject *req)
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
            ps_wsgi_fail(req);
            return;
        }
    }
    ps_wsgi_pump(req);
}
