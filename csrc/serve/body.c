/* A synchronous request's body past the spool threshold (see body.h). */
#define _GNU_SOURCE
#include "serve/body.h"

#include <errno.h>
#include <unistd.h>

#include "base/common.h"
#include "base/spool.h"

/* A spooled body is read back in pieces of this size. */
#define SPOOL_READ (64 * 1024)

void ps_body_spool_drop(ps_body_spool_t *sp)
{
    if (sp->fd >= 0)
        close(sp->fd);
    ps_body_spool_init(sp);
}

/* ps_body_spool past its inline test. */
int ps_body_spool_write(ps_body_spool_t *sp, ps_buf_t *body, uint64_t received, uint64_t threshold,
                        size_t keep)
{
    if (sp->fd < 0) {
        if (received <= threshold)
            return 0;
        int fd = ps_spool_open();
        if (fd < 0)
            return fd;
        sp->fd = fd;
    }
    size_t n = ps_buf_size(body);
    if (n == 0)
        return 0;
    int rc = ps_spool_write(sp->fd, ps_buf_head(body), n);
    if (rc < 0)
        return rc;
    sp->len += n;
    /* The first write moves up to the threshold: do not keep that much. */
    ps_buf_reset(body);
    ps_buf_shrink(body, keep);
    return 0;
}

int ps_body_fill(ps_body_spool_t *sp, ps_buf_t *body)
{
    if (ps_buf_size(body) > 0 || sp->fd < 0 || sp->read >= sp->len)
        return 0;
    size_t want = (size_t)PS_MIN(sp->len - sp->read, SPOOL_READ);
    if (ps_buf_reserve(body, want) < 0)
        return -ENOMEM;
    ssize_t n;
    do
        n = pread(sp->fd, body->data + body->len, want, (off_t)sp->read);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n == 0)
        return -EIO; /* the file is shorter than what was written to it */
    body->len += (size_t)n;
    sp->read += (uint64_t)n;
    return 0;
}
