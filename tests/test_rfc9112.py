"""RFC 9112 request lines through a real server, WSGI and ASGI: methods are any token and
reach the application exactly as sent, the request-target forms (absolute, asterisk,
authority) follow section 3.2, Transfer-Encoding whose final coding is not chunked is a 400,
--limit-request-line counts the whole line and --limit-request-head bounds the head."""

import json
import os
import socket
import time

import pytest
from helpers import HOST, HTTPConn, rss_kib, run_server

APPS = {"wsgi": "apps.rfc9112:app", "asgi": "apps.rfc9112:asgi_app"}


@pytest.fixture(scope="module", params=sorted(APPS))
def srv(request):
    with run_server(APPS[request.param], "--interface", request.param) as server:
        server.kind = request.param
        yield server


@pytest.fixture(scope="module", params=sorted(APPS))
def line_limited(request):
    args = ("--interface", request.param, "--limit-request-line", "100")
    with run_server(APPS[request.param], *args) as server:
        server.kind = request.param
        yield server


@pytest.fixture(scope="module", params=sorted(APPS))
def limited(request):
    args = ("--interface", request.param, "--limit-request-head", "4096")
    with run_server(APPS[request.param], *args) as server:
        server.kind = request.param
        yield server


def head(line: str, *fields: str, host: str | None = HOST) -> bytes:
    lines = [line, *([f"Host: {host}"] if host is not None else []), *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def view(kind: str, data: dict) -> dict:
    """What the application saw, the same way for both interfaces."""
    if kind == "wsgi":
        return {
            "method": data["REQUEST_METHOD"],
            "path": data["PATH_INFO"],
            "query": data["QUERY_STRING"],
            "host": data["HTTP_HOST"],
            "server": [data["SERVER_NAME"], int(data["SERVER_PORT"])],
            "raw": data["RAW_URI"],
            "body": data["body"],
            "calls": data["calls"],
            "pid": data["pid"],
        }
    assert len(data["hosts"]) <= 1, data
    return {
        "method": data["method"],
        "path": data["path"],
        "query": data["query_string"],
        "host": data["hosts"][0] if data["hosts"] else None,
        "server": data["server"],
        "raw": data["raw_path"],
        "body": data["body"],
        "calls": data["calls"],
        "pid": data["pid"],
    }


def exchange(server, data: bytes, method: str = "GET"):
    """Sends data on a new connection; returns the response and the connection's fate."""
    with server.connect() as conn:
        conn.send(data)
        response = conn.read_response(method)
        closed = conn.wait_closed(5.0) is not None if response.closes else False
    return response, closed


def seen(server, data: bytes, method: str = "GET") -> dict:
    response, _ = exchange(server, data, method)
    assert response.status == 200, response
    return view(server.kind, json.loads(response.body))


def assert_answered(server, data: bytes, status: int) -> None:
    """`status` with Connection: close, the connection closes, the next one is served."""
    response, closed = exchange(server, data)
    assert response.status == status, f"sent {data[:100]!r}, got {response!r}"
    assert response.closes and closed, response
    assert seen(server, head("GET /next HTTP/1.1"))["path"] == "/next"


def calls(server) -> int:
    return seen(server, head("GET /calls HTTP/1.1"))["calls"]


# --------------------------------------------------------------------------- methods


@pytest.mark.parametrize("method", ["QUERY", "BREW", "-BLARGH", "get", "Get", "G-T"])
def test_token_methods_reach_the_app_exactly(srv, method):
    got = seen(srv, head(f"{method} /m?x=1 HTTP/1.1"))
    assert (got["method"], got["path"], got["query"]) == (method, "/m", "x=1")


def test_unknown_method_body_is_framed_like_any_other(srv):
    with srv.connect() as conn:
        conn.send(head("BREW /pot HTTP/1.1", "Content-Length: 5") + b"hello")
        conn.send(
            head("query /q HTTP/1.1", "Transfer-Encoding: chunked") + b"3\r\nabc\r\n0\r\n\r\n"
        )
        conn.send(head("GET /after HTTP/1.1"))
        first, second, third = (
            view(srv.kind, json.loads(conn.read_response().body)) for _ in "123"
        )
    assert (first["method"], first["body"]) == ("BREW", 5)
    assert (second["method"], second["body"]) == ("query", 3)
    assert (third["method"], third["path"]) == ("GET", "/after")


def test_lowercase_get_is_not_get_and_lowercase_head_gets_a_body(srv):
    """Only the exact method HEAD has a response without a body."""
    assert seen(srv, head("get / HTTP/1.1"))["method"] == "get"
    with srv.connect() as conn:
        conn.send(head("head / HTTP/1.1"))
        response = conn.read_response("GET")
        assert response.status == 200 and json.loads(response.body), response
        conn.send(head("HEAD / HTTP/1.1") + head("GET /then HTTP/1.1"))
        response = conn.read_response("HEAD")
        assert response.status == 200 and int(response.header("Content-Length")) > 0
        after = conn.read_response()  # no body bytes came between the two
        assert view(srv.kind, json.loads(after.body))["path"] == "/then"


def test_a_method_must_be_a_token(srv):
    """G-T is a method like any other; G@T is not a method at all."""
    assert seen(srv, head("G-T / HTTP/1.1"))["method"] == "G-T"
    for line in ("G@T / HTTP/1.1", "G(T / HTTP/1.1", "GET\t/ HTTP/1.1", "GE\x80T / HTTP/1.1"):
        assert_answered(srv, head(line), 400)


def test_extra_spaces_in_the_request_line_are_400(srv):
    assert_answered(srv, head("GET  / HTTP/1.1"), 400)
    assert_answered(srv, head("GET /  HTTP/1.1"), 400)


# --------------------------------------------------------------------------- targets


def test_absolute_form_authority_wins_over_host(srv):
    got = seen(srv, head("GET http://other/abs?q=1 HTTP/1.1", host="x"))
    assert got["host"] == "other"
    assert got["server"] == ["other", 80]
    assert (got["path"], got["query"]) == ("/abs", "q=1")
    # RAW_URI is the target as sent (as in gunicorn); raw_path is its path (as in uvicorn).
    assert got["raw"] == ("http://other/abs?q=1" if srv.kind == "wsgi" else "/abs")


def test_absolute_form_port_and_scheme(srv):
    got = seen(srv, head("GET http://other:8080/p HTTP/1.1", host="x"))
    assert (got["host"], got["server"], got["path"]) == ("other:8080", ["other", 8080], "/p")
    got = seen(srv, head("GET HTTPS://[::1]/ HTTP/1.1", host="x"))
    assert (got["host"], got["server"], got["path"]) == ("[::1]", ["::1", 443], "/")


def test_absolute_form_on_http10_without_host_adds_it(srv):
    got = seen(srv, head("GET http://other/old HTTP/1.0", host=None))
    assert (got["host"], got["server"], got["path"]) == ("other", ["other", 80], "/old")


@pytest.mark.parametrize(
    "target",
    ["http://user@other/", "http:///x", "http://:80/", "http://other:99999/", "ftp://other/"],
)
def test_bad_absolute_form_is_400(srv, target):
    assert_answered(srv, head(f"GET {target} HTTP/1.1"), 400)


def test_asterisk_form_only_with_options(srv):
    got = seen(srv, head("OPTIONS * HTTP/1.1"))
    assert (got["method"], got["path"]) == ("OPTIONS", "*")
    for method in ("GET", "POST", "BREW", "options"):
        assert_answered(srv, head(f"{method} * HTTP/1.1"), 400)
    assert_answered(srv, head("OPTIONS *x HTTP/1.1"), 400)


def test_connect_is_501_without_calling_the_app(srv):
    before = calls(srv)
    assert_answered(srv, head("CONNECT example.com:443 HTTP/1.1", host="example.com:443"), 501)
    # assert_answered made one request, calls() makes one more: nothing else reached the app.
    assert calls(srv) == before + 2


@pytest.mark.parametrize("target", ["example.com", "/path", "user@example.com:443", "a:65536"])
def test_connect_with_a_bad_authority_is_400(srv, target):
    assert_answered(srv, head(f"CONNECT {target} HTTP/1.1"), 400)


def test_authority_form_only_with_connect(srv):
    assert_answered(srv, head("CONNECT [::1]:8443 HTTP/1.1"), 501)
    for method in ("GET", "BREW", "connect"):
        assert_answered(srv, head(f"{method} example.com:443 HTTP/1.1"), 400)


# --------------------------------------------------------------------------- Transfer-Encoding


def test_final_coding_other_than_chunked_is_400(srv):
    """RFC 9112 section 6.3: the body cannot be framed, whatever the coding (400, not 501);
    only a coding before the final chunked is one the server does not implement (501)."""
    for codings in ("identity", "gzip", "chunked, identity", "chunked\r\nTransfer-Encoding: gzip"):
        data = head("POST /te HTTP/1.1", f"Transfer-Encoding: {codings}") + b"3\r\nabc\r\n0\r\n\r\n"
        assert_answered(srv, data, 400)
    data = head("POST /te HTTP/1.1", "Transfer-Encoding: gzip, chunked") + b"0\r\n\r\n"
    assert_answered(srv, data, 501)


# --------------------------------------------------------------------------- limits


def test_request_line_limit_counts_the_whole_line(line_limited):
    limited = line_limited
    # "GET " + target + " HTTP/1.1" is 100 bytes with a 87-byte target.
    target = "/" + "a" * 86
    assert len(f"GET {target} HTTP/1.1") == 100
    assert seen(limited, head(f"GET {target} HTTP/1.1"))["path"] == target
    assert_answered(limited, head(f"GET {target}a HTTP/1.1"), 414)
    # The method counts: the same target after a longer method is over.
    assert_answered(limited, head(f"BREWS {target} HTTP/1.1"), 414)
    assert_answered(limited, head(f"OPTIONS {target} HTTP/1.1"), 414)


def padded_head(size: int, line: str = "GET /pad HTTP/1.1") -> bytes:
    """A complete head of exactly `size` bytes, in fields of about 4000 bytes."""
    fields = []
    while len(head(line, *fields)) < size:
        name = f"X-Pad-{len(fields)}: "
        room = size - len(head(line, *fields)) - len(name) - 2
        if room < 0:  # no room for one more field: lengthen the last one
            fields[-1] += "p" * (size - len(head(line, *fields)))
            break
        fields.append(name + "p" * min(4000, room))
    data = head(line, *fields)
    assert len(data) == size, (len(data), size)
    return data


def test_head_limit_431_with_close_and_the_next_connection_works(limited):
    assert seen(limited, padded_head(4096))["path"] == "/pad"
    assert_answered(limited, padded_head(4097), 431)


def test_head_limit_answers_before_the_head_ends(limited):
    """The head is refused as soon as it passes the limit, not once it is complete."""
    with limited.connect(timeout=5.0) as conn:
        conn.send(head("GET /slow HTTP/1.1")[:-2] + b"X-Big: " + b"b" * 5000)
        response = conn.read_response()
        assert response.status == 431 and response.closes, response


def test_default_head_limit_is_64_kib(srv):
    """Old servers took 9 fields of 8000 bytes (each within the field limit): 72 KB."""
    assert seen(srv, padded_head(65536))["path"] == "/pad"
    assert_answered(srv, padded_head(65537), 431)
    fields = [f"X-Big-{i}: " + "b" * 8000 for i in range(9)]
    assert_answered(srv, head("GET /big HTTP/1.1", *fields), 431)


def test_head_limit_from_the_environment():
    with run_server(APPS["wsgi"], env={"PYSERVER_LIMIT_REQUEST_HEAD": "2000"}) as server:
        server.kind = "wsgi"
        assert seen(server, padded_head(2000))["path"] == "/pad"
        assert_answered(server, padded_head(2001), 431)


@pytest.mark.parametrize("kind", sorted(APPS))
def test_idle_connections_keep_no_large_head_buffers(kind):
    """Each of 300 connections sends a 60 KiB head, gets its answer and stays open: the
    worker's RSS grows by a few KiB per connection, not by the 128 KiB of buffers such a
    head needed (parser arena, read buffer, field arrays), and every connection still
    serves small requests after."""
    count, warmup = 300, 20
    big = padded_head(60 * 1024)
    small = head("GET /small HTTP/1.1")
    with run_server(APPS[kind], "--interface", kind, "--timeout-keep-alive", "120") as server:
        server.kind = kind
        conns, base = [], None
        try:
            for i in range(count):
                conn = HTTPConn(socket.create_connection((HOST, server.port), timeout=10))
                conns.append(conn)
                conn.send(big)
                got = view(kind, json.loads(conn.read_response().body))
                assert got["path"] == "/pad"
                if i + 1 == warmup:
                    base = rss_kib(got["pid"])
            grown = rss_kib(got["pid"]) - base
            per_conn = grown * 1024 / (count - warmup)
            if os.environ.get("PYSERVER_ASAN") != "1":  # ASan keeps freed memory quarantined
                assert per_conn < 16 * 1024, f"{per_conn:.0f} bytes per idle connection"
            for conn in conns:
                conn.send(small)
            for conn in conns:
                assert view(kind, json.loads(conn.read_response().body))["path"] == "/small"
        finally:
            for conn in conns:
                conn.close()


@pytest.mark.parametrize("kind", sorted(APPS))
def test_incomplete_heads_are_held_once(kind):
    """300 connections each send 58 KiB of a head at once and stop before its end: the
    worker holds each head once (in the parser), not also in a read buffer left at the
    size of its largest read, which had doubled the memory per connection."""
    count, warmup = 300, 20
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 3990) for i in range(15))
    partial = b"GET /pad HTTP/1.1\r\nHost: x\r\n" + fields  # no blank line: never complete
    with run_server(APPS[kind], "--interface", kind, "--timeout-request-header", "120") as server:
        server.kind = kind
        probe = HTTPConn(socket.create_connection((HOST, server.port), timeout=10))
        probe.send(head("GET /small HTTP/1.1"))
        pid = view(kind, json.loads(probe.read_response().body))["pid"]
        socks, base = [], None
        try:
            for i in range(count):
                sock = socket.create_connection((HOST, server.port), timeout=10)
                socks.append(sock)
                sock.sendall(partial)
                if i + 1 == warmup:
                    time.sleep(0.5)
                    base = rss_kib(pid)
            time.sleep(1)  # the worker reads what was sent
            per_conn = (rss_kib(pid) - base) * 1024 / (count - warmup)
            if os.environ.get("PYSERVER_ASAN") != "1":  # ASan keeps freed memory quarantined
                assert per_conn < 1.3 * len(partial), f"{per_conn:.0f} bytes per connection"
            probe.send(head("GET /small HTTP/1.1"))
            assert view(kind, json.loads(probe.read_response().body))["path"] == "/small"
        finally:
            for sock in socks:
                sock.close()
            probe.close()
