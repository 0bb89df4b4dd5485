/* HTTP/2 server sessions over nghttp2: one session per connection, one
 * ps_h2_stream_t per request.
 *
 * The session never does I/O and never calls application code from inside
 * an nghttp2 callback. The connection feeds it bytes (ps_h2_feed), runs the
 * queued stream events (ps_h2_dispatch: request head ready, body bytes,
 * writable again, closed), and pulls the bytes to send (ps_h2_flush) into
 * its own output buffer, a bounded amount at a time.
 *
 * A stream carries one request, parsed into the same ps_request_t HTTP/1
 * fills, and one response: a head (after any number of 1xx), body bytes
 * copied in (ps_h2_write) or read from a file in bounded pieces
 * (ps_h2_sendfile), optional trailers, the end. Request bodies are
 * buffered per stream up to the stream's flow-control window, and the
 * window is given back only as the consumer reads (ps_h2_body_consume),
 * so a slow reader shrinks only its own stream's window.
 */
#ifndef PS_HTTP2_H
#define PS_HTTP2_H

#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "codec/http1.h"

typedef struct ps_h2_session ps_h2_session_t;
typedef struct ps_h2_stream ps_h2_stream_t;

typedef struct {
    uint32_t max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t max_header_list_size;   /* decoded: name + value + 32 per field */
    uint32_t max_header_fields;      /* regular fields per request */
    uint32_t stream_window;     /* SETTINGS_INITIAL_WINDOW_SIZE: body bytes buffered per stream */
    uint32_t connection_window; /* body bytes buffered per connection */
    uint32_t max_frame_size;    /* SETTINGS_MAX_FRAME_SIZE we accept */
    uint64_t max_body;          /* per request; 0: no limit */
    size_t max_output;          /* ps_h2_flush stops pulling frames past this */
    size_t stream_output_high;  /* ps_h2_write returns 1 past this many bytes queued */
    size_t connection_output_high; /* ps_h2_output_full past this many on all streams */
    /* Flood bounds, each per one-second window; over any: GOAWAY
     * ENHANCE_YOUR_CALM. */
    uint32_t max_new_streams; /* streams opened */
    uint32_t max_resets;      /* RST_STREAM received or caused by the client */
    uint32_t max_control;     /* SETTINGS, PING, PRIORITY and unknown frames */
    uint32_t max_empty_data;  /* DATA without payload or END_STREAM */
    uint32_t max_window_updates;
    uint32_t max_header_block;  /* raw HEADERS+CONTINUATION bytes of one block */
    uint32_t max_continuations; /* CONTINUATION frames of one block */
    uint32_t last_stream_id;    /* graceful GOAWAY once a client stream id reaches this */
} ps_h2_limits_t;

/* Fills the defaults: 100 streams, 64 KiB header lists, 100 fields,
 * 256 KiB stream and 1 MiB connection windows, 16 KiB frames, and flood
 * budgets generous enough for h2load-style clients. */
void ps_h2_limits_default(ps_h2_limits_t *l);

/* Why a stream ended, given to on_close. */
enum {
    PS_H2_CLOSE_DONE = 0,       /* the response was sent completely */
    PS_H2_CLOSE_RESET = 1,      /* the client reset the stream (code in st->error_code) */
    PS_H2_CLOSE_ABORTED = 2,    /* the server reset it (ps_h2_abort, a bad request body) */
    PS_H2_CLOSE_DISCONNECT = 3, /* the connection went away first */
};

/* What the session tells the exchange above it, always from ps_h2_dispatch
 * or ps_h2_free, never from inside nghttp2. `ud` is the session's user data. */
typedef struct {
    /* A request head is complete: st->req and st->scheme are valid. */
    void (*on_head)(ps_h2_stream_t *st, void *ud);
    /* New request body bytes are in st->body, or the body ended
     * (st->req.message_complete). */
    void (*on_body)(ps_h2_stream_t *st, void *ud);
    /* Queued response bytes fell below the high-water mark, or a file
     * given to ps_h2_sendfile has been read completely. */
    void (*on_writable)(ps_h2_stream_t *st, void *ud);
    /* The stream is over (PS_H2_CLOSE_*): the stream memory is released
     * when this returns, so the exchange drops every pointer to it here.
     * Called only for streams whose head was dispatched. */
    void (*on_close)(ps_h2_stream_t *st, void *ud, int why);
    /* Optional: the session answered a request itself (431: header list
     * or field count over the limits) without dispatching it; st->req
     * holds what of the head arrived, for the access log. The stream is
     * released afterwards without on_close. */
    void (*on_rejected)(ps_h2_stream_t *st, void *ud, int status);
} ps_h2_callbacks_t;

struct ps_h2_stream {
    ps_h2_session_t *session;
    int32_t id;
    ps_request_t req;    /* :method, :path as target, :authority as a host header */
    ps_slice_t scheme;   /* :scheme */
    ps_buf_t body;       /* request body bytes not yet consumed */
    size_t body_known;   /* ps_buf_size(&body) as the session last saw it */
    void *data;          /* the exchange's pointer; the session never touches it */
    uint32_t error_code; /* RST_STREAM code, for PS_H2_CLOSE_RESET and _ABORTED */
    /* Private to http2.c below. */
    ps_buf_t arena; /* header bytes */
    ps_field_t *fields;
    uint32_t nfields, fields_cap;
    ps_header_t *headers;
    uint32_t headers_cap;
    uint32_t method_off, method_len, path_off, path_len, auth_off, auth_len;
    uint32_t scheme_off, scheme_len;
    uint32_t header_bytes;
    uint32_t ncookies; /* cookie fields among them (joined at the head's end) */
    ps_buf_t out;      /* response body bytes not yet framed */
    int file_fd;       /* -1, or the file ps_h2_sendfile reads */
    off_t file_off;
    uint64_t file_left;
    ps_header_t *trailers; /* copied at ps_h2_trailers */
    size_t ntrailers;
    ps_buf_t trailer_bytes;
    uint32_t events;                       /* PS_H2_EV_* pending */
    ps_h2_stream_t *next_event;            /* in the session's event queue */
    ps_h2_stream_t *next_free;             /* in the session's free list */
    ps_h2_stream_t *prev_live, *next_live; /* the session's live streams */
    unsigned head_dispatched : 1;          /* on_head was called */
    unsigned head_done : 1;                /* the request head is complete */
    unsigned rejected : 1;                 /* headers refused; no event will come */
    unsigned too_large : 1;                /* header list over the limit: answer 431 */
    unsigned response_started : 1;         /* final response head submitted */
    unsigned body_ended : 1;               /* ps_h2_end or ps_h2_trailers was called */
    unsigned deferred : 1;                 /* the data provider said DEFERRED */
    unsigned end_sent : 1;                 /* END_STREAM sent */
    unsigned closed : 1;                   /* nghttp2 closed the stream */
    unsigned above_high : 1;               /* ps_h2_write said 1; on_writable is owed */
    unsigned in_queue : 1;
    unsigned no_body : 1; /* HEAD, 204 or 304: body bytes are dropped */
    unsigned counted : 1; /* counted among the session's open streams */
    int close_why;
    int64_t resp_left; /* body bytes the response's content-length still allows, or -1 */
};

/* Creates a server session for one connection and queues our SETTINGS
 * (and a connection WINDOW_UPDATE). `limits` and `cb` must outlive it.
 * Returns NULL when out of memory. */
ps_h2_session_t *ps_h2_session_new(const ps_h2_limits_t *limits, const ps_h2_callbacks_t *cb,
                                   void *ud);
/* Calls on_close(PS_H2_CLOSE_DISCONNECT) for every stream the exchange
 * still holds, then frees everything. */
void ps_h2_session_free(ps_h2_session_t *s);

/* Feeds bytes read from the client; `now` is the loop's clock in seconds
 * (flood budgets). Returns 0, or -EPROTO when the connection must end: a
 * GOAWAY is queued where the protocol allows one, so flush, write what
 * ps_h2_flush gives, then close. Never calls the callbacks. */
int ps_h2_feed(ps_h2_session_t *s, const char *data, size_t len, double now);
/* Runs the queued stream events. The callbacks may call the response and
 * body functions below, and may queue new events (they run in the same
 * call). */
void ps_h2_dispatch(ps_h2_session_t *s);
/* Appends frames to send to out until nothing is left or out holds
 * limits->max_output bytes. Returns 0, -ENOMEM, or -EPROTO (fatal: close).
 * May queue on_writable/on_close events: dispatch afterwards. */
int ps_h2_flush(ps_h2_session_t *s, ps_buf_t *out, double now);
/* 1 when stream events wait for ps_h2_dispatch. */
int ps_h2_has_events(const ps_h2_session_t *s);
/* 1 when the session has frames to send (call ps_h2_flush). */
int ps_h2_want_write(const ps_h2_session_t *s);
/* 1 when the connection may close: after a GOAWAY (ours or the client's,
 * or a fatal error) and with every stream finished, or when the client is
 * done. The caller still writes what it has buffered first. */
int ps_h2_may_close(const ps_h2_session_t *s);
/* When response bytes wait for the client to open its flow-control window
 * and nothing could be sent: the time (`now` of the flush) since which
 * that has been so, else 0. The connection closes at its write deadline
 * counted from here. */
double ps_h2_stalled_since(const ps_h2_session_t *s);
/* Starts a graceful stop: a GOAWAY announcing shutdown and a PING; the
 * final GOAWAY with the last stream id follows the PING's ACK, or the
 * next call. Open streams finish; new ones are refused. */
void ps_h2_shutdown(ps_h2_session_t *s);
/* The number of streams open in nghttp2 (for tests and the access log). */
size_t ps_h2_open_streams(const ps_h2_session_t *s);

/* The client connection preface. ps_h2_is_preface returns 1 when data
 * starts with all of it, 0 when it cannot, -EAGAIN when data is a prefix. */
extern const ps_slice_t ps_h2_preface;
int ps_h2_is_preface(const char *data, size_t len);

/* The HTTP/1 side's `Upgrade: h2c` path. `settings` is the HTTP2-Settings
 * value (base64url), `req` the HTTP/1 request whose head becomes stream 1
 * (its body, if any, must be complete and is not carried over). The caller
 * writes ps_h2_upgrade_response first, then what ps_h2_flush gives; the
 * client's preface follows in ps_h2_feed. Returns stream 1 (its on_head is
 * queued) or NULL on a bad HTTP2-Settings value (answer 400) or no memory. */
ps_h2_stream_t *ps_h2_upgrade(ps_h2_session_t *s, ps_slice_t settings, const ps_request_t *req);
extern const ps_slice_t ps_h2_upgrade_response;

/* ---- the response, from the exchange ------------------------------------
 * Header names are lower-cased on the way out; connection-specific fields
 * (Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade)
 * are dropped. Each returns 0, -EINVAL (a bad status or field, or a call out
 * of order), -ENOMEM, or -EPIPE (the stream is gone). */

/* An informational response (100-199 except 101), e.g. 103 Early Hints. */
int ps_h2_info(ps_h2_stream_t *st, int status, const ps_header_t *h, size_t n);
/* The final response head. With end set, the response has no body. A
 * response to HEAD and a 204 or 304 never has one: its head ends the stream
 * and the body calls below accept and drop what they are given. A
 * content-length field bounds the body: bytes past it are dropped, and a
 * body that ends short of it resets the stream (ps_h2_end returns -EIO). */
int ps_h2_respond(ps_h2_stream_t *st, int status, const ps_header_t *h, size_t n, int end);
/* ps_h2_respond for a head ps_http_scan_head has validated (info is what
 * it found: the status and the content-length), with the fields h and then
 * extra (the server's own, e.g. date), not checked again. */
int ps_h2_respond_scanned(ps_h2_stream_t *st, const ps_head_info_t *info, const ps_header_t *h,
                          size_t n, const ps_header_t *extra, size_t nextra, int end);
/* Queues body bytes (copied). Returns 1 when the stream now holds more
 * than limits->stream_output_high: wait for on_writable before more. */
int ps_h2_write(ps_h2_stream_t *st, const void *p, size_t n);
/* 1 while the stream holds more queued bytes than ps_h2_write allows
 * (its on_writable is owed). */
int ps_h2_write_blocked(const ps_h2_stream_t *st);
/* Response body bytes queued on the stream, not framed yet. */
size_t ps_h2_queued(const ps_h2_stream_t *st);
/* 1 while the streams together hold limits->connection_output_high
 * bytes or more not framed yet (a client that does not open its windows):
 * the exchange starts no more requests until it drops. */
int ps_h2_output_full(const ps_h2_session_t *s);
/* Sends count bytes of fd from off, read in frame-sized pieces as the
 * client's window allows, after any bytes queued before. The fd stays the
 * caller's and must stay open until on_writable or on_close. One file at
 * a time. */
int ps_h2_sendfile(ps_h2_stream_t *st, int fd, off_t off, uint64_t count);
/* 1 while a file given to ps_h2_sendfile is still being read. */
int ps_h2_sendfile_busy(const ps_h2_stream_t *st);
/* Ends the body after what is queued, with trailer fields. */
int ps_h2_trailers(ps_h2_stream_t *st, const ps_header_t *h, size_t n);
/* Ends the body after what is queued (-EIO: shorter than its
 * content-length, the stream is reset instead). */
int ps_h2_end(ps_h2_stream_t *st);
/* Resets the stream (RST_STREAM with code, e.g. NGHTTP2_INTERNAL_ERROR);
 * on_close(PS_H2_CLOSE_ABORTED) follows. */
int ps_h2_abort(ps_h2_stream_t *st, uint32_t code);

/* ---- the request body ---------------------------------------------------- */

/* Drops n bytes from the front of st->body and gives them back to the
 * client's flow-control window. */
void ps_h2_body_consume(ps_h2_stream_t *st, size_t n);
/* For a consumer that takes bytes out of st->body itself (ps_buf_consume,
 * as the exchange's readers do): gives what it took since the last call
 * back to the window. Call it after reading (the window stays shut until
 * then); the session also calls it before each event and at release. */
void ps_h2_body_sync(ps_h2_stream_t *st);

#endif
