"""TLS for deployments without a proxy in front: several certificates chosen by the name a
client sends (SNI), renewed together on HUP; Strict-Transport-Security (--hsts) on TLS
responses; a plain-HTTP listener that redirects to https (--redirect-http).

One server for the module (a single process, so that HUP re-executes it on the same
sockets): four certificate pairs (the default for localhost, a.test, b.test, *.w.test, all
signed by the test CA), optional client certificates, --hsts, a redirect listener, and a
unix-socket bind that stays plain. The HUP test runs last: it renews a.test's certificate.
"""

import os
import shutil
import signal
import socket
import ssl

import httpx
import pytest
from helpers import HOST, free_port, parse_response, raw_request, run_cli, run_server, wait_for
from test_tls import BROKEN_PEM, OPENSSL, WSGI, _make_cert

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI")

NAMES = {"server": "DNS:localhost,IP:127.0.0.1", "a": "DNS:a.test", "b": "DNS:b.test",
         "w": "DNS:*.w.test"}  # fmt: skip
HSTS = "max-age=60; includeSubDomains"


class Site:
    """The module's certificates (live copies of a.test's, for the HUP test) and server."""

    def __init__(self, d):
        self.dir = d
        _make_cert(d, "ca", "/CN=pyserver SNI test CA")
        for name, san in NAMES.items():
            _make_cert(d, name, f"/CN={name}-cert", ca="ca", san=san)
        _make_cert(d, "a-renewed", "/CN=a-cert", ca="ca", san=NAMES["a"])
        _make_cert(d, "client", "/CN=alice", ca="ca", san="DNS:alice")
        shutil.copy(d / "a.pem", d / "live-a.pem")
        shutil.copy(d / "a.key", d / "live-a.key")
        self.redirect_port = free_port()
        self.uds = str(d / "plain.sock")

    def path(self, name):
        return str(self.dir / name)

    def args(self):
        args = []
        for name in ("server", "live-a", "b", "w"):
            args += ["--ssl-certfile", self.path(f"{name}.pem")]
            args += ["--ssl-keyfile", self.path(f"{name}.key")]
        return (*args, "--ssl-ca-certs", self.path("ca.pem"), "--ssl-cert-reqs", "optional",
                "--hsts", "60,includeSubDomains",
                "--redirect-http", f"{HOST}:{self.redirect_port}")  # fmt: skip

    def context(self, client_cert=False):
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if client_cert:
            ctx.load_cert_chain(self.path("client.pem"), self.path("client.key"))
        return ctx

    def der(self, name):
        return ssl.PEM_cert_to_DER_cert(open(self.path(f"{name}.pem")).read())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return Site(tmp_path_factory.mktemp("sni"))


@pytest.fixture(scope="module")
def srv(site):
    port = free_port()
    binds = ("-b", f"{HOST}:{port}", "-b", f"unix:{site.uds}")
    with run_server(WSGI, *binds, *site.args(), listen=False, port=port) as server:
        yield server


def handshake(srv, site, sni, target="/env", client_cert=False):
    """One request on a new TLS connection asking for `sni` (None: no SNI). The chain is
    verified, not the name (the default certificate answers names it does not hold): the
    callers compare the certificate itself. Returns (peer certificate DER, response bytes)."""
    ctx = site.context(client_cert)
    ctx.check_hostname = False
    with socket.create_connection((HOST, srv.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: {sni or 'x'}\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith((b"}", b"own", b"hello")):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return s.getpeercert(binary_form=True), data


# ---- certificates by name ----


@pytest.mark.parametrize(
    "sni, cert",
    [("a.test", "a"), ("B.Test", "b"), ("x.w.test", "w"), ("localhost", "server"),
     ("unknown.test", "server"), ("deep.x.w.test", "server"), (None, "server")],
)  # fmt: skip
def test_certificate_chosen_by_server_name(srv, site, sni, cert):
    der, data = handshake(srv, site, sni)
    expected = site.der("live-a" if cert == "a" else cert)
    assert der == expected
    assert data.startswith(b"HTTP/1.1 200 ")


def test_client_certificate_verified_whatever_the_name(srv, site):
    for sni in ("localhost", "b.test", "y.w.test"):
        _, data = handshake(srv, site, sni, client_cert=True)
        assert b'"SSL_CLIENT_VERIFY": "SUCCESS"' in data, data
        assert b'"SSL_CLIENT_S_DN": "CN=alice"' in data, data


def test_pairs_must_match_in_number(site):
    result = run_cli(
        WSGI, "--app-dir", "tests", "--ssl-certfile", site.path("a.pem"),
        "--ssl-certfile", site.path("b.pem"), "--ssl-keyfile", site.path("a.key"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "--ssl-keyfile" in line]
    assert len(lines) == 1 and "2 --ssl-certfile and 1 --ssl-keyfile" in lines[0]


def test_key_not_matching_its_certificate_is_one_line_naming_it(site):
    result = run_cli(
        WSGI, "--app-dir", "tests", "--ssl-certfile", site.path("a.pem"),
        "--ssl-keyfile", site.path("a.key"), "--ssl-certfile", site.path("b.pem"),
        "--ssl-keyfile", site.path("w.key"),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if "does not match" in line]
    assert len(lines) == 1 and site.path("w.key") in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_gunicorn_worker_takes_the_pairs_and_hsts_from_config_kwargs(site):
    # gunicorn's certfile/keyfile are one file each: the worker subclass's lists replace them.
    from test_gunicorn import gunicorn

    args = ("--certfile", site.path("server.pem"), "--keyfile", site.path("server.key"))
    worker = "apps.sni_worker.SniWorker"
    env = {"SNI_TEST_DIR": str(site.dir)}
    with gunicorn(WSGI, *args, worker=worker, workers=1, env=env) as g:
        der, data = handshake(g, site, "b.test", target="/hello")
        assert der == site.der("b")
        assert b"\r\nStrict-Transport-Security: max-age=30\r\n" in data, data
        assert handshake(g, site, "localhost", target="/hello")[0] == site.der("server")


# ---- HSTS ----


def test_hsts_on_tls_responses_over_http1_and_http2(srv, site):
    with httpx.Client(verify=site.context()) as client:
        r1 = client.get(f"https://localhost:{srv.port}/hello")
    with httpx.Client(verify=site.context(), http2=True) as client:
        r2 = client.get(f"https://localhost:{srv.port}/hello")
    assert r1.http_version == "HTTP/1.1" and r2.http_version == "HTTP/2"
    assert r1.headers.get_list("strict-transport-security") == [HSTS]
    assert r2.headers.get_list("strict-transport-security") == [HSTS]


def test_hsts_keeps_the_applications_own(srv, site):
    _, data = handshake(srv, site, "localhost", target="/own-sts")
    head = data.split(b"\r\n\r\n")[0].lower()
    assert head.count(b"strict-transport-security") == 1
    assert b"strict-transport-security: max-age=5" in head


def test_no_hsts_in_plain_http(srv, site):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(site.uds)
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    resp = parse_response(data)
    assert resp.status == 200 and resp.body == b"hello"
    assert "strict-transport-security" not in {name.lower() for name, _ in resp.headers}


def test_hsts_value_is_checked():
    result = run_cli(WSGI, "--hsts", "60,everything")
    assert result.returncode == 2
    assert "unknown HSTS directive 'everything'" in result.stderr


# ---- the redirect listener ----


def redirect(site, request):
    return parse_response(
        raw_request(site.redirect_port, request), "HEAD" if b"HEAD" in request[:5] else "GET"
    )


@pytest.mark.parametrize(
    "request_line, host, location",
    [("GET /path HTTP/1.1", "example.test", "https://example.test:{port}/path"),
     ("GET /a/b?x=1&y=%20 HTTP/1.1", "Example.Test:8080", "https://Example.Test:{port}/a/b?x=1&y=%20"),
     ("HEAD / HTTP/1.1", "[::1]:80", "https://[::1]:{port}/"),
     ("GET http://other.test/p?q HTTP/1.1", "ignored.test", "https://other.test:{port}/p?q")],
)  # fmt: skip
def test_redirect_get_is_301_to_https(srv, site, request_line, host, location):
    resp = redirect(site, f"{request_line}\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    assert resp.status == 301
    assert resp.header("location") == location.format(port=srv.port)
    assert resp.header("content-length") == "0"
    assert resp.header("strict-transport-security") is None  # plain HTTP: never HSTS


def test_redirect_post_is_308_and_its_body_is_not_read(srv, site):
    body = b"x" * 100000
    request = (b"POST /form?a=1 HTTP/1.1\r\nHost: example.test\r\nContent-Type: text/plain\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body  # fmt: skip
    resp = redirect(site, request)
    assert resp.status == 308
    assert resp.header("location") == f"https://example.test:{srv.port}/form?a=1"
    assert resp.header("connection") == "close"


def test_redirect_keeps_alive_between_requests(srv, site):
    one = b"GET /1 HTTP/1.1\r\nHost: h.test\r\n\r\n"
    two = b"GET /2 HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n"
    data = raw_request(site.redirect_port, one + two)
    assert data.count(b"HTTP/1.1 301 ") == 2
    assert f"Location: https://h.test:{srv.port}/2".encode() in data


@pytest.mark.parametrize(
    "raw",
    [b"GET / HTTP/1.1\r\nHost: bad host\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
     b"GET / HTTP/1.1\r\n\r\n",
     b"GET / HTTP/1.0\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: evil.test\rSet-Cookie: x\r\n\r\n",
     b"GET /a\x01b HTTP/1.1\r\nHost: a.test\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n"],
    ids=["space", "two-hosts", "no-host", "http10-no-host", "bare-cr", "control-in-target",
         "userinfo"],
)  # fmt: skip
def test_redirect_bad_request_is_400(srv, site, raw):
    data = raw_request(site.redirect_port, raw)
    assert data.startswith(b"HTTP/1.1 400 "), data
    assert b"Location" not in data


def test_redirect_listener_speaks_only_http1(srv, site):
    # Neither HTTP/2 with prior knowledge nor an h2c upgrade reaches the application.
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    data = raw_request(site.redirect_port, preface + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    assert data.startswith(b"HTTP/1.1 4") or data.startswith(b"HTTP/1.1 5"), data
    upgrade = (b"GET /hello HTTP/1.1\r\nHost: h.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")  # fmt: skip
    resp = redirect(site, upgrade)
    assert resp.status == 301 and resp.header("location") == f"https://h.test:{srv.port}/hello"


def test_redirect_listener_and_https_both_serve(srv, site):
    assert (
        redirect(site, b"GET / HTTP/1.1\r\nHost: x.test\r\nConnection: close\r\n\r\n").status == 301
    )
    _, data = handshake(srv, site, "localhost", target="/hello")
    assert data.startswith(b"HTTP/1.1 200 ")
    assert f"Listening on http://{HOST}:{site.redirect_port} (redirects to https)" in srv.log()


def test_redirect_needs_tls():
    result = run_cli(WSGI, "--redirect-http", f"{HOST}:{free_port()}")
    assert result.returncode == 2
    assert "need TLS" in result.stderr


# ---- HUP: every pair read again, a failed reload keeps them all ----


def test_hup_renews_one_certificate_and_keeps_the_others(srv, site):
    assert handshake(srv, site, "a.test")[0] == site.der("a")
    live_pem, live_key = site.dir / "live-a.pem", site.dir / "live-a.key"
    live_pem.write_text(BROKEN_PEM)
    os.kill(srv.pid, signal.SIGHUP)
    assert srv.wait_for_log("Not reloading: TLS: cannot load the certificate chain", 10)
    assert handshake(srv, site, "a.test")[0] == site.der("a")
    shutil.copy(site.path("a-renewed.pem"), live_pem)
    shutil.copy(site.path("a-renewed.key"), live_key)
    os.kill(srv.pid, signal.SIGHUP)
    renewed = site.der("a-renewed")
    assert wait_for(lambda: handshake(srv, site, "a.test")[0] == renewed, 20), srv.log_tail()
    assert handshake(srv, site, "b.test")[0] == site.der("b")
    assert handshake(srv, site, None)[0] == site.der("server")
