/* What the libFuzzer drivers in tests/fuzz share: the INVARIANT check, the
 * digest the drivers that feed an input twice compare, and the token
 * character test of RFC 9110.
 *
 * Every function is static inline, so a driver that uses only some of
 * them builds without unused-function warnings. */
#ifndef PS_FUZZ_H
#define PS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h" /* ps_slice_t */

/* A property the code under test promised: when it does not hold, the
 * driver aborts, so libFuzzer saves the input as a crash. */
#define INVARIANT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* FNV-1a over bytes: a digest of what a run saw, so two runs of one input
 * (whole and in pieces) can be compared. */
static inline void fuzz_mix(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= s[i];
        *h *= 1099511628211ULL;
    }
}

static inline void fuzz_mix_u64(uint64_t *h, uint64_t v)
{
    fuzz_mix(h, &v, sizeof(v));
}

/* The length, then the bytes: "ab","c" and "a","bc" differ. */
static inline void fuzz_mix_slice(uint64_t *h, ps_slice_t s)
{
    fuzz_mix_u64(h, s.len);
    if (s.len)
        fuzz_mix(h, s.base, s.len);
}

/* A tchar of RFC 9110 5.6.2 (the bytes of a token). */
static inline int fuzz_is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

#endif
