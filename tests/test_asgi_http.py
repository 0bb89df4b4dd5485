"""ASGI over HTTP/1.x with a raw ASGI 3 app (apps/asgi_basic.py): the scope, request bodies,
streaming, errors, disconnects, extensions (pathsend, early hints, trailers), pipelining,
keep-alive, --limit-concurrency, ASGI 2 apps and asyncio libraries on the server's loop.

These also run against uvicorn: PYSERVER_TEST_COMMAND="python -m uvicorn" (see helpers.py).
The ones uvicorn fails on purpose say so in their docstring ("uvicorn: ...").
"""

import hashlib
import json
import os
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import (
    HOST,
    ConnectionClosed,
    assert_serving,
    build_request,
    chunked,
    fetch,
    run_server,
    wait_for,
)

MIB = 1 << 20


@pytest.fixture(scope="module")
def srv():
    with run_server("apps.asgi_basic:app") as server:
        yield server


def get_json(port, target, **kwargs):
    response = fetch(port, kwargs.pop("method", "GET"), target, **kwargs)
    assert response.status == 200, response
    return json.loads(response.body)


# --------------------------------------------------------------------------- scope


def test_scope_has_every_key_with_the_right_type(srv):
    result = get_json(srv.port, "/scope/x?a=1")
    assert result["problems"] == []
    for key in ("type", "asgi", "http_version", "method", "scheme", "path", "raw_path"):
        assert key in result["types"], key
    for key in ("query_string", "root_path", "headers", "client", "server", "state"):
        assert key in result["types"], key


def test_scope_values_of_a_simple_get(srv):
    with srv.connect() as conn:
        response = conn.request("GET", "/scope/simple?a=1&b=2")
        local_port = conn.local_port()
    assert response.status == 200, response
    scope = json.loads(response.body)["scope"]
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["asgi"]["spec_version"] in ("2.3", "2.4")
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/scope/simple"
    assert scope["raw_path"] == "/scope/simple"
    assert scope["query_string"] == "a=1&b=2"
    assert scope["root_path"] == ""
    assert scope["client"] == [HOST, local_port]
    assert scope["server"] == [HOST, srv.port]


def test_scope_path_is_percent_decoded_utf8_and_raw_path_is_not(srv):
    target = "/scope/caf%C3%A9/a%20b/c%2Fd?x=%20y&z"
    scope = get_json(srv.port, target)["scope"]
    assert scope["path"] == "/scope/caf\u00e9/a b/c/d"
    assert scope["raw_path"] == "/scope/caf%C3%A9/a%20b/c%2Fd"
    assert scope["query_string"] == "x=%20y&z"


def test_scope_headers_are_lower_case_in_order_with_duplicates(srv):
    request = (
        b"GET /scope/h HTTP/1.1\r\nHost: example.test\r\nX-Dup: a\r\n"
        b"X-Mixed-Case: Value Kept\r\nx-dup: b\r\nAccept: */*\r\n\r\n"
    )
    with srv.connect() as conn:
        conn.send(request)
        response = conn.read_response()
    assert response.status == 200, response
    headers = json.loads(response.body)["scope"]["headers"]
    assert headers == [
        ["host", "example.test"],
        ["x-dup", "a"],
        ["x-mixed-case", "Value Kept"],
        ["x-dup", "b"],
        ["accept", "*/*"],
    ]


def test_scope_of_http_1_0_request(srv):
    response = fetch(srv.port, "GET", "/scope/old", version="HTTP/1.0")
    assert response.status == 200, response
    result = json.loads(response.body)
    assert result["problems"] == []
    assert result["scope"]["http_version"] == "1.0"


def test_scope_of_post_with_body(srv):
    response = fetch(srv.port, "POST", "/scope/post", body=b"form=data")
    result = json.loads(response.body)
    assert result["problems"] == []
    assert result["scope"]["method"] == "POST"
    assert result["body"] == "form=data"
    assert ["content-length", "9"] in result["scope"]["headers"]


def test_scope_has_an_extensions_dict(srv):
    """uvicorn: fails by design (its HTTP/1 scope has no "extensions" key)."""
    result = get_json(srv.port, "/scope/ext")
    assert result["extensions_type"] == "dict"


def test_scope_state_is_a_shallow_copy_of_lifespan_state(srv):
    for _ in range(3):
        result = get_json(srv.port, "/scope/state")
        assert result["greeting"] == "hello from lifespan"
        assert result["state_leaked"] is False, "a request's state change reached the next one"


def test_root_path_option_sets_root_path_and_path_keeps_it():
    """--root-path /api: the client sends /api/...; root_path is "/api" and path is the full
    path (the ASGI spec: path includes root_path), like SCRIPT_NAME + PATH_INFO in WSGI.
    uvicorn: fails by design (it prepends root_path to whatever path arrives)."""
    with run_server("apps.asgi_basic:app", "--root-path", "/api") as server:
        scope = get_json(server.port, "/api/scope/x?q=1")["scope"]
    assert scope["root_path"] == "/api"
    assert scope["path"] == "/api/scope/x"
    assert scope["raw_path"] == "/api/scope/x"
    assert scope["query_string"] == "q=1"


def test_unix_socket_scope_server_is_path_and_none():
    """uvicorn: fails by design (it gives server None on a unix socket)."""
    directory = tempfile.mkdtemp(prefix="pyserver-asgi-uds-")
    path = str(Path(directory) / "server.sock")
    try:
        with run_server("apps.asgi_basic:app", uds=path) as server:
            with server.connect() as conn:
                response = conn.request("GET", "/scope/uds")
        result = json.loads(response.body)
        assert result["problems"] == []
        assert result["scope"]["server"] == [path, None]
    finally:
        for leftover in Path(directory).iterdir():
            leftover.unlink()
        Path(directory).rmdir()


# --------------------------------------------------------------------------- request bodies


def test_echo_content_length_body(srv):
    body = os.urandom(100_000)
    response = fetch(srv.port, "POST", "/echo", body=body)
    assert response.status == 200, response
    assert response.body == body


def test_echo_chunked_request_body_is_dechunked(srv):
    parts = [b"hello ", b"chunked ", b"world"]
    with srv.connect() as conn:
        conn.send(build_request("POST", "/echo", headers={"Transfer-Encoding": "chunked"}))
        encoded = chunked(*parts)
        conn.send(encoded[:10])
        time.sleep(0.1)
        conn.send(encoded[10:])
        response = conn.read_response()
    assert response.status == 200, response
    assert response.body == b"".join(parts)


def test_big_request_body_arrives_in_several_messages(srv):
    body = os.urandom(8 * MIB)
    with srv.connect(timeout=20) as conn:
        response = conn.request("POST", "/echo", body=body)
    assert response.body == body
    assert int(response.header("x-messages")) > 1, "8 MiB delivered as one http.request"


def test_empty_body_is_one_message(srv):
    response = fetch(srv.port, "GET", "/echo")
    assert response.status == 200, response
    assert response.body == b""
    assert response.header("x-messages") == "1"


def test_body_chunks_reach_the_app_as_they_arrive(srv):
    """The app answers each http.request message at once; the client waits for each answer
    before sending the next chunk, so nothing may be held back until the body is complete."""
    with srv.connect() as conn:
        conn.send(build_request("POST", "/body-progress", headers={"Transfer-Encoding": "chunked"}))
        conn.send(b"a\r\n0123456789\r\n")
        head = conn.read_until(b"\r\n\r\n")
        assert head is not None and head.startswith(b"HTTP/1.1 200"), head
        lines = []
        for size in (20, 30):
            line = conn.read_until(b"\n")
            while line is not None and line.endswith(b"\r\n"):
                line = conn.read_until(b"\n")  # chunk-size lines and CRLFs of the framing
            lines.append(line)
            conn.send(b"%x\r\n%s\r\n" % (size, b"x" * size))
        conn.send(b"0\r\n\r\n")
        rest = conn.read_until(b"0\r\n\r\n")
    assert lines == [b"10\n", b"20\n"], lines
    assert rest is not None and b"30\n" in rest and b"end\n" in rest, rest


def test_disconnect_reaches_an_app_waiting_for_the_rest_of_the_body(srv, tmp_path):
    marker = str(tmp_path / "marker")
    with srv.connect() as conn:
        target = f"/partial-body?marker={marker}"
        conn.send(build_request("POST", target, headers={"Content-Length": "100000"}))
        conn.send(b"x" * 1000)
        assert wait_for(lambda: "http.request" in marker_lines(marker), 5.0)
    assert wait_for(lambda: "http.disconnect" in marker_lines(marker), 5.0), marker_lines(marker)
    assert set(marker_lines(marker)) == {"http.request", "http.disconnect"}


def test_receive_after_the_response_returns_disconnect(srv, tmp_path):
    marker = str(tmp_path / "marker")
    with srv.connect() as conn:
        assert conn.request("GET", f"/receive-after-response?marker={marker}").body == b"done"
        assert wait_for(lambda: marker_lines(marker), 5.0)
        assert marker_lines(marker) == ["http.disconnect"]
        assert conn.request("GET", "/hello").body == b"hello world"


def test_expect_100_continue_sent_when_the_app_calls_receive(srv):
    with srv.connect() as conn:
        headers = {"Content-Length": "5", "Expect": "100-continue"}
        conn.send(build_request("POST", "/echo", headers=headers))
        interim = conn.read_response()
        assert interim.status == 100, f"expected 100 Continue first, got {interim!r}"
        conn.send(b"hello")
        final = conn.read_response()
        assert (final.status, final.body) == (200, b"hello")
        assert conn.request("GET", "/hello").body == b"hello world"


def test_expect_100_continue_not_sent_when_the_app_does_not_read(srv):
    with srv.connect() as conn:
        headers = {"Content-Length": "5", "Expect": "100-continue"}
        conn.send(build_request("POST", "/hello", headers=headers))
        response = conn.read_response()
        assert (response.status, response.body) == (200, b"hello world")


def test_receive_after_the_body_waits_while_the_client_is_connected(srv):
    response = fetch(srv.port, "POST", "/receive-waits", body=b"abc")
    assert response.body == b"waited"


# --------------------------------------------------------------------------- responses


def test_streaming_response_without_content_length_is_chunked(srv):
    with srv.connect() as conn:
        response = conn.request("GET", "/stream?n=5")
        assert response.status == 200, response
        assert "chunked" in response.tokens("Transfer-Encoding")
        assert response.body == b"".join(f"chunk-{i}\n".encode() for i in range(5))
        assert response.complete
        assert len([size for size in response.chunk_sizes if size]) >= 2
        assert conn.request("GET", "/hello").body == b"hello world"  # still in sync


def test_streaming_response_with_content_length_is_not_chunked(srv):
    response = fetch(srv.port, "GET", "/stream?n=5&cl=1")
    assert not response.has_header("Transfer-Encoding")
    assert response.body == b"".join(f"chunk-{i}\n".encode() for i in range(5))


def test_streamed_body_messages_leave_before_the_app_finishes(srv, tmp_path):
    """After its first body message the app waits on a gate that the client opens only once
    it has that message: held back until the app finishes, it would never arrive."""
    gate = tmp_path / "gate"
    with srv.connect() as conn:
        conn.send(build_request("GET", f"/stream?n=4&gate={quote(str(gate))}"))
        head = conn.read_until(b"\r\n\r\n")
        assert head is not None and head.startswith(b"HTTP/1.1 200"), head
        first = conn.read_until(b"chunk-0\n")  # ReadTimeout if held back
        assert first is not None
        assert b"chunk-1" not in conn.buf
        gate.touch()
        rest = conn.read_until(b"0\r\n\r\n")
        assert rest is not None and b"chunk-3\n" in rest


def test_http_1_0_streaming_response_is_close_delimited(srv):
    response = fetch(srv.port, "GET", "/stream?n=3", version="HTTP/1.0")
    assert response.status == 200, response
    assert not response.has_header("Transfer-Encoding")
    assert response.body == b"chunk-0\nchunk-1\nchunk-2\n"


@pytest.mark.parametrize("target", ["/hello", "/stream?n=3", "/stream?n=3&cl=1"])
def test_head_drops_the_body(srv, target):
    with srv.connect() as conn:
        response = conn.request("HEAD", target)
        assert response.status == 200, response
        # Whatever followed the head must be the next response, not a stray body.
        assert conn.request("GET", "/hello").body == b"hello world"


def test_head_keeps_content_length(srv):
    response = fetch(srv.port, "HEAD", "/hello")
    assert response.header("Content-Length") == "11"


def test_pipelined_requests_answered_in_order(srv):
    requests = []
    for index in range(10):
        if index % 3 == 1:
            requests.append(build_request("POST", "/echo", body=f"body-{index}".encode()))
        else:
            requests.append(build_request("GET", f"/query?i={index}"))
    with srv.connect() as conn:
        conn.send(b"".join(requests))
        bodies = [conn.read_response().body for _ in range(10)]
    expected = [f"body-{i}".encode() if i % 3 == 1 else f"i={i}".encode() for i in range(10)]
    assert bodies == expected


def test_keep_alive_serves_many_requests_on_one_connection(srv):
    with srv.connect() as conn:
        for index in range(50):
            response = conn.request("GET", f"/query?n={index}")
            assert response.body == f"n={index}".encode()
            assert not response.closes


def test_connection_close_request_closes(srv):
    with srv.connect() as conn:
        response = conn.request("GET", "/hello", headers={"Connection": "close"})
        assert response.body == b"hello world"
        assert conn.wait_closed(5.0) == b""


# --------------------------------------------------------------------------- app errors


def test_exception_before_response_start_gives_500_and_logs_traceback(srv):
    response = fetch(srv.port, "GET", "/raise-before")
    assert response.status == 500, response
    assert srv.wait_for_log("raised before the response started (on purpose)")
    assert "Traceback" in srv.log()
    assert_serving(srv.port)


def assert_500_or_cut_short(conn):
    """The answer to a request whose app failed: a complete 500, or the connection closed
    without a complete response (never a complete 200, never a hang)."""
    try:
        response = conn.read_response()
    except ConnectionClosed:
        return  # closed before any head: fine
    assert response.status == 500 or not response.complete, response
    if response.status != 500:
        assert conn.wait_closed(5.0) is not None, "connection left open after a cut response"


@pytest.mark.parametrize("target", ["/raise-after", "/raise-after-chunked"])
def test_exception_after_response_start_closes_the_connection(srv, target):
    with srv.connect() as conn:
        conn.send(build_request("GET", target))
        try:
            response = conn.read_response()
        except ConnectionClosed:
            response = None  # the server may not have sent the held-back head at all
        if response is not None:
            assert response.status == 200 and not response.complete, response
            assert conn.wait_closed(5.0) is not None, "connection left open after the error"
    assert srv.wait_for_log("raised after the response started (on purpose)")
    assert_serving(srv.port)


def test_app_returning_without_a_response_gives_500(srv):
    response = fetch(srv.port, "GET", "/no-response")
    assert response.status == 500, response
    assert_serving(srv.port)


def test_app_returning_after_start_only_gives_500_or_closes(srv):
    with srv.connect() as conn:
        conn.send(build_request("GET", "/start-only"))
        assert_500_or_cut_short(conn)
    assert_serving(srv.port)


# --------------------------------------------------------------------------- disconnects


def start_disconnect_stream(srv, marker, propagate=False):
    conn = srv.connect()
    target = f"/disconnect?marker={marker}" + ("&propagate=1" if propagate else "")
    conn.send(build_request("GET", target))
    head = conn.read_until(b"\r\n\r\n")
    assert head is not None and head.startswith(b"HTTP/1.1 200"), head
    assert conn.read_exact(4096)  # the stream is flowing
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()  # with SO_LINGER 0: a reset, like a killed client


def marker_lines(marker):
    return Path(marker).read_text().splitlines() if Path(marker).exists() else []


def test_client_leaving_mid_stream_delivers_http_disconnect(srv, tmp_path):
    marker = str(tmp_path / "marker")
    start_disconnect_stream(srv, marker)
    assert wait_for(lambda: "http.disconnect" in marker_lines(marker), 5.0), marker_lines(marker)
    assert_serving(srv.port)


def test_send_after_client_left_raises_oserror(srv, tmp_path):
    """uvicorn: fails by design (its send() returns silently after a disconnect)."""
    marker = str(tmp_path / "marker")
    start_disconnect_stream(srv, marker)
    assert wait_for(lambda: any(line.startswith("send-") for line in marker_lines(marker)), 12.0), (
        marker_lines(marker)
    )
    sent = [line for line in marker_lines(marker) if line.startswith("send-")]
    assert sent[0].startswith("send-raised") and sent[0].endswith("oserror=True"), sent


def test_disconnect_error_escaping_the_app_is_not_logged_as_an_error(srv, tmp_path):
    """uvicorn: fails by design (send() never raises, see above)."""
    marker = str(tmp_path / "marker")
    log_start = len(srv.log())
    start_disconnect_stream(srv, marker, propagate=True)
    assert wait_for(
        lambda: any(line.startswith("send-raised") for line in marker_lines(marker)), 12.0
    ), marker_lines(marker)
    time.sleep(0.3)
    assert_serving(srv.port)
    new_log = srv.log()[log_start:]
    assert "Traceback" not in new_log, new_log


# --------------------------------------------------------------------------- extensions


def test_pathsend_sends_a_20mib_file(srv, tmp_path):
    """uvicorn: fails by design (no http.response.pathsend)."""
    path = tmp_path / "big.bin"
    data = os.urandom(MIB) * 20
    path.write_bytes(data)
    with srv.connect(timeout=30) as conn:
        response = conn.request("GET", f"/pathsend?path={path}")
        assert response.status == 200, response
        assert response.header("Content-Length") == str(len(data))
        assert hashlib.sha256(response.body).hexdigest() == hashlib.sha256(data).hexdigest()
        assert conn.request("GET", "/hello").body == b"hello world"


def test_response_headers_from_a_generator(srv):
    """The pairs exist only in the list made from the generator: they must outlive the
    writing of the head (a 300 KB value is unmapped as soon as it is freed)."""
    size = 300_000
    response = fetch(srv.port, "GET", f"/generated-headers?size={size}")
    assert response.status == 200, response
    assert response.header("x-gen-0") == "v" * size
    assert response.header("x-gen-1") == "v" * size
    assert response.body == b"ok"


def test_early_hint_sends_103_before_the_final_response(srv):
    """uvicorn: fails by design (no http.response.early_hint on HTTP/1.1)."""
    with srv.connect() as conn:
        conn.send(build_request("GET", "/early-hint"))
        hint = conn.read_response()
        assert hint.status == 103, hint
        assert hint.header_all("Link") == [
            "</style.css>; rel=preload; as=style",
            "</app.js>; rel=preload; as=script",
        ] or hint.header("Link") == (
            "</style.css>; rel=preload; as=style, </app.js>; rel=preload; as=script"
        )
        final = conn.read_response()
        assert final.status == 200, final
        assert final.body == b"final response"


def test_early_hint_is_ignored_for_http_1_0(srv):
    """A 1xx must not go to an HTTP/1.0 client: only the final response arrives."""
    response = fetch(srv.port, "GET", "/early-hint", version="HTTP/1.0")
    assert response.status in (200, 501), response


def test_trailers_sent_when_the_client_accepts_them(srv):
    """uvicorn: fails by design (no http.response.trailers on HTTP/1.1)."""
    with srv.connect() as conn:
        response = conn.request("GET", "/trailers", headers={"TE": "trailers"})
        assert response.status == 200, response
        assert "chunked" in response.tokens("Transfer-Encoding")
        assert response.body == b"part1part2"
        checksum = hashlib.sha256(b"part1part2").hexdigest()
        assert response.trailers == [("x-checksum", checksum)]
        assert conn.request("GET", "/hello").body == b"hello world"


def test_no_trailers_without_te_trailers(srv):
    with srv.connect() as conn:
        response = conn.request("GET", "/trailers")
        assert response.status == 200, response
        assert response.body == b"part1part2"
        assert response.trailers == []
        assert conn.request("GET", "/hello").body == b"hello world"


def test_extensions_offered_in_scope(srv):
    """uvicorn: fails by design (no extensions)."""
    offered = get_json(srv.port, "/extensions")
    assert "http.response.pathsend" in offered
    assert "http.response.early_hint" in offered
    with_te = get_json(srv.port, "/extensions", headers={"TE": "trailers"})
    assert "http.response.trailers" in with_te


# --------------------------------------------------------------------------- other apps, limits


def test_asgi2_double_callable_app_is_served():
    with run_server("apps.asgi_basic:asgi2_app") as server:
        response = fetch(server.port, "POST", "/two?x=1", body=b"body")
        assert response.status == 200, response
        assert response.body == b"asgi2 POST /two body"


def test_explicit_interface_asgi():
    """uvicorn: fails by design (its names are asgi3/asgi2/wsgi)."""
    with run_server("apps.asgi_basic:app", "--interface", "asgi") as server:
        assert_serving(server.port)


def gate_target(tmp_path):
    """/gate's target, its gate (create it to let the requests finish) and its marker file."""
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    return f"/gate?path={quote(str(gate))}&marker={quote(str(marker))}", gate, marker


def test_limit_concurrency_answers_503_when_exceeded(tmp_path):
    """N requests in flight are served; the N+1st gets 503, and service resumes after.
    uvicorn: fails by design (it counts open connections, the new one included, so its
    second slow connection already gets the 503)."""
    target, gate, marker = gate_target(tmp_path)
    with run_server("apps.asgi_basic:app", "--limit-concurrency", "2") as server:
        slow = [server.connect(), server.connect()]
        try:
            for conn in slow:
                conn.send(build_request("GET", target))
            # Both are in the app, where they stay until the gate opens.
            started = lambda: marker_lines(marker).count("start") == 2  # noqa: E731
            assert wait_for(started, 15.0), marker_lines(marker)
            excess = fetch(server.port, "GET", "/hello")
            assert excess.status == 503, excess
            gate.touch()
            for conn in slow:
                assert conn.read_response().body == b"opened"
        finally:
            for conn in slow:
                conn.close()
        assert wait_for(lambda: fetch(server.port, "GET", "/hello").status == 200, 5.0)


# --------------------------------------------------------------------------- asyncio libraries


class UpstreamHandler(BaseHTTPRequestHandler):
    timeout = 10  # seconds, on the accepted socket

    def do_GET(self):
        body = f"upstream ok {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer((HOST, 0), UpstreamHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_outgoing_httpx_request_from_the_app(srv, upstream):
    response = fetch(srv.port, "GET", f"/outgoing?url={upstream}/ping")
    assert response.status == 200, response
    assert response.body == b"upstream said: upstream ok /ping"


def test_asyncio_timeout_in_the_app(srv):
    response = fetch(srv.port, "GET", "/timeout")
    assert response.status == 200, response
    assert response.body.startswith(b"timed out after 0.1"), response


def test_subprocess_from_the_app(srv):
    response = fetch(srv.port, "GET", "/subprocess")
    assert response.status == 200, response
    assert response.body == b"hello from echo\nexit 0"


def test_each_request_runs_in_its_own_task(srv):
    """Before its first await and after one, the application runs in the request's own
    asyncio task, with a context of its own (a variable set by an earlier request on the same
    connection is not seen)."""
    with srv.connect() as conn:
        for target in ("/task?a", "/task?b", "/task?c&sleep", "/task?d"):
            response = conn.request("GET", target)
            assert response.status == 200, response
            result = json.loads(response.body)
            assert result["is_task"] is True, result
            assert result["in_all_tasks"] is True, result
            assert result["same_task_after_await"] is True, result
            assert result["seen_before"] is None, result


def test_pipelined_requests_do_not_nest(srv):
    """Forty pipelined requests, every third one awaiting before it answers: each one's
    application starts on a stack as deep as the first one's, so a long pipeline cannot grow
    the stack, and none sees the context of the one before it (a request parsed after that
    one completed inside its send() does not run inside it)."""
    count = 40
    targets = [f"/task?{i}" + ("&sleep" if i % 3 == 0 else "") for i in range(count)]
    with srv.connect() as conn:
        conn.send(b"".join(build_request("GET", target) for target in targets))
        results = [json.loads(conn.read_response().body) for _ in range(count)]
    depths = [r["depth"] for r in results]
    assert max(depths) <= min(depths) + 5, depths
    assert all(r["is_task"] and r["seen_before"] is None for r in results), results


def test_requests_run_on_the_loop_lifespan_ran_on(srv):
    result = get_json(srv.port, "/loop")
    assert result["same_as_lifespan"] is True, result


def test_sleeping_requests_run_concurrently(srv, tmp_path):
    """Five requests that await (asyncio.sleep in a loop) until a gate opens; the test opens it
    only once all five are in the app, which one-at-a-time serving would never reach."""
    target, gate, marker = gate_target(tmp_path)
    conns = [srv.connect() for _ in range(5)]
    try:
        for conn in conns:
            conn.send(build_request("GET", target))
        started = lambda: marker_lines(marker).count("start") == 5  # noqa: E731
        assert wait_for(started, 15.0), f"requests did not overlap: {marker_lines(marker)}"
        assert "done" not in marker_lines(marker)
        gate.touch()
        for conn in conns:
            assert conn.read_response().body == b"opened"
    finally:
        for conn in conns:
            conn.close()
