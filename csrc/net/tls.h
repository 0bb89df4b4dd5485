/* TLS contexts and certificates: one context per TLS listener, shared by
 * its connections. The settings, the certificate and key files (read once
 * into PEM text), the choice of a certificate by the name a client asks
 * for (SNI), the ALPN list, the session ticket keys, kernel TLS.
 * One connection's TLS session and its I/O are transport.[ch]; the
 * bridge's TLS settings and ticket rotation are csrc/py/tls.c.
 */
#ifndef PS_TLS_H
#define PS_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"

enum ps_tls_cert_reqs {
    PS_TLS_CERT_NONE = 0, /* no client certificate asked for */
    PS_TLS_CERT_OPTIONAL, /* asked for; verified when sent */
    PS_TLS_CERT_REQUIRED, /* a verified client certificate or no handshake */
};

/* Certificate and key pairs of one context. The first is the default; the
 * others serve the names their certificates hold (SNI). A pair with the
 * same names as an earlier one but another key type (an RSA certificate
 * beside an ECDSA one) is served with it, to the clients that need it. */
#define PS_TLS_MAX_CERTS 64
#define PS_TLS_MAX_TICKET_KEYS 4

typedef struct {
    const char *certfile; /* PEM: the certificate then its chain */
    const char *keyfile;  /* PEM private key; NULL: it is in certfile */
} ps_tls_cert_t;

typedef struct {
    ps_tls_cert_t certs[PS_TLS_MAX_CERTS];
    int ncerts;
    const char *key_password; /* for encrypted keys, or NULL */
    const char *ca_certs;     /* PEM file of CAs that sign client certificates */
    int cert_reqs;            /* enum ps_tls_cert_reqs */
    const char *ciphers;      /* TLS 1.2 cipher list; NULL: ECDHE with AEADs */
    const char *ciphersuites; /* TLS 1.3 suites; NULL: OpenSSL's default */
    int min_version;          /* TLS1_2_VERSION (0 means that) or TLS1_3_VERSION */
    /* ALPN protocols in the server's order of preference, as one wire-format
     * string ("\x08http/1.1"); NULL: http/1.1. A client that offers ALPN
     * without any of them is refused (no_application_protocol). */
    const char *alpn;
    size_t alpn_len;
    int no_ktls; /* 1: never hand the session to kernel TLS */
} ps_tls_settings_t;

typedef struct ps_tls_ctx ps_tls_ctx_t;

/* Ticket encryption keys: AES-256-CBC and HMAC-SHA256, named. */
typedef struct {
    uint8_t name[16];
    uint8_t aes_key[32];
    uint8_t hmac_key[32];
} ps_tls_ticket_key_t;

/* The PEM text of the files a context is built from, read once so that
 * contexts can be built again from it whatever the files hold later (a
 * worker respawned after a renewal that did not load). */
typedef struct {
    ps_buf_t cert[PS_TLS_MAX_CERTS];
    ps_buf_t key[PS_TLS_MAX_CERTS]; /* empty: the key is in cert */
    ps_buf_t ca;                    /* empty: no CA file */
} ps_tls_pem_t;

/* Reads the files s names into pem (zeroed by the caller). Returns 0, or
 * -1 with a one-line reason in err; pem is then empty. */
int ps_tls_pem_read(ps_tls_pem_t *pem, const ps_tls_settings_t *s, char *err, size_t errlen);
/* Wipes and frees the text (the keys are secret). */
void ps_tls_pem_free(ps_tls_pem_t *pem);

/* Builds a context: loads certificates and keys (checking each key against
 * its certificate), the client CAs, the cipher lists, versions and ALPN.
 * Session tickets are on, with one random key until ps_tls_set_ticket_keys.
 * ps_tls_ctx_new reads s's files; ps_tls_ctx_new_pem takes their text from
 * pem (s still names the files, for the error messages).
 * Returns NULL with a one-line reason in err (never printed) on failure. */
ps_tls_ctx_t *ps_tls_ctx_new(const ps_tls_settings_t *s, char *err, size_t errlen);
ps_tls_ctx_t *ps_tls_ctx_new_pem(const ps_tls_settings_t *s, const ps_tls_pem_t *pem, char *err,
                                 size_t errlen);
void ps_tls_ctx_free(ps_tls_ctx_t *ctx);
/* Replaces the ticket keys: keys[0] encrypts new tickets, all of them
 * decrypt (a ticket under an older key is accepted and renewed). A master
 * generates them, hands them to its workers and rotates them by calling this
 * again with the new key first. Returns 0 or -EINVAL (n out of range). */
int ps_tls_set_ticket_keys(ps_tls_ctx_t *ctx, const ps_tls_ticket_key_t *keys, int n);
/* fn(data) runs when a client presents a ticket under a key the context
 * does not have, before the ticket is refused: it may call
 * ps_tls_set_ticket_keys with keys the master published since (NULL: none). */
void ps_tls_set_key_refresh(ps_tls_ctx_t *ctx, void (*fn)(void *data), void *data);
/* Fills key with random bytes. Returns 0 or -EIO. */
int ps_tls_generate_ticket_key(ps_tls_ticket_key_t *key);

/* The index of the context that serves servername (what a client asked
 * for by SNI; NULL: nothing): the one whose certificate names it exactly,
 * else the one with a wildcard for it ("*.example.com" covers
 * "a.example.com", not "example.com" nor "a.b.example.com"), else 0, the
 * default. Contexts are numbered in the order of the pairs, a pair served
 * with an earlier one not counted. Case does not matter. A binary search
 * of a table built with the context: no certificate is looked at. */
int ps_tls_ctx_find_host(const ps_tls_ctx_t *ctx, const char *servername);

/* For the sessions (transport.c). */
typedef struct ssl_st SSL;
typedef struct x509_st X509;
/* A new server session of ctx, or NULL when out of memory. */
SSL *ps_tls_session_new(ps_tls_ctx_t *ctx);
/* 1 when ctx's sessions write through the ticket-holding BIO (no kernel
 * TLS; see transport.c). */
int ps_tls_ctx_holds_tickets(const ps_tls_ctx_t *ctx);
/* The PEM text of ctx's certificate x (one of its own), or an empty slice. */
ps_slice_t ps_tls_ctx_cert_pem(const ps_tls_ctx_t *ctx, const X509 *x);

#endif
