/* The access log's formatter: a format with gunicorn's atoms compiled once
 * into a list of steps, then run per request into a reused buffer.
 *
 * Text formats are gunicorn's (`%(h)s %(l)s %(u)s %(t)s "%(r)s" ...`, `%%`
 * for a percent sign, and pyserver's `%(client)s`, `%(rid)s`, `%(trace_id)s`,
 * `%(parent_id)s`); every byte outside printable ASCII, '"' and '\\' is
 * written as \xNN so a hostile request cannot forge log lines. The format
 * "json" writes one JSON object with named fields instead (ASCII only:
 * every byte of a value above 0x7e is \u00NN, its latin-1 reading).
 *
 * Nothing here knows Python or a connection: the caller fills a
 * ps_alog_entry_t from what it has.
 */
#ifndef PS_ACCESSLOG_H
#define PS_ACCESSLOG_H

#include <stdint.h>

#include "base/buf.h"
#include "codec/http1.h"

typedef struct ps_alog ps_alog_t;

/* One request as the access log sees it. Slices are borrowed. */
typedef struct {
    ps_slice_t method, target, version; /* the request line; method.base NULL: never read */
    const ps_header_t *headers;         /* the request's fields (NULL: none) */
    size_t nheaders;
    const ps_header_t *resp_headers; /* the response's, when ps_alog_wants_response_headers */
    size_t nresp_headers;
    ps_slice_t host;     /* the client's address, no brackets; base NULL: none (unix) */
    int port;            /* its port, or -1 */
    int status;          /* the response status */
    uint64_t body_bytes; /* response body bytes the application gave */
    uint64_t duration_ns;
    double now; /* wall clock, seconds since the epoch */
    int pid;
    /* --request-id: the request's ID (base NULL: off); with it, the
     * traceparent field's ids are read too. */
    ps_slice_t request_id;
} ps_alog_entry_t;

/* The kinds of a field's value. */
/* PS_ALOG_ABSENT: a JSON field that is left out when it has no value (the
 * request ID and trace fields); "-" in a text line, like PS_ALOG_NULL. */
enum { PS_ALOG_NULL, PS_ALOG_STR, PS_ALOG_INT, PS_ALOG_SECONDS, PS_ALOG_ABSENT };

typedef struct {
    int kind;
    ps_slice_t str;   /* PS_ALOG_STR: raw bytes (borrowed from the entry or the program) */
    uint64_t num;     /* PS_ALOG_INT: the number; PS_ALOG_SECONDS: nanoseconds */
    const char *name; /* JSON formats: the field's name */
} ps_alog_value_t;

#define PS_ALOG_ERROR_MAX 200

/* Compiles fmt (n bytes; "json" for the JSON object). Returns 0 and sets
 * *out (ps_alog_free it), -EINVAL with a message in err (room for
 * PS_ALOG_ERROR_MAX bytes) naming the bad atom, or -ENOMEM. */
int ps_alog_compile(const char *fmt, size_t n, ps_alog_t **out, char *err);
void ps_alog_free(ps_alog_t *p);

/* 1 for the JSON object, 0 for a text line. */
int ps_alog_is_json(const ps_alog_t *p);
/* 1 when an atom reads a response header (%({name}o)s). */
int ps_alog_wants_response_headers(const ps_alog_t *p);

/* Writes e's line into out (reset first; no newline). Returns 0 or
 * -ENOMEM. The program keeps per-second caches: not thread-safe. */
int ps_alog_format(ps_alog_t *p, const ps_alog_entry_t *e, ps_buf_t *out);

/* The JSON format's fields: the number, and the value of field i (valid
 * until the next call on p). Text formats have none. */
size_t ps_alog_nfields(const ps_alog_t *p);
int ps_alog_field(ps_alog_t *p, const ps_alog_entry_t *e, size_t i, ps_alog_value_t *v);
/* The name of the JSON format's field i (static storage). */
const char *ps_alog_field_name(const ps_alog_t *p, size_t i);

/* The monotonic clock in nanoseconds (what duration_ns is measured with). */
uint64_t ps_alog_clock(void);

#endif
