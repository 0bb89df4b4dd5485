/* HTTP/2 server sessions over nghttp2 (see http2.h).
 *
 * nghttp2 does the framing, HPACK, flow-control accounting and most of the
 * RFC 9113 message checks (pseudo-headers, connection-specific fields,
 * upper-case names, TE, content-length against DATA). This file adds what
 * a server needs on top: request heads in ps_request_t, per-stream body
 * buffers whose window reopens only as the consumer reads, response data
 * providers that defer and resume, and the flood bounds nghttp2 1.52 does
 * not have (or has only in some distribution builds).
 */
#include "codec/http2.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "base/common.h"

/* Present in Debian's 1.52 security updates and in nghttp2 >= 1.57/1.61;
 * used when the library has them, our own bounds apply either way. */
NGHTTP2_EXTERN void nghttp2_option_set_max_continuations(nghttp2_option *option, size_t val);
NGHTTP2_EXTERN void nghttp2_option_set_stream_reset_rate_limit(nghttp2_option *option,
                                                               uint64_t burst, uint64_t rate);
#pragma weak nghttp2_option_set_max_continuations
#pragma weak nghttp2_option_set_stream_reset_rate_limit
/* NGHTTP2_ERR_TOO_MANY_CONTINUATIONS, which older headers lack. */
#define ERR_TOO_MANY_CONTINUATIONS (-905)

enum {
    PS_H2_EV_HEAD = 1,
    PS_H2_EV_BODY = 2,
    PS_H2_EV_WRITABLE = 4,
    PS_H2_EV_CLOSE = 8,
    PS_H2_EV_REJECTED = 16,
};

enum { SHUTDOWN_NONE, SHUTDOWN_NOTICE, SHUTDOWN_FINAL };

/* Finished streams kept per connection for the next ones (h2load-style
 * clients keep 32 or more in flight). */
#define KEEP_FREE_STREAMS 32
#define STREAM_KEEP_BYTES 4096
#define CLOSED_REMEMBERED 16
/* SETTINGS_MAX_CONCURRENT_STREAMS goes out under this id, unknown to
 * nghttp2 (which ignores it when the ACK comes), and is renamed as the
 * frame leaves (settings_unmask): nghttp2 enforces an acknowledged bound
 * with a connection error, where RFC 9113 5.1.2 asks for a stream error
 * (REFUSED_STREAM), so the bound is ours alone (on_begin_headers). */
#define SETTINGS_PLACEHOLDER 0xf003

/* What stale_stream says of a frame's stream id: how a stream in the
 * ring of recently closed ones ended, or what else it is. */
enum {
    STALE_NONE = 0, /* a stream nghttp2 knows, or a new id */
    CLOSED_DONE,    /* END_STREAM both ways: connection error STREAM_CLOSED */
    CLOSED_BY_PEER, /* the client reset it: RST_STREAM STREAM_CLOSED */
    CLOSED_BY_US,   /* we reset it: its frames may be in flight, ignored */
    STALE_UNKNOWN,  /* at or below the highest id opened, not remembered */
};

struct ps_h2_session {
    nghttp2_session *ng;
    const ps_h2_limits_t *limits;
    const ps_h2_callbacks_t *cb;
    void *ud;
    ps_h2_stream_t *ev_head, *ev_tail;
    ps_h2_stream_t *live;
    ps_h2_stream_t *free_list;
    /* The last stream stream_of found (frames of one stream come in a row). */
    int32_t cached_id;
    ps_h2_stream_t *cached;
    size_t nfree;
    size_t nlive;
    nghttp2_nv *nv;
    size_t nv_cap;
    double now, window_start, stalled_since;
    uint32_t n_new, n_reset, n_control, n_empty, n_window;
    uint32_t rst_counted; /* RST_STREAM submitted, already in n_reset */
    uint32_t block_bytes, block_frames;
    uint32_t calm;      /* a flood bound was hit: GOAWAY ENHANCE_YOUR_CALM */
    int fatal;          /* nghttp2 gave up on the connection */
    int shutdown;       /* SHUTDOWN_* */
    int final_due;      /* the final GOAWAY can go */
    int id_exhausted;   /* a client stream id reached limits->last_stream_id */
    int data_sent;      /* DATA went out during this flush */
    uint32_t fail_code; /* a callback failed: the GOAWAY's code, else 0 */
    /* Stream ids nghttp2 has forgotten (it keeps no closed streams): the
     * highest a client opened, and the last ones closed with how. */
    uint32_t max_client_id;
    uint32_t last_rst_sent;
    uint32_t closed_ids[CLOSED_REMEMBERED];
    uint8_t closed_how[CLOSED_REMEMBERED];
    uint32_t closed_next;
    uint32_t nopen;    /* client streams open (counted), for the concurrency bound */
    size_t queued;     /* response body bytes queued on all streams (ps_h2_output_full) */
    int settings_sent; /* our first SETTINGS went out (settings_unmask) */
    /* Frame boundaries in the input (recv_frames). */
    uint32_t in_skip;
    uint8_t in_head[9], in_hlen;
    /* At the start of a SETTINGS frame: the peer's initial window and the
     * largest send window of an open stream (RFC 9113 6.9.2 overflow). */
    uint32_t initial_before;
    int32_t window_before;
};

static void status_table_fill(void);

const ps_slice_t ps_h2_preface = PS_SLICE_LIT(NGHTTP2_CLIENT_MAGIC);
const ps_slice_t ps_h2_upgrade_response =
    PS_SLICE_LIT("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");

void ps_h2_limits_default(ps_h2_limits_t *l)
{
    memset(l, 0, sizeof(*l));
    l->max_concurrent_streams = 100;
    l->max_header_list_size = 65536;
    l->max_header_fields = 100;
    l->stream_window = 256 * 1024;
    l->connection_window = 1024 * 1024;
    l->max_frame_size = 16384;
    l->max_output = 256 * 1024;
    l->stream_output_high = 64 * 1024;
    l->connection_output_high = 1024 * 1024;
    l->max_new_streams = 1000000;
    l->max_resets = 200;
    l->max_control = 100;
    l->max_empty_data = 100;
    l->max_window_updates = 50000;
    l->max_header_block = 65536 + 16384;
    l->max_continuations = 16;
    l->last_stream_id = 0x7fffffffu - 2000;
}

/* ---- streams --------------------------------------------------------------- */

static ps_h2_stream_t *stream_new(ps_h2_session_t *s, int32_t id)
{
    ps_h2_stream_t *st = s->free_list;
    if (st) {
        s->free_list = st->next_free;
        s->nfree--;
    } else {
        st = calloc(1, sizeof(*st));
        if (!st)
            return NULL;
    }
    ps_buf_t body = st->body, arena = st->arena, out = st->out, tb = st->trailer_bytes;
    ps_field_t *fields = st->fields;
    uint32_t fields_cap = st->fields_cap;
    ps_header_t *headers = st->headers;
    uint32_t headers_cap = st->headers_cap;
    memset(st, 0, sizeof(*st));
    st->body = body, st->arena = arena, st->out = out, st->trailer_bytes = tb;
    st->fields = fields, st->fields_cap = fields_cap;
    st->headers = headers, st->headers_cap = headers_cap;
    st->session = s;
    st->id = id;
    st->file_fd = -1;
    st->req.content_length = -1;
    st->resp_left = -1;
    st->next_live = s->live;
    if (s->live)
        s->live->prev_live = st;
    s->live = st;
    s->nlive++;
    return st;
}

static void stream_free_storage(ps_h2_stream_t *st)
{
    ps_buf_free(&st->body);
    ps_buf_free(&st->arena);
    ps_buf_free(&st->out);
    ps_buf_free(&st->trailer_bytes);
    free(st->fields);
    free(st->headers);
    free(st->trailers);
    free(st);
}

/* Unlinks a finished stream and keeps its storage for the next one. Bytes
 * of its body nobody read are given back to the connection window. */
static void stream_release(ps_h2_session_t *s, ps_h2_stream_t *st)
{
    if (s->cached == st)
        s->cached = NULL;
    ps_h2_body_sync(st);
    size_t unread = ps_buf_size(&st->body);
    if (unread && s->ng)
        nghttp2_session_consume_connection(s->ng, unread);
    if (st->prev_live)
        st->prev_live->next_live = st->next_live;
    else
        s->live = st->next_live;
    if (st->next_live)
        st->next_live->prev_live = st->prev_live;
    s->nlive--;
    s->queued -= ps_buf_size(&st->out);
    free(st->trailers);
    st->trailers = NULL;
    if (s->nfree >= KEEP_FREE_STREAMS) {
        stream_free_storage(st);
        return;
    }
    ps_buf_reset(&st->body);
    ps_buf_reset(&st->arena);
    ps_buf_reset(&st->out);
    ps_buf_reset(&st->trailer_bytes);
    ps_buf_shrink(&st->body, STREAM_KEEP_BYTES);
    ps_buf_shrink(&st->arena, STREAM_KEEP_BYTES);
    ps_buf_shrink(&st->out, STREAM_KEEP_BYTES);
    ps_buf_shrink(&st->trailer_bytes, 0);
    st->next_free = s->free_list;
    s->free_list = st;
    s->nfree++;
}

static void queue_event(ps_h2_session_t *s, ps_h2_stream_t *st, uint32_t ev)
{
    /* Once closed, only the close itself: the stream is released when it
     * is dispatched and must not be queued again. */
    if (st->closed && !(ev & PS_H2_EV_CLOSE))
        return;
    st->events |= ev;
    if (st->in_queue)
        return;
    st->in_queue = 1;
    st->next_event = NULL;
    if (s->ev_tail)
        s->ev_tail->next_event = st;
    else
        s->ev_head = st;
    s->ev_tail = st;
}

static ps_h2_stream_t *stream_of(ps_h2_session_t *s, int32_t id)
{
    if (id == s->cached_id && s->cached)
        return s->cached;
    ps_h2_stream_t *st = nghttp2_session_get_stream_user_data(s->ng, id);
    s->cached_id = id;
    s->cached = st;
    return st;
}

/* Sets the stream's user data in nghttp2 and in the cache. */
static void stream_bind(ps_h2_session_t *s, int32_t id, ps_h2_stream_t *st)
{
    nghttp2_session_set_stream_user_data(s->ng, id, st);
    s->cached_id = id;
    s->cached = st;
}

/* Refuses a request whose head nghttp2 accepted but we do not. */
static void reject(ps_h2_session_t *s, ps_h2_stream_t *st, uint32_t code)
{
    if (st->rejected)
        return;
    st->rejected = 1;
    st->close_why = PS_H2_CLOSE_ABORTED;
    st->error_code = code;
    nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, code);
}

/* ---- request heads ------------------------------------------------------- */

static int arena_add(ps_h2_stream_t *st, const uint8_t *p, size_t n, uint32_t *off)
{
    *off = (uint32_t)st->arena.len;
    return ps_buf_append(&st->arena, p, n);
}

static int add_field(ps_h2_stream_t *st, const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen)
{
    if (st->nfields == st->fields_cap) {
        uint32_t cap = st->fields_cap ? st->fields_cap * 2 : 16;
        ps_field_t *f = realloc(st->fields, cap * sizeof(*f));
        if (!f)
            return -ENOMEM;
        st->fields = f;
        st->fields_cap = cap;
    }
    ps_field_t *f = &st->fields[st->nfields];
    if (arena_add(st, name, nlen, &f->name_off) || arena_add(st, value, vlen, &f->value_off))
        return -ENOMEM;
    f->name_len = (uint32_t)nlen;
    f->value_len = (uint32_t)vlen;
    st->nfields++;
    /* nghttp2 lets only lower-case names through */
    if (nlen == 6 && memcmp(name, "cookie", 6) == 0)
        st->ncookies++;
    return 0;
}

/* RFC 9113 8.2.3: clients split the Cookie field into one field per
 * cookie (so HPACK indexes each); before the request goes to an
 * application that expects HTTP/1's single field, the crumbs are joined
 * with "; " into the first one's place. Returns 0 or -ENOMEM. */
static int join_cookies(ps_h2_stream_t *st)
{
    uint32_t first = UINT32_MAX, k = 0, off = (uint32_t)st->arena.len;
    for (uint32_t i = 0; i < st->nfields; i++) {
        ps_field_t f = st->fields[i];
        if (f.name_len != 6 || memcmp(st->arena.data + f.name_off, "cookie", 6) != 0) {
            st->fields[k++] = f;
            continue;
        }
        if (first != UINT32_MAX && ps_buf_append(&st->arena, "; ", 2) < 0)
            return -ENOMEM;
        /* (arena.data may move as it grows: copy through the offset) */
        if (ps_buf_reserve(&st->arena, f.value_len) < 0)
            return -ENOMEM;
        memcpy(st->arena.data + st->arena.len, st->arena.data + f.value_off, f.value_len);
        st->arena.len += f.value_len;
        if (first == UINT32_MAX) {
            first = k;
            st->fields[k++] = f;
        }
    }
    st->fields[first].value_off = off;
    st->fields[first].value_len = (uint32_t)st->arena.len - off;
    st->nfields = k;
    return 0;
}

static uint8_t method_id(ps_slice_t m)
{
    static const struct {
        const char *name;
        uint8_t id;
    } known[] = {
        {"GET", HTTP_GET},     {"HEAD", HTTP_HEAD},       {"POST", HTTP_POST},
        {"PUT", HTTP_PUT},     {"DELETE", HTTP_DELETE},   {"OPTIONS", HTTP_OPTIONS},
        {"PATCH", HTTP_PATCH}, {"CONNECT", HTTP_CONNECT}, {"TRACE", HTTP_TRACE},
    };
    for (size_t i = 0; i < PS_ARRAY_LEN(known); i++)
        if (m.len == strlen(known[i].name) && memcmp(m.base, known[i].name, m.len) == 0)
            return known[i].id;
    return PS_METHOD_OTHER;
}

/* Turns the stored fields into st->req once the head is complete: the
 * :authority becomes the one Host field (RFC 9113 8.3.1), first, where an
 * HTTP/1 client puts it (and the ASGI spec asks for it); cookie crumbs
 * become one field. Returns 0 or -ENOMEM. */
static int finish_head(ps_h2_stream_t *st)
{
    if (st->ncookies > 1 && join_cookies(st) < 0)
        return -ENOMEM;
    uint32_t n = st->nfields + 1 + PS_REQUEST_ADDED_FIELDS; /* Host, the server's fields */
    if (n > st->headers_cap) {
        ps_header_t *h = realloc(st->headers, n * sizeof(*h));
        if (!h)
            return -ENOMEM;
        st->headers = h;
        st->headers_cap = n;
    }
    const char *a = st->arena.data;
    ps_request_t *r = &st->req;
    uint32_t k = 0;
    if (st->auth_len)
        st->headers[k++] = (ps_header_t){PS_SLICE_LIT("host"), {a + st->auth_off, st->auth_len}};
    for (uint32_t i = 0; i < st->nfields; i++) {
        ps_field_t *f = &st->fields[i];
        ps_slice_t name = {a + f->name_off, f->name_len};
        ps_slice_t value = {a + f->value_off, f->value_len};
        if (st->auth_len && PS_SLICE_IEQ(name, "host"))
            continue;
        if (PS_SLICE_IEQ(name, "content-length")) {
            int64_t v = 0;
            for (size_t j = 0; j < value.len; j++)
                v = v * 10 + (value.base[j] - '0');
            r->content_length = v; /* nghttp2 checked it is digits and consistent */
        }
        st->headers[k++] = (ps_header_t){name, value};
    }
    r->headers = st->headers;
    r->nheaders = k;
    r->method = (ps_slice_t){a + st->method_off, st->method_len};
    r->target = (ps_slice_t){a + st->path_off, st->path_len};
    r->method_id = method_id(r->method);
    r->is_head = r->method_id == HTTP_HEAD;
    r->http_minor = 0;
    r->keep_alive = 1;
    r->head_complete = 1;
    st->scheme = (ps_slice_t){a + st->scheme_off, st->scheme_len};
    st->head_done = 1;
    return 0;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(ng);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (++s->n_new > s->limits->max_new_streams) {
        s->calm = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    ps_h2_stream_t *st = stream_new(s, frame->hd.stream_id);
    if (!st)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    stream_bind(s, st->id, st);
    /* RFC 9113 5.1.2: one stream over the bound is refused (a stream
     * error); nghttp2, which would end the connection, never hears of the
     * bound (SETTINGS_PLACEHOLDER). Refusals count as resets
     * (on_frame_send): a client that keeps trying gets a GOAWAY. */
    if (s->nopen >= s->limits->max_concurrent_streams) {
        reject(s, st, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    st->counted = 1;
    s->nopen++;
    if ((uint32_t)frame->hd.stream_id >= s->limits->last_stream_id)
        s->id_exhausted = 1;
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(ng);
    PS_UNUSED(flags);
    ps_h2_stream_t *st = stream_of(s, frame->hd.stream_id);
    if (!st || st->rejected || st->too_large)
        return 0;
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
        /* Request trailers: bounded like the head, not kept. */
        st->header_bytes += (uint32_t)(nlen + vlen + 32);
        if (st->header_bytes > s->limits->max_header_list_size)
            reject(s, st, NGHTTP2_ENHANCE_YOUR_CALM);
        return 0;
    }
    st->header_bytes += (uint32_t)(nlen + vlen + 32);
    if (st->header_bytes > s->limits->max_header_list_size) {
        st->too_large = 1;
        return 0;
    }
    int rc = 0;
    if (nlen && name[0] == ':') {
        uint32_t *off = NULL, *len = NULL;
        if (nlen == 7 && memcmp(name, ":method", 7) == 0)
            off = &st->method_off, len = &st->method_len;
        else if (nlen == 5 && memcmp(name, ":path", 5) == 0)
            off = &st->path_off, len = &st->path_len;
        else if (nlen == 10 && memcmp(name, ":authority", 10) == 0)
            off = &st->auth_off, len = &st->auth_len;
        else if (nlen == 7 && memcmp(name, ":scheme", 7) == 0)
            off = &st->scheme_off, len = &st->scheme_len;
        if (!off)
            return 0; /* :protocol (extended CONNECT) is not enabled; nghttp2 refuses it */
        rc = arena_add(st, value, vlen, off);
        *len = (uint32_t)vlen;
    } else if (st->nfields >= s->limits->max_header_fields) {
        st->too_large = 1;
    } else {
        rc = add_field(st, name, nlen, value, vlen);
    }
    return rc ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

/* nghttp2 ignores fields whose names hold characters outside the token set
 * (it refuses upper case itself); we refuse the request. */
static int on_invalid_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                             size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags,
                             void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(ng), PS_UNUSED(name), PS_UNUSED(nlen), PS_UNUSED(value), PS_UNUSED(vlen);
    PS_UNUSED(flags);
    ps_h2_stream_t *st = stream_of(s, frame->hd.stream_id);
    if (st)
        reject(s, st, NGHTTP2_PROTOCOL_ERROR);
    return 0;
}

/* The canned answer to a head over the limits: 431 and the end. */
static void respond_431(ps_h2_session_t *s, ps_h2_stream_t *st)
{
    static const nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)"431", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-length", (uint8_t *)"0", 14, 1, NGHTTP2_NV_FLAG_NONE},
    };
    st->rejected = 1;
    st->response_started = 1;
    nghttp2_submit_response(s->ng, st->id, nv, PS_ARRAY_LEN(nv), NULL);
    if (finish_head(st) == 0)
        queue_event(s, st, PS_H2_EV_REJECTED);
}

/* ---- frames in ------------------------------------------------------------- */

static void budget_window(ps_h2_session_t *s)
{
    if (s->now - s->window_start >= 1.0) {
        s->window_start = s->now;
        s->n_new = s->n_reset = s->n_control = s->n_empty = s->n_window = 0;
    }
}

/* Remembers how a stream nghttp2 is about to forget ended (CLOSED_*). */
static void remember_closed(ps_h2_session_t *s, int32_t id, uint8_t how)
{
    uint32_t i = s->closed_next++ % CLOSED_REMEMBERED;
    s->closed_ids[i] = (uint32_t)id;
    s->closed_how[i] = how;
}

/* A frame on a client stream id nghttp2 no longer knows (it keeps no
 * closed streams, and would ignore the frame without a word): returns
 * CLOSED_* for a stream closed lately, STALE_UNKNOWN for another id at or
 * below the highest one opened (a lower id than an earlier stream's, RFC
 * 9113 5.1.1, or one closed long ago), else STALE_NONE. */
static int stale_stream(ps_h2_session_t *s, int32_t id)
{
    if (!(id & 1) || (uint32_t)id > s->max_client_id || nghttp2_session_find_stream(s->ng, id))
        return STALE_NONE;
    for (uint32_t i = 0; i < CLOSED_REMEMBERED; i++)
        if (s->closed_ids[i] == (uint32_t)id)
            return s->closed_how[i];
    return STALE_UNKNOWN;
}

/* Answers a frame on a stream that is closed with RST_STREAM
 * STREAM_CLOSED, counted against the client's reset budget like the
 * resets it sends (so a stream of such frames ends in a GOAWAY). */
static void refuse_stale(ps_h2_session_t *s, int32_t id)
{
    s->n_reset++;
    s->rst_counted++;
    nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_STREAM_CLOSED);
}

/* DATA on a client stream nghttp2 has forgotten (RFC 9113 5.1, 6.1),
 * which it would drop without a word: after the client's RST_STREAM, or
 * on a stream closed long ago or never opened below the highest id, a
 * stream error STREAM_CLOSED; after END_STREAM both ways, a connection
 * error STREAM_CLOSED (returns -1, fail_code set); on a stream we reset,
 * nothing (the client may have sent it before our RST_STREAM arrived).
 * Returns 0 otherwise. */
static int stale_data(ps_h2_session_t *s, int32_t id)
{
    switch (stale_stream(s, id)) {
    case CLOSED_DONE:
        s->fail_code = NGHTTP2_STREAM_CLOSED;
        return -1;
    case CLOSED_BY_PEER:
    case STALE_UNKNOWN:
        refuse_stale(s, id);
        return 0;
    default:
        return 0;
    }
}

/* A SETTINGS frame starts: what a change of SETTINGS_INITIAL_WINDOW_SIZE
 * is checked against when it has been applied (on_frame_recv). */
static void settings_begin(ps_h2_session_t *s)
{
    s->initial_before =
        nghttp2_session_get_remote_settings(s->ng, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE);
    s->window_before = 0;
    for (const ps_h2_stream_t *st = s->live; st; st = st->next_live)
        if (!st->closed)
            s->window_before = PS_MAX(s->window_before,
                                      nghttp2_session_get_stream_remote_window_size(s->ng, st->id));
}

/* RFC 9113 6.9.2: a new initial window that takes a stream's window past
 * 2^31-1 is a connection error FLOW_CONTROL_ERROR (nghttp2 resets only
 * the stream). Returns 0 or NGHTTP2_ERR_CALLBACK_FAILURE. */
static int settings_check(ps_h2_session_t *s, const nghttp2_settings *f)
{
    for (size_t i = 0; i < f->niv; i++) {
        if (f->iv[i].settings_id != NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE ||
            f->iv[i].value <= s->initial_before)
            continue;
        if ((int64_t)s->window_before + (f->iv[i].value - s->initial_before) > INT32_MAX) {
            s->fail_code = NGHTTP2_FLOW_CONTROL_ERROR;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    }
    return 0;
}

/* Every frame header passes here first: the per-second budgets and the
 * bounds on a header block while it arrives (an endless CONTINUATION
 * sequence is cut off after max_continuations frames or max_header_block
 * bytes, before nghttp2 decodes further). */
static int on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *ud)
{
    ps_h2_session_t *s = ud;
    const ps_h2_limits_t *l = s->limits;
    PS_UNUSED(ng);
    budget_window(s);
    int over = 0;
    int stale;
    switch (hd->type) {
    case NGHTTP2_HEADERS:
        s->block_bytes = (uint32_t)hd->length;
        s->block_frames = 0;
        over = s->block_bytes > l->max_header_block;
        stale = stale_stream(s, hd->stream_id);
        if (stale == STALE_NONE && (hd->stream_id & 1) &&
            (uint32_t)hd->stream_id > s->max_client_id)
            s->max_client_id = (uint32_t)hd->stream_id;
        if (stale == CLOSED_BY_PEER) {
            refuse_stale(s, hd->stream_id);
        } else if (stale == CLOSED_DONE || stale == STALE_UNKNOWN) {
            s->fail_code = stale == CLOSED_DONE ? NGHTTP2_STREAM_CLOSED : NGHTTP2_PROTOCOL_ERROR;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
    case NGHTTP2_CONTINUATION:
        s->block_bytes += (uint32_t)hd->length;
        over = ++s->block_frames > l->max_continuations || s->block_bytes > l->max_header_block;
        break;
    case NGHTTP2_DATA:
        if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM))
            over = ++s->n_empty > l->max_empty_data;
        break;
    case NGHTTP2_RST_STREAM:
        s->n_reset++;
        break;
    case NGHTTP2_WINDOW_UPDATE:
        over = ++s->n_window > l->max_window_updates;
        break;
    case NGHTTP2_SETTINGS:
        if (!(hd->flags & NGHTTP2_FLAG_ACK)) {
            over = ++s->n_control > l->max_control;
            settings_begin(s);
        }
        break;
    case NGHTTP2_PING:
        if (!(hd->flags & NGHTTP2_FLAG_ACK))
            over = ++s->n_control > l->max_control;
        break;
    case NGHTTP2_GOAWAY:
        break;
    default: /* PRIORITY, PUSH_PROMISE, unknown extensions */
        over = ++s->n_control > l->max_control;
        break;
    }
    /* Resets: the client's own, and those it caused since its last frame
     * (counted in on_frame_send). */
    if (over || s->n_reset > l->max_resets) {
        s->calm = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static void request_complete(ps_h2_session_t *s, ps_h2_stream_t *st)
{
    st->req.message_complete = 1;
    if (!st->rejected)
        queue_event(s, st, PS_H2_EV_BODY);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(ng);
    ps_h2_stream_t *st = frame->hd.stream_id ? stream_of(s, frame->hd.stream_id) : NULL;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (!st)
            break;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST && !st->rejected) {
            if (st->too_large)
                respond_431(s, st);
            else if (finish_head(st) != 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            else
                queue_event(s, st, PS_H2_EV_HEAD);
        }
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            request_complete(s, st);
        break;
    case NGHTTP2_DATA:
        if (st && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            request_complete(s, st);
        break;
    case NGHTTP2_PING:
        if ((frame->hd.flags & NGHTTP2_FLAG_ACK) && s->shutdown == SHUTDOWN_NOTICE)
            s->final_due = 1;
        break;
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            return settings_check(s, &frame->settings);
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(flags);
    ps_h2_stream_t *st = stream_of(s, id);
    if (!st || st->rejected) {
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    st->req.body_received += len;
    if (s->limits->max_body && st->req.body_received > s->limits->max_body) {
        nghttp2_session_consume(ng, id, len);
        reject(s, st, NGHTTP2_CANCEL);
        return 0;
    }
    /* Never more than the stream window: nghttp2 enforces it. */
    if (ps_buf_append(&st->body, data, len) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    st->body_known += len;
    queue_event(s, st, PS_H2_EV_BODY);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    ps_h2_session_t *s = ud;
    PS_UNUSED(ng);
    ps_h2_stream_t *st = stream_of(s, id);
    uint8_t how = (uint32_t)id == s->last_rst_sent       ? CLOSED_BY_US
                  : st && !st->end_sent && !st->rejected ? CLOSED_BY_PEER
                                                         : CLOSED_DONE;
    if (id & 1)
        remember_closed(s, id, how);
    if (!st)
        return 0;
    stream_bind(s, id, NULL);
    st->closed = 1;
    if (st->counted) {
        st->counted = 0;
        s->nopen--;
    }
    if (st->close_why == PS_H2_CLOSE_ABORTED)
        ;
    else if (st->end_sent)
        st->close_why = PS_H2_CLOSE_DONE;
    else {
        st->close_why = PS_H2_CLOSE_RESET;
        st->error_code = code;
    }
    queue_event(s, st, PS_H2_EV_CLOSE);
    return 0;
}

/* ---- frames out ------------------------------------------------------------ */

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    ps_h2_session_t *s = ud;
    if (frame->hd.type == NGHTTP2_DATA)
        s->data_sent = 1;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        s->last_rst_sent = (uint32_t)frame->hd.stream_id;
        if (!nghttp2_session_find_stream(ng, frame->hd.stream_id))
            remember_closed(s, frame->hd.stream_id, CLOSED_BY_US); /* refused, never opened */
        /* A stream reset for what its client did (refused over the
         * concurrency bound, a malformed request, a frame its state forbids:
         * MadeYouReset, CVE-2025-8671) costs what one the client resets
         * does: counted here, answered at the client's next frame
         * (on_begin_frame). Not counted: NO_ERROR (the response was
         * complete) and INTERNAL_ERROR (the application failed). */
        uint32_t code = frame->rst_stream.error_code;
        if (code != NGHTTP2_NO_ERROR && code != NGHTTP2_INTERNAL_ERROR) {
            if (s->rst_counted > 0) {
                s->rst_counted--; /* counted when it was submitted */
            } else {
                budget_window(s);
                s->n_reset++;
            }
        }
    }
    if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    ps_h2_stream_t *st = stream_of(s, frame->hd.stream_id);
    if (!st)
        return 0;
    st->end_sent = 1;
    /* A complete response before the whole request: the rest of the body
     * is not wanted (RFC 9113 8.1). */
    if (!st->req.message_complete)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    return 0;
}

static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    ps_h2_session_t *s = ud;
    ps_h2_stream_t *st = src->ptr;
    size_t n = 0;
    PS_UNUSED(id);
    if (ps_buf_size(&st->out)) {
        n = PS_MIN(length, ps_buf_size(&st->out));
        memcpy(buf, ps_buf_head(&st->out), n);
        ps_buf_consume(&st->out, n);
        s->queued -= n;
    } else if (st->file_left) {
        size_t want = (size_t)PS_MIN((uint64_t)length, st->file_left);
        ssize_t r;
        do
            r = pread(st->file_fd, buf, want, st->file_off);
        while (r < 0 && errno == EINTR);
        if (r <= 0) { /* a read error, or the file shrank */
            st->close_why = PS_H2_CLOSE_ABORTED;
            st->error_code = NGHTTP2_INTERNAL_ERROR;
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        n = (size_t)r;
        st->file_off += r;
        st->file_left -= (uint64_t)r;
        if (!st->file_left)
            queue_event(s, st, PS_H2_EV_WRITABLE);
    }
    if (st->above_high && ps_buf_size(&st->out) <= s->limits->stream_output_high / 2) {
        st->above_high = 0;
        queue_event(s, st, PS_H2_EV_WRITABLE);
    }
    if (!ps_buf_size(&st->out) && !st->file_left) {
        if (st->body_ended) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            if (st->trailers) {
                nghttp2_nv *nv = s->nv; /* sized for them by ps_h2_trailers */
                for (size_t i = 0; i < st->ntrailers; i++)
                    nv[i] = (nghttp2_nv){
                        (uint8_t *)st->trailers[i].name.base, (uint8_t *)st->trailers[i].value.base,
                        st->trailers[i].name.len, st->trailers[i].value.len, NGHTTP2_NV_FLAG_NONE};
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                if (nghttp2_submit_trailer(ng, st->id, nv, st->ntrailers) != 0)
                    return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
        } else if (n == 0) {
            st->deferred = 1;
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return (ssize_t)n;
}

static void resume(ps_h2_stream_t *st)
{
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(st->session->ng, st->id);
    }
}

/* ---- the session ------------------------------------------------------------ */

ps_h2_session_t *ps_h2_session_new(const ps_h2_limits_t *limits, const ps_h2_callbacks_t *cb,
                                   void *ud)
{
    ps_h2_session_t *s = calloc(1, sizeof(*s));
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    if (!s)
        return NULL;
    status_table_fill();
    s->limits = limits;
    s->cb = cb;
    s->ud = ud;
    s->in_skip = NGHTTP2_CLIENT_MAGIC_LEN; /* the preface comes first */
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        goto error;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_invalid_header_callback(cbs, on_invalid_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 100);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    /* Closed streams are remembered here, a fixed number per connection
     * (stale_stream, recv_frames). nghttp2 would keep closed streams while
     * they and the open ones number at most its SETTINGS_MAX_CONCURRENT_
     * STREAMS (nghttp2_session_adjust_closed_stream), each a full stream,
     * and it never learns ours (SETTINGS_PLACEHOLDER): without this
     * option, without limit. */
    nghttp2_option_set_no_closed_streams(opt, 1);
    if (nghttp2_option_set_max_continuations)
        nghttp2_option_set_max_continuations(opt, 2 * (size_t)limits->max_continuations);
    if (nghttp2_option_set_stream_reset_rate_limit)
        /* a backstop behind our own budget, which answers first */
        nghttp2_option_set_stream_reset_rate_limit(opt, 2 * (uint64_t)limits->max_resets,
                                                   limits->max_resets);
    if (nghttp2_session_server_new2(&s->ng, cbs, s, opt) != 0)
        goto error;
    nghttp2_settings_entry iv[] = {
        {SETTINGS_PLACEHOLDER, limits->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits->stream_window},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, limits->max_frame_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, limits->max_header_list_size},
        {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    if (nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, PS_ARRAY_LEN(iv)) != 0)
        goto error;
    if (limits->connection_window > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE &&
        nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)limits->connection_window) != 0)
        goto error;
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    return s;
error:
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    if (s->ng)
        nghttp2_session_del(s->ng);
    free(s);
    return NULL;
}

void ps_h2_session_free(ps_h2_session_t *s)
{
    if (!s)
        return;
    while (s->live) {
        ps_h2_stream_t *st = s->live;
        s->live = st->next_live;
        if (st->head_dispatched && s->cb->on_close)
            s->cb->on_close(st, s->ud, PS_H2_CLOSE_DISCONNECT);
        stream_free_storage(st);
    }
    while (s->free_list) {
        ps_h2_stream_t *st = s->free_list;
        s->free_list = st->next_free;
        stream_free_storage(st);
    }
    nghttp2_session_del(s->ng);
    free(s->nv);
    free(s);
}

/* DATA on a stream nghttp2 has forgotten: checked before nghttp2 sees the
 * frame (it would drop it before any callback). Returns 0, or
 * NGHTTP2_ERR_CALLBACK_FAILURE when the connection must end (fail_code or
 * calm set). */
static int check_data(ps_h2_session_t *s, const uint8_t *hd)
{
    int32_t id =
        (int32_t)(((uint32_t)hd[5] << 24 | (uint32_t)hd[6] << 16 | (uint32_t)hd[7] << 8 | hd[8]) &
                  0x7fffffff);
    if (stream_of(s, id) != NULL)
        return 0;
    budget_window(s);
    if (stale_data(s, id) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (s->n_reset > s->limits->max_resets) {
        s->calm = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

/* Gives data to nghttp2 in runs cut just before each DATA frame's header,
 * which check_data looks at once the frames before it are processed:
 * only frame boundaries are tracked here (in_skip: bytes left of the
 * preface or of the current frame; in_head: the header so far). Returns
 * 0 or a negative nghttp2 error. */
static ssize_t recv_frames(ps_h2_session_t *s, const uint8_t *p, size_t len)
{
    const uint8_t *run = p, *end = p + len;
    while (p < end) {
        if (s->in_skip) {
            size_t n = PS_MIN(s->in_skip, (size_t)(end - p));
            p += n;
            s->in_skip -= (uint32_t)n;
            continue;
        }
        const uint8_t *head = p;
        size_t n = PS_MIN(9u - s->in_hlen, (size_t)(end - p));
        memcpy(s->in_head + s->in_hlen, p, n);
        s->in_hlen += (uint8_t)n;
        p += n;
        if (s->in_hlen < 9)
            break;
        s->in_hlen = 0;
        s->in_skip = (uint32_t)s->in_head[0] << 16 | (uint32_t)s->in_head[1] << 8 | s->in_head[2];
        if (s->in_head[3] != NGHTTP2_DATA)
            continue;
        ssize_t rv = head > run ? nghttp2_session_mem_recv(s->ng, run, (size_t)(head - run)) : 0;
        if (rv < 0)
            return rv;
        run = head;
        int rc = check_data(s, s->in_head);
        if (rc < 0)
            return rc;
    }
    ssize_t rv = end > run ? nghttp2_session_mem_recv(s->ng, run, (size_t)(end - run)) : 0;
    return rv < 0 ? rv : 0;
}

int ps_h2_feed(ps_h2_session_t *s, const char *data, size_t len, double now)
{
    if (s->fatal)
        return -EPROTO;
    s->now = now;
    ssize_t rv = recv_frames(s, (const uint8_t *)data, len);
    if (rv < 0) {
        s->fatal = 1;
        uint32_t code = NGHTTP2_INTERNAL_ERROR;
        if (s->fail_code)
            code = s->fail_code;
        else if (s->calm || rv == NGHTTP2_ERR_FLOODED || rv == ERR_TOO_MANY_CONTINUATIONS)
            code = NGHTTP2_ENHANCE_YOUR_CALM;
        else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            code = NGHTTP2_PROTOCOL_ERROR;
        nghttp2_session_terminate_session(s->ng, code);
        return -EPROTO;
    }
    if (s->id_exhausted && s->shutdown == SHUTDOWN_NONE) {
        ps_h2_shutdown(s);
        ps_h2_shutdown(s); /* no more ids to wait for: the final GOAWAY now */
    }
    if (s->final_due && s->shutdown == SHUTDOWN_NOTICE)
        ps_h2_shutdown(s);
    return 0;
}

void ps_h2_shutdown(ps_h2_session_t *s)
{
    if (s->shutdown == SHUTDOWN_NONE) {
        s->shutdown = SHUTDOWN_NOTICE;
        nghttp2_submit_shutdown_notice(s->ng);
        nghttp2_submit_ping(s->ng, NGHTTP2_FLAG_NONE, NULL);
    } else if (s->shutdown == SHUTDOWN_NOTICE) {
        s->shutdown = SHUTDOWN_FINAL;
        nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(s->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
    }
}

/* Runs one stream's events in order: head, body, writable, close. */
static void dispatch_stream(ps_h2_session_t *s, ps_h2_stream_t *st)
{
    const ps_h2_callbacks_t *cb = s->cb;
    ps_h2_body_sync(st);
    uint32_t ev = st->events;
    st->events = 0;
    int live = !st->closed && !st->rejected;
    if ((ev & PS_H2_EV_HEAD) && live && !st->head_dispatched) {
        st->head_dispatched = 1;
        cb->on_head(st, s->ud);
        ev |= st->req.message_complete || ps_buf_size(&st->body) ? PS_H2_EV_BODY : 0;
    }
    live = !st->closed && !st->rejected;
    if ((ev & PS_H2_EV_BODY) && live && st->head_dispatched && cb->on_body)
        cb->on_body(st, s->ud);
    if ((ev & PS_H2_EV_WRITABLE) && !st->closed && st->head_dispatched && cb->on_writable)
        cb->on_writable(st, s->ud);
    if ((ev & PS_H2_EV_REJECTED) && !st->head_dispatched && cb->on_rejected)
        cb->on_rejected(st, s->ud, 431);
    if ((ev | st->events) & PS_H2_EV_CLOSE) {
        st->events = 0;
        if (st->head_dispatched && cb->on_close)
            cb->on_close(st, s->ud, st->close_why);
        stream_release(s, st);
    }
}

void ps_h2_dispatch(ps_h2_session_t *s)
{
    while (s->ev_head) {
        ps_h2_stream_t *st = s->ev_head;
        s->ev_head = st->next_event;
        if (!s->ev_head)
            s->ev_tail = NULL;
        st->in_queue = 0;
        dispatch_stream(s, st);
    }
}

static int output_waiting(const ps_h2_session_t *s)
{
    for (const ps_h2_stream_t *st = s->live; st; st = st->next_live)
        if (!st->closed && !st->deferred && (ps_buf_size(&st->out) || st->file_left))
            return 1;
    return 0;
}

/* Our first SETTINGS frame, as nghttp2 wrote it into out: the placeholder
 * entry becomes SETTINGS_MAX_CONCURRENT_STREAMS. */
static void settings_unmask(ps_h2_session_t *s, uint8_t *f, size_t n)
{
    for (size_t i = 9; i + 6 <= n; i += 6)
        if ((f[i] << 8 | f[i + 1]) == SETTINGS_PLACEHOLDER) {
            f[i] = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS >> 8;
            f[i + 1] = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS & 0xff;
        }
    s->settings_sent = 1;
}

int ps_h2_flush(ps_h2_session_t *s, ps_buf_t *out, double now)
{
    s->now = now;
    s->data_sent = 0;
    while (ps_buf_size(out) < s->limits->max_output) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(s->ng, &p);
        if (n < 0) {
            s->fatal = 1;
            return n == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
        }
        if (n == 0)
            break;
        if (ps_buf_append(out, p, (size_t)n) != 0)
            return -ENOMEM;
        if (ps_unlikely(!s->settings_sent) && n >= 9 && p[3] == NGHTTP2_SETTINGS && !(p[4] & 1))
            settings_unmask(s, (uint8_t *)ps_buf_head(out) + ps_buf_size(out) - n, (size_t)n);
    }
    if (s->data_sent || !output_waiting(s))
        s->stalled_since = 0;
    else if (!s->stalled_since && !nghttp2_session_want_write(s->ng))
        s->stalled_since = now > 0 ? now : 1e-9;
    return 0;
}

int ps_h2_has_events(const ps_h2_session_t *s)
{
    return s->ev_head != NULL;
}

int ps_h2_want_write(const ps_h2_session_t *s)
{
    return nghttp2_session_want_write(s->ng);
}

int ps_h2_may_close(const ps_h2_session_t *s)
{
    return !nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng);
}

double ps_h2_stalled_since(const ps_h2_session_t *s)
{
    return s->stalled_since;
}

size_t ps_h2_open_streams(const ps_h2_session_t *s)
{
    return s->nlive;
}

int ps_h2_is_preface(const char *data, size_t len)
{
    size_t n = PS_MIN(len, ps_h2_preface.len);
    if (memcmp(data, ps_h2_preface.base, n) != 0)
        return 0;
    return n == ps_h2_preface.len ? 1 : -EAGAIN;
}

/* base64url (RFC 4648 section 5) without padding, as HTTP2-Settings uses;
 * trailing '=' are tolerated. Returns the decoded length or -EINVAL. */
static ssize_t base64url_decode(ps_slice_t in, uint8_t *out, size_t cap)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    size_t len = in.len;
    while (len && in.base[len - 1] == '=')
        len--;
    for (size_t i = 0; i < len; i++) {
        char c = in.base[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '-' || c == '+')
            v = 62;
        else if (c == '_' || c == '/')
            v = 63;
        else
            return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -EINVAL;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return (ssize_t)n;
}

ps_h2_stream_t *ps_h2_upgrade(ps_h2_session_t *s, ps_slice_t settings, const ps_request_t *req)
{
    uint8_t payload[6 * 32];
    ssize_t n = base64url_decode(settings, payload, sizeof(payload));
    if (n < 0 || n % 6 != 0)
        return NULL;
    ps_h2_stream_t *st = stream_new(s, 1);
    if (!st)
        return NULL;
    if (nghttp2_session_upgrade2(s->ng, payload, (size_t)n, req->is_head, st) != 0)
        goto error;
    s->max_client_id = 1;
    const uint8_t *m = (const uint8_t *)req->method.base;
    int rc = arena_add(st, m, req->method.len, &st->method_off);
    rc = rc ? rc : arena_add(st, (const uint8_t *)req->target.base, req->target.len, &st->path_off);
    rc = rc ? rc : arena_add(st, (const uint8_t *)"http", 4, &st->scheme_off);
    st->method_len = (uint32_t)req->method.len;
    st->path_len = (uint32_t)req->target.len;
    st->scheme_len = 4;
    for (uint32_t i = 0; i < req->nheaders && !rc; i++) {
        ps_slice_t name = req->headers[i].name;
        if (PS_SLICE_IEQ(name, "connection") || PS_SLICE_IEQ(name, "upgrade") ||
            PS_SLICE_IEQ(name, "http2-settings"))
            continue;
        rc = add_field(st, (const uint8_t *)name.base, name.len,
                       (const uint8_t *)req->headers[i].value.base, req->headers[i].value.len);
        if (rc)
            break;
        char *c = st->arena.data + st->fields[st->nfields - 1].name_off;
        for (size_t j = 0; j < name.len; j++)
            c[j] = c[j] >= 'A' && c[j] <= 'Z' ? (char)(c[j] + 32) : c[j];
    }
    if (rc || finish_head(st) != 0)
        goto error;
    st->req.message_complete = 1;
    queue_event(s, st, PS_H2_EV_HEAD);
    return st;
error:
    stream_bind(s, 1, NULL);
    stream_release(s, st);
    return NULL;
}

/* ---- responses -------------------------------------------------------------- */

/* Fields HTTP/2 forbids (RFC 9113 8.2.2), dropped from responses. */
static int connection_specific(ps_slice_t name)
{
    switch (name.len) {
    case 7:
        return PS_SLICE_IEQ(name, "upgrade");
    case 10:
        return PS_SLICE_IEQ(name, "connection") || PS_SLICE_IEQ(name, "keep-alive");
    case 16:
        return PS_SLICE_IEQ(name, "proxy-connection");
    case 17:
        return PS_SLICE_IEQ(name, "transfer-encoding");
    }
    return 0;
}

/* ":status" values 100..999, static (nghttp2 need not copy them); filled
 * by the first session (the loop thread), the same bytes every time. */
static char status_table[900][3];

static void status_table_fill(void)
{
    if (status_table[0][0])
        return;
    for (int i = 0; i < 900; i++) {
        int v = i + 100;
        status_table[i][0] = (char)('0' + v / 100);
        status_table[i][1] = (char)('0' + v / 10 % 10);
        status_table[i][2] = (char)('0' + v % 10);
    }
}

/* The server's own x-request-id (--request-id) is new in every response:
 * indexed, it would only push the useful entries out of the client's HPACK
 * table (and cost the encoder a table insert and eviction each time). */
static uint8_t extra_flags(const ps_header_t *f)
{
    return f->name.len == 12 && memcmp(f->name.base, "x-request-id", 12) == 0
               ? NGHTTP2_NV_FLAG_NO_INDEX
               : NGHTTP2_NV_FLAG_NONE;
}

/* Builds s->nv: the status (when status > 0), then the fields h and extra
 * without the connection-specific ones. Names go as they are: nghttp2
 * copies every name and value it is given and lower-cases the names (its
 * documented contract for nghttp2_submit_response, _headers and _trailer).
 * With check set, every field is validated first (the callers of
 * ps_h2_respond_scanned have). Returns the count, -EINVAL or -ENOMEM. */
static ssize_t build_nv(ps_h2_session_t *s, int status, const ps_header_t *h, size_t n,
                        const ps_header_t *extra, size_t nextra, int check)
{
    if (check)
        for (size_t i = 0; i < n; i++)
            if (!ps_http_valid_field(h[i].name, h[i].value))
                return -EINVAL;
    size_t total = n + nextra + 1;
    if (total > s->nv_cap) {
        nghttp2_nv *nv = realloc(s->nv, total * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        s->nv = nv;
        s->nv_cap = total;
    }
    size_t k = 0;
    if (status > 0) {
        if (status < 100 || status > 999)
            return -EINVAL;
        const char *text = status_table[status - 100];
        uint8_t flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
        s->nv[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)text, 7, 3, flags};
    }
    for (size_t i = 0; i < n + nextra; i++) {
        const ps_header_t *f = i < n ? &h[i] : &extra[i - n];
        if (connection_specific(f->name))
            continue;
        s->nv[k++] = (nghttp2_nv){(uint8_t *)f->name.base, (uint8_t *)f->value.base, f->name.len,
                                  f->value.len, i < n ? NGHTTP2_NV_FLAG_NONE : extra_flags(f)};
    }
    return (ssize_t)k;
}

static int stream_usable(const ps_h2_stream_t *st)
{
    return !st->closed && !st->rejected;
}

int ps_h2_info(ps_h2_stream_t *st, int status, const ps_header_t *h, size_t n)
{
    ps_h2_session_t *s = st->session;
    if (!stream_usable(st))
        return -EPIPE;
    if (st->response_started || status < 100 || status > 199 || status == 101)
        return -EINVAL;
    ssize_t k = build_nv(s, status, h, n, NULL, 0, 1);
    if (k < 0)
        return (int)k;
    int rv = nghttp2_submit_headers(s->ng, NGHTTP2_FLAG_NONE, st->id, NULL, s->nv, (size_t)k, NULL);
    return rv == 0 ? 0 : rv == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EINVAL;
}

/* Submits the head built in s->nv (k fields); left: the content-length or -1. */
static int submit_head(ps_h2_stream_t *st, int status, size_t k, int64_t left, int end)
{
    ps_h2_session_t *s = st->session;
    int no_body = st->req.is_head || status == 204 || status == 304;
    if (no_body)
        end = 1;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_body};
    int rv = nghttp2_submit_response(s->ng, st->id, s->nv, k, end ? NULL : &prd);
    if (rv != 0)
        return rv == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EINVAL;
    st->response_started = 1;
    st->body_ended = end ? 1 : 0;
    st->no_body = no_body ? 1 : 0;
    st->resp_left = left;
    return 0;
}

int ps_h2_respond(ps_h2_stream_t *st, int status, const ps_header_t *h, size_t n, int end)
{
    ps_h2_session_t *s = st->session;
    if (!stream_usable(st))
        return -EPIPE;
    if (st->response_started || status < 200)
        return -EINVAL;
    ssize_t k = build_nv(s, status, h, n, NULL, 0, 1);
    if (k < 0)
        return (int)k;
    int64_t left = -1;
    for (size_t i = 0; i < n; i++) {
        if (!PS_SLICE_IEQ(h[i].name, "content-length"))
            continue;
        left = 0;
        for (size_t j = 0; j < h[i].value.len; j++) {
            char c = h[i].value.base[j];
            if (c < '0' || c > '9' || left > (INT64_MAX - 9) / 10)
                return -EINVAL;
            left = left * 10 + (c - '0');
        }
        if (h[i].value.len == 0)
            return -EINVAL;
    }
    return submit_head(st, status, (size_t)k, left, end);
}

int ps_h2_respond_scanned(ps_h2_stream_t *st, const ps_head_info_t *info, const ps_header_t *h,
                          size_t n, const ps_header_t *extra, size_t nextra, int end)
{
    ps_h2_session_t *s = st->session;
    if (!stream_usable(st))
        return -EPIPE;
    if (st->response_started || info->status < 200)
        return -EINVAL;
    ssize_t k = build_nv(s, info->status, h, n, extra, nextra, 0);
    if (k < 0)
        return (int)k;
    return submit_head(st, info->status, (size_t)k, info->content_length, end);
}

static int body_check(const ps_h2_stream_t *st)
{
    if (!stream_usable(st))
        return -EPIPE;
    if (!st->response_started || st->body_ended)
        return -EINVAL;
    return 0;
}

/* Bounds a piece of body by the content-length the head announced. */
static uint64_t announced(ps_h2_stream_t *st, uint64_t n)
{
    if (st->resp_left < 0)
        return n;
    n = PS_MIN(n, (uint64_t)st->resp_left);
    st->resp_left -= (int64_t)n;
    return n;
}

int ps_h2_write(ps_h2_stream_t *st, const void *p, size_t n)
{
    if (st->no_body && stream_usable(st))
        return 0;
    int rc = body_check(st);
    if (rc)
        return rc;
    n = (size_t)announced(st, n);
    if (n == 0)
        return 0;
    if (ps_buf_append(&st->out, p, n) != 0)
        return -ENOMEM;
    st->session->queued += n;
    resume(st);
    if (ps_buf_size(&st->out) > st->session->limits->stream_output_high) {
        st->above_high = 1;
        return 1;
    }
    return 0;
}

int ps_h2_sendfile(ps_h2_stream_t *st, int fd, off_t off, uint64_t count)
{
    if (st->no_body && stream_usable(st)) {
        queue_event(st->session, st, PS_H2_EV_WRITABLE);
        return 0;
    }
    int rc = body_check(st);
    if (rc)
        return rc;
    if (st->file_left)
        return -EINVAL;
    count = announced(st, count);
    if (count == 0) {
        queue_event(st->session, st, PS_H2_EV_WRITABLE);
        return 0;
    }
    st->file_fd = fd;
    st->file_off = off;
    st->file_left = count;
    resume(st);
    return 0;
}

int ps_h2_write_blocked(const ps_h2_stream_t *st)
{
    return st->above_high;
}

size_t ps_h2_queued(const ps_h2_stream_t *st)
{
    return ps_buf_size(&st->out);
}

int ps_h2_output_full(const ps_h2_session_t *s)
{
    return s->queued >= s->limits->connection_output_high;
}

int ps_h2_sendfile_busy(const ps_h2_stream_t *st)
{
    return st->file_left != 0;
}

/* A body that ends short of its content-length can only be reset. */
static int short_body(ps_h2_stream_t *st)
{
    if (st->resp_left <= 0)
        return 0;
    ps_h2_abort(st, NGHTTP2_INTERNAL_ERROR);
    return -EIO;
}

int ps_h2_trailers(ps_h2_stream_t *st, const ps_header_t *h, size_t n)
{
    ps_h2_session_t *s = st->session;
    if (st->no_body && stream_usable(st))
        return 0;
    int rc = body_check(st);
    if (rc)
        return rc;
    if (n == 0 || short_body(st))
        return ps_h2_end(st);
    ssize_t k = build_nv(s, 0, h, n, NULL, 0, 1);
    if (k < 0)
        return (int)k;
    /* Copied: the data provider submits them when the body is drained. */
    ps_buf_reset(&st->trailer_bytes);
    size_t bytes = 0;
    for (ssize_t i = 0; i < k; i++)
        bytes += s->nv[i].namelen + s->nv[i].valuelen;
    st->trailers = calloc((size_t)k, sizeof(*st->trailers));
    if (!st->trailers || ps_buf_reserve(&st->trailer_bytes, bytes) != 0)
        return -ENOMEM;
    char *p = st->trailer_bytes.data;
    for (ssize_t i = 0; i < k; i++) {
        nghttp2_nv *v = &s->nv[i];
        memcpy(p, v->name, v->namelen);
        st->trailers[i].name = (ps_slice_t){p, v->namelen};
        p += v->namelen;
        memcpy(p, v->value, v->valuelen);
        st->trailers[i].value = (ps_slice_t){p, v->valuelen};
        p += v->valuelen;
    }
    st->ntrailers = (size_t)k;
    st->body_ended = 1;
    resume(st);
    return 0;
}

int ps_h2_end(ps_h2_stream_t *st)
{
    if (st->no_body && stream_usable(st))
        return 0;
    int rc = body_check(st);
    if (rc)
        return rc;
    if (short_body(st))
        return -EIO;
    st->body_ended = 1;
    resume(st);
    return 0;
}

int ps_h2_abort(ps_h2_stream_t *st, uint32_t code)
{
    if (st->closed)
        return -EPIPE;
    if (st->close_why != PS_H2_CLOSE_ABORTED) {
        st->close_why = PS_H2_CLOSE_ABORTED;
        st->error_code = code;
        st->rejected = 0;
        nghttp2_submit_rst_stream(st->session->ng, NGHTTP2_FLAG_NONE, st->id, code);
        st->rejected = 1;
    }
    return 0;
}

static void give_back(ps_h2_stream_t *st, size_t n)
{
    if (!n)
        return;
    if (!st->closed)
        nghttp2_session_consume(st->session->ng, st->id, n);
    else
        nghttp2_session_consume_connection(st->session->ng, n);
}

void ps_h2_body_sync(ps_h2_stream_t *st)
{
    size_t size = ps_buf_size(&st->body);
    if (size < st->body_known)
        give_back(st, st->body_known - size);
    st->body_known = size;
}

void ps_h2_body_consume(ps_h2_stream_t *st, size_t n)
{
    ps_h2_body_sync(st);
    ps_buf_consume(&st->body, PS_MIN(n, ps_buf_size(&st->body)));
    ps_h2_body_sync(st);
}
