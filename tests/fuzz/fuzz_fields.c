/* libFuzzer driver for the request fields the core reads itself:
 * Accept-Encoding (csrc/codec/encoding.c), traceparent and X-Request-ID
 * (csrc/codec/trace.c). Build and run with `make fuzz` (FUZZ_TARGETS=fields).
 *
 * The input is one field value. Checked:
 *   - the coding chosen is one the server offered, identity, or none, and
 *     none only when the value excludes identity;
 *   - the value split at any comma and given as two field lines chooses the
 *     same as the whole value (RFC 9110 5.3: a list field's lines combine);
 *   - a traceparent accepted is 55 characters of its grammar (more only
 *     after a '-' for a later version), and its fields are views into it;
 *   - a request ID accepted is 1-200 visible ASCII characters;
 *   - a Content-Type --compress takes (csrc/serve/encode.c) is one its
 *     patterns name (text/..., *+json, application/json) and never
 *     text/event-stream.
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "codec/encoding.h"
#include "fuzz.h"
#include "codec/trace.h"
#include "serve/encode.h"

static const unsigned offers[] = {
    0,
    PS_CODING_BIT(PS_CODING_GZIP),
    PS_CODING_BIT(PS_CODING_BR) | PS_CODING_BIT(PS_CODING_ZSTD) | PS_CODING_BIT(PS_CODING_GZIP),
};

static ps_coding_t choose(const char *p, size_t n, size_t split, unsigned offered)
{
    ps_accept_t a;
    ps_accept_init(&a);
    if (split < n) {
        ps_accept_parse(&a, (ps_slice_t){p, split});
        ps_accept_parse(&a, (ps_slice_t){p + split + 1, n - split - 1});
    } else {
        ps_accept_parse(&a, (ps_slice_t){p, n});
    }
    return ps_accept_choose(&a, offered);
}

static void check_accept(const char *p, size_t n)
{
    for (size_t k = 0; k < sizeof(offers) / sizeof(offers[0]); k++) {
        ps_coding_t c = choose(p, n, n, offers[k]);
        INVARIANT(
            c == PS_CODING_NONE || c == PS_CODING_IDENTITY ||
            (c > PS_CODING_IDENTITY && c < PS_CODING_COUNT && (offers[k] & PS_CODING_BIT(c))));
        if (c == PS_CODING_NONE)
            INVARIANT(memmem(p, n, "q=0", 3) != NULL || memmem(p, n, "Q=0", 3) != NULL);
        const char *comma = memchr(p, ',', n);
        if (comma != NULL)
            INVARIANT(choose(p, n, (size_t)(comma - p), offers[k]) == c);
    }
}

static int lower_hex(ps_slice_t s)
{
    for (size_t i = 0; i < s.len; i++)
        if (!((s.base[i] >= '0' && s.base[i] <= '9') || (s.base[i] >= 'a' && s.base[i] <= 'f')))
            return 0;
    return 1;
}

static void check_traceparent(const char *p, size_t n)
{
    ps_traceparent_t t;
    if (ps_traceparent_parse((ps_slice_t){p, n}, &t) < 0) {
        INVARIANT(t.trace_id.base == NULL);
        return;
    }
    INVARIANT(n >= 55 && (n == 55 || p[55] == '-'));
    INVARIANT(t.version.base == p && t.trace_id.base == p + 3 && t.parent_id.base == p + 36);
    INVARIANT(t.trace_id.len == 32 && t.parent_id.len == 16);
    INVARIANT(lower_hex(t.version) && lower_hex(t.trace_id) && lower_hex(t.parent_id));
    INVARIANT(memcmp(p, "ff", 2) != 0 && (n == 55 || memcmp(p, "00", 2) != 0));
}

static void check_request_id(const char *p, size_t n)
{
    if (!ps_request_id_valid((ps_slice_t){p, n}))
        return;
    INVARIANT(n >= 1 && n <= PS_REQUEST_ID_MAX);
    for (size_t i = 0; i < n; i++)
        INVARIANT(p[i] > 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\');
}

static int prefix_ieq(const char *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && strncasecmp(p, lit, l) == 0;
}

static void check_content_type(const char *p, size_t n)
{
    static ps_encode_cfg_t cfg = {.ntypes = 3, .types = {"text/*", "*+json", "application/json"}};
    if (!ps_encode_type_ok(&cfg, (ps_slice_t){p, n}))
        return;
    size_t t = 0; /* the media type: up to a parameter or blank */
    while (t < n && p[t] != ';' && p[t] != ' ' && p[t] != '\t')
        t++;
    INVARIANT(!(t == 17 && prefix_ieq(p, t, "text/event-stream")));
    INVARIANT((t > 5 && prefix_ieq(p, t, "text/")) ||
              (t > 5 && strncasecmp(p + t - 5, "+json", 5) == 0) ||
              (t == 16 && prefix_ieq(p, t, "application/json")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    check_accept(p, size);
    check_traceparent(p, size);
    check_request_id(p, size);
    check_content_type(p, size);
    return 0;
}
