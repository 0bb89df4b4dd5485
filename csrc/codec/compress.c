/* Compression over libbrotlienc, libzstd, zlib, libdeflate and ISA-L: see
 * compress.h. */
#include "codec/compress.h"

#include <brotli/encode.h>
#include <errno.h>
#include <isa-l/igzip_lib.h>
#include <libdeflate.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

#include "base/common.h"

struct ps_compressor {
    ps_coding_t coding;
    int level;
    int started; /* the streaming state below exists */
    int finished;
    union {
        BrotliEncoderState *br;
        ZSTD_CCtx *zstd;
        z_stream gz;
    } u;
};

/* Room asked of the buffer before each library call. */
#define OUT_STEP 16384
/* Brotli's window: 4 MiB at most, enough for web responses, bounded memory. */
#define LGWIN 22

void ps_compress_levels(ps_coding_t coding, int *lo, int *hi)
{
    switch (coding) {
    case PS_CODING_BR:
        *lo = BROTLI_MIN_QUALITY;
        *hi = BROTLI_MAX_QUALITY;
        break;
    case PS_CODING_ZSTD:
        *lo = 1;
        *hi = 19; /* 20-22 ("ultra") need window sizes no response should pin */
        break;
    default:
        *lo = 1;
        *hi = 9;
        break;
    }
}

static int clamp_level(ps_coding_t coding, int level)
{
    static const int defaults[PS_CODING_COUNT] = {0, 4, 3, 5};
    int lo, hi;
    if (level == PS_COMPRESS_LEVEL_DEFAULT)
        return defaults[coding];
    ps_compress_levels(coding, &lo, &hi);
    return level < lo ? lo : level > hi ? hi : level;
}

/* Nothing is allocated for the library until the first write: most responses
 * arrive whole (one FINISH) and take the one-shot path, which needs no stream. */
ps_compressor_t *ps_compressor_new(ps_coding_t coding, int level)
{
    if (coding != PS_CODING_BR && coding != PS_CODING_ZSTD && coding != PS_CODING_GZIP)
        return NULL;
    ps_compressor_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->coding = coding;
    c->level = clamp_level(coding, level);
    return c;
}

static int start_stream(ps_compressor_t *c)
{
    if (c->coding == PS_CODING_BR) {
        if ((c->u.br = BrotliEncoderCreateInstance(NULL, NULL, NULL)) == NULL)
            return -ENOMEM;
        BrotliEncoderSetParameter(c->u.br, BROTLI_PARAM_QUALITY, (uint32_t)c->level);
        BrotliEncoderSetParameter(c->u.br, BROTLI_PARAM_LGWIN, LGWIN);
    } else if (c->coding == PS_CODING_ZSTD) {
        if ((c->u.zstd = ZSTD_createCCtx()) == NULL)
            return -ENOMEM;
        if (ZSTD_isError(ZSTD_CCtx_setParameter(c->u.zstd, ZSTD_c_compressionLevel, c->level)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(c->u.zstd, ZSTD_c_checksumFlag, 0))) {
            ZSTD_freeCCtx(c->u.zstd);
            return -EIO;
        }
    } else {
        /* windowBits 15 + 16: the gzip wrapper; memLevel 8 as zlib's default. */
        int rc = deflateInit2(&c->u.gz, c->level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
        if (rc != Z_OK)
            return rc == Z_MEM_ERROR ? -ENOMEM : -EIO;
    }
    c->started = 1;
    return 0;
}

/* ---- one-shot: the whole body in one call ------------------------------------
 * A response that arrives whole is compressed in one library call with a context
 * kept per thread and per level, instead of a stream set up and torn down per
 * response. On a 20 KB JSON body, instructions per call: zlib-6 1.56M (3,513
 * bytes), libdeflate-6 1.20M and -5 1.07M (3,276 and 3,289 bytes), igzip-1
 * 0.25M (3,835 bytes). So gzip levels 1-3 go through ISA-L's igzip (smaller
 * and cheaper than zlib's and libdeflate's low levels), 4-9 through libdeflate;
 * zstd through a reused ZSTD_CCtx, brotli through its one-call encoder. The
 * contexts live as long as the thread. */

/* By gzip level: 4-9, and 1-3 when igzip's output did not fit its room. */
static __thread struct libdeflate_compressor *deflaters[10];
static __thread struct isal_zstream *igzips[ISAL_DEF_MAX_LEVEL + 1]; /* by level 1-3 */
static __thread ZSTD_CCtx *zstd_cctx;

static const uint32_t igzip_level_buf[ISAL_DEF_MAX_LEVEL + 1] = {
    0, ISAL_DEF_LVL1_DEFAULT, ISAL_DEF_LVL2_DEFAULT, ISAL_DEF_LVL3_DEFAULT};

/* igzip's stateless call: the body in, a whole gzip member out; 1 when the
 * output did not fit (the caller then takes libdeflate, whose bound is exact). */
static int oneshot_igzip(int level, const void *in, size_t len, ps_buf_t *out)
{
    struct isal_zstream *s = igzips[level];
    if (s == NULL) {
        void *mem;
        if (posix_memalign(&mem, 64, sizeof(*s) + igzip_level_buf[level]) != 0)
            return -ENOMEM;
        s = igzips[level] = mem;
    }
    size_t room = len + len / 16 + 1024; /* stored blocks and headers for the worst case */
    if (ps_buf_reserve(out, room) < 0)
        return -ENOMEM;
    isal_deflate_stateless_init(s);
    s->level = (uint32_t)level;
    s->level_buf = (uint8_t *)(s + 1);
    s->level_buf_size = igzip_level_buf[level];
    s->gzip_flag = IGZIP_GZIP;
    s->end_of_stream = 1;
    s->flush = NO_FLUSH;
    s->next_in = (uint8_t *)(uintptr_t)in;
    s->avail_in = (uint32_t)len;
    s->next_out = (uint8_t *)out->data + out->len;
    s->avail_out = (uint32_t)PS_MIN(room, (size_t)UINT32_MAX);
    int rc = isal_deflate_stateless(s);
    if (rc == STATELESS_OVERFLOW)
        return 1;
    if (rc != COMP_OK)
        return -EIO;
    out->len += s->total_out;
    return 0;
}

static int oneshot_gzip(int level, const void *in, size_t len, ps_buf_t *out)
{
    int rc;
    if (level <= ISAL_DEF_MAX_LEVEL && (rc = oneshot_igzip(level, in, len, out)) <= 0)
        return rc;
    struct libdeflate_compressor *d = deflaters[level];
    if (d == NULL && (d = deflaters[level] = libdeflate_alloc_compressor(level)) == NULL)
        return -ENOMEM;
    size_t bound = libdeflate_gzip_compress_bound(d, len);
    if (ps_buf_reserve(out, bound) < 0)
        return -ENOMEM;
    size_t n = libdeflate_gzip_compress(d, in, len, out->data + out->len, bound);
    if (n == 0)
        return -EIO; /* cannot happen with the bound's room */
    out->len += n;
    return 0;
}

static int oneshot_zstd(int level, const void *in, size_t len, ps_buf_t *out)
{
    if (zstd_cctx == NULL && (zstd_cctx = ZSTD_createCCtx()) == NULL)
        return -ENOMEM;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_checksumFlag, 0)))
        return -EIO;
    size_t bound = ZSTD_compressBound(len);
    if (ps_buf_reserve(out, bound) < 0)
        return -ENOMEM;
    size_t n = ZSTD_compress2(zstd_cctx, out->data + out->len, bound, in, len);
    if (ZSTD_isError(n)) {
        ZSTD_CCtx_reset(zstd_cctx, ZSTD_reset_session_only);
        return -EIO;
    }
    out->len += n;
    return 0;
}

static int oneshot_br(int level, const void *in, size_t len, ps_buf_t *out)
{
    size_t bound = BrotliEncoderMaxCompressedSize(len);
    if (bound == 0 || ps_buf_reserve(out, bound) < 0)
        return -ENOMEM;
    size_t n = bound;
    if (!BrotliEncoderCompress(level, LGWIN, BROTLI_MODE_GENERIC, len, in, &n,
                               (uint8_t *)out->data + out->len))
        return -EIO;
    out->len += n;
    return 0;
}

static int oneshot(ps_compressor_t *c, const void *in, size_t len, ps_buf_t *out)
{
    if (c->coding == PS_CODING_BR)
        return oneshot_br(c->level, in, len, out);
    if (c->coding == PS_CODING_ZSTD)
        return oneshot_zstd(c->level, in, len, out);
    return oneshot_gzip(c->level, in, len, out);
}

static int write_br(ps_compressor_t *c, const uint8_t *in, size_t len, ps_compress_op_t op,
                    ps_buf_t *out)
{
    BrotliEncoderOperation bop = op == PS_COMPRESS_FINISH  ? BROTLI_OPERATION_FINISH
                                 : op == PS_COMPRESS_FLUSH ? BROTLI_OPERATION_FLUSH
                                                           : BROTLI_OPERATION_PROCESS;
    for (;;) {
        if (ps_buf_reserve(out, OUT_STEP) < 0)
            return -ENOMEM;
        size_t avail_out = out->cap - out->len;
        uint8_t *next_out = (uint8_t *)out->data + out->len;
        if (!BrotliEncoderCompressStream(c->u.br, bop, &len, &in, &avail_out, &next_out, NULL))
            return -EIO;
        out->len = (size_t)((char *)next_out - out->data);
        int more = BrotliEncoderHasMoreOutput(c->u.br);
        if (len == 0 && !more && (op != PS_COMPRESS_FINISH || BrotliEncoderIsFinished(c->u.br)))
            return 0;
    }
}

static int write_zstd(ps_compressor_t *c, const void *in, size_t len, ps_compress_op_t op,
                      ps_buf_t *out)
{
    ZSTD_EndDirective end = op == PS_COMPRESS_FINISH  ? ZSTD_e_end
                            : op == PS_COMPRESS_FLUSH ? ZSTD_e_flush
                                                      : ZSTD_e_continue;
    ZSTD_inBuffer input = {in, len, 0};
    for (;;) {
        if (ps_buf_reserve(out, OUT_STEP) < 0)
            return -ENOMEM;
        ZSTD_outBuffer output = {out->data + out->len, out->cap - out->len, 0};
        size_t left = ZSTD_compressStream2(c->u.zstd, &output, &input, end);
        if (ZSTD_isError(left))
            return -EIO;
        out->len += output.pos;
        /* continue: done once the input is taken; flush and end: once nothing is left. */
        if (end == ZSTD_e_continue ? input.pos == input.size : left == 0)
            return 0;
    }
}

static int write_gzip(ps_compressor_t *c, const void *in, size_t len, ps_compress_op_t op,
                      ps_buf_t *out)
{
    z_stream *z = &c->u.gz;
    int flush = op == PS_COMPRESS_FINISH  ? Z_FINISH
                : op == PS_COMPRESS_FLUSH ? Z_SYNC_FLUSH
                                          : Z_NO_FLUSH;
    z->next_in = (Bytef *)(uintptr_t)in;
    z->avail_in = (uInt)len; /* callers feed pieces far below 4 GiB */
    for (;;) {
        if (ps_buf_reserve(out, OUT_STEP) < 0)
            return -ENOMEM;
        z->next_out = (Bytef *)out->data + out->len;
        z->avail_out = (uInt)PS_MIN(out->cap - out->len, (size_t)UINT32_MAX);
        uInt before = z->avail_out;
        int rc = deflate(z, flush);
        out->len += before - z->avail_out;
        if (rc == Z_STREAM_END)
            return 0;
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            return -EIO;
        /* Done when the input is taken and deflate had room to spare (nothing pending). */
        if (z->avail_in == 0 && z->avail_out != 0 && flush != Z_FINISH)
            return 0;
    }
}

int ps_compressor_write(ps_compressor_t *c, const void *in, size_t len, ps_compress_op_t op,
                        ps_buf_t *out)
{
    if (c->finished)
        return -EIO;
    if (len > UINT32_MAX)
        return -EINVAL;
    int rc = 0;
    if (!c->started && op == PS_COMPRESS_FINISH)
        rc = oneshot(c, in, len, out);
    else if (c->started || (rc = start_stream(c)) == 0)
        rc = c->coding == PS_CODING_BR     ? write_br(c, in, len, op, out)
             : c->coding == PS_CODING_ZSTD ? write_zstd(c, in, len, op, out)
                                           : write_gzip(c, in, len, op, out);
    if (rc < 0 || op == PS_COMPRESS_FINISH)
        c->finished = 1;
    return rc;
}

void ps_compressor_free(ps_compressor_t *c)
{
    if (c == NULL)
        return;
    if (c->started && c->coding == PS_CODING_BR)
        BrotliEncoderDestroyInstance(c->u.br);
    else if (c->started && c->coding == PS_CODING_ZSTD)
        ZSTD_freeCCtx(c->u.zstd);
    else if (c->started)
        deflateEnd(&c->u.gz);
    free(c);
}
