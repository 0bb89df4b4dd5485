"""pyserver behind a real nginx, with the configurations docs/deployment.md shows.

nginx is started with tests/nginx/pyserver-http.conf (proxy_pass with X-Forwarded-* and
Forwarded, HTTP and HTTPS) and tests/nginx/pyserver-stream.conf (the stream module with
`proxy_protocol on`); only ports, paths and the certificate are changed. Clients connect
from 127.0.0.2, so the address the application sees can only be the real client's (nginx
itself reaches pyserver from 127.0.0.1). Skipped when nginx cannot run here."""

import hashlib
import http.client
import json
import os
import socket
import ssl
from pathlib import Path

import pytest
from helpers import free_port, run_server, wait_for
from nginxproc import NGINX, STREAM_MODULE, NginxProcess, make_cert, rewrite

FIXTURES = Path(__file__).parent / "nginx"
HTTP_CONF = FIXTURES / "pyserver-http.conf"
STREAM_CONF = FIXTURES / "pyserver-stream.conf"
DEPLOYMENT = Path(__file__).parent.parent / "docs" / "deployment.md"
CLIENT = "127.0.0.2"  # the "real" client: any 127/8 address is loopback on Linux


class Nginx(NginxProcess):
    """nginx in the foreground with the documented configs, on free loopback ports."""

    def __init__(self, directory, app_port, proxy_protocol_port):
        self.http_port, self.https_port, self.stream_port = free_port(), free_port(), free_port()
        cert, key = make_cert(directory)
        http_conf = rewrite(
            HTTP_CONF.read_text(),
            (
                ("server 127.0.0.1:8000;", f"server 127.0.0.1:{app_port};"),
                ("listen 80;", f"listen 127.0.0.1:{self.http_port};"),
                ("listen 443 ssl;", f"listen 127.0.0.1:{self.https_port} ssl;"),
                ("/etc/ssl/certs/example.com.pem", str(cert)),
                ("/etc/ssl/private/example.com.key", str(key)),
            ),
        )
        (directory / "http.conf").write_text(http_conf)
        self.stream = STREAM_MODULE.exists()
        ports = [self.http_port, self.https_port]
        if self.stream:
            stream_conf = rewrite(
                STREAM_CONF.read_text(),
                (
                    ("listen 8080;", f"listen 127.0.0.1:{self.stream_port};"),
                    ("proxy_pass 127.0.0.1:8001;", f"proxy_pass 127.0.0.1:{proxy_protocol_port};"),
                ),
            )
            (directory / "stream.conf").write_text(stream_conf)
            ports.append(self.stream_port)
        super().__init__(directory, "http.conf", ports, "stream.conf" if self.stream else None)


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def stack(request, tmp_path_factory):
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light)")
    try:
        socket.create_connection(("127.0.0.1", 9), source_address=(CLIENT, 0), timeout=1)
    except ConnectionRefusedError:
        pass
    except OSError as exc:
        pytest.skip(f"cannot connect from {CLIENT}: {exc}")
    spec = "apps.proxy_echo:app" if request.param == "wsgi" else "apps.proxy_echo:asgi_app"
    app_port, pp_port = free_port(), free_port()
    args = ["-b", f"127.0.0.1:{app_port}", "-b", f"127.0.0.1:{pp_port}"]
    args += ["--proxy-protocol-bind", f"127.0.0.1:{pp_port}"]
    with run_server(spec, *args, listen=False, port=app_port) as srv:
        nginx = Nginx(tmp_path_factory.mktemp("nginx"), app_port, pp_port)
        try:
            yield request.param, srv, nginx
        finally:
            nginx.stop()


def request(port, method="GET", body=None, headers=(), tls=False, host="example.com"):
    """One request through nginx from CLIENT. Returns (status, JSON the app sent, source port)."""
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=30, source_address=(CLIENT, 0), context=context
        )
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(CLIENT, 0))
    try:
        conn.putrequest(method, "/", skip_host=True)
        conn.putheader("Host", host)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None:
            view = memoryview(body)
            for i in range(0, len(body), 1 << 20):
                conn.send(view[i : i + (1 << 20)])
        source_port = conn.sock.getsockname()[1]
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if response.status == 200 else data, source_port
    finally:
        conn.close()


def client_of(seen):
    """(host, port) for both interfaces."""
    if "remote_addr" in seen:
        return seen["remote_addr"], int(seen["remote_port"])
    return tuple(seen["client"])


def host_of(seen):
    """(the host the app sees, server name, server port) for both interfaces."""
    if "remote_addr" in seen:
        return seen["http_host"], seen["server_name"], int(seen["server_port"])
    assert seen["hosts"] == 1, seen
    return seen["host"], seen["server"][0], seen["server"][1]


def test_http_through_nginx_names_the_real_client(stack):
    _, _, nginx = stack
    status, seen, _ = request(nginx.http_port)
    assert status == 200, seen
    assert client_of(seen) == (CLIENT, 0)  # Forwarded's for has no port
    assert seen["scheme"] == "http"
    assert host_of(seen) == (f"example.com:{nginx.http_port}", "example.com", nginx.http_port)


def test_https_through_nginx_gives_the_scheme(stack):
    _, _, nginx = stack
    status, seen, _ = request(nginx.https_port, tls=True)
    assert status == 200, seen
    assert client_of(seen) == (CLIENT, 0)
    assert seen["scheme"] == "https"
    assert host_of(seen) == (f"example.com:{nginx.https_port}", "example.com", nginx.https_port)


def test_headers_a_client_sends_through_nginx_cannot_spoof_it(stack):
    _, _, nginx = stack
    spoof = [
        ("X-Forwarded-For", "198.51.100.66"),
        ("Forwarded", "for=198.51.100.66;proto=https"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "evil.example"),
    ]
    status, seen, _ = request(nginx.http_port, headers=spoof)
    assert status == 200, seen
    assert client_of(seen) == (CLIENT, 0) and seen["scheme"] == "http"
    assert host_of(seen)[1] == "example.com"


def test_large_upload_through_nginx(stack):
    _, _, nginx = stack
    body = os.urandom(1 << 20) * 24  # 24 MiB, buffered by nginx to its temp file
    status, seen, _ = request(nginx.http_port, method="POST", body=body)
    assert status == 200, seen
    assert seen["body_len"] == len(body)
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert client_of(seen) == (CLIENT, 0)


def test_websocket_upgrade_through_nginx(stack):
    interface, _, nginx = stack
    if interface != "asgi":
        pytest.skip("WebSockets are an ASGI feature")
    from websockets.sync.client import connect

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    sock = socket.create_connection(
        ("127.0.0.1", nginx.https_port), timeout=10, source_address=(CLIENT, 0)
    )
    uri = f"wss://example.com:{nginx.https_port}/ws"
    with connect(uri, sock=sock, ssl=context, server_hostname="example.com") as ws:
        seen = json.loads(ws.recv(timeout=10))
    assert seen["scheme"] == "wss"
    assert seen["client"] == [CLIENT, 0]
    assert seen["host"] == f"example.com:{nginx.https_port}"


def test_proxy_protocol_through_nginx_stream(stack):
    _, srv, nginx = stack
    if not nginx.stream:
        pytest.skip(f"nginx's stream module is not installed ({STREAM_MODULE})")
    status, seen, source_port = request(nginx.stream_port)
    assert status == 200, seen
    assert client_of(seen) == (CLIENT, source_port)  # the PROXY header's, port and all
    assert seen["scheme"] == "http"
    assert wait_for(lambda: f"{CLIENT}:{source_port} - " in srv.log(), 5), srv.log_tail()


def test_deployment_docs_show_the_tested_configs():
    docs = DEPLOYMENT.read_text()
    for fixture in (HTTP_CONF, STREAM_CONF):
        assert fixture.read_text().strip() in docs, (
            f"{fixture.name} is not verbatim in {DEPLOYMENT}"
        )
