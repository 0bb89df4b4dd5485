"""Response compression (--compress): each coding decoded by a stock decoder to the exact
body, the choice by Accept-Encoding q-values, every response left alone, Vary, ETag and
Content-Length, streamed responses, HTTP/2, --static files (on the fly and precompressed
siblings), a 1 GiB streamed body with bounded RSS, and a compressor failure that costs only
its response."""

import gzip
import http.client
import socket
import time
import zlib

import brotli
import pytest
import zstandard
from apps.compress_apps import body
from helpers import HOST, UNDER_ASAN, build_request, fetch, rss_kib, run_server, worker_pid
from test_gunicorn import gunicorn
from test_h2 import H2

CSS = b"body { color: #123456; margin: 0 auto; }\n" * 200


def decode(coding, data):
    if coding == "br":
        return brotli.decompress(data)
    if coding == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if coding == "gzip":
        return gzip.decompress(data)
    assert coding is None, coding
    return data


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("compress-static")
    (root / "plain.css").write_bytes(CSS)
    (root / "sib.css").write_bytes(CSS)
    (root / "sib.css.gz").write_bytes(gzip.compress(CSS))
    (root / "tiny.css").write_bytes(b"a{}\n")
    return root


@pytest.fixture(scope="module")
def wsgi(tree):
    with run_server("apps.compress_apps:wsgi", "--compress", "--static", f"/static={tree}") as srv:
        yield srv


@pytest.fixture(scope="module")
def threads():
    with run_server("apps.compress_apps:wsgi", "--compress", "--threads", "4") as srv:
        yield srv


@pytest.fixture(scope="module")
def asgi(tree):
    with run_server(
        "apps.compress_apps:asgi",
        "--compress",
        "--static",
        f"/static={tree}",
        "--no-static-precompressed",
    ) as srv:
        yield srv


@pytest.fixture(params=["wsgi", "threads", "asgi"])
def srv(request):
    return request.getfixturevalue(request.param)


def get(srv, target, accept="br", method="GET", headers=()):
    hs = list(headers)
    if accept is not None:
        hs.append(("Accept-Encoding", accept))
    return fetch(srv.port, method, target, headers=hs)


# ---- what comes out decodes to the body ------------------------------------------------


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip"])
@pytest.mark.parametrize("route", ["text", "json"])
def test_each_coding_decodes_to_the_exact_body(srv, coding, route):
    r = get(srv, f"/{route}/20000", accept=coding)
    assert r.status == 200
    assert r.header("Content-Encoding") == coding
    # A body that came whole with its head: compressed at once, sent with its length.
    assert r.header("Content-Length") == str(len(r.body))
    assert not r.has_header("Transfer-Encoding")
    assert "accept-encoding" in r.tokens("Vary")
    assert len(r.body) < 20000 // 4
    assert decode(coding, r.body) == body(20000)


@pytest.mark.parametrize("route", ["stream/4096/20", "sized/4096/20", "stream/70000/3"])
def test_streamed_responses_compressed(srv, route):
    r = get(srv, f"/{route}", accept="gzip")
    n, k = (int(p) for p in route.split("/")[1:])
    assert r.header("Content-Encoding") == "gzip"
    assert not r.has_header("Content-Length")
    assert decode("gzip", r.body) == body(n) * k


def test_a_streamed_piece_reaches_the_client_before_the_end(wsgi):
    """Each piece the application flushes is flushed by the compressor too: the first
    chunk on the wire decodes to the first piece."""
    with socket.create_connection((HOST, wsgi.port), timeout=10) as sock:
        sock.sendall(build_request("GET", "/stream/4096/3", headers=[("Accept-Encoding", "gzip")]))
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        assert b"content-encoding: gzip" in head.lower()
        while b"\r\n" not in rest:
            rest += sock.recv(65536)
        size, rest = rest.split(b"\r\n", 1)
        size = int(size, 16)
        while len(rest) < size:
            rest += sock.recv(65536)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert d.decompress(rest[:size]) == body(4096)


# ---- the choice ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accept, coding",
    [
        ("gzip;q=0.5, br;q=0.8, zstd;q=0.1", "br"),
        ("gzip, zstd;q=0.9", "gzip"),
        ("br;q=0, gzip;q=0.001", "gzip"),
        ("zstd, gzip", "zstd"),
        ("*", "zstd"),  # at equal weight zstd, then br, then gzip
        ("gzip, deflate, br, zstd", "zstd"),  # what browsers send
        ("gzip, deflate, br", "br"),
        ("*;q=0.5, gzip", "gzip"),
        ("GZIP", "gzip"),
        ("identity", None),
        ("", None),
        (None, None),
        ("br;q=0, zstd;q=0, gzip;q=0", None),
        ("gzip;q=1.5", None),  # not a qvalue: the element is ignored
        ("identity;q=0", None),  # nothing acceptable: identity beats a 406
    ],
)
def test_q_values_choose_the_coding(wsgi, accept, coding):
    r = get(wsgi, "/text/5000", accept=accept)
    assert r.status == 200
    assert r.header("Content-Encoding") == coding
    assert "accept-encoding" in r.tokens("Vary")
    if coding is None:
        assert r.header("Content-Length") == "5000"
    assert decode(coding, r.body) == body(5000)


def test_identity_refused_compresses_even_a_small_body(wsgi):
    r = get(wsgi, "/text/100", accept="gzip, identity;q=0")
    assert r.header("Content-Encoding") == "gzip"
    assert decode("gzip", r.body) == body(100)
    r = get(wsgi, "/text/100", accept="gzip")
    assert not r.has_header("Content-Encoding")
    assert r.header("Content-Length") == "100" and r.body == body(100)


# ---- what is left alone ----------------------------------------------------------------


@pytest.mark.parametrize(
    "target, method, status, encoding",
    [
        ("/png/20000", "GET", 200, None),  # not a compressed type
        ("/text/1000", "GET", 200, None),  # below --compress-min-size (1024)
        ("/stream/100/50", "GET", 200, None),  # a trickle of small pieces
        ("/sse/4096/3", "GET", 200, None),  # events are never held nor compressed
        ("/head/Content-Encoding?value=identity", "GET", 200, "identity"),  # the app's
        ("/head/Content-Encoding?value=gzip", "GET", 200, "gzip"),  # already encoded
        ("/head/Cache-Control?value=public%2C%20no-transform", "GET", 200, None),
        ("/head/Content-Range?value=bytes%200-4095%2F9000", "GET", 206, None),
        ("/status/204", "GET", 204, None),
        ("/status/304", "GET", 304, None),
        ("/text/20000", "HEAD", 200, None),
    ],
)
def test_responses_left_alone(srv, target, method, status, encoding):
    r = get(srv, target, accept="br, gzip, zstd", method=method)
    assert r.status == status
    assert r.header("Content-Encoding") == encoding
    if status == 200 and method == "GET" and "/stream/" not in target and "/sse/" not in target:
        assert r.header("Content-Length") == str(len(r.body))
    if target.startswith("/sse/"):
        assert r.body == body(4096) * 3
    if method == "HEAD":
        assert r.header("Content-Length") == "20000" and r.body == b""


# ---- the head --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vary, expected",
    [
        ("Cookie", ["Cookie, Accept-Encoding"]),
        ("accept-encoding", ["accept-encoding"]),
        ("Cookie, Accept-Encoding", ["Cookie, Accept-Encoding"]),
        ("*", ["*"]),
    ],
)
def test_vary_merged_not_duplicated(wsgi, vary, expected):
    r = get(wsgi, f"/head/Vary?value={vary.replace(' ', '%20')}", accept="gzip")
    assert r.header("Content-Encoding") == "gzip"
    assert r.header_all("Vary") == expected


@pytest.mark.parametrize(
    "etag, accept, expected",
    [
        ('"v1"', "gzip", 'W/"v1"'),  # the body changed: only a weak validator holds
        ('W/"v1"', "gzip", 'W/"v1"'),
        ('"v1"', "identity", '"v1"'),  # sent as it is: the strong one stays
    ],
)
def test_etag_made_weak_when_the_body_changes(srv, etag, accept, expected):
    r = get(srv, f"/head/ETag?value={etag}", accept=accept)
    assert r.header("ETag") == expected
    assert decode(r.header("Content-Encoding"), r.body) == body(4096)


# ---- HTTP/2 ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["wsgi", "asgi"])
def test_http2_streams_compressed(request, name):
    srv = request.getfixturevalue(name)
    with H2(srv.port) as c:
        asks = [("zstd", "/text/30000"), ("br", "/stream/8192/8"), ("identity", "/text/30000")]
        sids = {
            c.request(path, headers=[("accept-encoding", coding)]): coding for coding, path in asks
        }
        wants = [body(30000), body(8192) * 8, body(30000)]
        for (sid, coding), expected in zip(sids.items(), wants, strict=True):
            coding = None if coding == "identity" else coding
            r = c.response(sid)
            assert r["status"] == 200
            assert r["headers"].get("content-encoding") == coding
            assert "accept-encoding" in r["headers"]["vary"].lower()
            if coding == "br":  # streamed: no length
                assert "content-length" not in r["headers"]
            elif coding:  # whole: the compressed length
                assert r["headers"]["content-length"] == str(len(r["body"]))
            else:
                assert r["headers"]["content-length"] == str(len(expected))
            assert decode(coding, r["body"]) == expected


# ---- static files ----------------------------------------------------------------------


def test_static_file_compressed_on_the_fly(wsgi):
    r = get(wsgi, "/static/plain.css", accept="br")
    assert r.status == 200 and r.header("Content-Encoding") == "br"
    assert brotli.decompress(r.body) == CSS
    assert r.header("ETag").startswith('W/"')
    assert r.header_all("Vary") == ["Accept-Encoding"]
    assert not r.has_header("Content-Length")
    r = get(wsgi, "/static/plain.css", accept=None)
    assert r.body == CSS and r.header("Content-Length") == str(len(CSS))
    assert r.header("ETag").startswith('"')
    r = get(wsgi, "/static/tiny.css", accept="br")  # below the minimum size
    assert not r.has_header("Content-Encoding") and r.body == b"a{}\n"
    weak = get(wsgi, "/static/plain.css", accept="br").header("ETag")
    r = get(wsgi, "/static/plain.css", accept="br", headers=[("If-None-Match", weak)])
    assert r.status == 304  # the weak comparison: revalidation still works
    r = get(wsgi, "/static/plain.css", accept="gzip", headers=[("Range", "bytes=0-9")])
    assert r.status == 206 and r.body == CSS[:10] and not r.has_header("Content-Encoding")


def test_files_the_application_sends_compressed(srv, tree):
    """wsgi.file_wrapper and http.response.pathsend go out with sendfile uncompressed;
    compressed, the file is read and compressed instead."""
    r = get(srv, f"/file?path={tree / 'plain.css'}", accept="gzip")
    assert r.header("Content-Encoding") == "gzip" and not r.has_header("Content-Length")
    assert gzip.decompress(r.body) == CSS
    r = get(srv, f"/file?path={tree / 'plain.css'}", accept="identity")
    assert r.body == CSS and r.header("Content-Length") == str(len(CSS))


def test_static_precompressed_sibling_preferred(wsgi):
    r = get(wsgi, "/static/sib.css", accept="gzip")
    assert r.header("Content-Encoding") == "gzip"
    assert r.header("Content-Length") == str(len(r.body))  # the sibling, sent as a file
    assert r.header("ETag").endswith('-gz"') and not r.header("ETag").startswith("W/")
    assert gzip.decompress(r.body) == CSS
    assert r.header_all("Vary") == ["Accept-Encoding"]


def test_no_static_precompressed_ignores_siblings(asgi):
    r = get(asgi, "/static/sib.css", accept="gzip")
    assert r.header("Content-Encoding") == "gzip"
    assert not r.has_header("Content-Length")  # compressed on the fly, not the sibling
    assert not r.header("ETag").endswith('-gz"')
    assert gzip.decompress(r.body) == CSS


# ---- a long stream, a failing compressor -----------------------------------------------


def test_one_gib_streamed_with_bounded_rss(wsgi):
    # Under ASan the client's side (decoding and checking every byte) is much slower:
    # 128 MiB show the same bound there.
    mib = 128 if UNDER_ASAN else 1024
    pid = worker_pid(wsgi)
    get(wsgi, "/stream/65536/16", accept="zstd")  # warm up the pieces' allocations
    before = rss_kib(pid)
    conn = http.client.HTTPConnection(HOST, wsgi.port, timeout=30)
    conn.request("GET", f"/big/{mib}", headers={"Accept-Encoding": "zstd"})
    resp = conn.getresponse()
    assert resp.getheader("Content-Encoding") == "zstd"
    # Decoded 1 MiB at a time: a few KiB of this stream decode to hundreds of MiB.
    reader = zstandard.ZstdDecompressor().stream_reader(resp)
    total, crc, peak = 0, 0, before
    started = time.monotonic()
    while out := reader.read(1 << 20):
        crc = zlib.crc32(out, crc)
        if (total + len(out)) >> 26 != total >> 26:  # every 64 MiB
            peak = max(peak, rss_kib(pid))
        total += len(out)
    conn.close()
    assert total == mib << 20
    piece, expected = body(64 * 1024), 0
    for _ in range(16 * mib):
        expected = zlib.crc32(piece, expected)
    assert crc == expected
    assert time.monotonic() - started < (120 if UNDER_ASAN else 30)
    assert peak - before < (200 if UNDER_ASAN else 40) * 1024, (before, peak)


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def failing(request):
    # Set through the environment, as a deployment would.
    env = {"PYSERVER_COMPRESS": "1", "PYSERVER_COMPRESS_FAIL_AFTER": "200000"}
    with run_server(f"apps.compress_apps:{request.param}", env=env) as srv:
        yield srv


def test_compressor_failure_costs_only_its_response(failing):
    conn = http.client.HTTPConnection(HOST, failing.port, timeout=10)
    conn.request("GET", "/stream/65536/16", headers={"Accept-Encoding": "gzip"})
    resp = conn.getresponse()
    assert resp.getheader("Content-Encoding") == "gzip"
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()
    r = get(failing, "/text/20000", accept="gzip")  # the server serves on
    assert decode("gzip", r.body) == body(20000)
    with H2(failing.port) as c:
        bad = c.request("/stream/65536/16", headers=[("accept-encoding", "br")])
        assert c.response(bad)["reset"] is not None
        good = c.request("/text/20000", headers=[("accept-encoding", "br")])
        assert brotli.decompress(c.response(good)["body"]) == body(20000)
    assert "response compression failed" in failing.log()


def test_gunicorn_worker_compresses_with_config_kwargs():
    with gunicorn(
        "apps.compress_apps:wsgi", workers=1, worker="apps.compress_worker.CompressWorker"
    ) as g:
        r = fetch(g.port, "GET", "/text/500", headers=[("Accept-Encoding", "zstd")])
        assert r.header("Content-Encoding") == "zstd"
        assert decode("zstd", r.body) == body(500)
        r = fetch(g.port, "GET", "/json/5000", headers=[("Accept-Encoding", "zstd")])
        assert not r.has_header("Content-Encoding")  # not in its compress_types
