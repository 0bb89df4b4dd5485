/* One request and its response, whatever protocol carries it.
 *
 * The interface layers (csrc/py/) see a request only as a ps_exchange_t:
 * the parsed head, the peer's and local addresses, the body as it is
 * decoded, and the response calls below. A protocol fills one: HTTP/1
 * embeds one in each connection (h1conn.c), HTTP/2 will fill one per stream.
 * The calls go through the protocol's const ops table; the static inline
 * wrappers cost one indirect call each.
 *
 * None of the calls frees the exchange: a protocol releases it at a safe
 * point after the handler callback returns (dispose), never under the
 * caller.
 */
#ifndef PS_EXCHANGE_H
#define PS_EXCHANGE_H

#include <stdint.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "base/common.h"
#include "codec/http1.h"
#include "codec/proxy.h"
#include "net/transport.h"

typedef struct ps_exchange ps_exchange_t;
typedef struct ps_worker ps_worker_t;
typedef struct ps_encode_cfg ps_encode_cfg_t; /* encode.h */
typedef struct ps_encoder ps_encoder_t;

/* Response compression (--compress, encode.c): the wrappers below call
 * these when the protocol set x->compress (ps_encode_start decides, and
 * may set x->encoder) and while x->encoder is set (the rest). Each takes
 * and returns what the op of the same name does; a compressor failure
 * aborts the response and returns -EPIPE, as for a client gone. */
int ps_encode_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                    const char *body, size_t len);
int ps_encode_write(ps_exchange_t *x, const char *data, size_t len, int blocking);
/* Reads count bytes of fd from offset and compresses them (the start
 * allowed files below PS_ENCODE_FILE_MAX only). */
int ps_encode_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count);
int ps_encode_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n);
void ps_encode_end(ps_exchange_t *x);
void ps_encode_abort(ps_exchange_t *x);
/* Frees x's encoder, if any: the protocols call it when a request's state
 * is reset or freed (a response the client left mid-way never ends). */
void ps_encode_release(ps_exchange_t *x);

/* Return values of the write calls. */
enum {
    PS_WRITE_DONE = 0,    /* everything is in the kernel: produce more */
    PS_WRITE_PENDING = 1, /* queued: wait for on_writable before more */
};

/* What the protocol calls in the interface layer (ps_worker_init's). */
typedef struct {
    /* A request head is complete. For a synchronous layer the whole body is
     * buffered too (ps_exchange_body_fill); for an asynchronous one it may
     * still be arriving. The handler starts a response, or finishes it with
     * ps_exchange_end(). */
    void (*on_request)(ps_exchange_t *x);
    /* Output drained after a write returned PS_WRITE_PENDING: produce more. */
    void (*on_writable)(ps_exchange_t *x);
    /* The client went away while a response was in progress (app_data set). */
    void (*on_disconnect)(ps_exchange_t *x);
    /* The exchange's carrier is being freed: drop conn_data and app_data. */
    void (*dispose)(ps_exchange_t *x);
    /* Asynchronous layers only: body bytes (or the body's end) arrived after
     * ps_exchange_body_want() returned 0. */
    void (*on_body)(ps_exchange_t *x);
    /* Optional: the server refused a request with a canned answer (reason:
     * static words, e.g. "header field too large"). Called outside any
     * parser callback, before the answer is sent; the layer logs it. */
    void (*on_rejected)(ps_exchange_t *x, int status, const char *reason);
    /* Optional: a connection is closed before its first request (a PROXY
     * protocol failure; reason: static words). The layer logs one line. */
    void (*on_refused)(ps_exchange_t *x, const char *reason);
    /* Optional: the core answered the request itself (a --static file, the
     * static layer of worker.c) with status; called once the response
     * ended, or failed after its head. The layer writes its access line. */
    void (*on_served)(ps_exchange_t *x, int status);
    /* Optional, for a layer that carries both kinds (--asgi-app beside a
     * WSGI application): called once a request's head is complete, before
     * its body is read. Returns 1 when this request is answered
     * asynchronously (as if async were set), 0 when synchronously. It may
     * set x->handler_data to the part that takes the request. */
    int (*route)(ps_exchange_t *x);
    /* The layer answers from outside these callbacks (ASGI's tasks) and
     * reads the body as it arrives; 0: it answers inside on_request with
     * the whole body buffered first (WSGI). */
    unsigned async : 1;
} ps_handler_t;

/* A protocol's implementation of the calls below (see their wrappers). */
typedef struct {
    int (*body_fill)(ps_exchange_t *x);
    int (*body_want)(ps_exchange_t *x);
    int (*start)(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                 const char *body, size_t len);
    int (*write)(ps_exchange_t *x, const char *data, size_t len);
    int (*write_blocking)(ps_exchange_t *x, const char *data, size_t len);
    int (*sendfile)(ps_exchange_t *x, int fd, int64_t offset, uint64_t count);
    int (*informational)(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n);
    int (*end_with_trailers)(ps_exchange_t *x, const ps_header_t *h, size_t n);
    void (*end)(ps_exchange_t *x);
    void (*abort)(ps_exchange_t *x);
    void (*send_error)(ps_exchange_t *x, int status);
    void (*reject)(ps_exchange_t *x, int status, const char *reason);
    int (*local_address)(ps_exchange_t *x, struct sockaddr_storage *ss, socklen_t *len);
    int (*request_line)(ps_exchange_t *x, ps_slice_t *method, ps_slice_t *target,
                        ps_slice_t *version);
    int (*client_gone)(ps_exchange_t *x);
    /* Optional (a protocol that carries one exchange per socket: HTTP/1). */
    struct ps_sock *(*sock)(ps_exchange_t *x);
    int (*upgrade)(ps_exchange_t *x);
    void (*reject_response)(ps_exchange_t *x, int status, const char *reason, ps_slice_t response);
} ps_exchange_ops_t;

/* Filled by the protocol; the interface layer reads the fields and writes
 * only app_data, conn_data, deferred, (consuming) *body and, from its
 * route callback, handler_data. */
struct ps_exchange {
    const ps_exchange_ops_t *ops;
    ps_request_t *req;       /* the parsed head (the protocol's) */
    ps_buf_t *body;          /* decoded body bytes not read yet */
    ps_worker_t *worker;     /* the worker serving it (opaque here) */
    void *handler_data;      /* ps_worker_init's handler_data */
    const ps_proxy_t *proxy; /* forwarded headers to apply: set only for a trusted peer */
    const struct sockaddr_storage *peer;
    socklen_t peer_len;
    unsigned is_unix : 1; /* came through a unix socket (peer has no address) */
    unsigned secure : 1;  /* carried over TLS (or a gateway said so): the scheme is https */
    unsigned http2 : 1;   /* a stream of an HTTP/2 connection (h2conn.c), or a uwsgi
                           * request whose client spoke HTTP/2 to the gateway */
    /* The TLS session carrying it (its facts: transport.h's ps_tls_*), or
     * NULL over a plain socket. */
    const ps_transport_t *tls;
    int status;         /* the response status once started, else 0 */
    uint64_t body_sent; /* response body bytes given to the calls below (reset per request) */
    uint64_t log_start; /* the interface layer's: when it took the request (access log) */
    void *app_data;     /* the interface layer's per-request state */
    void *conn_data;    /* the interface layer's per-connection state */
    /* Set by a synchronous layer in on_request when it answers later, from
     * outside the handler callbacks (its application runs on another
     * thread): the protocol then waits without a write or read watcher
     * until the layer writes. The protocol clears it for each request. */
    unsigned deferred : 1;
    /* Set by a layer just before ps_exchange_start (no body bytes) when a
     * ps_exchange_sendfile follows at once: the protocol may then hold the
     * head and send it with the file's first bytes (HTTP/1: MSG_MORE, then
     * sendfile). ps_exchange_start clears it; so does the protocol for
     * each request. A layer that ends or aborts instead of sending the file
     * loses nothing: the end flushes the held head, an abort drops it. */
    unsigned file_follows : 1;
    /* Set by the health check (worker.c) on the request it answers: the
     * protocol leaves it out of the request metrics (it is not the
     * application's). The protocol clears it for each request. */
    unsigned unmetered : 1;
    /* A request a gateway passed on (uwsgi): the server the client reached,
     * as the gateway named it (SERVER_NAME, SERVER_PORT), which the bridge
     * reports instead of the local address; base NULL otherwise. */
    ps_slice_t server_name, server_port;
    /* The static layer's (worker.c): the file it is sending, valid only
     * while app_data is that layer's marker. */
    int static_fd;
    /* Set by the protocol: the most body bytes a layer gives one write
     * call, or 0 for any number. A layer holding a larger piece (one
     * bytes object of the application's) writes it this many bytes at a
     * time, and after PS_WRITE_PENDING keeps the rest for on_writable:
     * the protocol copies what it is given, so a reader that stops
     * reading then holds back about this much (an HTTP/2 stream), not
     * the whole piece. */
    size_t write_piece;
    /* Set by the protocol from the worker's settings when it compresses
     * responses (--compress, encode.h), else NULL. */
    const ps_encode_cfg_t *compress;
    /* The response being compressed (encode.c's), or NULL: then every call
     * goes straight to the protocol. */
    ps_encoder_t *encoder;
};

/* Synchronous layers: the whole body was read before on_request, into
 * *x->body or a spool file. When *x->body is empty this refills it with
 * the next piece of the file; it never waits for the client. Returns 0
 * (*x->body still empty: the body is over) or -errno. */
static inline int ps_exchange_body_fill(ps_exchange_t *x)
{
    return x->ops->body_fill(x);
}

/* Asynchronous layers: returns 1 when *x->body holds bytes or the body is
 * complete, 0 when it starts reading and will call on_body later, -errno
 * when the client is gone or sent a bad body (the exchange is closing). */
static inline int ps_exchange_body_want(ps_exchange_t *x)
{
    return x->ops->body_want(x);
}

/* Starts the response: validates status and headers, decides the framing
 * and sends the head together with the first body bytes in one write.
 * Returns PS_WRITE_DONE, PS_WRITE_PENDING, -EINVAL when the head is invalid
 * (nothing sent) or -errno when the client is gone. */
static inline int ps_exchange_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h,
                                    size_t n, const char *body, size_t len)
{
    int rc = ps_unlikely(x->compress != NULL) ? ps_encode_start(x, status, h, n, body, len)
                                              : x->ops->start(x, status, h, n, body, len);
    x->file_follows = 0;
    x->body_sent += rc >= 0 ? len : 0;
    return rc;
}

/* Sends body bytes (framed as the head decided). Same returns. */
static inline int ps_exchange_write(ps_exchange_t *x, const char *data, size_t len)
{
    int rc = ps_unlikely(x->encoder != NULL) ? ps_encode_write(x, data, len, 0)
                                             : x->ops->write(x, data, len);
    x->body_sent += rc >= 0 ? len : 0;
    return rc;
}

/* Like ps_exchange_write but waits until the bytes are in the kernel. */
static inline int ps_exchange_write_blocking(ps_exchange_t *x, const char *data, size_t len)
{
    int rc = ps_unlikely(x->encoder != NULL) ? ps_encode_write(x, data, len, 1)
                                             : x->ops->write_blocking(x, data, len);
    x->body_sent += rc >= 0 ? len : 0;
    return rc;
}

/* Sends count bytes of file fd from offset. The fd must stay open until
 * on_writable is called or PS_WRITE_DONE returned. Same returns. */
static inline int ps_exchange_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count)
{
    int rc = ps_unlikely(x->encoder != NULL) ? ps_encode_sendfile(x, fd, offset, count)
                                             : x->ops->sendfile(x, fd, offset, count);
    x->body_sent += rc >= 0 ? count : 0;
    return rc;
}

/* Sends a 1xx head (103 Early Hints) before the response. Same returns;
 * -EINVAL when the response already started or the head is invalid. */
static inline int ps_exchange_informational(ps_exchange_t *x, ps_slice_t status,
                                            const ps_header_t *h, size_t n)
{
    return x->ops->informational(x, status, h, n);
}

/* Ends the response with trailer fields (dropped when the framing has no
 * room for them). Returns 0 or -EINVAL for an invalid field. */
static inline int ps_exchange_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n)
{
    if (ps_unlikely(x->encoder != NULL))
        return ps_encode_end_with_trailers(x, h, n);
    return x->ops->end_with_trailers(x, h, n);
}

/* The response is complete. Called outside a handler callback (from an
 * asyncio task), the protocol moves on at once: it may start the next
 * pipelined request or close, so detach per-request state first. */
static inline void ps_exchange_end(ps_exchange_t *x)
{
    if (ps_unlikely(x->encoder != NULL))
        ps_encode_end(x);
    else
        x->ops->end(x);
}

/* The response cannot be completed: the carrier closes once the handler
 * returns. */
static inline void ps_exchange_abort(ps_exchange_t *x)
{
    if (ps_unlikely(x->encoder != NULL))
        ps_encode_abort(x);
    else
        x->ops->abort(x);
}

/* Answers a canned error (nothing may have been sent) and closes after. */
static inline void ps_exchange_send_error(ps_exchange_t *x, int status)
{
    x->ops->send_error(x, status);
}

/* The same for a request the server refuses (bad, too large, over a
 * limit): the layer hears of it through on_rejected first. */
static inline void ps_exchange_reject(ps_exchange_t *x, int status, const char *reason)
{
    x->ops->reject(x, status, reason);
}

/* The local address (a syscall only when the listener's is not specific).
 * Returns 0 or -errno. */
static inline int ps_exchange_local_address(ps_exchange_t *x, struct sockaddr_storage *ss,
                                            socklen_t *len)
{
    return x->ops->local_address(x, ss, len);
}

/* The request line as received, for logs: returns 1 and sets the slices
 * when it was read completely, 0 before that. */
static inline int ps_exchange_request_line(ps_exchange_t *x, ps_slice_t *method, ps_slice_t *target,
                                           ps_slice_t *version)
{
    return x->ops->request_line(x, method, target, version);
}

/* Returns 1 when the client can no longer receive output. */
static inline int ps_exchange_client_gone(ps_exchange_t *x)
{
    return x->ops->client_gone(x);
}

/* The socket that carries x alone (sock.h), which an upgrade hands over to
 * another protocol; NULL when x shares its socket (an HTTP/2 stream). */
static inline struct ps_sock *ps_exchange_sock(ps_exchange_t *x)
{
    return x->ops->sock ? x->ops->sock(x) : NULL;
}

/* Answers x with a protocol switch (101): the response is over as far as
 * the carrier is concerned, and its socket (ps_exchange_sock) belongs to
 * the protocol that switches it to (ps_sock_set_proto), which sends the
 * carrier's queued output first. Returns 0, -EINVAL when x cannot switch
 * protocols (an HTTP/2 stream), -EPIPE when the client is gone or a
 * response started. */
static inline int ps_exchange_upgrade(ps_exchange_t *x)
{
    return x->ops->upgrade ? x->ops->upgrade(x) : -EINVAL;
}

/* Like ps_exchange_reject with a complete response of its own
 * (Connection: close), e.g. a WebSocket handshake's 426. Only for an
 * exchange with a socket of its own (ps_exchange_sock). */
static inline void ps_exchange_reject_response(ps_exchange_t *x, int status, const char *reason,
                                               ps_slice_t response)
{
    x->ops->reject_response(x, status, reason, response);
}

#endif
