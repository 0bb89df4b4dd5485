/* Response compression: brotli, zstd and gzip behind one interface, streamed or
 * in one piece. Bytes in, compressed bytes appended to a buffer: no I/O. The
 * caller bounds memory by feeding bounded pieces and writing out what each call
 * appends. A body given whole (FINISH as the first write) is compressed in one
 * call with a context kept per thread (gzip through libdeflate): the fast path. */
#ifndef PS_COMPRESS_H
#define PS_COMPRESS_H

#include "base/buf.h"
#include "codec/encoding.h"

typedef struct ps_compressor ps_compressor_t;

typedef enum {
    PS_COMPRESS_WRITE, /* compress; output may stay buffered inside */
    PS_COMPRESS_FLUSH, /* and emit everything so far (a streamed chunk) */
    PS_COMPRESS_FINISH /* and end the stream (the body is complete) */
} ps_compress_op_t;

/* The level when none is given: brotli 4, zstd 3, gzip 5 (fast enough per
 * response, most of the size win; gzip's 5 through libdeflate comes out
 * smaller than zlib's 6). */
#define PS_COMPRESS_LEVEL_DEFAULT (-1)

/* A compressor for coding (br, zstd or gzip) at level (the coding's own
 * scale: brotli 0-11, zstd 1-19, gzip 1-9; out of range is clamped), or NULL
 * when out of memory or the coding is not one of those. */
ps_compressor_t *ps_compressor_new(ps_coding_t coding, int level);

/* Compresses len bytes of in and appends what comes out to out. Returns 0,
 * -ENOMEM, or -EIO when the library fails (the stream is then unusable).
 * After FINISH only ps_compressor_free is allowed. */
int ps_compressor_write(ps_compressor_t *c, const void *in, size_t len, ps_compress_op_t op,
                        ps_buf_t *out);

void ps_compressor_free(ps_compressor_t *c);

/* The coding's level range, for checking options: sets *lo and *hi. */
void ps_compress_levels(ps_coding_t coding, int *lo, int *hi);

#endif
