/* Unit tests of csrc/codec/proxy.c: trust lists, peer trust, X-Forwarded-For,
 * X-Forwarded-Proto, gunicorn's secure_scheme_headers, RFC 7239 Forwarded,
 * X-Forwarded-Host and X-Forwarded-Port. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "check.h"
#include "base/common.h"
#include "codec/proxy.h"

static int init_str(ps_proxy_t *p, const char *list)
{
    return ps_proxy_init(p, list, strlen(list), NULL, NULL);
}

static int peer4(const ps_proxy_t *p, const char *text)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(1234)};
    inet_pton(AF_INET, text, &in.sin_addr);
    return ps_proxy_peer_trusted(p, (struct sockaddr *)&in, sizeof(in));
}

static int peer6(const ps_proxy_t *p, const char *text)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(1234)};
    inet_pton(AF_INET6, text, &in6.sin6_addr);
    return ps_proxy_peer_trusted(p, (struct sockaddr *)&in6, sizeof(in6));
}

static int host(const ps_proxy_t *p, const char *text)
{
    return ps_proxy_host_trusted(p, text, strlen(text));
}

/* A request with up to 8 headers given as "name", "value" pairs. */
typedef struct {
    ps_header_t h[8];
    ps_request_t r;
} request_t;

static void request_init(request_t *t, int n, const char *const *pairs)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < n; i++) {
        t->h[i].name = (ps_slice_t){pairs[2 * i], strlen(pairs[2 * i])};
        t->h[i].value = (ps_slice_t){pairs[2 * i + 1], strlen(pairs[2 * i + 1])};
    }
    t->r.headers = t->h;
    t->r.nheaders = (uint32_t)n;
}

#define REQUEST(t, ...)                                                                            \
    do {                                                                                           \
        static const char *const pairs_[] = {__VA_ARGS__};                                         \
        request_init((t), (int)(PS_ARRAY_LEN(pairs_) / 2), pairs_);                                \
    } while (0)

/* The client host ps_proxy_apply finds, or "(none)". */
static ps_slice_t client_of(const ps_proxy_t *p, request_t *t)
{
    ps_proxy_result_t res;
    if (ps_proxy_apply(p, &t->r, &res) < 0)
        return PS_SLICE_LIT("(error)");
    return res.client.base ? res.client : PS_SLICE_LIT("(none)");
}

static int scheme_of(const ps_proxy_t *p, request_t *t)
{
    ps_proxy_result_t res;
    int rc = ps_proxy_apply(p, &t->r, &res);
    return rc < 0 ? rc : res.scheme;
}

static void test_trust_list_parses_addresses_and_networks(void)
{
    ps_proxy_t p;
    CHECK_EQ(init_str(&p, " 127.0.0.1 , ::1,10.0.0.0/8,fd00::/8 ,192.168.1.0/24"), 0);
    CHECK_EQ(p.nnets, 5);
    CHECK(!p.trust_all);
    CHECK(peer4(&p, "127.0.0.1"));
    CHECK(!peer4(&p, "127.0.0.2"));
    CHECK(peer4(&p, "10.255.1.2"));
    CHECK(!peer4(&p, "11.0.0.1"));
    CHECK(peer4(&p, "192.168.1.77"));
    CHECK(!peer4(&p, "192.168.2.1"));
    CHECK(peer6(&p, "::1"));
    CHECK(peer6(&p, "fd12:3456::1"));
    CHECK(!peer6(&p, "fe80::1"));
    CHECK(!peer6(&p, "::2"));
    ps_proxy_free(&p);
}

static void test_odd_prefixes_match_bit_by_bit(void)
{
    ps_proxy_t p;
    CHECK_EQ(init_str(&p, "10.1.2.3/20,2001:db8::/33,0.0.0.0/0"), 0);
    ps_proxy_free(&p);
    CHECK_EQ(init_str(&p, "10.1.2.3/20,2001:db8::/33"), 0);
    CHECK(peer4(&p, "10.1.15.255")); /* host bits of the entry are ignored */
    CHECK(!peer4(&p, "10.1.16.0"));
    CHECK(peer6(&p, "2001:db8:7fff::1"));
    CHECK(!peer6(&p, "2001:db8:8000::1"));
    ps_proxy_free(&p);
    CHECK_EQ(init_str(&p, "0.0.0.0/0"), 0);
    CHECK(peer4(&p, "8.8.8.8"));
    CHECK(!peer6(&p, "2001:db8::1")); /* an IPv4 network never holds IPv6 peers */
    ps_proxy_free(&p);
}

static void test_ipv4_mapped_peers_match_ipv4_entries(void)
{
    ps_proxy_t p;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    CHECK(peer6(&p, "::ffff:127.0.0.1"));
    CHECK(peer6(&p, "::ffff:10.9.9.9"));
    CHECK(!peer6(&p, "::ffff:11.0.0.1"));
    CHECK(host(&p, "::ffff:10.1.1.1"));
    ps_proxy_free(&p);
    /* and a mapped entry matches plain IPv4 peers */
    CHECK_EQ(init_str(&p, "::ffff:192.168.0.0/112"), 0);
    CHECK(peer4(&p, "192.168.3.4"));
    CHECK(!peer4(&p, "192.169.0.1"));
    ps_proxy_free(&p);
}

static void test_star_trusts_everyone(void)
{
    ps_proxy_t p;
    CHECK_EQ(init_str(&p, "*"), 0);
    CHECK(p.trust_all);
    CHECK(peer4(&p, "203.0.113.9"));
    CHECK(peer6(&p, "2001:db8::1"));
    CHECK(host(&p, "not-an-ip"));
    ps_proxy_free(&p);
    CHECK_EQ(init_str(&p, "10.0.0.1, *"), 0);
    CHECK(peer4(&p, "1.2.3.4"));
    ps_proxy_free(&p);
}

static void test_empty_list_trusts_nobody_but_unix_peers(void)
{
    ps_proxy_t p;
    CHECK_EQ(init_str(&p, ""), 0);
    CHECK(!peer4(&p, "127.0.0.1"));
    CHECK(!peer6(&p, "::1"));
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    CHECK(ps_proxy_peer_trusted(&p, (struct sockaddr *)&un, sizeof(sa_family_t)));
    struct sockaddr_storage ss = {.ss_family = AF_APPLETALK};
    CHECK(!ps_proxy_peer_trusted(&p, (struct sockaddr *)&ss, sizeof(ss)));
    ps_proxy_free(&p);
    CHECK_EQ(init_str(&p, " , ,"), 0);
    CHECK_EQ(p.nnets, 0);
    ps_proxy_free(&p);
}

static void check_invalid_at(const char *file, int line, const char *list, const char *bad)
{
    ps_proxy_t p;
    size_t off = 999, len = 999;
    int rc = ps_proxy_init(&p, list, strlen(list), &off, &len);
    check_eq_at(rc, -EINVAL, file, line, list);
    if (rc == -EINVAL && off <= strlen(list))
        check_mem_eq_at(list + off, len, bad, strlen(bad), file, line, "the bad item");
    CHECK(p.nets == NULL && p.nnets == 0);
    if (rc == 0)
        ps_proxy_free(&p);
}
#define CHECK_INVALID(list, bad) check_invalid_at(__FILE__, __LINE__, (list), (bad))

static void test_invalid_items_are_reported(void)
{
    CHECK_INVALID("127.0.0.1,localhost", "localhost");
    CHECK_INVALID("1.2.3.4/33", "1.2.3.4/33");
    CHECK_INVALID(" ::1/129 ,1.1.1.1", "::1/129");
    CHECK_INVALID("1.2.3.4/", "1.2.3.4/");
    CHECK_INVALID("1.2.3.4/8x", "1.2.3.4/8x");
    CHECK_INVALID("1.2.3.4/-1", "1.2.3.4/-1");
    CHECK_INVALID("/8", "/8");
    CHECK_INVALID("1.2.3", "1.2.3");
    CHECK_INVALID("1.2.3.4 5.6.7.8", "1.2.3.4 5.6.7.8");
    CHECK_INVALID("**", "**");
    CHECK_INVALID("::ffff:1.2.3.4/95", "::ffff:1.2.3.4/95");
    char longer[200];
    memset(longer, '1', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    CHECK_INVALID(longer, longer);
}

static void test_forwarded_for_takes_first_untrusted_from_the_right(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    REQUEST(&t, "X-Forwarded-For", "1.2.3.4, 10.1.1.1");
    CHECK_SLICE_EQ(client_of(&p, &t), "1.2.3.4");
    REQUEST(&t, "x-forwarded-for", "9.9.9.9,1.2.3.4 ,10.1.1.1,127.0.0.1");
    CHECK_SLICE_EQ(client_of(&p, &t), "1.2.3.4");
    REQUEST(&t, "X-FORWARDED-FOR", "10.0.0.5, 10.0.0.6");
    CHECK_SLICE_EQ(client_of(&p, &t), "10.0.0.5"); /* all trusted: the leftmost */
    REQUEST(&t, "X-Forwarded-For", "2001:db8::7");
    CHECK_SLICE_EQ(client_of(&p, &t), "2001:db8::7");
    REQUEST(&t, "Host", "x");
    CHECK_SLICE_EQ(client_of(&p, &t), "(none)");
    REQUEST(&t, "X-Forwarded-For", " , ,");
    CHECK_SLICE_EQ(client_of(&p, &t), "(none)");
    REQUEST(&t, "X-Forwarded-For", "");
    CHECK_SLICE_EQ(client_of(&p, &t), "(none)");
    ps_proxy_free(&p);
}

static void test_forwarded_for_spans_repeated_headers(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    REQUEST(&t, "X-Forwarded-For", "5.5.5.5, 6.6.6.6", "Host", "x", "X-Forwarded-For", "10.0.0.1");
    CHECK_SLICE_EQ(client_of(&p, &t), "6.6.6.6");
    REQUEST(&t, "X-Forwarded-For", "10.0.0.3", "X-Forwarded-For", "10.0.0.1, 10.0.0.2");
    CHECK_SLICE_EQ(client_of(&p, &t), "10.0.0.3");
    REQUEST(&t, "X-Forwarded-For", "7.7.7.7", "X-Forwarded-For", ",");
    CHECK_SLICE_EQ(client_of(&p, &t), "7.7.7.7");
    ps_proxy_free(&p);
}

static void test_forwarded_for_with_star_takes_leftmost(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "*"), 0);
    REQUEST(&t, "X-Forwarded-For", " ,1.1.1.1, 2.2.2.2", "X-Forwarded-For", "3.3.3.3");
    CHECK_SLICE_EQ(client_of(&p, &t), "1.1.1.1");
    ps_proxy_free(&p);
}

static void test_forwarded_for_garbage_is_taken_as_is_but_bounded(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    REQUEST(&t, "X-Forwarded-For", "unknown, 127.0.0.1");
    CHECK_SLICE_EQ(client_of(&p, &t), "unknown");
    REQUEST(&t, "X-Forwarded-For", "[::1]:80");
    CHECK_SLICE_EQ(client_of(&p, &t), "[::1]:80");
    char big[4000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *pairs[] = {"X-Forwarded-For", big};
    request_init(&t, 1, pairs);
    ps_slice_t c = client_of(&p, &t);
    CHECK_EQ(c.len, PS_PROXY_MAX_HOST);
    CHECK(c.base == big);
    /* Spaces where the cut falls are not part of the host. */
    memset(big + 200, ' ', 100);
    c = client_of(&p, &t);
    CHECK_EQ(c.len, 200);
    CHECK(c.base == big);
    ps_proxy_free(&p);
}

static void test_forwarded_proto_sets_scheme(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    REQUEST(&t, "X-Forwarded-Proto", "https");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    REQUEST(&t, "X-Forwarded-Proto", " http ");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "x-forwarded-proto", "http, HTTPS");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS); /* the last hop's */
    REQUEST(&t, "X-Forwarded-Proto", "wss");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    REQUEST(&t, "X-Forwarded-Proto", "ws");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "X-Forwarded-Proto", "ftp");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_NONE);
    REQUEST(&t, "X-Forwarded-Proto", "");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_NONE);
    REQUEST(&t, "X-Forwarded-Proto", "https", "X-Forwarded-Proto", "http");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "X-Forwarded-Ssl", "on");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_NONE); /* gunicorn's table is not used */
    ps_proxy_free(&p);
}

static void gunicorn_defaults(ps_proxy_t *p)
{
    CHECK_EQ(init_str(p, "127.0.0.1,::1"), 0);
    CHECK_EQ(ps_proxy_add_scheme_header(p, "X-FORWARDED-PROTOCOL", 20, "ssl", 3), 0);
    CHECK_EQ(ps_proxy_add_scheme_header(p, "X-FORWARDED-PROTO", 17, "https", 5), 0);
    CHECK_EQ(ps_proxy_add_scheme_header(p, "X-FORWARDED-SSL", 15, "on", 2), 0);
}

static void test_secure_scheme_headers_like_gunicorn(void)
{
    ps_proxy_t p;
    request_t t;
    gunicorn_defaults(&p);
    REQUEST(&t, "X-Forwarded-Proto", "https");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    REQUEST(&t, "X-Forwarded-Proto", "HTTPS"); /* values match exactly */
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "X-Forwarded-Proto", "wss");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "x-forwarded-ssl", "on", "X-Forwarded-Protocol", "ssl");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    REQUEST(&t, "X-Forwarded-Ssl", "off");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTP);
    REQUEST(&t, "Host", "x");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_NONE);
    REQUEST(&t, "X-Forwarded-Proto", "https", "X-Forwarded-Ssl", "off");
    CHECK_EQ(scheme_of(&p, &t), -EPROTO);
    REQUEST(&t, "X-Forwarded-Proto", "http", "X-Forwarded-Proto", "https");
    CHECK_EQ(scheme_of(&p, &t), -EPROTO);
    REQUEST(&t, "X-Forwarded-Proto", "https", "X-Forwarded-For", "1.2.3.4");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    CHECK_SLICE_EQ(client_of(&p, &t), "1.2.3.4");
    ps_proxy_free(&p);
}

static void test_empty_secure_scheme_table_sets_no_scheme(void)
{
    ps_proxy_t p;
    request_t t;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    p.secure_headers = 1;
    REQUEST(&t, "X-Forwarded-Proto", "https");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_NONE);
    CHECK_EQ(ps_proxy_add_scheme_header(&p, "", 0, "x", 1), -EINVAL);
    CHECK_EQ(ps_proxy_add_scheme_header(&p, "X-Scheme", 8, "", 0), 0);
    REQUEST(&t, "X-Scheme", "");
    CHECK_EQ(scheme_of(&p, &t), PS_SCHEME_HTTPS);
    ps_proxy_free(&p);
}

/* ps_proxy_apply's whole result, or its error in rc. */
static int apply(const ps_proxy_t *p, request_t *t, ps_proxy_result_t *res)
{
    return ps_proxy_apply(p, &t->r, res);
}

static ps_slice_t or_none(ps_slice_t s)
{
    return s.base ? s : PS_SLICE_LIT("(none)");
}

static void test_rfc7239_forwarded_for_proto_host(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    REQUEST(&t, "Forwarded", "for=192.0.2.60;proto=https;host=example.com;by=203.0.113.43");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "192.0.2.60");
    CHECK_EQ(res.client_port, 0);
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    CHECK_SLICE_EQ(or_none(res.host), "example.com");
    CHECK_EQ(res.port, 0);
    /* Names are case-insensitive, spaces around ';' and ',' are allowed. */
    REQUEST(&t, "forwarded", "For=\"192.0.2.61\" ; PROTO=http ; Host=\"a.example:8080\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "192.0.2.61");
    CHECK_EQ(res.scheme, PS_SCHEME_HTTP);
    CHECK_SLICE_EQ(or_none(res.host), "a.example");
    CHECK_EQ(res.port, 8080);
    /* Unknown protos are ignored, like X-Forwarded-Proto's. */
    REQUEST(&t, "Forwarded", "for=192.0.2.1;proto=gopher");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_EQ(res.scheme, PS_SCHEME_NONE);
    ps_proxy_free(&p);
}

static void test_rfc7239_ipv6_nodes_and_ports(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    REQUEST(&t, "Forwarded", "for=\"[2001:db8:cafe::17]:4711\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "2001:db8:cafe::17");
    CHECK_EQ(res.client_port, 4711);
    REQUEST(&t, "Forwarded", "for=\"[2001:db8::1]\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "2001:db8::1");
    CHECK_EQ(res.client_port, 0);
    REQUEST(&t, "Forwarded", "for=\"192.0.2.43:47011\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "192.0.2.43");
    CHECK_EQ(res.client_port, 47011);
    REQUEST(&t, "Forwarded", "for=\"192.0.2.43:_hidden\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "192.0.2.43");
    CHECK_EQ(res.client_port, 0);
    REQUEST(&t, "Forwarded", "for=\"192.0.2.43:99999\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_EQ(res.client_port, 0);
    /* A bare IPv6 address (not RFC 7239, some proxies send it) is taken whole. */
    REQUEST(&t, "Forwarded", "for=\"2001:db8::9\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "2001:db8::9");
    REQUEST(&t, "Forwarded", "for=1.2.3.4;host=\"[2001:db8::5]:8443\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "[2001:db8::5]");
    CHECK_EQ(res.port, 8443);
    ps_proxy_free(&p);
}

static void test_rfc7239_obfuscated_and_unknown_stop_the_walk(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    REQUEST(&t, "Forwarded", "for=1.1.1.1, for=unknown;proto=https, for=10.0.0.2");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "unknown");
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    REQUEST(&t, "Forwarded", "for=1.1.1.1, for=_gazonk, for=10.0.0.2");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "_gazonk");
    /* An element without "for" is the nearest hop we cannot look past. */
    REQUEST(&t, "Forwarded", "for=1.1.1.1, proto=https;host=h.example");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "(none)");
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    CHECK_SLICE_EQ(or_none(res.host), "h.example");
    ps_proxy_free(&p);
}

static void test_rfc7239_takes_the_hop_the_trust_rule_selects(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1,10.0.0.0/8"), 0);
    /* From the right: 10.0.0.2 is a trusted proxy, 5.5.5.5 the client; its
     * element's proto and host are the ones taken. */
    REQUEST(&t, "Forwarded", "for=9.9.9.9;proto=http;host=spoofed", "Forwarded",
            "for=5.5.5.5;proto=https;host=real.example, for=10.0.0.2;proto=http");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "5.5.5.5");
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    CHECK_SLICE_EQ(or_none(res.host), "real.example");
    /* All trusted: the leftmost. Empty list items are skipped. */
    REQUEST(&t, "Forwarded", ", for=10.0.0.7;proto=https,, for=10.0.0.8 ,");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "10.0.0.7");
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    ps_proxy_free(&p);
    CHECK_EQ(init_str(&p, "*"), 0);
    REQUEST(&t, "Forwarded", "for=1.1.1.1, for=2.2.2.2");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "1.1.1.1");
    ps_proxy_free(&p);
}

static void test_rfc7239_malformed_is_an_error(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    static const char *const bad[] = {
        "for",                      /* no value */
        "for=",                     /* empty value */
        "=1.2.3.4",                 /* no name */
        "for=\"1.2.3.4",            /* unterminated quote */
        "for=[::1]",                /* brackets need quotes */
        "for=1.2.3.4 proto=http",   /* no separator */
        "for=1.2.3.4;for=5.6.7.8",  /* a parameter twice in an element */
        "for=\"1.2.\\3.4\"",        /* a quoted-pair in a value we read */
        "for = 1.2.3.4",            /* spaces around '=' */
        "for=\"a\x01b\"",           /* a control character */
        "for=1.2.3.4;proto=\"http", /* unterminated, second pair */
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(bad); i++) {
        const char *pairs[] = {"Forwarded", bad[i]};
        request_init(&t, 1, pairs);
        if (!CHECK_EQ(apply(&p, &t, &res), PS_PROXY_EMALFORMED))
            fprintf(stderr, "  value: %s\n", bad[i]);
    }
    /* A quoted-pair elsewhere is fine, and so are extensions. */
    REQUEST(&t, "Forwarded", "for=1.2.3.4;by=\"\\_x\";ext=\"a,b;c\"");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "1.2.3.4");
    CHECK(strcmp(ps_proxy_reason(PS_PROXY_EMALFORMED), "malformed Forwarded header") == 0);
    ps_proxy_free(&p);
}

static void test_x_forwarded_host_and_port(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    REQUEST(&t, "Host", "internal:8000", "X-Forwarded-Host", "www.example.com");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "www.example.com");
    CHECK_EQ(res.port, 0);
    REQUEST(&t, "X-Forwarded-Host", "a.example, b.example:8443");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "b.example"); /* the last hop's */
    CHECK_EQ(res.port, 8443);
    REQUEST(&t, "X-Forwarded-Host", "www.example.com", "X-Forwarded-Port", "8443");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "www.example.com");
    CHECK_EQ(res.port, 8443);
    /* A port alone keeps the request's own host name. */
    REQUEST(&t, "Host", "internal:8000", "X-Forwarded-Port", "443");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "internal");
    CHECK_EQ(res.port, 443);
    REQUEST(&t, "X-Forwarded-Port", "443");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.host), "(none)");
    CHECK_EQ(res.port, 443);
    /* Values that are not hosts or ports are ignored. */
    static const char *const bad_hosts[] = {"",   "a b",     "a/b", "x:y", "[::1",
                                            "[]", "a:70000", ":80", "a@b", "[::1]x"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_hosts); i++) {
        const char *pairs[] = {"X-Forwarded-Host", bad_hosts[i]};
        request_init(&t, 1, pairs);
        CHECK_EQ(apply(&p, &t, &res), 0);
        if (!CHECK(res.host.base == NULL))
            fprintf(stderr, "  value: %s\n", bad_hosts[i]);
    }
    static const char *const bad_ports[] = {"", "0", "x", "65536", "-1", "1 2"};
    for (size_t i = 0; i < PS_ARRAY_LEN(bad_ports); i++) {
        const char *pairs[] = {"X-Forwarded-Port", bad_ports[i]};
        request_init(&t, 1, pairs);
        CHECK_EQ(apply(&p, &t, &res), 0);
        CHECK_EQ(res.port, 0);
    }
    ps_proxy_free(&p);
}

static void test_forwarded_and_x_forwarded_must_agree(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    /* Agreeing: fine (nginx set both from the same hop). */
    REQUEST(&t, "Forwarded", "for=\"[2001:db8::1]:5000\";proto=https;host=w.example",
            "X-Forwarded-For", "2001:DB8:0::1", "X-Forwarded-Proto", "https", "X-Forwarded-Host",
            "W.example");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_SLICE_EQ(or_none(res.client), "2001:db8::1");
    CHECK_EQ(res.client_port, 5000);
    REQUEST(&t, "Forwarded", "for=1.2.3.4", "X-Forwarded-For", "1.2.3.4");
    CHECK_EQ(apply(&p, &t, &res), 0);
    REQUEST(&t, "Forwarded", "for=1.2.3.4", "X-Forwarded-For", "5.6.7.8");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    REQUEST(&t, "Forwarded", "proto=https", "X-Forwarded-Proto", "http");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    REQUEST(&t, "Forwarded", "host=a.example", "X-Forwarded-Host", "b.example");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    REQUEST(&t, "Forwarded", "host=\"a.example:8443\"", "X-Forwarded-Host", "a.example:8080");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    REQUEST(&t, "X-Forwarded-Host", "a.example:8443", "X-Forwarded-Port", "8080");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    /* A port on one side only is no conflict. */
    REQUEST(&t, "Forwarded", "host=a.example", "X-Forwarded-Host", "a.example:8443");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_EQ(res.port, 8443);
    CHECK(strcmp(ps_proxy_reason(PS_PROXY_ECONFLICT), "proxy headers disagree") == 0);
    ps_proxy_free(&p);
    /* gunicorn's table against Forwarded's proto. */
    gunicorn_defaults(&p);
    REQUEST(&t, "Forwarded", "proto=https", "X-Forwarded-Ssl", "on");
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_EQ(res.scheme, PS_SCHEME_HTTPS);
    REQUEST(&t, "Forwarded", "proto=http", "X-Forwarded-Ssl", "on");
    CHECK_EQ(apply(&p, &t, &res), PS_PROXY_ECONFLICT);
    ps_proxy_free(&p);
}

static void test_forwarded_client_is_bounded(void)
{
    ps_proxy_t p;
    request_t t;
    ps_proxy_result_t res;
    CHECK_EQ(init_str(&p, "127.0.0.1"), 0);
    static char big[4000];
    memcpy(big, "for=", 4);
    memset(big + 4, 'a', sizeof(big) - 5);
    const char *pairs[] = {"Forwarded", big};
    request_init(&t, 1, pairs);
    CHECK_EQ(apply(&p, &t, &res), 0);
    CHECK_EQ(res.client.len, PS_PROXY_MAX_HOST);
    ps_proxy_free(&p);
}

int main(void)
{
    test_trust_list_parses_addresses_and_networks();
    test_odd_prefixes_match_bit_by_bit();
    test_ipv4_mapped_peers_match_ipv4_entries();
    test_star_trusts_everyone();
    test_empty_list_trusts_nobody_but_unix_peers();
    test_invalid_items_are_reported();
    test_forwarded_for_takes_first_untrusted_from_the_right();
    test_forwarded_for_spans_repeated_headers();
    test_forwarded_for_with_star_takes_leftmost();
    test_forwarded_for_garbage_is_taken_as_is_but_bounded();
    test_forwarded_proto_sets_scheme();
    test_secure_scheme_headers_like_gunicorn();
    test_empty_secure_scheme_table_sets_no_scheme();
    test_rfc7239_forwarded_for_proto_host();
    test_rfc7239_ipv6_nodes_and_ports();
    test_rfc7239_obfuscated_and_unknown_stop_the_walk();
    test_rfc7239_takes_the_hop_the_trust_rule_selects();
    test_rfc7239_malformed_is_an_error();
    test_x_forwarded_host_and_port();
    test_forwarded_and_x_forwarded_must_agree();
    test_forwarded_client_is_bounded();
    return check_finish("test_proxy");
}
