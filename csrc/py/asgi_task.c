/* A request's asyncio task: made directly with asyncio.Task (loop.create_task
 * adds only a Python frame around the same call), stepping an AppCall
 * (asgi_awaitables.c), and its first step taken at once when it may.
 *
 * How the task is made depends on the Python version, one function per
 * strategy and one switch choosing among them (new_task):
 *   3.12 and later  Task(eager_start=True, context=): asyncio's eager task
 *                   (task_eager); a task that may not step now is made as on
 *                   3.11.
 *   3.11            Task(context=), its first step taken from the loop's
 *                   call_soon() and run here (task_in_context).
 *   3.10            Task() inside the base context, which it copies; the
 *                   first step taken as on 3.11 (task_in_base_context).
 */
#include "asgi.h"

/* ---- the task's first step, at once ----
 *
 * A request's task takes its first step from the connection's callback,
 * not at the loop's next turn (what Python 3.12 calls an eager task). The
 * response of an application that waits for nothing is out before the
 * next connection's request is parsed, and its objects are freed before
 * that request's are made: no trip through the ready queue, and under load
 * far fewer garbage collections (the objects of a whole batch of requests
 * no longer pile up between two turns of the loop). The task is the
 * current task during that step, as during any other. Python 3.12 and
 * later: Task(eager_start=True). Before: the step Task() schedules is taken
 * from the loop's call_soon() and run (not in asyncio's debug mode, where
 * asyncio's own call_soon() queues it).
 *
 * Never from inside another task's step (a pipelined request parsed after a
 * send() completed the one before it): that request's task waits for the
 * next turn, so steps never nest. Nor for a WebSocket, whose handshake
 * belongs to the loop's turn. */
static int may_step_now(ps_asgi_t *ctx)
{
    if (ctx->current_tasks != NULL) { /* asyncio's own {loop: task}: no Python frame */
        PyObject *task = PyDict_GetItemWithError(ctx->current_tasks, ctx->loop); /* borrowed */
        if (task == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return task == NULL;
    }
    if (ctx->current_task == NULL)
        return 0;
    PyObject *task = PyObject_CallOneArg(ctx->current_task, ctx->loop);
    if (task == NULL) {
        PyErr_Clear();
        return 0;
    }
    int idle = task == Py_None;
    Py_DECREF(task);
    return idle;
}

static PyObject *reraise(PyObject *unused, PyObject *exc)
{
    PS_UNUSED(unused);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    return NULL;
}

static PyMethodDef reraise_def = {"reraise", reraise, METH_O, "Raises its argument."};

/* The exception set, raised by a step run from a connection callback, goes
 * to the loop, which raises it at its next turn, where it would have met a
 * step of its own: SystemExit and KeyboardInterrupt end run_forever(),
 * another goes to the loop's exception handler. Clears it. */
static void defer_exception(ps_asgi_t *ctx)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *r = value ? PyObject_CallMethodObjArgs(ctx->loop, ctx->s[S_CALL_SOON], ctx->reraise,
                                                     value, NULL)
                        : NULL;
    if (r == NULL)
        PyErr_WriteUnraisable(ctx->loop);
    Py_XDECREF(r);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Before Python 3.12: the first step Task() scheduled, taken from the
 * loop's call_soon() (evloop.c), runs here. */
static void run_taken_step(ps_asgi_t *ctx, ps_step_capture_t *cap)
{
    PyObject *step = cap->callback, *context = cap->context;
    cap->callback = cap->context = NULL;
    if (PyContext_Enter(context) == 0) {
        PyObject *r = PyObject_CallNoArgs(step);
        if (PyContext_Exit(context) < 0)
            Py_CLEAR(r);
        if (r == NULL)
            defer_exception(ctx);
        Py_XDECREF(r);
    } else {
        defer_exception(ctx);
    }
    Py_DECREF(step);
    Py_DECREF(context);
}

/* ---- one function per Python version ---- */

#if PY_VERSION_HEX >= 0x030B0000
/* 3.11 and later: Task(call, loop=, context=) with a copy of the context
 * the server started in; taken (or NULL) armed while Task() runs, to take
 * the first step it schedules. New reference, or NULL with an exception. */
static PyObject *task_in_context(ps_asgi_t *ctx, PyObject *call, ps_step_capture_t *taken)
{
    PyObject *context = PyContext_Copy(ctx->base_context);
    if (context == NULL)
        return NULL;
    PyObject *targs[3] = {call, ctx->loop, context};
    ctx->st->step_capture = taken;
    PyObject *task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->task_kwnames);
    ctx->st->step_capture = NULL;
    Py_DECREF(context);
    return task;
}
#endif

#if PY_VERSION_HEX >= 0x030C0000
/* 3.12 and later: Task(call, loop=, eager_start=True, context=), whose first
 * step runs inside the call. New reference, or NULL with an exception. */
static PyObject *task_eager(ps_asgi_t *ctx, PyObject *call)
{
    PyObject *context = PyContext_Copy(ctx->base_context);
    if (context == NULL)
        return NULL;
    PyObject *targs[4] = {call, ctx->loop, Py_True, context};
    PyObject *task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->eager_kwnames);
    Py_DECREF(context);
    return task;
}
#endif

#if PY_VERSION_HEX < 0x030B0000
/* 3.10: Task() has no context argument and copies the current context, so
 * it is made inside the base context; taken as for task_in_context. New
 * reference, or NULL with an exception. */
static PyObject *task_in_base_context(ps_asgi_t *ctx, PyObject *call, ps_step_capture_t *taken)
{
    if (PyContext_Enter(ctx->base_context) < 0)
        return NULL;
    PyObject *targs[2] = {call, ctx->loop};
    ctx->st->step_capture = taken;
    PyObject *task = PyObject_Vectorcall(ctx->task_type, targs, 1, ctx->task_kwnames);
    ctx->st->step_capture = NULL;
    if (PyContext_Exit(ctx->base_context) < 0)
        Py_CLEAR(task);
    return task;
}
#endif

/* The task for call, by this Python's strategy; now: its first step may be
 * taken at once (by the eager task, or from *taken after this returns).
 * Each task gets a copy of the context the server started in, not of the
 * current one: a request parsed while another request's task runs (the one
 * before it on the connection, completed by its send()) must not inherit
 * what that request set in its context variables. New reference, or NULL
 * with an exception. */
static PyObject *new_task(ps_asgi_t *ctx, PyObject *call, int now, ps_step_capture_t *taken)
{
#if PY_VERSION_HEX >= 0x030C0000
    PS_UNUSED(taken);
    return now ? task_eager(ctx, call) : task_in_context(ctx, call, NULL);
#elif PY_VERSION_HEX >= 0x030B0000
    return task_in_context(ctx, call, now ? taken : NULL);
#else
    return task_in_base_context(ctx, call, now ? taken : NULL);
#endif
}

/* The keyword names new_task's strategy passes to Task(). Returns 0 or -1
 * with an exception. */
static int task_kwnames(ps_asgi_t *ctx)
{
#if PY_VERSION_HEX >= 0x030B0000
    Py_XSETREF(ctx->task_kwnames, PyTuple_Pack(2, ctx->s[S_LOOP], ctx->s[S_CONTEXT_KW]));
#else
    Py_XSETREF(ctx->task_kwnames, PyTuple_Pack(1, ctx->s[S_LOOP]));
#endif
    Py_XSETREF(ctx->eager_kwnames,
               PyTuple_Pack(3, ctx->s[S_LOOP], ctx->s[S_EAGER_START], ctx->s[S_CONTEXT_KW]));
    return ctx->task_kwnames && ctx->eager_kwnames ? 0 : -1;
}

/* ---- start ---- */

int ps_asgi_task_init(ps_asgi_t *ctx, PyObject *asyncio)
{
    Py_XSETREF(ctx->task_type, PyObject_GetAttrString(asyncio, "Task"));
    Py_XSETREF(ctx->current_task, PyObject_GetAttrString(asyncio, "current_task"));
    if (ctx->task_type == NULL || ctx->current_task == NULL)
        return -1;
    PyObject *tasks = PyObject_GetAttrString(asyncio, "tasks");
    PyObject *current = tasks ? PyObject_GetAttrString(tasks, "_current_tasks") : NULL;
    Py_XDECREF(tasks);
    PyErr_Clear(); /* a Python without it: current_task() is asked */
    Py_XSETREF(ctx->current_tasks,
               current && PyDict_CheckExact(current) ? Py_NewRef(current) : NULL);
    Py_XDECREF(current);
    Py_XSETREF(ctx->reraise, PyCFunction_New(&reraise_def, NULL));
    Py_XSETREF(ctx->base_context, PyContext_CopyCurrent());
    if (task_kwnames(ctx) < 0 || ctx->reraise == NULL || ctx->base_context == NULL)
        return -1;
    return 0;
}

int ps_asgi_task_start(ps_asgi_t *ctx, CycleObject *cycle, PyObject *coro)
{
    PyObject *task = NULL;
    int rc = -1;
    AppCallObject *call =
        (AppCallObject *)ctx->st->appcall_type->tp_alloc(ctx->st->appcall_type, 0);
    if (call == NULL)
        return -1;
    call->inner = Py_NewRef(coro);
    call->cycle = (CycleObject *)Py_NewRef(cycle);
    int now = cycle->ws == NULL && may_step_now(ctx);
    /* Before 3.12, armed while Task() runs: the first step it schedules. */
    ps_step_capture_t taken = {ctx->loop, NULL, NULL};
    ctx->active++; /* before the step: the application may end in it */
    task = new_task(ctx, (PyObject *)call, now, &taken);
    /* never to run: Task() failed after scheduling it */
    if (task == NULL && taken.callback != NULL) {
        Py_CLEAR(taken.callback);
        Py_CLEAR(taken.context);
    }
    if (task == NULL) {
        /* Only a step can raise what must reach the loop's caller. */
        if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
            PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
            defer_exception(ctx);
        if (call->inner == NULL) { /* the request is over */
            PyErr_Clear();
            rc = 0;
            goto error;
        }
        ctx->active--;
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the request's task was interrupted");
        goto error;
    }
    if (call->inner != NULL) { /* still to run, or waiting (after an eager first step) */
        if (PySet_Add(ctx->tasks, task) == 0)
            call->task = task;
        else /* out of memory: it runs unprotected, as a plain asyncio task would */
            PyErr_WriteUnraisable(task);
    }
    if (taken.callback != NULL)
        run_taken_step(ctx, &taken);
    rc = 0;
error:
    Py_XDECREF(call);
    Py_XDECREF(task);
    return rc;
}
