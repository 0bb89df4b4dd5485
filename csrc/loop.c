#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "net.h"

/* Connections accepted per listener wakeup, so one busy listener cannot
 * starve the connections already open. */
#define ACCEPT_BATCH 64

static void set_accepting(ps_worker_t *w, int on)
{
    if (w->accepting == (unsigned)on)
        return;
    w->accepting = on != 0;
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        if (on)
            ev_io_start(w->loop, &w->listeners[i].io);
        else
            ev_io_stop(w->loop, &w->listeners[i].io);
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

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_listener_t *l = ps_container_of(io, ps_listener_t, io);
    ps_worker_t *w = l->w;
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len;
        int fd = ps_net_accept(l->fd, &peer, &peer_len);
        if (fd == -EMFILE || fd == -ENFILE) {
            shed_one(w, l->fd);
            return;
        }
        if (fd < 0)
            return;
        if (!l->is_unix)
            ps_net_set_nodelay(fd);
        ps_conn_t *c = ps_conn_new(w, fd, &peer, peer_len, l->is_unix);
        if (c == NULL) {
            close(fd);
            return;
        }
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        if (++w->nconns >= w->cfg.limit_connections) {
            set_accepting(w, 0);
            return;
        }
    }
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
            ev_break(w->loop, EVBREAK_ALL);
    } else if (!w->accepting && w->nconns < w->cfg.limit_connections) {
        set_accepting(w, 1);
    }
}

static void free_dead(ps_worker_t *w)
{
    while (w->dead) {
        ps_conn_t *c = w->dead;
        w->dead = c->next_dead;
        w->handler->dispose(c);
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
    ev_break(w->loop, EVBREAK_ALL);
}

static void on_stop_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    stop_now(ps_container_of(t, ps_worker_t, stop_timer));
}

void ps_worker_stop(ps_worker_t *w)
{
    if (w->stopping)
        return;
    w->stopping = 1;
    set_accepting(w, 0);
    for (ps_conn_t *c = w->conns, *next; c; c = next) {
        next = c->next;
        ps_conn_stop_idle(c);
    }
    if (w->nconns == 0) {
        ev_break(w->loop, EVBREAK_ALL);
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
    if (s->signum == SIGQUIT || (s->signum == SIGINT && w->stopping))
        stop_now(w);
    else
        ps_worker_stop(w);
}

int ps_worker_init(ps_worker_t *w, const ps_config_t *cfg, const ps_handler_t *handler,
                   void *handler_data)
{
    memset(w, 0, sizeof(*w));
    w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOENV);
    if (w->loop == NULL)
        return -ENOMEM;
    w->cfg = *cfg;
    if (w->cfg.limit_connections == 0)
        w->cfg.limit_connections = 10000;
    w->handler = handler;
    w->handler_data = handler_data;
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ev_prepare_init(&w->prepare, on_prepare);
    ev_prepare_start(w->loop, &w->prepare);
    ev_unref(w->loop); /* the prepare watcher alone does not keep the loop alive */
    ev_init(&w->stop_timer, on_stop_timeout);
    ev_signal_init(&w->sigint, on_signal, SIGINT);
    ev_signal_init(&w->sigterm, on_signal, SIGTERM);
    ev_signal_init(&w->sigquit, on_signal, SIGQUIT);
    w->sigint.data = w->sigterm.data = w->sigquit.data = w;
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
    ev_io_init(&l->io, on_accept, fd, EV_READ);
    return 0;
}

void ps_worker_run(ps_worker_t *w)
{
    ev_signal_start(w->loop, &w->sigint);
    ev_signal_start(w->loop, &w->sigterm);
    ev_signal_start(w->loop, &w->sigquit);
    set_accepting(w, 1);
    ev_run(w->loop, 0);
    set_accepting(w, 0);
    close_all(w);
    free_dead(w);
    ev_signal_stop(w->loop, &w->sigint);
    ev_signal_stop(w->loop, &w->sigterm);
    ev_signal_stop(w->loop, &w->sigquit);
    ev_timer_stop(w->loop, &w->stop_timer);
}

void ps_worker_free(ps_worker_t *w)
{
    close_all(w);
    free_dead(w);
    if (w->loop) {
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
