#include "codec/proxyproto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "base/common.h"

static const char v2_sig[12] = "\r\n\r\n\0\r\nQUIT\n";
static const char v1_sig[6] = "PROXY ";

/* 1 when buf (len bytes) is a prefix of sig or starts with it. */
static int matches(const char *buf, size_t len, const char *sig, size_t n)
{
    return memcmp(buf, sig, PS_MIN(len, n)) == 0;
}

int ps_proxyproto_detect(const char *buf, size_t len)
{
    int v1 = matches(buf, len, v1_sig, sizeof(v1_sig));
    int v2 = matches(buf, len, v2_sig, sizeof(v2_sig));
    if ((v1 && len >= sizeof(v1_sig)) || (v2 && len >= sizeof(v2_sig)))
        return 1;
    return v1 || v2 ? 0 : -1;
}

/* ---- version 1: "PROXY TCP4 SRC DST SPORT DPORT\r\n" ---- */

/* The next space-separated field of [*s, end): exactly one space follows
 * each field but the last. Returns its length, or 0 when it is empty. */
static size_t field(const char **s, const char *end, const char **start)
{
    *start = *s;
    while (*s < end && **s != ' ')
        (*s)++;
    size_t n = (size_t)(*s - *start);
    if (*s < end)
        (*s)++; /* the space */
    return n;
}

/* A decimal port without leading zeros (but "0"). Returns it, or -1. */
static int v1_port(const char *s, size_t n)
{
    if (n > 1 && s[0] == '0')
        return -1;
    return ps_parse_port(s, n);
}

/* An address and port of family af into ss. Returns 0 or -EPROTO. */
static int v1_address(int af, const char *a, size_t alen, const char *p, size_t plen,
                      struct sockaddr_storage *ss, socklen_t *sslen)
{
    char text[INET6_ADDRSTRLEN];
    int port = v1_port(p, plen);
    if (alen == 0 || alen >= sizeof(text) || port < 0)
        return -EPROTO;
    memcpy(text, a, alen);
    text[alen] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (af == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        *sslen = sizeof(*in);
        return inet_pton(AF_INET, text, &in->sin_addr) == 1 ? 0 : -EPROTO;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    *sslen = sizeof(*in6);
    return inet_pton(AF_INET6, text, &in6->sin6_addr) == 1 ? 0 : -EPROTO;
}

static int parse_v1(const char *buf, size_t len, ps_proxyproto_t *out)
{
    /* The CR can be no further than this, for the line to fit with its LF. */
    size_t limit = PS_PROXYPROTO_V1_MAX - 1, max = PS_MIN(len, limit);
    const char *cr = NULL;
    for (size_t i = sizeof(v1_sig); i < max; i++) {
        if (buf[i] == '\r') {
            cr = buf + i;
            break;
        }
        if (buf[i] == '\n' || buf[i] == '\0')
            return -EPROTO;
    }
    if (cr == NULL)
        return len >= limit ? -EPROTO : 0;
    if ((size_t)(cr - buf) + 2 > len)
        return 0; /* the LF has not arrived */
    if (cr[1] != '\n')
        return -EPROTO;
    int total = (int)(cr - buf) + 2;
    const char *s = buf + sizeof(v1_sig), *f[5];
    size_t n[5];
    memset(out, 0, sizeof(*out));
    out->version = 1;
    n[0] = field(&s, cr, &f[0]);
    if (n[0] == 7 && memcmp(f[0], "UNKNOWN", 7) == 0) {
        out->local = 1; /* whatever follows is ignored */
        return total;
    }
    int af = n[0] == 4 && memcmp(f[0], "TCP4", 4) == 0   ? AF_INET
             : n[0] == 4 && memcmp(f[0], "TCP6", 4) == 0 ? AF_INET6
                                                         : -1;
    if (af < 0)
        return -EPROTO;
    for (int i = 1; i < 5; i++)
        if ((n[i] = field(&s, cr, &f[i])) == 0)
            return -EPROTO;
    if (s != cr || f[4][n[4]] != '\r')
        return -EPROTO; /* a sixth field, or a space before the CRLF */
    if (v1_address(af, f[1], n[1], f[3], n[3], &out->src, &out->src_len) < 0 ||
        v1_address(af, f[2], n[2], f[4], n[4], &out->dst, &out->dst_len) < 0)
        return -EPROTO;
    return total;
}

/* ---- version 2: signature, ver/cmd, family/protocol, length, addresses, TLVs ---- */

static void v2_inet(const uint8_t *a, uint16_t port_be, struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof(*ss));
    in->sin_family = AF_INET;
    memcpy(&in->sin_addr, a, 4);
    in->sin_port = port_be;
    *len = sizeof(*in);
}

static void v2_inet6(const uint8_t *a, uint16_t port_be, struct sockaddr_storage *ss,
                     socklen_t *len)
{
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof(*ss));
    in6->sin6_family = AF_INET6;
    memcpy(&in6->sin6_addr, a, 16);
    in6->sin6_port = port_be;
    *len = sizeof(*in6);
}

/* A 108-byte path, NUL-padded (not always NUL-terminated). */
static void v2_unix(const uint8_t *path, struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_un *un = (struct sockaddr_un *)ss;
    memset(ss, 0, sizeof(*ss));
    un->sun_family = AF_UNIX;
    size_t n = strnlen((const char *)path, 108);
    memcpy(un->sun_path, path, PS_MIN(n, sizeof(un->sun_path) - 1));
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

static int parse_v2(const uint8_t *b, size_t len, ps_proxyproto_t *out)
{
    if (len < 16)
        return 0;
    size_t body = ((size_t)b[14] << 8) | b[15], total = 16 + body;
    unsigned version = b[12] >> 4, command = b[12] & 0x0f, family = b[13] >> 4;
    if (version != 2 || command > 1)
        return -EPROTO;
    if (len < total)
        return 0;
    memset(out, 0, sizeof(*out));
    out->version = 2;
    if (command == 0) { /* LOCAL: the addresses, if any, are ignored */
        out->local = 1;
        return (int)total;
    }
    const uint8_t *a = b + 16;
    uint16_t sport, dport;
    switch (family) {
    case 0: /* AF_UNSPEC */
        out->local = 1;
        return (int)total;
    case 1: /* AF_INET: 4 + 4 + 2 + 2 */
        if (body < 12)
            return -EPROTO;
        memcpy(&sport, a + 8, 2);
        memcpy(&dport, a + 10, 2);
        v2_inet(a, sport, &out->src, &out->src_len);
        v2_inet(a + 4, dport, &out->dst, &out->dst_len);
        return (int)total;
    case 2: /* AF_INET6: 16 + 16 + 2 + 2 */
        if (body < 36)
            return -EPROTO;
        memcpy(&sport, a + 32, 2);
        memcpy(&dport, a + 34, 2);
        v2_inet6(a, sport, &out->src, &out->src_len);
        v2_inet6(a + 16, dport, &out->dst, &out->dst_len);
        return (int)total;
    case 3: /* AF_UNIX: 108 + 108 */
        if (body < 216)
            return -EPROTO;
        v2_unix(a, &out->src, &out->src_len);
        v2_unix(a + 108, &out->dst, &out->dst_len);
        return (int)total;
    default:
        return -EPROTO;
    }
}

int ps_proxyproto_parse(const char *buf, size_t len, ps_proxyproto_t *out)
{
    int kind = ps_proxyproto_detect(buf, len);
    if (kind <= 0)
        return kind < 0 ? -EPROTO : 0;
    if (buf[0] == 'P')
        return parse_v1(buf, len, out);
    return parse_v2((const uint8_t *)buf, len, out);
}
