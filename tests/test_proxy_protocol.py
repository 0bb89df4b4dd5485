"""The PROXY protocol (--proxy-protocol, --proxy-protocol-bind), v1 and v2, over raw sockets.

A trusted peer (--forwarded-allow-ips) must start with a PROXY header, whose client becomes
REMOTE_ADDR/REMOTE_PORT (WSGI), scope["client"] (ASGI) and the access line's client; an
untrusted peer may not send one. Either failure closes the connection with one log line."""

import json
import os
import socket
import struct
import tempfile
import time
import uuid

import pytest
from helpers import free_port, run_cli, run_server

WSGI = "apps.proxy_echo:app"
ASGI = "apps.proxy_echo:asgi_app"
GET = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(family, src, dst, sport, dport):
    return f"PROXY {family} {src} {dst} {sport} {dport}\r\n".encode()


def v2(command, family, body, tlvs=b""):
    """command 0 LOCAL / 1 PROXY; family byte (0x11 TCP4, 0x21 TCP6, 0x31 unix, 0x00)."""
    payload = body + tlvs
    return V2_SIG + bytes([0x20 | command, family]) + struct.pack("!H", len(payload)) + payload


def v2_inet(src, dst, sport, dport, tlvs=b""):
    body = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!HH", sport, dport)
    return v2(1, 0x11, body, tlvs)


def v2_inet6(src, dst, sport, dport):
    body = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
    return v2(1, 0x21, body + struct.pack("!HH", sport, dport))


def exchange(srv, data, pieces=1, timeout=5.0):
    """Send data (in `pieces` parts, a little apart) and read to EOF. Returns the bytes."""
    if srv.uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(srv.uds)
    else:
        sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.settimeout(timeout)
    with sock:
        step = max(1, -(-len(data) // pieces))
        for i in range(0, len(data), step):
            sock.sendall(data[i : i + step])
            if pieces > 1:
                time.sleep(0.01)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def seen(srv, data, **kwargs):
    """(client host, client port) the echo app saw, for WSGI and ASGI alike."""
    out = exchange(srv, data, **kwargs)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), out
    data = json.loads(body)
    if "client" in data:
        return tuple(data["client"]) if data["client"] else None
    port = data["remote_port"]
    return (data["remote_addr"], None if port is None else int(port))


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def server(request):
    spec = WSGI if request.param == "wsgi" else ASGI
    with run_server(spec, "--proxy-protocol", "--timeout-request-header", "1") as srv:
        yield srv


@pytest.fixture(params=["wsgi", "asgi"])
def spec(request):
    return WSGI if request.param == "wsgi" else ASGI


def test_v1_tcp4_names_the_client(server):
    header = v1("TCP4", "192.0.2.7", "198.51.100.1", 56324, 443)
    assert seen(server, header + GET) == ("192.0.2.7", 56324)
    assert server.wait_for_log("192.0.2.7:56324 - "), server.log_tail()  # the access line


def test_v1_tcp6_names_the_client(server):
    header = v1("TCP6", "2001:db8::17", "2001:db8::1", 4711, 443)
    assert seen(server, header + GET) == ("2001:db8::17", 4711)


def test_v2_inet_with_tlvs_skipped(server):
    tlvs = b"\x04\x00\x03abc" + b"\x01\x00\x02h2"  # a NOOP and an ALPN TLV
    header = v2_inet("203.0.113.9", "198.51.100.1", 40000, 80, tlvs)
    assert seen(server, header + GET) == ("203.0.113.9", 40000)


def test_v2_inet6_names_the_client(server):
    header = v2_inet6("2001:db8:cafe::17", "2001:db8::1", 4711, 80)
    assert seen(server, header + GET) == ("2001:db8:cafe::17", 4711)


def test_header_split_over_many_reads(server):
    header = v2_inet("203.0.113.10", "198.51.100.1", 1234, 80)
    assert seen(server, header + GET, pieces=len(header) + 3) == ("203.0.113.10", 1234)
    header = v1("TCP4", "192.0.2.8", "198.51.100.1", 5, 6)
    assert seen(server, header + GET, pieces=len(header)) == ("192.0.2.8", 5)


@pytest.mark.parametrize(
    "header",
    [
        b"PROXY UNKNOWN\r\n",
        b"PROXY UNKNOWN ::1 ::1 1 2\r\n",
        v2(0, 0x11, bytes(12)),  # LOCAL: a health check, the addresses are ignored
        v2(0, 0x00, b""),
        v2(1, 0x00, b""),  # PROXY with an unspecified family
    ],
    ids=["v1-unknown", "v1-unknown-addrs", "v2-local", "v2-local-unspec", "v2-proxy-unspec"],
)
def test_local_and_unknown_keep_the_socket_peer(server, header):
    client = seen(server, header + GET)
    assert client[0] == "127.0.0.1" and client[1] not in (0, None), client


def test_v2_unix_client_has_no_address(server):
    path = b"/run/haproxy-client.sock".ljust(108, b"\0")
    out = exchange(server, v2(1, 0x31, path + path) + GET)
    data = json.loads(out.partition(b"\r\n\r\n")[2])
    if "client" in data:  # ASGI: no client; the server is still the TCP listener
        assert data["client"] is None and data["server"] == ["127.0.0.1", server.port], data
    else:  # WSGI: REMOTE_ADDR "" and no REMOTE_PORT
        assert (data["remote_addr"], data["remote_port"]) == ("", None), data
        assert (data["server_name"], data["server_port"]) == ("127.0.0.1", str(server.port))


def test_keep_alive_requests_after_the_header_keep_the_client(server):
    header = v1("TCP4", "192.0.2.20", "198.51.100.1", 1111, 80)
    keep = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    out = exchange(server, header + keep + keep + GET)
    assert out.count(b"HTTP/1.1 200") == 3, out
    assert out.count(b'"192.0.2.20"') == 3, out


@pytest.mark.parametrize(
    "data",
    [
        GET,  # a trusted peer that sends no PROXY header
        b"PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n" + GET,  # a field missing
        b"PROXY TCP4 192.0.2.7 198.51.100.1 1 99999\r\n" + GET,
        V2_SIG + b"\x22\x11\x00\x0c" + bytes(12) + GET,  # v2 command 2
        b"PROXY " + b"x" * 200 + b"\r\n" + GET,  # no CRLF within 107 bytes
    ],
    ids=["none", "v1-short", "v1-port", "v2-command", "v1-long"],
)
def test_trusted_peer_without_a_valid_header_is_closed_with_one_log_line(server, data):
    before = server.log().count("a trusted peer sent no valid PROXY header")
    assert exchange(server, data) == b""  # closed, nothing answered
    assert server.wait_for_log("a trusted peer sent no valid PROXY header"), server.log_tail()
    time.sleep(0.1)
    assert server.log().count("a trusted peer sent no valid PROXY header") == before + 1
    assert seen(server, v1("TCP4", "192.0.2.1", "192.0.2.2", 1, 2) + GET)[0] == "192.0.2.1"


def test_header_deadline(server):
    """--timeout-request-header 1: a trusted peer that stalls inside its PROXY header."""
    start = time.monotonic()
    assert exchange(server, b"PROXY TCP4 192.0.2.7", timeout=10) == b""
    elapsed = time.monotonic() - start
    assert 0.8 <= elapsed < 5, elapsed
    assert server.wait_for_log("no PROXY header from a trusted peer in time"), server.log_tail()


def test_untrusted_peer(spec):
    with run_server(spec, "--proxy-protocol", "--forwarded-allow-ips", "10.0.0.1") as srv:
        # It may not send a PROXY header...
        assert exchange(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 1, 2) + GET) == b""
        assert srv.wait_for_log("an untrusted peer sent a PROXY header"), srv.log_tail()
        assert exchange(srv, v2_inet("192.0.2.7", "192.0.2.8", 1, 2) + GET) == b""
        assert srv.log().count("an untrusted peer sent a PROXY header") == 2 or srv.wait_for_log(
            "an untrusted peer sent a PROXY header", 2
        )
        # ...and is served as the direct client it is (PROPFIND starts like PROXY).
        client = seen(srv, GET)
        assert client[0] == "127.0.0.1", client
        out = exchange(srv, b"PROPFIND / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200"), out


def test_proxy_headers_are_trusted_by_the_proxied_client(spec):
    """After a PROXY header, X-Forwarded-For is read only when the client it names is trusted."""
    with run_server(spec, "--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8") as s:
        xff = b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.1\r\n"
        xff += b"Connection: close\r\n\r\n"
        assert seen(s, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + xff) == ("192.0.2.7", 7)
        assert seen(s, v1("TCP4", "10.1.1.1", "192.0.2.8", 7, 8) + xff)[0] == "203.0.113.1"


def test_proxy_protocol_bind_chooses_listeners(spec):
    plain, proxied = free_port(), free_port()
    args = ["-b", f"127.0.0.1:{plain}", "-b", f"127.0.0.1:{proxied}"]
    args += ["--proxy-protocol-bind", f"127.0.0.1:{proxied}"]
    with run_server(spec, *args, listen=False, port=proxied) as srv:
        assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)
        assert srv.wait_for_log(f"Listening on http://127.0.0.1:{proxied} (PROXY protocol)")
        assert f"Listening on http://127.0.0.1:{plain}\n" in srv.log().replace("\r", "")
        srv.port = plain
        out = exchange(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET)
        assert out.startswith(b"HTTP/1.1 400"), out  # plain HTTP there: PROXY is not a request
        assert seen(srv, GET)[0] == "127.0.0.1"


def test_proxy_protocol_bind_must_name_a_served_address():
    port = free_port()
    result = run_cli(WSGI, "--port", str(port), "--proxy-protocol-bind", f"127.0.0.1:{port + 1}")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "--proxy-protocol-bind 127.0.0.1:" in result.stderr, result.stderr
    result = run_cli(WSGI, "--proxy-protocol-bind", "nope:x")
    assert result.returncode == 2 and "--proxy-protocol-bind" in result.stderr, result.stderr


def test_unix_socket_listener(spec):
    uds = os.path.join(tempfile.gettempdir(), f"pyserver-pp-{uuid.uuid4().hex[:8]}.sock")
    with run_server(spec, "--proxy-protocol", uds=uds) as srv:
        assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)
        assert exchange(srv, GET) == b""  # unix peers are trusted: they must send one


@pytest.mark.parametrize("extra", [[], ["--reuse-port"]], ids=["shared", "reuse-port"])
def test_under_a_master(extra):
    with run_server(WSGI, "--workers", "2", "--proxy-protocol", *extra) as srv:
        for i in range(6):
            header = v1("TCP4", f"192.0.2.{i + 1}", "192.0.2.100", 1000 + i, 80)
            assert seen(srv, header + GET) == (f"192.0.2.{i + 1}", 1000 + i)
        assert exchange(srv, GET) == b""


def test_config_file_proxy_protocol(tmp_path):
    conf = tmp_path / "pp.py"
    conf.write_text("proxy_protocol = True\n")
    with run_server(WSGI, "-c", str(conf)) as srv:
        assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)


def test_environment_variable(spec):
    with run_server(spec, env={"PYSERVER_PROXY_PROTOCOL": "true"}) as srv:
        assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)


def test_without_proxy_protocol_a_proxy_header_is_a_bad_request(spec):
    with run_server(spec) as srv:
        out = exchange(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET)
        assert out.startswith(b"HTTP/1.1 400"), out


def test_socket_activated_listener_named_by_fd():
    from test_process import socket_activation

    listener, port, activated = socket_activation()
    with listener:
        args = ("--proxy-protocol-bind", "fd://3")
        with run_server(WSGI, *args, listen=False, port=port, **activated) as srv:
            assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)


def test_refusal_lines_are_rate_limited(spec):
    with run_server(spec, "--proxy-protocol") as srv:
        for _ in range(40):  # trusted peers without a PROXY header, as fast as possible
            assert exchange(srv, GET) == b""
        time.sleep(1.2)  # the next second
        assert exchange(srv, GET) == b""
        assert srv.wait_for_log("more not logged)"), srv.log_tail()
        lines = srv.log().count("a trusted peer sent no valid PROXY header")
        assert 10 < lines < 41, lines
        assert seen(srv, v1("TCP4", "192.0.2.7", "192.0.2.8", 7, 8) + GET) == ("192.0.2.7", 7)
