"""HTTP/2 against RFC 9113, end to end: an h2spec-style checklist of the sections a server
must enforce (preface, SETTINGS, frame size, flow control, stream states, header
validation), the known attacks against a real server process (each bounded, the attacker
gets GOAWAY or RST_STREAM, a second client is served meanwhile), frameworks, big
concurrent transfers with bounded RSS, 103 Early Hints, and the gunicorn worker.

Invalid frames are written by hand (`Raw` below: frame bytes, HPACK from the hpack library),
since the `h2` library refuses to send them; valid traffic uses the `H2` client of
test_h2.py, httpx with http2=True and curl (h2load runs in test_h2.py).

Where RFC 9113 allows more than one answer (a stream error or a connection error, a GOAWAY
or just a close), the test accepts exactly those; the docstring says what the server does.
"""

import asyncio
import hashlib
import json
import socket
import ssl
import struct
import subprocess
import threading
import time

import h2.errors
import h2.events
import h2.settings
import hpack
import httpx
import pytest
from helpers import HOST, UNDER_ASAN, rss_kib, run_cli, run_server
from test_h2 import H2, needs_curl

APP_WSGI = "apps.h2_rfc_apps:wsgi"
APP_ASGI = "apps.h2_rfc_apps:asgi"

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
E = h2.errors.ErrorCodes
S = h2.settings.SettingCodes
MIB = 1 << 20

# A second client must be answered within this while an attacker floods the worker: far
# more than it takes, with headroom for a 2-core machine shared with other test runs.
SERVED_WITHIN = 2.0


def frame(ftype, flags, sid, payload=b""):
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([ftype, flags])
        + struct.pack(">I", sid & 0x7FFFFFFF)
        + bytes(payload)
    )


def settings_payload(pairs):
    return b"".join(struct.pack(">HI", k, v) for k, v in pairs)


def hpack_int(value, prefix_bits, first=0):
    """RFC 7541 5.1 integer with an N-bit prefix; `first` holds the pattern bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name, value, indexing=False):
    """A literal field with a new name, not Huffman coded (names are sent as given)."""
    name, value = name.encode(), value.encode()
    head = b"\x40" if indexing else b"\x00"
    return head + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


REQUEST = [(":method", "GET"), (":scheme", "http"), (":path", "/ok"), (":authority", "h2.test")]


def block(fields):
    return b"".join(hpack_literal(n, v) for n, v in fields)


class Raw:
    """One HTTP/2 connection written frame by frame. It answers the server's SETTINGS and
    PINGs, opens the windows as DATA arrives, and records what the server said: response
    statuses, bodies, RST_STREAM codes, the GOAWAY, and whether the connection closed."""

    def __init__(self, port, settings=(), preface=PREFACE, timeout=10.0, first=None, tls=None):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        if tls is not None:  # an ssl.SSLContext offering h2 by ALPN
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.dec = hpack.Decoder()
        self.buf = b""
        self.closed = False
        self.goaway = None  # (last stream id, error code)
        self.rst = {}
        self.status = {}
        self.info = {}
        self.body = {}
        self.ended = set()
        self.acked = 0  # SETTINGS ACKs received
        self.server_settings = {}
        self.pending = b""  # a header block waiting for its CONTINUATION
        if preface is not None:
            start = preface
            start += (
                first if first is not None else frame(SETTINGS, 0, 0, settings_payload(settings))
            )
            self.send(start)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def send(self, data):
        """Writes data; a server that closed already only marks the connection closed."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.closed = True

    def headers(self, sid, fields, end_stream=True, raw=None):
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        self.send(frame(HEADERS, flags, sid, raw if raw is not None else block(fields)))

    def _frame(self):
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    hd, self.buf = self.buf[: 9 + length], self.buf[9 + length :]
                    sid = int.from_bytes(hd[5:9], "big") & 0x7FFFFFFF
                    return hd[3], hd[4], sid, hd[9:]
            try:
                data = self.sock.recv(1 << 16)
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            if not data:
                self.closed = True
                return None
            self.buf += data

    def _process(self, ftype, flags, sid, payload):
        if ftype == SETTINGS:
            if flags & ACK:
                self.acked += 1
            else:
                for i in range(0, len(payload), 6):
                    k, v = struct.unpack(">HI", payload[i : i + 6])
                    self.server_settings[k] = v
                self.send(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, payload))
        elif ftype in (HEADERS, CONTINUATION):
            self.pending += payload
            if flags & END_HEADERS:
                decoded = self.dec.decode(self.pending)
                fields = dict(decoded)
                self.pending = b""
                status = int(fields.get(":status", 0))
                if 100 <= status < 200:
                    self.info.setdefault(sid, []).append(decoded)
                elif status:
                    self.status[sid] = status
            if flags & END_STREAM:
                self.ended.add(sid)
        elif ftype == DATA:
            self.body[sid] = self.body.get(sid, b"") + payload
            if payload:
                inc = struct.pack(">I", len(payload))
                self.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, sid, inc))
            if flags & END_STREAM:
                self.ended.add(sid)
        elif ftype == RST_STREAM:
            self.rst[sid] = struct.unpack(">I", payload)[0]
        elif ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            self.goaway = (last & 0x7FFFFFFF, code)

    def until(self, predicate, limit=10.0):
        """Reads frames until predicate() holds, the connection closes or limit seconds
        pass. Returns predicate()."""
        deadline = time.monotonic() + limit
        while not predicate() and not self.closed and time.monotonic() < deadline:
            try:
                f = self._frame()
            except TimeoutError:
                break
            if f is not None:
                self._process(*f)
        return predicate()

    def until_closed(self, limit=10.0):
        return self.until(lambda: self.closed, limit)

    def response(self, sid, limit=10.0):
        self.until(lambda: sid in self.ended or sid in self.rst, limit)
        return self.status.get(sid), self.body.get(sid, b""), self.rst.get(sid)

    def connection_error(self, code, limit=10.0):
        """The server ends the connection: GOAWAY with `code`, then it closes."""
        self.until_closed(limit)
        assert self.goaway is not None, f"no GOAWAY ({self.status}, {self.rst})"
        assert self.goaway[1] == code, f"GOAWAY {E(self.goaway[1])!r}, not {code!r}"
        assert self.closed, "the connection stayed open after the GOAWAY"

    def stream_error(self, sid, code, limit=10.0):
        """The server resets only the stream: RST_STREAM with `code` and no GOAWAY; the
        connection serves the next stream."""
        self.until(lambda: sid in self.rst or self.goaway is not None, limit)
        assert self.goaway is None, f"GOAWAY {self.goaway} where RST_STREAM was due"
        assert sid in self.rst, f"no RST_STREAM on {sid} (status {self.status.get(sid)})"
        assert self.rst[sid] == code, f"RST_STREAM {E(self.rst[sid])!r}, not {code!r}"
        assert sid not in self.status, "the malformed request reached the application"
        nxt = sid + 2
        self.headers(nxt, REQUEST)
        status, body, rst = self.response(nxt)
        assert (status, body, rst) == (200, b"2 /ok", None), "the connection went on badly"


def assert_h2_serving(port, path="/after"):
    """A new connection is served (the server outlived what the test did)."""
    with H2(port) as c:
        r = c.response(c.request(path))
        assert r["status"] == 200 and r["body"].endswith(path.encode()), r


@pytest.fixture(scope="module")
def srv():
    with run_server(APP_ASGI, "--http", "2") as server:
        yield server


@pytest.fixture(scope="module")
def wsgi_srv():
    with run_server(
        APP_WSGI, "--limit-request-body", str(64 * MIB), "--body-spool-threshold", str(MIB)
    ) as server:
        yield server


@pytest.fixture
def after(srv):
    """Each test: the server serves a new connection afterwards."""
    yield
    assert_h2_serving(srv.port)


# ---- 3.4 connection preface ------------------------------------------------------------


def test_preface_ok_settings_and_ack(srv, after):
    """3.4/6.5.3: the server's preface is a SETTINGS frame, and it ACKs ours."""
    with Raw(srv.port, settings=[(S.MAX_CONCURRENT_STREAMS, 10)]) as c:
        assert c.until(lambda: c.acked >= 1 and c.server_settings)
        assert c.server_settings[S.ENABLE_PUSH] == 0
        assert c.server_settings[S.MAX_CONCURRENT_STREAMS] == 100
        assert c.server_settings[S.MAX_FRAME_SIZE] == 16384
        c.headers(1, REQUEST)
        assert c.response(1) == (200, b"2 /ok", None)


@pytest.mark.parametrize(
    "preface",
    [b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n", b"\x00" * 24],
)
def test_bad_preface_is_a_protocol_error(srv, after, preface):
    """3.4: an invalid preface is a connection error PROTOCOL_ERROR, the GOAWAY optional.
    The server (--http 2) closes the connection, but first writes an HTTP/1.1 505 (the
    bytes are read as an HTTP/1 request, which --http 2 refuses so): not a GOAWAY, which
    the RFC allows to be left out, and harmless to a client that does not speak HTTP/2."""
    with socket.create_connection((HOST, srv.port), timeout=10) as s:
        s.sendall(preface + frame(SETTINGS, 0, 0))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if data.startswith(b"HTTP/1.1 505 "):
        return
    codes = []  # else frames (SETTINGS, GOAWAY) or nothing
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if data[3] == GOAWAY:
            codes.append(int.from_bytes(data[13:17], "big"))
        data = data[9 + length :]
    assert codes in ([], [E.PROTOCOL_ERROR]), codes


def test_preface_not_followed_by_settings(srv, after):
    """3.4: the preface must be followed by SETTINGS: a PING first is PROTOCOL_ERROR."""
    with Raw(srv.port, first=frame(PING, 0, 0, b"12345678")) as c:
        c.connection_error(E.PROTOCOL_ERROR)


# ---- 6.5 SETTINGS ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "pairs, code",
    [
        ([(S.ENABLE_PUSH, 2)], E.PROTOCOL_ERROR),
        ([(S.INITIAL_WINDOW_SIZE, 1 << 31)], E.FLOW_CONTROL_ERROR),
        ([(S.MAX_FRAME_SIZE, 16383)], E.PROTOCOL_ERROR),
        ([(S.MAX_FRAME_SIZE, 1 << 24)], E.PROTOCOL_ERROR),
    ],
    ids=["enable-push-2", "window-2^31", "frame-size-16383", "frame-size-2^24"],
)
def test_settings_with_bad_values(srv, after, pairs, code):
    """6.5.2: values out of range are connection errors."""
    with Raw(srv.port) as c:
        c.send(frame(SETTINGS, 0, 0, settings_payload(pairs)))
        c.connection_error(code)


@pytest.mark.parametrize(
    "raw, code",
    [
        (frame(SETTINGS, ACK, 0, settings_payload([(S.ENABLE_PUSH, 0)])), E.FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0, 0, b"\x00\x02\x00\x00\x00"), E.FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0, 1, settings_payload([(S.ENABLE_PUSH, 0)])), E.PROTOCOL_ERROR),
    ],
    ids=["ack-with-payload", "length-not-6n", "on-a-stream"],
)
def test_malformed_settings_frames(srv, after, raw, code):
    """6.5: an ACK with a payload or a length not a multiple of 6 is FRAME_SIZE_ERROR; a
    SETTINGS frame on a stream is PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(raw)
        c.connection_error(code)


def test_unknown_setting_is_ignored(srv, after):
    """6.5.2: an unknown setting identifier is ignored."""
    with Raw(srv.port, settings=[(0xFA, 7)]) as c:
        assert c.until(lambda: c.acked >= 1)
        c.headers(1, REQUEST)
        assert c.response(1) == (200, b"2 /ok", None)


# ---- 4.2 frame size ----------------------------------------------------------------------


def test_data_over_max_frame_size(srv, after):
    """4.2: a frame over SETTINGS_MAX_FRAME_SIZE (16384 here) is FRAME_SIZE_ERROR, as a
    stream or connection error; the server makes it a connection error."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), *REQUEST[1:2], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.send(frame(DATA, END_STREAM, 1, b"x" * 16385))
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        if c.goaway is None:
            assert c.rst[1] == E.FRAME_SIZE_ERROR
        else:
            c.connection_error(E.FRAME_SIZE_ERROR)


def test_headers_over_max_frame_size(srv, after):
    """4.2: a HEADERS frame over the frame size limit alters the connection state (HPACK):
    it must be a connection error FRAME_SIZE_ERROR."""
    with Raw(srv.port) as c:
        fields = [*REQUEST, ("x-big", "b" * 16400)]
        c.headers(1, fields)
        c.connection_error(E.FRAME_SIZE_ERROR)


def test_ping_with_wrong_length(srv, after):
    """6.7: a PING whose length is not 8 is a connection error FRAME_SIZE_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(PING, 0, 0, b"1234567"))
        c.connection_error(E.FRAME_SIZE_ERROR)


# ---- 6.9 flow control ----------------------------------------------------------------------


def test_window_update_zero_on_the_connection(srv, after):
    """6.9: a zero increment on the connection is a connection error PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)))
        c.connection_error(E.PROTOCOL_ERROR)


def test_window_update_zero_on_a_stream(srv, after):
    """6.9: a zero increment on a stream is a stream error PROTOCOL_ERROR, which 5.4.1
    lets an endpoint treat as a connection error: nghttp2 does (GOAWAY PROTOCOL_ERROR; the
    frame's payload is not seen before nghttp2 acts on it, so pyserver cannot narrow it)."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), *REQUEST[1:2], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0)))
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        if c.goaway is None:
            c.stream_error(1, E.PROTOCOL_ERROR)
        else:
            c.connection_error(E.PROTOCOL_ERROR)


def test_connection_window_overflow(srv, after):
    """6.9.1: a connection window over 2^31-1 is a connection error FLOW_CONTROL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1)))
        c.connection_error(E.FLOW_CONTROL_ERROR)


def test_stream_window_overflow(srv, after):
    """6.9.1: a stream window over 2^31-1 is a stream error FLOW_CONTROL_ERROR."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), *REQUEST[1:2], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", (1 << 31) - 1)))
        c.stream_error(1, E.FLOW_CONTROL_ERROR)


def test_initial_window_size_change_overflows_a_stream(srv, after):
    """6.9.2: a SETTINGS_INITIAL_WINDOW_SIZE change that takes an open stream's window
    over 2^31-1 is a connection error FLOW_CONTROL_ERROR."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), *REQUEST[1:2], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", (1 << 31) - 1 - 65535)))
        c.send(frame(SETTINGS, 0, 0, settings_payload([(S.INITIAL_WINDOW_SIZE, 65536)])))
        c.connection_error(E.FLOW_CONTROL_ERROR)


def test_data_over_the_window(srv, after):
    """6.9.1: DATA beyond the window the server gave is FLOW_CONTROL_ERROR (the server's
    stream window is 256 KiB; more is sent without waiting for WINDOW_UPDATE)."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), *REQUEST[1:2], (":path", "/echo?delay=5"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        for _ in range(300 * 1024 // 16384):
            c.send(frame(DATA, 0, 1, b"d" * 16384))
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        if c.goaway is None:
            assert c.rst[1] == E.FLOW_CONTROL_ERROR
        else:
            c.connection_error(E.FLOW_CONTROL_ERROR)


# ---- 5.1 stream states ------------------------------------------------------------------


def test_data_on_an_idle_stream(srv, after):
    """5.1: DATA on an idle stream is a connection error PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(DATA, END_STREAM, 1, b"x"))
        c.connection_error(E.PROTOCOL_ERROR)


def test_window_update_on_an_idle_stream(srv, after):
    """5.1: WINDOW_UPDATE on an idle stream is a connection error PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 100)))
        c.connection_error(E.PROTOCOL_ERROR)


def test_even_stream_id_from_the_client(srv, after):
    """5.1.1: streams a client opens have odd ids: HEADERS on 2 is PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.headers(2, REQUEST)
        c.connection_error(E.PROTOCOL_ERROR)


def test_stream_id_lower_than_an_earlier_one(srv, after):
    """5.1.1: a new stream id must be greater than every earlier one: HEADERS on 3 after 5
    is a connection error PROTOCOL_ERROR (the RFC allows STREAM_CLOSED for a stream the
    server knows as closed; stream 3 was never opened)."""
    with Raw(srv.port) as c:
        c.headers(5, REQUEST)
        assert c.response(5)[0] == 200
        c.headers(3, REQUEST)
        c.connection_error(E.PROTOCOL_ERROR)


def test_headers_on_a_closed_stream(srv, after):
    """5.1: a frame other than PRIORITY on a closed stream is STREAM_CLOSED, as a stream or
    a connection error; stream 1 finished, then HEADERS on 1 again."""
    with Raw(srv.port) as c:
        c.headers(1, REQUEST)
        assert c.response(1) == (200, b"2 /ok", None)
        c.headers(1, REQUEST)
        c.until(lambda: c.goaway is not None or c.rst.get(1) is not None)
        if c.goaway is None:
            assert c.rst[1] == E.STREAM_CLOSED
        else:
            assert c.goaway[1] in (E.STREAM_CLOSED, E.PROTOCOL_ERROR), c.goaway
            assert c.until_closed()


def test_data_on_a_closed_stream(srv, after):
    """5.1 closed: DATA on a stream both sides ended is a connection error STREAM_CLOSED
    (nghttp2, which keeps no closed streams, would drop it unseen: the server looks at
    each DATA frame's stream before nghttp2 does)."""
    with Raw(srv.port) as c:
        c.headers(1, REQUEST)
        assert c.response(1) == (200, b"2 /ok", None)
        c.send(frame(DATA, END_STREAM, 1, b"late"))
        c.headers(3, REQUEST)
        c.connection_error(E.STREAM_CLOSED)
        assert 3 not in c.status


def test_headers_on_a_stream_the_client_reset(srv, after):
    """5.1 closed: a frame other than PRIORITY after the peer's RST_STREAM is a stream
    error STREAM_CLOSED; the connection goes on."""
    with Raw(srv.port) as c:
        slow = [*REQUEST[:2], (":path", "/slow?s=5"), REQUEST[3]]
        c.headers(1, slow)
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", E.CANCEL)))
        c.headers(1, [("x-trailer", "1")])
        assert c.until(lambda: 1 in c.rst or c.goaway is not None)
        assert c.goaway is None and c.rst[1] == E.STREAM_CLOSED
        c.headers(3, REQUEST)
        assert c.response(3) == (200, b"2 /ok", None)


def test_frames_on_a_stream_the_server_reset_are_ignored(srv, after):
    """5.4.2/5.1: frames the client had in flight on a stream the server reset are
    ignored (here: more DATA and trailers after RST_STREAM PROTOCOL_ERROR for a body longer
    than its content-length); the connection goes on."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), REQUEST[1], (":path", "/echo"), REQUEST[3]]
        c.headers(1, [*post, ("content-length", "2")], end_stream=False)
        c.send(frame(DATA, 0, 1, b"too long"))
        assert c.until(lambda: 1 in c.rst)
        c.send(frame(DATA, 0, 1, b"more"))
        c.headers(1, [("x-trailer", "1")])
        c.headers(3, REQUEST)
        assert c.response(3) == (200, b"2 /ok", None)
        assert c.goaway is None and c.rst[1] == E.PROTOCOL_ERROR


def test_data_on_a_half_closed_remote_stream(srv, after):
    """5.1 half-closed (remote): DATA after END_STREAM is STREAM_CLOSED (a stream error;
    the RFC lets it be a connection error too)."""
    with Raw(srv.port) as c:
        slow = [*REQUEST[:2], (":path", "/slow?s=1"), REQUEST[3]]
        c.headers(1, slow)
        c.send(frame(DATA, 0, 1, b"late"))
        c.until(lambda: c.goaway is not None or c.rst.get(1) is not None)
        if c.goaway is None:
            assert c.rst[1] == E.STREAM_CLOSED
        else:
            c.connection_error(E.STREAM_CLOSED)


def test_rst_stream_on_an_idle_stream(srv, after):
    """6.4: RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", E.CANCEL)))
        c.connection_error(E.PROTOCOL_ERROR)


def test_continuation_without_headers(srv, after):
    """6.10: CONTINUATION not preceded by HEADERS without END_HEADERS is PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.send(frame(CONTINUATION, END_HEADERS, 1, block(REQUEST)))
        c.connection_error(E.PROTOCOL_ERROR)


def test_other_frame_inside_a_header_block(srv, after):
    """6.10/4.3: a header block must be contiguous: a PING between HEADERS and its
    CONTINUATION is a connection error PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        raw = block(REQUEST)
        c.send(frame(HEADERS, END_STREAM, 1, raw[:10]) + frame(PING, 0, 0, b"12345678"))
        c.send(frame(CONTINUATION, END_HEADERS, 1, raw[10:]))
        c.connection_error(E.PROTOCOL_ERROR)


def test_header_block_split_over_continuations_is_served(srv, after):
    """6.10: a valid block in HEADERS + CONTINUATION frames is one request."""
    with Raw(srv.port) as c:
        raw = block(REQUEST)
        c.send(frame(HEADERS, END_STREAM, 1, raw[:7]) + frame(CONTINUATION, 0, 1, raw[7:20]))
        c.send(frame(CONTINUATION, END_HEADERS, 1, raw[20:]))
        assert c.response(1) == (200, b"2 /ok", None)


def test_push_promise_from_a_client(srv, after):
    """8.4: a client cannot push: PUSH_PROMISE from it is a connection error
    PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        c.headers(1, REQUEST, end_stream=False)
        c.send(frame(PUSH_PROMISE, END_HEADERS, 1, struct.pack(">I", 2) + block(REQUEST)))
        c.connection_error(E.PROTOCOL_ERROR)


def test_bad_hpack_is_a_compression_error(srv, after):
    """4.3: a field block that cannot be decoded is a connection error COMPRESSION_ERROR
    (index 200 is in neither table)."""
    with Raw(srv.port) as c:
        c.headers(1, None, raw=hpack_int(200, 7, 0x80))
        c.connection_error(E.COMPRESSION_ERROR)


# ---- 8.2/8.3 header validation: malformed requests are stream errors PROTOCOL_ERROR ---------


def _without(name):
    return [f for f in REQUEST if f[0] != name]


MALFORMED = {
    "connection": [*REQUEST, ("connection", "keep-alive")],
    "keep-alive": [*REQUEST, ("keep-alive", "timeout=5")],
    "proxy-connection": [*REQUEST, ("proxy-connection", "keep-alive")],
    "transfer-encoding": [*REQUEST, ("transfer-encoding", "chunked")],
    "upgrade": [*REQUEST, ("upgrade", "websocket")],
    "te-gzip": [*REQUEST, ("te", "gzip")],
    "uppercase-name": [*REQUEST, ("X-Upper", "1")],
    "space-in-name": [*REQUEST, ("bad name", "1")],
    "crlf-in-value": [*REQUEST, ("x-ok", "a\r\nb")],
    "missing-method": _without(":method"),
    "missing-scheme": _without(":scheme"),
    "missing-path": _without(":path"),
    "duplicate-path": [*REQUEST, (":path", "/again")],
    "duplicate-method": [*REQUEST, (":method", "POST")],
    "pseudo-after-regular": [*REQUEST[:3], ("x-a", "1"), REQUEST[3]],
    "empty-path": [*REQUEST[:2], (":path", ""), REQUEST[3]],
    "unknown-pseudo": [*REQUEST, (":foo", "bar")],
    "response-pseudo": [*REQUEST, (":status", "200")],
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_a_stream_error(srv, after, case):
    """8.2.1/8.2.2/8.3.1/8.1.1: connection-specific fields, TE other than trailers,
    upper-case names, invalid characters, missing, duplicated, unknown or misplaced
    pseudo-header fields and an empty :path make the request malformed: RST_STREAM
    PROTOCOL_ERROR; the connection goes on."""
    with Raw(srv.port) as c:
        c.headers(1, MALFORMED[case])
        c.stream_error(1, E.PROTOCOL_ERROR)


def test_te_trailers_is_allowed(srv, after):
    """8.2.2: TE may be sent with the value "trailers"."""
    with Raw(srv.port) as c:
        c.headers(1, [*REQUEST, ("te", "trailers")])
        assert c.response(1) == (200, b"2 /ok", None)


@pytest.mark.parametrize("sent", [b"12345", b"x" * 20])
def test_content_length_disagreeing_with_data(srv, after, sent):
    """8.1.1: a content-length unequal to the DATA payload lengths is malformed: RST_STREAM
    PROTOCOL_ERROR (shorter, at END_STREAM; longer, when DATA goes past it)."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), REQUEST[1], (":path", "/echo"), REQUEST[3]]
        c.headers(1, [*post, ("content-length", "10")], end_stream=False)
        c.send(frame(DATA, END_STREAM, 1, sent))
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        assert c.goaway is None and c.rst.get(1) == E.PROTOCOL_ERROR, (c.goaway, c.rst)
        assert c.status.get(1) is None
        c.headers(3, REQUEST)
        assert c.response(3) == (200, b"2 /ok", None)


def test_trailers_with_a_pseudo_header(srv, after):
    """8.1: request trailers must not carry pseudo-header fields: RST_STREAM
    PROTOCOL_ERROR."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), REQUEST[1], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.send(frame(DATA, 0, 1, b"body"))
        c.headers(1, [(":path", "/x")], end_stream=True)
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        assert c.goaway is None and c.rst.get(1) == E.PROTOCOL_ERROR, (c.goaway, c.rst)


def test_trailers_without_end_stream(srv, after):
    """8.1: a second HEADERS (trailers) without END_STREAM is malformed: PROTOCOL_ERROR,
    as a stream or connection error."""
    with Raw(srv.port) as c:
        post = [(":method", "POST"), REQUEST[1], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        c.headers(1, [("x-trailer", "1")], end_stream=False)
        c.until(lambda: 1 in c.rst or c.goaway is not None)
        if c.goaway is None:
            assert c.rst[1] == E.PROTOCOL_ERROR
        else:
            c.connection_error(E.PROTOCOL_ERROR)


# ---- attacks, end to end ---------------------------------------------------------------


def worker_pid(port):
    with H2(port) as c:
        return int(c.response(c.request("/pid"))["body"])


def run_attack(srv, flood, settings=()):
    """Runs flood(attacker) on its own connection in a thread; once it has written its
    first batch, a second client is served on a new connection. Returns the attacker's
    connection (read until the server closed it), the count flood returned, how long the
    second client waited, and the worker's RSS growth in KiB."""
    pid = worker_pid(srv.port)
    rss_before = rss_kib(pid)
    attacker = Raw(srv.port, settings=settings, timeout=5.0)
    started = threading.Event()
    result = {}

    def go():
        try:
            result["sent"] = flood(attacker, started)
        except OSError as exc:  # a write the server no longer reads
            result["error"] = exc
            attacker.closed = True
        finally:
            started.set()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    try:
        assert started.wait(10), "the attacker wrote nothing"
        t0 = time.monotonic()
        assert_h2_serving(srv.port, "/meanwhile")
        waited = time.monotonic() - t0
    finally:
        thread.join(30)
    attacker.closed = False
    attacker.until_closed(10)
    attacker.sock.close()
    growth = rss_kib(pid) - rss_before
    assert_h2_serving(srv.port)
    return attacker, result.get("sent"), waited, growth


def check_bounded(waited, growth_kib, what):
    assert waited < SERVED_WITHIN, f"{what}: the second client waited {waited:.2f} s"
    if not UNDER_ASAN:
        assert growth_kib < 16 * 1024, f"{what}: worker RSS grew {growth_kib} KiB"


def batches(c, started, frames, count, per_batch=50):
    """Writes frames(i) for i < count, per_batch at a time, until the server closes.
    Returns how many were written."""
    i = 0
    while i < count and not c.closed:
        c.send(b"".join(frames(j) for j in range(i, min(count, i + per_batch))))
        i += per_batch
        started.set()
    return min(i, count)


@pytest.mark.parametrize("value", [0, 1000], ids=["many-frames", "many-bytes"])
def test_continuation_flood(srv, value):
    """CVE-2024-27316/28182: a header block that never ends is cut off while it arrives
    (16 CONTINUATION frames or 80 KiB): GOAWAY ENHANCE_YOUR_CALM while the attacker still
    writes (up to 10,000 frames, 10 MB with 1000-byte fields, which the closing connection
    drains unread for 2 s), the request gets no answer, the worker's memory stays
    flat and a second client is served meanwhile."""

    def flood(c, started):
        c.send(frame(HEADERS, END_STREAM, 1, block(REQUEST)))
        piece = lambda i: frame(CONTINUATION, 0, 1, hpack_literal(f"x-c{i}", "c" * value))  # noqa: E731
        return batches(c, started, piece, 10_000)

    c, sent, waited, growth = run_attack(srv, flood)
    assert c.goaway is not None and c.goaway[1] == E.ENHANCE_YOUR_CALM, c.goaway
    assert 1 not in c.status and 1 not in c.ended
    check_bounded(waited, growth, "CONTINUATION flood")


def test_hpack_bomb(srv):
    """An HPACK bomb: one 4000-byte field put in the dynamic table, then referenced by
    one-byte indexes, ~12,000 times a stream (48 MB decoded from 12 KB), on 200 streams.
    Each decoded list stops counting at the 64 KiB limit and gets 431 without being stored;
    the worker's memory stays flat, and a second client is served meanwhile."""
    bomb_field = b"\x40" + hpack_int(6, 7) + b"x-bomb" + hpack_int(4000, 7) + b"b" * 4000
    refs = hpack_int(62, 7, 0x80) * 12_000

    def flood(c, started):
        c.headers(1, None, raw=block(REQUEST) + bomb_field + refs[: 16384 - 4200])
        return batches(
            c, started, lambda i: frame(HEADERS, 5, 3 + 2 * i, block(REQUEST) + refs), 200, 10
        )

    c, sent, waited, growth = run_attack(srv, flood)
    assert sent == 200 or c.goaway is not None
    answered = {sid: s for sid, s in c.status.items()}
    assert answered, (c.rst, c.goaway)
    assert set(answered.values()) == {431}, answered
    assert all(code in (E.PROTOCOL_ERROR, E.REFUSED_STREAM, E.NO_ERROR) for code in c.rst.values())
    check_bounded(waited, growth, "HPACK bomb")


def test_settings_flood(srv):
    """SETTINGS frames beyond the control-frame budget (100 a second): GOAWAY
    ENHANCE_YOUR_CALM."""

    def flood(c, started):
        return batches(
            c,
            started,
            lambda i: frame(SETTINGS, 0, 0, settings_payload([(S.ENABLE_PUSH, 0)])),
            5000,
        )

    c, sent, waited, growth = run_attack(srv, flood)
    assert c.goaway is not None and c.goaway[1] == E.ENHANCE_YOUR_CALM, c.goaway
    assert c.acked <= 110, f"{c.acked} SETTINGS were acknowledged"
    check_bounded(waited, growth, "SETTINGS flood")


def test_empty_data_flood(srv):
    """DATA frames with no payload and no END_STREAM beyond 100 a second: GOAWAY
    ENHANCE_YOUR_CALM, and the stream gets no response."""

    def flood(c, started):
        post = [(":method", "POST"), REQUEST[1], (":path", "/echo"), REQUEST[3]]
        c.headers(1, post, end_stream=False)
        return batches(c, started, lambda i: frame(DATA, 0, 1), 20_000, 500)

    c, sent, waited, growth = run_attack(srv, flood)
    assert c.goaway is not None and c.goaway[1] == E.ENHANCE_YOUR_CALM, c.goaway
    assert 1 not in c.status
    check_bounded(waited, growth, "empty DATA flood")


def test_rapid_reset_flood(srv):
    """CVE-2023-44487: HEADERS then RST_STREAM, over and over: GOAWAY ENHANCE_YOUR_CALM
    after the reset budget (200 a second), and a second client is served meanwhile."""

    def flood(c, started):
        rst = struct.pack(">I", E.CANCEL)
        request = block(REQUEST)

        def pair(i):
            sid = 1 + 2 * i
            return frame(HEADERS, END_STREAM | END_HEADERS, sid, request) + frame(
                RST_STREAM, 0, sid, rst
            )

        return batches(c, started, pair, 20_000, 100)

    c, sent, waited, growth = run_attack(srv, flood)
    assert c.goaway is not None and c.goaway[1] == E.ENHANCE_YOUR_CALM, c.goaway
    assert c.goaway[0] < 2 * 1000, f"the server went on to stream {c.goaway[0]}"
    check_bounded(waited, growth, "Rapid Reset")


def test_ping_flood(srv):
    """PINGs beyond the control-frame budget: GOAWAY ENHANCE_YOUR_CALM, the ACKs sent
    bounded."""

    def flood(c, started):
        return batches(c, started, lambda i: frame(PING, 0, 0, i.to_bytes(8, "big")), 5000)

    c, sent, waited, growth = run_attack(srv, flood)
    assert c.goaway is not None and c.goaway[1] == E.ENHANCE_YOUR_CALM, c.goaway
    check_bounded(waited, growth, "PING flood")


# ---- the flood bounds as options -------------------------------------------------------


def _requests(n, first_sid=1):
    return b"".join(
        frame(HEADERS, END_STREAM | END_HEADERS, first_sid + 2 * i, block(REQUEST))
        for i in range(n)
    )


def _resets(n):
    rst = struct.pack(">I", E.CANCEL)
    pairs = b"".join(
        _requests(1, 1 + 2 * i) + frame(RST_STREAM, 0, 1 + 2 * i, rst) for i in range(n)
    )
    return pairs + _requests(1, 1 + 2 * n), 1 + 2 * n


def _control(n):
    # the client's first SETTINGS is one of the n
    pings = b"".join(frame(PING, 0, 0, i.to_bytes(8, "big")) for i in range(n - 1))
    return pings + _requests(1), 1


def _empty(n):
    post = [(":method", "POST"), REQUEST[1], (":path", "/ok"), REQUEST[3]]
    opened = frame(HEADERS, END_HEADERS, 1, block(post))
    return opened + frame(DATA, 0, 1) * n + _requests(1, 3), 3


def _window_updates(n):
    return frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)) * n + _requests(1), 1


def _continuations(n):
    pieces = [hpack_literal(f"x-c{i}", "c") for i in range(n)]
    out = frame(HEADERS, END_STREAM, 1, block(REQUEST))
    for i, piece in enumerate(pieces):
        out += frame(CONTINUATION, END_HEADERS if i == n - 1 else 0, 1, piece)
    return out, 1


# option: frames(n) -> (n counted frames then a request, the request's stream id)
FLOOD_OPTIONS = {
    "--http2-max-new-streams": lambda n: (_requests(n), 2 * n - 1),
    "--http2-max-resets": _resets,
    "--http2-max-control-frames": _control,
    "--http2-max-empty-frames": _empty,
    "--http2-max-window-updates": _window_updates,
    "--http2-max-continuations": _continuations,
}
LOW = 5


def _send_all_at_once(port, frames):
    """Preface, SETTINGS and frames in one write, so that they fall in one second."""
    return Raw(port, first=frame(SETTINGS, 0, 0) + frames)


def _served(c, sid):
    assert c.response(sid) == (200, b"2 /ok", None), (c.goaway, c.rst, c.status)
    assert c.goaway is None, c.goaway


@pytest.mark.parametrize("option", list(FLOOD_OPTIONS))
def test_flood_bound_option_low_value(srv, option):
    """With a bound set to 5, 5 such frames a second (one header block) are served and a
    6th gets GOAWAY ENHANCE_YOUR_CALM; the default bound lets those 6 through."""
    build = FLOOD_OPTIONS[option]
    frames, sid = build(LOW + 1)
    with _send_all_at_once(srv.port, frames) as c:
        _served(c, sid)
    with run_server(APP_ASGI, "--http", "2", option, str(LOW)) as server:
        frames, sid = build(LOW)
        with _send_all_at_once(server.port, frames) as c:
            _served(c, sid)
        frames, sid = build(LOW + 1)
        with _send_all_at_once(server.port, frames) as c:
            c.connection_error(E.ENHANCE_YOUR_CALM)
            assert sid not in c.status
        assert_h2_serving(server.port)


def test_refused_streams_count_as_resets():
    """Streams refused over --http2-max-concurrent-streams (RST_STREAM REFUSED_STREAM)
    count against --http2-max-resets: with a bound of 5, five refusals leave the
    connection serving, a sixth makes the client's next frame get GOAWAY
    ENHANCE_YOUR_CALM, and the open stream's client is not answered on that connection."""
    slow = [*REQUEST[:2], (":path", "/slow?s=2"), REQUEST[3]]
    args = ("--http", "2", "--http2-max-concurrent-streams", "1", "--http2-max-resets", str(LOW))
    with run_server(APP_ASGI, *args) as server:
        with Raw(server.port) as c:
            c.headers(1, slow)
            c.send(
                b"".join(
                    frame(HEADERS, END_HEADERS | END_STREAM, 3 + 2 * i, block(REQUEST))
                    for i in range(LOW)
                )
            )
            assert c.until(lambda: len(c.rst) == LOW)
            assert set(c.rst.values()) == {E.REFUSED_STREAM}
            c.send(frame(PING, 0, 0, b"12345678"))
            assert not c.until(lambda: c.goaway is not None, 0.5)
            assert not c.closed
        with Raw(server.port) as c:
            c.headers(1, slow)
            c.send(
                b"".join(
                    frame(HEADERS, END_HEADERS | END_STREAM, 3 + 2 * i, block(REQUEST))
                    for i in range(LOW + 1)
                )
            )
            assert c.until(lambda: len(c.rst) == LOW + 1)
            c.send(frame(PING, 0, 0, b"12345678"))
            c.connection_error(E.ENHANCE_YOUR_CALM)
        assert_h2_serving(server.port)


def _made_to_reset(n):
    """n malformed requests (a connection-specific field), each a stream error the server
    answers with RST_STREAM PROTOCOL_ERROR: what MadeYouReset sends."""
    bad = [*REQUEST, ("connection", "keep-alive")]
    return b"".join(
        frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, block(bad)) for i in range(n)
    )


def test_resets_the_client_causes_count_as_resets():
    """CVE-2025-8671 (MadeYouReset): streams the server must reset for what the client
    sent (here malformed requests) count against --http2-max-resets as the client's own
    RST_STREAM do: with a bound of 5, five leave the connection serving, a sixth makes the
    next frame get GOAWAY ENHANCE_YOUR_CALM."""
    with run_server(APP_ASGI, "--http", "2", "--http2-max-resets", str(LOW)) as server:
        with _send_all_at_once(server.port, _made_to_reset(LOW)) as c:
            assert c.until(lambda: len(c.rst) == LOW)
            assert set(c.rst.values()) == {E.PROTOCOL_ERROR}
            c.send(_requests(1, 1 + 2 * LOW))
            _served(c, 1 + 2 * LOW)
        with _send_all_at_once(server.port, _made_to_reset(LOW + 1)) as c:
            assert c.until(lambda: len(c.rst) == LOW + 1)
            c.send(frame(PING, 0, 0, b"12345678"))
            c.connection_error(E.ENHANCE_YOUR_CALM)
        assert_h2_serving(server.port)


def test_one_connection_may_open_streams_at_full_speed(srv):
    """No flood bound cuts a client that only makes requests, however fast: h2load's one
    connection gets 60,000 responses (more than one second's worth of new streams under
    the old bound of 20,000) without a GOAWAY."""
    out = subprocess.run(
        ["h2load", "-c", "1", "-m", "32", "-n", "60000", f"http://127.0.0.1:{srv.port}/ok"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "60000 succeeded, 0 failed, 0 errored" in out, out
    assert_h2_serving(srv.port)


@pytest.mark.parametrize("source", ["environment", "config-file", "pyproject"])
def test_flood_bound_from_the_environment_and_files(tmp_path, source):
    """PYSERVER_HTTP2_MAX_RESETS, `http2_max_resets` in a -c file and
    `http2-max-resets` in [tool.pyserver] set the Rapid Reset bound as
    --http2-max-resets does."""
    args, env = ("--http", "2"), None
    if source == "environment":
        env = {"PYSERVER_HTTP2_MAX_RESETS": str(LOW)}
    elif source == "config-file":
        (tmp_path / "conf.py").write_text(f"http2_max_resets = {LOW}\n")
        args += ("-c", str(tmp_path / "conf.py"))
    else:
        (tmp_path / "pyproject.toml").write_text(f"[tool.pyserver]\nhttp2-max-resets = {LOW}\n")
    with run_server(APP_ASGI, *args, env=env, cwd=tmp_path) as server:
        with _send_all_at_once(server.port, _resets(LOW)[0]) as c:
            _served(c, 1 + 2 * LOW)
        with _send_all_at_once(server.port, _resets(LOW + 1)[0]) as c:
            c.connection_error(E.ENHANCE_YOUR_CALM)


@pytest.mark.parametrize("option", list(FLOOD_OPTIONS))
@pytest.mark.parametrize("value", ["0", "-1", "many", str((1 << 24) + 1)])
def test_flood_bound_option_bad_value_is_a_cli_error(option, value):
    if value == str((1 << 24) + 1) and option == "--http2-max-continuations":
        value = str((1 << 16) + 1)
    result = run_cli(APP_ASGI, option, value)
    assert result.returncode == 2, result
    assert f"argument {option}: " in result.stderr, result.stderr


@pytest.mark.parametrize("sid", [(1 << 31) - 1 - 100, (1 << 31) - 1])
def test_stream_id_exhaustion(srv, after, sid):
    """A client near the end of the stream id space (2^31-1): its request is served, then
    a graceful GOAWAY NO_ERROR naming it as the last stream, and the connection closes once
    it is done; a stream opened after the GOAWAY is not processed."""
    with Raw(srv.port) as c:
        slow = [*REQUEST[:2], (":path", "/slow?s=0.3"), REQUEST[3]]
        c.headers(sid, slow)
        assert c.until(lambda: c.goaway is not None and c.goaway[0] == sid)
        assert c.goaway == (sid, E.NO_ERROR)
        if sid + 2 < 1 << 31:
            c.headers(sid + 2, REQUEST)
        assert c.response(sid) == (200, b"slow done", None)
        assert c.until_closed()
        assert sid + 2 not in c.status


# ---- frameworks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, view",
    [
        ("apps.djangoproj.wsgi:application", "/json/"),
        ("apps.asgi_djangoproj.asgi:application", "/async/"),
    ],
    ids=["wsgi", "asgi"],
)
def test_django_over_h2(spec, view):
    """Django's WSGI and ASGI handlers over h2c (httpx, prior knowledge): views, a form
    POST, a streaming response, 404 and 500, ten requests multiplexed on one connection."""

    async def main(url):
        async with httpx.AsyncClient(http1=False, http2=True, timeout=20, base_url=url) as c:
            many = await asyncio.gather(*(c.get(f"{view}?i={i}") for i in range(10)))
            form = await c.post("/form/", data={"name": "caf\u00e9", "n": "42"})
            stream = await c.get("/stream/?n=50")
            missing = await c.get("/no/such/page/")
            boom = await c.get("/boom/")
            after = await c.get(view)
            return many, form, stream, missing, boom, after

    with run_server(spec) as srv:
        many, form, stream, missing, boom, after = asyncio.run(main(srv.url))
        assert {r.http_version for r in many} == {"HTTP/2"}
        assert [r.json()["query"] for r in many] == [{"i": str(i)} for i in range(10)]
        assert form.json()["fields"] == {"name": "caf\u00e9", "n": "42"}
        assert stream.content == b"".join(f"chunk-{i}\n".encode() for i in range(50))
        assert missing.status_code == 404 and boom.status_code == 500
        assert after.status_code == 200
        assert f'"GET {view}?i=3 HTTP/2.0" 200' in srv.log()


# ---- big transfers on concurrent streams -----------------------------------------------


class HashingH2(H2):
    """H2 that hashes response bodies as they arrive instead of keeping them."""

    def read_some(self):
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            raise AssertionError("the server did not answer in time") from None
        if not data:
            self.closed = True
            return []
        events = self.conn.receive_data(data)
        for ev in events:
            r = self.responses.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived) and r is not None:
                r["status"] = int(dict(ev.headers)[":status"])
                r["sha"] = hashlib.sha256()
                r["length"] = 0
            elif isinstance(ev, h2.events.DataReceived):
                if r is not None:
                    r["sha"].update(ev.data)
                    r["length"] += len(ev.data)
                    r["body"] = ev.data[-200:]
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and r is not None:
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset) and r is not None:
                r["reset"] = ev.error_code
        self.flush()
        return events


def upload_piece(sid, i):
    return hashlib.sha256(b"%d:%d" % (sid, i)).digest() * 2048  # 64 KiB


def run_transfers(port, uploads, downloads, size, pid):
    """Sends `size` bytes to each path in uploads and fetches each path in downloads, all
    at once on one connection, the uploads' DATA interleaved. Returns (responses by stream,
    the sha256 of each upload by stream, the worker's peak RSS growth in KiB)."""
    baseline = peak = rss_kib(pid)
    with HashingH2(port, timeout=60) as c:
        c.conn.update_settings({S.INITIAL_WINDOW_SIZE: 1 << 20})
        c.conn.increment_flow_control_window(16 << 20)
        left, sent_sha, offset = {}, {}, {}
        for path in uploads:
            sid = c.request(path, "POST", end=False)
            left[sid], sent_sha[sid], offset[sid] = size, hashlib.sha256(), 0
        for path in downloads:
            c.request(path)
        c.flush()
        reads = 0
        while left:
            progressed = False
            for sid in list(left):
                window = min(c.conn.local_flow_control_window(sid), left[sid])
                while window > 0:
                    i, at = divmod(offset[sid], 65536)
                    n = min(window, 65536 - at, c.conn.max_outbound_frame_size)
                    chunk = upload_piece(sid, i)[at : at + n]
                    c.conn.send_data(sid, chunk, end_stream=left[sid] == n)
                    sent_sha[sid].update(chunk)
                    offset[sid] += n
                    left[sid] -= n
                    window -= n
                    progressed = True
                if not left[sid]:
                    del left[sid]
            c.flush()
            if not progressed:
                c.read_some()
                reads += 1
                if reads % 50 == 0:
                    peak = max(peak, rss_kib(pid))
        while not all(r["ended"] or r["reset"] is not None for r in c.responses.values()):
            c.read_some()
            reads += 1
            if reads % 50 == 0:
                peak = max(peak, rss_kib(pid))
        peak = max(peak, rss_kib(pid))
        return c.responses, {sid: h.hexdigest() for sid, h in sent_sha.items()}, peak - baseline


SIZE = 16 * MIB
STREAMS = 8


def test_asgi_8_streams_16_mib_each_way(srv):
    """Eight uploads of 16 MiB to an ASGI app that sends each body back as it reads it,
    their DATA interleaved on one connection with the responses: every byte comes back
    (SHA-256), and the worker's RSS stays bounded while 256 MiB pass through it (per-stream
    windows and output bounds, not whole bodies, are what it holds)."""
    pid = worker_pid(srv.port)
    responses, sent, growth = run_transfers(srv.port, ["/mirror"] * STREAMS, [], SIZE, pid)
    for sid, r in responses.items():
        assert r["status"] == 200 and r["reset"] is None, r
        assert r["length"] == SIZE
        assert r["sha"].hexdigest() == sent[sid], f"stream {sid} came back different"
    if not UNDER_ASAN:
        assert growth < 32 * 1024, f"worker RSS grew {growth} KiB"
    assert_h2_serving(srv.port)


def test_wsgi_8_uploads_and_8_downloads_of_16_mib(wsgi_srv):
    """A WSGI app: eight 16 MiB uploads (spooled past 1 MiB) and eight 16 MiB downloads on
    one connection at once: every upload arrives whole (SHA-256 as the app read it), every
    download is what the app sent, and the worker's RSS stays bounded."""
    from apps.h2_rfc_apps import download_sha256

    pid = worker_pid(wsgi_srv.port)
    uploads = ["/upload"] * STREAMS
    downloads = [f"/download?size={SIZE}"] * STREAMS
    responses, sent, growth = run_transfers(wsgi_srv.port, uploads, downloads, SIZE, pid)
    expected = download_sha256(SIZE)
    assert len(responses) == 2 * STREAMS
    for sid, r in responses.items():
        assert r["status"] == 200 and r["reset"] is None, r
        if sid in sent:
            got = json.loads(r["body"])
            assert got == {"length": SIZE, "sha256": sent[sid]}
        else:
            assert r["length"] == SIZE and r["sha"].hexdigest() == expected
    if not UNDER_ASAN:
        assert growth < 32 * 1024, f"worker RSS grew {growth} KiB"
    assert_h2_serving(wsgi_srv.port)


# ---- 103 Early Hints ---------------------------------------------------------------------


def test_asgi_early_hints_over_h2(srv):
    """http.response.early_hint over HTTP/2: a HEADERS frame with :status 103 and one link
    field per entry, without END_STREAM, before the response's own HEADERS (RFC 8297,
    RFC 9113 8.1)."""
    with Raw(srv.port) as c:
        c.headers(1, [*REQUEST[:2], (":path", "/early"), REQUEST[3]])
        assert c.response(1) == (200, b"after hints", None)
        assert c.info[1] == [
            [
                (":status", "103"),
                ("link", "</style.css>; rel=preload; as=style"),
                ("link", "</app.js>; rel=preload; as=script"),
            ]
        ]


@needs_curl
def test_curl_sees_early_hints_over_h2(srv):
    r = subprocess.run(
        ["curl", "-sS", "-i", "--http2-prior-knowledge", "--max-time", "20", f"{srv.url}/early"],
        capture_output=True,
        timeout=25,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.startswith("HTTP/2 103"), out
    assert "link: </app.js>; rel=preload; as=script" in out
    assert "HTTP/2 200" in out and out.endswith("after hints")


# ---- the gunicorn worker ------------------------------------------------------------------


def _gunicorn():
    pytest.importorskip("gunicorn.config")
    import test_gunicorn

    if "http_protocols" not in test_gunicorn._SETTINGS:
        pytest.skip("this gunicorn has no http_protocols setting (gunicorn < 25)")
    return test_gunicorn


def _prior_knowledge_served(port):
    """1 when an h2c prior-knowledge request is answered over HTTP/2, else 0 (the preface
    read as a bad HTTP/1 request: closed without a SETTINGS frame)."""
    with Raw(port) as c:
        c.headers(1, REQUEST)
        c.until(lambda: 1 in c.ended or c.closed)
        return c.status.get(1) == 200 and bool(c.server_settings)


@pytest.mark.parametrize(
    "args, h2c",
    [
        ((), False),
        (("--http-protocols", "h2,h1"), False),
        (("--http-protocols", "h1", "--http2-cleartext", "prior-knowledge"), False),
        (("--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge"), True),
        (("--http-protocols", "h2", "--http2-cleartext", "both"), True),
    ],
    ids=["default-h1", "h2-no-cleartext", "h1-cleartext", "h2-prior-knowledge", "h2-both"],
)
def test_gunicorn_worker_follows_http_protocols(args, h2c):
    """gunicorn's http_protocols says whether the worker speaks HTTP/2: without h2 (the
    default "h1") it serves HTTP/1.1 only; with h2 over cleartext only when
    http2_cleartext asks for it (then prior knowledge and Upgrade: h2c both work)."""
    tg = _gunicorn()
    with tg.gunicorn("apps.h2_rfc_apps:asgi", *args, workers=1) as g:
        assert _prior_knowledge_served(g.port) == h2c, g.log()[-2000:]
        r = subprocess.run(
            ["curl", "-sS", "--http2", "--max-time", "10", f"{g.url}/v"],
            capture_output=True,
            timeout=15,
        )
        assert r.stdout == (b"2 /v" if h2c else b"1.1 /v"), (r.stdout, r.stderr)


@needs_curl
def test_gunicorn_worker_h2_over_tls(tmp_path):
    """Over TLS, http_protocols with h2 makes the worker offer h2 by ALPN; without it,
    ALPN offers only http/1.1."""
    tg = _gunicorn()
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        + ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    tls = ("--certfile", str(cert), "--keyfile", str(key))
    for protocols, version in (("h2,h1", "HTTP/2"), ("h1", "HTTP/1.1")):
        with tg.gunicorn(
            "apps.h2_rfc_apps:asgi", *tls, "--http-protocols", protocols, workers=1
        ) as g:
            url = f"https://{HOST}:{g.port}/v"
            r = subprocess.run(
                ["curl", "-sSk", "--http2", "-o", "/dev/null", "-w", "%{http_version}", url]
                + ["--max-time", "10"],
                capture_output=True,
                text=True,
                timeout=15,
            )
            assert r.stdout == version.split("/")[1], (protocols, r.stdout, r.stderr)


def test_gunicorn_worker_maps_http2_settings():
    """gunicorn's http2_max_concurrent_streams, http2_initial_window_size and
    http2_max_header_list_size become the worker's SETTINGS."""
    tg = _gunicorn()
    args = ("--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge")
    args += ("--http2-max-concurrent-streams", "7", "--http2-initial-window-size", "100000")
    args += ("--http2-max-header-list-size", "4096")
    with tg.gunicorn("apps.h2_rfc_apps:asgi", *args, workers=1) as g, Raw(g.port) as c:
        c.headers(1, REQUEST)
        assert c.response(1) == (200, b"2 /ok", None)
        assert c.server_settings[S.MAX_CONCURRENT_STREAMS] == 7
        assert c.server_settings[S.INITIAL_WINDOW_SIZE] == 100000
        assert c.server_settings[S.MAX_HEADER_LIST_SIZE] == 4096


def test_gunicorn_worker_passes_the_flood_bounds_through():
    """gunicorn has no setting for the flood bounds: a worker subclass sets them in
    CONFIG_KWARGS (tests/apps/h2_worker.py: 5 resets, 5 control frames a second), and
    the 6th gets GOAWAY ENHANCE_YOUR_CALM."""
    tg = _gunicorn()
    args = ("--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge")
    worker = "apps.h2_worker.LowResetsWorker"
    with tg.gunicorn("apps.h2_rfc_apps:asgi", *args, worker=worker, workers=1) as g:
        for build in (_resets, _control):
            frames, sid = build(LOW)
            with _send_all_at_once(g.port, frames) as c:
                _served(c, sid)
            with _send_all_at_once(g.port, build(LOW + 1)[0]) as c:
                c.connection_error(E.ENHANCE_YOUR_CALM)
