"""HTTP/1.0 and HTTP/1.1 on the wire: framing, keep-alive, pipelining, 100-continue, headers."""

import datetime
import email.utils
import http.client
import re
import time

import pytest
from helpers import (
    ConnectionClosed,
    assert_serving,
    build_request,
    chunked,
    fetch,
    parse_response,
    parse_responses,
    raw_request,
    run_server,
)

RFC7231_DATE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" \d{4} \d{2}:\d{2}:\d{2} GMT$"
)


# --------------------------------------------------------------------------- HTTP/1.0


def test_http10_response_without_length_is_close_delimited(port):
    raw = raw_request(port, b"GET /nolength HTTP/1.0\r\n\r\n")
    response = parse_response(raw)
    assert response.status == 200
    assert response.version in ("HTTP/1.0", "HTTP/1.1")
    assert not response.has_header("Transfer-Encoding"), response
    assert not response.has_header("Content-Length"), response
    assert response.body == b"hello world"


def test_http10_closes_after_response_by_default(server):
    with server.connect() as conn:
        conn.send(b"GET /hello HTTP/1.0\r\n\r\n")
        response = conn.read_response()
        assert (response.status, response.body) == (200, b"hello world")
        assert conn.wait_closed(5.0) == b"", "HTTP/1.0 connection left open"


def test_http10_keep_alive_honoured_when_response_has_length(server):
    request = b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    with server.connect() as conn:
        for _ in range(3):
            conn.send(request)
            response = conn.read_response()
            assert (response.status, response.body) == (200, b"hello world")
            assert response.header("Content-Length") == "11"
            assert "keep-alive" in response.tokens("Connection"), response


def test_http10_keep_alive_without_length_closes(server):
    with server.connect() as conn:
        conn.send(b"GET /nolength HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        response = conn.read_response()
        assert response.status == 200
        assert response.body == b"hello world"
        assert not response.has_header("Transfer-Encoding")
        assert conn.eof, "close-delimited body must end with the connection closing"


def test_http10_request_without_host_is_accepted(port):
    response = parse_response(raw_request(port, b"GET /hello HTTP/1.0\r\n\r\n"))
    assert (response.status, response.body) == (200, b"hello world")


def test_http10_post_with_content_length_body(port):
    raw = raw_request(port, b"POST /echo HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
    assert parse_response(raw).body == b"hello"


# --------------------------------------------------------------------------- HTTP/1.1


def test_http11_keep_alive_serves_many_requests_on_one_connection(server):
    with server.connect() as conn:
        for index in range(200):
            response = conn.request("GET", f"/query?i={index}")
            assert response.status == 200
            assert response.body == f"i={index}".encode()
            assert not response.closes
        assert not conn.eof


def test_http11_connection_close_request_closes_after_response(server):
    with server.connect() as conn:
        response = conn.request("GET", "/hello", headers={"Connection": "close"})
        assert response.body == b"hello world"
        assert response.closes, "Connection: close not echoed"
        assert conn.wait_closed(5.0) == b""


def test_pipelined_requests_answered_in_order(server):
    requests = [build_request("GET", f"/query?n={index}") for index in range(10)]
    requests[4] = build_request("POST", "/echo", body=b"pipelined body")
    requests[7] = build_request("HEAD", "/hello")
    with server.connect() as conn:
        conn.send(b"".join(requests))
        for index in range(10):
            method = "HEAD" if index == 7 else "GET"
            response = conn.read_response(method)
            assert response.status == 200, (index, response)
            assert response.complete
            if index == 4:
                assert response.body == b"pipelined body"
            elif index == 7:
                assert response.body == b""
            else:
                assert response.body == f"n={index}".encode()
        conn.send(build_request("GET", "/hello"))
        assert conn.read_response().body == b"hello world"


def test_pipelined_requests_with_chunked_bodies_answered_in_order(server):
    data = b"".join(
        build_request(
            "POST",
            "/echo",
            headers={"Transfer-Encoding": "chunked"},
            body=chunked(b"part-%d;" % index, b"end"),
        )
        for index in range(10)
    )
    with server.connect() as conn:
        conn.send(data)
        for index in range(10):
            assert conn.read_response().body == b"part-%d;end" % index


@pytest.mark.parametrize(
    "extension",
    [b";ext=1", b";flag", b';q="quoted ; value"', b";a=b;c=d", b";a=b;flag", b";flag;other"],
)
def test_chunk_extensions_are_ignored(server, extension):
    body = b"5" + extension + b"\r\nhello\r\n6" + extension + b"\r\n world\r\n0\r\n\r\n"
    with server.connect() as conn:
        response = conn.request(
            "POST", "/echo", headers={"Transfer-Encoding": "chunked"}, body=body
        )
        assert (response.status, response.body) == (200, b"hello world"), response
        assert conn.request("GET", "/hello").body == b"hello world"


def test_chunked_request_body_with_trailers(server):
    body = b"5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: yes\r\nX-Two: 2\r\n\r\n"
    with server.connect() as conn:
        response = conn.request(
            "POST", "/echo", headers={"Transfer-Encoding": "chunked"}, body=body
        )
        assert (response.status, response.body) == (200, b"hello world"), response
        assert conn.request("GET", "/hello").body == b"hello world"


def test_chunked_request_body_split_across_tiny_sends(server):
    payload = b"tiny sends are reassembled"
    data = build_request(
        "POST",
        "/echo",
        headers={"Transfer-Encoding": "chunked"},
        body=chunked(*(payload[i : i + 3] for i in range(0, len(payload), 3))),
    )
    with server.connect() as conn:
        for index in range(len(data)):
            conn.send(data[index : index + 1])
            if index % 16 == 0:
                time.sleep(0.001)
        response = conn.read_response()
        assert (response.status, response.body) == (200, payload)


def test_content_length_body_split_across_tiny_sends(server):
    data = build_request("POST", "/echo", body=b"0123456789" * 5)
    with server.connect() as conn:
        for index in range(0, len(data), 2):
            conn.send(data[index : index + 2])
        assert conn.read_response().body == b"0123456789" * 5


def test_chunked_response_when_app_gives_no_length(server):
    with server.connect() as conn:
        response = conn.request("GET", "/stream?chunks=5&size=10")
        assert response.status == 200
        assert response.header("Transfer-Encoding") == "chunked"
        assert not response.has_header("Content-Length")
        assert response.complete, "no terminating zero-size chunk"
        assert response.body == b"".join(bytes([ord("a") + i]) * 10 for i in range(5))
        assert response.chunk_sizes[-1] == 0
        assert all(size > 0 for size in response.chunk_sizes[:-1])
        # the framing left nothing behind: the next response parses
        assert conn.request("GET", "/hello").body == b"hello world"


def test_chunked_response_with_empty_iterable_items(server):
    with server.connect() as conn:
        response = conn.request("GET", "/stream?chunks=3&size=0")
        assert response.status == 200
        assert response.body == b""
        assert response.complete
        assert conn.request("GET", "/hello").body == b"hello world"


def test_head_has_no_body_but_keeps_content_length(server):
    with server.connect() as conn:
        conn.send(build_request("HEAD", "/hello") + build_request("GET", "/query?after=head"))
        head = conn.read_response("HEAD")
        assert head.status == 200
        assert head.header("Content-Length") == "11"
        follow = conn.read_response()
        assert follow.body == b"after=head", "HEAD response carried body bytes"


def test_head_of_unsized_response_has_no_body(server):
    with server.connect() as conn:
        conn.send(build_request("HEAD", "/nolength") + build_request("GET", "/query?x=1"))
        assert conn.read_response("HEAD").status == 200
        assert conn.read_response().body == b"x=1", "HEAD response carried body bytes"


@pytest.mark.parametrize("code", [204, 304])
def test_bodyless_status_has_no_body_and_no_transfer_encoding(server, code):
    with server.connect() as conn:
        conn.send(build_request("GET", f"/status?code={code}") + build_request("GET", "/hello"))
        response = conn.read_response()
        assert response.status == code
        assert not response.has_header("Transfer-Encoding"), response
        assert response.header("Content-Length") in (None, "0"), response
        assert conn.read_response().body == b"hello world", f"{code} response carried a body"


def test_date_header_is_rfc7231_and_current(port):
    response = fetch(port, "GET", "/hello")
    dates = response.header_all("Date")
    assert len(dates) == 1, response
    assert RFC7231_DATE.match(dates[0]), dates[0]
    sent = email.utils.parsedate_to_datetime(dates[0])
    now = datetime.datetime.now(datetime.timezone.utc)
    assert abs((now - sent).total_seconds()) < 60, (dates[0], now)


def test_server_header_names_pyserver(port):
    response = fetch(port, "GET", "/hello")
    servers = response.header_all("Server")
    assert len(servers) == 1, response
    assert servers[0].lower().startswith("pyserver"), servers


def test_no_server_header_option_removes_server_header():
    with run_server("apps.basic:app", "--no-server-header") as srv:
        response = fetch(srv.port, "GET", "/hello")
        assert response.status == 200
        assert not response.has_header("Server"), response
        assert response.has_header("Date")


def test_http_client_keep_alive_round_trips(port):
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for index in range(5):
            client.request("POST", "/echo", body=b"x" * index * 1000)
            response = client.getresponse()
            assert response.status == 200
            assert response.read() == b"x" * index * 1000
    finally:
        client.close()


# --------------------------------------------------------------------------- 100-continue


def test_expect_100_continue_sent_when_app_reads_body(server):
    with server.connect() as conn:
        conn.send(
            build_request(
                "POST", "/echo", headers={"Content-Length": "5", "Expect": "100-continue"}
            )
        )
        interim = conn.read_response()
        assert interim.status == 100, f"expected 100 Continue first, got {interim!r}"
        assert interim.raw_head.startswith(b"HTTP/1.1 100 Continue\r\n"), interim.raw_head
        conn.send(b"hello")
        final = conn.read_response()
        assert (final.status, final.body) == (200, b"hello")
        assert conn.request("GET", "/hello").body == b"hello world"


def test_expect_100_continue_with_chunked_body(server):
    with server.connect() as conn:
        headers = {"Transfer-Encoding": "chunked", "Expect": "100-continue"}
        conn.send(build_request("POST", "/echo", headers=headers))
        assert conn.read_response().status == 100
        conn.send(chunked(b"chunked ", b"after 100"))
        assert conn.read_response().body == b"chunked after 100"


def test_expect_100_continue_sent_before_a_wsgi_app_runs_even_if_it_does_not_read(server):
    """A WSGI app runs only once its whole body has arrived (the server reads it first, so a
    slow client never blocks the worker): the 100 comes as soon as the head is accepted, also
    for an app that ignores the body, and that body is not taken for the next request."""
    with server.connect() as conn:
        conn.send(
            build_request(
                "POST", "/no-read", headers={"Content-Length": "5", "Expect": "100-continue"}
            )
        )
        interim = conn.read_response()
        assert interim.status == 100, f"expected 100 Continue first, got {interim!r}"
        conn.send(b"hello" + build_request("GET", "/query?next=1"))
        response = conn.read_response()
        assert (response.status, response.body) == (200, b"body not read"), response
        follow = conn.read_response()
        assert (follow.status, follow.body) == (200, b"next=1"), follow


def test_unread_request_body_is_skipped_before_next_request(server):
    data = build_request("POST", "/no-read", body=b"GET /evil HTTP/1.1\r\n\r\n" * 3)
    with server.connect() as conn:
        conn.send(data + build_request("GET", "/query?second=1"))
        assert conn.read_response().body == b"body not read"
        try:
            follow = conn.read_response()
        except ConnectionClosed:
            assert conn.eof
        else:
            assert (follow.status, follow.body) == (200, b"second=1"), follow
    assert_serving(server.port)


def test_half_request_then_disconnect_leaves_server_fine(server):
    partial_body = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab"
    for partial in (b"GET /hel", b"GET /hello HTTP/1.1\r\nHost: x\r\n", partial_body):
        with server.connect() as conn:
            conn.send(partial)
    assert_serving(server.port)


def test_many_responses_parse_back_to_back(port):
    data = b"".join(build_request("GET", f"/query?k={i}") for i in range(20))
    data += build_request("GET", "/hello", headers={"Connection": "close"})
    responses = parse_responses(raw_request(port, data))
    assert [r.body for r in responses[:20]] == [f"k={i}".encode() for i in range(20)]
    assert responses[20].body == b"hello world"


def test_connection_close_request_stops_the_pipeline(server):
    first = build_request("GET", "/query?first=1", headers={"Connection": "close"})
    with server.connect() as conn:
        conn.send(first + build_request("GET", "/query?second=1"))
        response = conn.read_response()
        assert response.body == b"first=1" and response.closes
        leftover = conn.wait_closed(5.0)
        assert leftover == b"", f"answered a request after Connection: close: {leftover!r}"


def test_thousand_pipelined_requests_in_one_send(server):
    with server.connect() as conn:
        conn.send(b"".join(build_request("GET", f"/query?{i}") for i in range(1000)))
        for index in range(1000):
            assert conn.read_response().body == str(index).encode()


def test_app_body_longer_than_content_length_is_truncated(server):
    with server.connect() as conn:
        conn.send(
            build_request("GET", "/length-mismatch?declared=10&actual=20")
            + build_request("GET", "/query?after=overlong")
        )
        response = conn.read_response()
        assert response.status == 200
        assert response.body == b"m" * 10, response
        try:
            follow = conn.read_response()
        except ConnectionClosed:  # closing is acceptable; sending the extra bytes is not
            return
        assert (follow.status, follow.body) == (200, b"after=overlong"), follow


def test_app_body_shorter_than_content_length_closes_connection(server):
    with server.connect() as conn:
        response = conn.request("GET", "/length-mismatch?declared=100&actual=10")
        assert response.status == 200
        assert response.body == b"m" * 5 + b"n" * 5
        assert not response.complete and conn.eof, "short body must end with a close"
    assert_serving(server.port)
