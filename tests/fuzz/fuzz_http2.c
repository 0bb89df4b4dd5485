/* libFuzzer driver for csrc/codec/http2.c: the client preface, then the input as
 * frames fed in pieces of arbitrary sizes, to one server session whose
 * application answers, streams, reads bodies slowly, sends trailers and
 * resets streams, chosen by the input. The first bytes steer: piece sizes,
 * the application's behaviour, and whether the session starts through an
 * h2c upgrade.
 *
 *   scripts/fuzz.sh   (FUZZ_TARGETS=http2 for this driver alone)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/http2.h"
#include "fuzz.h"

static uint8_t behaviour;
static int rounds;

static void on_head(ps_h2_stream_t *st, void *ud)
{
    (void)ud;
    ps_header_t h[] = {{PS_SLICE_LIT("Content-Type"), PS_SLICE_LIT("text/plain")},
                       {PS_SLICE_LIT("Connection"), PS_SLICE_LIT("close")}};
    switch ((behaviour + (unsigned)st->id) % 5) {
    case 0:
        ps_h2_respond(st, 200, h, 2, 1);
        break;
    case 1:
        ps_h2_info(st, 103, h, 1);
        ps_h2_respond(st, 200, h, 2, 0);
        ps_h2_write(st, "hello", 5);
        ps_h2_end(st);
        break;
    case 2:
        ps_h2_respond(st, 200, NULL, 0, 0); /* body follows on later events */
        break;
    case 3:
        ps_h2_abort(st, 2);
        break;
    default:
        break; /* answers once the body has been read */
    }
}

static void on_body(ps_h2_stream_t *st, void *ud)
{
    (void)ud;
    size_t n = ps_buf_size(&st->body);
    ps_h2_body_consume(st, (behaviour & 1) ? n : n / 2);
    if (st->req.message_complete && !st->response_started) {
        ps_h2_respond(st, 201, NULL, 0, 0);
        ps_h2_write(st, "done", 4);
        ps_header_t t = {PS_SLICE_LIT("x-trailer"), PS_SLICE_LIT("1")};
        ps_h2_trailers(st, &t, 1);
    }
}

static void on_writable(ps_h2_stream_t *st, void *ud)
{
    (void)ud;
    if (st->response_started && !st->body_ended && rounds % 3 == 0)
        ps_h2_end(st);
}

static void on_close(ps_h2_stream_t *st, void *ud, int why)
{
    (void)st, (void)ud, (void)why;
}

static void on_rejected(ps_h2_stream_t *st, void *ud, int status)
{
    (void)ud, (void)status;
    (void)st->req.target.len;
}

static const ps_h2_callbacks_t cb = {on_head, on_body, on_writable, on_close, on_rejected};

/* Keeps streams that wait for on_writable moving: more bytes each round. */
static void on_round(ps_h2_session_t *s)
{
    (void)s;
    rounds++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    ps_h2_limits_t limits;
    ps_h2_limits_default(&limits);
    limits.stream_window = 1024 + (data[0] & 0x0f) * 4096u;
    limits.max_output = 4096;
    limits.max_control = 20;
    limits.max_resets = 20;
    behaviour = data[1];
    uint8_t step = (uint8_t)(data[2] | 1);
    data += 3;
    size -= 3;
    rounds = 0;
    ps_h2_session_t *s = ps_h2_session_new(&limits, &cb, NULL);
    if (!s)
        return 0;
    ps_buf_t out = {0};
    double now = 100.0;
    if (behaviour & 0x80) {
        ps_header_t h[] = {{PS_SLICE_LIT("Host"), PS_SLICE_LIT("fuzz")}};
        ps_request_t req = {0};
        req.method = PS_SLICE_LIT("GET");
        req.target = PS_SLICE_LIT("/");
        req.headers = h;
        req.nheaders = 1;
        req.content_length = -1;
        ps_h2_upgrade(s, PS_SLICE_LIT("AAMAAABkAAQAAP__"), &req);
    }
    int rc = ps_h2_feed(s, ps_h2_preface.base, ps_h2_preface.len, now);
    size_t off = 0;
    while (rc == 0 && off < size) {
        size_t n = 1 + (size_t)(step * (off + 7) % 97);
        if (n > size - off)
            n = size - off;
        rc = ps_h2_feed(s, (const char *)data + off, n, now);
        off += n;
        now += (behaviour & 0x40) ? 0.3 : 0.001;
        ps_h2_dispatch(s);
        ps_h2_flush(s, &out, now);
        ps_h2_dispatch(s);
        on_round(s);
        ps_buf_reset(&out); /* written to the client */
        if (off > size / 2 && (behaviour & 0x20))
            ps_h2_shutdown(s);
    }
    ps_h2_flush(s, &out, now);
    ps_h2_dispatch(s);
    (void)ps_h2_may_close(s);
    (void)ps_h2_stalled_since(s);
    ps_buf_free(&out);
    ps_h2_session_free(s);
    return 0;
}
