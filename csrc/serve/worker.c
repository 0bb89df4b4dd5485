/* One worker: its loop, stop and drain (--drain-delay), signals, the
 * heartbeat slot under a master, connections freed at the safe point
 * before the loop sleeps, and the layers the core answers in (--static,
 * --health-check-path). Accepting is listener.c's. */
#define _GNU_SOURCE
#include "serve/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/accesslog.h"
#include "codec/http.h"
#include "base/common.h"
#include "serve/sock.h"
#include "serve/listener.h"
#include "base/net.h"

/* The worker has stopped: leave the loop (or tell whoever drives it). */
static void drained(ps_worker_t *w)
{
    ev_break(w->loop, EVBREAK_ALL);
    if (w->hooks->drained)
        w->hooks->drained(w->hooks_data);
}

/* A socket closed (wstate.h's conn_closed, called by sock.c). */
static void conn_closed(ps_worker_t *w, ps_sock_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        w->conns = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->next_dead = w->dead;
    w->dead = s;
    w->nconns--;
    if (w->stopping) {
        if (w->nconns == 0)
            drained(w);
    } else if (!w->accepting && w->nconns < w->cfg.limit_connections) {
        ps_listener_set_accepting(w, 1);
    }
}

static void free_dead(ps_worker_t *w)
{
    w->held = NULL; /* every connection on it is closed, or flushed */
    w->held_new = 0;
    while (w->dead) {
        ps_sock_t *s = w->dead;
        w->dead = s->next_dead;
        ps_sock_release(s);
    }
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_worker_t *w = ps_container_of(p, ps_worker_t, prepare);
    ps_sock_flush_held(w);
    free_dead(w);
}

static void close_all(ps_worker_t *w)
{
    while (w->conns)
        ps_sock_close(w->conns);
}

static void stop_now(ps_worker_t *w)
{
    w->stopping = 1;
    ev_timer_stop(w->loop, &w->drain_timer);
    ps_listener_set_accepting(w, 0);
    close_all(w);
    drained(w);
}

static void on_stop_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    stop_now(ps_container_of(t, ps_worker_t, stop_timer));
}

static void close_idle(ps_worker_t *w)
{
    for (ps_sock_t *s = w->conns, *next; s; s = next) {
        next = s->next;
        ps_sock_stop_idle(s);
    }
}

static void on_idle_grace(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    close_idle(ps_container_of(t, ps_worker_t, idle_grace));
}

void ps_worker_stop(ps_worker_t *w)
{
    if (w->stopping)
        return;
    w->stopping = 1;
    ev_timer_stop(w->loop, &w->drain_timer); /* a stop from elsewhere ends a drain */
    ps_listener_release(w);
    w->stop_started = ev_now(w->loop);
    ps_listener_set_accepting(w, 0);
    /* Under a master (rolling restarts, recycling), idle connections get a
     * second before they are closed (by the heartbeat): a connection
     * accepted just before the stop gets its first request served, and a
     * busy keep-alive client gets its next response with "Connection:
     * close" instead of racing a close with its next request. */
    if (w->slot == NULL && w->reloading) {
        /* The same second for a single process's reload: a connection
         * still in its TLS handshake, or whose request is on its way, is
         * served rather than closed. */
        ev_timer_set(&w->idle_grace, 1.0, 0);
        ev_timer_start(w->loop, &w->idle_grace);
    } else if (w->slot == NULL) {
        close_idle(w);
    }
    if (w->nconns == 0) {
        drained(w);
        return;
    }
    if (w->cfg.graceful_timeout > 0) {
        ev_timer_set(&w->stop_timer, w->cfg.graceful_timeout, 0);
        ev_timer_start(w->loop, &w->stop_timer);
    }
}

/* SIGHUP in a single process: a graceful stop that leaves the listening
 * sockets open and queueing for the server that replaces this one. Ignored
 * while a stop is under way, and when the hook refuses the reload. */
static void reload(ps_worker_t *w)
{
    if (w->stopping || w->draining || w->hooks->reload(w->hooks_data) < 0)
        return;
    for (uint32_t i = 0; i < w->nlisteners; i++)
        w->listeners[i].shut_at_stop = 0;
    w->reloading = 1;
    ps_worker_stop(w);
}

/* A stop that ends this server, not a worker's retirement nor a reload:
 * a single process's, the master's last (final_stop), or any that a
 * foreign manager sends (drain). */
static int final_stop(const ps_worker_t *w)
{
    return w->slot == NULL || w->slot->final_stop ||
           __atomic_load_n(&w->slot->drain, __ATOMIC_SEQ_CST);
}

/* The stop signum asked for: graceful, or quick (every connection closed
 * now). May end the loop. */
static void stop_on_signal(ps_worker_t *w, int signum, int quick)
{
    if (final_stop(w))
        w->draining = 1; /* the health check answers 503 while the stop lasts */
    uint32_t open = w->nconns;
    if (!quick && !w->stopping) {
        ps_worker_stop(w); /* may end the loop at once: nothing to drain */
        open = w->nconns;
    }
    if (w->hooks->stopping)
        w->hooks->stopping(w->hooks_data, signum, open, quick, w->cfg.graceful_timeout);
    if (quick)
        stop_now(w);
}

/* --drain-delay: a SIGTERM that ends the server (under a master: the one
 * its stop sends, slot->drain) first lets the worker serve on for the
 * delay, listening sockets open, while the health check answers 503 so
 * that load balancers stop sending traffic; then the graceful stop.
 * Returns 1 when the drain began. */
static int drain_first(ps_worker_t *w, int signum)
{
    if (signum != SIGTERM || w->cfg.drain_delay <= 0 || w->draining)
        return 0;
    if (w->slot && !__atomic_load_n(&w->slot->drain, __ATOMIC_SEQ_CST))
        return 0; /* the master retires this worker (HUP, recycling): no drain */
    w->draining = 1;
    ev_timer_set(&w->drain_timer, w->cfg.drain_delay, 0);
    ev_timer_start(w->loop, &w->drain_timer);
    if (w->hooks->draining)
        w->hooks->draining(w->hooks_data, signum, w->cfg.drain_delay);
    return 1;
}

static void on_drain_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    stop_on_signal(ps_container_of(t, ps_worker_t, drain_timer), SIGTERM, 0);
}

static void on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    ps_worker_t *w = s->data;
    if (s->signum == SIGUSR1) {
        if (w->hooks->reopen_logs)
            w->hooks->reopen_logs(w->hooks_data);
        return;
    }
    if (s->signum == SIGHUP) {
        reload(w);
        return;
    }
    if (w->hooks->stop_signal)
        w->hooks->stop_signal(w->hooks_data, s->signum);
    /* Under a master, SIGINT is the fast stop (gunicorn's convention): the
     * master's own SIGINT reaches the workers of a terminal's process group. */
    int quick = s->signum == SIGQUIT || (s->signum == SIGINT && (w->stopping || w->slot));
    if (!quick && !w->stopping) {
        if (ev_is_active(&w->drain_timer))
            ev_timer_stop(w->loop, &w->drain_timer); /* a second TERM or an INT ends the drain */
        else if (drain_first(w, s->signum))
            return;
    }
    stop_on_signal(w, s->signum, quick);
}

static void beat(ps_worker_t *w)
{
    w->slot->heartbeat = ps_master_now();
}

/* Once a second: tell the master the loop is alive; stop if it is gone. */
static void on_heartbeat(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_worker_t *w = ps_container_of(t, ps_worker_t, heartbeat);
    PS_UNUSED(revents);
    beat(w);
    if (getppid() != w->ppid)
        ps_worker_stop(w);
    ps_listener_release(w); /* a lane closed, or a last stop that began while retiring */
    if (w->stopping && ev_now(loop) - w->stop_started >= 1.0) {
        close_idle(w);
        if (w->nconns == 0)
            ev_break(loop, EVBREAK_ALL);
    }
}

/* The slot wrapper around the interface layer's handler: records the
 * request (a bounded copy, for the watchdog's log line) and counts it. */
static void copy_slice(char *dst, size_t cap, ps_slice_t s)
{
    size_t n = PS_MIN(s.len, cap - 1);
    memcpy(dst, s.base, n);
    dst[n] = '\0';
}

static void slot_on_request(ps_exchange_t *x)
{
    ps_worker_t *w = x->worker;
    ps_slot_t *s = w->slot;
    ps_request_t *r = x->req;
    copy_slice(s->method, sizeof(s->method), r->method);
    copy_slice(s->path, sizeof(s->path), r->target);
    uint64_t n = s->requests + 1;
    s->requests = n;
    if (s->max_requests > 0 && n >= s->max_requests)
        s->retire = 1;
    w->inner_handler->on_request(x);
}

static void slot_on_writable(ps_exchange_t *x)
{
    x->worker->inner_handler->on_writable(x);
}

static void slot_on_disconnect(ps_exchange_t *x)
{
    x->worker->inner_handler->on_disconnect(x);
}

static void slot_dispose(ps_exchange_t *x)
{
    x->worker->inner_handler->dispose(x);
}

static void slot_on_body(ps_exchange_t *x)
{
    x->worker->inner_handler->on_body(x);
}

static void slot_on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    if (x->worker->inner_handler->on_rejected)
        x->worker->inner_handler->on_rejected(x, status, reason);
}

static void slot_on_refused(ps_exchange_t *x, const char *reason)
{
    if (x->worker->inner_handler->on_refused)
        x->worker->inner_handler->on_refused(x, reason);
}

static const ps_handler_t slot_handler = {
    .on_request = slot_on_request,
    .on_writable = slot_on_writable,
    .on_disconnect = slot_on_disconnect,
    .dispose = slot_dispose,
    .on_body = slot_on_body,
    .on_rejected = slot_on_rejected,
    .on_refused = slot_on_refused,
};

static const ps_handler_t slot_handler_async = {
    .on_request = slot_on_request,
    .on_writable = slot_on_writable,
    .on_disconnect = slot_on_disconnect,
    .dispose = slot_dispose,
    .on_body = slot_on_body,
    .on_rejected = slot_on_rejected,
    .on_refused = slot_on_refused,
    .async = 1,
};

void ps_worker_attach_slot(ps_worker_t *w, ps_slot_t *slot)
{
    w->slot = slot;
    /* The master's pid from before the fork: a master killed while this
     * worker booted already made getppid() another process's. */
    w->ppid = slot->master_pid ? (pid_t)slot->master_pid : getppid();
    w->inner_handler = w->handler;
    if (slot->metrics)
        w->metrics = slot->metrics;
    w->handler = w->async ? &slot_handler_async : &slot_handler;
    ev_timer_init(&w->heartbeat, on_heartbeat, 1.0, 1.0);
}

/* ---- the static layer (--static) ---------------------------------------
 *
 * Wraps the interface layer's handler when there are mounts: a request
 * ps_static_serve answers is carried out here with the exchange calls
 * (start, then sendfile), over HTTP/1 or HTTP/2, and never reaches Python
 * but for its access line (on_served); everything else is forwarded. While
 * a file is in flight app_data is static_marker (the protocols tell only a
 * layer with app_data of a drained output or a disconnect) and the file is
 * x->static_fd.
 */
static char static_marker;

static int static_busy(const ps_exchange_t *x)
{
    return x->app_data == &static_marker;
}

/* Closes the file in flight, if any; 1 when there was one. */
static int static_drop(ps_exchange_t *x)
{
    if (!static_busy(x))
        return 0;
    close(x->static_fd);
    x->static_fd = -1;
    x->app_data = NULL;
    return 1;
}

static void static_served(ps_exchange_t *x, int status)
{
    const ps_handler_t *inner = x->worker->static_inner;
    if (inner->on_served)
        inner->on_served(x, status);
}

/* Carries out a plan. May end or abort the exchange. */
static void static_answer(ps_exchange_t *x, ps_static_plan_t *plan)
{
    x->log_start = ps_alog_clock();
    x->file_follows = plan->fd >= 0; /* the head leaves with the file */
    int rc = ps_exchange_start(x, plan->status_line, plan->headers, plan->nheaders, plan->body.base,
                               plan->body.len);
    if (rc >= 0 && plan->fd >= 0)
        rc = ps_exchange_sendfile(x, plan->fd, (int64_t)plan->offset, plan->length);
    if (rc == PS_WRITE_PENDING && plan->fd >= 0) {
        x->static_fd = plan->fd; /* closed by on_writable, on_disconnect or dispose */
        x->app_data = &static_marker;
        return;
    }
    ps_static_plan_release(plan);
    if (rc < 0) {
        ps_exchange_abort(x);
        static_served(x, x->status ? x->status : plan->status);
        return;
    }
    ps_exchange_end(x); /* PS_WRITE_PENDING without a file: the protocol flushes the head */
    static_served(x, plan->status);
}

static void static_on_request(ps_exchange_t *x)
{
    ps_worker_t *w = x->worker;
    ps_static_plan_t plan;
    int rc = ps_static_serve(w->cfg.statics, x->req, &plan);
    if (rc == PS_STATIC_RESPOND) {
        static_answer(x, &plan);
    } else if (rc < 0) {
        ps_exchange_reject(x, 503, "no descriptor for a static file");
    } else {
        w->static_inner->on_request(x);
    }
}

static void static_on_writable(ps_exchange_t *x)
{
    if (!static_drop(x)) {
        x->worker->static_inner->on_writable(x);
        return;
    }
    int status = x->status;
    ps_exchange_end(x);
    static_served(x, status);
}

static void static_on_disconnect(ps_exchange_t *x)
{
    if (static_drop(x))
        static_served(x, x->status);
    else
        x->worker->static_inner->on_disconnect(x);
}

static void static_dispose(ps_exchange_t *x)
{
    static_drop(x);
    x->worker->static_inner->dispose(x);
}

static void static_on_body(ps_exchange_t *x)
{
    if (!static_busy(x) && x->worker->static_inner->on_body)
        x->worker->static_inner->on_body(x);
}

static void static_on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    if (x->worker->static_inner->on_rejected)
        x->worker->static_inner->on_rejected(x, status, reason);
}

static void static_on_refused(ps_exchange_t *x, const char *reason)
{
    if (x->worker->static_inner->on_refused)
        x->worker->static_inner->on_refused(x, reason);
}

static const ps_handler_t static_handler = {
    .on_request = static_on_request,
    .on_writable = static_on_writable,
    .on_disconnect = static_on_disconnect,
    .dispose = static_dispose,
    .on_body = static_on_body,
    .on_rejected = static_on_rejected,
    .on_refused = static_on_refused,
};

static const ps_handler_t static_handler_async = {
    .on_request = static_on_request,
    .on_writable = static_on_writable,
    .on_disconnect = static_on_disconnect,
    .dispose = static_dispose,
    .on_body = static_on_body,
    .on_rejected = static_on_rejected,
    .on_refused = static_on_refused,
    .async = 1,
};

/* ---- the health check (--health-check-path) -----------------------------
 *
 * The outermost layer when the path is set (installed by ps_worker_start,
 * over the slot's and the static layer's): a request for the path is
 * answered here, over HTTP/1 or HTTP/2, and neither the application, the
 * access log, the request metrics (pyserver_health_checks_total counts it
 * instead) nor the slot (the watchdog's record, --max-requests) sees it.
 * The layer's table is a copy of the inner handler's with on_request
 * replaced: the other callbacks cost nothing more, and a probe's exchange
 * never has app_data for them to see.
 */
typedef struct {
    ps_slice_t status;
    ps_header_t headers[4];
    size_t nheaders;
    ps_slice_t body;
} health_answer_t;

#define HEALTH_TEXT                                                                                \
    {                                                                                              \
        PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain; charset=utf-8")                    \
    }
#define HEALTH_NO_STORE                                                                            \
    {                                                                                              \
        PS_SLICE_LIT("Cache-Control"), PS_SLICE_LIT("no-store")                                    \
    }

static const health_answer_t health_ok = {
    PS_SLICE_LIT("200 OK"),
    {HEALTH_TEXT, HEALTH_NO_STORE, {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("3")}},
    3,
    PS_SLICE_LIT("ok\n"),
};

/* While the server stops; the connection closes after it, as the
 * server is going away (a probe's next connection may reach another). */
static const health_answer_t health_draining = {
    PS_SLICE_LIT("503 Service Unavailable"),
    {HEALTH_TEXT,
     HEALTH_NO_STORE,
     {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("9")},
     {PS_SLICE_LIT("Connection"), PS_SLICE_LIT("close")}},
    4,
    PS_SLICE_LIT("draining\n"),
};

static const health_answer_t health_bad_method = {
    PS_SLICE_LIT("405 Method Not Allowed"),
    {HEALTH_TEXT,
     HEALTH_NO_STORE,
     {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("19")},
     {PS_SLICE_LIT("Allow"), PS_SLICE_LIT("GET, HEAD")}},
    4,
    PS_SLICE_LIT("Method Not Allowed\n"),
};

/* 1 when the target's path (origin- or absolute-form; the query and a
 * fragment left out) is path, byte for byte. */
static int health_match(ps_slice_t target, ps_slice_t path)
{
    if (ps_unlikely(target.len == 0 || target.base[0] != '/')) {
        ps_slice_t query;
        ps_http_split_target(target, &target, &query);
    }
    if (target.len < path.len || memcmp(target.base, path.base, path.len) != 0)
        return 0;
    return target.len == path.len || target.base[path.len] == '?' || target.base[path.len] == '#';
}

/* Answers 200 "ok", 503 "draining" once a stop that ends the server began
 * (w->draining), 405 to a method other than GET and HEAD; forwards every
 * other request. May end or abort the exchange. */
static void health_on_request(ps_exchange_t *x)
{
    ps_worker_t *w = x->worker;
    const ps_request_t *r = x->req;
    if (!health_match(r->target, w->cfg.health_path)) {
        w->health_inner->on_request(x);
        return;
    }
    const health_answer_t *a = &health_ok;
    if (r->method_id != HTTP_GET && r->method_id != HTTP_HEAD)
        a = &health_bad_method;
    else if (w->draining)
        a = &health_draining;
    x->unmetered = 1;
    if (w->metrics)
        PS_METRICS_ADD(w->metrics->health_checks, 1);
    if (ps_exchange_start(x, a->status, a->headers, a->nheaders, a->body.base, a->body.len) < 0)
        ps_exchange_abort(x);
    else
        ps_exchange_end(x); /* PS_WRITE_PENDING: the protocol flushes it */
}

static void health_install(ps_worker_t *w)
{
    if (w->cfg.health_path.base == NULL || w->health_inner != NULL)
        return;
    w->health_inner = w->handler;
    w->health_handler = *w->handler;
    w->health_handler.on_request = health_on_request;
    w->handler = &w->health_handler;
}

int ps_worker_init(ps_worker_t *w, const ps_config_t *cfg, const ps_handler_t *handler,
                   void *handler_data, const ps_worker_hooks_t *hooks, void *hooks_data)
{
    static const ps_worker_hooks_t no_hooks = {0};
    memset(w, 0, sizeof(*w));
    w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOENV);
    if (w->loop == NULL)
        return -ENOMEM;
    w->cfg = *cfg;
    if (w->cfg.limit_connections == 0)
        w->cfg.limit_connections = 10000;
    w->handler = handler;
    w->conn_closed = conn_closed;
    w->handler_data = handler_data;
    w->async = handler->async;
    w->route = handler->route;
    if (cfg->statics && cfg->statics->nmounts) {
        w->static_inner = handler;
        w->handler = w->async ? &static_handler_async : &static_handler;
    }
    w->hooks = hooks ? hooks : &no_hooks;
    w->hooks_data = hooks_data;
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ev_prepare_init(&w->prepare, on_prepare);
    /* First of the watchers that run before the loop sleeps: what the held
     * output's flush dispatches (pipelined requests) is seen by the others
     * (the thread pool wakes its threads from one). */
    ev_set_priority(&w->prepare, EV_MAXPRI);
    ev_prepare_start(w->loop, &w->prepare);
    ev_unref(w->loop); /* the prepare watcher alone does not keep the loop alive */
    ps_listener_gate_open(w);
    ev_init(&w->stop_timer, on_stop_timeout);
    ev_init(&w->idle_grace, on_idle_grace);
    ev_init(&w->drain_timer, on_drain_timer);
    ev_signal_init(&w->sigint, on_signal, SIGINT);
    ev_signal_init(&w->sigterm, on_signal, SIGTERM);
    ev_signal_init(&w->sigquit, on_signal, SIGQUIT);
    ev_signal_init(&w->sigusr1, on_signal, SIGUSR1);
    ev_signal_init(&w->sighup, on_signal, SIGHUP);
    w->sigint.data = w->sigterm.data = w->sigquit.data = w->sigusr1.data = w->sighup.data = w;
    return 0;
}

void ps_worker_start(ps_worker_t *w)
{
    health_install(w);
    ev_signal_start(w->loop, &w->sigint);
    ev_signal_start(w->loop, &w->sigterm);
    ev_signal_start(w->loop, &w->sigquit);
    if (w->hooks->reopen_logs)
        ev_signal_start(w->loop, &w->sigusr1);
    if (w->hooks->reload)
        ev_signal_start(w->loop, &w->sighup);
    ps_listener_start(w);
    if (w->slot) {
        beat(w);
        ev_timer_start(w->loop, &w->heartbeat);
        ev_unref(w->loop); /* the heartbeat alone does not keep the loop alive */
        __atomic_store_n(&w->slot->ready, 1, __ATOMIC_SEQ_CST);
        if (__atomic_exchange_n(&w->slot->reopen_logs, 0, __ATOMIC_SEQ_CST) &&
            w->hooks->reopen_logs)
            w->hooks->reopen_logs(w->hooks_data); /* a USR1 sent while it booted */
    }
}

void ps_worker_finish(ps_worker_t *w)
{
    if (w->slot && ev_is_active(&w->heartbeat)) {
        ev_ref(w->loop);
        ev_timer_stop(w->loop, &w->heartbeat);
    }
    ps_listener_finish(w);
    close_all(w);
    free_dead(w);
    ev_signal_stop(w->loop, &w->sigint);
    ev_signal_stop(w->loop, &w->sigterm);
    ev_signal_stop(w->loop, &w->sigquit);
    ev_signal_stop(w->loop, &w->sigusr1);
    ev_signal_stop(w->loop, &w->sighup);
    ev_timer_stop(w->loop, &w->stop_timer);
    ev_timer_stop(w->loop, &w->idle_grace);
    ev_timer_stop(w->loop, &w->drain_timer);
}

void ps_worker_run(ps_worker_t *w)
{
    ps_worker_start(w);
    ev_run(w->loop, 0);
    ps_worker_finish(w);
}

void ps_worker_free(ps_worker_t *w)
{
    close_all(w);
    free_dead(w);
    if (w->loop) {
        ps_listener_gate_close(w);
        ev_ref(w->loop);
        ev_prepare_stop(w->loop, &w->prepare);
        ev_loop_destroy(w->loop);
        w->loop = NULL;
    }
    free(w->listeners);
    w->listeners = NULL;
    if (w->reserve_fd >= 0)
        close(w->reserve_fd);
    w->reserve_fd = -1;
}
