/* The ASGI layer's awaitables: Ready (already done: what receive() and
 * send() return when they need not wait), the asyncio Futures they wait on
 * otherwise, and AppCall, the coroutine a request's task steps.
 *
 * receive() and send() finish without suspending whenever they can: body
 * bytes already buffered, output the socket accepts. Only when they must
 * wait do they hand the task a real asyncio Future, resolved from the
 * connection's callbacks (on_body, on_writable, on_disconnect), so that
 * cancellation and timeouts behave as asyncio code expects.
 */
#include "asgi.h"

/* ---- Ready ---- */

typedef struct {
    PyObject_HEAD PyObject *value;
} ReadyObject;

/* An awaitable that is already done: awaiting it returns value without
 * suspending the task. Steals value. */
PyObject *ps_asgi_ready(ps_asgi_t *ctx, PyObject *value)
{
    if (value == NULL)
        return NULL;
    PyTypeObject *tp = ctx->st->ready_type;
    ReadyObject *r = (ReadyObject *)tp->tp_alloc(tp, 0);
    if (r == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    r->value = value;
    return (PyObject *)r;
}

static PySendResult Ready_send(PyObject *op, PyObject *arg, PyObject **result)
{
    ReadyObject *self = (ReadyObject *)op;
    PS_UNUSED(arg);
    *result = Py_NewRef(self->value ? self->value : Py_None);
    return PYGEN_RETURN;
}

static PyObject *Ready_iternext(PyObject *op)
{
    ReadyObject *self = (ReadyObject *)op;
    PyObject *v = self->value ? self->value : Py_None;
    if (v == Py_None) {
        PyErr_SetNone(PyExc_StopIteration);
    } else {
        PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, v);
        if (exc) {
            PyErr_SetObject(PyExc_StopIteration, exc);
            Py_DECREF(exc);
        }
    }
    return NULL;
}

static void Ready_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    Py_XDECREF(((ReadyObject *)op)->value);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot Ready_slots[] = {
    {Py_am_await, PyObject_SelfIter}, {Py_am_send, Ready_send},
    {Py_tp_iter, PyObject_SelfIter},  {Py_tp_iternext, Ready_iternext},
    {Py_tp_dealloc, Ready_dealloc},   {0, NULL},
};

PyType_Spec ps_asgi_ready_spec = {
    .name = "pyserver._core.Ready",
    .basicsize = sizeof(ReadyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Ready_slots,
};

/* ---- the Futures receive() and send() wait on ---- */

/* Resolves *slot (a Future) with value unless it is done; clears the slot.
 * Returns 1 when value was delivered, 0 when there was no Future or it was
 * done (cancelled: its task gave up waiting). Never leaves an exception.
 * Method names are interned: the type's method cache only hits for the
 * same name object. */
int ps_asgi_resolve(ps_asgi_t *ctx, PyObject **slot, PyObject *value, int as_exception)
{
    PyObject *fut = *slot;
    int delivered = 0;
    if (fut == NULL)
        return 0;
    *slot = NULL;
    PyObject *done = PyObject_CallMethodNoArgs(fut, ctx->s[S_DONE]);
    if (done != NULL && done == Py_False) {
        PyObject *name = ctx->s[as_exception ? S_SET_EXCEPTION : S_SET_RESULT];
        PyObject *r = PyObject_CallMethodOneArg(fut, name, value);
        delivered = r != NULL;
        Py_XDECREF(r);
    }
    Py_XDECREF(done);
    PyErr_Clear();
    Py_DECREF(fut);
    return delivered;
}

/* A send() waiting on *slot learns the client is gone: ClientDisconnected.
 * Never leaves an exception. */
void ps_asgi_fail_waiter(ps_asgi_t *ctx, PyObject **slot)
{
    if (*slot == NULL)
        return;
    PyObject *exc = PyObject_CallFunction(ctx->disconnected, "s", "the client disconnected");
    if (exc) {
        ps_asgi_resolve(ctx, slot, exc, 1);
        Py_DECREF(exc);
    }
    PyErr_Clear();
}

/* The Future a receive() or send() waits on: the one in *slot while it is
 * pending, else (none, or one cancelled by a wait_for that gave up) a new
 * one put there. New reference or NULL. */
PyObject *ps_asgi_waiter(ps_asgi_t *ctx, PyObject **slot)
{
    if (*slot != NULL) {
        PyObject *done = PyObject_CallMethodNoArgs(*slot, ctx->s[S_DONE]);
        if (done == NULL)
            return NULL;
        int pending = done == Py_False;
        Py_DECREF(done);
        if (pending)
            return Py_NewRef(*slot);
        Py_CLEAR(*slot);
    }
    if ((*slot = ps_asgi_new_future(ctx)) == NULL)
        return NULL;
    return Py_NewRef(*slot);
}

/* ---- AppCall: the coroutine a request's task steps (asgi.h) ---- */

/* asyncio keeps only weak references to tasks: a request task waiting on a
 * future that nothing else holds (a StreamReader's waiter: its protocol
 * holds the reader weakly) would be collected mid-request. ctx->tasks holds
 * each one until its application ends; this lets it go. */
static void release_task(AppCallObject *self)
{
    PyObject *task = self->task;
    ps_asgi_t *ctx = self->cycle->ctx;
    self->task = NULL;
    if (task != NULL && ctx->tasks != NULL && PySet_Discard(ctx->tasks, task) < 0)
        PyErr_WriteUnraisable(task);
}

/* Ends the application's run after a step that did not yield. */
static PySendResult appcall_ended(AppCallObject *self, PySendResult r, PyObject **result)
{
    CycleObject *cycle = self->cycle;
    Py_CLEAR(self->inner);
    release_task(self);
    if (r == PYGEN_RETURN) {
        ps_asgi_app_finished(cycle, NULL, 0);
        return r;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    int cancelled = value && PyErr_GivenExceptionMatches(value, cycle->ctx->cancelled_error);
    ps_asgi_app_finished(cycle, cancelled ? NULL : value, cancelled);
    if (cancelled) {
        PyErr_Restore(type, value, tb);
        return PYGEN_ERROR;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PySendResult AppCall_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    AppCallObject *self = (AppCallObject *)op;
    if (self->inner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
    PySendResult r = PyIter_Send(self->inner, arg, result);
    return r == PYGEN_NEXT ? r : appcall_ended(self, r, result);
}

/* The Python face of a send result: a yielded value, or StopIteration. */
static PyObject *send_result(PySendResult r, PyObject *result)
{
    if (r == PYGEN_NEXT)
        return result;
    if (r == PYGEN_RETURN) {
        if (result == Py_None) {
            PyErr_SetNone(PyExc_StopIteration);
        } else {
            PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
            if (stop) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
        }
        Py_DECREF(result);
    }
    return NULL;
}

static PyObject *AppCall_send(PyObject *op, PyObject *arg)
{
    PyObject *result = NULL;
    PySendResult r = AppCall_am_send(op, arg, &result);
    return send_result(r, result);
}

static PyObject *AppCall_iternext(PyObject *op)
{
    return AppCall_send(op, Py_None);
}

static PyObject *AppCall_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    AppCallObject *self = (AppCallObject *)op;
    if (self->inner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *meth = PyObject_GetAttrString(self->inner, "throw");
    if (meth == NULL)
        return NULL;
    PyObject *yielded = PyObject_Vectorcall(meth, args, (size_t)nargs, NULL);
    Py_DECREF(meth);
    if (yielded != NULL)
        return yielded;
    PyObject *result = NULL;
    PySendResult r = PYGEN_ERROR;
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        result = value ? PyObject_GetAttrString(value, "value") : Py_NewRef(Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (result == NULL)
            return NULL;
        r = PYGEN_RETURN;
    }
    r = appcall_ended(self, r, &result);
    return send_result(r, result);
}

static PyObject *AppCall_close(PyObject *op, PyObject *unused)
{
    AppCallObject *self = (AppCallObject *)op;
    PS_UNUSED(unused);
    if (self->inner == NULL)
        Py_RETURN_NONE;
    PyObject *res = PyObject_CallMethod(self->inner, "close", NULL);
    Py_CLEAR(self->inner);
    release_task(self);
    ps_asgi_app_finished(self->cycle, NULL, 1);
    return res;
}

static int AppCall_traverse(PyObject *op, visitproc visit, void *arg)
{
    AppCallObject *self = (AppCallObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->inner);
    Py_VISIT(self->cycle);
    return 0;
}

static int AppCall_clear(PyObject *op)
{
    AppCallObject *self = (AppCallObject *)op;
    Py_CLEAR(self->inner);
    Py_CLEAR(self->cycle);
    return 0;
}

static void AppCall_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    AppCall_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef AppCall_methods[] = {
    {"send", AppCall_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))AppCall_throw, METH_FASTCALL, NULL},
    {"close", AppCall_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot AppCall_slots[] = {
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, AppCall_am_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, AppCall_iternext},
    {Py_tp_methods, AppCall_methods},
    {Py_tp_traverse, AppCall_traverse},
    {Py_tp_clear, AppCall_clear},
    {Py_tp_dealloc, AppCall_dealloc},
    {0, NULL},
};

PyType_Spec ps_asgi_appcall_spec = {
    .name = "pyserver._core.AppCall",
    .basicsize = sizeof(AppCallObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = AppCall_slots,
};
