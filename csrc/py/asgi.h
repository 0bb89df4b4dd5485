/* What the files of the ASGI layer share: asgi.c (the layer and the server
 * object the runner drives), asgi_scope.c, asgi_http.c (receive, send and
 * the handler the core calls), asgi_awaitables.c (the C awaitables),
 * asgi_task.c (a request's task, per Python version) and asgi_ws.c. Private
 * to them; bridge.h has what the rest of the bridge uses. */
#ifndef PS_ASGI_H
#define PS_ASGI_H

#include "bridge.h"
#include "asgi_ws.h"

#define MAX_STACK_HEADERS 32

enum {
    S_TYPE,
    S_ASGI,
    S_HTTP_VERSION,
    S_METHOD,
    S_SCHEME,
    S_PATH,
    S_RAW_PATH,
    S_QUERY_STRING,
    S_ROOT_PATH,
    S_HEADERS,
    S_CLIENT,
    S_SERVER,
    S_STATE,
    S_EXTENSIONS,
    S_BODY,
    S_MORE_BODY,
    S_STATUS,
    S_TRAILERS,
    S_MORE_TRAILERS,
    S_PATH_KEY,
    S_LINKS,
    S_HTTP,
    S_HTTP_REQUEST,
    S_HTTP_DISCONNECT,
    S_RESPONSE_START,
    S_RESPONSE_BODY,
    S_RESPONSE_PATHSEND,
    S_RESPONSE_TRAILERS,
    S_RESPONSE_EARLY_HINT,
    S_ADD_DONE_CALLBACK,
    S_CANCELLED,
    S_EXCEPTION,
    S_DONE,
    S_SET_RESULT,
    S_SET_EXCEPTION,
    S_LOOP,
    S_HTTPS,
    S_TLS,
    S_CLIENT_CERT_CHAIN,
    S_EAGER_START,
    S_CALL_SOON,
    S_CONTEXT_KW,
    S_COUNT
};

struct ps_asgi {
    ps_module_state_t *st;
    ps_worker_t *w;
    PyObject *app;
    PyObject *loop;
    PyObject *create_task;
    PyObject *create_future;
    PyObject *task_type;       /* asyncio.Task */
    PyObject *cancelled_error; /* asyncio.CancelledError */
    PyObject *task_kwnames;    /* ("loop", "context"); ("loop",) before 3.11 */
    PyObject *eager_kwnames;   /* ("loop", "eager_start", "context"): 3.12 and later */
    PyObject *base_context;    /* the context the server started in */
    PyObject *current_task;    /* asyncio.current_task */
    PyObject *current_tasks;   /* asyncio.tasks._current_tasks when a dict, else NULL */
    PyObject *reraise;         /* a callable that raises its argument, for the loop to run */
    PyObject *loop_stop;
    PyObject *tasks; /* set: the request tasks whose application has not ended */
    PyObject *state; /* lifespan state, copied into each scope */
    PyObject *error_logger;
    ps_access_log_t *access_log; /* NULL when off (borrowed from the settings) */
    ps_rejects_t rejects;
    ps_py_refusals_t refusals; /* PROXY protocol failures logged (request.c) */
    PyObject *disconnected;    /* ClientDisconnected, an OSError subclass */
    PyObject *s[S_COUNT];
    PyObject *versions[3]; /* "1.0", "1.1", "2" */
    PyObject *root_path;
    PyObject *root_path_bytes;
    PyObject *asgi_template;
    PyObject *extensions_template;
    PyObject *scope_template; /* an HTTP scope's keys in order (values None but type) */
    PyObject *empty_bytes;
    ps_py_cache_t cache; /* methods, header names */
    uint32_t limit_concurrency;
    uint32_t active;
    unsigned stop_sent : 1;
    struct ps_asgi_ws_strings *ws_strings; /* asgi_ws.c's, made with the first upgrade */
};

typedef struct {
    PyObject_HEAD ps_exchange_t *x; /* NULL once detached: response complete or client gone */
    ps_asgi_t *ctx;
    PyObject *receive_waiter; /* Future a receive() waits on */
    PyObject *send_waiter;    /* Future a send() waits on */
    PyObject *headers;        /* from http.response.start */
    ps_slice_t fwd_client; /* a forwarded client as sent, for the access log (into the request) */
    int status;
    int sendfile_fd;
    /* A body message sent in parts (send_held): its buffer while held
     * (held.obj set), where its rest starts, its Content-Length (-1:
     * none) and more_body. */
    Py_buffer held;
    Py_ssize_t held_off;
    int64_t held_length;
    unsigned held_more : 1;
    unsigned started : 1;       /* http.response.start received */
    unsigned head_sent : 1;     /* the head went to the connection */
    unsigned body_done : 1;     /* more_body=False was delivered to receive() */
    unsigned complete : 1;      /* the response is complete */
    unsigned disconnected : 1;  /* the client went away first */
    unsigned want_trailers : 1; /* the app announced trailers */
    unsigned te_trailers : 1;   /* the client accepts trailers */
    ps_asgi_ws_t *ws;           /* a WebSocket upgrade (asgi_ws.c), owned */
} CycleObject;

/* ---- the coroutine the task runs ----
 *
 * The task steps an AppCall, which steps the application's coroutine and,
 * when it ends, finishes the request in that same step: no done callback,
 * so no second trip through call_soon per request. An exception the
 * application raised is logged and answered here, so the task itself ends
 * cleanly; cancellation is passed on so the task shows as cancelled. */
typedef struct {
    PyObject_HEAD PyObject *inner; /* the application's coroutine, NULL once it ended */
    CycleObject *cycle;
    PyObject *task; /* borrowed: the task stepping this, in ctx->tasks until the end */
} AppCallObject;

/* ---- asgi_scope.c ---- */

/* An HTTP scope for x's request; fwd: what a trusted proxy said (the
 * scheme, the client: then kept by cycle for the access log; the host).
 * New reference, or NULL with an exception. */
PyObject *ps_asgi_scope(ps_asgi_t *ctx, ps_exchange_t *x, CycleObject *cycle,
                        const ps_proxy_result_t *fwd);
/* What each scope starts as, a copy of: the keys ps_asgi_scope() sets, in
 * its order, so that filling them in never resizes the dict (after
 * Server.start(), which sets the lifespan state). Returns 0 or -1 with an
 * exception. */
int ps_asgi_scope_template(ps_asgi_t *ctx);

/* ---- asgi_http.c ---- */

extern PyType_Spec ps_asgi_cycle_spec;
/* The application's run ended (by the step of the task running it): exc
 * the exception it raised (borrowed), or NULL; cancelled when the task was.
 * Logs what went wrong and answers what the application left unanswered.
 * Leaves no exception. */
void ps_asgi_app_finished(CycleObject *self, PyObject *exc, int cancelled);

/* ---- asgi_awaitables.c: Ready, AppCall and the Futures ---- */

extern PyType_Spec ps_asgi_ready_spec;
extern PyType_Spec ps_asgi_appcall_spec;
/* (ps_asgi_ready, ps_asgi_waiter, ps_asgi_resolve and ps_asgi_fail_waiter:
 * asgi_ws.h) */

static inline PyObject *ps_asgi_new_future(ps_asgi_t *ctx)
{
    return PyObject_CallNoArgs(ctx->create_future);
}

/* ---- asgi_task.c: a request's task ---- */

/* At Server.start(loop): what making tasks on loop needs (asyncio.Task,
 * the current-task lookup, the keyword names of this Python's Task()).
 * Returns 0 or -1 with an exception. */
int ps_asgi_task_init(ps_asgi_t *ctx, PyObject *asyncio);
/* Runs coro (the application's coroutine for cycle) as an asyncio task,
 * taking its first step at once when it may (see asgi_task.c). Returns 0,
 * or -1 with an exception when no task was made (the caller answers 500). */
int ps_asgi_task_start(ps_asgi_t *ctx, CycleObject *cycle, PyObject *coro);

#endif
