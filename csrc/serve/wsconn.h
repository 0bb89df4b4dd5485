/* A socket in WebSocket mode: what the bridge calls once an upgrade
 * request reached it (the ASGI websocket scope).
 *
 * The bridge names the connection by its exchange (exchange.h): only an
 * exchange with a socket of its own (HTTP/1's) upgrades, and
 * ps_wsconn_accept takes that socket over (ps_exchange_upgrade,
 * ps_sock_set_proto). Before the application accepts,
 * the upgrade request is an ordinary request (a denial response goes
 * through ps_exchange_*).
 * ps_wsconn_accept() writes the 101 head and switches the connection to
 * WebSocket mode: its reads feed a ps_ws_t session (ws.h), its writes flush
 * the session's output, and its timer runs the pings, the close timeout and
 * the final linger. None of the ps_wsconn_* functions closes the
 * connection or calls back into the bridge: a close happens from the loop,
 * and the bridge hears of it through the connection handler's
 * on_disconnect, as for HTTP.
 */
#ifndef PS_WSCONN_H
#define PS_WSCONN_H

#include "serve/exchange.h"
#include "codec/ws.h"

typedef struct ps_wsconn ps_wsconn_t;

/* Output above this makes ps_wsconn_send() return PS_WRITE_PENDING. */
#define PS_WSCONN_HIGH_WATER (64 * 1024)

typedef struct {
    /* Events wait in the session (ps_wsconn_next_event). */
    void (*on_events)(ps_wsconn_t *wc, void *data);
    /* Output went below the high-water mark after a PS_WRITE_PENDING. */
    void (*on_writable)(ps_wsconn_t *wc, void *data);
    /* Optional: where large binary messages are unmasked (ws.h); it must
     * outlive the connection, as its handles may be released when the
     * connection is freed. */
    const ps_ws_storage_t *storage;
} ps_wsconn_ops_t;

/* Checks x's request for a WebSocket upgrade. Returns PS_WS_HS_OK (hs
 * filled), PS_WS_HS_NONE (an ordinary request, or x is not an HTTP/1
 * connection's), or -1 when the handshake is invalid: the 400 or 426 was
 * answered as a rejection (on_rejected logs it; the connection closes after). */
int ps_wsconn_check(ps_exchange_t *x, ps_ws_handshake_t *hs);

/* Accepts the upgrade: negotiates permessage-deflate (per the worker's
 * settings), queues the 101 head with subprotocol (empty: none) and the
 * application's headers h, and switches x's connection to WebSocket
 * mode. ops are called with data until ps_wsconn_release(). Returns 0,
 * -EINVAL for an invalid header or subprotocol or an exchange that is not an
 * HTTP/1 connection's (nothing sent), -EPIPE when the client is gone, or
 * -ENOMEM. */
int ps_wsconn_accept(ps_exchange_t *x, const ps_ws_handshake_t *hs, ps_slice_t subprotocol,
                     const ps_header_t *h, size_t n, const ps_wsconn_ops_t *ops, void *data);

/* The WebSocket state of x's connection once accepted, else NULL. */
ps_wsconn_t *ps_wsconn_of(ps_exchange_t *x);

/* Takes the oldest event (ws.h; its data is valid until the next call into
 * this connection, unless it comes with a handle the caller now owns). Reading resumes when the
 * queue had been full. Returns 1, or 0 when there is none. */
int ps_wsconn_next_event(ps_wsconn_t *wc, ps_ws_event_t *ev);

/* Sends a message (PS_WS_EV_TEXT or PS_WS_EV_BINARY). Returns
 * PS_WRITE_DONE, PS_WRITE_PENDING (output is above the high-water mark:
 * wait for on_writable), -EPIPE once a close was sent or the connection is
 * gone, or -ENOMEM. */
int ps_wsconn_send(ps_wsconn_t *wc, int type, const void *data, size_t len);

/* Starts the close handshake (code 0: no status). Returns 0, -EINVAL for an
 * invalid code or reason, -EPIPE when a close was already sent. */
int ps_wsconn_close(ps_wsconn_t *wc, uint16_t code, const char *reason, size_t len);

/* The bridge lets go: no more callbacks. A session whose close was not
 * sent yet is closed with 1000. */
void ps_wsconn_release(ps_wsconn_t *wc);

/* The code the application hears when the connection ends before a close
 * event was taken: the peer's, the one we failed with (1011 after a ping
 * timeout), else 1006. */
uint16_t ps_wsconn_final_code(const ps_wsconn_t *wc);

/* Graceful stop: a close 1001 to the peer (once). */
void ps_wsconn_going_away(ps_wsconn_t *wc);

#endif
