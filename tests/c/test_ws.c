/* Unit tests of csrc/codec/ws.c: the opening handshake (checks, accept hash, the
 * 101 head, permessage-deflate negotiation) and the session (frames fed in
 * any pieces, close codes of RFC 6455 7.4, UTF-8, the message limit,
 * compression both ways, the close handshake, the event queue's bound).
 * The client side is written here: masked frames, and zlib as a client's
 * compressor and decompressor. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "check.h"
#include "base/common.h"
#include "codec/http1.h"
#include "codec/ws.h"

/* ---- requests ------------------------------------------------------------ */

static const ps_http1_limits_t http_limits = {
    .max_request_line = 8190, .max_fields = 100, .max_field_size = 8190, .max_body = 1 << 20};

typedef struct {
    ps_http1_parser_t p;
    ps_buf_t body;
} parsed_t;

/* Parses one request head (the text gets a final blank line); returns 1
 * when it parsed, the request being t->p.req. */
static int parse(parsed_t *t, const char *head)
{
    char text[8192];
    size_t used;
    memset(&t->body, 0, sizeof(t->body));
    ps_http1_init(&t->p, &http_limits, &t->body, 1 << 20);
    int n = snprintf(text, sizeof(text), "%s\r\n", head);
    int rc = ps_http1_feed(&t->p, text, (size_t)n, &used);
    return rc != PS_HTTP1_ERROR && t->p.req.head_complete;
}

static void parsed_free(parsed_t *t)
{
    ps_http1_free(&t->p);
    ps_buf_free(&t->body);
}

#define UPGRADE_HEAD                                                                               \
    "GET /chat HTTP/1.1\r\n"                                                                       \
    "Host: example.com\r\n"                                                                        \
    "Upgrade: websocket\r\n"                                                                       \
    "Connection: Upgrade\r\n"                                                                      \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"                                              \
    "Sec-WebSocket-Version: 13\r\n"

/* Runs ps_ws_check_request on a head; returns its result. */
static int check_head(const char *head, ps_ws_handshake_t *hs)
{
    parsed_t t;
    ps_ws_handshake_t local;
    if (!parse(&t, head)) {
        parsed_free(&t);
        return -1;
    }
    int rc = ps_ws_check_request(&t.p.req, hs ? hs : &local);
    parsed_free(&t);
    return rc;
}

/* ---- handshake ----------------------------------------------------------- */

static void test_accept_key_is_rfc_6455s_example(void)
{
    char out[PS_WS_ACCEPT_LEN];
    CHECK_EQ(ps_ws_accept_key(PS_SLICE_LIT("dGhlIHNhbXBsZSBub25jZQ=="), out), 0);
    CHECK_MEM_EQ(out, sizeof(out), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void test_valid_upgrade_is_accepted_with_its_subprotocols(void)
{
    parsed_t t;
    ps_ws_handshake_t hs;
    CHECK(parse(&t, UPGRADE_HEAD "Sec-WebSocket-Protocol: chat, superchat\r\n"
                                 "Sec-WebSocket-Protocol: v2.json\r\n"));
    CHECK_EQ(ps_ws_check_request(&t.p.req, &hs), PS_WS_HS_OK);
    CHECK_SLICE_EQ(hs.key, "dGhlIHNhbXBsZSBub25jZQ==");
    CHECK_EQ(hs.nsubprotocols, 3);
    CHECK_SLICE_EQ(hs.subprotocols[0], "chat");
    CHECK_SLICE_EQ(hs.subprotocols[1], "superchat");
    CHECK_SLICE_EQ(hs.subprotocols[2], "v2.json");
    parsed_free(&t);
}

static void test_upgrade_tokens_are_found_case_insensitively_in_lists(void)
{
    CHECK_EQ(check_head("GET / HTTP/1.1\r\nHost: a\r\n"
                        "Upgrade: h2c, WebSocket\r\n"
                        "Connection: keep-alive, UPGRADE\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n",
                        NULL),
             PS_WS_HS_OK);
    CHECK_EQ(check_head("GET / HTTP/1.1\r\nHost: a\r\n"
                        "Upgrade: h2c\r\nUpgrade: ,websocket ,\r\n"
                        "Connection: foo\r\nConnection: bar,upgrade\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n",
                        NULL),
             PS_WS_HS_OK);
}

static void test_requests_without_upgrade_websocket_are_ordinary(void)
{
    CHECK_EQ(check_head("GET / HTTP/1.1\r\nHost: a\r\n", NULL), PS_WS_HS_NONE);
    CHECK_EQ(check_head("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n",
                        NULL),
             PS_WS_HS_NONE);
    CHECK_EQ(check_head("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websockets\r\n"
                        "Connection: upgrade\r\n",
                        NULL),
             PS_WS_HS_NONE);
}

/* Each refusal, with its status and a reason for the log. */
static void check_refused(const char *head, int status)
{
    ps_ws_handshake_t hs;
    int rc = check_head(head, &hs);
    if (!CHECK_EQ(rc, status))
        fprintf(stderr, "    for: %s\n", head);
    CHECK(rc < 0 || hs.reason != NULL);
}

static void test_handshake_refusals(void)
{
#define HOST "Host: a\r\n"
#define UPG "Upgrade: websocket\r\n"
#define CONN "Connection: Upgrade\r\n"
#define KEY "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
#define VER "Sec-WebSocket-Version: 13\r\n"
    check_refused("POST / HTTP/1.1\r\n" HOST UPG CONN KEY VER, 400);
    check_refused("HEAD / HTTP/1.1\r\n" HOST UPG CONN KEY VER, 400);
    check_refused("GET / HTTP/1.0\r\n" HOST UPG CONN KEY VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG KEY VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG "Connection: keep-alive\r\n" KEY VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER "Content-Length: 3\r\n", 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER "Transfer-Encoding: chunked\r\n", 400);
    /* the version: missing, another one, repeated */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY, 426);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY "Sec-WebSocket-Version: 8\r\n", 426);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY "Sec-WebSocket-Version: 13, 8\r\n", 426);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER VER, 426);
    /* the key: missing, repeated, not base64 of 16 bytes */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY KEY VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN "Sec-WebSocket-Key: \r\n" VER, 400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN "Sec-WebSocket-Key: dGhlIHNhbXBsZQ==\r\n" VER,
                  400); /* 10 bytes */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ\r\n" VER,
                  400); /* no padding */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQA=\r\n" VER,
                  400); /* 17 bytes */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZ*==\r\n" VER,
                  400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==dGhl\r\n" VER,
                  400);
    /* subprotocols that are not tokens, or too many */
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER "Sec-WebSocket-Protocol: a b\r\n",
                  400);
    check_refused("GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER "Sec-WebSocket-Protocol: \"a\"\r\n",
                  400);
    char head[4096];
    int n = snprintf(head, sizeof(head),
                     "GET / HTTP/1.1\r\n" HOST UPG CONN KEY VER "Sec-WebSocket-Protocol: p0");
    for (int i = 1; i <= PS_WS_MAX_SUBPROTOCOLS; i++)
        n += snprintf(head + n, sizeof(head) - (size_t)n, ", p%d", i);
    snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    check_refused(head, 400);
}

static void test_refusal_responses(void)
{
    ps_slice_t r = ps_ws_reject_response(PS_WS_HS_BAD_VERSION);
    CHECK(r.len > 0 && memcmp(r.base, "HTTP/1.1 426 Upgrade Required\r\n", 31) == 0);
    CHECK(memmem(r.base, r.len, "\r\nSec-WebSocket-Version: 13\r\n", 29) != NULL);
    CHECK(memmem(r.base, r.len, "\r\nUpgrade: websocket\r\n", 22) != NULL);
    CHECK(memmem(r.base, r.len, "\r\nConnection: close\r\n", 21) != NULL);
    CHECK(r.len > 16 && memcmp(r.base + r.len - 20, "\r\n\r\nUpgrade Required", 20) == 0);
    r = ps_ws_reject_response(PS_WS_HS_BAD_REQUEST);
    CHECK(r.len > 0 && memcmp(r.base, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
}

static ps_slice_t buf_slice(const ps_buf_t *b)
{
    return b->data ? (ps_slice_t){ps_buf_head(b), ps_buf_size(b)} : (ps_slice_t){"", 0};
}

static void test_accept_head(void)
{
    ps_buf_t out = {0};
    ps_ws_deflate_t d = {.enabled = 1,
                         .server_max_window_bits = 12,
                         .client_max_window_bits = 15,
                         .server_bits_in_response = 1};
    ps_header_t h[] = {
        {PS_SLICE_LIT("Set-Cookie"), PS_SLICE_LIT("a=1")},
        {PS_SLICE_LIT("connection"), PS_SLICE_LIT("close")},
        {PS_SLICE_LIT("Sec-WebSocket-Protocol"), PS_SLICE_LIT("other")},
        {PS_SLICE_LIT("Content-Length"), PS_SLICE_LIT("0")},
    };
    ps_slice_t extra[] = {PS_SLICE_LIT("Server: pyserver\r\n")};
    CHECK_EQ(ps_ws_write_accept(&out, PS_SLICE_LIT("dGhlIHNhbXBsZSBub25jZQ=="),
                                PS_SLICE_LIT("chat"), &d, h, 4, extra, 1),
             0);
    ps_slice_t s = buf_slice(&out);
    CHECK_SLICE_EQ(s, "HTTP/1.1 101 Switching Protocols\r\n"
                      "Upgrade: websocket\r\n"
                      "Connection: Upgrade\r\n"
                      "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                      "Sec-WebSocket-Protocol: chat\r\n"
                      "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=12\r\n"
                      "Set-Cookie: a=1\r\n"
                      "Server: pyserver\r\n"
                      "\r\n");
    ps_buf_reset(&out);
    CHECK_EQ(ps_ws_write_accept(&out, PS_SLICE_LIT("dGhlIHNhbXBsZSBub25jZQ=="), (ps_slice_t){"", 0},
                                NULL, NULL, 0, NULL, 0),
             0);
    CHECK_SLICE_EQ(buf_slice(&out), "HTTP/1.1 101 Switching Protocols\r\n"
                                    "Upgrade: websocket\r\n"
                                    "Connection: Upgrade\r\n"
                                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                                    "\r\n");
    ps_buf_reset(&out);
    ps_header_t bad[] = {{PS_SLICE_LIT("X-A"), PS_SLICE_LIT("a\r\nb")}};
    CHECK_EQ(ps_ws_write_accept(&out, PS_SLICE_LIT("dGhlIHNhbXBsZSBub25jZQ=="), (ps_slice_t){"", 0},
                                NULL, bad, 1, NULL, 0),
             -EINVAL);
    CHECK_EQ(ps_ws_write_accept(&out, PS_SLICE_LIT("dGhlIHNhbXBsZSBub25jZQ=="), PS_SLICE_LIT("a b"),
                                NULL, NULL, 0, NULL, 0),
             -EINVAL);
    CHECK_EQ(ps_buf_size(&out), 0);
    ps_buf_free(&out);
}

/* ---- permessage-deflate negotiation ---------------------------------------- */

/* Negotiates the offers of one or more Sec-WebSocket-Extensions lines
 * (already formatted as header lines); returns the response value, or
 * "declined". */
static const char *negotiate(const char *ext_lines, const ps_ws_deflate_config_t *cfg,
                             ps_ws_deflate_t *got)
{
    static char resp[PS_WS_DEFLATE_RESPONSE_MAX + 1];
    char head[4096];
    parsed_t t;
    ps_ws_deflate_t local;
    ps_ws_deflate_config_t defaults = PS_WS_DEFLATE_DEFAULTS;
    snprintf(head, sizeof(head), UPGRADE_HEAD "%s", ext_lines);
    if (!parse(&t, head)) {
        parsed_free(&t);
        return "unparsed";
    }
    if (got == NULL)
        got = &local;
    int ok = ps_ws_negotiate_deflate(&t.p.req, cfg ? cfg : &defaults, got);
    parsed_free(&t);
    if (!ok)
        return "declined";
    size_t n = ps_ws_deflate_response(got, resp);
    resp[n] = 0;
    return resp;
}

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!check_at(strcmp(a_, b_) == 0, __FILE__, __LINE__, #a " == " #b))                      \
            fprintf(stderr, "    got \"%s\", expected \"%s\"\n", a_, b_);                          \
    } while (0)

#define EXT(v) "Sec-WebSocket-Extensions: " v "\r\n"

static void test_deflate_offers_are_accepted_with_our_windows(void)
{
    ps_ws_deflate_t d;
    CHECK_STR(negotiate("", NULL, NULL), "declined");
    CHECK_STR(negotiate(EXT("permessage-deflate"), NULL, &d),
              "permessage-deflate; server_max_window_bits=12");
    CHECK_EQ(d.server_max_window_bits, 12);
    CHECK_EQ(d.client_max_window_bits, 15); /* not offered: the client may use 15 */
    CHECK(!d.server_no_context_takeover && !d.client_no_context_takeover);
    CHECK_STR(negotiate(EXT("permessage-deflate; client_max_window_bits"), NULL, &d),
              "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12");
    CHECK_EQ(d.client_max_window_bits, 12);
    CHECK_STR(negotiate(EXT("permessage-deflate; client_max_window_bits=10"), NULL, &d),
              "permessage-deflate; server_max_window_bits=12; client_max_window_bits=10");
    CHECK_EQ(d.client_max_window_bits, 10);
    CHECK_STR(negotiate(EXT("permessage-deflate;client_max_window_bits=15"), NULL, NULL),
              "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12");
    CHECK_STR(negotiate(EXT("permessage-deflate; server_max_window_bits=10"), NULL, &d),
              "permessage-deflate; server_max_window_bits=10");
    CHECK_EQ(d.server_max_window_bits, 10);
    CHECK_STR(negotiate(EXT("permessage-deflate; server_max_window_bits=15"), NULL, &d),
              "permessage-deflate; server_max_window_bits=12");
    CHECK_STR(negotiate(EXT("permessage-deflate; server_max_window_bits=\"9\""), NULL, &d),
              "permessage-deflate; server_max_window_bits=9");
    CHECK_STR(negotiate(EXT("permessage-deflate; client_max_window_bits=8"), NULL, &d),
              "permessage-deflate; server_max_window_bits=12; client_max_window_bits=8");
    CHECK_EQ(d.client_max_window_bits, 8); /* inflating with 8 bits is fine */
    CHECK_STR(negotiate(EXT("permessage-deflate; server_no_context_takeover; "
                            "client_no_context_takeover"),
                        NULL, &d),
              "permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
              "server_max_window_bits=12");
    CHECK(d.server_no_context_takeover && d.client_no_context_takeover);
    CHECK_STR(negotiate(EXT("PerMessage-Deflate ; Server_No_Context_Takeover"), NULL, NULL),
              "permessage-deflate; server_no_context_takeover; server_max_window_bits=12");
    ps_ws_deflate_config_t wide = PS_WS_DEFLATE_DEFAULTS;
    wide.server_max_window_bits = wide.client_max_window_bits = 15;
    CHECK_STR(negotiate(EXT("permessage-deflate"), &wide, &d), "permessage-deflate");
    CHECK_EQ(d.server_max_window_bits, 15);
    CHECK_STR(negotiate(EXT("permessage-deflate; client_max_window_bits"), &wide, NULL),
              "permessage-deflate; client_max_window_bits=15");
    ps_ws_deflate_config_t reset = wide;
    reset.server_no_context_takeover = reset.client_no_context_takeover = 1;
    CHECK_STR(negotiate(EXT("permessage-deflate"), &reset, &d),
              "permessage-deflate; server_no_context_takeover; client_no_context_takeover");
    ps_ws_deflate_config_t off = PS_WS_DEFLATE_DEFAULTS;
    off.enabled = 0;
    CHECK_STR(negotiate(EXT("permessage-deflate"), &off, NULL), "declined");
}

static void test_deflate_offers_with_bad_parameters_are_declined(void)
{
    static const char *bad[] = {
        EXT("permessage-deflate; foo"),
        EXT("permessage-deflate; foo=1"),
        EXT("permessage-deflate; server_no_context_takeover; server_no_context_takeover"),
        EXT("permessage-deflate; client_no_context_takeover; client_no_context_takeover"),
        EXT("permessage-deflate; server_max_window_bits=10; server_max_window_bits=10"),
        EXT("permessage-deflate; client_max_window_bits; client_max_window_bits=10"),
        EXT("permessage-deflate; server_no_context_takeover=1"),
        EXT("permessage-deflate; client_no_context_takeover=\"\""),
        EXT("permessage-deflate; server_max_window_bits"),
        EXT("permessage-deflate; server_max_window_bits=8"), /* zlib cannot: declined */
        EXT("permessage-deflate; server_max_window_bits=7"),
        EXT("permessage-deflate; server_max_window_bits=16"),
        EXT("permessage-deflate; server_max_window_bits=08"),
        EXT("permessage-deflate; server_max_window_bits=1a"),
        EXT("permessage-deflate; server_max_window_bits=\"\""),
        EXT("permessage-deflate; server_max_window_bits=100000000000"),
        EXT("permessage-deflate; client_max_window_bits=7"),
        EXT("permessage-deflate; client_max_window_bits=16"),
        EXT("permessage-deflate; client_max_window_bits=\"\""),
        EXT("x-webkit-deflate-frame"),
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(bad); i++)
        if (!CHECK_EQ(strcmp(negotiate(bad[i], NULL, NULL), "declined"), 0))
            fprintf(stderr, "    for: %s\n", bad[i]);
}

static void test_a_declined_offer_falls_back_to_the_next(void)
{
    CHECK_STR(negotiate(EXT("permessage-deflate; server_max_window_bits=8, "
                            "permessage-deflate; server_max_window_bits=9"),
                        NULL, NULL),
              "permessage-deflate; server_max_window_bits=9");
    CHECK_STR(negotiate(EXT("permessage-deflate; foo, permessage-deflate"), NULL, NULL),
              "permessage-deflate; server_max_window_bits=12");
    /* the first acceptable offer wins, across header lines */
    CHECK_STR(negotiate(EXT("x-foo; a=\"b,c\"") EXT("permessage-deflate; client_max_window_bits")
                            EXT("permessage-deflate"),
                        NULL, NULL),
              "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12");
    CHECK_STR(negotiate(EXT(", permessage-deflate ,, ") EXT("x"), NULL, NULL),
              "permessage-deflate; server_max_window_bits=12");
}

static void test_an_unparsable_extensions_header_declines_everything(void)
{
    static const char *bad[] = {
        EXT("permessage-deflate, x; ="),
        EXT("permessage-deflate; server_max_window_bits=\"10"),
        EXT("permessage-deflate x"),
        EXT("permessage-deflate;"),
        EXT("permessage-deflate") EXT("; server_no_context_takeover"),
        EXT("permessage-deflate; client_max_window_bits=10 10"),
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(bad); i++)
        if (!CHECK_EQ(strcmp(negotiate(bad[i], NULL, NULL), "declined"), 0))
            fprintf(stderr, "    for: %s\n", bad[i]);
}

/* ---- the client side ------------------------------------------------------- */

enum { OP_CONT = 0, OP_TEXT = 1, OP_BIN = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };

static const unsigned char mask_key[4] = {0x37, 0xfa, 0x21, 0x3d};

/* Appends a frame as a client sends it (masked unless mask is 0). */
static void put_frame_ex(ps_buf_t *b, int fin, int rsv, int op, const void *data, size_t n,
                         int mask)
{
    unsigned char h[14];
    size_t hl = 2;
    h[0] = (unsigned char)((fin ? 0x80 : 0) | (rsv & 7) << 4 | (op & 15));
    h[1] = mask ? 0x80 : 0;
    if (n < 126) {
        h[1] |= (unsigned char)n;
    } else if (n < 65536) {
        h[1] |= 126;
        h[2] = (unsigned char)(n >> 8);
        h[3] = (unsigned char)n;
        hl = 4;
    } else {
        h[1] |= 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
        hl = 10;
    }
    if (mask) {
        memcpy(h + hl, mask_key, 4);
        hl += 4;
    }
    ps_buf_append(b, h, hl);
    ps_buf_reserve(b, n);
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        b->data[b->len + i] = (char)(mask ? p[i] ^ mask_key[i % 4] : p[i]);
    b->len += n;
}

static void put_frame(ps_buf_t *b, int fin, int rsv, int op, const void *data, size_t n)
{
    put_frame_ex(b, fin, rsv, op, data, n, 1);
}

static void put_close(ps_buf_t *b, unsigned code, const char *reason, size_t n)
{
    unsigned char p[256];
    p[0] = (unsigned char)(code >> 8);
    p[1] = (unsigned char)code;
    memcpy(p + 2, reason, n);
    put_frame(b, 1, 0, OP_CLOSE, p, n + 2);
}

/* A client's compressor (RFC 7692 7.2.1). */
typedef struct {
    z_stream z;
    int reset_each; /* client_no_context_takeover */
} zclient_t;

static void zclient_open(zclient_t *c, int bits, int reset_each)
{
    memset(c, 0, sizeof(*c));
    deflateInit2(&c->z, 6, Z_DEFLATED, -bits, 8, Z_DEFAULT_STRATEGY);
    c->reset_each = reset_each;
}

/* Compresses a whole message into out (reset first). */
static void zclient_compress(zclient_t *c, const void *data, size_t n, ps_buf_t *out)
{
    ps_buf_reset(out);
    ps_buf_reserve(out, n + n / 2 + 64);
    c->z.next_in = (Bytef *)data;
    c->z.avail_in = (uInt)n;
    do {
        if (out->cap - out->len < 64)
            ps_buf_reserve(out, out->cap);
        c->z.next_out = (Bytef *)out->data + out->len;
        c->z.avail_out = (uInt)(out->cap - out->len);
        size_t before = c->z.avail_out;
        deflate(&c->z, Z_SYNC_FLUSH);
        out->len += before - c->z.avail_out;
    } while (c->z.avail_out == 0 || c->z.avail_in > 0);
    if (out->len == 0) { /* an empty message right after a flush */
        out->data[out->len++] = 0;
    } else {
        CHECK(out->len >= 4 && memcmp(out->data + out->len - 4, "\0\0\xff\xff", 4) == 0);
        out->len -= 4;
    }
    if (c->reset_each)
        deflateReset(&c->z);
}

static void zclient_close(zclient_t *c)
{
    deflateEnd(&c->z);
}

/* A client's decompressor for the server's messages. */
typedef struct {
    z_stream z;
    int reset_each; /* server_no_context_takeover */
} zreader_t;

static void zreader_open(zreader_t *r, int bits, int reset_each)
{
    memset(r, 0, sizeof(*r));
    inflateInit2(&r->z, -bits);
    r->reset_each = reset_each;
}

/* Inflates a message (tail appended); returns 0 or -1. */
static int zreader_inflate(zreader_t *r, const void *data, size_t n, ps_buf_t *out)
{
    ps_buf_t in = {0};
    ps_buf_append(&in, data, n);
    ps_buf_append(&in, "\0\0\xff\xff", 4);
    ps_buf_reset(out);
    r->z.next_in = (Bytef *)in.data;
    r->z.avail_in = (uInt)in.len;
    int zr = Z_OK;
    while (r->z.avail_in > 0 || zr == Z_OK) {
        ps_buf_reserve(out, 4096);
        r->z.next_out = (Bytef *)out->data + out->len;
        r->z.avail_out = 4096;
        zr = inflate(&r->z, Z_SYNC_FLUSH);
        out->len += 4096 - r->z.avail_out;
        if (zr != Z_OK && zr != Z_BUF_ERROR)
            break;
        if (zr == Z_BUF_ERROR || (r->z.avail_in == 0 && r->z.avail_out > 0))
            break;
    }
    ps_buf_free(&in);
    if (r->reset_each)
        inflateReset(&r->z);
    return zr == Z_OK || zr == Z_BUF_ERROR ? 0 : -1;
}

static void zreader_close(zreader_t *r)
{
    inflateEnd(&r->z);
}

/* ---- reading what the server wrote ---------------------------------------- */

typedef struct {
    int fin, rsv, op;
    char data[256 * 1024];
    size_t len;
} out_frame_t;

/* Takes the next frame from the server's output; returns 1, 0 when there
 * is no complete frame, -1 when the bytes are not a frame a server may
 * send (masked, bad length encoding). */
static int take_frame(ps_buf_t *b, out_frame_t *f)
{
    const unsigned char *p = (const unsigned char *)ps_buf_head(b);
    size_t avail = ps_buf_size(b), hl = 2;
    uint64_t n;
    if (avail < 2)
        return 0;
    if (p[1] & 0x80)
        return -1;
    n = p[1] & 0x7f;
    if (n == 126) {
        if (avail < 4)
            return 0;
        n = (uint64_t)p[2] << 8 | p[3];
        hl = 4;
        if (n < 126)
            return -1;
    } else if (n == 127) {
        if (avail < 10)
            return 0;
        n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | p[2 + i];
        hl = 10;
        if (n < 65536 || n >> 63)
            return -1;
    }
    if (avail < hl + n)
        return 0;
    if (n > sizeof(f->data))
        return -1;
    f->fin = p[0] >> 7;
    f->rsv = (p[0] >> 4) & 7;
    f->op = p[0] & 15;
    memcpy(f->data, p + hl, (size_t)n);
    f->len = (size_t)n;
    ps_buf_consume(b, hl + (size_t)n);
    return 1;
}

static out_frame_t frame;

/* The server's next frame, which must be there. */
static int next_frame(ps_ws_t *ws)
{
    int rc = take_frame(ps_ws_output(ws), &frame);
    CHECK_EQ(rc, 1);
    return rc == 1;
}

/* The close code in the server's output (the next frame must be a close),
 * 0 for one without a code. */
static int out_close_code(ps_ws_t *ws)
{
    if (!next_frame(ws) || !CHECK_EQ(frame.op, OP_CLOSE))
        return -1;
    if (frame.len < 2)
        return 0;
    return (unsigned char)frame.data[0] << 8 | (unsigned char)frame.data[1];
}

/* ---- a session under test -------------------------------------------------- */

typedef struct {
    ps_ws_t ws;
    ps_ws_limits_t lim;
} session_t;

static void session_open(session_t *s, uint64_t max, uint32_t max_queue,
                         const ps_ws_deflate_t *deflate)
{
    s->lim = (ps_ws_limits_t){.max_message = max, .max_queue = max_queue};
    CHECK_EQ(ps_ws_init(&s->ws, &s->lim, deflate), 0);
}

static void session_close(session_t *s)
{
    ps_ws_free(&s->ws);
}

/* Feeds all of in, `piece` bytes at a time (0: at once); everything must
 * be consumed. */
static void feed(session_t *s, const ps_buf_t *in, size_t piece)
{
    const char *p = ps_buf_head(in);
    size_t n = ps_buf_size(in), off = 0;
    while (off < n) {
        size_t step = piece == 0 ? n - off : PS_MIN(piece, n - off), used = 0;
        CHECK_EQ(ps_ws_feed(&s->ws, p + off, step, &used), 0);
        if (!CHECK_EQ(used, step))
            return;
        off += step;
    }
}

typedef struct {
    int type, origin, code, ascii;
    char data[1 << 20];
    size_t len;
} event_t;

static event_t ev;

/* Takes the next event into `ev`; returns 0 when there was none. */
static int take(session_t *s)
{
    ps_ws_event_t e;
    memset(&ev, 0, offsetof(event_t, data));
    ev.len = 0;
    if (!ps_ws_next_event(&s->ws, &e))
        return 0;
    ev.type = e.type;
    ev.origin = e.origin;
    ev.code = e.code;
    ev.ascii = e.ascii;
    ev.len = PS_MIN(e.data.len, sizeof(ev.data));
    if (ev.len)
        memcpy(ev.data, e.data.base, ev.len);
    return 1;
}

/* The connection failed with `code`: a close frame with it, a FAILED
 * event, no more reading, and ps_ws_done(). */
static void check_failed_with(session_t *s, int code, const char *what)
{
    if (!CHECK_EQ(out_close_code(&s->ws), code))
        fprintf(stderr, "    for: %s\n", what);
    CHECK_EQ(ps_buf_size(ps_ws_output(&s->ws)), 0);
    int got = take(s);
    CHECK(got && ev.type == PS_WS_EV_CLOSE && ev.origin == PS_WS_CLOSE_FAILED);
    if (!CHECK_EQ(ev.code, code))
        fprintf(stderr, "    for: %s\n", what);
    CHECK(ev.len > 0); /* why, in words */
    CHECK(!take(s));
    CHECK(!ps_ws_want_read(&s->ws));
    CHECK(ps_ws_done(&s->ws));
    CHECK_EQ(ps_ws_send(&s->ws, PS_WS_EV_TEXT, "x", 1, 0), -EPIPE);
}

/* Feeds `in` to a new session (whole, then byte by byte) and checks that it
 * fails with `code`. */
static void check_input_fails(const ps_buf_t *in, int code, const ps_ws_deflate_t *d, uint64_t max,
                              const char *what)
{
    for (size_t piece = 0; piece <= 1; piece++) {
        session_t s;
        session_open(&s, max, 0, d);
        feed(&s, in, piece);
        check_failed_with(&s, code, what);
        session_close(&s);
    }
}

static const ps_ws_deflate_t deflate_on = {.enabled = 1,
                                           .server_max_window_bits = 15,
                                           .client_max_window_bits = 15,
                                           .level = 6,
                                           .mem_level = 8};

/* ---- session: messages ----------------------------------------------------- */

static void test_a_text_message_arrives_the_same_in_any_pieces(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, "Hello, world", 12);
    put_frame(&in, 0, 0, OP_BIN, "\x00\x01", 2);
    put_frame(&in, 0, 0, OP_CONT, "", 0);
    put_frame(&in, 1, 0, OP_CONT, "\x02", 1);
    for (size_t piece = 0; piece <= 7; piece++) {
        session_t s;
        session_open(&s, 1 << 20, 0, NULL);
        feed(&s, &in, piece);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
        CHECK_MEM_EQ(ev.data, ev.len, "Hello, world");
        CHECK(take(&s) && ev.type == PS_WS_EV_BINARY);
        CHECK_MEM_EQ(ev.data, ev.len, "\x00\x01\x02");
        CHECK(!take(&s));
        CHECK_EQ(ps_buf_size(ps_ws_output(&s.ws)), 0);
        CHECK(ps_ws_want_read(&s.ws) && !ps_ws_done(&s.ws));
        session_close(&s);
    }
    ps_buf_free(&in);
}

/* ---- storage for large binary messages ---- */

static int storage_live;   /* handles given out and not released */
static int storage_refuse; /* alloc returns NULL */

static void *storage_alloc(size_t len, void **handle)
{
    if (storage_refuse)
        return NULL;
    void *p = malloc(len + 1);
    if (p != NULL) {
        storage_live++;
        *handle = p;
    }
    return p;
}

static void storage_release(void *handle)
{
    storage_live--;
    free(handle);
}

static const ps_ws_storage_t storage = {.alloc = storage_alloc, .release = storage_release};

/* Takes the next event like take(), releasing its handle; *had_handle
 * says whether it had one. */
static int take_stored(session_t *s, int *had_handle)
{
    ps_ws_event_t e;
    memset(&ev, 0, offsetof(event_t, data));
    ev.len = 0;
    if (!ps_ws_next_event(&s->ws, &e))
        return 0;
    ev.type = e.type;
    ev.code = e.code;
    ev.len = PS_MIN(e.data.len, sizeof(ev.data));
    if (ev.len)
        memcpy(ev.data, e.data.base, ev.len);
    *had_handle = e.handle != NULL;
    if (e.handle != NULL) {
        CHECK(e.data.base == e.handle);
        storage_release(e.handle);
    }
    return 1;
}

static void test_large_binary_messages_are_unmasked_into_the_storage(void)
{
    static unsigned char big[5000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7 + 3);
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_BIN, big, PS_WS_STORAGE_MIN - 1); /* too small: the buffer */
    put_frame(&in, 1, 0, OP_BIN, big, PS_WS_STORAGE_MIN);     /* stored */
    put_frame(&in, 1, 0, OP_TEXT, "hi", 2);
    put_frame(&in, 1, 0, OP_BIN, big, sizeof(big)); /* stored, 16-bit length */
    put_frame(&in, 0, 0, OP_BIN, big, 3000);        /* fragmented: the buffer */
    put_frame(&in, 1, 0, OP_CONT, big + 3000, 2000);
    static const struct {
        int type, stored;
        size_t len, from;
    } want[] = {
        {PS_WS_EV_BINARY, 0, PS_WS_STORAGE_MIN - 1, 0},
        {PS_WS_EV_BINARY, 1, PS_WS_STORAGE_MIN, 0},
        {PS_WS_EV_TEXT, 0, 2, 0},
        {PS_WS_EV_BINARY, 1, sizeof(big), 0},
        {PS_WS_EV_BINARY, 0, sizeof(big), 0},
    };
    static const size_t pieces[] = {0, 1, 3, 7, 100, 1500};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        for (int refuse = 0; refuse <= 1; refuse++) {
            session_t s;
            int stored = 0;
            storage_refuse = refuse;
            session_open(&s, 1 << 20, 0, NULL);
            ps_ws_set_storage(&s.ws, &storage);
            feed(&s, &in, pieces[k]);
            for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                CHECK(take_stored(&s, &stored) && ev.type == want[i].type);
                CHECK_EQ(stored, want[i].stored && !refuse);
                if (want[i].type == PS_WS_EV_BINARY) {
                    CHECK_EQ(ev.len, want[i].len);
                    CHECK(memcmp(ev.data, big, want[i].len) == 0);
                }
            }
            CHECK(!take_stored(&s, &stored));
            CHECK_EQ(storage_live, 0);
            session_close(&s);
        }
    }
    storage_refuse = 0;
    ps_buf_free(&in);
}

/* Handles of messages nobody took, or cut short, are released: at the
 * session's end (queued, or inside the frame) and when the stream ends
 * inside the frame. */
static void test_stored_messages_not_taken_are_released(void)
{
    static unsigned char big[2048];
    ps_buf_t in = {0}, cut = {0};
    put_frame(&in, 1, 0, OP_BIN, big, sizeof(big));
    put_frame(&in, 1, 0, OP_BIN, big, sizeof(big));
    put_frame(&cut, 1, 0, OP_BIN, big, sizeof(big));
    cut.len -= 100; /* the stream stops inside the second frame */
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    ps_ws_set_storage(&s.ws, &storage);
    feed(&s, &in, 0);
    CHECK_EQ(storage_live, 2);
    session_close(&s); /* both queued */
    CHECK_EQ(storage_live, 0);

    session_open(&s, 1 << 20, 0, NULL);
    ps_ws_set_storage(&s.ws, &storage);
    feed(&s, &cut, 0);
    CHECK_EQ(storage_live, 1);
    CHECK_EQ(ps_ws_eof(&s.ws), 0);
    CHECK_EQ(storage_live, 0);
    CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.code == 1006);
    session_close(&s);

    /* freed inside the frame, after our close */
    session_open(&s, 1 << 20, 0, NULL);
    ps_ws_set_storage(&s.ws, &storage);
    feed(&s, &cut, 0);
    CHECK_EQ(storage_live, 1);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1000, NULL, 0), 0);
    session_close(&s);
    CHECK_EQ(storage_live, 0);

    /* A message over the limit is refused before any storage is asked for. */
    session_open(&s, sizeof(big) - 1, 0, NULL);
    ps_ws_set_storage(&s.ws, &storage);
    size_t used = 0;
    CHECK_EQ(ps_ws_feed(&s.ws, in.data, 8, &used), 0);
    CHECK_EQ(storage_live, 0);
    CHECK_EQ(out_close_code(&s.ws), 1009);
    session_close(&s);
    ps_buf_free(&in);
    ps_buf_free(&cut);
}

static void test_long_frames_use_16_and_64_bit_lengths(void)
{
    static char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, big, 300);
    put_frame(&in, 1, 0, OP_BIN, big, sizeof(big));
    for (size_t piece = 0; piece <= 4096; piece += 4093) {
        session_t s;
        session_open(&s, 1 << 20, 0, NULL);
        feed(&s, &in, piece);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.len == 300);
        CHECK(memcmp(ev.data, big, 300) == 0);
        CHECK(take(&s) && ev.type == PS_WS_EV_BINARY && ev.len == sizeof(big));
        CHECK(memcmp(ev.data, big, sizeof(big)) == 0);
        /* and the server's own long frames */
        CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, big, 300, 0), 0);
        CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, big, sizeof(big), 0), 0);
        CHECK(next_frame(&s.ws) && frame.len == 300 && frame.op == OP_BIN && frame.fin);
        CHECK(next_frame(&s.ws) && frame.len == sizeof(big) && memcmp(frame.data, big, 70000) == 0);
        session_close(&s);
    }
    ps_buf_free(&in);
}

/* Payloads of every length up to 80 and every split: unmasked eight bytes at
 * a time, the key's phase follows the frame's offset. */
static void test_payloads_unmask_at_any_offset_and_say_whether_they_are_ascii(void)
{
    char text[80], other[80];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (char)('A' + i % 50);
    for (size_t len = 0; len <= sizeof(text); len++) {
        for (size_t piece = 0; piece <= 9; piece += 1 + (piece > 3) * 2) {
            ps_buf_t in = {0};
            put_frame(&in, 1, 0, OP_TEXT, text, len);
            memcpy(other, text, len);
            if (len >= 2) { /* an e-acute somewhere in it */
                other[len / 2 - 1] = (char)0xc3;
                other[len / 2] = (char)0xa9;
            }
            put_frame(&in, 1, 0, OP_TEXT, other, len);
            put_frame(&in, 1, 0, OP_BIN, text, len);
            session_t s;
            session_open(&s, 1 << 20, 0, NULL);
            feed(&s, &in, piece);
            CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == 1);
            CHECK(ev.len == len && memcmp(ev.data, text, len) == 0);
            CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == (len < 2));
            CHECK(ev.len == len && memcmp(ev.data, other, len) == 0);
            CHECK(take(&s) && ev.type == PS_WS_EV_BINARY && ev.ascii == 0);
            CHECK(ev.len == len && memcmp(ev.data, text, len) == 0);
            CHECK(!take(&s));
            session_close(&s);
            ps_buf_free(&in);
        }
    }
}

/* One ASCII fragment does not make a message ASCII; compressed text is
 * checked as well. */
static void test_ascii_is_a_property_of_the_whole_message(void)
{
    ps_buf_t in = {0}, z = {0};
    put_frame(&in, 0, 0, OP_TEXT, "caf\xc3", 4);
    put_frame(&in, 1, 0, OP_CONT, "\xa9 and more ascii after it", 25);
    put_frame(&in, 0, 0, OP_TEXT, "plain ", 6);
    put_frame(&in, 1, 0, OP_CONT, "\xc3\xa9", 2);
    zclient_t c;
    zclient_open(&c, 15, 0);
    zclient_compress(&c, "compressed ascii", 16, &z);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    zclient_compress(&c, "compressed caf\xc3\xa9", 16, &z);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    for (size_t piece = 0; piece <= 1; piece++) {
        session_t s;
        session_open(&s, 1 << 20, 0, &deflate_on);
        feed(&s, &in, piece);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == 0 && ev.len == 29);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == 0 && ev.len == 8);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == 1);
        CHECK_MEM_EQ(ev.data, ev.len, "compressed ascii");
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.ascii == 0);
        CHECK_MEM_EQ(ev.data, ev.len, "compressed caf\xc3\xa9");
        CHECK(!take(&s));
        session_close(&s);
    }
    zclient_close(&c);
    ps_buf_free(&z);
    ps_buf_free(&in);
}

/* A frame prepared for the caller's own writev, cut anywhere, makes the
 * same bytes as one ps_ws_send() queued, compressed or not. */
static void test_a_prepared_frame_is_what_send_would_queue(void)
{
    static char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 7);
    size_t lens[] = {0, 5, 125, 126, 300, 65535, 65536, sizeof(big)};
    for (int z = 0; z <= 1; z++) {
        for (size_t li = 0; li < PS_ARRAY_LEN(lens); li++) {
            size_t len = lens[li];
            session_t a, b;
            session_open(&a, 1 << 20, 0, z ? &deflate_on : NULL);
            CHECK_EQ(ps_ws_send(&a.ws, PS_WS_EV_BINARY, big, len, 0), 0);
            const char *want = ps_buf_head(ps_ws_output(&a.ws));
            size_t want_len = ps_buf_size(ps_ws_output(&a.ws));
            size_t cuts[] = {0, 1, 2, 4, 10, want_len / 2, want_len - 1, want_len};
            for (size_t ci = 0; ci < PS_ARRAY_LEN(cuts); ci++) {
                size_t cut = PS_MIN(cuts[ci], want_len);
                session_open(&b, 1 << 20, 0, z ? &deflate_on : NULL);
                struct iovec iov[2];
                CHECK_EQ(ps_ws_send_prepare(&b.ws, PS_WS_EV_BINARY, big, len, 0, iov), 0);
                CHECK_EQ(ps_buf_size(ps_ws_output(&b.ws)), 0);
                CHECK_EQ(iov[0].iov_len + iov[1].iov_len, want_len);
                ps_buf_t got = {0};
                ps_buf_append(&got, iov[0].iov_base, iov[0].iov_len);
                ps_buf_append(&got, iov[1].iov_base, iov[1].iov_len);
                CHECK(got.len == want_len && memcmp(got.data, want, want_len) == 0);
                CHECK_EQ(ps_ws_send_rest(&b.ws, iov, cut), 0);
                ps_buf_t *out = ps_ws_output(&b.ws);
                CHECK_EQ(ps_buf_size(out), want_len - cut);
                if (cut < want_len)
                    CHECK(memcmp(ps_buf_head(out), want + cut, want_len - cut) == 0);
                /* output pending: the caller must queue through ps_ws_send */
                if (cut < want_len)
                    CHECK_EQ(ps_ws_send_prepare(&b.ws, PS_WS_EV_TEXT, "x", 1, 0, iov), -EBUSY);
                ps_buf_free(&got);
                session_close(&b);
            }
            session_close(&a);
        }
    }
}

static void test_messages_sent_are_single_unmasked_frames(void)
{
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, "hi", 2, 0), 0);
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, "", 0, 0), 0);
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_CLOSE, "", 0, 0), -EINVAL);
    CHECK(ps_ws_want_write(&s.ws));
    CHECK_MEM_EQ(ps_buf_head(ps_ws_output(&s.ws)), ps_buf_size(ps_ws_output(&s.ws)),
                 "\x81\x02hi\x82\x00");
    session_close(&s);
}

/* ---- session: close codes of RFC 6455 7.4 ------------------------------------ */

static void test_protocol_errors_fail_with_1002(void)
{
    struct {
        const char *what;
        int fin, rsv, op, mask;
        size_t len;
        const ps_ws_deflate_t *d;
        int after_fragment; /* sent inside a fragmented message */
    } cases[] = {
        {"unmasked frame", 1, 0, OP_TEXT, 0, 3, NULL, 0},
        {"unmasked ping", 1, 0, OP_PING, 0, 3, NULL, 0},
        {"RSV1 without deflate", 1, 4, OP_TEXT, 1, 3, NULL, 0},
        {"RSV2", 1, 2, OP_TEXT, 1, 3, NULL, 0},
        {"RSV3", 1, 1, OP_BIN, 1, 3, NULL, 0},
        {"RSV2 with deflate", 1, 2, OP_TEXT, 1, 3, &deflate_on, 0},
        {"RSV1 on a ping with deflate", 1, 4, OP_PING, 1, 3, &deflate_on, 0},
        {"RSV1 on a continuation with deflate", 1, 4, OP_CONT, 1, 3, &deflate_on, 1},
        {"opcode 3", 1, 0, 3, 1, 3, NULL, 0},
        {"opcode 7", 1, 0, 7, 1, 3, NULL, 0},
        {"opcode 0xb", 1, 0, 0xb, 1, 3, NULL, 0},
        {"opcode 0xf", 1, 0, 0xf, 1, 3, NULL, 0},
        {"opcode 5 inside a fragmented message", 1, 0, 5, 1, 3, NULL, 1},
        {"continuation outside a message", 1, 0, OP_CONT, 1, 3, NULL, 0},
        {"text inside a fragmented message", 1, 0, OP_TEXT, 1, 3, NULL, 1},
        {"binary inside a fragmented message", 1, 0, OP_BIN, 1, 3, NULL, 1},
        {"fragmented ping", 0, 0, OP_PING, 1, 3, NULL, 0},
        {"fragmented close", 0, 0, OP_CLOSE, 1, 2, NULL, 0},
        {"ping of 126 bytes", 1, 0, OP_PING, 1, 126, NULL, 0},
        {"pong of 126 bytes", 1, 0, OP_PONG, 1, 126, NULL, 0},
        {"close of 126 bytes", 1, 0, OP_CLOSE, 1, 126, NULL, 0},
    };
    static const char payload[200] = {0x03, 0xe8};
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        ps_buf_t in = {0};
        if (cases[i].after_fragment)
            put_frame(&in, 0, 0, OP_TEXT, "ab", 2);
        put_frame_ex(&in, cases[i].fin, cases[i].rsv, cases[i].op, payload, cases[i].len,
                     cases[i].mask);
        check_input_fails(&in, 1002, cases[i].d, 1 << 20, cases[i].what);
        ps_buf_free(&in);
    }
}

static void test_bad_length_encodings_fail_with_1002(void)
{
    /* 100 bytes spelled with a 16-bit length; 1000 with a 64-bit one; a
     * 64-bit length with its top bit set */
    static const unsigned char n16[] = {0x82, 0xfe, 0x00, 100, 1, 2, 3, 4, 9};
    static const unsigned char n64[] = {0x82, 0xff, 0, 0, 0, 0, 0, 0, 0x03, 0xe8, 1, 2, 3, 4, 9};
    static const unsigned char top[] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 9};
    const struct {
        const unsigned char *p;
        size_t n;
    } cases[] = {{n16, sizeof(n16)}, {n64, sizeof(n64)}, {top, sizeof(top)}};
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        ps_buf_t in = {0};
        ps_buf_append(&in, cases[i].p, cases[i].n);
        check_input_fails(&in, 1002, NULL, 1 << 20, "bad length encoding");
        ps_buf_free(&in);
    }
}

static void test_bad_close_payloads_fail_with_1002(void)
{
    static const unsigned bad_codes[] = {0,    1,    999,  1004, 1005, 1006, 1015,
                                         1016, 1100, 2000, 2999, 5000, 65535};
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_CLOSE, "\x03", 1);
    check_input_fails(&in, 1002, NULL, 1 << 20, "close with 1 byte");
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_codes); i++) {
        ps_buf_reset(&in);
        put_close(&in, bad_codes[i], "", 0);
        char what[64];
        snprintf(what, sizeof(what), "close code %u", bad_codes[i]);
        check_input_fails(&in, 1002, NULL, 1 << 20, what);
    }
    ps_buf_free(&in);
}

static void test_valid_close_codes_are_echoed(void)
{
    static const unsigned good[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                                    1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999};
    for (size_t i = 0; i < PS_ARRAY_LEN(good); i++) {
        ps_buf_t in = {0};
        put_close(&in, good[i], "bye", 3);
        session_t s;
        session_open(&s, 1 << 20, 0, NULL);
        feed(&s, &in, 1);
        CHECK_EQ(out_close_code(&s.ws), (int)good[i]);
        CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.origin == PS_WS_CLOSE_PEER);
        CHECK_EQ(ev.code, (int)good[i]);
        CHECK_MEM_EQ(ev.data, ev.len, "bye");
        CHECK(ps_ws_done(&s.ws));
        session_close(&s);
        ps_buf_free(&in);
    }
}

static void test_utf8_errors_fail_with_1007(void)
{
    static const struct {
        const char *what, *bytes;
        size_t len;
    } bad[] = {
        {"lone continuation", "a\x80", 2},
        {"overlong 2-byte", "\xc0\xaf", 2},
        {"overlong 3-byte", "\xe0\x80\xaf", 3},
        {"overlong 4-byte", "\xf0\x80\x80\xaf", 4},
        {"surrogate", "\xed\xa0\x80", 3},
        {"above U+10FFFF", "\xf4\x90\x80\x80", 4},
        {"0xff", "\xff", 1},
        {"truncated at the end", "ab\xe2\x82", 4},
        {"lead then ASCII", "\xe2\x82x", 3},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(bad); i++) {
        ps_buf_t in = {0};
        put_frame(&in, 1, 0, OP_TEXT, bad[i].bytes, bad[i].len);
        check_input_fails(&in, 1007, NULL, 1 << 20, bad[i].what);
        /* split: every byte in its own fragment */
        ps_buf_reset(&in);
        for (size_t k = 0; k < bad[i].len; k++)
            put_frame(&in, k + 1 == bad[i].len, 0, k ? OP_CONT : OP_TEXT, bad[i].bytes + k, 1);
        check_input_fails(&in, 1007, NULL, 1 << 20, bad[i].what);
        /* in a close reason */
        ps_buf_reset(&in);
        put_close(&in, 1000, bad[i].bytes, bad[i].len);
        check_input_fails(&in, 1007, NULL, 1 << 20, bad[i].what);
        ps_buf_free(&in);
    }
}

static void test_utf8_split_across_fragments_is_accepted(void)
{
    /* "κόσμε", U+20AC, U+10348, U+10FFFF, U+FFFF, every byte its own frame */
    static const char text[] = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5 \xe2\x82\xac "
                               "\xf0\x90\x8d\x88 \xf4\x8f\xbf\xbf \xef\xbf\xbf";
    size_t n = sizeof(text) - 1;
    ps_buf_t in = {0};
    for (size_t k = 0; k < n; k++) {
        put_frame(&in, k + 1 == n, 0, k ? OP_CONT : OP_TEXT, text + k, 1);
        if (k == 5)
            put_frame(&in, 1, 0, OP_PING, "p", 1); /* control frames in between */
    }
    put_close(&in, 1000, "\xce\xba\xe1\xbd\xb9", 5); /* a reason fed byte by byte */
    for (size_t piece = 0; piece <= 2; piece++) {
        session_t s;
        session_open(&s, 1 << 20, 0, NULL);
        feed(&s, &in, piece);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
        CHECK(ev.len == n && memcmp(ev.data, text, n) == 0);
        CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.code == 1000);
        CHECK_MEM_EQ(ev.data, ev.len, "\xce\xba\xe1\xbd\xb9");
        CHECK(next_frame(&s.ws) && frame.op == OP_PONG);
        CHECK_EQ(out_close_code(&s.ws), 1000);
        session_close(&s);
    }
    ps_buf_free(&in);
}

static void test_invalid_utf8_fails_before_the_message_ends(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 0, 0, OP_TEXT, "ok \xff", 4);
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    feed(&s, &in, 0);
    check_failed_with(&s, 1007, "first fragment");
    session_close(&s);
    ps_buf_free(&in);
}

static void test_utf8_validator(void)
{
    CHECK_EQ(ps_ws_utf8_validate(0, (const unsigned char *)"plain ascii text, long enough", 29), 0);
    uint32_t st = ps_ws_utf8_validate(0, (const unsigned char *)"\xf0\x9f", 2);
    CHECK(st != 0 && st != PS_WS_UTF8_BAD);
    CHECK_EQ(ps_ws_utf8_validate(st, (const unsigned char *)"\x98\x80", 2), 0);
    CHECK_EQ(ps_ws_utf8_validate(st, (const unsigned char *)"\x98(", 2), PS_WS_UTF8_BAD);
    CHECK_EQ(ps_ws_utf8_validate(PS_WS_UTF8_BAD, (const unsigned char *)"a", 1), PS_WS_UTF8_BAD);
    /* every code point from U+0000 to U+10FFFF but the surrogates, encoded */
    int all_ok = 1;
    for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
        unsigned char b[4];
        size_t n;
        if (cp >= 0xd800 && cp <= 0xdfff)
            continue;
        if (cp < 0x80) {
            b[0] = (unsigned char)cp;
            n = 1;
        } else if (cp < 0x800) {
            b[0] = (unsigned char)(0xc0 | cp >> 6);
            b[1] = (unsigned char)(0x80 | (cp & 63));
            n = 2;
        } else if (cp < 0x10000) {
            b[0] = (unsigned char)(0xe0 | cp >> 12);
            b[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
            b[2] = (unsigned char)(0x80 | (cp & 63));
            n = 3;
        } else {
            b[0] = (unsigned char)(0xf0 | cp >> 18);
            b[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
            b[2] = (unsigned char)(0x80 | ((cp >> 6) & 63));
            b[3] = (unsigned char)(0x80 | (cp & 63));
            n = 4;
        }
        all_ok &= ps_ws_utf8_validate(0, b, n) == 0;
    }
    CHECK(all_ok);
}

/* ---- session: the message limit ------------------------------------------------- */

static void test_a_message_of_exactly_max_size_passes_and_one_more_byte_is_1009(void)
{
    enum { MAX = 1000 };
    static char data[MAX + 1];
    memset(data, 'x', sizeof(data));
    for (int fragmented = 0; fragmented <= 1; fragmented++) {
        ps_buf_t in = {0};
        if (fragmented) { /* each frame well under the limit, the whole at it */
            put_frame(&in, 0, 0, OP_TEXT, data, 600);
            put_frame(&in, 1, 0, OP_PING, "", 0);
            put_frame(&in, 1, 0, OP_CONT, data, MAX - 600);
        } else {
            put_frame(&in, 1, 0, OP_TEXT, data, MAX);
        }
        session_t s;
        session_open(&s, MAX, 0, NULL);
        feed(&s, &in, 0);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.len == MAX);
        session_close(&s);
        ps_buf_reset(&in);
        if (fragmented) {
            put_frame(&in, 0, 0, OP_TEXT, data, 600);
            put_frame(&in, 1, 0, OP_CONT, data, MAX + 1 - 600);
        } else {
            put_frame(&in, 1, 0, OP_TEXT, data, MAX + 1);
        }
        check_input_fails(&in, 1009, NULL, MAX, "one byte over");
        ps_buf_free(&in);
    }
}

static void test_a_compressed_message_over_max_size_is_1009(void)
{
    enum { MAX = 5000 };
    static char data[MAX + 1];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('a' + (i * 7 + i / 13) % 26);
    ps_buf_t z = {0}, in = {0};
    zclient_t c;
    zclient_open(&c, 15, 1);
    zclient_compress(&c, data, MAX, &z);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    session_t s;
    session_open(&s, MAX, 0, &deflate_on);
    feed(&s, &in, 1);
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.len == MAX);
    CHECK(memcmp(ev.data, data, MAX) == 0);
    session_close(&s);
    /* one byte more, in two compressed fragments */
    zclient_compress(&c, data, MAX + 1, &z);
    ps_buf_reset(&in);
    put_frame(&in, 0, 4, OP_TEXT, z.data, z.len / 2);
    put_frame(&in, 1, 0, OP_CONT, z.data + z.len / 2, z.len - z.len / 2);
    check_input_fails(&in, 1009, &deflate_on, MAX, "compressed, one byte over");
    zclient_close(&c);
    ps_buf_free(&z);
    ps_buf_free(&in);
}

static void test_a_deflate_bomb_is_1009_without_inflating_it(void)
{
    enum { MAX = 1 << 20 };
    size_t big = 64u << 20; /* 64 MiB of zeros, about 64 KiB compressed */
    char *zeros = calloc(1, big);
    ps_buf_t z = {0}, in = {0};
    zclient_t c;
    zclient_open(&c, 15, 0);
    zclient_compress(&c, zeros, big, &z);
    CHECK(z.len < 128 * 1024);
    put_frame(&in, 1, 4, OP_BIN, z.data, z.len);
    session_t s;
    session_open(&s, MAX, 0, &deflate_on);
    feed(&s, &in, 0);
    CHECK(s.ws.events.cap <= 2 * (size_t)MAX + 4096); /* never held more than the limit */
    check_failed_with(&s, 1009, "deflate bomb");
    session_close(&s);
    zclient_close(&c);
    free(zeros);
    ps_buf_free(&z);
    ps_buf_free(&in);
}

static void test_the_first_problem_in_a_message_decides_however_it_arrives(void)
{
    /* A compressed text message whose bytes break UTF-8 at byte 10 and go
     * past the limit at byte 101: 1007 whether it is inflated in one step
     * or byte by byte (found by the fuzzer: the size was checked first). */
    enum { MAX = 100 };
    char data[300];
    memset(data, 'a', sizeof(data));
    data[10] = (char)0xff;
    ps_buf_t z = {0}, in = {0};
    zclient_t c;
    zclient_open(&c, 15, 1); /* each message for a new session */
    zclient_compress(&c, data, sizeof(data), &z);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    check_input_fails(&in, 1007, &deflate_on, MAX, "bad UTF-8 before the limit");
    /* valid up to the limit, bad after it: 1009 */
    memset(data, 'a', sizeof(data));
    data[150] = (char)0xff;
    zclient_compress(&c, data, sizeof(data), &z);
    ps_buf_reset(&in);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    check_input_fails(&in, 1009, &deflate_on, MAX, "bad UTF-8 after the limit");
    zclient_close(&c);
    ps_buf_free(&z);
    ps_buf_free(&in);
}

/* ---- session: control frames and the close handshake ------------------------------- */

static void test_pings_are_answered_with_their_payload(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_PING, "", 0);
    put_frame(&in, 0, 0, OP_TEXT, "ab", 2);
    put_frame(&in, 1, 0, OP_PING, "hello ping", 10);
    put_frame(&in, 1, 0, OP_PONG, "unsolicited", 11);
    put_frame(&in, 1, 0, OP_CONT, "cd", 2);
    static char p125[125];
    memset(p125, 'p', sizeof(p125));
    put_frame(&in, 1, 0, OP_PING, p125, 125);
    for (size_t piece = 0; piece <= 1; piece++) {
        session_t s;
        session_open(&s, 1 << 20, 0, NULL);
        feed(&s, &in, piece);
        CHECK(next_frame(&s.ws) && frame.op == OP_PONG && frame.fin && frame.len == 0);
        CHECK(next_frame(&s.ws) && frame.op == OP_PONG);
        CHECK_MEM_EQ(frame.data, frame.len, "hello ping");
        CHECK(next_frame(&s.ws) && frame.op == OP_PONG && frame.len == 125);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
        CHECK_MEM_EQ(ev.data, ev.len, "abcd");
        CHECK(!take(&s));
        CHECK_EQ(s.ws.pings_received, 3);
        CHECK_EQ(s.ws.pongs_received, 1);
        CHECK_MEM_EQ(s.ws.last_pong, s.ws.last_pong_len, "unsolicited");
        session_close(&s);
    }
    ps_buf_free(&in);
}

static void test_our_pings_and_limits_on_control_frames(void)
{
    static char p126[126];
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    CHECK_EQ(ps_ws_send_ping(&s.ws, "1234", 4), 0);
    CHECK(next_frame(&s.ws) && frame.op == OP_PING);
    CHECK_MEM_EQ(frame.data, frame.len, "1234");
    CHECK_EQ(ps_ws_send_ping(&s.ws, p126, 126), -EINVAL);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1005, "", 0), -EINVAL);
    CHECK_EQ(ps_ws_send_close(&s.ws, 999, "", 0), -EINVAL);
    CHECK_EQ(ps_ws_send_close(&s.ws, 0, "x", 1), -EINVAL);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1000, p126, 124), -EINVAL);
    CHECK_EQ(ps_buf_size(ps_ws_output(&s.ws)), 0);
    session_close(&s);
}

static void test_close_handshake_started_by_the_client(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, "last", 4);
    put_close(&in, 1001, "going away", 10);
    put_frame(&in, 1, 0, OP_TEXT, "after", 5); /* dropped */
    put_frame_ex(&in, 1, 0, OP_TEXT, "junk", 4, 0);
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    feed(&s, &in, 3);
    CHECK_EQ(out_close_code(&s.ws), 1001);
    CHECK_EQ(ps_buf_size(ps_ws_output(&s.ws)), 0);
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.origin == PS_WS_CLOSE_PEER);
    CHECK_EQ(ev.code, 1001);
    CHECK_MEM_EQ(ev.data, ev.len, "going away");
    CHECK(!take(&s));
    CHECK(ps_ws_done(&s.ws) && !ps_ws_want_read(&s.ws));
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, "x", 1, 0), -EPIPE);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1000, "", 0), -EPIPE);
    CHECK_EQ(ps_ws_eof(&s.ws), 0);
    CHECK(!take(&s)); /* no 1006 after a clean close */
    session_close(&s);
    /* an empty close is echoed empty and reads as 1005 */
    ps_buf_reset(&in);
    put_frame(&in, 1, 0, OP_CLOSE, "", 0);
    session_open(&s, 1 << 20, 0, NULL);
    feed(&s, &in, 0);
    CHECK_EQ(out_close_code(&s.ws), 0);
    CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.code == 1005 && ev.len == 0);
    session_close(&s);
    ps_buf_free(&in);
}

static void test_close_handshake_started_by_the_server(void)
{
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1000, "done", 4), 0);
    CHECK(next_frame(&s.ws) && frame.op == OP_CLOSE && frame.fin);
    CHECK_MEM_EQ(frame.data, frame.len,
                 "\x03\xe8"
                 "done");
    CHECK(!ps_ws_done(&s.ws) && ps_ws_want_read(&s.ws)); /* waiting for the client's */
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, "x", 1, 0), -EPIPE);
    CHECK_EQ(ps_ws_send_ping(&s.ws, "", 0), -EPIPE);
    CHECK_EQ(ps_ws_send_close(&s.ws, 1000, "", 0), -EPIPE);
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, "late", 4); /* read, not kept */
    put_frame(&in, 1, 0, OP_PING, "p", 1);    /* not answered after our close */
    put_close(&in, 1000, "", 0);
    feed(&s, &in, 1);
    CHECK_EQ(ps_buf_size(ps_ws_output(&s.ws)), 0);
    CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.origin == PS_WS_CLOSE_PEER);
    CHECK_EQ(ev.code, 1000);
    CHECK(!take(&s));
    CHECK(ps_ws_done(&s.ws));
    session_close(&s);
    ps_buf_free(&in);
}

static void test_the_stream_ending_mid_frame_is_1006(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, "complete", 8);
    put_frame(&in, 1, 0, OP_TEXT, "cut short", 9);
    in.len -= 4;
    session_t s;
    session_open(&s, 1 << 20, 0, NULL);
    feed(&s, &in, 0);
    CHECK_EQ(ps_ws_eof(&s.ws), 0);
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK(take(&s) && ev.type == PS_WS_EV_CLOSE && ev.origin == PS_WS_CLOSE_LOST);
    CHECK_EQ(ev.code, 1006);
    CHECK(!take(&s));
    CHECK(ps_ws_done(&s.ws));
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, "x", 1, 0), -EPIPE);
    CHECK_EQ(ps_buf_size(ps_ws_output(&s.ws)), 0);
    session_close(&s);
    ps_buf_free(&in);
}

/* ---- session: the queue's bound ----------------------------------------------------- */

/* What a full queue leaves is not taken: the next feed starts at the next
 * frame (no input waits inside the session). */
static void test_a_full_queue_takes_nothing_past_the_last_message(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 0, OP_TEXT, "one", 3);
    size_t first = ps_buf_size(&in);
    put_frame(&in, 1, 0, OP_TEXT, "two", 3);
    put_frame(&in, 1, 0, OP_TEXT, "three", 5);
    session_t s;
    session_open(&s, 1 << 20, 1, NULL);
    size_t used = 0;
    CHECK_EQ(ps_ws_feed(&s.ws, ps_buf_head(&in), ps_buf_size(&in), &used), 0);
    CHECK_EQ(used, first);
    CHECK(!ps_ws_want_read(&s.ws));
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK_MEM_EQ(ev.data, ev.len, "one");
    size_t used2 = 0;
    CHECK_EQ(ps_ws_feed(&s.ws, ps_buf_head(&in) + used, ps_buf_size(&in) - used, &used2), 0);
    CHECK_EQ(used2, first); /* "two" is as long as "one" */
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK_MEM_EQ(ev.data, ev.len, "two");
    session_close(&s);
    ps_buf_free(&in);
}

static void test_a_full_queue_stops_reading_until_events_are_taken(void)
{
    ps_buf_t in = {0};
    char msg[8];
    for (int i = 0; i < 20; i++) {
        int n = snprintf(msg, sizeof(msg), "m%d", i);
        put_frame(&in, 1, 0, OP_TEXT, msg, (size_t)n);
    }
    put_close(&in, 1000, "", 0);
    session_t s;
    session_open(&s, 1 << 20, 3, NULL);
    const char *p = ps_buf_head(&in);
    size_t left = ps_buf_size(&in);
    int next = 0, closed = 0;
    for (int guard = 0; guard < 100 && !closed; guard++) {
        size_t used = 0;
        CHECK_EQ(ps_ws_feed(&s.ws, p, left, &used), 0);
        CHECK(used <= left);
        p += used;
        left -= used;
        CHECK(ps_ws_queued(&s.ws) <= 3 || closed);
        if (ps_ws_queued(&s.ws) == 3)
            CHECK(!ps_ws_want_read(&s.ws));
        while (take(&s)) {
            if (ev.type == PS_WS_EV_CLOSE) {
                closed = 1;
                break;
            }
            int n = snprintf(msg, sizeof(msg), "m%d", next++);
            CHECK(ev.len == (size_t)n && memcmp(ev.data, msg, ev.len) == 0);
        }
    }
    CHECK_EQ(next, 20);
    CHECK(closed);
    CHECK_EQ(left, 0);
    session_close(&s);
    ps_buf_free(&in);
}

/* ---- session: permessage-deflate both ways ------------------------------------------ */

/* Client and server exchange three similar messages each way, compressed,
 * with or without context takeover, fed in pieces. */
static void check_round_trip(int no_takeover, size_t piece, int level)
{
    static const char *msgs[] = {
        "the quick brown fox jumps over the lazy dog, the quick brown fox",
        "the quick brown fox jumps over the lazy dog, again and again",
        "",
    };
    ps_ws_deflate_t d = deflate_on;
    d.server_no_context_takeover = d.client_no_context_takeover = (unsigned)no_takeover;
    d.server_max_window_bits = 10;
    d.level = (int8_t)level;
    session_t s;
    session_open(&s, 1 << 20, 0, &d);
    zclient_t c;
    zclient_open(&c, 15, no_takeover);
    zreader_t r;
    zreader_open(&r, 10, no_takeover);
    ps_buf_t z = {0}, in = {0}, plain = {0};
    size_t sizes[3];
    for (int i = 0; i < 3; i++) {
        zclient_compress(&c, msgs[i], strlen(msgs[i]), &z);
        sizes[i] = z.len;
        /* the first message in two fragments with a ping between them */
        if (i == 0) {
            put_frame(&in, 0, 4, OP_TEXT, z.data, 10);
            put_frame(&in, 1, 0, OP_PING, "x", 1);
            put_frame(&in, 1, 0, OP_CONT, z.data + 10, z.len - 10);
        } else {
            put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
        }
    }
    /* with context takeover the second message refers to the first */
    if (no_takeover)
        CHECK(sizes[1] > 30);
    else
        CHECK(sizes[1] < 30);
    feed(&s, &in, piece);
    for (int i = 0; i < 3; i++) {
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
        CHECK(ev.len == strlen(msgs[i]) && memcmp(ev.data, msgs[i], ev.len) == 0);
    }
    CHECK(next_frame(&s.ws) && frame.op == OP_PONG);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, msgs[i], strlen(msgs[i]), 0), 0);
    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, "raw", 3, PS_WS_SEND_NO_COMPRESS), 0);
    for (int i = 0; i < 3; i++) {
        CHECK(next_frame(&s.ws) && frame.op == OP_TEXT && frame.rsv == 4 && frame.fin);
        if (i == 1)
            CHECK(no_takeover ? frame.len > 30 : frame.len < 30);
        CHECK_EQ(zreader_inflate(&r, frame.data, frame.len, &plain), 0);
        CHECK(plain.len == strlen(msgs[i]) && memcmp(plain.data, msgs[i], plain.len) == 0);
    }
    CHECK(next_frame(&s.ws) && frame.op == OP_BIN && frame.rsv == 0);
    CHECK_MEM_EQ(frame.data, frame.len, "raw");
    zclient_close(&c);
    zreader_close(&r);
    session_close(&s);
    ps_buf_free(&z);
    ps_buf_free(&in);
    ps_buf_free(&plain);
}

static void test_compressed_messages_both_ways(void)
{
    /* level 1 compresses with igzip, the others with zlib */
    for (int level = 1; level <= 6; level += 5)
        for (int no_takeover = 0; no_takeover <= 1; no_takeover++)
            for (size_t piece = 0; piece <= 3; piece++)
                check_round_trip(no_takeover, piece, level);
}

/* Text-like data: words from a small vocabulary and numbers, so that the
 * compressor finds matches at every distance. */
static void fill_text(unsigned char *p, size_t n, uint32_t seed)
{
    static const char *words[] = {"alpha", "beta",    "gamma",  "delta", "items", "tags",
                                  "value", "created", "status", "ok",    "error", "count"};
    size_t i = 0;
    while (i < n) {
        seed = seed * 1103515245u + 12345u;
        char w[24];
        int len = (seed >> 16) % 4 ? snprintf(w, sizeof(w), "%s ", words[(seed >> 8) % 12])
                                   : snprintf(w, sizeof(w), "%u,", seed % 100000);
        for (int k = 0; k < len && i < n; k++)
            p[i++] = (unsigned char)w[k];
    }
}

/* Messages of many sizes, more than igzip's 4 Ki tokens a block and across
 * its 64 KiB history buffer, compressed at levels 1 (igzip) and 6 (zlib) with every window the
 * offer allows: each inflates with the negotiated window to what was sent,
 * with and without context takeover, and context takeover does shrink a
 * repeated message. */
static void test_compressed_messages_of_every_size_and_window(void)
{
    static const size_t sizes[] = {0,     1,     100,   4095,  16383,  16384, 16385,
                                   40000, 65535, 65536, 65537, 200000, 100,   0};
    size_t most = 200000;
    unsigned char *text = malloc(most);
    fill_text(text, most, 7);
    for (int level = 1; level <= 6; level += 5)
        for (int bits = 9; bits <= 15; bits += 3)
            for (int no_takeover = 0; no_takeover <= 1; no_takeover++) {
                ps_ws_deflate_t d = deflate_on;
                d.level = (int8_t)level;
                d.server_max_window_bits = (uint8_t)bits;
                d.server_no_context_takeover = (unsigned)no_takeover;
                session_t s;
                session_open(&s, 1 << 20, 0, &d);
                zreader_t r;
                zreader_open(&r, bits, no_takeover);
                ps_buf_t plain = {0};
                for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                    const unsigned char *m = text + (i * 977) % 1000;
                    size_t n = PS_MIN(sizes[i], most - (i * 977) % 1000);
                    CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_BINARY, m, n, 0), 0);
                    CHECK(next_frame(&s.ws) && frame.op == OP_BIN && frame.rsv == 4);
                    CHECK(n < 1000 || frame.len < n / 2);
                    CHECK_EQ(zreader_inflate(&r, frame.data, frame.len, &plain), 0);
                    CHECK(plain.len == n && (n == 0 || memcmp(plain.data, m, n) == 0));
                }
                /* the same 2 KiB twice: the second refers to the first
                 * unless the window is smaller (512 bytes at 9 bits) */
                CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, text, 2048, 0), 0);
                CHECK(next_frame(&s.ws));
                CHECK_EQ(zreader_inflate(&r, frame.data, frame.len, &plain), 0);
                CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, text, 2048, 0), 0);
                CHECK(next_frame(&s.ws));
                CHECK(no_takeover || bits < 12 ? frame.len > 200 : frame.len < 200);
                CHECK_EQ(zreader_inflate(&r, frame.data, frame.len, &plain), 0);
                CHECK(plain.len == 2048 && memcmp(plain.data, text, 2048) == 0);
                zreader_close(&r);
                ps_buf_free(&plain);
                session_close(&s);
            }
    free(text);
}

/* At level 1 a connection compresses with zlib until its first message of
 * 256 bytes, then with igzip, which is handed zlib's window: a message that
 * repeats the previous small one twice refers to it (with context takeover)
 * and is much smaller than the two copies compressed alone. */
static void test_igzip_takes_over_zlibs_window(void)
{
    unsigned char text[400];
    fill_text(text, 200, 11);
    memcpy(text + 200, text, 200);
    for (int no_takeover = 0; no_takeover <= 1; no_takeover++) {
        ps_ws_deflate_t d = deflate_on;
        d.level = 1;
        d.server_no_context_takeover = (unsigned)no_takeover;
        session_t s;
        session_open(&s, 1 << 20, 0, &d);
        zreader_t r;
        zreader_open(&r, d.server_max_window_bits, no_takeover);
        ps_buf_t plain = {0};
        for (int round = 0; round < 3; round++) {
            size_t n = round == 1 ? 400 : 200;
            CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, text, n, 0), 0);
            CHECK(next_frame(&s.ws) && frame.rsv == 4);
            CHECK((s.ws.igzip != NULL) == (round > 0));
            CHECK((s.ws.deflater != NULL) == (round == 0));
            if (round == 0)
                CHECK(frame.len > 40);
            else
                CHECK(no_takeover ? frame.len > 40 : frame.len < 30);
            CHECK_EQ(zreader_inflate(&r, frame.data, frame.len, &plain), 0);
            CHECK(plain.len == n && memcmp(plain.data, text, n) == 0);
        }
        zreader_close(&r);
        ps_buf_free(&plain);
        session_close(&s);
    }
}

static void test_a_final_deflate_block_keeps_the_window(void)
{
    /* A client that ends a message with BFINAL (RFC 7692 7.2.3.4) and goes
     * on referring to the window in the next one. */
    static const char m1[] = "a sentence that the next message will repeat entirely";
    static const char m2[] = "a sentence that the next message will repeat entirely!";
    unsigned char zb[512];
    z_stream z;
    ps_buf_t in = {0};
    memset(&z, 0, sizeof(z));
    deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)m1;
    z.avail_in = sizeof(m1) - 1;
    z.next_out = zb;
    z.avail_out = sizeof(zb);
    CHECK_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    put_frame(&in, 1, 4, OP_TEXT, zb, sizeof(zb) - z.avail_out);
    deflateReset(&z);
    deflateSetDictionary(&z, (const Bytef *)m1, sizeof(m1) - 1);
    z.next_in = (Bytef *)m2;
    z.avail_in = sizeof(m2) - 1;
    z.next_out = zb;
    z.avail_out = sizeof(zb);
    CHECK_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    put_frame(&in, 1, 4, OP_TEXT, zb, sizeof(zb) - z.avail_out);
    deflateEnd(&z);
    session_t s;
    session_open(&s, 1 << 20, 0, &deflate_on);
    feed(&s, &in, 1);
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK_MEM_EQ(ev.data, ev.len, m1);
    CHECK(take(&s) && ev.type == PS_WS_EV_TEXT);
    CHECK_MEM_EQ(ev.data, ev.len, m2);
    session_close(&s);
    ps_buf_free(&in);
}

static void test_corrupt_compressed_data_is_1007(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 4, OP_BIN, "\xff\xff\xff\xff", 4); /* reserved block type */
    check_input_fails(&in, 1007, &deflate_on, 1 << 20, "corrupt deflate data");
    ps_buf_reset(&in);
    /* compressed invalid UTF-8 */
    zclient_t c;
    ps_buf_t z = {0};
    zclient_open(&c, 15, 0);
    zclient_compress(&c, "abc\xc0\xaf", 5, &z);
    put_frame(&in, 1, 4, OP_TEXT, z.data, z.len);
    check_input_fails(&in, 1007, &deflate_on, 1 << 20, "compressed bad UTF-8");
    zclient_close(&c);
    ps_buf_free(&z);
    ps_buf_free(&in);
}

static void test_an_empty_compressed_message(void)
{
    ps_buf_t in = {0};
    put_frame(&in, 1, 4, OP_TEXT, "\x00", 1);
    for (int level = 1; level <= 6; level += 5) {
        ps_ws_deflate_t d = deflate_on;
        d.level = (int8_t)level;
        session_t s;
        session_open(&s, 1 << 20, 0, &d);
        feed(&s, &in, 0);
        CHECK(take(&s) && ev.type == PS_WS_EV_TEXT && ev.len == 0);
        CHECK_EQ(ps_ws_send(&s.ws, PS_WS_EV_TEXT, "", 0, 0), 0);
        CHECK(next_frame(&s.ws) && frame.rsv == 4);
        CHECK_MEM_EQ(frame.data, frame.len, "\x00");
        session_close(&s);
    }
    ps_buf_free(&in);
}

int main(void)
{
    test_accept_key_is_rfc_6455s_example();
    test_valid_upgrade_is_accepted_with_its_subprotocols();
    test_upgrade_tokens_are_found_case_insensitively_in_lists();
    test_requests_without_upgrade_websocket_are_ordinary();
    test_handshake_refusals();
    test_refusal_responses();
    test_accept_head();

    test_deflate_offers_are_accepted_with_our_windows();
    test_deflate_offers_with_bad_parameters_are_declined();
    test_a_declined_offer_falls_back_to_the_next();
    test_an_unparsable_extensions_header_declines_everything();

    test_a_text_message_arrives_the_same_in_any_pieces();
    test_long_frames_use_16_and_64_bit_lengths();
    test_payloads_unmask_at_any_offset_and_say_whether_they_are_ascii();
    test_ascii_is_a_property_of_the_whole_message();
    test_messages_sent_are_single_unmasked_frames();
    test_a_prepared_frame_is_what_send_would_queue();

    test_protocol_errors_fail_with_1002();
    test_bad_length_encodings_fail_with_1002();
    test_bad_close_payloads_fail_with_1002();
    test_valid_close_codes_are_echoed();
    test_utf8_errors_fail_with_1007();
    test_utf8_split_across_fragments_is_accepted();
    test_invalid_utf8_fails_before_the_message_ends();
    test_utf8_validator();

    test_a_message_of_exactly_max_size_passes_and_one_more_byte_is_1009();
    test_a_compressed_message_over_max_size_is_1009();
    test_a_deflate_bomb_is_1009_without_inflating_it();
    test_the_first_problem_in_a_message_decides_however_it_arrives();

    test_pings_are_answered_with_their_payload();
    test_our_pings_and_limits_on_control_frames();
    test_close_handshake_started_by_the_client();
    test_close_handshake_started_by_the_server();
    test_the_stream_ending_mid_frame_is_1006();

    test_a_full_queue_stops_reading_until_events_are_taken();
    test_a_full_queue_takes_nothing_past_the_last_message();

    test_compressed_messages_both_ways();
    test_igzip_takes_over_zlibs_window();
    test_a_final_deflate_block_keeps_the_window();
    test_corrupt_compressed_data_is_1007();
    test_an_empty_compressed_message();
    test_compressed_messages_of_every_size_and_window();
    test_large_binary_messages_are_unmasked_into_the_storage();
    test_stored_messages_not_taken_are_released();
    return check_finish("test_ws");
}
