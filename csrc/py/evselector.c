/* pyserver._core.EvSelectorCore: the readiness half of a selectors selector,
 * implemented on a libev loop, so that asyncio's SelectorEventLoop can run on
 * the worker's own loop and libev stays the only poller (DESIGN.md, 2).
 *
 * One ev_io per registered fd, kept in an array indexed by the fd. poll()
 * runs one libev iteration with the GIL released while libev waits; the io
 * callbacks only note which fds fired, and the (fd, events) list is built
 * once the iteration is over. Other watchers of the same loop (the HTTP
 * connections) run in that iteration too, which is what lets one poll()
 * serve both asyncio and the C core.
 *
 * select() is poll() for asyncio: each slot keeps the SelectorKey it was
 * registered with, so the (key, events) list asyncio wants is built here
 * without a Python loop over the fds. wakeup() is the thread-safe wake-up
 * of the loop (pyserver's event loop sends call_soon_threadsafe through it
 * instead of a byte on asyncio's self-pipe): an ev_async, which costs no
 * syscall while the loop is awake and wakes it through libev's own eventfd
 * when it sleeps, with nothing to read back in Python afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "bridge.h"
#include <structmember.h>

/* selectors.EVENT_READ and EVENT_WRITE are libev's own bits. */
_Static_assert(EV_READ == 1 && EV_WRITE == 2, "selectors and libev event bits differ");
#define EVENT_MASK (EV_READ | EV_WRITE)

typedef struct evsel_object evsel_object;

/* One registered fd. */
typedef struct {
    ev_io io;
    evsel_object *owner; /* borrowed: the selector outlives its slots */
    int events;          /* the registered mask */
    int ready;           /* what fired during the current poll(); 0 outside one */
    PyObject *key;       /* what select() reports for the fd: strong, or NULL (fd only) */
} slot_t;

struct evsel_object {
    PyObject ob_base;     /* PyObject_HEAD, spelled so clang-format keeps it alone */
    struct ev_loop *loop; /* NULL once closed */
    unsigned owns_loop : 1;
    unsigned polling : 1;
    PyThreadState *tstate; /* the owned loop's GIL holder while libev waits */
    ev_timer timer;        /* poll(timeout > 0) */
    ev_async wakeup;       /* wakeup(): started (and unref'd) while the loop is set */
    slot_t **slots;        /* indexed by fd; NULL where nothing is registered */
    int nslots;            /* length of slots */
    Py_ssize_t nlive;      /* registered fds */
    int *ready;            /* fds that fired, in firing order */
    Py_ssize_t nready;
    Py_ssize_t ready_cap;  /* kept above nlive, so the io callback never allocates */
    unsigned overflow : 1; /* the ready list was full: scan every slot */
};

/* The owned loop's GIL hand-off; the worker's loop has the server's own. */
static void release_gil(struct ev_loop *loop)
{
    evsel_object *self = ev_userdata(loop);
    self->tstate = PyEval_SaveThread();
}

static void acquire_gil(struct ev_loop *loop)
{
    evsel_object *self = ev_userdata(loop);
    PyEval_RestoreThread(self->tstate);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    slot_t *s = ps_container_of(w, slot_t, io);
    evsel_object *self = s->owner;
    PS_UNUSED(loop);
    /* EV_ERROR: libev gave up on the fd (closed under us); report it ready
     * for everything registered so the owner finds out by using it. */
    int mask = (revents & EV_ERROR) ? s->events : (revents & EVENT_MASK);
    if (mask == 0)
        return;
    if (s->ready == 0) {
        if (self->nready < self->ready_cap)
            self->ready[self->nready++] = w->fd;
        else
            self->overflow = 1;
    }
    s->ready |= mask;
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    /* Only here to end the iteration. */
    PS_UNUSED(loop);
    PS_UNUSED(w);
    PS_UNUSED(revents);
}

static void on_wakeup(struct ev_loop *loop, ev_async *w, int revents)
{
    /* Only here to end the iteration: the work is in asyncio's ready queue. */
    PS_UNUSED(loop);
    PS_UNUSED(w);
    PS_UNUSED(revents);
}

/* Starts the wake-up watcher on the loop just set. It does not keep the loop
 * alive by itself (unref), as asyncio's self-pipe reader does not either for
 * a selector: only registered fds and timers do. */
static void start_wakeup(evsel_object *self)
{
    ev_async_start(self->loop, &self->wakeup);
    ev_unref(self->loop);
}

/* Stops and frees every watcher; the loop too when it is ours. Idempotent. */
static void close_core(evsel_object *self)
{
    struct ev_loop *loop = self->loop;
    if (loop == NULL)
        return;
    for (int fd = 0; fd < self->nslots; fd++) {
        slot_t *s = self->slots[fd];
        if (s == NULL)
            continue;
        /* Detached before the key goes: dropping it can run Python (a
         * finaliser, the GC's traverse) that must not find a freed slot. */
        self->slots[fd] = NULL;
        self->nlive--;
        ev_io_stop(loop, &s->io);
        PyObject *key = s->key;
        PyMem_Free(s);
        Py_XDECREF(key);
    }
    ev_timer_stop(loop, &self->timer);
    if (ev_is_active(&self->wakeup)) {
        ev_ref(loop); /* undoes start_wakeup's unref, as libev requires */
        ev_async_stop(loop, &self->wakeup);
    }
    PyMem_Free(self->slots);
    PyMem_Free(self->ready);
    self->slots = NULL;
    self->ready = NULL;
    self->nslots = 0;
    self->nlive = 0;
    self->nready = self->ready_cap = 0;
    self->loop = NULL;
    if (self->owns_loop)
        ev_loop_destroy(loop);
}

/* Returns 0, or -1 with an exception when the selector cannot be used. */
static int check_usable(evsel_object *self)
{
    if (self->loop == NULL) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on a closed selector");
        return -1;
    }
    return 0;
}

/* PyLong_AsInt is public only from 3.13. Returns -1 with an exception too. */
static int as_int(PyObject *obj, int *out)
{
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "value does not fit in a C int");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Reads (fd, events[, key]) arguments; *key is borrowed, NULL when absent or
 * None. Returns 0 or -1 with an exception. */
static int parse_fd_events(PyObject *const *args, Py_ssize_t nargs, const char *name, int *fd,
                           int *events, PyObject **key)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(fd, events, key=None) takes 2 or 3 arguments", name);
        return -1;
    }
    *key = nargs == 3 && args[2] != Py_None ? args[2] : NULL;
    if (as_int(args[0], fd) < 0 || as_int(args[1], events) < 0)
        return -1;
    if (*fd < 0) {
        PyErr_Format(PyExc_ValueError, "Invalid file descriptor: %d", *fd);
        return -1;
    }
    if (*events == 0 || (*events & ~EVENT_MASK)) {
        PyErr_Format(PyExc_ValueError, "Invalid events: %d", *events);
        return -1;
    }
    return 0;
}

/* Makes slots[fd] addressable and leaves room in the ready list for one more
 * registration. Returns 0 or -1 with MemoryError. */
static int reserve(evsel_object *self, int fd)
{
    if (fd >= self->nslots) {
        size_t n = PS_MAX((size_t)fd + 1, (size_t)self->nslots * 2);
        n = PS_MAX(n, 64);
        slot_t **slots = PyMem_Realloc(self->slots, n * sizeof(*slots));
        if (slots == NULL)
            goto nomem;
        memset(slots + self->nslots, 0, (n - (size_t)self->nslots) * sizeof(*slots));
        self->slots = slots;
        self->nslots = (int)n;
    }
    if (self->nlive + 1 > self->ready_cap) {
        Py_ssize_t n = PS_MAX(self->ready_cap * 2, 64);
        int *ready = PyMem_Realloc(self->ready, (size_t)n * sizeof(*ready));
        if (ready == NULL)
            goto nomem;
        self->ready = ready;
        self->ready_cap = n;
    }
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

static slot_t *lookup(evsel_object *self, int fd)
{
    return fd < self->nslots ? self->slots[fd] : NULL;
}

static PyObject *EvSelectorCore_register(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    evsel_object *self = (evsel_object *)op;
    int fd, events;
    PyObject *key;
    if (check_usable(self) < 0 || parse_fd_events(args, nargs, "register", &fd, &events, &key) < 0)
        return NULL;
    if (lookup(self, fd) != NULL) {
        PyErr_Format(PyExc_KeyError, "fd %d is already registered", fd);
        return NULL;
    }
    /* libev only tells the kernel at the next iteration; check now, as
     * epoll_ctl would, so a bad fd fails here and not later. */
    if (fcntl(fd, F_GETFD) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (reserve(self, fd) < 0)
        return NULL;
    slot_t *s = PyMem_Malloc(sizeof(*s));
    if (s == NULL)
        return PyErr_NoMemory();
    s->owner = self;
    s->events = events;
    s->ready = 0;
    s->key = Py_XNewRef(key);
    /* ev_io_init (not just start) every time: it tells libev the fd may be a
     * new file behind a recycled number, which epoll needs to hear about. */
    ev_io_init(&s->io, on_io, fd, events);
    ev_io_start(self->loop, &s->io);
    self->slots[fd] = s;
    self->nlive++;
    Py_RETURN_NONE;
}

static PyObject *EvSelectorCore_modify(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    evsel_object *self = (evsel_object *)op;
    int fd, events;
    PyObject *key;
    if (check_usable(self) < 0 || parse_fd_events(args, nargs, "modify", &fd, &events, &key) < 0)
        return NULL;
    slot_t *s = lookup(self, fd);
    if (s == NULL) {
        PyErr_Format(PyExc_KeyError, "fd %d is not registered", fd);
        return NULL;
    }
    if (s->events != events) {
        ev_io_stop(self->loop, &s->io);
        ev_io_set(&s->io, fd, events);
        ev_io_start(self->loop, &s->io);
        s->events = events;
    }
    if (nargs == 3)
        Py_XSETREF(s->key, Py_XNewRef(key));
    Py_RETURN_NONE;
}

static PyObject *EvSelectorCore_unregister(PyObject *op, PyObject *arg)
{
    evsel_object *self = (evsel_object *)op;
    if (check_usable(self) < 0)
        return NULL;
    int fd;
    if (as_int(arg, &fd) < 0)
        return NULL;
    slot_t *s = fd >= 0 ? lookup(self, fd) : NULL;
    if (s == NULL) {
        PyErr_Format(PyExc_KeyError, "fd %d is not registered", fd);
        return NULL;
    }
    /* Also drops it from libev's pending list if it fired in this poll:
     * nothing points to the slot after this. */
    ev_io_stop(self->loop, &s->io);
    self->slots[fd] = NULL;
    self->nlive--;
    Py_CLEAR(s->key);
    PyMem_Free(s);
    Py_RETURN_NONE;
}

/* Appends (fd, events) for slot s to list, or (key, events) when by_key
 * (slots without a key are left out then), and clears its ready mask.
 * Returns 0 or -1 with an exception. */
static int take_ready(slot_t *s, PyObject *list, int by_key)
{
    int mask = s->ready & s->events;
    s->ready = 0;
    if (mask == 0 || (by_key && s->key == NULL))
        return 0;
    PyObject *item =
        by_key ? Py_BuildValue("(Oi)", s->key, mask) : Py_BuildValue("(ii)", s->io.fd, mask);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* Turns what fired into a new list of (fd, events), leaving every ready mask
 * cleared even on failure (a mask left set would hide the fd from later
 * polls). Returns a new reference, or NULL with an exception. */
static PyObject *collect(evsel_object *self, int by_key)
{
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; i < self->nready; i++) {
        slot_t *s = lookup(self, self->ready[i]);
        if (s == NULL || s->ready == 0)
            continue; /* unregistered since, or already taken */
        if (list == NULL)
            s->ready = 0;
        else if (take_ready(s, list, by_key) < 0)
            Py_CLEAR(list);
    }
    for (int fd = 0; self->overflow && fd < self->nslots; fd++) {
        slot_t *s = self->slots[fd];
        if (s == NULL || s->ready == 0)
            continue;
        if (list == NULL)
            s->ready = 0;
        else if (take_ready(s, list, by_key) < 0)
            Py_CLEAR(list);
    }
    self->nready = 0;
    self->overflow = 0;
    return list;
}

/* Reads poll()'s timeout: -1 for None (block), else seconds >= 0.
 * Returns 0 or -1 with an exception. */
static int parse_timeout(PyObject *const *args, Py_ssize_t nargs, double *timeout)
{
    *timeout = -1.0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "poll(timeout=None) takes at most 1 argument");
        return -1;
    }
    if (nargs == 0 || args[0] == Py_None)
        return 0;
    double t = PyFloat_AsDouble(args[0]);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(t)) {
        PyErr_SetString(PyExc_ValueError, "timeout must not be NaN");
        return -1;
    }
    *timeout = t > 0 ? t : 0.0;
    return 0;
}

/* One libev iteration. None blocks until any watcher of the loop fires (the
 * selector's or not), 0 only collects what is ready, t > 0 waits at most t
 * seconds. Returns a new list of (fd, events), or of (key, events) when
 * by_key; NULL with an exception. */
static PyObject *run_once(PyObject *op, PyObject *const *args, Py_ssize_t nargs, int by_key)
{
    evsel_object *self = (evsel_object *)op;
    double timeout;
    if (check_usable(self) < 0 || parse_timeout(args, nargs, &timeout) < 0)
        return NULL;
    if (self->polling) {
        PyErr_SetString(PyExc_RuntimeError, "EvSelectorCore.poll() is already running");
        return NULL;
    }
    struct ev_loop *loop = self->loop;
    int flags = EVRUN_ONCE;
    if (timeout == 0.0) {
        flags = EVRUN_NOWAIT;
    } else if (timeout > 0) {
        /* libev's clock is as old as the last iteration: refresh it so the
         * timer is relative to now. */
        ev_now_update(loop);
        ev_timer_set(&self->timer, timeout, 0.0);
        ev_timer_start(loop, &self->timer);
    }
    Py_INCREF(op); /* callbacks run during ev_run may drop the last other reference */
    self->polling = 1;
    self->nready = 0;
    self->overflow = 0;
    ev_run(loop, flags);
    self->polling = 0;
    ev_timer_stop(loop, &self->timer);
    PyObject *result = collect(self, by_key);
    if (result != NULL && PyErr_CheckSignals() < 0)
        Py_CLEAR(result);
    Py_DECREF(op);
    return result;
}

/* poll(timeout=None): run_once() reporting fds. */
static PyObject *EvSelectorCore_poll(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    return run_once(op, args, nargs, 0);
}

/* select(timeout=None): run_once() reporting the keys given to register()
 * or modify(), as selectors.BaseSelector.select() does. */
static PyObject *EvSelectorCore_select(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    return run_once(op, args, nargs, 1);
}

/* wakeup(): makes a poll() under way, or the next one, return. Any thread
 * may call it (with the GIL, which serialises it against close()); a no-op
 * once closed. */
static PyObject *EvSelectorCore_wakeup(PyObject *op, PyObject *unused)
{
    evsel_object *self = (evsel_object *)op;
    PS_UNUSED(unused);
    if (self->loop != NULL)
        ev_async_send(self->loop, &self->wakeup);
    Py_RETURN_NONE;
}

static PyObject *EvSelectorCore_close(PyObject *op, PyObject *unused)
{
    evsel_object *self = (evsel_object *)op;
    PS_UNUSED(unused);
    if (self->polling) {
        PyErr_SetString(PyExc_RuntimeError, "cannot close a selector while it polls");
        return NULL;
    }
    close_core(self);
    Py_RETURN_NONE;
}

static PyObject *EvSelectorCore_get_closed(PyObject *op, void *closure)
{
    PS_UNUSED(closure);
    return PyBool_FromLong(((evsel_object *)op)->loop == NULL);
}

static PyObject *EvSelectorCore_get_owns_loop(PyObject *op, void *closure)
{
    PS_UNUSED(closure);
    return PyBool_FromLong(((evsel_object *)op)->owns_loop);
}

static Py_ssize_t EvSelectorCore_len(PyObject *op)
{
    return ((evsel_object *)op)->nlive;
}

/* Fills in what both constructors share; the loop is set by the caller. */
static evsel_object *alloc_core(PyTypeObject *type)
{
    evsel_object *self = (evsel_object *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    ev_timer_init(&self->timer, on_timer, 0.0, 0.0);
    ev_async_init(&self->wakeup, on_wakeup);
    return self;
}

/* EvSelectorCore(): a selector with a libev loop of its own. */
static PyObject *EvSelectorCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":EvSelectorCore", kwlist))
        return NULL;
    evsel_object *self = alloc_core(type);
    if (self == NULL)
        return NULL;
    self->loop = ev_loop_new(EVFLAG_AUTO);
    if (self->loop == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "libev could not create a loop");
        return NULL;
    }
    self->owns_loop = 1;
    ev_set_userdata(self->loop, self);
    ev_set_loop_release_cb(self->loop, release_gil, acquire_gil);
    start_wakeup(self);
    return (PyObject *)self;
}

/* The keys hold asyncio handles, which hold the loop, which holds the
 * selector and so this core: a cycle the GC must see through. */
static int EvSelectorCore_traverse(PyObject *op, visitproc visit, void *arg)
{
    evsel_object *self = (evsel_object *)op;
    Py_VISIT(Py_TYPE(op));
    for (int fd = 0; fd < self->nslots; fd++)
        if (self->slots[fd] != NULL)
            Py_VISIT(self->slots[fd]->key);
    return 0;
}

/* Drops the keys only: the watchers stay until close(). */
static int EvSelectorCore_clear(PyObject *op)
{
    evsel_object *self = (evsel_object *)op;
    for (int fd = 0; fd < self->nslots; fd++)
        if (self->slots[fd] != NULL)
            Py_CLEAR(self->slots[fd]->key);
    return 0;
}

static void EvSelectorCore_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    close_core((evsel_object *)op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef EvSelectorCore_methods[] = {
    {"register", (PyCFunction)(void (*)(void))EvSelectorCore_register, METH_FASTCALL,
     "register(fd, events, key=None)\n--\n\nWatch fd for events (1 read, 2 write, 3 both); "
     "select() reports key for it."},
    {"modify", (PyCFunction)(void (*)(void))EvSelectorCore_modify, METH_FASTCALL,
     "modify(fd, events, key=None)\n--\n\nChange the events watched on a registered fd "
     "(and its key, when given)."},
    {"unregister", EvSelectorCore_unregister, METH_O,
     "unregister(fd)\n--\n\nStop watching fd (call before closing it)."},
    {"poll", (PyCFunction)(void (*)(void))EvSelectorCore_poll, METH_FASTCALL,
     "poll(timeout=None)\n--\n\nRun one loop iteration (None: until any watcher of the loop "
     "fires; 0: without waiting; t: at most t seconds) and return the (fd, events) that "
     "became ready."},
    {"select", (PyCFunction)(void (*)(void))EvSelectorCore_select, METH_FASTCALL,
     "select(timeout=None)\n--\n\nLike poll(), but return (key, events) with the key given "
     "to register() or modify(), leaving out fds registered without one."},
    {"wakeup", EvSelectorCore_wakeup, METH_NOARGS,
     "wakeup()\n--\n\nMake the poll() under way, or the next one, return; callable from "
     "any thread."},
    {"close", EvSelectorCore_close, METH_NOARGS,
     "close()\n--\n\nStop every watcher (and free the loop if it is this object's own)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef EvSelectorCore_getset[] = {
    {"closed", EvSelectorCore_get_closed, NULL, "True after close().", NULL},
    {"owns_loop", EvSelectorCore_get_owns_loop, NULL,
     "True when the libev loop was created by (and dies with) this object.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot EvSelectorCore_slots[] = {
    {Py_tp_doc, "EvSelectorCore()\n--\n\nReadiness of file descriptors on a libev loop, for "
                "pyserver.evselector.EvSelector. Built without arguments it owns a new loop; "
                "the server builds one over its worker's loop."},
    {Py_tp_new, EvSelectorCore_new},
    {Py_tp_dealloc, EvSelectorCore_dealloc},
    {Py_tp_traverse, EvSelectorCore_traverse},
    {Py_tp_clear, EvSelectorCore_clear},
    {Py_tp_methods, EvSelectorCore_methods},
    {Py_tp_getset, EvSelectorCore_getset},
    {Py_sq_length, EvSelectorCore_len},
    {0, NULL},
};

static PyType_Spec EvSelectorCore_spec = {
    .name = "pyserver._core.EvSelectorCore",
    .basicsize = sizeof(evsel_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = EvSelectorCore_slots,
};

static PyType_Spec EvLoopHelpers_spec;

int ps_evselector_init_type(PyObject *module, ps_module_state_t *st)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &EvSelectorCore_spec, NULL);
    if (type == NULL)
        return -1;
    st->evselector_type = (PyTypeObject *)type;
    if (PyModule_AddObjectRef(module, "EvSelectorCore", type) < 0)
        return -1;
    PyObject *helpers = PyType_FromModuleAndSpec(module, &EvLoopHelpers_spec, NULL);
    int rc = helpers ? PyModule_AddObjectRef(module, "EvLoopHelpers", helpers) : -1;
    Py_XDECREF(helpers);
    return rc;
}

PyObject *ps_evselector_new(ps_module_state_t *st, struct ev_loop *loop)
{
    evsel_object *self = alloc_core(st->evselector_type);
    if (self == NULL)
        return NULL;
    self->loop = loop;
    start_wakeup(self);
    return (PyObject *)self;
}

void ps_evselector_close(PyObject *core)
{
    evsel_object *self = (evsel_object *)core;
    if (!self->polling)
        close_core(self);
}

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
enum {
    N_DEBUG,
    N_CLOSED,
    N_READY,
    N_SCHEDULED,
    N_STOPPING,
    N_CANCELLED_COUNT,
    N_CLOCK_RESOLUTION,
    N_SELECTOR,
    N_SELECT,
    N_PROCESS_EVENTS,
    N_ADD_CALLBACK,
    N_TIME,
    N_POPLEFT,
    N_APPEND,
    N_RUN,
    N_CANCELLED,
    N_WHEN,
    N_TIMER_SCHEDULED,
    N_REMOVE_READER,
    N_REMOVE_WRITER,
    N_WRITE_TO_SELF,
    N_CONTEXT,
    N_COUNT
};

static const char *const helper_names[N_COUNT] = {
    "_debug",
    "_closed",
    "_ready",
    "_scheduled",
    "_stopping",
    "_timer_cancelled_count",
    "_clock_resolution",
    "_selector",
    "select",
    "_process_events",
    "_add_callback",
    "time",
    "popleft",
    "append",
    "_run",
    "_cancelled",
    "_when",
    "_scheduled",
    "_remove_reader",
    "_remove_writer",
    "_write_to_self",
    "context",
};

/* The Handle slots read and written directly (byte offsets into a Handle). */
enum { H_CALLBACK, H_ARGS, H_CANCELLED, H_LOOP, H_SOURCE_TB, H_REPR, H_CONTEXT, H_COUNT };
static const char *const handle_slot_names[H_COUNT] = {
    "_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "_context",
};
enum { T_WHEN, T_SCHEDULED, T_COUNT };
static const char *const timer_slot_names[T_COUNT] = {"_when", "_scheduled"};

typedef struct {
    PyObject ob_base;
    PyTypeObject *handle_type; /* asyncio.events.Handle */
    PyTypeObject *timer_type;  /* asyncio.events.TimerHandle */
    Py_ssize_t hoff[H_COUNT];
    Py_ssize_t toff[T_COUNT];
    PyObject *py_run_once; /* BaseEventLoop's, for debug mode */
    PyObject *py_call_soon;
    PyObject *py_call_soon_threadsafe;
    PyObject *base_time;           /* BaseEventLoop.time */
    PyObject *base_process_events; /* BaseSelectorEventLoop._process_events */
    PyObject *base_add_callback;   /* BaseEventLoop._add_callback */
    PyObject *report;              /* report(handle, exc): Handle._run's except clause */
    PyObject *heappop;
    PyObject *heapify;
    PyObject *max_wait; /* asyncio's MAXIMUM_SELECT_TIMEOUT, 24 hours */
    PyObject *n[N_COUNT];
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
    PyObject *v = is_asyncio_handle(self, h) ? slot_get(h, self->hoff[H_CANCELLED]) : NULL;
    if (v == Py_True || v == Py_False)
        return v == Py_True;
    v = PyObject_GetAttr(h, self->n[N_CANCELLED]);
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
    PyObject *m = PyObject_GetAttr(loop, self->n[N_TIME]);
    if (m == NULL)
        return -1;
    if (PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == self->base_time) {
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
        slot_set(timer, self->toff[T_SCHEDULED], Py_False);
        return 0;
    }
    return PyObject_SetAttr(timer, self->n[N_TIMER_SCHEDULED], Py_False);
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
        PyObject *count = PyObject_GetAttr(loop, self->n[N_CANCELLED_COUNT]);
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
                PyObject_SetAttr(loop, self->n[N_SCHEDULED], kept) < 0 ||
                PyObject_SetAttr(loop, self->n[N_CANCELLED_COUNT], zero) < 0) {
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
        PyObject *count = PyObject_GetAttr(loop, self->n[N_CANCELLED_COUNT]);
        PyObject *one = PyLong_FromLong(1);
        PyObject *less = count && one ? PyNumber_Subtract(count, one) : NULL;
        Py_XDECREF(count);
        Py_XDECREF(one);
        int rc = less ? PyObject_SetAttr(loop, self->n[N_CANCELLED_COUNT], less) : -1;
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
    int stopping = nready > 0 ? 1 : attr_true(loop, self->n[N_STOPPING]);
    if (stopping < 0)
        return NULL;
    if (stopping)
        return PyLong_FromLong(0);
    if (PyList_GET_SIZE(heap) == 0)
        Py_RETURN_NONE;
    double when, now;
    PyObject *first = Py_NewRef(PyList_GET_ITEM(heap, 0));
    int rc = attr_double(first, self->n[N_WHEN], &when);
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
                                              loop, self->n[k ? N_REMOVE_WRITER : N_REMOVE_READER],
                                              PyTuple_GET_ITEM(key, 0))
                                      : PyObject_CallMethodOneArg(ready, self->n[N_APPEND], h);
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
        PyObject *r = PyObject_CallMethodNoArgs(h, self->n[N_RUN]);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    /* Copied out first: the callback may cancel its own handle. */
    PyObject *ctx = slot_get(h, self->hoff[H_CONTEXT]);
    PyObject *cb = slot_get(h, self->hoff[H_CALLBACK]);
    PyObject *args = slot_get(h, self->hoff[H_ARGS]);
    if (ctx == NULL || cb == NULL || args == NULL || !PyContext_CheckExact(ctx) ||
        !PyTuple_Check(args)) {
        PyObject *r = PyObject_CallMethodNoArgs(h, self->n[N_RUN]);
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
        attr_double(loop, self->n[N_CLOCK_RESOLUTION], &resolution) < 0)
        return -1;
    double end = now + resolution;
    while (PyList_GET_SIZE(heap) > 0) {
        double when;
        PyObject *first = Py_NewRef(PyList_GET_ITEM(heap, 0));
        int rc = attr_double(first, self->n[N_WHEN], &when);
        Py_DECREF(first);
        if (rc < 0)
            return -1;
        if (when >= end)
            break;
        PyObject *h = pop_timer(self, heap);
        PyObject *r = h ? PyObject_CallMethodOneArg(ready, self->n[N_APPEND], h) : NULL;
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
    if ((selector = PyObject_GetAttr(loop, self->n[N_SELECTOR])) == NULL)
        goto error;
    events = PyObject_CallMethodOneArg(selector, self->n[N_SELECT], timeout);
    if (events == NULL)
        goto error;
    int own = PyList_CheckExact(events)
                  ? is_method_of(loop, self->n[N_PROCESS_EVENTS], self->base_process_events)
                  : 0;
    if (own > 0)
        own = is_method_of(loop, self->n[N_ADD_CALLBACK], self->base_add_callback);
    if (own < 0)
        goto error;
    if (own) {
        rc = process_events(self, loop, ready, events);
    } else {
        PyObject *r = PyObject_CallMethodOneArg(loop, self->n[N_PROCESS_EVENTS], events);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
error:
    Py_XDECREF(timeout);
    Py_XDECREF(selector);
    Py_XDECREF(events);
    return rc;
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
    int debug = attr_true(loop, self->n[N_DEBUG]);
    if (debug < 0)
        return NULL;
    if (debug)
        return PyObject_CallOneArg(self->py_run_once, loop);
    if ((heap = PyObject_GetAttr(loop, self->n[N_SCHEDULED])) == NULL ||
        (ready = PyObject_GetAttr(loop, self->n[N_READY])) == NULL)
        goto error;
    if (!PyList_Check(heap)) {
        result = PyObject_CallOneArg(self->py_run_once, loop);
        goto error;
    }
    if (drop_cancelled_timers(self, loop, &heap) < 0 || poll_events(self, loop, ready, heap) < 0 ||
        queue_due_timers(self, loop, ready, heap) < 0)
        goto error;
    Py_ssize_t ntodo = PyObject_Length(ready);
    if (ntodo < 0)
        goto error;
    for (Py_ssize_t i = 0; i < ntodo; i++) {
        PyObject *h = PyObject_CallMethodNoArgs(ready, self->n[N_POPLEFT]);
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
    slot_set(h, self->hoff[H_CONTEXT], ctx);
    slot_set(h, self->hoff[H_LOOP], loop);
    slot_set(h, self->hoff[H_CALLBACK], callback);
    slot_set(h, self->hoff[H_ARGS], args);
    slot_set(h, self->hoff[H_CANCELLED], Py_False);
    slot_set(h, self->hoff[H_REPR], Py_None);
    slot_set(h, self->hoff[H_SOURCE_TB], Py_None);
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
    const char *name = threadsafe ? "call_soon_threadsafe" : "call_soon";
    PyObject *context = NULL, *cbargs = NULL, *ready = NULL, *h = NULL, *result = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_Compare(kw, self->n[N_CONTEXT]) != 0) {
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
    int closed = attr_true(loop, self->n[N_CLOSED]);
    int debug = closed ? 0 : attr_true(loop, self->n[N_DEBUG]);
    if (closed < 0 || debug < 0)
        return NULL;
    if (closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    if (debug)
        return PyObject_Vectorcall(threadsafe ? self->py_call_soon_threadsafe : self->py_call_soon,
                                   args, (size_t)nargs, kwnames);
    if (!threadsafe && take_step(self, loop, callback, nargs, context))
        Py_RETURN_NONE; /* the caller, Task(), drops what call_soon() returns */
    if ((cbargs = PyTuple_New(nargs - 2)) == NULL)
        goto error;
    for (Py_ssize_t i = 2; i < nargs; i++)
        PyTuple_SET_ITEM(cbargs, i - 2, Py_NewRef(args[i]));
    if ((h = new_handle(self, callback, cbargs, loop, context)) == NULL ||
        (ready = PyObject_GetAttr(loop, self->n[N_READY])) == NULL)
        goto error;
    PyObject *r = PyObject_CallMethodOneArg(ready, self->n[N_APPEND], h);
    if (r == NULL)
        goto error;
    Py_DECREF(r);
    if (threadsafe) {
        if ((r = PyObject_CallMethodNoArgs(loop, self->n[N_WRITE_TO_SELF])) == NULL)
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
    return PyObject_GetAttr(loop, ((helpers_object *)op)->n[N_DEBUG]);
}

/* method(name): the named method wrapped to bind like a function defined in
 * a class body. New reference or NULL. */
static PyObject *EvLoopHelpers_method(PyObject *op, PyObject *name)
{
    PyObject *m = PyObject_GetAttr(op, name);
    if (m == NULL)
        return NULL;
    PyObject *wrapped = PyInstanceMethod_New(m);
    Py_DECREF(m);
    return wrapped;
}

/* Reads attribute name of obj into *out (new reference). Returns 0 or -1. */
static int get_into(PyObject *obj, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(obj, name);
    return *out ? 0 : -1;
}

/* 1 when kwds holds nothing, else 0 with a TypeError. */
static int no_keywords(PyObject *kwds)
{
    if (kwds == NULL || PyDict_GET_SIZE(kwds) == 0)
        return 1;
    PyErr_SetString(PyExc_TypeError, "EvLoopHelpers() takes no keyword arguments");
    return 0;
}

/* EvLoopHelpers(Handle, TimerHandle, BaseEventLoop, BaseSelectorEventLoop,
 * report): asyncio's classes, and report(handle, exc) for an exception
 * raised by a handle's callback. */
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
    for (int i = 0; i < H_COUNT; i++)
        if (slot_offset(self->handle_type, handle_slot_names[i], &self->hoff[i]) < 0)
            goto error;
    for (int i = 0; i < T_COUNT; i++)
        if (slot_offset(self->timer_type, timer_slot_names[i], &self->toff[i]) < 0)
            goto error;
    for (int i = 0; i < N_COUNT; i++)
        if ((self->n[i] = PyUnicode_InternFromString(helper_names[i])) == NULL)
            goto error;
    if ((heapq = PyImport_ImportModule("heapq")) == NULL ||
        get_into(heapq, "heappop", &self->heappop) || get_into(heapq, "heapify", &self->heapify) ||
        get_into(base, "_run_once", &self->py_run_once) ||
        get_into(base, "call_soon", &self->py_call_soon) ||
        get_into(base, "call_soon_threadsafe", &self->py_call_soon_threadsafe) ||
        get_into(base, "time", &self->base_time) ||
        get_into(base, "_add_callback", &self->base_add_callback) ||
        get_into(selbase, "_process_events", &self->base_process_events) ||
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
    Py_VISIT(self->py_run_once);
    Py_VISIT(self->py_call_soon);
    Py_VISIT(self->py_call_soon_threadsafe);
    Py_VISIT(self->base_time);
    Py_VISIT(self->base_process_events);
    Py_VISIT(self->base_add_callback);
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
    Py_CLEAR(self->py_run_once);
    Py_CLEAR(self->py_call_soon);
    Py_CLEAR(self->py_call_soon_threadsafe);
    Py_CLEAR(self->base_time);
    Py_CLEAR(self->base_process_events);
    Py_CLEAR(self->base_add_callback);
    Py_CLEAR(self->report);
    Py_CLEAR(self->heappop);
    Py_CLEAR(self->heapify);
    Py_CLEAR(self->max_wait);
    for (int i = 0; i < N_COUNT; i++)
        Py_CLEAR(self->n[i]);
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

static PyType_Slot EvLoopHelpers_slots[] = {
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
