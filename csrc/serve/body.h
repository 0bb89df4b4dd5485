/* A synchronous request's body, read whole before the application runs:
 * it stays in memory up to --body-spool-threshold, and past it goes to a
 * spool file (spool.h) that the application then reads back in pieces.
 * Used the same way by every protocol that buffers a body (HTTP/1
 * connections, HTTP/2 streams). */
#ifndef PS_BODY_H
#define PS_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

typedef struct {
    int fd;        /* the spool file, or -1 */
    uint64_t len;  /* bytes written to it */
    uint64_t read; /* bytes ps_body_fill() took back from it */
} ps_body_spool_t;

static inline void ps_body_spool_init(ps_body_spool_t *sp)
{
    sp->fd = -1;
    sp->len = sp->read = 0;
}

/* Closes the spool file, if any: its bytes are gone with it. */
void ps_body_spool_drop(ps_body_spool_t *sp);

int ps_body_spool_write(ps_body_spool_t *sp, ps_buf_t *body, uint64_t received, uint64_t threshold,
                        size_t keep);

/* The body as it arrives (received: its bytes so far): it stays in *body
 * while received is at most threshold; once the body is larger, what
 * *body holds (and everything after) is appended to the spool file and
 * *body emptied, shrunk to keep bytes. Returns 0 or -errno (no spool
 * file, or a failed write). Inline for the common case, every
 * synchronous request with a small body (or none). */
static inline int ps_body_spool(ps_body_spool_t *sp, ps_buf_t *body, uint64_t received,
                                uint64_t threshold, size_t keep)
{
    if (sp->fd < 0 && received <= threshold)
        return 0;
    return ps_body_spool_write(sp, body, received, threshold, keep);
}

/* When *body is empty, refills it with the next piece of the spool file; it
 * never waits for the client. Returns 0 (*body still empty: the body is
 * over) or -errno when the file cannot be read. */
int ps_body_fill(ps_body_spool_t *sp, ps_buf_t *body);

#endif
