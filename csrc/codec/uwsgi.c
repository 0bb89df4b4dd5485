#include "codec/uwsgi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

/* Records the answer to a bad packet; returns PS_UWSGI_ERROR. */
static int fail(ps_uwsgi_parser_t *p, int status, const char *reason)
{
    p->error_status = status;
    p->error_reason = reason;
    return PS_UWSGI_ERROR;
}

void ps_uwsgi_init(ps_uwsgi_parser_t *p, const ps_uwsgi_limits_t *limits, ps_buf_t *body,
                   size_t body_high)
{
    memset(p, 0, sizeof(*p));
    p->limits = limits;
    p->body = body;
    p->body_high = body_high ? body_high : 1;
    p->req.content_length = -1;
}

void ps_uwsgi_free(ps_uwsgi_parser_t *p)
{
    free(p->vars);
    p->vars = NULL;
    ps_buf_free(&p->packet);
    ps_buf_free(&p->arena);
}

static uint16_t get_u16(const unsigned char *s)
{
    return (uint16_t)(s[0] | s[1] << 8);
}

static int name_is(ps_slice_t s, const char *lit, size_t n)
{
    return s.len == n && memcmp(s.base, lit, n) == 0;
}

#define NAME_IS(s, lit) name_is((s), (lit), sizeof(lit) - 1)

static int has_prefix(ps_slice_t s, const char *lit, size_t n)
{
    return s.len >= n && memcmp(s.base, lit, n) == 0;
}

/* A field value as ps_http_valid_field() takes it: no CTL but HTAB, no DEL. */
static int is_field_value(ps_slice_t v)
{
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.base[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

static char name_char(char c)
{
    return c == '_' ? '-' : (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
}

/* 1 when the HTTP_* key key names the header field name (lower case), as
 * header_name() converts it: "HTTP_Content_Length" names content-length. */
static int key_names(ps_slice_t key, const char *name, size_t n)
{
    if (key.len != n + 5)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (name_char(key.base[5 + i]) != name[i])
            return 0;
    return 1;
}

#define KEY_NAMES(k, lit) key_names((k), (lit), sizeof(lit) - 1)

/* The framing and hop-by-hop fields nginx passes on as HTTP_* but which
 * this protocol frames itself (CONTENT_LENGTH, CONTENT_TYPE), or which
 * would make the body look chunked or ask for a 100 Continue that nginx
 * already answered. */
static int skipped_header(ps_slice_t key)
{
    return KEY_NAMES(key, "content-length") || KEY_NAMES(key, "content-type") ||
           KEY_NAMES(key, "transfer-encoding") || KEY_NAMES(key, "expect");
}

/* Walks the packet's variables into p->vars (which has room for them);
 * returns 0, or PS_UWSGI_ERROR with the error set. With vars NULL, only
 * checks the structure and counts: *nvars, *nheaders. */
static int walk_vars(ps_uwsgi_parser_t *p, ps_header_t *vars, uint32_t *nvars, uint32_t *nheaders)
{
    const unsigned char *s = (const unsigned char *)ps_buf_head(&p->packet);
    size_t len = p->datasize, off = 0;
    uint32_t n = 0, nh = 0;
    const ps_uwsgi_limits_t *lim = p->limits;
    while (off < len) {
        if (len - off < 2)
            return fail(p, 400, "truncated uwsgi variable");
        size_t klen = get_u16(s + off);
        off += 2;
        if (len - off < klen + 2)
            return fail(p, 400, "uwsgi variable past the packet");
        const char *key = (const char *)s + off;
        off += klen;
        size_t vlen = get_u16(s + off);
        off += 2;
        if (len - off < vlen)
            return fail(p, 400, "uwsgi variable past the packet");
        const char *val = (const char *)s + off;
        off += vlen;
        if (klen == 0)
            return fail(p, 400, "empty uwsgi variable name");
        if (lim->max_var_size && klen + vlen > lim->max_var_size)
            return fail(p, 431, "uwsgi variable too large");
        if (lim->max_vars && n >= lim->max_vars)
            return fail(p, 431, "too many uwsgi variables");
        ps_slice_t k = {key, klen};
        if (vars)
            vars[n] = (ps_header_t){k, (ps_slice_t){val, vlen}};
        n++;
        if (klen > 5 && has_prefix(k, "HTTP_", 5) && !skipped_header(k))
            nh++;
    }
    *nvars = n;
    *nheaders = nh;
    return 0;
}

/* "HTTP_ACCEPT_ENCODING" -> "accept-encoding", written to out. */
static void header_name(ps_slice_t key, char *out)
{
    for (size_t i = 5; i < key.len; i++)
        out[i - 5] = name_char(key.base[i]);
}

static void take_cgi(ps_uwsgi_cgi_t *cgi, ps_slice_t k, ps_slice_t v)
{
    static const struct {
        const char *name;
        size_t len, off;
    } known[] = {
#define CGI(name, field) {#name, sizeof(#name) - 1, offsetof(ps_uwsgi_cgi_t, field)}
        CGI(REMOTE_ADDR, remote_addr),
        CGI(REMOTE_PORT, remote_port),
        CGI(SERVER_NAME, server_name),
        CGI(SERVER_PORT, server_port),
        CGI(HTTPS, https),
        CGI(REQUEST_SCHEME, request_scheme),
        CGI(SCRIPT_NAME, script_name),
        CGI(PATH_INFO, path_info),
        CGI(QUERY_STRING, query_string),
        CGI(SERVER_PROTOCOL, server_protocol),
        CGI(REQUEST_URI, request_uri),
#undef CGI
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(known); i++) {
        if (k.len == known[i].len && memcmp(k.base, known[i].name, k.len) == 0) {
            ps_slice_t *slot = (ps_slice_t *)((char *)cgi + known[i].off);
            if (slot->base == NULL) /* the first one counts */
                *slot = v;
            return;
        }
    }
}

/* Bytes a path may carry as they are in a request target (RFC 3986 pchar
 * and '/'); everything else is %XX-encoded. */
static int path_byte_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("/-._~!$&'()*+,;=:@", c) != NULL);
}

/* The target when there is no REQUEST_URI: PATH_INFO (decoded, as CGI
 * has it) encoded again, then "?" QUERY_STRING. Returns 0 or -ENOMEM. */
static int build_target(ps_uwsgi_parser_t *p, ps_slice_t *target)
{
    static const char hex[] = "0123456789ABCDEF";
    ps_slice_t path = p->cgi.path_info, qs = p->cgi.query_string;
    if (path.len == 0 || path.base[0] != '/')
        path = PS_SLICE_LIT("/"); /* CGI allows an empty PATH_INFO: the root */
    size_t need = path.len * 3 + 1 + qs.len;
    ps_buf_reset(&p->arena);
    if (ps_buf_reserve(&p->arena, need) < 0)
        return -ENOMEM;
    char *out = p->arena.data, *o = out;
    for (size_t i = 0; i < path.len; i++) {
        unsigned char c = (unsigned char)path.base[i];
        if (path_byte_ok(c)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    if (qs.len > 0) {
        *o++ = '?';
        memcpy(o, qs.base, qs.len);
        o += qs.len;
    }
    p->arena.len = (size_t)(o - out);
    *target = (ps_slice_t){out, p->arena.len};
    return 0;
}

/* A target the bridge can split like an HTTP/1 one: origin-form, or "*";
 * the bytes the HTTP/1 parser lets through (no CTL, SP or DEL). */
static int valid_target(ps_slice_t t)
{
    if (t.len == 0 || (t.base[0] != '/' && !(t.len == 1 && t.base[0] == '*')))
        return 0;
    for (size_t i = 0; i < t.len; i++) {
        unsigned char c = (unsigned char)t.base[i];
        if (c <= 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* CONTENT_LENGTH: decimal digits, or empty (no body). Returns the length,
 * -1 when empty, -2 when malformed. */
static int64_t parse_length(ps_slice_t v)
{
    if (v.len == 0)
        return -1;
    if (v.len > 18)
        return -2;
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.base[i] < '0' || v.base[i] > '9')
            return -2;
        n = n * 10 + (v.base[i] - '0');
    }
    return n;
}

/* SERVER_PROTOCOL into http_major and req.http_minor; returns 0 or -1. */
static int take_protocol(ps_uwsgi_parser_t *p, ps_slice_t v)
{
    static const struct {
        const char *s;
        uint8_t major, minor;
    } known[] = {{"HTTP/1.1", 1, 1}, {"HTTP/1.0", 1, 0}, {"HTTP/2.0", 2, 1},
                 {"HTTP/2", 2, 1},   {"HTTP/3.0", 3, 1}, {"HTTP/3", 3, 1}};
    if (v.base == NULL || v.len == 0) {
        p->http_major = 1; /* not sent: an HTTP/1.1 request */
        p->req.http_minor = 1;
        return 0;
    }
    for (size_t i = 0; i < PS_ARRAY_LEN(known); i++)
        if (v.len == strlen(known[i].s) && memcmp(v.base, known[i].s, v.len) == 0) {
            p->http_major = known[i].major;
            p->req.http_minor = known[i].minor;
            return 0;
        }
    return -1;
}

/* The request from the variables. Returns 0 or PS_UWSGI_ERROR. */
static int take_request(ps_uwsgi_parser_t *p, const ps_header_t *vars, uint32_t n,
                        ps_header_t *headers)
{
    ps_request_t *r = &p->req;
    ps_slice_t method = {NULL, 0}, ctype = {NULL, 0}, clen = {NULL, 0};
    uint32_t nh = 0;
    for (uint32_t i = 0; i < n; i++) {
        ps_slice_t k = vars[i].name, v = vars[i].value;
        if (k.len > 5 && has_prefix(k, "HTTP_", 5)) {
            if (skipped_header(k))
                continue;
            if (!ps_http_is_token((ps_slice_t){k.base + 5, k.len - 5}))
                return fail(p, 400, "invalid header name");
            if (!is_field_value(v))
                return fail(p, 400, "invalid header value");
            /* parse_packet() converts the name ("HTTP_X_Y" -> "x-y") */
            headers[nh++] = (ps_header_t){k, v};
        } else if (NAME_IS(k, "REQUEST_METHOD")) {
            if (method.base == NULL)
                method = v;
        } else if (NAME_IS(k, "CONTENT_TYPE")) {
            if (ctype.base == NULL)
                ctype = v;
        } else if (NAME_IS(k, "CONTENT_LENGTH")) {
            if (clen.base == NULL)
                clen = v;
        } else {
            take_cgi(&p->cgi, k, v);
        }
    }
    if (method.base == NULL)
        return fail(p, 400, "no REQUEST_METHOD");
    if (!ps_http_is_token(method))
        return fail(p, 400, "invalid method");
    r->method = method;
    r->method_id = (uint8_t)ps_http1_method_id(method);
    if (r->method_id == HTTP_CONNECT)
        return fail(p, 501, "CONNECT is not served");
    r->is_head = r->method_id == HTTP_HEAD;
    if (take_protocol(p, p->cgi.server_protocol) < 0)
        return fail(p, 400, "invalid SERVER_PROTOCOL");
    if (p->cgi.request_uri.base != NULL && p->cgi.request_uri.len > 0)
        r->target = p->cgi.request_uri;
    else if (build_target(p, &r->target) < 0)
        return fail(p, 500, "out of memory");
    if (!valid_target(r->target))
        return fail(p, 400, "invalid REQUEST_URI");
    if (r->target.base[0] == '*' && !NAME_IS(method, "OPTIONS"))
        return fail(p, 400, "invalid REQUEST_URI");
    int64_t length = clen.base ? parse_length(clen) : -1;
    if (length == -2)
        return fail(p, 400, "invalid CONTENT_LENGTH");
    if (length >= 0 && p->limits->max_body && (uint64_t)length > p->limits->max_body)
        return fail(p, 413, "body too large");
    if (ctype.base != NULL && ctype.len > 0) {
        if (!is_field_value(ctype))
            return fail(p, 400, "invalid CONTENT_TYPE");
        headers[nh++] = (ps_header_t){PS_SLICE_LIT("content-type"), ctype};
    }
    if (length >= 0)
        headers[nh++] = (ps_header_t){PS_SLICE_LIT("content-length"), clen};
    r->content_length = length;
    p->body_left = length > 0 ? (uint64_t)length : 0;
    r->headers = headers;
    r->nheaders = nh;
    r->keep_alive = 0;
    return 0;
}

/* The packet is in: checks it, then fills the request. The variables keep
 * their keys as sent; the header names converted from them ("HTTP_USER_AGENT"
 * -> "user-agent") go after the packet's bytes, in the room take_header()
 * reserved. Returns 0 or PS_UWSGI_ERROR. */
static int parse_packet(ps_uwsgi_parser_t *p)
{
    uint32_t n, nh;
    if (p->datasize == 0)
        return fail(p, 400, "no REQUEST_METHOD");
    if (walk_vars(p, NULL, &n, &nh) < 0)
        return PS_UWSGI_ERROR;
    size_t names = 0;
    /* The headers: nh, Content-Type and Content-Length, the server's fields. */
    ps_header_t *vars = calloc((size_t)n + nh + 2 + PS_REQUEST_ADDED_FIELDS, sizeof(*vars));
    if (vars == NULL)
        return fail(p, 500, "out of memory");
    p->vars = vars;
    walk_vars(p, vars, &n, &nh);
    p->nvars = n;
    if (take_request(p, vars, n, vars + n) < 0)
        return PS_UWSGI_ERROR;
    for (uint32_t i = 0; i < p->req.nheaders; i++)
        if (has_prefix(p->req.headers[i].name, "HTTP_", 5))
            names += p->req.headers[i].name.len - 5;
    /* The names live after the packet's bytes, in the same buffer, which
     * was reserved with room for them (see take_header). */
    if (p->packet.cap - p->packet.len < names)
        return fail(p, 500, "uwsgi name space");
    char *out = p->packet.data + p->packet.len;
    for (uint32_t i = 0; i < p->req.nheaders; i++) {
        ps_header_t *h = &p->req.headers[i];
        if (!has_prefix(h->name, "HTTP_", 5))
            continue;
        header_name(h->name, out);
        h->name = (ps_slice_t){out, h->name.len - 5};
        out += h->name.len;
    }
    p->req.head_complete = 1;
    return 0;
}

/* The 4-byte header is in: checks it and makes room for the variables and,
 * after them, the header names (never longer than the keys). */
static int take_header(ps_uwsgi_parser_t *p)
{
    uint32_t max = p->limits->max_packet ? PS_MIN(p->limits->max_packet, PS_UWSGI_MAX_PACKET)
                                         : PS_UWSGI_MAX_PACKET;
    if (p->hdr[0] != 0)
        return fail(p, 400, "unsupported uwsgi modifier1");
    p->datasize = get_u16(p->hdr + 1);
    if (p->datasize > max)
        return fail(p, 431, "uwsgi packet too large");
    if (ps_buf_reserve(&p->packet, (size_t)p->datasize * 2) < 0)
        return fail(p, 500, "out of memory");
    p->state = PS_UWSGI_VARS;
    return 0;
}

/* Body bytes: returns how many of len it took (stopping at the body's end). */
static size_t take_body(ps_uwsgi_parser_t *p, const char *data, size_t len, int *rc)
{
    size_t n = (size_t)PS_MIN((uint64_t)len, p->body_left);
    *rc = PS_UWSGI_MORE;
    if (n > 0 && !p->discard_body && ps_buf_append(p->body, data, n) < 0) {
        *rc = fail(p, 500, "out of memory");
        return len;
    }
    p->body_left -= n;
    p->req.body_received += n;
    if (p->body_left == 0) {
        p->req.message_complete = 1;
        p->state = PS_UWSGI_DONE;
        *rc = PS_UWSGI_PAUSED;
    } else if (ps_buf_size(p->body) >= p->body_high) {
        *rc = PS_UWSGI_PAUSED;
    }
    return n;
}

int ps_uwsgi_feed(ps_uwsgi_parser_t *p, const char *data, size_t len, size_t *consumed)
{
    size_t off = 0;
    int rc = PS_UWSGI_MORE;
    if (p->error_status) {
        *consumed = len;
        return PS_UWSGI_ERROR;
    }
    if (p->state == PS_UWSGI_DONE) { /* one request per connection */
        *consumed = 0;
        return PS_UWSGI_PAUSED;
    }
    while (rc == PS_UWSGI_MORE && (off < len || p->state == PS_UWSGI_BODY ||
                                   (p->state == PS_UWSGI_VARS && p->packet.len == p->datasize))) {
        if (p->state == PS_UWSGI_HEADER) {
            size_t n = PS_MIN(len - off, (size_t)(4 - p->hdr_len));
            if (n > 0)
                memcpy(p->hdr + p->hdr_len, data + off, n);
            p->hdr_len += (uint8_t)n;
            off += n;
            if (p->hdr_len == 4 && take_header(p) < 0)
                rc = PS_UWSGI_ERROR;
        } else if (p->state == PS_UWSGI_VARS) {
            size_t n = PS_MIN(len - off, p->datasize - p->packet.len);
            if (n > 0)
                memcpy(p->packet.data + p->packet.len, data + off, n);
            p->packet.len += n;
            off += n;
            if (p->packet.len < p->datasize)
                continue;
            if (parse_packet(p) < 0)
                rc = PS_UWSGI_ERROR;
            else
                p->state = PS_UWSGI_BODY;
        } else if (p->state == PS_UWSGI_BODY) {
            if (off == len && p->body_left > 0)
                break;
            off += take_body(p, data + off, len - off, &rc);
        } else {
            break;
        }
    }
    if (rc == PS_UWSGI_ERROR)
        off = len;
    *consumed = off;
    return rc;
}

ps_slice_t ps_uwsgi_var(const ps_uwsgi_parser_t *p, const char *name, size_t len)
{
    for (uint32_t i = 0; i < p->nvars; i++)
        if (p->vars[i].name.len == len && memcmp(p->vars[i].name.base, name, len) == 0)
            return p->vars[i].value;
    return (ps_slice_t){NULL, 0};
}
