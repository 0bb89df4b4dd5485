"""HTTP/2 streams as a careful client sees them, over h2c and TLS, WSGI and ASGI: frames on
streams that are closed (RFC 9113 5.1), cookie crumbs joined for the application (8.2.3),
`host` first in ASGI's headers, streams over the concurrency bound refused one by one
(5.1.2), and clients that stop reading (a window of 0) holding back only their own
responses, never the worker's memory; a million streams on one connection cost no more
than a few.

Frames are written by hand (`Raw` of test_h2_rfc9113.py, HPACK from the hpack library)."""

import json
import shutil
import ssl
import struct
import subprocess
import time

import pytest
from helpers import HOST, UNDER_ASAN, rss_kib, run_server
from test_h2_rfc9113 import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PING,
    RST_STREAM,
    WINDOW_UPDATE,
    E,
    Raw,
    S,
    block,
    frame,
)

APP = {"wsgi": "apps.h2_stream_apps:wsgi", "asgi": "apps.h2_stream_apps:asgi"}
MIB = 1 << 20


def request(path, method="GET", extra=()):
    fields = [(":method", method), (":scheme", "http"), (":path", path)]
    return [*fields, (":authority", "h2.test"), *extra]


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for localhost (the clients do not verify it)."""
    d = tmp_path_factory.mktemp("h2tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-subj", "/CN=localhost", "-days", "2", "-keyout", str(d / "key.pem"),
         "-out", str(d / "cert.pem"), "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return d


def client_tls():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


class Target:
    """A running server and how to reach it (tls: an SSLContext for Raw, or None)."""

    def __init__(self, srv, tls):
        self.srv, self.port, self.tls = srv, srv.port, tls

    def connect(self, **kw):
        return Raw(self.port, tls=self.tls, **kw)

    def get(self, path):
        with self.connect() as c:
            c.headers(1, request(path))
            return c.response(1)

    def pid(self):
        status, body, _ = self.get("/pid")
        assert status == 200
        return int(body)


def serve(app, transport, cert, *args):
    tls_args = ()
    if transport == "tls":
        tls_args = (
            "--ssl-certfile",
            str(cert / "cert.pem"),
            "--ssl-keyfile",
            str(cert / "key.pem"),
        )
    return run_server(APP[app], *tls_args, *args)


@pytest.fixture(scope="module", params=["h2c-wsgi", "h2c-asgi", "tls-wsgi", "tls-asgi"])
def target(request, cert):
    transport, app = request.param.split("-")
    with serve(app, transport, cert) as srv:
        yield Target(srv, client_tls() if transport == "tls" else None)


def assert_goes_on(c, sid):
    """The connection serves a new stream sid."""
    c.headers(sid, request("/after"))
    assert c.response(sid) == (200, b"ok /after", None)


# ---- frames on closed streams (RFC 9113 5.1) ------------------------------------------


def test_data_after_the_client_reset_the_stream_is_stream_closed(target):
    """5.1 closed: 'any frame other than PRIORITY after receiving a RST_STREAM' is a stream
    error STREAM_CLOSED. A POST's head, RST_STREAM CANCEL, then DATA: RST_STREAM
    STREAM_CLOSED, and the connection goes on."""
    with target.connect() as c:
        c.headers(1, request("/post", "POST"), end_stream=False)
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", E.CANCEL)))
        c.send(frame(DATA, 0, 1, b"late body"))
        assert c.until(lambda: 1 in c.rst or c.goaway is not None), "no answer to the DATA"
        assert c.goaway is None, c.goaway
        assert c.rst[1] == E.STREAM_CLOSED
        assert_goes_on(c, 3)


def test_data_after_both_sides_ended_is_stream_closed(target):
    """5.1 closed: a frame after END_STREAM both ways is a connection error STREAM_CLOSED.
    A GET is answered, then DATA with END_STREAM on it: GOAWAY STREAM_CLOSED, the close."""
    with target.connect() as c:
        c.headers(1, request("/first"))
        assert c.response(1) == (200, b"ok /first", None)
        c.send(frame(DATA, END_STREAM, 1, b"late"))
        c.connection_error(E.STREAM_CLOSED)
        assert c.goaway[0] == 1


def test_data_on_a_stream_closed_long_ago_is_stream_closed(target):
    """A stream closed long before (20 streams later, past what the server remembers of
    each) still gets STREAM_CLOSED for DATA: a stream error, the connection goes on."""
    with target.connect() as c:
        c.headers(1, request("/post", "POST"), end_stream=False)
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", E.CANCEL)))
        for sid in range(3, 43, 2):
            c.headers(sid, request("/n"))
            assert c.response(sid)[0] == 200
        c.send(frame(DATA, 0, 1, b"late"))
        assert c.until(lambda: 1 in c.rst or c.goaway is not None)
        assert c.goaway is None and c.rst[1] == E.STREAM_CLOSED
        assert_goes_on(c, 43)


def test_data_on_closed_streams_counts_against_the_reset_bound(cert):
    """Each RST_STREAM the server owes for DATA on a closed stream counts against
    --http2-max-resets, as the client's own resets do: a client that keeps sending them
    gets GOAWAY ENHANCE_YOUR_CALM."""
    with serve("asgi", "h2c", cert, "--http2-max-resets", "5") as srv, Raw(srv.port) as c:
        c.headers(1, request("/post", "POST"), end_stream=False)
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", E.CANCEL)))
        c.send(b"".join(frame(DATA, 0, 1, b"x") for _ in range(20)))
        c.send(frame(PING, 0, 0, b"12345678"))
        c.connection_error(E.ENHANCE_YOUR_CALM)


# ---- the request as the application sees it -------------------------------------------


def test_cookie_crumbs_are_joined(target):
    """8.2.3: cookie crumbs (one field per cookie, as HPACK clients send them) reach the
    application as one Cookie field, joined with '; ' in the order sent, where the first
    crumb was."""
    crumbs = [("cookie", "a=1"), ("x-between", "z"), ("cookie", "b=2"), ("cookie", "c=3")]
    with target.connect() as c:
        c.headers(1, request("/request", extra=crumbs))
        status, body, _ = c.response(1)
    assert status == 200
    seen = json.loads(body)
    assert seen["cookie"] == "a=1; b=2; c=3"
    names = [k.lower() for k, _ in seen["headers"]]
    assert names.count("cookie") + names.count("http_cookie") == 1
    if "cookie" in names:  # ASGI: in the first crumb's place, before x-between
        assert names.index("cookie") < names.index("x-between")


def test_one_cookie_field_is_passed_as_it_is(target):
    with target.connect() as c:
        c.headers(1, request("/request", extra=[("cookie", "a=1; b=2")]))
        status, body, _ = c.response(1)
    assert status == 200 and json.loads(body)["cookie"] == "a=1; b=2"


def test_authority_becomes_host_first(target):
    """8.3.1: :authority becomes the Host field; in ASGI's headers it comes first, where an
    HTTP/1 client puts it."""
    with target.connect() as c:
        c.headers(1, request("/request", extra=[("x-one", "1"), ("accept", "*/*")]))
        status, body, _ = c.response(1)
    assert status == 200
    seen = json.loads(body)
    assert seen["host"] == "h2.test"
    first = seen["headers"][0]
    assert first in (["host", "h2.test"], ["HTTP_HOST", "h2.test"]), seen["headers"]


# ---- the concurrency bound (5.1.2) -----------------------------------------------------


@pytest.mark.parametrize("transport", ["h2c", "tls"])
@pytest.mark.parametrize("app", ["wsgi", "asgi"])
def test_streams_over_the_bound_are_refused_after_the_settings_ack(app, transport, cert):
    """5.1.2: a HEADERS past SETTINGS_MAX_CONCURRENT_STREAMS is a stream error: the client
    acknowledged the server's SETTINGS, has 2 streams open (the bound) and opens a third:
    RST_STREAM REFUSED_STREAM on it, no GOAWAY, and the two open ones are answered."""
    tls = client_tls() if transport == "tls" else None
    bound = ("--http2-max-concurrent-streams", "2")
    with serve(app, transport, cert, *bound) as srv, Raw(srv.port, tls=tls) as c:
        assert c.until(lambda: c.server_settings.get(S.MAX_CONCURRENT_STREAMS) == 2)
        c.send(frame(PING, 0, 0, b"12345678"))  # our SETTINGS ACK went out before this
        c.headers(1, request("/slow?s=0.5"))
        c.headers(3, request("/slow?s=0.5"))
        c.headers(5, request("/over"))
        assert c.until(lambda: 5 in c.rst or c.goaway is not None)
        assert c.goaway is None, c.goaway
        assert c.rst[5] == E.REFUSED_STREAM
        assert c.response(1) == (200, b"slow done", None)
        assert c.response(3) == (200, b"slow done", None)
        assert_goes_on(c, 7)


# ---- clients that stop reading ------------------------------------------------------------


@pytest.mark.parametrize("path", ["/big", "/pieces"], ids=["one-piece", "64k-pieces"])
@pytest.mark.parametrize("transport", ["h2c", "tls"])
@pytest.mark.parametrize("app", ["wsgi", "asgi"])
def test_zero_window_clients_hold_back_only_their_own_responses(app, transport, path, cert):
    """Three connections each open 100 streams asking for 1 MiB responses with an initial
    window of 0 and read nothing: each stream holds at most about 64 KiB of output (the
    application waits: WSGI's iterator is not advanced, ASGI's send() does not complete)
    and a connection holds back streams while its total is over its bound; the worker's
    RSS stays within 64 MiB of its start, and another client is served meanwhile. Once the
    windows open, every response arrives whole."""
    with serve(app, transport, cert) as srv:
        t = Target(srv, client_tls() if transport == "tls" else None)
        pid = t.pid()
        before = rss_kib(pid)
        conns = []
        try:
            for _ in range(3):
                c = t.connect(settings=[(S.INITIAL_WINDOW_SIZE, 0)])
                c.send(
                    b"".join(
                        frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, block(request(path)))
                        for i in range(100)
                    )
                )
                conns.append(c)
            # Every connection's HEADERS were read (its PING answered after them).
            for c in conns:
                c.send(frame(PING, 0, 0, b"12345678"))
                assert c.until(lambda c=c: c.acked >= 1 and 1 in c.status, 10)
            t0 = time.monotonic()
            assert t.get("/meanwhile") == (200, b"ok /meanwhile", None)
            assert time.monotonic() - t0 < 2.0
            time.sleep(0.5)  # let the applications run as far as they are let
            growth = rss_kib(pid) - before
            if not UNDER_ASAN:
                assert growth < 64 * 1024, f"worker RSS grew {growth} KiB"
            # The first connection opens its windows: all 100 responses arrive whole.
            c = conns[0]
            c.send(
                frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 200 * MIB))
                + b"".join(
                    frame(WINDOW_UPDATE, 0, 1 + 2 * i, struct.pack(">I", MIB)) for i in range(100)
                )
            )
            assert c.until(lambda: len(c.ended) == 100, 60), f"{len(c.ended)} of 100 ended"
            assert all(len(c.body.get(1 + 2 * i, b"")) == MIB for i in range(100))
            assert not c.rst
        finally:
            for c in conns:
                c.sock.close()


# ---- a million streams on one connection -----------------------------------------------


@pytest.mark.serial
@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load is not installed")
@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_a_million_streams_on_one_connection_cost_bounded_memory(transport, cert):
    """One connection opens and closes 10^6 streams (h2load, 100 at a time; 2 * 10^5 over
    TLS, to bound the test's time): every one is answered and the worker's RSS grows by
    less than 16 MiB, as for a few streams (the server remembers a fixed number of closed
    streams per connection)."""
    n = 1_000_000 if transport == "h2c" else 200_000
    n = n // 10 if UNDER_ASAN else n
    with serve("asgi", transport, cert) as srv:
        t = Target(srv, client_tls() if transport == "tls" else None)
        pid = t.pid()
        url = f"{'https' if transport == 'tls' else 'http'}://{HOST}:{srv.port}/n"
        warm = subprocess.run(
            ["h2load", "-n", "20000", "-c", "1", "-m", "100", url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "20000 succeeded" in warm.stdout, warm.stdout
        before = rss_kib(pid)
        run = subprocess.run(
            ["h2load", "-n", str(n), "-c", "1", "-m", "100", url],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert f"{n} succeeded, 0 failed, 0 errored" in run.stdout, run.stdout
        growth = rss_kib(pid) - before
        if not UNDER_ASAN:  # (ASan's quarantine holds freed memory)
            assert growth < 16 * 1024, f"worker RSS grew {growth} KiB"
