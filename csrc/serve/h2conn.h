/* A socket in HTTP/2 mode: an nghttp2 session (http2.h) driven by the
 * socket's events (a sock.h protocol), one ps_exchange_t per stream.
 *
 * A connection enters HTTP/2 mode in three ways: the client preface as its
 * first bytes (cleartext prior knowledge, h1conn.c), an HTTP/1.1 request with
 * `Upgrade: h2c` (h1conn.c; the request becomes stream 1), or, once TLS
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

#include "serve/exchange.h"
#include "codec/http1.h"
#include "serve/sock.h"

typedef struct ps_h2conn ps_h2conn_t;

/* Starts HTTP/2 on socket s between requests (prior knowledge, or ALPN
 * h2), taking it over (ps_sock_set_proto); cx is the connection's exchange
 * (HTTP/1's), whose TLS facts, trusted proxy and per-connection layer
 * state the streams share. preread holds the bytes already read (the
 * preface and what followed, may be empty). Queues our SETTINGS. Returns
 * 0 (s may be closed already), or -ENOMEM (s is left as it was: close it). */
int ps_h2conn_start(ps_sock_t *s, ps_exchange_t *cx, const char *preread, size_t n);

/* HTTP/1, before dispatching request r on s: an `Upgrade: h2c` request
 * without a body and with one HTTP2-Settings field is answered with 101
 * and becomes stream 1 of an HTTP/2 session (the unread input in s->rbuf
 * is the session's). Returns 0 when s switched (it may be closed already),
 * 1 when r is not such a request (serve it over HTTP/1), or -1 when the
 * HTTP2-Settings value is invalid or memory ran out (a 400 was queued as a
 * rejection: continue as after a handler). */
int ps_h2conn_upgrade(ps_sock_t *s, ps_exchange_t *cx, const ps_request_t *r);

/* Graceful stop: GOAWAY, open streams finish, then the connection closes. */
void ps_h2conn_going_away(ps_h2conn_t *hc);

#endif
