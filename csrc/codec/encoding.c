/* Content-coding negotiation: see encoding.h. */
#include "codec/encoding.h"

#include <string.h>

static const struct {
    const char *name;
    size_t len;
    ps_coding_t coding;
} known[] =
    {
        {"identity", 8, PS_CODING_IDENTITY}, {"br", 2, PS_CODING_BR},
        {"zstd", 4, PS_CODING_ZSTD},         {"gzip", 4, PS_CODING_GZIP},
        {"x-gzip", 6, PS_CODING_GZIP}, /* RFC 9110 8.4.1.3: the same as gzip */
};

void ps_accept_init(ps_accept_t *a)
{
    for (int i = 0; i < PS_CODING_COUNT; i++)
        a->q[i] = -1;
    a->star = -1;
    a->seen = 0;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A qvalue (RFC 9110 12.4.2): "0" ["." 0*3DIGIT] / "1" ["." 0*3("0")], in
 * thousandths, or -1. */
static int parse_qvalue(const char *p, size_t n)
{
    if (n == 0 || (p[0] != '0' && p[0] != '1') || n > 5 || (n > 1 && p[1] != '.'))
        return -1;
    int v = (p[0] - '0') * 1000, scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v += (p[i] - '0') * scale;
    }
    return v <= 1000 ? v : -1;
}

/* The weight an element's parameters give (1000 without a "q"), or -1 when
 * a parameter is malformed. p..end is what follows the coding's name. */
static int element_weight(const char *p, const char *end)
{
    int q = 1000, weights = 0;
    while (p < end) {
        while (p < end && is_ows(*p))
            p++;
        if (p == end)
            break;
        if (*p++ != ';')
            return -1;
        while (p < end && is_ows(*p))
            p++;
        const char *name = p;
        while (p < end && is_tchar((unsigned char)*p))
            p++;
        size_t name_len = (size_t)(p - name);
        /* name=value, no whitespace around '=' (RFC 9110 5.6.6). */
        if (name_len == 0 || p == end || *p++ != '=')
            return -1;
        const char *value = p;
        while (p < end && !is_ows(*p) && *p != ';')
            p++;
        /* Accept-Encoding = #( codings [ weight ] ): q is the only parameter. */
        if (name_len != 1 || (name[0] != 'q' && name[0] != 'Q') || weights++)
            return -1;
        if ((q = parse_qvalue(value, (size_t)(p - value))) < 0)
            return -1;
    }
    return q;
}

static void set_weight(int16_t *slot, int q)
{
    if (*slot < 0 || q < *slot)
        *slot = (int16_t)q;
}

static void add_element(ps_accept_t *a, const char *p, const char *end)
{
    const char *name = p;
    while (p < end && is_tchar((unsigned char)*p))
        p++;
    size_t len = (size_t)(p - name);
    if (len == 0)
        return; /* an empty element ("gzip,,br") or junk */
    int q = element_weight(p, end);
    if (q < 0)
        return;
    if (len == 1 && name[0] == '*') {
        set_weight(&a->star, q);
        return;
    }
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (known[i].len == len && strncasecmp(known[i].name, name, len) == 0) {
            set_weight(&a->q[known[i].coding], q);
            return;
        }
    }
}

void ps_accept_parse(ps_accept_t *a, ps_slice_t value)
{
    const char *p = value.base, *end = value.base + value.len;
    a->seen = 1;
    while (p < end) {
        while (p < end && (is_ows(*p) || *p == ','))
            p++;
        const char *start = p;
        while (p < end && *p != ',')
            p++;
        const char *stop = p;
        while (stop > start && is_ows(stop[-1]))
            stop--;
        if (stop > start)
            add_element(a, start, stop);
    }
}

int ps_accept_weight(const ps_accept_t *a, ps_coding_t c)
{
    if (!a->seen)
        return c == PS_CODING_IDENTITY ? 1000 : 0;
    if (a->q[c] >= 0)
        return a->q[c];
    if (a->star >= 0)
        return c == PS_CODING_IDENTITY && a->star == 0 ? 0 : a->star;
    return c == PS_CODING_IDENTITY ? 1 : 0; /* identity: acceptable, least preferred */
}

ps_coding_t ps_accept_choose_by(const ps_accept_t *a, unsigned offered, const ps_coding_t *order,
                                size_t n)
{
    if (!a->seen)
        return PS_CODING_IDENTITY;
    ps_coding_t best = PS_CODING_NONE;
    int best_q = 0;
    for (size_t i = 0; i < n; i++) {
        ps_coding_t c = order[i];
        int q = (offered & PS_CODING_BIT(c)) ? ps_accept_weight(a, c) : 0;
        if (q > best_q) {
            best = c;
            best_q = q;
        }
    }
    /* Identity wins only over a lower weight: between equals, the compressed one. */
    if (ps_accept_weight(a, PS_CODING_IDENTITY) > best_q)
        return PS_CODING_IDENTITY;
    return best;
}

ps_coding_t ps_accept_choose(const ps_accept_t *a, unsigned offered)
{
    static const ps_coding_t order[] = {PS_CODING_BR, PS_CODING_ZSTD, PS_CODING_GZIP};
    return ps_accept_choose_by(a, offered, order, 3);
}

const char *ps_coding_name(ps_coding_t c)
{
    switch (c) {
    case PS_CODING_BR:
        return "br";
    case PS_CODING_ZSTD:
        return "zstd";
    case PS_CODING_GZIP:
        return "gzip";
    default:
        return "identity";
    }
}
