/* Random bytes for request IDs (random.h).
 *
 * Why not getrandom() per ID: a system call per request. Why not OpenSSL's
 * RAND_bytes: base knows no OpenSSL, and its DRBG takes a lock and runs
 * AES-CTR plus bookkeeping for every call. ChaCha20 under a key from
 * getrandom() is a CSPRNG (the kernel's own is built the same way) and
 * costs under 20 instructions a byte, made 256 bytes at a time: an ID
 * is a copy out of the buffer most of the time. The key changes every
 * REKEY_BYTES so that a leaked state does not reveal much of the past. */
#include "base/random.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#define BLOCKS 4
#define REKEY_BYTES (1u << 20)

typedef struct {
    uint32_t key[8];
    uint32_t nonce[3];
    uint32_t counter;
    uint32_t drawn; /* bytes since the key was taken */
    unsigned epoch; /* the fork epoch the key belongs to */
    size_t left;    /* unread bytes at the end of buf */
    uint8_t buf[64 * BLOCKS];
} rng_t;

/* Bumped in every forked child: a thread's state from before the fork
 * (copied into the child) is then stale. Starts at 1 so a zeroed state is
 * never current. */
static unsigned fork_epoch = 1;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static __thread rng_t rng;

static void on_fork_child(void)
{
    fork_epoch++;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

static uint32_t rotl(uint32_t v, int n)
{
    return v << n | v >> (32 - n);
}

#define QUARTER(a, b, c, d)                                                                        \
    do {                                                                                           \
        a += b, d ^= a, d = rotl(d, 16);                                                           \
        c += d, b ^= c, b = rotl(b, 12);                                                           \
        a += b, d ^= a, d = rotl(d, 8);                                                            \
        c += d, b ^= c, b = rotl(b, 7);                                                            \
    } while (0)

void ps_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                       uint8_t out[64])
{
    uint32_t in[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};
    memcpy(in + 4, key, 32);
    in[12] = counter;
    memcpy(in + 13, nonce, 12);
    uint32_t x[16];
    memcpy(x, in, sizeof(x));
    for (int i = 0; i < 10; i++) {
        QUARTER(x[0], x[4], x[8], x[12]);
        QUARTER(x[1], x[5], x[9], x[13]);
        QUARTER(x[2], x[6], x[10], x[14]);
        QUARTER(x[3], x[7], x[11], x[15]);
        QUARTER(x[0], x[5], x[10], x[15]);
        QUARTER(x[1], x[6], x[11], x[12]);
        QUARTER(x[2], x[7], x[8], x[13]);
        QUARTER(x[3], x[4], x[9], x[14]);
    }
    for (int i = 0; i < 16; i++) {
        uint32_t v = x[i] + in[i];
        out[4 * i] = (uint8_t)v;
        out[4 * i + 1] = (uint8_t)(v >> 8);
        out[4 * i + 2] = (uint8_t)(v >> 16);
        out[4 * i + 3] = (uint8_t)(v >> 24);
    }
}

/* A new key and nonce from the kernel. Returns 0 or -errno. */
static int rekey(rng_t *r)
{
    uint32_t seed[11];
    size_t got = 0;
    while (got < sizeof(seed)) {
        ssize_t n = getrandom((char *)seed + got, sizeof(seed) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        got += (size_t)n;
    }
    memcpy(r->key, seed, 32);
    memcpy(r->nonce, seed + 8, 12);
    memset(seed, 0, sizeof(seed));
    r->counter = 0;
    r->drawn = 0;
    r->left = 0;
    r->epoch = __atomic_load_n(&fork_epoch, __ATOMIC_RELAXED);
    return 0;
}

static void refill(rng_t *r)
{
    for (int i = 0; i < BLOCKS; i++)
        ps_chacha20_block(r->key, r->counter++, r->nonce, r->buf + 64 * i);
    r->left = sizeof(r->buf);
}

int ps_random_fill(void *out, size_t n)
{
    rng_t *r = &rng;
    uint8_t *dst = out;
    if (r->epoch != __atomic_load_n(&fork_epoch, __ATOMIC_RELAXED) || r->drawn >= REKEY_BYTES) {
        pthread_once(&atfork_once, register_atfork);
        int rc = rekey(r);
        if (rc < 0)
            return rc;
    }
    while (n > 0) {
        if (r->left == 0)
            refill(r);
        size_t k = n < r->left ? n : r->left;
        uint8_t *src = r->buf + sizeof(r->buf) - r->left;
        memcpy(dst, src, k);
        memset(src, 0, k); /* what was handed out is not kept */
        r->left -= k;
        r->drawn += (uint32_t)k;
        dst += k;
        n -= k;
    }
    return 0;
}
