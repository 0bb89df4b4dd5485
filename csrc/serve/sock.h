/* One accepted socket, whatever protocol speaks over it: the descriptor and
 * its transport (plain or TLS), the read and write watchers and the timer,
 * the peer's and local addresses, the read buffer and the output queue
 * (with a pending sendfile), output held until the loop sleeps, the
 * linger before the close, and the close itself (the struct is freed at the
 * worker's safe point).
 *
 * A protocol plugs in through a ps_sock_proto_t: the socket's watchers call
 * its on_read / on_write / on_timer, and ps_sock_set_proto() hands the
 * socket over to another protocol (HTTP/1 to WebSocket or HTTP/2), as
 * uvicorn's transport.set_protocol does. The first protocol (HTTP/1, which
 * embeds the socket: h1conn.h) owns the memory; a protocol the socket was
 * handed to frees its own state through its table's free.
 *
 * None of the ps_sock_* functions frees the socket; those that can close it
 * say so.
 */
#ifndef PS_SOCK_H
#define PS_SOCK_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <ev.h>

#include "base/buf.h"
#include "net/transport.h"

typedef struct ps_sock ps_sock_t;
typedef struct ps_worker ps_worker_t;

/* What a protocol does with its socket. Every callback may close s. */
typedef struct {
    /* The read watcher fired (or a read is owed: ps_sock_feed_read). */
    void (*on_read)(ps_sock_t *s);
    /* The write watcher fired, after the socket flushed nothing itself. */
    void (*on_write)(ps_sock_t *s);
    /* The timer fired (never while lingering: the socket closes then). */
    void (*on_timer)(ps_sock_t *s);
    /* Optional: held output went out in ps_sock_flush_held() and nothing is
     * queued any more: the protocol may move on (the next request). */
    void (*on_flushed)(ps_sock_t *s);
    /* Called by ps_sock_close() before the socket is closed (the protocol's
     * state can still write), then after it was (tell the application);
     * either may be NULL. */
    void (*before_close)(ps_sock_t *s);
    void (*after_close)(ps_sock_t *s);
    /* A graceful stop: close if idle, or start going away. */
    void (*stop_idle)(ps_sock_t *s);
    /* Frees the protocol's state (data) with the socket. */
    void (*free)(ps_sock_t *s, void *data);
} ps_sock_proto_t;

struct ps_sock {
    ps_worker_t *w;
    int fd;                       /* t.fd, -1 once closed */
    ps_transport_t t;             /* every read and write goes through it (plain or TLS) */
    const ps_sock_proto_t *proto; /* who speaks over the socket now */
    void *data;                   /* ... and its state */
    const ps_sock_proto_t *owner; /* the first protocol: it embeds the socket */
    ev_io rio;
    ev_io wio;
    ev_timer timer;
    ps_buf_t rbuf; /* received bytes the protocol did not take yet */
    ps_buf_t wbuf; /* output not accepted by the kernel yet */
    int sf_fd;     /* sendfile in progress: file, offset, bytes left, or -1 */
    int64_t sf_off;
    uint64_t sf_left;
    unsigned sf_trailer : 1; /* a chunk's CRLF follows the sendfile (HTTP/1) */
    unsigned is_unix : 1;
    unsigned failed : 1;      /* the socket is broken: no more output */
    unsigned closed : 1;      /* ps_sock_close() ran */
    unsigned lingering : 1;   /* shut down, draining input before the close */
    unsigned handshaking : 1; /* TLS: the handshake is not done (ps_sock_handshake) */
    unsigned held : 1;        /* on the worker's held list (output sent before it sleeps) */
    unsigned held_new : 1;    /* ... with output held since the last pass over the list */
    uint64_t requests;        /* requests served over it, whatever the protocol */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    const struct sockaddr_storage *local; /* the listener's, when specific */
    socklen_t local_len;
    ps_sock_t *prev, *next; /* the worker's live sockets */
    ps_sock_t *next_dead;
    ps_sock_t *next_held;
};

/* Fills s for a freshly accepted fd spoken by proto (with data): a plain
 * transport, the watchers initialised and stopped, the timer armed for
 * timeout_keep_alive. The caller owns the memory (s is usually embedded). */
void ps_sock_init(ps_sock_t *s, ps_worker_t *w, int fd, const struct sockaddr_storage *peer,
                  socklen_t peer_len, int is_unix, const ps_sock_proto_t *proto, void *data);
/* Puts s on the worker's live list (counted in nconns). */
void ps_sock_link(ps_sock_t *s);
/* Hands s over to proto (with data): the watchers and the timer are
 * stopped, the next events go to proto. Queued output and unread input
 * stay for it. */
void ps_sock_set_proto(ps_sock_t *s, const ps_sock_proto_t *proto, void *data);
/* Releases what the socket holds (the owner's free calls it). Frees a
 * protocol the socket was handed to first. */
void ps_sock_free(ps_sock_t *s);
/* The worker, before its loop sleeps: frees a closed socket. */
void ps_sock_release(ps_sock_t *s);

/* The socket's local address, without a syscall when the listener's
 * address is specific. Returns 0 or -errno. */
int ps_sock_local_address(ps_sock_t *s, struct sockaddr_storage *ss, socklen_t *len);

/* ---- the TLS prelude ---- */

/* Makes s a TLS socket of ctx: its handshake runs on the loop under
 * timeout_tls_handshake, before the protocol reads anything. Returns 0 or
 * -ENOMEM. */
int ps_sock_start_tls(ps_sock_t *s, ps_tls_ctx_t *ctx);

/* ps_sock_handshake() outcomes. */
enum {
    PS_SOCK_HS_WAIT,      /* waits for the peer (the watchers are set) */
    PS_SOCK_HS_DONE,      /* done: the protocol reads (ALPN is known) */
    PS_SOCK_HS_PLAINTEXT, /* clear text on a TLS port: the session is dropped */
    PS_SOCK_HS_FAILED,    /* garbage, no shared version or cipher, a refused
                           * certificate: s->t.reason says which */
    PS_SOCK_HS_GONE,      /* the peer left */
};
/* One step of the handshake, from either watcher. Never closes s: the
 * protocol answers or closes as the outcome says. */
int ps_sock_handshake(ps_sock_t *s);

/* ---- input ---- */

/* Reads once into dst (the transport's read, counted in the metrics).
 * Returns bytes, 0 at EOF, PS_IO_WANT_* or -errno. */
ssize_t ps_sock_read(ps_sock_t *s, char *dst, size_t cap);
/* Starts the read watcher; input a TLS session already holds is read at
 * once from the loop. */
void ps_sock_start_reading(ps_sock_t *s);
void ps_sock_stop_reading(ps_sock_t *s);
/* Has the loop call on_read (or on_write) soon, from outside the caller. */
void ps_sock_feed_read(ps_sock_t *s);
void ps_sock_feed_write(ps_sock_t *s);

/* ---- output ---- */

/* Sends queued output then the iovecs in one call when the socket is not
 * known to be full; whatever the kernel does not take is queued and the
 * write watcher started. Returns PS_WRITE_DONE, PS_WRITE_PENDING or -errno. */
int ps_sock_write_now(ps_sock_t *s, const struct iovec *iov, int n);
/* Holds a small write for the flush before the loop sleeps; anything else
 * goes out now, after what was held. Same returns. */
int ps_sock_send(ps_sock_t *s, const struct iovec *iov, int n);
/* Writes queued bytes, then the pending sendfile. Returns 0 when all is
 * out, 1 when the socket is full, -errno when the client is gone (never
 * closes). */
int ps_sock_flush(ps_sock_t *s);
/* Starts the write watcher and its deadline (timeout_request_header). */
void ps_sock_start_writing(ps_sock_t *s);
/* Stops the write watcher. */
void ps_sock_stop_writing(ps_sock_t *s);
/* Waits (poll) until the socket is ready for events, at most the write
 * deadline. Returns 0 or -errno (-ETIMEDOUT). */
int ps_sock_wait(ps_sock_t *s, short events);
/* Before an application call, which may take long: output held for too
 * long goes out first. */
void ps_sock_write_overdue(ps_worker_t *w);
/* The worker, before its loop sleeps (and before it frees the closed
 * sockets): sends the output held back during this iteration and tells
 * the protocols whose output is now out (on_flushed). May close sockets
 * and run application code. */
void ps_sock_flush_held(ps_worker_t *w);

/* ---- timer ---- */

/* Runs the timer every `seconds` from now (0: stops it). */
void ps_sock_timer_again(ps_sock_t *s, double seconds);
/* Runs the timer once, at loop time `at` (0: stops it). */
void ps_sock_timer_at(ps_sock_t *s, ev_tstamp at);

/* ---- the end ---- */

/* Half-closes after an answer and drains what the peer still sends for a
 * while, so that unread input does not turn the close into a reset that
 * destroys the answer before the peer reads it; then closes. */
void ps_sock_linger(ps_sock_t *s);
/* Closes the socket now (the protocols' before_close and after_close
 * hooks run around it) and frees the struct at the next safe point. */
void ps_sock_close(ps_sock_t *s);
/* During a graceful stop: the protocol's stop_idle. */
void ps_sock_stop_idle(ps_sock_t *s);

#endif
