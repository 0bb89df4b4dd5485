/* Unit tests of csrc/codec/proxyproto.c: PROXY protocol v1 and v2 headers, fed
 * whole and byte by byte. */
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
#include "codec/proxyproto.h"

/* Parses buf fed one more byte at a time: every shorter prefix must ask for
 * more (0) or already fail; returns the result for the whole buffer. */
static int parse_growing(const char *buf, size_t len, ps_proxyproto_t *out)
{
    for (size_t i = 0; i < len; i++) {
        int rc = ps_proxyproto_parse(buf, i, out);
        if (rc < 0)
            return rc;
        if (rc > 0) /* complete before its end: fine only at the real end */
            return rc;
    }
    return ps_proxyproto_parse(buf, len, out);
}

static const char *addr_text(const struct sockaddr_storage *ss, char *text, int *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, text, INET6_ADDRSTRLEN);
        *port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, text, INET6_ADDRSTRLEN);
        *port = ntohs(in6->sin6_port);
    } else {
        strcpy(text, "?");
        *port = -1;
    }
    return text;
}

#define CHECK_ADDR(ss, want_text, want_port)                                                       \
    do {                                                                                           \
        char text_[INET6_ADDRSTRLEN];                                                              \
        int port_;                                                                                 \
        addr_text((ss), text_, &port_);                                                            \
        if (!CHECK(strcmp(text_, (want_text)) == 0))                                               \
            fprintf(stderr, "  got %s\n", text_);                                                  \
        CHECK_EQ(port_, (want_port));                                                              \
    } while (0)

static void test_v1_tcp4_and_tcp6(void)
{
    ps_proxyproto_t pp;
    const char *h = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
    CHECK_EQ(parse_growing(h, strlen(h), &pp), 45);
    CHECK_EQ(pp.version, 1);
    CHECK_EQ(pp.local, 0);
    CHECK_ADDR(&pp.src, "192.0.2.7", 56324);
    CHECK_ADDR(&pp.dst, "198.51.100.1", 443);
    CHECK_EQ(pp.src_len, sizeof(struct sockaddr_in));
    h = "PROXY TCP6 2001:db8::1 2001:db8::2 65535 0\r\n";
    CHECK_EQ(parse_growing(h, strlen(h), &pp), (int)strlen(h));
    CHECK_ADDR(&pp.src, "2001:db8::1", 65535);
    CHECK_ADDR(&pp.dst, "2001:db8::2", 0);
    CHECK_EQ(pp.src_len, sizeof(struct sockaddr_in6));
    h = "PROXY UNKNOWN\r\n";
    CHECK_EQ(parse_growing(h, strlen(h), &pp), 15);
    CHECK_EQ(pp.local, 1);
    h = "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n";
    CHECK_EQ(parse_growing(h, strlen(h), &pp), (int)strlen(h));
    CHECK_EQ(pp.local, 1);
}

static void test_v1_invalid(void)
{
    static const char *const bad[] = {
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n",       /* a field missing */
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443 1\r\n", /* one too many */
        "PROXY TCP4 192.0.2.7  198.51.100.1 56324 443\r\n",  /* two spaces */
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443 \r\n",  /* a space before CRLF */
        "PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",       /* v6 under TCP4 */
        "PROXY TCP6 192.0.2.7 2001:db8::2 1 2\r\n",          /* v4 under TCP6 */
        "PROXY TCP4 192.0.2.7 198.51.100.1 65536 443\r\n",   /* port too large */
        "PROXY TCP4 192.0.2.7 198.51.100.1 0443 443\r\n",    /* leading zero */
        "PROXY TCP4 192.0.2.7 198.51.100.1 -1 443\r\n",      /* not a number */
        "PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",         /* not TCP */
        "PROXY TCP4 192.0.2.7 198.51.100.1 1 2\n",           /* LF alone */
        "PROXY TCP4 192.0.2.7 198.51.100.1 1 2\rX",          /* CR without LF */
        "PROXY \r\n",                                        /* empty */
        "GET / HTTP/1.1\r\n",                                /* no PROXY header at all */
        "proxy TCP4 192.0.2.7 198.51.100.1 1 2\r\n",         /* case matters */
    };
    ps_proxyproto_t pp;
    for (size_t i = 0; i < PS_ARRAY_LEN(bad); i++)
        if (!CHECK_EQ(parse_growing(bad[i], strlen(bad[i]), &pp), -EPROTO))
            fprintf(stderr, "  input %zu\n", i);
    /* No CRLF within 107 bytes. */
    char long_line[200];
    memset(long_line, 'x', sizeof(long_line));
    memcpy(long_line, "PROXY TCP4 ", 11);
    CHECK_EQ(ps_proxyproto_parse(long_line, 105, &pp), 0);
    CHECK_EQ(ps_proxyproto_parse(long_line, 106, &pp), -EPROTO);
    /* The longest line that fits: its CR at byte 105, its LF at 106. */
    memcpy(long_line, "PROXY UNKNOWN ", 14);
    long_line[105] = '\r';
    long_line[106] = '\n';
    CHECK_EQ(ps_proxyproto_parse(long_line, sizeof(long_line), &pp), 107);
    long_line[105] = 'x';
    long_line[106] = '\r';
    long_line[107] = '\n';
    CHECK_EQ(ps_proxyproto_parse(long_line, sizeof(long_line), &pp), -EPROTO);
    CHECK_EQ(ps_proxyproto_parse(long_line, sizeof(long_line), &pp), -EPROTO);
}

/* A v2 header: signature, ver_cmd, fam, then body (len bytes). */
static size_t v2(uint8_t *out, uint8_t ver_cmd, uint8_t fam, const void *body, size_t len)
{
    memcpy(out, "\r\n\r\n\0\r\nQUIT\n", 12);
    out[12] = ver_cmd;
    out[13] = fam;
    out[14] = (uint8_t)(len >> 8);
    out[15] = (uint8_t)len;
    memcpy(out + 16, body, len);
    return 16 + len;
}

static void test_v2_inet_inet6_unix(void)
{
    uint8_t buf[600], body[300];
    ps_proxyproto_t pp;
    /* IPv4 192.0.2.7:56324 -> 198.51.100.1:443, then a TLV (skipped). */
    const uint8_t in4[] = {192,  0,    2,    7,    198,  51,   100, 1,   0xdc,
                           0x04, 0x01, 0xbb, 0x04, 0x00, 0x03, 'a', 'b', 'c'};
    size_t n = v2(buf, 0x21, 0x11, in4, sizeof(in4));
    memcpy(buf + n, "GET", 3);
    CHECK_EQ(parse_growing((char *)buf, n + 3, &pp), (int)n);
    CHECK_EQ(pp.version, 2);
    CHECK_EQ(pp.local, 0);
    CHECK_ADDR(&pp.src, "192.0.2.7", 56324);
    CHECK_ADDR(&pp.dst, "198.51.100.1", 443);
    /* IPv6. */
    memset(body, 0, sizeof(body));
    inet_pton(AF_INET6, "2001:db8::17", body);
    inet_pton(AF_INET6, "2001:db8::1", body + 16);
    body[32] = 0x12, body[33] = 0x67; /* 4711 */
    body[34] = 0x00, body[35] = 0x50; /* 80 */
    n = v2(buf, 0x21, 0x21, body, 36);
    CHECK_EQ(parse_growing((char *)buf, n, &pp), (int)n);
    CHECK_ADDR(&pp.src, "2001:db8::17", 4711);
    CHECK_ADDR(&pp.dst, "2001:db8::1", 80);
    /* AF_UNIX: the client is a path. */
    memset(body, 0, sizeof(body));
    strcpy((char *)body, "/run/client.sock");
    memset(body + 108, 'p', 108); /* a path of 108 bytes, no NUL */
    n = v2(buf, 0x21, 0x31, body, 216);
    CHECK_EQ(parse_growing((char *)buf, n, &pp), (int)n);
    CHECK_EQ(pp.src.ss_family, AF_UNIX);
    CHECK(strcmp(((struct sockaddr_un *)&pp.src)->sun_path, "/run/client.sock") == 0);
    CHECK_EQ(pp.dst.ss_family, AF_UNIX);
    CHECK_EQ(strlen(((struct sockaddr_un *)&pp.dst)->sun_path), 107); /* cut, terminated */
}

static void test_v2_local_and_unspec(void)
{
    uint8_t buf[100];
    const uint8_t in4[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2};
    ps_proxyproto_t pp;
    size_t n = v2(buf, 0x20, 0x11, in4, sizeof(in4)); /* LOCAL: addresses ignored */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), (int)n);
    CHECK_EQ(pp.local, 1);
    n = v2(buf, 0x20, 0x00, "", 0);
    CHECK_EQ(parse_growing((char *)buf, n, &pp), 16);
    CHECK_EQ(pp.local, 1);
    n = v2(buf, 0x21, 0x00, "xyz", 3); /* PROXY over UNSPEC: keep the socket's */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), (int)n);
    CHECK_EQ(pp.local, 1);
}

static void test_v2_invalid(void)
{
    uint8_t buf[100];
    const uint8_t in4[12] = {0};
    ps_proxyproto_t pp;
    size_t n = v2(buf, 0x11, 0x11, in4, 12); /* version 1 in a v2 header */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), -EPROTO);
    n = v2(buf, 0x22, 0x11, in4, 12); /* command 2 */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), -EPROTO);
    n = v2(buf, 0x21, 0x11, in4, 11); /* too short for IPv4 */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), -EPROTO);
    n = v2(buf, 0x21, 0x21, in4, 12); /* too short for IPv6 */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), -EPROTO);
    n = v2(buf, 0x21, 0x41, in4, 12); /* family 4 */
    CHECK_EQ(parse_growing((char *)buf, n, &pp), -EPROTO);
    /* A length that announces more than arrived: wait. */
    n = v2(buf, 0x21, 0x11, in4, 12);
    buf[15] = 40;
    CHECK_EQ(ps_proxyproto_parse((char *)buf, n, &pp), 0);
    /* A signature with a byte wrong is not PROXY at all. */
    n = v2(buf, 0x21, 0x11, in4, 12);
    buf[11] = 'X';
    CHECK_EQ(ps_proxyproto_parse((char *)buf, n, &pp), -EPROTO);
}

static void test_detect(void)
{
    CHECK_EQ(ps_proxyproto_detect("", 0), 0);
    CHECK_EQ(ps_proxyproto_detect("PRO", 3), 0);
    CHECK_EQ(ps_proxyproto_detect("PROPFIND / HTTP/1.1", 19), -1);
    CHECK_EQ(ps_proxyproto_detect("PROXY ", 6), 1);
    CHECK_EQ(ps_proxyproto_detect("PROXY", 5), 0);
    CHECK_EQ(ps_proxyproto_detect("GET /", 5), -1);
    CHECK_EQ(ps_proxyproto_detect("\r\n\r\n", 4), 0);
    CHECK_EQ(ps_proxyproto_detect("\r\n\r\n\0\r\nQUIT\n", 12), 1);
    CHECK_EQ(ps_proxyproto_detect("\r\nGET", 5), -1);
}

int main(void)
{
    test_v1_tcp4_and_tcp6();
    test_v1_invalid();
    test_v2_inet_inet6_unix();
    test_v2_local_and_unspec();
    test_v2_invalid();
    test_detect();
    return check_finish("test_proxyproto");
}
