/* One connection: its input, parser, output queue, timers and the
 * request/response state machine.
 *
 * The core calls the interface layer (WSGI, ASGI) through ps_handler_t with
 * the connection's embedded exchange (exchange.h); the layer answers through
 * the exchange calls, which land in the ps_conn_* functions below. Those functions
 * never free the connection: a connection is closed at a safe point after the
 * handler callback returns, and its memory is released before the loop sleeps.
 */
#ifndef PS_CONN_H
#define PS_CONN_H

#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "buf.h"
#include "exchange.h"
#include "http1.h"
#include "proxy.h"
#include "transport.h"
#include "uwsgi.h"

typedef struct ps_conn ps_conn_t;

enum ps_conn_state {
    PS_CONN_IDLE,   /* reading a request head (or idle between requests) */
    PS_CONN_BODY,   /* head read, buffering the body of a synchronous request */
    PS_CONN_APP,    /* handed to the application */
    PS_CONN_FLUSH,  /* response complete, output still queued */
    PS_CONN_LINGER, /* answered and shut down, draining input before close */
    PS_CONN_WS,     /* upgraded to WebSocket: wsconn.c drives it */
    PS_CONN_H2,     /* HTTP/2: h2conn.c drives it */
    PS_CONN_CLOSED,
};

struct ps_conn {
    ps_exchange_t x; /* the request in progress, as the interface layer sees it */
    ps_worker_t *w;
    int fd;           /* t.fd, for the code that only needs the socket */
    ps_transport_t t; /* every read and write goes through it (plain or TLS) */
    uint8_t state;
    unsigned keep_alive : 1;
    unsigned is_unix : 1;
    unsigned in_handler : 1;
    unsigned resp_started : 1;
    unsigned resp_ended : 1;
    unsigned resp_chunked : 1;
    unsigned resp_no_body : 1;
    unsigned continue_sent : 1;
    unsigned failed : 1;       /* the socket is broken: no more output */
    unsigned aborted : 1;      /* close as soon as the handler returns */
    unsigned head_started : 1; /* bytes of the next request have arrived */
    unsigned sf_trailer : 1;   /* a chunk's CRLF follows the sendfile */
    unsigned body_wanted : 1;  /* on_body is owed once body bytes arrive */
    unsigned async : 1;        /* the current request's layer is asynchronous (ps_worker_route) */
    unsigned handshaking : 1;  /* TLS: no request is read before the handshake is done */
    unsigned proxyproto : 2;   /* PS_CONN_PP_*: a PROXY header still to settle */
    unsigned held : 1;         /* on the worker's held list (output sent before it sleeps) */
    unsigned held_new : 1;     /* ... with output held since the last pass over the list */
    int error_status;          /* a bad body seen while an asynchronous application runs */
    int spool_fd;              /* the body's spool file (see spool.h), or -1 */
    uint64_t spool_len;        /* bytes written to it */
    uint64_t spool_read;       /* bytes ps_conn_body_fill() took back from it */
    ev_io rio;
    ev_io wio;
    ev_timer timer;
    ps_http1_parser_t parser;
    /* A uwsgi listener's connection parses with this instead (NULL: HTTP). */
    ps_uwsgi_parser_t *uw;
    ps_buf_t rbuf;     /* received bytes not parsed yet */
    ps_buf_t body;     /* decoded body bytes not read by the application yet */
    ps_buf_t wbuf;     /* output not accepted by the kernel yet */
    int64_t resp_left; /* body bytes still due under Content-Length, or -1 */
    int sf_fd;         /* sendfile in progress: file, offset, bytes left */
    int64_t sf_off;
    uint64_t sf_left;
    ev_tstamp head_deadline; /* the head must be complete by then (0: not started) */
    uint64_t requests;
    struct ps_wsconn *ws; /* WebSocket mode (wsconn.h), freed with the connection */
    struct ps_h2conn *h2; /* HTTP/2 mode (h2conn.h), freed with the connection */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    const struct sockaddr_storage *local; /* the listener's, when specific */
    socklen_t local_len;
    ps_conn_t *prev, *next; /* the worker's live connections */
    ps_conn_t *next_dead;
    ps_conn_t *next_held;
    uint64_t metrics_start; /* --metrics-bind: the request's dispatch (0: none counting) */
};

/* Called by the worker for a freshly accepted socket; decides whether the
 * peer is a trusted proxy. Returns NULL on OOM. */
ps_conn_t *ps_conn_new(ps_worker_t *w, int fd, const struct sockaddr_storage *peer,
                       socklen_t peer_len, int is_unix);
/* Makes c a TLS connection of ctx: the handshake runs on the loop under
 * cfg.timeout_tls_handshake, before any request is read. Call it before
 * ps_conn_accepted. Returns 0 or -ENOMEM. */
int ps_conn_start_tls(ps_conn_t *c, ps_tls_ctx_t *ctx);
/* The negotiated application protocol of a TLS connection ("http/1.1"), or
 * an empty slice (plain, or no ALPN). The one place where an HTTP/2 carrier
 * hooks in: a connection that negotiated "h2" is handed over here. */
ps_slice_t ps_conn_alpn(const ps_conn_t *c);
/* The connection's transport (the interface layers read its TLS facts). */
static inline const ps_transport_t *ps_conn_transport(const ps_conn_t *c)
{
    return &c->t;
}
/* A connection on a --proxy-protocol listener (call before
 * ps_conn_accepted): a peer that --forwarded-allow-ips trusts must start
 * with a PROXY header (v1 or v2) within timeout_request_header, whose
 * client becomes the connection's peer; any other peer may not send one.
 * Either failure closes the connection after handler->on_refused. */
void ps_conn_expect_proxy_header(ps_conn_t *c);
enum { PS_CONN_PP_NONE, PS_CONN_PP_EXPECT, PS_CONN_PP_REFUSE };

/* A connection on a uwsgi listener (call before ps_conn_accepted): its one
 * request is a uwsgi packet (nginx's uwsgi_pass), its response HTTP/1.x
 * ended by the close. Only a peer cfg.uwsgi_trust trusts (or a unix-socket
 * one) may speak it; the variables then say who the client is. Returns 0,
 * or -1 when c was closed (an untrusted peer, after handler->on_refused;
 * out of memory). */
int ps_conn_speak_uwsgi(ps_conn_t *c);

/* A connection just accepted: reads what already arrived (the listener
 * defers accept until data is there) before waiting on the loop. May close c. */
void ps_conn_accepted(ps_conn_t *c);
/* The connection's local address, without a syscall when the listener's
 * address is specific. Returns 0 or -errno. */
int ps_conn_local_address(ps_conn_t *c, struct sockaddr_storage *ss, socklen_t *len);

/* The worker, before its loop sleeps (and before it frees the closed
 * connections): sends the output held back during this iteration and moves
 * the connections whose response is now out on to their next request. May
 * close connections and run application code (a pipelined request). */
void ps_conn_flush_held(ps_worker_t *w);
/* Closes the socket now and frees the struct at the next safe point. */
void ps_conn_close(ps_conn_t *c);
/* Frees a closed connection (the worker calls this before sleeping). */
void ps_conn_free(ps_conn_t *c);
/* During a graceful stop: closes the connection if it is between requests. */
void ps_conn_stop_idle(ps_conn_t *c);

/* Returns 1 when x is an HTTP/1 connection's exchange (ps_conn_of applies). */
int ps_conn_owns(const ps_exchange_t *x);

/* wsconn.c, accepting an upgrade: the connection is in WebSocket mode from
 * now on (PS_CONN_WS) and frees wc with itself. */
void ps_conn_set_ws(ps_conn_t *c, struct ps_wsconn *wc);

/* h2conn.c, switching to HTTP/2: the connection is in HTTP/2 mode from now
 * on (PS_CONN_H2) and frees hc with itself. */
void ps_conn_set_h2(ps_conn_t *c, struct ps_h2conn *hc);

static inline ps_conn_t *ps_conn_of(ps_exchange_t *x)
{
    return (ps_conn_t *)((char *)x - offsetof(ps_conn_t, x));
}

static inline ps_request_t *ps_conn_request(ps_conn_t *c)
{
    return c->x.req; /* the HTTP/1 parser's, or the uwsgi parser's */
}

/* Synchronous layers: the connection read the whole body before on_request,
 * into c->body or (past cfg.body_spool_threshold) a spool file. When c->body
 * is empty this refills it with the next piece of the spool file; it never
 * waits for the client. The caller reads c->body and consumes what it used.
 * Returns 0 (c->body still empty: the body is over) or -errno when the spool
 * file cannot be read. */
int ps_conn_body_fill(ps_conn_t *c);

/* Asynchronous layers: returns 1 when c->body holds bytes or the body is
 * complete, 0 when it starts reading and will call on_body later, -errno when
 * the client is gone or sent a bad body (the connection is then closing). */
int ps_conn_body_want(ps_conn_t *c);

/* Sends a 1xx head (103 Early Hints) before the response. Same returns as
 * ps_conn_write; -EINVAL when the response already started or is invalid. */
int ps_conn_send_informational(ps_conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n);
/* Ends a chunked response with trailer fields (ignored when not chunked).
 * Returns 0 or -EINVAL for an invalid field. */
int ps_conn_end_with_trailers(ps_conn_t *c, const ps_header_t *h, size_t n);

/* Starts the response: validates status and headers, decides the framing
 * and sends the head together with the first body bytes in one write.
 * Returns PS_WRITE_DONE, PS_WRITE_PENDING, -EINVAL when the head is invalid
 * (nothing sent) or -errno when the client is gone. */
int ps_conn_start_response(ps_conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n,
                           const char *body, size_t len);
/* Sends body bytes (framed as the head decided). Same returns. */
int ps_conn_write(ps_conn_t *c, const char *data, size_t len);
/* Like ps_conn_write but waits until the bytes are in the kernel. */
int ps_conn_write_blocking(ps_conn_t *c, const char *data, size_t len);
/* Sends count bytes of file fd from offset with sendfile(2). The fd must
 * stay open until on_writable is called or PS_WRITE_DONE returned. */
int ps_conn_sendfile(ps_conn_t *c, int fd, int64_t offset, uint64_t count);
/* The response is complete. Called outside a handler callback (from an
 * asyncio task), the connection moves on at once: it may start the next
 * pipelined request or close, so detach per-request state first. */
void ps_conn_end(ps_conn_t *c);
/* The response cannot be completed: close once the handler returns. */
void ps_conn_abort(ps_conn_t *c);
/* Answers a canned error (nothing may have been sent) and closes after. */
void ps_conn_send_error(ps_conn_t *c, int status);
/* The same for a request the server refuses (bad, too large, too slow, over
 * a limit): the layer hears of it through on_rejected first. */
void ps_conn_reject(ps_conn_t *c, int status, const char *reason);
/* The same with its own complete response (Connection: close), e.g. the
 * WebSocket handshake's 426. */
void ps_conn_reject_response(ps_conn_t *c, int status, const char *reason, ps_slice_t response);

#endif
