"""The uwsgi protocol: pyserver behind a real nginx with `include uwsgi_params;
uwsgi_pass`, and raw packets sent straight to the uwsgi port.

nginx is started with tests/nginx/pyserver-uwsgi.conf (the configuration
docs/deployment.md shows; only ports, paths and the certificate are changed) and the
system's uwsgi_params. Clients connect from 127.0.0.2, so the client the application sees
can only be the one nginx named in REMOTE_ADDR (nginx itself reaches pyserver from
127.0.0.1). The same server also has a plain HTTP bind, so that what the application sees
through uwsgi can be compared with what a direct HTTP request gives."""

import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from apps.uwsgi_echo import pattern
from helpers import HOST, free_port, run_cli, run_server, wait_for
from nginxproc import NGINX, NginxProcess, make_cert, rewrite

FIXTURES = Path(__file__).parent / "nginx"
UWSGI_CONF = FIXTURES / "pyserver-uwsgi.conf"
UWSGI_PARAMS = Path("/etc/nginx/uwsgi_params")
CLIENT = "127.0.0.2"
MIB = 1 << 20


def packet(variables, body=b"", modifier1=0):
    """A uwsgi request: the 4-byte header, the variables (str or bytes), the body."""
    data = b""
    for key, value in variables.items():
        key = key.encode() if isinstance(key, str) else key
        value = value.encode() if isinstance(value, str) else value
        data += struct.pack("<H", len(key)) + key + struct.pack("<H", len(value)) + value
    return struct.pack("<BHB", modifier1, len(data), 0) + data + body


def nginx_like(target="/", method="GET", **extra):
    """The variables nginx's uwsgi_params sends for a plain request to example.com:80."""
    path, _, query = target.partition("?")
    variables = {
        "QUERY_STRING": query,
        "REQUEST_METHOD": method,
        "CONTENT_TYPE": "",
        "CONTENT_LENGTH": "",
        "REQUEST_URI": target,
        "PATH_INFO": path,
        "DOCUMENT_ROOT": "/usr/share/nginx/html",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_SCHEME": "http",
        "REMOTE_ADDR": "192.0.2.7",
        "REMOTE_PORT": "40000",
        "SERVER_PORT": "80",
        "SERVER_NAME": "example.com",
        "HTTP_HOST": "example.com",
    }
    variables.update(extra)
    return variables


def read_all(sock):
    data = b""
    while chunk := sock.recv(MIB):
        data += chunk
    return data


def send_raw(port, data, timeout=10.0):
    """Sends data to the uwsgi port; returns everything received until the close."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_all(sock)


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


class Nginx(NginxProcess):
    """nginx in the foreground with the documented uwsgi config, on free loopback ports."""

    def __init__(self, directory, uwsgi_port):
        self.http_port, self.https_port = free_port(), free_port()
        cert, key = make_cert(directory)
        conf = rewrite(
            UWSGI_CONF.read_text(),
            (
                ("uwsgi_pass 127.0.0.1:8000;", f"uwsgi_pass 127.0.0.1:{uwsgi_port};"),
                ("listen 80;", f"listen 127.0.0.1:{self.http_port};"),
                ("listen 443 ssl;", f"listen 127.0.0.1:{self.https_port} ssl;"),
                ("/etc/ssl/certs/example.com.pem", str(cert)),
                ("/etc/ssl/private/example.com.key", str(key)),
            ),
        )
        (directory / "uwsgi.conf").write_text(conf)
        # `include uwsgi_params;` is relative to the configuration's directory.
        shutil.copy(UWSGI_PARAMS, directory / "uwsgi_params")
        super().__init__(directory, "uwsgi.conf", [self.http_port, self.https_port])


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def stack(request, tmp_path_factory):
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light)")
    if not UWSGI_PARAMS.exists():
        pytest.skip("nginx's uwsgi_params is not installed")
    try:
        socket.create_connection(("127.0.0.1", 9), source_address=(CLIENT, 0), timeout=1)
    except ConnectionRefusedError:
        pass
    except OSError as exc:
        pytest.skip(f"cannot connect from {CLIENT}: {exc}")
    spec = "apps.uwsgi_echo:app" if request.param == "wsgi" else "apps.uwsgi_echo:asgi_app"
    uwsgi_port, http_port = free_port(), free_port()
    args = ["-b", f"uwsgi://127.0.0.1:{uwsgi_port}", "-b", f"127.0.0.1:{http_port}"]
    with run_server(spec, *args, listen=False, port=uwsgi_port) as srv:
        srv.http_port = http_port
        nginx = Nginx(tmp_path_factory.mktemp("nginx"), uwsgi_port)
        try:
            yield request.param, srv, nginx
        finally:
            nginx.stop()


def through(port, target="/", method="GET", body=None, headers=(), tls=False, source=CLIENT):
    """One request to port (nginx, or pyserver's HTTP bind). Returns (response, body, the
    client's (address, port))."""
    kw = {"timeout": 30, "source_address": (source, 0)}
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, **kw)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, **kw)
    try:
        conn.putrequest(method, target, skip_host=True)
        conn.putheader("Host", "example.com")
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None:
            view = memoryview(body)
            for i in range(0, len(body), MIB):
                conn.send(view[i : i + MIB])
        client = conn.sock.getsockname()[:2]
        response = conn.getresponse()
        return response, response.read(), client
    finally:
        conn.close()


def echo(port, target="/", **kw):
    response, data, client = through(port, target, **kw)
    assert response.status == 200, data
    return json.loads(data), client


# ---- through nginx ----


def test_get_names_the_real_client_and_server(stack):
    _, srv, nginx = stack
    seen, client = echo(nginx.http_port, "/hello?x=1&y=two", headers=[("X-Custom", "v")])
    assert seen["method"] == "GET"
    assert (seen["path"], seen["query"], seen["raw"]) == ("/hello", "x=1&y=two", "/hello?x=1&y=two")
    assert seen["client"] == [CLIENT, client[1]]  # REMOTE_ADDR and REMOTE_PORT
    assert seen["scheme"] == "http"
    assert seen["server"] == ["example.com", str(nginx.http_port)]  # SERVER_NAME, SERVER_PORT
    assert seen["protocol"] == "HTTP/1.1"
    headers = dict(seen["headers"])
    assert headers["host"] == "example.com" and headers["x-custom"] == "v"
    assert [name for name, _ in seen["headers"]].count("host") == 1
    assert "content-length" not in headers  # nginx's empty CONTENT_LENGTH: no body
    # The access line names the real client, not nginx.
    assert srv.wait_for_log(f"{CLIENT}:{client[1]} - - "), srv.log_tail()


def test_paths_and_queries_as_a_direct_request_gives_them(stack):
    _, srv, nginx = stack
    for target in ("/caf%C3%A9/a%20b?q=%20x&r=%C3%A9", "/a/b/?", "/x;p=1?a=b=c", "/%7Euser"):
        seen, _ = echo(nginx.http_port, target)
        direct, _ = echo(srv.http_port, target, source=HOST)
        for key in ("path", "query", "raw", "method"):
            assert seen[key] == direct[key], (target, key, seen, direct)


def test_post_with_a_body(stack):
    _, _, nginx = stack
    body = b"name=value&x=" + b"y" * 1000
    seen, _ = echo(
        nginx.http_port,
        "/form",
        method="POST",
        body=body,
        headers=[("Content-Type", "application/x-www-form-urlencoded")],
    )
    assert seen["method"] == "POST"
    assert seen["body_len"] == len(body)
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
    headers = dict(seen["headers"])
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert headers["content-length"] == str(len(body))


def test_post_with_a_large_body(stack):
    _, _, nginx = stack
    body = os.urandom(5 * MIB)  # past the spool threshold (1 MiB) of a WSGI body
    seen, _ = echo(nginx.http_port, "/upload", method="PUT", body=body)
    assert seen["method"] == "PUT"
    assert seen["body_len"] == len(body)
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("kind", ["big", "stream"])
def test_large_responses(stack, kind):
    _, _, nginx = stack
    n = 6 * MIB + 123
    response, data, _ = through(nginx.http_port, f"/{kind}?n={n}")
    assert response.status == 200
    assert len(data) == n
    assert hashlib.sha256(data).digest() == hashlib.sha256(pattern(n)).digest()


def test_https_variables(stack):
    _, _, nginx = stack
    seen, client = echo(nginx.https_port, "/secure?a=1", tls=True)
    assert seen["scheme"] == "https"  # HTTPS=on (and REQUEST_SCHEME=https)
    assert seen["server"] == ["example.com", str(nginx.https_port)]
    assert seen["client"] == [CLIENT, client[1]]


def test_client_aborting_mid_response(stack):
    _, srv, nginx = stack
    n = 64 * MIB
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", nginx.http_port), timeout=10) as sock:
            sock.sendall(f"GET /stream?n={n} HTTP/1.1\r\nHost: example.com\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        # The same straight to the uwsgi port: the response is cut by the close.
        with socket.create_connection((HOST, srv.port), timeout=10) as sock:
            sock.sendall(packet(nginx_like(f"/big?n={n}")))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    seen, _ = echo(nginx.http_port, "/after")
    assert seen["path"] == "/after"
    assert srv.proc.poll() is None


# ---- straight to the uwsgi port ----


def test_response_is_http_ended_by_the_close(stack):
    _, srv, _ = stack
    raw = send_raw(srv.port, packet(nginx_like("/stream?n=100000")))
    status, headers, body = split_response(raw)
    assert status == "HTTP/1.1 200 OK"
    assert headers["connection"] == "close"
    assert "transfer-encoding" not in headers  # no chunked framing: the close ends it
    assert body == pattern(100000)
    raw = send_raw(srv.port, packet(nginx_like("/big?n=1000")))
    status, headers, body = split_response(raw)
    assert headers["content-length"] == "1000" and body == pattern(1000)


def test_variables_sent_raw(stack):
    interface, srv, _ = stack
    body = b"0123456789"
    variables = nginx_like(
        "/v?k=1",
        method="POST",
        CONTENT_LENGTH=str(len(body)),
        CONTENT_TYPE="text/plain",
        REMOTE_ADDR="2001:db8::5",
        REMOTE_PORT="1234",
        HTTPS="on",
        SERVER_PORT="8443",
        HTTP_X_REQUEST_ID="abc",
        HTTP_USER_AGENT="test/1",
    )
    raw = send_raw(srv.port, packet(variables, body))
    status, _, data = split_response(raw)
    assert status == "HTTP/1.1 200 OK", raw
    seen = json.loads(data)
    assert seen["client"] == ["2001:db8::5", 1234]
    assert seen["scheme"] == "https"
    assert seen["server"] == ["example.com", "8443"]
    assert seen["body_len"] == len(body)
    headers = dict(seen["headers"])
    assert headers["x-request-id"] == "abc" and headers["user-agent"] == "test/1"
    assert headers["content-type"] == "text/plain"
    # A packet without REQUEST_URI: the target is PATH_INFO (decoded, as CGI has it)
    # and QUERY_STRING.
    variables = nginx_like("/x", PATH_INFO="/caf\u00e9 y", QUERY_STRING="a=%20")
    del variables["REQUEST_URI"]
    seen = json.loads(split_response(send_raw(srv.port, packet(variables)))[2])
    # The version the client spoke to nginx.
    for sent, told in (("HTTP/2.0", "HTTP/2"), ("HTTP/1.0", "HTTP/1.0"), ("HTTP/1.1", "HTTP/1.1")):
        raw = send_raw(srv.port, packet(nginx_like("/p", SERVER_PROTOCOL=sent)))
        assert raw.startswith(b"HTTP/1.1 200 "), raw[:100]  # the response: always HTTP/1.1
        assert json.loads(split_response(raw)[2])["protocol"] == told
    path = "/caf\u00e9 y"
    if interface == "wsgi":  # PEP 3333: the bytes as latin-1
        path = path.encode().decode("latin-1")
    assert (seen["path"], seen["query"]) == (path, "a=%20")


BAD_PACKETS = {
    "modifier1 5": packet(nginx_like("/"), modifier1=5),
    "variable past the packet": struct.pack("<BHB", 0, 6, 0) + b"\x04\x00ABCD",
    "no REQUEST_METHOD": packet({"REQUEST_URI": "/"}),
    "CONTENT_LENGTH not a number": packet(nginx_like("/", CONTENT_LENGTH="12x")),
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("name", list(BAD_PACKETS))
def test_bad_packets_close_and_are_logged(stack, name):
    _, srv, _ = stack
    before = srv.log().count("Rejected 4")
    raw = send_raw(srv.port, BAD_PACKETS[name])
    assert raw == b"" or raw.startswith(b"HTTP/1.1 4"), raw
    assert b"200 OK" not in raw
    assert wait_for(lambda: srv.log().count("Rejected 4") > before), srv.log_tail()
    # Others are served.
    status, _, _ = split_response(send_raw(srv.port, packet(nginx_like("/ok"))))
    assert status == "HTTP/1.1 200 OK"


def test_too_many_variables_and_a_variable_too_large(stack):
    _, srv, _ = stack
    many = nginx_like("/", **{f"HTTP_X_{i}": "v" for i in range(200)})  # over 100 + 32
    raw = send_raw(srv.port, packet(many))
    assert raw.startswith(b"HTTP/1.1 431"), raw[:100]
    assert srv.wait_for_log("too many uwsgi variables"), srv.log_tail()
    raw = send_raw(srv.port, packet(nginx_like("/", HTTP_X_HUGE="v" * 9000)))
    assert raw.startswith(b"HTTP/1.1 431"), raw[:100]
    assert srv.wait_for_log("uwsgi variable too large"), srv.log_tail()


def test_a_stalled_packet_times_out_and_a_body_over_the_limit():
    port = free_port()
    args = ["-b", f"uwsgi://127.0.0.1:{port}", "--timeout-request-header", "1"]
    args += ["--limit-request-body", "1000"]
    with run_server("apps.uwsgi_echo:app", *args, listen=False, port=port) as srv:
        raw = send_raw(port, packet(nginx_like("/", "POST", CONTENT_LENGTH="5000"), b"x" * 5000))
        assert raw.startswith(b"HTTP/1.1 413"), raw[:100]
        assert srv.wait_for_log("body too large"), srv.log_tail()
        with socket.create_connection((HOST, port), timeout=30) as sock:
            sock.sendall(packet(nginx_like("/"))[:10])
            start = time.monotonic()
            rest = read_all(sock)
            assert time.monotonic() - start < 20  # 1 s, with headroom for a loaded machine
        assert rest == b"" or rest.startswith(b"HTTP/1.1 408"), rest
        assert srv.wait_for_log("request head deadline"), srv.log_tail()


def test_an_untrusted_peer_is_refused(stack):
    _, srv, _ = stack
    with socket.create_connection((HOST, srv.port), source_address=(CLIENT, 0), timeout=10) as s:
        s.sendall(packet(nginx_like("/")))
        try:
            assert read_all(s) == b""
        except ConnectionResetError:
            pass  # closed with the packet unread
    assert srv.wait_for_log("an untrusted peer spoke to a uwsgi listener"), srv.log_tail()


# ---- options ----


def test_protocol_uwsgi_applies_to_every_bind():
    a, b = free_port(), free_port()
    args = ["-b", f"127.0.0.1:{a}", "-b", f"127.0.0.1:{b}", "--protocol", "uwsgi"]
    with run_server("apps.uwsgi_echo:app", *args, listen=False, port=a) as srv:
        for port in (a, b):
            status, _, _ = split_response(send_raw(port, packet(nginx_like("/"))))
            assert status == "HTTP/1.1 200 OK"
        assert f"Listening on uwsgi://127.0.0.1:{a}" in srv.log()
        assert f"Listening on uwsgi://127.0.0.1:{b}" in srv.log()


def test_config_file_protocol(tmp_path):
    conf = tmp_path / "gunicorn.conf.py"
    port = free_port()
    conf.write_text(f'bind = ["127.0.0.1:{port}"]\nprotocol = "uwsgi"\n')
    with run_server("apps.uwsgi_echo:app", "-c", str(conf), listen=False, port=port):
        status, _, _ = split_response(send_raw(port, packet(nginx_like("/"))))
        assert status == "HTTP/1.1 200 OK"


def test_uwsgi_unix_socket(tmp_path):
    path = str(tmp_path / "uwsgi.sock")
    with run_server("apps.uwsgi_echo:app", "-b", f"uwsgi://unix:{path}", listen=False, uds=path):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(path)
            sock.sendall(packet(nginx_like("/u")))
            status, _, data = split_response(read_all(sock))
        assert status == "HTTP/1.1 200 OK"
        seen = json.loads(data)
        assert seen["client"] == ["192.0.2.7", 40000]  # a unix-socket peer is trusted
        assert seen["server"] == ["example.com", "80"]


def test_uwsgi_refused_on_tls_and_with_proxy_protocol(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    port = str(free_port())
    tls = ["--certfile", str(cert), "--keyfile", str(key)]
    for args in (
        ["-b", f"uwsgi://127.0.0.1:{port}", *tls],
        ["-b", f"127.0.0.1:{port}", "--protocol", "uwsgi", *tls],
        ["-b", f"uwsgi://127.0.0.1:{port}", "--proxy-protocol"],
        ["-b", f"uwsgi://127.0.0.1:{port}", "--proxy-protocol-bind", f"127.0.0.1:{port}"],
    ):
        result = run_cli("apps.uwsgi_echo:app", "--app-dir", str(Path(__file__).parent), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "uwsgi protocol" in result.stderr, result.stderr
    result = run_cli("apps.uwsgi_echo:app", "-b", "uwsgi://")
    assert result.returncode == 2 and "uwsgi://HOST:PORT" in result.stderr, result.stderr
    result = run_cli("apps.uwsgi_echo:app", "--protocol", "fastcgi")
    assert result.returncode == 2 and "--protocol" in result.stderr, result.stderr


def test_deployment_docs_show_the_tested_config():
    docs = (Path(__file__).parent.parent / "docs" / "deployment.md").read_text()
    assert UWSGI_CONF.read_text().strip() in docs
