/* Unit tests of csrc/codec/compress.c: each coding's stream, fed in pieces with
 * flushes, decodes with the stock decoder (zlib, libbrotlidec, libzstd) to
 * exactly the input; a flush makes everything so far decodable. */
#include <brotli/decode.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "base/common.h"
#include "codec/compress.h"

static const ps_coding_t codings[] = {PS_CODING_BR, PS_CODING_ZSTD, PS_CODING_GZIP};

/* Decodes a whole stream into out (cap bytes); returns the length or -1. With
 * partial set, a stream cut after a flush is fine. */
static long decode(ps_coding_t coding, const char *in, size_t len, char *out, size_t cap,
                   int partial)
{
    if (coding == PS_CODING_BR) {
        BrotliDecoderState *d = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        const uint8_t *next_in = (const uint8_t *)in;
        uint8_t *next_out = (uint8_t *)out;
        size_t avail_in = len, avail_out = cap;
        BrotliDecoderResult r =
            BrotliDecoderDecompressStream(d, &avail_in, &next_in, &avail_out, &next_out, NULL);
        BrotliDecoderDestroyInstance(d);
        int ok = r == BROTLI_DECODER_RESULT_SUCCESS ||
                 (partial && r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT);
        return ok && avail_in == 0 ? (long)(cap - avail_out) : -1;
    }
    if (coding == PS_CODING_ZSTD) {
        ZSTD_DStream *d = ZSTD_createDStream();
        ZSTD_inBuffer i = {in, len, 0};
        ZSTD_outBuffer o = {out, cap, 0};
        size_t left = ZSTD_decompressStream(d, &o, &i);
        ZSTD_freeDStream(d);
        if (ZSTD_isError(left) || i.pos != len || (!partial && left != 0))
            return -1;
        return (long)o.pos;
    }
    z_stream z = {0};
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return -1;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_SYNC_FLUSH);
    long n = (long)(cap - z.avail_out);
    inflateEnd(&z);
    int ok = rc == Z_STREAM_END || (partial && rc == Z_OK);
    return ok && z.avail_in == 0 ? n : -1;
}

/* A body that compresses like a page: repeated words with some variety. */
static char *text_body(size_t n)
{
    static const char *const words[] = {
        "pyserver ", "response ", "{\"id\": ", "42, ", "\"name\": \"x\"}, ", "<div class=\"row\">"};
    char *b = malloc(n);
    uint32_t seed = 12345;
    for (size_t i = 0; i < n;) {
        seed = seed * 1103515245u + 12345u;
        const char *w = words[(seed >> 16) % 6];
        for (size_t k = 0; w[k] && i < n; k++)
            b[i++] = w[k];
    }
    return b;
}

static void test_round_trip_in_pieces(void)
{
    size_t n = 300000;
    char *body = text_body(n);
    char *back = malloc(n + 1);
    for (size_t k = 0; k < 3; k++) {
        ps_compressor_t *c = ps_compressor_new(codings[k], PS_COMPRESS_LEVEL_DEFAULT);
        ps_buf_t out = {0};
        CHECK(c != NULL);
        size_t fed = 0, piece = 7001;
        while (fed < n) {
            size_t len = PS_MIN(piece, n - fed);
            CHECK_EQ(ps_compressor_write(c, body + fed, len, PS_COMPRESS_WRITE, &out), 0);
            fed += len;
        }
        CHECK_EQ(ps_compressor_write(c, NULL, 0, PS_COMPRESS_FINISH, &out), 0);
        CHECK(out.len < n / 4); /* it did compress */
        long got = decode(codings[k], out.data, out.len, back, n + 1, 0);
        CHECK_EQ(got, (long)n);
        CHECK(got == (long)n && memcmp(back, body, n) == 0);
        /* After the end, nothing more. */
        CHECK_EQ(ps_compressor_write(c, "x", 1, PS_COMPRESS_WRITE, &out), -EIO);
        ps_compressor_free(c);
        ps_buf_free(&out);
    }
    free(back);
    free(body);
}

/* A body given whole takes the one-shot path (libdeflate for gzip, a reused zstd
 * context): the same bytes come back at every level, the contexts kept per level and
 * thread serve one response after another, and appending after what the buffer
 * already holds keeps that prefix. */
static void test_whole_body_at_every_level(void)
{
    size_t n = 20000;
    char *body = text_body(n);
    char *back = malloc(n + 1);
    for (size_t k = 0; k < 3; k++) {
        int lo, hi;
        ps_compress_levels(codings[k], &lo, &hi);
        for (int level = lo; level <= hi; level++) {
            for (int round = 0; round < 2; round++) {
                ps_compressor_t *c = ps_compressor_new(codings[k], level);
                ps_buf_t out = {0};
                CHECK_EQ(ps_buf_append(&out, "HEAD", 4), 0);
                CHECK_EQ(ps_compressor_write(c, body, n, PS_COMPRESS_FINISH, &out), 0);
                CHECK(out.len > 4 && out.len < n / 3);
                CHECK(memcmp(out.data, "HEAD", 4) == 0);
                long got = decode(codings[k], out.data + 4, out.len - 4, back, n + 1, 0);
                CHECK(got == (long)n && memcmp(back, body, n) == 0);
                CHECK_EQ(ps_compressor_write(c, "x", 1, PS_COMPRESS_FINISH, &out), -EIO);
                ps_compressor_free(c);
                ps_buf_free(&out);
            }
        }
    }
    free(back);
    free(body);
}

static void test_a_flush_makes_the_prefix_decodable(void)
{
    const char *first = "data: {\"event\": 1}\n\n", *second = "data: {\"event\": 2}\n\n";
    char back[256];
    for (size_t k = 0; k < 3; k++) {
        ps_compressor_t *c = ps_compressor_new(codings[k], PS_COMPRESS_LEVEL_DEFAULT);
        ps_buf_t out = {0};
        CHECK_EQ(ps_compressor_write(c, first, strlen(first), PS_COMPRESS_FLUSH, &out), 0);
        long got = decode(codings[k], out.data, out.len, back, sizeof(back), 1);
        CHECK_EQ(got, (long)strlen(first));
        CHECK(got > 0 && memcmp(back, first, (size_t)got) == 0);
        CHECK_EQ(ps_compressor_write(c, second, strlen(second), PS_COMPRESS_FINISH, &out), 0);
        got = decode(codings[k], out.data, out.len, back, sizeof(back), 0);
        CHECK_EQ(got, (long)(strlen(first) + strlen(second)));
        ps_compressor_free(c);
        ps_buf_free(&out);
    }
}

static void test_empty_body_and_levels(void)
{
    char back[16];
    for (size_t k = 0; k < 3; k++) {
        int lo, hi;
        ps_compress_levels(codings[k], &lo, &hi);
        CHECK(lo >= 0 && hi > lo);
        int levels[] = {lo, hi, lo - 5, hi + 5};
        for (size_t l = 0; l < 4; l++) {
            ps_compressor_t *c = ps_compressor_new(codings[k], levels[l]);
            ps_buf_t out = {0};
            CHECK(c != NULL);
            CHECK_EQ(ps_compressor_write(c, NULL, 0, PS_COMPRESS_FINISH, &out), 0);
            CHECK(out.len > 0);
            CHECK_EQ(decode(codings[k], out.data, out.len, back, sizeof(back), 0), 0);
            ps_compressor_free(c);
            ps_buf_free(&out);
        }
    }
    CHECK(ps_compressor_new(PS_CODING_IDENTITY, 1) == NULL);
    ps_compressor_free(NULL);
}

static void test_incompressible_input_round_trips(void)
{
    size_t n = 1 << 20;
    char *body = malloc(n), *back = malloc(n + 64);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        body[i] = (char)x;
    }
    for (size_t k = 0; k < 3; k++) {
        ps_compressor_t *c = ps_compressor_new(codings[k], 1);
        ps_buf_t out = {0};
        CHECK_EQ(ps_compressor_write(c, body, n, PS_COMPRESS_FINISH, &out), 0);
        CHECK(out.len < n + n / 50); /* random bytes grow by a bounded framing only */
        CHECK_EQ(decode(codings[k], out.data, out.len, back, n + 64, 0), (long)n);
        CHECK(memcmp(back, body, n) == 0);
        ps_compressor_free(c);
        ps_buf_free(&out);
    }
    free(body);
    free(back);
}

int main(void)
{
    test_round_trip_in_pieces();
    test_whole_body_at_every_level();
    test_a_flush_makes_the_prefix_decodable();
    test_empty_body_and_levels();
    test_incompressible_input_round_trips();
    return check_finish("test_compress");
}
