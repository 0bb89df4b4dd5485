#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Longest IP literal we parse (an IPv6 address with an embedded IPv4 one
 * is 45 characters); anything longer is not an address. */
#define MAX_LITERAL 63

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t';
}

static ps_slice_t trim(const char *s, size_t n)
{
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    while (n && is_space(s[n - 1]))
        n--;
    return (ps_slice_t){s, n};
}

/* Parses an IP literal. IPv4-mapped IPv6 addresses come out as IPv4, so
 * they match IPv4 entries. Returns 0 or -EINVAL. */
static int parse_address(const char *s, size_t n, uint8_t addr[16], uint8_t *is_v6)
{
    char text[MAX_LITERAL + 1];
    if (n == 0 || n > MAX_LITERAL)
        return -EINVAL;
    memcpy(text, s, n);
    text[n] = '\0';
    memset(addr, 0, 16);
    if (memchr(text, ':', n) == NULL) {
        *is_v6 = 0;
        return inet_pton(AF_INET, text, addr) == 1 ? 0 : -EINVAL;
    }
    struct in6_addr a6;
    if (inet_pton(AF_INET6, text, &a6) != 1)
        return -EINVAL;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
        *is_v6 = 0;
        memcpy(addr, a6.s6_addr + 12, 4);
    } else {
        *is_v6 = 1;
        memcpy(addr, a6.s6_addr, 16);
    }
    return 0;
}

/* Parses "ADDRESS" or "ADDRESS/PREFIX" (host bits are allowed and ignored).
 * Returns 0 or -EINVAL. */
static int parse_net(ps_slice_t item, ps_proxy_net_t *net)
{
    const char *slash = memchr(item.base, '/', item.len);
    size_t alen = slash ? (size_t)(slash - item.base) : item.len;
    int mapped = slash && alen && memchr(item.base, ':', alen) != NULL;
    if (parse_address(item.base, alen, net->addr, &net->is_v6) < 0)
        return -EINVAL;
    unsigned max = net->is_v6 ? 128 : 32;
    if (slash == NULL) {
        net->prefix = (uint8_t)max;
        return 0;
    }
    const char *d = slash + 1, *end = item.base + item.len;
    if (d == end || end - d > 3)
        return -EINVAL;
    unsigned prefix = 0;
    for (; d < end; d++) {
        if (*d < '0' || *d > '9')
            return -EINVAL;
        prefix = prefix * 10 + (unsigned)(*d - '0');
    }
    if (mapped && !net->is_v6) { /* ::ffff:a.b.c.d/N counts its prefix over 128 bits */
        if (prefix < 96 || prefix > 128)
            return -EINVAL;
        prefix -= 96;
    }
    if (prefix > max)
        return -EINVAL;
    net->prefix = (uint8_t)prefix;
    return 0;
}

int ps_proxy_init(ps_proxy_t *p, const char *list, size_t len, size_t *bad_off, size_t *bad_len)
{
    memset(p, 0, sizeof(*p));
    size_t items = 1;
    for (size_t i = 0; i < len; i++)
        items += list[i] == ',';
    p->nets = calloc(items, sizeof(*p->nets));
    if (p->nets == NULL)
        return -ENOMEM;
    size_t start = 0;
    while (start <= len) {
        const char *comma = memchr(list + start, ',', len - start);
        size_t end = comma ? (size_t)(comma - list) : len;
        ps_slice_t item = trim(list + start, end - start);
        if (item.len == 1 && item.base[0] == '*') {
            p->trust_all = 1;
        } else if (item.len && parse_net(item, &p->nets[p->nnets]) == 0) {
            p->nnets++;
        } else if (item.len) {
            if (bad_off)
                *bad_off = (size_t)(item.base - list);
            if (bad_len)
                *bad_len = item.len;
            ps_proxy_free(p);
            return -EINVAL;
        }
        start = end + 1;
    }
    return 0;
}

static char *dup_bytes(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int ps_proxy_add_scheme_header(ps_proxy_t *p, const char *name, size_t name_len, const char *value,
                               size_t value_len)
{
    p->secure_headers = 1;
    if (name_len == 0)
        return -EINVAL;
    ps_proxy_scheme_header_t *t = realloc(p->scheme_headers, (p->nscheme_headers + 1) * sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    p->scheme_headers = t;
    ps_proxy_scheme_header_t *e = &t[p->nscheme_headers];
    e->name = dup_bytes(name, name_len);
    e->value = dup_bytes(value, value_len);
    if (e->name == NULL || e->value == NULL) {
        free(e->name);
        free(e->value);
        return -ENOMEM;
    }
    e->name_len = name_len;
    e->value_len = value_len;
    p->nscheme_headers++;
    return 0;
}

void ps_proxy_free(ps_proxy_t *p)
{
    for (uint32_t i = 0; i < p->nscheme_headers; i++) {
        free(p->scheme_headers[i].name);
        free(p->scheme_headers[i].value);
    }
    free(p->scheme_headers);
    free(p->nets);
    memset(p, 0, sizeof(*p));
}

static int net_contains(const ps_proxy_net_t *net, int is_v6, const uint8_t *addr)
{
    if (net->is_v6 != is_v6)
        return 0;
    unsigned bytes = net->prefix / 8, bits = net->prefix % 8;
    if (memcmp(net->addr, addr, bytes) != 0)
        return 0;
    if (bits == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - bits));
    return (net->addr[bytes] & mask) == (addr[bytes] & mask);
}

static int address_trusted(const ps_proxy_t *p, int is_v6, const uint8_t *addr)
{
    if (p->trust_all)
        return 1;
    for (uint32_t i = 0; i < p->nnets; i++)
        if (net_contains(&p->nets[i], is_v6, addr))
            return 1;
    return 0;
}

int ps_proxy_peer_trusted(const ps_proxy_t *p, const struct sockaddr *sa, socklen_t len)
{
    if (len < (socklen_t)sizeof(sa_family_t))
        return 0;
    if (sa->sa_family == AF_UNIX)
        return 1;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return address_trusted(p, 0, (const uint8_t *)&in->sin_addr);
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            return address_trusted(p, 0, in6->sin6_addr.s6_addr + 12);
        return address_trusted(p, 1, in6->sin6_addr.s6_addr);
    }
    return 0;
}

int ps_proxy_host_trusted(const ps_proxy_t *p, const char *s, size_t n)
{
    uint8_t addr[16], is_v6;
    if (parse_address(s, n, addr, &is_v6) < 0)
        return p->trust_all;
    return address_trusted(p, is_v6, addr);
}

/* ---- per request ---- */

/* A trimmed host cut to PS_PROXY_MAX_HOST, and trimmed again after the cut. */
static ps_slice_t bounded(ps_slice_t host)
{
    return trim(host.base, PS_MIN(host.len, PS_PROXY_MAX_HOST));
}

/* The client named by the X-Forwarded-For headers r->headers[first..last]:
 * walking the hosts from the right (the last header's last host first), the
 * first one that is not a trusted proxy; the leftmost when all are trusted
 * or everyone is. Empty items are skipped; base is NULL when none is left. */
static ps_slice_t forwarded_client(const ps_proxy_t *p, const ps_request_t *r, uint32_t first,
                                   uint32_t last)
{
    ps_slice_t leftmost = {NULL, 0};
    for (uint32_t i = last + 1; i-- > first;) {
        const ps_header_t *h = &r->headers[i];
        if (h->name.len != 15 || !PS_SLICE_IEQ(h->name, "x-forwarded-for"))
            continue;
        const char *v = h->value.base;
        size_t end = h->value.len;
        for (;;) {
            size_t start = end;
            while (start > 0 && v[start - 1] != ',')
                start--;
            ps_slice_t host = trim(v + start, end - start);
            if (host.len) {
                if (!p->trust_all && !ps_proxy_host_trusted(p, host.base, host.len))
                    return bounded(host);
                leftmost = host;
            }
            if (start == 0)
                break;
            end = start - 1;
        }
    }
    return leftmost.base ? bounded(leftmost) : leftmost;
}

/* X-Forwarded-Proto: its last comma item, http/https (ws/wss: an HTTP
 * request's scheme is http/https all the same); anything else is ignored. */
static uint8_t forwarded_proto(ps_slice_t value)
{
    const char *v = value.base;
    size_t start = value.len;
    while (start > 0 && v[start - 1] != ',')
        start--;
    ps_slice_t s = trim(v + start, value.len - start);
    if ((s.len == 4 && PS_SLICE_IEQ(s, "http")) || (s.len == 2 && PS_SLICE_IEQ(s, "ws")))
        return PS_SCHEME_HTTP;
    if ((s.len == 5 && PS_SLICE_IEQ(s, "https")) || (s.len == 3 && PS_SLICE_IEQ(s, "wss")))
        return PS_SCHEME_HTTPS;
    return PS_SCHEME_NONE;
}

/* gunicorn's secure_scheme_headers: a header of the table says https when
 * its value is the table's exactly, http otherwise. Returns the scheme it
 * says, or PS_SCHEME_NONE when the header is not in the table. */
static uint8_t secure_header_scheme(const ps_proxy_t *p, const ps_header_t *h)
{
    for (uint32_t k = 0; k < p->nscheme_headers; k++) {
        const ps_proxy_scheme_header_t *e = &p->scheme_headers[k];
        if (e->name_len != h->name.len || !ps_slice_ieq(h->name, e->name, e->name_len))
            continue;
        ps_slice_t v = trim(h->value.base, h->value.len);
        int secure = v.len == e->value_len && memcmp(v.base, e->value, v.len) == 0;
        return secure ? PS_SCHEME_HTTPS : PS_SCHEME_HTTP;
    }
    return PS_SCHEME_NONE;
}

int ps_proxy_apply(const ps_proxy_t *p, const ps_request_t *r, ps_proxy_result_t *out)
{
    uint32_t xff_first = UINT32_MAX, xff_last = 0;
    const ps_header_t *proto = NULL;
    out->scheme = PS_SCHEME_NONE;
    out->client = (ps_slice_t){NULL, 0};
    for (uint32_t i = 0; i < r->nheaders; i++) {
        const ps_header_t *h = &r->headers[i];
        if (h->name.len == 15 && PS_SLICE_IEQ(h->name, "x-forwarded-for")) {
            xff_first = PS_MIN(xff_first, i);
            xff_last = i;
        }
        if (p->secure_headers) {
            uint8_t scheme = secure_header_scheme(p, h);
            if (scheme == PS_SCHEME_NONE)
                continue;
            if (out->scheme != PS_SCHEME_NONE && out->scheme != scheme)
                return -EPROTO;
            out->scheme = scheme;
        } else if (h->name.len == 17 && PS_SLICE_IEQ(h->name, "x-forwarded-proto")) {
            proto = h;
        }
    }
    if (proto)
        out->scheme = forwarded_proto(proto->value);
    if (xff_first != UINT32_MAX)
        out->client = forwarded_client(p, r, xff_first, xff_last);
    return 0;
}
