#define _GNU_SOURCE
#include "master/master.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"
#include "base/net.h"

/* How long a worker gets between SIGABRT (watchdog) and SIGKILL, and a
 * quick stop between SIGQUIT and SIGKILL. */
#define ABORT_GRACE 1.0
#define QUIT_GRACE 1.0
/* Tick period while workers boot or retire (readiness is polled), else. */
#define TICK_FAST 0.1
#define TICK_SLOW 1.0
/* TTOU with --reuse-port: how long new connections are steered away from a
 * lane before it closes, for the handshakes already under way to land. */
#define LANE_DRAIN 1.0

enum { STOP_NONE, STOP_GRACEFUL, STOP_QUICK };

/* --reuse-port lanes. Besides the shared sockets, each worker accepts on its
 * lane: one more SO_REUSEPORT socket per TCP listener, which the kernel gives
 * its share of new connections. The master owns the lanes and a worker's
 * replacement (rolling restart, recycling, a crash) takes over its lane, so a
 * connection queued there waits for the replacement instead of being reset
 * when the old worker closes the socket.
 *
 * A lane closes only when the worker count drops (TTOU), in two steps. First
 * its worker retires while, for LANE_DRAIN seconds, a socket filter steers
 * every new connection to the group's first socket (the shared one, which
 * every worker serves) and the lane's worker keeps serving the connections
 * already on their way to its lane. Then the master closes its copy and the
 * worker is told to release the lane (take its queue to the last connection
 * and shut the socket) as it stops; once it has, the filter goes. */

typedef struct {
    pid_t pid;             /* 0: the slot is free */
    unsigned retiring : 1; /* to be stopped once enough others are ready */
    unsigned termed : 1;   /* told to stop: its exit is expected */
    unsigned aborted : 1;  /* the watchdog sent SIGABRT */
    unsigned killed : 1;   /* ... and then SIGKILL */
    int lane;              /* --reuse-port lane, or -1 */
    int number;            /* 1-based, in titles, hooks and metrics: not the slot's index */
    double abort_at;
} worker_t;

typedef struct {
    ps_master_config_t cfg;
    const ps_master_ops_t *ops;
    void *data;
    struct ev_loop *loop;
    ps_slot_t *slots; /* shared with the workers */
    worker_t workers[PS_MASTER_MAX_SLOTS];
    uint32_t target;
    uint32_t boot_failures; /* workers in a row that died before ready */
    double respawn_after;   /* no spawning before this time (backoff) */
    double next_reload_poll;
    int stopping;
    double drain_until; /* --drain-delay: a SIGTERM's drain lasts until then (0: none) */
    int exit_code;
    int sig_pipe[2];
    sigset_t saved_mask;
    ev_io sig_io;
    ev_timer tick;
    ev_timer stop_timer;
    /* Lane k's sockets are lane_fds[k * cfg.nlisten + j], one per listener j
     * (-1 where it is not a TCP SO_REUSEPORT one). Lanes below nlanes are open. */
    int *lane_fds;
    uint32_t nlanes;
    double lanes_close_at; /* lanes at and above the target close then (0: none) */
    int steering;          /* the TTOU socket filter is attached */
    /* --metrics-bind: the workers' counters (shared, one block per slot),
     * the exited workers' totals, the restarts by cause, the endpoint. */
    ps_metrics_t *metrics;
    ps_metrics_t folded;
    uint64_t restarts[PS_METRICS_RESTARTS];
    ps_metrics_server_t *metrics_server;
} ps_master_t;

static const int handled_signals[] = {SIGINT,  SIGTERM, SIGQUIT, SIGHUP,
                                      SIGTTIN, SIGTTOU, SIGUSR1, SIGCHLD};

/* The signal handler's only state: where to write the signal number. */
static int sig_pipe_w = -1;

double ps_master_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void logf_(ps_master_t *m, ps_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void logf_(ps_master_t *m, ps_log_level_t level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    m->ops->log(m->data, level, msg);
}

static void on_os_signal(int signo)
{
    int saved = errno;
    unsigned char c = (unsigned char)signo;
    ssize_t rc = write(sig_pipe_w, &c, 1);
    PS_UNUSED(rc); /* a full pipe already holds a wakeup */
    errno = saved;
}

static uint32_t count_active(ps_master_t *m, int ready_only)
{
    uint32_t n = 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        worker_t *w = &m->workers[i];
        if (w->pid && !w->retiring && !w->termed && (!ready_only || m->slots[i].ready))
            n++;
    }
    return n;
}

static uint32_t count_live(ps_master_t *m)
{
    uint32_t n = 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        n += m->workers[i].pid != 0;
    return n;
}

static void signal_worker(ps_master_t *m, int i, int signo)
{
    worker_t *w = &m->workers[i];
    if (w->pid == 0)
        return;
    if (signo == SIGTERM || signo == SIGQUIT || signo == SIGKILL)
        w->termed = 1;
    kill(w->pid, signo);
}

static int *lane_row(ps_master_t *m, uint32_t lane)
{
    return &m->lane_fds[(size_t)lane * m->cfg.nlisten];
}

static void steer(ps_master_t *m, int on)
{
    if (m->steering == on)
        return;
    m->steering = on;
    for (uint32_t j = 0; j < m->cfg.nlisten; j++) {
        if (lane_row(m, 0)[j] < 0)
            continue; /* not a TCP SO_REUSEPORT listener */
        int rc = ps_net_steer_to_first(m->cfg.listen_fds[j], on);
        if (rc < 0)
            logf_(m, PS_LOG_WARNING, "Cannot steer --reuse-port connections: %s", strerror(-rc));
    }
}

/* Opens lanes up to the target and closes those above it, LANE_DRAIN
 * seconds after they became extra (see above). The workers of a closed lane
 * are told to release it: the flag is read at their stop and by their
 * heartbeat, and acknowledged with 2. */
static void sync_lanes(ps_master_t *m)
{
    if (m->lane_fds == NULL)
        return;
    double now = ps_master_now();
    if (m->nlanes <= m->target) {
        m->lanes_close_at = 0;
    } else if (m->lanes_close_at == 0) {
        m->lanes_close_at = now + LANE_DRAIN;
        steer(m, 1);
    }
    for (; m->nlanes < m->target; m->nlanes++) {
        int *row = lane_row(m, m->nlanes);
        for (uint32_t j = 0; j < m->cfg.nlisten; j++) {
            int fd = ps_net_listen_like(m->cfg.listen_fds[j], m->cfg.backlog);
            if (fd < 0 && fd != -ENOTSUP)
                logf_(m, PS_LOG_WARNING, "Cannot open a --reuse-port socket: %s", strerror(-fd));
            row[j] = fd < 0 ? -1 : fd;
        }
    }
    while (m->nlanes > m->target && m->lanes_close_at && now >= m->lanes_close_at) {
        m->nlanes--;
        int *row = lane_row(m, m->nlanes);
        for (uint32_t j = 0; j < m->cfg.nlisten; j++) {
            if (row[j] >= 0)
                close(row[j]);
            row[j] = -1;
        }
        for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
            if (m->workers[i].pid && m->workers[i].lane == (int)m->nlanes) {
                m->slots[i].release = 1;
                m->workers[i].lane = -1;
            }
        }
    }
    if (m->nlanes <= m->target)
        m->lanes_close_at = 0;
    int releasing = 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        releasing |= m->workers[i].pid && m->slots[i].release == 1;
    steer(m, m->lanes_close_at > 0 || releasing);
}

/* The lowest open lane below the target that no active worker serves, or -1. */
static int free_lane(ps_master_t *m)
{
    for (uint32_t k = 0; k < m->nlanes && k < m->target; k++) {
        int taken = 0;
        for (int i = 0; i < PS_MASTER_MAX_SLOTS && !taken; i++) {
            worker_t *w = &m->workers[i];
            taken = w->pid && !w->retiring && !w->termed && w->lane == (int)k;
        }
        if (!taken)
            return (int)k;
    }
    return -1;
}

static void close_lanes(ps_master_t *m)
{
    for (size_t i = 0; m->lane_fds && i < (size_t)m->nlanes * m->cfg.nlisten; i++)
        if (m->lane_fds[i] >= 0)
            close(m->lane_fds[i]);
    free(m->lane_fds);
    m->lane_fds = NULL;
    m->nlanes = 0;
}

/* In the child right after fork: drop the master's signal plumbing and
 * loop, keep only its own lane, then become a worker. Never returns. */
static void become_worker(ps_master_t *m, int index)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < PS_ARRAY_LEN(handled_signals); i++) {
        int s = handled_signals[i];
        /* USR1 is ignored until the worker's loop installs its own handler:
         * a log reopen sent while the worker boots must not kill it. */
        int ignore = s == SIGHUP || s == SIGTTIN || s == SIGTTOU || s == SIGUSR1;
        sa.sa_handler = ignore ? SIG_IGN : SIG_DFL;
        sigaction(s, &sa, NULL);
    }
    close(m->sig_pipe[0]);
    close(m->sig_pipe[1]);
    sig_pipe_w = -1;
    ev_loop_destroy(m->loop);
    m->loop = NULL;
    /* The endpoint's listening socket is the worker's Python side to close. */
    ps_metrics_server_forget(m->metrics_server);
    m->metrics_server = NULL;
    int lane = m->workers[index].lane;
    uint32_t nown = 0;
    int *own = m->lane_fds ? lane_row(m, lane < 0 ? 0 : (uint32_t)lane) : NULL;
    for (uint32_t k = 0; k < m->nlanes; k++) {
        int *row = lane_row(m, k);
        for (uint32_t j = 0; j < m->cfg.nlisten; j++) {
            if (row[j] < 0)
                continue;
            if ((int)k == lane)
                own[nown++] = row[j];
            else
                close(row[j]);
        }
    }
    sigprocmask(SIG_SETMASK, &m->saved_mask, NULL);
    m->ops->run_worker(m->data, m->workers[index].number, &m->slots[index], own, nown);
    _exit(1);
}

/* The lowest worker number that no worker in service holds: a retiring one
 * (HUP, TTOU, recycling) gives its number to its replacement, so the numbers
 * stay 1..workers. */
static int free_number(ps_master_t *m)
{
    for (int number = 1;; number++) {
        int taken = 0;
        for (int i = 0; i < PS_MASTER_MAX_SLOTS && !taken; i++) {
            const worker_t *w = &m->workers[i];
            taken = w->pid && !w->retiring && !w->termed && w->number == number;
        }
        if (!taken)
            return number;
    }
}

/* Forks a worker into free slot `index`, serving `lane`. Returns 0 or -errno. */
static int spawn(ps_master_t *m, int index, int lane)
{
    ps_slot_t *s = &m->slots[index];
    int number = free_number(m);
    memset((void *)s, 0, sizeof(*s));
    s->heartbeat = ps_master_now();
    s->master_pid = (int32_t)getpid();
    s->metrics = m->metrics ? &m->metrics[index] : NULL;
    if (m->cfg.max_requests > 0) {
        uint64_t jitter = m->cfg.max_requests_jitter;
        s->max_requests = m->cfg.max_requests + (jitter ? (uint64_t)random() % (jitter + 1) : 0);
    }
    if (m->ops->pre_fork)
        m->ops->pre_fork(m->data, number);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    m->ops->before_fork(m->data);
    m->workers[index].lane = lane; /* read by the child, with the number */
    m->workers[index].number = number;
    pid_t pid = fork();
    if (pid == 0)
        become_worker(m, index);
    int err = errno;
    m->ops->after_fork_parent(m->data);
    sigprocmask(SIG_SETMASK, &m->saved_mask, NULL);
    if (pid < 0) {
        logf_(m, PS_LOG_ERROR, "Cannot fork a worker: %s", strerror(err));
        return -err;
    }
    memset(&m->workers[index], 0, sizeof(m->workers[index]));
    m->workers[index].pid = pid;
    m->workers[index].lane = lane;
    m->workers[index].number = number;
    logf_(m, PS_LOG_INFO, "Booting worker %d with pid %d", number, (int)pid);
    return 0;
}

static int free_slot(ps_master_t *m)
{
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        if (m->workers[i].pid == 0)
            return i;
    return -1;
}

/* Brings the worker count to the target: spawns the missing ones, stops
 * extra ones, and stops retiring workers only while enough others are
 * ready to serve, so capacity never drops below the target. */
static void manage(ps_master_t *m)
{
    if (m->stopping)
        return;
    uint32_t active = count_active(m, 0);
    /* Extra workers (TTOU) retire from the highest lane down: theirs close. */
    for (; active > m->target; active--) {
        int victim = -1;
        for (int i = PS_MASTER_MAX_SLOTS - 1; i >= 0; i--) {
            worker_t *w = &m->workers[i];
            if (w->pid && !w->retiring && !w->termed &&
                (victim < 0 || w->lane > m->workers[victim].lane))
                victim = i;
        }
        if (victim < 0)
            break;
        m->workers[victim].retiring = 1;
    }
    sync_lanes(m);
    if (active < m->target && ps_master_now() < m->respawn_after)
        active = m->target; /* backing off after boot failures: the tick retries */
    for (; active < m->target; active++) {
        int i = free_slot(m);
        if (i < 0 || spawn(m, i, free_lane(m)) < 0)
            break;
    }
    uint32_t serving = count_active(m, 1);
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        serving += m->workers[i].retiring && !m->workers[i].termed && m->slots[i].ready;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        worker_t *w = &m->workers[i];
        if (!w->pid || !w->retiring || w->termed)
            continue;
        if (w->lane >= (int)m->target && m->slots[i].ready)
            continue; /* it serves a lane that is about to close: not yet */
        if (!m->slots[i].ready) {
            signal_worker(m, i, SIGTERM);
        } else if (serving > m->target) {
            logf_(m, PS_LOG_INFO, "Stopping retired worker (pid %d)", (int)w->pid);
            signal_worker(m, i, SIGTERM);
            serving--;
        }
    }
}

/* Gives the workers grace seconds before they are killed. */
static void arm_stop_timer(ps_master_t *m, double grace)
{
    ev_timer_stop(m->loop, &m->stop_timer);
    ev_timer_set(&m->stop_timer, grace, 0);
    ev_timer_start(m->loop, &m->stop_timer);
}

/* drain: the stop is SIGTERM's and --drain-delay is set: the workers are
 * told (their slots) to serve on for the delay before their graceful
 * stop, and get it on top of their graceful timeout. */
static void begin_stop(ps_master_t *m, int how, int drain)
{
    if (m->stopping >= how)
        return;
    m->stopping = how;
    drain = drain && how == STOP_GRACEFUL && m->cfg.drain_delay > 0;
    m->drain_until = drain ? ps_master_now() + m->cfg.drain_delay : 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        m->slots[i].final_stop = 1;
        __atomic_store_n(&m->slots[i].drain, (uint32_t)drain, __ATOMIC_SEQ_CST);
    }
    int signo = how == STOP_QUICK ? SIGQUIT : SIGTERM;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        signal_worker(m, i, signo);
    if (count_live(m) == 0) {
        ev_break(m->loop, EVBREAK_ALL);
        return;
    }
    double grace = how == STOP_QUICK ? QUIT_GRACE : m->cfg.graceful_timeout + QUIT_GRACE;
    arm_stop_timer(m, grace + (drain ? m->cfg.drain_delay : 0));
}

/* A second SIGTERM, or a SIGINT, during a drain: the workers skip the
 * rest of it (their second SIGTERM) and stop gracefully now. The slots
 * say so first: a worker that had not yet taken the first SIGTERM gets
 * the two as one (signals do not queue), and must not drain then.
 * Returns 0 when there is no drain under way. */
static int cut_drain(ps_master_t *m, const char *name)
{
    if (m->drain_until == 0 || ps_master_now() >= m->drain_until)
        return 0;
    m->drain_until = 0;
    logf_(m, PS_LOG_INFO,
          "Handling signal: %s: ending the drain: stopping the workers gracefully now", name);
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        __atomic_store_n(&m->slots[i].drain, 0, __ATOMIC_SEQ_CST);
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++)
        signal_worker(m, i, SIGTERM);
    arm_stop_timer(m, m->cfg.graceful_timeout + QUIT_GRACE);
    return 1;
}

static void on_stop_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_master_t *m = ps_container_of(t, ps_master_t, stop_timer);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        if (m->workers[i].pid) {
            logf_(m, PS_LOG_WARNING, "Worker (pid %d) did not stop in time: killing it",
                  (int)m->workers[i].pid);
            signal_worker(m, i, SIGKILL);
        }
    }
}

static void log_exit(ps_master_t *m, worker_t *w, int status)
{
    int pid = (int)w->pid;
    if (w->aborted) {
        logf_(m, PS_LOG_ERROR, "Worker (pid %d) stopped after WORKER TIMEOUT", pid);
        return;
    }
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (w->termed && code == 0)
            logf_(m, PS_LOG_INFO, "Worker exiting (pid %d)", pid);
        else
            logf_(m, PS_LOG_ERROR, "Worker (pid %d) exited with code %d", pid, code);
        return;
    }
    int sig = WTERMSIG(status);
    if (sig == SIGKILL && !w->termed)
        logf_(m, PS_LOG_ERROR, "Worker (pid %d) was sent SIGKILL! Perhaps out of memory?", pid);
    else if (!(w->termed && (sig == SIGTERM || sig == SIGQUIT || sig == SIGKILL)))
        logf_(m, PS_LOG_ERROR, "Worker (pid %d) was killed by signal %d (%s)", pid, sig,
              strsignal(sig));
    else
        logf_(m, PS_LOG_INFO, "Worker (pid %d) stopped by signal %d", pid, sig);
}

/* Collects every exited worker, logs why it exited, and replaces it. */
static void reap(ps_master_t *m)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int i;
        for (i = 0; i < PS_MASTER_MAX_SLOTS && m->workers[i].pid != pid; i++)
            ;
        if (i == PS_MASTER_MAX_SLOTS)
            continue;
        worker_t *w = &m->workers[i];
        log_exit(m, w, status);
        if (!w->termed && !w->aborted)
            m->restarts[PS_METRICS_RESTART_CRASH]++;
        if (m->metrics) {
            /* Its counters stay in the totals; the block is clean for the next one. */
            ps_metrics_fold(&m->folded, &m->metrics[i]);
            memset(&m->metrics[i], 0, sizeof(m->metrics[i]));
        }
        /* 3: the application cannot be imported or started; 2: it is not
         * what the options say (--asgi-app naming a WSGI one). Neither
         * gets better by forking again. */
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        int boot_failed = (code == 2 || code == 3) && !m->slots[i].ready && !w->termed;
        if (!m->slots[i].ready && !w->termed) {
            /* Died while booting: back off (0.2 s doubling up to 5 s) rather
             * than fork in a tight loop. */
            m->boot_failures++;
            double delay = 0.1 * (double)(1u << PS_MIN(m->boot_failures, 6u));
            m->respawn_after = ps_master_now() + PS_MIN(delay, 5.0);
        }
        memset(w, 0, sizeof(*w));
        m->slots[i].ready = 0;
        if (boot_failed && !m->cfg.reload) {
            logf_(m, PS_LOG_ERROR, "Worker failed to boot: stopping");
            m->exit_code = code;
            begin_stop(m, STOP_QUICK, 0);
        }
    }
    if (m->stopping && count_live(m) == 0)
        ev_break(m->loop, EVBREAK_ALL);
}

/* Retires every worker (a rolling restart); cause: PS_METRICS_RESTART_*. */
static void retire_all(ps_master_t *m, int cause)
{
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        worker_t *w = &m->workers[i];
        if (w->pid && !w->termed) {
            m->restarts[cause] += !w->retiring;
            w->retiring = 1;
        }
    }
}

/* The stop signal's line, so that the wait before "Finished" is explained
 * (each worker says what it drains). */
static void log_stop(ps_master_t *m, const char *name, int how, int drain)
{
    uint32_t n = count_live(m);
    if (m->stopping >= how)
        return;
    if (how == STOP_QUICK)
        logf_(m, PS_LOG_INFO, "Handling signal: %s: stopping %u worker%s now", name, n,
              n == 1 ? "" : "s");
    else if (drain && m->cfg.drain_delay > 0)
        logf_(m, PS_LOG_INFO,
              "Handling signal: %s: draining %u worker%s for %g s (health checks answer 503), "
              "then stopping them gracefully (requests in progress get up to %g s)",
              name, n, n == 1 ? "" : "s", m->cfg.drain_delay, m->cfg.graceful_timeout);
    else
        logf_(m, PS_LOG_INFO,
              "Handling signal: %s: stopping %u worker%s gracefully (requests in progress get "
              "up to %g s)",
              name, n, n == 1 ? "" : "s", m->cfg.graceful_timeout);
}

static void handle_signal(ps_master_t *m, int signo)
{
    switch (signo) {
    case SIGCHLD:
        reap(m);
        break;
    case SIGINT:
        if (cut_drain(m, "int"))
            break;
        log_stop(m, "int", m->stopping ? STOP_QUICK : STOP_GRACEFUL, 0);
        begin_stop(m, m->stopping ? STOP_QUICK : STOP_GRACEFUL, 0);
        break;
    case SIGTERM:
        if (cut_drain(m, "term"))
            break;
        log_stop(m, "term", STOP_GRACEFUL, 1);
        begin_stop(m, STOP_GRACEFUL, 1);
        break;
    case SIGQUIT:
        log_stop(m, "quit", STOP_QUICK, 0);
        begin_stop(m, STOP_QUICK, 0);
        break;
    case SIGHUP:
        if (!m->stopping) {
            logf_(m, PS_LOG_INFO, "Handling signal: hup (rolling restart)");
            if (m->ops->check_restart == NULL || m->ops->check_restart(m->data) == 0)
                retire_all(m, PS_METRICS_RESTART_HUP);
        }
        break;
    case SIGTTIN:
        if (m->target < PS_MASTER_MAX_SLOTS / 2)
            m->target++;
        logf_(m, PS_LOG_INFO, "Handling signal: ttin (%u workers)", m->target);
        break;
    case SIGTTOU:
        if (m->target > 1)
            m->target--;
        logf_(m, PS_LOG_INFO, "Handling signal: ttou (%u workers)", m->target);
        break;
    case SIGUSR1:
        m->ops->reopen_logs(m->data);
        /* A booting worker ignores USR1 until its loop handles it: the slot
         * tells it to reopen as it starts, or it would keep writing to the
         * rotated file. The worker sets ready, then reads the flag; the
         * master sets the flag, then reads ready: one of them sees the
         * other's store (both sequentially consistent), so none is missed. */
        for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
            ps_slot_t *s = &m->slots[i];
            if (m->workers[i].pid == 0)
                continue;
            if (!__atomic_load_n(&s->ready, __ATOMIC_SEQ_CST))
                __atomic_store_n(&s->reopen_logs, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&s->ready, __ATOMIC_SEQ_CST))
                kill(m->workers[i].pid, SIGUSR1);
        }
        break;
    }
}

static void on_sig_pipe(struct ev_loop *loop, ev_io *io, int revents)
{
    ps_master_t *m = ps_container_of(io, ps_master_t, sig_io);
    PS_UNUSED(loop);
    PS_UNUSED(revents);
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(m->sig_pipe[0], buf, sizeof(buf))) > 0)
        for (ssize_t i = 0; i < n; i++)
            handle_signal(m, buf[i]);
    manage(m);
}

static void watch_worker(ps_master_t *m, int i, double now)
{
    worker_t *w = &m->workers[i];
    ps_slot_t *s = &m->slots[i];
    if (w->aborted) {
        if (!w->killed && now - w->abort_at >= ABORT_GRACE) {
            w->killed = 1;
            signal_worker(m, i, SIGKILL);
        }
        return;
    }
    if (m->cfg.timeout > 0 && !s->ready && !w->termed && now - s->heartbeat > m->cfg.timeout) {
        /* Still booting (importing the app, lifespan startup) after the
         * timeout: the heartbeat is the spawn time until the loop runs. */
        logf_(m, PS_LOG_ERROR, "WORKER TIMEOUT (pid %d) while booting", (int)w->pid);
        w->aborted = 1;
        w->abort_at = now;
        m->restarts[PS_METRICS_RESTART_WATCHDOG]++;
        kill(w->pid, SIGABRT);
        return;
    }
    if (m->cfg.timeout > 0 && s->ready && now - s->heartbeat > m->cfg.timeout) {
        char method[PS_SLOT_METHOD_LEN], path[PS_SLOT_PATH_LEN];
        memcpy(method, s->method, sizeof(method));
        memcpy(path, s->path, sizeof(path));
        method[sizeof(method) - 1] = path[sizeof(path) - 1] = '\0';
        if (s->requests > 0)
            logf_(m, PS_LOG_ERROR, "WORKER TIMEOUT (pid %d) handling %s %s", (int)w->pid, method,
                  path);
        else
            logf_(m, PS_LOG_ERROR, "WORKER TIMEOUT (pid %d)", (int)w->pid);
        w->aborted = 1;
        w->abort_at = now;
        m->restarts[PS_METRICS_RESTART_WATCHDOG]++;
        kill(w->pid, SIGABRT);
        return;
    }
    if (w->retiring || w->termed || !s->ready)
        return;
    if (s->retire) {
        logf_(m, PS_LOG_INFO, "Worker (pid %d) reached %llu requests: retiring", (int)w->pid,
              (unsigned long long)s->requests);
        w->retiring = 1;
        m->restarts[PS_METRICS_RESTART_MAX_REQUESTS]++;
    } else if (m->cfg.max_rss_kib > 0) {
        uint64_t rss = ps_metrics_rss(w->pid) / 1024;
        if (rss > m->cfg.max_rss_kib) {
            logf_(m, PS_LOG_WARNING, "Worker (pid %d) uses %llu MiB (max-rss %llu MiB): retiring",
                  (int)w->pid, (unsigned long long)(rss / 1024),
                  (unsigned long long)(m->cfg.max_rss_kib / 1024));
            w->retiring = 1;
            m->restarts[PS_METRICS_RESTART_MAX_RSS]++;
        }
    }
}

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    ps_master_t *m = ps_container_of(t, ps_master_t, tick);
    PS_UNUSED(revents);
    double now = ps_master_now();
    int pending = 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        if (m->workers[i].pid == 0)
            continue;
        watch_worker(m, i, now);
        if (m->slots[i].ready)
            m->boot_failures = 0;
        pending |= !m->slots[i].ready || m->workers[i].retiring || m->workers[i].aborted;
    }
    pending |= m->steering;
    if (m->cfg.reload && !m->stopping && now >= m->next_reload_poll) {
        m->next_reload_poll = now + 1.0;
        if (m->ops->poll_reload(m->data)) {
            logf_(m, PS_LOG_WARNING, "Changes detected: restarting the workers");
            m->boot_failures = 0;
            m->respawn_after = 0;
            retire_all(m, PS_METRICS_RESTART_RELOAD);
        }
    }
    if (m->ops->on_tick)
        m->ops->on_tick(m->data);
    manage(m);
    t->repeat = pending ? TICK_FAST : TICK_SLOW;
    ev_timer_again(loop, t);
}

static int install_signals(ps_master_t *m, struct sigaction *saved)
{
    if (pipe2(m->sig_pipe, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    sig_pipe_w = m->sig_pipe[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_os_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < PS_ARRAY_LEN(handled_signals); i++)
        sigaction(handled_signals[i], &sa, &saved[i]);
    return 0;
}

static void restore_signals(ps_master_t *m, const struct sigaction *saved)
{
    for (size_t i = 0; i < PS_ARRAY_LEN(handled_signals); i++)
        sigaction(handled_signals[i], &saved[i], NULL);
    close(m->sig_pipe[0]);
    close(m->sig_pipe[1]);
    sig_pipe_w = -1;
}

static int number_in_service(const ps_master_t *m, int number)
{
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        const worker_t *w = &m->workers[i];
        if (w->pid && !w->retiring && !w->termed && w->number == number)
            return 1;
    }
    return 0;
}

/* The endpoint's exposition: the live workers' counters summed with the
 * exited ones', the restarts, each worker's resident memory. */
static int render_metrics(void *data, ps_buf_t *out)
{
    ps_master_t *m = data;
    const ps_metrics_t *live[PS_MASTER_MAX_SLOTS];
    ps_metrics_worker_t workers[PS_MASTER_MAX_SLOTS];
    uint32_t n = 0;
    uint32_t nrss = 0;
    for (int i = 0; i < PS_MASTER_MAX_SLOTS; i++) {
        const worker_t *w = &m->workers[i];
        if (w->pid == 0)
            continue;
        live[n++] = &m->metrics[i];
        /* A worker on its way out whose number its replacement holds already
         * is left out of the per-worker series: one series per number. */
        if ((w->retiring || w->termed) && number_in_service(m, w->number))
            continue;
        workers[nrss++] =
            (ps_metrics_worker_t){(uint32_t)w->number, (int)w->pid, ps_metrics_rss((int)w->pid)};
    }
    ps_metrics_view_t v = {live, n, &m->folded, m->restarts, workers, nrss};
    return ps_metrics_render(&v, out);
}

static int master_loop(ps_master_t *m)
{
    struct sigaction saved[PS_ARRAY_LEN(handled_signals)];
    int rc = install_signals(m, saved);
    if (rc < 0)
        return rc;
    ev_io_init(&m->sig_io, on_sig_pipe, m->sig_pipe[0], EV_READ);
    ev_io_start(m->loop, &m->sig_io);
    ev_init(&m->tick, on_tick);
    m->tick.repeat = TICK_FAST;
    ev_timer_again(m->loop, &m->tick);
    ev_init(&m->stop_timer, on_stop_timeout);
    manage(m);
    ev_run(m->loop, 0);
    /* Stopped: every worker has exited (or was never started). */
    ev_io_stop(m->loop, &m->sig_io);
    ev_timer_stop(m->loop, &m->tick);
    ev_timer_stop(m->loop, &m->stop_timer);
    reap(m);
    restore_signals(m, saved);
    return 0;
}

int ps_master_run(const ps_master_config_t *cfg, const ps_master_ops_t *ops, void *data)
{
    ps_master_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->cfg = *cfg;
    m->ops = ops;
    m->data = data;
    m->target = PS_MAX(1, PS_MIN(cfg->workers, PS_MASTER_MAX_SLOTS / 2));
    m->sig_pipe[0] = m->sig_pipe[1] = -1;
    if (cfg->reuse_port && cfg->nlisten > 0) {
        m->lane_fds = malloc(sizeof(int) * cfg->nlisten * (PS_MASTER_MAX_SLOTS / 2));
        if (m->lane_fds == NULL) {
            free(m);
            return -ENOMEM;
        }
    }
    srandom((unsigned)getpid() ^ (unsigned)time(NULL));
    int rc = -ENOMEM;
    m->slots = mmap(NULL, sizeof(ps_slot_t) * PS_MASTER_MAX_SLOTS, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m->slots == MAP_FAILED)
        goto done;
    m->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOENV);
    if (m->loop == NULL)
        goto done;
    if (ops->prepare_loop)
        ops->prepare_loop(data, m->loop);
    if (cfg->metrics_fd >= 0) {
        m->metrics = mmap(NULL, sizeof(ps_metrics_t) * PS_MASTER_MAX_SLOTS, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m->metrics == MAP_FAILED) {
            m->metrics = NULL;
            goto done;
        }
        m->metrics_server = ps_metrics_server_new(m->loop, cfg->metrics_fd, render_metrics, m);
        if (m->metrics_server == NULL)
            goto done;
    }
    sigprocmask(SIG_SETMASK, NULL, &m->saved_mask);
    rc = master_loop(m);
    if (rc == 0)
        rc = m->exit_code;
done:
    close_lanes(m);
    ps_metrics_server_free(m->metrics_server);
    if (m->metrics)
        munmap(m->metrics, sizeof(ps_metrics_t) * PS_MASTER_MAX_SLOTS);
    if (m->loop)
        ev_loop_destroy(m->loop);
    if (m->slots != MAP_FAILED && m->slots != NULL)
        munmap(m->slots, sizeof(ps_slot_t) * PS_MASTER_MAX_SLOTS);
    free(m);
    return rc;
}
