/* libFuzzer driver for csrc/codec/uwsgi.c: the uwsgi packet parser. Build and
 * run with `make fuzz` (scripts/fuzz.sh; FUZZ_TARGETS=uwsgi for this one).
 *
 * Byte 0 says how the rest arrives: bits 0-5 the piece size (0: all at
 * once, else 1..63 bytes per read), bit 6 tight or roomy limits, bit 7 a
 * tiny body high-water mark. The bytes are fed the way a connection feeds
 * them (unconsumed bytes again with the next piece, the body taken at every
 * pause), and:
 *   - an accepted request keeps the parser's promises: the method is a
 *     token and method_id names it, the target is origin-form or "*" with
 *     OPTIONS and has no CTL, SP or DEL, header names are lower-case tokens
 *     and values hold no CTL, content-length matches CONTENT_LENGTH and the
 *     body is exactly that long, no framing header but ours, no keep-alive,
 *     the limits hold, every slice lies inside the parser's own buffers;
 *   - an error has a status from the known set and a reason, and is final;
 *   - feeding in one piece gives the same request, or the same error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "codec/uwsgi.h"
#include "fuzz.h"

static const ps_uwsgi_limits_t tight_limits = {
    .max_packet = 200, .max_vars = 8, .max_var_size = 64, .max_body = 256};
static const ps_uwsgi_limits_t roomy_limits = {
    .max_packet = 0, .max_vars = 0, .max_var_size = 0, .max_body = 1 << 20};

static int inside_buf(ps_slice_t s, const ps_buf_t *b)
{
    return s.len == 0 || (b->data && s.base >= b->data && s.base + s.len <= b->data + b->cap);
}

static int is_static_name(ps_slice_t s)
{
    return (s.len == 12 && memcmp(s.base, "content-type", 12) == 0) ||
           (s.len == 14 && memcmp(s.base, "content-length", 14) == 0);
}

static void check_request(const ps_uwsgi_parser_t *p, uint64_t body_total)
{
    const ps_request_t *r = &p->req;
    const ps_uwsgi_limits_t *lim = p->limits;
    INVARIANT(r->head_complete && r->message_complete);
    INVARIANT(!r->keep_alive && !r->chunked && !r->upgrade && !r->expect_continue);
    INVARIANT(ps_http_is_token(r->method));
    INVARIANT(r->method_id == ps_http1_method_id(r->method));
    INVARIANT(r->method_id != HTTP_CONNECT);
    INVARIANT(r->is_head == (r->method.len == 4 && memcmp(r->method.base, "HEAD", 4) == 0));
    INVARIANT(inside_buf(r->method, &p->packet));
    INVARIANT(inside_buf(r->target, &p->packet) || inside_buf(r->target, &p->arena));
    INVARIANT(r->target.len > 0);
    if (r->target.base[0] == '*')
        INVARIANT(r->target.len == 1 && r->method.len == 7 &&
                  memcmp(r->method.base, "OPTIONS", 7) == 0);
    else
        INVARIANT(r->target.base[0] == '/');
    for (size_t i = 0; i < r->target.len; i++) {
        unsigned char c = (unsigned char)r->target.base[i];
        INVARIANT(c > 0x20 && c != 0x7f);
    }
    INVARIANT(p->datasize <= (lim->max_packet ? lim->max_packet : PS_UWSGI_MAX_PACKET));
    INVARIANT(lim->max_vars == 0 || p->nvars <= lim->max_vars);
    INVARIANT(r->nheaders <= p->nvars + 2);
    for (uint32_t i = 0; i < p->nvars; i++) {
        INVARIANT(p->vars[i].name.len > 0);
        INVARIANT(inside_buf(p->vars[i].name, &p->packet));
        INVARIANT(inside_buf(p->vars[i].value, &p->packet));
        INVARIANT(lim->max_var_size == 0 ||
                  p->vars[i].name.len + p->vars[i].value.len <= lim->max_var_size);
    }
    int cl = 0;
    for (uint32_t i = 0; i < r->nheaders; i++) {
        ps_header_t h = r->headers[i];
        INVARIANT(ps_http_valid_field(h.name, h.value));
        INVARIANT(is_static_name(h.name) || inside_buf(h.name, &p->packet));
        INVARIANT(inside_buf(h.value, &p->packet));
        for (size_t k = 0; k < h.name.len; k++) {
            unsigned char c = (unsigned char)h.name.base[k];
            INVARIANT(fuzz_is_tchar(c) && !(c >= 'A' && c <= 'Z') && c != '_');
        }
        INVARIANT(!ps_slice_ieq(h.name, "transfer-encoding", 17));
        INVARIANT(!ps_slice_ieq(h.name, "expect", 6));
        if (ps_slice_ieq(h.name, "content-length", 14)) {
            cl++;
            INVARIANT(h.value.len > 0);
        }
    }
    INVARIANT(cl == (r->content_length >= 0));
    INVARIANT(cl <= 1);
    if (r->content_length >= 0) {
        INVARIANT(lim->max_body == 0 || (uint64_t)r->content_length <= lim->max_body);
        INVARIANT(r->body_received == (uint64_t)r->content_length);
    } else {
        INVARIANT(r->body_received == 0);
    }
    INVARIANT(body_total == r->body_received);
    INVARIANT(p->http_major >= 1 && p->http_major <= 3 && r->http_minor <= 1);
}

static void check_error(ps_uwsgi_parser_t *p)
{
    int s = p->error_status;
    INVARIANT(p->error_reason != NULL);
    INVARIANT(s == 400 || s == 413 || s == 431 || s == 501);
    size_t used;
    INVARIANT(ps_uwsgi_feed(p, "x", 1, &used) == PS_UWSGI_ERROR && p->error_status == s);
}

/* Returns the digest of what the connection saw. */
static uint64_t run_connection(const uint8_t *data, size_t len, size_t piece,
                               const ps_uwsgi_limits_t *lim, size_t body_high)
{
    ps_uwsgi_parser_t p;
    ps_buf_t body = {0};
    uint64_t h = 14695981039346656037ULL, got = 0;
    size_t off = 0, avail = piece == 0 ? len : PS_MIN(piece, len);
    ps_uwsgi_init(&p, lim, &body, body_high);
    for (size_t guard = 0;; guard++) {
        INVARIANT(guard <= 4 * len + 64);
        size_t used = (size_t)-1;
        int rc = ps_uwsgi_feed(&p, (const char *)data + off, avail - off, &used);
        INVARIANT(used <= avail - off);
        off += used;
        if (ps_buf_size(&body)) {
            fuzz_mix(&h, ps_buf_head(&body), ps_buf_size(&body));
            got += ps_buf_size(&body);
            ps_buf_reset(&body);
        }
        if (rc == PS_UWSGI_ERROR) {
            check_error(&p);
            fuzz_mix_u64(&h, 1000 + (uint64_t)p.error_status);
            break;
        }
        if (p.req.message_complete) {
            INVARIANT(rc == PS_UWSGI_PAUSED);
            check_request(&p, got);
            const ps_request_t *r = &p.req;
            fuzz_mix_slice(&h, r->method);
            fuzz_mix_slice(&h, r->target);
            fuzz_mix_u64(&h, r->nheaders);
            for (uint32_t i = 0; i < r->nheaders; i++) {
                fuzz_mix_slice(&h, r->headers[i].name);
                fuzz_mix_slice(&h, r->headers[i].value);
            }
            fuzz_mix_u64(&h, off);
            size_t again = 1;
            INVARIANT(ps_uwsgi_feed(&p, "x", 1, &again) == PS_UWSGI_PAUSED && again == 0);
            break;
        }
        if (rc == PS_UWSGI_PAUSED)
            continue;
        INVARIANT(rc == PS_UWSGI_MORE && off == avail);
        if (avail == len) {
            fuzz_mix_u64(&h, 2);
            break;
        }
        avail = piece == 0 ? len : PS_MIN(avail + piece, len);
    }
    ps_uwsgi_free(&p);
    ps_buf_free(&body);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = data[0] & 63;
    const ps_uwsgi_limits_t *lim = data[0] & 64 ? &tight_limits : &roomy_limits;
    size_t body_high = data[0] & 128 ? 3 : 1 << 20;
    data++;
    size--;
    uint64_t split = run_connection(data, size, piece, lim, body_high);
    uint64_t whole = run_connection(data, size, 0, lim, 1 << 20);
    INVARIANT(split == whole);
    return 0;
}
