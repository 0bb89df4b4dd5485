"""RFC 7239 Forwarded, X-Forwarded-Host and X-Forwarded-Port from a trusted proxy.

WSGI sees them in REMOTE_ADDR/REMOTE_PORT, wsgi.url_scheme, HTTP_HOST, SERVER_NAME and
SERVER_PORT (as werkzeug's ProxyFix sets them); ASGI in scope["client"], scope["scheme"],
scope["server"] and the "host" field of scope["headers"]. Headers that disagree, and a
Forwarded field that is not RFC 7239, are answered 400 and cost only that connection."""

import json

import pytest
from helpers import run_server

WSGI = "apps.proxy_echo:app"
ASGI = "apps.proxy_echo:asgi_app"


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def server(request):
    """Trusts the loopback peer and 10.0.0.0/8 (a second hop in the chain)."""
    spec = WSGI if request.param == "wsgi" else ASGI
    with run_server(spec, "--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8") as srv:
        yield srv


def view(data):
    """What the app saw, the same keys for both interfaces:
    (scheme, client host, client port, host the client asked for, server name, server port)."""
    if "remote_addr" in data:
        port = data["remote_port"]
        return (
            data["scheme"],
            data["remote_addr"],
            None if port is None else int(port),
            data["http_host"],
            data["server_name"],
            int(data["server_port"]),
        )
    client, server = data["client"], data["server"]
    assert data["hosts"] <= 1, data  # the host field is replaced, never added twice
    return (data["scheme"], client[0], client[1], data["host"], server[0], server[1])


def ask(srv, headers, host="internal:8000", version="1.1"):
    head = f"GET / HTTP/{version}\r\n".encode()
    if host is not None:
        head += b"Host: " + host.encode() + b"\r\n"
    for name, value in headers:
        head += name.encode() + b": " + value.encode("latin-1") + b"\r\n"
    with srv.connect() as conn:
        conn.send(head + b"\r\n")
        response = conn.read_response()
        if response.status != 200:
            return response
        return view(json.loads(response.body))


def test_forwarded_for_proto_host(server):
    seen = ask(server, [("Forwarded", "for=192.0.2.60;proto=https;host=www.example.com")])
    assert seen == ("https", "192.0.2.60", 0, "www.example.com", "www.example.com", 443)


def test_forwarded_quoted_ipv6_with_port_and_host_port(server):
    seen = ask(
        server,
        [("Forwarded", 'for="[2001:db8:cafe::17]:4711";proto=http;host="w.example:8080"')],
    )
    assert seen == ("http", "2001:db8:cafe::17", 4711, "w.example:8080", "w.example", 8080)


def test_forwarded_trusted_hops_are_skipped_and_their_element_is_used(server):
    headers = [
        ("Forwarded", "for=198.51.100.9;proto=http;host=spoofed.example"),
        ("Forwarded", "for=192.0.2.7;proto=https;host=real.example, for=10.1.2.3;proto=http"),
    ]
    seen = ask(server, headers)
    assert seen == ("https", "192.0.2.7", 0, "real.example", "real.example", 443)


@pytest.mark.parametrize("node", ["unknown", "_hidden"])
def test_obfuscated_or_unknown_node_is_the_client(server, node):
    seen = ask(server, [("Forwarded", f"for=192.0.2.1, for={node}, for=10.0.0.2")])
    assert seen[1:3] == (node, 0)


def test_forwarded_without_for_keeps_the_peer_but_takes_proto_and_host(server):
    seen = ask(server, [("Forwarded", "proto=https;host=h.example")])
    assert seen[0] == "https" and seen[1] == "127.0.0.1" and seen[3:] == ("h.example",) * 2 + (443,)


def test_x_forwarded_host_and_port(server):
    seen = ask(
        server,
        [("X-Forwarded-Host", "www.example.com"), ("X-Forwarded-Port", "8443")],
    )
    assert seen[3:] == ("www.example.com:8443", "www.example.com", 8443)
    seen = ask(server, [("X-Forwarded-Host", "a.example, b.example:81")])
    assert seen[3:] == ("b.example:81", "b.example", 81)  # the nearest hop's


def test_x_forwarded_port_alone_keeps_the_host_name(server):
    seen = ask(server, [("X-Forwarded-Port", "443"), ("X-Forwarded-Proto", "https")])
    assert seen[0] == "https"
    assert seen[3:] == ("internal:443", "internal", 443)


def test_forwarded_host_added_when_the_request_has_none(server):
    # HTTP/1.0: a request without Host (HTTP/1.1 requires one).
    seen = ask(server, [("X-Forwarded-Host", "w.example")], host=None, version="1.0")
    assert seen[3:] == ("w.example", "w.example", 80)


def test_invalid_host_and_port_values_are_ignored(server):
    plain = ask(server, [])[3:]
    for headers in (
        [("X-Forwarded-Host", "a b")],
        [("X-Forwarded-Host", "evil.example/path")],
        [("X-Forwarded-Port", "http")],
        [("X-Forwarded-Port", "70000")],
        [("Forwarded", 'host="x y"')],
    ):
        assert ask(server, headers)[3:] == plain, headers


def test_agreeing_forwarded_and_x_forwarded_headers(server):
    headers = [
        ("Forwarded", 'for="[2001:db8::1]";proto=https;host=w.example'),
        ("X-Forwarded-For", "2001:db8:0::1"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "W.EXAMPLE"),
    ]
    seen = ask(server, headers)
    assert seen[:2] == ("https", "2001:db8::1")
    assert seen[4] in ("w.example", "W.EXAMPLE")


@pytest.mark.parametrize(
    "headers",
    [
        [("Forwarded", "for=192.0.2.1"), ("X-Forwarded-For", "192.0.2.2")],
        [("Forwarded", "proto=https"), ("X-Forwarded-Proto", "http")],
        [("Forwarded", "host=a.example"), ("X-Forwarded-Host", "b.example")],
        [("X-Forwarded-Host", "a.example:8443"), ("X-Forwarded-Port", "8080")],
    ],
)
def test_disagreeing_headers_are_answered_400(server, headers):
    response = ask(server, headers)
    assert not isinstance(response, tuple), response
    assert response.status == 400 and response.closes, response
    assert ask(server, [])[1] == "127.0.0.1"  # only that connection paid
    assert server.wait_for_log("proxy headers disagree"), server.log_tail()


@pytest.mark.parametrize(
    "value",
    ["for", "for=[::1]", 'for="1.2.3.4', "for=1.2.3.4;for=5.6.7.8", "for=1.2.3.4 proto=http"],
)
def test_malformed_forwarded_is_answered_400(server, value):
    response = ask(server, [("Forwarded", value)])
    assert not isinstance(response, tuple), response
    assert response.status == 400 and response.closes, response
    assert server.wait_for_log("malformed Forwarded header"), server.log_tail()
    assert ask(server, [])[1] == "127.0.0.1"


def test_forwarded_values_do_not_stick_to_the_connection(server):
    with server.connect() as conn:
        for headers, expected in (
            ([("Forwarded", "for=192.0.2.5;host=a.example"), ("X-Forwarded-Port", "81")], 81),
            ([], 0),
        ):
            head = b"GET / HTTP/1.1\r\nHost: internal:8000\r\n"
            head += b"".join(f"{n}: {v}\r\n".encode() for n, v in headers)
            conn.send(head + b"\r\n")
            response = conn.read_response()
            assert response.status == 200, response
            seen = view(json.loads(response.body))
            if expected:
                assert seen[1:2] + seen[3:] == ("192.0.2.5", "a.example:81", "a.example", 81)
            else:
                assert seen[1] == "127.0.0.1" and seen[3] == "internal:8000", seen


@pytest.mark.parametrize("spec", [WSGI, ASGI])
def test_untrusted_peer_forwarded_and_host_headers_are_ignored(spec):
    with run_server(spec, "--forwarded-allow-ips", "10.0.0.1") as srv:
        headers = [
            ("Forwarded", "for=192.0.2.60;proto=https;host=w.example"),
            ("X-Forwarded-Host", "x.example"),
            ("X-Forwarded-Port", "443"),
        ]
        seen = ask(srv, headers)
        assert seen[0] == "http" and seen[1] == "127.0.0.1" and seen[3] == "internal:8000", seen
        # Untrusted: a malformed or disagreeing Forwarded is not even read.
        assert ask(srv, [("Forwarded", "for")])[1] == "127.0.0.1"


@pytest.mark.parametrize("spec", [WSGI, ASGI])
def test_no_proxy_headers_ignores_forwarded(spec):
    with run_server(spec, "--no-proxy-headers", "--forwarded-allow-ips", "*") as srv:
        seen = ask(srv, [("Forwarded", "for=192.0.2.60;proto=https")])
        assert seen[:2] == ("http", "127.0.0.1"), seen
