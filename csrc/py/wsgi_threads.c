/* The WSGI layer's application threads (--threads N > 1).
 *
 * The loop thread parses the request and buffers its body; a pool thread
 * (pool.c) builds the environ, calls the application, iterates the
 * response into C chunks (the head with the first bytes, or a whole list
 * response, in one) and calls close(). The loop writes the chunks without
 * the GIL: with threads it takes the GIL only when a callback runs Python
 * (ps_py_loop_gil), so its network work goes on while an application
 * thread runs and a request costs it no GIL switch.
 *
 * A job (wsgi_job_t) is what the two share, under ctx->mu: the chunks,
 * the backpressure counts and the flags. The exchange is the loop's; the
 * thread reads it (environ, wsgi.input, the exception log) with the GIL,
 * until it posts its last chunk. The loop detaches a request from its
 * thread with the GIL while the thread may still read the exchange (the
 * client went away, a write failed), so a thread never sees one the loop
 * is changing or freeing; after the thread's last post it does without.
 * The thread waits without the GIL, on ctx->moved, while its output is
 * over the high-water mark or the socket is full. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "wsgi.h"

/* Bytes a thread may have posted and not yet written before it waits. */
#define POSTED_HIGH (64 * 1024)

/* Output a thread posted: body bytes, after the response head in the
 * first one (the head's strings are copied after the headers array). */
typedef struct wsgi_chunk {
    struct wsgi_chunk *next;
    char *data; /* len body bytes */
    size_t len;
    ps_slice_t status; /* the head: status.base != NULL */
    ps_header_t *h;
    size_t nh;
    int64_t given_length; /* with the head: the application's Content-Length, or -1 */
} wsgi_chunk_t;

/* A job's own room for its first chunk: a small response's head and body
 * need no allocation. */
#define JOB_INLINE 1024

/* Finished jobs the pool keeps for reuse at most. */
#define JOB_CACHE 256

typedef struct wsgi_job {
    ps_wsgi_t *ctx;
    ps_exchange_t *x;            /* the loop's: NULL once it is done with the request */
    RequestObject *req;          /* the thread's while it runs it (GIL) */
    ps_proxy_result_t fwd;       /* what a trusted proxy forwarded (loop, on_request) */
    PyObject *log_headers;       /* the response headers, for the access line (GIL) */
    struct wsgi_job *next_ready; /* in ctx->ready (under ctx->mu) */
    struct wsgi_job *next_wait;  /* in ctx->waiting (loop) */
    int sendfile_fd;             /* loop: >= 0 while a file goes out (on_writable ends) */
    int64_t given_length;        /* loop: the head's Content-Length (0 or -1: none to check) */
    unsigned head_sent : 1;      /* loop: the head is out */
    unsigned seen_end : 1; /* loop: deliver saw t_end or t_failed (the thread reads x no more) */
    /* Under ctx->mu. */
    wsgi_chunk_t *out, *out_tail; /* posted, not written yet */
    size_t posted;                /* bytes in out */
    int sf_fd;                    /* with t_end: the file_wrapper's file to send, or -1 */
    int64_t sf_off;
    uint64_t sf_len;
    int refs; /* atomic: the loop's, the thread's (or the waiting list's), ctx->ready's */
    unsigned scheduled : 1; /* in ctx->ready */
    unsigned blocked : 1;   /* the connection's output waits for the socket */
    unsigned loop_done : 1; /* the loop is done with the request: stop producing */
    unsigned t_end : 1;     /* the thread posted its last chunk: the body is complete */
    unsigned t_failed : 1;  /* ... or the application failed (logged): 500 or close */
    /* The thread's (set in t_chunk without the lock, cleared on reuse): a
     * byte of its own, not a bit beside the ones above, which the loop
     * changes under ctx->mu meanwhile (a bit field shares their word). */
    unsigned char inline_used; /* inline holds a chunk */
    struct wsgi_job *next_free;
    union {
        max_align_t align;
        char bytes[JOB_INLINE];
    } inline_chunk; /* last: a reused job is cleared up to here */
} wsgi_job_t;

/* Any thread: frees chunk c of job (the inline one stays with the job). */
static void chunk_free(wsgi_job_t *job, wsgi_chunk_t *c)
{
    if ((char *)c != job->inline_chunk.bytes)
        PyMem_RawFree(c);
}

/* Loop thread: a cleared job, reused or new, or NULL. */
static wsgi_job_t *job_new(ps_wsgi_t *ctx)
{
    wsgi_job_t *job = ctx->free_local;
    if (job == NULL)
        job = __atomic_exchange_n(&ctx->free_shared, NULL, __ATOMIC_ACQUIRE);
    if (job == NULL) {
        job = PyMem_RawMalloc(sizeof(*job));
    } else {
        ctx->free_local = job->next_free;
        __atomic_fetch_sub(&ctx->free_count, 1, __ATOMIC_RELAXED);
    }
    if (job != NULL)
        memset(job, 0, offsetof(wsgi_job_t, inline_chunk));
    return job;
}

/* Any thread: job's last reference is gone; keeps it for reuse or frees it. */
static void job_free(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    for (wsgi_chunk_t *c = job->out, *next; c != NULL; c = next) {
        next = c->next;
        chunk_free(job, c);
    }
    if (__atomic_add_fetch(&ctx->free_count, 1, __ATOMIC_RELAXED) <= JOB_CACHE) {
        /* A push only: the loop takes the whole list, so no ABA. */
        wsgi_job_t *head = __atomic_load_n(&ctx->free_shared, __ATOMIC_RELAXED);
        do
            job->next_free = head;
        while (!__atomic_compare_exchange_n(&ctx->free_shared, &head, job, 1, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED));
        return;
    }
    __atomic_fetch_sub(&ctx->free_count, 1, __ATOMIC_RELAXED);
    PyMem_RawFree(job);
}

static void log_app_exception(ps_wsgi_t *ctx, ps_exchange_t *x)
{
    ps_request_t *r = x->req;
    ps_log_exception(ctx->error_logger, "Exception in WSGI application (%.*s %.*s)",
                     (int)r->method.len, r->method.base, (int)PS_MIN(r->target.len, 200),
                     r->target.base);
}

/* Any thread: drops a reference to job (the last frees it). */
static void job_unref(wsgi_job_t *job)
{
    if (__atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) == 0)
        job_free(job);
}

/* Loop thread: the request is over for the connection (answered or gone).
 * Writes its access line with `status`, detaches it from x and drops the
 * loop's reference; the thread stops producing. Idempotent. */
static void t_detach(wsgi_job_t *job, int status)
{
    ps_exchange_t *x = job->x;
    ps_wsgi_t *ctx = job->ctx;
    if (x == NULL)
        return;
    int early = 0; /* its thread may still read x */
    if (!job->seen_end) {
        pthread_mutex_lock(&ctx->mu);
        early = !job->t_end && !job->t_failed;
        pthread_mutex_unlock(&ctx->mu);
    }
    if (early || ctx->access_log)
        ps_py_loop_gil();
    if (early && job->req != NULL) {
        ((InputObject *)job->req->input)->x = NULL;
        job->req->x = NULL;
    }
    job->x = NULL;
    x->app_data = NULL;
    /* With the GIL when early: the thread, stopped, sets no log_headers. */
    if (ctx->access_log && status)
        ps_log_access(ctx->access_log, x, job->fwd.client, status, job->log_headers);
    if (job->log_headers)
        Py_CLEAR(job->log_headers);
    pthread_mutex_lock(&ctx->mu);
    job->loop_done = 1;
    if (ctx->waiters)
        pthread_cond_broadcast(&ctx->moved);
    pthread_mutex_unlock(&ctx->mu);
    job_unref(job);
}

/* Loop thread: the body is complete; ends the response. */
static void t_finish(wsgi_job_t *job)
{
    ps_exchange_t *x = job->x;
    ps_wsgi_check_length(job->ctx, x, job->given_length);
    t_detach(job, x->status);
    ps_exchange_end(x); /* may move on to the next request at once */
}

/* Loop thread: the file_wrapper's file goes out with sendfile(2). */
static void t_sendfile(wsgi_job_t *job, int fd, int64_t off, uint64_t len)
{
    ps_exchange_t *x = job->x;
    int rc = map_write(ps_exchange_sendfile(x, fd, off, len));
    if (rc == SEND_GONE) {
        t_detach(job, x->status);
        ps_exchange_abort(x);
    } else if (rc == PS_WRITE_PENDING) {
        job->sendfile_fd = fd; /* on_writable finishes */
    } else {
        t_finish(job);
    }
}

/* Loop thread: the application's head was refused (nothing was sent). */
static void t_bad_head(wsgi_job_t *job, const wsgi_chunk_t *c)
{
    ps_exchange_t *x = job->x;
    char msg[300];
    snprintf(msg, sizeof(msg), "invalid status or header in the response: %.*s (%zu headers)",
             (int)PS_MIN(c->status.len, 200), c->status.base, c->nh);
    ps_py_loop_gil();
    PyErr_SetString(PyExc_ValueError, msg);
    log_app_exception(job->ctx, x);
    t_detach(job, 500);
    ps_exchange_send_error(x, 500);
}

/* Loop thread: writes what the thread posted, then acts on its end or
 * failure. Returns with job possibly detached. Needs no GIL. */
static void deliver(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    ps_exchange_t *x = job->x;
    pthread_mutex_lock(&ctx->mu);
    wsgi_chunk_t *c = job->out;
    job->out = job->out_tail = NULL;
    int end = job->t_end, failed = job->t_failed, sf_fd = job->sf_fd;
    pthread_mutex_unlock(&ctx->mu);
    job->seen_end = end || failed;
    int rc = PS_WRITE_DONE, pending = 0;
    size_t written = 0;
    while (c != NULL) {
        wsgi_chunk_t *next = c->next;
        if (rc >= 0 && c->status.base != NULL) {
            /* A file_wrapper's file follows at once: the head leaves with it. */
            x->file_follows = next == NULL && end && !failed && sf_fd >= 0;
            job->given_length = c->given_length;
            rc = ps_exchange_start(x, c->status, c->h, c->nh, c->data, c->len);
            if (rc == -EINVAL) {
                for (wsgi_chunk_t *n; next != NULL; next = n) {
                    n = next->next;
                    chunk_free(job, next);
                }
                t_bad_head(job, c);
                chunk_free(job, c);
                return;
            }
            job->head_sent = rc >= 0;
        } else if (rc >= 0 && c->len) {
            rc = ps_exchange_write(x, c->data, c->len);
        }
        pending |= rc == PS_WRITE_PENDING;
        written += c->len;
        chunk_free(job, c);
        c = next;
    }
    if (rc >= 0 && !end && !failed) {
        /* Room for the thread (once it ended, or when the request ends
         * here, t_detach tells it). */
        pthread_mutex_lock(&ctx->mu);
        job->posted -= written;
        if (pending)
            job->blocked = 1;
        if (ctx->waiters)
            pthread_cond_broadcast(&ctx->moved);
        pthread_mutex_unlock(&ctx->mu);
    }
    if (rc < 0) {
        t_detach(job, x->status);
        ps_exchange_abort(x);
    } else if (failed) {
        t_detach(job, job->head_sent ? x->status : 500);
        if (job->head_sent)
            ps_exchange_abort(x);
        else
            ps_exchange_send_error(x, 500);
    } else if (end && sf_fd >= 0) {
        t_sendfile(job, sf_fd, job->sf_off, job->sf_len);
    } else if (end) {
        t_finish(job);
    }
}

/* Loop thread (the pool's notify): delivers the threads' results, then
 * hands waiting requests to the threads. Needs no GIL. A job scheduled
 * meanwhile finds ctx->ready empty and wakes the loop again (schedule). */
static void pool_notify(void *data)
{
    ps_wsgi_t *ctx = data;
    pthread_mutex_lock(&ctx->mu);
    wsgi_job_t *list = ctx->ready;
    ctx->ready = NULL;
    for (wsgi_job_t *j = list; j != NULL; j = j->next_ready)
        j->scheduled = 0;
    pthread_mutex_unlock(&ctx->mu);
    while (list) {
        wsgi_job_t *job = list;
        list = job->next_ready;
        if (job->x)
            deliver(job);
        job_unref(job);
    }
    while (ctx->waiting) {
        wsgi_job_t *job = ctx->waiting;
        if (job->x != NULL && ps_pool_push(ctx->pool, job) < 0)
            break;
        ctx->waiting = job->next_wait;
        job->next_wait = NULL;
        if (ctx->waiting == NULL)
            ctx->wait_tail = NULL;
        if (job->x == NULL)
            job_unref(job); /* gone before a thread took it */
    }
}

/* Pool thread, under ctx->mu: puts job in ctx->ready. Returns 1 when the
 * loop must be woken for it: the list was empty, so no wake-up for it is
 * on its way (the loop empties the list under the lock, then delivers). */
static int schedule_locked(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    if (job->scheduled)
        return 0;
    job->scheduled = 1;
    __atomic_add_fetch(&job->refs, 1, __ATOMIC_RELAXED); /* ctx->ready's */
    int first = ctx->ready == NULL;
    job->next_ready = ctx->ready;
    ctx->ready = job;
    return first;
}

/* Pool thread: the loop should look at job soon. */
static void schedule(wsgi_job_t *job)
{
    ps_wsgi_t *ctx = job->ctx;
    pthread_mutex_lock(&ctx->mu);
    int wake = schedule_locked(job);
    pthread_mutex_unlock(&ctx->mu);
    if (wake)
        ps_pool_wake(ctx->pool);
}

enum { WAIT_ROOM, WAIT_DRAINED, WAIT_DONE };

/* Pool thread: waits without the GIL until the request has room for more
 * output (WAIT_ROOM), has written everything (WAIT_DRAINED) or is over for
 * the loop (WAIT_DONE). Returns 0, or -1 when the loop is done with it
 * (the client is gone, or the write deadline passed). */
static int t_wait(RequestObject *req, int until)
{
    ps_wsgi_t *ctx = req->ctx;
    wsgi_job_t *job = req->job;
    int done, timed_out = 0;
    /* Most of the time there is room: no GIL switch for it. */
    pthread_mutex_lock(&ctx->mu);
    done = job->loop_done;
    int ready = done || (until == WAIT_ROOM && job->posted < POSTED_HIGH && !job->blocked) ||
                (until == WAIT_DRAINED && job->posted == 0 && !job->blocked);
    int unannounced = !job->scheduled && job->out != NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (ready)
        return done ? -1 : 0;
    if (unannounced)
        schedule(job); /* t_body's quiet posts: the loop must write them */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)ctx->write_wait + 1;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&ctx->mu);
    ctx->waiters++;
    for (;;) {
        done = job->loop_done;
        if (done || (until == WAIT_ROOM && job->posted < POSTED_HIGH && !job->blocked) ||
            (until == WAIT_DRAINED && job->posted == 0 && !job->blocked))
            break;
        if (pthread_cond_timedwait(&ctx->moved, &ctx->mu, &deadline) == ETIMEDOUT) {
            timed_out = 1;
            break;
        }
    }
    ctx->waiters--;
    pthread_mutex_unlock(&ctx->mu);
    Py_END_ALLOW_THREADS if (timed_out && !done && until != WAIT_DONE && req->x != NULL)
    {
        /* The client stopped reading: the loop closes. */
        req->x = NULL;
        ((InputObject *)req->input)->x = NULL;
        pthread_mutex_lock(&ctx->mu);
        job->t_failed = 1;
        pthread_mutex_unlock(&ctx->mu);
        schedule(job);
        return -1;
    }
    return done ? -1 : 0;
}

/* Pool thread: a chunk of room bytes, after the head from start_response's
 * status and headers when the head is not out yet (the response's
 * Content-Length added when req->known_length says it). Returns it, or
 * NULL with an exception. */
static wsgi_chunk_t *t_chunk(RequestObject *req, size_t room)
{
    head_view_t v;
    ps_slice_t status = {NULL, 0};
    ps_header_t *hs = NULL;
    size_t n = 0, strings = 0;
    wsgi_chunk_t *c = NULL;
    if (!req->headers_sent) {
        if (ps_wsgi_head_view(req, &v) < 0)
            return NULL;
        status = v.status;
        hs = v.h;
        n = v.n;
        strings = v.strings;
    }
    size_t size = sizeof(*c) + n * sizeof(ps_header_t) + strings + room;
    wsgi_job_t *job = req->job;
    if (!job->inline_used && size <= JOB_INLINE) {
        job->inline_used = 1;
        c = (wsgi_chunk_t *)job->inline_chunk.bytes;
    } else {
        c = PyMem_RawMalloc(size);
    }
    if (c == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    c->next = NULL;
    c->h = (ps_header_t *)(c + 1);
    c->nh = n;
    char *p = (char *)(c->h + n);
    c->status = (ps_slice_t){NULL, 0};
    if (status.base != NULL) {
        c->given_length = req->given_length;
        memcpy(p, status.base, status.len);
        c->status = (ps_slice_t){p, status.len};
        p += status.len;
        for (size_t i = 0; i < n; i++) {
            memcpy(p, hs[i].name.base, hs[i].name.len);
            c->h[i].name = (ps_slice_t){p, hs[i].name.len};
            p += hs[i].name.len;
            memcpy(p, hs[i].value.base, hs[i].value.len);
            c->h[i].value = (ps_slice_t){p, hs[i].value.len};
            p += hs[i].value.len;
        }
        req->headers_sent = 1;
        if (req->ctx->access_log && req->job->log_headers == NULL)
            req->job->log_headers = Py_NewRef(req->headers);
    }
    c->data = p;
    c->len = room;
done:
    if (hs != NULL)
        ps_wsgi_head_view_free(&v);
    return c;
}

/* Pool thread: hands a chunk to the loop, waking it when `wake` (else the
 * end of the body, or a wait for room, does). Returns 0, or -1 when the
 * request is over for the loop (the chunk is dropped). */
static int t_post(RequestObject *req, wsgi_chunk_t *c, int wake)
{
    wsgi_job_t *job = req->job;
    if (req->x == NULL) {
        chunk_free(job, c);
        return -1;
    }
    pthread_mutex_lock(&req->ctx->mu);
    if (job->out_tail)
        job->out_tail->next = c;
    else
        job->out = c;
    job->out_tail = c;
    job->posted += c->len;
    wake = wake && schedule_locked(job);
    pthread_mutex_unlock(&req->ctx->mu);
    if (wake)
        ps_pool_wake(req->ctx->pool);
    return 0;
}

/* Pool thread: the thread's last post (c may be NULL): the body is
 * complete, or the application failed. It reads the exchange no more. */
static void t_last(RequestObject *req, wsgi_chunk_t *c, int failed)
{
    wsgi_job_t *job = req->job;
    if (req->x == NULL) {
        if (c != NULL)
            chunk_free(job, c);
        return;
    }
    req->x = NULL;
    ((InputObject *)req->input)->x = NULL;
    pthread_mutex_lock(&req->ctx->mu);
    if (c != NULL) {
        if (job->out_tail)
            job->out_tail->next = c;
        else
            job->out = c;
        job->out_tail = c;
        job->posted += c->len;
    }
    if (failed)
        job->t_failed = 1;
    else
        job->t_end = 1;
    int wake = schedule_locked(job);
    pthread_mutex_unlock(&req->ctx->mu);
    if (wake)
        ps_pool_wake(req->ctx->pool);
}

/* Pool thread: the application raised (exception pending). */
static void t_fail(RequestObject *req)
{
    if (req->x == NULL) {
        PyErr_Clear(); /* the client left; the application only noticed */
        return;
    }
    log_app_exception(req->ctx, req->x);
    t_last(req, NULL, 1);
}

/* Pool thread: the head, if it is not out, and the end. */
static void t_end(RequestObject *req)
{
    wsgi_chunk_t *c = NULL;
    if (!req->headers_sent) {
        req->known_length = 0; /* nothing was produced */
        if ((c = t_chunk(req, 0)) == NULL) {
            t_fail(req);
            return;
        }
    }
    t_last(req, c, 0);
}

/* Pool thread: a file_wrapper over a regular file is sent by the loop
 * with sendfile(2); the thread waits until it is out (the wrapper's
 * close() closes the file). Returns 1 when handled, 0 to iterate it. */
static int t_try_sendfile(RequestObject *req)
{
    int fd;
    long long off;
    if (!ps_wsgi_sendfile_source(req, &fd, &off))
        return 0;
    if (req->x == NULL)
        return 1;
    wsgi_chunk_t *c = t_chunk(req, 0);
    if (c == NULL) {
        t_fail(req);
        return 1;
    }
    wsgi_job_t *job = req->job;
    pthread_mutex_lock(&req->ctx->mu);
    job->sf_fd = fd;
    job->sf_off = off;
    job->sf_len = (uint64_t)req->known_length;
    pthread_mutex_unlock(&req->ctx->mu);
    t_last(req, c, 0);
    t_wait(req, WAIT_DONE);
    return 1;
}

/* Pool thread: iterates the response into the loop's hands. */
static void t_body(RequestObject *req)
{
    PyObject *r = req->result;
    if (Py_IS_TYPE(r, req->ctx->st->file_wrapper_type) && t_try_sendfile(req))
        return;
    if (PyList_CheckExact(r) || PyTuple_CheckExact(r)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
        PyObject **items = PySequence_Fast_ITEMS(r);
        int64_t total = 0;
        for (Py_ssize_t i = 0; i < n && total >= 0; i++)
            total = PyBytes_Check(items[i]) ? total + PyBytes_GET_SIZE(items[i]) : -1;
        req->known_length = total;
        if (total >= 0 && total <= POSTED_HIGH) {
            /* All there: the head, the body and the end in one chunk. */
            wsgi_chunk_t *c = t_chunk(req, (size_t)total);
            if (c == NULL) {
                t_fail(req);
                return;
            }
            char *p = c->data;
            for (Py_ssize_t i = 0; i < n; i++) {
                memcpy(p, PyBytes_AS_STRING(items[i]), (size_t)PyBytes_GET_SIZE(items[i]));
                p += PyBytes_GET_SIZE(items[i]);
            }
            t_last(req, c, 0);
            return;
        }
    } else if ((req->iter = PyObject_GetIter(r)) == NULL) {
        t_fail(req);
        return;
    }
    for (;;) {
        PyObject *item = next_item(req);
        if (item == NULL)
            break;
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "response items must be bytes, not %.100s",
                         Py_TYPE(item)->tp_name);
            Py_DECREF(item);
            break;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        wsgi_chunk_t *c = len ? t_chunk(req, (size_t)len) : NULL;
        if (c != NULL)
            memcpy(c->data, PyBytes_AS_STRING(item), (size_t)len);
        Py_DECREF(item);
        if (len && c == NULL)
            break;
        /* An iterator's items go as they come (a stream may wait between
         * them); a long list's wake the loop when the thread must wait. */
        if ((c != NULL && t_post(req, c, req->iter != NULL) < 0) || t_wait(req, WAIT_ROOM) < 0)
            break;
    }
    if (PyErr_Occurred())
        t_fail(req);
    else if (req->x != NULL)
        t_end(req);
}

/* Pool thread: calls close() on the response, as PEP 3333 asks, on the
 * thread that ran the application (frameworks end their request there). */
static void t_close(RequestObject *req)
{
    PyObject *result = req->result;
    if (result && !PyList_CheckExact(result) && !PyTuple_CheckExact(result)) {
        PyObject *res = PyObject_CallMethodNoArgs(result, req->ctx->close_name);
        if (res == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
        else if (res == NULL)
            ps_log_exception(req->ctx->error_logger, "Exception in close() of the WSGI response");
        Py_XDECREF(res);
    }
    Py_CLEAR(req->iter);
    Py_CLEAR(req->result);
}

/* Pool thread (the pool's run): one request, from the environ to close().
 * pool_release drops the thread's reference to the job. */
static void pool_run(void *p_job, void *data)
{
    wsgi_job_t *job = p_job;
    ps_wsgi_t *ctx = data;
    ps_exchange_t *x = job->x; /* with the GIL: the loop clears it only with it, until t_last */
    if (x == NULL)
        return;
    RequestObject *req = ps_wsgi_request_new(ctx, x);
    if (req == NULL) {
        ps_log_exception(ctx->error_logger, "Cannot start a request");
        pthread_mutex_lock(&ctx->mu);
        job->t_failed = 1;
        pthread_mutex_unlock(&ctx->mu);
        schedule(job);
        return;
    }
    req->job = job;
    job->req = req;
    PyObject *environ = ps_wsgi_environ(ctx, x, req, &job->fwd);
    if (environ == NULL) {
        t_fail(req);
    } else {
        PyObject *args[2] = {environ, (PyObject *)req};
        PyObject *result = PyObject_Vectorcall(ctx->app, args, 2, NULL);
        if (result == NULL) {
            t_fail(req);
        } else {
            req->result = result;
            t_body(req);
        }
        Py_DECREF(environ);
    }
    t_close(req);
    job->req = NULL;
    req->job = NULL;
    req->x = NULL;
    ((InputObject *)req->input)->x = NULL;
    Py_DECREF(req);
}

static void pool_release(void *job, void *data)
{
    PS_UNUSED(data);
    job_unref(job);
}

/* Loop thread: hands the request to a thread, or keeps it until one is
 * free. Needs no GIL. Returns 0 or -ENOMEM. */
int ps_wsgi_threads_dispatch(ps_wsgi_t *ctx, ps_exchange_t *x, const ps_proxy_result_t *fwd)
{
    wsgi_job_t *job = job_new(ctx);
    if (job == NULL)
        return -ENOMEM;
    job->ctx = ctx;
    job->x = x;
    job->fwd = *fwd;
    job->sendfile_fd = job->sf_fd = -1;
    job->refs = 2; /* the loop's and the thread's (or the waiting list's) */
    x->app_data = job;
    x->deferred = 1;
    if (ctx->waiting == NULL && ps_pool_push(ctx->pool, job) == 0)
        return 0;
    if (ctx->wait_tail)
        ctx->wait_tail->next_wait = job;
    else
        ctx->waiting = job;
    ctx->wait_tail = job;
    return 0;
}

/* Loop thread, once a thread's output drained (no GIL needed). */
void ps_wsgi_threads_writable(ps_exchange_t *x)
{
    wsgi_job_t *job = x->app_data;
    if (job->sendfile_fd >= 0) {
        job->sendfile_fd = -1;
        t_finish(job);
        return;
    }
    pthread_mutex_lock(&job->ctx->mu);
    job->blocked = 0; /* the thread may produce more */
    if (job->ctx->waiters)
        pthread_cond_broadcast(&job->ctx->moved);
    pthread_mutex_unlock(&job->ctx->mu);
}

void ps_wsgi_threads_detach(ps_exchange_t *x, int status)
{
    t_detach(x->app_data, status);
}

int ps_wsgi_threads_write(RequestObject *req, const char *data, size_t len)
{
    wsgi_chunk_t *c = t_chunk(req, len);
    if (c == NULL)
        return -1;
    memcpy(c->data, data, len);
    if (t_post(req, c, 1) < 0 || t_wait(req, WAIT_DRAINED) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ConnectionResetError, "the client closed the connection");
        return -1;
    }
    return 0;
}

/* ---- the watchdog ---- */

/* The stack of a thread as text ("" when it cannot be had). New
 * reference, or NULL with an exception. */
static PyObject *thread_stack(unsigned long ident)
{
    PyObject *text = NULL, *d = NULL, *key = NULL, *mod = NULL, *lines = NULL, *empty = NULL;
    PyObject *frames = PySys_GetObject("_current_frames"); /* borrowed */
    if (frames == NULL || (d = PyObject_CallNoArgs(frames)) == NULL ||
        (key = PyLong_FromUnsignedLong(ident)) == NULL)
        goto done;
    PyObject *frame = PyDict_GetItemWithError(d, key); /* borrowed */
    if (frame == NULL) {
        text = PyErr_Occurred() ? NULL : PyUnicode_FromString("");
        goto done;
    }
    if ((mod = PyImport_ImportModule("traceback")) == NULL ||
        (lines = PyObject_CallMethod(mod, "format_stack", "O", frame)) == NULL ||
        (empty = PyUnicode_FromString("")) == NULL)
        goto done;
    text = PyUnicode_Join(empty, lines);
done:
    Py_XDECREF(d);
    Py_XDECREF(key);
    Py_XDECREF(mod);
    Py_XDECREF(lines);
    Py_XDECREF(empty);
    return text;
}

/* Logs the request stuck on thread t and where it is. Never raises. */
static void log_stuck(ps_wsgi_t *ctx, ps_pool_thread_t *t, ps_slice_t method, ps_slice_t target,
                      int seconds)
{
    PyObject *m = latin1(method.base, method.len);
    PyObject *p = latin1(target.base, PS_MIN(target.len, 200));
    PyObject *stack = thread_stack(t->ident);
    PyObject *msg =
        m && p && stack
            ? PyUnicode_FromFormat("WORKER TIMEOUT (pid %d): %s has run %U %U for %d s, "
                                   "in:\n%U",
                                   (int)getpid(), t->name, m, p, seconds, stack)
            : NULL;
    PyObject *res = msg ? PyObject_CallMethod(ctx->error_logger, "error", "sO", "%s", msg) : NULL;
    if (res == NULL)
        PyErr_Print();
    Py_XDECREF(res);
    Py_XDECREF(msg);
    Py_XDECREF(stack);
    Py_XDECREF(p);
    Py_XDECREF(m);
}

/* Loop thread, once a second under a master's --timeout: a request that
 * has run on a thread for longer is logged with the thread's Python stack,
 * and the worker aborts as the master's watchdog would make it (its
 * SIGABRT handler prints every thread and exits; the master replaces it). */
static void on_watchdog(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_wsgi_t *ctx = ps_container_of(t, ps_wsgi_t, watchdog);
    PS_UNUSED(revents);
    uint32_t n;
    ps_py_loop_gil(); /* the threads' jobs are read with it */
    ps_pool_thread_t *ts = ps_pool_threads(ctx->pool, &n);
    double now = ev_time();
    PS_UNUSED(loop);
    for (uint32_t i = 0; i < n; i++) {
        wsgi_job_t *job = ts[i].job;
        if (job == NULL || now - ts[i].started < ctx->timeout)
            continue;
        ps_slice_t m = PS_SLICE_LIT("-"), p = PS_SLICE_LIT("-");
        if (job->x) {
            m = job->x->req->method;
            p = job->x->req->target;
        }
        log_stuck(ctx, &ts[i], m, p, (int)(now - ts[i].started));
        ev_timer_stop(loop, t);
        raise(SIGABRT);
        if (PyErr_CheckSignals() < 0)
            PyErr_Print();
        return;
    }
}

/* ---- start and stop ---- */

int ps_wsgi_threads_start(ps_wsgi_t *ctx, ps_worker_t *w)
{
    ctx->loop = ps_worker_loop(w);
    ctx->pool = ps_pool_new(ctx->loop, ctx->nthreads, pool_run, pool_release, pool_notify, ctx);
    if (ctx->pool == NULL)
        return -1;
    /* Under a master the loop stays responsive while a thread is stuck, so
     * the master's heartbeat watchdog cannot see it: this one does. */
    if (w->slot != NULL && ctx->timeout > 0) {
        ev_timer_init(&ctx->watchdog, on_watchdog, 1.0, 1.0);
        ev_timer_start(ctx->loop, &ctx->watchdog);
        ev_unref(ctx->loop);
    }
    return 0;
}

/* Drops the requests the loop will not look at any more (all detached). */
static void drop_lists(ps_wsgi_t *ctx)
{
    while (ctx->ready) {
        wsgi_job_t *job = ctx->ready;
        ctx->ready = job->next_ready;
        job->scheduled = 0;
        job_unref(job);
    }
    while (ctx->waiting) {
        wsgi_job_t *job = ctx->waiting;
        ctx->waiting = job->next_wait;
        job_unref(job);
    }
    ctx->wait_tail = NULL;
}

void ps_wsgi_threads_stop(ps_wsgi_t *ctx)
{
    if (ev_is_active(&ctx->watchdog)) {
        ev_ref(ctx->loop);
        ev_timer_stop(ctx->loop, &ctx->watchdog);
    }
    /* Every request is over for the loop; a thread may still be in a
     * close(). One still in the application (the graceful timeout closed
     * its connection) keeps ctx alive: it is left, as the process ends. */
    if (ps_pool_free(ctx->pool, 2.0) < 0) {
        ctx->abandoned = 1;
        return;
    }
    ctx->pool = NULL;
    drop_lists(ctx);
}

void ps_wsgi_threads_free(ps_wsgi_t *ctx)
{
    wsgi_job_t *lists[2] = {ctx->free_local, ctx->free_shared};
    for (int i = 0; i < 2; i++)
        for (wsgi_job_t *j = lists[i], *next; j != NULL; j = next) {
            next = j->next_free;
            PyMem_RawFree(j);
        }
    ctx->free_local = ctx->free_shared = NULL;
}
