"""TLS: the handshake on the loop, options, mTLS, ALPN, what the application sees, bad input.

Certificates are made in the session with the openssl CLI: a CA (ECDSA P-256), server
certificates signed by it (ECDSA P-256 and RSA 2048), a client certificate signed by it and
one signed by a CA the server does not trust.
"""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time

import httpx
import pytest
from helpers import HOST, free_port, rss_kib, run_cli, run_server, wait_for

OPENSSL = shutil.which("openssl")
CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI")

# Under `make test-asan` ASan's quarantine makes RSS meaningless: memory bounds are not
# asserted there (fds and data still are), as in test_resources.py.
UNDER_ASAN = os.environ.get("PYSERVER_ASAN") == "1" or "libasan" in os.environ.get("LD_PRELOAD", "")

WSGI = "apps.tls_apps:wsgi"
ASGI = "apps.tls_apps:asgi"


def _openssl(*args, cwd):
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_cert(d, name, subject, ca=None, key_type="ec", san="DNS:localhost,IP:127.0.0.1"):
    """name.key and name.pem in d: signed by ca (a name in d), or self-signed as a CA."""
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    if key_type == "rsa":
        newkey = ["-newkey", "rsa:2048"]
    if ca is None:
        _openssl(
            "req", "-x509", *newkey, "-nodes", "-days", "2", "-subj", subject,
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d,
        )  # fmt: skip
        return
    _openssl("req", "-new", *newkey, "-nodes", "-subj", subject,
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.pem",
             cwd=d)  # fmt: skip


class Certs:
    def __init__(self, d):
        self.dir = d
        _make_cert(d, "ca", "/CN=pyserver test CA")
        _make_cert(d, "server", "/CN=localhost", ca="ca")
        _make_cert(d, "server-rsa", "/CN=localhost", ca="ca", key_type="rsa")
        _make_cert(d, "client", "/CN=alice/O=Example", ca="ca", san="DNS:alice")
        _make_cert(d, "rogue-ca", "/CN=someone else's CA")
        _make_cert(d, "rogue", "/CN=mallory", ca="rogue-ca", san="DNS:mallory")
        _openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:s3cret",
                 "-out", "server-enc.key", cwd=d)  # fmt: skip

    def path(self, name):
        return str(self.dir / name)

    def server_args(self, name="server"):
        return (
            "--ssl-certfile",
            self.path(f"{name}.pem"),
            "--ssl-keyfile",
            self.path(f"{name}.key"),
        )

    def client_context(self, cert=None, alpn=None, version=None):
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if cert:
            ctx.load_cert_chain(self.path(f"{cert}.pem"), self.path(f"{cert}.key"))
        if alpn:
            ctx.set_alpn_protocols(alpn)
        if version:
            ctx.minimum_version = ctx.maximum_version = version
        return ctx


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("tls"))


def serve_tls(spec, certs, *args, name="server", **kwargs):
    """run_server with the server certificate `name` (a TCP connect says it is ready)."""
    return run_server(spec, *certs.server_args(name), *args, **kwargs)


def https(srv):
    return f"https://localhost:{srv.port}"


def tls_connect(srv, ctx, timeout=5.0):
    raw = socket.create_connection((HOST, srv.port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def read_responses(sock, count):
    """Reads count Content-Length responses from sock; returns their bodies."""
    data, bodies = b"", []
    while len(bodies) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode("latin-1")
            length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
            end = head_end + 4 + length
            if len(data) >= end:
                bodies.append(data[head_end + 4 : end])
                data = data[end:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed after {len(bodies)} responses")
        data += chunk
    return bodies


# ---- clients over TLS 1.2 and 1.3 ----

VERSIONS = pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"]
)


@VERSIONS
def test_httpx_wsgi_environ_over_tls(certs, version):
    with serve_tls(WSGI, certs) as srv:
        ctx = certs.client_context(version=version)
        with httpx.Client(verify=ctx) as client:
            env = client.get(https(srv) + "/env").json()
    expected = "TLSv1.3" if version == ssl.TLSVersion.TLSv1_3 else "TLSv1.2"
    assert env["wsgi.url_scheme"] == "https"
    assert env["HTTPS"] == "on"
    assert env["SSL_PROTOCOL"] == expected
    assert env["SSL_CIPHER"]
    if version == ssl.TLSVersion.TLSv1_2:
        assert env["SSL_CIPHER"].startswith("ECDHE-ECDSA-")
    assert env["SSL_CLIENT_CERT"] is None and env["SSL_CLIENT_S_DN"] is None


@VERSIONS
def test_httpx_asgi_tls_extension(certs, version):
    with serve_tls(ASGI, certs) as srv:
        with httpx.Client(verify=certs.client_context(version=version)) as client:
            got = client.get(https(srv) + "/").json()
    tls = got["tls"]
    assert got["scheme"] == "https"
    wire = 0x0304 if version == ssl.TLSVersion.TLSv1_3 else 0x0303
    assert tls["tls_version"] == wire
    assert isinstance(tls["cipher_suite"], int) and 0 < tls["cipher_suite"] < 0x10000
    server_pem = open(certs.path("server.pem")).read()
    assert tls["server_cert"].strip() == server_pem.strip()
    assert tls["client_cert_chain"] == []
    assert tls["client_cert_name"] is None and tls["client_cert_error"] is None


@pytest.mark.skipif(CURL is None, reason="needs curl")
@pytest.mark.parametrize("flags", [["--tlsv1.2", "--tls-max", "1.2"], ["--tlsv1.3"]])
def test_curl_keep_alive_over_tls(certs, flags):
    with serve_tls(WSGI, certs) as srv:
        url = https(srv) + "/hello"
        out = subprocess.run(
            [CURL, "-sS", "--cacert", certs.path("ca.pem"), *flags, url, url,
             "-w", "%{http_code} %{num_connects}\n"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # Two answers, the second on the same connection.
    assert out.stdout == "hello200 1\nhello200 0\n"


def test_rsa_certificate(certs):
    with serve_tls(WSGI, certs, name="server-rsa") as srv:
        ctx = certs.client_context(version=ssl.TLSVersion.TLSv1_2)
        with httpx.Client(verify=ctx) as client:
            env = client.get(https(srv) + "/env").json()
    assert env["SSL_CIPHER"].startswith("ECDHE-RSA-")


# ---- ALPN ----


def test_alpn_prefers_h2_and_serves_http2_over_tls(certs):
    with serve_tls(WSGI, certs) as srv:
        with tls_connect(srv, certs.client_context(alpn=["http/1.1", "h2"])) as s:
            assert s.selected_alpn_protocol() == "h2"  # the server's order
        with tls_connect(srv, certs.client_context(alpn=["http/1.1"])) as s:
            assert s.selected_alpn_protocol() == "http/1.1"
            s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_responses(s, 1) == [b"hello"]
        with tls_connect(srv, certs.client_context()) as s:  # no ALPN at all is fine
            assert s.selected_alpn_protocol() is None
            s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_responses(s, 1) == [b"hello"]
        ctx = certs.client_context()
        with httpx.Client(verify=ctx, http2=True) as client:
            responses = [client.get(https(srv) + "/env") for _ in range(3)]
        assert {r.http_version for r in responses} == {"HTTP/2"}
        env = responses[0].json()
        assert env["SERVER_PROTOCOL"] == "HTTP/2"
        assert env["HTTPS"] == "on" and env["wsgi.url_scheme"] == "https"
        assert env["SSL_PROTOCOL"].startswith("TLSv1")


def test_alpn_http1_only_with_http_1(certs):
    with serve_tls(WSGI, certs, "--http", "1") as srv:
        with tls_connect(srv, certs.client_context(alpn=["h2", "http/1.1"])) as s:
            assert s.selected_alpn_protocol() == "http/1.1"
            s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_responses(s, 1) == [b"hello"]
        # Only protocols the server does not speak: refused (RFC 7301).
        with pytest.raises(ssl.SSLError, match="no application protocol"):
            tls_connect(srv, certs.client_context(alpn=["h2"]))


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load is not installed")
@pytest.mark.parametrize("spec", [WSGI, ASGI], ids=["wsgi", "asgi"])
def test_h2load_over_tls(certs, spec):
    with serve_tls(spec, certs) as srv:
        out = subprocess.run(
            ["h2load", "-n", "2000", "-c", "10", "-m", "10", https(srv) + "/hello"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    assert "Application protocol: h2" in out, out
    assert "2000 succeeded, 0 failed" in out, out
    assert "status codes: 2000 2xx" in out, out


# ---- keep-alive and pipelining ----


@pytest.mark.parametrize("spec", [WSGI, ASGI])
def test_pipelined_requests_in_one_record(certs, spec):
    with serve_tls(spec, certs) as srv:
        with tls_connect(srv, certs.client_context()) as s:
            # One sendall of three requests: one TLS record holding all of them.
            s.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
            bodies = read_responses(s, 3)
            assert len(bodies) == 3
            # Keep-alive: the connection serves more afterwards.
            s.sendall(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
            assert len(read_responses(s, 1)) == 1


def test_many_pipelined_requests_beyond_one_read(certs):
    """More decrypted input than one read takes: what the session holds is read without
    waiting for the socket."""
    with serve_tls(WSGI, certs) as srv:
        with tls_connect(srv, certs.client_context()) as s:
            n = 2000  # about 100 KiB of requests
            request = b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 20 + b"\r\n\r\n"
            s.sendall(request * n)
            assert read_responses(s, n) == [b"hello"] * n


def test_request_body_over_tls(certs):
    with serve_tls("apps.basic:app", certs) as srv:
        body = os.urandom(3 << 20)
        with httpx.Client(verify=certs.client_context()) as client:
            r = client.post(https(srv) + "/echo", content=body)
        assert r.status_code == 200
        assert r.content == body


# ---- mTLS ----


def _mtls_server(certs, reqs):
    return serve_tls(WSGI, certs, "--ssl-ca-certs", certs.path("ca.pem"), "--ssl-cert-reqs", reqs)


@pytest.mark.parametrize("reqs", ["required", "2"])
def test_mtls_required(certs, reqs):
    with _mtls_server(certs, reqs) as srv:
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            env = client.get(https(srv) + "/env").json()
        assert env["SSL_CLIENT_S_DN"] == "O=Example,CN=alice"
        assert env["SSL_CLIENT_CERT"].strip() == open(certs.path("client.pem")).read().strip()
        assert env["SSL_CLIENT_VERIFY"] == "SUCCESS"
        # Missing and untrusted client certificates: no request gets through.
        for cert in (None, "rogue"):
            with pytest.raises((ssl.SSLError, OSError)):
                with tls_connect(srv, certs.client_context(cert=cert)) as s:
                    s.sendall(b"GET /env HTTP/1.1\r\nHost: x\r\n\r\n")
                    if not s.recv(1):  # TLS 1.3: the refusal comes after the handshake
                        raise OSError("closed")
        # The server still serves good clients.
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            assert client.get(https(srv) + "/hello").text == "hello"
        # Each refusal is logged with its reason.
        assert wait_for(
            lambda: "TLS handshake failed: peer did not return a certificate" in srv.log(), 5
        )
        assert "TLS handshake failed: certificate verify failed" in srv.log()


def test_mtls_optional(certs):
    with _mtls_server(certs, "optional") as srv:
        with httpx.Client(verify=certs.client_context()) as client:
            env = client.get(https(srv) + "/env").json()
        assert env["HTTPS"] == "on" and env["SSL_CLIENT_CERT"] is None
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            env = client.get(https(srv) + "/env").json()
        assert env["SSL_CLIENT_S_DN"] == "O=Example,CN=alice"
        with pytest.raises((ssl.SSLError, OSError)):
            with tls_connect(srv, certs.client_context(cert="rogue")) as s:
                s.sendall(b"GET /env HTTP/1.1\r\nHost: x\r\n\r\n")
                if not s.recv(1):
                    raise OSError("closed")


def test_asgi_tls_extension_with_client_cert(certs):
    args = ("--ssl-ca-certs", certs.path("ca.pem"), "--ssl-cert-reqs", "required")
    with serve_tls(ASGI, certs, *args) as srv:
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            tls = client.get(https(srv) + "/").json()["tls"]
    assert tls["client_cert_name"] == "O=Example,CN=alice"
    # As sent: the leaf, then whatever chain the client added (OpenSSL adds the CA).
    chain = [pem.strip() for pem in tls["client_cert_chain"]]
    assert chain[0] == open(certs.path("client.pem")).read().strip()
    assert chain[1:] in ([], [open(certs.path("ca.pem")).read().strip()])
    assert tls["client_cert_error"] is None


def test_asgi_tls_extension_is_each_requests_own(certs):
    """The extension is built once per connection: what one request's application changes
    in it (the dict, the client chain) does not reach the next request."""
    args = ("--ssl-ca-certs", certs.path("ca.pem"), "--ssl-cert-reqs", "required")
    with serve_tls(ASGI, certs, *args) as srv:
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            first = client.get(https(srv) + "/mutate").json()["tls"]
            second = client.get(https(srv) + "/").json()["tls"]
            third = client.get(https(srv) + "/").json()["tls"]
    assert first["client_cert_chain"] and first["cipher_suite"]
    assert second == first and third == first


# ---- bad input ----


def test_plain_http_to_tls_port_gets_clear_400(certs):
    with serve_tls(WSGI, certs) as srv:
        with socket.create_connection((HOST, srv.port), timeout=5) as s:
            s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert b"\r\nConnection: close\r\n" in data
        assert data.endswith(b"\r\n\r\nThe plain HTTP request was sent to HTTPS port\n")
        assert srv.wait_for_log("The plain HTTP request was sent to HTTPS port")
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/hello").text == "hello"
        lines = [line for line in srv.log().splitlines() if "plain HTTP request" in line]
        assert len(lines) == 1, lines


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00\x01"], ids=["nothing", "partial"])
def test_stalled_handshake_closed_at_deadline(certs, sent):
    with serve_tls(WSGI, certs, "--timeout-tls-handshake", "0.5") as srv:
        with socket.create_connection((HOST, srv.port), timeout=10) as s:
            s.sendall(sent)
            start = time.monotonic()
            # Meanwhile another client is served.
            with httpx.Client(verify=certs.client_context()) as client:
                assert client.get(https(srv) + "/hello").text == "hello"
            try:
                assert s.recv(4096) == b""
            except ConnectionResetError:
                pass
            elapsed = time.monotonic() - start
        assert 0.3 < elapsed < 5, elapsed


@pytest.mark.parametrize("workers", ["1", "2"], ids=["single-process", "master"])
def test_garbage_client_hello_costs_only_its_connection(certs, workers):
    with serve_tls(WSGI, certs, "--workers", workers) as srv:
        # The last one never starts like a plain HTTP request line (a 400 of its own).
        for garbage in (
            b"\x16\x03\x01\x00\x05hello",
            b"\x16" + os.urandom(600),
            b"\x01" + os.urandom(63),
        ):
            with socket.create_connection((HOST, srv.port), timeout=5) as s:
                s.sendall(garbage)
                try:
                    while s.recv(4096):
                        pass
                except ConnectionResetError:
                    pass
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/hello").text == "hello"
        # One line each, with OpenSSL's reason (a connection that just closes gets none).
        with socket.create_connection((HOST, srv.port), timeout=5):
            pass
        assert wait_for(lambda: srv.log().count("TLS handshake failed: ") == 3, 5), srv.log()
        assert "Closed the connection from 127.0.0.1:" in srv.log()


# ---- options, binds and start-up errors ----


def test_tls_on_tcp_bind_plain_on_unix_bind(certs, tmp_path):
    uds, port = str(tmp_path / "s.sock"), free_port()
    binds = ("-b", f"{HOST}:{port}", "-b", f"unix:{uds}")
    with serve_tls(WSGI, certs, *binds, listen=False, port=port) as srv:
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/env").json()["HTTPS"] == "on"
        transport = httpx.HTTPTransport(uds=uds)
        with httpx.Client(transport=transport) as client:
            env = client.get("http://localhost/env").json()
        assert env["wsgi.url_scheme"] == "http" and env["HTTPS"] is None
        assert f"Listening on https://{HOST}:{srv.port}" in srv.log()


def test_encrypted_key_with_password(certs):
    args = (
        "--ssl-certfile",
        certs.path("server.pem"),
        "--ssl-keyfile",
        certs.path("server-enc.key"),
    )
    with run_server(WSGI, *args, "--ssl-keyfile-password", "s3cret") as srv:
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/hello").text == "hello"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_certificate_at_start_is_one_line_and_exit_1(certs, tmp_path, workers):
    missing = str(tmp_path / "missing.pem")
    cases = [
        (("--ssl-certfile", missing), f"cannot load the certificate chain {missing}"),
        (
            ("--ssl-certfile", certs.path("server.pem"), "--ssl-keyfile", certs.path("client.key")),
            "does not match the certificate",
        ),
        (
            ("--certfile", certs.path("server.pem"), "--keyfile", certs.path("server-enc.key")),
            "is encrypted and no password was given",
        ),
        (
            (
                "--certfile",
                certs.path("server.pem"),
                "--keyfile",
                certs.path("server-enc.key"),
                "--ssl-keyfile-password",
                "wrong",
            ),
            "is the password right?",
        ),  # fmt: skip
        (
            (
                "--ssl-certfile",
                certs.path("server.pem"),
                "--ssl-keyfile",
                certs.path("server.key"),
                "--ssl-ciphers",
                "NOT-A-CIPHER",
            ),
            "bad TLS 1.2 cipher list",
        ),  # fmt: skip
    ]
    for args, message in cases:
        out = run_cli(WSGI, "--app-dir", ".", "--port", "0", "--workers", workers, *args)
        assert out.returncode == 1, (args, out.stderr)
        errors = [line for line in out.stderr.splitlines() if line.startswith("pyserver: ")]
        assert len(errors) == 1 and message in errors[0], out.stderr
        assert errors[0].startswith("pyserver: error: TLS: "), errors
        assert "Traceback" not in out.stderr


def test_cli_rejects_bad_tls_option_values():
    out = run_cli(WSGI, "--ssl-cert-reqs", "sometimes")
    assert out.returncode == 2 and "expected none, optional or required" in out.stderr
    out = run_cli(WSGI, "--ssl-version", "TLSv1.0")
    assert out.returncode == 2 and "TLSv1.2 or TLSv1.3" in out.stderr


def test_proxy_protocol_on_a_tls_listener_is_a_clear_error(certs):
    base = (WSGI, "--port", "0", *certs.server_args())
    out = run_cli(*base, "--proxy-protocol")
    assert out.returncode == 2, out.stderr
    assert "--proxy-protocol on a TLS listener" in out.stderr and "Traceback" not in out.stderr
    out = run_cli(*base, "--bind", "127.0.0.1:0", "--proxy-protocol-bind", "127.0.0.1:0")
    assert out.returncode == 2 and "--proxy-protocol on a TLS listener" in out.stderr, out.stderr


def test_minimum_version_tls13(certs):
    with serve_tls(WSGI, certs, "--ssl-version", "TLSv1.3") as srv:
        with pytest.raises(ssl.SSLError):
            tls_connect(srv, certs.client_context(version=ssl.TLSVersion.TLSv1_2))
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/env").json()["SSL_PROTOCOL"] == "TLSv1.3"


# ---- file responses: the read and encrypt loop, in bounded memory ----


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """1 GiB of a repeated random MiB, and its SHA-256."""
    import hashlib

    path = tmp_path_factory.mktemp("tls-file") / "big.bin"
    block = os.urandom(1 << 20)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(1024):
            f.write(block)
            digest.update(block)
    return str(path), digest.hexdigest(), 1 << 30


def _download(srv, certs, target, size, pid):
    """GETs target over TLS; returns (sha256 hex, peak RSS growth of pid in MiB)."""
    import hashlib

    base = rss_kib(pid)
    peak = base
    digest = hashlib.sha256()
    got = 0
    with tls_connect(srv, certs.client_context(), timeout=60) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        digest.update(data)
        got += len(data)
        step = 0
        while got < size:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            digest.update(chunk)
            got += len(chunk)
            if got >> 24 != step:  # every 16 MiB
                step = got >> 24
                peak = max(peak, rss_kib(pid))
    assert got == size
    return digest.hexdigest(), (peak - base) / 1024


@pytest.mark.resource
def test_large_file_wrapper_response_over_tls_keeps_rss_bounded(certs, big_file):
    path, sha, size = big_file
    with serve_tls(WSGI, certs, env={"TLS_TEST_FILE": path}) as srv:
        with httpx.Client(verify=certs.client_context()) as client:  # warm up the worker
            assert client.get(https(srv) + "/hello").text == "hello"
        digest, growth = _download(srv, certs, f"/file?size={size}", size, srv.pid)
    assert digest == sha
    assert UNDER_ASAN or growth < 20, (
        f"worker RSS grew {growth:.1f} MiB sending {size >> 20} MiB over TLS"
    )


@pytest.mark.resource
def test_pathsend_over_tls(certs, big_file):
    path, sha, size = big_file
    with serve_tls(ASGI, certs, env={"TLS_TEST_FILE": path}) as srv:
        with httpx.Client(verify=certs.client_context()) as client:
            assert client.get(https(srv) + "/").status_code == 200
        digest, growth = _download(srv, certs, "/pathsend", size, srv.pid)
    assert digest == sha
    assert UNDER_ASAN or growth < 20, (
        f"worker RSS grew {growth:.1f} MiB sending {size >> 20} MiB over TLS"
    )


# ---- WebSocket over TLS ----


def test_websocket_over_tls(certs):
    from websockets.sync.client import connect

    with serve_tls(ASGI, certs) as srv:
        ctx = certs.client_context()
        with connect(f"wss://localhost:{srv.port}/ws", ssl=ctx, open_timeout=10) as ws:
            for i in range(20):
                ws.send(f"m{i}" + "x" * (i * 1000))
                assert ws.recv(timeout=10) == f"wss m{i}" + "x" * (i * 1000)
            big = "y" * (512 << 10)  # many TLS records in one message
            ws.send(big)
            assert ws.recv(timeout=10) == "wss " + big


# ---- the gunicorn worker ----


def test_gunicorn_worker_serves_tls(certs):
    from test_gunicorn import gunicorn

    args = ("--certfile", certs.path("server.pem"), "--keyfile", certs.path("server.key"))
    args += ("--ca-certs", certs.path("ca.pem"), "--cert-reqs", "1", "--do-handshake-on-connect")
    with gunicorn("apps.gunicorn_app:app", *args, workers=1) as g:
        with httpx.Client(verify=certs.client_context(cert="client")) as client:
            r = client.get(f"https://localhost:{g.port}/")
        assert r.status_code == 200 and r.text.startswith("pid=")
        with httpx.Client(verify=certs.client_context()) as client:  # optional: none is fine
            assert client.get(f"https://localhost:{g.port}/").status_code == 200


# ---- the default configuration, as a TLS scanner sees it ----


def test_sslyze_finds_no_weak_protocol_or_cipher(certs):
    sslyze = pytest.importorskip("sslyze")
    with serve_tls(WSGI, certs) as srv:
        location = sslyze.ServerNetworkLocation("localhost", srv.port, ip_address=HOST)
        commands = {
            sslyze.ScanCommand.SSL_2_0_CIPHER_SUITES,
            sslyze.ScanCommand.SSL_3_0_CIPHER_SUITES,
            sslyze.ScanCommand.TLS_1_0_CIPHER_SUITES,
            sslyze.ScanCommand.TLS_1_1_CIPHER_SUITES,
            sslyze.ScanCommand.TLS_1_2_CIPHER_SUITES,
            sslyze.ScanCommand.TLS_1_3_CIPHER_SUITES,
            sslyze.ScanCommand.TLS_COMPRESSION,
            sslyze.ScanCommand.SESSION_RENEGOTIATION,
            sslyze.ScanCommand.HEARTBLEED,
        }
        scanner = sslyze.Scanner()
        scanner.queue_scans(
            [sslyze.ServerScanRequest(server_location=location, scan_commands=commands)]
        )
        (result,) = list(scanner.get_results())
    assert result.scan_status == sslyze.ServerScanStatusEnum.COMPLETED, (
        result.connectivity_error_trace
    )
    r = result.scan_result
    for attempt in (r.ssl_2_0_cipher_suites, r.ssl_3_0_cipher_suites, r.tls_1_0_cipher_suites,
                    r.tls_1_1_cipher_suites):  # fmt: skip
        assert attempt.status == sslyze.ScanCommandAttemptStatusEnum.COMPLETED
        assert attempt.result.accepted_cipher_suites == []
    tls12 = [s.cipher_suite.name for s in r.tls_1_2_cipher_suites.result.accepted_cipher_suites]
    tls13 = [s.cipher_suite.name for s in r.tls_1_3_cipher_suites.result.accepted_cipher_suites]
    assert tls12 and tls13
    for name in tls12:  # forward secrecy and AEAD only: no CBC, RC4, 3DES, NULL, export, RSA kx
        assert name.startswith("TLS_ECDHE_") and ("_GCM_" in name or "CHACHA20" in name), name
    assert not r.tls_compression.result.supports_compression
    assert not r.session_renegotiation.result.is_vulnerable_to_client_renegotiation_dos
    assert not r.heartbleed.result.is_vulnerable_to_heartbleed


# ---- under a master: shared and rotated ticket keys, certificates renewed on HUP ----


# Two workers that both get connections from a client that opens them one after the
# other: on the shared socket the kernel wakes the worker that waits first (a sequential
# client mostly meets the same one idle), so each worker also listens on its own
# --reuse-port socket and the kernel spreads the connections across all of them.
TWO_WORKERS = ("--workers", "2", "--reuse-port")


def _get(srv, ctx, target, session=None):
    """One request on a new TLS connection: (body, session_reused, session, peer cert DER)."""
    with socket.create_connection((HOST, srv.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            (body,) = read_responses(s, 1)
            return body, s.session_reused, s.session, s.getpeercert(binary_form=True)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_ticket_keys_shared_by_workers_and_rotated(certs, version):
    ctx = certs.client_context(version=version)
    # Shared: a ticket one worker issued resumes on the other.
    with serve_tls(WSGI, certs, *TWO_WORKERS) as srv:
        assert wait_for(lambda: len({_get(srv, ctx, "/pid")[0] for _ in range(20)}) == 2, 15)
        _, reused, session, _ = _get(srv, ctx, "/pid")
        assert not reused
        pids, deadline = set(), time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:  # until both workers resumed it
            pid, reused, _, _ = _get(srv, ctx, "/pid", session)
            assert reused, f"ticket of one worker refused by worker {pid}"
            pids.add(pid)
        assert len(pids) == 2, pids
    # Rotated every second: a ticket still resumes a rotation or two later (every worker
    # has read the ring since), and four rotations later its key is out of every worker's
    # ring at once.
    with serve_tls(WSGI, certs, *TWO_WORKERS, "--ssl-ticket-rotation", "1") as srv:
        assert wait_for(lambda: len({_get(srv, ctx, "/pid")[0] for _ in range(20)}) == 2, 15)
        _, reused, session, _ = _get(srv, ctx, "/pid")
        assert not reused
        time.sleep(1.6)
        assert all(_get(srv, ctx, "/pid", session)[1] for _ in range(4))
        assert wait_for(lambda: not _get(srv, ctx, "/pid", session)[1], 20)
        assert not any(_get(srv, ctx, "/pid", session)[1] for _ in range(6))


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_fresh_tickets_resume_everywhere_across_rotations(certs, version):
    # Right after a rotation, one worker may issue tickets under the new key before the
    # other has read the ring: the other reads it when it meets the unknown key name,
    # instead of refusing the ticket.
    ctx = certs.client_context(version=version)
    with serve_tls(WSGI, certs, *TWO_WORKERS, "--ssl-ticket-rotation", "1") as srv:
        assert wait_for(lambda: len({_get(srv, ctx, "/pid")[0] for _ in range(20)}) == 2, 15)
        # Workers started together read the ring in step; a replacement reads it out of step.
        time.sleep(0.4)
        os.kill(int(_get(srv, ctx, "/pid")[0]), signal.SIGKILL)
        assert wait_for(lambda: len({_get(srv, ctx, "/pid")[0] for _ in range(20)}) == 2, 15)
        refused, pids, deadline = [], set(), time.monotonic() + 6  # six rotations
        while time.monotonic() < deadline:
            issuer, reused, session, _ = _get(srv, ctx, "/pid")
            assert not reused
            for _ in range(4):
                pid, reused, _, _ = _get(srv, ctx, "/pid", session)
                pids.add(pid)
                if not reused:
                    refused.append((issuer, pid))
        assert len(pids) == 2, pids
        assert refused == [], f"fresh tickets refused (issuer, refuser): {refused}"


def test_tls13_resumption_hands_out_a_fresh_ticket(certs, tmp_path):
    # A TLS 1.3 client uses each ticket once (RFC 8446 C.4): every resumed handshake
    # must bring the next ticket, or a client resuming in a chain runs out after two.
    def s_client(*args):
        out = subprocess.run(
            [OPENSSL, "s_client", "-connect", f"{HOST}:{srv.port}", "-tls1_3", "-msg", "-ign_eof"]
            + list(args),
            input=b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            capture_output=True,
            timeout=30,
        ).stdout.decode(errors="replace")
        assert "hello" in out, out
        return out.count("NewSessionTicket"), "Reused, TLSv1.3" in out

    with serve_tls(WSGI, certs) as srv:
        tickets, reused = s_client("-sess_out", str(tmp_path / "s0"))
        assert (tickets, reused) == (2, False)
        for i in range(1, 5):
            prev, nxt = tmp_path / f"s{i - 1}", tmp_path / f"s{i}"
            tickets, reused = s_client("-sess_in", str(prev), "-sess_out", str(nxt))
            assert reused, f"resumption {i} was a full handshake"
            assert tickets >= 1, f"resumption {i} brought no new ticket"


def _records(data):
    """The (content type, length) of each TLS record in data."""
    out = []
    while len(data) >= 5:
        n = int.from_bytes(data[3:5], "big")
        out.append((data[0], n))
        data = data[5 + n :]
    return out


def test_tls13_tickets_leave_with_the_first_response(certs):
    # The session tickets a TLS 1.3 handshake ends with wait for the first response and
    # leave in the same write: a client that finished its handshake and sent nothing has
    # received nothing, and the ticket records come in front of the response's. Both
    # tickets still arrive and resume.
    ctx = certs.client_context(version=ssl.TLSVersion.TLSv1_3)
    with serve_tls(WSGI, certs) as srv:
        with socket.create_connection((HOST, srv.port), timeout=10) as raw:
            inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = ctx.wrap_bio(inc, out, server_hostname="localhost")
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    raw.sendall(out.read())
                    chunk = raw.recv(65536)
                    assert chunk, "closed during the handshake"
                    inc.write(chunk)
            raw.sendall(out.read())  # the client's Finished
            raw.settimeout(0.5)
            with pytest.raises(socket.timeout):
                early = raw.recv(65536)
                pytest.fail(f"the server sent {_records(early)} before any request")
            raw.settimeout(10)
            tls.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            raw.sendall(out.read())
            first = raw.recv(65536)
            # Two tickets and the response, in one write (loopback keeps it one segment).
            assert len(_records(first)) >= 3, _records(first)
            inc.write(first)
            data = b""
            while b"hello" not in data:
                try:
                    data += tls.read(65536)
                except ssl.SSLWantReadError:
                    chunk = raw.recv(65536)
                    assert chunk, "closed before the response"
                    inc.write(chunk)
            session = tls.session
        assert session.has_ticket
        body, reused, _, _ = _get(srv, ctx, "/hello", session)
        assert reused and body == b"hello"


def test_hup_renews_certificate_under_load_losing_nothing(certs, tmp_path):
    _make_cert(certs.dir, "renewed", "/CN=localhost", ca="ca")
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(certs.path("server.pem"), live_cert)
    shutil.copy(certs.path("server.key"), live_key)
    old_der = ssl.PEM_cert_to_DER_cert(open(certs.path("server.pem")).read())
    new_der = ssl.PEM_cert_to_DER_cert(open(certs.path("renewed.pem")).read())
    args = ("--ssl-certfile", str(live_cert), "--ssl-keyfile", str(live_key), "--workers", "2")
    with run_server(WSGI, *args) as srv:
        ctx = certs.client_context()
        seen, failures, stop = [], [], threading.Event()

        def loop():
            while not stop.is_set():
                try:
                    body, _, _, der = _get(srv, ctx, "/hello")
                    assert body == b"hello"
                    seen.append(der)
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    failures.append(repr(exc))

        threads = [threading.Thread(target=loop) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            assert wait_for(lambda: len(seen) > 20, 10)
            shutil.copy(certs.path("renewed.pem"), live_cert)
            shutil.copy(certs.path("renewed.key"), live_key)
            os.kill(srv.pid, signal.SIGHUP)
            assert wait_for(lambda: seen[-10:] == [new_der] * 10, 20), "renewed cert not served"
            # A renewal gone wrong: the master says so and the workers keep serving.
            live_cert.write_text("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")
            count = len(seen)
            os.kill(srv.pid, signal.SIGHUP)
            assert srv.wait_for_log("Not restarting the workers: TLS: cannot load", 10)
            assert wait_for(lambda: len(seen) > count + 50, 10)
            assert all(der == new_der for der in seen[count:])
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert failures == []
        assert seen.count(old_der) > 0 and seen[-1] == new_der


BROKEN_PEM = "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"


def _live_files(certs, tmp_path, name):
    """Copies of certificate `name` and its key that a test can rewrite; (cert, key)."""
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(certs.path(f"{name}.pem"), live_cert)
    shutil.copy(certs.path(f"{name}.key"), live_key)
    return live_cert, live_key


def _der(certs, name):
    return ssl.PEM_cert_to_DER_cert(open(certs.path(f"{name}.pem")).read())


def test_worker_respawned_after_a_refused_hup_serves_the_accepted_certificate(certs, tmp_path):
    # A HUP refused because the files do not load leaves the old worker serving; a worker
    # that dies afterwards for any reason is replaced by one built from the certificate
    # the master accepted last, not from the broken files on disk. One worker, so that
    # every request goes to the replacement (--timeout: a master with one worker).
    _make_cert(certs.dir, "renewed2", "/CN=localhost", ca="ca")
    live_cert, live_key = _live_files(certs, tmp_path, "server")
    args = ("--ssl-certfile", str(live_cert), "--ssl-keyfile", str(live_key), "--timeout", "60")
    ctx = certs.client_context()

    def replace_worker():
        old = int(_get(srv, ctx, "/pid")[0])
        os.kill(old, signal.SIGKILL)
        assert wait_for(lambda: int(_get(srv, ctx, "/pid")[0]) != old, 20), srv.log_tail()

    with run_server(WSGI, *args) as srv:
        assert _get(srv, ctx, "/hello")[3] == _der(certs, "server")  # the master is up
        live_cert.write_text(BROKEN_PEM)
        live_key.write_text("")
        os.kill(srv.pid, signal.SIGHUP)
        assert srv.wait_for_log("Not restarting the workers: TLS: cannot load", 10)
        for _ in range(2):
            replace_worker()
            assert {_get(srv, ctx, "/hello")[3] for _ in range(5)} == {_der(certs, "server")}
        assert "Worker failed to boot" not in srv.log()
        assert "exited with code" not in srv.log()
        # The files fixed with a renewed certificate: the next HUP serves it, and so
        # does a worker replaced after it.
        shutil.copy(certs.path("renewed2.pem"), live_cert)
        shutil.copy(certs.path("renewed2.key"), live_key)
        os.kill(srv.pid, signal.SIGHUP)
        new_der = _der(certs, "renewed2")
        assert wait_for(lambda: _get(srv, ctx, "/hello")[3] == new_der, 20), srv.log_tail()
        replace_worker()
        assert {_get(srv, ctx, "/hello")[3] for _ in range(5)} == {new_der}


def test_single_process_hup_reloads_the_certificate_and_refuses_broken_files(certs, tmp_path):
    _make_cert(certs.dir, "renewed3", "/CN=localhost", ca="ca")
    live_cert, live_key = _live_files(certs, tmp_path, "server")
    args = ("--ssl-certfile", str(live_cert), "--ssl-keyfile", str(live_key))
    ctx = certs.client_context()
    with run_server(WSGI, *args) as srv:
        pid = int(_get(srv, ctx, "/pid")[0])
        assert pid == srv.pid
        assert _get(srv, ctx, "/hello")[3] == _der(certs, "server")
        shutil.copy(certs.path("renewed3.pem"), live_cert)
        shutil.copy(certs.path("renewed3.key"), live_key)
        os.kill(srv.pid, signal.SIGHUP)
        new_der = _der(certs, "renewed3")
        assert wait_for(lambda: _get(srv, ctx, "/hello")[3] == new_der, 20), srv.log_tail()
        assert int(_get(srv, ctx, "/pid")[0]) == pid  # the same process, executed again
        # Broken files: the reload is refused and said so; the server keeps serving.
        live_cert.write_text(BROKEN_PEM)
        os.kill(srv.pid, signal.SIGHUP)
        assert srv.wait_for_log("Not reloading: TLS: cannot load the certificate chain", 10)
        time.sleep(0.5)
        assert srv.proc.poll() is None, srv.log_tail()
        assert all(_get(srv, ctx, "/hello")[3] == new_der for _ in range(5))
        # Fixed again: the next HUP reloads.
        shutil.copy(certs.path("server.pem"), live_cert)
        shutil.copy(certs.path("server.key"), live_key)
        os.kill(srv.pid, signal.SIGHUP)
        assert wait_for(lambda: _get(srv, ctx, "/hello")[3] == _der(certs, "server"), 20)


# ---- no leaks on the TLS path ----


@pytest.mark.serial
@pytest.mark.resource
def test_100k_requests_over_tls_leave_no_fd_or_rss_growth(certs):
    """100,000 keep-alive requests over TLS (pipelined in batches) and 2,000 connections,
    full handshakes, resumed ones and refused ones: the worker's fds and RSS come back."""
    from helpers import fd_count, settled_fd_count

    request = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"

    def batches(count, ctx):
        with tls_connect(srv, ctx) as s:
            for _ in range(count):
                s.sendall(request * 100)
                assert read_responses(s, 100) == [b"hello"] * 100

    def connections(count, ctx):
        session = None
        for i in range(count):
            if i % 4 == 3:  # clear text to the TLS port
                with socket.create_connection((HOST, srv.port), timeout=5) as s:
                    s.sendall(request)
                    while s.recv(4096):
                        pass
                continue
            _, _, new, _ = _get(srv, ctx, "/hello", session if i % 2 else None)
            session = session or new

    with serve_tls(WSGI, certs) as srv:
        ctx = certs.client_context()
        batches(20, ctx)  # warm-up
        connections(200, ctx)
        fds_before, rss_before = settled_fd_count(srv.pid), rss_kib(srv.pid)
        for _ in range(10):  # 10 connections x 100 batches x 100 requests
            batches(100, ctx)
        connections(2000, ctx)
        settled = wait_for(lambda: abs(fd_count(srv.pid) - fds_before) <= 2, 5.0)
        assert settled, f"worker fds {fds_before} -> {fd_count(srv.pid)}"
        growth = (rss_kib(srv.pid) - rss_before) / 1024
        assert UNDER_ASAN or growth < 10, (
            f"worker RSS grew {growth:.1f} MiB over 100,000 TLS requests"
        )
