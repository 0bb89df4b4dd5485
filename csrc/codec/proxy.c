#include "codec/proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

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

/* ---- RFC 7239 Forwarded ---- */

static int is_tchar(unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
        return 1;
    return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* One element: the parameters we read (base NULL when absent). */
typedef struct {
    ps_slice_t for_, proto, host;
    unsigned npairs;
} element_t;

typedef struct {
    const char *s, *end;
} cursor_t;

static void skip_ows(cursor_t *c)
{
    while (c->s < c->end && is_space(*c->s))
        c->s++;
}

/* A token or a quoted-string, the quotes left out. A quoted-string with a
 * quoted-pair sets *escaped: its slice still holds the backslashes. Returns
 * 0 or PS_PROXY_EMALFORMED. */
static int parse_value(cursor_t *c, ps_slice_t *v, int *escaped)
{
    *escaped = 0;
    if (c->s < c->end && *c->s == '"') {
        const char *start = ++c->s;
        for (; c->s < c->end; c->s++) {
            unsigned char ch = (unsigned char)*c->s;
            if (ch == '"') {
                *v = (ps_slice_t){start, (size_t)(c->s - start)};
                c->s++;
                return 0;
            }
            if (ch == '\\') {
                *escaped = 1;
                if (++c->s == c->end)
                    break;
                ch = (unsigned char)*c->s;
            }
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                break;
        }
        return PS_PROXY_EMALFORMED;
    }
    const char *start = c->s;
    while (c->s < c->end && is_tchar((unsigned char)*c->s))
        c->s++;
    *v = (ps_slice_t){start, (size_t)(c->s - start)};
    return v->len ? 0 : PS_PROXY_EMALFORMED;
}

/* One forwarded-pair "token=value" into e. A parameter we read may occur
 * once per element and may not be escaped. Returns 0 or
 * PS_PROXY_EMALFORMED. */
static int parse_pair(cursor_t *c, element_t *e)
{
    const char *name = c->s;
    while (c->s < c->end && is_tchar((unsigned char)*c->s))
        c->s++;
    ps_slice_t n = {name, (size_t)(c->s - name)}, v;
    int escaped;
    if (n.len == 0 || c->s == c->end || *c->s++ != '=' || parse_value(c, &v, &escaped) < 0)
        return PS_PROXY_EMALFORMED;
    ps_slice_t *slot = NULL;
    if (n.len == 3 && PS_SLICE_IEQ(n, "for"))
        slot = &e->for_;
    else if (n.len == 5 && PS_SLICE_IEQ(n, "proto"))
        slot = &e->proto;
    else if (n.len == 4 && PS_SLICE_IEQ(n, "host"))
        slot = &e->host;
    e->npairs++;
    if (slot == NULL)
        return 0; /* "by" and extensions: not ours */
    if (slot->base != NULL || escaped)
        return PS_PROXY_EMALFORMED;
    *slot = v;
    return 0;
}

/* The next element of a Forwarded list: pairs separated by ';', up to a
 * ',' or the end (consumed). Returns 0 or PS_PROXY_EMALFORMED. */
static int parse_element(cursor_t *c, element_t *e)
{
    memset(e, 0, sizeof(*e));
    for (;;) {
        skip_ows(c);
        if (c->s == c->end)
            return 0;
        if (*c->s == ',') {
            c->s++;
            return 0;
        }
        if (*c->s != ';' && parse_pair(c, e) < 0)
            return PS_PROXY_EMALFORMED;
        skip_ows(c);
        if (c->s < c->end && *c->s == ';')
            c->s++;
        else if (c->s < c->end && *c->s != ',')
            return PS_PROXY_EMALFORMED;
    }
}

/* A node ("for"): "[v6]" or a name with an optional ":port"; a bare IPv6
 * address is taken whole. The name is an IP literal, "unknown" or an
 * obfuscated "_identifier"; only IP literals can be trusted. Obfuscated or
 * invalid ports give 0. */
static void split_node(ps_slice_t v, ps_slice_t *host, uint16_t *port)
{
    *port = 0;
    *host = v;
    const char *colon = NULL;
    if (v.len && v.base[0] == '[') {
        const char *close = memchr(v.base, ']', v.len);
        if (close == NULL)
            return;
        *host = (ps_slice_t){v.base + 1, (size_t)(close - v.base - 1)};
        colon = close + 1 < v.base + v.len && close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = memchr(v.base, ':', v.len);
        if (colon && memchr(colon + 1, ':', (size_t)(v.base + v.len - colon - 1)))
            return; /* a bare IPv6 address */
        if (colon)
            host->len = (size_t)(colon - v.base);
    }
    if (colon) {
        int n = ps_parse_port(colon + 1, (size_t)(v.base + v.len - colon - 1));
        *port = n > 0 ? (uint16_t)n : 0;
    }
}

/* What the Forwarded fields of r say (their elements read as one list, from
 * the right: the first whose "for" is not a trusted proxy, or that has no
 * "for", is the client's). Returns 0 with the chosen element in *chosen
 * (npairs 0: no element) or PS_PROXY_EMALFORMED. */
static int forwarded_element(const ps_proxy_t *p, const ps_request_t *r, uint32_t first,
                             element_t *chosen)
{
    element_t leftmost = {0}, untrusted = {0}, e;
    for (uint32_t i = first; i < r->nheaders; i++) {
        const ps_header_t *h = &r->headers[i];
        if (h->name.len != 9 || !PS_SLICE_IEQ(h->name, "forwarded"))
            continue;
        cursor_t c = {h->value.base, h->value.base + h->value.len};
        while (c.s < c.end) {
            if (parse_element(&c, &e) < 0)
                return PS_PROXY_EMALFORMED;
            if (e.npairs == 0)
                continue; /* an empty list item */
            if (leftmost.npairs == 0)
                leftmost = e;
            ps_slice_t host = {NULL, 0};
            uint16_t port;
            if (e.for_.base)
                split_node(e.for_, &host, &port);
            if (e.for_.base == NULL || !ps_proxy_host_trusted(p, host.base, host.len))
                untrusted = e;
        }
    }
    *chosen = p->trust_all || untrusted.npairs == 0 ? leftmost : untrusted;
    return 0;
}

/* ---- hosts ---- */

static int is_host_char(unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
        return 1;
    return ch != 0 && strchr("-._~%!$&'()*+;=", ch) != NULL;
}

int ps_proxy_split_host(ps_slice_t v, ps_slice_t *name, uint16_t *port)
{
    const char *end = v.base + v.len, *colon;
    *port = 0;
    if (v.len == 0)
        return -EINVAL;
    if (v.base[0] == '[') {
        const char *close = memchr(v.base, ']', v.len);
        if (close == NULL || close == v.base + 1)
            return -EINVAL;
        for (const char *q = v.base + 1; q < close; q++)
            if (!(is_host_char((unsigned char)*q) || *q == ':'))
                return -EINVAL;
        *name = (ps_slice_t){v.base, (size_t)(close + 1 - v.base)};
        if (close + 1 == end)
            return 0;
        if (close[1] != ':')
            return -EINVAL;
        colon = close + 1;
    } else {
        colon = memchr(v.base, ':', v.len);
        *name = (ps_slice_t){v.base, colon ? (size_t)(colon - v.base) : v.len};
        if (name->len == 0)
            return -EINVAL;
        for (size_t i = 0; i < name->len; i++)
            if (!is_host_char((unsigned char)name->base[i]))
                return -EINVAL;
        if (colon == NULL)
            return 0;
    }
    if (colon + 1 == end)
        return 0; /* "host:": an empty port is no port (RFC 3986) */
    int n = ps_parse_port(colon + 1, (size_t)(end - colon - 1));
    if (n < 0)
        return -EINVAL;
    *port = (uint16_t)n;
    return 0;
}

/* The last comma item of a value, trimmed. */
static ps_slice_t last_item(ps_slice_t value)
{
    size_t start = value.len;
    while (start > 0 && value.base[start - 1] != ',')
        start--;
    return trim(value.base + start, value.len - start);
}

/* ---- all of them ---- */

/* Where the headers of a request we read are (indexes; UINT32_MAX none). */
typedef struct {
    uint32_t xff_first, xff_last, forwarded, proto, host, port, own_host;
} found_t;

/* Scans r once; the secure scheme headers are read on the way. Returns 0 or
 * PS_PROXY_ESCHEME. */
static int find_headers(const ps_proxy_t *p, const ps_request_t *r, found_t *f, uint8_t *scheme)
{
    memset(f, 0xff, sizeof(*f));
    *scheme = PS_SCHEME_NONE;
    f->xff_last = 0;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        const ps_header_t *h = &r->headers[i];
        ps_slice_t n = h->name;
        if (n.len == 15 && PS_SLICE_IEQ(n, "x-forwarded-for")) {
            f->xff_first = PS_MIN(f->xff_first, i);
            f->xff_last = i;
        } else if (n.len == 9 && PS_SLICE_IEQ(n, "forwarded")) {
            f->forwarded = PS_MIN(f->forwarded, i);
        } else if (n.len == 16 && PS_SLICE_IEQ(n, "x-forwarded-host")) {
            f->host = i;
        } else if (n.len == 16 && PS_SLICE_IEQ(n, "x-forwarded-port")) {
            f->port = i;
        } else if (n.len == 4 && PS_SLICE_IEQ(n, "host")) {
            f->own_host = i;
        } else if (!p->secure_headers && n.len == 17 && PS_SLICE_IEQ(n, "x-forwarded-proto")) {
            f->proto = i;
        }
        if (p->secure_headers) {
            uint8_t s = secure_header_scheme(p, h);
            if (s == PS_SCHEME_NONE)
                continue;
            if (*scheme != PS_SCHEME_NONE && *scheme != s)
                return PS_PROXY_ESCHEME;
            *scheme = s;
        }
    }
    return 0;
}

/* 1 when two forwarded client hosts name the same client: the same address,
 * or the same text when either is not an address. */
static int same_client(ps_slice_t a, ps_slice_t b)
{
    uint8_t aa[16], ba[16], a6, b6;
    if (parse_address(a.base, a.len, aa, &a6) == 0 && parse_address(b.base, b.len, ba, &b6) == 0)
        return a6 == b6 && memcmp(aa, ba, 16) == 0;
    return a.len == b.len && ps_slice_ieq(a, b.base, b.len);
}

/* Sets a field from a second source: Returns 0, or PS_PROXY_ECONFLICT when
 * both are set and differ. */
static int merge_scheme(uint8_t *into, uint8_t from)
{
    if (from == PS_SCHEME_NONE)
        return 0;
    if (*into != PS_SCHEME_NONE && *into != from)
        return PS_PROXY_ECONFLICT;
    *into = from;
    return 0;
}

/* Forwarded's chosen element into out. Returns 0 or PS_PROXY_EMALFORMED. */
static int apply_forwarded(const ps_proxy_t *p, const ps_request_t *r, uint32_t first,
                           ps_proxy_result_t *out)
{
    element_t e;
    if (forwarded_element(p, r, first, &e) < 0)
        return PS_PROXY_EMALFORMED;
    if (e.for_.base) {
        ps_slice_t host;
        split_node(e.for_, &host, &out->client_port);
        out->client = host.len ? bounded(host) : (ps_slice_t){NULL, 0};
        if (out->client.base == NULL)
            out->client_port = 0;
    }
    if (e.proto.base)
        out->scheme = forwarded_proto(e.proto);
    if (e.host.base && ps_proxy_split_host(e.host, &out->host, &out->port) < 0)
        out->host = (ps_slice_t){NULL, 0};
    if (out->host.base == NULL)
        out->port = 0;
    return 0;
}

/* X-Forwarded-Host and -Port over what Forwarded said. Returns 0 or
 * PS_PROXY_ECONFLICT. */
static int apply_host_port(const ps_request_t *r, const found_t *f, ps_proxy_result_t *out)
{
    ps_slice_t name;
    uint16_t port;
    if (f->host != UINT32_MAX &&
        ps_proxy_split_host(last_item(r->headers[f->host].value), &name, &port) == 0) {
        if (out->host.base &&
            ((out->port && port && out->port != port) || name.len != out->host.len ||
             !ps_slice_ieq(name, out->host.base, out->host.len)))
            return PS_PROXY_ECONFLICT;
        out->host = name;
        out->port = port ? port : out->port;
    }
    if (f->port == UINT32_MAX)
        return 0;
    ps_slice_t v = last_item(r->headers[f->port].value);
    int n = ps_parse_port(v.base, v.len);
    if (n <= 0)
        return 0;
    if (out->port && out->port != n)
        return PS_PROXY_ECONFLICT;
    out->port = (uint16_t)n;
    if (out->host.base == NULL && f->own_host != UINT32_MAX &&
        ps_proxy_split_host(r->headers[f->own_host].value, &name, &port) == 0)
        out->host = name;
    return 0;
}

int ps_proxy_apply(const ps_proxy_t *p, const ps_request_t *r, ps_proxy_result_t *out)
{
    found_t f;
    uint8_t scheme;
    memset(out, 0, sizeof(*out));
    int rc = find_headers(p, r, &f, &scheme);
    if (rc < 0)
        return rc;
    if (f.forwarded != UINT32_MAX && (rc = apply_forwarded(p, r, f.forwarded, out)) < 0)
        return rc;
    if (f.proto != UINT32_MAX)
        scheme = forwarded_proto(r->headers[f.proto].value);
    if (merge_scheme(&out->scheme, scheme) < 0)
        return PS_PROXY_ECONFLICT;
    if (f.xff_first != UINT32_MAX) {
        ps_slice_t client = forwarded_client(p, r, f.xff_first, f.xff_last);
        if (client.base && out->client.base && !same_client(client, out->client))
            return PS_PROXY_ECONFLICT;
        if (out->client.base == NULL)
            out->client = client;
    }
    return apply_host_port(r, &f, out);
}

const char *ps_proxy_reason(int rc)
{
    switch (rc) {
    case PS_PROXY_ESCHEME:
        return "secure scheme headers disagree";
    case PS_PROXY_ECONFLICT:
        return "proxy headers disagree";
    default:
        return "malformed Forwarded header";
    }
}
