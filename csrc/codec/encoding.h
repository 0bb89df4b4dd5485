/* Content-coding negotiation (RFC 9110 12.5.3): which of the codings the
 * server offers a client's Accept-Encoding fields accept, and which one to use.
 * Bytes in, a choice out: no allocation, no I/O. */
#ifndef PS_ENCODING_H
#define PS_ENCODING_H

#include <stdint.h>

#include "base/buf.h"

typedef enum {
    PS_CODING_IDENTITY = 0,
    PS_CODING_BR,
    PS_CODING_ZSTD,
    PS_CODING_GZIP,
    PS_CODING_COUNT,
    PS_CODING_NONE = -1 /* not even identity is acceptable (identity;q=0) */
} ps_coding_t;

#define PS_CODING_BIT(c) (1u << (c))

/* What a request's Accept-Encoding fields said: a weight in thousandths
 * (0-1000) per coding, -1 when the coding was not named, and the weight of
 * "*". Fill it with ps_accept_init, then ps_accept_parse each field line. */
typedef struct {
    int16_t q[PS_CODING_COUNT];
    int16_t star; /* -1: no "*" */
    uint8_t seen; /* at least one field line, even an empty one */
} ps_accept_t;

void ps_accept_init(ps_accept_t *a);

/* Adds one Accept-Encoding field line. An element with a parameter other
 * than a valid qvalue is ignored, as is a coding the server does not know. A
 * coding named twice keeps the lower weight. */
void ps_accept_parse(ps_accept_t *a, ps_slice_t value);

/* A coding's weight (0-1000): its own, else that of "*"; identity is
 * acceptable unless excluded by name or by "*;q=0", at the lowest weight
 * when not named (RFC 9110 12.5.3). No field at all: identity only. */
int ps_accept_weight(const ps_accept_t *a, ps_coding_t c);

/* The coding to use among `offered` (PS_CODING_BIT mask, identity always
 * implied): the highest weight, ties broken in enum order (br, zstd, gzip
 * before identity). No Accept-Encoding field at all: identity. */
ps_coding_t ps_accept_choose(const ps_accept_t *a, unsigned offered);

/* The same with ties among the codings broken in `order` (n codings, most
 * preferred first; codings not in it are never chosen). */
ps_coding_t ps_accept_choose_by(const ps_accept_t *a, unsigned offered, const ps_coding_t *order,
                                size_t n);

/* The coding's name as it appears in Content-Encoding ("br", "zstd", "gzip";
 * "identity"). */
const char *ps_coding_name(ps_coding_t c);

#endif
