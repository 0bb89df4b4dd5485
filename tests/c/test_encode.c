/* Response compression (csrc/serve/encode.c) over HTTP/1, without a network
 * and without an interpreter: a handler answers through the ps_exchange_*
 * calls of a worker with --compress, and the test reads the bytes, takes the
 * chunks apart and inflates them with zlib. Run with LeakSanitizer: the
 * encoder of a response that never ended is freed with its connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "base/common.h"
#include "codec/compress.h"
#include "serve/encode.h"
#include "serve/exchange.h"
#include "serve/h1conn.h"
#include "serve/worker.h"

#define BODY_LEN 6000

static char text[BODY_LEN];
static struct {
    int rejected;
    const char *reason;
} seen;

static const ps_header_t plain = {PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain")};

static void on_request(ps_exchange_t *x)
{
    ps_slice_t t = x->req->target;
    ps_header_t h[3] = {plain, {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("6000")}};
    if (PS_SLICE_IEQ(t, "/whole")) {
        h[2] = (ps_header_t){PS_SLICE_LIT("ETag"), PS_SLICE_LIT("\"v1\"")};
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, 3, text, BODY_LEN) >= 0);
        ps_exchange_end(x); /* (the encoder, finished, stayed until here) */
        CHECK(x->encoder == NULL);
    } else if (PS_SLICE_IEQ(t, "/stream")) {
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, 1, text, 2000) >= 0);
        CHECK(x->encoder != NULL);
        CHECK(ps_exchange_write(x, text + 2000, 4000) >= 0);
        ps_exchange_end(x);
        CHECK(x->encoder == NULL);
    } else if (PS_SLICE_IEQ(t, "/left")) { /* never ends: the close frees the encoder */
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, 2, text, 2000) >= 0);
        CHECK(x->encoder != NULL);
    } else if (PS_SLICE_IEQ(t, "/fail")) {
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, 1, text, 2000) >= 0);
        CHECK_EQ(ps_exchange_write(x, text + 2000, 4000), -EPIPE); /* past fail_after */
        CHECK(x->encoder == NULL);
        ps_exchange_abort(x); /* as a layer does on -EPIPE: harmless twice */
    } else {
        ps_header_t png = {PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("image/png")};
        h[0] = png;
        CHECK(ps_exchange_start(x, PS_SLICE_LIT("200 OK"), h, 2, text, BODY_LEN) >= 0);
        ps_exchange_end(x);
    }
}

static void on_rejected(ps_exchange_t *x, int status, const char *reason)
{
    PS_UNUSED(x);
    CHECK_EQ(status, 500);
    seen.rejected++;
    seen.reason = reason;
}

static void on_nothing(ps_exchange_t *x)
{
    PS_UNUSED(x);
}

static const ps_handler_t handler = {
    .on_request = on_request,
    .on_writable = on_nothing,
    .on_disconnect = on_nothing,
    .dispose = on_nothing,
    .on_rejected = on_rejected,
};

static ps_worker_t worker;

/* Sends req on a new connection and returns what came back (NUL-terminated
 * head, static buffer; *len: bytes in all). */
static const char *exchange(const char *req, size_t *len)
{
    static char out[65536];
    int sv[2];
    struct sockaddr_storage peer = {.ss_family = AF_UNIX};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        exit(2);
    ps_h1conn_t *c = ps_h1conn_new(&worker, sv[0], &peer, sizeof(sa_family_t), 1);
    if (c == NULL)
        exit(2);
    ps_sock_link(&c->s);
    CHECK_EQ(write(sv[1], req, strlen(req)), (long long)strlen(req));
    ps_h1conn_accepted(c);
    *len = 0;
    for (int i = 0; i < 20 && *len < sizeof(out) - 1; i++) {
        ev_run(worker.loop, EVRUN_NOWAIT);
        ssize_t n = read(sv[1], out + *len, sizeof(out) - 1 - *len);
        if (n > 0)
            *len += (size_t)n;
        else if (n == 0)
            break;
        else
            poll(NULL, 0, 5);
    }
    out[*len] = '\0';
    close(sv[1]);
    ev_run(worker.loop, EVRUN_NOWAIT); /* the peer's close: the connection goes */
    ev_run(worker.loop, EVRUN_NOWAIT);
    return out;
}

/* The body after the head in resp, inflated (gzip): chunked, or of the
 * head's Content-Length. Returns its length, or -1 when it does not decode. */
static long gunzip_body(const char *resp, size_t len, char *dst, size_t cap)
{
    const char *p = strstr(resp, "\r\n\r\n"), *end = resp + len;
    const char *cl = strcasestr(resp, "\r\nContent-Length: ");
    char packed[65536];
    size_t n = 0;
    if (p == NULL)
        return -1;
    if (cl != NULL && cl < p) {
        n = strtoul(cl + 18, NULL, 10);
        if (p + 4 + n != end || n > sizeof(packed))
            return -1;
        memcpy(packed, p + 4, n);
    }
    for (p += 4; cl == NULL && p < end;) {
        char *after;
        unsigned long size = strtoul(p, &after, 16);
        if (after == p || size == 0 || (p = strstr(after, "\r\n")) == NULL)
            break;
        p += 2;
        if (p + size > end || n + size > sizeof(packed))
            return -1;
        memcpy(packed + n, p, size);
        n += size;
        p += size + 2;
    }
    z_stream z = {0};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -1;
    z.next_in = (Bytef *)packed, z.avail_in = (uInt)n;
    z.next_out = (Bytef *)dst, z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_FINISH);
    long out = rc == Z_STREAM_END ? (long)(cap - z.avail_out) : -1;
    inflateEnd(&z);
    return out;
}

/* whole: the body came with the head, so it goes out with its compressed
 * length; else chunked. */
static void check_gzip_body(const char *resp, size_t len, int whole)
{
    static char got[2 * BODY_LEN];
    CHECK(strcasestr(resp, "\r\nContent-Encoding: gzip\r\n") != NULL);
    CHECK((strcasestr(resp, "\r\nTransfer-Encoding: chunked\r\n") != NULL) == !whole);
    CHECK((strcasestr(resp, "\r\nContent-Length:") != NULL) == whole);
    CHECK(strcasestr(resp, "\r\nContent-Length: 6000\r\n") == NULL);
    CHECK(strcasestr(resp, "\r\nVary: Accept-Encoding\r\n") != NULL);
    CHECK_EQ(gunzip_body(resp, len, got, sizeof(got)), BODY_LEN);
    CHECK(memcmp(got, text, BODY_LEN) == 0);
}

static void test_whole_body_compressed_and_etag_weak(void)
{
    size_t len;
    const char *r =
        exchange("GET /whole HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", &len);
    check_gzip_body(r, len, 1);
    CHECK(strstr(r, "\r\nETag: W/\"v1\"\r\n") != NULL);
}

static void test_streamed_body_compressed_piece_by_piece(void)
{
    size_t len;
    const char *r =
        exchange("GET /stream HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", &len);
    check_gzip_body(r, len, 0);
}

static void test_other_types_and_identity_left_alone(void)
{
    size_t len;
    const char *r = exchange("GET /png HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", &len);
    CHECK(strcasestr(r, "Content-Encoding") == NULL && strcasestr(r, "Vary") == NULL);
    CHECK(strstr(r, "\r\nContent-Length: 6000\r\n") != NULL);
    r = exchange("GET /whole HTTP/1.1\r\nHost: x\r\n\r\n", &len);
    CHECK(strcasestr(r, "Content-Encoding") == NULL);
    CHECK(strstr(r, "\r\nVary: Accept-Encoding\r\n") != NULL);
    CHECK(strstr(r, "\r\nETag: \"v1\"\r\n") != NULL);
}

static void test_response_left_unended_frees_its_encoder(void)
{
    size_t len;
    const char *r = exchange("GET /left HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\n\r\n", &len);
    CHECK(strcasestr(r, "\r\nContent-Encoding: br\r\n") != NULL);
    /* Still open (the handler never ends it): ps_worker_free closes it, and
     * LeakSanitizer checks that its encoder went with it. */
    CHECK_EQ(worker.nconns, 1);
}

static void test_compressor_failure_aborts_the_response(void)
{
    size_t len;
    int before = seen.rejected;
    const char *r =
        exchange("GET /fail HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", &len);
    CHECK(strcasestr(r, "\r\nContent-Encoding: gzip\r\n") != NULL);
    CHECK(strstr(r, "\r\n0\r\n\r\n") == NULL); /* never a complete chunked body */
    CHECK_EQ(seen.rejected, before + 1);
    CHECK(seen.reason != NULL && strstr(seen.reason, "compression") != NULL);
}

static void test_type_patterns(void)
{
    ps_encode_cfg_t cfg = {.ntypes = 3, .types = {"text/*", "*+json", "application/json"}};
    CHECK(ps_encode_type_ok(&cfg, PS_SLICE_LIT("text/html; charset=utf-8")));
    CHECK(ps_encode_type_ok(&cfg, PS_SLICE_LIT("TEXT/CSS")));
    CHECK(ps_encode_type_ok(&cfg, PS_SLICE_LIT("application/ld+json")));
    CHECK(ps_encode_type_ok(&cfg, PS_SLICE_LIT("application/json;charset=utf-8")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("text/event-stream")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("text/event-stream; charset=utf-8")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("text/")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("+json")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("application/jsonx")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("image/png")));
    CHECK(!ps_encode_type_ok(&cfg, PS_SLICE_LIT("")));
}

int main(void)
{
    for (size_t i = 0; i < BODY_LEN; i++)
        text[i] = "pyserver compresses this text. "[i % 31];
    ps_encode_cfg_t compress = {
        .min_size = 1024,
        .level = PS_COMPRESS_LEVEL_DEFAULT,
        .offered = PS_CODING_BIT(PS_CODING_BR) | PS_CODING_BIT(PS_CODING_GZIP),
        .ntypes = 1,
        .types = {"text/*"},
        .fail_after = 0,
    };
    ps_config_t cfg = {
        .limits = {.max_request_line = 8190, .max_fields = 100, .max_field_size = 1024},
        .timeout_keep_alive = 5,
        .timeout_request_header = 5,
        .timeout_request_body = 5,
        .body_spool_threshold = 1 << 20,
        .graceful_timeout = 1,
        .limit_connections = 100,
        .compress = &compress,
    };
    if (ps_worker_init(&worker, &cfg, &handler, NULL, NULL, NULL) < 0) {
        fprintf(stderr, "test_encode: cannot make a worker\n");
        return 2;
    }
    test_type_patterns();
    test_whole_body_compressed_and_etag_weak();
    test_streamed_body_compressed_piece_by_piece();
    test_other_types_and_identity_left_alone();
    test_response_left_unended_frees_its_encoder();
    compress.fail_after = 3000;
    test_compressor_failure_aborts_the_response();
    ps_worker_free(&worker);
    return check_finish("test_encode");
}
