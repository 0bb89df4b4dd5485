/* WebSocket: the opening handshake and the session (see ws.h).
 *
 * Outgoing frames are encoded by wslay's frame layer. Incoming ones are
 * decoded here (header, length encodings, the FIN and length rules of
 * control frames, unmasking): wslay_frame_recv() copies every payload
 * through its own 4 KiB buffer and unmasks it there a byte at a time, which
 * was 70% of the instructions of a 16 KiB echo; this decoder unmasks eight
 * bytes at a time straight from the connection's input into the message,
 * noting on the way whether text is all ASCII (then valid UTF-8 without a
 * second look). wslay's event layer (wslay_event_*) is not used: in wslay
 * 1.1 it cannot meet
 * RFC 6455 7.4 as pyserver needs it:
 *   - it refuses close codes 1012-1014 with 1002;
 *   - it takes a 1-byte close payload as "no status" instead of failing
 *     with 1002;
 *   - it checks a close reason's UTF-8 per received chunk, skipping the
 *     first two bytes of every chunk, so a valid reason that arrives in
 *     pieces can be refused with 1007 and a bad one accepted;
 *   - with compression it counts the message limit over compressed bytes
 *     (or per frame, unbuffered), not over the inflated message;
 * and it copies each outgoing message into its own queue first. So this
 * file keeps the message state itself: data frames and their order, control
 * frames, the close handshake, UTF-8, the message limit, permessage-deflate.
 */
#include "codec/ws.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/igzip_lib.h>
#include <openssl/evp.h>
#include <wslay/wslay.h>
#include <zlib.h>

#include "base/common.h"

/* ---- UTF-8 ----------------------------------------------------------------- */

/* A state is the number of continuation bytes still expected (bits 0-1) and
 * the range the next one must fall in (bits 8-15 and 16-23): the ranges
 * after E0, ED, F0 and F4 shut out overlong forms, surrogates and code
 * points above U+10FFFF. */
#define UTF8_STATE(need, lo, hi) ((uint32_t)(need) | (uint32_t)(lo) << 8 | (uint32_t)(hi) << 16)

static uint32_t utf8_lead(unsigned char c)
{
    if (c < 0xc2)
        return PS_WS_UTF8_BAD; /* continuation byte, or overlong 2-byte form */
    if (c < 0xe0)
        return UTF8_STATE(1, 0x80, 0xbf);
    if (c == 0xe0)
        return UTF8_STATE(2, 0xa0, 0xbf);
    if (c == 0xed)
        return UTF8_STATE(2, 0x80, 0x9f);
    if (c < 0xf0)
        return UTF8_STATE(2, 0x80, 0xbf);
    if (c == 0xf0)
        return UTF8_STATE(3, 0x90, 0xbf);
    if (c < 0xf4)
        return UTF8_STATE(3, 0x80, 0xbf);
    if (c == 0xf4)
        return UTF8_STATE(3, 0x80, 0x8f);
    return PS_WS_UTF8_BAD;
}

uint32_t ps_ws_utf8_validate(uint32_t state, const unsigned char *p, size_t n)
{
    size_t i = 0;
    if (state == PS_WS_UTF8_BAD)
        return state;
    while (i < n) {
        if (state == 0) {
            /* ASCII runs eight bytes at a time */
            while (n - i >= 8) {
                uint64_t w;
                memcpy(&w, p + i, 8);
                if (w & 0x8080808080808080ULL)
                    break;
                i += 8;
            }
            if (i == n)
                break;
            unsigned char c = p[i++];
            if (c < 0x80)
                continue;
            state = utf8_lead(c);
            if (state == PS_WS_UTF8_BAD)
                return state;
            continue;
        }
        unsigned char c = p[i++];
        if (c < ((state >> 8) & 0xff) || c > ((state >> 16) & 0xff))
            return PS_WS_UTF8_BAD;
        uint32_t need = state & 3;
        state = need == 1 ? 0 : UTF8_STATE(need - 1, 0x80, 0xbf);
    }
    return state;
}

/* ---- header lists ------------------------------------------------------------ */

static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int is_token(ps_slice_t s)
{
    if (s.len == 0)
        return 0;
    for (size_t i = 0; i < s.len; i++)
        if (!is_tchar((unsigned char)s.base[i]))
            return 0;
    return 1;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Takes the next element of a comma-separated list from *list, trimmed;
 * empty elements are skipped. Returns 0 at the end of the list. */
static int next_item(ps_slice_t *list, ps_slice_t *item)
{
    const char *p = list->base, *end = p + list->len;
    for (;;) {
        while (p < end && (is_ows(*p) || *p == ','))
            p++;
        if (p == end) {
            *list = (ps_slice_t){end, 0};
            return 0;
        }
        const char *start = p;
        while (p < end && *p != ',')
            p++;
        const char *e = p;
        while (e > start && is_ows(e[-1]))
            e--;
        *list = (ps_slice_t){p, (size_t)(end - p)};
        *item = (ps_slice_t){start, (size_t)(e - start)};
        return 1;
    }
}

#define NAME_IS(name, lit) ((name).len == sizeof(lit) - 1 && PS_SLICE_IEQ((name), lit))

/* 1 when a header named `name` lists `token` (case-insensitive). */
static int header_lists(const ps_request_t *req, const char *name, size_t name_len,
                        const char *token, size_t token_len)
{
    for (uint32_t i = 0; i < req->nheaders; i++) {
        if (!ps_slice_ieq(req->headers[i].name, name, name_len))
            continue;
        ps_slice_t list = req->headers[i].value, item;
        while (next_item(&list, &item))
            if (ps_slice_ieq(item, token, token_len))
                return 1;
    }
    return 0;
}

/* The value of the only header named `name`; returns how many there are. */
static int only_header(const ps_request_t *req, const char *name, size_t name_len,
                       ps_slice_t *value)
{
    int n = 0;
    for (uint32_t i = 0; i < req->nheaders; i++) {
        if (ps_slice_ieq(req->headers[i].name, name, name_len)) {
            *value = req->headers[i].value;
            n++;
        }
    }
    return n;
}

/* ---- the opening handshake ------------------------------------------------- */

/* 1 when key is base64 for 16 bytes: 22 symbols and "==". */
static int valid_key(ps_slice_t key)
{
    if (key.len != 24 || key.base[22] != '=' || key.base[23] != '=')
        return 0;
    for (size_t i = 0; i < 22; i++)
        if (ps_base64_digit((unsigned char)key.base[i]) < 0)
            return 0;
    return 1;
}

static int refuse(ps_ws_handshake_t *hs, int result, const char *reason)
{
    hs->reason = reason;
    return result;
}

int ps_ws_check_request(const ps_request_t *req, ps_ws_handshake_t *hs)
{
    ps_slice_t value = {NULL, 0};
    memset(hs, 0, sizeof(*hs));
    if (!header_lists(req, "upgrade", 7, "websocket", 9))
        return PS_WS_HS_NONE;
    if (req->method_id != HTTP_GET)
        return refuse(hs, PS_WS_HS_BAD_REQUEST, "WebSocket upgrade with a method other than GET");
    if (req->http_minor < 1)
        return refuse(hs, PS_WS_HS_BAD_REQUEST, "WebSocket upgrade over HTTP/1.0");
    if (!header_lists(req, "connection", 10, "upgrade", 7))
        return refuse(hs, PS_WS_HS_BAD_REQUEST, "WebSocket upgrade without Connection: upgrade");
    if (req->content_length > 0 || req->chunked)
        return refuse(hs, PS_WS_HS_BAD_REQUEST, "WebSocket upgrade with a body");
    if (only_header(req, "sec-websocket-version", 21, &value) != 1 || !PS_SLICE_IEQ(value, "13"))
        return refuse(hs, PS_WS_HS_BAD_VERSION, "WebSocket version is not 13");
    if (only_header(req, "sec-websocket-key", 17, &value) != 1 || !valid_key(value))
        return refuse(hs, PS_WS_HS_BAD_REQUEST, "bad Sec-WebSocket-Key");
    hs->key = value;
    for (uint32_t i = 0; i < req->nheaders; i++) {
        if (!NAME_IS(req->headers[i].name, "sec-websocket-protocol"))
            continue;
        ps_slice_t list = req->headers[i].value, item;
        while (next_item(&list, &item)) {
            if (!is_token(item))
                return refuse(hs, PS_WS_HS_BAD_REQUEST, "bad Sec-WebSocket-Protocol");
            if (hs->nsubprotocols == PS_WS_MAX_SUBPROTOCOLS)
                return refuse(hs, PS_WS_HS_BAD_REQUEST, "too many subprotocols");
            hs->subprotocols[hs->nsubprotocols++] = item;
        }
    }
    return PS_WS_HS_OK;
}

#define REFUSAL(code, reason, len, extra)                                                          \
    PS_SLICE_LIT("HTTP/1.1 " #code " " reason "\r\n" extra                                         \
                 "Content-Type: text/plain; charset=utf-8\r\n"                                     \
                 "Content-Length: " #len "\r\n"                                                    \
                 "Connection: close\r\n\r\n" reason)

ps_slice_t ps_ws_reject_response(int result)
{
    static const ps_slice_t bad_version =
        REFUSAL(426, "Upgrade Required", 16, "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n");
    if (result == PS_WS_HS_BAD_VERSION)
        return bad_version;
    return ps_http1_error_response(400);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Writes the base64 of n bytes (n % 3 == 2 here: 20 bytes -> 28 chars). */
static void b64encode(const unsigned char *in, size_t n, char *out)
{
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *out++ = b64chars[v >> 18];
        *out++ = b64chars[(v >> 12) & 63];
        *out++ = b64chars[(v >> 6) & 63];
        *out++ = b64chars[v & 63];
    }
    if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *out++ = b64chars[v >> 18];
        *out++ = b64chars[(v >> 12) & 63];
        *out++ = b64chars[(v >> 6) & 63];
        *out++ = '=';
    } else if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *out++ = b64chars[v >> 18];
        *out++ = b64chars[(v >> 12) & 63];
        *out++ = '=';
        *out++ = '=';
    }
}

int ps_ws_accept_key(ps_slice_t key, char out[PS_WS_ACCEPT_LEN])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int ok = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx != NULL)
        ok = EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) && EVP_DigestUpdate(ctx, key.base, key.len) &&
             EVP_DigestUpdate(ctx, guid, sizeof(guid) - 1) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok || mdlen != 20)
        return -ENOMEM;
    b64encode(md, 20, out);
    return 0;
}

/* ---- permessage-deflate negotiation ------------------------------------------ */

/* A cursor over Sec-WebSocket-Extensions (RFC 6455 9.1): extensions
 * separated by commas, parameters by semicolons, values tokens or quoted
 * strings. */
typedef struct {
    const char *p, *end;
} cursor_t;

static void skip_ows(cursor_t *c)
{
    while (c->p < c->end && is_ows(*c->p))
        c->p++;
}

static int take_token(cursor_t *c, ps_slice_t *tok)
{
    const char *start = c->p;
    while (c->p < c->end && is_tchar((unsigned char)*c->p))
        c->p++;
    *tok = (ps_slice_t){start, (size_t)(c->p - start)};
    return tok->len > 0;
}

/* Takes a token or a quoted string (unescaped into buf, cap bytes; a longer
 * value comes back truncated and flagged by *len > cap). Returns 0 when the
 * syntax is bad. */
static int take_value(cursor_t *c, char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    if (c->p < c->end && *c->p == '"') {
        c->p++;
        for (;;) {
            if (c->p == c->end)
                return 0;
            char ch = *c->p++;
            if (ch == '"')
                break;
            if (ch == '\\') {
                if (c->p == c->end)
                    return 0;
                ch = *c->p++;
            }
            if (n < cap)
                buf[n] = ch;
            n++;
        }
        *len = n;
        return 1;
    }
    ps_slice_t tok;
    if (!take_token(c, &tok))
        return 0;
    memcpy(buf, tok.base, PS_MIN(tok.len, cap));
    *len = tok.len;
    return 1;
}

/* A window size "8".."15" with no leading zero; returns it or 0. */
static int window_bits(const char *v, size_t n)
{
    if (n == 1 && v[0] >= '8' && v[0] <= '9')
        return v[0] - '0';
    if (n == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5')
        return 10 + v[1] - '0';
    return 0;
}

typedef struct {
    unsigned is_deflate : 1;
    unsigned bad : 1; /* unknown, repeated or invalid parameter */
    unsigned snct : 1, cnct : 1, sbits_seen : 1, cbits_seen : 1;
    int sbits, cbits; /* 0: absent or no value */
} offer_t;

static void offer_param(offer_t *o, ps_slice_t name, int has_value, const char *v, size_t vlen)
{
    if (NAME_IS(name, "server_no_context_takeover")) {
        o->bad |= o->snct || has_value;
        o->snct = 1;
    } else if (NAME_IS(name, "client_no_context_takeover")) {
        o->bad |= o->cnct || has_value;
        o->cnct = 1;
    } else if (NAME_IS(name, "server_max_window_bits")) {
        o->bad |= o->sbits_seen || !has_value;
        o->sbits_seen = 1;
        o->sbits = has_value ? window_bits(v, vlen) : 0;
        o->bad |= o->sbits == 0;
    } else if (NAME_IS(name, "client_max_window_bits")) {
        o->bad |= o->cbits_seen;
        o->cbits_seen = 1;
        o->cbits = has_value ? window_bits(v, vlen) : 0;
        o->bad |= has_value && o->cbits == 0;
    } else {
        o->bad = 1;
    }
}

/* Parses one extension and its parameters. Returns 0 on bad syntax. */
static int parse_offer(cursor_t *c, offer_t *o)
{
    ps_slice_t name;
    memset(o, 0, sizeof(*o));
    if (!take_token(c, &name))
        return 0;
    o->is_deflate = NAME_IS(name, "permessage-deflate");
    for (;;) {
        skip_ows(c);
        if (c->p == c->end || *c->p == ',')
            return 1;
        if (*c->p != ';')
            return 0;
        c->p++;
        skip_ows(c);
        ps_slice_t pname;
        if (!take_token(c, &pname))
            return 0;
        skip_ows(c);
        char v[8];
        size_t vlen = 0;
        int has_value = 0;
        if (c->p < c->end && *c->p == '=') {
            c->p++;
            skip_ows(c);
            if (!take_value(c, v, sizeof(v), &vlen))
                return 0;
            has_value = 1;
            if (vlen > sizeof(v))
                vlen = sizeof(v) + 1; /* too long for any valid value */
        }
        if (o->is_deflate)
            offer_param(o, pname, has_value, v, PS_MIN(vlen, sizeof(v)));
    }
}

/* Fills out from an acceptable offer; returns 0 to decline it. */
static int accept_offer(const offer_t *o, const ps_ws_deflate_config_t *cfg, ps_ws_deflate_t *out)
{
    if (o->bad || o->sbits == 8) /* zlib cannot compress with a 256-byte window */
        return 0;
    int sbits = PS_MAX(9, PS_MIN(15, cfg->server_max_window_bits));
    int cbits = PS_MAX(8, PS_MIN(15, cfg->client_max_window_bits));
    memset(out, 0, sizeof(*out));
    out->enabled = 1;
    out->server_no_context_takeover = o->snct || cfg->server_no_context_takeover;
    out->client_no_context_takeover = o->cnct || cfg->client_no_context_takeover;
    if (o->sbits)
        sbits = PS_MIN(sbits, o->sbits);
    out->server_max_window_bits = (uint8_t)sbits;
    out->server_bits_in_response = o->sbits != 0 || sbits < 15;
    if (o->cbits_seen) {
        /* The client lets us choose (up to its value, if any). Without the
         * parameter in its offer we may not ask and inflate with 15. */
        if (o->cbits)
            cbits = PS_MIN(cbits, o->cbits);
        out->client_max_window_bits = (uint8_t)cbits;
        out->client_bits_in_response = 1;
    } else {
        out->client_max_window_bits = 15;
    }
    out->level = (int8_t)PS_MAX(-1, PS_MIN(9, cfg->level));
    out->mem_level = (uint8_t)PS_MAX(1, PS_MIN(9, cfg->mem_level));
    return 1;
}

int ps_ws_negotiate_deflate(const ps_request_t *req, const ps_ws_deflate_config_t *cfg,
                            ps_ws_deflate_t *out)
{
    int found = 0;
    memset(out, 0, sizeof(*out));
    if (!cfg->enabled)
        return 0;
    for (uint32_t i = 0; i < req->nheaders; i++) {
        if (!NAME_IS(req->headers[i].name, "sec-websocket-extensions"))
            continue;
        ps_slice_t v = req->headers[i].value;
        cursor_t c = {v.base, v.base + v.len};
        for (;;) {
            skip_ows(&c);
            while (c.p < c.end && (*c.p == ',' || is_ows(*c.p)))
                c.p++; /* empty list elements */
            if (c.p == c.end)
                break;
            offer_t o;
            if (!parse_offer(&c, &o)) {
                memset(out, 0, sizeof(*out));
                return 0;
            }
            if (!found && o.is_deflate)
                found = accept_offer(&o, cfg, out);
        }
    }
    return found;
}

static size_t put_lit(char *buf, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    memcpy(buf + n, lit, l);
    return n + l;
}

static size_t put_bits(char *buf, size_t n, const char *name, unsigned bits)
{
    n = put_lit(buf, n, name);
    if (bits >= 10)
        buf[n++] = '1';
    buf[n++] = (char)('0' + bits % 10);
    return n;
}

size_t ps_ws_deflate_response(const ps_ws_deflate_t *d, char *buf)
{
    size_t n = put_lit(buf, 0, "permessage-deflate");
    if (d->server_no_context_takeover)
        n = put_lit(buf, n, "; server_no_context_takeover");
    if (d->client_no_context_takeover)
        n = put_lit(buf, n, "; client_no_context_takeover");
    if (d->server_bits_in_response)
        n = put_bits(buf, n, "; server_max_window_bits=", d->server_max_window_bits);
    if (d->client_bits_in_response)
        n = put_bits(buf, n, "; client_max_window_bits=", d->client_max_window_bits);
    return n;
}

/* Headers of the 101 that the handshake writes itself. */
static int handshake_owned(ps_slice_t name)
{
    return NAME_IS(name, "upgrade") || NAME_IS(name, "connection") ||
           NAME_IS(name, "sec-websocket-accept") || NAME_IS(name, "sec-websocket-extensions") ||
           NAME_IS(name, "sec-websocket-protocol") || NAME_IS(name, "content-length") ||
           NAME_IS(name, "transfer-encoding");
}

static char *put(char *w, const char *p, size_t n)
{
    memcpy(w, p, n);
    return w + n;
}

#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

int ps_ws_write_accept(ps_buf_t *out, ps_slice_t key, ps_slice_t subprotocol,
                       const ps_ws_deflate_t *deflate, const ps_header_t *h, size_t n,
                       const ps_slice_t *extra, size_t nextra)
{
    static const char start[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                "Upgrade: websocket\r\n"
                                "Connection: Upgrade\r\n"
                                "Sec-WebSocket-Accept: ";
    char accept[PS_WS_ACCEPT_LEN], ext[PS_WS_DEFLATE_RESPONSE_MAX];
    size_t ext_len = 0;
    size_t need = sizeof(start) - 1 + PS_WS_ACCEPT_LEN + 2 + 2;
    if (subprotocol.len > 0) {
        if (!is_token(subprotocol))
            return -EINVAL;
        need += 24 + subprotocol.len + 2;
    }
    if (deflate != NULL && deflate->enabled) {
        ext_len = ps_ws_deflate_response(deflate, ext);
        need += 26 + ext_len + 2;
    }
    for (size_t i = 0; i < n; i++) {
        if (!ps_http_valid_field(h[i].name, h[i].value))
            return -EINVAL;
        need += h[i].name.len + h[i].value.len + 4;
    }
    for (size_t i = 0; i < nextra; i++)
        need += extra[i].len;
    int rc = ps_ws_accept_key(key, accept);
    if (rc < 0)
        return rc;
    rc = ps_buf_reserve(out, need);
    if (rc < 0)
        return rc;
    char *w = out->data + out->len;
    w = PUT_LIT(w, start);
    w = put(w, accept, PS_WS_ACCEPT_LEN);
    w = PUT_LIT(w, "\r\n");
    if (subprotocol.len > 0) {
        w = PUT_LIT(w, "Sec-WebSocket-Protocol: ");
        w = put(w, subprotocol.base, subprotocol.len);
        w = PUT_LIT(w, "\r\n");
    }
    if (ext_len > 0) {
        w = PUT_LIT(w, "Sec-WebSocket-Extensions: ");
        w = put(w, ext, ext_len);
        w = PUT_LIT(w, "\r\n");
    }
    for (size_t i = 0; i < n; i++) {
        if (handshake_owned(h[i].name))
            continue;
        w = put(w, h[i].name.base, h[i].name.len);
        w = PUT_LIT(w, ": ");
        w = put(w, h[i].value.base, h[i].value.len);
        w = PUT_LIT(w, "\r\n");
    }
    for (size_t i = 0; i < nextra; i++)
        w = put(w, extra[i].base, extra[i].len);
    w = PUT_LIT(w, "\r\n");
    out->len = (size_t)(w - out->data);
    return 0;
}

/* ---- the session: wslay's frame layer over memory -------------------------------- */

enum {
    OP_CONTINUATION = 0x0,
    OP_TEXT = 0x1,
    OP_BINARY = 0x2,
    OP_CLOSE = 0x8,
    OP_PING = 0x9,
    OP_PONG = 0xa,
};

#define RSV1 WSLAY_RSV1_BIT
#define EVENTS_KEEP (64 * 1024)  /* storage an idle session keeps for events */
#define INFLATE_STEP (64 * 1024) /* output room per inflate() call */

/* An event in ws->events: this header, then `len` bytes, unless the
 * message is in the storage's memory (handle set: ext holds the bytes). */
typedef struct {
    uint64_t len;
    uint8_t type;
    uint8_t origin;
    uint16_t code;
    uint8_t ascii;
    void *handle;
    unsigned char *ext;
} record_t;

/* Frames are read without wslay (ps_ws_feed): it is never asked for input. */
static ssize_t on_recv(uint8_t *buf, size_t len, int flags, void *user)
{
    PS_UNUSED(buf);
    PS_UNUSED(len);
    PS_UNUSED(flags);
    PS_UNUSED(user);
    return 0;
}

#define HIGH_BITS 0x8080808080808080ULL

/* Sixteen bytes as two words: one SSE2 (or NEON) register, by the
 * compiler's vector extension. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));

/* Copies n payload bytes from src to dst unmasked with key, the first of
 * them at offset off of its frame's payload. Returns 1 when every byte it
 * wrote is below 0x80, else 0. */
static int unmask(unsigned char *dst, const unsigned char *src, size_t n,
                  const unsigned char key[4], uint64_t off)
{
    unsigned char k[8];
    uint64_t kw, acc = 0;
    size_t i = 0;
    for (int j = 0; j < 8; j++)
        k[j] = key[(off + (unsigned)j) & 3];
    memcpy(&kw, k, 8);
    if (n >= 64) {
        u64x2 kv = {kw, kw}, av = {0, 0};
        for (; n - i >= 64; i += 64) {
            u64x2 a, b, c, d;
            memcpy(&a, src + i, 16);
            memcpy(&b, src + i + 16, 16);
            memcpy(&c, src + i + 32, 16);
            memcpy(&d, src + i + 48, 16);
            a ^= kv;
            b ^= kv;
            c ^= kv;
            d ^= kv;
            av |= (a | b) | (c | d);
            memcpy(dst + i, &a, 16);
            memcpy(dst + i + 16, &b, 16);
            memcpy(dst + i + 32, &c, 16);
            memcpy(dst + i + 48, &d, 16);
        }
        acc = av[0] | av[1];
    }
    for (; n - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        w ^= kw;
        acc |= w;
        memcpy(dst + i, &w, 8);
    }
    for (size_t j = 0; i < n; i++, j++) {
        dst[i] = src[i] ^ k[j];
        acc |= dst[i];
    }
    return (acc & HIGH_BITS) == 0;
}

/* 1 when the n bytes at p are all below 0x80. */
static int all_ascii(const unsigned char *p, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;
    for (; n - i >= 32; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32);
        if ((w[0] | w[1] | w[2] | w[3]) & HIGH_BITS)
            return 0;
    }
    for (; n - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= p[i];
    return (acc & HIGH_BITS) == 0;
}

/* Room was reserved by write_frame(): appending cannot fail. For
 * ps_ws_send_prepare() the header is kept aside and the payload is not
 * copied at all. */
static ssize_t on_send(const uint8_t *data, size_t len, int flags, void *user)
{
    ps_ws_t *ws = user;
    PS_UNUSED(flags);
    if (ws->capture == 1) {
        if (len > sizeof(ws->ohdr))
            return -1;
        memcpy(ws->ohdr, data, len);
        ws->ohdr_len = (uint8_t)len;
        ws->capture = 2;
        return (ssize_t)len;
    }
    if (ws->capture == 2)
        return (ssize_t)len;
    if (ps_buf_append(&ws->out, data, len) < 0)
        return -1;
    return (ssize_t)len;
}

/* Only clients mask; wslay wants the callback all the same. */
static int on_genmask(uint8_t *buf, size_t len, void *user)
{
    PS_UNUSED(user);
    memset(buf, 0, len);
    return 0;
}

static const struct wslay_frame_callbacks frame_callbacks = {on_send, on_recv, on_genmask};

int ps_ws_init(ps_ws_t *ws, const ps_ws_limits_t *limits, const ps_ws_deflate_t *deflate)
{
    memset(ws, 0, sizeof(*ws));
    ws->limits = limits;
    if (deflate != NULL && deflate->enabled) {
        ps_ws_deflate_t *d = &ws->deflate;
        *d = *deflate;
        d->server_max_window_bits = (uint8_t)PS_MAX(9, PS_MIN(15, d->server_max_window_bits));
        d->client_max_window_bits = (uint8_t)PS_MAX(8, PS_MIN(15, d->client_max_window_bits));
        d->level = (int8_t)PS_MAX(-1, PS_MIN(9, d->level));
        d->mem_level = (uint8_t)(d->mem_level ? PS_MIN(9, d->mem_level) : 8);
    }
    if (wslay_frame_context_init(&ws->frame, &frame_callbacks, ws) != 0) {
        ws->frame = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void drop_message(ps_ws_t *ws);

void ps_ws_free(ps_ws_t *ws)
{
    ps_ws_event_t ev;
    drop_message(ws);
    while (ps_ws_next_event(ws, &ev))
        if (ev.handle != NULL)
            ws->storage->release(ev.handle);
    if (ws->frame != NULL)
        wslay_frame_context_free(ws->frame);
    if (ws->inflater != NULL) {
        inflateEnd(ws->inflater);
        free(ws->inflater);
    }
    if (ws->deflater != NULL) {
        deflateEnd(ws->deflater);
        free(ws->deflater);
    }
    free(ws->igzip);
    ps_buf_free(&ws->out);
    ps_buf_free(&ws->events);
    ps_buf_free(&ws->zbuf);
    ws->frame = NULL;
    ws->inflater = ws->deflater = NULL;
    ws->igzip = NULL;
}

/* Appends one whole frame to ws->out. Returns 0 or -ENOMEM. */
static int write_frame(ps_ws_t *ws, uint8_t op, uint8_t rsv, const void *data, size_t len)
{
    if (len > SIZE_MAX - 16)
        return -ENOMEM;
    int rc = ps_buf_reserve(&ws->out, 14 + len);
    if (rc < 0)
        return rc;
    struct wslay_frame_iocb f = {
        .fin = 1,
        .rsv = rsv,
        .opcode = op,
        .payload_length = len,
        .mask = 0,
        .data = data,
        .data_length = len,
    };
    ssize_t sent = wslay_frame_send(ws->frame, &f);
    return sent >= 0 && (size_t)sent == len ? 0 : -ENOMEM;
}

static int write_close(ps_ws_t *ws, uint16_t code, const char *reason, size_t len)
{
    unsigned char payload[125] = {0};
    size_t n = 0;
    if (code != 0) {
        payload[0] = (unsigned char)(code >> 8);
        payload[1] = (unsigned char)code;
        if (len > 0)
            memcpy(payload + 2, reason, len);
        n = 2 + len;
    }
    int rc = write_frame(ws, OP_CLOSE, 0, payload, n);
    if (rc == 0) {
        ws->close_sent = 1;
        ws->close_code_sent = code ? code : 1005;
    }
    return rc;
}

/* Drops the message being read, if it was being kept. */
static void drop_message(ps_ws_t *ws)
{
    if (ws->msg_active && !ws->msg_discard)
        ws->events.len -= sizeof(record_t) + (ws->msg_ext != NULL ? 0 : ws->msg_len);
    if (ws->msg_handle != NULL)
        ws->storage->release(ws->msg_handle);
    ws->msg_ext = NULL;
    ws->msg_handle = NULL;
    ws->msg_active = 0;
}

static int queue_close(ps_ws_t *ws, uint8_t origin, uint16_t code, const void *reason, size_t len)
{
    record_t r = {.len = len, .type = PS_WS_EV_CLOSE, .origin = origin, .code = code};
    int rc = ps_buf_reserve(&ws->events, sizeof(r) + len);
    if (rc < 0)
        return rc;
    ps_buf_append(&ws->events, &r, sizeof(r));
    ps_buf_append(&ws->events, reason, len);
    ws->nqueued++;
    return 0;
}

/* Fails the connection (RFC 6455 7.1.7): a close frame with code unless one
 * was sent, no more reading, and a PS_WS_CLOSE_FAILED event saying why.
 * Returns 0 or -ENOMEM. */
static int fail(ps_ws_t *ws, uint16_t code, const char *why)
{
    int rc = 0;
    if (ws->failed || ws->close_received || ws->lost)
        return 0;
    ws->failed = 1;
    drop_message(ws);
    if (!ws->close_sent)
        rc = write_close(ws, code, NULL, 0);
    int rc2 = queue_close(ws, PS_WS_CLOSE_FAILED, code, why, strlen(why));
    return rc < 0 ? rc : rc2;
}

int ps_ws_valid_close_code(unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* ---- inflating ------------------------------------------------------------------- */

static int inflater_start(ps_ws_t *ws)
{
    z_stream *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return -ENOMEM;
    if (inflateInit2(z, -(int)ws->deflate.client_max_window_bits) != Z_OK) {
        free(z);
        return -ENOMEM;
    }
    ws->inflater = z;
    return 0;
}

/* After a block with BFINAL set (RFC 7692 7.2.3.4) the deflate stream has
 * ended; the next message starts another, which may still refer to the
 * window (context takeover), so the window is carried over. */
static int inflater_restart(ps_ws_t *ws)
{
    z_stream *z = ws->inflater;
    unsigned char *dict = malloc(32768);
    uInt dlen = 32768;
    if (dict == NULL)
        return -ENOMEM;
    int zr = inflateGetDictionary(z, dict, &dlen);
    if (zr == Z_OK)
        zr = inflateReset(z);
    if (zr == Z_OK && dlen > 0)
        zr = inflateSetDictionary(z, dict, dlen);
    free(dict);
    return zr == Z_OK ? 0 : -ENOMEM;
}

/* Counts n more bytes of the message being read (already in place at the
 * end of its record); ascii is 1 when they are known to be all below 0x80,
 * 0 when they are not, -1 when unknown. The first problem in the message's
 * bytes decides: a byte past max_message (1009) or one that breaks UTF-8 in
 * text (1007), so the outcome never depends on how the bytes arrived.
 * Returns 0 (the connection may have been failed) or -ENOMEM. */
static int keep_bytes(ps_ws_t *ws, size_t n, int ascii)
{
    uint64_t max = ws->limits->max_message;
    size_t ok = n;
    int over = max != 0 && n > max - ws->msg_len;
    if (over)
        ok = (size_t)(max - ws->msg_len);
    if (ws->msg_op == OP_TEXT) {
        const unsigned char *p = (const unsigned char *)ws->events.data + ws->events.len;
        if (ascii < 0)
            ascii = all_ascii(p, ok);
        /* ASCII between characters leaves the state at 0: nothing to check */
        if (!ascii || ws->utf8 != 0) {
            ws->msg_ascii = 0;
            ws->utf8 = ps_ws_utf8_validate(ws->utf8, p, ok);
        }
    }
    ws->events.len += n;
    ws->msg_len += n;
    if (ws->utf8 == PS_WS_UTF8_BAD)
        return fail(ws, 1007, "text message is not UTF-8");
    if (over)
        return fail(ws, 1009, "message too big");
    return 0;
}

/* Inflates compressed bytes of the message being read into its record, in
 * steps bounded by what is left under max_message (so a small frame cannot
 * inflate into more than one byte over the limit). Returns 0 (the
 * connection may have been failed: 1009, 1007) or -ENOMEM. */
static int inflate_bytes(ps_ws_t *ws, const unsigned char *p, size_t n)
{
    uint64_t max = ws->limits->max_message;
    int rc;
    if (ws->msg_zdone)
        return 0;
    if (ws->inflater == NULL && (rc = inflater_start(ws)) < 0)
        return rc;
    z_stream *z = ws->inflater;
    z->next_in = (Bytef *)p;
    z->avail_in = (uInt)n; /* n is at most frame_bytes' 4 KiB chunk */
    size_t want = PS_MIN(PS_MAX(4 * n, 1024), INFLATE_STEP);
    for (;;) {
        /* Whatever room is free, at least `want`, growing while output
         * keeps coming; never more than one byte past the limit. */
        size_t room = PS_MAX(ws->events.cap - ws->events.len, want);
        if (max != 0 && room > max - ws->msg_len + 1)
            room = (size_t)(max - ws->msg_len + 1);
        room = PS_MIN(room, (size_t)UINT_MAX);
        if ((rc = ps_buf_reserve(&ws->events, room)) < 0)
            return rc;
        want = PS_MIN(2 * want, INFLATE_STEP);
        z->next_out = (Bytef *)ws->events.data + ws->events.len;
        z->avail_out = (uInt)room;
        int zr = inflate(z, Z_SYNC_FLUSH);
        if ((rc = keep_bytes(ws, room - z->avail_out, -1)) < 0 || ws->failed)
            return rc;
        switch (zr) {
        case Z_STREAM_END:
            /* A final block ends the message's data (what follows, our
             * 00 00 ff ff included, is ignored as a decoder would). */
            ws->msg_zdone = 1;
            return inflater_restart(ws);
        case Z_OK:
        case Z_BUF_ERROR: /* no progress: out of input or of room */
            if (z->avail_out > 0 && (z->avail_in == 0 || zr == Z_BUF_ERROR))
                return 0;
            break;
        case Z_MEM_ERROR:
            return -ENOMEM;
        default:
            return fail(ws, 1007, "compressed data is corrupt");
        }
    }
}

/* ---- reading frames -------------------------------------------------------------------- */

static int start_message(ps_ws_t *ws, uint8_t op, int compressed)
{
    ws->msg_active = 1;
    ws->msg_op = op;
    ws->msg_compressed = compressed != 0;
    ws->msg_zdone = 0;
    ws->msg_discard = ws->close_sent;
    ws->msg_len = 0;
    ws->utf8 = 0;
    ws->msg_ascii = 1;
    if (ws->msg_discard)
        return 0;
    record_t r = {.len = 0, .type = op == OP_TEXT ? PS_WS_EV_TEXT : PS_WS_EV_BINARY};
    return ps_buf_append(&ws->events, &r, sizeof(r));
}

/* A frame header, decoded. */
typedef struct {
    uint64_t len;
    uint8_t fin, rsv, opcode, mask;
} frame_t;

/* Checks a frame against the session once its header was read (the length
 * encoding and the rule that control frames are final and at most 125
 * bytes were checked by read_header). Returns 0 (maybe failed) or -ENOMEM. */
static int start_frame(ps_ws_t *ws, const frame_t *f)
{
    uint8_t op = f->opcode;
    int rc;
    if (!f->mask)
        return fail(ws, 1002, "unmasked frame");
    if (op & 8) {
        if (op > OP_PONG)
            return fail(ws, 1002, "reserved opcode");
        if (f->rsv)
            return fail(ws, 1002, "reserved bit set on a control frame");
        ws->ctrl_len = 0;
    } else if (op == OP_CONTINUATION) {
        if (!ws->msg_active)
            return fail(ws, 1002, "continuation frame outside a message");
        if (f->rsv)
            return fail(ws, 1002, "reserved bit set on a continuation frame");
    } else if (op == OP_TEXT || op == OP_BINARY) {
        if (ws->msg_active)
            return fail(ws, 1002, "new message inside a fragmented one");
        if (f->rsv & ~(ws->deflate.enabled ? RSV1 : 0))
            return fail(ws, 1002, "reserved bit set");
        if ((rc = start_message(ws, op, f->rsv & RSV1)) < 0)
            return rc;
    } else {
        return fail(ws, 1002, "reserved opcode");
    }
    ws->frame_op = op;
    ws->frame_fin = f->fin != 0;
    uint64_t max = ws->limits->max_message;
    if (!(op & 8) && !ws->msg_compressed && !ws->msg_discard && max != 0 &&
        f->len > max - ws->msg_len)
        return fail(ws, 1009, "message too big");
    if (op == OP_BINARY && f->fin && !ws->msg_compressed && !ws->msg_discard &&
        ws->storage != NULL && f->len >= PS_WS_STORAGE_MIN && f->len <= SIZE_MAX)
        ws->msg_ext = ws->storage->alloc((size_t)f->len, &ws->msg_handle);
    return 0;
}

/* n more (masked) payload bytes of the frame being read, at its offset
 * ws->frame_off. Returns 0 (maybe failed) or -ENOMEM. */
static int frame_bytes(ps_ws_t *ws, const unsigned char *p, size_t n)
{
    uint64_t off = ws->frame_off;
    int rc;
    if (n == 0)
        return 0;
    if (ws->frame_op & 8) {
        /* read_header bounds them at 125 */
        unmask((unsigned char *)ws->ctrl + ws->ctrl_len, p, n, ws->frame_mask, off);
        ws->ctrl_len = (uint8_t)(ws->ctrl_len + n);
        return 0;
    }
    if (ws->msg_discard)
        return 0;
    if (ws->msg_compressed) {
        unsigned char plain[4096];
        while (n > 0 && !ws->msg_zdone) {
            size_t step = PS_MIN(n, sizeof(plain));
            unmask(plain, p, step, ws->frame_mask, off);
            if ((rc = inflate_bytes(ws, plain, step)) < 0 || ws->failed)
                return rc;
            p += step;
            n -= step;
            off += step;
        }
        return 0;
    }
    if (ws->msg_ext != NULL) {
        /* binary, one frame, its length checked by start_frame */
        unmask(ws->msg_ext + off, p, n, ws->frame_mask, off);
        ws->msg_len += n;
        return 0;
    }
    if ((rc = ps_buf_reserve(&ws->events, n)) < 0)
        return rc;
    int ascii =
        unmask((unsigned char *)ws->events.data + ws->events.len, p, n, ws->frame_mask, off);
    return keep_bytes(ws, n, ascii);
}

static int end_message(ps_ws_t *ws)
{
    static const unsigned char tail[4] = {0x00, 0x00, 0xff, 0xff};
    int rc;
    if (ws->msg_discard) {
        ws->msg_active = 0;
        return 0;
    }
    if (ws->msg_compressed) {
        if ((rc = inflate_bytes(ws, tail, sizeof(tail))) < 0 || ws->failed)
            return rc;
        if (ws->deflate.client_no_context_takeover && inflateReset(ws->inflater) != Z_OK)
            return -ENOMEM;
    }
    if (ws->msg_op == OP_TEXT && ws->utf8 != 0)
        return fail(ws, 1007, "text message is not UTF-8");
    record_t r;
    char *at = ws->events.data + ws->events.len - sizeof(r);
    if (ws->msg_ext == NULL)
        at -= ws->msg_len;
    memcpy(&r, at, sizeof(r));
    r.len = ws->msg_len;
    r.ascii = ws->msg_op == OP_TEXT && ws->msg_ascii;
    r.handle = ws->msg_handle;
    r.ext = ws->msg_ext;
    memcpy(at, &r, sizeof(r));
    ws->msg_ext = NULL;
    ws->msg_handle = NULL;
    ws->nqueued++;
    ws->msg_active = 0;
    return 0;
}

static int on_close_frame(ps_ws_t *ws)
{
    uint16_t code = 1005;
    const char *reason = "";
    size_t len = 0;
    if (ws->ctrl_len == 1)
        return fail(ws, 1002, "close frame with a 1-byte payload");
    if (ws->ctrl_len >= 2) {
        code = (uint16_t)((unsigned char)ws->ctrl[0] << 8 | (unsigned char)ws->ctrl[1]);
        if (!ps_ws_valid_close_code(code))
            return fail(ws, 1002, "invalid close code");
        reason = ws->ctrl + 2;
        len = ws->ctrl_len - 2u;
        if (ps_ws_utf8_validate(0, (const unsigned char *)reason, len) != 0)
            return fail(ws, 1007, "close reason is not UTF-8");
    }
    ws->close_received = 1;
    drop_message(ws);
    int rc = 0;
    if (!ws->close_sent) /* echo the code, as endpoints typically do */
        rc = write_close(ws, code == 1005 ? 0 : code, NULL, 0);
    int rc2 = queue_close(ws, PS_WS_CLOSE_PEER, code, reason, len);
    return rc < 0 ? rc : rc2;
}

static int end_frame(ps_ws_t *ws)
{
    switch (ws->frame_op) {
    case OP_PING:
        ws->pings_received++;
        return ws->close_sent ? 0 : write_frame(ws, OP_PONG, 0, ws->ctrl, ws->ctrl_len);
    case OP_PONG:
        ws->pongs_received++;
        memcpy(ws->last_pong, ws->ctrl, ws->ctrl_len);
        ws->last_pong_len = ws->ctrl_len;
        return 0;
    case OP_CLOSE:
        return on_close_frame(ws);
    default:
        return ws->frame_fin ? end_message(ws) : 0;
    }
}

/* The header's size, as far as its first have bytes tell. */
static size_t header_size(const unsigned char *h, size_t have)
{
    if (have < 2)
        return 2;
    size_t n = 2 + ((h[1] & 0x80) ? 4 : 0);
    unsigned len7 = h[1] & 0x7f;
    return n + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
}

/* Takes header bytes from p (avail of them) into ws->hdr, adding how many
 * to *used. Returns 1 with f filled once the header is complete, 0 when it
 * needs more bytes, or what fail() returns (the connection is then failed:
 * *used is avail) for a header RFC 6455 5.2 and 5.5 forbid: a control frame
 * not final or over 125 bytes, a length not in its shortest encoding or of
 * 2^63 or more. */
static int read_header(ps_ws_t *ws, const unsigned char *p, size_t avail, size_t *used, frame_t *f)
{
    size_t n = 0, need;
    while (ws->hdr_len < (need = header_size(ws->hdr, ws->hdr_len))) {
        if (n == avail) {
            *used += n;
            return 0;
        }
        ws->hdr[ws->hdr_len++] = p[n++];
        if (ws->hdr_len == 2 && (ws->hdr[0] & 8) &&
            ((ws->hdr[1] & 0x7f) > 125 || !(ws->hdr[0] & 0x80)))
            goto bad;
    }
    *used += n;
    const unsigned char *h = ws->hdr;
    size_t at = 2;
    uint64_t len = h[1] & 0x7f;
    if (len == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        at = 4;
        if (len < 126)
            goto bad;
    } else if (len == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        at = 10;
        if (len < 65536 || (len >> 63))
            goto bad;
    }
    f->fin = h[0] >> 7;
    f->rsv = (h[0] >> 4) & 7;
    f->opcode = h[0] & 0xf;
    f->mask = h[1] >> 7;
    f->len = len;
    if (f->mask)
        memcpy(ws->frame_mask, h + at, 4);
    ws->hdr_len = 0;
    return 1;
bad:
    *used = avail;
    return fail(ws, 1002, "bad frame header");
}

int ps_ws_feed(ps_ws_t *ws, const char *data, size_t len, size_t *consumed)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t off = 0;
    int rc = 0;
    if (ws->nqueued == 0 && !ws->msg_active)
        ps_buf_shrink(&ws->events, EVENTS_KEEP); /* the last slices handed out die here */
    while (ps_ws_want_read(ws)) {
        if (!ws->in_frame) {
            frame_t f = {0};
            size_t used = 0;
            int r = read_header(ws, p + off, len - off, &used, &f);
            off += used;
            if (r <= 0 || ws->failed) {
                rc = PS_MIN(r, 0);
                break;
            }
            if ((rc = start_frame(ws, &f)) < 0 || ws->failed)
                break;
            ws->in_frame = 1;
            ws->frame_len = f.len;
            ws->frame_off = 0;
        } else {
            size_t n = (size_t)PS_MIN(ws->frame_len - ws->frame_off, (uint64_t)(len - off));
            rc = frame_bytes(ws, p + off, n);
            off += n;
            if (rc < 0 || ws->failed)
                break;
            ws->frame_off += n;
        }
        if (ws->frame_off < ws->frame_len) {
            if (off == len)
                break;
            continue;
        }
        ws->in_frame = 0;
        if ((rc = end_frame(ws)) < 0)
            break;
    }
    if (ws->close_received || ws->failed || ws->lost)
        off = len; /* nothing more is read: drop it */
    *consumed = off;
    return rc;
}

int ps_ws_eof(ps_ws_t *ws)
{
    if (ws->close_received || ws->failed || ws->lost)
        return 0;
    ws->lost = 1;
    drop_message(ws);
    return queue_close(ws, PS_WS_CLOSE_LOST, 1006, NULL, 0);
}

int ps_ws_next_event(ps_ws_t *ws, ps_ws_event_t *ev)
{
    record_t r;
    if (ws->nqueued == 0)
        return 0;
    const char *at = ps_buf_head(&ws->events);
    memcpy(&r, at, sizeof(r));
    ev->type = r.type;
    ev->origin = r.origin;
    ev->code = r.code;
    ev->ascii = r.ascii;
    ev->handle = r.handle;
    if (r.handle != NULL) {
        ev->data = (ps_slice_t){(const char *)r.ext, (size_t)r.len};
        ps_buf_consume(&ws->events, sizeof(r));
    } else {
        ev->data = (ps_slice_t){at + sizeof(r), (size_t)r.len};
        ps_buf_consume(&ws->events, sizeof(r) + (size_t)r.len);
    }
    ws->nqueued--;
    return 1;
}

/* ---- sending ----------------------------------------------------------------------- */

static int deflater_start(ps_ws_t *ws)
{
    z_stream *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return -ENOMEM;
    if (deflateInit2(z, ws->deflate.level, Z_DEFLATED, -(int)ws->deflate.server_max_window_bits,
                     ws->deflate.mem_level, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(z);
        return -ENOMEM;
    }
    ws->deflater = z;
    return 0;
}

/* Level 1, the default, compresses with ISA-L's igzip at its level 1: on
 * text it gives zlib's level-1 ratio for about a quarter of the CPU. Below
 * about 200 bytes zlib is the cheaper (igzip builds Huffman tables for
 * every block), so a connection starts on zlib and moves to igzip for good
 * at its first message of IGZIP_FROM bytes, zlib's window becoming igzip's
 * dictionary. The level buffer is the hash table and room for 4 Ki tokens
 * (a block ends when it fills; more room changed neither ratio nor speed
 * on 16 KiB messages); with the stream's own 80 KiB of history buffer the
 * state is 116 KiB, where zlib's is about 40 KiB. */
#define IGZIP_FROM 256
#define IGZIP_LEVEL_BUF (ISAL_DEF_LVL1_REQ + ISAL_DEF_LVL1_TOKEN_SIZE * 4 * 1024)

static int igzip_start(ps_ws_t *ws)
{
    void *mem;
    if (posix_memalign(&mem, 64, sizeof(struct isal_zstream) + IGZIP_LEVEL_BUF) != 0)
        return -ENOMEM;
    struct isal_zstream *s = mem;
    isal_deflate_init(s);
    s->level = 1;
    s->level_buf = (uint8_t *)(s + 1);
    s->level_buf_size = IGZIP_LEVEL_BUF;
    s->hist_bits = ws->deflate.server_max_window_bits;
    s->gzip_flag = IGZIP_DEFLATE;
    z_stream *z = ws->deflater;
    if (z != NULL && !ws->deflate.server_no_context_takeover) {
        unsigned char *dict = malloc((size_t)1 << ws->deflate.server_max_window_bits);
        uInt n = 0;
        if (dict == NULL || deflateGetDictionary(z, dict, &n) != Z_OK ||
            (n > 0 && isal_deflate_set_dict(s, dict, n) != COMP_OK)) {
            free(dict);
            free(s);
            return -ENOMEM;
        }
        free(dict);
    }
    if (z != NULL) {
        deflateEnd(z);
        free(z);
        ws->deflater = NULL;
    }
    ws->igzip = s;
    return 0;
}

/* Makes room for at least 64 more bytes of output in ws->zbuf; returns the
 * room, at most 1 GiB, or -ENOMEM. */
static ssize_t zbuf_room(ps_ws_t *ws)
{
    int rc;
    if (ws->zbuf.cap - ws->zbuf.len < 64 && (rc = ps_buf_reserve(&ws->zbuf, ws->zbuf.cap)) < 0)
        return rc;
    return (ssize_t)PS_MIN(ws->zbuf.cap - ws->zbuf.len, (size_t)1 << 30);
}

/* Both compressors take the input in steps of at most 1 GiB (their counts
 * are 32 bits); the last step ends with a sync flush. */
static int compress_zlib(ps_ws_t *ws, const unsigned char *p, size_t len)
{
    z_stream *z = ws->deflater;
    size_t left = len;
    do {
        size_t step = PS_MIN(left, (size_t)1 << 30);
        int flush = step == left ? Z_SYNC_FLUSH : Z_NO_FLUSH;
        z->next_in = (Bytef *)p;
        z->avail_in = (uInt)step;
        p += step;
        left -= step;
        do {
            ssize_t room = zbuf_room(ws);
            if (room < 0)
                return (int)room;
            z->next_out = (Bytef *)ws->zbuf.data + ws->zbuf.len;
            z->avail_out = (uInt)room;
            int zr = deflate(z, flush);
            if (zr != Z_OK && zr != Z_BUF_ERROR)
                return -ENOMEM;
            ws->zbuf.len += (size_t)room - z->avail_out;
        } while (z->avail_out == 0 || z->avail_in > 0);
    } while (left > 0);
    if (ws->deflate.server_no_context_takeover && deflateReset(z) != Z_OK)
        return -ENOMEM;
    return 0;
}

/* igzip has flushed everything once a call leaves room in the output. */
static int compress_igzip(ps_ws_t *ws, const unsigned char *p, size_t len)
{
    struct isal_zstream *s = ws->igzip;
    size_t left = len;
    do {
        size_t step = PS_MIN(left, (size_t)1 << 30);
        s->flush = step == left ? SYNC_FLUSH : NO_FLUSH;
        s->next_in = (uint8_t *)p;
        s->avail_in = (uint32_t)step;
        p += step;
        left -= step;
        do {
            ssize_t room = zbuf_room(ws);
            if (room < 0)
                return (int)room;
            s->next_out = (uint8_t *)ws->zbuf.data + ws->zbuf.len;
            s->avail_out = (uint32_t)room;
            if (isal_deflate(s) != COMP_OK)
                return -ENOMEM;
            ws->zbuf.len += (size_t)room - s->avail_out;
        } while (s->avail_out == 0 || s->avail_in > 0);
    } while (left > 0);
    if (ws->deflate.server_no_context_takeover)
        isal_deflate_reset(s);
    return 0;
}

/* Compresses a message into ws->zbuf (RFC 7692 7.2.1: a sync flush, its
 * final 00 00 ff ff removed). Returns 0 or -ENOMEM. */
static int compress_message(ps_ws_t *ws, const void *data, size_t len)
{
    int rc;
    ps_buf_reset(&ws->zbuf);
    /* An empty message is the empty stored block's first byte, which the
     * peer's 00 00 ff ff completes; every message ends byte-aligned, so the
     * compressor need not see it (igzip would spend a Huffman block). */
    if (len == 0)
        return ps_buf_append(&ws->zbuf, "", 1);
    int fast = ws->igzip != NULL || (ws->deflate.level == 1 && len >= IGZIP_FROM);
    if (fast ? ws->igzip == NULL && (rc = igzip_start(ws)) < 0
             : ws->deflater == NULL && (rc = deflater_start(ws)) < 0)
        return rc;
    if ((rc = ps_buf_reserve(&ws->zbuf, PS_MIN(len, 1 << 20) / 2 + 64)) < 0)
        return rc;
    if ((rc = (fast ? compress_igzip : compress_zlib)(ws, data, len)) < 0)
        return rc;
    if (ws->zbuf.len >= 4 && memcmp(ws->zbuf.data + ws->zbuf.len - 4, "\0\0\xff\xff", 4) == 0)
        ws->zbuf.len -= 4;
    return 0;
}

int ps_ws_send(ps_ws_t *ws, int type, const void *data, size_t len, unsigned flags)
{
    int rc;
    if (type != PS_WS_EV_TEXT && type != PS_WS_EV_BINARY)
        return -EINVAL;
    if (ws->close_sent || ws->lost || ws->failed)
        return -EPIPE;
    uint8_t op = type == PS_WS_EV_TEXT ? OP_TEXT : OP_BINARY;
    if (!ws->deflate.enabled || (flags & PS_WS_SEND_NO_COMPRESS))
        return write_frame(ws, op, 0, data, len);
    if ((rc = compress_message(ws, data, len)) < 0)
        return rc;
    rc = write_frame(ws, op, RSV1, ws->zbuf.data, ws->zbuf.len);
    ps_buf_reset(&ws->zbuf);
    ps_buf_shrink(&ws->zbuf, EVENTS_KEEP);
    return rc;
}

int ps_ws_send_prepare(ps_ws_t *ws, int type, const void *data, size_t len, unsigned flags,
                       struct iovec iov[2])
{
    int rc;
    uint8_t rsv = 0;
    if (type != PS_WS_EV_TEXT && type != PS_WS_EV_BINARY)
        return -EINVAL;
    if (ws->close_sent || ws->lost || ws->failed)
        return -EPIPE;
    if (ps_buf_size(&ws->out) > 0)
        return -EBUSY;
    if (ws->deflate.enabled && !(flags & PS_WS_SEND_NO_COMPRESS)) {
        if ((rc = compress_message(ws, data, len)) < 0)
            return rc;
        data = ws->zbuf.data;
        len = ws->zbuf.len;
        rsv = RSV1;
    }
    struct wslay_frame_iocb f = {
        .fin = 1,
        .rsv = rsv,
        .opcode = type == PS_WS_EV_TEXT ? OP_TEXT : OP_BINARY,
        .payload_length = len,
        .mask = 0,
        .data = data,
        .data_length = len,
    };
    ws->capture = 1;
    ssize_t sent = wslay_frame_send(ws->frame, &f);
    ws->capture = 0;
    if (sent < 0 || (size_t)sent != len)
        return -ENOMEM;
    iov[0] = (struct iovec){ws->ohdr, ws->ohdr_len};
    iov[1] = (struct iovec){(void *)data, len};
    return 0;
}

int ps_ws_send_rest(ps_ws_t *ws, const struct iovec iov[2], size_t written)
{
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        size_t skip = PS_MIN(written, iov[i].iov_len);
        written -= skip;
        rc = ps_buf_append(&ws->out, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
    }
    if (iov[1].iov_base == ws->zbuf.data) {
        ps_buf_reset(&ws->zbuf);
        ps_buf_shrink(&ws->zbuf, EVENTS_KEEP);
    }
    return rc;
}

int ps_ws_send_ping(ps_ws_t *ws, const void *data, size_t len)
{
    if (len > 125)
        return -EINVAL;
    if (ws->close_sent || ws->lost || ws->failed)
        return -EPIPE;
    return write_frame(ws, OP_PING, 0, data, len);
}

int ps_ws_send_close(ps_ws_t *ws, uint16_t code, const char *reason, size_t len)
{
    if (len > 123 || (code == 0 ? len > 0 : !ps_ws_valid_close_code(code)))
        return -EINVAL;
    if (ws->close_sent || ws->lost || ws->failed)
        return -EPIPE;
    return write_close(ws, code, reason, len);
}
