"""start_response, the write() callable, the response iterable's close(), wsgi.file_wrapper."""

import hashlib
import os
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import ConnectionClosed, assert_serving, fetch, wait_for

# --------------------------------------------------------------------------- start_response


def test_exc_info_before_headers_sent_replaces_status(port):
    response = fetch(port, "GET", "/exc-info?mode=replace")
    assert response.status == 500, response
    assert response.body == b"replaced"


def test_second_start_response_without_exc_info_raises(port):
    response = fetch(port, "GET", "/exc-info?mode=twice")
    assert response.status == 200, response
    assert response.body.startswith(b"second call raised "), response


def test_exc_info_after_headers_sent_is_reraised(port):
    response = fetch(port, "GET", "/exc-info?mode=after-headers")
    assert response.status == 200, response
    assert response.body == b"partial;reraised", response


def test_write_callable_output_comes_before_iterable(server):
    with server.connect() as conn:
        response = conn.request("GET", "/write")
        assert response.status == 200
        assert response.body == b"from-write-1;from-write-2;from-iterable"
        assert response.complete
        assert conn.request("GET", "/hello").body == b"hello world"


def test_write_callable_on_http10_is_close_delimited(server):
    with server.connect() as conn:
        conn.send(b"GET /write HTTP/1.0\r\n\r\n")
        response = conn.read_response()
        assert response.body == b"from-write-1;from-write-2;from-iterable"


# --------------------------------------------------------------------------- close()


@pytest.fixture
def marker(tmp_path):
    return tmp_path / f"closed-{uuid.uuid4().hex}"


def marker_written(path: Path, timeout: float = 5.0) -> bool:
    return wait_for(lambda: path.exists() and "closed" in path.read_text(), timeout)


def test_close_called_after_normal_completion(server, marker):
    response = fetch(server.port, "GET", f"/big?size=262144&marker={quote(str(marker))}")
    assert response.status == 200 and len(response.body) == 262144
    assert marker_written(marker), "close() not called after a complete response"
    assert marker.read_text().count("closed") == 1, "close() called more than once"


def test_close_called_after_exception_during_iteration(server, marker):
    target = f"/big?size=262144&raise_at=2&marker={quote(str(marker))}"
    with server.connect() as conn:
        conn.send(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        try:
            response = conn.read_response()
        except ConnectionClosed:
            response = None
        if response is not None and response.status != 500:
            assert not response.complete, f"a failed response looked complete: {response!r}"
        assert conn.wait_closed(5.0) is not None, "connection not closed after app error"
    assert marker_written(marker), "close() not called after the iterable raised"
    assert_serving(server.port)


def test_close_called_after_client_disconnects_mid_response(server, marker):
    target = f"/big?size={1 << 30}&marker={quote(str(marker))}"
    with server.connect() as conn:
        conn.send(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert conn.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 200")
        conn.read_exact(1 << 20)
    assert marker_written(marker), "close() not called after the client went away"
    assert_serving(server.port)


def test_close_called_for_head_request(server, marker):
    with server.connect() as conn:
        response = conn.request("HEAD", f"/big?size=262144&marker={quote(str(marker))}")
        assert response.status == 200
        assert response.header("Content-Length") == "262144"
        assert conn.request("GET", "/hello").body == b"hello world"
    assert marker_written(marker), "close() not called for a HEAD response"


def test_close_called_when_client_disconnects_before_reading(server, marker):
    target = f"/big?size={1 << 30}&marker={quote(str(marker))}"
    with server.connect() as conn:
        conn.send(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert marker_written(marker), "close() not called after the client went away"
    assert_serving(server.port)


# --------------------------------------------------------------------------- file_wrapper


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("files") / "data.bin"
    path.write_bytes(os.urandom(3 * 65536 + 12345))
    return path


@pytest.fixture(scope="module")
def large_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("files") / "large.bin"
    block = os.urandom(1 << 20)
    with path.open("wb") as handle:
        for index in range(20):
            handle.write(bytes([index]) + block[1:])
    return path


ROUTES = ["file", "file-validated"]


@pytest.mark.parametrize("route", ROUTES)
def test_file_wrapper_sends_whole_file(port, data_file, route):
    response = fetch(port, "GET", f"/{route}?path={quote(str(data_file))}")
    assert response.status == 200
    assert response.header("Content-Length") == str(data_file.stat().st_size)
    assert response.body == data_file.read_bytes()


@pytest.mark.parametrize("route", ROUTES)
def test_file_wrapper_sends_from_current_position(port, data_file, route):
    offset = 70000
    response = fetch(port, "GET", f"/{route}?path={quote(str(data_file))}&offset={offset}")
    assert response.status == 200
    assert response.body == data_file.read_bytes()[offset:]


@pytest.mark.parametrize("route", ROUTES)
def test_file_wrapper_stops_at_content_length(server, data_file, route):
    with server.connect() as conn:
        target = f"/{route}?path={quote(str(data_file))}&offset=10&cl=1000"
        response = conn.request("GET", target)
        assert response.status == 200
        assert response.body == data_file.read_bytes()[10:1010]
        # nothing beyond Content-Length was written: the next response parses
        assert conn.request("GET", "/hello").body == b"hello world"


@pytest.mark.parametrize("route", ROUTES)
def test_file_wrapper_without_length_is_chunked(server, data_file, route):
    with server.connect() as conn:
        response = conn.request("GET", f"/{route}?path={quote(str(data_file))}&nolength=1")
        assert response.status == 200
        assert response.complete
        assert response.body == data_file.read_bytes()
        assert conn.request("GET", "/hello").body == b"hello world"


@pytest.mark.parametrize("route", ROUTES)
def test_file_wrapper_large_file_matches_hash(port, large_file, route):
    response = fetch(port, "GET", f"/{route}?path={quote(str(large_file))}", timeout=30)
    assert response.status == 200
    assert len(response.body) == large_file.stat().st_size
    expected = hashlib.sha256(large_file.read_bytes()).hexdigest()
    assert hashlib.sha256(response.body).hexdigest() == expected


def test_file_wrapper_head_sends_no_body(server, data_file):
    with server.connect() as conn:
        response = conn.request("HEAD", f"/file?path={quote(str(data_file))}")
        assert response.status == 200
        assert response.header("Content-Length") == str(data_file.stat().st_size)
        assert conn.request("GET", "/hello").body == b"hello world"


def test_file_wrapper_pipelined_with_other_requests(server, data_file):
    target = f"/file?path={quote(str(data_file))}"
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    with server.connect() as conn:
        conn.send(request + b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n" + request)
        assert conn.read_response().body == data_file.read_bytes()
        assert conn.read_response().body == b"hello world"
        assert conn.read_response().body == data_file.read_bytes()
