"""Hostile clients next to good ones, on one worker (WSGI and ASGI).

While good clients keep sending requests, other clients at the same time send heads
byte by byte (slowloris), stall in a small body, send garbage, reset connections in the
middle of a request or of a response, pipeline requests without reading the answers,
and leave connections idle. Each of them may cost its own connection only: every good
request gets its answer, every bad connection gets a 4xx or is closed, the worker is the
same process afterwards, and its descriptors and memory come back down.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import sys
import threading
import time

import pytest
from helpers import (
    HOST,
    UNDER_ASAN,
    fd_count,
    rss_kib,
    run_server,
    settled_fd_count,
    wait_for,
    worker_pid,
)

HEADER_TIMEOUT = 1.0  # --timeout-request-header: how long a head may take
BODY_TIMEOUT = 1.0  # --timeout-request-body: how long a body may make no progress
HOSTILE_SECONDS = 3.0


@pytest.fixture(params=["wsgi", "asgi"])
def srv(request):
    spec = "apps.basic:app" if request.param == "wsgi" else "apps.asgi_basic:app"
    args = [
        *("--timeout-request-header", str(HEADER_TIMEOUT)),
        *("--timeout-request-body", str(BODY_TIMEOUT)),
        "--no-access-log",
    ]
    with run_server(spec, *args) as server:
        yield server


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=timeout)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (a reset counts as a close)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Crowd:
    """Runs one function per thread in a loop until stopped; collects failures."""

    def __init__(self):
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def add(self, name: str, fn, *args) -> None:
        def loop():
            while not self.stop.is_set():
                try:
                    fn(*args)
                except AssertionError as exc:
                    self.fail(f"{name}: {exc}")
                except OSError as exc:
                    self.fail(f"{name}: {exc!r}")
                with self.lock:
                    self.counts[name] = self.counts.get(name, 0) + 1

        self.threads.append(threading.Thread(target=loop, name=name, daemon=True))

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)

    def run(self, seconds: float) -> None:
        for thread in self.threads:
            thread.start()
        time.sleep(seconds)
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive(), f"{thread.name} did not finish"


# ---- the good ones


def good_keep_alive(port: int) -> None:
    with connect(port) as sock:
        for _ in range(20):
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                assert chunk, f"closed after {head!r}"
                head += chunk
            assert head.startswith(b"HTTP/1.1 200 "), head


def good_new_connection(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"hello world"), reply


# ---- the bad ones


def slowloris(port: int) -> None:
    """A head sent a header line at a time, slower than the head timeout allows."""
    with connect(port) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + 10 * HEADER_TIMEOUT
        while time.monotonic() < deadline:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                return  # closed by the server
            time.sleep(0.25)  # 4 lines a second: always progress, never a whole head
            sock.settimeout(0.01)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return
            assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data
            return
        raise AssertionError("a head that never ends was not cut off")


def stalled_body(port: int) -> None:
    """A small body that stops arriving: 408, without the app ever being in the way."""
    with connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"a" * 10)
        reply = read_all(sock)
        # WSGI: the server reads the body before the app runs and answers the stall itself;
        # ASGI: the app waits in receive(), gets http.disconnect, and the client the 408.
        assert reply.startswith(b"HTTP/1.1 408 "), reply
        assert b"connection: close" in reply.lower(), reply


def garbage(port: int, rng: random.Random) -> None:
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
    with connect(port) as sock:
        try:
            sock.sendall(junk + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return  # refused before it was all sent
        reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 4"), (junk, reply)
        assert b"connection: close" in reply.lower(), reply


def reset_mid_request(port: int, rng: random.Random) -> None:
    request = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"b" * 5000
    sock = connect(port)
    sock.sendall(request[: rng.randrange(1, len(request))])
    reset(sock)


def reset_mid_response(port: int) -> None:
    sock = connect(port)
    sock.sendall(b"GET /big?size=8000000 HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.recv(1000)
    reset(sock)


def pipeline_without_reading(port: int) -> None:
    """Many requests in one write; the answers are never read."""
    sock = connect(port)
    try:
        sock.settimeout(2.0)
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading: that is the backpressure
    finally:
        reset(sock)


# ---- the test


def test_bad_clients_cost_only_their_own_connections(srv):
    pid = worker_pid(srv)
    fds_before = settled_fd_count(pid)
    rss_before = rss_kib(pid)
    idle = [connect(srv.port) for _ in range(200)]  # never send anything
    crowd = Crowd()
    rng = random.Random(8190)
    for i in range(2):
        crowd.add(f"good keep-alive {i}", good_keep_alive, srv.port)
        crowd.add(f"good new connection {i}", good_new_connection, srv.port)
    for i in range(20):
        crowd.add(f"slowloris {i}", slowloris, srv.port)
    crowd.add("stalled body", stalled_body, srv.port)
    crowd.add("garbage", garbage, srv.port, rng)
    crowd.add("reset mid-request", reset_mid_request, srv.port, random.Random(9))
    crowd.add("reset mid-response", reset_mid_response, srv.port)
    crowd.add("pipeline without reading", pipeline_without_reading, srv.port)
    crowd.run(HOSTILE_SECONDS)

    assert not crowd.failures, crowd.failures[:5]
    for name in ("good keep-alive 0", "good new connection 0", "garbage", "stalled body"):
        assert crowd.counts.get(name, 0) >= 2, crowd.counts
    # The idle connections were closed by the server (keep-alive timeout), or are still
    # open; either way the worker is the same process and still serves.
    for sock in idle:
        sock.close()
    assert worker_pid(srv) == pid
    assert wait_for(lambda: fd_count(pid) <= fds_before + 2, 15), (fds_before, fd_count(pid))
    if not UNDER_ASAN:
        grown_mib = (rss_kib(pid) - rss_before) / 1024
        assert grown_mib < 30, f"worker RSS grew {grown_mib:.1f} MiB"


def test_out_of_descriptors_new_connections_are_shed_and_the_worker_recovers():
    """With its descriptors used up by open connections, the worker drops the connections
    it cannot take (accepting each on a spare descriptor and closing it) instead of leaving
    them in the queue or spinning; once connections close it serves as before."""
    wrapper = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64));"
        "os.execv(sys.executable, [sys.executable, '-m', 'pyserver', *sys.argv[1:]])"
    )
    args = ("--timeout-keep-alive", "60", "--no-access-log")
    command = [sys.executable, "-c", wrapper]
    with run_server("apps.basic:app", *args, command=command) as srv:
        pid = worker_pid(srv)
        fds_before = settled_fd_count(pid)
        clients = [connect(srv.port) for _ in range(100)]  # more than the worker can hold
        served = shed = 0
        for sock in clients:
            try:
                sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                reply = b""
            if reply.startswith(b"HTTP/1.1 200 "):
                served += 1
            else:
                assert reply == b"", reply
                shed += 1
        assert served > 0 and shed > 0, (served, shed)
        assert fd_count(pid) <= 64
        # At the limit with nothing left to accept, the worker sleeps.
        cpu = cpu_seconds(pid)
        time.sleep(1.0)
        assert cpu_seconds(pid) - cpu < 0.5
        for sock in clients:
            sock.close()
        assert wait_for(lambda: fd_count(pid) <= fds_before + 1, 10), fd_count(pid)
        with connect(srv.port) as sock:
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(sock).startswith(b"HTTP/1.1 200 ")
        assert worker_pid(srv) == pid


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
