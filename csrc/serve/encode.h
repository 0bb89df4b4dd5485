/* Response compression (--compress): the stage between the interface layer
 * and the protocol that decides, when a response starts, whether to compress
 * it, rewrites its head, and compresses its body as the layer writes it.
 *
 * The exchange's wrappers (exchange.h) call in here only when the protocol
 * set x->compress (the worker has --compress) and, once a response is
 * compressed, while x->encoder is set; without --compress the cost is one
 * branch per response. Everything runs on the loop thread. The compressed
 * bytes of a piece are handed to the protocol at once (queued on the
 * socket like any body bytes), so memory follows what the layer writes,
 * which it bounds by waiting for on_writable.
 */
#ifndef PS_ENCODE_H
#define PS_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define PS_ENCODE_MAX_TYPES 32
#define PS_ENCODE_TYPE_LEN 64

/* A static file (or a file the application sends) this large or larger is
 * sent as it is: compressing it on the fly would queue its whole output. */
#define PS_ENCODE_FILE_MAX (8u << 20)

/* The settings, filled once from Config (settings.c); they must outlive
 * the worker. */
typedef struct ps_encode_cfg {
    uint64_t min_size; /* a smaller body (or first streamed piece) is sent as it is */
    int level;         /* PS_COMPRESS_LEVEL_DEFAULT: each coding's own default */
    unsigned offered;  /* PS_CODING_BIT mask of br, zstd, gzip */
    /* Media types compressed, lower case: "text/..." (a whole top-level
     * type), "*+json" (a structured suffix) or an exact type. */
    uint32_t ntypes;
    char types[PS_ENCODE_MAX_TYPES][PS_ENCODE_TYPE_LEN];
    /* Tests only (a hidden option): a compressor fails once a response's
     * input reaches this many bytes; 0: never. */
    uint64_t fail_after;
} ps_encode_cfg_t;

/* 1 when media type `type` (a Content-Type value, parameters allowed)
 * is one cfg compresses. text/event-stream never is. */
int ps_encode_type_ok(const ps_encode_cfg_t *cfg, ps_slice_t type);

/* The calls the exchange's wrappers make (exchange.h declares them, for
 * exchange.h does not include this file): ps_encode_start,
 * ps_encode_write, ps_encode_sendfile, ps_encode_end_with_trailers,
 * ps_encode_end, ps_encode_abort and ps_encode_release. */

#endif
