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

#endif
