/* Spool files: unlinked temporary files that hold a request body too large
 * to keep in memory while it arrives. The file has no name, so it is gone
 * once its descriptor is closed, whatever way the request ends. */
#ifndef PS_SPOOL_H
#define PS_SPOOL_H

#include <stddef.h>

/* Creates an unlinked temporary file in $TMPDIR (or /tmp), with O_TMPFILE
 * where the file system has it, else mkstemp then unlink. Returns the
 * descriptor (close-on-exec) or -errno. */
int ps_spool_open(void);
/* Appends all n bytes at the file's offset. Returns 0 or -errno. */
int ps_spool_write(int fd, const char *p, size_t n);

#endif
