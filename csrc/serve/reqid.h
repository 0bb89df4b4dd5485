/* --request-id and --request-start-header: the fields the server settles
 * in a request once its head is complete, for HTTP/1 and HTTP/2 alike.
 *
 * The application sees exactly one X-Request-ID (and X-Request-Start): a
 * trusted proxy's when it is valid (codec/trace.h's ps_request_id_valid),
 * else the server's own, which replaces whatever the
 * client sent. The values live in the request (ps_request_t's buffers), the
 * fields in the room every protocol leaves (PS_REQUEST_ADDED_FIELDS).
 */
#ifndef PS_REQID_H
#define PS_REQID_H

#include "base/common.h"
#include "codec/http1.h"

/* ps_config_t's trace bits. */
enum {
    PS_REQID_ID = 1,    /* --request-id */
    PS_REQID_START = 2, /* --request-start-header */
};

/* Settles r's X-Request-ID (PS_REQID_ID in what: also sets r->request_id)
 * and X-Request-Start (PS_REQID_START). trusted: the fields come from a
 * trusted proxy (the exchange's proxy is set) or a uwsgi gateway (which
 * only trusted peers may be). Never fails: when the kernel gives no random
 * seed, an untrusted X-Request-ID is dropped and none is made. */
void ps_reqid_take(ps_request_t *r, unsigned what, int trusted);

/* 1 when the response headers h name no X-Request-ID. */
int ps_reqid_absent(const ps_header_t *h, size_t n);

/* 1 when the response to r carries X-Request-ID: --request-id is on (one
 * branch when it is off) and the application's headers h have none of
 * their own (the application's wins). */
static inline int ps_reqid_respond(const ps_request_t *r, const ps_header_t *h, size_t n)
{
    return ps_unlikely(r->request_id.base != NULL) && ps_reqid_absent(h, n);
}

#endif
