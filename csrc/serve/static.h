/* Static files served by the core: `--static PREFIX=DIR` mounts, and for a
 * request, the answer to give as a plan the connection carries out.
 *
 * Nothing here reads or writes a socket. ps_static_serve() decides: it
 * matches the request against the mounts, decodes and checks the path, opens
 * the file beneath the mount's directory (never following a link out of
 * it), evaluates the conditional (If-Match, If-Unmodified-Since -> 412;
 * If-None-Match, If-Modified-Since -> 304) and Range fields, picks a precompressed
 * sibling (.br, .zst, .gz by Accept-Encoding, encoding.h), and fills a ps_static_plan_t: the
 * status, the header fields, and the open file with the offset and length to sendfile(2). The
 * caller sends the head (adding Date, Server and its own Connection handling, e.g. with
 * ps_http1_write_head), then the body, then releases the plan.
 *
 * Safety by construction: the path is percent-decoded once; a decoded '/'
 * (%2F), NUL (%00), a backslash, a malformed escape or a ".." segment under
 * a mount is refused with a 404 and never reaches the file system (nor the
 * application); "." and empty segments are dropped. The file is opened with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) relative to the mount's
 * directory fd, which resolves symlinks only while they stay inside the
 * directory; where the kernel has no openat2 (ENOSYS, detected once), a
 * component-by-component openat() walk with O_NOFOLLOW refuses every
 * symlink, inside the tree or not. Only regular files are served (a
 * directory, fifo, socket or device is a miss; files are opened O_NONBLOCK
 * so a fifo cannot block the worker).
 *
 * The plan's fd is the file as it was opened: a file replaced by rename
 * while a response is in flight keeps sending the old contents (the old
 * inode, with its ETag); a file truncated in place makes sendfile() return
 * less than planned, which the sender must treat as a failed response
 * (close the connection: the Content-Length cannot be honoured).
 */
#ifndef PS_STATIC_H
#define PS_STATIC_H

#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "codec/encoding.h"
#include "codec/http1.h"

typedef struct {
    char *prefix;      /* decoded, no trailing '/': "/static"; "" for a mount at "/" */
    size_t prefix_len; /* strlen(prefix) */
    char *dir;         /* as given, for messages */
    int dirfd;         /* O_PATH | O_DIRECTORY, opened once */
} ps_static_mount_t;

typedef struct {
    uint32_t ext_off, type_off; /* into types.data; the ext is lower case */
    uint32_t ext_len;
} ps_mime_entry_t;

typedef struct {
    ps_static_mount_t *mounts; /* longest prefix first */
    uint32_t nmounts;
    int64_t max_age;            /* Cache-Control: public, max-age=N; -1: no Cache-Control */
    unsigned strict : 1;        /* a miss under a mount answers 404 instead of reaching the app */
    unsigned precompressed : 1; /* look for .br, .zst and .gz siblings (on by default) */
    unsigned no_openat2 : 1;    /* use the O_NOFOLLOW walk even where openat2 exists (tests) */
    ps_mime_entry_t *mime;      /* open addressing, mime_mask + 1 slots, ext_len 0: empty */
    uint32_t mime_mask;
    ps_buf_t mime_strings;
} ps_static_t;

enum {
    PS_STATIC_NONE = 0,    /* the target is under no mount: the application's */
    PS_STATIC_MISS = 1,    /* under a mount but nothing to serve: the application's */
    PS_STATIC_RESPOND = 2, /* the plan says what to send */
};

#define PS_STATIC_MAX_HEADERS 12
#define PS_STATIC_SCRATCH 512

/* One answer. Header slices point into the plan itself (scratch) or at
 * static strings: the plan must not be copied or moved while they are used.
 */
typedef struct {
    int status;             /* 200, 206, 304, 404, 405, 412 or 416 */
    ps_slice_t status_line; /* "200 OK", for ps_http1_write_head */
    ps_header_t headers[PS_STATIC_MAX_HEADERS];
    uint32_t nheaders;
    int fd;             /* the file to send length bytes of from offset; -1: none */
    uint64_t offset;    /* where the body starts in fd */
    uint64_t length;    /* body bytes to send from fd (0 for HEAD, 304, 416, 404) */
    ps_slice_t body;    /* a short body from memory (404, 405), else empty */
    uint8_t encoding;   /* ps_coding_t: the representation chosen */
    const char *reason; /* why a miss or a 404, in words (static); NULL when served */
    uint64_t file_size; /* the representation's size (for logs and metrics) */
    char scratch[PS_STATIC_SCRATCH];
    size_t scratch_len;
} ps_static_plan_t;

/* An empty table with the defaults (no mounts, precompressed on, no
 * Cache-Control, built-in MIME types only). */
void ps_static_init(ps_static_t *s);
/* Adds a mount from "PREFIX=DIR": PREFIX starts with '/', holds no '%',
 * '\\', NUL, "." or ".." segment, and is taken without its trailing '/';
 * DIR is opened once (O_PATH | O_DIRECTORY). Returns 0, -EINVAL (a bad
 * spec), -EEXIST (the prefix is mounted already), -ENOMEM, or open's
 * -errno (-ENOENT, -ENOTDIR, -EACCES...). */
int ps_static_add(ps_static_t *s, const char *spec, size_t len);
/* Reads a mime.types file (e.g. /etc/mime.types): "type ext ext..." lines,
 * '#' comments; the first type given for an extension wins. The built-in
 * table answers for what the file does not name. Returns 0, -ENOMEM, or
 * the -errno of reading it (then only the built-in table is used). */
int ps_static_load_mime(ps_static_t *s, const char *path);
/* The Content-Type for a file name (without charset), never NULL:
 * application/octet-stream when the extension is unknown. */
const char *ps_static_mime_type(const ps_static_t *s, const char *name, size_t len);
void ps_static_free(ps_static_t *s);

/* Decides what to answer to r (see the top of this file). Returns
 * PS_STATIC_NONE or PS_STATIC_MISS (plan->reason says why; nothing to
 * release), PS_STATIC_RESPOND (the plan is filled: send it, then call
 * ps_static_plan_release), or -EMFILE, -ENFILE, -ENOMEM when the file could
 * not be opened for want of resources (the caller answers 503 or 500).
 * Costs no allocation: a few openat/fstat calls. */
int ps_static_serve(const ps_static_t *s, const ps_request_t *r, ps_static_plan_t *plan);
/* Closes the plan's file; the plan may be reused afterwards. */
void ps_static_plan_release(ps_static_plan_t *plan);

/* 1 while openat2 is in use: unknown until the first open, 0 after ENOSYS. */
int ps_static_have_openat2(void);

#endif
