/* Unit tests of csrc/base/random.c: the ChaCha20 block against RFC 8439's
 * test vector, and the generator's bytes across draws, threads and forks. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/random.h"
#include "check.h"

static void test_chacha20_block_vector(void)
{
    /* RFC 8439 section 2.3.2: key 00..1f, nonce 00:00:00:09:00:00:00:4a:00:00:00:00,
     * block counter 1. */
    uint32_t key[8], nonce[3] = {0x09000000, 0x4a000000, 0};
    for (int i = 0; i < 8; i++)
        key[i] = (uint32_t)(4 * i) | (uint32_t)(4 * i + 1) << 8 | (uint32_t)(4 * i + 2) << 16 |
                 (uint32_t)(4 * i + 3) << 24;
    static const uint8_t want[64] = {
        0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15, 0x50, 0x0f, 0xdd, 0x1f, 0xa3,
        0x20, 0x71, 0xc4, 0xc7, 0xd1, 0xf4, 0xc7, 0x33, 0xc0, 0x68, 0x03, 0x04, 0x22,
        0xaa, 0x9a, 0xc3, 0xd4, 0x6c, 0x4e, 0xd2, 0x82, 0x64, 0x46, 0x07, 0x9f, 0xaa,
        0x09, 0x14, 0xc2, 0xd7, 0x05, 0xd9, 0x8b, 0x02, 0xa2, 0xb5, 0x12, 0x9c, 0xd1,
        0xde, 0x16, 0x4e, 0xb9, 0xcb, 0xd0, 0x83, 0xe8, 0xa2, 0x50, 0x3c, 0x4e,
    };
    uint8_t out[64];
    ps_chacha20_block(key, 1, nonce, out);
    CHECK(memcmp(out, want, 64) == 0);
}

static void test_draws_differ(void)
{
    uint8_t a[16], b[16], big[1000];
    CHECK_EQ(ps_random_fill(a, sizeof(a)), 0);
    CHECK_EQ(ps_random_fill(b, sizeof(b)), 0);
    CHECK(memcmp(a, b, 16) != 0);
    /* Across a refill (more than the 256-byte buffer), every byte value shows up
     * somewhere in a few thousand bytes. */
    int seen[256] = {0};
    for (int round = 0; round < 8; round++) {
        CHECK_EQ(ps_random_fill(big, sizeof(big)), 0);
        for (size_t i = 0; i < sizeof(big); i++)
            seen[big[i]] = 1;
    }
    int all = 1;
    for (int i = 0; i < 256; i++)
        all &= seen[i];
    CHECK(all);
}

/* A child forked after the parent drew bytes draws different ones than the
 * parent does next: it took a key of its own. */
static void test_fork_takes_a_new_key(void)
{
    uint8_t mine[16], theirs[16];
    int fds[2];
    CHECK_EQ(ps_random_fill(mine, 1), 0); /* the parent's key is in use */
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint8_t v[16];
        ssize_t n = ps_random_fill(v, sizeof(v)) == 0 ? write(fds[1], v, sizeof(v)) : -1;
        _exit(n == (ssize_t)sizeof(v) ? 0 : 1);
    }
    CHECK(pid > 0);
    CHECK_EQ(ps_random_fill(mine, sizeof(mine)), 0);
    CHECK_EQ(read(fds[0], theirs, sizeof(theirs)), (long long)sizeof(theirs));
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(memcmp(mine, theirs, 16) != 0);
    close(fds[0]);
    close(fds[1]);
}

static void *draw(void *out)
{
    return ps_random_fill(out, 16) == 0 ? out : NULL;
}

static void test_threads_draw_apart(void)
{
    uint8_t mine[16], theirs[16];
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, draw, theirs), 0);
    void *res = NULL;
    pthread_join(t, &res);
    CHECK(res == theirs);
    CHECK_EQ(ps_random_fill(mine, sizeof(mine)), 0);
    CHECK(memcmp(mine, theirs, 16) != 0);
}

int main(void)
{
    test_chacha20_block_vector();
    test_draws_differ();
    test_fork_takes_a_new_key();
    test_threads_draw_apart();
    return check_finish("test_random");
}
