"""Application errors: a 500 or a closed connection, a logged traceback, and a server that
goes on serving."""

import re
import uuid

import pytest
from apps.basic import BAD_HEADERS
from helpers import ConnectionClosed, assert_serving, fetch, wait_for


def test_exception_before_start_response_gives_500_and_is_logged(server):
    token = uuid.uuid4().hex
    response = fetch(server.port, "GET", f"/raise-before?token={token}")
    assert response.status == 500, response
    assert token.encode() not in response.body, "exception details leaked to the client"
    assert server.wait_for_log(f"boom-before-start-response {token}"), server.log_tail()
    assert "Traceback" in server.log() or "RuntimeError" in server.log()
    assert_serving(server.port)


def test_exception_before_start_response_keeps_connection_usable_or_closes(server):
    with server.connect() as conn:
        response = conn.request("GET", "/raise-before?token=keepalive")
        assert response.status == 500
        if not response.closes:
            assert conn.request("GET", "/hello").body == b"hello world"


@pytest.mark.parametrize("declared", [None, 1000], ids=["chunked", "content-length"])
def test_exception_after_first_chunk_truncates_response(server, declared):
    token = uuid.uuid4().hex
    target = f"/raise-after?token={token}" + (f"&cl={declared}" if declared else "")
    with server.connect() as conn:
        response = conn.request("GET", target)
        assert response.status == 200, response
        assert response.body.startswith(b"first-chunk;"), response
        assert not response.complete, f"truncated response looked complete: {response!r}"
        assert conn.eof
    assert server.wait_for_log(f"boom-after-first-chunk {token}"), server.log_tail()
    assert_serving(server.port)


@pytest.mark.parametrize("kind", [*BAD_HEADERS, "status", "non-str-value"])
def test_invalid_response_header_gives_500_without_injection(server, kind):
    with server.connect() as conn:
        conn.send(f"GET /bad-header?kind={kind} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = conn.read_response()
        raw = response.raw_head + response.body + (conn.wait_closed(0.5) or b"")
    assert response.status == 500, response
    assert b"Injected" not in raw and b"evil" not in raw, raw
    assert b"should not be sent" not in raw
    assert_serving(server.port)


def test_str_body_chunk_is_an_error_and_logged(server):
    before = len(server.log())
    with server.connect() as conn:
        conn.send(b"GET /str-body HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            response = conn.read_response()
        except ConnectionClosed:
            response = None
    if response is not None:
        assert response.status == 500 or not response.complete, response
        assert b"a str is not a valid body chunk" not in response.body
    assert re_wait(server, before, r"str|bytes"), server.log_tail()
    assert_serving(server.port)


def re_wait(server, offset: int, pattern: str) -> bool:
    """Wait until the log after `offset` matches `pattern`."""
    return wait_for(lambda: re.search(pattern, server.log()[offset:]) is not None)


def test_many_failing_requests_do_not_break_the_worker(server):
    for index in range(50):
        assert fetch(server.port, "GET", f"/raise-before?token=loop{index}").status == 500
    assert_serving(server.port)
