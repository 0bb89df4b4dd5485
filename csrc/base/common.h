/* Small helpers shared by every file of the core. */
#ifndef PS_COMMON_H
#define PS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define ps_likely(x) __builtin_expect(!!(x), 1)
#define ps_unlikely(x) __builtin_expect(!!(x), 0)

#define ps_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#define PS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PS_MAX(a, b) ((a) > (b) ? (a) : (b))

#define PS_UNUSED(x) ((void)(x))

/* The value of a base64 digit (RFC 4648's standard alphabet), or -1. */
static inline int ps_base64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* A decimal port: 1 to 5 digits, at most 65535. Returns it, or -1. */
static inline int ps_parse_port(const char *s, size_t n)
{
    if (n == 0 || n > 5)
        return -1;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    return v <= 65535 ? (int)v : -1;
}

/* Invariants the code relies on (state transitions, buffer bounds).
 * Compiled in when PS_DEBUG_ASSERTS is defined, as make test-asan and
 * scripts/test-c.sh do: a broken one prints where and aborts. Compiled
 * out otherwise, without evaluating the condition. */
#ifdef PS_DEBUG_ASSERTS
#include <stdio.h>
#include <stdlib.h>
#define PS_ASSERT(cond)                                                                            \
    (ps_likely(cond) ? (void)0                                                                     \
                     : (fprintf(stderr, "pyserver: %s:%d: %s: assertion failed: %s\n", __FILE__,   \
                                __LINE__, __func__, #cond),                                        \
                        abort()))
#else
#define PS_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif
