/* The access log's formatter (accesslog.h): gunicorn's atoms compiled into
 * steps once, run per request into a reused buffer. */
#include "codec/accesslog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/common.h"
#include "codec/trace.h"

enum {
    OP_LIT,         /* literal bytes */
    OP_HOST,        /* h: the client's address */
    OP_PORT,        /* {remote_port}e */
    OP_CLIENT,      /* client: address:port, [v6]:port (pyserver's; "-" over unix) */
    OP_DASH,        /* l: always "-" */
    OP_USER,        /* u: the Basic auth user */
    OP_TIME,        /* t: [02/Dec/2026:01:07:29 +0000] */
    OP_TIME_ISO,    /* JSON time: 2026-12-02T01:07:29+00:00 */
    OP_REQUEST,     /* r: METHOD TARGET HTTP/x.y */
    OP_METHOD,      /* m */
    OP_PATH,        /* U: the target's path, percent-decoded */
    OP_QUERY,       /* q: after '?', "" without one */
    OP_TARGET,      /* {raw_uri}e: the target as sent */
    OP_PROTOCOL,    /* H: HTTP/x.y */
    OP_STATUS,      /* s */
    OP_BYTES,       /* B */
    OP_BYTES_CLF,   /* b: "-" for none */
    OP_SECONDS_INT, /* T */
    OP_MILLIS,      /* M */
    OP_MICROS,      /* D */
    OP_SECONDS,     /* L: 0.000123 */
    OP_PID,         /* p: <1234> */
    OP_PID_NUM,     /* JSON pid */
    OP_HEADER_IN,   /* {name}i, f, a */
    OP_HEADER_OUT,  /* {name}o */
    OP_REQUEST_ID,  /* rid: the request ID (--request-id) */
    OP_TRACE_ID,    /* trace_id: a valid traceparent's (with --request-id) */
    OP_PARENT_ID,   /* parent_id: likewise */
};

typedef struct {
    uint8_t op;
    uint32_t off, len; /* OP_LIT: the bytes, OP_HEADER_*: the lower-case name, in strs */
    const char *name;  /* JSON: the field's name (static) */
} step_t;

struct ps_alog {
    step_t *steps;
    size_t nsteps, cap;
    ps_buf_t strs; /* literals and header names */
    unsigned json : 1;
    unsigned wants_resp : 1;
    ps_buf_t scratch; /* composed values (r, U, u, client), one at a time */
    char num[48];
    time_t t_sec; /* the second t_clf and t_iso were made for */
    char t_clf[48], t_iso[48];
    size_t t_clf_len, t_iso_len;
};

uint64_t ps_alog_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- compiling ---- */

static int add_step(ps_alog_t *p, uint8_t op, const char *s, size_t n, const char *name)
{
    if (p->nsteps == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        step_t *steps = realloc(p->steps, cap * sizeof(*steps));
        if (steps == NULL)
            return -ENOMEM;
        p->steps = steps;
        p->cap = cap;
    }
    step_t *st = &p->steps[p->nsteps++];
    *st = (step_t){op, (uint32_t)p->strs.len, (uint32_t)n, name};
    if (n == 0)
        return 0;
    if (ps_buf_reserve(&p->strs, n) < 0)
        return -ENOMEM;
    char *dst = p->strs.data + p->strs.len;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        dst[i] = op != OP_LIT && ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    p->strs.len += n;
    return 0;
}

/* Appends a literal, merged into the previous literal step when there is one. */
static int add_literal(ps_alog_t *p, const char *s, size_t n)
{
    step_t *last = p->nsteps ? &p->steps[p->nsteps - 1] : NULL;
    if (last && last->op == OP_LIT && last->off + last->len == p->strs.len) {
        if (ps_buf_append(&p->strs, s, n) < 0)
            return -ENOMEM;
        last->len += (uint32_t)n;
        return 0;
    }
    return add_step(p, OP_LIT, s, n, NULL);
}

static const struct {
    char atom;
    uint8_t op;
} letters[] = {
    {'h', OP_HOST},        {'l', OP_DASH},   {'u', OP_USER},   {'t', OP_TIME},
    {'r', OP_REQUEST},     {'m', OP_METHOD}, {'U', OP_PATH},   {'q', OP_QUERY},
    {'H', OP_PROTOCOL},    {'s', OP_STATUS}, {'B', OP_BYTES},  {'b', OP_BYTES_CLF},
    {'T', OP_SECONDS_INT}, {'M', OP_MILLIS}, {'D', OP_MICROS}, {'L', OP_SECONDS},
    {'p', OP_PID},
};

/* The WSGI environ variables %({name}e)s can name: the ones made from the
 * request (the process environment is not the request's). */
static const struct {
    const char *name;
    uint8_t op;
    const char *header;
} env_vars[] = {
    {"remote_addr", OP_HOST, NULL},
    {"remote_port", OP_PORT, NULL},
    {"request_method", OP_METHOD, NULL},
    {"path_info", OP_PATH, NULL},
    {"query_string", OP_QUERY, NULL},
    {"raw_uri", OP_TARGET, NULL},
    {"server_protocol", OP_PROTOCOL, NULL},
    {"content_type", OP_HEADER_IN, "content-type"},
    {"content_length", OP_HEADER_IN, "content-length"},
};

static int env_step(ps_alog_t *p, const char *s, size_t n, char *err)
{
    char name[64];
    if (n >= sizeof(name))
        goto unknown;
    for (size_t i = 0; i < n; i++)
        name[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] + 32) : s[i];
    name[n] = '\0';
    if (n > 5 && memcmp(name, "http_", 5) == 0) {
        for (size_t i = 5; i < n; i++)
            name[i] = name[i] == '_' ? '-' : name[i];
        return add_step(p, OP_HEADER_IN, name + 5, n - 5, NULL);
    }
    for (size_t i = 0; i < PS_ARRAY_LEN(env_vars); i++) {
        if (strcmp(name, env_vars[i].name) != 0)
            continue;
        const char *h = env_vars[i].header;
        return add_step(p, env_vars[i].op, h, h ? strlen(h) : 0, NULL);
    }
unknown:
    snprintf(err, PS_ALOG_ERROR_MAX,
             "%%({%.*s}e)s: not a request variable (remote_addr, remote_port, request_method, "
             "path_info, query_string, raw_uri, server_protocol, content_type, content_length, "
             "http_*)",
             (int)PS_MIN(n, 40), s);
    return -EINVAL;
}

/* One %(name)s atom. Returns 0, -EINVAL (err set) or -ENOMEM. */
static int atom_step(ps_alog_t *p, const char *s, size_t n, char *err)
{
    if (n == 1 && (s[0] == 'f' || s[0] == 'a')) {
        const char *h = s[0] == 'f' ? "referer" : "user-agent";
        return add_step(p, OP_HEADER_IN, h, strlen(h), NULL);
    } else if (n == 1) {
        for (size_t i = 0; i < PS_ARRAY_LEN(letters); i++)
            if (letters[i].atom == s[0])
                return add_step(p, letters[i].op, NULL, 0, NULL);
    } else if (n == 6 && memcmp(s, "client", 6) == 0) {
        return add_step(p, OP_CLIENT, NULL, 0, NULL);
    } else if (n == 3 && memcmp(s, "rid", 3) == 0) {
        return add_step(p, OP_REQUEST_ID, NULL, 0, NULL);
    } else if (n == 8 && memcmp(s, "trace_id", 8) == 0) {
        return add_step(p, OP_TRACE_ID, NULL, 0, NULL);
    } else if (n == 9 && memcmp(s, "parent_id", 9) == 0) {
        return add_step(p, OP_PARENT_ID, NULL, 0, NULL);
    } else if (n >= 4 && s[0] == '{' && s[n - 2] == '}' && n - 3 <= 256) {
        const char *name = s + 1;
        size_t len = n - 3;
        for (size_t i = 0; i < len; i++)
            if (name[i] == '{' || name[i] == '}')
                goto unknown;
        switch (s[n - 1]) {
        case 'i':
            return add_step(p, OP_HEADER_IN, name, len, NULL);
        case 'o':
            p->wants_resp = 1;
            return add_step(p, OP_HEADER_OUT, name, len, NULL);
        case 'e':
            return env_step(p, name, len, err);
        }
    }
unknown:
    snprintf(err, PS_ALOG_ERROR_MAX,
             "unknown atom %%(%.*s)s (atoms: h l u t r m U q H s B b f a T D M L p client "
             "rid trace_id parent_id {header}i {header}o {variable}e)",
             (int)PS_MIN(n, 40), s);
    return -EINVAL;
}

static int compile_text(ps_alog_t *p, const char *fmt, size_t n, char *err)
{
    size_t i = 0;
    while (i < n) {
        const char *pct = memchr(fmt + i, '%', n - i);
        size_t end = pct ? (size_t)(pct - fmt) : n;
        if (end > i && add_literal(p, fmt + i, end - i) < 0)
            return -ENOMEM;
        if (pct == NULL)
            break;
        i = end + 1;
        if (i < n && fmt[i] == '%') {
            if (add_literal(p, "%", 1) < 0)
                return -ENOMEM;
            i++;
            continue;
        }
        const char *close = i < n && fmt[i] == '(' ? memchr(fmt + i, ')', n - i) : NULL;
        if (close == NULL) {
            snprintf(err, PS_ALOG_ERROR_MAX,
                     "a '%%' at offset %zu is neither %%(atom)s nor %%%% (a percent sign)", end);
            return -EINVAL;
        }
        size_t name_len = (size_t)(close - fmt) - i - 1;
        size_t after = (size_t)(close - fmt) + 1;
        if (after >= n || fmt[after] != 's') {
            snprintf(err, PS_ALOG_ERROR_MAX, "%%(%.*s) must be followed by 's': %%(%.*s)s",
                     (int)PS_MIN(name_len, 40), fmt + i + 1, (int)PS_MIN(name_len, 40),
                     fmt + i + 1);
            return -EINVAL;
        }
        int rc = atom_step(p, fmt + i + 1, name_len, err);
        if (rc < 0)
            return rc;
        i = after + 1;
    }
    return 0;
}

static const struct {
    const char *name;
    uint8_t op;
    const char *header;
} json_fields[] = {
    {"time", OP_TIME_ISO, NULL},
    {"client", OP_CLIENT, NULL},
    {"remote_addr", OP_HOST, NULL},
    {"remote_port", OP_PORT, NULL},
    {"user", OP_USER, NULL},
    {"request", OP_REQUEST, NULL},
    {"method", OP_METHOD, NULL},
    {"path", OP_PATH, NULL},
    {"query", OP_QUERY, NULL},
    {"protocol", OP_PROTOCOL, NULL},
    {"status", OP_STATUS, NULL},
    {"bytes", OP_BYTES, NULL},
    {"duration", OP_SECONDS, NULL},
    {"referer", OP_HEADER_IN, "referer"},
    {"user_agent", OP_HEADER_IN, "user-agent"},
    {"pid", OP_PID_NUM, NULL},
    /* Left out when they have no value (PS_ALOG_ABSENT): --request-id's. */
    {"request_id", OP_REQUEST_ID, NULL},
    {"trace_id", OP_TRACE_ID, NULL},
    {"parent_id", OP_PARENT_ID, NULL},
};

int ps_alog_compile(const char *fmt, size_t n, ps_alog_t **out, char *err)
{
    ps_alog_t *p = calloc(1, sizeof(*p));
    int rc = -ENOMEM;
    err[0] = '\0';
    if (p == NULL)
        return -ENOMEM;
    p->t_sec = -1;
    if (n == 4 && memcmp(fmt, "json", 4) == 0) {
        p->json = 1;
        for (size_t i = 0; i < PS_ARRAY_LEN(json_fields); i++) {
            const char *h = json_fields[i].header;
            if (add_step(p, json_fields[i].op, h, h ? strlen(h) : 0, json_fields[i].name) < 0)
                goto error;
        }
    } else if ((rc = compile_text(p, fmt, n, err)) < 0) {
        goto error;
    }
    *out = p;
    return 0;
error:
    if (rc == -ENOMEM)
        snprintf(err, PS_ALOG_ERROR_MAX, "out of memory");
    ps_alog_free(p);
    return rc;
}

void ps_alog_free(ps_alog_t *p)
{
    if (p == NULL)
        return;
    free(p->steps);
    ps_buf_free(&p->strs);
    ps_buf_free(&p->scratch);
    free(p);
}

int ps_alog_is_json(const ps_alog_t *p)
{
    return p->json;
}

int ps_alog_wants_response_headers(const ps_alog_t *p)
{
    return p->wants_resp;
}

size_t ps_alog_nfields(const ps_alog_t *p)
{
    return p->json ? p->nsteps : 0;
}

/* ---- values ---- */

static ps_slice_t find_header(const ps_header_t *h, size_t n, ps_slice_t name)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name.len == name.len && ps_slice_ieq(h[i].name, name.base, name.len))
            return h[i].value;
    return (ps_slice_t){NULL, 0};
}

/* The user of an "Authorization: Basic" field, decoded into scratch.
 * Returns 1 with *user set, 0 when there is none or it does not decode. */
static int basic_user(ps_alog_t *p, ps_slice_t auth, ps_slice_t *user)
{
    if (auth.len < 6 || !ps_slice_ieq((ps_slice_t){auth.base, 5}, "basic", 5) ||
        (auth.base[5] != ' ' && auth.base[5] != '\t'))
        return 0;
    size_t i = 6;
    while (i < auth.len && (auth.base[i] == ' ' || auth.base[i] == '\t'))
        i++;
    ps_buf_reset(&p->scratch);
    if (ps_buf_reserve(&p->scratch, auth.len) < 0)
        return 0;
    char *out = p->scratch.data;
    size_t len = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; i < auth.len; i++) {
        unsigned char c = (unsigned char)auth.base[i];
        if (c == '=' || c == ' ' || c == '\t')
            break;
        int d = ps_base64_digit(c);
        if (d < 0)
            return 0;
        acc = (acc << 6) | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (char)((acc >> bits) & 0xff);
        }
    }
    const char *colon = memchr(out, ':', len);
    if (colon == NULL)
        return 0;
    *user = (ps_slice_t){out, (size_t)(colon - out)};
    return 1;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The path of a target (an absolute-form one's after its authority),
 * percent-decoded into scratch, as WSGI's PATH_INFO. */
static ps_slice_t target_path(ps_alog_t *p, ps_slice_t t)
{
    const char *s = t.base, *end = t.base + t.len;
    const char *q = memchr(s, '?', t.len);
    if (q != NULL)
        end = q;
    if (s < end && *s != '/') {
        const char *scheme = memchr(s, ':', (size_t)(end - s));
        if (scheme != NULL && end - scheme > 2 && scheme[1] == '/' && scheme[2] == '/') {
            const char *slash = memchr(scheme + 3, '/', (size_t)(end - scheme - 3));
            s = slash ? slash : end;
        }
    }
    ps_buf_reset(&p->scratch);
    if (ps_buf_reserve(&p->scratch, (size_t)(end - s) + 1) < 0)
        return (ps_slice_t){NULL, 0};
    char *out = p->scratch.data;
    size_t len = 0;
    for (; s < end; s++) {
        int hi, lo;
        if (*s == '%' && end - s > 2 && (hi = hex_digit(s[1])) >= 0 &&
            (lo = hex_digit(s[2])) >= 0) {
            out[len++] = (char)(hi * 16 + lo);
            s += 2;
        } else {
            out[len++] = *s;
        }
    }
    return (ps_slice_t){out, len};
}

static ps_slice_t cached_time(ps_alog_t *p, double now, int iso)
{
    time_t sec = (time_t)now;
    if (sec != p->t_sec) {
        struct tm tm;
        localtime_r(&sec, &tm);
        p->t_clf_len = strftime(p->t_clf, sizeof(p->t_clf), "[%d/%b/%Y:%H:%M:%S %z]", &tm);
        p->t_iso_len = strftime(p->t_iso, sizeof(p->t_iso), "%Y-%m-%dT%H:%M:%S%z", &tm);
        if (p->t_iso_len >= 5 && p->t_iso_len + 1 < sizeof(p->t_iso)) {
            /* RFC 3339's offset: +hh:mm */
            char *mm = p->t_iso + p->t_iso_len - 2;
            memmove(mm + 1, mm, 3);
            *mm = ':';
            p->t_iso_len++;
        }
        p->t_sec = sec;
    }
    return iso ? (ps_slice_t){p->t_iso, p->t_iso_len} : (ps_slice_t){p->t_clf, p->t_clf_len};
}

static int compose(ps_alog_t *p, const ps_slice_t *parts, size_t n, ps_slice_t *out)
{
    ps_buf_reset(&p->scratch);
    for (size_t i = 0; i < n; i++)
        if (ps_buf_append_slice(&p->scratch, parts[i]) < 0)
            return -ENOMEM;
    *out = (ps_slice_t){p->scratch.data, p->scratch.len};
    return 0;
}

/* Writes n in decimal, at least `width` digits (zero-padded), into out (room
 * for 20 bytes). Returns the length. snprintf costs several times more. */
static size_t decimal(char *out, uint64_t n, int width)
{
    char tmp[20];
    int len = 0;
    do {
        tmp[len++] = (char)('0' + n % 10);
        n /= 10;
    } while (n || len < width);
    for (int i = 0; i < len; i++)
        out[i] = tmp[len - 1 - i];
    return (size_t)len;
}

static int client_value(ps_alog_t *p, const ps_alog_entry_t *e, ps_slice_t *out)
{
    int v6 = memchr(e->host.base, ':', e->host.len) != NULL;
    size_t len = 0;
    if (e->port >= 0) {
        p->num[0] = ':';
        len = 1 + decimal(p->num + 1, (uint64_t)e->port, 1);
    }
    ps_slice_t parts[4] = {{"[", (size_t)v6}, e->host, {"]", (size_t)v6}, {p->num, len}};
    return compose(p, parts, 4, out);
}

/* A valid traceparent's trace or parent id (W3C Trace Context), read only
 * with --request-id on; PS_ALOG_ABSENT otherwise. */
static int trace_value(uint8_t op, const ps_alog_entry_t *e, ps_alog_value_t *v)
{
    ps_traceparent_t tp;
    ps_slice_t h = {NULL, 0};
    if (e->request_id.base != NULL && e->headers != NULL)
        h = find_header(e->headers, e->nheaders, PS_SLICE_LIT("traceparent"));
    if (h.base == NULL || ps_traceparent_parse(h, &tp) < 0) {
        v->kind = PS_ALOG_ABSENT;
        v->str = (ps_slice_t){NULL, 0};
        return 0;
    }
    v->str = op == OP_TRACE_ID ? tp.trace_id : tp.parent_id;
    return 0;
}

/* The value of one step for e. Returns 0 or -ENOMEM. */
static int step_value(ps_alog_t *p, const step_t *st, const ps_alog_entry_t *e, ps_alog_value_t *v)
{
    int line = e->method.base != NULL;
    ps_slice_t s = {NULL, 0};
    v->name = st->name;
    v->kind = PS_ALOG_STR;
    switch (st->op) {
    case OP_LIT:
        s = (ps_slice_t){p->strs.data + st->off, st->len};
        break;
    case OP_HOST:
        s = e->host;
        break;
    case OP_PORT:
        v->kind = e->port >= 0 ? PS_ALOG_INT : PS_ALOG_NULL;
        v->num = (uint64_t)PS_MAX(e->port, 0);
        return 0;
    case OP_CLIENT:
        if (e->host.base != NULL && client_value(p, e, &s) < 0)
            return -ENOMEM;
        break;
    case OP_DASH:
        break;
    case OP_USER:
        if (!e->headers ||
            !basic_user(p, find_header(e->headers, e->nheaders, PS_SLICE_LIT("authorization")), &s))
            s.base = NULL;
        break;
    case OP_TIME:
    case OP_TIME_ISO:
        s = cached_time(p, e->now, st->op == OP_TIME_ISO);
        break;
    case OP_REQUEST:
        if (line) {
            ps_slice_t parts[5] = {e->method, PS_SLICE_LIT(" "), e->target, PS_SLICE_LIT(" HTTP/"),
                                   e->version};
            if (compose(p, parts, 5, &s) < 0)
                return -ENOMEM;
        }
        break;
    case OP_METHOD:
        s = e->method;
        break;
    case OP_PATH:
        if (line && (s = target_path(p, e->target)).base == NULL)
            return -ENOMEM;
        break;
    case OP_QUERY:
        if (line) {
            const char *q = memchr(e->target.base, '?', e->target.len);
            s = q ? (ps_slice_t){q + 1, e->target.len - (size_t)(q + 1 - e->target.base)}
                  : (ps_slice_t){"", 0};
        }
        break;
    case OP_TARGET:
        s = line ? e->target : s;
        break;
    case OP_PROTOCOL:
        if (line) {
            ps_slice_t parts[2] = {PS_SLICE_LIT("HTTP/"), e->version};
            if (compose(p, parts, 2, &s) < 0)
                return -ENOMEM;
        }
        break;
    case OP_STATUS:
        v->kind = PS_ALOG_INT;
        v->num = (uint64_t)PS_MAX(e->status, 0);
        return 0;
    case OP_BYTES:
    case OP_BYTES_CLF:
        v->kind = st->op == OP_BYTES_CLF && e->body_bytes == 0 ? PS_ALOG_NULL : PS_ALOG_INT;
        v->num = e->body_bytes;
        return 0;
    case OP_SECONDS_INT:
    case OP_MILLIS:
    case OP_MICROS:
        v->kind = PS_ALOG_INT;
        v->num = e->duration_ns / (st->op == OP_SECONDS_INT ? 1000000000u
                                   : st->op == OP_MILLIS    ? 1000000u
                                                            : 1000u);
        return 0;
    case OP_SECONDS:
        v->kind = PS_ALOG_SECONDS;
        v->num = e->duration_ns;
        return 0;
    case OP_PID:
        s = (ps_slice_t){p->num, (size_t)snprintf(p->num, sizeof(p->num), "<%d>", e->pid)};
        break;
    case OP_PID_NUM:
        v->kind = PS_ALOG_INT;
        v->num = (uint64_t)PS_MAX(e->pid, 0);
        return 0;
    case OP_REQUEST_ID:
        v->str = e->request_id;
        v->kind = e->request_id.base != NULL ? PS_ALOG_STR : PS_ALOG_ABSENT;
        return 0;
    case OP_TRACE_ID:
    case OP_PARENT_ID:
        return trace_value(st->op, e, v);
    case OP_HEADER_IN:
    case OP_HEADER_OUT: {
        ps_slice_t name = {p->strs.data + st->off, st->len};
        if (st->op == OP_HEADER_IN && e->headers)
            s = find_header(e->headers, e->nheaders, name);
        else if (st->op == OP_HEADER_OUT && e->resp_headers)
            s = find_header(e->resp_headers, e->nresp_headers, name);
        break;
    }
    }
    if (s.base == NULL)
        v->kind = PS_ALOG_NULL;
    v->str = s;
    return 0;
}

int ps_alog_field(ps_alog_t *p, const ps_alog_entry_t *e, size_t i, ps_alog_value_t *v)
{
    PS_ASSERT(p->json && i < p->nsteps);
    return step_value(p, &p->steps[i], e, v);
}

const char *ps_alog_field_name(const ps_alog_t *p, size_t i)
{
    PS_ASSERT(p->json && i < p->nsteps);
    return p->steps[i].name;
}

/* ---- writing ---- */

static const char hex[] = "0123456789abcdef";

/* ps_buf_append without the call when there is room: a line is many small pieces. */
static inline int put(ps_buf_t *out, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (ps_likely(out->cap - out->len >= n)) {
        memcpy(out->data + out->len, s, n);
        out->len += n;
        return 0;
    }
    return ps_buf_append(out, s, n);
}

/* 1 for the bytes a text line writes as \xNN. */
static const uint8_t escaped[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x7f ... 0xff] = 1,
};

/* Text: bytes outside printable ASCII, '"' and '\\' as \xNN. */
static int append_text(ps_buf_t *out, ps_slice_t s)
{
    const unsigned char *b = (const unsigned char *)s.base;
    size_t plain = 0;
    while (plain < s.len && !escaped[b[plain]])
        plain++;
    if (plain == s.len) /* the usual case: nothing to escape */
        return put(out, s.base, s.len);
    if (ps_buf_reserve(out, plain + (s.len - plain) * 4) < 0)
        return -ENOMEM;
    char *d = out->data + out->len;
    memcpy(d, b, plain);
    d += plain;
    for (size_t i = plain; i < s.len; i++) {
        unsigned char ch = b[i];
        if (escaped[ch]) {
            *d++ = '\\';
            *d++ = 'x';
            *d++ = hex[ch >> 4];
            *d++ = hex[ch & 15];
        } else {
            *d++ = (char)ch;
        }
    }
    out->len = (size_t)(d - out->data);
    return 0;
}

/* A JSON string's contents: ASCII only, each other byte as \u00NN. */
static int append_json(ps_buf_t *out, ps_slice_t s)
{
    if (ps_buf_reserve(out, s.len * 6) < 0)
        return -ENOMEM;
    char *d = out->data + out->len;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.base[i];
        if (ch == '"' || ch == '\\') {
            *d++ = '\\';
            *d++ = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            memcpy(d, "\\u00", 4);
            d[4] = hex[ch >> 4];
            d[5] = hex[ch & 15];
            d += 6;
        } else {
            *d++ = (char)ch;
        }
    }
    out->len = (size_t)(d - out->data);
    return 0;
}

static int append_number(ps_buf_t *out, const ps_alog_value_t *v)
{
    char num[48];
    size_t n;
    if (v->kind == PS_ALOG_INT) {
        n = decimal(num, v->num, 1);
    } else {
        n = decimal(num, v->num / 1000000000u, 1);
        num[n++] = '.';
        n += decimal(num + n, v->num % 1000000000u / 1000u, 6);
    }
    return put(out, num, n);
}

static int format_text(ps_alog_t *p, const ps_alog_entry_t *e, ps_buf_t *out)
{
    ps_alog_value_t v;
    for (size_t i = 0; i < p->nsteps; i++) {
        const step_t *st = &p->steps[i];
        int rc;
        if (st->op == OP_LIT) {
            rc = put(out, p->strs.data + st->off, st->len);
        } else if ((rc = step_value(p, st, e, &v)) < 0) {
            return rc;
        } else if (v.kind == PS_ALOG_NULL || v.kind == PS_ALOG_ABSENT) {
            rc = put(out, "-", 1);
        } else if (v.kind == PS_ALOG_STR) {
            rc = append_text(out, v.str);
        } else {
            rc = append_number(out, &v);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int format_json(ps_alog_t *p, const ps_alog_entry_t *e, ps_buf_t *out)
{
    ps_alog_value_t v;
    size_t written = 0;
    for (size_t i = 0; i < p->nsteps; i++) {
        int rc = step_value(p, &p->steps[i], e, &v);
        if (rc == 0 && v.kind == PS_ALOG_ABSENT)
            continue;
        if (rc < 0 || put(out, written ? ", \"" : "{\"", written ? 3 : 2) < 0 ||
            put(out, v.name, strlen(v.name)) < 0 || put(out, "\": ", 3) < 0)
            return -ENOMEM;
        written++;
        if (v.kind == PS_ALOG_NULL)
            rc = put(out, "null", 4);
        else if (v.kind != PS_ALOG_STR)
            rc = append_number(out, &v);
        else if ((rc = put(out, "\"", 1)) == 0 && (rc = append_json(out, v.str)) == 0)
            rc = put(out, "\"", 1);
        if (rc < 0)
            return rc;
    }
    return put(out, "}", 1);
}

int ps_alog_format(ps_alog_t *p, const ps_alog_entry_t *e, ps_buf_t *out)
{
    ps_buf_reset(out);
    return p->json ? format_json(p, e, out) : format_text(p, e, out);
}
