"""Proxy headers: a trusted proxy's X-Forwarded-For names the client and its
X-Forwarded-Proto the scheme, for WSGI (REMOTE_ADDR, REMOTE_PORT, wsgi.url_scheme) and ASGI
(scope["client"], scope["scheme"]); anyone else's are ignored."""

import json
import os
import socket
import tempfile
import uuid

import pytest
from helpers import HTTPConn, free_port, run_cli, run_server

WSGI = "apps.proxy_echo:app"
ASGI = "apps.proxy_echo:asgi_app"


def seen(conn, headers=()):
    """What the echo app saw of one request on conn: (scheme, host, port)."""
    response = conn.request("GET", "/", headers=list(headers))
    assert response.status == 200, response
    data = json.loads(response.body)
    if "client" in data:
        client = data["client"]
        host, port = (client[0], client[1]) if client else (None, None)
    else:
        host = data["remote_addr"]
        port = None if data["remote_port"] is None else int(data["remote_port"])
    return data["scheme"], host, port


def seen_once(srv, headers=()):
    with srv.connect() as conn:
        local_port = None if conn.sock.family == socket.AF_UNIX else conn.local_port()
        return seen(conn, headers), local_port


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def default_server(request):
    """A server with default options (proxy headers on, 127.0.0.1 and ::1 trusted)."""
    with run_server(WSGI if request.param == "wsgi" else ASGI) as srv:
        yield srv


@pytest.fixture(params=["wsgi", "asgi"])
def spec(request):
    return WSGI if request.param == "wsgi" else ASGI


# ---- default trust: 127.0.0.1 ----


def test_without_forwarded_headers_the_peer_is_the_client(default_server):
    (scheme, host, port), local_port = seen_once(default_server)
    assert (scheme, host, port) == ("http", "127.0.0.1", local_port)


def test_trusted_loopback_forwarded_for_and_proto_are_used(default_server):
    headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
    (scheme, host, port), _ = seen_once(default_server, headers)
    assert (scheme, host, port) == ("https", "203.0.113.7", 0)


def test_forwarded_proto_alone_keeps_the_peer_as_client(default_server):
    (scheme, host, port), local_port = seen_once(default_server, [("X-Forwarded-Proto", "https")])
    assert (scheme, host, port) == ("https", "127.0.0.1", local_port)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("http", "http"),
        ("https", "https"),
        ("wss", "https"),
        ("ws", "http"),
        ("http, https", "https"),
    ],
)
def test_forwarded_proto_values(default_server, value, expected):
    (scheme, _, _), _ = seen_once(default_server, [("X-Forwarded-Proto", value)])
    assert scheme == expected


@pytest.mark.parametrize("value", ["ftp", "", "https x", "javascript"])
def test_unknown_forwarded_proto_is_ignored(default_server, value):
    (scheme, _, _), _ = seen_once(default_server, [("X-Forwarded-Proto", value)])
    assert scheme == "http"


def test_forwarded_values_do_not_stick_to_the_connection(default_server):
    with default_server.connect() as conn:
        first = seen(conn, [("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-Proto", "https")])
        second = seen(conn)
        third = seen(conn, [("X-Forwarded-For", "198.51.100.2")])
        local_port = conn.local_port()
    assert first == ("https", "198.51.100.1", 0)
    assert second == ("http", "127.0.0.1", local_port)
    assert third == ("http", "198.51.100.2", 0)


def test_rightmost_untrusted_host_is_the_client(default_server):
    headers = [("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 127.0.0.1")]
    (_, host, _), _ = seen_once(default_server, headers)
    assert host == "203.0.113.9"


def test_repeated_forwarded_for_headers_read_as_one_list(default_server):
    headers = [("X-Forwarded-For", "1.1.1.1, 2.2.2.2"), ("X-Forwarded-For", "127.0.0.1")]
    (_, host, _), _ = seen_once(default_server, headers)
    assert host == "2.2.2.2"


def test_ipv6_forwarded_client(default_server):
    (_, host, port), _ = seen_once(default_server, [("X-Forwarded-For", "2001:db8::1, ::1")])
    assert (host, port) == ("2001:db8::1", 0)


@pytest.mark.parametrize("value", ["unknown", "_hidden", "[2001:db8::1]:443", "a\xe9b"])
def test_garbage_forwarded_for_is_taken_as_is(default_server, value):
    (_, host, port), _ = seen_once(default_server, [("X-Forwarded-For", value)])
    assert (host, port) == (value, 0)


def test_empty_forwarded_for_keeps_the_peer(default_server):
    (_, host, port), local_port = seen_once(default_server, [("X-Forwarded-For", " , ")])
    assert (host, port) == ("127.0.0.1", local_port)


def test_very_long_forwarded_for_is_bounded_and_server_keeps_serving(default_server):
    long_host = "x" * 8000
    (_, host, _), _ = seen_once(default_server, [("X-Forwarded-For", long_host)])
    assert host == "x" * 255
    many = ", ".join(f"10.0.{i // 256}.{i % 256}" for i in range(500))
    (_, host, _), _ = seen_once(default_server, [("X-Forwarded-For", many)])
    assert host == "10.0.1.243"  # the rightmost: 10.0.0.0/8 is not trusted by default
    headers = [("X-Forwarded-For", "127.0.0.1")] * 90
    (_, host, port), _ = seen_once(default_server, headers)
    assert (host, port) == ("127.0.0.1", 0)  # all trusted: the leftmost
    (scheme, host, port), local_port = seen_once(default_server)
    assert (scheme, host, port) == ("http", "127.0.0.1", local_port)


def test_access_log_shows_the_forwarded_client(default_server):
    token = uuid.uuid4().hex
    with default_server.connect() as conn:
        response = conn.request("GET", f"/{token}", headers=[("X-Forwarded-For", "192.0.2.44")])
        assert response.status == 200
    assert default_server.wait_for_log(token), default_server.log_tail()
    line = next(line for line in default_server.log().splitlines() if token in line)
    assert "192.0.2.44:0 - " in line, line


# ---- trust lists ----


def test_untrusted_peer_headers_are_ignored(spec):
    with run_server(spec, "--forwarded-allow-ips", "10.0.0.1") as srv:
        headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
        (scheme, host, port), local_port = seen_once(srv, headers)
        assert (scheme, host, port) == ("http", "127.0.0.1", local_port)


def test_star_trusts_everyone_and_takes_the_leftmost_host(spec):
    with run_server(spec, "--forwarded-allow-ips", "*") as srv:
        headers = [("X-Forwarded-For", "203.0.113.7, 198.51.100.3, 10.0.0.1")]
        (_, host, _), _ = seen_once(srv, headers)
        assert host == "203.0.113.7"


def test_trusted_hops_are_skipped(spec):
    with run_server(spec, "--forwarded-allow-ips", " 127.0.0.1 , 10.0.0.0/8") as srv:
        (_, host, _), _ = seen_once(srv, [("X-Forwarded-For", "1.2.3.4, 10.1.1.1")])
        assert host == "1.2.3.4"
        (_, host, _), _ = seen_once(srv, [("X-Forwarded-For", "10.2.2.2, 10.1.1.1")])
        assert host == "10.2.2.2"  # every hop trusted: the leftmost


def test_cidr_network_trusts_the_loopback_peer(spec):
    with run_server(spec, "--forwarded-allow-ips", "127.0.0.0/8") as srv:
        (_, host, _), _ = seen_once(srv, [("X-Forwarded-For", "192.0.2.1")])
        assert host == "192.0.2.1"


def test_no_proxy_headers_ignores_them(spec):
    with run_server(spec, "--no-proxy-headers", "--forwarded-allow-ips", "*") as srv:
        headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
        (scheme, host, port), local_port = seen_once(srv, headers)
        assert (scheme, host, port) == ("http", "127.0.0.1", local_port)


def test_environment_variables(spec):
    headers = [("X-Forwarded-For", "203.0.113.7")]
    with run_server(spec, env={"PYSERVER_PROXY_HEADERS": "false"}) as srv:
        assert seen_once(srv, headers)[0][1] == "127.0.0.1"
    with run_server(spec, env={"PYSERVER_FORWARDED_ALLOW_IPS": "10.9.9.9"}) as srv:
        assert seen_once(srv, headers)[0][1] == "127.0.0.1"
    with run_server(spec, env={"FORWARDED_ALLOW_IPS": "10.9.9.9"}) as srv:
        assert seen_once(srv, headers)[0][1] == "127.0.0.1"
    env = {"FORWARDED_ALLOW_IPS": "10.9.9.9", "PYSERVER_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with run_server(spec, env=env) as srv:
        assert seen_once(srv, headers)[0][1] == "203.0.113.7"


def test_unix_socket_peers_are_always_trusted(spec):
    with tempfile.TemporaryDirectory() as tmp:
        uds = os.path.join(tmp, "proxy.sock")
        with run_server(spec, "--forwarded-allow-ips", "10.0.0.1", uds=uds) as srv:
            (scheme, host, port), _ = seen_once(srv)
            assert scheme == "http" and host in ("", None)
            headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
            (scheme, host, port), _ = seen_once(srv, headers)
            assert (scheme, host, port) == ("https", "203.0.113.7", 0)
        with run_server(spec, "--no-proxy-headers", uds=uds) as srv:
            (scheme, host, _), _ = seen_once(srv, [("X-Forwarded-Proto", "https")])
            assert scheme == "http"


def _connect_v6(port):
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(("::1", port))
    return HTTPConn(sock)


def _can_connect_v6(port):
    try:
        _connect_v6(port).close()
    except OSError:
        return False
    return True


def _ipv6_available():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback")
@pytest.mark.parametrize("allow, trusted", [(None, True), ("::1/128", True), ("127.0.0.1", False)])
def test_ipv6_loopback_peer(spec, allow, trusted):
    port = free_port()
    args = ["--host", "::1", "--port", str(port)]
    if allow is not None:
        args += ["--forwarded-allow-ips", allow]
    with run_server(spec, *args, listen=False, port=port, ready=lambda: _can_connect_v6(port)):
        with _connect_v6(port) as conn:
            scheme, host, _ = seen(conn, [("X-Forwarded-Proto", "https")])
            assert (scheme, host) == ("https" if trusted else "http", "::1")
            _, host, port_seen = seen(conn, [("X-Forwarded-For", "192.0.2.9")])
            assert (host, port_seen == 0) == (("192.0.2.9", True) if trusted else ("::1", False))


def test_forwarded_headers_with_two_workers(spec):
    with run_server(spec, "--workers", "2", "--forwarded-allow-ips", "127.0.0.1") as srv:
        for _ in range(6):
            headers = [("X-Forwarded-For", "203.0.113.8"), ("X-Forwarded-Proto", "https")]
            (scheme, host, port), _ = seen_once(srv, headers)
            assert (scheme, host, port) == ("https", "203.0.113.8", 0)


# ---- bad configuration ----


@pytest.mark.parametrize("value", ["127.0.0.1,localhost", "10.0.0.0/33", "::1/200", "1.2.3"])
def test_invalid_forwarded_allow_ips_is_a_usage_error(value):
    result = run_cli(WSGI, "--port", str(free_port()), "--forwarded-allow-ips", value)
    assert result.returncode == 2, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pyserver: error: argument --forwarded-allow-ips: invalid IP address"), (
        result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["PYSERVER_FORWARDED_ALLOW_IPS", "FORWARDED_ALLOW_IPS"])
def test_invalid_forwarded_allow_ips_in_the_environment(name):
    result = run_cli(WSGI, "--port", str(free_port()), env={name: "10.0.0.1, nope"})
    assert result.returncode == 2, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pyserver: error: environment variable " + name), result.stderr
    assert "'nope'" in last, last


def test_server_still_serves_after_bad_proxy_input(spec):
    with run_server(spec) as srv:
        raw = (
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: \xff\xfe,,\t,\r\n"
            b"X-Forwarded-Proto: ,,,\r\n\r\n"
        )
        with srv.connect() as conn:
            conn.send(raw)
            response = conn.read_response()
            assert response.status == 200, response
        with srv.connect() as conn:
            assert seen(conn)[0] == "http"
        assert_serving_echo(srv)


def assert_serving_echo(srv):
    (scheme, host, port), local_port = seen_once(srv)
    assert (scheme, host, port) == ("http", "127.0.0.1", local_port)
