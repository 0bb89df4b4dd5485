#define _GNU_SOURCE
#include "serve/static.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"

#define MAX_PATH 4096 /* decoded path bytes; longer targets are misses */

/* ---- mounts ------------------------------------------------------------ */

void ps_static_init(ps_static_t *s)
{
    memset(s, 0, sizeof(*s));
    s->max_age = -1;
    s->precompressed = 1;
}

/* 1 when a mount prefix is acceptable: '/' then segments of plain bytes. */
static int valid_prefix(const char *p, size_t n)
{
    if (n == 0 || p[0] != '/')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '%' || p[i] == '\\' || p[i] == '\0')
            return 0;
    for (size_t i = 1, start = 1; i <= n; i++) {
        if (i < n && p[i] != '/')
            continue;
        size_t seg = i - start;
        if (i < n && seg == 0) /* "//" inside */
            return 0;
        if ((seg == 1 && p[start] == '.') || (seg == 2 && p[start] == '.' && p[start + 1] == '.'))
            return 0;
        start = i + 1;
    }
    return 1;
}

int ps_static_add(ps_static_t *s, const char *spec, size_t len)
{
    const char *eq = memchr(spec, '=', len);
    if (eq == NULL || eq == spec || eq + 1 == spec + len || memchr(spec, '\0', len))
        return -EINVAL;
    size_t plen = (size_t)(eq - spec);
    if (!valid_prefix(spec, plen))
        return -EINVAL;
    while (plen > 0 && spec[plen - 1] == '/')
        plen--; /* "/static/" is "/static", "/" is "" */
    for (uint32_t i = 0; i < s->nmounts; i++)
        if (s->mounts[i].prefix_len == plen && memcmp(s->mounts[i].prefix, spec, plen) == 0)
            return -EEXIST;
    ps_static_mount_t m = {0};
    m.prefix = strndup(spec, plen);
    m.dir = strndup(eq + 1, (size_t)(spec + len - eq - 1));
    m.prefix_len = plen;
    m.dirfd = -1;
    ps_static_mount_t *grown = realloc(s->mounts, (s->nmounts + 1) * sizeof(*grown));
    if (m.prefix == NULL || m.dir == NULL || grown == NULL) {
        free(m.prefix);
        free(m.dir);
        if (grown)
            s->mounts = grown;
        return -ENOMEM;
    }
    s->mounts = grown;
    m.dirfd = open(m.dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (m.dirfd < 0) {
        int err = errno;
        free(m.prefix);
        free(m.dir);
        return -err;
    }
    /* Longest prefix first, so "/static/img" wins over "/static". */
    uint32_t at = s->nmounts;
    while (at > 0 && s->mounts[at - 1].prefix_len < plen) {
        s->mounts[at] = s->mounts[at - 1];
        at--;
    }
    s->mounts[at] = m;
    s->nmounts++;
    return 0;
}

void ps_static_free(ps_static_t *s)
{
    for (uint32_t i = 0; i < s->nmounts; i++) {
        close(s->mounts[i].dirfd);
        free(s->mounts[i].prefix);
        free(s->mounts[i].dir);
    }
    free(s->mounts);
    free(s->mime);
    ps_buf_free(&s->mime_strings);
    memset(s, 0, sizeof(*s));
}

/* ---- MIME types -------------------------------------------------------- */

/* What the file does not name (or when there is no file). */
static const struct {
    const char *ext, *type;
} builtin_types[] = {
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "text/javascript"},
    {"mjs", "text/javascript"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"webmanifest", "application/manifest+json"},
    {"xml", "application/xml"},
    {"txt", "text/plain"},
    {"csv", "text/csv"},
    {"md", "text/markdown"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"ico", "image/vnd.microsoft.icon"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"eot", "application/vnd.ms-fontobject"},
    {"wasm", "application/wasm"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"br", "application/x-brotli"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
    {"wav", "audio/wav"},
};

static uint32_t hash_ext(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

static const char *mime_find(const ps_static_t *s, const char *ext, size_t n)
{
    if (s->mime == NULL)
        return NULL;
    const char *strings = s->mime_strings.data;
    for (uint32_t i = hash_ext(ext, n) & s->mime_mask;; i = (i + 1) & s->mime_mask) {
        const ps_mime_entry_t *e = &s->mime[i];
        if (e->ext_len == 0)
            return NULL;
        if (e->ext_len == n && memcmp(strings + e->ext_off, ext, n) == 0)
            return strings + e->type_off;
    }
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* Calls fn for each "type ext..." pair of the text; returns the count. */
static size_t each_pair(const char *t, size_t n,
                        void (*fn)(ps_static_t *, size_t, size_t, size_t, size_t), ps_static_t *s)
{
    size_t count = 0, i = 0;
    while (i < n) {
        size_t eol = i;
        while (eol < n && t[eol] != '\n')
            eol++;
        size_t j = i, type = 0, type_len = 0;
        while (j < eol) {
            while (j < eol && is_space(t[j]))
                j++;
            if (j == eol || t[j] == '#')
                break;
            size_t w = j;
            while (j < eol && !is_space(t[j]) && t[j] != '#')
                j++;
            if (type_len == 0) {
                type = w;
                type_len = j - w;
            } else {
                if (fn)
                    fn(s, type, type_len, w, j - w);
                count++;
            }
        }
        i = eol + 1;
    }
    return count;
}

/* Appends "ext\0" (lower case) and "type\0" to the strings and the entry to
 * the table unless the extension is there already. */
static void add_pair(ps_static_t *s, size_t type, size_t type_len, size_t ext, size_t ext_len)
{
    ps_buf_t *b = &s->mime_strings;
    const char *text = b->data; /* the file's text is at the start of the buffer */
    if (ext_len > 32 || type_len > 127)
        return;
    char low[33] = {0};
    for (size_t i = 0; i < ext_len; i++) {
        char c = text[ext + i];
        low[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    if (mime_find(s, low, ext_len))
        return;
    uint32_t slot = hash_ext(low, ext_len) & s->mime_mask;
    while (s->mime[slot].ext_len != 0)
        slot = (slot + 1) & s->mime_mask;
    /* room was reserved for every pair: appending never moves the data */
    ps_mime_entry_t *e = &s->mime[slot];
    e->ext_off = (uint32_t)b->len;
    e->ext_len = (uint32_t)ext_len;
    memcpy(b->data + b->len, low, ext_len);
    b->data[b->len + ext_len] = '\0';
    b->len += ext_len + 1;
    e->type_off = (uint32_t)b->len;
    memcpy(b->data + b->len, text + type, type_len);
    b->data[b->len + type_len] = '\0';
    b->len += type_len + 1;
}

int ps_static_load_mime(ps_static_t *s, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ps_buf_t *b = &s->mime_strings;
    ps_buf_reset(b);
    for (;;) {
        if (ps_buf_reserve(b, 65536) < 0) {
            close(fd);
            return -ENOMEM;
        }
        ssize_t n = read(fd, b->data + b->len, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (n == 0)
            break;
        b->len += (size_t)n;
        if (b->len > (64u << 20)) { /* not a mime.types file */
            close(fd);
            return -EFBIG;
        }
    }
    close(fd);
    size_t text_len = b->len, pairs = each_pair(b->data, text_len, NULL, s);
    uint32_t slots = 16;
    while (slots < pairs * 2)
        slots <<= 1;
    free(s->mime);
    s->mime = calloc(slots, sizeof(*s->mime));
    if (s->mime == NULL || ps_buf_reserve(b, pairs * (33 + 128)) < 0) {
        free(s->mime);
        s->mime = NULL;
        return -ENOMEM;
    }
    s->mime_mask = slots - 1;
    each_pair(b->data, text_len, add_pair, s);
    return 0;
}

const char *ps_static_mime_type(const ps_static_t *s, const char *name, size_t len)
{
    const char *base = name;
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == '/') {
            base = name + i;
            break;
        }
    size_t blen = (size_t)(name + len - base);
    const char *dot = NULL;
    for (size_t i = blen; i > 1; i--) /* a leading dot is a hidden name, not an extension */
        if (base[i - 1] == '.') {
            dot = base + i - 1;
            break;
        }
    size_t n = dot ? (size_t)(base + blen - dot - 1) : 0;
    if (n == 0 || n > 32)
        return "application/octet-stream";
    char low[33];
    for (size_t i = 0; i < n; i++) {
        char c = dot[1 + i];
        low[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    low[n] = '\0';
    const char *t = mime_find(s, low, n);
    if (t)
        return t;
    for (size_t i = 0; i < PS_ARRAY_LEN(builtin_types); i++)
        if (strcmp(builtin_types[i].ext, low) == 0)
            return builtin_types[i].type;
    return "application/octet-stream";
}

/* Types whose Content-Type carries "; charset=utf-8". */
static int is_text_type(const char *t)
{
    return strncmp(t, "text/", 5) == 0 || strcmp(t, "application/javascript") == 0 ||
           strcmp(t, "application/json") == 0 || strcmp(t, "application/manifest+json") == 0 ||
           strcmp(t, "application/xml") == 0 || strcmp(t, "image/svg+xml") == 0;
}

/* ---- opening beneath a directory --------------------------------------- */

#define OPEN_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

static int openat2_state = 1; /* 1: try it, 0: ENOSYS was seen */

int ps_static_have_openat2(void)
{
    return __atomic_load_n(&openat2_state, __ATOMIC_RELAXED);
}

/* The fallback: each directory opened with O_NOFOLLOW, so a symlink
 * anywhere in the path (a directory or the file) fails the open. rel holds
 * plain names only (no "", "." or ".."). Returns the fd or -errno. */
static int walk_beneath(int dirfd, const char *rel)
{
    char buf[MAX_PATH + 1];
    size_t n = strlen(rel);
    if (n > MAX_PATH)
        return -ENAMETOOLONG;
    memcpy(buf, rel, n + 1);
    int cur = dirfd;
    char *name = buf;
    for (;;) {
        char *slash = strchr(name, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
        int next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int err = errno;
        if (cur != dirfd)
            close(cur);
        if (next < 0)
            return -err;
        cur = next;
        name = slash + 1;
    }
    int fd = openat(cur, name, OPEN_FLAGS | O_NOFOLLOW);
    int err = errno;
    if (cur != dirfd)
        close(cur);
    return fd < 0 ? -err : fd;
}

/* Opens rel (plain names joined by '/') beneath dirfd. Returns the fd or
 * -errno (-EXDEV or -ELOOP for a link out of the tree). */
static int open_beneath(const ps_static_t *s, int dirfd, const char *rel)
{
    if (!s->no_openat2 && ps_static_have_openat2()) {
        struct open_how how = {.flags = OPEN_FLAGS,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
        long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno != ENOSYS)
            return -errno;
        __atomic_store_n(&openat2_state, 0, __ATOMIC_RELAXED);
    }
    return walk_beneath(dirfd, rel);
}

/* Opens a regular file; *st gets its status. Returns the fd, -ENOENT for
 * anything that is not a regular file, or -errno. */
static int open_file(const ps_static_t *s, int dirfd, const char *rel, struct stat *st)
{
    int fd = open_beneath(s, dirfd, rel);
    if (fd < 0)
        return fd;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return -ENOENT;
    }
    return fd;
}

/* ---- the path ---------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes path into out (room for MAX_PATH bytes). A decoded '/' or NUL is
 * written as NUL (so it never separates segments) and, like a backslash or
 * a malformed escape, sets *bad. Returns the length, or -1 when too long. */
static long decode_path(ps_slice_t path, char *out, const char **bad)
{
    size_t o = 0;
    for (size_t i = 0; i < path.len; i++) {
        char c = path.base[i];
        if (c == '%') {
            int hi = i + 2 < path.len ? hexval(path.base[i + 1]) : -1;
            int lo = hi >= 0 ? hexval(path.base[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                *bad = "malformed percent-escape";
                c = '\0';
            } else {
                c = (char)(hi * 16 + lo);
                i += 2;
                if (c == '/') {
                    *bad = "encoded slash";
                    c = '\0';
                } else if (c == '\0') {
                    *bad = "encoded NUL";
                }
            }
        }
        if (c == '\\')
            *bad = "backslash";
        if (o == MAX_PATH)
            return -1;
        out[o++] = c;
    }
    return (long)o;
}

/* The mount whose prefix is a whole-segment prefix of path, or NULL. */
static const ps_static_mount_t *find_mount(const ps_static_t *s, const char *path, size_t n)
{
    for (uint32_t i = 0; i < s->nmounts; i++) {
        const ps_static_mount_t *m = &s->mounts[i];
        if (n >= m->prefix_len && memcmp(path, m->prefix, m->prefix_len) == 0 &&
            (n == m->prefix_len || path[m->prefix_len] == '/'))
            return m;
    }
    return NULL;
}

/* The path under the mount as plain names joined by '/', into rel (room
 * for MAX_PATH + 1). Returns its length, 0 for a directory (the mount
 * itself, or a trailing '/'), or -1 with *bad set for a ".." segment. */
static long relative_path(const char *p, size_t n, char *rel, const char **bad)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && p[i] == '/')
            i++;
        size_t start = i;
        while (i < n && p[i] != '/')
            i++;
        size_t seg = i - start;
        if (seg == 0 || (seg == 1 && p[start] == '.'))
            continue;
        if (seg == 2 && p[start] == '.' && p[start + 1] == '.') {
            *bad = "dot-dot segment";
            return -1;
        }
        if (o > 0)
            rel[o++] = '/';
        memcpy(rel + o, p + start, seg);
        o += seg;
    }
    rel[o] = '\0';
    if (n > 0 && p[n - 1] == '/')
        return 0; /* asked for a directory */
    return (long)o;
}

/* ---- request fields ---------------------------------------------------- */

static int header_is(const ps_header_t *h, const char *name, size_t n)
{
    return ps_slice_ieq(h->name, name, n);
}

#define HEADER_IS(h, lit) header_is((h), (lit), sizeof(lit) - 1)

/* The value of the single field named lit, or base NULL when absent; *count
 * gets how many there were. */
static ps_slice_t single_field(const ps_request_t *r, const char *name, size_t n, int *count)
{
    ps_slice_t v = {NULL, 0};
    *count = 0;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (header_is(&r->headers[i], name, n)) {
            if ((*count)++ == 0)
                v = r->headers[i].value;
        }
    return v;
}

static ps_slice_t trim(ps_slice_t s)
{
    while (s.len > 0 && (s.base[0] == ' ' || s.base[0] == '\t')) {
        s.base++;
        s.len--;
    }
    while (s.len > 0 && (s.base[s.len - 1] == ' ' || s.base[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* Splits the next comma-separated element off *list (trimmed, maybe empty);
 * returns 0 when the list is used up. */
static int next_element(ps_slice_t *list, ps_slice_t *item)
{
    if (list->base == NULL)
        return 0;
    const char *comma = memchr(list->base, ',', list->len);
    size_t n = comma ? (size_t)(comma - list->base) : list->len;
    *item = trim((ps_slice_t){list->base, n});
    if (comma) {
        list->base = comma + 1;
        list->len -= n + 1;
    } else {
        list->base = NULL;
        list->len = 0;
    }
    return 1;
}

/* ---- dates ------------------------------------------------------------- */

static const char day_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static int month_of(const char *s)
{
    for (int i = 0; i < 12; i++)
        if (memcmp(s, month_names[i], 3) == 0)
            return i;
    return -1;
}

/* Reads n digits at s; returns the number or -1. */
static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* An HTTP-date (RFC 9110 5.6.7): IMF-fixdate, or the obsolete RFC 850 and
 * asctime forms. Returns 0 with *t set, or -1. */
static int parse_http_date(ps_slice_t v, time_t *t)
{
    char b[40];
    if (v.len < 24 || v.len >= sizeof(b))
        return -1;
    memcpy(b, v.base, v.len);
    b[v.len] = '\0';
    struct tm tm = {0};
    const char *comma = strchr(b, ',');
    int day, mon, year, hh, mm, ss;
    if (comma && comma - b == 3 && v.len == 29) { /* Sun, 06 Nov 1994 08:49:37 GMT */
        const char *p = b + 5;
        day = digits(p, 2);
        mon = p[2] == ' ' && p[6] == ' ' ? month_of(p + 3) : -1;
        year = digits(p + 7, 4);
        p += 11;
        if (strcmp(p + 9, " GMT") != 0 || p[0] != ' ' || p[3] != ':' || p[6] != ':')
            return -1;
        hh = digits(p + 1, 2), mm = digits(p + 4, 2), ss = digits(p + 7, 2);
    } else if (comma) { /* Sunday, 06-Nov-94 08:49:37 GMT */
        const char *p = comma + 1;
        if (strlen(p) != 23 || p[0] != ' ' || p[3] != '-' || p[7] != '-' || p[10] != ' ' ||
            strcmp(p + 19, " GMT") != 0 || p[13] != ':' || p[16] != ':')
            return -1;
        day = digits(p + 1, 2), mon = month_of(p + 4), year = digits(p + 8, 2);
        if (year >= 0)
            year += year < 70 ? 2000 : 1900; /* RFC 9110: 50 years ahead is in the past */
        hh = digits(p + 11, 2), mm = digits(p + 14, 2), ss = digits(p + 17, 2);
    } else if (v.len == 24) { /* Sun Nov  6 08:49:37 1994 */
        if (b[3] != ' ' || b[7] != ' ' || b[10] != ' ' || b[13] != ':' || b[16] != ':' ||
            b[19] != ' ')
            return -1;
        mon = month_of(b + 4);
        day = b[8] == ' ' ? digits(b + 9, 1) : digits(b + 8, 2);
        hh = digits(b + 11, 2), mm = digits(b + 14, 2), ss = digits(b + 17, 2);
        year = digits(b + 20, 4);
    } else {
        return -1;
    }
    if (day < 1 || day > 31 || mon < 0 || year < 1900 || hh < 0 || hh > 23 || mm < 0 || mm > 59 ||
        ss < 0 || ss > 60)
        return -1;
    tm.tm_mday = day;
    tm.tm_mon = mon;
    tm.tm_year = year - 1900;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    *t = timegm(&tm);
    return 0;
}

/* ---- the plan ---------------------------------------------------------- */

/* Copies formatted text into the plan's scratch; returns it (empty when it
 * does not fit, which the sizes here never reach). */
static ps_slice_t scratch_printf(ps_static_plan_t *plan, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static ps_slice_t scratch_printf(ps_static_plan_t *plan, const char *fmt, ...)
{
    va_list ap;
    char *at = plan->scratch + plan->scratch_len;
    size_t room = PS_STATIC_SCRATCH - plan->scratch_len;
    va_start(ap, fmt);
    int n = vsnprintf(at, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        return (ps_slice_t){"", 0};
    plan->scratch_len += (size_t)n;
    return (ps_slice_t){at, (size_t)n};
}

/* Building a value in the scratch without printf (the per-request fields):
 * scratch_begin, the put_* calls, then scratch_end returns what was written
 * (empty when it did not fit, as scratch_printf). */
typedef struct {
    char *at, *end;
    int full;
} out_t;

static out_t scratch_begin(ps_static_plan_t *plan)
{
    return (out_t){plan->scratch + plan->scratch_len, plan->scratch + PS_STATIC_SCRATCH, 0};
}

static ps_slice_t scratch_end(ps_static_plan_t *plan, const out_t *o)
{
    char *start = plan->scratch + plan->scratch_len;
    if (o->full)
        return (ps_slice_t){"", 0};
    plan->scratch_len = (size_t)(o->at - plan->scratch);
    return (ps_slice_t){start, (size_t)(o->at - start)};
}

static void put_bytes(out_t *o, const char *s, size_t n)
{
    if (o->full || (size_t)(o->end - o->at) < n) {
        o->full = 1;
        return;
    }
    memcpy(o->at, s, n);
    o->at += n;
}

#define PUT_LIT(o, lit) put_bytes((o), (lit), sizeof(lit) - 1)

/* v in lower-case hexadecimal. */
static void put_hex(out_t *o, uint64_t v)
{
    char tmp[16], *p = tmp + sizeof(tmp);
    do {
        *--p = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    put_bytes(o, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* v in decimal, at least `width` digits. */
static void put_dec(out_t *o, uint64_t v, int width)
{
    char tmp[20], *p = tmp + sizeof(tmp);
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (tmp + sizeof(tmp) - p < width)
        *--p = '0';
    put_bytes(o, p, (size_t)(tmp + sizeof(tmp) - p));
}

static void add_header(ps_static_plan_t *plan, ps_slice_t name, ps_slice_t value)
{
    if (plan->nheaders < PS_STATIC_MAX_HEADERS)
        plan->headers[plan->nheaders++] = (ps_header_t){name, value};
}

#define ADD_LIT(plan, name, value) add_header((plan), PS_SLICE_LIT(name), PS_SLICE_LIT(value))

static void plan_reset(ps_static_plan_t *plan)
{
    plan->status = 0;
    plan->status_line = (ps_slice_t){"", 0};
    plan->nheaders = 0;
    plan->fd = -1;
    plan->offset = plan->length = 0;
    plan->body = (ps_slice_t){"", 0};
    plan->encoding = PS_CODING_IDENTITY;
    plan->reason = NULL;
    plan->file_size = 0;
    plan->scratch_len = 0;
}

void ps_static_plan_release(ps_static_plan_t *plan)
{
    if (plan->fd >= 0)
        close(plan->fd);
    plan->fd = -1;
}

static int plan_not_found(ps_static_plan_t *plan, const char *reason)
{
    plan->status = 404;
    plan->status_line = PS_SLICE_LIT("404 Not Found");
    plan->reason = reason;
    plan->body = PS_SLICE_LIT("Not Found\n");
    ADD_LIT(plan, "Content-Type", "text/plain; charset=utf-8");
    ADD_LIT(plan, "Content-Length", "10");
    return PS_STATIC_RESPOND;
}

/* A miss: the application's unless the table is strict. */
static int miss(const ps_static_t *s, ps_static_plan_t *plan, const char *reason)
{
    if (s->strict)
        return plan_not_found(plan, reason);
    plan->reason = reason;
    return PS_STATIC_MISS;
}

/* ---- content negotiation ----------------------------------------------- */

/* The Accept-Encoding fields, all of them as one list (RFC 9110 5.3). */
static void accepted_encodings(const ps_request_t *r, ps_accept_t *a)
{
    ps_accept_init(a);
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (HEADER_IS(&r->headers[i], "accept-encoding"))
            ps_accept_parse(a, r->headers[i].value);
}

/* Picks the representation: the acceptable sibling (or the file itself)
 * with the highest weight, br before gzip before identity on a tie. When
 * nothing is acceptable the file itself is sent (RFC 9110 12.5.3 allows
 * it, and it beats a 406 for a static file). Replaces *fd and *st with the
 * sibling's and returns its PS_STATIC_* encoding; -errno when resources ran
 * out. */
static int choose_encoding(const ps_static_t *s, const ps_request_t *r, int dirfd, char *rel,
                           size_t rel_len, int *fd, struct stat *st)
{
    static const char *const suffix[PS_CODING_COUNT] = {"", ".br", ".zst", ".gz"};
    ps_accept_t a;
    accepted_encodings(r, &a);
    int q[PS_CODING_COUNT];
    ps_coding_t order[PS_CODING_COUNT] = {PS_CODING_BR, PS_CODING_ZSTD, PS_CODING_GZIP,
                                          PS_CODING_IDENTITY};
    for (int c = 0; c < PS_CODING_COUNT; c++)
        q[c] = ps_accept_weight(&a, (ps_coding_t)c);
    for (int i = 1; i < PS_CODING_COUNT; i++) /* stable by weight, highest first */
        for (int j = i; j > 0 && q[order[j]] > q[order[j - 1]]; j--) {
            ps_coding_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < PS_CODING_COUNT; i++) {
        ps_coding_t e = order[i];
        if (e == PS_CODING_IDENTITY || q[e] == 0)
            return PS_CODING_IDENTITY;
        if (rel_len + 4 > MAX_PATH)
            continue;
        memcpy(rel + rel_len, suffix[e], strlen(suffix[e]) + 1);
        struct stat sst;
        int sfd = open_file(s, dirfd, rel, &sst);
        rel[rel_len] = '\0';
        if (sfd == -EMFILE || sfd == -ENFILE || sfd == -ENOMEM)
            return sfd;
        if (sfd < 0)
            continue;
        close(*fd);
        *fd = sfd;
        *st = sst;
        return e;
    }
    return PS_CODING_IDENTITY;
}

/* ---- conditionals and ranges ------------------------------------------- */

/* 1 when an If-None-Match list names etag (weak comparison) or is "*". */
static int none_match(ps_slice_t list, ps_slice_t etag)
{
    ps_slice_t item;
    while (next_element(&list, &item)) {
        if (item.len == 1 && item.base[0] == '*')
            return 1;
        if (item.len >= 2 && item.base[0] == 'W' && item.base[1] == '/') {
            item.base += 2;
            item.len -= 2;
        }
        if (item.len == etag.len && memcmp(item.base, etag.base, etag.len) == 0)
            return 1;
    }
    return 0;
}

/* If-None-Match, else If-Modified-Since (RFC 9110 13.2.2): 1 for a 304. */
static int not_modified(const ps_request_t *r, ps_slice_t etag, time_t mtime)
{
    int inm = 0, matched = 0;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (HEADER_IS(&r->headers[i], "if-none-match")) {
            inm = 1;
            matched |= none_match(r->headers[i].value, etag);
        }
    if (inm)
        return matched;
    int count;
    ps_slice_t ims = single_field(r, "if-modified-since", 17, &count);
    time_t since;
    if (count != 1 || parse_http_date(trim(ims), &since) < 0)
        return 0;
    return mtime <= since;
}

/* 1 when an If-Match list names etag (strong comparison: a weak tag never
 * matches) or is "*". */
static int strong_match(ps_slice_t list, ps_slice_t etag)
{
    ps_slice_t item;
    while (next_element(&list, &item)) {
        if (item.len == 1 && item.base[0] == '*')
            return 1;
        if (item.len == etag.len && memcmp(item.base, etag.base, etag.len) == 0)
            return 1;
    }
    return 0;
}

/* If-Match, else If-Unmodified-Since (RFC 9110 13.2.2, steps 1 and 2):
 * 1 for a 412. An If-Unmodified-Since that is not one valid date is
 * ignored. */
static int precondition_failed(const ps_request_t *r, ps_slice_t etag, time_t mtime)
{
    int im = 0, matched = 0;
    for (uint32_t i = 0; i < r->nheaders; i++)
        if (HEADER_IS(&r->headers[i], "if-match")) {
            im = 1;
            matched |= strong_match(r->headers[i].value, etag);
        }
    if (im)
        return !matched;
    int count;
    ps_slice_t ius = single_field(r, "if-unmodified-since", 19, &count);
    time_t since;
    if (count != 1 || parse_http_date(trim(ius), &since) < 0)
        return 0;
    return mtime > since;
}

/* If-Range: 1 when the Range may be honoured (no If-Range, or it names
 * this representation: the same strong ETag, or exactly its date). */
static int range_applies(const ps_request_t *r, ps_slice_t etag, time_t mtime)
{
    int count;
    ps_slice_t v = single_field(r, "if-range", 8, &count);
    if (count == 0)
        return 1;
    if (count > 1)
        return 0;
    v = trim(v);
    /* An entity tag starts with '"' or "W/"; a date may start with 'W' (Wed). */
    if (v.len > 0 && (v.base[0] == '"' || (v.len > 1 && v.base[0] == 'W' && v.base[1] == '/')))
        return v.len == etag.len && memcmp(v.base, etag.base, v.len) == 0;
    time_t t;
    return parse_http_date(v, &t) == 0 && t == mtime;
}

/* Reads a decimal number, saturating at UINT64_MAX / 10; returns the
 * bytes used (0 when none). */
static size_t read_u64(const char *s, size_t n, uint64_t *v)
{
    size_t i = 0;
    *v = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        *v = *v > UINT64_MAX / 10 - 10 ? UINT64_MAX / 10 : *v * 10 + (uint64_t)(s[i] - '0');
    return i;
}

enum { RANGE_NONE, RANGE_OK, RANGE_UNSATISFIABLE };

/* A single "bytes=" range against size: RANGE_OK with [*first, *last],
 * RANGE_UNSATISFIABLE, or RANGE_NONE (absent, several, or malformed: the
 * whole file is sent). */
static int parse_range(const ps_request_t *r, uint64_t size, uint64_t *first, uint64_t *last)
{
    int count;
    ps_slice_t v = single_field(r, "range", 5, &count);
    if (count != 1)
        return RANGE_NONE;
    v = trim(v);
    if (v.len < 6 || strncasecmp(v.base, "bytes=", 6) != 0)
        return RANGE_NONE;
    ps_slice_t spec = trim((ps_slice_t){v.base + 6, v.len - 6});
    if (spec.len == 0 || memchr(spec.base, ',', spec.len))
        return RANGE_NONE; /* several ranges: the whole file, as RFC 9110 allows */
    uint64_t a, b;
    size_t n = read_u64(spec.base, spec.len, &a);
    if (n == spec.len || spec.base[n] != '-')
        return RANGE_NONE;
    size_t m = read_u64(spec.base + n + 1, spec.len - n - 1, &b);
    if (n + 1 + m != spec.len || (n == 0 && m == 0))
        return RANGE_NONE;
    if (n == 0) { /* -suffix */
        if (b == 0 || size == 0)
            return RANGE_UNSATISFIABLE;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return RANGE_OK;
    }
    if (m > 0 && b < a)
        return RANGE_NONE;
    if (a >= size)
        return RANGE_UNSATISFIABLE;
    *first = a;
    *last = m == 0 || b >= size ? size - 1 : b;
    return RANGE_OK;
}

/* ---- serving ----------------------------------------------------------- */

static void add_validators(const ps_static_t *s, ps_static_plan_t *plan, ps_slice_t etag,
                           ps_slice_t date)
{
    add_header(plan, PS_SLICE_LIT("Last-Modified"), date);
    add_header(plan, PS_SLICE_LIT("ETag"), etag);
    if (s->max_age >= 0) {
        out_t o = scratch_begin(plan);
        PUT_LIT(&o, "public, max-age=");
        put_dec(&o, (uint64_t)s->max_age, 1);
        add_header(plan, PS_SLICE_LIT("Cache-Control"), scratch_end(plan, &o));
    }
    if (s->precompressed)
        ADD_LIT(plan, "Vary", "Accept-Encoding");
}

/* Fills the plan for an open file. Takes fd (it ends in the plan or is
 * closed). Returns PS_STATIC_RESPOND. */
static int plan_file(const ps_static_t *s, const ps_request_t *r, ps_static_plan_t *plan, int fd,
                     const struct stat *st, const char *name, size_t name_len, int encoding)
{
    static const char *const tag_suffix[PS_CODING_COUNT] = {"", "-br", "-zst", "-gz"};
    uint64_t size = (uint64_t)st->st_size;
    uint64_t mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
    time_t mtime = st->st_mtim.tv_sec;
    struct tm tm;
    gmtime_r(&mtime, &tm);
    out_t o = scratch_begin(plan); /* "Sun, 06 Nov 1994 08:49:37 GMT" */
    put_bytes(&o, day_names[tm.tm_wday], 3);
    PUT_LIT(&o, ", ");
    put_dec(&o, (uint64_t)tm.tm_mday, 2);
    PUT_LIT(&o, " ");
    put_bytes(&o, month_names[tm.tm_mon], 3);
    PUT_LIT(&o, " ");
    put_dec(&o, (uint64_t)(tm.tm_year + 1900), 4);
    PUT_LIT(&o, " ");
    put_dec(&o, (uint64_t)tm.tm_hour, 2);
    PUT_LIT(&o, ":");
    put_dec(&o, (uint64_t)tm.tm_min, 2);
    PUT_LIT(&o, ":");
    put_dec(&o, (uint64_t)tm.tm_sec, 2);
    PUT_LIT(&o, " GMT");
    ps_slice_t date = scratch_end(plan, &o);
    o = scratch_begin(plan); /* "INODE-SIZE-MTIME_NS[-gz|-br]" in hex */
    PUT_LIT(&o, "\"");
    put_hex(&o, (uint64_t)st->st_ino);
    PUT_LIT(&o, "-");
    put_hex(&o, size);
    PUT_LIT(&o, "-");
    put_hex(&o, mtime_ns);
    put_bytes(&o, tag_suffix[encoding], strlen(tag_suffix[encoding]));
    PUT_LIT(&o, "\"");
    ps_slice_t etag = scratch_end(plan, &o);
    plan->encoding = (uint8_t)encoding;
    plan->file_size = size;
    if (precondition_failed(r, etag, mtime)) {
        close(fd);
        plan->status = 412;
        plan->status_line = PS_SLICE_LIT("412 Precondition Failed");
        ADD_LIT(plan, "Content-Length", "0");
        add_validators(s, plan, etag, date);
        return PS_STATIC_RESPOND;
    }
    if (not_modified(r, etag, mtime)) {
        close(fd);
        plan->status = 304;
        plan->status_line = PS_SLICE_LIT("304 Not Modified");
        add_validators(s, plan, etag, date);
        return PS_STATIC_RESPOND;
    }
    uint64_t first = 0, last = size ? size - 1 : 0;
    int range = r->is_head || !range_applies(r, etag, mtime) ? RANGE_NONE
                                                             : parse_range(r, size, &first, &last);
    if (range == RANGE_UNSATISFIABLE) {
        close(fd);
        plan->status = 416;
        plan->status_line = PS_SLICE_LIT("416 Range Not Satisfiable");
        add_header(plan, PS_SLICE_LIT("Content-Range"),
                   scratch_printf(plan, "bytes */%llu", (unsigned long long)size));
        ADD_LIT(plan, "Content-Length", "0");
        ADD_LIT(plan, "Accept-Ranges", "bytes");
        return PS_STATIC_RESPOND;
    }
    const char *type = ps_static_mime_type(s, name, name_len);
    ps_slice_t ctype = {type, strlen(type)};
    if (is_text_type(type)) {
        o = scratch_begin(plan);
        put_bytes(&o, ctype.base, ctype.len);
        PUT_LIT(&o, "; charset=utf-8");
        ctype = scratch_end(plan, &o);
    }
    add_header(plan, PS_SLICE_LIT("Content-Type"), ctype);
    uint64_t length = range == RANGE_OK ? last - first + 1 : size;
    o = scratch_begin(plan);
    put_dec(&o, length, 1);
    add_header(plan, PS_SLICE_LIT("Content-Length"), scratch_end(plan, &o));
    if (range == RANGE_OK) {
        plan->status = 206;
        plan->status_line = PS_SLICE_LIT("206 Partial Content");
        add_header(plan, PS_SLICE_LIT("Content-Range"),
                   scratch_printf(plan, "bytes %llu-%llu/%llu", (unsigned long long)first,
                                  (unsigned long long)last, (unsigned long long)size));
    } else {
        plan->status = 200;
        plan->status_line = PS_SLICE_LIT("200 OK");
    }
    ADD_LIT(plan, "Accept-Ranges", "bytes");
    add_validators(s, plan, etag, date);
    if (encoding != PS_CODING_IDENTITY) {
        const char *name = ps_coding_name((ps_coding_t)encoding);
        add_header(plan, PS_SLICE_LIT("Content-Encoding"), (ps_slice_t){name, strlen(name)});
    }
    if (r->is_head || length == 0) {
        close(fd);
        return PS_STATIC_RESPOND;
    }
    plan->fd = fd;
    plan->offset = first;
    plan->length = length;
    return PS_STATIC_RESPOND;
}

static int is_get_or_head(const ps_request_t *r)
{
    return r->method_id == HTTP_GET || r->method_id == HTTP_HEAD;
}

int ps_static_serve(const ps_static_t *s, const ps_request_t *r, ps_static_plan_t *plan)
{
    char path[MAX_PATH], rel[MAX_PATH + 4];
    const char *bad = NULL;
    plan_reset(plan);
    if (s->nmounts == 0)
        return PS_STATIC_NONE;
    ps_slice_t raw, query;
    ps_http_split_target(r->target, &raw, &query);
    if (raw.len == 0 || raw.base[0] != '/')
        return PS_STATIC_NONE;
    long n = decode_path(raw, path, &bad);
    if (n < 0) {
        /* too long to be a file here; under a mount it is a miss */
        const ps_static_mount_t *m = find_mount(s, raw.base, PS_MIN(raw.len, MAX_PATH));
        return m ? miss(s, plan, "path too long") : PS_STATIC_NONE;
    }
    const ps_static_mount_t *m = find_mount(s, path, (size_t)n);
    if (m == NULL)
        return PS_STATIC_NONE;
    if (!is_get_or_head(r)) {
        if (!s->strict) {
            plan->reason = "method is not GET or HEAD";
            return PS_STATIC_MISS;
        }
        plan->status = 405;
        plan->status_line = PS_SLICE_LIT("405 Method Not Allowed");
        plan->reason = "method is not GET or HEAD";
        plan->body = PS_SLICE_LIT("Method Not Allowed\n");
        ADD_LIT(plan, "Allow", "GET, HEAD");
        ADD_LIT(plan, "Content-Type", "text/plain; charset=utf-8");
        ADD_LIT(plan, "Content-Length", "19");
        return PS_STATIC_RESPOND;
    }
    if (bad)
        return plan_not_found(plan, bad); /* refused: never the file system's, nor the app's */
    long rel_len = relative_path(path + m->prefix_len, (size_t)n - m->prefix_len, rel, &bad);
    if (rel_len < 0)
        return plan_not_found(plan, bad);
    if (rel_len == 0)
        return miss(s, plan, "a directory");
    struct stat st;
    int fd = open_file(s, m->dirfd, rel, &st);
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM)
        return fd;
    if (fd < 0)
        return miss(s, plan,
                    fd == -EXDEV || fd == -ELOOP ? "link out of the directory" : "no such file");
    int encoding = PS_CODING_IDENTITY;
    if (s->precompressed) {
        encoding = choose_encoding(s, r, m->dirfd, rel, (size_t)rel_len, &fd, &st);
        if (encoding < 0) {
            close(fd);
            return encoding;
        }
    }
    return plan_file(s, r, plan, fd, &st, rel, (size_t)rel_len, encoding);
}
