/* Proxy headers: which peers are trusted proxies, and what the RFC 7239
 * Forwarded, X-Forwarded-For / -Proto / -Host / -Port (or gunicorn's
 * secure_scheme_headers) of their requests say about the client, the scheme
 * and the host the client asked for.
 *
 * A connection's trust is decided once, when it is accepted; a request from a
 * trusted peer costs one scan of its headers and no allocation: the results
 * point into the request.
 */
#ifndef PS_PROXY_H
#define PS_PROXY_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "codec/http1.h"

/* The longest client host taken from X-Forwarded-For; longer items are cut. */
#define PS_PROXY_MAX_HOST 255

typedef struct {
    uint8_t addr[16]; /* IPv4 in the first 4 bytes */
    uint8_t is_v6;
    uint8_t prefix; /* bits that must match */
} ps_proxy_net_t;

typedef struct {
    char *name; /* header name, matched case-insensitively */
    size_t name_len;
    char *value; /* the value that means https, matched exactly */
    size_t value_len;
} ps_proxy_scheme_header_t;

typedef struct {
    ps_proxy_net_t *nets;
    uint32_t nnets;
    unsigned trust_all : 1;      /* "*" */
    unsigned secure_headers : 1; /* gunicorn mode: the scheme comes from the table below */
    ps_proxy_scheme_header_t *scheme_headers;
    uint32_t nscheme_headers;
} ps_proxy_t;

enum { PS_SCHEME_NONE = 0, PS_SCHEME_HTTP = 1, PS_SCHEME_HTTPS = 2 };

/* What a trusted peer's request says; the slices point into the request. */
typedef struct {
    uint8_t scheme;       /* PS_SCHEME_*: NONE keeps the connection's own */
    uint16_t client_port; /* the client's port when Forwarded gave one, else 0 */
    uint16_t port;     /* the port the client asked for (X-Forwarded-Port or the host's), 0: none */
    ps_slice_t client; /* the client host (base NULL when none) */
    ps_slice_t host;   /* the host name the client asked for, without the port ("[v6]"
                        * bracketed); base NULL when none. When only a port was
                        * forwarded, the name part of the request's own Host field. */
} ps_proxy_result_t;

/* ps_proxy_apply's errors, each answered 400. */
#define PS_PROXY_ESCHEME (-EPROTO)     /* two secure scheme headers disagree */
#define PS_PROXY_ECONFLICT (-EILSEQ)   /* Forwarded and X-Forwarded-* disagree */
#define PS_PROXY_EMALFORMED (-EBADMSG) /* a Forwarded field that is not RFC 7239 */

/* Parses a trust list: comma-separated IPv4/IPv6 addresses and CIDR networks,
 * or "*" for everyone; whitespace around items and empty items are ignored.
 * Returns 0, -EINVAL for an invalid item (its position and length in
 * *bad_off and *bad_len when given; p is left empty) or -ENOMEM. */
int ps_proxy_init(ps_proxy_t *p, const char *list, size_t len, size_t *bad_off, size_t *bad_len);
/* Switches to gunicorn's mode and adds one secure_scheme_headers entry
 * (copied). Returns 0, -EINVAL for an empty name, or -ENOMEM. */
int ps_proxy_add_scheme_header(ps_proxy_t *p, const char *name, size_t name_len, const char *value,
                               size_t value_len);
void ps_proxy_free(ps_proxy_t *p);

/* 1 when a peer of this address is a trusted proxy. Unix-socket peers are
 * always trusted (only local processes allowed by the file's permissions
 * connect); unknown families are not. */
int ps_proxy_peer_trusted(const ps_proxy_t *p, const struct sockaddr *sa, socklen_t len);
/* 1 when the text is an IP literal that the list trusts. */
int ps_proxy_host_trusted(const ps_proxy_t *p, const char *s, size_t n);

/* Reads a trusted peer's request. Forwarded elements and X-Forwarded-For
 * hosts are walked from the right (the hop nearest to us first): the first
 * one that is not a trusted proxy is the client's, the leftmost when all are
 * trusted or everyone is; Forwarded's proto and host come from that element.
 * X-Forwarded-Proto/-Host/-Port: their last item; values that do not parse
 * are ignored. Returns 0 (results in *out) or one of PS_PROXY_E* (answer 400
 * and close; ps_proxy_reason names it). */
int ps_proxy_apply(const ps_proxy_t *p, const ps_request_t *r, ps_proxy_result_t *out);
/* The reason line of a ps_proxy_apply error. */
const char *ps_proxy_reason(int rc);

/* Splits "name[:port]" (name a reg-name, an IPv4 address or "[IPv6]").
 * Returns 0 (*name, and *port or 0 when none) or -EINVAL when it is not a
 * host. */
int ps_proxy_split_host(ps_slice_t value, ps_slice_t *name, uint16_t *port);

#endif
