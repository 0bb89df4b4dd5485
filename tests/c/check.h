/* Minimal checks for the C unit tests of the core.
 *
 * Each CHECK counts one pass or one failure; a failure prints file:line and
 * what was compared, and the test goes on. A test binary ends with
 *
 *     return check_finish("test_http1");
 *
 * which prints "test_http1: 57 passed, 0 failed" and returns non-zero when
 * anything failed.
 *
 * CHECK_XFAIL marks a check that fails because of a known bug in csrc/: it
 * prints an XFAIL line and counts as passed while the bug is there, and
 * fails (XPASS) once the bug is fixed, so the marker cannot outlive it.
 */
#ifndef PS_TEST_CHECK_H
#define PS_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static unsigned check_passed;
static unsigned check_failed;

static inline int check_at(int ok, const char *file, int line, const char *what)
{
    if (ok) {
        check_passed++;
        return 1;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
    return 0;
}

static inline int check_eq_at(long long a, long long b, const char *file, int line,
                              const char *what)
{
    if (a == b) {
        check_passed++;
        return 1;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s (%lld != %lld)\n", file, line, what, a, b);
    return 0;
}

/* Prints bytes with CR, LF, NUL and other controls escaped. */
static inline void check_print_bytes(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\r')
            fputs("\\r", stderr);
        else if (c == '\n')
            fputs("\\n", stderr);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
}

static inline int check_mem_eq_at(const char *a, size_t alen, const char *b, size_t blen,
                                  const char *file, int line, const char *what)
{
    if (alen == blen && (alen == 0 || memcmp(a, b, alen) == 0)) {
        check_passed++;
        return 1;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: FAILED: %s\n    got:      \"", file, line, what);
    check_print_bytes(a, alen);
    fprintf(stderr, "\"\n    expected: \"");
    check_print_bytes(b, blen);
    fprintf(stderr, "\"\n");
    return 0;
}

static inline int check_xfail_at(int ok, const char *file, int line, const char *what,
                                 const char *bug)
{
    if (!ok) {
        check_passed++;
        fprintf(stderr, "%s:%d: XFAIL (known csrc bug: %s): %s\n", file, line, bug, what);
        return 1;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: XPASS: %s now holds (%s fixed?): turn the CHECK_XFAIL into CHECK\n",
            file, line, what, bug);
    return 0;
}

static inline int check_finish(const char *name)
{
    printf("%s: %u passed, %u failed\n", name, check_passed, check_failed);
    fflush(stdout);
    return check_failed != 0;
}

#define CHECK(cond) check_at(!!(cond), __FILE__, __LINE__, #cond)
#define CHECK_EQ(a, b) check_eq_at((long long)(a), (long long)(b), __FILE__, __LINE__, #a " == " #b)
/* Bytes (p, n) equal a string literal. */
#define CHECK_MEM_EQ(p, n, lit)                                                                    \
    check_mem_eq_at((const char *)(p), (n), (lit), sizeof(lit) - 1, __FILE__, __LINE__,            \
                    #p " == " #lit)
/* A ps_slice_t equals a string literal. */
#define CHECK_SLICE_EQ(s, lit) CHECK_MEM_EQ((s).base, (s).len, lit)
#define CHECK_XFAIL(cond, bug) check_xfail_at(!!(cond), __FILE__, __LINE__, #cond, (bug))

#endif
