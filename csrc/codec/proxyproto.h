/* The PROXY protocol, versions 1 (text) and 2 (binary): the header a proxy
 * sends before a connection's own bytes to name the client it accepted.
 * Only parsing lives here; which peers may or must send one, and what the
 * connection does with it, is h1conn.c's (see ps_h1conn_expect_proxy_header).
 * Nothing here allocates or logs.
 */
#ifndef PS_PROXYPROTO_H
#define PS_PROXYPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A v1 line is at most 107 bytes with its CRLF; a v2 header 16 + 65535. */
#define PS_PROXYPROTO_V1_MAX 107
#define PS_PROXYPROTO_V2_MAX (16 + 65535)

typedef struct {
    uint8_t version; /* 1 or 2 */
    /* v1 UNKNOWN, v2 LOCAL (the proxy's own health check) or an unspecified
     * family: the connection keeps its socket's addresses. */
    uint8_t local;
    struct sockaddr_storage src; /* the client: AF_INET, AF_INET6 or (v2) AF_UNIX */
    socklen_t src_len;
    struct sockaddr_storage dst; /* the address it connected to on the proxy */
    socklen_t dst_len;
} ps_proxyproto_t;

/* Parses a PROXY header at the start of buf (len bytes so far). Returns the
 * header's length (> 0, what follows is the connection's own bytes) with
 * *out filled, 0 when more bytes are needed, or -EPROTO when buf does not
 * start with a valid PROXY header. TLVs (v2) are skipped. */
int ps_proxyproto_parse(const char *buf, size_t len, ps_proxyproto_t *out);

/* Whether buf starts with a PROXY header's signature ("PROXY " or v2's 12
 * bytes): 1 yes, 0 cannot tell yet (a prefix of one), -1 no. */
int ps_proxyproto_detect(const char *buf, size_t len);

#endif
