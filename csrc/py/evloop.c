/* pyserver._core.EvLoopHelpers: asyncio.BaseEventLoop's hot methods in C,
 * for pyserver.evselector.EvEventLoop (the loop ASGI applications run on).
 * They read asyncio's private names through one table, checked against the
 * running Python when the helpers are made (see "asyncio's private names"
 * below); the selector they poll is evselector.c's.
 */
#include <string.h>
#include <time.h>

#include "bridge.h"
#include <structmember.h>

/* ---- EvEventLoop's hot methods ----
 *
 * pyserver._core.EvLoopHelpers holds what the C versions of four
 * asyncio.BaseEventLoop methods need (asyncio's Handle types, the
 * Python methods they stand in for, interned names); method(name) wraps
 * one as an instance method, which pyserver.evselector puts in
 * EvEventLoop's class body, so a loop binds it as it would a function.
 *
 * _run_once() is BaseEventLoop._run_once: cancelled timers dropped from the
 * heap (rebuilt when more than half of over 100 are cancelled), the select
 * with the timeout of the earliest timer (0 when callbacks are ready or the
 * loop is stopping), the events handed to the loop's _process_events (done
 * here when it is the selector loop's own), the timers due by time() +
 * clock_resolution moved to the ready queue, then exactly the callbacks
 * queued before this point run, in order; those they schedule wait for the
 * next iteration. An asyncio Handle runs here in its own context, as
 * Handle._run() does, an exception going to the loop's exception handler
 * (SystemExit and KeyboardInterrupt propagate); other handle types run
 * through their own _run(). call_soon() and call_soon_threadsafe() build the
 * Handle here. In debug mode every method is asyncio's own (slow-callback
 * logging, thread and callback checks, source tracebacks).
 */

/* ---- asyncio's private names, in one table ----
 *
 * Every name of asyncio's this file reads (attributes of the loop, methods
 * of its base classes, Handle and TimerHandle slots read and written by
 * offset) is in asyncio_names, with where asyncio defines it. The table is
 * checked once, when EvLoopHelpers is made (pyserver.evselector's import),
 * against the running Python: a release that renamed or dropped one of
 * them would otherwise break the loop with no compile error. If any is
 * missing, one warning line says which and method() hands out asyncio's own
 * methods instead of the C ones (EvLoopHelpers.missing names them).
 */
typedef enum {
    ON_LOOP,          /* set on a BaseEventLoop by its __init__ (looked up on a new one) */
    ON_SELECTOR_LOOP, /* set by BaseSelectorEventLoop.__init__ (named in its code) */
    ON_BASE,          /* a BaseEventLoop method (kept: asyncio's own, to call or compare) */
    ON_SELECTOR_BASE, /* a BaseSelectorEventLoop method (kept) */
    ON_HANDLE,        /* an object slot of Handle (its byte offset kept) */
    ON_HANDLE_METHOD, /* a Handle method */
    ON_TIMER,         /* an object slot of TimerHandle (its byte offset kept) */
    PUBLIC,           /* documented API (deque, selectors, a keyword): not checked */
} asyncio_where_t;

enum {
    A_DEBUG,
    A_CLOSED,
    A_READY,
    A_SCHEDULED,
    A_STOPPING,
    A_CANCELLED_COUNT,
    A_CLOCK_RESOLUTION,
    A_SELECTOR,
    A_RUN_ONCE,
    A_CALL_SOON,
    A_CALL_SOON_THREADSAFE,
    A_GET_DEBUG,
    A_TIME,
    A_ADD_CALLBACK,
    A_PROCESS_EVENTS,
    A_REMOVE_READER,
    A_REMOVE_WRITER,
    A_WRITE_TO_SELF,
    A_CALLBACK,
    A_ARGS,
    A_CANCELLED,
    A_LOOP,
    A_SOURCE_TB,
    A_REPR,
    A_CONTEXT,
    A_RUN,
    A_WHEN,
    A_TIMER_SCHEDULED,
    A_SELECT,
    A_POPLEFT,
    A_APPEND,
    A_CONTEXT_KW,
    A_COUNT
};

static const struct {
    const char *name;
    asyncio_where_t on;
} asyncio_names[A_COUNT] = {
    [A_DEBUG] = {"_debug", ON_LOOP},
    [A_CLOSED] = {"_closed", ON_LOOP},
    [A_READY] = {"_ready", ON_LOOP},
    [A_SCHEDULED] = {"_scheduled", ON_LOOP},
    [A_STOPPING] = {"_stopping", ON_LOOP},
    [A_CANCELLED_COUNT] = {"_timer_cancelled_count", ON_LOOP},
    [A_CLOCK_RESOLUTION] = {"_clock_resolution", ON_LOOP},
    [A_SELECTOR] = {"_selector", ON_SELECTOR_LOOP},
    [A_RUN_ONCE] = {"_run_once", ON_BASE},
    [A_CALL_SOON] = {"call_soon", ON_BASE},
    [A_CALL_SOON_THREADSAFE] = {"call_soon_threadsafe", ON_BASE},
    [A_GET_DEBUG] = {"get_debug", ON_BASE},
    [A_TIME] = {"time", ON_BASE},
    [A_ADD_CALLBACK] = {"_add_callback", ON_BASE},
    [A_PROCESS_EVENTS] = {"_process_events", ON_SELECTOR_BASE},
    [A_REMOVE_READER] = {"_remove_reader", ON_SELECTOR_BASE},
    [A_REMOVE_WRITER] = {"_remove_writer", ON_SELECTOR_BASE},
    [A_WRITE_TO_SELF] = {"_write_to_self", ON_SELECTOR_BASE},
    [A_CALLBACK] = {"_callback", ON_HANDLE},
    [A_ARGS] = {"_args", ON_HANDLE},
    [A_CANCELLED] = {"_cancelled", ON_HANDLE},
    [A_LOOP] = {"_loop", ON_HANDLE},
    [A_SOURCE_TB] = {"_source_traceback", ON_HANDLE},
    [A_REPR] = {"_repr", ON_HANDLE},
    [A_CONTEXT] = {"_context", ON_HANDLE},
    [A_RUN] = {"_run", ON_HANDLE_METHOD},
    [A_WHEN] = {"_when", ON_TIMER},
    [A_TIMER_SCHEDULED] = {"_scheduled", ON_TIMER},
    [A_SELECT] = {"select", PUBLIC},
    [A_POPLEFT] = {"popleft", PUBLIC},
    [A_APPEND] = {"append", PUBLIC},
    [A_CONTEXT_KW] = {"context", PUBLIC},
};

typedef struct {
    PyObject ob_base;
    PyTypeObject *handle_type; /* asyncio.events.Handle */
    PyTypeObject *timer_type;  /* asyncio.events.TimerHandle */
    PyObject *n[A_COUNT];      /* every name, interned */
    Py_ssize_t off[A_COUNT];   /* ON_HANDLE, ON_TIMER: the slot's byte offset */
    PyObject *fn[A_COUNT];     /* ON_BASE, ON_SELECTOR_BASE: asyncio's function */
    PyObject *missing;         /* tuple: the names this Python lacks ("Class.name") */
    PyObject *report;          /* report(handle, exc): Handle._run's except clause */
    PyObject *heappop;
    PyObject *heapify;
    PyObject *max_wait; /* asyncio's MAXIMUM_SELECT_TIMEOUT, 24 hours */
} helpers_object;

/* The byte offset of an object slot of type, from its member descriptor.
 * Returns 0 or -1 with an exception. */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL)
        return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok)
        *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        return -1;
    }
    return 0;
}

/* Borrowed; NULL when the slot is unset (no exception). */
static inline PyObject *slot_get(PyObject *obj, Py_ssize_t off)
{
    return *(PyObject **)((char *)obj + off);
}

static inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)obj + off);
    Py_XSETREF(*p, Py_NewRef(value));
}

static inline int is_asyncio_handle(helpers_object *self, PyObject *h)
{
    return Py_IS_TYPE(h, self->handle_type) || Py_IS_TYPE(h, self->timer_type);
}

/* handle._cancelled as a truth value: 1, 0, or -1 with an exception. */
static int handle_cancelled(helpers_object *self, PyObject *h)
{
    PyObject *v = is_asyncio_handle(self, h) ? slot_get(h, self->off[A_CANCELLED]) : NULL;
    if (v == Py_True || v == Py_False)
        return v == Py_True;
    v = PyObject_GetAttr(h, self->n[A_CANCELLED]);
    if (v == NULL)
        return -1;
    int rc = PyObject_IsTrue(v);
    Py_DECREF(v);
    return rc;
}

/* obj.<name> as a truth value: 1, 0, or -1 with an exception. */
static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int rc = v == Py_True ? 1 : v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return rc;
}

/* attr as a C double. Returns 0 or -1 with an exception. */
static int attr_double(PyObject *obj, PyObject *name, double *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* loop.time(): time.monotonic() itself when the loop's time is asyncio's.
 * Returns 0 or -1 with an exception. */
static int loop_time(helpers_object *self, PyObject *loop, double *now)
{
    PyObject *m = PyObject_GetAttr(loop, self->n[A_TIME]);
    if (m == NULL)
        return -1;
    if (PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == self->fn[A_TIME]) {
        Py_DECREF(m);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *now = (double)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9;
        return 0;
    }
    PyObject *t = PyObject_CallNoArgs(m);
    Py_DECREF(m);
    if (t == NULL)
        return -1;
    *now = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return *now == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* True when obj.<name> is the plain function func bound to obj. */
static int is_method_of(PyObject *obj, PyObject *name, PyObject *func)
{
    PyObject *m = PyObject_GetAttr(obj, name);
    if (m == NULL)
        return -1;
    int same = PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == func;
    Py_DECREF(m);
    return same;
}

static int set_false(helpers_object *self, PyObject *timer)
{
    if (Py_IS_TYPE(timer, self->timer_type)) {
        slot_set(timer, self->off[A_TIMER_SCHEDULED], Py_False);
        return 0;
    }
    return PyObject_SetAttr(timer, self->n[A_TIMER_SCHEDULED], Py_False);
}

/* heappop(heap) with its _scheduled set to False. New reference or NULL. */
static PyObject *pop_timer(helpers_object *self, PyObject *heap)
{
    PyObject *h = PyObject_CallOneArg(self->heappop, heap);
    if (h != NULL && set_false(self, h) < 0)
        Py_CLEAR(h);
    return h;
}

/* The cancelled-timer cleanup at the top of _run_once. *heap is the loop's
 * _scheduled list (a new one when rebuilt). Returns 0 or -1. */
static int drop_cancelled_timers(helpers_object *self, PyObject *loop, PyObject **heap)
{
    Py_ssize_t n = PyList_GET_SIZE(*heap);
    if (n > 100) {
        PyObject *count = PyObject_GetAttr(loop, self->n[A_CANCELLED_COUNT]);
        double c = count ? PyFloat_AsDouble(count) : -1.0;
        Py_XDECREF(count);
        if (c == -1.0 && PyErr_Occurred())
            return -1;
        if (c / (double)n > 0.5) {
            PyObject *kept = PyList_New(0);
            if (kept == NULL)
                return -1;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(*heap); i++) {
                PyObject *h = Py_NewRef(PyList_GET_ITEM(*heap, i));
                int cancelled = handle_cancelled(self, h);
                int rc = cancelled < 0 ? -1
                         : cancelled   ? set_false(self, h)
                                       : PyList_Append(kept, h);
                Py_DECREF(h);
                if (rc < 0) {
                    Py_DECREF(kept);
                    return -1;
                }
            }
            PyObject *r = PyObject_CallOneArg(self->heapify, kept);
            Py_XDECREF(r);
            PyObject *zero = PyLong_FromLong(0);
            if (r == NULL || zero == NULL ||
                PyObject_SetAttr(loop, self->n[A_SCHEDULED], kept) < 0 ||
                PyObject_SetAttr(loop, self->n[A_CANCELLED_COUNT], zero) < 0) {
                Py_XDECREF(zero);
                Py_DECREF(kept);
                return -1;
            }
            Py_DECREF(zero);
            Py_SETREF(*heap, kept);
            return 0;
        }
    }
    while (PyList_GET_SIZE(*heap) > 0) {
        int cancelled = handle_cancelled(self, PyList_GET_ITEM(*heap, 0));
        if (cancelled <= 0)
            return cancelled;
        PyObject *count = PyObject_GetAttr(loop, self->n[A_CANCELLED_COUNT]);
        PyObject *one = PyLong_FromLong(1);
        PyObject *less = count && one ? PyNumber_Subtract(count, one) : NULL;
        Py_XDECREF(count);
        Py_XDECREF(one);
        int rc = less ? PyObject_SetAttr(loop, self->n[A_CANCELLED_COUNT], less) : -1;
        Py_XDECREF(less);
        PyObject *h = rc < 0 ? NULL : pop_timer(self, *heap);
        if (h == NULL)
            return -1;
        Py_DECREF(h);
    }
    return 0;
}

/* select()'s timeout for this iteration: 0, the wait until the earliest
 * timer (at most 24 hours), or None. New reference or NULL. */
static PyObject *select_timeout(helpers_object *self, PyObject *loop, PyObject *ready,
                                PyObject *heap)
{
    Py_ssize_t nready = PyObject_Length(ready);
    if (nready < 0)
        return NULL;
    int stopping = nready > 0 ? 1 : attr_true(loop, self->n[A_STOPPING]);
    if (stopping < 0)
        return NULL;
    if (stopping)
        return PyLong_FromLong(0);
    if (PyList_GET_SIZE(heap) == 0)
        Py_RETURN_NONE;
    double when, now;
    PyObject *first = Py_NewRef(PyList_GET_ITEM(heap, 0));
    int rc = attr_double(first, self->n[A_WHEN], &when);
    Py_DECREF(first);
    if (rc < 0 || loop_time(self, loop, &now) < 0)
        return NULL;
    double wait = when - now;
    if (wait > 86400.0)
        return Py_NewRef(self->max_wait);
    return wait > 0 ? PyFloat_FromDouble(wait) : PyLong_FromLong(0);
}

/* The selector loop's _process_events(): the reader and writer handles of
 * every ready key queued, or their fd's watch dropped when cancelled.
 * Returns 0 or -1 with an exception. */
static int process_events(helpers_object *self, PyObject *loop, PyObject *ready, PyObject *events)
{
    static const int masks[2] = {EV_READ, EV_WRITE};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *item = PyList_GET_ITEM(events, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            goto shape;
        PyObject *key = PyTuple_GET_ITEM(item, 0);
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 4)
            goto shape;
        PyObject *data = PyTuple_GET_ITEM(key, 3);
        if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2)
            goto shape;
        long mask = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        if (mask == -1 && PyErr_Occurred())
            return -1;
        Py_INCREF(item); /* the calls below may drop the list's references */
        for (int k = 0; k < 2; k++) {
            PyObject *h = PyTuple_GET_ITEM(data, k);
            if (!(mask & masks[k]) || h == Py_None)
                continue;
            Py_INCREF(h);
            int cancelled = handle_cancelled(self, h);
            PyObject *r = cancelled < 0 ? NULL
                          : cancelled   ? PyObject_CallMethodOneArg(
                                              loop, self->n[k ? A_REMOVE_WRITER : A_REMOVE_READER],
                                              PyTuple_GET_ITEM(key, 0))
                                      : PyObject_CallMethodOneArg(ready, self->n[A_APPEND], h);
            Py_DECREF(h);
            if (r == NULL) {
                Py_DECREF(item);
                return -1;
            }
            Py_DECREF(r);
        }
        Py_DECREF(item);
    }
    return 0;
shape: /* not what a selectors selector gives: let asyncio's code say so */
    PyErr_SetString(PyExc_TypeError, "select() must return a list of (SelectorKey, events)");
    return -1;
}

/* Runs one ready handle. Returns 0, or -1 with SystemExit, KeyboardInterrupt
 * or an error of the exception handler itself. */
static int run_handle(helpers_object *self, PyObject *h)
{
    if (!is_asyncio_handle(self, h)) {
        PyObject *r = PyObject_CallMethodNoArgs(h, self->n[A_RUN]);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    /* Copied out first: the callback may cancel its own handle. */
    PyObject *ctx = slot_get(h, self->off[A_CONTEXT]);
    PyObject *cb = slot_get(h, self->off[A_CALLBACK]);
    PyObject *args = slot_get(h, self->off[A_ARGS]);
    if (ctx == NULL || cb == NULL || args == NULL || !PyContext_CheckExact(ctx) ||
        !PyTuple_Check(args)) {
        PyObject *r = PyObject_CallMethodNoArgs(h, self->n[A_RUN]);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    Py_INCREF(ctx);
    Py_INCREF(cb);
    Py_INCREF(args);
    PyObject *r = NULL;
    if (PyContext_Enter(ctx) == 0) {
        r = PyObject_Vectorcall(cb, &PyTuple_GET_ITEM(args, 0), (size_t)PyTuple_GET_SIZE(args),
                                NULL);
        if (PyContext_Exit(ctx) < 0)
            Py_CLEAR(r);
    }
    Py_DECREF(ctx);
    Py_DECREF(cb);
    Py_DECREF(args);
    if (r != NULL) {
        Py_DECREF(r);
        return 0;
    }
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    r = value ? PyObject_CallFunctionObjArgs(self->report, h, value, NULL) : NULL;
    Py_XDECREF(value);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* The timers due by time() + clock_resolution, moved to the ready queue.
 * Returns 0 or -1 with an exception. */
static int queue_due_timers(helpers_object *self, PyObject *loop, PyObject *ready, PyObject *heap)
{
    if (PyList_GET_SIZE(heap) == 0)
        return 0;
    double now, resolution;
    if (loop_time(self, loop, &now) < 0 ||
        attr_double(loop, self->n[A_CLOCK_RESOLUTION], &resolution) < 0)
        return -1;
    double end = now + resolution;
    while (PyList_GET_SIZE(heap) > 0) {
        double when;
        PyObject *first = Py_NewRef(PyList_GET_ITEM(heap, 0));
        int rc = attr_double(first, self->n[A_WHEN], &when);
        Py_DECREF(first);
        if (rc < 0)
            return -1;
        if (when >= end)
            break;
        PyObject *h = pop_timer(self, heap);
        PyObject *r = h ? PyObject_CallMethodOneArg(ready, self->n[A_APPEND], h) : NULL;
        Py_XDECREF(h);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Polls and queues what became ready (select, then _process_events).
 * Returns 0 or -1 with an exception. */
static int poll_events(helpers_object *self, PyObject *loop, PyObject *ready, PyObject *heap)
{
    int rc = -1;
    PyObject *timeout = NULL, *selector = NULL, *events = NULL;
    if ((timeout = select_timeout(self, loop, ready, heap)) == NULL)
        goto error;
    if ((selector = PyObject_GetAttr(loop, self->n[A_SELECTOR])) == NULL)
        goto error;
    events = PyObject_CallMethodOneArg(selector, self->n[A_SELECT], timeout);
    if (events == NULL)
        goto error;
    int own = PyList_CheckExact(events)
                  ? is_method_of(loop, self->n[A_PROCESS_EVENTS], self->fn[A_PROCESS_EVENTS])
                  : 0;
    if (own > 0)
        own = is_method_of(loop, self->n[A_ADD_CALLBACK], self->fn[A_ADD_CALLBACK]);
    if (own < 0)
        goto error;
    if (own) {
        rc = process_events(self, loop, ready, events);
    } else {
        PyObject *r = PyObject_CallMethodOneArg(loop, self->n[A_PROCESS_EVENTS], events);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
error:
    Py_XDECREF(timeout);
    Py_XDECREF(selector);
    Py_XDECREF(events);
    return rc;
}

/* asyncio's own function fn[i] (in debug mode, or on a Python lacking one
 * of asyncio_names, where method() hands it out in place of the C one).
 * New reference, or NULL with an exception. */
static PyObject *call_stock(helpers_object *self, int i, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    if (self->fn[i] == NULL)
        return PyErr_Format(PyExc_RuntimeError, "asyncio has no BaseEventLoop.%s",
                            asyncio_names[i].name);
    return PyObject_Vectorcall(self->fn[i], args, nargsf, kwnames);
}

/* EvLoopHelpers.run_once(loop): BaseEventLoop._run_once(loop). */
static PyObject *EvLoopHelpers_run_once(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    helpers_object *self = (helpers_object *)op;
    PyObject *loop, *heap = NULL, *ready = NULL, *result = NULL;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "_run_once() takes no arguments");
        return NULL;
    }
    loop = args[0];
    int debug = PyTuple_GET_SIZE(self->missing) > 0 ? 1 : attr_true(loop, self->n[A_DEBUG]);
    if (debug < 0)
        return NULL;
    if (debug)
        return call_stock(self, A_RUN_ONCE, args, 1, NULL);
    if ((heap = PyObject_GetAttr(loop, self->n[A_SCHEDULED])) == NULL ||
        (ready = PyObject_GetAttr(loop, self->n[A_READY])) == NULL)
        goto error;
    if (!PyList_Check(heap)) {
        result = PyObject_CallOneArg(self->fn[A_RUN_ONCE], loop);
        goto error;
    }
    if (drop_cancelled_timers(self, loop, &heap) < 0 || poll_events(self, loop, ready, heap) < 0 ||
        queue_due_timers(self, loop, ready, heap) < 0)
        goto error;
    Py_ssize_t ntodo = PyObject_Length(ready);
    if (ntodo < 0)
        goto error;
    for (Py_ssize_t i = 0; i < ntodo; i++) {
        PyObject *h = PyObject_CallMethodNoArgs(ready, self->n[A_POPLEFT]);
        if (h == NULL)
            goto error;
        int cancelled = handle_cancelled(self, h);
        int rc = cancelled < 0 ? -1 : cancelled ? 0 : run_handle(self, h);
        Py_DECREF(h);
        if (rc < 0)
            goto error;
    }
    result = Py_NewRef(Py_None);
error:
    Py_XDECREF(heap);
    Py_XDECREF(ready);
    return result;
}

/* A new asyncio Handle, as Handle(callback, args, loop, context) makes it
 * outside debug mode (a copy of the current context when context is None).
 * New reference or NULL. */
static PyObject *new_handle(helpers_object *self, PyObject *callback, PyObject *args,
                            PyObject *loop, PyObject *context)
{
    PyTypeObject *tp = self->handle_type;
    PyObject *ctx = context && context != Py_None ? Py_NewRef(context) : PyContext_CopyCurrent();
    if (ctx == NULL)
        return NULL;
    PyObject *h = tp->tp_alloc(tp, 0);
    if (h == NULL) {
        Py_DECREF(ctx);
        return NULL;
    }
    slot_set(h, self->off[A_CONTEXT], ctx);
    slot_set(h, self->off[A_LOOP], loop);
    slot_set(h, self->off[A_CALLBACK], callback);
    slot_set(h, self->off[A_ARGS], args);
    slot_set(h, self->off[A_CANCELLED], Py_False);
    slot_set(h, self->off[A_REPR], Py_None);
    slot_set(h, self->off[A_SOURCE_TB], Py_None);
    Py_DECREF(ctx);
    return h;
}

/* While the ASGI layer creates a request's task: the first step that
 * Task() schedules on the loop (a C task's step wrapper, with the task's
 * context) is handed to the layer, which runs it at once, instead of being
 * queued. Anything else is queued as usual. Returns 1 when taken. */
static int take_step(helpers_object *self, PyObject *loop, PyObject *callback, Py_ssize_t nargs,
                     PyObject *context)
{
    ps_module_state_t *st = PyType_GetModuleState(Py_TYPE(self));
    ps_step_capture_t *cap = st ? st->step_capture : NULL;
    if (cap == NULL || cap->callback != NULL || cap->loop != loop || nargs != 2 ||
        context == NULL || !PyContext_CheckExact(context) ||
        strcmp(Py_TYPE(callback)->tp_name, "TaskStepMethWrapper") != 0)
        return 0;
    cap->callback = Py_NewRef(callback);
    cap->context = Py_NewRef(context);
    return 1;
}

/* call_soon(loop, callback, *args, context=None) and its thread-safe twin:
 * the new Handle appended to loop._ready (then loop._write_to_self() when
 * threadsafe). New reference or NULL. */
static PyObject *call_soon(helpers_object *self, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames, int threadsafe)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (PyTuple_GET_SIZE(self->missing) > 0)
        return call_stock(self, threadsafe ? A_CALL_SOON_THREADSAFE : A_CALL_SOON, args, nargsf,
                          kwnames);
    const char *name = threadsafe ? "call_soon_threadsafe" : "call_soon";
    PyObject *context = NULL, *cbargs = NULL, *ready = NULL, *h = NULL, *result = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_Compare(kw, self->n[A_CONTEXT_KW]) != 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", name, kw);
            return NULL;
        }
        context = args[nargs + i];
    }
    if (nargs < 2) {
        PyErr_Format(PyExc_TypeError, "%s() missing 1 required positional argument: 'callback'",
                     name);
        return NULL;
    }
    PyObject *loop = args[0], *callback = args[1];
    int closed = attr_true(loop, self->n[A_CLOSED]);
    int debug = closed ? 0 : attr_true(loop, self->n[A_DEBUG]);
    if (closed < 0 || debug < 0)
        return NULL;
    if (closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    if (debug)
        return call_stock(self, threadsafe ? A_CALL_SOON_THREADSAFE : A_CALL_SOON, args,
                          (size_t)nargs, kwnames);
    if (!threadsafe && take_step(self, loop, callback, nargs, context))
        Py_RETURN_NONE; /* the caller, Task(), drops what call_soon() returns */
    if ((cbargs = PyTuple_New(nargs - 2)) == NULL)
        goto error;
    for (Py_ssize_t i = 2; i < nargs; i++)
        PyTuple_SET_ITEM(cbargs, i - 2, Py_NewRef(args[i]));
    if ((h = new_handle(self, callback, cbargs, loop, context)) == NULL ||
        (ready = PyObject_GetAttr(loop, self->n[A_READY])) == NULL)
        goto error;
    PyObject *r = PyObject_CallMethodOneArg(ready, self->n[A_APPEND], h);
    if (r == NULL)
        goto error;
    Py_DECREF(r);
    if (threadsafe) {
        if ((r = PyObject_CallMethodNoArgs(loop, self->n[A_WRITE_TO_SELF])) == NULL)
            goto error;
        Py_DECREF(r);
    }
    result = Py_NewRef(h);
error:
    Py_XDECREF(cbargs);
    Py_XDECREF(ready);
    Py_XDECREF(h);
    return result;
}

static PyObject *EvLoopHelpers_call_soon(PyObject *op, PyObject *const *args, size_t nargsf,
                                         PyObject *kwnames)
{
    return call_soon((helpers_object *)op, args, nargsf, kwnames, 0);
}

static PyObject *EvLoopHelpers_call_soon_threadsafe(PyObject *op, PyObject *const *args,
                                                    size_t nargsf, PyObject *kwnames)
{
    return call_soon((helpers_object *)op, args, nargsf, kwnames, 1);
}

/* get_debug(loop): loop._debug (the Task and Future constructors ask). */
static PyObject *EvLoopHelpers_get_debug(PyObject *op, PyObject *loop)
{
    return PyObject_GetAttr(loop, ((helpers_object *)op)->n[A_DEBUG]);
}

/* method(name): the named method wrapped to bind like a function defined in
 * a class body; asyncio's own function instead when this Python lacks one of
 * asyncio_names (then the C one would read a name that is not there). New
 * reference or NULL. */
static PyObject *EvLoopHelpers_method(PyObject *op, PyObject *name)
{
    helpers_object *self = (helpers_object *)op;
    if (PyTuple_GET_SIZE(self->missing) > 0) {
        static const struct {
            const char *helper;
            int stock;
        } stock[] = {{"run_once", A_RUN_ONCE},
                     {"call_soon", A_CALL_SOON},
                     {"call_soon_threadsafe", A_CALL_SOON_THREADSAFE},
                     {"get_debug", A_GET_DEBUG}};
        for (size_t i = 0; i < PS_ARRAY_LEN(stock); i++) {
            if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, stock[i].helper))
                continue;
            PyObject *fn = self->fn[stock[i].stock];
            if (fn == NULL)
                return PyErr_Format(PyExc_AttributeError, "asyncio has no BaseEventLoop.%s",
                                    asyncio_names[stock[i].stock].name);
            return Py_NewRef(fn);
        }
    }
    PyObject *m = PyObject_GetAttr(op, name);
    if (m == NULL)
        return NULL;
    PyObject *wrapped = PyInstanceMethod_New(m);
    Py_DECREF(m);
    return wrapped;
}

/* missing: the names of asyncio_names this Python lacks, as "Class.name"
 * (an empty tuple when the C methods are in use). */
static PyObject *EvLoopHelpers_get_missing(PyObject *op, void *closure)
{
    PS_UNUSED(closure);
    return Py_NewRef(((helpers_object *)op)->missing);
}

/* 1 when kwds holds nothing, else 0 with a TypeError. */
static int no_keywords(PyObject *kwds)
{
    if (kwds == NULL || PyDict_GET_SIZE(kwds) == 0)
        return 1;
    PyErr_SetString(PyExc_TypeError, "EvLoopHelpers() takes no keyword arguments");
    return 0;
}

/* A new BaseEventLoop, its attributes read and closed: the names __init__
 * sets, looked up on a real loop. New reference, or NULL (no exception:
 * every ON_LOOP name then counts as missing). */
static PyObject *probe_loop(PyObject *base)
{
    PyObject *loop = PyObject_CallNoArgs(base);
    if (loop == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return loop;
}

static void close_probe(PyObject *loop)
{
    if (loop == NULL)
        return;
    PyObject *r = PyObject_CallMethod(loop, "close", NULL);
    if (r == NULL)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(loop);
}

/* 1 when BaseSelectorEventLoop.__init__'s code names `name` (the attribute
 * is set there, on each selector loop), else 0. Never raises. */
static int init_names(PyObject *selbase, PyObject *name)
{
    PyObject *init = PyObject_GetAttrString(selbase, "__init__");
    PyObject *code = init ? PyObject_GetAttrString(init, "__code__") : NULL;
    PyObject *names = code ? PyObject_GetAttrString(code, "co_names") : NULL;
    int found = names && PyTuple_Check(names) ? PySequence_Contains(names, name) : 0;
    Py_XDECREF(init);
    Py_XDECREF(code);
    Py_XDECREF(names);
    PyErr_Clear();
    return found > 0;
}

/* cls.__dict__[name]: defined by cls itself, not inherited (asyncio's
 * AbstractEventLoop and BaseEventLoop have stubs of some of the methods
 * their subclasses define). New reference, or NULL with an exception. */
static PyObject *own_attr(PyObject *cls, PyObject *name)
{
    PyObject *d = PyObject_GetAttrString(cls, "__dict__");
    PyObject *v = d ? PyObject_GetItem(d, name) : NULL;
    Py_XDECREF(d);
    return v;
}

/* Looks up entry i of asyncio_names where asyncio defines it, keeping its
 * offset or function. Returns 1 when found, 0 when this Python lacks it
 * (no exception). */
static int check_name(helpers_object *self, int i, PyObject *probe, PyObject *base,
                      PyObject *selbase)
{
    PyObject *v = NULL;
    switch (asyncio_names[i].on) {
    case ON_LOOP:
        v = probe ? PyObject_GetAttr(probe, self->n[i]) : NULL;
        break;
    case ON_SELECTOR_LOOP:
        return init_names(selbase, self->n[i]);
    case ON_BASE:
    case ON_SELECTOR_BASE:
        v = own_attr(asyncio_names[i].on == ON_BASE ? base : selbase, self->n[i]);
        self->fn[i] = Py_XNewRef(v);
        break;
    case ON_HANDLE:
    case ON_TIMER: {
        PyTypeObject *tp = asyncio_names[i].on == ON_HANDLE ? self->handle_type : self->timer_type;
        int rc = slot_offset(tp, asyncio_names[i].name, &self->off[i]);
        PyErr_Clear();
        return rc == 0;
    }
    case ON_HANDLE_METHOD:
        v = PyObject_GetAttr((PyObject *)self->handle_type, self->n[i]);
        break;
    case PUBLIC:
        return 1;
    }
    PyErr_Clear();
    Py_XDECREF(v);
    return v != NULL;
}

/* One WARNING line on pyserver's error logger naming the missing names.
 * Never raises. */
static void warn_missing(PyObject *missing)
{
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *names = sep ? PyUnicode_Join(sep, missing) : NULL;
    PyObject *logging = names ? PyImport_ImportModule("logging") : NULL;
    PyObject *logger =
        logging ? PyObject_CallMethod(logging, "getLogger", "s", "pyserver.error") : NULL;
    PyObject *r = logger ? PyObject_CallMethod(logger, "warning", "sOs",
                                               "asyncio of this Python lacks %s: the event loop "
                                               "runs asyncio's own %s instead of pyserver's",
                                               names, "_run_once and call_soon")
                         : NULL;
    if (r == NULL)
        PyErr_WriteUnraisable(missing);
    Py_XDECREF(r);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    Py_XDECREF(names);
    Py_XDECREF(sep);
}

/* Checks every entry of asyncio_names, filling self->missing, and logs one
 * warning line when some are missing. Returns 0, or -1 with an exception
 * (out of memory). */
static int check_names(helpers_object *self, PyObject *base, PyObject *selbase)
{
    static const char *const owners[] = {
        [ON_LOOP] = "BaseEventLoop", [ON_SELECTOR_LOOP] = "BaseSelectorEventLoop",
        [ON_BASE] = "BaseEventLoop", [ON_SELECTOR_BASE] = "BaseSelectorEventLoop",
        [ON_HANDLE] = "Handle",      [ON_HANDLE_METHOD] = "Handle",
        [ON_TIMER] = "TimerHandle",  [PUBLIC] = "",
    };
    PyObject *list = PyList_New(0), *probe = probe_loop(base);
    if (list == NULL)
        goto error;
    for (int i = 0; i < A_COUNT; i++) {
        if (check_name(self, i, probe, base, selbase))
            continue;
        PyObject *what =
            PyUnicode_FromFormat("%s.%s", owners[asyncio_names[i].on], asyncio_names[i].name);
        if (what == NULL || PyList_Append(list, what) < 0) {
            Py_XDECREF(what);
            goto error;
        }
        Py_DECREF(what);
    }
    close_probe(probe);
    probe = NULL;
    if ((self->missing = PyList_AsTuple(list)) == NULL)
        goto error;
    Py_DECREF(list);
    if (PyTuple_GET_SIZE(self->missing) > 0)
        warn_missing(self->missing);
    return 0;
error:
    close_probe(probe);
    Py_XDECREF(list);
    return -1;
}

/* EvLoopHelpers(Handle, TimerHandle, BaseEventLoop, BaseSelectorEventLoop,
 * report): asyncio's classes, and report(handle, exc) for an exception
 * raised by a handle's callback. Checks asyncio_names against them. */
static PyObject *EvLoopHelpers_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *handle, *timer, *base, *selbase, *report, *heapq = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O:EvLoopHelpers", &PyType_Type, &handle, &PyType_Type,
                          &timer, &PyType_Type, &base, &PyType_Type, &selbase, &report) ||
        !no_keywords(kwds))
        return NULL;
    helpers_object *self = (helpers_object *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->handle_type = (PyTypeObject *)Py_NewRef(handle);
    self->timer_type = (PyTypeObject *)Py_NewRef(timer);
    self->report = Py_NewRef(report);
    if (!PyType_IsSubtype(self->timer_type, self->handle_type)) {
        PyErr_SetString(PyExc_TypeError, "TimerHandle must derive from Handle");
        goto error;
    }
    for (int i = 0; i < A_COUNT; i++)
        if ((self->n[i] = PyUnicode_InternFromString(asyncio_names[i].name)) == NULL)
            goto error;
    if (check_names(self, base, selbase) < 0)
        goto error;
    if ((heapq = PyImport_ImportModule("heapq")) == NULL ||
        (self->heappop = PyObject_GetAttrString(heapq, "heappop")) == NULL ||
        (self->heapify = PyObject_GetAttrString(heapq, "heapify")) == NULL ||
        (self->max_wait = PyLong_FromLong(86400)) == NULL)
        goto error;
    Py_DECREF(heapq);
    return (PyObject *)self;
error:
    Py_XDECREF(heapq);
    Py_DECREF(self);
    return NULL;
}

static int EvLoopHelpers_traverse(PyObject *op, visitproc visit, void *arg)
{
    helpers_object *self = (helpers_object *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->handle_type);
    Py_VISIT(self->timer_type);
    for (int i = 0; i < A_COUNT; i++)
        Py_VISIT(self->fn[i]);
    Py_VISIT(self->report);
    Py_VISIT(self->heappop);
    Py_VISIT(self->heapify);
    return 0;
}

static int EvLoopHelpers_clear(PyObject *op)
{
    helpers_object *self = (helpers_object *)op;
    Py_CLEAR(self->handle_type);
    Py_CLEAR(self->timer_type);
    for (int i = 0; i < A_COUNT; i++) {
        Py_CLEAR(self->fn[i]);
        Py_CLEAR(self->n[i]);
    }
    Py_CLEAR(self->missing);
    Py_CLEAR(self->report);
    Py_CLEAR(self->heappop);
    Py_CLEAR(self->heapify);
    Py_CLEAR(self->max_wait);
    return 0;
}

static void EvLoopHelpers_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    EvLoopHelpers_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef EvLoopHelpers_methods[] = {
    {"run_once", (PyCFunction)(void (*)(void))EvLoopHelpers_run_once, METH_FASTCALL,
     "run_once(loop)\n--\n\nBaseEventLoop._run_once(loop): one iteration of the loop."},
    {"call_soon", (PyCFunction)(void (*)(void))EvLoopHelpers_call_soon,
     METH_FASTCALL | METH_KEYWORDS,
     "call_soon(loop, callback, *args, context=None)\n--\n\nBaseEventLoop.call_soon."},
    {"call_soon_threadsafe", (PyCFunction)(void (*)(void))EvLoopHelpers_call_soon_threadsafe,
     METH_FASTCALL | METH_KEYWORDS,
     "call_soon_threadsafe(loop, callback, *args, context=None)\n--\n\n"
     "BaseEventLoop.call_soon_threadsafe."},
    {"get_debug", EvLoopHelpers_get_debug, METH_O,
     "get_debug(loop)\n--\n\nBaseEventLoop.get_debug."},
    {"method", EvLoopHelpers_method, METH_O,
     "method(name)\n--\n\nThe named method as an instance method, for a class body."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef EvLoopHelpers_getset[] = {
    {"missing", EvLoopHelpers_get_missing, NULL,
     "The private asyncio names this Python lacks (then method() gives asyncio's own methods).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot EvLoopHelpers_slots[] = {
    {Py_tp_getset, EvLoopHelpers_getset},
    {Py_tp_doc, "EvLoopHelpers(Handle, TimerHandle, BaseEventLoop, BaseSelectorEventLoop, "
                "report)\n--\n\nC versions of asyncio.BaseEventLoop's _run_once, call_soon, "
                "call_soon_threadsafe and get_debug, for pyserver.evselector.EvEventLoop."},
    {Py_tp_new, EvLoopHelpers_new},
    {Py_tp_dealloc, EvLoopHelpers_dealloc},
    {Py_tp_traverse, EvLoopHelpers_traverse},
    {Py_tp_clear, EvLoopHelpers_clear},
    {Py_tp_methods, EvLoopHelpers_methods},
    {0, NULL},
};

static PyType_Spec EvLoopHelpers_spec = {
    .name = "pyserver._core.EvLoopHelpers",
    .basicsize = sizeof(helpers_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = EvLoopHelpers_slots,
};

int ps_evloop_init_type(PyObject *module)
{
    PyObject *helpers = PyType_FromModuleAndSpec(module, &EvLoopHelpers_spec, NULL);
    int rc = helpers ? PyModule_AddObjectRef(module, "EvLoopHelpers", helpers) : -1;
    Py_XDECREF(helpers);
    return rc;
}
