/* libFuzzer driver for csrc/serve/static.c: request targets and fields against a
 * directory tree built at start-up (FUZZ_TARGETS=static in scripts/fuzz.sh).
 *
 * Byte 0: bit 0 HEAD instead of GET, bit 1 POST, bit 2 the O_NOFOLLOW walk
 * instead of openat2, bit 3 strict, bit 4 no precompressed siblings. The
 * rest is the target, then "name: value" lines. Whatever is asked:
 *   - a file that is sent is one of the regular files inside the mount
 *     (never the secret file beside it, whatever links or escapes say);
 *   - the plan is a valid response head whose Content-Length is what is
 *     sent; a 206's range lies inside the file and Content-Range says so;
 *   - nothing is left open.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "serve/static.h"
#include "fuzz.h"

static ps_static_t table;
static struct {
    dev_t dev;
    ino_t ino;
} inside[64];
static size_t ninside;
static char root[64];

static void put(const char *rel, const char *text)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        abort();
    fputs(text, f);
    fclose(f);
}

static void link_to(const char *target, const char *rel)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    if (symlink(target, p) < 0)
        abort();
}

static void collect(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[512];
        struct stat st;
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (lstat(p, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            collect(p);
        else if (S_ISREG(st.st_mode) && ninside < PS_ARRAY_LEN(inside)) {
            inside[ninside].dev = st.st_dev;
            inside[ninside].ino = st.st_ino;
            ninside++;
        }
    }
    if (d)
        closedir(d);
}

static void remove_tree(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    PS_UNUSED(argc);
    PS_UNUSED(argv);
    snprintf(root, sizeof(root), "/tmp/ps-fuzz-static-XXXXXX");
    if (mkdtemp(root) == NULL)
        abort();
    atexit(remove_tree);
    char p[256];
    snprintf(p, sizeof(p), "%s/pub", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/pub/sub", root);
    mkdir(p, 0755);
    put("secret", "secret");
    put("pub/a.js", "identity js body");
    put("pub/a.js.gz", "gz");
    put("pub/a.js.br", "br");
    put("pub/index.html", "<p>");
    put("pub/sub/b.css", "b{}");
    put("pub/empty", "");
    link_to("../secret", "pub/out");
    link_to("..", "pub/up");
    link_to("../index.html", "pub/sub/in");
    link_to("../../secret", "pub/sub/out.gz");
    snprintf(p, sizeof(p), "%s/pub", root);
    collect(p);
    ps_static_init(&table);
    char spec[128];
    snprintf(spec, sizeof(spec), "/static=%s/pub", root);
    if (ps_static_add(&table, spec, strlen(spec)) < 0)
        abort();
    snprintf(spec, sizeof(spec), "/=%s/pub/sub", root);
    if (ps_static_add(&table, spec, strlen(spec)) < 0)
        abort();
    return 0;
}

static int is_inside(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return 0;
    for (size_t i = 0; i < ninside; i++)
        if (inside[i].dev == st.st_dev && inside[i].ino == st.st_ino)
            return 1;
    return 0;
}

static ps_slice_t plan_header(const ps_static_plan_t *plan, const char *name)
{
    for (uint32_t i = 0; i < plan->nheaders; i++)
        if (ps_slice_ieq(plan->headers[i].name, name, strlen(name)))
            return plan->headers[i].value;
    return (ps_slice_t){NULL, 0};
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t flags = data[0];
    const char *s = (const char *)data + 1, *end = (const char *)data + size;
    ps_header_t h[16];
    ps_request_t r = {0};
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    r.target = (ps_slice_t){s, (size_t)((nl ? nl : end) - s)};
    s = nl ? nl + 1 : end;
    while (s < end && r.nheaders < 16) {
        nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        const char *colon = memchr(s, ':', (size_t)(e - s));
        const char *v = colon ? colon + 1 : e;
        while (v < e && *v == ' ')
            v++;
        h[r.nheaders].name = (ps_slice_t){s, (size_t)((colon ? colon : e) - s)};
        h[r.nheaders].value = (ps_slice_t){v, (size_t)(e - v)};
        r.nheaders++;
        s = nl ? nl + 1 : end;
    }
    r.headers = h;
    r.method = flags & 2   ? PS_SLICE_LIT("POST")
               : flags & 1 ? PS_SLICE_LIT("HEAD")
                           : PS_SLICE_LIT("GET");
    r.method_id = (uint8_t)ps_http1_method_id(r.method);
    r.is_head = (flags & 3) == 1;
    r.content_length = -1;
    table.no_openat2 = (flags >> 2) & 1;
    table.strict = (flags >> 3) & 1;
    table.precompressed = !((flags >> 4) & 1);

    ps_static_plan_t plan;
    int rc = ps_static_serve(&table, &r, &plan);
    INVARIANT(rc == PS_STATIC_NONE || rc == PS_STATIC_MISS || rc == PS_STATIC_RESPOND);
    if (rc != PS_STATIC_RESPOND) {
        INVARIANT(plan.fd < 0);
        INVARIANT(!table.strict || rc == PS_STATIC_NONE || (flags & 2)); /* strict: 404s */
        return 0;
    }
    ps_head_info_t info;
    INVARIANT(ps_http_scan_head(plan.status_line, plan.headers, plan.nheaders, &info) == 0);
    INVARIANT(info.status == plan.status);
    if (plan.fd >= 0) {
        INVARIANT(is_inside(plan.fd));
        INVARIANT(!r.is_head && (plan.status == 200 || plan.status == 206));
        INVARIANT(plan.length > 0 && plan.offset + plan.length <= plan.file_size);
        INVARIANT(info.content_length == (int64_t)plan.length);
    } else {
        INVARIANT(plan.length == 0);
    }
    if (plan.status == 206) {
        char want[96];
        snprintf(want, sizeof(want), "bytes %llu-%llu/%llu", (unsigned long long)plan.offset,
                 (unsigned long long)(plan.offset + plan.length - 1),
                 (unsigned long long)plan.file_size);
        ps_slice_t cr = plan_header(&plan, "content-range");
        INVARIANT(cr.len == strlen(want) && memcmp(cr.base, want, cr.len) == 0);
    }
    if (plan.status == 404 || plan.status == 405)
        INVARIANT(info.content_length == (int64_t)plan.body.len);
    ps_static_plan_release(&plan);
    return 0;
}
