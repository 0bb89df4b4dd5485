/* TLS under the transport: one connection's session (handshake, I/O,
 * accessors) of a context (tls.c). The plain socket path is inline in
 * transport.h. */
#define _GNU_SOURCE
#include "net/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* A file sent without kernel TLS is encrypted at most this much per call. */
#define SENDFILE_TLS_MAX (256 * 1024)

/* ---- the ticket-holding BIO ----
 *
 * A TLS 1.3 server sends its session tickets after the client's Finished,
 * each in a write of its own, just before the response to the request
 * that usually came with that Finished. Sessions without kernel TLS write
 * through this BIO instead of a socket BIO: it keeps what is written while
 * OpenSSL sends tickets and puts it in front of the next write, so tickets
 * and response leave in one system call (and one segment). Tickets only
 * serve a later connection, so holding them until the first response (or
 * the close_notify) delays nothing a client waits for. Everything else is
 * written at once, as by a socket BIO. */

typedef struct {
    int fd;
    SSL *ssl;
    char *held; /* tickets not sent yet: held[off..len) */
    size_t off, len;
} hold_state_t;

static BIO_METHOD *hold_bio_method;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;

static int hold_retry(BIO *b)
{
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_retry_write(b);
    return -1;
}

static int hold_write(BIO *b, const char *data, int n)
{
    hold_state_t *h = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (n <= 0)
        return 0;
    if (SSL_get_state(h->ssl) == TLS_ST_SW_SESSION_TICKET) {
        char *p = realloc(h->held, h->len + (size_t)n);
        if (p != NULL) {
            memcpy(p + h->len, data, (size_t)n);
            h->held = p;
            h->len += (size_t)n;
            return n;
        }
        /* No memory to hold it: it goes now. */
    }
    size_t pending = h->len - h->off;
    struct iovec v[2] = {{h->held + h->off, pending}, {(void *)data, (size_t)n}};
    struct msghdr m = {.msg_iov = pending ? v : v + 1, .msg_iovlen = pending ? 2 : 1};
    ssize_t w;
    do
        w = sendmsg(h->fd, &m, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return hold_retry(b);
    if (pending) {
        if ((size_t)w < pending) {
            h->off += (size_t)w;
            errno = EAGAIN;
            return hold_retry(b);
        }
        free(h->held);
        h->held = NULL;
        h->off = h->len = 0;
        w -= (ssize_t)pending;
        if (w == 0) {
            errno = EAGAIN;
            return hold_retry(b);
        }
    }
    return (int)w;
}

static long hold_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    PS_UNUSED(num);
    PS_UNUSED(ptr);
    hold_state_t *h = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH: /* writes are not buffered; held tickets wait for the next one */
    case BIO_CTRL_PUSH:
    case BIO_CTRL_POP:
        return 1;
    case BIO_CTRL_WPENDING:
        return h ? (long)(h->len - h->off) : 0;
    default:
        return 0;
    }
}

static int hold_create(BIO *b)
{
    hold_state_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return 0;
    h->fd = -1;
    BIO_set_data(b, h);
    BIO_set_init(b, 1);
    return 1;
}

static int hold_destroy(BIO *b)
{
    hold_state_t *h = BIO_get_data(b);
    if (h != NULL) {
        free(h->held);
        free(h);
        BIO_set_data(b, NULL);
    }
    return 1;
}

static void hold_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "pyserver hold");
    if (m == NULL || !BIO_meth_set_write(m, hold_write) || !BIO_meth_set_ctrl(m, hold_ctrl) ||
        !BIO_meth_set_create(m, hold_create) || !BIO_meth_set_destroy(m, hold_destroy)) {
        BIO_meth_free(m);
        ERR_clear_error();
        return;
    }
    hold_bio_method = m;
}

static BIO_METHOD *hold_method(void)
{
    pthread_once(&hold_once, hold_method_init);
    return hold_bio_method;
}

/* Sets ssl's BIOs: a socket BIO to read, the holding one to write. */
static int set_hold_bios(SSL *ssl, int fd)
{
    BIO *r = BIO_new_socket(fd, BIO_NOCLOSE);
    BIO *w = BIO_new(hold_method());
    if (r == NULL || w == NULL) {
        BIO_free(r);
        BIO_free(w);
        return -1;
    }
    hold_state_t *h = BIO_get_data(w);
    h->fd = fd;
    h->ssl = ssl;
    SSL_set_bio(ssl, r, w);
    return 0;
}

/* ---- sessions ---- */

int ps_transport_init_tls(ps_transport_t *t, int fd, ps_tls_ctx_t *ctx)
{
    ps_transport_init_plain(t, fd);
    SSL *ssl = ps_tls_session_new(ctx);
    int hold = ps_tls_ctx_holds_tickets(ctx) && hold_method() != NULL;
    if (ssl == NULL || (hold ? set_hold_bios(ssl, fd) : SSL_set_fd(ssl, fd) != 1)) {
        SSL_free(ssl);
        ERR_clear_error();
        return -ENOMEM;
    }
    SSL_set_accept_state(ssl);
    t->ssl = ssl;
    t->tls = ctx;
    return 0;
}

/* Maps a failed SSL call (r <= 0) to PS_IO_WANT_*, 0 (close_notify) or
 * -errno, setting t->reason; errors leave the queue empty. A session that
 * failed sends nothing more (no close_notify). */
static int tls_fail(ps_transport_t *t, int r)
{
    int saved = errno; /* the socket call's, before anything else runs */
    int e = SSL_get_error(t->ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        return PS_IO_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return PS_IO_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        t->shut = 1;
        if (ERR_peek_error() == 0) {
            t->reason = saved ? "connection error" : "connection closed by the peer";
            return saved ? -saved : -ECONNRESET;
        }
        /* fall through */
    default: {
        unsigned long err = ERR_peek_error();
        t->shut = 1;
        t->reason = err ? ERR_reason_error_string(err) : NULL;
        if (t->reason == NULL)
            t->reason = "TLS error";
        ERR_clear_error();
        return -EPROTO;
    }
    }
}

int ps_transport_sniff_plain_http(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    /* A method token so far, then a space or the end of what arrived. */
    return i > 0 && (i == n || p[i] == ' ');
}

#define SNIFF_TLS 2

/* Looks at the first bytes without consuming them. Returns SNIFF_TLS for a
 * TLS client (or one OpenSSL is to judge), PS_TLS_PLAINTEXT,
 * PS_IO_WANT_READ or -errno. */
static int sniff(ps_transport_t *t)
{
    char first[8];
    ssize_t n;
    do
        n = recv(t->fd, first, sizeof(first), MSG_PEEK);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN)
            return PS_IO_WANT_READ;
        t->reason = "connection error before the handshake";
        return -errno;
    }
    if (n == 0) {
        t->reason = "connection closed before the handshake";
        return -ECONNRESET;
    }
    t->sniffed = 1;
    if (first[0] != 0x16 && ps_transport_sniff_plain_http(first, (size_t)n))
        return PS_TLS_PLAINTEXT;
    return SNIFF_TLS;
}

int ps_transport_handshake(ps_transport_t *t)
{
    if (t->handshaken)
        return PS_TLS_DONE;
    if (!t->sniffed) {
        int rc = sniff(t);
        if (rc != SNIFF_TLS)
            return rc;
    }
    errno = 0;
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->handshaken = 1;
        t->ktls_send = BIO_get_ktls_send(SSL_get_wbio(t->ssl)) ? 1 : 0;
        return PS_TLS_DONE;
    }
    r = tls_fail(t, r);
    if (r == 0) { /* close_notify during the handshake */
        t->reason = "connection closed during the handshake";
        return -ECONNRESET;
    }
    return r;
}

void ps_transport_downgrade(ps_transport_t *t)
{
    SSL_free(t->ssl);
    free(t->tbuf);
    ps_transport_init_plain(t, t->fd);
}

ssize_t ps_tls_read(ps_transport_t *t, char *dst, size_t cap)
{
    size_t got = 0;
    t->blocked &= (uint8_t)~PS_TRANSPORT_READ_WANTS_WRITE;
    do {
        size_t n;
        errno = 0;
        int r = SSL_read_ex(t->ssl, dst + got, cap - got, &n);
        if (r <= 0) {
            int rc = tls_fail(t, r);
            if (rc == PS_IO_WANT_WRITE)
                t->blocked |= PS_TRANSPORT_READ_WANTS_WRITE;
            return got ? (ssize_t)got : rc;
        }
        got += n;
    } while (got < cap && SSL_has_pending(t->ssl));
    return (ssize_t)got;
}

/* One SSL_write_ex of len bytes at p. Returns bytes taken or PS_IO_* /
 * -errno; records WANT_READ in t->blocked. */
static ssize_t write_record(ps_transport_t *t, const char *p, size_t len)
{
    size_t w;
    errno = 0;
    int r = SSL_write_ex(t->ssl, p, len, &w);
    if (r > 0)
        return (ssize_t)w;
    r = tls_fail(t, r);
    if (r == PS_IO_WANT_READ)
        t->blocked |= PS_TRANSPORT_WRITE_WANTS_READ;
    if (r == 0) {
        t->reason = "the peer closed the TLS session";
        return -EPIPE;
    }
    return r;
}

static int ensure_tbuf(ps_transport_t *t)
{
    if (t->tbuf == NULL && (t->tbuf = malloc(PS_TLS_RECORD)) == NULL)
        return -ENOMEM;
    return 0;
}

/* Each SSL_write_ex takes min(PS_TLS_RECORD, bytes left): from the caller's
 * buffer when one buffer holds that much, else gathered into the thread's
 * scratch record. That length depends only on what is left, so a retry
 * with the same bytes (or more) asks OpenSSL for at least as much as the
 * write it must finish, gathered again (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
 * lets it come from anywhere): no connection keeps a record buffer of its
 * own for this. */
static _Thread_local char gather[PS_TLS_RECORD];

ssize_t ps_tls_writev(ps_transport_t *t, const struct iovec *iov, int n)
{
    size_t total = 0, done = 0, off = 0;
    int i = 0;
    t->blocked &= (uint8_t)~PS_TRANSPORT_WRITE_WANTS_READ;
    t->tbuf_len = 0;
    for (int k = 0; k < n; k++)
        total += iov[k].iov_len;
    while (done < total) {
        size_t want = PS_MIN((size_t)PS_TLS_RECORD, total - done);
        while (iov[i].iov_len == off) {
            i++;
            off = 0;
        }
        const char *p = (const char *)iov[i].iov_base + off;
        if (iov[i].iov_len - off < want) {
            size_t got = 0, o = off;
            for (int k = i; got < want; k++, o = 0) {
                size_t m = PS_MIN(iov[k].iov_len - o, want - got);
                if (m)
                    memcpy(gather + got, (const char *)iov[k].iov_base + o, m);
                got += m;
            }
            p = gather;
        }
        ssize_t w = write_record(t, p, want);
        if (w < 0)
            return done ? (ssize_t)done : w;
        done += (size_t)w;
        /* Advance the cursor by w bytes. */
        for (size_t left = (size_t)w; left > 0;) {
            size_t m = PS_MIN(iov[i].iov_len - off, left);
            off += m;
            left -= m;
            if (off == iov[i].iov_len && left > 0) {
                i++;
                off = 0;
            }
        }
    }
    return (ssize_t)done;
}

/* Without kernel TLS: pread a record's worth into tbuf and encrypt it. A
 * record that could not be sent stays in tbuf for the retry. */
static ssize_t sendfile_copy(ps_transport_t *t, int fd, int64_t offset, size_t count)
{
    size_t done = 0, limit = PS_MIN(count, (size_t)SENDFILE_TLS_MAX);
    if (ensure_tbuf(t) < 0)
        return -ENOMEM;
    while (done < limit) {
        int64_t at = offset + (int64_t)done;
        if (t->tbuf_len == 0 || t->tbuf_fd != fd || t->tbuf_off != at) {
            ssize_t r;
            do
                r = pread(fd, t->tbuf, PS_MIN((size_t)PS_TLS_RECORD, limit - done), (off_t)at);
            while (r < 0 && errno == EINTR);
            t->tbuf_len = 0;
            if (r < 0)
                return done ? (ssize_t)done : -errno;
            if (r == 0)
                return (ssize_t)done; /* the file ends early */
            t->tbuf_len = (size_t)r;
            t->tbuf_fd = fd;
            t->tbuf_off = at;
        }
        ssize_t w = write_record(t, t->tbuf, t->tbuf_len);
        if (w < 0)
            return done ? (ssize_t)done : w;
        t->tbuf_len -= (size_t)w;
        if (t->tbuf_len) {
            memmove(t->tbuf, t->tbuf + w, t->tbuf_len);
            t->tbuf_off += w;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

ssize_t ps_tls_sendfile(ps_transport_t *t, int fd, int64_t offset, size_t count)
{
    t->blocked &= (uint8_t)~PS_TRANSPORT_WRITE_WANTS_READ;
    if (!t->ktls_send)
        return sendfile_copy(t, fd, offset, count);
    errno = 0;
    ossl_ssize_t r = SSL_sendfile(t->ssl, fd, (off_t)offset, count, 0);
    if (r >= 0)
        return (ssize_t)r;
    int rc = tls_fail(t, (int)r);
    if (rc == PS_IO_WANT_READ)
        t->blocked |= PS_TRANSPORT_WRITE_WANTS_READ;
    return rc == 0 ? -EPIPE : rc;
}

/* Sends close_notify once, without waiting for the peer's. */
static void send_close_notify(ps_transport_t *t)
{
    if (!t->shut && t->handshaken) {
        errno = 0;
        SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
    t->shut = 1;
}

int ps_tls_shutdown(ps_transport_t *t)
{
    send_close_notify(t);
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

void ps_tls_close(ps_transport_t *t)
{
    if (t->ssl != NULL) {
        send_close_notify(t);
        SSL_free(t->ssl);
    }
    free(t->tbuf);
    if (t->fd >= 0)
        close(t->fd);
    ps_transport_init_plain(t, -1);
}

int ps_transport_release_buffers(ps_transport_t *t)
{
    if (t->ssl == NULL || t->tbuf_len)
        return 0;
    free(t->tbuf);
    t->tbuf = NULL;
    return SSL_free_buffers(t->ssl);
}

int ps_tls_pending(const ps_transport_t *t)
{
    return SSL_has_pending(t->ssl);
}

/* ---- accessors ---- */

const char *ps_tls_version(const ps_transport_t *t, int *wire)
{
    if (wire)
        *wire = t->ssl ? SSL_version(t->ssl) : 0;
    return t->ssl ? SSL_get_version(t->ssl) : NULL;
}

const char *ps_tls_cipher(const ps_transport_t *t, int *id)
{
    const SSL_CIPHER *c = t->ssl ? SSL_get_current_cipher(t->ssl) : NULL;
    if (id)
        *id = c ? SSL_CIPHER_get_protocol_id(c) : 0;
    return c ? SSL_CIPHER_get_name(c) : NULL;
}

ps_slice_t ps_tls_alpn(const ps_transport_t *t)
{
    const unsigned char *p = NULL;
    unsigned len = 0;
    if (t->ssl)
        SSL_get0_alpn_selected(t->ssl, &p, &len);
    return (ps_slice_t){(const char *)p, len};
}

int ps_tls_resumed(const ps_transport_t *t)
{
    return t->ssl ? SSL_session_reused(t->ssl) : 0;
}

ps_slice_t ps_tls_server_cert_pem(const ps_transport_t *t)
{
    X509 *x = t->ssl ? SSL_get_certificate(t->ssl) : NULL;
    return x ? ps_tls_ctx_cert_pem(t->tls, x) : (ps_slice_t){NULL, 0};
}

/* Certificate i of the client's: the leaf, then the chain it sent (which
 * OpenSSL keeps without the leaf on a server). Borrowed. */
static X509 *client_cert(const ps_transport_t *t, int i)
{
    X509 *leaf = t->ssl ? SSL_get0_peer_certificate(t->ssl) : NULL;
    if (leaf == NULL || i < 0)
        return NULL;
    if (i == 0)
        return leaf;
    STACK_OF(X509) *chain = SSL_get_peer_cert_chain(t->ssl);
    int skip = chain && sk_X509_num(chain) > 0 && X509_cmp(sk_X509_value(chain, 0), leaf) == 0;
    return chain && i - 1 + skip < sk_X509_num(chain) ? sk_X509_value(chain, i - 1 + skip) : NULL;
}

int ps_tls_client_cert_count(const ps_transport_t *t)
{
    int n = 0;
    while (client_cert(t, n) != NULL)
        n++;
    return n;
}

/* Appends what the BIO holds to out and frees it. Returns 0 or -ENOMEM. */
static int bio_to_buf(BIO *bio, ps_buf_t *out)
{
    char *data;
    long len = BIO_get_mem_data(bio, &data);
    int rc = ps_buf_append(out, data, (size_t)len);
    BIO_free(bio);
    return rc;
}

int ps_tls_client_cert_pem(const ps_transport_t *t, int i, ps_buf_t *out)
{
    X509 *x = client_cert(t, i);
    if (x == NULL)
        return -ENOENT;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL || !PEM_write_bio_X509(bio, x)) {
        BIO_free(bio);
        ERR_clear_error();
        return -ENOMEM;
    }
    return bio_to_buf(bio, out);
}

int ps_tls_client_subject(const ps_transport_t *t, ps_buf_t *out)
{
    X509 *x = client_cert(t, 0);
    if (x == NULL)
        return -ENOENT;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL || X509_NAME_print_ex(bio, X509_get_subject_name(x), 0,
                                          XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB) < 0) {
        BIO_free(bio);
        ERR_clear_error();
        return -ENOMEM;
    }
    return bio_to_buf(bio, out);
}

const char *ps_tls_client_verify_error(const ps_transport_t *t)
{
    /* Also after a handshake that failed on the certificate, which then is
     * not kept. X509_V_OK until a certificate is checked. */
    long v = t->ssl ? SSL_get_verify_result(t->ssl) : X509_V_OK;
    return v == X509_V_OK ? NULL : X509_verify_cert_error_string(v);
}
