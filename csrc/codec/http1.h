/* HTTP/1.x: requests parsed by llhttp into a plain struct, response heads,
 * and the canned answers for bad requests.
 *
 * The parser copies the request line and headers into its own arena, so the
 * caller may discard input bytes as soon as ps_http1_feed() reports them
 * consumed. Decoded body bytes are appended to a buffer the caller owns.
 */
#ifndef PS_HTTP1_H
#define PS_HTTP1_H

#include <stdint.h>

#include <llhttp.h>

#include "base/buf.h"
#include "codec/http.h"
#include "codec/trace.h"

typedef struct {
    uint32_t max_request_line; /* the whole line: method, target, version, separators */
    uint32_t max_fields;
    uint32_t max_field_size;
    uint32_t max_head; /* request line plus header fields, as received; 0: no limit */
    uint64_t max_body; /* 0: no limit */
} ps_http1_limits_t;

/* method_id of a method llhttp has no name for: the method is carried as
 * sent (any RFC 9110 token) and llhttp parses the request with a stand-in. */
#define PS_METHOD_OTHER 255

/* Room every protocol leaves in a parsed head's headers array past
 * nheaders, for the fields the server adds (serve/reqid.c: X-Request-ID,
 * X-Request-Start). */
#define PS_REQUEST_ADDED_FIELDS 2

/* A parsed request. Slices point into the parser's arena and stay valid
 * until ps_http1_next(). */
typedef struct {
    ps_slice_t method; /* exactly as sent: case-sensitive, never upper-cased */
    ps_slice_t target;
    /* An absolute-form target's host (no brackets around an IPv6 literal)
     * and port (the explicit one, else the scheme's); base is NULL for the
     * other forms. Its authority then also replaces the Host header. */
    ps_slice_t target_host;
    uint16_t target_port;
    ps_header_t *headers;
    uint32_t nheaders;
    uint8_t method_id; /* llhttp_method_t, or PS_METHOD_OTHER */
    uint8_t http_minor;
    unsigned keep_alive : 1;
    unsigned chunked : 1;
    unsigned expect_continue : 1;
    unsigned head_complete : 1;
    unsigned message_complete : 1;
    unsigned upgrade : 1;
    unsigned is_head : 1;
    int64_t content_length; /* -1 when the request has none */
    uint64_t body_received; /* decoded body bytes seen so far */
    /* --request-id (serve/reqid.c): the ID the application sees, a trusted
     * proxy's X-Request-ID or the one generated into request_id_buf; base
     * NULL when the option is off. */
    ps_slice_t request_id;
    char request_id_buf[PS_REQUEST_ID_HEX];
    char request_start_buf[24]; /* --request-start-header: "t=" and microseconds */
} ps_request_t;

typedef struct {
    uint32_t name_off, name_len, value_off, value_len;
} ps_field_t;

typedef struct {
    llhttp_t llhttp;
    ps_request_t req;
    const ps_http1_limits_t *limits;
    ps_buf_t arena;     /* request line and header bytes */
    ps_field_t *fields; /* offsets into arena, converted at head end */
    uint32_t nfields, fields_cap;
    ps_header_t *headers; /* the fields as slices, once the head is complete */
    uint32_t headers_cap;
    uint32_t target_off, target_len;
    uint32_t method_off, method_len; /* method bytes kept in the arena (unknown or split) */
    uint64_t method_at;              /* offset of the method in the message's bytes */
    uint32_t authority_off, authority_len;
    uint32_t host_off, host_len; /* inside the authority */
    uint32_t host_index;         /* the Host field's index, when host_count is 1 */
    uint64_t head_bytes;         /* bytes of the message's head taken so far */
    uint64_t chunk_base;         /* message offset of feed_start while in the head */
    uint64_t field_start;        /* message offset of the current field line */
    const char *method_name;     /* a known method's name (static), else NULL */
    uint8_t method_id;
    uint8_t want_method; /* 1 until the method of a new message is taken */
    uint8_t method_in_arena;
    uint8_t te_state;         /* PS_TE_* bits across Transfer-Encoding fields (0: none) */
    ps_buf_t *body;           /* decoded body goes here (owned by the caller) */
    size_t body_high;         /* pause once body holds this much */
    int error_status;         /* the answer to give after PS_HTTP1_ERROR */
    const char *error_reason; /* and why, in words (static), while error_status is set */
    uint32_t trailer_bytes;
    uint8_t chunk_state; /* where we are in a chunk-size line */
    unsigned last_chunk : 1;
    unsigned chunk_data : 1; /* between a chunk's size line and its CRLF */
    uint32_t chunk_ext_len;
    uint8_t host_count;
    uint8_t content_type_count;
    unsigned paused : 1;
    uint8_t head_scan;      /* the scan of the head's (trailer's) line ends: PS_SCAN_* */
    const char *feed_start; /* start of the input being parsed */
    char version[8];
    uint8_t version_len;
} ps_http1_parser_t;

enum { PS_CHUNK_NONE, PS_CHUNK_SIZE, PS_CHUNK_EXT };

/* What the Transfer-Encoding fields said, coding by coding. */
enum {
    PS_TE_LAST_CHUNKED = 1, /* the last coding so far is chunked */
    PS_TE_SAW_CHUNKED = 2,
    PS_TE_CHUNKED_TWICE = 4,
    PS_TE_OTHER = 8,  /* a coding other than chunked */
    PS_TE_EMPTY = 16, /* a field with no coding */
};

/* The scan of the line ends of the head or the trailer section (scan_head
 * in http1.c): inside a line, after its CR, after a CRLF, after the CR of
 * the blank line, past the blank line. */
enum { PS_SCAN_TEXT, PS_SCAN_CR, PS_SCAN_LINE_START, PS_SCAN_END_CR, PS_SCAN_DONE };

enum {
    PS_HTTP1_MORE = 0,   /* all input consumed, more is needed */
    PS_HTTP1_PAUSED = 1, /* stopped at message end or body high-water */
    PS_HTTP1_ERROR = -1, /* malformed: answer error_status and close */
};

void ps_http1_init(ps_http1_parser_t *p, const ps_http1_limits_t *limits, ps_buf_t *body,
                   size_t body_high);
/* Parses as much of data as it can; *consumed says how much it used. */
int ps_http1_feed(ps_http1_parser_t *p, const char *data, size_t len, size_t *consumed);
/* Forgets the current request so the next one can be parsed. */
void ps_http1_next(ps_http1_parser_t *p);
void ps_http1_free(ps_http1_parser_t *p);
/* Between requests: releases the arena and the field arrays when a large
 * head made them grow past what ordinary heads need. */
void ps_http1_shrink(ps_http1_parser_t *p);

/* The llhttp id of a method name (case-sensitive), or PS_METHOD_OTHER. */
int ps_http1_method_id(ps_slice_t method);

/* The request line of the current request, for logging one that was
 * rejected: fills method, target and version ("1.1") and returns 1 when the
 * whole line was read, else returns 0. The slices stay valid until
 * ps_http1_next(). */
int ps_http1_request_line(const ps_http1_parser_t *p, ps_slice_t *method, ps_slice_t *target,
                          ps_slice_t *version);

/* Appends "HTTP/1.1 <status>", the application's headers (minus the
 * hop-by-hop ones the server owns), then `extra` lines (each ending CRLF),
 * then the blank line. Returns 0 or -ENOMEM. */
int ps_http1_write_head(ps_buf_t *out, ps_slice_t status, const ps_header_t *h, size_t n,
                        const ps_slice_t *extra, size_t nextra);

/* ---- chunked framing of a response body (RFC 9112 section 7.1) ---- */

#define PS_HTTP1_CHUNK_HEAD_MAX 20 /* 16 hex digits and CRLF */
#define PS_HTTP1_LAST_CHUNK "0\r\n\r\n"

/* Writes the size line of a chunk of len bytes (len > 0) into out, which
 * has room for PS_HTTP1_CHUNK_HEAD_MAX bytes. Returns its length. The data
 * follows, then CRLF. */
static inline size_t ps_http1_chunk_head(char *out, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[n++] = hex[len & 15];
        len >>= 4;
    } while (len != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\r';
    out[n + 1] = '\n';
    return n + 2;
}

/* Appends the last chunk with trailer fields (none when n is 0) to out.
 * Returns 0, -EINVAL for an invalid field (nothing appended) or -ENOMEM. */
int ps_http1_write_last_chunk(ps_buf_t *out, const ps_header_t *h, size_t n);

/* A complete canned response for an error status, with Connection: close. */
ps_slice_t ps_http1_error_response(int status);

extern const ps_slice_t ps_http1_continue;

#endif
