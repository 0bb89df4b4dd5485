/* Streaming compression over libbrotlienc, libzstd and zlib: see compress.h. */
#include "codec/compress.h"

#include <brotli/encode.h>
#include <errno.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

#include "base/common.h"

struct ps_compressor {
    ps_coding_t coding;
    int finished;
    union {
        BrotliEncoderState *br;
        ZSTD_CCtx *zstd;
        z_stream gz;
    } u;
};

/* Room asked of the buffer before each library call. */
#define OUT_STEP 16384

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
    static const int defaults[PS_CODING_COUNT] = {0, 4, 3, 6};
    int lo, hi;
    if (level == PS_COMPRESS_LEVEL_DEFAULT)
        return defaults[coding];
    ps_compress_levels(coding, &lo, &hi);
    return level < lo ? lo : level > hi ? hi : level;
}

ps_compressor_t *ps_compressor_new(ps_coding_t coding, int level)
{
    if (coding != PS_CODING_BR && coding != PS_CODING_ZSTD && coding != PS_CODING_GZIP)
        return NULL;
    ps_compressor_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->coding = coding;
    level = clamp_level(coding, level);
    if (coding == PS_CODING_BR) {
        if ((c->u.br = BrotliEncoderCreateInstance(NULL, NULL, NULL)) == NULL)
            goto error;
        BrotliEncoderSetParameter(c->u.br, BROTLI_PARAM_QUALITY, (uint32_t)level);
        /* A 4 MiB window at most: enough for web responses, bounded memory. */
        BrotliEncoderSetParameter(c->u.br, BROTLI_PARAM_LGWIN, 22);
    } else if (coding == PS_CODING_ZSTD) {
        if ((c->u.zstd = ZSTD_createCCtx()) == NULL ||
            ZSTD_isError(ZSTD_CCtx_setParameter(c->u.zstd, ZSTD_c_compressionLevel, level)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(c->u.zstd, ZSTD_c_checksumFlag, 0)))
            goto error;
    } else {
        /* windowBits 15 + 16: the gzip wrapper; memLevel 8 as zlib's default. */
        if (deflateInit2(&c->u.gz, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free(c);
            return NULL;
        }
    }
    return c;
error:
    ps_compressor_free(c);
    return NULL;
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
    int rc;
    if (c->coding == PS_CODING_BR)
        rc = write_br(c, in, len, op, out);
    else if (c->coding == PS_CODING_ZSTD)
        rc = write_zstd(c, in, len, op, out);
    else
        rc = write_gzip(c, in, len, op, out);
    if (rc < 0 || op == PS_COMPRESS_FINISH)
        c->finished = 1;
    return rc;
}

void ps_compressor_free(ps_compressor_t *c)
{
    if (c == NULL)
        return;
    if (c->coding == PS_CODING_BR)
        BrotliEncoderDestroyInstance(c->u.br);
    else if (c->coding == PS_CODING_ZSTD)
        ZSTD_freeCCtx(c->u.zstd);
    else
        deflateEnd(&c->u.gz);
    free(c);
}
