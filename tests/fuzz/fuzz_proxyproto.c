/* libFuzzer driver for csrc/codec/proxyproto.c: PROXY protocol v1 and v2 headers.
 * Build and run with `make fuzz` (scripts/fuzz.sh; FUZZ_TARGETS=proxyproto).
 *
 * The input is what a peer sends first. Checked:
 *   - a header's length is never more than the bytes given, nor more than
 *     the version's maximum; a header starts with a signature (detect 1);
 *   - "more bytes needed" (0) only while fewer than the maximum arrived, and
 *     every prefix of a complete header asks for more or gives the same;
 *   - a parsed header's addresses are AF_INET, AF_INET6 or AF_UNIX with
 *     their own lengths, or it is local;
 *   - parsing a header again, with more bytes after it, gives the same.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "base/common.h"
#include "codec/proxyproto.h"
#include "fuzz.h"

static void check_address(const struct sockaddr_storage *ss, socklen_t len)
{
    if (ss->ss_family == AF_INET)
        INVARIANT(len == sizeof(struct sockaddr_in));
    else if (ss->ss_family == AF_INET6)
        INVARIANT(len == sizeof(struct sockaddr_in6));
    else if (ss->ss_family == AF_UNIX)
        INVARIANT(len >= offsetof(struct sockaddr_un, sun_path) &&
                  len <= sizeof(struct sockaddr_un));
    else
        INVARIANT(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    ps_proxyproto_t pp, again;
    int rc = ps_proxyproto_parse(buf, size, &pp);
    int kind = ps_proxyproto_detect(buf, size);
    INVARIANT(rc >= 0 || rc == -EPROTO);
    if (rc == 0) {
        INVARIANT(kind >= 0);
        INVARIANT(size < PS_PROXYPROTO_V2_MAX);
        if (kind > 0 && buf[0] == 'P')
            INVARIANT(size < PS_PROXYPROTO_V1_MAX);
        return 0;
    }
    if (rc < 0)
        return 0;
    INVARIANT(kind == 1);
    INVARIANT((size_t)rc <= size);
    INVARIANT(pp.version == 1 || pp.version == 2);
    INVARIANT((size_t)rc <= (pp.version == 1 ? PS_PROXYPROTO_V1_MAX : PS_PROXYPROTO_V2_MAX));
    if (!pp.local) {
        check_address(&pp.src, pp.src_len);
        check_address(&pp.dst, pp.dst_len);
        INVARIANT(pp.src.ss_family == pp.dst.ss_family);
    }
    /* Exactly the header: the same result; any shorter prefix asks for more or fails. */
    INVARIANT(ps_proxyproto_parse(buf, (size_t)rc, &again) == rc);
    INVARIANT(again.version == pp.version && again.local == pp.local);
    if (!pp.local)
        INVARIANT(again.src_len == pp.src_len && memcmp(&again.src, &pp.src, pp.src_len) == 0);
    for (size_t cut = 0; cut < (size_t)rc; cut += 1 + (size_t)rc / 16) {
        int part = ps_proxyproto_parse(buf, cut, &again);
        INVARIANT(part == 0);
    }
    return 0;
}
