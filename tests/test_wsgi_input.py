"""wsgi.input: every read method, with Content-Length and with chunked request bodies."""

import io
import json

import pytest
from helpers import chunked

BODY = b"line1\nline2\r\n\nline4 without newline"


def send_body(server, mode, framing, n=4, body=BODY):
    """POST body to /input?mode=..., framed by Content-Length or chunked (in 5-byte chunks)."""
    if framing == "chunked":
        headers = {"Transfer-Encoding": "chunked"}
        data = chunked(*(body[i : i + 5] for i in range(0, len(body), 5)))
    else:
        headers, data = {}, body
    with server.connect() as conn:
        response = conn.request("POST", f"/input?mode={mode}&n={n}", headers=headers, body=data)
        assert response.status == 200, response
        result = json.loads(response.body)
    assert result["types"] == ["bytes"], result
    assert result["after"] == ["", "", ""], f"reading past the end returned {result['after']}"
    return [piece.encode("latin-1") for piece in result["pieces"]]


FRAMINGS = ["content-length", "chunked"]


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("mode", ["read", "read-1"])
def test_read_all(server, framing, mode):
    assert send_body(server, mode, framing) == [BODY]


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("size", [1, 4, 7, 1000])
def test_read_n_returns_at_most_n_and_everything_in_order(server, framing, size):
    pieces = send_body(server, "read-n", framing, n=size)
    assert b"".join(pieces) == BODY
    assert all(0 < len(piece) <= size for piece in pieces), [len(p) for p in pieces]
    assert all(len(piece) == size for piece in pieces[:-1]), [len(p) for p in pieces]


@pytest.mark.parametrize("framing", FRAMINGS)
def test_readline(server, framing):
    assert send_body(server, "readline", framing) == io.BytesIO(BODY).readlines()


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("size", [1, 3, 6, 100])
def test_readline_with_size(server, framing, size):
    reference = io.BytesIO(BODY)
    expected = list(iter(lambda: reference.readline(size), b""))
    assert send_body(server, "readline-n", framing, n=size) == expected


@pytest.mark.parametrize("framing", FRAMINGS)
def test_readlines(server, framing):
    assert send_body(server, "readlines", framing) == io.BytesIO(BODY).readlines()


@pytest.mark.parametrize("framing", FRAMINGS)
def test_iteration_yields_lines(server, framing):
    assert send_body(server, "iter", framing) == io.BytesIO(BODY).readlines()


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("mode", ["read", "readline", "readlines", "iter", "read-n"])
def test_empty_body(server, framing, mode):
    pieces = send_body(server, mode, framing, body=b"")
    assert b"".join(pieces) == b""


@pytest.mark.parametrize("framing", FRAMINGS)
def test_long_line_across_many_chunks(server, framing):
    body = b"x" * 100_000 + b"\n" + b"tail"
    assert send_body(server, "readline", framing, body=body) == [b"x" * 100_000 + b"\n", b"tail"]


def test_get_without_body_reads_empty(server):
    with server.connect() as conn:
        response = conn.request("GET", "/input?mode=read")
        result = json.loads(response.body)
    assert result["pieces"] == [""]
    assert result["after"] == ["", "", ""]


def test_input_is_per_request_on_keep_alive(server):
    with server.connect() as conn:
        for index in range(5):
            body = f"request-{index}\n".encode() * (index + 1)
            response = conn.request("POST", "/input?mode=read", body=body)
            assert json.loads(response.body)["pieces"] == [body.decode()]
