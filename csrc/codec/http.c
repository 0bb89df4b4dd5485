/* RFC 9110 semantics every protocol shares (see http.h). */
#include "codec/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/common.h"

/* RFC 9110 tchar. */
const uint8_t ps_http_token_chars[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,  ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1,  ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,  ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,  ['d'] = 1, ['e'] = 1,
    ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1,  ['l'] = 1, ['m'] = 1,
    ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1,  ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

int ps_http_is_token(ps_slice_t s)
{
    return ps_http_token_ok(s.base, s.len);
}

int ps_http_valid_field(ps_slice_t name, ps_slice_t value)
{
    return ps_http_token_ok(name.base, name.len) && ps_http_field_value_ok(value.base, value.len);
}

/* ---- request targets ---- */

/* RFC 3986 reg-name: unreserved, sub-delims and pct-encoded ('%'). */
static int reg_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("-._~!$&'()*+,;=%", c) != NULL);
}

static int hexval(char c);

int ps_http_parse_authority(ps_slice_t authority, ps_slice_t *host, int *port)
{
    const char *s = authority.base, *end = s + authority.len, *h, *he;
    if (authority.len == 0)
        return -EINVAL;
    if (*s == '[') {
        const char *close = memchr(s, ']', authority.len);
        char text[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        h = s + 1;
        he = close;
        if (close == NULL || he == h || (size_t)(he - h) >= sizeof(text))
            return -EINVAL;
        /* inet_pton would stop at a NUL: only what an IPv6 address holds. */
        for (const char *c = h; c < he; c++)
            if (hexval(*c) < 0 && *c != ':' && *c != '.')
                return -EINVAL;
        memcpy(text, h, (size_t)(he - h));
        text[he - h] = '\0';
        if (inet_pton(AF_INET6, text, &a6) != 1)
            return -EINVAL;
        s = close + 1;
    } else {
        for (h = s; s < end && *s != ':'; s++) {
            if (!reg_name_char(*s))
                return -EINVAL;
            if (*s == '%' && (end - s < 3 || hexval(s[1]) < 0 || hexval(s[2]) < 0))
                return -EINVAL;
        }
        he = s;
        if (he == h)
            return -EINVAL; /* an http(s) URI must not have an empty host */
    }
    *port = -1;
    if (s < end) {
        if (*s++ != ':')
            return -EINVAL;
        if (s < end && (*port = ps_parse_port(s, (size_t)(end - s))) < 0)
            return -EINVAL; /* an empty port ("host:") is allowed and means none */
    }
    *host = (ps_slice_t){h, (size_t)(he - h)};
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

size_t ps_http_percent_decode(const char *src, size_t n, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (src[i] == '%' && i + 2 < n && (hi = hexval(src[i + 1])) >= 0 &&
            (lo = hexval(src[i + 2])) >= 0) {
            dst[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            dst[o++] = src[i];
        }
    }
    return o;
}

void ps_http_split_target(ps_slice_t target, ps_slice_t *path, ps_slice_t *query)
{
    const char *s = target.base, *end = s + target.len;
    const char *p = s;
    if (target.len > 0 && *s != '/' && *s != '*') {
        /* absolute-form: skip "scheme://authority" */
        const char *sep = memchr(s, ':', target.len);
        if (sep && end - sep > 2 && sep[1] == '/' && sep[2] == '/') {
            p = sep + 3; /* the authority ends at '/', '?' or '#' */
            while (p < end && *p != '/' && *p != '?' && *p != '#')
                p++;
        }
    }
    const char *pe = p;
    while (pe < end && *pe != '?' && *pe != '#')
        pe++;
    const char *q = pe, *qe = pe;
    if (q < end && *q == '?') {
        q++;
        qe = memchr(q, '#', (size_t)(end - q));
        if (qe == NULL)
            qe = end;
    }
    *path = (ps_slice_t){p, (size_t)(pe - p)};
    *query = (ps_slice_t){q, (size_t)(qe - q)};
}

/* ---- responses from the application ---- */

int ps_http_scan_head(ps_slice_t status, const ps_header_t *h, size_t n, ps_head_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->content_length = -1;
    const char *s = status.base;
    if (status.len < 3 || s[0] < '1' || s[0] > '9' || s[1] < '0' || s[1] > '9' || s[2] < '0' ||
        s[2] > '9' || (status.len > 3 && s[3] != ' ') || !ps_http_field_value_ok(s, status.len))
        return -EINVAL;
    info->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
    for (size_t i = 0; i < n; i++) {
        ps_slice_t name = h[i].name, value = h[i].value;
        if (!ps_http_token_ok(name.base, name.len) ||
            !ps_http_field_value_ok(value.base, value.len))
            return -EINVAL;
        switch (name.len) {
        case 4:
            if (PS_SLICE_IEQ(name, "date"))
                info->has_date = 1;
            break;
        case 6:
            if (PS_SLICE_IEQ(name, "server"))
                info->has_server = 1;
            break;
        case 25:
            if (PS_SLICE_IEQ(name, "strict-transport-security"))
                info->has_sts = 1;
            break;
        case 10:
            if (PS_SLICE_IEQ(name, "connection") && PS_SLICE_IEQ(value, "close"))
                info->conn_close = 1;
            break;
        case 14:
            if (PS_SLICE_IEQ(name, "content-length")) {
                if (value.len == 0 || value.len > 18)
                    return -EINVAL;
                int64_t v = 0;
                for (size_t k = 0; k < value.len; k++) {
                    if (value.base[k] < '0' || value.base[k] > '9')
                        return -EINVAL;
                    v = v * 10 + (value.base[k] - '0');
                }
                if (info->content_length >= 0 && info->content_length != v)
                    return -EINVAL;
                info->content_length = v;
            }
            break;
        }
    }
    return 0;
}

int ps_http_https_location(ps_buf_t *out, ps_slice_t authority, ps_slice_t target, int https_port)
{
    ps_slice_t host, path, query;
    int port;
    if (ps_http_parse_authority(authority, &host, &port) < 0 ||
        !ps_http_field_value_ok(target.base, target.len))
        return -EINVAL;
    ps_http_split_target(target, &path, &query);
    int has_query = query.base != path.base + path.len || query.len > 0; /* "/p?" keeps its '?' */
    if (path.len == 0 || (target.len == 1 && target.base[0] == '*'))
        path = (ps_slice_t){"/", 1}; /* "http://host?q" and "OPTIONS *" */
    else if (path.base[0] != '/')
        return -EINVAL;
    char tail[8] = "";
    if (https_port != 443)
        snprintf(tail, sizeof(tail), ":%d", https_port & 0xffff);
    int v6 = memchr(host.base, ':', host.len) != NULL;
    size_t len = 8 + host.len + 2 + strlen(tail) + path.len + 1 + query.len;
    if (ps_buf_reserve(out, len) < 0)
        return -ENOMEM;
    ps_buf_append(out, "https://", 8);
    if (v6)
        ps_buf_append(out, "[", 1);
    ps_buf_append(out, host.base, host.len);
    if (v6)
        ps_buf_append(out, "]", 1);
    ps_buf_append(out, tail, strlen(tail));
    ps_buf_append(out, path.base, path.len);
    if (has_query) {
        ps_buf_append(out, "?", 1);
        ps_buf_append(out, query.base, query.len);
    }
    return 0;
}

/* Hop-by-hop headers whose framing the server decides itself. */
const char *ps_http_reason_phrase(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 103:
        return "Early Hints";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 303:
        return "See Other";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "";
    }
}
