/* WebSocket (RFC 6455) after an HTTP/1.1 upgrade, with permessage-deflate
 * (RFC 7692).
 *
 * Two parts, neither doing I/O nor calling back into its user:
 *   - the opening handshake: checks on a parsed request, the accept hash,
 *     permessage-deflate negotiation, the 101 head and the canned refusals;
 *   - a session (ps_ws_t): the connection feeds it the bytes it read with
 *     ps_ws_feed(), takes the messages and the close it produced with
 *     ps_ws_next_event(), writes what ps_ws_output() holds, and hands it the
 *     application's messages with ps_ws_send*(). Pings are answered inside
 *     the session; protocol errors close with the code of RFC 6455 7.4.
 *
 * Frames are written with wslay's frame layer and read by ws.c's own
 * decoder (see ws.c for why); messages, control frames, the close
 * handshake, UTF-8, limits and compression are this file's (see ws.c for
 * what wslay's event layer could not do).
 */
#ifndef PS_WS_H
#define PS_WS_H

#include <stdint.h>
#include <sys/uio.h>

#include "base/buf.h"
#include "codec/http1.h"

/* ---- the opening handshake ------------------------------------------------ */

#define PS_WS_MAX_SUBPROTOCOLS 32
#define PS_WS_ACCEPT_LEN 28 /* base64 of a SHA-1 */

/* What ps_ws_check_request() found. The non-zero ones other than NONE are
 * the HTTP status to answer (ps_ws_reject_response()). */
enum {
    PS_WS_HS_OK = 0,   /* a valid WebSocket opening handshake */
    PS_WS_HS_NONE = 1, /* no "Upgrade: websocket": an ordinary request */
    PS_WS_HS_BAD_REQUEST = 400,
    PS_WS_HS_BAD_VERSION = 426, /* answered with Sec-WebSocket-Version: 13 */
};

typedef struct {
    ps_slice_t key; /* Sec-WebSocket-Key, as sent */
    /* Sec-WebSocket-Protocol tokens in the client's order of preference;
     * the slices point into the request. */
    ps_slice_t subprotocols[PS_WS_MAX_SUBPROTOCOLS];
    uint32_t nsubprotocols;
    const char *reason; /* why it was refused (static), for the log */
} ps_ws_handshake_t;

/* Checks an upgrade request: GET, HTTP/1.1, no body, "Upgrade: websocket"
 * and "Connection: upgrade" (case-insensitive, anywhere in their lists),
 * "Sec-WebSocket-Version: 13" (else 426), one Sec-WebSocket-Key that
 * base64-decodes to 16 bytes, subprotocols that are tokens (else 400).
 * Returns one of PS_WS_HS_*; fills hs (hs->reason when it refuses). */
int ps_ws_check_request(const ps_request_t *req, ps_ws_handshake_t *hs);

/* The complete response (Connection: close) for PS_WS_HS_BAD_REQUEST or
 * PS_WS_HS_BAD_VERSION; static storage. */
ps_slice_t ps_ws_reject_response(int result);

/* Writes base64(SHA-1(key + RFC 6455's GUID)) into out (PS_WS_ACCEPT_LEN
 * bytes, no NUL). Returns 0 or -ENOMEM when libcrypto fails. */
int ps_ws_accept_key(ps_slice_t key, char out[PS_WS_ACCEPT_LEN]);

/* What the server is willing to do for permessage-deflate. */
typedef struct {
    unsigned enabled : 1;
    /* Ask for no context takeover even when the client does not. */
    unsigned server_no_context_takeover : 1;
    unsigned client_no_context_takeover : 1;
    uint8_t server_max_window_bits; /* 9..15: the largest window we compress with */
    uint8_t client_max_window_bits; /* 8..15: asked of a client that allows it */
    int8_t level;                   /* zlib level, -1..9 (1: ISA-L's level 1) */
    uint8_t mem_level;              /* zlib memLevel, 1..9 */
} ps_ws_deflate_config_t;

/* Window 12 both ways and memLevel 5, the websockets library's server
 * defaults: about 40 KiB of zlib state per connection instead of 300. */
#define PS_WS_DEFLATE_DEFAULTS                                                                     \
    ((ps_ws_deflate_config_t){.enabled = 1,                                                        \
                              .server_max_window_bits = 12,                                        \
                              .client_max_window_bits = 12,                                        \
                              .level = 6,                                                          \
                              .mem_level = 5})

/* What was agreed. The response header says what it holds. */
typedef struct {
    unsigned enabled : 1;
    unsigned server_no_context_takeover : 1; /* we reset our compressor per message */
    unsigned client_no_context_takeover : 1; /* the client resets; so do we, inflating */
    unsigned server_bits_in_response : 1;
    unsigned client_bits_in_response : 1;
    uint8_t server_max_window_bits; /* our compressor's window */
    uint8_t client_max_window_bits; /* our decompressor's window */
    int8_t level;
    uint8_t mem_level;
} ps_ws_deflate_t;

/* Reads every Sec-WebSocket-Extensions header of req as one list of offers
 * and accepts the first permessage-deflate offer whose parameters are all
 * known, not repeated and valid (declining offers that would make us
 * compress with an 8-bit window: zlib cannot). A header that does not
 * parse declines them all. Returns 1 and fills out when an offer was
 * accepted, 0 when none was (or cfg is disabled). */
int ps_ws_negotiate_deflate(const ps_request_t *req, const ps_ws_deflate_config_t *cfg,
                            ps_ws_deflate_t *out);

/* Writes the Sec-WebSocket-Extensions value for an accepted offer
 * ("permessage-deflate; ...") into buf; returns its length (at most
 * PS_WS_DEFLATE_RESPONSE_MAX). */
#define PS_WS_DEFLATE_RESPONSE_MAX 128
size_t ps_ws_deflate_response(const ps_ws_deflate_t *d, char *buf);

/* Appends the 101 response: Upgrade, Connection, Sec-WebSocket-Accept for
 * key, Sec-WebSocket-Protocol when subprotocol is not empty, the extension
 * response when deflate is enabled, the application's headers h (minus the
 * ones the handshake owns: Upgrade, Connection, Sec-WebSocket-Accept,
 * -Extensions, -Protocol, Content-Length, Transfer-Encoding), then `extra`
 * lines (each ending CRLF: Date, Server) and the blank line.
 * Returns 0, -EINVAL for a header that is not a token name with a clean
 * value (or a subprotocol that is not a token), or -ENOMEM. */
int ps_ws_write_accept(ps_buf_t *out, ps_slice_t key, ps_slice_t subprotocol,
                       const ps_ws_deflate_t *deflate, const ps_header_t *h, size_t n,
                       const ps_slice_t *extra, size_t nextra);

/* ---- the session ------------------------------------------------------------ */

typedef struct {
    uint64_t max_message; /* bytes of one whole message, after inflating; 0: none */
    uint32_t max_queue;   /* messages held before ps_ws_feed stops reading; 0: none */
} ps_ws_limits_t;

enum {
    PS_WS_EV_TEXT = 1, /* data is valid UTF-8 */
    PS_WS_EV_BINARY = 2,
    PS_WS_EV_CLOSE = 3, /* the last event */
};

/* Where a close event comes from. */
enum {
    PS_WS_CLOSE_PEER = 1,   /* the peer's close frame; code 1005 when it had none */
    PS_WS_CLOSE_FAILED = 2, /* we failed the connection: code is what we sent */
    PS_WS_CLOSE_LOST = 3,   /* the stream ended without a close frame: 1006 */
};

typedef struct {
    uint8_t type;   /* PS_WS_EV_* */
    uint8_t origin; /* PS_WS_CLOSE_*, for a close */
    uint16_t code;  /* for a close */
    uint8_t ascii;  /* text: every byte is below 0x80 */
    /* The message, or the close reason (the peer's, or ours in words).
     * Valid until the next ps_ws_feed(), ps_ws_next_event() or ps_ws_free(),
     * unless handle is set: data is then the storage's (below). */
    ps_slice_t data;
    /* Not NULL: the message was unmasked into storage the session's
     * ps_ws_storage_t gave it, and the taker of the event now owns this
     * handle (and data with it). */
    void *handle;
} ps_ws_event_t;

/* Storage for a message the session knows the size of from its first
 * frame header: an unfragmented, uncompressed binary message of at least
 * PS_WS_STORAGE_MIN bytes. Its payload is unmasked straight into that
 * storage, so the session's user gets it without another copy (the ASGI
 * bridge hands out a bytes object this way).
 *   alloc: storage for len bytes, setting *handle; NULL to let the session
 *          keep the message in its own buffer as usual.
 *   release: a handle whose message nobody took (dropped, or the session
 *          freed with it queued).
 * Both are called from inside ps_ws_feed() and ps_ws_free(). */
typedef struct {
    void *(*alloc)(size_t len, void **handle);
    void (*release)(void *handle);
} ps_ws_storage_t;

#define PS_WS_STORAGE_MIN 1024

struct wslay_frame_context;
struct z_stream_s;
struct isal_zstream;

typedef struct {
    struct wslay_frame_context *frame; /* wslay's framing, both directions */
    const ps_ws_limits_t *limits;
    const ps_ws_storage_t *storage; /* NULL: every message in `events` */
    ps_ws_deflate_t deflate;
    struct z_stream_s *inflater; /* allocated with the first compressed message in */
    struct z_stream_s *deflater; /* and out: zlib (level 1 until igzip takes over) */
    struct isal_zstream *igzip;  /* and out at level 1 from a message of 256 bytes */

    ps_buf_t out;     /* bytes for the connection to write */
    ps_buf_t events;  /* completed event records, then the message being read */
    ps_buf_t zbuf;    /* a compressed message on its way out */
    uint32_t nqueued; /* completed events in `events` */

    /* the frame being read */
    uint64_t frame_len, frame_off;
    unsigned char frame_mask[4]; /* its masking key */
    unsigned char hdr[14];       /* its header, while incomplete */
    uint8_t hdr_len;
    uint8_t frame_op;
    unsigned in_frame : 1; /* the header was read: its payload follows */
    unsigned frame_fin : 1;
    uint8_t ctrl_len;
    char ctrl[125];

    /* the message being read */
    uint64_t msg_len;
    unsigned char *msg_ext; /* its storage, when `storage` gave some */
    void *msg_handle;
    uint32_t utf8;
    uint8_t msg_op;
    unsigned msg_active : 1;
    unsigned msg_compressed : 1;
    unsigned msg_zdone : 1;   /* its deflate data ended with a final block */
    unsigned msg_discard : 1; /* read after our close: parsed, not kept */
    unsigned msg_ascii : 1;   /* no byte of it at 0x80 or above so far */

    unsigned close_sent : 1;     /* a close frame is in `out` (or was written) */
    unsigned close_received : 1; /* the peer's close frame was read */
    unsigned failed : 1;         /* we failed the connection */
    unsigned lost : 1;           /* the stream ended first */
    uint16_t close_code_sent;    /* 1005 when our close had no code */

    uint32_t pings_received; /* each answered with a pong */
    uint32_t pongs_received;
    uint8_t last_pong_len;
    char last_pong[125];

    /* ps_ws_send_prepare(): wslay's header is kept here, not queued */
    unsigned char ohdr[14];
    uint8_t ohdr_len;
    uint8_t capture; /* 1: the next piece wslay sends is a header to keep; 2: skip it */
} ps_ws_t;

/* Starts a session. limits must outlive it; deflate (NULL: none) is
 * copied. Returns 0 or -ENOMEM. */
int ps_ws_init(ps_ws_t *ws, const ps_ws_limits_t *limits, const ps_ws_deflate_t *deflate);
/* Frees the session, releasing the handles of events not taken. */
void ps_ws_free(ps_ws_t *ws);

/* Large binary messages go into storage's memory from now on (NULL: back
 * to the session's buffer). storage must outlive the session. */
static inline void ps_ws_set_storage(ps_ws_t *ws, const ps_ws_storage_t *storage)
{
    ws->storage = storage;
}

/* Reads frames from data. *consumed says how much was taken: all of it,
 * unless the event queue filled up (ps_ws_want_read() is then 0 until
 * events are taken; feed the rest again afterwards: at most the 13 bytes of
 * an incomplete frame header wait inside the session). Bytes after
 * the close handshake or a failure are taken and dropped. Protocol errors
 * are not errors here: they queue a close frame and a close event.
 * Returns 0, or -ENOMEM (the connection must be closed). */
int ps_ws_feed(ps_ws_t *ws, const char *data, size_t len, size_t *consumed);

/* The stream ended: unless the peer's close was read (or we failed the
 * connection), a PS_WS_CLOSE_LOST close event (1006) is queued and nothing
 * more can be sent. Returns 0 or -ENOMEM. */
int ps_ws_eof(ps_ws_t *ws);

/* Takes the oldest event; returns 1, or 0 when there is none. */
int ps_ws_next_event(ps_ws_t *ws, ps_ws_event_t *ev);

enum { PS_WS_SEND_NO_COMPRESS = 1 };

/* Queues a whole message (PS_WS_EV_TEXT or PS_WS_EV_BINARY; text is not
 * validated) as one frame, compressed when deflate was agreed unless flags
 * has PS_WS_SEND_NO_COMPRESS. Returns 0, -EPIPE once a close was sent or
 * the stream was lost, -EINVAL for another type, or -ENOMEM. */
int ps_ws_send(ps_ws_t *ws, int type, const void *data, size_t len, unsigned flags);
/* Like ps_ws_send(), for a caller that writes the frame itself while
 * ps_ws_output() is empty (else -EBUSY): nothing is queued, iov[0] is the
 * frame's header (inside ws) and iov[1] its payload (data, or the
 * compressed message inside ws), both valid until the next call into ws.
 * The caller then hands what it wrote to ps_ws_send_rest(). */
int ps_ws_send_prepare(ps_ws_t *ws, int type, const void *data, size_t len, unsigned flags,
                       struct iovec iov[2]);
/* Queues the bytes after the first `written` of the frame iov holds (from
 * ps_ws_send_prepare()). Returns 0 or -ENOMEM (the connection must then be
 * closed: a frame was cut). */
int ps_ws_send_rest(ps_ws_t *ws, const struct iovec iov[2], size_t written);
/* A ping (at most 125 bytes: else -EINVAL). Returns like ps_ws_send(). */
int ps_ws_send_ping(ps_ws_t *ws, const void *data, size_t len);
/* Starts (or completes) the close handshake: code 0 sends no status, else
 * 1000-1003, 1007-1014 or 3000-4999 with a reason of at most 123 bytes
 * (else -EINVAL). Returns like ps_ws_send(). */
int ps_ws_send_close(ps_ws_t *ws, uint16_t code, const char *reason, size_t len);

/* Bytes to write; the connection consumes what it wrote. */
static inline ps_buf_t *ps_ws_output(ps_ws_t *ws)
{
    return &ws->out;
}

static inline int ps_ws_want_write(const ps_ws_t *ws)
{
    return ps_buf_size(&ws->out) > 0;
}

/* 1 while ps_ws_feed() takes input: no close read, no failure, and the
 * event queue below its bound. */
static inline int ps_ws_want_read(const ps_ws_t *ws)
{
    return !ws->close_received && !ws->failed && !ws->lost &&
           (ws->limits->max_queue == 0 || ws->nqueued < ws->limits->max_queue);
}

/* Completed events not yet taken. */
static inline uint32_t ps_ws_queued(const ps_ws_t *ws)
{
    return ws->nqueued;
}

/* 1 once the TCP connection may be closed after ps_ws_output() is written:
 * both close frames went their way, we failed the connection, or the stream
 * was lost. */
static inline int ps_ws_done(const ps_ws_t *ws)
{
    return ws->lost || ws->failed || (ws->close_sent && ws->close_received);
}

/* 1 for a close code a peer may send: 1000-1003, 1007-1014, 3000-4999. */
int ps_ws_valid_close_code(unsigned code);

/* Incremental UTF-8 validation: state 0 is "between characters"; returns
 * the new state, or PS_WS_UTF8_BAD (which stays bad). */
#define PS_WS_UTF8_BAD 0xffffffffu
uint32_t ps_ws_utf8_validate(uint32_t state, const unsigned char *p, size_t n);

#endif
