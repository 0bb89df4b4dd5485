/* TLS contexts and certificates (see tls.h). */
#define _GNU_SOURCE
#include "net/tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* TLS 1.2: forward secrecy and AEAD ciphers only. */
#define DEFAULT_CIPHERS                                                                            \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define DEFAULT_ALPN "\x08http/1.1"
/* A name a certificate holds, lower case, and the context that serves it.
 * A wildcard is kept as written ("*.example.com"). */
typedef struct {
    char *name;
    int host;
} host_name_t;

struct ps_tls_ctx {
    SSL_CTX *ssl; /* the default: hosts[0], the one sessions start with */
    SSL_CTX *hosts[PS_TLS_MAX_CERTS];
    int nhosts;
    /* Per host: its first certificate's names joined (what a pair must
     * match to share it) and the key types it holds (1 << EVP_PKEY id
     * bucket). */
    char *host_key[PS_TLS_MAX_CERTS];
    unsigned host_types[PS_TLS_MAX_CERTS];
    host_name_t *names; /* sorted by name, one entry per name (the first pair's) */
    int nnames;
    EVP_CIPHER *aes;
    char *password;
    unsigned char alpn[256];
    size_t alpn_len;
    ps_tls_ticket_key_t keys[PS_TLS_MAX_TICKET_KEYS];
    int nkeys;
    void (*refresh_keys)(void *data); /* see ps_tls_set_key_refresh */
    void *refresh_data;
    struct {
        X509 *x509; /* borrowed from its host's SSL_CTX */
        char *pem;
        size_t pem_len;
    } certs[PS_TLS_MAX_CERTS];
    int ncerts;
    int hold_tickets; /* sessions write through a ticket-holding BIO (no kernel TLS) */
};

/* ---- contexts ---- */

/* Writes what (a format with one %s for path) then ": " and the first
 * (most precise) error of OpenSSL's queue into err, and empties the queue. */
static void set_error(char *err, size_t len, const char *what, const char *path)
{
    unsigned long e = ERR_peek_error();
    const char *reason = "unknown error";
    if (e && ERR_SYSTEM_ERROR(e))
        reason = strerror(ERR_GET_REASON(e));
    else if (e && ERR_reason_error_string(e))
        reason = ERR_reason_error_string(e);
    int n = snprintf(err, len, what, path ? path : "");
    if (n >= 0 && (size_t)n < len)
        snprintf(err + n, len - (size_t)n, ": %s", reason);
    ERR_clear_error();
}

/* Never prompts: an encrypted key without a password fails to load. */
static int password_cb(char *buf, int size, int rwflag, void *u)
{
    PS_UNUSED(rwflag);
    const char *pw = u;
    if (pw == NULL)
        return -1;
    size_t n = strlen(pw);
    if (n > (size_t)size)
        return -1;
    memcpy(buf, pw, n);
    return (int)n;
}

/* Server preference: the first configured protocol the client offers. A
 * client whose offer has none of them is refused, as RFC 7301 says. */
static int alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    ps_tls_ctx_t *ctx = arg;
    PS_UNUSED(s);
    for (size_t i = 0; i < ctx->alpn_len; i += 1 + ctx->alpn[i]) {
        const unsigned char *p = ctx->alpn + i;
        for (unsigned j = 0; j < inlen; j += 1u + in[j]) {
            if (in[j] == p[0] && j + 1u + in[j] <= inlen && memcmp(in + j + 1, p + 1, p[0]) == 0) {
                *out = in + j + 1;
                *outlen = in[j];
                return SSL_TLSEXT_ERR_OK;
            }
        }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* The key of the ring named `name`, or NULL; *current is set when it is
 * keys[0]. */
static const ps_tls_ticket_key_t *find_key(const ps_tls_ctx_t *ctx, const unsigned char *name,
                                           int *current)
{
    for (int i = 0; i < ctx->nkeys; i++) {
        if (memcmp(name, ctx->keys[i].name, sizeof(ctx->keys[i].name)) == 0) {
            *current = i == 0;
            return &ctx->keys[i];
        }
    }
    return NULL;
}

/* Encrypts new tickets under keys[0]; decrypts under any key of the ring,
 * asking for a renewed ticket (2) when it was not the current one, or for
 * TLS 1.3. A name not in the ring makes the context refresh its keys once
 * (another worker may already issue tickets under a key this one has not
 * read yet). Returns 1, 2, 0 (unknown key: full handshake) or -1. */
static int ticket_cb(SSL *s, unsigned char *name, unsigned char *iv, EVP_CIPHER_CTX *cctx,
                     EVP_MAC_CTX *hctx, int enc)
{
    ps_tls_ctx_t *ctx = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
    const ps_tls_ticket_key_t *k = NULL;
    int rc = 1;
    if (enc) {
        k = &ctx->keys[0];
        memcpy(name, k->name, sizeof(k->name));
        if (RAND_bytes(iv, 16) <= 0 || !EVP_EncryptInit_ex2(cctx, ctx->aes, k->aes_key, iv, NULL))
            return -1;
    } else {
        int current = 0;
        k = find_key(ctx, name, &current);
        if (k == NULL && ctx->refresh_keys) {
            ctx->refresh_keys(ctx->refresh_data);
            k = find_key(ctx, name, &current);
        }
        if (k == NULL)
            return 0;
        /* TLS 1.3 clients use a ticket once (RFC 8446 C.4): a resumption
         * gets a fresh ticket too, or the client runs out of them. */
        rc = current && SSL_version(s) != TLS1_3_VERSION ? 1 : 2;
        if (!EVP_DecryptInit_ex2(cctx, ctx->aes, k->aes_key, iv, NULL))
            return -1;
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)k->hmac_key,
                                          sizeof(k->hmac_key)),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    return EVP_MAC_CTX_set_params(hctx, params) ? rc : -1;
}

int ps_tls_generate_ticket_key(ps_tls_ticket_key_t *key)
{
    return RAND_bytes((unsigned char *)key, sizeof(*key)) == 1 ? 0 : -EIO;
}

int ps_tls_set_ticket_keys(ps_tls_ctx_t *ctx, const ps_tls_ticket_key_t *keys, int n)
{
    if (n < 1 || n > PS_TLS_MAX_TICKET_KEYS)
        return -EINVAL;
    memcpy(ctx->keys, keys, (size_t)n * sizeof(*keys));
    ctx->nkeys = n;
    return 0;
}

void ps_tls_set_key_refresh(ps_tls_ctx_t *ctx, void (*fn)(void *data), void *data)
{
    ctx->refresh_keys = fn;
    ctx->refresh_data = data;
}

/* Keeps the PEM of the certificate just loaded into ssl, for
 * ps_tls_server_cert_pem. */
static int keep_cert_pem(ps_tls_ctx_t *ctx, SSL_CTX *ssl)
{
    X509 *x = SSL_CTX_get0_certificate(ssl);
    BIO *bio = BIO_new(BIO_s_mem());
    char *data;
    if (x == NULL || bio == NULL || !PEM_write_bio_X509(bio, x))
        goto error;
    long len = BIO_get_mem_data(bio, &data);
    int i = ctx->ncerts;
    for (int j = 0; j < ctx->ncerts; j++)
        if (ctx->certs[j].x509 == x)
            i = j; /* the same slot reloaded */
    free(ctx->certs[i].pem);
    ctx->certs[i].pem = malloc((size_t)len);
    if (ctx->certs[i].pem == NULL)
        goto error;
    memcpy(ctx->certs[i].pem, data, (size_t)len);
    ctx->certs[i].pem_len = (size_t)len;
    ctx->certs[i].x509 = x;
    if (i == ctx->ncerts)
        ctx->ncerts++;
    BIO_free(bio);
    return 0;
error:
    BIO_free(bio);
    return -1;
}

/* A BIO reading b's bytes (not copied), or NULL. */
static BIO *pem_bio(const ps_buf_t *b)
{
    return BIO_new_mem_buf(ps_buf_size(b) ? ps_buf_head(b) : "", (int)ps_buf_size(b));
}

/* 1 when OpenSSL's last error only says the PEM text has no more blocks
 * (the end of a chain), which it then clears; 0 for a real error. */
static int pem_ended(void)
{
    unsigned long e = ERR_peek_last_error();
    if (e != 0 && (ERR_GET_LIB(e) != ERR_LIB_PEM || ERR_GET_REASON(e) != PEM_R_NO_START_LINE))
        return 0;
    ERR_clear_error();
    return 1;
}

/* The certificate then its chain, from PEM text. Returns 1 or 0 (OpenSSL's
 * queue says why). */
static int use_chain(SSL_CTX *ssl, const ps_buf_t *pem)
{
    BIO *bio = pem_bio(pem);
    X509 *leaf = bio ? PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL) : NULL;
    int ok = leaf != NULL && SSL_CTX_use_certificate(ssl, leaf) == 1 &&
             SSL_CTX_clear_chain_certs(ssl) == 1;
    X509_free(leaf);
    while (ok) {
        X509 *x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        if (x == NULL) {
            ok = pem_ended();
            break;
        }
        if (SSL_CTX_add0_chain_cert(ssl, x) != 1) {
            X509_free(x);
            ok = 0;
        }
    }
    BIO_free(bio);
    return ok;
}

/* The private key from PEM text (decrypted with the context's password),
 * checked against the certificate just loaded. Returns 1 or 0. */
static int use_key(ps_tls_ctx_t *ctx, SSL_CTX *ssl, const ps_buf_t *pem)
{
    BIO *bio = pem_bio(pem);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, password_cb, ctx->password) : NULL;
    int ok = key != NULL && SSL_CTX_use_PrivateKey(ssl, key) == 1;
    EVP_PKEY_free(key);
    BIO_free(bio);
    return ok;
}

/* Whether PEM text holds a private key block of any kind ("-----BEGIN ... PRIVATE KEY-----"). */
static int has_private_key(const ps_buf_t *pem)
{
    static const char mark[] = "PRIVATE KEY-----";
    return ps_buf_size(pem) > 0 &&
           memmem(ps_buf_head(pem), ps_buf_size(pem), mark, sizeof(mark) - 1) != NULL;
}

/* Loads pair i of s into ssl: the chain, then the key checked against the
 * certificate. Returns 0, or -1 with a one-line reason in err. */
static int load_pair(ps_tls_ctx_t *ctx, SSL_CTX *ssl, const ps_tls_settings_t *s,
                     const ps_tls_pem_t *pem, int i, char *err, size_t errlen)
{
    const char *cert = s->certs[i].certfile;
    const char *key = s->certs[i].keyfile ? s->certs[i].keyfile : cert;
    if (!use_chain(ssl, &pem->cert[i])) {
        set_error(err, errlen, "cannot load the certificate chain %s", cert);
        return -1;
    }
    if (!use_key(ctx, ssl, s->certs[i].keyfile ? &pem->key[i] : &pem->cert[i])) {
        int reason = ERR_GET_REASON(ERR_peek_error());
        const char *what = "cannot load the private key %s";
        if (s->certs[i].keyfile == NULL && !has_private_key(&pem->cert[i])) {
            /* The usual mistake: the certificate given, its key forgotten. */
            ERR_clear_error();
            snprintf(err, errlen, "no private key in %s; give --ssl-keyfile", cert);
            return -1;
        }
        if (reason == X509_R_KEY_VALUES_MISMATCH)
            what = "the private key %s does not match the certificate";
        else if (ctx->password == NULL && reason == ERR_R_INTERRUPTED_OR_CANCELLED)
            what = "the private key %s is encrypted and no password was given";
        else if (ctx->password != NULL)
            what = "cannot load the private key %s (is the password right?)";
        set_error(err, errlen, what, key);
        return -1;
    }
    if (SSL_CTX_check_private_key(ssl) != 1) {
        set_error(err, errlen, "the private key does not match the certificate %s", cert);
        return -1;
    }
    if (keep_cert_pem(ctx, ssl) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* The CAs that sign client certificates, from PEM text: their certificates
 * (and any CRLs, as the file loader takes them) trusted for verification,
 * the certificates' names sent in the CertificateRequest. Returns 1 or 0. */
static int use_client_cas(SSL_CTX *ssl, const ps_buf_t *pem)
{
    BIO *bio = pem_bio(pem);
    STACK_OF(X509_INFO) *infos = bio ? PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL) : NULL;
    X509_STORE *store = SSL_CTX_get_cert_store(ssl);
    STACK_OF(X509_NAME) *names = sk_X509_NAME_new_null();
    int ok = infos != NULL && store != NULL && names != NULL;
    for (int i = 0; ok && i < sk_X509_INFO_num(infos); i++) {
        X509_INFO *info = sk_X509_INFO_value(infos, i);
        if (info->crl != NULL && X509_STORE_add_crl(store, info->crl) != 1)
            ok = 0;
        if (ok && info->x509 != NULL) {
            X509_NAME *name = X509_NAME_dup(X509_get_subject_name(info->x509));
            ok = X509_STORE_add_cert(store, info->x509) == 1 && name != NULL &&
                 sk_X509_NAME_push(names, name) > 0;
            if (!ok)
                X509_NAME_free(name);
        }
    }
    ok = ok && sk_X509_NAME_num(names) > 0;
    if (ok)
        SSL_CTX_set_client_CA_list(ssl, names); /* takes names */
    else
        sk_X509_NAME_pop_free(names, X509_NAME_free);
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    BIO_free(bio);
    return ok;
}

static int load_verify(SSL_CTX *ssl, const ps_tls_settings_t *s, const ps_tls_pem_t *pem, char *err,
                       size_t errlen)
{
    if (s->cert_reqs == PS_TLS_CERT_NONE) {
        SSL_CTX_set_verify(ssl, SSL_VERIFY_NONE, NULL);
        return 0;
    }
    if (s->cert_reqs != PS_TLS_CERT_OPTIONAL && s->cert_reqs != PS_TLS_CERT_REQUIRED) {
        snprintf(err, errlen, "unknown client certificate requirement %d", s->cert_reqs);
        return -1;
    }
    if (s->ca_certs == NULL) {
        snprintf(err, errlen, "verifying client certificates needs a CA certificates file");
        return -1;
    }
    if (!use_client_cas(ssl, &pem->ca)) {
        set_error(err, errlen, "cannot load the CA certificates %s", s->ca_certs);
        return -1;
    }
    int mode = SSL_VERIFY_PEER;
    if (s->cert_reqs == PS_TLS_CERT_REQUIRED)
        mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ssl, mode, NULL);
    return 0;
}

/* Appends the file at path to b (at most 1 MiB: no PEM file is larger).
 * Returns 0 or -errno (-EFBIG beyond the bound). */
static int read_file(const char *path, ps_buf_t *b)
{
    enum { MAX_PEM = 1 << 20 };
    FILE *f = fopen(path, "rbe");
    if (f == NULL)
        return -errno;
    int rc = 0;
    for (;;) {
        if (ps_buf_size(b) >= MAX_PEM) {
            rc = -EFBIG;
            break;
        }
        if (ps_buf_reserve(b, 16384) < 0) {
            rc = -ENOMEM;
            break;
        }
        size_t n = fread(b->data + b->len, 1, b->cap - b->len, f);
        b->len += n;
        if (n == 0) {
            rc = ferror(f) ? -EIO : 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* Reads path into b; on failure writes "what: reason" into err. */
static int read_pem(const char *path, ps_buf_t *b, const char *what, char *err, size_t errlen)
{
    int rc = read_file(path, b);
    if (rc == 0)
        return 0;
    int n = snprintf(err, errlen, what, path);
    if (n >= 0 && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, ": %s", strerror(-rc));
    return -1;
}

int ps_tls_pem_read(ps_tls_pem_t *pem, const ps_tls_settings_t *s, char *err, size_t errlen)
{
    int n = s->ncerts < 0 ? 0 : PS_MIN(s->ncerts, PS_TLS_MAX_CERTS);
    for (int i = 0; i < n; i++) {
        const char *cert = s->certs[i].certfile, *key = s->certs[i].keyfile;
        if (cert == NULL) {
            snprintf(err, errlen, "TLS needs a certificate file");
            goto error;
        }
        if (read_pem(cert, &pem->cert[i], "cannot load the certificate chain %s", err, errlen) <
                0 ||
            (key && read_pem(key, &pem->key[i], "cannot load the private key %s", err, errlen) < 0))
            goto error;
    }
    if (s->cert_reqs != PS_TLS_CERT_NONE && s->ca_certs &&
        read_pem(s->ca_certs, &pem->ca, "cannot load the CA certificates %s", err, errlen) < 0)
        goto error;
    return 0;
error:
    ps_tls_pem_free(pem);
    return -1;
}

static void wipe(ps_buf_t *b)
{
    if (b->data)
        explicit_bzero(b->data, b->cap);
    ps_buf_free(b);
}

void ps_tls_pem_free(ps_tls_pem_t *pem)
{
    for (int i = 0; i < PS_TLS_MAX_CERTS; i++) {
        wipe(&pem->cert[i]); /* a key may be in the certificate's file */
        wipe(&pem->key[i]);
    }
    wipe(&pem->ca);
}

/* Whether the kernel can take TLS sessions (its tls module is loaded or
 * can be): asking a socket not yet connected for it fails with ENOENT
 * only when it cannot. */
static int kernel_has_tls(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int r = setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls"));
    int e = errno;
    close(fd);
    return r == 0 || e != ENOENT;
}

static int set_protocols(ps_tls_ctx_t *ctx, SSL_CTX *ssl, const ps_tls_settings_t *s, char *err,
                         size_t errlen)
{
    int min = s->min_version ? s->min_version : TLS1_2_VERSION;
    if (min != TLS1_2_VERSION && min != TLS1_3_VERSION) {
        snprintf(err, errlen, "the minimum TLS version must be TLS 1.2 or TLS 1.3");
        return -1;
    }
    SSL_CTX_set_min_proto_version(ssl, min);
    if (SSL_CTX_set_cipher_list(ssl, s->ciphers ? s->ciphers : DEFAULT_CIPHERS) != 1) {
        set_error(err, errlen, "bad TLS 1.2 cipher list \"%s\"", s->ciphers);
        return -1;
    }
    if (s->ciphersuites && SSL_CTX_set_ciphersuites(ssl, s->ciphersuites) != 1) {
        set_error(err, errlen, "bad TLS 1.3 cipher suites \"%s\"", s->ciphersuites);
        return -1;
    }
    const char *alpn = s->alpn ? s->alpn : DEFAULT_ALPN;
    size_t alpn_len = s->alpn ? s->alpn_len : sizeof(DEFAULT_ALPN) - 1;
    if (alpn_len == 0 || alpn_len > sizeof(ctx->alpn))
        goto bad_alpn;
    for (size_t i = 0; i < alpn_len; i += 1 + (unsigned char)alpn[i])
        if (alpn[i] == 0 || i + 1 + (unsigned char)alpn[i] > alpn_len)
            goto bad_alpn;
    memcpy(ctx->alpn, alpn, alpn_len);
    ctx->alpn_len = alpn_len;
    SSL_CTX_set_alpn_select_cb(ssl, alpn_cb, ctx);
    return 0;
bad_alpn:
    snprintf(err, errlen, "bad ALPN protocol list");
    return -1;
}

ps_tls_ctx_t *ps_tls_ctx_new(const ps_tls_settings_t *s, char *err, size_t errlen)
{
    ps_tls_pem_t pem;
    memset(&pem, 0, sizeof(pem));
    if (ps_tls_pem_read(&pem, s, err, errlen) < 0)
        return NULL;
    ps_tls_ctx_t *ctx = ps_tls_ctx_new_pem(s, &pem, err, errlen);
    ps_tls_pem_free(&pem);
    return ctx;
}

/* A new SSL_CTX with every setting the pairs share (options, tickets,
 * versions, ciphers, ALPN, client verification), its app data ctx. Each
 * pair's context is built alike, so that a handshake moved to another one
 * by its server name keeps the same rules. Returns NULL with err set. */
static SSL_CTX *new_host(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, const ps_tls_pem_t *pem,
                         char *err, size_t errlen)
{
    SSL_CTX *ssl = SSL_CTX_new(TLS_server_method());
    if (ssl == NULL) {
        set_error(err, errlen, "cannot create a TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_app_data(ssl, ctx);
    uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (!ctx->hold_tickets)
        opts |= SSL_OP_ENABLE_KTLS;
    SSL_CTX_set_options(ssl, opts);
    SSL_CTX_clear_options(ssl, SSL_OP_NO_TICKET);
    /* An idle keep-alive connection holds no record buffers (about 34 KiB). */
    SSL_CTX_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    /* One read(2) takes whatever the socket holds, not a record header first. */
    SSL_CTX_set_read_ahead(ssl, 1);
    /* Resumption is by tickets only: nothing per session kept in a worker. */
    SSL_CTX_set_session_cache_mode(ssl, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_session_id_context(ssl, (const unsigned char *)"pyserver", 8);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ssl, ticket_cb);
    if (set_protocols(ctx, ssl, s, err, errlen) < 0 || load_verify(ssl, s, pem, err, errlen) < 0) {
        SSL_CTX_free(ssl);
        return NULL;
    }
    return ssl;
}

/* ---- names (SNI) ---- */

/* A lower-case copy of a DNS name from a certificate, or NULL when it is
 * not one a client could ask for (empty, too long, a NUL, a '*' anywhere
 * but as the whole first label of at least three). */
static char *dns_name(const unsigned char *p, int len)
{
    if (len <= 0 || len > 253 || memchr(p, '\0', (size_t)len) != NULL)
        return NULL;
    const unsigned char *star = memchr(p, '*', (size_t)len);
    if (star != NULL) {
        const unsigned char *dot = memchr(p + 2, '.', (size_t)(len > 2 ? len - 2 : 0));
        if (star != p || len < 4 || p[1] != '.' || memchr(p + 1, '*', (size_t)len - 1) || !dot)
            return NULL; /* one label only, and not a whole domain's top ("*.com") */
    }
    char *name = malloc((size_t)len + 1);
    if (name == NULL)
        return NULL;
    for (int i = 0; i < len; i++)
        name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
    name[len] = '\0';
    return name;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Appends name (taken; NULL: nothing) to the list. Returns 0 or -1 (out of
 * memory, name freed). */
static int push_name(char ***names, int *n, char *name)
{
    if (name == NULL)
        return 0;
    char **more = realloc(*names, (size_t)(*n + 1) * sizeof(**names));
    if (more == NULL) {
        free(name);
        return -1;
    }
    *names = more;
    more[(*n)++] = name;
    return 0;
}

/* The names certificate x is for: its DNS subject alternative names, or
 * the subject's common name when it has none (RFC 6125). Into *names
 * (malloc'd strings; free_names). Returns the count, or -1 (out of memory,
 * nothing kept). */
static int cert_names(X509 *x, char ***names)
{
    int n = 0, failed = 0, dns = 0;
    *names = NULL;
    GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        if (g->type != GEN_DNS)
            continue;
        const ASN1_IA5STRING *d = g->d.dNSName;
        dns = 1;
        failed |= push_name(names, &n, dns_name(ASN1_STRING_get0_data(d), ASN1_STRING_length(d)));
    }
    GENERAL_NAMES_free(sans);
    X509_NAME *subject = X509_get_subject_name(x);
    int at = dns || !subject ? -1 : X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (at >= 0) {
        unsigned char *cn = NULL;
        int len =
            ASN1_STRING_to_UTF8(&cn, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
        if (len > 0)
            failed |= push_name(names, &n, dns_name(cn, len));
        OPENSSL_free(cn);
    }
    if (failed) {
        free_names(*names, n);
        *names = NULL;
        return -1;
    }
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names sorted and joined by spaces: equal for two certificates for
 * the same names. NULL when out of memory. */
static char *names_key(char **names, int n)
{
    size_t len = 1;
    qsort(names, (size_t)n, sizeof(*names), cmp_str);
    for (int i = 0; i < n; i++)
        len += strlen(names[i]) + 1;
    char *key = malloc(len), *p = key;
    for (int i = 0; key && i < n; i++)
        p += sprintf(p, "%s ", names[i]);
    if (key)
        *p = '\0';
    return key;
}

/* Adds the names (taken) of a pair served by host to the table. */
static int add_names(ps_tls_ctx_t *ctx, char **names, int n, int host)
{
    host_name_t *t = realloc(ctx->names, (size_t)(ctx->nnames + n) * sizeof(*t));
    if (t == NULL && ctx->nnames + n > 0) {
        free_names(names, n);
        return -1;
    }
    ctx->names = t;
    for (int i = 0; i < n; i++)
        ctx->names[ctx->nnames++] = (host_name_t){names[i], host};
    free(names);
    return 0;
}

static int cmp_host_name(const void *a, const void *b)
{
    const host_name_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->host - y->host;
}

/* Sorts the table and drops the later pairs' copies of a name: the first
 * pair given for a name serves it. */
static void sort_names(ps_tls_ctx_t *ctx)
{
    int n = 0;
    qsort(ctx->names, (size_t)ctx->nnames, sizeof(*ctx->names), cmp_host_name);
    for (int i = 0; i < ctx->nnames; i++) {
        if (n > 0 && strcmp(ctx->names[n - 1].name, ctx->names[i].name) == 0)
            free(ctx->names[i].name);
        else
            ctx->names[n++] = ctx->names[i];
    }
    ctx->nnames = n;
}

/* The host of exactly name (lower case), or -1. */
static int lookup(const ps_tls_ctx_t *ctx, const char *name)
{
    int lo = 0, hi = ctx->nnames - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, ctx->names[mid].name);
        if (c == 0)
            return ctx->names[mid].host;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

int ps_tls_ctx_find_host(const ps_tls_ctx_t *ctx, const char *servername)
{
    char name[256];
    size_t len = servername ? strlen(servername) : 0;
    if (len > 0 && servername[len - 1] == '.')
        len--; /* the absolute form of the same name */
    if (len == 0 || len >= sizeof(name) - 1)
        return 0;
    /* name[0] is room for the '*' of the wildcard that covers it. */
    for (size_t i = 0; i < len; i++) {
        char ch = servername[i];
        name[i + 1] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    name[len + 1] = '\0';
    int host = lookup(ctx, name + 1);
    if (host >= 0)
        return host;
    /* RFC 6125 6.4.3: "*" stands for exactly one whole label. */
    char *dot = memchr(name + 1, '.', len);
    if (dot == NULL || dot == name + 1 || dot[1] == '\0')
        return 0;
    dot[-1] = '*';
    host = lookup(ctx, dot - 1);
    return host >= 0 ? host : 0;
}

/* Moves a handshake to the context of the name the client asked for; an
 * unknown name, or none, stays on the default's certificate. */
static int servername_cb(SSL *s, int *alert, void *arg)
{
    const ps_tls_ctx_t *ctx = arg;
    PS_UNUSED(alert);
    int host = ps_tls_ctx_find_host(ctx, SSL_get_servername(s, TLSEXT_NAMETYPE_host_name));
    if (host > 0 && SSL_set_SSL_CTX(s, ctx->hosts[host]) == NULL)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    return SSL_TLSEXT_ERR_OK;
}

/* The host pair i goes to: the one whose certificate has the same names
 * and lacks this key type, else a new one. Returns its index, or -1 with
 * err set. Takes *names (into the table, for a new host). */
static int place_pair(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, const ps_tls_pem_t *pem, int i,
                      char *err, size_t errlen)
{
    BIO *bio = pem_bio(&pem->cert[i]);
    X509 *leaf = bio ? PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (leaf == NULL) {
        set_error(err, errlen, "cannot load the certificate chain %s", s->certs[i].certfile);
        return -1;
    }
    char **names;
    int n = cert_names(leaf, &names);
    int type = EVP_PKEY_get_base_id(X509_get0_pubkey(leaf));
    unsigned bit = type == EVP_PKEY_RSA ? 1u : type == EVP_PKEY_EC ? 2u : 4u;
    X509_free(leaf);
    char *key = n >= 0 ? names_key(names, n) : NULL;
    if (key == NULL)
        goto oom;
    int host = 0;
    while (host < ctx->nhosts &&
           (strcmp(ctx->host_key[host], key) != 0 || (ctx->host_types[host] & bit)))
        host++;
    if (host == ctx->nhosts) {
        ctx->hosts[host] = new_host(ctx, s, pem, err, errlen);
        if (ctx->hosts[host] == NULL) {
            free(key);
            free_names(names, n);
            return -1;
        }
        ctx->host_key[host] = key;
        ctx->nhosts++;
        key = NULL;
        int rc = add_names(ctx, names, n, host);
        names = NULL;
        n = 0;
        if (rc < 0)
            goto oom;
    }
    ctx->host_types[host] |= bit;
    free(key);
    free_names(names, n);
    return host;
oom:
    free_names(names, n);
    snprintf(err, errlen, "out of memory");
    return -1;
}

static int load_certs(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, const ps_tls_pem_t *pem,
                      char *err, size_t errlen)
{
    if (s->ncerts < 1 || s->ncerts > PS_TLS_MAX_CERTS) {
        snprintf(err, errlen, "TLS needs a certificate file and its key");
        return -1;
    }
    for (int i = 0; i < s->ncerts; i++) {
        int host = place_pair(ctx, s, pem, i, err, errlen);
        if (host < 0 || load_pair(ctx, ctx->hosts[host], s, pem, i, err, errlen) < 0)
            return -1;
    }
    sort_names(ctx);
    ctx->ssl = ctx->hosts[0];
    if (ctx->nhosts > 1) {
        SSL_CTX_set_tlsext_servername_callback(ctx->ssl, servername_cb);
        SSL_CTX_set_tlsext_servername_arg(ctx->ssl, ctx);
    }
    return 0;
}

ps_tls_ctx_t *ps_tls_ctx_new_pem(const ps_tls_settings_t *s, const ps_tls_pem_t *pem, char *err,
                                 size_t errlen)
{
    ps_tls_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        goto oom;
    ERR_clear_error();
    if (s->key_password && (ctx->password = strdup(s->key_password)) == NULL)
        goto oom;
    ctx->aes = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    if (ctx->aes == NULL) {
        set_error(err, errlen, "cannot create a TLS context", NULL);
        goto error;
    }
    /* Without kernel TLS, OpenSSL would still try it on every connection
     * (two failing setsockopt calls), and sessions can hold their tickets. */
    ctx->hold_tickets = s->no_ktls || !kernel_has_tls();
    if (ps_tls_generate_ticket_key(&ctx->keys[0]) < 0) {
        snprintf(err, errlen, "cannot generate a session ticket key");
        goto error;
    }
    ctx->nkeys = 1;
    if (load_certs(ctx, s, pem, err, errlen) < 0)
        goto error;
    ERR_clear_error();
    return ctx;
oom:
    snprintf(err, errlen, "out of memory");
error:
    ERR_clear_error();
    ps_tls_ctx_free(ctx);
    return NULL;
}

void ps_tls_ctx_free(ps_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    for (int i = 0; i < ctx->ncerts; i++)
        free(ctx->certs[i].pem);
    for (int i = 0; i < ctx->nhosts; i++) {
        SSL_CTX_free(ctx->hosts[i]);
        free(ctx->host_key[i]);
    }
    for (int i = 0; i < ctx->nnames; i++)
        free(ctx->names[i].name);
    free(ctx->names);
    EVP_CIPHER_free(ctx->aes);
    if (ctx->password) {
        OPENSSL_cleanse(ctx->password, strlen(ctx->password));
        free(ctx->password);
    }
    OPENSSL_cleanse(ctx->keys, sizeof(ctx->keys));
    free(ctx);
}

/* ---- for the sessions (transport.c) ---- */

SSL *ps_tls_session_new(ps_tls_ctx_t *ctx)
{
    return SSL_new(ctx->ssl);
}

int ps_tls_ctx_holds_tickets(const ps_tls_ctx_t *ctx)
{
    return ctx->hold_tickets;
}

ps_slice_t ps_tls_ctx_cert_pem(const ps_tls_ctx_t *ctx, const X509 *x)
{
    for (int i = 0; i < ctx->ncerts; i++)
        if (ctx->certs[i].x509 == x)
            return (ps_slice_t){ctx->certs[i].pem, ctx->certs[i].pem_len};
    return (ps_slice_t){NULL, 0};
}
