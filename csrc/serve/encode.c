/* Response compression: see encode.h. */
#include "serve/encode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/common.h"
#include "codec/compress.h"
#include "codec/encoding.h"
#include "serve/exchange.h"
#include "serve/wstate.h"

struct ps_encoder {
    ps_compressor_t *c;
    ps_buf_t out;
    int64_t left;        /* input still to come of a known Content-Length; -1: unknown */
    uint64_t in;         /* input taken so far */
    uint64_t fail_after; /* cfg's, for tests */
    ps_coding_t coding;
};

/* Output kept between pieces; a larger buffer is given back. */
#define OUT_KEEP (64 * 1024)
/* Bytes of a file read and compressed at a time. */
#define FILE_PIECE (64 * 1024)

/* What the response's head says, read once. */
typedef struct {
    int status;
    int64_t length; /* Content-Length, -1: none (or not a number) */
    ps_slice_t type;
    const ps_header_t *etag, *vary;
    unsigned has_encoding : 1, has_range : 1, no_transform : 1, varies : 1;
} head_t;

/* ---- deciding ---------------------------------------------------------- */

static int ieq_n(const char *a, size_t n, const char *lit, size_t lit_len)
{
    return n == lit_len && strncasecmp(a, lit, n) == 0;
}

/* 1 when list (a comma-separated field value) holds token tok, any case. */
static int list_has(ps_slice_t list, const char *tok)
{
    size_t tl = strlen(tok), i = 0;
    while (i < list.len) {
        while (i < list.len && (list.base[i] == ' ' || list.base[i] == '\t' || list.base[i] == ','))
            i++;
        size_t start = i;
        while (i < list.len && list.base[i] != ',' && list.base[i] != ';' && list.base[i] != '=' &&
               list.base[i] != ' ' && list.base[i] != '\t')
            i++;
        if (ieq_n(list.base + start, i - start, tok, tl))
            return 1;
        while (i < list.len && list.base[i] != ',')
            i++;
    }
    return 0;
}

int ps_encode_type_ok(const ps_encode_cfg_t *cfg, ps_slice_t type)
{
    size_t n = 0;
    while (n < type.len && type.base[n] != ';' && type.base[n] != ' ' && type.base[n] != '\t')
        n++;
    const char *t = type.base;
    if (n == 0 || ieq_n(t, n, "text/event-stream", 17))
        return 0; /* a stream of events is never held back nor compressed */
    for (uint32_t i = 0; i < cfg->ntypes; i++) {
        const char *p = cfg->types[i];
        size_t pl = strlen(p);
        if (pl >= 2 && p[pl - 2] == '/' && p[pl - 1] == '*') {
            if (n > pl - 1 && strncasecmp(t, p, pl - 1) == 0)
                return 1;
        } else if (p[0] == '*') {
            if (n > pl - 1 && strncasecmp(t + n - (pl - 1), p + 1, pl - 1) == 0)
                return 1;
        } else if (ieq_n(t, n, p, pl)) {
            return 1;
        }
    }
    return 0;
}

static int64_t decimal(ps_slice_t v)
{
    if (v.len == 0 || v.len > 18)
        return -1;
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.base[i] < '0' || v.base[i] > '9')
            return -1;
        n = n * 10 + (v.base[i] - '0');
    }
    return n;
}

static void read_head(ps_slice_t status, const ps_header_t *h, size_t n, head_t *hd)
{
    memset(hd, 0, sizeof(*hd));
    hd->length = -1;
    hd->status = status.len >= 3 ? (status.base[0] - '0') * 100 + (status.base[1] - '0') * 10 +
                                       (status.base[2] - '0')
                                 : 0;
    for (size_t i = 0; i < n; i++) {
        ps_slice_t name = h[i].name;
        if (PS_SLICE_IEQ(name, "content-type"))
            hd->type = h[i].value;
        else if (PS_SLICE_IEQ(name, "content-length"))
            hd->length = decimal(h[i].value);
        else if (PS_SLICE_IEQ(name, "content-encoding"))
            hd->has_encoding = 1;
        else if (PS_SLICE_IEQ(name, "content-range"))
            hd->has_range = 1;
        else if (PS_SLICE_IEQ(name, "cache-control"))
            hd->no_transform |= list_has(h[i].value, "no-transform");
        else if (PS_SLICE_IEQ(name, "etag"))
            hd->etag = &h[i];
        else if (PS_SLICE_IEQ(name, "vary")) {
            hd->vary = hd->vary ? hd->vary : &h[i];
            hd->varies |= list_has(h[i].value, "accept-encoding") || list_has(h[i].value, "*");
        }
    }
}

/* 1 when the response, as its head says, is one to compress for a client
 * that accepts it (and so varies with Accept-Encoding). */
static int compressible(const ps_exchange_t *x, const head_t *hd, size_t len, int forced)
{
    const ps_encode_cfg_t *cfg = x->compress;
    if (x->req->is_head || hd->status < 200 || hd->status == 204 || hd->status == 206 ||
        hd->status == 304 || hd->has_encoding || hd->has_range || hd->no_transform ||
        hd->type.base == NULL || !ps_encode_type_ok(cfg, hd->type))
        return 0;
    if (hd->length >= 0) {
        if (x->file_follows && (uint64_t)hd->length >= PS_ENCODE_FILE_MAX)
            return 0;
        return hd->length > 0 && (forced || (uint64_t)hd->length >= cfg->min_size);
    }
    /* Streamed without a length: decided on its first piece (a trickle of
     * small flushes is sent as it comes). */
    return len > 0 && (forced || len >= cfg->min_size);
}

/* ---- the head ---------------------------------------------------------- */

/* x's head rewritten into hs (n + 2 entries) and text (room for the ETag's
 * and Vary's values plus 32): Vary gets Accept-Encoding, and with coding
 * other than identity Content-Length goes, a strong ETag turns weak and
 * Content-Encoding is added. Returns the number of fields. */
static size_t rewrite_head(const ps_header_t *h, size_t n, const head_t *hd, ps_coding_t coding,
                           ps_header_t *hs, char *text)
{
    size_t m = 0;
    int coded = coding != PS_CODING_IDENTITY;
    for (size_t i = 0; i < n; i++) {
        if (coded && PS_SLICE_IEQ(h[i].name, "content-length"))
            continue;
        hs[m] = h[i];
        if (&h[i] == hd->vary && !hd->varies) {
            memcpy(text, h[i].value.base, h[i].value.len);
            memcpy(text + h[i].value.len, ", Accept-Encoding", 17);
            hs[m].value = (ps_slice_t){text, h[i].value.len + 17};
            text += hs[m].value.len;
        } else if (coded && &h[i] == hd->etag && h[i].value.len > 0 && h[i].value.base[0] == '"') {
            memcpy(text, "W/", 2);
            memcpy(text + 2, h[i].value.base, h[i].value.len);
            hs[m].value = (ps_slice_t){text, h[i].value.len + 2};
            text += hs[m].value.len;
        }
        m++;
    }
    if (hd->vary == NULL)
        hs[m++] = (ps_header_t){PS_SLICE_LIT("Vary"), PS_SLICE_LIT("Accept-Encoding")};
    if (coded) {
        const char *name = ps_coding_name(coding);
        hs[m++] = (ps_header_t){PS_SLICE_LIT("Content-Encoding"), {name, strlen(name)}};
    }
    return m;
}

/* ---- compressing ------------------------------------------------------- */

/* Compresses len bytes into e->out: the end of the stream once a known
 * length is reached (or with finish), else a flush for a streamed
 * response. Extra bytes past a known length are dropped, as the protocols
 * drop them. Returns 0, -ENOMEM or -EIO. */
static int squeeze(ps_encoder_t *e, const char *data, size_t len, int finish)
{
    ps_compress_op_t op = PS_COMPRESS_FLUSH;
    if (e->left == 0)
        return 0; /* finished already */
    if (e->left > 0) {
        len = (size_t)PS_MIN((uint64_t)len, (uint64_t)e->left);
        e->left -= (int64_t)len;
        op = e->left == 0 ? PS_COMPRESS_FINISH : PS_COMPRESS_WRITE;
    }
    if (finish) {
        op = PS_COMPRESS_FINISH;
        e->left = 0;
    }
    e->in += len;
    if (e->fail_after && e->in >= e->fail_after)
        return -EIO;
    return ps_compressor_write(e->c, data, len, op, &e->out);
}

static void encoder_free(ps_encoder_t *e)
{
    ps_compressor_free(e->c);
    ps_buf_free(&e->out);
    free(e);
}

void ps_encode_release(ps_exchange_t *x)
{
    if (x->encoder == NULL)
        return;
    encoder_free(x->encoder);
    x->encoder = NULL;
}

/* A compressor failed: the response cannot go on. It is aborted (the
 * connection closes, or the HTTP/2 stream is reset), the layer hears of it
 * as a rejection (it logs one line) and the caller gets -EPIPE, as for a
 * client gone. */
static int fail(ps_exchange_t *x, int err)
{
    const ps_handler_t *handler = x->worker->handler;
    ps_encode_release(x);
    x->ops->abort(x);
    if (handler->on_rejected)
        handler->on_rejected(x, 500,
                             err == -ENOMEM ? "response compression ran out of memory"
                                            : "response compression failed");
    return -EPIPE;
}

static ps_encoder_t *encoder_new(const ps_encode_cfg_t *cfg, ps_coding_t coding, int64_t length)
{
    ps_encoder_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    if ((e->c = ps_compressor_new(coding, cfg->level)) == NULL) {
        free(e);
        return NULL;
    }
    e->left = length;
    e->coding = coding;
    e->fail_after = cfg->fail_after;
    return e;
}

/* Hands e->out to the protocol (nothing when empty) and empties it. */
static int emit(ps_exchange_t *x, int blocking)
{
    ps_encoder_t *e = x->encoder;
    if (e->out.len == 0)
        return PS_WRITE_DONE;
    int rc = blocking ? x->ops->write_blocking(x, e->out.data, e->out.len)
                      : x->ops->write(x, e->out.data, e->out.len);
    ps_buf_reset(&e->out);
    ps_buf_shrink(&e->out, OUT_KEEP);
    return rc;
}

/* The request's Accept-Encoding fields, all of them as one list. */
static void read_accept(const ps_request_t *r, ps_accept_t *a)
{
    ps_accept_init(a);
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (PS_SLICE_IEQ(r->headers[i].name, "accept-encoding"))
            ps_accept_parse(a, r->headers[i].value);
}

/* Starts the response with its head rewritten (hs: n + 2 fields and the
 * text rewrite_head needs) and, for a coding, the first piece compressed.
 * Returns as ps_encode_start. */
static int start_coded(ps_exchange_t *x, ps_slice_t status, ps_header_t *hs, size_t m,
                       ps_coding_t coding, int64_t length, const char *body, size_t len)
{
    if (coding == PS_CODING_IDENTITY)
        return x->ops->start(x, status, hs, m, body, len);
    ps_encoder_t *e = encoder_new(x->compress, coding, length);
    if (e == NULL)
        return fail(x, -ENOMEM);
    x->encoder = e;
    int rc = squeeze(e, body, len, 0);
    if (rc < 0)
        return fail(x, rc);
    x->file_follows = 0; /* the file's bytes come as compressed writes */
    /* The whole body came with the head (most views): its compressed length is
     * known, so it goes out with a Content-Length rather than chunked. hs has
     * room: rewrite_head took the Content-Length this length came from. */
    char digits[24];
    if (e->left == 0 && length >= 0) {
        int k = snprintf(digits, sizeof(digits), "%zu", e->out.len);
        hs[m++] = (ps_header_t){PS_SLICE_LIT("Content-Length"), {digits, (size_t)k}};
    }
    rc = x->ops->start(x, status, hs, m, e->out.data, e->out.len);
    ps_buf_reset(&e->out);
    ps_buf_shrink(&e->out, OUT_KEEP);
    if (rc < 0) /* nothing started: what the layer does next is not compressed */
        ps_encode_release(x);
    return rc;
}

int ps_encode_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                    const char *body, size_t len)
{
    head_t hd;
    ps_accept_t a;
    ps_encode_release(x); /* (a response that never ended) */
    read_head(status, h, n, &hd);
    read_accept(x->req, &a);
    /* A client that refuses identity gets even a small body compressed. */
    int forced = ps_accept_weight(&a, PS_CODING_IDENTITY) == 0;
    if (!compressible(x, &hd, len, forced))
        return x->ops->start(x, status, h, n, body, len);
    /* Between equal weights zstd first: at its level 3 it comes out as small as
     * brotli's 4 on web responses for about a quarter of the CPU (precompressed
     * static files, paid for once, prefer br: static.c). */
    static const ps_coding_t order[] = {PS_CODING_ZSTD, PS_CODING_BR, PS_CODING_GZIP};
    ps_coding_t coding = ps_accept_choose_by(&a, x->compress->offered, order, 3);
    if (coding == PS_CODING_NONE)
        coding = PS_CODING_IDENTITY; /* nothing acceptable: identity beats a 406 */
    size_t text_len = 32 + (hd.etag ? hd.etag->value.len : 0) + (hd.vary ? hd.vary->value.len : 0);
    ps_header_t *hs = malloc((n + 2) * sizeof(*hs) + text_len);
    if (hs == NULL)
        return -ENOMEM;
    size_t m = rewrite_head(h, n, &hd, coding, hs, (char *)(hs + n + 2));
    int rc = start_coded(x, status, hs, m, coding, hd.length, body, len);
    free(hs);
    return rc;
}

int ps_encode_write(ps_exchange_t *x, const char *data, size_t len, int blocking)
{
    if (len == 0) /* a flush of what is queued: nothing to compress */
        return blocking ? x->ops->write_blocking(x, data, len) : x->ops->write(x, data, len);
    int rc = squeeze(x->encoder, data, len, 0);
    return rc < 0 ? fail(x, rc) : emit(x, blocking);
}

int ps_encode_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count)
{
    char piece[FILE_PIECE];
    int rc = PS_WRITE_DONE;
    while (count > 0) {
        ssize_t got = pread(fd, piece, (size_t)PS_MIN(count, (uint64_t)sizeof(piece)), offset);
        if (got <= 0) /* a file cut short: the response cannot be completed */
            return fail(x, -EIO);
        offset += got;
        count -= (uint64_t)got;
        if ((rc = squeeze(x->encoder, piece, (size_t)got, 0)) < 0)
            return fail(x, rc);
        if ((rc = emit(x, 0)) < 0)
            return rc;
    }
    return rc;
}

/* Ends the compressed stream and hands its last bytes to the protocol
 * (a client gone by then is the end's business). Returns 0, or -EPIPE
 * when the compressor failed and the response was aborted. */
static int finish(ps_exchange_t *x)
{
    int rc = squeeze(x->encoder, NULL, 0, 1);
    if (rc < 0)
        return fail(x, rc);
    emit(x, 0);
    ps_encode_release(x);
    return 0;
}

int ps_encode_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n)
{
    if (finish(x) < 0)
        return 0; /* aborted: nothing more to end */
    return x->ops->end_with_trailers(x, h, n);
}

void ps_encode_end(ps_exchange_t *x)
{
    if (finish(x) == 0)
        x->ops->end(x);
}

void ps_encode_abort(ps_exchange_t *x)
{
    ps_encode_release(x);
    x->ops->abort(x);
}
