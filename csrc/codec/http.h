/* RFC 9110 semantics that every protocol shares: tokens and field values,
 * request targets and authorities, response heads from the application
 * (validated whatever framing carries them), reason phrases. HTTP/1's
 * parser and serializer are http1.[ch]; HTTP/2 (h2conn.c, http2.c), the
 * uwsgi and WebSocket codecs and the bridge use these too. No I/O. */
#ifndef PS_HTTP_H
#define PS_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"

typedef struct {
    ps_slice_t name;
    ps_slice_t value;
} ps_header_t;

/* RFC 9110 tchar: 1 for a token character. */
extern const uint8_t ps_http_token_chars[256];

/* 1 when s[0..n) is a non-empty token (inline: the HTTP/1 parser checks
 * every field name with it). */
static inline int ps_http_token_ok(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!ps_http_token_chars[(uint8_t)s[i]])
            return 0;
    return 1;
}

/* A field value holds visible characters, SP, HTAB and obs-text: no
 * control characters (CR, LF and NUL among them) and no DEL. */
static inline int ps_http_field_value_ok(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t i = 0;
    /* Eight bytes at a time while none is below 0x20 or is 0x7f; from the
     * first word that has one (an HTAB, say), byte by byte. */
    for (; i + 8 <= n; i += 8) {
        uint64_t w, del;
        memcpy(&w, s + i, 8);
        del = w ^ (ones * 0x7f);
        if (((w - ones * 0x20) & ~w & highs) | ((del - ones) & ~del & highs))
            break;
    }
    for (; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* 1 when s is an RFC 9110 token. */
int ps_http_is_token(ps_slice_t s);
/* 1 when name is a token and value holds no CR, LF or NUL. */
int ps_http_valid_field(ps_slice_t name, ps_slice_t value);

/* Parses an authority "host[:port]" (reg-name, IPv4 or [IPv6]; no
 * userinfo). *host gets the host without brackets, *port the port or -1
 * when there is none (or it is empty). Returns 0 or -EINVAL. */
int ps_http_parse_authority(ps_slice_t authority, ps_slice_t *host, int *port);
/* Splits a request target (origin- or absolute-form) into its path and its
 * query, dropping any fragment. The slices point into target. */
void ps_http_split_target(ps_slice_t target, ps_slice_t *path, ps_slice_t *query);
/* Decodes %XX escapes of src into dst (room for n bytes); returns the
 * decoded length. Malformed escapes are kept as they are. */
size_t ps_http_percent_decode(const char *src, size_t n, char *dst);

/* What a response head says about framing, found by ps_http_scan_head(). */
typedef struct {
    int status;
    int64_t content_length; /* -1 when absent */
    unsigned conn_close : 1;
    unsigned has_date : 1;
    unsigned has_server : 1;
    unsigned has_sts : 1; /* Strict-Transport-Security */
} ps_head_info_t;

/* Validates a status line ("200 OK") and headers from the application:
 * token names, no CR/LF/NUL in values, a well-formed Content-Length.
 * Returns 0 or -EINVAL. */
int ps_http_scan_head(ps_slice_t status, const ps_header_t *h, size_t n, ps_head_info_t *info);

/* The https URL of a request received in plain HTTP, for a redirect:
 * "https://" host (from authority, the Host field's value: checked as
 * ps_http_parse_authority does, so nothing but a host and a port reaches
 * the answer), ":port" unless https_port is 443, then the target's path
 * and query ("/" for "*" and an empty path). Appended to out. Returns 0, -EINVAL (a bad
 * authority or target) or -ENOMEM. */
int ps_http_https_location(ps_buf_t *out, ps_slice_t authority, ps_slice_t target, int https_port);

/* The reason phrase of a status code ("Not Found"), "" for one without a
 * registered phrase here. Static storage. */
const char *ps_http_reason_phrase(int status);

#endif
