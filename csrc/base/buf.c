#include "base/buf.h"

#include "base/common.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

int ps_buf_reserve(ps_buf_t *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    /* Reclaim consumed space at the front before growing. */
    if (b->off > 0) {
        size_t live = b->len - b->off;
        memmove(b->data, b->data + b->off, live);
        b->off = 0;
        b->len = live;
        if (b->cap - b->len >= extra)
            return 0;
    }
    if (extra > ((size_t)-1) / 2 - b->len)
        return -ENOMEM;
    size_t want = b->len + extra;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < want) {
        if (cap > ((size_t)-1) / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int ps_buf_append(ps_buf_t *b, const void *p, size_t n)
{
    int rc = ps_buf_reserve(b, n);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void ps_buf_consume(ps_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void ps_buf_reset(ps_buf_t *b)
{
    b->off = b->len = 0;
}

void ps_buf_shrink(ps_buf_t *b, size_t keep)
{
    if (b->cap <= keep || ps_buf_size(b) > 0)
        return;
    free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

void ps_buf_free(ps_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

int ps_slice_ieq(ps_slice_t s, const char *lit, size_t lit_len)
{
    return s.len == lit_len && strncasecmp(s.base, lit, lit_len) == 0;
}
