/* libFuzzer driver for csrc/codec/ws.c: a WebSocket session fed a client's bytes.
 *
 * The first three bytes choose the session: permessage-deflate or not, its
 * context takeover and windows, the message limit, the event queue's bound,
 * the piece size, whether large binary messages go to a storage (as the
 * ASGI bridge's bytes objects; it refuses every third allocation), and
 * whether the rest is raw wire bytes or a script. A
 * script is a list of frames the driver builds as a client would (masked
 * or not, any opcode and RSV bits, payloads optionally compressed by a
 * client's zlib stream, so valid compressed messages are reached) and of
 * server actions (send a message, compressed or not, a ping, a close) at
 * fixed points of the byte stream.
 *
 * Each input runs twice, fed whole and fed in pieces, taking every event
 * after each feed (so the queue's bound stops and resumes reading), and:
 *   - every event keeps the session's promises: text is valid UTF-8 (by a
 *     decoder written here), no message is over the limit, a close is the
 *     last event and its code fits its origin (the peer's: a valid code or
 *     1005; a failure: 1002, 1007, 1009; a lost stream: 1006), there is
 *     exactly one close after the end of the stream;
 *   - the output is frames a server may send: unmasked, final, minimal
 *     lengths, known opcodes, RSV1 only on a compressed message, control
 *     frames of at most 125 bytes, one close at most and nothing after it,
 *     with a code a peer accepts; the messages decode (inflating with the
 *     client's window and takeover) to exactly what the server sent;
 *   - a stored message is exactly the storage the session asked for, and
 *     every handle is taken or released by the end of the session;
 *   - both runs give the same events and the same output bytes.
 * The same bytes are also read as header lines of an upgrade request for
 * the handshake checks and permessage-deflate negotiation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "base/common.h"
#include "codec/ws.h"
#include "fuzz.h"

/* ---- the input ------------------------------------------------------------------ */

typedef struct {
    ps_ws_limits_t lim;
    ps_ws_deflate_t deflate; /* .enabled = 0: none */
    size_t piece;
    int scripted;
    int stored; /* large binary messages go to `storage` */
} setup_t;

/* A server action at a point of the stream. */
typedef struct {
    size_t at; /* after this many wire bytes */
    uint8_t kind, flags;
    size_t off, len; /* payload: bytes of the input */
} action_t;

#define MAX_ACTIONS 64

typedef struct {
    ps_buf_t wire;
    action_t actions[MAX_ACTIONS];
    size_t nactions;
} script_t;

static const uint64_t max_sizes[4] = {64, 1000, 1 << 16, 1 << 20};
static const uint32_t max_queues[4] = {0, 1, 3, 0};

static void read_setup(const uint8_t *d, setup_t *s)
{
    memset(s, 0, sizeof(*s));
    s->lim.max_message = max_sizes[(d[0] >> 3) & 3];
    s->lim.max_queue = max_queues[d[0] >> 6];
    s->scripted = (d[0] >> 5) & 1;
    s->piece = d[1] & 0x7f;
    s->stored = d[1] >> 7;
    if (d[0] & 1) {
        s->deflate.enabled = 1;
        s->deflate.server_no_context_takeover = (d[0] >> 1) & 1;
        s->deflate.client_no_context_takeover = (d[0] >> 2) & 1;
        s->deflate.client_max_window_bits = (uint8_t)(d[2] & 0x80 ? 15 : 8 + (d[2] & 7));
        s->deflate.server_max_window_bits = (uint8_t)(9 + ((d[2] >> 3) & 7) % 7);
        s->deflate.level = (int8_t)(d[2] & 0x40 ? 6 : 1);
        s->deflate.mem_level = 8;
    }
}

/* ---- the storage --------------------------------------------------------------------- */

/* A handle: the length asked for, then the memory. */
typedef struct {
    size_t len;
    uint8_t data[];
} stored_t;

static size_t stored_live, stored_calls;

static void *storage_alloc(size_t len, void **handle)
{
    INVARIANT(len >= PS_WS_STORAGE_MIN);
    if (++stored_calls % 3 == 0) /* refused: the session keeps the message itself */
        return NULL;
    stored_t *m = malloc(sizeof(*m) + len);
    INVARIANT(m != NULL);
    m->len = len;
    stored_live++;
    *handle = m;
    return m->data;
}

static void storage_release(void *handle)
{
    INVARIANT(handle != NULL && stored_live > 0);
    stored_live--;
    free(handle);
}

static const ps_ws_storage_t storage = {storage_alloc, storage_release};

/* Appends a frame as a client builds it. */
static void put_frame(ps_buf_t *b, uint8_t first, int mask, const uint8_t *p, size_t n,
                      uint32_t key_seed)
{
    uint8_t h[14], key[4];
    size_t hl = 2;
    h[0] = first;
    h[1] = mask ? 0x80 : 0;
    if (n < 126) {
        h[1] |= (uint8_t)n;
    } else if (n < 65536) {
        h[1] |= 126;
        h[2] = (uint8_t)(n >> 8);
        h[3] = (uint8_t)n;
        hl = 4;
    } else {
        h[1] |= 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
        hl = 10;
    }
    for (int i = 0; i < 4; i++)
        key[i] = (uint8_t)(key_seed * 2654435761u >> (8 * i));
    if (mask) {
        memcpy(h + hl, key, 4);
        hl += 4;
    }
    ps_buf_append(b, h, hl);
    ps_buf_reserve(b, n);
    for (size_t i = 0; i < n; i++)
        b->data[b->len + i] = (char)(mask ? p[i] ^ key[i % 4] : p[i]);
    b->len += n;
}

/* Compresses one fragment with the client's stream: a sync flush, its
 * 00 00 ff ff removed on the last fragment of a message. */
static void client_compress(z_stream *z, const uint8_t *p, size_t n, int fin, ps_buf_t *out)
{
    ps_buf_reset(out);
    ps_buf_reserve(out, n + 64);
    z->next_in = (Bytef *)p;
    z->avail_in = (uInt)n;
    do {
        if (out->cap - out->len < 64)
            ps_buf_reserve(out, out->cap);
        z->next_out = (Bytef *)out->data + out->len;
        z->avail_out = (uInt)(out->cap - out->len);
        size_t before = z->avail_out;
        deflate(z, Z_SYNC_FLUSH);
        out->len += before - z->avail_out;
    } while (z->avail_out == 0 || z->avail_in > 0);
    if (fin && out->len >= 4)
        out->len -= 4;
    if (fin && out->len == 0)
        out->data[out->len++] = 0;
}

/* Reads the script: entries of three bytes (op, how, length; a length of
 * 255 is followed by two bytes of length) and the payload. Op 0xff is a
 * server action (how: kind in bits 0-2, flags above); any other op is a
 * frame's first byte (FIN, RSV, opcode) and `how` says unmasked (bit 0) and
 * compressed by the client's stream (bit 1, data frames, with deflate). */
static void read_script(const uint8_t *d, size_t n, const setup_t *s, script_t *sc)
{
    size_t i = 0;
    uint32_t seed = 1;
    z_stream z;
    ps_buf_t comp = {0};
    int zok = 0;
    memset(&z, 0, sizeof(z));
    if (s->deflate.enabled)
        zok = deflateInit2(&z, 6, Z_DEFLATED, -(int)s->deflate.client_max_window_bits, 8,
                           Z_DEFAULT_STRATEGY) == Z_OK;
    while (i + 3 <= n) {
        uint8_t op = d[i], how = d[i + 1];
        size_t len = d[i + 2];
        i += 3;
        if (len == 255 && i + 2 <= n) {
            len = (size_t)d[i] << 8 | d[i + 1];
            i += 2;
        }
        if (len > n - PS_MIN(i, n))
            len = n - PS_MIN(i, n);
        const uint8_t *p = d + PS_MIN(i, n);
        i += len;
        if (op == 0xff) {
            if (sc->nactions < MAX_ACTIONS)
                sc->actions[sc->nactions++] = (action_t){.at = sc->wire.len,
                                                         .kind = (uint8_t)(how & 7),
                                                         .flags = (uint8_t)(how >> 3),
                                                         .off = (size_t)(p - d),
                                                         .len = len};
            continue;
        }
        int fin = op >> 7, compress = (how & 2) && zok && !(op & 8);
        if (compress) {
            client_compress(&z, p, len, fin, &comp);
            if (s->deflate.client_no_context_takeover && fin)
                deflateReset(&z);
            put_frame(&sc->wire, op, !(how & 1), (const uint8_t *)comp.data, comp.len, seed++);
        } else {
            put_frame(&sc->wire, op, !(how & 1), p, len, seed++);
        }
    }
    if (zok)
        deflateEnd(&z);
    ps_buf_free(&comp);
}

/* ---- checking what comes out ------------------------------------------------------ */

/* Strict UTF-8, decoded here independently of ws.c. */
static int valid_utf8(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t c = p[i], cp;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07;
        } else {
            return 0;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (p[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int peer_close_code(unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

typedef struct {
    const setup_t *setup;
    uint64_t digest;
    int closed; /* a close event was taken */
} run_t;

static void check_event(run_t *r, const ps_ws_event_t *ev)
{
    INVARIANT(!r->closed); /* nothing after a close */
    uint64_t max = r->setup->lim.max_message;
    switch (ev->type) {
    case PS_WS_EV_TEXT:
        INVARIANT(valid_utf8((const uint8_t *)ev->data.base, ev->data.len));
        /* fall through */
    case PS_WS_EV_BINARY:
        INVARIANT(max == 0 || ev->data.len <= max);
        break;
    case PS_WS_EV_CLOSE:
        r->closed = 1;
        if (ev->origin == PS_WS_CLOSE_PEER) {
            INVARIANT(ev->code == 1005 || peer_close_code(ev->code));
            INVARIANT(ev->code != 1005 || ev->data.len == 0);
            INVARIANT(ev->data.len <= 123);
            INVARIANT(valid_utf8((const uint8_t *)ev->data.base, ev->data.len));
        } else if (ev->origin == PS_WS_CLOSE_FAILED) {
            INVARIANT(ev->code == 1002 || ev->code == 1007 || ev->code == 1009);
            INVARIANT(ev->data.len > 0);
        } else {
            INVARIANT(ev->origin == PS_WS_CLOSE_LOST && ev->code == 1006);
        }
        break;
    default:
        INVARIANT(!"unknown event type");
    }
    fuzz_mix_u64(&r->digest, (uint64_t)ev->type << 32 | (uint64_t)ev->origin << 16 | ev->code);
    fuzz_mix_u64(&r->digest, ev->data.len);
    fuzz_mix(&r->digest, ev->data.base, ev->data.len);
    if (ev->handle != NULL) { /* ours now: exactly the memory asked for */
        const stored_t *m = ev->handle;
        INVARIANT(r->setup->stored && ev->type == PS_WS_EV_BINARY);
        INVARIANT((const uint8_t *)ev->data.base == m->data && ev->data.len == m->len);
        storage_release(ev->handle);
    }
}

static void take_events(run_t *r, ps_ws_t *ws)
{
    ps_ws_event_t ev;
    while (ps_ws_next_event(ws, &ev))
        check_event(r, &ev);
    INVARIANT(ps_ws_queued(ws) == 0);
}

/* Feeds wire[*pos, end) the way a connection does: in pieces, taking every
 * event after each feed, until all of it is read and nothing is left
 * inside the session. */
static void feed_until(run_t *r, ps_ws_t *ws, const ps_buf_t *wire, size_t *pos, size_t end,
                       size_t piece)
{
    for (size_t guard = 0;; guard++) {
        INVARIANT(guard < 4 * (end - *pos) + 1000000);
        size_t step = piece == 0 ? end - *pos : PS_MIN(piece, end - *pos), used = 0;
        uint32_t before = ps_ws_queued(ws);
        const char *at = wire->data ? wire->data + *pos : "";
        INVARIANT(ps_ws_feed(ws, at, step, &used) == 0);
        INVARIANT(used <= step);
        INVARIANT(ps_ws_queued(ws) >= before);
        uint32_t made = ps_ws_queued(ws) - before;
        if (r->setup->lim.max_queue)
            INVARIANT(made <= r->setup->lim.max_queue); /* reading stopped at the bound */
        *pos += used;
        take_events(r, ws);
        if (*pos == end && made == 0 && used == step)
            return;
    }
}

/* A server action. The messages sent are recorded for the output check. */
static void act(ps_ws_t *ws, const action_t *a, const uint8_t *input, ps_buf_t *sent)
{
    const char *p = (const char *)input + a->off;
    int rc;
    switch (a->kind) {
    case 0:
    case 1: {
        int type = a->kind == 0 ? PS_WS_EV_BINARY : PS_WS_EV_TEXT;
        unsigned flags = (a->flags & 1) ? PS_WS_SEND_NO_COMPRESS : 0;
        rc = ps_ws_send(ws, type, p, a->len, flags);
        INVARIANT(rc == 0 || rc == -EPIPE);
        if (rc == 0) {
            uint64_t n = a->len;
            ps_buf_append(sent, &n, sizeof(n));
            ps_buf_append(sent, p, a->len);
        }
        break;
    }
    case 2:
        rc = ps_ws_send_ping(ws, p, a->len);
        INVARIANT(rc == 0 || rc == -EPIPE || (rc == -EINVAL && a->len > 125));
        break;
    case 3: {
        static const uint16_t codes[8] = {1000, 1001, 1011, 4000, 0, 1012, 1005, 999};
        uint16_t code = codes[a->flags & 7];
        rc = ps_ws_send_close(ws, code, p, a->len);
        INVARIANT(rc == 0 || rc == -EPIPE || rc == -EINVAL);
        if (rc == -EINVAL)
            INVARIANT(a->len > 123 || code == 1005 || code == 999 || (code == 0 && a->len));
        break;
    }
    default:
        break;
    }
}

/* Reads every frame of the output and checks it. Returns nothing; aborts
 * on a broken promise. */
static void check_output(const setup_t *s, const ps_buf_t *out, const ps_buf_t *sent)
{
    static const uint8_t none[1];
    const uint8_t *p = out->data ? (const uint8_t *)out->data : none, *end = p + out->len;
    const uint8_t *next_sent = sent->data ? (const uint8_t *)sent->data : none;
    const uint8_t *sent_end = next_sent + sent->len;
    int closed = 0, zok = 0;
    z_stream z;
    ps_buf_t plain = {0};
    memset(&z, 0, sizeof(z));
    if (s->deflate.enabled)
        zok = inflateInit2(&z, -(int)PS_MAX(9, s->deflate.server_max_window_bits)) == Z_OK;
    while (p < end) {
        INVARIANT(!closed); /* nothing after our close */
        INVARIANT(end - p >= 2);
        uint8_t b0 = p[0], b1 = p[1];
        uint64_t n = b1 & 0x7f;
        size_t hl = 2;
        INVARIANT(!(b1 & 0x80)); /* servers do not mask */
        INVARIANT(b0 & 0x80);    /* we never fragment */
        if (n == 126) {
            INVARIANT(end - p >= 4);
            n = (uint64_t)p[2] << 8 | p[3];
            INVARIANT(n >= 126);
            hl = 4;
        } else if (n == 127) {
            INVARIANT(end - p >= 10);
            n = 0;
            for (int i = 0; i < 8; i++)
                n = n << 8 | p[2 + i];
            INVARIANT(n >= 65536 && !(n >> 63));
            hl = 10;
        }
        INVARIANT((uint64_t)(end - p) - hl >= n);
        const uint8_t *pay = p + hl;
        uint8_t op = b0 & 15, rsv = (b0 >> 4) & 7;
        INVARIANT(op == 1 || op == 2 || op == 8 || op == 9 || op == 10);
        INVARIANT(rsv == 0 || (rsv == 4 && s->deflate.enabled && (op == 1 || op == 2)));
        if (op & 8)
            INVARIANT(n <= 125);
        if (op == 8) {
            closed = 1;
            INVARIANT(n != 1);
            if (n >= 2)
                INVARIANT(peer_close_code((unsigned)pay[0] << 8 | pay[1]));
        }
        if (op == 1 || op == 2) {
            /* one of the messages sent, in order */
            uint64_t want;
            INVARIANT(sent_end - next_sent >= 8);
            memcpy(&want, next_sent, 8);
            next_sent += 8;
            const uint8_t *msg = pay;
            size_t got = (size_t)n;
            if (rsv == 4) {
                INVARIANT(zok);
                ps_buf_reset(&plain);
                ps_buf_t in = {0};
                ps_buf_append(&in, pay, (size_t)n);
                ps_buf_append(&in, "\0\0\xff\xff", 4);
                z.next_in = (Bytef *)in.data;
                z.avail_in = (uInt)in.len;
                for (;;) {
                    ps_buf_reserve(&plain, 4096);
                    z.next_out = (Bytef *)plain.data + plain.len;
                    z.avail_out = 4096;
                    int zr = inflate(&z, Z_SYNC_FLUSH);
                    plain.len += 4096 - z.avail_out;
                    INVARIANT(zr == Z_OK || zr == Z_BUF_ERROR);
                    if (z.avail_out > 0 && (z.avail_in == 0 || zr == Z_BUF_ERROR))
                        break;
                }
                ps_buf_free(&in);
                if (s->deflate.server_no_context_takeover)
                    inflateReset(&z);
                msg = (const uint8_t *)plain.data;
                got = plain.len;
            }
            INVARIANT(got == want && (size_t)(sent_end - next_sent) >= want);
            INVARIANT(want == 0 || memcmp(msg, next_sent, want) == 0);
            next_sent += want;
        }
        p = pay + n;
    }
    INVARIANT(next_sent == sent_end); /* every message sent was written */
    if (zok)
        inflateEnd(&z);
    ps_buf_free(&plain);
}

/* One run; returns its digest. */
static uint64_t run(const setup_t *s, const script_t *sc, const uint8_t *input, size_t piece)
{
    ps_ws_t ws;
    run_t r = {.setup = s, .digest = 14695981039346656037ULL};
    ps_buf_t out = {0}, sent = {0};
    size_t pos = 0;
    INVARIANT(ps_ws_init(&ws, &s->lim, s->deflate.enabled ? &s->deflate : NULL) == 0);
    stored_live = stored_calls = 0;
    if (s->stored)
        ps_ws_set_storage(&ws, &storage);
    for (size_t i = 0; i <= sc->nactions; i++) {
        size_t at = i < sc->nactions ? sc->actions[i].at : sc->wire.len;
        feed_until(&r, &ws, &sc->wire, &pos, at, piece);
        if (i < sc->nactions)
            act(&ws, &sc->actions[i], input, &sent);
        /* the connection writes what there is */
        ps_buf_t *o = ps_ws_output(&ws);
        if (ps_buf_size(o) > 0)
            ps_buf_append(&out, ps_buf_head(o), ps_buf_size(o));
        ps_buf_reset(o);
    }
    INVARIANT(pos == sc->wire.len);
    int was_done = ps_ws_done(&ws), had_close = r.closed;
    INVARIANT(ps_ws_eof(&ws) == 0);
    take_events(&r, &ws);
    INVARIANT(r.closed);               /* one close event in all */
    INVARIANT(!was_done || had_close); /* done means the close was reported */
    INVARIANT(ps_ws_done(&ws) && !ps_ws_want_read(&ws));
    INVARIANT(ps_buf_size(ps_ws_output(&ws)) == 0); /* nothing written after the end */
    check_output(s, &out, &sent);
    fuzz_mix(&r.digest, out.data, out.len);
    ps_ws_free(&ws);
    INVARIANT(stored_live == 0); /* every handle taken or released */
    ps_buf_free(&out);
    ps_buf_free(&sent);
    return r.digest;
}

/* ---- the handshake ------------------------------------------------------------------- */

static int inside(ps_slice_t part, const uint8_t *d, size_t n)
{
    return (const uint8_t *)part.base >= d && (const uint8_t *)part.base + part.len <= d + n;
}

/* The input read as header lines ("name: value") of a GET request: the
 * checks' answer keeps its promises, an accepted offer's response is an
 * offer we accept again with no larger windows, and the 101 is written. */
static void check_handshake(const uint8_t *d, size_t n)
{
    ps_header_t h[16];
    uint32_t nh = 0;
    size_t i = 0;
    while (i < n && nh < 16) {
        const uint8_t *nl = memchr(d + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - d) : n;
        const uint8_t *colon = memchr(d + i, ':', e - i);
        size_t c = colon ? (size_t)(colon - d) : e, v = c < e ? c + 1 : e;
        while (v < e && d[v] == ' ')
            v++;
        h[nh].name = (ps_slice_t){(const char *)d + i, c - i};
        h[nh].value = (ps_slice_t){(const char *)d + v, e - v};
        nh++;
        i = e + 1;
    }
    ps_request_t req = {
        .headers = h, .nheaders = nh, .method_id = HTTP_GET, .http_minor = 1, .content_length = -1};
    ps_ws_handshake_t hs;
    int rc = ps_ws_check_request(&req, &hs);
    INVARIANT(rc == PS_WS_HS_OK || rc == PS_WS_HS_NONE || rc == PS_WS_HS_BAD_REQUEST ||
              rc == PS_WS_HS_BAD_VERSION);
    INVARIANT((rc == PS_WS_HS_BAD_REQUEST || rc == PS_WS_HS_BAD_VERSION) == (hs.reason != NULL));
    if (rc == PS_WS_HS_OK) {
        INVARIANT(hs.key.len == 24 && inside(hs.key, d, n));
        INVARIANT(hs.nsubprotocols <= PS_WS_MAX_SUBPROTOCOLS);
        for (uint32_t k = 0; k < hs.nsubprotocols; k++)
            INVARIANT(hs.subprotocols[k].len > 0 && inside(hs.subprotocols[k], d, n));
    }
    ps_ws_deflate_config_t cfg = PS_WS_DEFLATE_DEFAULTS;
    ps_ws_deflate_t got, again;
    if (ps_ws_negotiate_deflate(&req, &cfg, &got)) {
        INVARIANT(got.enabled);
        INVARIANT(got.server_max_window_bits >= 9 && got.server_max_window_bits <= 15);
        INVARIANT(got.client_max_window_bits >= 8 && got.client_max_window_bits <= 15);
        char resp[PS_WS_DEFLATE_RESPONSE_MAX];
        size_t len = ps_ws_deflate_response(&got, resp);
        INVARIANT(len <= sizeof(resp) && len >= 18 && memcmp(resp, "permessage-deflate", 18) == 0);
        ps_header_t offer = {PS_SLICE_LIT("Sec-WebSocket-Extensions"), {resp, len}};
        ps_request_t req2 = {.headers = &offer,
                             .nheaders = 1,
                             .method_id = HTTP_GET,
                             .http_minor = 1,
                             .content_length = -1};
        INVARIANT(ps_ws_negotiate_deflate(&req2, &cfg, &again));
        INVARIANT(again.server_max_window_bits <= got.server_max_window_bits);
        INVARIANT(again.client_max_window_bits <= got.client_max_window_bits);
        INVARIANT(again.server_no_context_takeover == got.server_no_context_takeover);
        INVARIANT(again.client_no_context_takeover == got.client_no_context_takeover);
    }
    if (rc == PS_WS_HS_OK) {
        ps_buf_t out = {0};
        ps_slice_t proto = hs.nsubprotocols ? hs.subprotocols[0] : (ps_slice_t){"", 0};
        INVARIANT(ps_ws_write_accept(&out, hs.key, proto, &got, NULL, 0, NULL, 0) == 0);
        INVARIANT(out.len > 40 && memcmp(out.data, "HTTP/1.1 101 ", 13) == 0);
        INVARIANT(memcmp(out.data + out.len - 4, "\r\n\r\n", 4) == 0);
        ps_buf_free(&out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_t s;
    script_t sc;
    if (size < 3)
        return 0;
    read_setup(data, &s);
    memset(&sc, 0, sizeof(sc));
    if (s.scripted)
        read_script(data + 3, size - 3, &s, &sc);
    else
        ps_buf_append(&sc.wire, data + 3, size - 3);
    for (size_t i = 0; i < sc.nactions; i++)
        sc.actions[i].off += 3;
    uint64_t whole = run(&s, &sc, data, 0);
    uint64_t split = run(&s, &sc, data, s.piece ? s.piece : 1);
    /* zlib's fast path lets a distance reach past a window under 15 bits
     * into output of the same inflate() call, its slow path does not: a
     * client that goes past the window it agreed to may be decoded or
     * refused (1007) depending on how its bytes arrive. */
    if (!s.deflate.enabled || s.deflate.client_max_window_bits == 15)
        INVARIANT(whole == split);
    ps_buf_free(&sc.wire);
    check_handshake(data + 3, size - 3);
    return 0;
}
