/* The WSGI layer's Python types: start_response (StartResponse, with its
 * write()), wsgi.input (Input), wsgi.errors (Errors) and wsgi.file_wrapper
 * (FileWrapper). */
#include <errno.h>

#include "wsgi.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD PyObject *logger;
    int level;       /* config.wsgi_errors_level: lines are logged at it, as they are */
    PyObject *write; /* or, when set, the text goes to it as it comes (gunicorn's way) */
} ErrorsObject;

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
        if (ps_wsgi_threads_write(self, PyBytes_AS_STRING(data), (size_t)len) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    int rc = ps_wsgi_send_body(self, PyBytes_AS_STRING(data), (size_t)len);
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

RequestObject *ps_wsgi_request_new(ps_wsgi_t *ctx, ps_exchange_t *x)
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

PyObject *ps_wsgi_errors_new(ps_wsgi_t *ctx, const ps_py_settings_t *s)
{
    PyTypeObject *tp = ctx->st->errors_type;
    ErrorsObject *eo = (ErrorsObject *)tp->tp_alloc(tp, 0);
    if (eo == NULL)
        return NULL;
    eo->logger = Py_NewRef(ctx->error_logger);
    eo->level = s->wsgi_errors_level;
    eo->write = Py_XNewRef(s->wsgi_errors_write);
    return (PyObject *)eo;
}

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
