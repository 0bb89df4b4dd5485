"""ASGI backpressure, both ways: a 1 GiB streamed response and a paused reader keep the
worker's RSS flat (send() waits for the output to drain), and a 100 MiB upload read message
by message keeps it flat too (the server stops reading until the app calls receive()).

Same measurements and bounds as test_resources.py (WSGI), against apps/asgi_basic.py."""

import hashlib
import json
import time

import pytest
from helpers import assert_serving, build_request, run_server, worker_pid
from test_resources import (
    GIB,
    MIB,
    UPLOAD,
    BodyChecker,
    RssSampler,
    start_big_response,
    stream_body,
    upload_blocks,
)

pytestmark = pytest.mark.resource


@pytest.fixture(scope="module")
def srv():
    with run_server("apps.asgi_basic:app") as server:
        yield server


@pytest.fixture(scope="module")
def pid(srv):
    return worker_pid(srv)


def test_gib_streamed_response_keeps_worker_rss_bounded(srv, pid):
    sampler = RssSampler(pid)
    checker = BodyChecker()
    with srv.connect(timeout=30) as conn:
        start_big_response(conn, GIB)
        received = stream_body(conn, GIB, checker, sampler)
        assert received == GIB
        assert checker.checked == GIB // 65536
        assert conn.request("GET", "/hello").body == b"hello world"
    sampler.assert_growth_below(50, "streaming 1 GiB from an ASGI app")


def test_paused_client_keeps_worker_rss_bounded_and_others_served(srv, pid):
    sampler = RssSampler(pid)
    checker = BodyChecker()
    with srv.connect(timeout=30) as conn:
        start_big_response(conn, GIB)
        assert stream_body(conn, 16 * MIB, checker, sampler) == 16 * MIB
        for _ in range(12):  # the client stops reading for 3 s
            time.sleep(0.25)
            sampler.sample()
        assert_serving(srv.port)  # a stalled writer must not block the loop
        sampler.sample()
        assert stream_body(conn, 64 * MIB, checker, sampler) == 64 * MIB
    sampler.assert_growth_below(50, "client paused mid-stream (ASGI)")
    assert_serving(srv.port)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_100mib_upload_read_message_by_message_keeps_worker_rss_bounded(srv, pid, framing):
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
                conn.send(b"%x\r\n%s\r\n" % (len(block), block))
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
    sampler.assert_growth_below(50, f"100 MiB {framing} upload (ASGI)")


def test_aborted_streams_release_memory(srv, pid):
    sampler = RssSampler(pid)
    for _ in range(20):
        with srv.connect(timeout=30) as conn:
            start_big_response(conn, GIB)
            conn.read_exact(MIB)
            sampler.sample()
    time.sleep(0.5)
    sampler.sample()
    sampler.assert_growth_below(50, "20 streams aborted by the client (ASGI)")
    assert_serving(srv.port)
