/* Unit tests of csrc/base/buf.c: growable buffers and slices. */
#include <errno.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "check.h"
#include "base/common.h"

static void test_empty_buffer_has_no_storage(void)
{
    ps_buf_t b = {0};
    CHECK_EQ(ps_buf_size(&b), 0);
    CHECK_EQ(ps_buf_reserve(&b, 0), 0);
    CHECK(b.data == NULL);
    CHECK_EQ(ps_buf_append(&b, NULL, 0), 0);
    CHECK_EQ(ps_buf_size(&b), 0);
    ps_buf_free(&b);
}

static void test_reserve_allocates_at_least_what_is_asked(void)
{
    ps_buf_t b = {0};
    CHECK_EQ(ps_buf_reserve(&b, 1), 0);
    CHECK(b.data != NULL);
    CHECK(b.cap >= 1);
    CHECK_EQ(b.len, 0);
    CHECK_EQ(ps_buf_reserve(&b, 1000), 0);
    CHECK(b.cap - b.len >= 1000);
    /* The reserved room is writable (ASan would say otherwise). */
    memset(b.data + b.len, 'x', 1000);
    ps_buf_free(&b);
}

static void test_append_then_consume_returns_bytes_in_order(void)
{
    ps_buf_t b = {0};
    CHECK_EQ(ps_buf_append(&b, "hello ", 6), 0);
    CHECK_EQ(ps_buf_append_slice(&b, PS_SLICE_LIT("world")), 0);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "hello world");
    ps_buf_consume(&b, 6);
    CHECK_EQ(b.off, 6);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "world");
    CHECK_EQ(ps_buf_append(&b, "!", 1), 0);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "world!");
    ps_buf_free(&b);
}

static void test_consuming_everything_rewinds_to_the_start(void)
{
    ps_buf_t b = {0};
    ps_buf_append(&b, "abcdef", 6);
    ps_buf_consume(&b, 2);
    ps_buf_consume(&b, 4);
    CHECK_EQ(b.off, 0);
    CHECK_EQ(b.len, 0);
    CHECK_EQ(ps_buf_size(&b), 0);
    /* More than what is there also empties it. */
    ps_buf_append(&b, "abc", 3);
    ps_buf_consume(&b, 10);
    CHECK_EQ(b.off, 0);
    CHECK_EQ(b.len, 0);
    ps_buf_free(&b);
}

static void test_reserve_reclaims_consumed_front_before_growing(void)
{
    ps_buf_t b = {0};
    char block[200];
    memset(block, 'a', sizeof(block));
    block[150] = 'Z';
    ps_buf_append(&b, block, sizeof(block));
    size_t cap = b.cap;
    char *data = b.data;
    ps_buf_consume(&b, 150);
    CHECK_EQ(ps_buf_reserve(&b, cap - 60), 0);
    CHECK_EQ(b.cap, cap);
    CHECK(b.data == data);
    CHECK_EQ(b.off, 0);
    CHECK_EQ(b.len, 50);
    CHECK_EQ(b.data[0], 'Z');
    ps_buf_free(&b);
}

static void test_growth_keeps_contents_across_many_appends(void)
{
    ps_buf_t b = {0};
    int ok = 1;
    for (int i = 0; i < 100000; i++) {
        char c = (char)('a' + i % 26);
        if (ps_buf_append(&b, &c, 1) < 0)
            ok = 0;
    }
    CHECK(ok);
    CHECK_EQ(ps_buf_size(&b), 100000);
    CHECK(b.cap >= 100000);
    int same = 1;
    for (int i = 0; i < 100000; i++)
        if (b.data[i] != (char)('a' + i % 26))
            same = 0;
    CHECK(same);
    ps_buf_free(&b);
}

static void test_reset_empties_but_keeps_storage(void)
{
    ps_buf_t b = {0};
    ps_buf_append(&b, "abc", 3);
    ps_buf_consume(&b, 1);
    size_t cap = b.cap;
    ps_buf_reset(&b);
    CHECK_EQ(ps_buf_size(&b), 0);
    CHECK_EQ(b.off, 0);
    CHECK_EQ(b.cap, cap);
    CHECK(b.data != NULL);
    ps_buf_free(&b);
}

static void test_shrink_releases_only_large_empty_buffers(void)
{
    ps_buf_t b = {0};
    ps_buf_reserve(&b, 10000);
    ps_buf_shrink(&b, 64 * 1024); /* not above keep: kept */
    CHECK(b.data != NULL);
    ps_buf_reserve(&b, 100000);
    ps_buf_append(&b, "x", 1);
    ps_buf_shrink(&b, 1024); /* not empty: kept */
    CHECK(b.data != NULL);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "x");
    ps_buf_consume(&b, 1);
    ps_buf_shrink(&b, 1024); /* empty and above keep: released */
    CHECK(b.data == NULL);
    CHECK_EQ(b.cap, 0);
    CHECK_EQ(b.len, 0);
    CHECK_EQ(ps_buf_append(&b, "again", 5), 0);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "again");
    ps_buf_free(&b);
}

static void test_free_is_idempotent(void)
{
    ps_buf_t b = {0};
    ps_buf_append(&b, "abc", 3);
    ps_buf_free(&b);
    CHECK(b.data == NULL);
    CHECK_EQ(b.cap + b.len + b.off, 0);
    ps_buf_free(&b);
    CHECK(b.data == NULL);
}

static void test_impossible_reserve_fails_without_damage(void)
{
    ps_buf_t b = {0};
    ps_buf_append(&b, "keep", 4);
    CHECK_EQ(ps_buf_reserve(&b, SIZE_MAX / 2 + 2), -ENOMEM);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "keep");
    /* len + extra wraps around: the reserve must still fail, not claim
     * room it does not have. */
    int rc = ps_buf_reserve(&b, SIZE_MAX - 1);
    CHECK(rc == -ENOMEM);
    CHECK_MEM_EQ(ps_buf_head(&b), ps_buf_size(&b), "keep");
    ps_buf_free(&b);
}

static void test_slice_ieq_ignores_case_only(void)
{
    ps_slice_t s = PS_SLICE_LIT("Content-Length");
    CHECK(PS_SLICE_IEQ(s, "content-length"));
    CHECK(PS_SLICE_IEQ(s, "CONTENT-LENGTH"));
    CHECK(!PS_SLICE_IEQ(s, "content-lengt"));
    CHECK(!PS_SLICE_IEQ(s, "content-lengths"));
    CHECK(!PS_SLICE_IEQ(s, "content_length"));
    /* A slice is not NUL-terminated: only its own bytes count. */
    ps_slice_t prefix = {"hostile", 4};
    CHECK(PS_SLICE_IEQ(prefix, "HOST"));
    CHECK(!PS_SLICE_IEQ(prefix, "hostile"));
    ps_slice_t empty = {"", 0};
    CHECK(PS_SLICE_IEQ(empty, ""));
    CHECK(!PS_SLICE_IEQ(empty, "a"));
}

/* The C tests build with PS_DEBUG_ASSERTS: a broken invariant aborts. */
static void test_broken_invariant_aborts(void)
{
#ifdef PS_DEBUG_ASSERTS
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        size_t len = 3, cap = 2;
        PS_ASSERT(len <= cap);
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#else
    CHECK(!"the C tests must be built with -DPS_DEBUG_ASSERTS");
#endif
}

int main(void)
{
    test_broken_invariant_aborts();
    test_empty_buffer_has_no_storage();
    test_reserve_allocates_at_least_what_is_asked();
    test_append_then_consume_returns_bytes_in_order();
    test_consuming_everything_rewinds_to_the_start();
    test_reserve_reclaims_consumed_front_before_growing();
    test_growth_keeps_contents_across_many_appends();
    test_reset_empties_but_keeps_storage();
    test_shrink_releases_only_large_empty_buffers();
    test_free_is_idempotent();
    test_impossible_reserve_fails_without_damage();
    test_slice_ieq_ignores_case_only();
    return check_finish("test_buf");
}
