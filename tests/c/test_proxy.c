/* Unit tests of csrc/proxy.c: trust lists, peer trust, X-Forwarded-For,
 * X-Forwarded-Proto and gunicorn's secure_scheme_headers. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "check.h"
#include "common.h"
#include "proxy.h"

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
    return check_finish("test_proxy");
}
