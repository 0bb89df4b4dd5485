/* The WSGI thread pool (--threads N): N Python threads started in the
 * worker, each running one request at a time handed over by the loop.
 *
 * Handoff: a bounded ring of jobs (RING_MIN, or one per thread if more)
 * under one mutex and condition variable, filled by the loop thread (a
 * push never waits; the layer keeps the requests that find it full). A
 * thread that finishes a job takes the next queued one without sleeping
 * or letting go of the GIL. The pushes of one loop iteration wake one
 * idle thread, before the loop sleeps, when no thread is busy; a job
 * queued while one is busy is left to it for NUDGE_DELAY before an idle
 * thread is woken for it. The threads tell the loop of their results, and
 * of a thread going idle after a push failed, through one ev_async. A
 * pool thread holds the GIL while it runs a job and releases it to wait
 * for the next one; the loop thread takes it only to run Python
 * (ps_py_loop_gil), never for a request's hand-off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "bridge.h"

struct ps_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;   /* a job was queued, or the pool stops */
    pthread_cond_t exited; /* a thread left its loop */
    void **ring;           /* cap slots */
    uint32_t cap;
    uint32_t head, count;
    double *queued;   /* when each ring slot's job was pushed (ev_now) */
    uint32_t idle;    /* threads waiting for a job (not counting queued jobs) */
    uint32_t busy;    /* threads running a job */
    uint32_t running; /* threads not exited yet */
    unsigned stop : 1;
    unsigned starved : 1; /* a push failed: tell the loop when a thread is idle */
    struct ev_loop *loop;
    ev_async async;
    ev_timer nudge;    /* wakes an idle thread for a job no busy one took in time */
    ev_prepare batch;  /* before the loop sleeps: wakes a thread for the pushes */
    unsigned wake : 1; /* loop: a push wants a thread woken (batch) */
    ps_pool_run_fn run;
    ps_pool_run_fn release;
    ps_pool_notify_fn notify;
    void *data;
    uint32_t nthreads;
    ps_pool_thread_t *threads;
};

/* How long a job queued while a thread is busy waits for that thread
 * before an idle one is woken for it: a busy thread that is running Python
 * takes it sooner, without a wake-up or a fight over the GIL; one that
 * waits (a query, a sleep) leaves it to the idle one. */
#define NUDGE_DELAY 0.001

/* Jobs the ring holds at least: under load the threads find the next one
 * there rather than wait for the loop to move it from its own list. */
#define RING_MIN 64

/* Loop thread: wakes idle threads for the jobs queued too long. */
static void on_nudge(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(revents);
    ps_pool_t *p = ps_container_of(t, ps_pool_t, nudge);
    double now = ev_now(loop);
    pthread_mutex_lock(&p->mu);
    uint32_t wake = 0;
    for (uint32_t i = 0; i < p->count && wake < p->idle; i++)
        wake += now - p->queued[(p->head + i) % p->cap] >= NUDGE_DELAY * 0.9;
    int again = p->count > wake && p->idle > wake;
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < wake; i++)
        pthread_cond_signal(&p->work);
    if (!again) {
        ev_ref(loop);
        ev_timer_stop(loop, t);
    }
}

/* Loop thread, before it polls: one wake-up for the requests this
 * iteration pushed while no thread was busy (the woken thread takes them
 * one after the other; the nudge wakes more if they wait). */
static void on_batch(struct ev_loop *loop, ev_prepare *w, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_pool_t *p = ps_container_of(w, ps_pool_t, batch);
    if (!p->wake)
        return;
    p->wake = 0;
    pthread_mutex_lock(&p->mu);
    int wake = p->count > 0 && p->idle > 0;
    pthread_mutex_unlock(&p->mu);
    if (wake) /* after the unlock: the woken thread does not wait for the mutex */
        pthread_cond_signal(&p->work);
}

static void on_async(struct ev_loop *loop, ev_async *a, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_pool_t *p = ps_container_of(a, ps_pool_t, async);
    p->notify(p->data);
}

/* Names the calling thread for threading and logging. Never raises. */
static void name_thread(const char *name)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *t = threading ? PyObject_CallMethod(threading, "current_thread", NULL) : NULL;
    PyObject *s = PyUnicode_FromString(name);
    if (t == NULL || s == NULL || PyObject_SetAttrString(t, "name", s) < 0)
        PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(threading);
}

/* Takes a queued job under p->mu, or NULL. */
static void *take_job(ps_pool_t *p)
{
    if (p->count == 0)
        return NULL;
    void *job = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->count--;
    return job;
}

/* Takes the next job: a queued one at once, with the GIL kept (under load
 * a thread goes from job to job without sleeping), else it waits for one
 * without the GIL. had: the thread ran one before. Returns NULL when the
 * pool stops. */
static void *next_job(ps_pool_t *p, int had)
{
    pthread_mutex_lock(&p->mu);
    void *job = take_job(p);
    if (had && job == NULL)
        p->busy--;
    else if (!had && job != NULL)
        p->busy++;
    pthread_mutex_unlock(&p->mu);
    if (job != NULL)
        return job;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&p->mu);
    p->idle++;
    if (p->starved && !p->stop) {
        /* Sent after idle++ and under the lock, so the loop's retry finds it. */
        p->starved = 0;
        ev_async_send(p->loop, &p->async);
    }
    while (p->count == 0 && !p->stop)
        pthread_cond_wait(&p->work, &p->mu);
    job = take_job(p);
    p->busy += job != NULL;
    p->idle--;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS return job;
}

static void *thread_main(void *arg)
{
    ps_pool_thread_t *t = arg;
    ps_pool_t *p = t->pool;
    pthread_setname_np(pthread_self(), t->name);
    PyGILState_STATE g = PyGILState_Ensure();
    t->ident = PyThread_get_thread_ident();
    name_thread(t->name);
    void *job;
    int had = 0;
    while ((job = next_job(p, had)) != NULL) {
        had = 1;
        t->job = job;
        t->started = ev_time();
        p->run(job, p->data);
        t->job = NULL; /* before release: the watchdog must not see a freed job */
        p->release(job, p->data);
        if (PyErr_Occurred())
            PyErr_WriteUnraisable(NULL);
    }
    PyGILState_Release(g);
    pthread_mutex_lock(&p->mu);
    p->running--;
    pthread_cond_broadcast(&p->exited);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ps_pool_t *ps_pool_new(struct ev_loop *loop, uint32_t n, ps_pool_run_fn run, ps_pool_run_fn release,
                       ps_pool_notify_fn notify, void *data)
{
    ps_pool_t *p = PyMem_RawCalloc(1, sizeof(*p));
    if (p == NULL)
        return (ps_pool_t *)PyErr_NoMemory();
    p->cap = PS_MAX(n, RING_MIN);
    p->ring = PyMem_RawCalloc(p->cap, sizeof(*p->ring));
    p->queued = PyMem_RawCalloc(p->cap, sizeof(*p->queued));
    p->threads = PyMem_RawCalloc(n, sizeof(*p->threads));
    if (p->ring == NULL || p->queued == NULL || p->threads == NULL) {
        PyMem_RawFree(p->ring);
        PyMem_RawFree(p->queued);
        PyMem_RawFree(p->threads);
        PyMem_RawFree(p);
        return (ps_pool_t *)PyErr_NoMemory();
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->exited, NULL);
    p->loop = loop;
    p->run = run;
    p->release = release;
    p->notify = notify;
    p->data = data;
    ev_async_init(&p->async, on_async);
    ev_timer_init(&p->nudge, on_nudge, NUDGE_DELAY, NUDGE_DELAY);
    ev_prepare_init(&p->batch, on_batch);
    ev_prepare_start(loop, &p->batch);
    ev_unref(loop);
    ev_async_start(loop, &p->async);
    ev_unref(loop); /* the watcher alone does not keep the loop alive */
    for (uint32_t i = 0; i < n; i++) {
        ps_pool_thread_t *t = &p->threads[i];
        t->pool = p;
        snprintf(t->name, sizeof(t->name), "pyserver-thread-%u", i + 1);
        int rc = pthread_create(&t->tid, NULL, thread_main, t);
        if (rc != 0) {
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            ps_pool_free(p, 0);
            return NULL;
        }
        p->nthreads = i + 1;
        pthread_mutex_lock(&p->mu);
        p->running++;
        pthread_mutex_unlock(&p->mu);
    }
    return p;
}

int ps_pool_push(ps_pool_t *p, void *job)
{
    int rc = -EAGAIN;
    pthread_mutex_lock(&p->mu);
    int nudge = 0;
    if (!p->stop && p->count < p->cap) {
        /* Queued even when every thread is busy: the first to finish takes
         * it without sleeping. An idle thread is woken at once when no
         * thread is busy, else only if the job is still there after
         * NUDGE_DELAY; the first of a loop iteration's pushes wakes one
         * thread before the loop sleeps (on_batch). */
        uint32_t slot = (p->head + p->count) % p->cap;
        p->ring[slot] = job;
        p->queued[slot] = ev_now(p->loop);
        p->count++;
        if (p->idle >= p->count && p->busy == 0 && !p->wake)
            p->wake = 1; /* on_batch */
        else if (p->idle > 0)
            nudge = 1;
        rc = 0;
    } else {
        p->starved = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (nudge && !ev_is_active(&p->nudge)) {
        ev_timer_start(p->loop, &p->nudge);
        ev_unref(p->loop); /* the timer alone does not keep the loop alive */
    }
    return rc;
}

void ps_pool_wake(ps_pool_t *p)
{
    /* Under the lock: once ps_pool_free has set stop, the loop may be gone. */
    pthread_mutex_lock(&p->mu);
    if (!p->stop)
        ev_async_send(p->loop, &p->async);
    pthread_mutex_unlock(&p->mu);
}

ps_pool_thread_t *ps_pool_threads(ps_pool_t *p, uint32_t *n)
{
    *n = p->nthreads;
    return p->threads;
}

/* Waits up to `wait` seconds (without the GIL) for the threads to leave
 * their loops. Returns 1 when they all did. */
static int wait_exited(ps_pool_t *p, double wait)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = (double)until.tv_sec + until.tv_nsec / 1e9 + wait;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    int all;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&p->mu);
    while (p->running > 0 && pthread_cond_timedwait(&p->exited, &p->mu, &until) != ETIMEDOUT)
        ;
    all = p->running == 0;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS return all;
}

int ps_pool_free(ps_pool_t *p, double wait)
{
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    ev_ref(p->loop);
    ev_async_stop(p->loop, &p->async);
    if (ev_is_active(&p->nudge)) {
        ev_ref(p->loop);
        ev_timer_stop(p->loop, &p->nudge);
    }
    ev_ref(p->loop);
    ev_prepare_stop(p->loop, &p->batch);
    if (!wait_exited(p, wait)) {
        /* A thread is still inside the application (the graceful timeout
         * passed): the process is ending, so it is left running, and the
         * pool with it. */
        for (uint32_t i = 0; i < p->nthreads; i++)
            pthread_detach(p->threads[i].tid);
        return -EBUSY;
    }
    for (uint32_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i].tid, NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->exited);
    pthread_mutex_destroy(&p->mu);
    PyMem_RawFree(p->ring);
    PyMem_RawFree(p->queued);
    PyMem_RawFree(p->threads);
    PyMem_RawFree(p);
    return 0;
}
