/* The transport under a connection: read, write, writev, sendfile and
 * shutdown over a plain socket or an OpenSSL session, so that the protocol
 * code does not know which.
 *
 * The plain path is inline and makes exactly the system calls h1conn.c made
 * before it existed: read(2), sendmsg(2) or send(2) with MSG_NOSIGNAL,
 * sendfile(2), shutdown(2) and close(2), one each per call.
 *
 * Waiting. Every call that cannot go on returns one of two codes that name
 * the readiness to wait for, whatever the call was:
 *   PS_IO_WANT_READ  (-EAGAIN)  wait until the socket is readable
 *   PS_IO_WANT_WRITE            wait until the socket is writable
 * A plain read only ever returns WANT_READ and a plain write WANT_WRITE. Over
 * TLS a read can need a write (WANT_WRITE) and a write can need a read
 * (WANT_READ); the transport then also sets PS_TRANSPORT_READ_WANTS_WRITE or
 * PS_TRANSPORT_WRITE_WANTS_READ in ps_transport_blocked(), so that the
 * watcher that fires knows to retry the other direction's call. The flag
 * clears when that call is made again.
 *
 * Retrying writes. A write that returned WANT_* (or took fewer bytes than it
 * was given) must be retried, before any other write, sendfile or
 * shutdown, with data that starts at the first byte not taken, has the same
 * content and is at least as long (it may live elsewhere in memory). This is
 * OpenSSL's rule; h1conn.c's write queue already keeps it. A sendfile is
 * retried with the same file and offset.
 *
 * Buffered input. A TLS session can hold decrypted or undecrypted bytes that
 * no poll of the socket reports: after a read, and after a handshake
 * completes, the caller reads again while ps_transport_pending() says so.
 */
#ifndef PS_TRANSPORT_H
#define PS_TRANSPORT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/common.h"
#include "net/tls.h"

enum {
    PS_IO_WANT_READ = -EAGAIN,
    /* Not an errno any transport call returns otherwise. */
    PS_IO_WANT_WRITE = -EINPROGRESS,
};

/* ps_transport_handshake() results besides PS_IO_WANT_* and -errno. */
enum {
    PS_TLS_DONE = 0,
    PS_TLS_PLAINTEXT = 1, /* the client speaks clear-text HTTP to this TLS port */
};

/* ps_transport_blocked() flags. */
enum {
    PS_TRANSPORT_READ_WANTS_WRITE = 1, /* retry the read when writable */
    PS_TRANSPORT_WRITE_WANTS_READ = 2, /* retry the write when readable */
};

/* ---- one connection's transport ---- */

typedef struct {
    int fd;
    SSL *ssl;           /* NULL: a plain socket */
    ps_tls_ctx_t *tls;  /* the context of ssl */
    uint8_t blocked;    /* PS_TRANSPORT_* flags */
    uint8_t sniffed;    /* the first bytes were looked at */
    uint8_t handshaken; /* the TLS handshake completed */
    uint8_t ktls_send;  /* the kernel encrypts what we send */
    uint8_t shut;       /* close_notify sent (or the session failed) */
    const char *reason; /* why the last call failed (static text), or NULL */
    char *tbuf;         /* TLS only: PS_TLS_RECORD bytes for gathering and file data */
    size_t tbuf_len;    /* file bytes held in tbuf (a sendfile to retry) */
    int tbuf_fd;
    int64_t tbuf_off;
} ps_transport_t;

/* The largest TLS record's payload: writes are cut into calls of this size. */
#define PS_TLS_RECORD 16384

static inline void ps_transport_init_plain(ps_transport_t *t, int fd)
{
    *t = (ps_transport_t){.fd = fd, .tbuf_fd = -1};
}

/* Starts a server-side TLS session on fd (the handshake happens in
 * ps_transport_handshake). Returns 0 or -ENOMEM. */
int ps_transport_init_tls(ps_transport_t *t, int fd, ps_tls_ctx_t *ctx);

/* One step of the server handshake; call it again when the socket is ready
 * as the result says. Before any TLS byte is read it peeks at the first
 * bytes: clear-text HTTP returns PS_TLS_PLAINTEXT (nothing was consumed;
 * ps_transport_downgrade lets the caller answer it). Returns PS_TLS_DONE,
 * PS_IO_WANT_READ, PS_IO_WANT_WRITE, PS_TLS_PLAINTEXT, or -errno with the
 * reason in t->reason: -EPROTO (TLS failure, e.g. "certificate verify
 * failed"), -ECONNRESET (the client went away). */
int ps_transport_handshake(ps_transport_t *t);

/* Drops the TLS session of a connection that spoke clear text: from now on
 * t is plain, so the caller can read the request and answer it in clear. */
void ps_transport_downgrade(ps_transport_t *t);

/* 1 when the first bytes are a clear-text HTTP request line (an upper-case
 * token and a space), 0 otherwise (a TLS record starts with 0x16) or when n
 * is too short to say. */
int ps_transport_sniff_plain_http(const char *p, size_t n);

ssize_t ps_tls_read(ps_transport_t *t, char *dst, size_t cap);
ssize_t ps_tls_writev(ps_transport_t *t, const struct iovec *iov, int n);
ssize_t ps_tls_sendfile(ps_transport_t *t, int fd, int64_t offset, size_t count);
int ps_tls_shutdown(ps_transport_t *t);
void ps_tls_close(ps_transport_t *t);
int ps_tls_pending(const ps_transport_t *t);

/* Reads up to cap bytes. Returns bytes read, 0 at the end of the stream
 * (EOF, or the peer's close_notify), PS_IO_WANT_*, or -errno (-EPROTO for a
 * TLS error). Over TLS it reads as many records as are already buffered. */
static inline ssize_t ps_transport_read(ps_transport_t *t, char *dst, size_t cap)
{
    if (ps_unlikely(t->ssl != NULL))
        return ps_tls_read(t, dst, cap);
    for (;;) {
        ssize_t n = read(t->fd, dst, cap);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return -errno;
    }
}

/* Sends the n buffers in order. Returns the bytes taken (maybe fewer than
 * given: retry the rest as the header says), PS_IO_WANT_*, or -errno. Over
 * TLS, small buffers are gathered into one record and large ones encrypted
 * in place, one record per PS_TLS_RECORD bytes. */
static inline ssize_t ps_transport_writev(ps_transport_t *t, const struct iovec *iov, int n)
{
    if (ps_unlikely(t->ssl != NULL))
        return ps_tls_writev(t, iov, n);
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    for (;;) {
        ssize_t r = sendmsg(t->fd, &msg, MSG_NOSIGNAL);
        if (r >= 0)
            return r;
        if (errno == EAGAIN)
            return PS_IO_WANT_WRITE;
        if (errno != EINTR)
            return -errno;
    }
}

/* One buffer: send(2) on a plain socket. Same returns as writev. more: a
 * sendfile follows at once (MSG_MORE: the kernel may hold these bytes to
 * send them in the file's first segment; the sendfile's end pushes). */
static inline ssize_t ps_transport_send(ps_transport_t *t, const char *p, size_t len, int more)
{
    if (ps_unlikely(t->ssl != NULL)) {
        struct iovec v = {(void *)p, len};
        return ps_tls_writev(t, &v, 1);
    }
    int flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    for (;;) {
        ssize_t r = send(t->fd, p, len, flags);
        if (r >= 0)
            return r;
        if (errno == EAGAIN)
            return PS_IO_WANT_WRITE;
        if (errno != EINTR)
            return -errno;
    }
}

static inline ssize_t ps_transport_write(ps_transport_t *t, const char *p, size_t len)
{
    if (ps_unlikely(t->ssl != NULL)) {
        struct iovec v = {(void *)p, len};
        return ps_tls_writev(t, &v, 1);
    }
    for (;;) {
        ssize_t r = send(t->fd, p, len, MSG_NOSIGNAL);
        if (r >= 0)
            return r;
        if (errno == EAGAIN)
            return PS_IO_WANT_WRITE;
        if (errno != EINTR)
            return -errno;
    }
}

/* Sends count bytes of file fd from offset: sendfile(2), SSL_sendfile with
 * kernel TLS, else a pread and encrypt loop through the transport's own
 * buffer (at most 256 KiB per call). Returns bytes sent, 0 when the file
 * ends before offset + count, PS_IO_WANT_*, or -errno. */
static inline ssize_t ps_transport_sendfile(ps_transport_t *t, int fd, int64_t offset, size_t count)
{
    if (ps_unlikely(t->ssl != NULL))
        return ps_tls_sendfile(t, fd, offset, count);
    off_t off = (off_t)offset;
    for (;;) {
        ssize_t r = sendfile(t->fd, fd, &off, count);
        if (r >= 0)
            return r;
        if (errno == EAGAIN)
            return PS_IO_WANT_WRITE;
        if (errno != EINTR)
            return -errno;
    }
}

/* Ends the sending side: close_notify over TLS (once, never waiting), then
 * shutdown(fd, SHUT_WR). Reading stays possible (a linger drains input).
 * Returns 0 or -errno. */
static inline int ps_transport_shutdown(ps_transport_t *t)
{
    if (ps_unlikely(t->ssl != NULL))
        return ps_tls_shutdown(t);
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

/* Closes the socket (after a close_notify when the session is healthy and
 * none was sent) and frees the session and its buffer. t->fd becomes -1. */
static inline void ps_transport_close(ps_transport_t *t)
{
    if (ps_unlikely(t->ssl != NULL || t->tbuf != NULL)) {
        ps_tls_close(t);
        return;
    }
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
}

/* 1 when input is buffered in the transport that a poll of the socket
 * would not report: read again without waiting. */
static inline int ps_transport_pending(const ps_transport_t *t)
{
    return ps_unlikely(t->ssl != NULL) ? ps_tls_pending(t) : 0;
}

/* Frees the TLS session's read and write buffers and the transport's own
 * (about 50 KiB) while the connection is idle, at the cost of allocating
 * them again for the next request: for connections idle for a while, not
 * after every request. Returns 1 when freed, 0 when bytes are still held
 * (or the transport is plain). */
int ps_transport_release_buffers(ps_transport_t *t);

static inline int ps_transport_blocked(const ps_transport_t *t)
{
    return t->blocked;
}

static inline int ps_transport_is_tls(const ps_transport_t *t)
{
    return t->ssl != NULL;
}

/* ---- what a finished TLS handshake negotiated (NULL / 0 when plain) ---- */

/* "TLSv1.3"; the wire version (0x0304) in *wire when wire is not NULL. */
const char *ps_tls_version(const ps_transport_t *t, int *wire);
/* The OpenSSL cipher name ("TLS_AES_128_GCM_SHA256"); the IANA number in
 * *id when id is not NULL. */
const char *ps_tls_cipher(const ps_transport_t *t, int *id);
/* The ALPN protocol chosen, or an empty slice. */
ps_slice_t ps_tls_alpn(const ps_transport_t *t);
/* 1 when the session was resumed from a ticket. */
int ps_tls_resumed(const ps_transport_t *t);
/* 1 when sends go through kernel TLS (and sendfile through SSL_sendfile). */
static inline int ps_tls_ktls_send(const ps_transport_t *t)
{
    return t->ktls_send;
}
/* The certificate this server presented, as PEM, converted once per
 * context (owned by the context). */
ps_slice_t ps_tls_server_cert_pem(const ps_transport_t *t);
/* The client's certificates as sent, leaf first: their number, and the
 * PEM of number i appended to out. Return the count, or 0 / -errno. */
int ps_tls_client_cert_count(const ps_transport_t *t);
int ps_tls_client_cert_pem(const ps_transport_t *t, int i, ps_buf_t *out);
/* Appends the client certificate's subject as an RFC 4514 string
 * ("CN=alice,O=Example"), UTF-8 kept. Returns 0, -ENOENT (no client
 * certificate) or -ENOMEM. */
int ps_tls_client_subject(const ps_transport_t *t, ps_buf_t *out);
/* Why the client certificate did not verify (static text, also after the
 * handshake failed on it), or NULL when it did or none was sent. */
const char *ps_tls_client_verify_error(const ps_transport_t *t);

#endif
