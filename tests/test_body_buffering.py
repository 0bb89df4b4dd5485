"""Request bodies never stall a worker.

A single-threaded WSGI worker reads each request body in its event loop before it calls the
application: in memory up to --body-spool-threshold, past it in an unlinked temporary file
in $TMPDIR. So a client that stalls in its body (with or without `Expect: 100-continue`)
costs only its own connection: other clients are answered at once, and the stalled one gets
408 once its body made no progress for --timeout-request-body. ASGI apps get the body as it
arrives (not buffered); a stalled upload there ends the same way (http.disconnect for the
app, 408 for the client).

Every server here gets a TMPDIR of its own, so its spool files can be found in
/proc/<worker>/fd (a spool file shows there as "<TMPDIR>/... (deleted)").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import socket
import struct
import threading
import time

import pytest
from helpers import (
    HOST,
    UNDER_ASAN,
    HTTPConn,
    build_request,
    chunked,
    fetch,
    rss_kib,
    run_cli,
    run_server,
    wait_for,
)

MIB = 1 << 20
THRESHOLD = MIB  # the default --body-spool-threshold
BODY_TIMEOUT = 1.0  # --timeout-request-body of the servers here
# seconds: how long a good client may wait next to a stalled one (a stalled client
# would hold it for the whole upload or timeout)
SECOND_CLIENT_LIMIT = 1.5 if UNDER_ASAN else 0.5
WSGI, ASGI = "apps.body_apps:app", "apps.body_apps:asgi_app"
DISCONNECT_LINE = "body-apps: http.disconnect"


@contextlib.contextmanager
def body_server(tmp_path_factory, spec, *args, master=False, env=None):
    """A server for `spec` with --timeout-request-body BODY_TIMEOUT and a TMPDIR of its own;
    `master` runs it under a master process (one worker, so that every client meets the same
    worker). Sets srv.tmpdir and srv.worker (the pid that runs the app)."""
    tmpdir = tmp_path_factory.mktemp("spool")
    extra = ["--timeout", "30"] if master else []
    args = ["--timeout-request-body", str(BODY_TIMEOUT), "--no-access-log", *extra, *args]
    with run_server(spec, *args, env={"TMPDIR": str(tmpdir), **(env or {})}) as srv:
        srv.tmpdir = os.path.realpath(tmpdir)
        srv.worker = int(fetch(srv.port, "GET", "/pid").body)
        assert (srv.worker != srv.pid) == master, "a master, or a single process, as asked"
        yield srv


def spool_files(srv) -> list[str]:
    """The worker's open descriptors that are files in the server's TMPDIR."""
    found = []
    fd_dir = f"/proc/{srv.worker}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith(srv.tmpdir + os.sep):
            found.append(target)
    return found


def assert_no_spool_files(srv) -> None:
    assert wait_for(lambda: not spool_files(srv), 5.0), spool_files(srv)
    assert os.listdir(srv.tmpdir) == [], "a spool file was left with a name"


def assert_answered_quickly(srv) -> None:
    """A new client's GET is answered within SECOND_CLIENT_LIMIT."""
    start = time.monotonic()
    response = fetch(srv.port, "GET", "/hello", timeout=10)
    elapsed = time.monotonic() - start
    assert (response.status, response.body) == (200, b"hello world"), response
    assert elapsed < SECOND_CLIENT_LIMIT, f"a second client waited {elapsed:.2f}s"


def connect(srv, timeout=10.0) -> HTTPConn:
    return HTTPConn(socket.create_connection((HOST, srv.port), timeout=timeout))


def reset(conn: HTTPConn) -> None:
    """Close with an RST instead of a FIN."""
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def post_head(headers: dict, target: str = "/input") -> bytes:
    return build_request("POST", target, headers=headers)


def upload(srv, body: bytes, target: str = "/input", framing: str = "content-length") -> dict:
    """POST body to target on a new connection; returns the app's JSON answer."""
    with connect(srv, timeout=60) as conn:
        if framing == "chunked":
            pieces = [body[i : i + 100_000] for i in range(0, len(body), 100_000)]
            conn.send(post_head({"Transfer-Encoding": "chunked"}, target) + chunked(*pieces))
        else:
            conn.send(post_head({"Content-Length": str(len(body))}, target) + body)
        response = conn.read_response()
    assert response.status == 200, response
    return json.loads(response.body)


# ---- the five stall shapes, WSGI and ASGI, single process and under a master

STALLS = {
    # name: (headers, body bytes sent, waits for 100 Continue first)
    "expect-nothing": ({"Content-Length": "5", "Expect": "100-continue"}, b"", True),
    "expect-partial": ({"Content-Length": "5", "Expect": "100-continue"}, b"ab", True),
    "length-nothing": ({"Content-Length": "5"}, b"", False),
    "length-partial": ({"Content-Length": "5"}, b"ab", False),
    "chunked-one-chunk": ({"Transfer-Encoding": "chunked"}, b"3\r\nabc\r\n", False),
}


@pytest.fixture(
    scope="module",
    params=[(WSGI, False), (WSGI, True), (ASGI, False), (ASGI, True)],
    ids=["wsgi", "wsgi-master", "asgi", "asgi-master"],
)
def stall_srv(request, tmp_path_factory):
    spec, master = request.param
    with body_server(tmp_path_factory, spec, master=master) as srv:
        srv.asgi = spec == ASGI
        yield srv


@pytest.mark.parametrize("shape", list(STALLS))
def test_stalled_body_costs_only_its_connection_and_gets_408(stall_srv, shape):
    srv = stall_srv
    headers, sent, expect = STALLS[shape]
    disconnects = srv.log().count(DISCONNECT_LINE)
    with connect(srv) as stalled:
        start = time.monotonic()
        stalled.send(post_head(headers))
        if expect:
            interim = stalled.read_response()
            assert interim.status == 100, interim
        stalled.send(sent)
        for _ in range(3):
            assert_answered_quickly(srv)
        assert stalled.buf == b"", "the stalled client was answered before its deadline"
        reply = stalled.read_to_eof()
        waited = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert b"connection: close" in reply.lower(), reply
    assert waited >= BODY_TIMEOUT * 0.9, f"408 after {waited:.2f}s, before the body deadline"
    if srv.asgi:
        # The app was waiting in receive(): it hears http.disconnect.
        assert wait_for(lambda: srv.log().count(DISCONNECT_LINE) > disconnects), srv.log_tail()
    else:
        assert_no_spool_files(srv)
    assert_answered_quickly(srv)


def test_asgi_body_stalled_while_a_response_streams_is_cut_off(tmp_path_factory):
    """The app streams a large response while it waits for the body: once the client has
    read that response, the stalled body's clock still runs, and the connection is closed
    (the response started, so no 408) with http.disconnect for the app."""
    with body_server(tmp_path_factory, ASGI) as srv:
        with connect(srv) as conn:
            conn.send(post_head({"Content-Length": "10"}, "/duplex") + b"hello")
            time.sleep(0.3)  # the app is in receive() with its response queued
            head = conn.read_until(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), head
            start = time.monotonic()
            rest = conn.read_to_eof()  # within the 10 s socket timeout, or ReadTimeout
            waited = time.monotonic() - start
        assert len(rest) >= 8 << 20, len(rest)
        assert not rest.endswith(b"0\r\n\r\n"), "the response was not cut off"
        assert waited >= BODY_TIMEOUT * 0.9, waited
        assert wait_for(lambda: f"{DISCONNECT_LINE} in /duplex" in srv.log()), srv.log_tail()


# ---- WSGI: memory, spool file, and what the app reads


@pytest.fixture(scope="module")
def wsgi_srv(tmp_path_factory):
    with body_server(tmp_path_factory, WSGI) as srv:
        yield srv


def lines_body(size: int, seed: int) -> bytes:
    """`size` bytes in lines of assorted lengths, one of them spanning the threshold offset
    and several 64 KiB pieces of the spool file."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        if THRESHOLD - 150_000 < len(out) < THRESHOLD:
            length = 300_000
        else:
            length = rng.choice([0, 1, 79, 4000, 70_000])
        out += bytes([97 + rng.randrange(26)]) * length + b"\n"
    return bytes(out[:size])


def expected_pieces(body: bytes, mode: str, n: int) -> list[bytes]:
    stream = io.BytesIO(body)
    if mode == "read":
        return [stream.read()]
    if mode == "read-n":
        return list(iter(lambda: stream.read(n), b""))
    if mode == "readline-n":
        return list(iter(lambda: stream.readline(n), b""))
    return stream.readlines()  # readline, readlines, iter


@pytest.mark.parametrize("mode", ["read", "read-n", "readline", "readline-n", "readlines", "iter"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_body_at_and_past_the_threshold_reads_the_same(wsgi_srv, mode, framing):
    """A body of exactly the threshold is held in memory, one byte more is spooled; the app
    reads the same bytes, in the same pieces, either way."""
    base = lines_body(THRESHOLD + 1, seed=len(mode))
    n = 1000
    for size, spooled in ((THRESHOLD, False), (THRESHOLD + 1, True)):
        body = base[:size]
        result = upload(wsgi_srv, body, f"/input?mode={mode}&n={n}&lengths=1", framing)
        assert result["bytes"] == size
        assert result["sha256"] == hashlib.sha256(body).hexdigest()
        assert result["lengths"] == [len(p) for p in expected_pieces(body, mode, n)]
        assert (result["spooled"] > 0) == spooled, (size, result["spooled"])
        assert result["terminated"] is True
    assert_no_spool_files(wsgi_srv)


def test_readline_spans_memory_and_spool_boundaries(wsgi_srv):
    """Lines that cross the threshold offset and the spool's 64 KiB read-back pieces come
    back whole, with and without a size limit."""
    body = b"a" * (THRESHOLD - 10) + b"\n" + b"b" * 200_000 + b"\n" + b"c" * 65_535 + b"\nend"
    for mode, n in (("readline", 0), ("readline-n", 65_536), ("readline-n", 7)):
        result = upload(wsgi_srv, body, f"/input?mode={mode}&n={n}&lengths=1")
        assert result["spooled"] > 0
        assert result["lengths"] == [len(p) for p in expected_pieces(body, mode, n)]
        assert result["sha256"] == hashlib.sha256(body).hexdigest()


def test_spool_file_respects_tmpdir_and_is_gone_after_the_request(wsgi_srv):
    body = os.urandom(3 * MIB)
    result = upload(wsgi_srv, body)
    assert result["spooled"] == 1, "one spool file in $TMPDIR while the app ran"
    assert result["sha256"] == hashlib.sha256(body).hexdigest()
    assert_no_spool_files(wsgi_srv)
    # keep-alive: the next request on a connection after a spooled one starts clean
    with connect(wsgi_srv) as conn:
        for size in (2 * MIB, 10, 0):
            data = os.urandom(size)
            conn.send(post_head({"Content-Length": str(size)}) + data)
            response = conn.read_response()
            assert json.loads(response.body)["sha256"] == hashlib.sha256(data).hexdigest()
    assert_no_spool_files(wsgi_srv)
    # pipelined: the request after a spooled body is read from what followed it
    data = os.urandom(2 * MIB)
    with connect(wsgi_srv) as conn:
        conn.send(
            post_head({"Content-Length": str(len(data))}) + data + build_request("GET", "/hello")
        )
        assert json.loads(conn.read_response().body)["sha256"] == hashlib.sha256(data).hexdigest()
        assert conn.read_response().body == b"hello world"
    assert_no_spool_files(wsgi_srv)


def test_spool_file_is_gone_after_a_client_reset_mid_body(wsgi_srv):
    conn = connect(wsgi_srv)
    conn.send(post_head({"Content-Length": str(50 * MIB)}) + os.urandom(4 * MIB))
    assert wait_for(lambda: len(spool_files(wsgi_srv)) == 1, 5.0), "the body is being spooled"
    reset(conn)
    assert_no_spool_files(wsgi_srv)
    assert_answered_quickly(wsgi_srv)


def test_spool_file_is_gone_after_an_app_exception(wsgi_srv):
    with connect(wsgi_srv) as conn:
        conn.send(post_head({"Content-Length": str(2 * MIB)}, "/raise") + os.urandom(2 * MIB))
        response = conn.read_response()
    assert response.status == 500, response
    assert "the app failed after reading its body" in wsgi_srv.log()
    assert_no_spool_files(wsgi_srv)


def test_spooled_body_over_the_limit_gets_413_and_its_spool_is_gone(tmp_path_factory):
    with body_server(tmp_path_factory, WSGI, "--limit-request-body", str(3 * MIB)) as srv:
        with connect(srv) as conn:
            conn.send(post_head({"Transfer-Encoding": "chunked"}))
            try:
                for _ in range(5):
                    conn.send(b"%x\r\n%s\r\n" % (MIB, os.urandom(MIB)))
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed before all was sent
            reply = conn.read_to_eof()
        assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
        assert_no_spool_files(srv)
        # the declared length over the limit: 413 at once, never a 100 Continue
        with connect(srv) as conn:
            headers = {"Content-Length": str(4 * MIB), "Expect": "100-continue"}
            conn.send(post_head(headers))
            assert conn.read_to_eof().startswith(b"HTTP/1.1 413 ")


def test_spool_threshold_option_and_environment(tmp_path_factory):
    """--body-spool-threshold (here from PYSERVER_BODY_SPOOL_THRESHOLD) moves the line."""
    env = {"PYSERVER_BODY_SPOOL_THRESHOLD": "1000"}
    with body_server(tmp_path_factory, WSGI, env=env) as srv:
        assert upload(srv, b"x" * 1000)["spooled"] == 0
        result = upload(srv, b"x" * 1001)
        assert (result["spooled"], result["bytes"]) == (1, 1001)
        assert_no_spool_files(srv)


def test_body_that_cannot_be_spooled_gets_500_and_costs_only_itself(tmp_path_factory):
    """$TMPDIR missing: a body past the threshold is answered 500 and closed; bodies held
    in memory are still served."""
    missing = str(tmp_path_factory.mktemp("gone") / "missing")
    with body_server(tmp_path_factory, WSGI, env={"TMPDIR": missing}) as srv:
        with connect(srv) as conn:
            conn.send(post_head({"Content-Length": str(2 * MIB)}))
            try:
                conn.send(b"s" * 2 * MIB)
            except (BrokenPipeError, ConnectionResetError):
                pass
            reply = conn.read_to_eof()
        assert reply.startswith(b"HTTP/1.1 500 "), reply[:200]
        assert b"connection: close" in reply.lower(), reply
        assert upload(srv, b"small")["bytes"] == 5


def test_options_are_listed_and_checked():
    result = run_cli("--help")
    assert "--body-spool-threshold" in result.stdout and "--timeout-request-body" in result.stdout
    for option, value in (("--body-spool-threshold", "-1"), ("--timeout-request-body", "0")):
        result = run_cli(WSGI, option, value)
        assert result.returncode == 2, (option, result)
        assert option in result.stderr, result.stderr


def test_idle_keep_alive_connections_do_not_keep_their_body_buffers(tmp_path_factory):
    """After a body held in memory (up to the threshold) was answered, its connection goes
    idle without its 1 MiB buffer: 40 such connections left open cost far less than 40 MiB."""
    with body_server(tmp_path_factory, WSGI) as srv:
        body = b"m" * THRESHOLD
        conns = []
        try:
            upload(srv, body)  # warm-up
            baseline = rss_kib(srv.worker)
            for _ in range(40):
                conn = connect(srv)
                conns.append(conn)
                conn.send(post_head({"Content-Length": str(len(body))}) + body)
                answer = json.loads(conn.read_response().body)
                assert (answer["bytes"], answer["spooled"]) == (THRESHOLD, 0)
            growth = (rss_kib(srv.worker) - baseline) / 1024
        finally:
            for conn in conns:
                conn.close()
    if not UNDER_ASAN:
        assert growth < 15, f"40 idle connections after a 1 MiB body: RSS grew {growth:.1f} MiB"


# ---- a slow upload next to other clients


UPLOAD_RATE = MIB  # bytes a second, sent in 64 KiB pieces
UPLOAD_TOTAL = 50 * MIB  # fifty seconds' worth, as a slow client on a slow link would send


@pytest.mark.parametrize("spec", [WSGI, ASGI], ids=["wsgi", "asgi"])
def test_slow_upload_while_other_clients_are_served(tmp_path_factory, spec):
    with body_server(tmp_path_factory, spec) as srv:
        piece = 64 * 1024
        body = os.urandom(UPLOAD_TOTAL)
        result = {}

        def send_slowly():
            with connect(srv, timeout=30) as conn:
                conn.send(post_head({"Content-Length": str(len(body))}))
                start = time.monotonic()
                for offset in range(0, len(body), piece):
                    conn.send(body[offset : offset + piece])
                    delay = start + (offset + piece) / UPLOAD_RATE - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                result["response"] = conn.read_response()

        uploader = threading.Thread(target=send_slowly)
        uploader.start()
        served, spooled_seen = 0, False
        while uploader.is_alive():
            assert_answered_quickly(srv)
            served += 1
            if spec == WSGI and spool_files(srv):
                spooled_seen = True
            time.sleep(0.1)
        uploader.join()
        response = result["response"]
        assert response.status == 200, response
        answer = json.loads(response.body)
        assert answer["bytes"] == len(body)
        assert answer["sha256"] == hashlib.sha256(body).hexdigest()
        assert served >= 100, f"only {served} requests served while the upload arrived"
        if spec == WSGI:
            assert spooled_seen, "the upload was spooled while it arrived"
            assert_no_spool_files(srv)


# ---- memory with many large uploads at once


@pytest.mark.resource
@pytest.mark.parametrize("spec", [WSGI, ASGI], ids=["wsgi", "asgi"])
def test_rss_stays_bounded_with_20_concurrent_50mib_uploads(tmp_path_factory, spec):
    size, clients = 50 * MIB, 20
    block = os.urandom(MIB)
    body_sha = hashlib.sha256(block * (size // MIB)).hexdigest()
    with body_server(tmp_path_factory, spec) as srv:
        baseline = peak = rss_kib(srv.worker)
        answers, errors = [], []

        def one_upload():
            try:
                with connect(srv, timeout=120) as conn:
                    conn.send(post_head({"Content-Length": str(size)}))
                    for _ in range(size // MIB):
                        conn.send(block)
                    answers.append(json.loads(conn.read_response().body))
            except Exception as exc:  # reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=one_upload) for _ in range(clients)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, rss_kib(srv.worker))
            time.sleep(0.05)
        for thread in threads:
            thread.join()
        assert not errors, errors[:3]
        assert [(a["bytes"], a["sha256"]) for a in answers] == [(size, body_sha)] * clients
        growth = (peak - baseline) / 1024
        if not UNDER_ASAN:
            # 20 bodies held whole would be 1000 MiB; each connection holds at most the
            # threshold (1 MiB) before its body goes to the spool file.
            assert growth < 40, f"worker RSS grew {growth:.1f} MiB ({baseline} -> {peak} KiB)"
        if spec == WSGI:
            assert_no_spool_files(srv)
