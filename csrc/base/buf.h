/* Growable byte buffers and slices.
 *
 * A ps_buf_t holds bytes in data[off, len): consuming from the front moves
 * `off`, appending moves `len`, and the storage is reused for the lifetime of
 * its owner (a connection keeps its buffers across keep-alive requests).
 */
#ifndef PS_BUF_H
#define PS_BUF_H

#include <stddef.h>
#include <string.h>

typedef struct {
    const char *base;
    size_t len;
} ps_slice_t;

typedef struct {
    char *data;
    size_t off;
    size_t len;
    size_t cap;
} ps_buf_t;

#define PS_SLICE_LIT(s) ((ps_slice_t){(s), sizeof(s) - 1})

static inline size_t ps_buf_size(const ps_buf_t *b)
{
    return b->len - b->off;
}

static inline char *ps_buf_head(const ps_buf_t *b)
{
    return b->data + b->off;
}

/* Ensures room for `extra` more bytes after `len`; returns 0 or -ENOMEM. */
int ps_buf_reserve(ps_buf_t *b, size_t extra);
int ps_buf_append(ps_buf_t *b, const void *p, size_t n);
/* Drops `n` bytes from the front; an emptied buffer rewinds to offset 0. */
void ps_buf_consume(ps_buf_t *b, size_t n);
void ps_buf_reset(ps_buf_t *b);
/* Releases storage above `keep` bytes so an idle owner does not pin a peak. */
void ps_buf_shrink(ps_buf_t *b, size_t keep);
void ps_buf_free(ps_buf_t *b);

static inline int ps_buf_append_slice(ps_buf_t *b, ps_slice_t s)
{
    return ps_buf_append(b, s.base, s.len);
}

int ps_slice_ieq(ps_slice_t s, const char *lit, size_t lit_len);

#define PS_SLICE_IEQ(s, lit) ps_slice_ieq((s), (lit), sizeof(lit) - 1)

#endif
