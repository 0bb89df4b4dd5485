/* Random bytes for request IDs: fast, never blocking, unpredictable.
 *
 * A ChaCha20 keystream (RFC 8439's block function) under a 256-bit key from
 * getrandom(), kept per thread. A process forked from one that already drew
 * bytes (a worker forked by the master, a gunicorn worker) takes a new key
 * before its first draw, so two workers never hand out the same IDs.
 */
#ifndef PS_RANDOM_H
#define PS_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Fills out with n random bytes. Returns 0, or -errno when the kernel gave
 * no seed (getrandom failing: a kernel older than 3.17); out is then
 * untouched. */
int ps_random_fill(void *out, size_t n);

/* The ChaCha20 block function (RFC 8439 section 2.3): 64 bytes of keystream
 * for key, counter and nonce. Exposed for its test vectors. */
void ps_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                       uint8_t out[64]);

#endif
