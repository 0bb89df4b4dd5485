/* A connection in HTTP/2 mode: an nghttp2 session (http2.h) driven by the
 * connection's watchers, one ps_exchange_t per stream.
 *
 * A connection enters HTTP/2 mode in three ways: the client preface as its
 * first bytes (cleartext prior knowledge, conn.c), an HTTP/1.1 request with
 * `Upgrade: h2c` (conn.c; the request becomes stream 1), or, once TLS
 * negotiates ALPN "h2", ps_h2conn_start on the established connection.
 *
 * Each stream's exchange carries one request to the interface layer
 * unchanged: an asynchronous layer (ASGI) gets it once the head is complete
 * and reads the body as it arrives, its window given back as it reads; a
 * synchronous one (WSGI) gets it once the whole body is buffered (in memory
 * up to the spool threshold, then in a spool file, never past
 * --limit-request-body), as over HTTP/1. A client's RST_STREAM reaches the
 * layer as on_disconnect; ps_exchange_abort resets the stream.
 *
 * write_blocking (WSGI's write()) on a shared connection: it queues the
 * bytes, and while the stream holds more than its high-water mark it
 * flushes and reads frames (WINDOW_UPDATE) for at most the write deadline
 * (--timeout-request-header) without progress; past it the stream is reset
 * and the call fails as if the client had gone. Other streams' output
 * moves meanwhile; their applications wait, as they do for any WSGI call.
 *
 * Socket I/O goes through one read function and one writev function in
 * h2conn.c (the place a transport layer plugs in). None of the ps_h2conn_*
 * functions calls the bridge; stream events are dispatched from the loop.
 */
#ifndef PS_H2CONN_H
#define PS_H2CONN_H

#include <stddef.h>

#include "http1.h"

typedef struct ps_conn ps_conn_t;
typedef struct ps_h2conn ps_h2conn_t;

/* Starts HTTP/2 on an established connection between requests (prior
 * knowledge, or ALPN h2): preread holds the bytes already read (the
 * preface and what followed, may be empty). Queues our SETTINGS and
 * switches c to HTTP/2 mode (PS_CONN_H2). Returns 0, or -ENOMEM (c is
 * left as it was: close it). */
int ps_h2conn_start(ps_conn_t *c, const char *preread, size_t n);

/* conn.c, before dispatching request r of c: an `Upgrade: h2c` request
 * without a body and with one HTTP2-Settings field is answered with 101
 * and becomes stream 1 of an HTTP/2 session. Returns 0 when c switched,
 * 1 when r is not such a request (serve it over HTTP/1), or -1 when the
 * HTTP2-Settings value is invalid or memory ran out (a 400 was queued as a
 * rejection: continue as after a handler). */
int ps_h2conn_upgrade(ps_conn_t *c, const ps_request_t *r);

/* Graceful stop: GOAWAY, open streams finish, then the connection closes. */
void ps_h2conn_going_away(ps_h2conn_t *hc);

/* The connection is closing (ps_conn_close): every stream the interface
 * layer holds hears on_disconnect. */
void ps_h2conn_closed(ps_h2conn_t *hc);

/* The connection is being freed (ps_conn_free): disposes of the streams'
 * exchanges and frees hc. */
void ps_h2conn_free(ps_h2conn_t *hc);

#endif
