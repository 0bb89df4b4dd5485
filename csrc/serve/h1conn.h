/* HTTP/1 over a socket (sock.h): the parser, the request/response state
 * machine and the prelude of an accepted connection (TLS handshake, PROXY
 * header, uwsgi, the h2 preface or ALPN that hands the socket to h2conn).
 * Every connection starts here: the HTTP/1 connection embeds its socket
 * and owns its memory, also after an upgrade handed the socket over.
 *
 * The core calls the interface layer (WSGI, ASGI) through ps_handler_t with
 * the connection's embedded exchange (exchange.h); the layer answers through
 * the exchange calls, which land in the ps_h1conn_* functions below. Those functions
 * never free the connection: a connection is closed at a safe point after the
 * handler callback returns, and its memory is released before the loop sleeps.
 */
#ifndef PS_H1CONN_H
#define PS_H1CONN_H

#include <stdint.h>
#include <sys/socket.h>

#include <ev.h>

#include "serve/body.h"
#include "base/buf.h"
#include "serve/exchange.h"
#include "codec/http1.h"
#include "codec/proxy.h"
#include "serve/sock.h"
#include "net/transport.h"
#include "codec/uwsgi.h"

typedef struct ps_h1conn ps_h1conn_t;

enum ps_h1conn_state {
    PS_H1CONN_IDLE,   /* reading a request head (or idle between requests) */
    PS_H1CONN_BODY,   /* head read, buffering the body of a synchronous request */
    PS_H1CONN_APP,    /* handed to the application */
    PS_H1CONN_FLUSH,  /* response complete, output still queued */
    PS_H1CONN_LINGER, /* answered and shut down, draining input before close */
    PS_H1CONN_WS,     /* upgraded (101): the socket is another protocol's */
    PS_H1CONN_H2,     /* switched to HTTP/2: the socket is h2conn.c's */
    PS_H1CONN_CLOSED,
};

struct ps_h1conn {
    ps_sock_t s;     /* the socket it speaks over (first: the socket's owner) */
    ps_exchange_t x; /* the request in progress, as the interface layer sees it */
    uint8_t state;
    unsigned keep_alive : 1;
    unsigned in_handler : 1;
    unsigned resp_started : 1;
    unsigned resp_ended : 1;
    unsigned resp_chunked : 1;
    unsigned resp_no_body : 1;
    unsigned continue_sent : 1;
    unsigned aborted : 1;      /* close as soon as the handler returns */
    unsigned head_started : 1; /* bytes of the next request have arrived */
    unsigned body_wanted : 1;  /* on_body is owed once body bytes arrive */
    unsigned async : 1;        /* the current request's layer is asynchronous (ps_worker_route) */
    unsigned proxyproto : 2;   /* PS_H1CONN_PP_*: a PROXY header still to settle */
    unsigned tell_app : 1;     /* closing: the layer hears on_disconnect once it is closed */
    unsigned redirect : 1;     /* a --redirect-http listener's: every request goes to https */
    int error_status;          /* a bad body seen while an asynchronous application runs */
    ps_body_spool_t spool;     /* a synchronous request's body past the threshold */
    ps_http1_parser_t parser;
    /* A uwsgi listener's connection parses with this instead (NULL: HTTP). */
    ps_uwsgi_parser_t *uw;
    ps_buf_t body;           /* decoded body bytes not read by the application yet */
    int64_t resp_left;       /* body bytes still due under Content-Length, or -1 */
    ev_tstamp head_deadline; /* the head must be complete by then (0: not started) */
    uint64_t metrics_start;  /* --metrics-bind: the request's dispatch (0: none counting) */
};

/* Called by the worker for a freshly accepted socket; decides whether the
 * peer is a trusted proxy. Returns NULL on OOM. */
ps_h1conn_t *ps_h1conn_new(ps_worker_t *w, int fd, const struct sockaddr_storage *peer,
                           socklen_t peer_len, int is_unix);
/* Makes c a TLS connection of ctx: the handshake runs on the loop under
 * cfg.timeout_tls_handshake, before any request is read. Call it before
 * ps_h1conn_accepted. Returns 0 or -ENOMEM. */
int ps_h1conn_start_tls(ps_h1conn_t *c, ps_tls_ctx_t *ctx);
/* The negotiated application protocol of a TLS connection ("http/1.1"), or
 * an empty slice (plain, or no ALPN). The one place where an HTTP/2 carrier
 * hooks in: a connection that negotiated "h2" is handed over here. */
ps_slice_t ps_h1conn_alpn(const ps_h1conn_t *c);
/* A connection on a --proxy-protocol listener (call before
 * ps_h1conn_accepted): a peer that --forwarded-allow-ips trusts must start
 * with a PROXY header (v1 or v2) within timeout_request_header, whose
 * client becomes the connection's peer; any other peer may not send one.
 * Either failure closes the connection after handler->on_refused. */
void ps_h1conn_expect_proxy_header(ps_h1conn_t *c);
enum { PS_H1CONN_PP_NONE, PS_H1CONN_PP_EXPECT, PS_H1CONN_PP_REFUSE };

/* A connection on a uwsgi listener (call before ps_h1conn_accepted): its one
 * request is a uwsgi packet (nginx's uwsgi_pass), its response HTTP/1.x
 * ended by the close. Only a peer cfg.uwsgi_trust trusts (or a unix-socket
 * one) may speak it; the variables then say who the client is. Returns 0,
 * or -1 when c was closed (an untrusted peer, after handler->on_refused;
 * out of memory). */
int ps_h1conn_speak_uwsgi(ps_h1conn_t *c);

/* A connection just accepted: reads what already arrived (the listener
 * defers accept until data is there) before waiting on the loop. May close c. */
void ps_h1conn_accepted(ps_h1conn_t *c);

/* Closes the connection's socket (sock.h): the struct is freed at the next
 * safe point. */
static inline void ps_h1conn_close(ps_h1conn_t *c)
{
    ps_sock_close(&c->s);
}

static inline ps_h1conn_t *ps_h1conn_of(ps_exchange_t *x)
{
    return (ps_h1conn_t *)((char *)x - offsetof(ps_h1conn_t, x));
}

static inline ps_request_t *ps_h1conn_request(ps_h1conn_t *c)
{
    return c->x.req; /* the HTTP/1 parser's, or the uwsgi parser's */
}

/* Synchronous layers: the connection read the whole body before on_request,
 * into c->body or (past cfg.body_spool_threshold) a spool file. When c->body
 * is empty this refills it with the next piece of the spool file; it never
 * waits for the client. The caller reads c->body and consumes what it used.
 * Returns 0 (c->body still empty: the body is over) or -errno when the spool
 * file cannot be read. */
int ps_h1conn_body_fill(ps_h1conn_t *c);

/* Asynchronous layers: returns 1 when c->body holds bytes or the body is
 * complete, 0 when it starts reading and will call on_body later, -errno when
 * the client is gone or sent a bad body (the connection is then closing). */
int ps_h1conn_body_want(ps_h1conn_t *c);

/* Sends a 1xx head (103 Early Hints) before the response. Same returns as
 * ps_h1conn_write; -EINVAL when the response already started or is invalid. */
int ps_h1conn_send_informational(ps_h1conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n);
/* Ends a chunked response with trailer fields (ignored when not chunked).
 * Returns 0 or -EINVAL for an invalid field. */
int ps_h1conn_end_with_trailers(ps_h1conn_t *c, const ps_header_t *h, size_t n);

/* Starts the response: validates status and headers, decides the framing
 * and sends the head together with the first body bytes in one write.
 * Returns PS_WRITE_DONE, PS_WRITE_PENDING, -EINVAL when the head is invalid
 * (nothing sent) or -errno when the client is gone. */
int ps_h1conn_start_response(ps_h1conn_t *c, ps_slice_t status, const ps_header_t *h, size_t n,
                             const char *body, size_t len);
/* Sends body bytes (framed as the head decided). Same returns. */
int ps_h1conn_write(ps_h1conn_t *c, const char *data, size_t len);
/* Like ps_h1conn_write but waits until the bytes are in the kernel. */
int ps_h1conn_write_blocking(ps_h1conn_t *c, const char *data, size_t len);
/* Sends count bytes of file fd from offset with sendfile(2). The fd must
 * stay open until on_writable is called or PS_WRITE_DONE returned. */
int ps_h1conn_sendfile(ps_h1conn_t *c, int fd, int64_t offset, uint64_t count);
/* The response is complete. Called outside a handler callback (from an
 * asyncio task), the connection moves on at once: it may start the next
 * pipelined request or close, so detach per-request state first. */
void ps_h1conn_end(ps_h1conn_t *c);
/* The response cannot be completed: close once the handler returns. */
void ps_h1conn_abort(ps_h1conn_t *c);
/* Answers a canned error (nothing may have been sent) and closes after. */
void ps_h1conn_send_error(ps_h1conn_t *c, int status);
/* The same for a request the server refuses (bad, too large, too slow, over
 * a limit): the layer hears of it through on_rejected first. */
void ps_h1conn_reject(ps_h1conn_t *c, int status, const char *reason);
/* The same with its own complete response (Connection: close), e.g. the
 * WebSocket handshake's 426. */
void ps_h1conn_reject_response(ps_h1conn_t *c, int status, const char *reason, ps_slice_t response);

#endif
