"""Proxy headers under gunicorn: forwarded_allow_ips, secure_scheme_headers (gunicorn's rule
for the scheme, with a 400 when its headers disagree) and X-Forwarded-For as the client (as
uvicorn's worker does)."""

import json
import socket

import pytest
from helpers import HOST, HTTPConn

pytest.importorskip("gunicorn.config")
from test_gunicorn import gunicorn  # noqa: E402 - after the skip when gunicorn is missing

APPS = {"wsgi": "apps.proxy_echo:app", "asgi": "apps.proxy_echo:asgi_app"}


@pytest.fixture(params=sorted(APPS))
def app(request):
    return APPS[request.param]


def connect(g):
    return HTTPConn(socket.create_connection((HOST, g.port), timeout=10))


def seen(conn, headers=()):
    """(scheme, client host) as the echo app saw them."""
    response = conn.request("GET", "/", headers=list(headers))
    assert response.status == 200, response
    data = json.loads(response.body)
    host = data["client"][0] if "client" in data else data["remote_addr"]
    return data["scheme"], host


def seen_once(g, headers=()):
    with connect(g) as conn:
        return seen(conn, headers)


def test_default_secure_scheme_headers_from_loopback(app):
    with gunicorn(app, workers=1) as g:
        assert seen_once(g) == ("http", "127.0.0.1")
        assert seen_once(g, [("X-Forwarded-Proto", "https")]) == ("https", "127.0.0.1")
        assert seen_once(g, [("X-Forwarded-Ssl", "on")]) == ("https", "127.0.0.1")
        assert seen_once(g, [("X-Forwarded-Protocol", "ssl")]) == ("https", "127.0.0.1")
        # gunicorn's rule: a table header with another value means http
        assert seen_once(g, [("X-Forwarded-Proto", "wss")]) == ("http", "127.0.0.1")
        headers = [("X-Forwarded-For", "203.0.113.5, 127.0.0.1"), ("X-Forwarded-Proto", "https")]
        assert seen_once(g, headers) == ("https", "203.0.113.5")


def test_conflicting_scheme_headers_are_a_400_and_the_worker_keeps_serving(app):
    with gunicorn(app, workers=1) as g:
        with connect(g) as conn:
            headers = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Ssl", "off")]
            response = conn.request("GET", "/", headers=headers)
            assert response.status == 400, response
            assert "close" in response.tokens("Connection"), response
            assert conn.wait_closed() is not None, "connection left open after the 400"
        with connect(g) as conn:
            headers = [("X-Forwarded-Proto", "http"), ("X-Forwarded-Proto", "https")]
            assert conn.request("GET", "/", headers=headers).status == 400
        for _ in range(3):
            assert seen_once(g, [("X-Forwarded-Proto", "https")]) == ("https", "127.0.0.1")
        assert "Booting worker" in g.log() and g.proc.poll() is None
        assert g.log().count(": secure scheme headers disagree") == 2, g.log()


def test_forwarded_allow_ips_excluding_loopback_ignores_the_headers(app):
    with gunicorn(app, "--forwarded-allow-ips", "10.0.0.1", workers=1) as g:
        headers = [("X-Forwarded-For", "203.0.113.5"), ("X-Forwarded-Proto", "https")]
        assert seen_once(g, headers) == ("http", "127.0.0.1")
        # nothing is checked for an untrusted peer: no 400 either
        headers = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Ssl", "off")]
        assert seen_once(g, headers) == ("http", "127.0.0.1")


def test_forwarded_allow_ips_star_and_networks(app):
    with gunicorn(app, "--forwarded-allow-ips", "*", workers=1) as g:
        assert seen_once(g, [("X-Forwarded-For", "198.51.100.1, 10.0.0.2")]) == (
            "http",
            "198.51.100.1",
        )
    with gunicorn(app, "--forwarded-allow-ips", "127.0.0.0/8,10.0.0.0/8", workers=1) as g:
        headers = [("X-Forwarded-For", "198.51.100.1, 10.0.0.2"), ("X-Forwarded-Ssl", "on")]
        assert seen_once(g, headers) == ("https", "198.51.100.1")


def test_custom_secure_scheme_headers_from_a_config_file(app):
    with gunicorn(app, "-c", "apps/gunicorn_proxy_conf.py", workers=1) as g:
        assert seen_once(g, [("X-Scheme", "secure")]) == ("https", "127.0.0.1")
        assert seen_once(g, [("X-Scheme", "SECURE")]) == ("http", "127.0.0.1")
        # not in this table: X-Forwarded-Proto says nothing
        assert seen_once(g, [("X-Forwarded-Proto", "https")]) == ("http", "127.0.0.1")
        assert seen_once(g, [("X-Scheme", "secure"), ("X-Forwarded-Ssl", "on")]) == (
            "https",
            "127.0.0.1",
        )
        with connect(g) as conn:
            headers = [("X-Scheme", "secure"), ("X-Forwarded-Ssl", "off")]
            assert conn.request("GET", "/", headers=headers).status == 400
