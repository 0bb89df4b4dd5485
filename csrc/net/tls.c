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

/* TLS 1.2: forward secrecy and AEAD ciphers only. */
#define DEFAULT_CIPHERS                                                                            \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define DEFAULT_ALPN "\x08http/1.1"
struct ps_tls_ctx {
    SSL_CTX *ssl;
    EVP_CIPHER *aes;
    char *password;
    unsigned char alpn[256];
    size_t alpn_len;
    ps_tls_ticket_key_t keys[PS_TLS_MAX_TICKET_KEYS];
    int nkeys;
    void (*refresh_keys)(void *data); /* see ps_tls_set_key_refresh */
    void *refresh_data;
    struct {
        X509 *x509; /* borrowed from ssl */
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

/* Keeps the PEM of the certificate just loaded, for ps_tls_server_cert_pem. */
static int keep_cert_pem(ps_tls_ctx_t *ctx)
{
    X509 *x = SSL_CTX_get0_certificate(ctx->ssl);
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
static int use_key(ps_tls_ctx_t *ctx, const ps_buf_t *pem)
{
    BIO *bio = pem_bio(pem);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, password_cb, ctx->password) : NULL;
    int ok = key != NULL && SSL_CTX_use_PrivateKey(ctx->ssl, key) == 1;
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

static int load_certs(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, const ps_tls_pem_t *pem,
                      char *err, size_t errlen)
{
    if (s->ncerts < 1 || s->ncerts > PS_TLS_MAX_CERTS) {
        snprintf(err, errlen, "TLS needs a certificate file and its key");
        return -1;
    }
    for (int i = 0; i < s->ncerts; i++) {
        const char *cert = s->certs[i].certfile;
        const char *key = s->certs[i].keyfile ? s->certs[i].keyfile : cert;
        if (!use_chain(ctx->ssl, &pem->cert[i])) {
            set_error(err, errlen, "cannot load the certificate chain %s", cert);
            return -1;
        }
        if (!use_key(ctx, s->certs[i].keyfile ? &pem->key[i] : &pem->cert[i])) {
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
        if (SSL_CTX_check_private_key(ctx->ssl) != 1) {
            set_error(err, errlen, "the private key does not match the certificate %s", cert);
            return -1;
        }
        if (keep_cert_pem(ctx) < 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
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

static int load_verify(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, const ps_tls_pem_t *pem,
                       char *err, size_t errlen)
{
    if (s->cert_reqs == PS_TLS_CERT_NONE) {
        SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_NONE, NULL);
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
    if (!use_client_cas(ctx->ssl, &pem->ca)) {
        set_error(err, errlen, "cannot load the CA certificates %s", s->ca_certs);
        return -1;
    }
    int mode = SSL_VERIFY_PEER;
    if (s->cert_reqs == PS_TLS_CERT_REQUIRED)
        mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx->ssl, mode, NULL);
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

static int set_protocols(ps_tls_ctx_t *ctx, const ps_tls_settings_t *s, char *err, size_t errlen)
{
    int min = s->min_version ? s->min_version : TLS1_2_VERSION;
    if (min != TLS1_2_VERSION && min != TLS1_3_VERSION) {
        snprintf(err, errlen, "the minimum TLS version must be TLS 1.2 or TLS 1.3");
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx->ssl, min);
    if (SSL_CTX_set_cipher_list(ctx->ssl, s->ciphers ? s->ciphers : DEFAULT_CIPHERS) != 1) {
        set_error(err, errlen, "bad TLS 1.2 cipher list \"%s\"", s->ciphers);
        return -1;
    }
    if (s->ciphersuites && SSL_CTX_set_ciphersuites(ctx->ssl, s->ciphersuites) != 1) {
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
    SSL_CTX_set_alpn_select_cb(ctx->ssl, alpn_cb, ctx);
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

ps_tls_ctx_t *ps_tls_ctx_new_pem(const ps_tls_settings_t *s, const ps_tls_pem_t *pem, char *err,
                                 size_t errlen)
{
    ps_tls_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        goto oom;
    ERR_clear_error();
    if (s->key_password && (ctx->password = strdup(s->key_password)) == NULL)
        goto oom;
    ctx->ssl = SSL_CTX_new(TLS_server_method());
    ctx->aes = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    if (ctx->ssl == NULL || ctx->aes == NULL) {
        set_error(err, errlen, "cannot create a TLS context", NULL);
        goto error;
    }
    SSL_CTX_set_app_data(ctx->ssl, ctx);
    uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF;
    /* Without kernel TLS, OpenSSL would still try it on every connection
     * (two failing setsockopt calls), and sessions can hold their tickets. */
    if (!s->no_ktls && kernel_has_tls())
        opts |= SSL_OP_ENABLE_KTLS;
    else
        ctx->hold_tickets = 1;
    SSL_CTX_set_options(ctx->ssl, opts);
    SSL_CTX_clear_options(ctx->ssl, SSL_OP_NO_TICKET);
    /* An idle keep-alive connection holds no record buffers (about 34 KiB). */
    SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                   SSL_MODE_RELEASE_BUFFERS);
    /* One read(2) takes whatever the socket holds, not a record header first. */
    SSL_CTX_set_read_ahead(ctx->ssl, 1);
    /* Resumption is by tickets only: nothing per session kept in a worker. */
    SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_session_id_context(ctx->ssl, (const unsigned char *)"pyserver", 8);
    if (ps_tls_generate_ticket_key(&ctx->keys[0]) < 0) {
        snprintf(err, errlen, "cannot generate a session ticket key");
        goto error;
    }
    ctx->nkeys = 1;
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx->ssl, ticket_cb);
    if (set_protocols(ctx, s, err, errlen) < 0 || load_certs(ctx, s, pem, err, errlen) < 0 ||
        load_verify(ctx, s, pem, err, errlen) < 0)
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
    SSL_CTX_free(ctx->ssl);
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
