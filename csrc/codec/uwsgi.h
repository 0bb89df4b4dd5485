/* The uwsgi protocol (what nginx's uwsgi_pass speaks): one request per
 * connection, as a packet of CGI variables followed by the body.
 *
 * The packet is a 4-byte header (modifier1, datasize as u16 little-endian,
 * modifier2) and datasize bytes of variables, each a u16 LE key length, the
 * key, a u16 LE value length, the value. Only modifier1 0 (a WSGI/HTTP
 * request) is served. CONTENT_LENGTH bytes of body follow the packet; there
 * is no chunking and no keep-alive.
 *
 * The parser turns the packet into the same ps_request_t as csrc/codec/http1.c:
 * the method, the target (REQUEST_URI, else PATH_INFO re-encoded plus
 * QUERY_STRING), the HTTP_* variables as header fields (HTTP_USER_AGENT is
 * "user-agent"), CONTENT_TYPE and CONTENT_LENGTH as the content-type and
 * content-length fields, and the version from SERVER_PROTOCOL. The other CGI
 * variables stay readable (ps_uwsgi_parser_t.cgi, ps_uwsgi_var()).
 *
 * The packet is copied into the parser's own buffer, so the caller may drop
 * input as soon as ps_uwsgi_feed() reports it consumed; every slice stays
 * valid until ps_uwsgi_free(). Body bytes are appended to a buffer the
 * caller owns, exactly as ps_http1_feed() does.
 */
#ifndef PS_UWSGI_H
#define PS_UWSGI_H

#include <stdint.h>

#include "base/buf.h"
#include "codec/http1.h"

#define PS_UWSGI_MAX_PACKET 65535 /* datasize is a u16 */
/* Variables a packet may have besides its HTTP_* ones: nginx's uwsgi_params
 * sends 15 CGI variables, and uwsgi_param may add more. */
#define PS_UWSGI_CGI_VARS 32

typedef struct {
    uint32_t max_packet;   /* datasize limit, at most 65535; 0: 65535 */
    uint32_t max_vars;     /* 0: no limit but the packet's size */
    uint32_t max_var_size; /* key plus value; 0: no limit but the packet's size */
    uint64_t max_body;     /* CONTENT_LENGTH limit; 0: no limit */
} ps_uwsgi_limits_t;

/* The CGI variables a bridge needs besides the request itself; base is
 * NULL for a variable the packet did not have. Values are the bytes sent. */
typedef struct {
    ps_slice_t remote_addr, remote_port;
    ps_slice_t server_name, server_port;
    ps_slice_t https;          /* "on" (nginx's $https) or absent */
    ps_slice_t request_scheme; /* "http" or "https" from nginx */
    ps_slice_t script_name, path_info, query_string;
    ps_slice_t server_protocol; /* e.g. "HTTP/2.0" (req.http_minor cannot say 2) */
    ps_slice_t request_uri;
} ps_uwsgi_cgi_t;

enum { PS_UWSGI_HEADER, PS_UWSGI_VARS, PS_UWSGI_BODY, PS_UWSGI_DONE };

typedef struct {
    ps_request_t req;
    ps_uwsgi_cgi_t cgi;
    const ps_uwsgi_limits_t *limits;
    ps_header_t *vars; /* every variable, in packet order (then the header fields) */
    uint32_t nvars;
    uint8_t http_major; /* from SERVER_PROTOCOL: 1, 2 or 3 */
    uint8_t state;      /* PS_UWSGI_* */
    uint8_t hdr[4];
    uint8_t hdr_len;
    uint32_t datasize;
    ps_buf_t packet; /* the variables, exactly as received */
    ps_buf_t arena;  /* a target built from PATH_INFO and QUERY_STRING */
    uint64_t body_left;
    ps_buf_t *body; /* the body goes here (owned by the caller) */
    size_t body_high;
    unsigned discard_body : 1;
    int error_status;         /* the answer after PS_UWSGI_ERROR */
    const char *error_reason; /* and why, in words (static), for the log */
} ps_uwsgi_parser_t;

/* The same values as PS_HTTP1_*, so a connection can treat both alike. */
enum {
    PS_UWSGI_MORE = PS_HTTP1_MORE,     /* all input consumed, more is needed */
    PS_UWSGI_PAUSED = PS_HTTP1_PAUSED, /* at the end of the body, or at body_high */
    PS_UWSGI_ERROR = PS_HTTP1_ERROR,   /* bad packet: log error_reason and close */
};

void ps_uwsgi_init(ps_uwsgi_parser_t *p, const ps_uwsgi_limits_t *limits, ps_buf_t *body,
                   size_t body_high);
/* Parses as much of data as it can; *consumed says how much it used. The
 * request's head is ready once req.head_complete is set (during the call
 * that completes the packet; the body may follow in the same call), the
 * body ends with req.message_complete. Once the request is complete, feeding
 * consumes nothing and returns PS_UWSGI_PAUSED: the protocol has one request
 * per connection, and whatever follows is not read. An error is final. */
int ps_uwsgi_feed(ps_uwsgi_parser_t *p, const char *data, size_t len, size_t *consumed);
void ps_uwsgi_free(ps_uwsgi_parser_t *p);

/* The value of the first variable named name (case-sensitive), or a slice
 * whose base is NULL. Linear in the number of variables: for the rare ones;
 * the common ones are in p->cgi. */
ps_slice_t ps_uwsgi_var(const ps_uwsgi_parser_t *p, const char *name, size_t len);

#endif
