/* wsload: a WebSocket echo load client for the websocket-echo benchmark.
 *
 *     wsload -p PORT [-h 127.0.0.1] [-u /] [-c 16] [-s 64] [-d 10] [-n COUNT] [-z] [-b]
 *
 * Opens C connections, upgrades each to a WebSocket (RFC 6455), optionally offering
 * permessage-deflate (RFC 7692, -z), then on every connection sends one message of S
 * bytes, waits for its echo, checks it is the same bytes, and sends the next, for D
 * seconds. One thread, epoll, non-blocking sockets: the client must cost the machine
 * much less than the server it measures, so it prints its own CPU time too.
 *
 * -n COUNT sends COUNT messages in all and stops once their echoes are in (or D seconds
 * passed): a fixed amount of work, for counting the server's instructions per message.
 *
 * Messages are text frames (-b: binary) cut from 1 MiB of JSON-like records (random
 * numbers, words from a small vocabulary), each at a random offset: deflate finds the
 * redundancy of ordinary JSON in them, not a copy of the previous message. The client
 * compresses with ISA-L's igzip at its level 1 (a quarter of zlib level 1's CPU, so that
 * its own cost stays small) and inflates with zlib; the server picks its own level.
 *
 * Prints one JSON object: messages echoed in the measured period, messages/s, round-trip
 * p50/p99/max in ms, errors, whether deflate was negotiated on every connection, the
 * server's Sec-WebSocket-Extensions answer, bytes on the wire, the client's CPU seconds
 * and CPU share. Exit status 0 when every connection upgraded, 1 otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <isa-l/igzip_lib.h>
#include <zlib.h>

#define CORPUS_SIZE (1 << 20)
#define HIST_US 10          /* histogram bucket width, microseconds */
#define HIST_BUCKETS 200000 /* up to 2 s; slower round trips count in the last */
#define DEFLATE_TAIL "\x00\x00\xff\xff"

enum state { CONNECTING, HANDSHAKE, OPEN, DEAD };

struct conn {
    int fd;
    enum state state;
    unsigned char *out; /* the frame being written */
    size_t out_len, out_off, out_cap;
    unsigned char *in; /* bytes read, not parsed yet */
    size_t in_len, in_cap;
    unsigned char *msg; /* payload of the message being received (fragments joined) */
    size_t msg_len, msg_cap;
    int msg_compressed, msg_opcode;
    const unsigned char *sent; /* the payload of the message in flight */
    size_t sent_len;
    double sent_at;
    int deflate, reset_deflate, want_out;
    struct isal_zstream *def; /* then its level buffer */
    z_stream inf;
    int zinit;
};

static struct {
    const char *host, *path;
    int port, conns, size, offer_deflate, binary;
    double duration;
    long count; /* messages to send in all; 0: as many as fit in the duration */
} opt = {"127.0.0.1", "/", 0, 16, 64, 0, 0, 10.0, 0};
static long sent_total; /* messages sent while measuring */

static int ep = -1; /* the epoll instance */
static unsigned char *corpus;
static unsigned char *scratch; /* inflate / deflate output */
static size_t scratch_cap;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t hist[HIST_BUCKETS];
static double max_rtt;
static long messages, errors, upgraded, deflated;
static unsigned long long bytes_out, bytes_in;
static int measuring;
static char extensions[256] = "";
static char first_error[200] = "";

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q == NULL) {
        perror("realloc");
        exit(2);
    }
    return q;
}

static void reserve(unsigned char **buf, size_t *cap, size_t need)
{
    if (need > *cap) {
        *cap = need * 2;
        *buf = xrealloc(*buf, *cap);
    }
}

static void make_corpus(void)
{
    static const char *words[] = {
        "server",  "answers", "message", "client",  "socket",   "frame",   "deflate", "window",
        "buffer",  "event",   "loop",    "request", "response", "header",  "payload", "stream",
        "python",  "worker",  "process", "thread",  "queue",    "timeout", "close",   "open",
        "send",    "receive", "echo",    "value",   "list",     "item",    "count",   "user",
        "status",  "error",   "data",    "text",    "length",   "offset",  "read",    "write",
        "connect", "accept",  "upgrade", "version", "channel",  "room",    "chat",    "update",
        "price",   "order",   "trade",   "market",  "ticker",   "account", "balance", "notice"};
    static const char *states[] = {"open", "filled", "cancelled", "pending"};
    size_t n = sizeof words / sizeof words[0], pos = 0;
    corpus = xrealloc(NULL, CORPUS_SIZE + 256);
    /* JSON-like records, as WebSocket applications send them */
    while (pos < CORPUS_SIZE) {
        uint64_t r = next_rand();
        pos += snprintf((char *)corpus + pos, 256,
                        "{\"id\": %u, \"user\": \"%s_%s\", \"text\": \"%s %s %s %s\", "
                        "\"price\": %u.%02u, \"qty\": %u, \"status\": \"%s\"}, ",
                        (unsigned)(r % 1000000), words[r % n], words[(r >> 8) % n],
                        words[(r >> 16) % n], words[(r >> 24) % n], words[(r >> 32) % n],
                        words[(r >> 40) % n], (unsigned)((r >> 20) % 5000),
                        (unsigned)((r >> 12) % 100), (unsigned)((r >> 44) % 900 + 1),
                        states[(r >> 50) % 4]);
    }
}

static void fail(struct conn *c, const char *why)
{
    if (c->state != DEAD) {
        errors++;
        if (!first_error[0])
            snprintf(first_error, sizeof first_error, "%s", why);
        close(c->fd);
        c->state = DEAD;
    }
}

/* Append one masked frame (FIN set) with OPCODE and PAYLOAD to c->out. */
static void put_frame(struct conn *c, int opcode, int rsv1, const unsigned char *payload,
                      size_t len)
{
    unsigned char head[14];
    size_t h = 0;
    head[h++] = 0x80 | (rsv1 ? 0x40 : 0) | opcode;
    if (len < 126) {
        head[h++] = 0x80 | len;
    } else if (len < 65536) {
        head[h++] = 0x80 | 126;
        head[h++] = len >> 8;
        head[h++] = len & 0xff;
    } else {
        head[h++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            head[h++] = (len >> (8 * i)) & 0xff;
    }
    uint32_t key32 = (uint32_t)next_rand();
    unsigned char key[4];
    memcpy(key, &key32, 4);
    memcpy(head + h, key, 4);
    h += 4;
    reserve(&c->out, &c->out_cap, c->out_len + h + len + 8);
    memcpy(c->out + c->out_len, head, h);
    unsigned char *dst = c->out + c->out_len + h;
    uint64_t key64;
    for (int i = 0; i < 8; i++)
        ((unsigned char *)&key64)[i] = key[i % 4];
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, payload + i, 8);
        v ^= key64;
        memcpy(dst + i, &v, 8);
    }
    for (; i < len; i++)
        dst[i] = payload[i] ^ key[i % 4];
    c->out_len += h + len;
}

/* Write what c->out holds; what the socket does not take waits for EPOLLOUT. */
static int flush_out(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) {
                if (!c->want_out) {
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                    c->want_out = 1;
                }
                return 0;
            }
            fail(c, "send failed");
            return -1;
        }
        c->out_off += n;
        bytes_out += n;
    }
    c->out_off = c->out_len = 0;
    if (c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = 0;
    }
    return 0;
}

static void send_message(struct conn *c)
{
    if (measuring)
        sent_total++;
    size_t off = next_rand() % (CORPUS_SIZE - opt.size);
    c->sent = corpus + off;
    c->sent_len = opt.size;
    int opcode = opt.binary ? 2 : 1;
    if (c->deflate) {
        reserve(&scratch, &scratch_cap, opt.size + opt.size / 2 + 64);
        c->def->next_in = (uint8_t *)c->sent;
        c->def->avail_in = (uint32_t)c->sent_len;
        c->def->flush = SYNC_FLUSH;
        size_t got = 0;
        do {
            reserve(&scratch, &scratch_cap, got + 1024);
            c->def->next_out = scratch + got;
            c->def->avail_out = (uint32_t)(scratch_cap - got);
            if (isal_deflate(c->def) != COMP_OK) {
                fail(c, "igzip failed");
                return;
            }
            got = scratch_cap - c->def->avail_out;
        } while (c->def->avail_out == 0 || c->def->avail_in > 0);
        if (got >= 4 && memcmp(scratch + got - 4, DEFLATE_TAIL, 4) == 0)
            got -= 4;
        if (c->reset_deflate)
            isal_deflate_reset(c->def);
        put_frame(c, opcode, 1, scratch, got);
    } else {
        put_frame(c, opcode, 0, c->sent, c->sent_len);
    }
    c->sent_at = now();
    flush_out(c);
}

static void record(double rtt)
{
    size_t b = (size_t)(rtt * 1e6 / HIST_US);
    hist[b < HIST_BUCKETS ? b : HIST_BUCKETS - 1]++;
    if (rtt > max_rtt)
        max_rtt = rtt;
}

/* A whole message arrived in c->msg: check it against what was sent, send the next. */
static void on_message(struct conn *c)
{
    const unsigned char *data = c->msg;
    size_t len = c->msg_len;
    if (c->msg_compressed) {
        reserve(&c->msg, &c->msg_cap, c->msg_len + 4);
        memcpy(c->msg + c->msg_len, DEFLATE_TAIL, 4);
        c->inf.next_in = c->msg;
        c->inf.avail_in = c->msg_len + 4;
        size_t got = 0;
        int rc;
        do {
            reserve(&scratch, &scratch_cap, got + opt.size + 1024);
            c->inf.next_out = scratch + got;
            c->inf.avail_out = scratch_cap - got;
            rc = inflate(&c->inf, Z_SYNC_FLUSH);
            got = scratch_cap - c->inf.avail_out;
        } while (rc == Z_OK && (c->inf.avail_in > 0 || c->inf.avail_out == 0));
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            fail(c, "inflate failed on the echo");
            return;
        }
        data = scratch;
        len = got;
    }
    if (c->sent == NULL || len != c->sent_len || memcmp(data, c->sent, len) != 0) {
        fail(c, "echo differs from the message sent");
        return;
    }
    if (c->msg_opcode != (opt.binary ? 2 : 1)) {
        fail(c, "echo has another frame type");
        return;
    }
    if (measuring) {
        messages++;
        record(now() - c->sent_at);
    }
    c->sent = NULL;
    if (opt.count == 0 || sent_total < opt.count)
        send_message(c);
}

/* Parse the frames in c->in. */
static void parse_frames(struct conn *c)
{
    size_t pos = 0;
    while (c->state == OPEN) {
        unsigned char *p = c->in + pos;
        size_t avail = c->in_len - pos;
        if (avail < 2)
            break;
        int fin = p[0] & 0x80, rsv1 = p[0] & 0x40, opcode = p[0] & 0x0f;
        if (p[1] & 0x80) {
            fail(c, "server frame is masked");
            return;
        }
        uint64_t len = p[1] & 0x7f;
        size_t h = 2;
        if (len == 126) {
            if (avail < 4)
                break;
            len = (p[2] << 8) | p[3];
            h = 4;
        } else if (len == 127) {
            if (avail < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = (len << 8) | p[2 + i];
            h = 10;
        }
        if (avail < h + len)
            break;
        unsigned char *payload = p + h;
        pos += h + len;
        if (opcode == 8) {
            fail(c, "server closed the WebSocket");
            return;
        } else if (opcode == 9) {
            put_frame(c, 10, 0, payload, len);
            flush_out(c);
        } else if (opcode == 10) {
            /* an unsolicited pong: ignored */
        } else {
            if (opcode != 0) {
                c->msg_len = 0;
                c->msg_opcode = opcode;
                c->msg_compressed = rsv1 != 0;
            }
            reserve(&c->msg, &c->msg_cap, c->msg_len + len + 8);
            memcpy(c->msg + c->msg_len, payload, len);
            c->msg_len += len;
            if (fin)
                on_message(c);
        }
    }
    if (c->state == DEAD)
        return;
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

static void handshake_answer(struct conn *c)
{
    c->in[c->in_len] = 0;
    char *end = strstr((char *)c->in, "\r\n\r\n");
    if (end == NULL)
        return;
    if (strncmp((char *)c->in, "HTTP/1.1 101", 12) != 0) {
        char why[120];
        char *eol = strstr((char *)c->in, "\r\n");
        snprintf(why, sizeof why, "upgrade refused: %.*s", (int)(eol - (char *)c->in),
                 (char *)c->in);
        fail(c, why);
        return;
    }
    *end = 0;
    for (char *line = strstr((char *)c->in, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "Sec-WebSocket-Extensions:", 25) == 0) {
            char *v = line + 27;
            while (*v == ' ')
                v++;
            char *eol = strstr(v, "\r\n");
            size_t n = eol ? (size_t)(eol - v) : strlen(v);
            if (n >= sizeof extensions)
                n = sizeof extensions - 1;
            memcpy(extensions, v, n);
            extensions[n] = 0;
            if (strstr(extensions, "permessage-deflate"))
                c->deflate = 1;
            if (strstr(extensions, "client_no_context_takeover"))
                c->reset_deflate = 1;
        }
    }
    if (c->deflate) {
        size_t level_buf = ISAL_DEF_LVL1_REQ + ISAL_DEF_LVL1_TOKEN_SIZE * 4 * 1024;
        c->def = malloc(sizeof(*c->def) + level_buf);
        if (c->def == NULL) {
            perror("wsload: malloc");
            exit(2);
        }
        isal_deflate_init(c->def);
        c->def->level = 1;
        c->def->level_buf = (uint8_t *)(c->def + 1);
        c->def->level_buf_size = (uint32_t)level_buf;
        c->def->gzip_flag = IGZIP_DEFLATE;
        inflateInit2(&c->inf, -15);
        c->zinit = 1;
        deflated++;
    }
    size_t used = end + 4 - (char *)c->in;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    c->state = OPEN;
    upgraded++;
}

static void on_readable(struct conn *c)
{
    for (;;) {
        reserve(&c->in, &c->in_cap, c->in_len + 65536 + 1);
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (n < 0) {
            if (errno == EAGAIN)
                break;
            fail(c, "recv failed");
            return;
        }
        if (n == 0) {
            fail(c, "server closed the connection");
            return;
        }
        bytes_in += n;
        c->in_len += n;
        if (c->state == HANDSHAKE)
            handshake_answer(c);
        if (c->state == OPEN)
            parse_frames(c);
        if (c->state == DEAD)
            return;
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: wsload -p PORT [-h HOST] [-u PATH] [-c CONNS] [-s BYTES] "
                    "[-d SECONDS] [-n COUNT] [-z] [-b]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int ch;
    while ((ch = getopt(argc, argv, "h:p:u:c:s:d:n:zb")) != -1) {
        switch (ch) {
        case 'h':
            opt.host = optarg;
            break;
        case 'p':
            opt.port = atoi(optarg);
            break;
        case 'u':
            opt.path = optarg;
            break;
        case 'c':
            opt.conns = atoi(optarg);
            break;
        case 's':
            opt.size = atoi(optarg);
            break;
        case 'd':
            opt.duration = atof(optarg);
            break;
        case 'n':
            opt.count = atol(optarg);
            break;
        case 'z':
            opt.offer_deflate = 1;
            break;
        case 'b':
            opt.binary = 1;
            break;
        default:
            usage();
        }
    }
    if (opt.port <= 0 || opt.conns <= 0 || opt.size <= 0 || opt.size > CORPUS_SIZE / 2)
        usage();
    make_corpus();
    struct conn *conns = calloc(opt.conns, sizeof *conns);
    ep = epoll_create1(0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(opt.port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1)
        usage();
    char req[512];
    int req_len =
        snprintf(req, sizeof req,
                 "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n%s\r\n",
                 opt.path, opt.host, opt.port,
                 opt.offer_deflate ? "Sec-WebSocket-Extensions: permessage-deflate\r\n" : "");
    for (int i = 0; i < opt.conns; i++) {
        struct conn *c = &conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            fail(c, "connect failed");
            continue;
        }
        c->state = HANDSHAKE;
        reserve(&c->out, &c->out_cap, req_len);
        memcpy(c->out, req, req_len);
        c->out_len = req_len;
        flush_out(c);
        /* blocking connect and handshake write, then non-blocking for the run */
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    struct epoll_event evs[64];
    double start = now(), deadline = start + 10.0;
    /* Handshakes first (10 s at most), then the first message on every connection. */
    while (upgraded + errors < opt.conns && now() < deadline) {
        int n = epoll_wait(ep, evs, 64, 100);
        for (int i = 0; i < n; i++)
            on_readable(evs[i].data.ptr);
    }
    for (int i = 0; i < opt.conns; i++)
        if (conns[i].state == HANDSHAKE)
            fail(&conns[i], "no upgrade answer in 10 s");
    measuring = 1;
    double cpu0 = cpu_seconds(), t0 = now();
    unsigned long long out0 = bytes_out, in0 = bytes_in;
    for (int i = 0; i < opt.conns && (opt.count == 0 || sent_total < opt.count); i++)
        if (conns[i].state == OPEN)
            send_message(&conns[i]);
    double end = t0 + opt.duration, t;
    while ((t = now()) < end && upgraded > 0 && (opt.count == 0 || messages < opt.count)) {
        int timeout = (int)((end - t) * 1000) + 1;
        int n = epoll_wait(ep, evs, 64, timeout < 100 ? timeout : 100);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->state == OPEN)
                on_readable(c);
            if (c->state == OPEN && c->out_len > 0)
                flush_out(c);
        }
    }
    measuring = 0;
    double elapsed = now() - t0, cpu = cpu_seconds() - cpu0;
    for (int i = 0; i < opt.conns; i++) {
        struct conn *c = &conns[i];
        if (c->state == OPEN) {
            static const unsigned char bye[2] = {0x03, 0xe8}; /* 1000 */
            fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
            c->out_len = c->out_off = 0;
            put_frame(c, 8, 0, bye, 2);
            send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
            close(c->fd);
        }
        if (c->zinit) {
            free(c->def);
            inflateEnd(&c->inf);
        }
        free(c->out);
        free(c->in);
        free(c->msg);
    }
    double pct[2] = {0, 0}, qs[2] = {0.50, 0.99};
    for (int q = 0; q < 2; q++) {
        long want = (long)(qs[q] * messages + 0.5), seen = 0;
        if (want < 1)
            want = 1;
        for (int b = 0; b < HIST_BUCKETS && messages; b++) {
            seen += hist[b];
            if (seen >= want) {
                pct[q] = (b + 0.5) * HIST_US / 1000.0;
                break;
            }
        }
    }
    for (char *e = extensions; *e; e++)
        if (*e == '"' || *e == '\\')
            *e = '\'';
    for (char *e = first_error; *e; e++)
        if (*e == '"' || *e == '\\' || (unsigned char)*e < 32)
            *e = '\'';
    printf("{\"connections\": %d, \"upgraded\": %ld, \"size\": %d, \"duration_s\": %.3f, "
           "\"messages\": %ld, \"msg_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
           "\"max_ms\": %.3f, \"errors\": %ld, \"first_error\": \"%s\", "
           "\"deflate_offered\": %s, \"deflate\": %s, \"extensions\": \"%s\", "
           "\"bytes_out\": %llu, \"bytes_in\": %llu, \"client_cpu_s\": %.3f, "
           "\"client_cpu_pct\": %.1f}\n",
           opt.conns, upgraded, opt.size, elapsed, messages, messages / elapsed, pct[0], pct[1],
           max_rtt * 1000, errors, first_error, opt.offer_deflate ? "true" : "false",
           upgraded > 0 && deflated == upgraded ? "true" : "false", extensions, bytes_out - out0,
           bytes_in - in0, cpu, 100.0 * cpu / elapsed);
    free(conns);
    free(corpus);
    free(scratch);
    return upgraded == opt.conns ? 0 : 1;
}
