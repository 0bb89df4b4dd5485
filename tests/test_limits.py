"""Limits and malformed requests: the right status, `Connection: close`, a closed connection,
and a server that goes on serving everyone else."""

import random

import pytest
from helpers import assert_serving, build_request, chunked, run_server


def request(*header_lines: bytes, line: bytes = b"GET /hello HTTP/1.1", body: bytes = b"") -> bytes:
    """A raw request; header lines are given without their CRLF (a Host line comes first)."""
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in header_lines) + b"\r\n" + body


HOST = b"Host: 127.0.0.1"
POST_ECHO = b"POST /echo HTTP/1.1"
CHUNKED = b"Transfer-Encoding: chunked"

TLS_CLIENT_HELLO = bytes.fromhex(
    "16030100c4010000c00303"
    "5b1e3f0a6c2d9e7b8a4f1c3d2e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5"
    "00002ac02cc02bc030c02fc024c023c028c027c00ac009c014c013009d009c003d003c0035002f000a"
    "0100006d0000000e000c0000096c6f63616c686f7374000a00080006001d00170018"
)
BINARY_JUNK = b"\xff" + bytes(random.Random(3333).randrange(256) for _ in range(511)) + b"\r\n\r\n"

BAD_REQUESTS = [
    ("request-line-too-long", request(HOST, line=b"GET /" + b"a" * 8200 + b" HTTP/1.1"), 414),
    (
        "too-many-header-fields",
        request(HOST, *(b"X-Field-%d: v" % i for i in range(100))),
        431,
    ),
    ("header-field-too-long", request(HOST, b"X-Big: " + b"a" * 8200), 431),
    ("header-name-too-long", request(HOST, b"X-" + b"n" * 8200 + b": v"), 431),
    # The final coding is not chunked: the body cannot be framed (RFC 9112 section 6.3).
    ("unknown-transfer-coding", request(HOST, b"Transfer-Encoding: foo", line=POST_ECHO), 400),
    (
        "unknown-coding-before-chunked",
        request(HOST, b"Transfer-Encoding: foo, chunked", line=POST_ECHO, body=b"0\r\n\r\n"),
        501,
    ),
    ("unsupported-http-version", request(HOST, line=b"GET /hello HTTP/3.0"), 505),
    ("garbage-http-version", request(HOST, line=b"GET /hello HTTP/1.x"), 400),
    ("no-http-version", request(HOST, line=b"GET /hello FOO"), 400),
    ("space-in-target", request(HOST, line=b"GET /a b HTTP/1.1"), 400),
    ("invalid-method-character", request(HOST, line=b"G(T /hello HTTP/1.1"), 400),
    (
        "content-length-and-transfer-encoding",
        request(
            HOST,
            b"Content-Length: 5",
            b"Transfer-Encoding: chunked",
            line=POST_ECHO,
            body=b"5\r\nhello\r\n0\r\n\r\n",
        ),
        400,
    ),
    (
        "two-different-content-lengths",
        request(HOST, b"Content-Length: 5", b"Content-Length: 6", line=POST_ECHO, body=b"hello!"),
        400,
    ),
    (
        "bad-chunk-size",
        request(HOST, CHUNKED, line=POST_ECHO, body=b"zz\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    (
        "chunk-data-without-crlf",
        request(HOST, CHUNKED, line=POST_ECHO, body=b"5\r\nhelloXX0\r\n\r\n"),
        400,
    ),
    ("cr-in-header-value", request(HOST, b"X-A: a\rb"), 400),
    ("lf-in-header-value", request(HOST, b"X-A: a\nb"), 400),
    ("nul-in-header-value", request(HOST, b"X-A: a\x00b"), 400),
    ("nul-in-header-name", request(HOST, b"X\x00A: b"), 400),
    ("space-in-header-name", request(HOST, b"X A: b"), 400),
    ("space-before-colon", request(HOST, b"X-A : b"), 400),
    ("empty-header-name", request(HOST, b": value"), 400),
    ("header-line-without-colon", request(HOST, b"X-A"), 400),
    ("obs-fold-space", request(HOST, b"X-A: a", b" folded"), 400),
    ("obs-fold-tab", request(HOST, b"X-A: a", b"\tfolded"), 400),
    (
        "whitespace-prefixed-content-length-line",
        request(HOST, b" Content-Length: 5", line=POST_ECHO, body=b"hello"),
        400,
    ),
    ("content-length-plus-sign", request(HOST, b"Content-Length: +5", line=POST_ECHO), 400),
    ("content-length-negative", request(HOST, b"Content-Length: -5", line=POST_ECHO), 400),
    ("content-length-hex", request(HOST, b"Content-Length: 0x5", line=POST_ECHO), 400),
    ("content-length-two-numbers", request(HOST, b"Content-Length: 5 5", line=POST_ECHO), 400),
    ("content-length-not-a-number", request(HOST, b"Content-Length: abc", line=POST_ECHO), 400),
    (
        "chunk-size-overflow",
        request(HOST, CHUNKED, line=POST_ECHO, body=b"fffffffffffffffffffff\r\nx\r\n0\r\n\r\n"),
        400,
    ),
    (
        "content-length-overflow",
        request(HOST, b"Content-Length: 99999999999999999999999", line=POST_ECHO),
        400,
    ),
    ("target-without-slash", request(HOST, line=b"GET hello HTTP/1.1"), 400),
    ("missing-host-on-http11", request(), 400),
    ("two-host-headers", request(HOST, b"Host: example.com"), 400),
    ("garbage-bytes", b"\x00\x01\x02\x03garbage\r\n\r\n", 400),
    ("binary-junk", BINARY_JUNK, 400),
    ("tls-client-hello", TLS_CLIENT_HELLO, 400),
]


def assert_rejected(srv, data: bytes, status: int) -> None:
    """`data` gets `status` with Connection: close, the connection closes, others are served."""
    with srv.connect() as conn:
        conn.send(data)
        response = conn.read_response()
        assert response.status == status, f"sent {data[:120]!r}..., got {response!r}"
        assert response.closes, f"no Connection: close on {response!r}"
        assert conn.wait_closed(5.0) is not None, "connection left open after the error"
    assert_serving(srv.port)


@pytest.mark.parametrize(
    ("data", "status"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_request_rejected_and_connection_closed(server, data, status):
    assert_rejected(server, data, status)


def test_bad_request_after_good_one_on_same_connection(server):
    with server.connect() as conn:
        assert conn.request("GET", "/hello").body == b"hello world"
        conn.send(request(HOST, b"X A: b"))
        response = conn.read_response()
        assert response.status == 400 and response.closes, response
        assert conn.wait_closed(5.0) is not None
    assert_serving(server.port)


def test_bad_request_in_pipeline_answers_earlier_requests_first(server):
    with server.connect() as conn:
        conn.send(build_request("GET", "/query?first=1") + request(HOST, b"X\x00A: b"))
        first = conn.read_response()
        assert (first.status, first.body) == (200, b"first=1")
        second = conn.read_response()
        assert second.status == 400 and second.closes, second


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (request(HOST, line=b"GET /hello?" + b"p" * 7980 + b" HTTP/1.1"), b"hello world"),
        (request(HOST, *(b"X-Field-%d: v" % i for i in range(99))), b"hello world"),
        (request(HOST, b"X-Big: " + b"a" * 8000), b"hello world"),
        (request(HOST, b"Content-Length:  5 ", line=POST_ECHO, body=b"hello"), b"hello"),
        (request(HOST, b"content-length: 5", line=POST_ECHO, body=b"hello"), b"hello"),
        (
            request(HOST, b"transfer-encoding: CHUNKED", line=POST_ECHO, body=chunked(b"hello")),
            b"hello",
        ),
        (request(HOST, b"Content-Length: 0", line=POST_ECHO), b""),
    ],
    ids=[
        "request-line-8000",
        "100-header-fields",
        "header-field-8000",
        "ows-around-length",
        "lowercase-content-length",
        "uppercase-chunked",
        "zero-content-length",
    ],
)
def test_requests_within_default_limits_are_served(server, data, expected):
    with server.connect() as conn:
        conn.send(data)
        response = conn.read_response()
        assert (response.status, response.body) == (200, expected), response


# --------------------------------------------------------------------------- configured limits


@pytest.fixture(scope="module")
def limited():
    with run_server(
        "apps.basic:app",
        "--limit-request-line", "200",
        "--limit-request-fields", "10",
        "--limit-request-field-size", "200",
        "--limit-request-body", "1000",
    ) as srv:  # fmt: skip
        yield srv


def test_configured_request_line_limit(limited):
    ok = request(HOST, line=b"GET /hello?" + b"p" * 100 + b" HTTP/1.1")
    with limited.connect() as conn:
        conn.send(ok)
        assert conn.read_response().status == 200
    assert_rejected(limited, request(HOST, line=b"GET /hello?" + b"p" * 300 + b" HTTP/1.1"), 414)


def test_configured_header_field_count_limit(limited):
    with limited.connect() as conn:
        conn.send(request(HOST, *(b"X-F-%d: v" % i for i in range(9))))
        assert conn.read_response().status == 200
    assert_rejected(limited, request(HOST, *(b"X-F-%d: v" % i for i in range(11))), 431)


def test_configured_header_field_size_limit(limited):
    with limited.connect() as conn:
        conn.send(request(HOST, b"X-A: " + b"v" * 50))
        assert conn.read_response().status == 200
    assert_rejected(limited, request(HOST, b"X-A: " + b"v" * 400), 431)


def test_field_size_limit_counts_the_whole_field_line(limited):
    """--limit-request-field-size 200 counts the field line as gunicorn and nginx do: name,
    colon, whitespace, value and its CRLF; 200 bytes pass, 201 do not, whitespace too."""
    with limited.connect() as conn:
        conn.send(request(HOST, b"X-A: " + b"v" * 193))
        assert conn.read_response().status == 200
    assert_rejected(limited, request(HOST, b"X-A: " + b"v" * 194), 431)
    assert_rejected(limited, request(HOST, b"X-A:  " + b"v" * 193), 431)
    assert_rejected(limited, request(HOST, b"X-A: " + b"v" * 193 + b" "), 431)


@pytest.mark.parametrize(("size", "status"), [(8190, 200), (8191, 431), (8192, 431)])
def test_default_field_size_limit_is_8190_bytes_of_line(server, size, status):
    """The default, 8190 (gunicorn's): a field line of 8,192 bytes with its CRLF is 431."""
    data = request(HOST, b"X-Big: " + b"a" * (size - len(b"X-Big: \r\n")))
    if status == 200:
        with server.connect() as conn:
            conn.send(data)
            assert conn.read_response().status == 200
    else:
        assert_rejected(server, data, status)


def test_two_content_type_fields_get_400(server):
    """Joined, two Content-Type fields make no valid media type: 400, as for two
    Content-Length fields."""
    data = request(HOST, b"Content-Type: application/json", b"Content-Type: text/html")
    assert_rejected(server, data, 400)
    with server.connect() as conn:
        conn.send(request(HOST, b"Content-Type: application/json"))
        assert conn.read_response().status == 200


def test_body_within_configured_limit_is_accepted(limited):
    with limited.connect() as conn:
        assert conn.request("POST", "/echo", body=b"b" * 1000).body == b"b" * 1000
        response = conn.request(
            "POST",
            "/echo",
            headers={"Transfer-Encoding": "chunked"},
            body=chunked(b"c" * 500, b"d" * 500),
        )
        assert response.body == b"c" * 500 + b"d" * 500


def test_declared_content_length_over_limit_gets_413(limited):
    assert_rejected(limited, request(HOST, b"Content-Length: 1001", line=POST_ECHO), 413)


def test_chunked_body_growing_over_limit_gets_413(limited):
    body = chunked(*[b"z" * 300] * 7)
    assert_rejected(limited, request(HOST, CHUNKED, line=POST_ECHO, body=body), 413)


def test_declared_content_length_over_limit_with_expect_gets_413_not_100(limited):
    data = request(HOST, b"Content-Length: 5000", b"Expect: 100-continue", line=POST_ECHO)
    assert_rejected(limited, data, 413)
