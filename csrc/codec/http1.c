#include "codec/http1.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/common.h"

static ps_http1_parser_t *parser_of(llhttp_t *h)
{
    return ps_container_of(h, ps_http1_parser_t, llhttp);
}

/* Records the answer to a bad request and why (a static string for the
 * log); returns llhttp's "stop" for the callback. */
static int fail(ps_http1_parser_t *p, int status, const char *reason)
{
    p->error_status = status;
    p->error_reason = reason;
    return -1;
}

static ps_field_t *current_field(ps_http1_parser_t *p)
{
    return &p->fields[p->nfields - 1];
}

static ps_slice_t arena_slice(ps_http1_parser_t *p, uint32_t off, uint32_t len)
{
    return (ps_slice_t){p->arena.data + off, len};
}

static int on_message_begin(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    p->req.content_length = -1;
    return 0;
}

/* Where `at` (inside the input being parsed) lies in the message's bytes. */
static uint64_t message_offset(const ps_http1_parser_t *p, const char *at)
{
    return p->chunk_base + (uint64_t)(at - p->feed_start);
}

/* The request line so far, from the method to `extra` bytes past the target. */
static uint64_t line_length(const ps_http1_parser_t *p, uint64_t extra)
{
    return (uint64_t)p->method_len + 1 + p->target_len + extra;
}

static int on_url(llhttp_t *h, const char *at, size_t len)
{
    ps_http1_parser_t *p = parser_of(h);
    if (p->target_len == 0) {
        /* llhttp lets more than one SP through; the grammar has exactly one. */
        if (message_offset(p, at) != p->method_at + p->method_len + 1)
            return fail(p, 400, "more than one space after the method");
        p->target_off = (uint32_t)p->arena.len;
    }
    p->target_len += (uint32_t)len;
    /* --limit-request-line counts the whole line, as gunicorn does: the
     * target is followed by " HTTP/d.d" (llhttp takes no other version). */
    if (line_length(p, 9) > p->limits->max_request_line)
        return fail(p, 414, "request line too long");
    if (ps_buf_append(&p->arena, at, len) < 0)
        return fail(p, 500, "out of memory");
    return 0;
}

/* The scheme's default port when the target is "http://" or "https://"
 * (any case), with *skip the length of that prefix; 0 otherwise. */
static int absolute_scheme(ps_slice_t t, size_t *skip)
{
    if (t.len >= 7 && strncasecmp(t.base, "http://", 7) == 0) {
        *skip = 7;
        return 80;
    }
    if (t.len >= 8 && strncasecmp(t.base, "https://", 8) == 0) {
        *skip = 8;
        return 443;
    }
    return 0;
}

/* RFC 9112 section 3.2: origin-form for every method but CONNECT, which
 * takes authority-form only; "*" with OPTIONS only; absolute-form with an
 * http(s) scheme and a valid authority, which is kept for the Host field.
 * Returns 0 or -1 with the status set. */
static int check_target(ps_http1_parser_t *p)
{
    if (p->target_len == 0) /* llhttp can end an empty CONNECT target */
        return fail(p, 400, "empty request target");
    ps_slice_t t = arena_slice(p, p->target_off, p->target_len), host;
    int connect = p->method_id == HTTP_CONNECT, port;
    if (ps_likely(t.base[0] == '/' && !connect))
        return 0;
    if (connect)
        return ps_http_parse_authority(t, &host, &port) == 0 && port >= 0
                   ? 0
                   : fail(p, 400, "invalid CONNECT authority");
    if (t.base[0] == '*')
        return t.len == 1 && p->method_id == HTTP_OPTIONS
                   ? 0
                   : fail(p, 400, "\"*\" target without OPTIONS");
    size_t skip = 0;
    int default_port = absolute_scheme(t, &skip);
    if (default_port == 0)
        return fail(p, 400, "invalid request target");
    size_t end = skip;
    while (end < t.len && t.base[end] != '/' && t.base[end] != '?' && t.base[end] != '#')
        end++;
    ps_slice_t authority = {t.base + skip, end - skip};
    if (ps_http_parse_authority(authority, &host, &port) < 0)
        return fail(p, 400, "invalid authority in the target");
    p->authority_off = p->target_off + (uint32_t)skip;
    p->authority_len = (uint32_t)authority.len;
    p->host_off = p->target_off + (uint32_t)(host.base - t.base);
    p->host_len = (uint32_t)host.len;
    p->req.target_port = (uint16_t)(port >= 0 ? port : default_port);
    return 0;
}

static int on_version(llhttp_t *h, const char *at, size_t len)
{
    ps_http1_parser_t *p = parser_of(h);
    /* One SP, then "HTTP/" (5 bytes), then these digits. */
    if (p->version_len == 0 && message_offset(p, at) != p->method_at + line_length(p, 6))
        return fail(p, 400, "more than one space before the version");
    size_t room = sizeof(p->version) - p->version_len;
    size_t n = PS_MIN(room, len);
    memcpy(p->version + p->version_len, at, n);
    p->version_len += (uint8_t)n;
    return 0;
}

/* Trailer fields after a chunked body are counted, not kept: the head's
 * slices must not move once the request was handed out. */
static int skip_trailer(ps_http1_parser_t *p, size_t len)
{
    p->trailer_bytes += len;
    if (p->trailer_bytes > p->limits->max_field_size)
        return fail(p, 431, "trailer section too large");
    return 0;
}

/* --limit-request-field-size counts the whole field line up to `end`
 * (name, colon, whitespace, value) and its CRLF, as gunicorn and nginx
 * do. Returns 1 when the line is over it. */
static int field_line_over(const ps_http1_parser_t *p, const char *end)
{
    return message_offset(p, end) - p->field_start + 2 > p->limits->max_field_size;
}

static int on_header_field(llhttp_t *h, const char *at, size_t len)
{
    ps_http1_parser_t *p = parser_of(h);
    ps_field_t *f;
    if (p->req.head_complete)
        return skip_trailer(p, len);
    if (p->nfields == 0 || current_field(p)->value_off != UINT32_MAX) {
        /* First piece of a new field. */
        if (p->nfields >= p->limits->max_fields)
            return fail(p, 431, "too many header fields");
        if (p->nfields == p->fields_cap) {
            uint32_t cap = p->fields_cap ? p->fields_cap * 2 : 16;
            ps_field_t *nf = realloc(p->fields, cap * sizeof(*nf));
            if (nf == NULL)
                return fail(p, 500, "out of memory");
            p->fields = nf;
            p->fields_cap = cap;
        }
        f = &p->fields[p->nfields++];
        p->field_start = message_offset(p, at);
        f->name_off = (uint32_t)p->arena.len;
        f->name_len = 0;
        f->value_off = UINT32_MAX;
        f->value_len = 0;
    }
    f = current_field(p);
    f->name_len += (uint32_t)len;
    if (field_line_over(p, at + len))
        return fail(p, 431, "header field too large");
    if (ps_buf_append(&p->arena, at, len) < 0)
        return fail(p, 500, "out of memory");
    return 0;
}

static int on_header_field_complete(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    if (p->req.head_complete)
        return 0;
    if (p->nfields == 0 || current_field(p)->value_off != UINT32_MAX)
        return fail(p, 400, "empty header field name");
    ps_field_t *f = current_field(p);
    /* An empty name may come before anything is in the arena (an empty
     * CONNECT target then a field line starting with ':'). */
    if (f->name_len == 0 || !ps_http_token_ok(p->arena.data + f->name_off, f->name_len))
        return fail(p, 400, "invalid header field name");
    f->value_off = (uint32_t)p->arena.len;
    return 0;
}

static int on_header_value(llhttp_t *h, const char *at, size_t len)
{
    ps_http1_parser_t *p = parser_of(h);
    if (p->req.head_complete)
        return skip_trailer(p, len);
    ps_field_t *f = current_field(p);
    /* A value continues in a second piece only across two feeds; a second
     * piece inside one feed would be an obs-fold line, which scan_head has
     * refused before llhttp could see it. */
    if (f->value_len > 0 && at != p->feed_start)
        return fail(p, 400, "folded header line");
    f->value_len += (uint32_t)len;
    if (field_line_over(p, at + len))
        return fail(p, 431, "header field too large");
    if (ps_buf_append(&p->arena, at, len) < 0)
        return fail(p, 500, "out of memory");
    return 0;
}

/* Notes the codings of one Transfer-Encoding field; the fields together
 * are judged once the head is complete (see check_transfer_codings). */
static void note_transfer_encoding(ps_http1_parser_t *p, ps_slice_t v)
{
    const char *s = v.base, *end = v.base + v.len;
    int any = 0;
    while (s < end) {
        while (s < end && (*s == ' ' || *s == '\t' || *s == ','))
            s++;
        const char *t = s;
        while (s < end && *s != ',' && *s != ' ' && *s != '\t')
            s++;
        if (s == t)
            continue;
        ps_slice_t coding = {t, (size_t)(s - t)};
        any = 1;
        if (PS_SLICE_IEQ(coding, "chunked")) {
            if (p->te_state & PS_TE_SAW_CHUNKED)
                p->te_state |= PS_TE_CHUNKED_TWICE;
            p->te_state |= PS_TE_SAW_CHUNKED | PS_TE_LAST_CHUNKED;
        } else {
            p->te_state = (uint8_t)((p->te_state & ~PS_TE_LAST_CHUNKED) | PS_TE_OTHER);
        }
    }
    if (!any)
        p->te_state |= PS_TE_EMPTY;
}

/* RFC 9112 section 6.3: a request whose final coding is not chunked (or
 * that names chunked twice, or no coding) cannot be framed: 400. Codings
 * before the final chunked are understood by HTTP but not implemented
 * here: 501. Returns 0 or -1 with the status set. */
static int check_transfer_codings(ps_http1_parser_t *p)
{
    uint8_t te = p->te_state;
    if ((te & (PS_TE_EMPTY | PS_TE_CHUNKED_TWICE)) || !(te & PS_TE_LAST_CHUNKED))
        return fail(p, 400, "invalid Transfer-Encoding");
    if (te & PS_TE_OTHER)
        return fail(p, 501, "unsupported transfer coding");
    return 0;
}

static int on_header_value_complete(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    if (p->req.head_complete)
        return 0;
    ps_field_t *f = current_field(p);
    /* Trailing whitespace is not part of the value. */
    while (f->value_len > 0) {
        char c = p->arena.data[f->value_off + f->value_len - 1];
        if (c != ' ' && c != '\t')
            break;
        f->value_len--;
    }
    ps_slice_t name = arena_slice(p, f->name_off, f->name_len);
    ps_slice_t value = arena_slice(p, f->value_off, f->value_len);
    if (!ps_http_field_value_ok(value.base, value.len))
        return fail(p, 400, "invalid character in header value");
    switch (name.len) {
    case 4:
        if (PS_SLICE_IEQ(name, "host")) {
            if (++p->host_count > 1)
                return fail(p, 400, "more than one Host");
            p->host_index = p->nfields - 1;
        }
        break;
    case 6:
        if (PS_SLICE_IEQ(name, "expect") && PS_SLICE_IEQ(value, "100-continue"))
            p->req.expect_continue = 1;
        break;
    case 12:
        /* Joined, two media types make no valid one (RFC 9110 5.3): refused
         * as a second Content-Length is. */
        if (PS_SLICE_IEQ(name, "content-type") && ++p->content_type_count > 1)
            return fail(p, 400, "more than one Content-Type");
        break;
    case 17:
        if (PS_SLICE_IEQ(name, "transfer-encoding"))
            note_transfer_encoding(p, value);
        break;
    }
    return 0;
}

/* RFC 9112 section 3.2.2: with an absolute-form target the Host field is
 * ignored and the target's authority takes its place (added when the
 * request had none, as HTTP/1.0 allows). The headers array has room. */
static void use_target_authority(ps_http1_parser_t *p)
{
    ps_request_t *r = &p->req;
    ps_slice_t authority = arena_slice(p, p->authority_off, p->authority_len);
    if (p->host_count == 0)
        p->headers[r->nheaders++] = (ps_header_t){PS_SLICE_LIT("Host"), authority};
    else
        p->headers[p->host_index].value = authority;
    r->target_host = arena_slice(p, p->host_off, p->host_len);
}

static int on_headers_complete(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    ps_request_t *r = &p->req;
    if (check_target(p) < 0)
        return -1;
    if (h->http_major != 1 || h->http_minor > 1)
        return fail(p, 505, "unsupported HTTP version");
    if (h->http_minor == 1 && p->host_count == 0)
        return fail(p, 400, "no Host");
    if (p->te_state && (h->flags & F_CONTENT_LENGTH))
        return fail(p, 400, "both Content-Length and Transfer-Encoding");
    if (p->te_state && check_transfer_codings(p) < 0)
        return -1;
    /* A tunnel is not something an application server can open. */
    if (p->method_id == HTTP_CONNECT)
        return fail(p, 501, "CONNECT is not served");
    if (h->flags & F_CONTENT_LENGTH) {
        r->content_length = (int64_t)h->content_length;
        if (p->limits->max_body && h->content_length > p->limits->max_body)
            return fail(p, 413, "body too large");
    }
    r->chunked = (h->flags & F_CHUNKED) != 0;
    r->http_minor = h->http_minor;
    r->method_id = p->method_id;
    r->is_head = p->method_id == HTTP_HEAD;
    r->method = p->method_name ? (ps_slice_t){p->method_name, p->method_len}
                               : arena_slice(p, p->method_off, p->method_len);
    r->keep_alive = llhttp_should_keep_alive(h) != 0;
    r->upgrade = h->upgrade != 0;
    if (r->upgrade)
        r->keep_alive = 0;
    r->target = arena_slice(p, p->target_off, p->target_len);

    /* The arena no longer grows for this request: fix the slices (with
     * room for a Host field an absolute-form target may add, and for the
     * fields the server adds). */
    uint32_t room = 1 + PS_REQUEST_ADDED_FIELDS;
    if (p->headers_cap < p->nfields + room) {
        ps_header_t *nh = realloc(p->headers, (p->fields_cap + room) * sizeof(*nh));
        if (nh == NULL)
            return fail(p, 500, "out of memory");
        p->headers = nh;
        p->headers_cap = p->fields_cap + room;
    }
    ps_header_t *hs = p->headers;
    for (uint32_t i = 0; i < p->nfields; i++) {
        ps_field_t f = p->fields[i];
        hs[i].name = arena_slice(p, f.name_off, f.name_len);
        hs[i].value = arena_slice(p, f.value_off, f.value_len);
    }
    r->headers = hs;
    r->nheaders = p->nfields;
    if (p->authority_len)
        use_target_authority(p);
    r->head_complete = 1;
    if (r->chunked) {
        p->chunk_state = PS_CHUNK_SIZE;
        return HPE_PAUSED;
    }
    return 0;
}

/* After the last chunk's size line come the trailer fields, whose line
 * ends are checked as the head's are: llhttp pauses here so that
 * ps_http1_feed() scans the rest before llhttp sees it. */
static int on_chunk_header(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    p->last_chunk = h->content_length == 0;
    p->chunk_data = !p->last_chunk;
    if (!p->last_chunk)
        return 0;
    p->head_scan = PS_SCAN_LINE_START;
    return HPE_PAUSED;
}

/* Pauses before the next chunk-size line so ps_http1_feed() can strip its
 * extensions (see skip_chunk_extensions). */
static int on_chunk_complete(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    p->chunk_data = 0;
    if (p->last_chunk)
        return 0;
    p->chunk_state = PS_CHUNK_SIZE;
    return HPE_PAUSED;
}

static int on_body(llhttp_t *h, const char *at, size_t len)
{
    ps_http1_parser_t *p = parser_of(h);
    p->req.body_received += len;
    if (p->limits->max_body && p->req.body_received > p->limits->max_body)
        return fail(p, 413, "body too large");
    if (ps_buf_append(p->body, at, len) < 0)
        return fail(p, 500, "out of memory");
    /* The last piece of a Content-Length body: on_message_complete pauses
     * right after, and pausing here would leave the end unreported until the
     * next feed, which a connection with nothing left to read never makes. */
    if (!(h->flags & F_CHUNKED) && h->content_length == 0)
        return 0;
    return ps_buf_size(p->body) >= p->body_high ? HPE_PAUSED : 0;
}

static int on_message_complete(llhttp_t *h)
{
    ps_http1_parser_t *p = parser_of(h);
    p->req.message_complete = 1;
    return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_chunk_complete = on_chunk_complete,
    .on_message_complete = on_message_complete,
};

void ps_http1_init(ps_http1_parser_t *p, const ps_http1_limits_t *limits, ps_buf_t *body,
                   size_t body_high)
{
    memset(p, 0, sizeof(*p));
    p->limits = limits;
    p->body = body;
    p->body_high = body_high;
    llhttp_init(&p->llhttp, HTTP_REQUEST, &settings);
    p->req.content_length = -1;
    p->want_method = 1;
}

void ps_http1_next(ps_http1_parser_t *p)
{
    memset(&p->req, 0, sizeof(p->req));
    p->req.content_length = -1;
    ps_buf_reset(&p->arena);
    p->nfields = 0;
    p->target_off = p->target_len = 0;
    p->method_off = p->method_len = 0;
    p->method_name = NULL;
    p->method_in_arena = 0;
    p->want_method = 1;
    p->authority_off = p->authority_len = 0;
    p->head_bytes = p->chunk_base = 0;
    p->method_at = 0;
    p->te_state = 0;
    p->host_count = 0;
    p->content_type_count = 0;
    p->version_len = 0;
    p->trailer_bytes = 0;
    p->chunk_state = PS_CHUNK_NONE;
    p->last_chunk = p->chunk_data = 0;
    p->error_status = 0;
    p->head_scan = PS_SCAN_TEXT;
    if (p->paused) {
        llhttp_resume(&p->llhttp);
        p->paused = 0;
    }
}

/* Heads under these sizes keep their storage from request to request. */
#define KEEP_ARENA (16 * 1024)
#define KEEP_FIELDS 64

void ps_http1_shrink(ps_http1_parser_t *p)
{
    ps_buf_shrink(&p->arena, KEEP_ARENA);
    if (p->nfields == 0 && p->fields_cap > KEEP_FIELDS) {
        free(p->fields);
        free(p->headers);
        p->fields = NULL;
        p->headers = NULL;
        p->fields_cap = p->headers_cap = 0;
    }
}

void ps_http1_free(ps_http1_parser_t *p)
{
    ps_buf_free(&p->arena);
    free(p->fields);
    free(p->headers);
    p->fields = NULL;
    p->headers = NULL;
    p->headers_cap = 0;
    p->nfields = p->fields_cap = 0;
}

int ps_http1_request_line(const ps_http1_parser_t *p, ps_slice_t *method, ps_slice_t *target,
                          ps_slice_t *version)
{
    if (p->req.head_complete) {
        *method = p->req.method;
        *target = p->req.target;
    } else if (p->nfields > 0 || p->version_len >= 3) {
        /* Past the version, which is "d.d" (llhttp takes one digit each). */
        const char *m = llhttp_method_name((llhttp_method_t)p->llhttp.method);
        *method = (ps_slice_t){m, strlen(m)};
        *target = (ps_slice_t){p->arena.data + p->target_off, p->target_len};
    } else {
        return 0;
    }
    *version = (ps_slice_t){p->version, p->version_len};
    return 1;
}

/* "d.d" where llhttp refused the version: well formed but unsupported.
 * llhttp takes 1.0 and 1.1, so a refusal with those digits is about what
 * follows them ("HTTP/1.1x"): malformed, not unsupported. */
static int version_is_unsupported(const ps_http1_parser_t *p)
{
    const char *v = p->version;
    if (p->version_len != 3 || v[0] < '0' || v[0] > '9' || v[1] != '.' || v[2] < '0' || v[2] > '9')
        return 0;
    return !(v[0] == '1' && (v[2] == '0' || v[2] == '1'));
}

/* Words for what llhttp refused, for the log; llhttp's own text otherwise. */
static const char *llhttp_reason(const ps_http1_parser_t *p, llhttp_errno_t err)
{
    switch (err) {
    case HPE_INVALID_METHOD:
        return "invalid method";
    case HPE_INVALID_URL:
        return "invalid request target";
    case HPE_INVALID_VERSION:
        return "invalid HTTP version";
    case HPE_INVALID_HEADER_TOKEN:
        return "invalid header field";
    case HPE_INVALID_CONTENT_LENGTH:
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        return "invalid Content-Length";
    case HPE_INVALID_CHUNK_SIZE:
        return "invalid chunk size";
    case HPE_INVALID_TRANSFER_ENCODING:
        return "invalid Transfer-Encoding";
    case HPE_CR_EXPECTED:
    case HPE_LF_EXPECTED:
    case HPE_STRICT:
        /* A chunk line's bad end, which llhttp 8.1 and 9 word differently
         * (the head's and the trailer's line ends are scan_head's). */
        if (p->req.head_complete && p->req.chunked)
            return p->chunk_data ? "chunk data not followed by CRLF" : "invalid chunk size";
        break;
    default:
        break;
    }
    const char *r = llhttp_get_error_reason(&p->llhttp);
    return r != NULL && *r ? r : "malformed request";
}

/* After llhttp stopped on err: the status and reason a callback gave, or
 * the ones err means. */
static void set_error(ps_http1_parser_t *p, llhttp_errno_t err)
{
    if (p->error_status)
        return;
    if (err == HPE_INVALID_VERSION && version_is_unsupported(p)) {
        p->error_status = 505;
        p->error_reason = "unsupported HTTP version";
        return;
    }
    p->error_status = 400;
    p->error_reason = llhttp_reason(p, err);
}

/* Chunk extensions carry nothing the server uses, and llhttp 8.1 rejects
 * valid ones (";a=b;c=d"). At the start of a chunk-size line the size
 * digits go to llhttp and everything from ';' to the line end is skipped, so
 * llhttp only ever sees "SIZE\r\n". Returns the new position, or NULL when
 * an extension runs past the line limit. */
static const char *skip_chunk_extensions(ps_http1_parser_t *p, const char *cur, const char *end)
{
    if (p->chunk_state == PS_CHUNK_SIZE) {
        const char *s = cur;
        while (s < end && *s != ';' && *s != '\r' && *s != '\n')
            s++;
        if (s > cur)
            llhttp_execute(&p->llhttp, cur, (size_t)(s - cur));
        if (s == end)
            return end; /* still in the size digits */
        if (*s != ';') {
            p->chunk_state = PS_CHUNK_NONE;
            return s;
        }
        p->chunk_state = PS_CHUNK_EXT;
        p->chunk_ext_len = 0;
        cur = s;
    }
    const char *s = cur;
    while (s < end && *s != '\r' && *s != '\n')
        s++;
    p->chunk_ext_len += (uint32_t)(s - cur);
    if (p->chunk_ext_len > p->limits->max_field_size)
        return NULL;
    if (s < end)
        p->chunk_state = PS_CHUNK_NONE;
    return s;
}

/* ---- line ends in the head and the trailer section ---- */

/* What is wrong with c opening a field line (it follows a CRLF), or NULL. */
static const char *field_line_fault(char c)
{
    switch (c) {
    case ' ':
    case '\t':
        return "folded header line";
    case '\n':
        return "line ends in a bare LF";
    case ':': /* an empty name, which llhttp 8.1 lets through in a trailer */
        return "invalid header field name";
    default:
        return NULL;
    }
}

/* Checks the line ends of the head's (or the trailer section's) next n
 * bytes at s, before llhttp sees them: every line ends in CRLF (no bare LF,
 * no CR without LF) and no field line starts with SP or HTAB (obs-fold,
 * RFC 9112 section 5.2) or ':'. llhttp 8.1 lets some of these through
 * without a callback that shows them (a bare LF after the version or as the
 * blank line, a whitespace-only fold line after an empty value) and llhttp
 * 9 refuses them with other statuses (a bare LF after the version as an
 * invalid version), so the server decides. The scan stops at the blank
 * line: what follows is the body. Returns how many of the n bytes are good,
 * with *reason set when that is fewer than n: the bytes before the fault go
 * to llhttp first, so that an earlier fault is found as it is when the
 * bytes arrive one by one. */
static size_t scan_head(ps_http1_parser_t *p, const char *s, size_t n, const char **reason)
{
    size_t i = 0;
    uint8_t st = p->head_scan;
    while (i < n && st != PS_SCAN_DONE) {
        const char *lf, *cr;
        char c = s[i];
        switch (st) {
        case PS_SCAN_TEXT: /* on to the line's CR, or a bare LF */
            lf = memchr(s + i, '\n', n - i);
            cr = memchr(s + i, '\r', (lf ? (size_t)(lf - s) : n) - i);
            if (cr != NULL) {
                i = (size_t)(cr - s) + 1;
                st = PS_SCAN_CR;
            } else if (lf != NULL) {
                i = (size_t)(lf - s);
                *reason = "line ends in a bare LF";
                goto fault;
            } else {
                i = n;
            }
            break;
        case PS_SCAN_CR:
        case PS_SCAN_END_CR:
            if (c != '\n') {
                *reason = "CR without LF";
                goto fault;
            }
            st = st == PS_SCAN_CR ? PS_SCAN_LINE_START : PS_SCAN_DONE;
            i++;
            break;
        default: /* PS_SCAN_LINE_START */
            if ((*reason = field_line_fault(c)) != NULL)
                goto fault;
            st = c == '\r' ? PS_SCAN_END_CR : PS_SCAN_TEXT;
            i += c == '\r';
            break;
        }
    }
    p->head_scan = st;
    return st == PS_SCAN_DONE ? n : i;
fault:
    return i;
}

/* ---- the method ---- */

/* The methods llhttp parses as HTTP; any other token is carried with a
 * stand-in (see take_method). */
static const struct {
    const char *name;
    uint8_t len, id;
} known_methods[] = {
#define PS_METHOD_ENTRY(num, name, string) {#string, sizeof(#string) - 1, num},
    HTTP_METHOD_MAP(PS_METHOD_ENTRY)
#undef PS_METHOD_ENTRY
};

/* The index in known_methods of the method s (case-sensitive), or -1. */
static int known_method(const char *s, size_t n)
{
    if (n == 3 && s[0] == 'G' && s[1] == 'E' && s[2] == 'T')
        return HTTP_GET; /* DELETE is 0 and GET is 1 in every llhttp */
    for (size_t i = 0; i < PS_ARRAY_LEN(known_methods); i++)
        if (known_methods[i].len == n && memcmp(known_methods[i].name, s, n) == 0)
            return (int)i;
    return -1;
}

/* At the start of a message the method is taken here, so that any RFC 9110
 * token reaches the application exactly as sent. A method llhttp knows is
 * left in the input for llhttp to parse; one that arrived split is fed to
 * llhttp from the arena; any other token is kept in the arena and llhttp
 * parses the request as a GET, whose framing (Content-Length, chunked or
 * none) is the same. Empty lines before the request are skipped (RFC 9112
 * section 2.2). Returns 1 with *cur where llhttp goes on, 0 when all the
 * input was used and more is needed, -1 with the error status set. */
static int take_method(ps_http1_parser_t *p, const char **cur, const char *end)
{
    const char *s = *cur;
    if (!p->method_in_arena) {
        while (s < end && (*s == '\r' || *s == '\n'))
            s++;
        p->head_bytes += (uint64_t)(s - *cur);
        *cur = s;
        p->method_at = p->head_bytes;
    }
    const char *t = s;
    while (s < end && ps_http_token_chars[(uint8_t)*s])
        s++;
    size_t n = (size_t)(s - t), total = p->method_len + n;
    if (total + 1 > p->limits->max_request_line)
        return fail(p, 414, "request line too long");
    if (p->limits->max_head && p->method_at + total > p->limits->max_head)
        return fail(p, 431, "request head too large");
    if (s < end && (*s != ' ' || total == 0))
        return fail(p, 400, "invalid method");
    if (s == end && n == 0) {
        *cur = end;
        return 0;
    }
    if (s < end && !p->method_in_arena) {
        int k = known_method(t, n);
        if (k >= 0) { /* the usual case: llhttp parses it where it is */
            p->method_id = known_methods[k].id;
            p->method_name = known_methods[k].name;
            p->method_len = (uint32_t)n;
            return 1;
        }
    }
    if (!p->method_in_arena) {
        p->method_off = (uint32_t)p->arena.len;
        p->method_in_arena = 1;
    }
    if (ps_buf_append(&p->arena, t, n) < 0)
        return fail(p, 500, "out of memory");
    p->method_len = (uint32_t)total;
    p->head_bytes += n;
    *cur = s;
    if (s == end)
        return 0;
    ps_slice_t m = arena_slice(p, p->method_off, p->method_len);
    int k = known_method(m.base, m.len);
    p->method_id = k >= 0 ? known_methods[k].id : PS_METHOD_OTHER;
    if (k >= 0)
        p->method_name = known_methods[k].name;
    llhttp_execute(&p->llhttp, k >= 0 ? m.base : "GET", k >= 0 ? m.len : 3);
    return 1;
}

int ps_http1_feed(ps_http1_parser_t *p, const char *data, size_t len, size_t *consumed)
{
    const char *cur = data, *end = data + len;
    if (ps_unlikely(p->error_status)) { /* an error is final, ours as llhttp's */
        *consumed = len;
        return PS_HTTP1_ERROR;
    }
    if (p->paused) {
        if (p->req.message_complete) {
            *consumed = 0;
            return PS_HTTP1_PAUSED;
        }
        llhttp_resume(&p->llhttp);
        p->paused = 0;
    }
    for (;;) {
        if (p->chunk_state != PS_CHUNK_NONE) {
            cur = skip_chunk_extensions(p, cur, end);
            if (cur == NULL) {
                *consumed = len;
                fail(p, 400, "chunk extension too long");
                return PS_HTTP1_ERROR;
            }
            if (llhttp_get_errno(&p->llhttp) != HPE_OK) {
                *consumed = len;
                set_error(p, llhttp_get_errno(&p->llhttp));
                return PS_HTTP1_ERROR;
            }
            if (cur == end) {
                *consumed = len;
                return PS_HTTP1_MORE;
            }
        }
        if (p->want_method) {
            int rc = take_method(p, &cur, end);
            if (rc <= 0) {
                *consumed = len;
                return rc < 0 ? PS_HTTP1_ERROR : PS_HTTP1_MORE;
            }
            p->want_method = 0;
        }
        /* The head is fed no further than --limit-request-head allows: a
         * head that needs more is refused before it is all buffered. */
        size_t n = (size_t)(end - cur);
        int capped = 0;
        const char *fault = NULL; /* what scan_head found wrong after the n bytes */
        if (!p->req.head_complete) {
            uint64_t max = p->limits->max_head;
            p->chunk_base = p->head_bytes;
            if (max && n > max - PS_MIN(max, p->head_bytes)) {
                n = (size_t)(max - PS_MIN(max, p->head_bytes));
                capped = 1;
            }
            if (p->head_scan != PS_SCAN_DONE)
                n = scan_head(p, cur, n, &fault);
            p->head_bytes += n;
        } else if (p->head_scan != PS_SCAN_DONE) { /* the trailer section */
            n = scan_head(p, cur, n, &fault);
        }
        p->feed_start = cur;
        llhttp_errno_t err = llhttp_execute(&p->llhttp, cur, n);
        switch (err) {
        case HPE_OK:
            if (fault != NULL) {
                *consumed = len;
                fail(p, 400, fault);
                return PS_HTTP1_ERROR;
            }
            if (capped) {
                if (!p->req.head_complete) {
                    *consumed = len;
                    p->error_status = 431;
                    p->error_reason = "request head too large";
                    return PS_HTTP1_ERROR;
                }
                cur += n;
                continue;
            }
            *consumed = len;
            return PS_HTTP1_MORE;
        case HPE_PAUSED:
            cur = llhttp_get_error_pos(&p->llhttp);
            if (p->chunk_state != PS_CHUNK_NONE || (p->last_chunk && !p->req.message_complete)) {
                /* our own pause: go on */
                llhttp_resume(&p->llhttp);
                continue;
            }
            *consumed = (size_t)(cur - data);
            p->paused = 1;
            return PS_HTTP1_PAUSED;
        case HPE_PAUSED_UPGRADE:
            /* The bytes after an upgrade request are another protocol: the
             * request is answered and the connection closed. */
            *consumed = (size_t)(llhttp_get_error_pos(&p->llhttp) - data);
            p->req.message_complete = 1;
            p->req.keep_alive = 0;
            p->paused = 1;
            return PS_HTTP1_PAUSED;
        default:
            *consumed = len;
            set_error(p, err);
            return PS_HTTP1_ERROR;
        }
    }
}

/* ---- responses ---- */

static int server_owned(ps_slice_t name)
{
    return (name.len == 10 && PS_SLICE_IEQ(name, "connection")) ||
           (name.len == 17 && PS_SLICE_IEQ(name, "transfer-encoding")) ||
           (name.len == 10 && PS_SLICE_IEQ(name, "keep-alive"));
}

int ps_http1_write_head(ps_buf_t *out, ps_slice_t status, const ps_header_t *h, size_t n,
                        const ps_slice_t *extra, size_t nextra)
{
    size_t need = 9 + status.len + 2 + 2;
    for (size_t i = 0; i < n; i++)
        need += h[i].name.len + h[i].value.len + 4;
    for (size_t i = 0; i < nextra; i++)
        need += extra[i].len;
    int rc = ps_buf_reserve(out, need);
    if (rc < 0)
        return rc;
    char *w = out->data + out->len;
    memcpy(w, "HTTP/1.1 ", 9);
    w += 9;
    memcpy(w, status.base, status.len);
    w += status.len;
    *w++ = '\r';
    *w++ = '\n';
    int length_done = 0;
    for (size_t i = 0; i < n; i++) {
        if (server_owned(h[i].name))
            continue;
        if (h[i].name.len == 14 && PS_SLICE_IEQ(h[i].name, "content-length")) {
            if (length_done++) /* equal repeats (scan_head refused unequal ones) */
                continue;
        }
        memcpy(w, h[i].name.base, h[i].name.len);
        w += h[i].name.len;
        *w++ = ':';
        *w++ = ' ';
        memcpy(w, h[i].value.base, h[i].value.len);
        w += h[i].value.len;
        *w++ = '\r';
        *w++ = '\n';
    }
    for (size_t i = 0; i < nextra; i++) {
        memcpy(w, extra[i].base, extra[i].len);
        w += extra[i].len;
    }
    *w++ = '\r';
    *w++ = '\n';
    out->len = (size_t)(w - out->data);
    return 0;
}

/* The body is the reason phrase; its length is spelled out below. */
#define ERROR_RESPONSE(code, reason, len)                                                          \
    {                                                                                              \
        code, PS_SLICE_LIT("HTTP/1.1 " #code " " reason "\r\n"                                     \
                           "Content-Type: text/plain; charset=utf-8\r\n"                           \
                           "Content-Length: " #len "\r\n"                                          \
                           "Connection: close\r\n\r\n" reason)                                     \
    }

static const struct {
    int status;
    ps_slice_t response;
} canned[] = {
    ERROR_RESPONSE(400, "Bad Request", 11),
    ERROR_RESPONSE(403, "Forbidden", 9),
    ERROR_RESPONSE(408, "Request Timeout", 15),
    ERROR_RESPONSE(413, "Content Too Large", 17),
    ERROR_RESPONSE(414, "URI Too Long", 12),
    ERROR_RESPONSE(431, "Request Header Fields Too Large", 31),
    ERROR_RESPONSE(500, "Internal Server Error", 21),
    ERROR_RESPONSE(501, "Not Implemented", 15),
    ERROR_RESPONSE(503, "Service Unavailable", 19),
    ERROR_RESPONSE(505, "HTTP Version Not Supported", 26),
};

ps_slice_t ps_http1_error_response(int status)
{
    for (size_t i = 0; i < PS_ARRAY_LEN(canned); i++)
        if (canned[i].status == status)
            return canned[i].response;
    return canned[0].response;
}

const ps_slice_t ps_http1_continue = PS_SLICE_LIT("HTTP/1.1 100 Continue\r\n\r\n");

int ps_http1_method_id(ps_slice_t method)
{
    int k = known_method(method.base, method.len);
    return k >= 0 ? known_methods[k].id : PS_METHOD_OTHER;
}

int ps_http1_write_last_chunk(ps_buf_t *out, const ps_header_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!ps_http_valid_field(h[i].name, h[i].value))
            return -EINVAL;
    if (ps_buf_append(out, "0\r\n", 3) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (ps_buf_append_slice(out, h[i].name) < 0 || ps_buf_append(out, ": ", 2) < 0 ||
            ps_buf_append_slice(out, h[i].value) < 0 || ps_buf_append(out, "\r\n", 2) < 0)
            return -ENOMEM;
    return ps_buf_append(out, "\r\n", 2) < 0 ? -ENOMEM : 0;
}
