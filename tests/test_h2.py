"""HTTP/2 over cleartext (h2c) end to end: prior knowledge and `Upgrade: h2c`, WSGI and
ASGI apps, request bodies, streaming, trailers, resets, the flood bounds, graceful stop.

Clients: curl (--http2-prior-knowledge, --http2), h2load (nghttp2-client) for
concurrency, and the `h2` library for raw frames, driven over a plain socket here.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from helpers import HOST, run_server, wait_for

WSGI = "apps.h2_apps:wsgi"
ASGI = "apps.h2_apps:asgi"

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
needs_h2load = pytest.mark.skipif(
    shutil.which("h2load") is None, reason="h2load is not installed (Debian nghttp2-client)"
)


class H2:
    """A client connection speaking HTTP/2 with the h2 library over a blocking socket."""

    def __init__(self, port, timeout=10.0, settings=None):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.responses = {}  # stream id -> dict
        self.goaway = None
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, path, method="GET", headers=(), body=None, end=True):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "h2.test")]
        self.conn.send_headers(sid, hs + list(headers), end_stream=body is None and end)
        if body is not None:
            self.send_body(sid, body, end=end)
        self.flush()
        self.responses[sid] = {
            "status": None,
            "headers": {},
            "body": b"",
            "trailers": {},
            "ended": False,
            "reset": None,
        }
        return sid

    def send_body(self, sid, body, end=True):
        """Sends body within the flow-control windows, reading while they are shut."""
        view = memoryview(body)
        while view:
            window = min(
                self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size
            )
            if window <= 0:
                self.flush()
                self.read_some()
                continue
            n = min(window, len(view))
            self.conn.send_data(sid, bytes(view[:n]))
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def read_some(self):
        try:
            data = self.sock.recv(65536)
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
                r["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.InformationalResponseReceived) and r is not None:
                r.setdefault("info", []).append(dict(ev.headers))
            elif isinstance(ev, h2.events.DataReceived):
                if r is not None:
                    r["body"] += ev.data
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived) and r is not None:
                r["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded) and r is not None:
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset) and r is not None:
                r["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
        self.flush()
        return events

    def wait(self, predicate, what="a response"):
        while not predicate():
            if self.closed:
                raise AssertionError(f"the connection closed before {what}")
            self.read_some()

    def response(self, sid):
        r = self.responses[sid]
        self.wait(lambda: r["ended"] or r["reset"] is not None, f"stream {sid} ended")
        return r

    def until_closed(self, limit=10.0):
        deadline = time.monotonic() + limit
        while not self.closed and time.monotonic() < deadline:
            try:
                self.read_some()
            except (AssertionError, ConnectionResetError):
                self.closed = True
        return self.closed


def curl(*args, timeout=20):
    return subprocess.run(
        ["curl", "-sS", "--max-time", str(timeout), *args],
        capture_output=True,
        timeout=timeout + 5,
    )


def read_events(path):
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    return tmp_path_factory.mktemp("h2") / "events"


@pytest.fixture(scope="module")
def wsgi_srv(events_file):
    with run_server(
        WSGI,
        "--limit-request-body",
        str(8 << 20),
        "--body-spool-threshold",
        str(256 << 10),
        env={"H2_EVENTS": str(events_file)},
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def asgi_srv(events_file):
    with run_server(ASGI, env={"H2_EVENTS": str(events_file)}) as srv:
        yield srv


# ---- how HTTP/2 starts ---------------------------------------------------------------


@needs_curl
@pytest.mark.parametrize("how", ["--http2-prior-knowledge", "--http2"])
def test_curl_wsgi_and_access_line(wsgi_srv, how):
    r = curl(how, "-i", f"{wsgi_srv.url}/hello/{how.strip('-')}")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.startswith("HTTP/1.1 101") == (how == "--http2")
    assert "HTTP/2 200" in out
    assert out.endswith(f"HTTP/2 /hello/{how.strip('-')}")
    line = f'"GET /hello/{how.strip("-")} HTTP/2.0" 200'
    assert wait_for(lambda: line in wsgi_srv.log()), wsgi_srv.log_tail()


@needs_curl
def test_curl_asgi_prior_knowledge_and_upgrade(asgi_srv):
    for how in ("--http2-prior-knowledge", "--http2"):
        r = curl(how, f"{asgi_srv.url}/v")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"2 /v"
    # HTTP/1.1 stays HTTP/1.1 on the same port
    r = curl("--http1.1", f"{asgi_srv.url}/v")
    assert r.stdout == b"1.1 /v"


def test_raw_prior_knowledge_settings_and_headers(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request("/echo", "POST", body=b"hello")
        r = c.response(sid)
        assert r["status"] == 200
        got = json.loads(r["body"])
        assert got["protocol"] == "HTTP/2"
        assert got["length"] == 5 and got["host"] == "h2.test"
        assert "date" in r["headers"] and r["headers"]["server"] == "pyserver"
        # every stream of the connection sees the same addresses (built once, shared)
        port = str(c.sock.getsockname()[1])
        for _ in range(3):
            again = json.loads(c.response(c.request("/echo", "POST", body=b"x"))["body"])
            assert again["remote"] == ["127.0.0.1", port]
        assert got["remote"] == ["127.0.0.1", port]
        remote = c.conn.remote_settings
        assert remote[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 100
        assert remote[h2.settings.SettingCodes.ENABLE_PUSH] == 0


def test_http_1_turns_http2_off():
    with run_server(WSGI, "--http", "1") as srv:
        with H2(srv.port) as c:
            assert c.until_closed(), "the preface was answered"
            assert c.goaway is None
        r = curl("--http2", f"{srv.url}/x")
        assert r.stdout == b"HTTP/1.1 /x"


def test_http_2_refuses_http1_and_upgrade():
    with run_server(WSGI, "--http", "2") as srv:
        r = curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", f"{srv.url}/x")
        assert r.stdout == b"505"
        r = curl("--http2-prior-knowledge", f"{srv.url}/x")
        assert r.stdout == b"HTTP/2 /x"


def test_upgrade_with_bad_settings_gets_400(wsgi_srv):
    with socket.create_connection((HOST, wsgi_srv.port), timeout=10) as s:
        s.sendall(
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: !!!\r\n\r\n"
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 400")


def test_upgrade_request_with_a_body_stays_http1(wsgi_srv):
    with socket.create_connection((HOST, wsgi_srv.port), timeout=10) as s:
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
            b"Content-Length: 5\r\n\r\nhello"
        )
        data = b""
        while b'"scheme"' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data
        assert b'"protocol": "HTTP/1.1"' in data and b'"length": 5' in data


def test_httpx_prior_knowledge_multiplexed(asgi_srv):
    """httpx speaks h2c by prior knowledge only (http1=False; with HTTP/1.1 allowed it
    uses HTTP/1.1 for http:// URLs): twenty concurrent requests share one connection."""
    import asyncio

    import httpx

    async def main():
        async with httpx.AsyncClient(http1=False, http2=True, timeout=20) as c:
            rs = await asyncio.gather(*(c.get(f"{asgi_srv.url}/n{i}") for i in range(20)))
            posted = await c.post(f"{asgi_srv.url}/echo", content=b"x" * 100_000)
            return rs, posted

    rs, posted = asyncio.run(main())
    assert [r.text for r in rs] == [f"2 /n{i}" for i in range(20)]
    assert {r.http_version for r in rs} == {"HTTP/2"}
    assert posted.json()["length"] == 100_000
    lines = [line for line in asgi_srv.log().splitlines() if '"GET /n' in line]
    assert len(lines) == 20
    assert len({line.split(" - ")[0].split()[-1] for line in lines}) == 1, lines


# ---- concurrency ---------------------------------------------------------------------


@needs_h2load
@pytest.mark.parametrize("app", [WSGI, ASGI])
def test_h2load_all_2xx(app):
    with run_server(app, "--no-access-log") as srv:
        r = subprocess.run(
            ["h2load", "-n", "2000", "-c", "10", "-m", "10", f"{srv.url}/"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "2000 succeeded, 0 failed, 0 errored" in r.stdout, r.stdout
        assert "status codes: 2000 2xx" in r.stdout, r.stdout


@needs_h2load
def test_h2load_uploads(asgi_srv, tmp_path):
    data = tmp_path / "data"
    data.write_bytes(os.urandom(100_000))
    r = subprocess.run(
        ["h2load", "-n", "100", "-c", "2", "-m", "10", "-d", str(data), f"{asgi_srv.url}/echo"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "100 succeeded, 0 failed" in r.stdout, r.stdout


def test_many_streams_interleaved_bodies(asgi_srv):
    """Twenty uploads on one connection, their DATA frames interleaved."""
    with H2(asgi_srv.port) as c:
        bodies = {}
        for _ in range(20):
            sid = c.request("/echo", "POST", end=False)
            bodies[sid] = b""
        for round_ in range(5):
            for sid in bodies:
                piece = os.urandom(3000 + round_)
                bodies[sid] += piece
                c.send_body(sid, piece, end=round_ == 4)
        for sid, body in bodies.items():
            r = c.response(sid)
            assert r["status"] == 200
            got = json.loads(r["body"])
            assert got["http_version"] == "2"
            assert got["sha256"] == hashlib.sha256(body).hexdigest()


def test_concurrent_streams_over_the_limit_are_refused():
    with run_server(ASGI, "--http2-max-concurrent-streams", "3") as srv, H2(srv.port) as c:
        # Sent before the server's SETTINGS are read: the client knows of no limit yet.
        sids = [c.request("/slow?s=0.5") for _ in range(4)]
        results = [c.response(s) for s in sids]
        assert [r["status"] for r in results[:3]] == [200, 200, 200]
        assert results[3]["reset"] == h2.errors.ErrorCodes.REFUSED_STREAM
        assert c.conn.remote_settings.max_concurrent_streams == 3


# ---- request bodies ------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1000, 200_000, 3_000_000])
def test_wsgi_upload_buffered_and_spooled(wsgi_srv, size):
    body = os.urandom(size)
    with H2(wsgi_srv.port) as c:
        sid = c.request("/echo", "POST", body=body)
        r = c.response(sid)
        assert r["status"] == 200, r
        got = json.loads(r["body"])
        assert got["length"] == size
        assert got["sha256"] == hashlib.sha256(body).hexdigest()


def test_wsgi_upload_over_limit_is_413(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request(
            "/echo", "POST", headers=[("content-length", str(9 << 20))], body=b"", end=False
        )
        r = c.response(sid)
        assert r["status"] == 413
        # the connection serves the next stream
        sid = c.request("/after")
        assert c.response(sid)["body"] == b"HTTP/2 /after"


@pytest.mark.parametrize("app", [WSGI, ASGI])
def test_stalled_body_gets_408_and_the_connection_goes_on(app, tmp_path):
    events = tmp_path / "events"
    with run_server(app, "--timeout-request-body", "1", env={"H2_EVENTS": str(events)}) as srv:
        with H2(srv.port) as c:
            stalled = c.request("/echo", "POST", body=b"part", end=False)
            started = time.monotonic()
            r = c.response(stalled)
            assert r["status"] == 408
            assert 0.5 < time.monotonic() - started < 8.0
            after = c.request("/after")
            assert c.response(after)["status"] == 200
        if app == ASGI:
            assert wait_for(lambda: "disconnect echo" in read_events(events))
        assert "request body deadline" in srv.log()


@pytest.mark.parametrize("app", [WSGI, ASGI])
def test_body_deadline_is_per_stream(app, tmp_path):
    """A stream whose body stalls gets its 408 at --timeout-request-body while another
    stream of the same connection keeps sending body bytes (the connection is never
    idle), and that other stream completes."""
    events = tmp_path / "events"
    with run_server(app, "--timeout-request-body", "1", env={"H2_EVENTS": str(events)}) as srv:
        with H2(srv.port) as c:
            stalled = c.request("/echo", "POST", body=b"part", end=False)
            busy = c.request("/echo", "POST", body=b"a", end=False)
            c.sock.settimeout(0.25)
            started = time.monotonic()
            stalled_at = None
            while time.monotonic() - started < 3.5:
                c.conn.send_data(busy, b"b")
                c.flush()
                try:
                    c.read_some()
                except AssertionError:
                    pass  # nothing to read this turn
                r = c.responses[stalled]
                if stalled_at is None and (r["ended"] or r["reset"] is not None):
                    stalled_at = time.monotonic() - started
            assert stalled_at is not None, "the stalled stream got nothing"
            assert c.responses[stalled]["status"] == 408
            assert 0.5 < stalled_at < 3.0
            c.sock.settimeout(10)
            c.conn.end_stream(busy)
            c.flush()
            r = c.response(busy)
            assert r["status"] == 200
            assert json.loads(r["body"])["length"] > 10
        assert "request body deadline" in srv.log()


def test_wsgi_limit_concurrency_counts_streams():
    """--limit-concurrency 2 with WSGI threads: over one HTTP/2 connection two slow
    requests run, the third stream in progress at the same time gets 503 (over HTTP/1
    each would hold a connection of its own), and once they are done streams pass again."""
    with run_server(WSGI, "--threads", "4", "--limit-concurrency", "2") as srv:
        with H2(srv.port) as c:
            sids = [c.request("/slow?s=1") for _ in range(3)]
            got = [c.response(sid) for sid in sids]
            assert [r["status"] for r in got] == [200, 200, 503]
            assert got[0]["body"] == got[1]["body"] == b"slow done"
            again = [c.request("/slow?s=0.1") for _ in range(2)]
            assert [c.response(sid)["status"] for sid in again] == [200, 200]
        assert "concurrency limit reached" in srv.log()


def test_asgi_slow_reader_window(asgi_srv):
    """A large upload to an app that reads slowly completes: the window reopens as it reads."""
    body = os.urandom(1_500_000)
    with H2(asgi_srv.port) as c:
        sid = c.request("/echo?delay=0.001", "POST", body=body)
        got = json.loads(c.response(sid)["body"])
        assert got["length"] == len(body)
        assert got["sha256"] == hashlib.sha256(body).hexdigest()


# ---- responses -----------------------------------------------------------------------


@pytest.mark.parametrize("app_fixture", ["wsgi_srv", "asgi_srv"])
def test_streaming_response(request, app_fixture):
    srv = request.getfixturevalue(app_fixture)
    with H2(srv.port) as c:
        sid = c.request("/stream?n=200&size=10000")
        r = c.response(sid)
        assert r["status"] == 200
        assert len(r["body"]) == 2_000_000
        assert r["body"][:10000] == b"A" * 10000


def test_wsgi_write_large_response(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request("/write?size=300000&n=5")
        r = c.response(sid)
        assert r["status"] == 200 and len(r["body"]) == 1_500_000


def test_asgi_trailers_without_te(asgi_srv):
    with H2(asgi_srv.port) as c:
        sid = c.request("/trailers")
        r = c.response(sid)
        assert r["body"] == b"with trailers"
        assert r["trailers"] == {"x-checksum": "abc123"}


@pytest.mark.parametrize("status", [200, 299, 404])
def test_response_names_are_lower_cased_and_connection_fields_dropped(asgi_srv, status):
    """The h2 library refuses upper-case names and connection-specific fields (RFC 9113
    8.2): the response arrives only if the server lower-cased and dropped them."""
    with H2(asgi_srv.port) as c:
        r = c.response(c.request(f"/headers?status={status}"))
        assert r["status"] == status and r["body"] == b"ok"
        h = r["headers"]
        assert h["x-a"] == "1" and h["x-eight1"] == "2" and h["x-lower-already-but-z"] == "3"
        assert h["x-mixed-case-field-name-longer-than-sixteen"] == "4"
        assert h["content-length"] == "2"
        for name in ("connection", "keep-alive", "upgrade"):
            assert name not in h


def test_204_and_head_have_no_body(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request("/nocontent")
        r = c.response(sid)
        assert r["status"] == 204 and r["body"] == b"" and r["reset"] is None
        sid = c.request("/big?size=1000", "HEAD")
        r = c.response(sid)
        assert r["status"] == 200 and r["body"] == b""
        assert r["headers"]["content-length"] == "1000"


def test_content_length_is_enforced(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request("/long")
        r = c.response(sid)
        assert r["body"] == b"five " and r["reset"] is None
        sid = c.request("/short")
        r = c.response(sid)
        assert r["reset"] == h2.errors.ErrorCodes.INTERNAL_ERROR
        sid = c.request("/after")
        assert c.response(sid)["body"] == b"HTTP/2 /after"


def test_app_error_is_500_and_the_connection_goes_on(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        sid = c.request("/crash")
        assert c.response(sid)["status"] == 500
        sid = c.request("/after")
        assert c.response(sid)["status"] == 200


# ---- resets --------------------------------------------------------------------------


def test_asgi_reset_mid_response_disconnects_only_that_stream(asgi_srv, events_file):
    with H2(asgi_srv.port) as c:
        held = c.request("/hold")
        other = c.request("/stream?n=50&size=10000", end=True)
        c.wait(lambda: c.responses[held]["body"] == b"first", "the first body piece")
        c.conn.reset_stream(held)
        c.flush()
        assert wait_for(lambda: "http.disconnect hold" in read_events(events_file))
        r = c.response(other)
        assert r["status"] == 200 and len(r["body"]) == 500_000
        sid = c.request("/after")
        assert c.response(sid)["body"] == b"2 /after"


def test_wsgi_reset_mid_response_calls_close(wsgi_srv, events_file):
    with H2(wsgi_srv.port) as c:
        # 20 MB: far more than the stream window, so the response is still going
        sid = c.request("/stream?n=2000&size=10000&name=reset")
        c.wait(lambda: len(c.responses[sid]["body"]) > 0, "some body")
        c.conn.reset_stream(sid)
        c.flush()
        assert wait_for(lambda: "close reset" in read_events(events_file))
        after = c.request("/after")
        assert c.response(after)["body"] == b"HTTP/2 /after"


# ---- attack bounds, seen from the server ------------------------------------------------


def test_rapid_reset_gets_goaway_and_the_worker_serves_others(asgi_srv):
    with H2(asgi_srv.port) as c:
        for _ in range(1000):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(
                sid,
                [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")],
                end_stream=True,
            )
            c.conn.reset_stream(sid)
            if sid % 100 == 1:  # a burst at a time, as a flooding client writes
                try:
                    c.flush()
                except (BrokenPipeError, ConnectionResetError):
                    break
        try:
            c.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        c.until_closed()
        assert c.goaway is not None, "no GOAWAY"
        assert c.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    with H2(asgi_srv.port) as c:
        sid = c.request("/ok")
        assert c.response(sid)["body"] == b"2 /ok"


def test_ping_flood_gets_goaway(wsgi_srv):
    with H2(wsgi_srv.port) as c:
        try:
            for i in range(500):
                c.conn.ping(i.to_bytes(8, "big"))
            c.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        c.until_closed()
        assert c.goaway is not None
        assert c.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_header_list_over_the_limit_is_431(asgi_srv):
    with H2(asgi_srv.port) as c:
        sid = c.request("/", headers=[(f"x-h{i}", "v" * 1000) for i in range(80)])
        assert c.response(sid)["status"] == 431
        sid = c.request("/after")
        assert c.response(sid)["status"] == 200


def test_zero_window_client_is_closed_at_the_write_deadline():
    with run_server(WSGI, "--timeout-request-header", "1") as srv:
        settings = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        with H2(srv.port, settings=settings) as c:
            c.request("/big?size=100000")
            started = time.monotonic()
            assert c.until_closed(15.0), "the connection stayed open"
            assert time.monotonic() - started < 10.0


def test_wsgi_write_to_a_shut_window_gives_up_at_the_write_deadline(events_file):
    """write() on a stream whose window the client never opens: the stream is reset at the
    write deadline and the worker serves the next client."""
    with run_server(WSGI, "--timeout-request-header", "1") as srv:
        settings = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        with H2(srv.port, settings=settings) as stuck:
            sid = stuck.request("/write?size=100000&n=5")
            stuck.wait(lambda: stuck.responses[sid]["status"] == 200, "the head")
            started = time.monotonic()
            with H2(srv.port) as other:
                after = other.request("/other")
                assert other.response(after)["body"] == b"HTTP/2 /other"
            waited = time.monotonic() - started
            assert 0.5 < waited < 8.0, waited
            stuck.wait(lambda: stuck.responses[sid]["reset"] is not None, "the reset")
            assert stuck.responses[sid]["reset"] == h2.errors.ErrorCodes.CANCEL
        assert "Exception in WSGI application" not in srv.log()


# ---- lifecycle -----------------------------------------------------------------------


@needs_curl
@pytest.mark.parametrize("app", [WSGI, ASGI])
def test_graceful_term_finishes_the_active_stream(app):
    with run_server(app) as srv, H2(srv.port) as idle:
        sid = idle.request("/x")
        idle.response(sid)
        slow = subprocess.Popen(
            ["curl", "-sS", "--http2-prior-knowledge", "--max-time", "20", f"{srv.url}/slow?s=1.5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert wait_for(lambda: "GET /x" in srv.log())
        time.sleep(0.5)  # the slow request is in the application now
        srv.proc.send_signal(signal.SIGTERM)
        out, err = slow.communicate(timeout=25)
        assert slow.returncode == 0, err
        assert out == b"slow done"
        # the idle connection got GOAWAY (no error) and was closed
        assert idle.until_closed()
        assert idle.goaway is not None
        assert idle.goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
        assert srv.proc.wait(10) == 0


def test_idle_connection_gets_goaway_at_keep_alive_timeout():
    with run_server(WSGI, "--timeout-keep-alive", "1") as srv, H2(srv.port) as c:
        sid = c.request("/x")
        c.response(sid)
        started = time.monotonic()
        assert c.until_closed(10.0)
        assert c.goaway is not None
        assert 0.5 < time.monotonic() - started < 8.0


def test_starlette_over_h2():
    with run_server("apps.asgi_starlette:app") as srv, H2(srv.port) as c:
        sid = c.request(
            "/json", "POST", headers=[("content-type", "application/json")], body=b'{"a": 1}'
        )
        r = c.response(sid)
        assert r["status"] == 200, r
        assert json.loads(r["body"]) == {"received": {"a": 1}, "method": "POST"}
