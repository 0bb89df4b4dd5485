"""One access line format for WSGI and ASGI: `CLIENT - "METHOD TARGET HTTP/x.y" STATUS`, where
CLIENT is `address:port`, `[address]:port` for IPv6 and `-` over a unix socket. The same request
gets the same line from either interface over each of the three."""

import re
import socket

import pytest
from helpers import HTTPConn, free_port, run_server, wait_for

APPS = {"wsgi": "apps.basic:app", "asgi": "apps.asgi_basic:app"}
REQUESTS = [("GET", "/hello?x=1"), ("POST", "/missing/a%20b")]


def ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def connect_tcp(family, host, port) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect((host, port))
    return sock


def access_lines(srv, count):
    """The last `count` access lines of the server's log, without the logger's prefix."""
    lines = []

    def enough():
        lines[:] = [line for line in srv.log().splitlines() if ' - "' in line]
        return len(lines) >= count

    assert wait_for(enough), srv.log_tail()
    return [re.sub(r"^[A-Z]+:\s+", "", line) for line in lines[-count:]]


def serve_and_log(spec, transport, tmp_path):
    """Sends REQUESTS on one connection; returns (access lines, client as the log should show)."""
    if transport == "unix":
        path = str(tmp_path / f"{spec.split('.')[1]}.sock")
        with run_server(spec, uds=path) as srv:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(path)
            return send_all(srv, sock), "-"
    if transport == "ipv6":
        port = free_port()

        def ready():
            try:
                connect_tcp(socket.AF_INET6, "::1", port).close()
                return True
            except OSError:
                return False

        with run_server(
            spec, "--host", "::1", "--port", str(port), listen=False, port=port, ready=ready
        ) as srv:
            sock = connect_tcp(socket.AF_INET6, "::1", port)
            client = f"[::1]:{sock.getsockname()[1]}"
            return send_all(srv, sock), client
    with run_server(spec) as srv:
        sock = connect_tcp(socket.AF_INET, "127.0.0.1", srv.port)
        client = f"127.0.0.1:{sock.getsockname()[1]}"
        return send_all(srv, sock), client


def send_all(srv, sock):
    with HTTPConn(sock) as conn:
        statuses = [conn.request(method, target).status for method, target in REQUESTS]
    assert statuses == [200, 404]
    return access_lines(srv, len(REQUESTS))


@pytest.mark.parametrize("transport", ["tcp", "ipv6", "unix"])
def test_wsgi_and_asgi_write_the_same_access_line(transport, tmp_path):
    if transport == "ipv6" and not ipv6_available():
        pytest.skip("no IPv6 loopback")
    seen = {}
    for name, spec in APPS.items():
        lines, client = serve_and_log(spec, transport, tmp_path)
        expected = [
            f'{client} - "GET /hello?x=1 HTTP/1.1" 200',
            f'{client} - "POST /missing/a%20b HTTP/1.1" 404',
        ]
        assert lines == expected, (name, lines)
        seen[name] = [line.replace(client, "CLIENT") for line in lines]
    assert seen["wsgi"] == seen["asgi"]
