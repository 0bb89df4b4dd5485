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
#include "codec/http.h"

typedef struct ps_exchange ps_exchange_t;
typedef struct ps_encoder ps_encoder_t;

#define PS_ENCODE_MAX_TYPES 32
#define PS_ENCODE_TYPE_LEN 64

/* A static file (or a file the application sends) this large or larger is
 * sent as it is: compressing it on the fly would queue its whole output. */
#define PS_ENCODE_FILE_MAX (8u << 20)

/* The settings, filled once from Config (settings.c); they must outlive
 * the worker. */
typedef struct {
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

/* ps_exchange_start with x->compress set: decides, then starts the response
 * through the protocol, compressed or not. Same returns as the protocol's
 * start; -ENOMEM or -EIO when the compressor fails (nothing sent). */
int ps_encode_start(ps_exchange_t *x, ps_slice_t status, const ps_header_t *h, size_t n,
                    const char *body, size_t len);
/* The other calls while x->encoder is set: the bytes compressed, then handed
 * to the protocol's call of the same name. Same returns; -ENOMEM or -EIO
 * when the compressor fails (the layer then aborts the response). */
int ps_encode_write(ps_exchange_t *x, const char *data, size_t len, int blocking);
/* Reads count bytes of fd from offset and compresses them (the start
 * allowed files below PS_ENCODE_FILE_MAX only). */
int ps_encode_sendfile(ps_exchange_t *x, int fd, int64_t offset, uint64_t count);
int ps_encode_end_with_trailers(ps_exchange_t *x, const ps_header_t *h, size_t n);
void ps_encode_end(ps_exchange_t *x);
void ps_encode_abort(ps_exchange_t *x);

/* Frees x's encoder, if any: the protocols call it when a request's state is
 * reset or freed (a response the client left mid-way never ends). */
void ps_encode_release(ps_exchange_t *x);

#endif
