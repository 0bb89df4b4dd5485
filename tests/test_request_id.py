"""--request-id and --request-start-header: the X-Request-ID every request gets (a trusted
proxy's kept, anything else replaced by 32 lowercase hex digits), the application sees
exactly one, the response carries it unless the application set its own, the access log
has it (`%(rid)s`, JSON `request_id`) with a valid traceparent's `trace_id` and
`parent_id`; X-Request-Start: t=<microseconds> for APM queue time.

The client is 127.0.0.1: `--forwarded-allow-ips 127.0.0.1` makes it a trusted proxy,
`--forwarded-allow-ips 10.0.0.1` an untrusted peer. One server per configuration.
"""

import asyncio
import json
import re
import socket
import struct
import time

import pytest
from helpers import HOST, free_port, run_server, wait_for

WSGI = "apps.reqid_apps:wsgi"
ASGI = "apps.reqid_apps:asgi"
HEX32 = re.compile(r"^[0-9a-f]{32}$")
TEXT_FORMAT = 'RID %(rid)s %({x-request-id}i)s %(trace_id)s %(parent_id)s "%(r)s"'
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ON = ("--request-id", "--request-start-header")


@pytest.fixture(scope="module")
def trusted():
    """WSGI behind a trusted proxy, a text access line with the atoms."""
    args = (*ON, "--forwarded-allow-ips", "127.0.0.1", "--access-logformat", TEXT_FORMAT)
    with run_server(WSGI, *args) as srv:
        yield srv


@pytest.fixture(scope="module")
def untrusted():
    """ASGI reached by an untrusted peer, JSON access lines."""
    args = (*ON, "--forwarded-allow-ips", "10.0.0.1", "--access-log-json")
    with run_server(ASGI, *args) as srv:
        yield srv


@pytest.fixture(scope="module")
def off():
    """ASGI without the options, JSON access lines."""
    with run_server(ASGI, "--access-log-json") as srv:
        yield srv


def get(srv, target="/", headers=()):
    """One request on a new connection: (response, what the application saw)."""
    with srv.connect() as conn:
        r = conn.request("GET", target, headers=list(headers))
    assert r.status == 200, r
    return r, json.loads(r.body)


def seen_id(seen):
    """The application's X-Request-ID: WSGI's environ value, ASGI's one header."""
    if isinstance(seen["id"], list):
        assert len(seen["id"]) == 1, seen  # exactly once in the scope's headers
        return seen["id"][0]
    return seen["id"]


def json_line(srv, rid):
    """The JSON access line of the request whose X-Request-ID was rid."""
    found = []

    def line():
        for text in srv.log().splitlines():
            if text.startswith('{"time": ') and rid in text:
                found.append(json.loads(text))
                return True
        return False

    assert wait_for(line), srv.log_tail()
    return found[0]


@pytest.mark.parametrize("which", ["trusted", "untrusted"])
def test_generated_ids_are_hex_differ_and_reach_the_response(request, which):
    srv = request.getfixturevalue(which)
    ids = []
    for _ in range(2):
        r, seen = get(srv)
        rid = seen_id(seen)
        assert HEX32.match(rid), rid
        assert r.header_all("X-Request-ID") == [rid]
        ids.append(rid)
    assert ids[0] != ids[1]


def test_trusted_proxy_id_is_kept(trusted):
    rid = "edge-42:abc/DEF+ghi=~!"
    r, seen = get(trusted, headers=[("X-Request-ID", rid)])
    assert seen["id"] == rid
    assert r.header_all("X-Request-ID") == [rid]


def test_untrusted_peer_id_is_replaced(untrusted):
    r, seen = get(untrusted, headers=[("X-Request-ID", "spoofed-by-client")])
    rid = seen_id(seen)  # replaced, not added: the client's value is gone
    assert HEX32.match(rid), seen
    assert r.header_all("X-Request-ID") == [rid]


MALFORMED = {
    "too-long": [("X-Request-ID", "x" * 201)],
    "control-char": [("X-Request-ID", "a\tb")],
    "space": [("X-Request-ID", "a b")],
    "quote": [("X-Request-ID", 'a"b')],
    "empty": [("X-Request-ID", "")],
    "twice": [("X-Request-ID", "one"), ("X-Request-ID", "two")],
}


@pytest.mark.parametrize("headers", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_ids_from_a_trusted_proxy_are_replaced(trusted, headers):
    r, seen = get(trusted, headers=headers)
    assert HEX32.match(seen["id"]), seen  # one value: a duplicate is not joined in
    assert r.header_all("X-Request-ID") == [seen["id"]]


def test_longest_valid_id_is_kept(trusted):
    rid = "y" * 200
    r, seen = get(trusted, headers=[("X-Request-ID", rid)])
    assert seen["id"] == rid and r.header("X-Request-ID") == rid


@pytest.mark.parametrize("which", ["trusted", "untrusted"])
def test_the_applications_own_id_wins(request, which):
    r, seen = get(request.getfixturevalue(which), "/own")
    assert HEX32.match(seen_id(seen))
    assert r.header_all("X-Request-ID") == ["app-chosen"]


def test_text_access_line_has_the_final_id(trusted):
    r, seen = get(
        trusted, "/text", headers=[("X-Request-ID", "bad id"), ("traceparent", TRACEPARENT)]
    )
    rid = seen["id"]
    line = f'RID {rid} {rid} 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 "GET /text HTTP/1.1"'
    assert trusted.wait_for_log(line), trusted.log_tail()


def test_json_line_has_request_id_and_trace_fields(untrusted):
    r, seen = get(untrusted, "/traced", headers=[("traceparent", TRACEPARENT)])
    fields = json_line(untrusted, seen_id(seen))
    assert fields["request_id"] == seen_id(seen) == r.header("X-Request-ID")
    assert fields["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert fields["parent_id"] == "00f067aa0ba902b7"


BAD_TRACEPARENTS = {
    "version-ff": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "zero-trace-id": "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "zero-parent-id": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "uppercase": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    "short-trace-id": "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    "long-parent-id": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7a-01",
    "v00-extra": TRACEPARENT + "-more",
}


@pytest.mark.parametrize("value", BAD_TRACEPARENTS.values(), ids=BAD_TRACEPARENTS.keys())
def test_malformed_traceparent_gives_no_fields(untrusted, value):
    r, seen = get(untrusted, "/badtrace", headers=[("traceparent", value)])
    fields = json_line(untrusted, seen_id(seen))
    assert fields["request_id"] == seen_id(seen)
    assert "trace_id" not in fields and "parent_id" not in fields, fields
    assert fields["status"] == 200


@pytest.mark.parametrize("which", ["trusted", "untrusted"])
def test_request_start_is_microseconds_when_the_head_came(request, which):
    srv = request.getfixturevalue(which)
    before = int(time.time() * 1e6)
    _, seen = get(srv)
    after = int(time.time() * 1e6)
    start = seen["start"] if which == "trusted" else seen["start"][0]
    m = re.fullmatch(r"t=(\d{16})", start)
    assert m, seen
    assert before - 1000 <= int(m.group(1)) <= after + 1000


def test_request_start_from_a_trusted_proxy_is_kept(trusted):
    _, seen = get(trusted, headers=[("X-Request-Start", "t=1700000000.123")])
    assert seen["start"] == "t=1700000000.123"


def test_request_start_from_an_untrusted_peer_is_replaced(untrusted):
    _, seen = get(untrusted, headers=[("X-Request-Start", "t=1")])
    assert len(seen["start"]) == 1 and re.fullmatch(r"t=\d{16}", seen["start"][0]), seen


def test_http2_stream_gets_an_id(untrusted):
    import httpx

    async def main():
        async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as c:
            headers = {"x-request-id": "spoofed", "traceparent": TRACEPARENT}
            return await asyncio.gather(
                *(c.get(f"{untrusted.url}/h2", headers=headers) for _ in range(2))
            )

    rs = asyncio.run(main())
    ids = []
    for r in rs:
        assert r.http_version == "HTTP/2"
        rid = seen_id(r.json())
        assert HEX32.match(rid) and r.headers.get_list("x-request-id") == [rid]
        ids.append(rid)
    assert ids[0] != ids[1]
    fields = json_line(untrusted, ids[0])
    assert fields["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_off_leaves_the_request_alone(off):
    r, seen = get(off, headers=[("X-Request-ID", "client-said"), ("traceparent", TRACEPARENT)])
    assert seen == {"id": ["client-said"], "start": []}
    assert not r.has_header("X-Request-ID")
    fields = json_line(off, '"path": "/"')
    assert not {"request_id", "trace_id", "parent_id"} & fields.keys(), fields


def uwsgi_request(port, **http):
    """A GET through a uwsgi gateway (nginx's variables, HTTP_* for the headers); returns
    what the WSGI application saw and the response's X-Request-ID."""
    variables = {
        "REQUEST_METHOD": "GET",
        "REQUEST_URI": "/uw",
        "PATH_INFO": "/uw",
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "192.0.2.7",
        "REMOTE_PORT": "40000",
        "SERVER_NAME": "example.com",
        "SERVER_PORT": "80",
        "HTTP_HOST": "example.com",
        **http,
    }
    data = b"".join(
        struct.pack("<H", len(k)) + k.encode() + struct.pack("<H", len(v)) + v.encode()
        for k, v in variables.items()
    )
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(struct.pack("<BHB", 0, len(data), 0) + data)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    rid = re.search(rb"\r\nX-Request-ID: ([^\r]*)", head)
    return json.loads(body), rid and rid.group(1).decode()


def test_uwsgi_gateway_id_is_kept_and_a_missing_one_made():
    """A uwsgi gateway (nginx's uwsgi_param HTTP_X_REQUEST_ID $request_id) is trusted like a
    proxy: only peers --forwarded-allow-ips trusts may speak uwsgi at all."""
    port = free_port()
    args = ("--request-id", "--request-start-header", "-b", f"uwsgi://127.0.0.1:{port}")
    with run_server(WSGI, *args, listen=False, port=port) as srv:
        seen, rid = uwsgi_request(srv.port, HTTP_X_REQUEST_ID="nginx-made-0001")
        assert seen["id"] == rid == "nginx-made-0001"
        seen, rid = uwsgi_request(srv.port, HTTP_X_REQUEST_START="t=1700000000.5")
        assert HEX32.match(seen["id"]) and rid == seen["id"]
        assert seen["start"] == "t=1700000000.5"
        seen, rid = uwsgi_request(srv.port, HTTP_X_REQUEST_ID="bad id")
        assert HEX32.match(seen["id"]) and rid == seen["id"]


def test_http2_id_is_never_indexed(untrusted):
    """A new value in every response: sent as a never-indexed literal, so it does not push
    the useful entries out of the client's HPACK table."""
    import h2.config
    import h2.connection
    import h2.events
    import hpack

    with socket.create_connection((HOST, untrusted.port), timeout=10) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        head = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "t")]
        conn.send_headers(1, head, end_stream=True)
        sock.sendall(conn.data_to_send())
        fields = None
        while fields is None:
            data = sock.recv(65536)
            assert data, "connection closed"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    fields = event.headers
    rid = [f for f in fields if f[0] == b"x-request-id"]
    assert len(rid) == 1 and HEX32.match(rid[0][1].decode())
    assert isinstance(rid[0], hpack.NeverIndexedHeaderTuple)
