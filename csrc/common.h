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
