/* Unit tests of csrc/serve/static.c: mounts, path checks, opening beneath a
 * directory (openat2 and the O_NOFOLLOW walk), MIME types, validators,
 * conditionals, ranges and precompressed siblings, over a directory tree
 * built here. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "codec/http1.h"
#include "serve/static.h"

static char root[256];

static void put_file(const char *rel, const char *content, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, content, n) != (ssize_t)n) {
        perror(path);
        exit(2);
    }
    close(fd);
}

static void put_str(const char *rel, const char *content)
{
    put_file(rel, content, strlen(content));
}

static void in_root(const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", root, rel);
}

static void make_tree(void)
{
    char p[512], q[512];
    snprintf(root, sizeof(root), "/tmp/ps-static-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    in_root("pub", p, sizeof(p));
    mkdir(p, 0755);
    in_root("pub/sub", p, sizeof(p));
    mkdir(p, 0755);
    in_root("pub/img", p, sizeof(p));
    mkdir(p, 0755);
    in_root("other", p, sizeof(p));
    mkdir(p, 0755);
    put_str("secret.txt", "top secret\n");
    put_str("pub/index.html", "<h1>hi</h1>\n");
    put_str("pub/app.js", "console.log('identity');\n");
    put_str("pub/app.js.gz", "GZ-BYTES");
    put_str("pub/app.js.br", "BR");
    put_str("pub/app.js.zst", "ZSTD-BYTES");
    put_str("pub/style.css", "body { color: red }\n");
    put_str("pub/style.css.gz", "GZIPPED-CSS");
    put_str("pub/empty.txt", "");
    put_str("pub/sub/deep.txt", "deep\n");
    put_str("pub/img/logo.PNG", "\x89PNG");
    put_str("pub/noext", "x");
    put_str("pub/font.woff2", "wOF2");
    put_str("pub/a b.txt", "space\n");
    put_str("other/x.txt", "other\n");
    char data[1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('a' + i % 26);
    put_file("pub/data.bin", data, sizeof(data));
    in_root("pub/link_out", p, sizeof(p));
    if (symlink("../secret.txt", p) < 0)
        perror("symlink");
    in_root("pub/abs_out", p, sizeof(p));
    in_root("secret.txt", q, sizeof(q));
    if (symlink(q, p) < 0)
        perror("symlink");
    in_root("pub/dir_out", p, sizeof(p));
    if (symlink("..", p) < 0)
        perror("symlink");
    in_root("pub/sub/link_in", p, sizeof(p));
    if (symlink("../index.html", p) < 0)
        perror("symlink");
    in_root("pub/subdir_in", p, sizeof(p));
    if (symlink("sub", p) < 0)
        perror("symlink");
    in_root("pub/fifo", p, sizeof(p));
    if (mkfifo(p, 0644) < 0)
        perror("mkfifo");
}

static void remove_tree(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

/* ---- requests and plans -------------------------------------------------- */

typedef struct {
    ps_request_t r;
    ps_header_t h[16];
} request_t;

/* A request from method, target and "name", "value" pairs ending in NULL. */
static void make_request(request_t *t, const char *method, const char *target, const char **hdrs)
{
    memset(t, 0, sizeof(*t));
    t->r.method = (ps_slice_t){method, strlen(method)};
    t->r.method_id = (uint8_t)ps_http1_method_id(t->r.method);
    t->r.is_head = strcmp(method, "HEAD") == 0;
    t->r.target = (ps_slice_t){target, strlen(target)};
    t->r.content_length = -1;
    t->r.http_minor = 1;
    for (size_t i = 0; hdrs && hdrs[i]; i += 2) {
        t->h[t->r.nheaders].name = (ps_slice_t){hdrs[i], strlen(hdrs[i])};
        t->h[t->r.nheaders].value = (ps_slice_t){hdrs[i + 1], strlen(hdrs[i + 1])};
        t->r.nheaders++;
    }
    t->r.headers = t->h;
}

static ps_static_t st;

static int serve_with(const ps_static_t *s, const char *method, const char *target,
                      const char **hdrs, ps_static_plan_t *plan)
{
    request_t t;
    make_request(&t, method, target, hdrs);
    int rc = ps_static_serve(s, &t.r, plan);
    if (rc == PS_STATIC_RESPOND) {
        /* whatever the plan says makes a valid response head */
        ps_head_info_t info;
        CHECK(ps_http_scan_head(plan->status_line, plan->headers, plan->nheaders, &info) == 0);
        CHECK_EQ(info.status, plan->status);
        ps_buf_t out = {0};
        CHECK(ps_http1_write_head(&out, plan->status_line, plan->headers, plan->nheaders, NULL,
                                  0) == 0);
        ps_buf_free(&out);
        if (plan->status == 304)
            CHECK_EQ(info.content_length, -1);
        else if (!t.r.is_head && plan->status < 400)
            CHECK_EQ(info.content_length, (long long)plan->length);
        else if (plan->status >= 400)
            CHECK_EQ(info.content_length, (long long)plan->body.len);
    }
    return rc;
}

static int serve(const char *method, const char *target, const char **hdrs, ps_static_plan_t *plan)
{
    return serve_with(&st, method, target, hdrs, plan);
}

static ps_slice_t plan_header(const ps_static_plan_t *plan, const char *name)
{
    for (uint32_t i = 0; i < plan->nheaders; i++)
        if (ps_slice_ieq(plan->headers[i].name, name, strlen(name)))
            return plan->headers[i].value;
    return (ps_slice_t){NULL, 0};
}

#define CHECK_HEADER(plan, name, lit) CHECK_SLICE_EQ(plan_header((plan), (name)), lit)
#define CHECK_NO_HEADER(plan, name) CHECK(plan_header((plan), (name)).base == NULL)

/* The body the plan would send, into buf. */
static size_t plan_body(const ps_static_plan_t *plan, char *buf, size_t cap)
{
    if (plan->fd < 0)
        return 0;
    size_t n = PS_MIN(plan->length, cap);
    ssize_t got = pread(plan->fd, buf, n, (off_t)plan->offset);
    return got < 0 ? 0 : (size_t)got;
}

#define CHECK_BODY(plan, lit)                                                                      \
    do {                                                                                           \
        char body_[4096];                                                                          \
        size_t n_ = plan_body((plan), body_, sizeof(body_));                                       \
        CHECK_MEM_EQ(body_, n_, lit);                                                              \
    } while (0)

/* The ETag of a served file, copied out. */
static void etag_of(const char *target, const char **hdrs, char *out, size_t n)
{
    ps_static_plan_t plan;
    out[0] = '\0';
    if (serve("GET", target, hdrs, &plan) == PS_STATIC_RESPOND) {
        ps_slice_t e = plan_header(&plan, "etag");
        snprintf(out, n, "%.*s", (int)e.len, e.base ? e.base : "");
    }
    ps_static_plan_release(&plan);
}

static void lm_of(const char *target, char *out, size_t n)
{
    ps_static_plan_t plan;
    out[0] = '\0';
    if (serve("GET", target, NULL, &plan) == PS_STATIC_RESPOND) {
        ps_slice_t e = plan_header(&plan, "last-modified");
        snprintf(out, n, "%.*s", (int)e.len, e.base ? e.base : "");
    }
    ps_static_plan_release(&plan);
}

/* ---- mounts -------------------------------------------------------------- */

static int add_spec(ps_static_t *s, const char *prefix, const char *rel)
{
    char spec[600];
    if (rel[0] == '/')
        snprintf(spec, sizeof(spec), "%s=%s", prefix, rel);
    else
        snprintf(spec, sizeof(spec), "%s=%s/%s", prefix, root, rel);
    return ps_static_add(s, spec, strlen(spec));
}

static void test_mount_specs(void)
{
    ps_static_t s;
    ps_static_init(&s);
    CHECK_EQ(ps_static_add(&s, "nothing", 7), -EINVAL);
    CHECK_EQ(ps_static_add(&s, "=/tmp", 5), -EINVAL);
    CHECK_EQ(ps_static_add(&s, "/static=", 8), -EINVAL);
    CHECK_EQ(add_spec(&s, "static", "pub"), -EINVAL);  /* no leading '/' */
    CHECK_EQ(add_spec(&s, "/a/../b", "pub"), -EINVAL); /* ".." in the prefix */
    CHECK_EQ(add_spec(&s, "/a/./b", "pub"), -EINVAL);  /* "." in the prefix */
    CHECK_EQ(add_spec(&s, "/a//b", "pub"), -EINVAL);   /* empty segment */
    CHECK_EQ(add_spec(&s, "/a%2fb", "pub"), -EINVAL);  /* escapes */
    CHECK_EQ(add_spec(&s, "/a\\b", "pub"), -EINVAL);   /* backslash */
    CHECK_EQ(add_spec(&s, "/s", "missing"), -ENOENT);  /* no such directory */
    CHECK_EQ(add_spec(&s, "/s", "secret.txt"), -ENOTDIR);
    CHECK_EQ(add_spec(&s, "/static/", "pub"), 0); /* the trailing '/' goes */
    CHECK_EQ(add_spec(&s, "/static", "other"), -EEXIST);
    CHECK_EQ(add_spec(&s, "/static/img", "other"), 0);
    CHECK_EQ(add_spec(&s, "/", "other"), 0);
    CHECK_EQ(s.nmounts, 3);
    CHECK_MEM_EQ(s.mounts[0].prefix, s.mounts[0].prefix_len, "/static/img");
    CHECK_MEM_EQ(s.mounts[1].prefix, s.mounts[1].prefix_len, "/static");
    CHECK_EQ(s.mounts[2].prefix_len, 0);
    /* The longest prefix wins; the root mount takes the rest. */
    ps_static_plan_t plan;
    CHECK_EQ(serve_with(&s, "GET", "/static/img/x.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "other\n");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve_with(&s, "GET", "/static/index.html", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "<h1>hi</h1>\n");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve_with(&s, "GET", "/x.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "other\n");
    ps_static_plan_release(&plan);
    ps_static_free(&s);
}

static void test_matching(void)
{
    ps_static_plan_t plan;
    /* Prefixes match whole segments only. */
    CHECK_EQ(serve("GET", "/staticfoo/index.html", NULL, &plan), PS_STATIC_NONE);
    CHECK_EQ(serve("GET", "/stat", NULL, &plan), PS_STATIC_NONE);
    CHECK_EQ(serve("GET", "/", NULL, &plan), PS_STATIC_NONE);
    CHECK_EQ(serve("GET", "*", NULL, &plan), PS_STATIC_NONE);
    CHECK_EQ(serve("GET", "/api/a%2Fb", NULL, &plan), PS_STATIC_NONE); /* not ours: untouched */
    /* An encoded slash does not separate the prefix either. */
    CHECK_EQ(serve("GET", "/static%2Findex.html", NULL, &plan), PS_STATIC_NONE);
    /* The prefix itself and a trailing '/' are directories: misses. */
    CHECK_EQ(serve("GET", "/static", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/sub", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/sub/", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/index.html/", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/nope.css", NULL, &plan), PS_STATIC_MISS);
    CHECK(plan.reason != NULL);
    /* Only GET and HEAD are served; the rest is the application's. */
    CHECK_EQ(serve("POST", "/static/index.html", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("PUT", "/static/index.html", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("OPTIONS", "/static/index.html", NULL, &plan), PS_STATIC_MISS);
    /* The query and an absolute-form target's authority are not the path. */
    CHECK_EQ(serve("GET", "/static/index.html?v=3", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "<h1>hi</h1>\n");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "http://example.com/static/index.html", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "<h1>hi</h1>\n");
    ps_static_plan_release(&plan);
    /* Decoded once: %20, an encoded prefix, "." and empty segments. */
    CHECK_EQ(serve("GET", "/static/a%20b.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "space\n");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/st%61tic/sub/deep.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "deep\n");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/static//sub/./deep.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "deep\n");
    ps_static_plan_release(&plan);
    /* Decoded once only: %2541 is "%41", a name that does not exist. */
    CHECK_EQ(serve("GET", "/static/%2541pp.js", NULL, &plan), PS_STATIC_MISS);
}

static void test_traversal(void)
{
    static const char *const attempts[] = {
        "/static/../secret.txt",
        "/static/sub/../../secret.txt",
        "/static/%2e%2e/secret.txt",
        "/static/%2E%2E/secret.txt",
        "/static/.%2e/secret.txt",
        "/static/..%2fsecret.txt",
        "/static/..%2Fsecret.txt",
        "/static/sub%2f..%2f..%2fsecret.txt",
        "/static/..\\secret.txt",
        "/static/%5c..%5csecret.txt",
        "/static/index.html%00.png",
        "/static/%00",
        "/static/bad%zzescape",
        "/static/trailing%2",
        "/static/sub/..",
        "/static/..",
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(attempts); i++) {
        ps_static_plan_t plan;
        int rc = serve("GET", attempts[i], NULL, &plan);
        if (!CHECK_EQ(rc, PS_STATIC_RESPOND) || !CHECK_EQ(plan.status, 404))
            fprintf(stderr, "    attempt: %s\n", attempts[i]);
        CHECK(plan.fd < 0);
        CHECK(plan.reason != NULL);
        CHECK_MEM_EQ(plan.body.base, plan.body.len, "Not Found\n");
        ps_static_plan_release(&plan);
    }
    /* Refused even for HEAD, and under a strict table alike. */
    ps_static_plan_t plan;
    CHECK_EQ(serve("HEAD", "/static/../secret.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 404);
}

/* Symlinks: out of the tree never; inside the tree with openat2 only. */
static void test_links(int fallback)
{
    st.no_openat2 = fallback ? 1 : 0;
    ps_static_plan_t plan;
    CHECK_EQ(serve("GET", "/static/link_out", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/abs_out", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/dir_out/secret.txt", NULL, &plan), PS_STATIC_MISS);
    CHECK_EQ(serve("GET", "/static/dir_out/pub/index.html", NULL, &plan), PS_STATIC_MISS);
    /* The fifo is not a regular file, and opening it did not block. */
    CHECK_EQ(serve("GET", "/static/fifo", NULL, &plan), PS_STATIC_MISS);
    /* Plain files through real directories work on both paths. */
    CHECK_EQ(serve("GET", "/static/sub/deep.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_BODY(&plan, "deep\n");
    ps_static_plan_release(&plan);
    int rc1 = serve("GET", "/static/sub/link_in", NULL, &plan);
    if (rc1 == PS_STATIC_RESPOND)
        ps_static_plan_release(&plan);
    int rc2 = serve("GET", "/static/subdir_in/deep.txt", NULL, &plan);
    if (rc2 == PS_STATIC_RESPOND) {
        CHECK_BODY(&plan, "deep\n");
        ps_static_plan_release(&plan);
    }
    if (fallback || !ps_static_have_openat2()) {
        CHECK_EQ(rc1, PS_STATIC_MISS); /* the walk refuses every link */
        CHECK_EQ(rc2, PS_STATIC_MISS);
    } else {
        CHECK_EQ(rc1, PS_STATIC_RESPOND); /* openat2 resolves links that stay beneath */
        CHECK_EQ(rc2, PS_STATIC_RESPOND);
    }
    /* Strict: the same misses answer 404. */
    st.strict = 1;
    CHECK_EQ(serve("GET", "/static/link_out", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 404);
    st.strict = 0;
    st.no_openat2 = 0;
}

/* ---- MIME types ---------------------------------------------------------- */

static void test_mime(void)
{
    ps_static_t s;
    ps_static_init(&s);
    /* Built-in only. */
    CHECK(strcmp(ps_static_mime_type(&s, "a.css", 5), "text/css") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "x/y/a.WOFF2", 11), "font/woff2") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.wasm", 6), "application/wasm") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.unknownext", 12), "application/octet-stream") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "noext", 5), "application/octet-stream") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, ".css", 4), "application/octet-stream") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "dir.css/file", 12), "application/octet-stream") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.", 2), "application/octet-stream") == 0);
    /* A file: first type for an extension wins, comments ignored, the
     * built-in table fills the rest. */
    put_str("mime.types", "# comment css\n"
                          "text/x-first  foo FOO2\n"
                          "text/x-second foo   # bar\n"
                          "application/x-only-type\n"
                          "\timage/x-tab\tTab\r\n"
                          "text/css css");
    char p[512];
    in_root("mime.types", p, sizeof(p));
    CHECK_EQ(ps_static_load_mime(&s, p), 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.foo", 5), "text/x-first") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.Foo2", 6), "text/x-first") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.bar", 5), "application/octet-stream") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.tab", 5), "image/x-tab") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.css", 5), "text/css") == 0);
    CHECK(strcmp(ps_static_mime_type(&s, "a.png", 5), "image/png") == 0); /* built-in */
    CHECK(strcmp(ps_static_mime_type(&s, "a.comment", 9), "application/octet-stream") == 0);
    CHECK_EQ(ps_static_load_mime(&s, "/nonexistent/mime.types"), -ENOENT);
    ps_static_free(&s);
    /* The system table, when there is one. */
    ps_static_init(&s);
    if (ps_static_load_mime(&s, "/etc/mime.types") == 0) {
        CHECK(strcmp(ps_static_mime_type(&s, "a.html", 6), "text/html") == 0);
        CHECK(strcmp(ps_static_mime_type(&s, "a.svg", 5), "image/svg+xml") == 0);
        CHECK(strcmp(ps_static_mime_type(&s, "a.JPG", 5), "image/jpeg") == 0);
    }
    ps_static_free(&s);
    /* In responses: charset for text, none for images and fonts. */
    ps_static_plan_t plan;
    CHECK_EQ(serve("GET", "/static/index.html", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "content-type", "text/html; charset=utf-8");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/static/img/logo.PNG", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "content-type", "image/png");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/static/font.woff2", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "content-type", "font/woff2");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/static/noext", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "content-type", "application/octet-stream");
    ps_static_plan_release(&plan);
}

/* ---- the 200 and HEAD ---------------------------------------------------- */

static void test_headers(void)
{
    ps_static_plan_t plan;
    char path[512], expect[128];
    struct stat sb;
    in_root("pub/data.bin", path, sizeof(path));
    stat(path, &sb);
    CHECK_EQ(serve("GET", "/static/data.bin", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    CHECK_SLICE_EQ(plan.status_line, "200 OK");
    CHECK_HEADER(&plan, "content-length", "1000");
    CHECK_HEADER(&plan, "accept-ranges", "bytes");
    CHECK_HEADER(&plan, "vary", "Accept-Encoding");
    CHECK_NO_HEADER(&plan, "content-encoding");
    CHECK_NO_HEADER(&plan, "cache-control");
    snprintf(expect, sizeof(expect), "\"%llx-%llx-%llx\"", (unsigned long long)sb.st_ino,
             (unsigned long long)sb.st_size,
             (unsigned long long)sb.st_mtim.tv_sec * 1000000000ull +
                 (unsigned long long)sb.st_mtim.tv_nsec);
    ps_slice_t etag = plan_header(&plan, "etag"); /* "inode-size-mtime_ns", hex */
    CHECK(etag.len == strlen(expect) && memcmp(etag.base, expect, etag.len) == 0);
    struct tm tm;
    gmtime_r(&sb.st_mtim.tv_sec, &tm);
    strftime(expect, sizeof(expect), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    ps_slice_t lm = plan_header(&plan, "last-modified");
    CHECK(lm.len == 29 && memcmp(lm.base, expect, 29) == 0);
    CHECK_EQ(plan.offset, 0);
    CHECK_EQ(plan.length, 1000);
    CHECK_EQ(plan.file_size, 1000);
    CHECK(plan.fd >= 0);
    char body[1000];
    CHECK_EQ(plan_body(&plan, body, sizeof(body)), 1000);
    CHECK(body[0] == 'a' && body[999] == (char)('a' + 999 % 26));
    ps_static_plan_release(&plan);
    CHECK_EQ(plan.fd, -1);
    /* HEAD: the same head, no file to send. */
    ps_static_plan_t head;
    CHECK_EQ(serve("HEAD", "/static/data.bin", NULL, &head), PS_STATIC_RESPOND);
    CHECK_EQ(head.status, 200);
    CHECK_EQ(head.fd, -1);
    CHECK_EQ(head.length, 0);
    CHECK_HEADER(&head, "content-length", "1000");
    CHECK_EQ(serve("GET", "/static/data.bin", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(head.nheaders, plan.nheaders);
    for (uint32_t i = 0; i < head.nheaders && i < plan.nheaders; i++) {
        CHECK(ps_slice_ieq(head.headers[i].name, plan.headers[i].name.base,
                           plan.headers[i].name.len));
        CHECK(head.headers[i].value.len == plan.headers[i].value.len &&
              memcmp(head.headers[i].value.base, plan.headers[i].value.base,
                     head.headers[i].value.len) == 0);
    }
    ps_static_plan_release(&plan);
    /* HEAD ignores Range (RFC 9110 14.2: range is defined for GET only). */
    const char *range[] = {"Range", "bytes=0-9", NULL};
    CHECK_EQ(serve("HEAD", "/static/data.bin", range, &head), PS_STATIC_RESPOND);
    CHECK_EQ(head.status, 200);
    CHECK_HEADER(&head, "content-length", "1000");
    /* An empty file: 200 with Content-Length 0 and nothing to send. */
    CHECK_EQ(serve("GET", "/static/empty.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    CHECK_HEADER(&plan, "content-length", "0");
    CHECK_EQ(plan.fd, -1);
    /* Cache-Control from max-age; none without precompression's Vary. */
    st.max_age = 3600;
    st.precompressed = 0;
    CHECK_EQ(serve("GET", "/static/data.bin", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "cache-control", "public, max-age=3600");
    CHECK_NO_HEADER(&plan, "vary");
    ps_static_plan_release(&plan);
    st.max_age = 0;
    CHECK_EQ(serve("GET", "/static/data.bin", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "cache-control", "public, max-age=0");
    ps_static_plan_release(&plan);
    st.max_age = -1;
    st.precompressed = 1;
}

/* ---- conditionals -------------------------------------------------------- */

/* The validators as written by hand in static.c, against snprintf and
 * strftime: a fixed time with one-digit fields (zero padding), nanoseconds. */
static void test_validator_format(void)
{
    char p[512], want[128];
    ps_static_plan_t plan;
    put_str("pub/dated.txt", "dated\n");
    in_root("pub/dated.txt", p, sizeof(p));
    struct timespec times[2] = {{981173106, 7}, {981173106, 7}}; /* 2001-02-03 04:05:06 */
    CHECK_EQ(utimensat(AT_FDCWD, p, times, 0), 0);
    struct stat sb;
    CHECK_EQ(stat(p, &sb), 0);
    CHECK_EQ(serve("GET", "/static/dated.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_HEADER(&plan, "last-modified", "Sat, 03 Feb 2001 04:05:06 GMT");
    snprintf(want, sizeof(want), "\"%llx-%llx-%llx\"", (unsigned long long)sb.st_ino,
             (unsigned long long)sb.st_size, 981173106000000007ULL);
    ps_slice_t etag = plan_header(&plan, "etag");
    CHECK(etag.len == strlen(want) && memcmp(etag.base, want, etag.len) == 0);
    CHECK_HEADER(&plan, "content-length", "6");
    ps_static_plan_release(&plan);
    CHECK_EQ(unlink(p), 0);
}

static void test_conditionals(void)
{
    ps_static_plan_t plan;
    char etag[128], lm[64], weak[160], list[400], older[64], newer[64];
    etag_of("/static/index.html", NULL, etag, sizeof(etag));
    lm_of("/static/index.html", lm, sizeof(lm));
    CHECK(etag[0] == '"');
    snprintf(weak, sizeof(weak), "W/%s", etag);
    snprintf(list, sizeof(list), "\"nope\", W/\"other\" ,%s", etag);

    const char *inm[] = {"If-None-Match", etag, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    CHECK_SLICE_EQ(plan.status_line, "304 Not Modified");
    CHECK_EQ(plan.fd, -1);
    CHECK_HEADER(&plan, "vary", "Accept-Encoding");
    CHECK(plan_header(&plan, "etag").len == strlen(etag));
    CHECK_NO_HEADER(&plan, "content-length");
    CHECK_EQ(serve("HEAD", "/static/index.html", inm, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *inm_weak[] = {"If-None-Match", weak, NULL}; /* weak comparison */
    CHECK_EQ(serve("GET", "/static/index.html", inm_weak, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *inm_list[] = {"If-None-Match", list, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm_list, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *inm_lines[] = {"If-None-Match", "\"a\"", "if-none-match", etag, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm_lines, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *inm_star[] = {"If-None-Match", "*", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm_star, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *inm_other[] = {"If-None-Match", "\"something-else\"", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm_other, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* An ETag without its quotes is not the same tag. */
    char bare[128];
    snprintf(bare, sizeof(bare), "%.*s", (int)strlen(etag) - 2, etag + 1);
    const char *inm_bare[] = {"If-None-Match", bare, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", inm_bare, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);

    /* If-Modified-Since: the same date or later is not modified. */
    const char *ims[] = {"If-Modified-Since", lm, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    CHECK(plan_header(&plan, "last-modified").len == 29);
    snprintf(older, sizeof(older), "Thu, 01 Jan 1970 00:00:00 GMT");
    snprintf(newer, sizeof(newer), "Fri, 31 Dec 9999 23:59:59 GMT");
    const char *ims_old[] = {"If-Modified-Since", older, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_old, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *ims_new[] = {"If-Modified-Since", newer, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_new, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    /* The obsolete date forms are read too. */
    const char *ims_850[] = {"If-Modified-Since", "Friday, 31-Dec-49 23:59:59 GMT", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_850, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *ims_asc[] = {"If-Modified-Since", "Fri Dec 31 23:59:59 9999", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_asc, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    const char *ims_asc1[] = {"If-Modified-Since", "Thu Jan  1 00:00:00 1970", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_asc1, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* An invalid date, or two fields, are ignored. */
    const char *ims_bad[] = {"If-Modified-Since", "yesterday", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_bad, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *ims_two[] = {"If-Modified-Since", newer, "If-Modified-Since", newer, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ims_two, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* If-None-Match wins over If-Modified-Since (RFC 9110 13.1.3). */
    const char *both[] = {"If-None-Match", "\"other\"", "If-Modified-Since", newer, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", both, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);

    /* If-Match (strong comparison) and If-Unmodified-Since: 412 when false. */
    const char *im[] = {"If-Match", etag, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *im_list[] = {"If-Match", list, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im_list, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *im_star[] = {"If-Match", "*", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im_star, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *im_weak[] = {"If-Match", weak, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im_weak, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 412);
    CHECK_SLICE_EQ(plan.status_line, "412 Precondition Failed");
    CHECK_EQ(plan.fd, -1);
    CHECK_HEADER(&plan, "content-length", "0");
    CHECK(plan_header(&plan, "etag").len == strlen(etag));
    const char *im_other[] = {"If-Match", "\"other\"", NULL};
    CHECK_EQ(serve("HEAD", "/static/index.html", im_other, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 412);
    /* If-Match is checked before If-None-Match. */
    const char *im_inm[] = {"If-Match", "\"other\"", "If-None-Match", etag, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im_inm, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 412);
    const char *ius_old[] = {"If-Unmodified-Since", older, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ius_old, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 412);
    const char *ius_same[] = {"If-Unmodified-Since", lm, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ius_same, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    const char *ius_bad[] = {"If-Unmodified-Since", "never", NULL};
    CHECK_EQ(serve("GET", "/static/index.html", ius_bad, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* If-Match that matches wins over an If-Unmodified-Since in the past. */
    const char *im_ius[] = {"If-Match", etag, "If-Unmodified-Since", older, NULL};
    CHECK_EQ(serve("GET", "/static/index.html", im_ius, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
}

/* ---- ranges -------------------------------------------------------------- */

static int range_status(const char *range, const char *if_range, ps_static_plan_t *plan)
{
    const char *h[] = {"Range", range, if_range ? "If-Range" : NULL, if_range, NULL};
    int rc = serve("GET", "/static/data.bin", range ? h : h + 2, plan);
    return rc == PS_STATIC_RESPOND ? plan->status : -1;
}

static void test_ranges(void)
{
    ps_static_plan_t plan;
    CHECK_EQ(range_status("bytes=0-9", NULL, &plan), 206);
    CHECK_SLICE_EQ(plan.status_line, "206 Partial Content");
    CHECK_HEADER(&plan, "content-range", "bytes 0-9/1000");
    CHECK_HEADER(&plan, "content-length", "10");
    CHECK_BODY(&plan, "abcdefghij");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=26-27", NULL, &plan), 206);
    CHECK_EQ(plan.offset, 26);
    CHECK_EQ(plan.length, 2);
    CHECK_BODY(&plan, "ab");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=998-", NULL, &plan), 206);
    CHECK_HEADER(&plan, "content-range", "bytes 998-999/1000");
    CHECK_BODY(&plan, "kl");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=-3", NULL, &plan), 206);
    CHECK_HEADER(&plan, "content-range", "bytes 997-999/1000");
    CHECK_BODY(&plan, "jkl");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=-5000", NULL, &plan), 206); /* the whole file */
    CHECK_HEADER(&plan, "content-range", "bytes 0-999/1000");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=990-99999999999999999999999", NULL, &plan), 206); /* clamped */
    CHECK_HEADER(&plan, "content-range", "bytes 990-999/1000");
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("BYTES = 0-0", NULL, &plan), 200); /* OWS is not allowed before '=' */
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("Bytes=5-5", NULL, &plan), 206); /* the unit is case-insensitive */
    CHECK_BODY(&plan, "f");
    ps_static_plan_release(&plan);
    /* Unsatisfiable: 416 with the size. */
    CHECK_EQ(range_status("bytes=1000-", NULL, &plan), 416);
    CHECK_SLICE_EQ(plan.status_line, "416 Range Not Satisfiable");
    CHECK_HEADER(&plan, "content-range", "bytes */1000");
    CHECK_HEADER(&plan, "content-length", "0");
    CHECK_EQ(plan.fd, -1);
    CHECK_EQ(range_status("bytes=5000-6000", NULL, &plan), 416);
    CHECK_EQ(range_status("bytes=-0", NULL, &plan), 416);
    /* Malformed or several ranges: the whole file. */
    static const char *const whole[] = {
        "bytes=5-1",      "bytes=abc",   "bytes=",    "bytes=-",    "items=0-1", "bytes=0-1,5-6",
        "bytes=0-1, 3-4", "bytes=1-2-3", "bytes 0-1", "bytes=+1-2", "",
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(whole); i++) {
        if (!CHECK_EQ(range_status(whole[i], NULL, &plan), 200))
            fprintf(stderr, "    range: %s\n", whole[i]);
        CHECK_NO_HEADER(&plan, "content-range");
        CHECK_EQ(plan.length, 1000);
        ps_static_plan_release(&plan);
    }
    const char *two[] = {"Range", "bytes=0-1", "Range", "bytes=0-1", NULL};
    CHECK_EQ(serve("GET", "/static/data.bin", two, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* An empty file has no satisfiable range. */
    const char *r0[] = {"Range", "bytes=0-0", NULL};
    CHECK_EQ(serve("GET", "/static/empty.txt", r0, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 416);
    CHECK_HEADER(&plan, "content-range", "bytes */0");
    /* If-Range: the strong ETag or the exact date; otherwise the whole file. */
    char etag[128], lm[64], weak[160];
    etag_of("/static/data.bin", NULL, etag, sizeof(etag));
    lm_of("/static/data.bin", lm, sizeof(lm));
    snprintf(weak, sizeof(weak), "W/%s", etag);
    CHECK_EQ(range_status("bytes=0-1", etag, &plan), 206);
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=0-1", lm, &plan), 206);
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=0-1", weak, &plan), 200); /* weak tags never match */
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=0-1", "\"stale\"", &plan), 200);
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=0-1", "Thu, 01 Jan 1970 00:00:00 GMT", &plan), 200);
    ps_static_plan_release(&plan);
    CHECK_EQ(range_status("bytes=5000-", "\"stale\"", &plan), 200); /* no 416 either */
    ps_static_plan_release(&plan);
    /* A date that starts with 'W' (a Wednesday) is a date, not a weak tag. */
    char path[512];
    in_root("pub/data.bin", path, sizeof(path));
    struct timespec wed[2] = {{784371600, 0}, {784371600, 0}}; /* Wed, 09 Nov 1994 09:00:00 */
    CHECK_EQ(utimensat(AT_FDCWD, path, wed, 0), 0);
    CHECK_EQ(range_status("bytes=0-1", "Wed, 09 Nov 1994 09:00:00 GMT", &plan), 206);
    ps_static_plan_release(&plan);
    /* A 304 comes before the Range. */
    etag_of("/static/data.bin", NULL, etag, sizeof(etag));
    const char *cond[] = {"Range", "bytes=0-1", "If-None-Match", etag, NULL};
    CHECK_EQ(serve("GET", "/static/data.bin", cond, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
}

/* ---- precompressed siblings ---------------------------------------------- */

static int encoding_for(const char *target, const char *ae, ps_static_plan_t *plan)
{
    const char *h[] = {"Accept-Encoding", ae, NULL};
    int rc = serve("GET", target, ae ? h : NULL, plan);
    return rc == PS_STATIC_RESPOND ? plan->encoding : -1;
}

static void test_precompressed(void)
{
    ps_static_plan_t plan;
    static const struct {
        const char *ae;
        int js, css;
    } cases[] = {
        {NULL, PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"", PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"gzip", PS_CODING_GZIP, PS_CODING_GZIP},
        {"x-gzip", PS_CODING_GZIP, PS_CODING_GZIP},
        {"GZIP", PS_CODING_GZIP, PS_CODING_GZIP},
        {"br", PS_CODING_BR, PS_CODING_IDENTITY},
        {"gzip, deflate, br", PS_CODING_BR, PS_CODING_GZIP},
        {"gzip;q=1.0, br;q=0.5", PS_CODING_GZIP, PS_CODING_GZIP},
        {"br;q=0.8, gzip;q=0.9, identity;q=1", PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"br;q=0, gzip", PS_CODING_GZIP, PS_CODING_GZIP},
        {"br;q=0.000, gzip;q=0", PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"*", PS_CODING_BR, PS_CODING_GZIP},
        {"*;q=0.5, br;q=0", PS_CODING_ZSTD, PS_CODING_GZIP},
        {"identity;q=0", PS_CODING_IDENTITY, PS_CODING_IDENTITY}, /* nothing else: the file */
        {"identity;q=0, gzip;q=0.1", PS_CODING_GZIP, PS_CODING_GZIP},
        {"*;q=0", PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"br;q=2", PS_CODING_IDENTITY, PS_CODING_IDENTITY},     /* a bad qvalue: ignored */
        {"br;level=5", PS_CODING_IDENTITY, PS_CODING_IDENTITY}, /* an unknown parameter */
        {" br ; q=0.9 ,, gzip ; q=0.8", PS_CODING_BR, PS_CODING_GZIP},
        {"gzip;q=0.001", PS_CODING_GZIP, PS_CODING_GZIP}, /* named: preferred to identity */
        {"identity, gzip;q=0.5", PS_CODING_IDENTITY, PS_CODING_IDENTITY},
        {"identity;q=0.5, gzip;q=0.5, br;q=0.4", PS_CODING_GZIP, PS_CODING_GZIP},
        {"zstd", PS_CODING_ZSTD, PS_CODING_IDENTITY},
        {"gzip, zstd", PS_CODING_ZSTD, PS_CODING_GZIP},
        {"gzip, deflate, br, zstd", PS_CODING_BR, PS_CODING_GZIP},
        {"br;q=0.5, zstd;q=0.9, gzip;q=0.7", PS_CODING_ZSTD, PS_CODING_GZIP},
        {"br;q=0.5;q=0.5, gzip;q=0.1", PS_CODING_GZIP, PS_CODING_GZIP}, /* one weight only */
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(cases); i++) {
        int js = encoding_for("/static/app.js", cases[i].ae, &plan);
        ps_static_plan_release(&plan);
        int css = encoding_for("/static/style.css", cases[i].ae, &plan);
        ps_static_plan_release(&plan);
        if (!CHECK_EQ(js, cases[i].js) || !CHECK_EQ(css, cases[i].css))
            fprintf(stderr, "    accept-encoding: %s\n", cases[i].ae ? cases[i].ae : "(none)");
    }
    /* Each representation: its bytes, its Content-Encoding, its own ETag,
     * the original's Content-Type, Vary on all of them. */
    char e_id[128], e_gz[128], e_br[128];
    const char *gz[] = {"Accept-Encoding", "gzip", NULL};
    const char *br[] = {"Accept-Encoding", "br", NULL};
    CHECK_EQ(encoding_for("/static/app.js", "gzip", &plan), PS_CODING_GZIP);
    CHECK_HEADER(&plan, "content-encoding", "gzip");
    CHECK_HEADER(&plan, "content-type", "text/javascript; charset=utf-8");
    CHECK_HEADER(&plan, "content-length", "8");
    CHECK_HEADER(&plan, "vary", "Accept-Encoding");
    CHECK_BODY(&plan, "GZ-BYTES");
    ps_static_plan_release(&plan);
    CHECK_EQ(encoding_for("/static/app.js", "br", &plan), PS_CODING_BR);
    CHECK_HEADER(&plan, "content-encoding", "br");
    CHECK_BODY(&plan, "BR");
    ps_static_plan_release(&plan);
    CHECK_EQ(encoding_for("/static/app.js", "zstd", &plan), PS_CODING_ZSTD);
    CHECK_HEADER(&plan, "content-encoding", "zstd");
    CHECK_BODY(&plan, "ZSTD-BYTES");
    ps_static_plan_release(&plan);
    CHECK_EQ(encoding_for("/static/app.js", NULL, &plan), PS_CODING_IDENTITY);
    CHECK_NO_HEADER(&plan, "content-encoding");
    CHECK_HEADER(&plan, "vary", "Accept-Encoding");
    CHECK_BODY(&plan, "console.log('identity');\n");
    ps_static_plan_release(&plan);
    etag_of("/static/app.js", NULL, e_id, sizeof(e_id));
    etag_of("/static/app.js", gz, e_gz, sizeof(e_gz));
    etag_of("/static/app.js", br, e_br, sizeof(e_br));
    CHECK(strcmp(e_id, e_gz) != 0 && strcmp(e_gz, e_br) != 0 && strcmp(e_id, e_br) != 0);
    CHECK(strstr(e_gz, "-gz\"") != NULL && strstr(e_br, "-br\"") != NULL);
    /* A 304 is per representation. */
    const char *inm_gz[] = {"Accept-Encoding", "gzip", "If-None-Match", e_gz, NULL};
    CHECK_EQ(serve("GET", "/static/app.js", inm_gz, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 304);
    CHECK_NO_HEADER(&plan, "content-encoding");
    CHECK_HEADER(&plan, "vary", "Accept-Encoding");
    const char *inm_id[] = {"Accept-Encoding", "br", "If-None-Match", e_gz, NULL};
    CHECK_EQ(serve("GET", "/static/app.js", inm_id, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 200);
    ps_static_plan_release(&plan);
    /* A Range applies to the representation sent. */
    const char *range_gz[] = {"Accept-Encoding", "gzip", "Range", "bytes=3-", NULL};
    CHECK_EQ(serve("GET", "/static/app.js", range_gz, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 206);
    CHECK_HEADER(&plan, "content-range", "bytes 3-7/8");
    CHECK_BODY(&plan, "BYTES");
    ps_static_plan_release(&plan);
    /* A sibling alone is not the file: no app.txt, no app.txt.gz served. */
    put_str("pub/lonely.txt.gz", "x");
    CHECK_EQ(encoding_for("/static/lonely.txt", "gzip", &plan), -1);
    /* The sibling itself may be asked for by its name. */
    CHECK_EQ(encoding_for("/static/app.js.gz", NULL, &plan), PS_CODING_IDENTITY);
    CHECK_HEADER(&plan, "content-type", "application/gzip");
    ps_static_plan_release(&plan);
    /* Precompression off: the siblings are never looked at. */
    st.precompressed = 0;
    CHECK_EQ(encoding_for("/static/app.js", "gzip, br", &plan), PS_CODING_IDENTITY);
    CHECK_NO_HEADER(&plan, "vary");
    ps_static_plan_release(&plan);
    st.precompressed = 1;
    /* A sibling that is a link out of the tree is not used. */
    char p[512];
    put_str("pub/evil.js", "evil-identity");
    in_root("pub/evil.js.gz", p, sizeof(p));
    unlink(p);
    if (symlink("../secret.txt", p) < 0)
        perror("symlink");
    CHECK_EQ(encoding_for("/static/evil.js", "gzip", &plan), PS_CODING_IDENTITY);
    CHECK_BODY(&plan, "evil-identity");
    ps_static_plan_release(&plan);
}

/* ---- strict mode and 405 ------------------------------------------------- */

static void test_strict(void)
{
    ps_static_plan_t plan;
    st.strict = 1;
    CHECK_EQ(serve("GET", "/static/nope.css", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 404);
    CHECK_SLICE_EQ(plan.status_line, "404 Not Found");
    CHECK_HEADER(&plan, "content-type", "text/plain; charset=utf-8");
    CHECK_EQ(serve("GET", "/static/sub/", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 404);
    CHECK_EQ(serve("GET", "/static/fifo", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 404);
    CHECK_EQ(serve("POST", "/static/index.html", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(plan.status, 405);
    CHECK_HEADER(&plan, "allow", "GET, HEAD");
    CHECK_MEM_EQ(plan.body.base, plan.body.len, "Method Not Allowed\n");
    CHECK_EQ(serve("GET", "/elsewhere", NULL, &plan), PS_STATIC_NONE); /* not a mount */
    st.strict = 0;
}

/* ---- a file replaced while its plan is open ------------------------------- */

static void test_replaced(void)
{
    ps_static_plan_t plan, again;
    char p[512], q[512], before[128], after[128];
    put_str("pub/swap.txt", "old contents\n");
    etag_of("/static/swap.txt", NULL, before, sizeof(before));
    CHECK_EQ(serve("GET", "/static/swap.txt", NULL, &plan), PS_STATIC_RESPOND);
    /* Replaced by rename, as deploy tools do: the plan keeps the old inode. */
    put_str("pub/swap.new", "new contents, longer\n");
    in_root("pub/swap.new", p, sizeof(p));
    in_root("pub/swap.txt", q, sizeof(q));
    CHECK_EQ(rename(p, q), 0);
    CHECK_BODY(&plan, "old contents\n");
    CHECK_HEADER(&plan, "content-length", "13");
    ps_static_plan_release(&plan);
    /* The next request sees the new file under a new ETag. */
    CHECK_EQ(serve("GET", "/static/swap.txt", NULL, &again), PS_STATIC_RESPOND);
    CHECK_BODY(&again, "new contents, longer\n");
    ps_static_plan_release(&again);
    etag_of("/static/swap.txt", NULL, after, sizeof(after));
    CHECK(strcmp(before, after) != 0);
    /* Truncated in place: the plan's length is no longer there to send,
     * which the sender sees as a short read (and must close on). */
    CHECK_EQ(serve("GET", "/static/swap.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(truncate(q, 3), 0);
    char buf[64];
    CHECK_EQ(plan_body(&plan, buf, sizeof(buf)), 3);
    CHECK(plan.length == 21);
    ps_static_plan_release(&plan);
    /* Deleted: the open fd still reads; a new request misses. */
    CHECK_EQ(serve("GET", "/static/swap.txt", NULL, &plan), PS_STATIC_RESPOND);
    CHECK_EQ(unlink(q), 0);
    CHECK_BODY(&plan, "new");
    ps_static_plan_release(&plan);
    CHECK_EQ(serve("GET", "/static/swap.txt", NULL, &again), PS_STATIC_MISS);
}

/* No fd is left open by any path through the code above. */
static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            n++;
    return n;
}

int main(void)
{
    make_tree();
    int fds = count_fds();
    ps_static_init(&st);
    CHECK_EQ(add_spec(&st, "/static", "pub"), 0);
    test_mount_specs();
    test_matching();
    test_traversal();
    test_links(0);
    fprintf(stderr, "test_static: openat2 %s on this kernel\n",
            ps_static_have_openat2() ? "in use" : "unavailable (ENOSYS): the O_NOFOLLOW walk");
    test_links(1);
    test_mime();
    test_headers();
    test_validator_format();
    test_conditionals();
    test_ranges();
    test_precompressed();
    st.no_openat2 = 1; /* the same answers through the fallback walk */
    test_matching();
    test_traversal();
    test_headers();
    test_validator_format();
    test_precompressed();
    st.no_openat2 = 0;
    test_strict();
    test_replaced();
    ps_static_free(&st);
    CHECK_EQ(count_fds(), fds); /* the mounts' dirfds are closed too */
    remove_tree();
    return check_finish("test_static");
}
