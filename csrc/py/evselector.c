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

int ps_evselector_init_type(PyObject *module, ps_module_state_t *st)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &EvSelectorCore_spec, NULL);
    if (type == NULL)
        return -1;
    st->evselector_type = (PyTypeObject *)type;
    return PyModule_AddObjectRef(module, "EvSelectorCore", type);
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
