/* Tests of csrc/net/transport.c: a non-blocking server transport on a loopback
 * TCP connection against an OpenSSL client in the same thread, both pumped
 * by one loop. Certificates (an ECDSA P-256 CA, server and client
 * certificates, an RSA server certificate, an encrypted key, a client
 * certificate from another CA) are made with the openssl command in a
 * temporary directory.
 *
 *   test_transport          every test
 *   test_transport plain N  only N plain request/response rounds (for
 *                           counting system calls with strace)
 *   test_transport tls N    the same over TLS 1.3 after one handshake
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "check.h"
#include "net/transport.h"

static char dir[64];

static void path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int make_certs(void)
{
    return sh(
        "set -e; cd %s; exec >/dev/null 2>&1\n"
        "ec='-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes'\n"
        "openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj /CN=Test-CA\n"
        "openssl req -x509 $ec -keyout ca2.key -out ca2.pem -days 2 -subj /CN=Other-CA\n"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext\n"
        "openssl req $ec -keyout server.key -out server.csr -subj /CN=localhost\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile san.ext\n"
        "openssl req -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.csr -subj /CN=localhost\n"
        "openssl x509 -req -in rsa.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out rsa.pem -days 2 -extfile san.ext\n"
        "openssl ec -in server.key -aes256 -passout pass:s3cret -out server-enc.key\n"
        "openssl req $ec -keyout client.key -out client.csr -subj '/O=Example/CN=alice'\n"
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 2\n"
        "cat client.pem ca.pem > client-chain.pem\n"
        "openssl req $ec -keyout bad.key -out bad.csr -subj /CN=mallory\n"
        "openssl x509 -req -in bad.csr -CA ca2.pem -CAkey ca2.key -CAcreateserial "
        "-out bad.pem -days 2\n"
        "printf 'not a certificate\\n' > junk.pem\n"
        /* By name (SNI): two names, a wildcard, a common name without SANs. */
        "for n in a:DNS:a.test,DNS:Alias.Test w:DNS:*.w.test,DNS:bad*.x.test cn:; do\n"
        "  f=${n%%%%:*}; san=${n#*:}\n"
        "  openssl req $ec -keyout $f.key -out $f.csr -subj /CN=$f.cn.test\n"
        "  if [ -n \"$san\" ]; then printf 'subjectAltName=%%s\\n' \"$san\" > $f.ext;\n"
        "  else printf 'basicConstraints=CA:FALSE\\n' > $f.ext; fi\n"
        "  openssl x509 -req -in $f.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out $f.pem -days 2 -extfile $f.ext\n"
        "done\n"
        "cat rsa.pem ca.pem ca2.pem bad.pem client.pem rsa.pem rsa.pem rsa.pem > big.pem\n",
        dir);
}

/* ---- sockets ---- */

static void nonblocking(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* A connected loopback TCP pair, both ends non-blocking. sndbuf > 0 makes
 * the server's send buffer (and the client's receive buffer) small. */
static int tcp_pair(int *srv, int *cli, int sndbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0)
        return -1;
    *cli = socket(AF_INET, SOCK_STREAM, 0);
    if (sndbuf > 0)
        setsockopt(*cli, SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
    if (connect(*cli, (struct sockaddr *)&a, sizeof(a)) < 0)
        return -1;
    *srv = accept(l, NULL, NULL);
    close(l);
    if (*srv < 0)
        return -1;
    if (sndbuf > 0)
        setsockopt(*srv, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    int one = 1;
    setsockopt(*srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(*cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    nonblocking(*srv);
    nonblocking(*cli);
    return 0;
}

static void wait_any(int a, int b)
{
    struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    poll(p, 2, 2);
}

/* ---- server contexts and clients ---- */

static ps_tls_ctx_t *server_ctx(ps_tls_settings_t *s)
{
    static char cert[128], key[128];
    char err[256] = "";
    path(cert, sizeof(cert), "server.pem");
    path(key, sizeof(key), "server.key");
    if (s->ncerts == 0) {
        s->certs[0] = (ps_tls_cert_t){cert, key};
        s->ncerts = 1;
    }
    ps_tls_ctx_t *ctx = ps_tls_ctx_new(s, err, sizeof(err));
    if (ctx == NULL)
        fprintf(stderr, "server_ctx: %s\n", err);
    return ctx;
}

static SSL_CTX *client_ctx(int max_version, const char *cert)
{
    char p[128];
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    path(p, sizeof(p), "ca.pem");
    SSL_CTX_load_verify_locations(c, p, NULL);
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    if (max_version)
        SSL_CTX_set_max_proto_version(c, max_version);
    if (cert != NULL) {
        char k[128];
        path(p, sizeof(p), cert);
        snprintf(k, sizeof(k), "%s/%.*s.key", dir, (int)(strcspn(cert, ".-")), cert);
        SSL_CTX_use_certificate_chain_file(c, p);
        /* Only what the file holds: no chain built from the trust store. */
        SSL_CTX_set_mode(c, SSL_MODE_NO_AUTO_CHAIN);
        SSL_CTX_use_PrivateKey_file(c, k, SSL_FILETYPE_PEM);
    }
    return c;
}

typedef struct {
    int sfd, cfd;
    ps_transport_t t;
    SSL *c;
    int srv_rc; /* the server's handshake result */
    int cli_ok;
    int want_writes; /* handshake steps that waited for a writable socket */
} conn_t;

static int setup(conn_t *k, ps_tls_ctx_t *sctx, SSL_CTX *cctx, int sndbuf)
{
    memset(k, 0, sizeof(*k));
    if (tcp_pair(&k->sfd, &k->cfd, sndbuf) < 0)
        return -1;
    if (ps_transport_init_tls(&k->t, k->sfd, sctx) < 0)
        return -1;
    k->c = SSL_new(cctx);
    SSL_set_fd(k->c, k->cfd);
    SSL_set_connect_state(k->c);
    SSL_set1_host(k->c, "localhost");
    return 0;
}

/* The client's close_notify first: OpenSSL marks the session of a client
 * freed without one not resumable. */
static void teardown(conn_t *k)
{
    if (k->cli_ok)
        SSL_shutdown(k->c);
    ps_transport_close(&k->t);
    SSL_free(k->c);
    close(k->cfd);
    ERR_clear_error();
}

/* Pumps both handshakes until each is done or failed. Returns the server's
 * result (PS_TLS_DONE or -errno); k->cli_ok tells the client's. */
static int handshake(conn_t *k)
{
    int sdone = 0, cdone = 0;
    k->srv_rc = 1;
    for (int i = 0; i < 5000 && (!sdone || !cdone); i++) {
        if (!cdone) {
            int r = SSL_do_handshake(k->c);
            int e = r == 1 ? 0 : SSL_get_error(k->c, r);
            if (r == 1 || (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)) {
                cdone = 1;
                k->cli_ok = r == 1;
            }
        }
        if (!sdone) {
            int r = ps_transport_handshake(&k->t);
            k->want_writes += r == PS_IO_WANT_WRITE;
            if (r != PS_IO_WANT_READ && r != PS_IO_WANT_WRITE) {
                sdone = 1;
                k->srv_rc = r;
            }
        }
        /* A client whose handshake looks done may still get the server's
         * alert (TLS 1.3 client certificates are judged after that). */
        if (sdone && k->srv_rc < 0)
            break;
        wait_any(k->sfd, k->cfd);
    }
    ERR_clear_error();
    return k->srv_rc;
}

/* The client reads whatever arrives into buf (non-blocking). */
static size_t client_drain(conn_t *k, char *buf, size_t have, size_t cap)
{
    while (have < cap) {
        size_t n;
        if (SSL_read_ex(k->c, buf + have, cap - have, &n) != 1)
            break;
        have += n;
    }
    ERR_clear_error();
    return have;
}

static int ktls_in_kernel(void)
{
    int s, c;
    if (tcp_pair(&s, &c, 0) < 0)
        return 0;
    int ok = setsockopt(s, SOL_TCP, TCP_ULP, "tls", sizeof("tls")) == 0;
    if (!ok)
        printf("test_transport: kernel TLS: setsockopt(TCP_ULP, \"tls\"): %s\n", strerror(errno));
    close(s);
    close(c);
    return ok;
}

/* ---- tests ---- */

static void test_sniff(void)
{
    CHECK(ps_transport_sniff_plain_http("GET / HTTP/1.1\r\n", 16));
    CHECK(ps_transport_sniff_plain_http("POST", 4));
    CHECK(ps_transport_sniff_plain_http("G", 1));
    CHECK(!ps_transport_sniff_plain_http("\x16\x03\x01\x02\x00", 5));
    CHECK(!ps_transport_sniff_plain_http("get / HTTP/1.1", 14));
    CHECK(!ps_transport_sniff_plain_http("GE\x01", 3));
    CHECK(!ps_transport_sniff_plain_http("", 0));
}

static void test_config_errors(void)
{
    char cert[128], key[128], other[128], enc[128], ca[128], junk[128], err[256];
    path(cert, sizeof(cert), "server.pem");
    path(key, sizeof(key), "server.key");
    path(other, sizeof(other), "client.key");
    path(enc, sizeof(enc), "server-enc.key");
    path(ca, sizeof(ca), "ca.pem");
    path(junk, sizeof(junk), "junk.pem");
    struct {
        ps_tls_settings_t s;
        const char *want;
    } cases[] = {
        {{.certs = {{"/nonexistent/cert.pem", key}}, .ncerts = 1}, "/nonexistent/cert.pem"},
        {{.certs = {{junk, key}}, .ncerts = 1}, "no start line"},
        {{.certs = {{cert, other}}, .ncerts = 1}, "does not match"},
        {{.certs = {{cert, enc}}, .ncerts = 1}, "no password"},
        {{.certs = {{cert, enc}}, .ncerts = 1, .key_password = "wrong"}, "password"},
        {{.certs = {{cert, key}}, .ncerts = 1, .cert_reqs = PS_TLS_CERT_REQUIRED}, "CA"},
        {{.certs = {{cert, key}}, .ncerts = 1, .cert_reqs = 1, .ca_certs = junk}, junk},
        {{.certs = {{cert, key}}, .ncerts = 1, .ciphers = "NOPE"}, "cipher"},
        {{.certs = {{cert, key}}, .ncerts = 1, .min_version = TLS1_1_VERSION}, "TLS 1.2"},
        {{.certs = {{cert, key}}, .ncerts = 1, .alpn = "\x09http/1.1", .alpn_len = 9}, "ALPN"},
        {{.ncerts = 0}, "certificate"},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        err[0] = 0;
        ps_tls_ctx_t *ctx = ps_tls_ctx_new(&cases[i].s, err, sizeof(err));
        if (!CHECK(ctx == NULL))
            ps_tls_ctx_free(ctx);
        printf("test_transport: config error %zu: %s\n", i, err);
        CHECK(strstr(err, cases[i].want) != NULL);
        CHECK(strchr(err, '\n') == NULL);
        CHECK(ERR_peek_error() == 0); /* the queue is left empty */
    }
    ps_tls_settings_t s = {.certs = {{cert, enc}}, .ncerts = 1, .key_password = "s3cret"};
    ps_tls_ctx_t *ctx = ps_tls_ctx_new(&s, err, sizeof(err));
    CHECK(ctx != NULL);
    ps_tls_ctx_free(ctx);
    (void)ca;
}

static void test_versions_and_alpn(void)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    struct {
        int max;
        const char *version;
        int wire;
    } v[] = {{TLS1_2_VERSION, "TLSv1.2", 0x0303}, {0, "TLSv1.3", 0x0304}};
    for (size_t i = 0; i < PS_ARRAY_LEN(v); i++) {
        SSL_CTX *cctx = client_ctx(v[i].max, NULL);
        conn_t k;
        setup(&k, sctx, cctx, 0);
        SSL_set_alpn_protos(k.c, (const unsigned char *)"\x02h2\x08http/1.1", 12);
        CHECK_EQ(handshake(&k), PS_TLS_DONE);
        CHECK(k.cli_ok);
        int wire = 0, id = 0;
        const char *ver = ps_tls_version(&k.t, &wire);
        CHECK(ver && strcmp(ver, v[i].version) == 0);
        CHECK_EQ(wire, v[i].wire);
        const char *cipher = ps_tls_cipher(&k.t, &id);
        printf("test_transport: %s cipher %s (0x%04x)\n", ver, cipher, id);
        CHECK(cipher != NULL && id != 0);
        if (v[i].wire == 0x0303)
            CHECK(strncmp(cipher, "ECDHE-ECDSA-", 12) == 0);
        CHECK_SLICE_EQ(ps_tls_alpn(&k.t), "http/1.1");
        ps_slice_t pem = ps_tls_server_cert_pem(&k.t);
        CHECK(pem.len > 27 && memcmp(pem.base, "-----BEGIN CERTIFICATE-----", 27) == 0);
        CHECK_EQ(ps_tls_client_cert_count(&k.t), 0);
        teardown(&k);
        SSL_CTX_free(cctx);
    }
    /* No ALPN from the client: none chosen. An offer without http/1.1 is
     * refused. */
    SSL_CTX *cctx = client_ctx(0, NULL);
    conn_t k;
    setup(&k, sctx, cctx, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_EQ(ps_tls_alpn(&k.t).len, 0);
    teardown(&k);
    setup(&k, sctx, cctx, 0);
    SSL_set_alpn_protos(k.c, (const unsigned char *)"\x06spdy/1", 7);
    CHECK_EQ(handshake(&k), -EPROTO);
    CHECK(k.t.reason != NULL);
    printf("test_transport: unknown ALPN: %s\n", k.t.reason);
    teardown(&k);
    ps_tls_ctx_free(sctx);

    /* The server's order wins. */
    ps_tls_settings_t s2 = {.alpn = "\x02h2\x08http/1.1", .alpn_len = 12};
    sctx = server_ctx(&s2);
    setup(&k, sctx, cctx, 0);
    SSL_set_alpn_protos(k.c, (const unsigned char *)"\x08http/1.1\x02h2", 12);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_SLICE_EQ(ps_tls_alpn(&k.t), "h2");
    teardown(&k);
    ps_tls_ctx_free(sctx);

    /* A TLS 1.3 minimum refuses a TLS 1.2 client. */
    ps_tls_settings_t s3 = {.min_version = TLS1_3_VERSION};
    sctx = server_ctx(&s3);
    SSL_CTX *c12 = client_ctx(TLS1_2_VERSION, NULL);
    setup(&k, sctx, c12, 0);
    CHECK_EQ(handshake(&k), -EPROTO);
    CHECK(!k.cli_ok);
    teardown(&k);
    SSL_CTX_free(c12);
    ps_tls_ctx_free(sctx);
    SSL_CTX_free(cctx);
}

/* An ECDSA and an RSA certificate: each client gets one it can verify. */
static void test_dual_certificates(void)
{
    char cert[128], key[128], rsa[128], rsakey[128];
    path(cert, sizeof(cert), "server.pem");
    path(key, sizeof(key), "server.key");
    path(rsa, sizeof(rsa), "rsa.pem");
    path(rsakey, sizeof(rsakey), "rsa.key");
    ps_tls_settings_t s = {.certs = {{cert, key}, {rsa, rsakey}}, .ncerts = 2};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    CHECK(sctx != NULL);
    const char *sigalgs[] = {"ECDSA+SHA256", "RSA-PSS+SHA256:RSA+SHA256"};
    int types[] = {EVP_PKEY_EC, EVP_PKEY_RSA};
    for (int i = 0; i < 2 && sctx; i++) {
        SSL_CTX *cctx = client_ctx(0, NULL);
        conn_t k;
        setup(&k, sctx, cctx, 0);
        SSL_set1_sigalgs_list(k.c, sigalgs[i]);
        CHECK_EQ(handshake(&k), PS_TLS_DONE);
        X509 *peer = SSL_get0_peer_certificate(k.c);
        CHECK(peer && EVP_PKEY_get_base_id(X509_get0_pubkey(peer)) == types[i]);
        ps_slice_t pem = ps_tls_server_cert_pem(&k.t);
        CHECK(pem.len > 0);
        teardown(&k);
        SSL_CTX_free(cctx);
    }
    ps_tls_ctx_free(sctx);
}

/* Several certificates: the name a client sends (SNI) picks one by the
 * certificate's DNS names (exact, then a one-label wildcard), its common
 * name when it has no DNS names; anything else gets the first. */
static void test_certificates_by_name(void)
{
    char f[8][128];
    const char *files[] = {"server.pem", "server.key", "a.pem",  "a.key",
                           "w.pem",      "w.key",      "cn.pem", "cn.key"};
    for (int i = 0; i < 8; i++)
        path(f[i], sizeof(f[i]), files[i]);
    ps_tls_settings_t s = {.certs = {{f[0], f[1]}, {f[2], f[3]}, {f[4], f[5]}, {f[6], f[7]}},
                           .ncerts = 4};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    CHECK(sctx != NULL);
    if (sctx == NULL)
        return;
    static const struct {
        const char *name;
        int host;
    } cases[] = {
        {"localhost", 0},  {"a.test", 1},    {"A.TEST", 1},       {"alias.test", 1},
        {"a.test.", 1},    {"x.w.test", 2},  {"X-Y.W.Test", 2},   {"w.test", 0},
        {"a.b.w.test", 0}, {".w.test", 0},   {"c.bad.x.test", 0}, {"badz.x.test", 0},
        {"cn.cn.test", 3}, {"a.cn.test", 0}, {"nothing.test", 0}, {"", 0},
        {NULL, 0},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        int host = ps_tls_ctx_find_host(sctx, cases[i].name);
        if (host != cases[i].host)
            fprintf(stderr, "find_host(%s) = %d\n", cases[i].name ? cases[i].name : "NULL", host);
        CHECK_EQ(host, cases[i].host);
    }
    /* The handshake is served the certificate of the name it asked for. */
    static const char *const sni[] = {"a.test", "x.w.test", "unknown.test", NULL};
    static const char *const cn[] = {"a.cn.test", "w.cn.test", "localhost", "localhost"};
    for (int i = 0; i < 4; i++) {
        SSL_CTX *cctx = client_ctx(i == 1 ? TLS1_2_VERSION : 0, NULL);
        conn_t k;
        setup(&k, sctx, cctx, 0);
        SSL_set1_host(k.c, NULL);
        if (sni[i])
            SSL_set_tlsext_host_name(k.c, sni[i]);
        CHECK_EQ(handshake(&k), PS_TLS_DONE);
        X509 *peer = SSL_get0_peer_certificate(k.c);
        char got[64] = "";
        if (peer)
            X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, got,
                                      sizeof(got));
        CHECK(strcmp(got, cn[i]) == 0);
        CHECK(ps_tls_server_cert_pem(&k.t).len > 0);
        teardown(&k);
        SSL_CTX_free(cctx);
    }
    ps_tls_ctx_free(sctx);
}

/* A server flight larger than the socket buffers: the handshake step waits
 * for a writable socket and goes on from there. */
static void test_handshake_waits_for_writable(void)
{
    char cert[128], key[128];
    path(cert, sizeof(cert), "big.pem");
    path(key, sizeof(key), "rsa.key");
    ps_tls_settings_t s = {.certs = {{cert, key}}, .ncerts = 1};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(0, NULL);
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
    conn_t k;
    setup(&k, sctx, cctx, 1024);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK(k.cli_ok);
    printf("test_transport: big server flight: %d WANT_WRITE steps\n", k.want_writes);
    CHECK(k.want_writes > 0);
    teardown(&k);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(sctx);
}

/* Client to server: records come out of one read as far as they are
 * buffered, and ps_transport_pending tells about the rest. */
static void test_read_and_pending(void)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(0, NULL);
    conn_t k;
    setup(&k, sctx, cctx, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    char msg[5000], got[6000];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (char)('a' + i % 26);
    size_t w;
    CHECK(SSL_write_ex(k.c, msg, sizeof(msg), &w) == 1 && w == sizeof(msg));
    CHECK(SSL_write_ex(k.c, "tail", 4, &w) == 1);
    struct pollfd p = {.fd = k.sfd, .events = POLLIN};
    poll(&p, 1, 1000);
    usleep(20000); /* both records are in */
    ssize_t n = ps_transport_read(&k.t, got, 1000);
    CHECK_EQ(n, 1000);
    CHECK(ps_transport_pending(&k.t));
    size_t have = (size_t)n;
    while (ps_transport_pending(&k.t) && have < sizeof(got)) {
        n = ps_transport_read(&k.t, got + have, sizeof(got) - have);
        if (!CHECK(n > 0))
            break;
        have += (size_t)n;
    }
    CHECK_EQ(have, sizeof(msg) + 4);
    CHECK(memcmp(got, msg, sizeof(msg)) == 0 && memcmp(got + sizeof(msg), "tail", 4) == 0);
    CHECK(!ps_transport_pending(&k.t));
    CHECK_EQ(ps_transport_read(&k.t, got, sizeof(got)), PS_IO_WANT_READ);
    CHECK_EQ(ps_transport_blocked(&k.t), 0);

    /* Idle: the buffers go, and come back for the next request. */
    CHECK_EQ(ps_transport_release_buffers(&k.t), 1);
    CHECK(SSL_write_ex(k.c, "again", 5, &w) == 1);
    poll(&p, 1, 1000);
    CHECK_EQ(ps_transport_read(&k.t, got, sizeof(got)), 5);
    CHECK_MEM_EQ(got, 5, "again");
    CHECK(SSL_write_ex(k.c, "more", 4, &w) == 1);
    usleep(20000);
    CHECK_EQ(ps_transport_read(&k.t, got, 2), 2);
    CHECK(ps_transport_pending(&k.t));
    CHECK_EQ(ps_transport_release_buffers(&k.t), 0); /* two bytes still held */
    CHECK_EQ(ps_transport_read(&k.t, got + 2, 2), 2);
    CHECK_MEM_EQ(got, 4, "more");
    CHECK_EQ(ps_transport_write(&k.t, "ok", 2), 2);
    usleep(20000);
    size_t n2;
    CHECK(SSL_read_ex(k.c, got, sizeof(got), &n2) == 1 && n2 == 2);
    ps_transport_t plain;
    ps_transport_init_plain(&plain, -1);
    CHECK_EQ(ps_transport_release_buffers(&plain), 0);

    /* The client's close_notify is the end of the stream. */
    SSL_shutdown(k.c);
    poll(&p, 1, 1000);
    CHECK_EQ(ps_transport_read(&k.t, got, sizeof(got)), 0);
    teardown(&k);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(sctx);
}

/* Server to client through a small socket buffer: the caller keeps what
 * was not taken and retries it from its own queue, as h1conn.c does. */
static void test_writev_partial(int max_version)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(max_version, NULL);
    conn_t k;
    setup(&k, sctx, cctx, 4096);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    size_t body_len = 1 << 20;
    char *body = malloc(body_len);
    for (size_t i = 0; i < body_len; i++)
        body[i] = (char)(i * 7 + i / 251);
    const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
    struct iovec v[4] = {
        {(void *)head, sizeof(head) - 1}, {NULL, 0}, {body, 100}, {body + 100, body_len - 100}};
    size_t total = sizeof(head) - 1 + body_len;
    char *expect = malloc(total), *got = malloc(total);
    memcpy(expect, head, sizeof(head) - 1);
    memcpy(expect + sizeof(head) - 1, body, body_len);
    ps_buf_t queue = {0};
    ssize_t r = ps_transport_writev(&k.t, v, 4);
    CHECK(r == PS_IO_WANT_WRITE || (r > 0 && (size_t)r < total)); /* a small socket buffer */
    ps_buf_append(&queue, expect + (r > 0 ? r : 0), total - (size_t)(r > 0 ? r : 0));
    size_t have = 0;
    int waits = 0, writes = 1;
    for (int i = 0; i < 100000 && (ps_buf_size(&queue) || have < total); i++) {
        if (ps_buf_size(&queue)) {
            r = ps_transport_write(&k.t, ps_buf_head(&queue), ps_buf_size(&queue));
            writes++;
            if (r > 0)
                ps_buf_consume(&queue, (size_t)r);
            else if (r == PS_IO_WANT_WRITE)
                waits++;
            else if (!CHECK(r == PS_IO_WANT_WRITE))
                break;
        }
        have = client_drain(&k, got, have, total);
    }
    CHECK_EQ(have, total);
    CHECK(memcmp(got, expect, total) == 0);
    CHECK(waits > 0);
    printf("test_transport: TLS %s writev of %zu bytes: %d writes, %d WANT_WRITE\n",
           max_version ? "1.2" : "1.3", total, writes, waits);
    CHECK_EQ(ps_transport_blocked(&k.t), 0);

    /* Many small pieces go out as one record: the client reads them at once. */
    struct iovec small[6] = {{"ab", 2}, {"cd", 2}, {"", 0}, {"ef", 2}, {"gh", 2}, {"ij", 2}};
    CHECK_EQ(ps_transport_writev(&k.t, small, 6), 10);
    usleep(20000);
    char buf[32];
    size_t n;
    CHECK(SSL_read_ex(k.c, buf, sizeof(buf), &n) == 1 && n == 10);
    CHECK_MEM_EQ(buf, 10, "abcdefghij");

    /* Clean shutdown: the client sees close_notify. */
    CHECK_EQ(ps_transport_shutdown(&k.t), 0);
    usleep(20000);
    int rr = SSL_read_ex(k.c, buf, sizeof(buf), &n);
    CHECK(rr == 0 && SSL_get_error(k.c, rr) == SSL_ERROR_ZERO_RETURN);
    ps_buf_free(&queue);
    free(body);
    free(expect);
    free(got);
    teardown(&k);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(sctx);
}

/* A file of a few MiB, with and without kernel TLS. */
static void test_sendfile(int no_ktls, int kernel_has_ktls)
{
    char file[128];
    path(file, sizeof(file), "file.bin");
    size_t len = 3 * 1024 * 1024 + 12345;
    char *expect = malloc(len), *got = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        expect[i] = (char)(i ^ (i >> 9));
    FILE *f = fopen(file, "wb");
    fwrite(expect, 1, len, f);
    fclose(f);
    int fd = open(file, O_RDONLY);

    ps_tls_settings_t s = {.no_ktls = no_ktls};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(0, NULL);
    conn_t k;
    setup(&k, sctx, cctx, 16384);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    int ktls = ps_tls_ktls_send(&k.t);
    printf("test_transport: sendfile %s: kernel TLS send %s\n",
           no_ktls ? "with kTLS disabled" : "with kTLS allowed", ktls ? "on" : "off");
    if (no_ktls || !kernel_has_ktls)
        CHECK_EQ(ktls, 0);
    size_t sent = 0, have = 0;
    int waits = 0, shorts = 0;
    for (int i = 0; i < 1000000 && have < len; i++) {
        if (sent < len) {
            ssize_t r = ps_transport_sendfile(&k.t, fd, (int64_t)sent, len - sent);
            if (r > 0 && (size_t)r < len - sent)
                shorts++;
            if (r > 0)
                sent += (size_t)r;
            else if (r == PS_IO_WANT_WRITE)
                waits++;
            else if (!CHECK(r > 0 || r == PS_IO_WANT_WRITE))
                break;
        }
        have = client_drain(&k, got, have, len + 1);
    }
    CHECK_EQ(sent, len);
    CHECK_EQ(have, len);
    CHECK(memcmp(got, expect, len) == 0);
    CHECK(waits + shorts > 0); /* the socket was full at times */
    printf("test_transport: sendfile of %zu bytes: %d short, %d WANT_WRITE\n", len, shorts, waits);
    /* Past the end of the file: 0, as sendfile(2) says. */
    CHECK_EQ(ps_transport_sendfile(&k.t, fd, (int64_t)len, 100), 0);
    /* After a file, plain writes still work (tbuf is reused). */
    CHECK_EQ(ps_transport_write(&k.t, "done", 4), 4);
    usleep(20000);
    have = client_drain(&k, got, 0, 4);
    CHECK_MEM_EQ(got, have, "done");
    close(fd);
    teardown(&k);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(sctx);
    free(expect);
    free(got);
}

/* A first full handshake, then the client reads its ticket; returns the
 * session (the caller frees it). */
static SSL_SESSION *first_session(ps_tls_ctx_t *sctx, SSL_CTX *cctx)
{
    conn_t k;
    setup(&k, sctx, cctx, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK(!ps_tls_resumed(&k.t));
    CHECK_EQ(ps_transport_write(&k.t, "x", 1), 1);
    usleep(20000);
    char c;
    size_t n;
    CHECK(SSL_read_ex(k.c, &c, 1, &n) == 1); /* TLS 1.3 tickets come before */
    SSL_SESSION *sess = SSL_get1_session(k.c);
    CHECK(sess != NULL && SSL_SESSION_is_resumable(sess));
    teardown(&k);
    return sess;
}

static int resumes(ps_tls_ctx_t *sctx, SSL_CTX *cctx, SSL_SESSION *sess)
{
    conn_t k;
    setup(&k, sctx, cctx, 0);
    SSL_set_session(k.c, sess);
    int ok = handshake(&k) == PS_TLS_DONE && k.cli_ok;
    CHECK(ok);
    int resumed = ps_tls_resumed(&k.t);
    CHECK_EQ(resumed, SSL_session_reused(k.c));
    teardown(&k);
    return ok && resumed;
}

static void test_resumption(int max_version)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *a = server_ctx(&s), *b = server_ctx(&s), *other = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(max_version, NULL);
    /* No client cache: freeing a connection without close_notify would
     * mark its cached session not resumable. */

    /* The same context resumes its own ticket. */
    SSL_SESSION *sess = first_session(a, cctx);
    CHECK(resumes(a, cctx, sess));
    /* A context with its own random key does not (full handshake). */
    CHECK(!resumes(b, cctx, sess));
    SSL_SESSION_free(sess);

    /* Workers sharing keys from their master resume each other's tickets. */
    ps_tls_ticket_key_t keys[2];
    CHECK_EQ(ps_tls_generate_ticket_key(&keys[0]), 0);
    CHECK_EQ(ps_tls_generate_ticket_key(&keys[1]), 0);
    CHECK_EQ(ps_tls_set_ticket_keys(a, &keys[0], 1), 0);
    CHECK_EQ(ps_tls_set_ticket_keys(b, &keys[0], 1), 0);
    sess = first_session(a, cctx);
    CHECK(resumes(b, cctx, sess));
    CHECK(!resumes(other, cctx, sess));
    /* Rotation: the new key first, the old one still decrypts. */
    ps_tls_ticket_key_t ring[2] = {keys[1], keys[0]};
    CHECK_EQ(ps_tls_set_ticket_keys(b, ring, 2), 0);
    CHECK(resumes(b, cctx, sess));
    /* Once the old key is dropped, the ticket no longer resumes. */
    CHECK_EQ(ps_tls_set_ticket_keys(b, &keys[1], 1), 0);
    CHECK(!resumes(b, cctx, sess));
    CHECK_EQ(ps_tls_set_ticket_keys(b, keys, 0), -EINVAL);
    CHECK_EQ(ps_tls_set_ticket_keys(b, keys, PS_TLS_MAX_TICKET_KEYS + 1), -EINVAL);
    printf("test_transport: TLS %s ticket resumption checked\n", max_version ? "1.2" : "1.3");
    SSL_SESSION_free(sess);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(a);
    ps_tls_ctx_free(b);
    ps_tls_ctx_free(other);
}

static void test_client_certificates(int max_version)
{
    char ca[128];
    path(ca, sizeof(ca), "ca.pem");
    ps_tls_settings_t req = {.cert_reqs = PS_TLS_CERT_REQUIRED, .ca_certs = ca};
    ps_tls_settings_t opt = {.cert_reqs = PS_TLS_CERT_OPTIONAL, .ca_certs = ca};
    ps_tls_ctx_t *required = server_ctx(&req), *optional = server_ctx(&opt);
    SSL_CTX *none = client_ctx(max_version, NULL);
    SSL_CTX *alice = client_ctx(max_version, "client.pem");
    SSL_CTX *chain = client_ctx(max_version, "client-chain.pem");
    SSL_CTX *bad = client_ctx(max_version, "bad.pem");
    conn_t k;
    ps_buf_t b = {0};

    /* Required and sent: the accessors. */
    setup(&k, required, alice, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_EQ(ps_tls_client_cert_count(&k.t), 1);
    CHECK_EQ(ps_tls_client_subject(&k.t, &b), 0);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "CN=alice,O=Example");
    ps_buf_reset(&b);
    CHECK_EQ(ps_tls_client_cert_pem(&k.t, 0, &b), 0);
    CHECK(ps_buf_size(&b) > 27 && memcmp(ps_buf_head(&b), "-----BEGIN CERTIFICATE-----", 27) == 0);
    CHECK(ps_tls_client_verify_error(&k.t) == NULL);
    CHECK_EQ(ps_tls_client_cert_pem(&k.t, 1, &b), -ENOENT);
    ps_buf_reset(&b);
    teardown(&k);

    /* A chain: the leaf first, then the CA the client sent along. */
    setup(&k, required, chain, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_EQ(ps_tls_client_cert_count(&k.t), 2);
    CHECK_EQ(ps_tls_client_cert_pem(&k.t, 1, &b), 0);
    FILE *f = fopen(ca, "r");
    char ca_pem[4096];
    size_t ca_len = fread(ca_pem, 1, sizeof(ca_pem), f);
    fclose(f);
    CHECK(ps_buf_size(&b) == ca_len && memcmp(ps_buf_head(&b), ca_pem, ca_len) == 0);
    ps_buf_reset(&b);
    teardown(&k);

    /* Required and missing, required and from another CA. */
    setup(&k, required, none, 0);
    CHECK_EQ(handshake(&k), -EPROTO);
    printf("test_transport: no client certificate: %s\n", k.t.reason);
    CHECK(k.t.reason && strstr(k.t.reason, "certificate"));
    teardown(&k);
    setup(&k, required, bad, 0);
    CHECK_EQ(handshake(&k), -EPROTO);
    printf("test_transport: bad client certificate: %s (%s)\n", k.t.reason,
           ps_tls_client_verify_error(&k.t));
    CHECK(k.t.reason && strstr(k.t.reason, "certificate verify failed"));
    CHECK(ps_tls_client_verify_error(&k.t) != NULL);
    teardown(&k);

    /* Optional: none is fine, a good one is verified, a bad one refused. */
    setup(&k, optional, none, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_EQ(ps_tls_client_cert_count(&k.t), 0);
    CHECK_EQ(ps_tls_client_subject(&k.t, &b), -ENOENT);
    CHECK(ps_tls_client_verify_error(&k.t) == NULL);
    teardown(&k);
    setup(&k, optional, alice, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    CHECK_EQ(ps_tls_client_cert_count(&k.t), 1);
    teardown(&k);
    setup(&k, optional, bad, 0);
    CHECK_EQ(handshake(&k), -EPROTO);
    teardown(&k);

    ps_buf_free(&b);
    SSL_CTX_free(none);
    SSL_CTX_free(alice);
    SSL_CTX_free(chain);
    SSL_CTX_free(bad);
    ps_tls_ctx_free(required);
    ps_tls_ctx_free(optional);
}

/* Bad input before or during the handshake. */
static void test_hostile_clients(void)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    int sfd, cfd;
    ps_transport_t t;
    char buf[256];

    /* Clear-text HTTP: nothing consumed, the caller answers in clear. */
    tcp_pair(&sfd, &cfd, 0);
    ps_transport_init_tls(&t, sfd, sctx);
    CHECK_EQ(ps_transport_handshake(&t), PS_IO_WANT_READ);
    const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(write(cfd, req, sizeof(req) - 1), sizeof(req) - 1);
    usleep(20000);
    CHECK_EQ(ps_transport_handshake(&t), PS_TLS_PLAINTEXT);
    ps_transport_downgrade(&t);
    CHECK(!ps_transport_is_tls(&t));
    ssize_t n = ps_transport_read(&t, buf, sizeof(buf));
    CHECK_MEM_EQ(buf, n > 0 ? (size_t)n : 0, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(ps_transport_write(&t, "HTTP/1.1 400 Bad Request\r\n\r\n", 28), 28);
    usleep(20000);
    CHECK_EQ(read(cfd, buf, sizeof(buf)), 28);
    ps_transport_close(&t);
    close(cfd);

    /* A record that is not a ClientHello, and bytes that are not TLS. */
    const char *garbage[] = {"\x16\x03\x01\x00\x05hello", "\x00\x01\x02\x03garbage\xff"};
    size_t glen[] = {10, 12};
    for (int i = 0; i < 2; i++) {
        tcp_pair(&sfd, &cfd, 0);
        ps_transport_init_tls(&t, sfd, sctx);
        CHECK_EQ(write(cfd, garbage[i], glen[i]), (ssize_t)glen[i]);
        usleep(20000);
        int rc = PS_IO_WANT_READ;
        for (int j = 0; j < 10 && rc == PS_IO_WANT_READ; j++)
            rc = ps_transport_handshake(&t);
        CHECK_EQ(rc, -EPROTO);
        printf("test_transport: garbage %d: %s\n", i, t.reason);
        CHECK(t.reason != NULL);
        CHECK(ERR_peek_error() == 0);
        ps_transport_close(&t);
        close(cfd);
    }

    /* A client that stalls: silent, then half a record header. The step
     * only ever asks to wait for input. */
    tcp_pair(&sfd, &cfd, 0);
    ps_transport_init_tls(&t, sfd, sctx);
    for (int j = 0; j < 3; j++)
        CHECK_EQ(ps_transport_handshake(&t), PS_IO_WANT_READ);
    CHECK_EQ(write(cfd, "\x16\x03\x01\x00", 4), 4);
    usleep(20000);
    for (int j = 0; j < 3; j++)
        CHECK_EQ(ps_transport_handshake(&t), PS_IO_WANT_READ);
    /* Then goes away. */
    close(cfd);
    usleep(20000);
    int rc = ps_transport_handshake(&t);
    CHECK(rc == -ECONNRESET || rc == -EPROTO);
    printf("test_transport: client gone mid-handshake: %d %s\n", rc, t.reason);
    ps_transport_close(&t);
    CHECK_EQ(t.fd, -1);

    /* Closed before sending anything. */
    tcp_pair(&sfd, &cfd, 0);
    ps_transport_init_tls(&t, sfd, sctx);
    close(cfd);
    usleep(20000);
    CHECK_EQ(ps_transport_handshake(&t), -ECONNRESET);
    ps_transport_close(&t);
    ps_tls_ctx_free(sctx);
}

/* Plain transport: the calls h1conn.c makes per keep-alive request, so that
 * strace can count them (one read, one sendmsg each). */
static void test_plain(int rounds)
{
    int sv[2];
    char buf[512];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    nonblocking(sv[0]);
    ps_transport_t t;
    ps_transport_init_plain(&t, sv[0]);
    const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    int ok = 1;
    for (int i = 0; i < rounds; i++) {
        if (write(sv[1], req, sizeof(req) - 1) < 0)
            ok = 0;
        ssize_t n = ps_transport_read(&t, buf, sizeof(buf));
        struct iovec v[2] = {{(void *)head, sizeof(head) - 1}, {"hello", 5}};
        ok &= n == sizeof(req) - 1;
        ok &= ps_transport_writev(&t, v, 2) == (ssize_t)(sizeof(head) - 1 + 5);
        ok &= read(sv[1], buf, sizeof(buf)) == (ssize_t)(sizeof(head) - 1 + 5);
    }
    CHECK(ok);
    CHECK_EQ(ps_transport_read(&t, buf, sizeof(buf)), PS_IO_WANT_READ);
    CHECK_EQ(ps_transport_pending(&t), 0);
    CHECK_EQ(ps_transport_shutdown(&t), 0);
    CHECK_EQ(read(sv[1], buf, sizeof(buf)), 0);
    ps_transport_close(&t);
    close(sv[1]);
}

/* Keep-alive rounds over TLS: the client writes a request, the server reads
 * it and answers head and body in one writev. */
static void test_tls_rounds(int rounds)
{
    ps_tls_settings_t s = {0};
    ps_tls_ctx_t *sctx = server_ctx(&s);
    SSL_CTX *cctx = client_ctx(0, NULL);
    conn_t k;
    char buf[512];
    const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    setup(&k, sctx, cctx, 0);
    CHECK_EQ(handshake(&k), PS_TLS_DONE);
    int ok = 1;
    size_t n;
    for (int i = 0; i < rounds; i++) {
        ok &= SSL_write_ex(k.c, req, sizeof(req) - 1, &n) == 1;
        struct pollfd p = {.fd = k.sfd, .events = POLLIN};
        poll(&p, 1, 1000);
        ok &= ps_transport_read(&k.t, buf, sizeof(buf)) == sizeof(req) - 1;
        struct iovec v[2] = {{(void *)head, sizeof(head) - 1}, {"hello", 5}};
        ok &= ps_transport_writev(&k.t, v, 2) == (ssize_t)(sizeof(head) - 1 + 5);
        p.fd = k.cfd;
        poll(&p, 1, 1000);
        size_t got = 0;
        while (got < sizeof(head) - 1 + 5 && SSL_read_ex(k.c, buf, sizeof(buf), &n) == 1)
            got += n;
        ok &= got == sizeof(head) - 1 + 5;
    }
    CHECK(ok);
    teardown(&k);
    SSL_CTX_free(cctx);
    ps_tls_ctx_free(sctx);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* as in the Python process: OpenSSL writes with write(2) */
    if (argc == 3 && strcmp(argv[1], "plain") == 0) {
        test_plain(atoi(argv[2]));
        return check_finish("test_transport plain");
    }
    snprintf(dir, sizeof(dir), "/tmp/ps-tls-XXXXXX");
    if (mkdtemp(dir) == NULL || make_certs() != 0) {
        fprintf(stderr, "test_transport: cannot make certificates in %s\n", dir);
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "tls") == 0) {
        test_tls_rounds(atoi(argv[2]));
        sh("rm -rf %s", dir);
        return check_finish("test_transport tls");
    }
    int kernel_ktls = ktls_in_kernel();
    printf("test_transport: kernel TLS %s in this kernel\n", kernel_ktls ? "is" : "is not");
    test_sniff();
    test_plain(10);
    test_config_errors();
    test_versions_and_alpn();
    test_dual_certificates();
    test_certificates_by_name();
    test_handshake_waits_for_writable();
    test_read_and_pending();
    test_writev_partial(0);
    test_writev_partial(TLS1_2_VERSION);
    test_sendfile(1, kernel_ktls);
    test_sendfile(0, kernel_ktls);
    test_resumption(0);
    test_resumption(TLS1_2_VERSION);
    test_client_certificates(0);
    test_client_certificates(TLS1_2_VERSION);
    test_hostile_clients();
    test_tls_rounds(100);
    sh("rm -rf %s", dir);
    return check_finish("test_transport");
}
