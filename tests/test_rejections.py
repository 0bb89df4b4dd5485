"""Requests the server answers without the application leave a trace: one access line in the
format of every other access line, and one `pyserver.error` line at INFO that says why, at
most 10 of those a second per worker (then a "Suppressed K" summary). --limit-concurrency
counts open connections for WSGI and ASGI alike.

The lines are written before the answer is sent, so a test that has the answer can look for
them at once.
"""

import re
import socket
import threading
import time

import pytest
from helpers import (
    HOST,
    HTTPConn,
    build_request,
    chunked,
    fd_count,
    fetch,
    run_server,
    settled_fd_count,
    wait_for,
)

APPS = {"wsgi": "apps.basic:app", "asgi": "apps.asgi_basic:app"}
LINES_PER_SECOND = 10  # PS_REJECT_LINES_PER_SECOND in csrc/py/bridge.h
HEAD_TIMEOUT = 0.5
LIMITS = (
    "--limit-request-body",
    "1000",
    "--limit-request-fields",
    "20",
    "--limit-request-field-size",
    "2000",
    "--limit-request-line",
    "2000",
    "--timeout-request-header",
    str(HEAD_TIMEOUT),
)


def head(*lines: bytes, line: bytes = b"GET /hello HTTP/1.1", body: bytes = b"") -> bytes:
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in lines) + b"\r\n" + body


H = b"Host: 127.0.0.1"
POST = b"POST /echo HTTP/1.1"

# (id, request bytes, status, the access line's request part, the reason)
CASES = [
    ("invalid-method", head(H, line=b"G(T /hello HTTP/1.1"), 400, "-", "invalid method"),
    ("two-hosts", head(H, b"Host: other"), 400, "GET /hello HTTP/1.1", "more than one Host"),
    ("no-host", head(), 400, "GET /hello HTTP/1.1", "no Host"),
    (
        "two-content-types",
        head(H, b"Content-Type: text/plain", b"Content-Type: text/html"),
        400,
        "GET /hello HTTP/1.1",
        "more than one Content-Type",
    ),
    (
        "bad-chunk-size",
        head(H, b"Transfer-Encoding: chunked", line=POST, body=b"zz\r\nhello\r\n0\r\n\r\n"),
        400,
        "POST /echo HTTP/1.1",
        "invalid chunk size",
    ),
    (
        "content-length-over-limit",
        head(H, b"Content-Length: 5000", line=POST, body=b"x" * 100),
        413,
        "POST /echo HTTP/1.1",
        "body too large",
    ),
    (
        "chunked-body-over-limit",
        head(H, b"Transfer-Encoding: chunked", line=POST, body=chunked(b"x" * 600, b"y" * 600)),
        413,
        "POST /echo HTTP/1.1",
        "body too large",
    ),
    (
        "request-line-too-long",
        head(H, line=b"GET /" + b"a" * 2100 + b" HTTP/1.1"),
        414,
        "-",
        "request line too long",
    ),
    (
        "too-many-fields",
        head(H, *(b"X-F%d: v" % i for i in range(25))),
        431,
        "GET /hello HTTP/1.1",
        "too many header fields",
    ),
    (
        "field-too-large",
        head(H, b"X-Big: " + b"b" * 2100),
        431,
        "GET /hello HTTP/1.1",
        "header field too large",
    ),
    (
        "http-version-not-supported",
        head(H, line=b"GET /hello HTTP/3.0"),
        505,
        "GET /hello HTTP/3.0",
        "unsupported HTTP version",
    ),
    (
        "head-deadline",
        b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        408,
        "GET /hello HTTP/1.1",
        "request head deadline",
    ),
    ("head-deadline-in-the-line", b"GET /hel", 408, "-", "request head deadline"),
    (
        "quote-in-target-is-escaped",
        head(H, b"Host: other", line=b'GET /a"b HTTP/1.1'),
        400,
        "GET /a\\x22b HTTP/1.1",
        "more than one Host",
    ),
]


def lines_of(log: str, needle: str) -> list[str]:
    return [line for line in log.splitlines() if needle in line]


# The default access line is CLIENT - USER [TIME] "REQUEST" STATUS BYTES SECONDS; these tests
# read it as CLIENT - "REQUEST" STATUS.
ACCESS = re.compile(r'^INFO:\s+(\S+) - \S+ \[[^]]+\] "(.*)" (\d+) \d+ \d+\.\d{6}$')


def access_of(log: str, needle: str) -> list[str]:
    lines = [f'{m[1]} - "{m[2]}" {m[3]}' for m in map(ACCESS.match, log.splitlines()) if m]
    return [line for line in lines if needle in line]


def reject(port: int, data: bytes, timeout: float = 5.0):
    """Sends data on a new connection; returns (client port, status of the answer), after
    the server closed the connection."""
    with HTTPConn(socket.create_connection((HOST, port), timeout=timeout)) as conn:
        client_port = conn.local_port()
        conn.send(data)
        response = conn.read_response()
        assert response.closes, response
        assert conn.wait_closed() is not None, "the connection stayed open after the answer"
    return client_port, response.status


@pytest.fixture(scope="module", params=sorted(APPS))
def limited_server(request):
    with run_server(APPS[request.param], *LIMITS) as server:
        yield server


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rejection_gets_an_access_line_and_a_reason(limited_server, case):
    _, data, status, request_line, reason = case
    time.sleep(1.0 / LINES_PER_SECOND)  # stays under the rate limit, whatever the order
    client_port, answered = reject(limited_server.port, data)
    assert answered == status
    peer = f"127.0.0.1:{client_port}"
    log = limited_server.log()
    access = access_of(log, f'{peer} - "')
    assert access == [f'{peer} - "{request_line}" {status}'], log[-3000:]
    why = lines_of(log, f"from {peer}:")
    shown = "" if request_line == "-" else f' "{request_line}"'
    # Error-log lines: "[time] [pid] [INFO] message".
    why = [re.sub(r"^\[[^]]+\] \[\d+\] ", "", line) for line in why]
    assert why == [f"[INFO] Rejected {status}{shown} from {peer}: {reason}"], log[-3000:]


@pytest.mark.parametrize("interface", sorted(APPS))
def test_unsupported_transfer_coding_is_logged_with_its_reason(interface):
    """501 today; 400 once a final coding other than chunked is a bad request (RFC 9112
    section 6.3): either way it is logged, naming the transfer coding."""
    with run_server(APPS[interface]) as server:
        data = head(H, b"Transfer-Encoding: foo", line=POST)
        client_port, status = reject(server.port, data)
        assert status in (400, 501)
        peer = f"127.0.0.1:{client_port}"
        log = server.log()
        assert access_of(log, f'{peer} - "POST /echo HTTP/1.1" {status}'), log
        (why,) = lines_of(log, f"from {peer}:")
        assert f"Rejected {status} " in why and "transfer" in why.lower(), why


def test_wsgi_body_that_stalls_before_the_application_gets_408_with_its_reason():
    with run_server(APPS["wsgi"], "--timeout-request-body", str(HEAD_TIMEOUT)) as server:
        data = head(H, b"Content-Length: 10", line=POST, body=b"abc")
        client_port, status = reject(server.port, data)
        assert status == 408
        peer = f"127.0.0.1:{client_port}"
        log = server.log()
        assert access_of(log, f'{peer} - "POST /echo HTTP/1.1" 408'), log
        assert lines_of(log, f"from {peer}: request body deadline"), log


def test_good_requests_log_no_reason():
    with run_server(APPS["wsgi"]) as server:
        for _ in range(3):
            assert fetch(server.port, "GET", "/hello").status == 200
        # A normal access line is written once the response is out: it may follow it.
        assert wait_for(lambda: len(lines_of(server.log(), '"GET /hello HTTP/1.1" 200')) == 3)
        assert "Rejected" not in server.log(), server.log()


def test_no_access_log_keeps_the_reason():
    with run_server(APPS["wsgi"], "--no-access-log") as server:
        client_port, status = reject(server.port, head(H, b"Host: other"))
        assert status == 400
        assert fetch(server.port, "GET", "/hello").status == 200
        time.sleep(0.2)  # a normal access line would follow its response closely
        log = server.log()
        peer = f"127.0.0.1:{client_port}"
        assert lines_of(log, f'Rejected 400 "GET /hello HTTP/1.1" from {peer}: '), log
        assert not access_of(log, f'{peer} - "'), log
        assert not lines_of(log, '"GET /hello HTTP/1.1" 200'), log


@pytest.mark.parametrize("interface", sorted(APPS))
def test_log_level_warning_drops_the_reason(interface):
    with run_server(APPS[interface], "--log-level", "warning") as server:
        client_port, status = reject(server.port, head(H, b"Host: other"))
        assert status == 400
        assert fetch(server.port, "GET", "/hello").status == 200
        log = server.log()
        assert "Rejected" not in log, log
        assert f"127.0.0.1:{client_port}" not in log, log


class Flood:
    """`threads` threads sending bad requests, one connection each, until at least `total`
    went out and at least `seconds` passed."""

    def __init__(self, port: int, total: int, seconds: float, threads: int = 4):
        self.port, self.left, self.lock = port, total, threading.Lock()
        self.until = time.monotonic() + seconds
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]

    def run(self):
        while True:
            with self.lock:
                if self.left <= 0 and time.monotonic() >= self.until:
                    return
                self.left -= 1
            try:
                _, status = reject(self.port, b"G(T / HTTP/1.1\r\n\r\n")
                with self.lock:
                    self.statuses.append(status)
            except (OSError, AssertionError) as exc:
                with self.lock:
                    self.errors.append(repr(exc))


def test_a_flood_of_bad_requests_is_rate_limited_and_good_clients_are_served():
    with run_server(APPS["wsgi"]) as server:
        started = time.monotonic()
        flood = Flood(server.port, 2000, seconds=2.5)  # a few one-second windows
        for t in flood.threads:
            t.start()
        good = []
        while any(t.is_alive() for t in flood.threads):
            good.append(fetch(server.port, "GET", "/hello", timeout=5.0).status)
            time.sleep(0.02)
        for t in flood.threads:
            t.join(60)
        elapsed = time.monotonic() - started
        total = len(flood.statuses)
        assert not flood.errors, flood.errors[:5]
        assert total >= 2000 and flood.statuses == [400] * total
        assert good and all(status == 200 for status in good), good
        # The last second's summary comes once that second is over.
        summary = re.compile(r"Suppressed (\d+) rejections in the last second")
        expected = total

        def accounted():
            log = server.log()
            logged = len(lines_of(log, "Rejected 400 from "))
            dropped = sum(int(m.group(1)) for m in summary.finditer(log))
            return logged + dropped == expected

        assert wait_for(accounted, 5.0), server.log()[-3000:]
        log = server.log()
        reasons = lines_of(log, "Rejected 400 from ")
        summaries = summary.findall(log)
        windows = int(elapsed) + 2  # one-second windows the flood can have touched
        assert len(reasons) <= LINES_PER_SECOND * windows, (len(reasons), elapsed)
        assert 2 <= len(summaries) <= windows, (summaries, elapsed)
        # Every rejection has its access line all the same.
        assert len(access_of(log, ' - "-" 400')) == total
        assert fetch(server.port, "GET", "/hello").status == 200


def open_connections(pid: int, baseline: int) -> int:
    return fd_count(pid) - baseline


@pytest.mark.parametrize("interface", sorted(APPS))
def test_limit_concurrency_counts_open_connections(interface):
    """--limit-concurrency 2: two slow clients (heads still arriving) are two connections;
    a request on a third is answered 503 and closed, and once it is gone the two slow
    ones are served, then new clients again."""
    limit = 2
    with run_server(APPS[interface], "--limit-concurrency", str(limit)) as server:
        assert fetch(server.port, "GET", "/hello").status == 200
        time.sleep(0.3)
        baseline = fd_count(server.pid)
        slow = [server.connect() for _ in range(limit)]
        try:
            for conn in slow:
                conn.send(b"GET /hello HTTP/1.1\r\n")
            assert wait_for(lambda: open_connections(server.pid, baseline) == limit, 5.0)
            with server.connect() as extra:
                client_port = extra.local_port()
                response = extra.request("GET", "/hello")
                assert response.status == 503, response
                assert response.closes, response
            peer = f"127.0.0.1:{client_port}"
            log = server.log()
            assert access_of(log, f'{peer} - "GET /hello HTTP/1.1" 503'), log
            assert lines_of(
                log, f'Rejected 503 "GET /hello HTTP/1.1" from {peer}: concurrency limit'
            ), log
            # The refused connection is closed by the server: the slow ones are alone again.
            assert wait_for(lambda: open_connections(server.pid, baseline) == limit, 5.0)
            for conn in slow:
                conn.send(b"Host: 127.0.0.1\r\n\r\n")
                response = conn.read_response()
                assert response.status == 200, response
                assert response.body == b"hello world"
        finally:
            for conn in slow:
                conn.close()
        assert wait_for(lambda: fetch(server.port, "GET", "/hello").status == 200, 5.0)


def test_limit_concurrency_wsgi_keep_alive_connections_count():
    """Idle keep-alive connections are open connections too (as in uvicorn)."""
    with run_server(APPS["wsgi"], "--limit-concurrency", "1") as server:
        # The loop runs (and holds its own fds) once a request was served: the port accepts
        # connections a little earlier, as soon as it is bound.
        assert fetch(server.port, "GET", "/hello").status == 200
        baseline = settled_fd_count(server.pid)
        with server.connect() as first:
            assert first.request("GET", "/hello").status == 200
            response = fetch(server.port, "GET", "/hello")
            assert response.status == 503, response
            # Once the server closed the refused connection, the first one is served still.
            assert wait_for(lambda: open_connections(server.pid, baseline) == 1, 5.0)
            assert first.request("GET", "/hello").status == 200
        assert wait_for(lambda: fetch(server.port, "GET", "/hello").status == 200, 5.0)


def test_request_after_503_is_not_parsed_on_that_connection():
    """The 503 closes its connection: a pipelined request behind it is not answered."""
    with run_server(APPS["wsgi"], "--limit-concurrency", "1") as server:
        with server.connect() as first:
            assert first.request("GET", "/hello").status == 200
            with server.connect() as extra:
                extra.send(build_request("GET", "/hello") * 2)
                assert extra.read_response().status == 503
                assert extra.wait_closed() == b""


@pytest.mark.parametrize("interface", sorted(APPS))
def test_rejections_are_logged_by_workers_under_a_master(interface):
    with run_server(APPS[interface], "-w", "2") as server:
        client_port, status = reject(server.port, head(H, line=b"GET /x HTTP/3.0"))
        assert status == 505
        peer = f"127.0.0.1:{client_port}"
        log = server.log()
        assert access_of(log, f'{peer} - "GET /x HTTP/3.0" 505'), log
        assert lines_of(log, f'Rejected 505 "GET /x HTTP/3.0" from {peer}: unsupported'), log
