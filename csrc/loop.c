#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common.h"
#include "conn.h"
#include "net.h"

/* Connections accepted per listener wakeup, so one busy listener cannot
 * starve the connections already open. */
#define ACCEPT_BATCH 64

/* The accept gate.
 *
 * Workers that share one listening socket would all wake for every new
 * connection if each watched it with a plain ev_io: libev registers fds
 * without EPOLLEXCLUSIVE. So a shared listener is added to libev's epoll set
 * by the worker itself, with EPOLLEXCLUSIVE (the kernel then wakes one
 * worker that is waiting, and skips busy ones), and with the epoll data that
 * libev registered gate_fd with: libev takes the wakeup for an event of
 * gate_fd, an eventfd that nothing ever writes, and on_gate accepts.
 *
 * That data is read back from /proc/self/fdinfo rather than derived from
 * libev's encoding. Should libev ever rebuild its epoll set (it does when it
 * sees an event it cannot place), the listeners drop out of it; on_gate_check
 * puts them back within a second, and the other workers accept meanwhile.
 * Without epoll, /proc or EPOLLEXCLUSIVE (Linux < 4.5) the listeners are
 * watched the plain way. */

/* The data fd is registered with in the epoll set epfd. Returns 0, or -1
 * when fd is not in the set or the set cannot be read. */
static int epoll_entry(int epfd, int fd, uint64_t *data)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    char line[256];
    int found = -1;
    while (found < 0 && fgets(line, sizeof(line), f)) {
        int tfd;
        unsigned events;
        uint64_t d;
        if (sscanf(line, "tfd: %d events: %x data: %" SCNx64, &tfd, &events, &d) == 3 &&
            tfd == fd) {
            *data = d;
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* libev does not tell which fd its epoll set is: it is the one gate_fd is
 * in. Sets gate_epfd and gate_data; returns 0, or -1 when none is found. */
static int gate_find(ps_worker_t *w)
{
    if (w->gate_epfd >= 0 && epoll_entry(w->gate_epfd, w->gate_fd, &w->gate_data) == 0)
        return 0;
    w->gate_epfd = -1;
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    struct dirent *e;
    while (w->gate_epfd < 0 && (e = readdir(dir)) != NULL) {
        char path[64], target[64];
        int fd = atoi(e->d_name);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n <= 0 || fd == dirfd(dir))
            continue;
        target[n] = '\0';
        if (strcmp(target, "anon_inode:[eventpoll]") == 0 &&
            epoll_entry(fd, w->gate_fd, &w->gate_data) == 0)
            w->gate_epfd = fd;
    }
    closedir(dir);
    return w->gate_epfd >= 0 ? 0 : -1;
}

static int gate_set(ps_worker_t *w, ps_listener_t *l, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = w->gate_data};
    return epoll_ctl(w->gate_epfd, op, l->fd, &ev);
}

static void set_accepting(ps_worker_t *w, int on)
{
    if (w->accepting == (unsigned)on)
        return;
    w->accepting = on != 0;
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (l->released)
            continue;
        if (l->gated) {
            if (gate_set(w, l, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL) == 0 || !on)
                continue;
            l->gated = 0; /* the kernel refuses: watch it the plain way */
        }
        if (on)
            ev_io_start(w->loop, &l->io);
        else
            ev_io_stop(w->loop, &l->io);
    }
}

/* Out of descriptors: give the spare one back, accept and drop the waiting
 * connection so the listener does not spin, then take the spare again. */
static void shed_one(ps_worker_t *w, int lfd)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (w->reserve_fd >= 0)
        close(w->reserve_fd);
    int fd = ps_net_accept(lfd, &ss, &len);
    if (fd >= 0)
        close(fd);
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Accepts up to `max` connections from l. */
static void unwatch(ps_worker_t *w, ps_listener_t *l);

static void accept_some(ps_worker_t *w, ps_listener_t *l, int max)
{
    for (int i = 0; i < max; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len;
        int fd = ps_net_accept(l->fd, &peer, &peer_len);
        if (fd == -EMFILE || fd == -ENFILE) {
            shed_one(w, l->fd);
            return;
        }
        if (fd == -EINVAL) {
            unwatch(w, l); /* shut down by another worker at the final stop */
            return;
        }
        if (fd < 0)
            return;
        /* TCP_NODELAY is inherited from the listener (set once there). */
        ps_conn_t *c = ps_conn_new(w, fd, &peer, peer_len, l->is_unix);
        if (c == NULL) {
            close(fd);
            return;
        }
        if (l->local_len) {
            c->local = &l->local;
            c->local_len = l->local_len;
        }
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        int full = ++w->nconns >= w->cfg.limit_connections;
        ps_conn_accepted(c); /* may close c */
        if (full) {
            set_accepting(w, 0);
            return;
        }
    }
}

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_listener_t *l = ps_container_of(io, ps_listener_t, io);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    accept_some(l->w, l, ACCEPT_BATCH);
}

static void on_gate(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_worker_t *w = ps_container_of(io, ps_worker_t, gate);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    for (uint32_t i = 0; i < w->nlisteners && w->accepting; i++)
        if (w->listeners[i].gated)
            accept_some(w, &w->listeners[i], ACCEPT_BATCH);
}

/* Once a second: the gated listeners are still in libev's epoll set, under
 * the data gate_fd has there now; if not, register them again. One read of
 * the set's fdinfo finds gate_fd's data; adding a listener that is still
 * there fails with EEXIST and changes nothing. */
static void on_gate_check(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_worker_t *w = ps_container_of(t, ps_worker_t, gate_check);
    PS_UNUSED(revents);
    if (!w->accepting)
        return;
    int epfd = w->gate_epfd;
    uint64_t data = w->gate_data;
    if (gate_find(w) < 0)
        return;
    int stale = epfd != w->gate_epfd || data != w->gate_data;
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (!l->gated)
            continue;
        if (stale)
            gate_set(w, l, EPOLL_CTL_DEL);
        if (gate_set(w, l, EPOLL_CTL_ADD) < 0 && errno != EEXIST) {
            l->gated = 0;
            ev_io_start(loop, &l->io);
        }
    }
}

/* Called on a fresh loop: makes gate_fd and lets libev register it. */
static void gate_open(ps_worker_t *w)
{
    w->gate_fd = w->gate_epfd = -1;
    if (ev_backend(w->loop) != EVBACKEND_EPOLL)
        return;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return;
    ev_io_init(&w->gate, on_gate, fd, EV_READ);
    ev_io_start(w->loop, &w->gate);
    ev_unref(w->loop);
    ev_run(w->loop, EVRUN_NOWAIT); /* libev hands fd to the kernel here */
    w->gate_fd = fd;
    if (gate_find(w) < 0) {
        ev_ref(w->loop);
        ev_io_stop(w->loop, &w->gate);
        close(fd);
        w->gate_fd = -1;
        return;
    }
    ev_timer_init(&w->gate_check, on_gate_check, 1.0, 1.0);
}

static void gate_close(ps_worker_t *w)
{
    if (w->gate_fd < 0)
        return;
    ev_ref(w->loop);
    ev_io_stop(w->loop, &w->gate);
    close(w->gate_fd);
    w->gate_fd = -1;
}

/* Never watches l again. */
static void unwatch(ps_worker_t *w, ps_listener_t *l)
{
    if (l->gated)
        gate_set(w, l, EPOLL_CTL_DEL);
    ev_io_stop(w->loop, &l->io);
    l->gated = 0;
    l->released = 1;
}

/* Whether nobody serves this worker's sockets after it: a stop of a single
 * process, the master's own stop, or a master that is gone. */
static int last_server(ps_worker_t *w)
{
    return w->slot == NULL || w->slot->final_stop || getppid() != w->ppid;
}

/* Releasing a listener: the connections already queued on it are taken and
 * served like any in flight, then shutdown() ends its listening, for every
 * process that holds it: new connections are refused at once rather than
 * left in a queue nobody reads, and an SO_REUSEPORT socket leaves its group,
 * so the kernel sends its share to the others.
 *
 * Released are: this worker's --reuse-port lane when the master closes it
 * (see master.c) or at the last stop; and the sockets pyserver bound itself
 * (ps_worker_shut_at_stop) at the last stop. Never the inherited ones
 * (--fd, socket activation, gunicorn's), whose owner queues connections for
 * the next server, and never at a rolling restart, whose new workers serve
 * the same sockets. */
static void release_listeners(ps_worker_t *w)
{
    int last = w->stopping && last_server(w);
    int lane = last || (w->slot && w->slot->release == 1);
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (l->released || !((l->own && lane) || (l->shut_at_stop && last)))
            continue;
        accept_some(w, l, INT32_MAX);
        shutdown(l->fd, SHUT_RDWR);
        unwatch(w, l);
    }
    if (w->slot && w->slot->release == 1)
        w->slot->release = 2; /* done: the master may stop steering */
}

/* The worker has stopped: leave the loop (or tell whoever drives it). */
static void drained(ps_worker_t *w)
{
    ev_break(w->loop, EVBREAK_ALL);
    if (w->hooks->drained)
        w->hooks->drained(w->hooks_data);
}

void ps_worker_conn_closed(ps_worker_t *w, ps_conn_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->next_dead = w->dead;
    w->dead = c;
    w->nconns--;
    if (w->stopping) {
        if (w->nconns == 0)
            drained(w);
    } else if (!w->accepting && w->nconns < w->cfg.limit_connections) {
        set_accepting(w, 1);
    }
}

static void free_dead(ps_worker_t *w)
{
    while (w->dead) {
        ps_conn_t *c = w->dead;
        w->dead = c->next_dead;
        w->handler->dispose(&c->x);
        ps_conn_free(c);
    }
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    free_dead(ps_container_of(p, ps_worker_t, prepare));
}

static void close_all(ps_worker_t *w)
{
    while (w->conns)
        ps_conn_close(w->conns);
}

static void stop_now(ps_worker_t *w)
{
    w->stopping = 1;
    set_accepting(w, 0);
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
    for (ps_conn_t *c = w->conns, *next; c; c = next) {
        next = c->next;
        ps_conn_stop_idle(c);
    }
}

void ps_worker_stop(ps_worker_t *w)
{
    if (w->stopping)
        return;
    w->stopping = 1;
    release_listeners(w);
    w->stop_started = ev_now(w->loop);
    set_accepting(w, 0);
    /* Under a master (rolling restarts, recycling), idle connections get a
     * second before they are closed (by the heartbeat): a connection
     * accepted just before the stop gets its first request served, and a
     * busy keep-alive client gets its next response with "Connection:
     * close" instead of racing a close with its next request. */
    if (w->slot == NULL)
        close_idle(w);
    if (w->nconns == 0) {
        drained(w);
        return;
    }
    if (w->cfg.graceful_timeout > 0) {
        ev_timer_set(&w->stop_timer, w->cfg.graceful_timeout, 0);
        ev_timer_start(w->loop, &w->stop_timer);
    }
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
    if (w->hooks->stop_signal)
        w->hooks->stop_signal(w->hooks_data, s->signum);
    /* Under a master, SIGINT is the fast stop (gunicorn's convention): the
     * master's own SIGINT reaches the workers of a terminal's process group. */
    if (s->signum == SIGQUIT || (s->signum == SIGINT && (w->stopping || w->slot)))
        stop_now(w);
    else
        ps_worker_stop(w);
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
    release_listeners(w); /* a lane closed, or a last stop that began while retiring */
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

static const ps_handler_t slot_handler = {
    .on_request = slot_on_request,
    .on_writable = slot_on_writable,
    .on_disconnect = slot_on_disconnect,
    .dispose = slot_dispose,
    .on_body = slot_on_body,
    .on_rejected = slot_on_rejected,
};

static const ps_handler_t slot_handler_async = {
    .on_request = slot_on_request,
    .on_writable = slot_on_writable,
    .on_disconnect = slot_on_disconnect,
    .dispose = slot_dispose,
    .on_body = slot_on_body,
    .on_rejected = slot_on_rejected,
    .async = 1,
};

void ps_worker_attach_slot(ps_worker_t *w, ps_slot_t *slot)
{
    w->slot = slot;
    w->ppid = getppid();
    w->inner_handler = w->handler;
    w->handler = w->async ? &slot_handler_async : &slot_handler;
    ev_timer_init(&w->heartbeat, on_heartbeat, 1.0, 1.0);
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
    w->handler_data = handler_data;
    w->async = handler->async;
    w->hooks = hooks ? hooks : &no_hooks;
    w->hooks_data = hooks_data;
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ev_prepare_init(&w->prepare, on_prepare);
    ev_prepare_start(w->loop, &w->prepare);
    ev_unref(w->loop); /* the prepare watcher alone does not keep the loop alive */
    gate_open(w);
    ev_init(&w->stop_timer, on_stop_timeout);
    ev_signal_init(&w->sigint, on_signal, SIGINT);
    ev_signal_init(&w->sigterm, on_signal, SIGTERM);
    ev_signal_init(&w->sigquit, on_signal, SIGQUIT);
    ev_signal_init(&w->sigusr1, on_signal, SIGUSR1);
    w->sigint.data = w->sigterm.data = w->sigquit.data = w->sigusr1.data = w;
    return 0;
}

/* Listeners are added before ps_worker_run(): the array may move. */
int ps_worker_add_listener(ps_worker_t *w, int fd)
{
    int is_unix = ps_net_is_unix(fd);
    if (is_unix < 0)
        return is_unix;
    int rc = ps_net_set_nonblocking(fd);
    if (rc < 0)
        return rc;
    ps_listener_t *ls = realloc(w->listeners, (w->nlisteners + 1) * sizeof(*ls));
    if (ls == NULL)
        return -ENOMEM;
    w->listeners = ls;
    ps_listener_t *l = &ls[w->nlisteners++];
    l->w = w;
    l->fd = fd;
    l->is_unix = is_unix;
    l->own = 0;
    l->shut_at_stop = 0;
    l->released = 0;
    l->gated = 0;
    l->local_len = 0;
    if (!is_unix) {
        ps_net_tune_listener(fd);
        l->local_len = ps_net_specific_address(fd, &l->local);
    }
    ev_io_init(&l->io, on_accept, fd, EV_READ);
    return 0;
}

void ps_worker_start(ps_worker_t *w)
{
    ev_signal_start(w->loop, &w->sigint);
    ev_signal_start(w->loop, &w->sigterm);
    ev_signal_start(w->loop, &w->sigquit);
    if (w->hooks->reopen_logs)
        ev_signal_start(w->loop, &w->sigusr1);
    /* Own (SO_REUSEPORT) listeners are this worker's alone: no herd there. */
    int gated = 0;
    for (uint32_t i = 0; i < w->nlisteners; i++)
        gated |= w->listeners[i].gated = w->gate_fd >= 0 && !w->listeners[i].own;
    if (gated) {
        ev_timer_start(w->loop, &w->gate_check);
        ev_unref(w->loop);
    }
    set_accepting(w, 1);
    if (w->slot) {
        beat(w);
        ev_timer_start(w->loop, &w->heartbeat);
        ev_unref(w->loop); /* the heartbeat alone does not keep the loop alive */
        w->slot->ready = 1;
    }
}

void ps_worker_finish(ps_worker_t *w)
{
    if (w->slot && ev_is_active(&w->heartbeat)) {
        ev_ref(w->loop);
        ev_timer_stop(w->loop, &w->heartbeat);
    }
    if (ev_is_active(&w->gate_check)) {
        ev_ref(w->loop);
        ev_timer_stop(w->loop, &w->gate_check);
    }
    set_accepting(w, 0);
    close_all(w);
    free_dead(w);
    ev_signal_stop(w->loop, &w->sigint);
    ev_signal_stop(w->loop, &w->sigterm);
    ev_signal_stop(w->loop, &w->sigquit);
    ev_signal_stop(w->loop, &w->sigusr1);
    ev_timer_stop(w->loop, &w->stop_timer);
}

void ps_worker_shut_at_stop(ps_worker_t *w, int fd)
{
    for (uint32_t i = 0; i < w->nlisteners; i++)
        if (w->listeners[i].fd == fd)
            w->listeners[i].shut_at_stop = 1;
}

int ps_worker_add_own_listener(ps_worker_t *w, int fd)
{
    int rc = ps_worker_add_listener(w, fd);
    if (rc == 0)
        w->listeners[w->nlisteners - 1].own = 1;
    return rc;
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
        gate_close(w);
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
