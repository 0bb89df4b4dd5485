/* Request IDs and traceparent: see trace.h. */
#include "trace.h"

#include <string.h>

int ps_request_id_valid(ps_slice_t v)
{
    if (v.len == 0 || v.len > PS_REQUEST_ID_MAX)
        return 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.base[i];
        if (c < 0x21 || c > 0x7e || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

void ps_request_id_format(const uint8_t random[16], char out[PS_REQUEST_ID_HEX])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[random[i] >> 4];
        out[2 * i + 1] = hex[random[i] & 15];
    }
}

/* n lowercase hex digits at p, not all zero when nonzero is set. */
static int lower_hex(const char *p, size_t n, int nonzero)
{
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
        any |= c != '0';
    }
    return any || !nonzero;
}

static int hex_value(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2. */
#define TRACEPARENT_LEN 55

int ps_traceparent_parse(ps_slice_t v, ps_traceparent_t *out)
{
    const char *p = v.base;
    memset(out, 0, sizeof(*out));
    if (v.len < TRACEPARENT_LEN || p[2] != '-' || p[35] != '-' || p[52] != '-')
        return -1;
    if (!lower_hex(p, 2, 0) || memcmp(p, "ff", 2) == 0)
        return -1;
    int v00 = memcmp(p, "00", 2) == 0;
    /* Version 00 is exactly its 55 characters; a later one may add fields after a '-'. */
    if (v.len > TRACEPARENT_LEN && (v00 || p[TRACEPARENT_LEN] != '-'))
        return -1;
    if (!lower_hex(p + 3, 32, 1) || !lower_hex(p + 36, 16, 1) || !lower_hex(p + 53, 2, 0))
        return -1;
    out->version = (ps_slice_t){p, 2};
    out->trace_id = (ps_slice_t){p + 3, 32};
    out->parent_id = (ps_slice_t){p + 36, 16};
    out->flags = (uint8_t)(hex_value(p[53]) << 4 | hex_value(p[54]));
    return 0;
}
