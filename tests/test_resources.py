"""Resource bounds: memory (VmRSS of the worker) and file descriptors under big transfers,
slow clients and many requests. No timing assertions: only sizes and counts."""

import hashlib
import json
import os
import socket
import struct
import time

import pytest
from helpers import (
    HOST,
    TESTS_DIR,
    UNDER_ASAN,
    HTTPConn,
    assert_serving,
    build_request,
    fd_count,
    rss_kib,
    run_server,
    settled_fd_count,
    wait_for,
    worker_pid,
)

pytestmark = pytest.mark.resource

KIB, MIB, GIB = 1024, 1 << 20, 1 << 30

# Under `make test-asan` the server runs with ASan preloaded; its quarantine and shadow memory
# make RSS meaningless, so memory bounds are not asserted there (fd bounds and data still are).


def assert_rss_growth_below(growth_mib: float, limit_mib: float, what: str) -> None:
    if not UNDER_ASAN:
        assert growth_mib < limit_mib, f"{what}: worker RSS grew {growth_mib:.1f} MiB"


CHUNK = 65536


@pytest.fixture(scope="module")
def srv():
    """A server of its own, so that other tests do not disturb the measurements."""
    with run_server("apps.basic:app") as server:
        yield server


@pytest.fixture(scope="module")
def pid(srv):
    return worker_pid(srv)


class RssSampler:
    """Tracks the peak VmRSS of a process relative to a baseline taken at creation."""

    def __init__(self, pid: int):
        self.pid = pid
        self.baseline = self.peak = rss_kib(pid)

    def sample(self) -> None:
        self.peak = max(self.peak, rss_kib(self.pid))

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / KIB

    def assert_growth_below(self, limit_mib: float, what: str) -> None:
        detail = f"{what} ({self.baseline} KiB -> peak {self.peak} KiB)"
        assert_rss_growth_below(self.growth_mib, limit_mib, detail)


def start_big_response(conn: HTTPConn, size: int) -> None:
    conn.send(build_request("GET", f"/big?size={size}"))
    head = conn.read_until(b"\r\n\r\n")
    assert head is not None and head.startswith(b"HTTP/1.1 200"), head
    assert f"content-length: {size}".encode() in head.lower(), head


class BodyChecker:
    """Checks the 8-byte chunk indexes of /big's body as it streams past."""

    def __init__(self):
        self.offset = 0
        self.checked = 0

    def feed(self, data) -> None:
        start, end = self.offset, self.offset + len(data)
        first = -(-start // CHUNK) * CHUNK
        for boundary in range(first, end - 7, CHUNK):
            index = struct.unpack(">Q", data[boundary - start : boundary - start + 8])[0]
            assert index == boundary // CHUNK, f"chunk {boundary // CHUNK} arrived as {index}"
            self.checked += 1
        self.offset = end


def stream_body(conn: HTTPConn, amount: int, checker: BodyChecker, sampler: RssSampler) -> int:
    """Receive `amount` body bytes in big recv calls, sampling RSS every 32 MiB."""
    received = 0
    if conn.buf:
        leftover = bytes(conn.buf[:amount])
        del conn.buf[: len(leftover)]
        checker.feed(leftover)
        received += len(leftover)
    buffer = bytearray(MIB)
    view = memoryview(buffer)
    next_sample = 0
    while received < amount:
        count = conn.sock.recv_into(view[: min(MIB, amount - received)])
        if count == 0:
            break
        checker.feed(view[:count])
        received += count
        if received >= next_sample:
            sampler.sample()
            next_sample += 32 * MIB
    sampler.sample()
    return received


def test_gib_streamed_response_keeps_worker_rss_bounded(srv, pid):
    sampler = RssSampler(pid)
    checker = BodyChecker()
    with srv.connect(timeout=30) as conn:
        start_big_response(conn, GIB)
        received = stream_body(conn, GIB, checker, sampler)
        assert received == GIB
        assert checker.checked == GIB // CHUNK
        assert conn.request("GET", "/hello").body == b"hello world"
    sampler.assert_growth_below(50, "streaming 1 GiB")


def test_paused_client_keeps_worker_rss_bounded_and_others_served(srv, pid):
    sampler = RssSampler(pid)
    checker = BodyChecker()
    with srv.connect(timeout=30) as conn:
        start_big_response(conn, GIB)
        assert stream_body(conn, 16 * MIB, checker, sampler) == 16 * MIB
        for _ in range(12):  # the client stops reading for 3 s
            time.sleep(0.25)
            sampler.sample()
        assert_serving(srv.port)  # a stalled writer must not block the worker
        sampler.sample()
        assert stream_body(conn, 64 * MIB, checker, sampler) == 64 * MIB
    sampler.assert_growth_below(50, "client paused mid-stream")
    assert_serving(srv.port)


UPLOAD = 100 * MIB


def upload_blocks():
    block = os.urandom(MIB)
    for index in range(UPLOAD // MIB):
        yield bytes([index % 256]) + block[1:]


def expected_upload():
    digest = hashlib.sha256()
    for block in upload_blocks():
        digest.update(block)
    return {"bytes": UPLOAD, "sha256": digest.hexdigest()}


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_100mib_upload_read_in_pieces_keeps_worker_rss_bounded(srv, pid, framing):
    sampler = RssSampler(pid)
    digest = hashlib.sha256()
    with srv.connect(timeout=30) as conn:
        if framing == "chunked":
            conn.send(build_request("POST", "/upload", headers={"Transfer-Encoding": "chunked"}))
        else:
            conn.send(build_request("POST", "/upload", headers={"Content-Length": str(UPLOAD)}))
        for index, block in enumerate(upload_blocks()):
            digest.update(block)
            if framing == "chunked":
                half = len(block) // 3
                conn.send(
                    b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n"
                    % (half, block[:half], len(block) - half, block[half:])
                )
            else:
                conn.send(block)
            if index % 8 == 0:
                sampler.sample()
        if framing == "chunked":
            conn.send(b"0\r\n\r\n")
        response = conn.read_response()
        sampler.sample()
    assert response.status == 200, response
    assert json.loads(response.body) == {"bytes": UPLOAD, "sha256": digest.hexdigest()}
    sampler.assert_growth_below(50, f"100 MiB {framing} upload")


HELLO = build_request("GET", "/hello")
BATCH = 100


def pipelined_batches(conn: HTTPConn, batches: int, response_size: int) -> None:
    """`batches` times: send BATCH pipelined requests at once, read all BATCH responses."""
    for _ in range(batches):
        conn.send(HELLO * BATCH)
        data = conn.read_exact(response_size * BATCH)
        assert len(data) == response_size * BATCH, "connection closed mid-batch"
        assert data.count(b"HTTP/1.1 200 ") == BATCH, data[:500]
        assert data.endswith(b"\r\n\r\nhello world")


def separate_connections(port: int, count: int) -> None:
    """`count` connections, one `Connection: close` request each, each closed by the server."""
    request = build_request("GET", "/hello", headers={"Connection": "close"})
    for _ in range(count):
        with HTTPConn(socket.create_connection((HOST, port), timeout=10)) as conn:
            conn.send(request)
            assert conn.read_response().body == b"hello world"
            assert conn.wait_closed(5.0) == b"", "server did not close after Connection: close"


@pytest.mark.serial
def test_100k_requests_leave_no_fd_or_rss_growth(srv, pid):
    with srv.connect() as conn:
        first = conn.request("GET", "/hello")
        response_size = len(first.raw_head) + len(first.body)
        pipelined_batches(conn, 20, response_size)  # warm-up
    separate_connections(srv.port, 200)
    fds_before, rss_before = settled_fd_count(pid), rss_kib(pid)

    for _ in range(4):  # 4 connections x 250 batches x 100 pipelined requests = 100,000
        with srv.connect() as conn:
            pipelined_batches(conn, 250, response_size)
    separate_connections(srv.port, 3000)

    settled = wait_for(lambda: abs(fd_count(pid) - fds_before) <= 2, 5.0)
    assert settled, f"worker fds {fds_before} -> {fd_count(pid)} after 103,000 requests"
    growth = (rss_kib(pid) - rss_before) / KIB
    assert_rss_growth_below(growth, 10, "103,000 requests")
    assert_serving(srv.port)


def test_many_concurrent_connections_are_released(srv, pid):
    fds_before = settled_fd_count(pid)
    conns = [srv.connect() for _ in range(300)]
    try:
        for conn in conns:
            conn.send(HELLO)
        for conn in conns:
            assert conn.read_response().body == b"hello world"
        assert fd_count(pid) >= fds_before + 300, "connections not held by the worker?"
    finally:
        for conn in conns:
            conn.close()
    settled = wait_for(lambda: abs(fd_count(pid) - fds_before) <= 2, 5.0)
    assert settled, f"worker fds {fds_before} -> {fd_count(pid)} after 300 closed connections"
    assert_serving(srv.port)


def test_aborted_uploads_release_memory_and_fds(srv, pid):
    fds_before = settled_fd_count(pid)
    sampler = RssSampler(pid)
    for _ in range(20):
        with srv.connect() as conn:
            conn.send(build_request("POST", "/upload", headers={"Content-Length": str(GIB)}))
            conn.send(b"a" * (4 * MIB))
            sampler.sample()
    assert wait_for(lambda: abs(fd_count(pid) - fds_before) <= 2, 5.0), fd_count(pid)
    sampler.sample()
    sampler.assert_growth_below(50, "20 aborted uploads")
    assert_serving(srv.port)


def test_file_wrapper_responses_do_not_leak_fds(srv, pid, tmp_path):
    path = tmp_path / "served.bin"
    path.write_bytes(os.urandom(100_000))
    request = build_request("GET", f"/file?path={path}")
    with srv.connect() as conn:
        conn.request("GET", f"/file?path={path}")
        fds_before = settled_fd_count(pid)
        for _ in range(20):
            conn.send(request * 10)
            for _ in range(10):
                assert len(conn.read_response().body) == 100_000
        assert wait_for(lambda: fd_count(pid) <= fds_before + 2, 5.0), (
            f"worker fds {fds_before} -> {fd_count(pid)} after 200 file responses"
        )


def send_repeatedly(srv, request: bytes, status: int, count: int) -> None:
    """`count` requests, pipelined up to 100 at a time; when the server closes after a
    response (as it may after an application error), reconnects and sends the rest."""
    done = 0
    while done < count:
        with srv.connect() as conn:
            while done < count:
                batch = min(100, count - done)
                conn.send(request * batch)
                closed = False
                for _ in range(batch):
                    response = conn.read_response()
                    assert response.status == status, response
                    done += 1
                    if response.closes:
                        closed = True
                        break
                if closed:
                    break


@pytest.mark.parametrize(
    ("target", "body", "status"),
    [
        ("/echo", b"e" * 1024, 200),
        ("/raise-before?token=leak", b"", 500),
        (f"/file-validated?path={TESTS_DIR / 'helpers.py'}", b"", 200),
    ],
    ids=["post-echo", "app-exception", "file-wrapper"],
)
def test_repeated_requests_do_not_grow_rss(srv, pid, target, body, status):
    request = build_request("POST" if body else "GET", target, body=body)
    send_repeatedly(srv, request, status, 500)  # warm-up
    rss_before = rss_kib(pid)
    send_repeatedly(srv, request, status, 5000)
    growth = (rss_kib(pid) - rss_before) / KIB
    assert_rss_growth_below(growth, 10, f"5,000 requests to {target}")
