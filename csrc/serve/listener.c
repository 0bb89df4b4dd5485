#define _GNU_SOURCE
/* Accepting connections for a worker: the accept gate (EPOLLEXCLUSIVE),
 * the per-wakeup caps, EMFILE shedding, and releasing listeners at a stop.
 * The listener state lives in ps_worker_t (worker.h). */
#include "serve/listener.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/common.h"
#include "serve/h1conn.h"
#include "base/net.h"
#include "serve/wstate.h"

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

void ps_listener_set_accepting(ps_worker_t *w, int on)
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
void ps_listener_shed(int *reserve_fd, int lfd)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (*reserve_fd >= 0)
        close(*reserve_fd);
    int fd = ps_net_accept(lfd, &ss, &len);
    if (fd >= 0)
        close(fd);
    *reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
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
            ps_listener_shed(&w->reserve_fd, l->fd);
            return;
        }
        if (fd == -EINVAL) {
            unwatch(w, l); /* shut down by another worker at the final stop */
            return;
        }
        if (fd < 0)
            return;
        /* TCP_NODELAY is inherited from the listener (set once there). */
        ps_h1conn_t *c = ps_h1conn_new(w, fd, &peer, peer_len, l->is_unix);
        if (c == NULL) {
            close(fd);
            return;
        }
        if (l->local_len) {
            c->s.local = &l->local;
            c->s.local_len = l->local_len;
        }
        if (l->proxy_protocol)
            ps_h1conn_expect_proxy_header(c);
        c->redirect = l->redirect;
        ps_sock_link(&c->s);
        int full = w->nconns >= w->cfg.limit_connections;
        /* ps_h1conn_speak_uwsgi closes what it refuses. */
        if (l->tls && ps_h1conn_start_tls(c, l->tls) < 0)
            ps_h1conn_close(c); /* out of memory: only this connection pays */
        else if (!l->uwsgi || ps_h1conn_speak_uwsgi(c) == 0)
            ps_h1conn_accepted(c); /* may close c */
        if (full) {
            ps_listener_set_accepting(w, 0);
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
void ps_listener_gate_open(ps_worker_t *w)
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

void ps_listener_gate_close(ps_worker_t *w)
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
void ps_listener_release(ps_worker_t *w)
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
    l->proxy_protocol = 0;
    l->uwsgi = 0;
    l->redirect = 0;
    l->local_len = 0;
    l->tls = is_unix ? NULL : w->cfg.tls; /* the per-bind rule: TLS is for TCP binds */
    if (!is_unix) {
        ps_net_tune_listener(fd);
        l->local_len = ps_net_specific_address(fd, &l->local);
    }
    ev_io_init(&l->io, on_accept, fd, EV_READ);
    return 0;
}

void ps_worker_shut_at_stop(ps_worker_t *w, int fd)
{
    for (uint32_t i = 0; i < w->nlisteners; i++)
        if (w->listeners[i].fd == fd)
            w->listeners[i].shut_at_stop = 1;
}

/* 1 when two listening sockets are bound to the same address. */
static int same_address(int a, int b)
{
    struct sockaddr_storage sa, sb;
    socklen_t la = sizeof(sa), lb = sizeof(sb);
    if (getsockname(a, (struct sockaddr *)&sa, &la) < 0 ||
        getsockname(b, (struct sockaddr *)&sb, &lb) < 0)
        return 0;
    return la == lb && memcmp(&sa, &sb, la) == 0;
}

void ps_worker_proxy_protocol(ps_worker_t *w, int fd)
{
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (l->fd == fd || (l->own && same_address(l->fd, fd)))
            l->proxy_protocol = 1;
    }
}

void ps_worker_uwsgi(ps_worker_t *w, int fd)
{
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (l->fd == fd || (l->own && same_address(l->fd, fd)))
            l->uwsgi = 1;
    }
}

void ps_worker_redirect_https(ps_worker_t *w, int fd)
{
    for (uint32_t i = 0; i < w->nlisteners; i++) {
        ps_listener_t *l = &w->listeners[i];
        if (l->fd == fd || (l->own && same_address(l->fd, fd))) {
            l->redirect = 1;
            l->tls = NULL;
        }
    }
}

int ps_worker_add_own_listener(ps_worker_t *w, int fd)
{
    int rc = ps_worker_add_listener(w, fd);
    if (rc == 0)
        w->listeners[w->nlisteners - 1].own = 1;
    return rc;
}

void ps_listener_start(ps_worker_t *w)
{
    /* Own (SO_REUSEPORT) listeners are this worker's alone: no herd there. */
    int gated = 0;
    for (uint32_t i = 0; i < w->nlisteners; i++)
        gated |= w->listeners[i].gated = w->gate_fd >= 0 && !w->listeners[i].own;
    if (gated) {
        ev_timer_start(w->loop, &w->gate_check);
        ev_unref(w->loop);
    }
    ps_listener_set_accepting(w, 1);
}

void ps_listener_finish(ps_worker_t *w)
{
    if (ev_is_active(&w->gate_check)) {
        ev_ref(w->loop);
        ev_timer_stop(w->loop, &w->gate_check);
    }
    ps_listener_set_accepting(w, 0);
}
