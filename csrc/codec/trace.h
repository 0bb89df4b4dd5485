/* Request IDs and W3C Trace Context (traceparent): checks and formatting.
 * Bytes in, results out: no allocation, no I/O, no randomness of its own. */
#ifndef PS_TRACE_H
#define PS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* The longest X-Request-ID kept from a trusted proxy. */
#define PS_REQUEST_ID_MAX 200
/* A generated ID: 128 bits as 32 lowercase hex digits. */
#define PS_REQUEST_ID_HEX 32

/* 1 when v may be kept as a request ID: 1 to PS_REQUEST_ID_MAX visible ASCII
 * characters (0x21-0x7e) other than '"' and '\\', so it is safe in a header,
 * a log line and JSON as it is. */
int ps_request_id_valid(ps_slice_t v);

/* Writes 16 random bytes as 32 lowercase hex digits (no terminator). */
void ps_request_id_format(const uint8_t random[16], char out[PS_REQUEST_ID_HEX]);

/* A traceparent's fields (views into the header's value). */
typedef struct {
    ps_slice_t version;   /* 2 hex digits */
    ps_slice_t trace_id;  /* 32 hex digits, not all zero */
    ps_slice_t parent_id; /* 16 hex digits, not all zero */
    uint8_t flags;        /* bit 0: sampled */
} ps_traceparent_t;

/* Parses a traceparent value strictly (W3C Trace Context, level 1): lowercase
 * hex only; version 00 is exactly 55 characters; a later version may carry
 * more after a '-'; version ff is invalid. Returns 0, or -1 (out untouched
 * but for zeroing). */
int ps_traceparent_parse(ps_slice_t v, ps_traceparent_t *out);

#endif
