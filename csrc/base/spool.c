#define _GNU_SOURCE
#include "base/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *spool_dir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir != NULL && dir[0] != '\0' ? dir : "/tmp";
}

int ps_spool_open(void)
{
    const char *dir = spool_dir();
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    /* Only a file system without O_TMPFILE is worth a second try. */
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return -errno;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/pyserver-body-XXXXXX", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (unlink(path) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

int ps_spool_write(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}
