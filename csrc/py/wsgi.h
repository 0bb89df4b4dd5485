/* What the files of the WSGI layer share: wsgi.c (the layer and the handler
 * the core calls), wsgi_environ.c, wsgi_response.c (the response on the loop
 * thread), wsgi_threads.c (--threads) and wsgi_types.c (the Python types).
 * Private to them; bridge.h has what the rest of the bridge uses. */
#ifndef PS_WSGI_H
#define PS_WSGI_H

#include "bridge.h"

#define MAX_STACK_HEADERS 32

enum {
    K_REQUEST_METHOD,
    K_SCRIPT_NAME,
    K_PATH_INFO,
    K_QUERY_STRING,
    K_CONTENT_TYPE,
    K_CONTENT_LENGTH,
    K_SERVER_NAME,
    K_SERVER_PORT,
    K_SERVER_PROTOCOL,
    K_REMOTE_ADDR,
    K_REMOTE_PORT,
    K_RAW_URI,
    K_WSGI_INPUT,
    K_URL_SCHEME,
    K_COUNT
};

struct ps_wsgi {
    ps_module_state_t *st;
    PyObject *app;
    PyObject *base_environ;
    PyObject *error_logger;
    ps_access_log_t *access_log; /* NULL when off (borrowed from the settings) */
    ps_rejects_t rejects;
    ps_py_refusals_t refusals;  /* PROXY protocol failures logged (request.c) */
    uint32_t limit_concurrency; /* open connections above it get 503 (0: no limit) */
    PyObject *keys[K_COUNT];
    PyObject *protocols[3]; /* "HTTP/1.0", "HTTP/1.1", "HTTP/2" */
    PyObject *empty;
    PyObject *close_name; /* "close", interned: the type's method cache hits */
    PyObject *comma;
    PyObject *zero;       /* "0": REMOTE_PORT of a forwarded client */
    PyObject *schemes[3]; /* by PS_SCHEME_*: NULL, "http", "https" */
    char *root_path;      /* UTF-8, no trailing slash */
    size_t root_path_len;
    ps_py_cache_t cache; /* methods, header names */
    /* --threads N > 1 (see "the thread pool" below); pool NULL otherwise. */
    uint32_t nthreads;
    ps_pool_t *pool;
    pthread_mutex_t mu;                   /* the jobs' shared fields, ready */
    pthread_cond_t moved;                 /* one of those changed: waiting threads re-check */
    struct wsgi_job *ready;               /* results for the loop (under mu) */
    struct wsgi_job *waiting, *wait_tail; /* requests no thread took yet (loop) */
    uint32_t waiters;                     /* threads waiting on moved (under mu) */
    /* Finished jobs kept for the next requests (a malloc and a free from
     * two threads per request less): pushed by any thread, taken by the
     * loop a whole list at a time; free_count bounds them by JOB_CACHE. */
    struct wsgi_job *free_shared; /* atomic */
    struct wsgi_job *free_local;  /* loop */
    uint32_t free_count;          /* atomic: jobs in both lists */
    double write_wait;            /* the longest a thread waits for its output to drain */
    double timeout;               /* the watchdog's --timeout under a master, else 0 */
    struct ev_loop *loop;
    ev_timer watchdog;
    unsigned abandoned : 1; /* a thread outlived the worker: ctx stays allocated */
};

typedef struct RequestObject {
    PyObject_HEAD vectorcallfunc vectorcall;
    ps_exchange_t *x; /* NULL once the request is over */
    ps_wsgi_t *ctx;
    PyObject *status;
    PyObject *headers;
    PyObject *result;      /* what the application returned: close() is called on it */
    PyObject *iter;        /* iterator over result, NULL for lists and tuples */
    Py_ssize_t index;      /* next item when result is a list or tuple */
    PyObject *input;       /* the wsgi.input object */
    ps_slice_t fwd_client; /* a forwarded client as sent, for the access log (into the request) */
    int64_t known_length;  /* body length known up front, or -1 */
    int64_t given_length;  /* the Content-Length the application gave, or -1 */
    int sendfile_fd;       /* >= 0 while a file_wrapper is being sent */
    PyObject *item;        /* a response item part sent (send_item), or NULL */
    Py_ssize_t item_off;   /* where the rest of item starts */
    unsigned headers_sent : 1;
    unsigned done : 1;
    /* On a pool thread (--threads): what it shares with the loop. x is
     * then the thread's view (GIL), and headers_sent says the head was
     * posted. */
    struct wsgi_job *job;
} RequestObject;

typedef struct {
    PyObject_HEAD ps_exchange_t *x; /* NULL once the request is over */
    ps_wsgi_t *ctx;
} InputObject;

typedef struct {
    PyObject_HEAD PyObject *filelike;
    Py_ssize_t blksize;
} FileWrapperObject;

/* ---- helpers ---- */

/* A str of code points below 256 as its latin-1 bytes, without copying.
 * Returns 0, or -1 with an exception. */
static inline int latin1_view(PyObject *s, const char *what, ps_slice_t *out)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(s)->tp_name);
        return -1;
    }
    if (PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND) {
        PyErr_Format(PyExc_ValueError, "%s must be latin-1: %R", what, s);
        return -1;
    }
    out->base = (const char *)PyUnicode_1BYTE_DATA(s);
    out->len = (size_t)PyUnicode_GET_LENGTH(s);
    return 0;
}

static inline PyObject *latin1(const char *s, size_t n)
{
    return PyUnicode_DecodeLatin1(s, (Py_ssize_t)n, NULL);
}

/* ---- wsgi_environ.c ---- */

/* Interns the environ's keys and builds the base environ every request's
 * is copied from. Returns 0, or -1 with an exception (ps_wsgi_environ_clear
 * frees what was made). */
int ps_wsgi_environ_init(ps_wsgi_t *ctx, const ps_py_settings_t *s);
void ps_wsgi_environ_clear(ps_wsgi_t *ctx);
/* Returns a new environ dict for x's request, or NULL with an exception. */
PyObject *ps_wsgi_environ(ps_wsgi_t *ctx, ps_exchange_t *x, RequestObject *req,
                          const ps_proxy_result_t *fwd);

/* ---- wsgi_response.c: the response on the loop thread ---- */

enum {
    SEND_ERROR = -1, /* a Python exception is set */
    SEND_GONE = -2,  /* the client went away */
};

static inline int map_write(int rc)
{
    return rc >= 0 ? rc : SEND_GONE;
}

/* The head start_response gave, as views into its Python strings (valid
 * while req->status and req->headers hold them): the status, the fields,
 * and a Content-Length when the application's iterable has a known length
 * and named none (1xx, 204 and 304 carry no body and so no length of one). */
typedef struct {
    ps_slice_t status;
    ps_header_t *h; /* stack, or PyMem_Malloc'd past MAX_STACK_HEADERS */
    size_t n;
    size_t strings; /* bytes of the status and of every name and value */
    ps_header_t stack[MAX_STACK_HEADERS + 1];
    char length[24];
} head_view_t;

/* Fills v. Returns 0, or -1 with a Python exception (v freed). */
int ps_wsgi_head_view(RequestObject *req, head_view_t *v);
void ps_wsgi_head_view_free(head_view_t *v);
/* The regular file under req's wsgi.file_wrapper: its fd and current
 * position, and req->known_length set to the bytes left. Returns 1, or 0
 * (no exception) when it is not a regular file to sendfile(2) from. */
int ps_wsgi_sendfile_source(RequestObject *req, int *fd_out, long long *off_out);

/* Inlined into pump() as it was before the thread pool used it too: the
 * loop thread's path pays no call for it. */
static inline __attribute__((always_inline)) PyObject *next_item(RequestObject *req)
{
    if (req->iter)
        return PyIter_Next(req->iter);
    PyObject *r = req->result;
    if (PyList_CheckExact(r)) {
        if (req->index >= PyList_GET_SIZE(r))
            return NULL;
        return Py_NewRef(PyList_GET_ITEM(r, req->index++));
    }
    if (req->index >= PyTuple_GET_SIZE(r))
        return NULL;
    return Py_NewRef(PyTuple_GET_ITEM(r, req->index++));
}

/* The request is over: calls close() on the response, logs it, detaches the
 * Python objects from the connection and drops the connection's reference
 * to req (which may free it). */
void ps_wsgi_request_done(RequestObject *req);
/* Sends body bytes, the head first when it is not out. Returns PS_WRITE_*,
 * SEND_ERROR or SEND_GONE. */
int ps_wsgi_send_body(RequestObject *req, const char *data, size_t len);
/* The application failed (exception pending): 500 if nothing was sent,
 * else the connection closes. Ends with req released. */
void ps_wsgi_fail(RequestObject *req);
/* The body is complete: ends the response. Ends with req released. */
void ps_wsgi_finish(RequestObject *req);
/* Logs a body shorter than its Content-Length (given), which closes the
 * connection. Loop thread, GIL taken if needed. */
void ps_wsgi_log_short_body(ps_wsgi_t *ctx, ps_exchange_t *x, int64_t given);
/* The check, inline: a body that is complete, or had no Content-Length
 * (given < 0), costs two comparisons per response. */
static inline void ps_wsgi_check_length(ps_wsgi_t *ctx, ps_exchange_t *x, int64_t given)
{
    if (ps_unlikely(given >= 0 && x->body_sent < (uint64_t)given))
        ps_wsgi_log_short_body(ctx, x, given);
}
/* Pulls items from the response and sends them until the socket is full
 * (on_writable resumes) or the response ends. Ends with req released. */
void ps_wsgi_pump(RequestObject *req);
/* The application returned req->result: sends it (a file_wrapper with
 * sendfile(2), a list or tuple with its length announced, any other
 * iterable item by item). */
void ps_wsgi_start_body(RequestObject *req);

/* ---- wsgi_threads.c: the application threads (--threads N > 1) ---- */

/* Starts the threads and, under a master's --timeout, the watchdog.
 * Returns 0 or -1 with an exception. */
int ps_wsgi_threads_start(ps_wsgi_t *ctx, ps_worker_t *w);
/* Stops the watchdog and the threads; one still in the application leaves
 * ctx->abandoned set (ctx must then stay allocated). */
void ps_wsgi_threads_stop(ps_wsgi_t *ctx);
/* ps_wsgi_free: the jobs kept for reuse. */
void ps_wsgi_threads_free(ps_wsgi_t *ctx);
/* Loop thread: hands the request to a thread, or keeps it until one is
 * free. Needs no GIL. Returns 0 or -ENOMEM. */
int ps_wsgi_threads_dispatch(ps_wsgi_t *ctx, ps_exchange_t *x, const ps_proxy_result_t *fwd);
/* Loop thread: the output of x's request drained (no GIL needed). */
void ps_wsgi_threads_writable(ps_exchange_t *x);
/* Loop thread: x's request is over for the connection (answered or gone):
 * writes its access line with `status` and detaches it. Idempotent. */
void ps_wsgi_threads_detach(ps_exchange_t *x, int status);
/* Pool thread: write(data) of PEP 3333; the loop writes the bytes and the
 * thread waits until it has. Returns 0, or -1 with an exception. */
int ps_wsgi_threads_write(RequestObject *req, const char *data, size_t len);

/* ---- wsgi_types.c: StartResponse, Input, Errors, FileWrapper ---- */

/* start_response with its wsgi.input, for x's request. New reference, or
 * NULL with an exception. */
RequestObject *ps_wsgi_request_new(ps_wsgi_t *ctx, ps_exchange_t *x);
/* The layer's wsgi.errors: lines logged on ctx->error_logger at s's level,
 * or written to s's callable. New reference, or NULL with an exception. */
PyObject *ps_wsgi_errors_new(ps_wsgi_t *ctx, const ps_py_settings_t *s);

#endif
