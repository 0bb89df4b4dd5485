/* The ASGI websocket scope (asgi_ws.c) and what it uses of the ASGI layer.
 *
 * An upgrade request runs as an ASGI request cycle of asgi_http.c whose cycle
 * holds a ps_asgi_ws_t: receive() and send() go to asgi_ws.c, which talks
 * to the connection through wsconn.h once the application accepted, and
 * through the cycle's HTTP response path for a denial (the
 * websocket.http.response extension) or a refusal (403, 500). */
#ifndef PS_ASGI_WS_H
#define PS_ASGI_WS_H

#include "bridge.h"
#include "serve/wsconn.h"

typedef struct ps_asgi_ws ps_asgi_ws_t;
struct ps_asgi_ws_strings;

/* ---- the ASGI layer, for asgi_ws.c ---- */

/* asgi_awaitables.c: an awaitable done with value (stolen; NULL passes an exception on). */
PyObject *ps_asgi_ready(ps_asgi_t *ctx, PyObject *value);
/* The Future in *slot while it is pending, else a new one put there (a
 * wait_for that gave up cancelled the old one). New reference or NULL. */
PyObject *ps_asgi_waiter(ps_asgi_t *ctx, PyObject **slot);
/* Resolves *slot (a Future) unless done, and clears it; never raises.
 * Returns 1 when value was delivered, 0 when not (no Future, or done). */
int ps_asgi_resolve(ps_asgi_t *ctx, PyObject **slot, PyObject *value, int as_exception);
/* Fails *slot (a Future, or NULL) with ClientDisconnected and clears it;
 * never raises. */
void ps_asgi_fail_waiter(ps_asgi_t *ctx, PyObject **slot);
/* asgi_http.c: ClientDisconnected (borrowed). */
PyObject *ps_asgi_disconnected_error(ps_asgi_t *ctx);
/* Where asgi_ws.c keeps its interned strings, for the layer's lifetime. */
struct ps_asgi_ws_strings **ps_asgi_ws_strings_slot(ps_asgi_t *ctx);
/* An ASGI header list as slices (see asgi_http.c's view_headers): drop *keep
 * once done with them. */
Py_ssize_t ps_asgi_view_headers(PyObject *headers, ps_header_t **hs, size_t room, PyObject **keep);
/* One access-log line for the cycle's request with status. */
void ps_asgi_cycle_log(PyObject *cycle, int status);
/* Answers the request with a canned status (403, 500), logs it and
 * detaches the cycle. */
void ps_asgi_cycle_refuse(PyObject *cycle, int status);
/* websocket.http.response.start (start=1) or .body, through the cycle's
 * http.response.start/body. Returns an awaitable or NULL with an exception. */
PyObject *ps_asgi_cycle_deny(PyObject *cycle, PyObject *msg, int start);

/* ---- asgi_ws.c, for the ASGI layer ---- */

/* The WebSocket part of cycle (borrowed: the cycle owns the result) for
 * the checked handshake hs of exchange x. NULL with an exception. */
ps_asgi_ws_t *ps_asgi_ws_new(ps_asgi_t *ctx, PyObject *cycle, ps_exchange_t *x,
                             const ps_ws_handshake_t *hs);
void ps_asgi_ws_free(ps_asgi_ws_t *ws);
void ps_asgi_ws_strings_free(struct ps_asgi_ws_strings *s);
/* Turns the HTTP scope asgi_scope.c built into the websocket one. 0 or -1. */
int ps_asgi_ws_scope(ps_asgi_ws_t *ws, PyObject *scope);
/* receive() and send(message): awaitables, or NULL with an exception. */
PyObject *ps_asgi_ws_receive(ps_asgi_ws_t *ws);
PyObject *ps_asgi_ws_send(ps_asgi_ws_t *ws, PyObject *type, PyObject *msg);
/* 1 once websocket.accept went out. */
int ps_asgi_ws_accepted(const ps_asgi_ws_t *ws);
/* The application ended (raised: with an exception). Returns 1 when the
 * WebSocket was accepted (it is closed with 1000 or 1011 and left to the
 * connection), 0 when the cycle answers as HTTP (500) or the denial
 * response is cut. */
int ps_asgi_ws_finished(ps_asgi_ws_t *ws, int raised);
/* The connection is closing: the messages still held become receive()'s
 * last ones, ending with websocket.disconnect. */
void ps_asgi_ws_lost(ps_asgi_ws_t *ws);
/* The cycle was cut from its connection. */
void ps_asgi_ws_detached(ps_asgi_ws_t *ws);
int ps_asgi_ws_traverse(ps_asgi_ws_t *ws, visitproc visit, void *arg);
void ps_asgi_ws_clear(ps_asgi_ws_t *ws);

#endif
