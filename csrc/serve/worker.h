/* A worker: one libev loop, its listening sockets and its connections.
 * Its state is wstate.h; accepting is listener.[ch]; a connection's socket
 * is sock.[ch], the protocols over it h1conn, h2conn and wsconn. This
 * header is what drives it (the bridge's calls). */
#ifndef PS_WORKER_H
#define PS_WORKER_H

#include "serve/listener.h"
#include "serve/wstate.h"

/* hooks: NULL for none; it must outlive the worker. Returns 0 or -errno. */
int ps_worker_init(ps_worker_t *w, const ps_config_t *cfg, const ps_handler_t *handler,
                   void *handler_data, const ps_worker_hooks_t *hooks, void *hooks_data);
/* Runs until a stop signal and every connection is done. */
void ps_worker_run(ps_worker_t *w);
/* The two halves of ps_worker_run for a loop driven from elsewhere (the
 * ASGI layer's selector): start accepting and watching signals (and put
 * the health check, --health-check-path, in front of every other layer);
 * then, once stopped, close what is left. */
void ps_worker_start(ps_worker_t *w);
void ps_worker_finish(ps_worker_t *w);
/* Stops accepting and finishes in-flight requests (graceful stop). */
void ps_worker_stop(ps_worker_t *w);
void ps_worker_free(ps_worker_t *w);
/* Runs this worker under a master: heartbeat and readiness in `slot`, the
 * request in progress recorded at dispatch, max-requests counted, SIGINT
 * stops at once (like SIGQUIT), and the worker stops when the master dies.
 * Call after ps_worker_init and before ps_worker_run. */
void ps_worker_attach_slot(ps_worker_t *w, ps_slot_t *slot);

#endif
