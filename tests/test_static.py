"""Static files served by the core (--static PREFIX=DIR): headers and statuses against httpx,
curl and raw sockets, over HTTP/1.1 and HTTP/2, for WSGI and ASGI apps; traversal attempts;
misses reaching the application or answered 404 (--static-strict); the access log; a file
replaced or truncated while it is sent; many concurrent downloads with bounded RSS; Django
admin's CSS from `collectstatic` output; the options' errors."""

import email.utils
import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import brotli
import httpx
import pytest
import zstandard
from helpers import (
    HOST,
    TESTS_DIR,
    UNDER_ASAN,
    build_request,
    fd_count,
    rss_kib,
    run_cli,
    run_server,
    settled_fd_count,
    wait_for,
    worker_pid,
)

APPS = {"wsgi": "apps.basic:app", "asgi": "apps.asgi_basic:app"}
HELLO = b"hello static file\n"
SECRET = b"the secret outside the mount\n"
CSS = b"body { color: #123456; }\n" * 40
MIB = 1 << 20
ETAG = re.compile(r'^"[0-9a-f]+-[0-9a-f]+-[0-9a-f]+(-gz|-br)?"$')


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """root/ is mounted at /static; secret.txt sits beside it."""
    base = tmp_path_factory.mktemp("static")
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (base / "secret.txt").write_bytes(SECRET)
    (root / "hello.txt").write_bytes(HELLO)
    (root / "sub" / "index.html").write_bytes(b"<p>index</p>\n")
    (root / "style.css").write_bytes(CSS)
    (root / "style.css.gz").write_bytes(gzip.compress(CSS))
    # Real encodings: httpx decodes br and zstd once brotli and zstandard are installed.
    (root / "style.css.br").write_bytes(brotli.compress(CSS))
    (root / "style.css.zst").write_bytes(zstandard.ZstdCompressor().compress(CSS))
    (root / "data.bin").write_bytes(os.urandom(MIB + 12345))
    (root / "empty.txt").write_bytes(b"")
    os.symlink(base / "secret.txt", root / "link_out")
    os.symlink("../secret.txt", root / "sub" / "rel_out")
    os.symlink("hello.txt", root / "link_in")
    return root


def static_server(tree, iface="wsgi", *extra):
    return run_server(
        APPS[iface], "--static", f"/static={tree}", "--static-max-age", "3600", *extra
    )


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def srv(request, tree):
    with static_server(tree, request.param) as server:
        server.iface = request.param
        yield server


@pytest.fixture(scope="module")
def strict(tree):
    with static_server(tree, "wsgi", "--static-strict") as server:
        yield server


def raw(port, data, timeout=5.0):
    """Sends data and reads to EOF (or the timeout)."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
    return b"".join(chunks)


def get(port, target, method="GET", headers=()):
    return raw(port, build_request(method, target, [*headers, ("Connection", "close")]))


def curl(*args):
    out = subprocess.run(
        ["curl", "-sS", "--max-time", "20", *args], capture_output=True, timeout=30, check=True
    )
    return out.stdout


# ---- headers and statuses ---------------------------------------------------------------


def test_get_has_every_header(srv, tree):
    st = (tree / "hello.txt").stat()
    r = httpx.get(f"{srv.url}/static/hello.txt")
    assert r.status_code == 200
    assert r.content == HELLO
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-length"] == str(len(HELLO))
    assert r.headers["last-modified"] == email.utils.formatdate(int(st.st_mtime), usegmt=True)
    assert ETAG.match(r.headers["etag"]), r.headers["etag"]
    assert f"{st.st_ino:x}-{st.st_size:x}-" in r.headers["etag"]
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["cache-control"] == "public, max-age=3600"
    assert r.headers["vary"] == "Accept-Encoding"
    assert "content-encoding" not in r.headers
    assert "date" in r.headers and "server" in r.headers


def test_content_types(srv):
    with httpx.Client(base_url=srv.url) as client:
        assert client.get("/static/style.css").headers["content-type"] == (
            "text/css; charset=utf-8"
        )
        assert client.get("/static/sub/index.html").headers["content-type"] == (
            "text/html; charset=utf-8"
        )
        assert client.get("/static/data.bin").headers["content-type"] == (
            "application/octet-stream"
        )


def test_big_file_intact_over_keep_alive(srv, tree):
    data = (tree / "data.bin").read_bytes()
    with srv.connect() as conn:
        for _ in range(3):
            r = conn.request("GET", "/static/data.bin")
            assert r.status == 200 and r.body == data and not r.closes
            r = conn.request("GET", "/hello")  # the application, on the same connection
            assert r.status == 200 and r.body == b"hello world"


def test_empty_file(srv):
    r = httpx.get(f"{srv.url}/static/empty.txt")
    assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "0"


def test_curl_sees_the_same_headers(srv):
    head = curl("-D", "-", "-o", "/dev/null", f"{srv.url}/static/style.css").decode()
    assert head.startswith("HTTP/1.1 200 OK\r\n"), head
    assert f"Content-Length: {len(CSS)}\r\n" in head
    assert "Accept-Ranges: bytes\r\n" in head
    assert "Cache-Control: public, max-age=3600\r\n" in head


def test_if_none_match_gives_304(srv):
    with httpx.Client(base_url=srv.url) as client:
        etag = client.get("/static/hello.txt").headers["etag"]
        r = client.get("/static/hello.txt", headers={"If-None-Match": etag})
        assert r.status_code == 304 and r.content == b""
        assert r.headers["etag"] == etag
        assert "content-length" not in r.headers
        r = client.get("/static/hello.txt", headers={"If-None-Match": f'"other", W/{etag}'})
        assert r.status_code == 304
        r = client.get("/static/hello.txt", headers={"If-None-Match": '"other"'})
        assert r.status_code == 200 and r.content == HELLO


def test_if_modified_since_gives_304(srv, tree):
    mtime = int((tree / "hello.txt").stat().st_mtime)
    with httpx.Client(base_url=srv.url) as client:
        same = email.utils.formatdate(mtime, usegmt=True)
        r = client.get("/static/hello.txt", headers={"If-Modified-Since": same})
        assert r.status_code == 304 and r.content == b""
        older = email.utils.formatdate(mtime - 10, usegmt=True)
        r = client.get("/static/hello.txt", headers={"If-Modified-Since": older})
        assert r.status_code == 200 and r.content == HELLO
    # curl's own conditional request
    out = curl("-o", "/dev/null", "-w", "%{http_code}", "-z", same, f"{srv.url}/static/hello.txt")
    assert out == b"304"


def test_if_match_and_if_unmodified_since_give_412(srv, tree):
    mtime = int((tree / "hello.txt").stat().st_mtime)
    with httpx.Client(base_url=srv.url) as client:
        etag = client.get("/static/hello.txt").headers["etag"]
        r = client.get("/static/hello.txt", headers={"If-Match": etag})
        assert r.status_code == 200 and r.content == HELLO
        r = client.get("/static/hello.txt", headers={"If-Match": '"other"'})
        assert r.status_code == 412 and r.content == b"" and r.headers["etag"] == etag
        r = client.get("/static/hello.txt", headers={"If-Match": f"W/{etag}"})
        assert r.status_code == 412  # a strong comparison
        older = email.utils.formatdate(mtime - 10, usegmt=True)
        r = client.get("/static/hello.txt", headers={"If-Unmodified-Since": older})
        assert r.status_code == 412
        same = email.utils.formatdate(mtime, usegmt=True)
        r = client.get("/static/hello.txt", headers={"If-Unmodified-Since": same})
        assert r.status_code == 200 and r.content == HELLO


def test_single_range_gives_206(srv, tree):
    data = (tree / "data.bin").read_bytes()
    size = len(data)
    with httpx.Client(base_url=srv.url) as client:
        r = client.get("/static/data.bin", headers={"Range": "bytes=100-199"})
        assert r.status_code == 206 and r.content == data[100:200]
        assert r.headers["content-range"] == f"bytes 100-199/{size}"
        assert r.headers["content-length"] == "100"
        r = client.get("/static/data.bin", headers={"Range": "bytes=-10"})
        assert r.status_code == 206 and r.content == data[-10:]
        r = client.get("/static/data.bin", headers={"Range": f"bytes={size - 5}-"})
        assert r.status_code == 206 and r.content == data[-5:]
        # several ranges: the whole file
        r = client.get("/static/data.bin", headers={"Range": "bytes=0-1,5-6"})
        assert r.status_code == 200 and r.content == data
    out = curl("-r", "1000-1999", f"{srv.url}/static/data.bin")
    assert out == data[1000:2000]


def test_unsatisfiable_range_gives_416(srv, tree):
    size = (tree / "data.bin").stat().st_size
    r = httpx.get(f"{srv.url}/static/data.bin", headers={"Range": f"bytes={size}-"})
    assert r.status_code == 416 and r.content == b""
    assert r.headers["content-range"] == f"bytes */{size}"


def test_precompressed_sibling_by_accept_encoding(srv, tree):
    with httpx.Client(base_url=srv.url) as client:

        def fetch(accept):
            # httpx decodes what it knows: read the raw bytes
            with client.stream(
                "GET", "/static/style.css", headers={"Accept-Encoding": accept}
            ) as r:
                return r, b"".join(r.iter_raw())

        r, body = fetch("gzip, br")
        assert (
            r.headers["content-encoding"] == "br" and body == (tree / "style.css.br").read_bytes()
        )
        assert r.headers["vary"] == "Accept-Encoding"
        assert r.headers["content-type"] == "text/css; charset=utf-8"
        assert r.headers["etag"].endswith('-br"')
        r, body = fetch("gzip")
        assert r.headers["content-encoding"] == "gzip" and gzip.decompress(body) == CSS
        assert r.headers["etag"].endswith('-gz"')
        r, body = fetch("identity")
        assert "content-encoding" not in r.headers and body == CSS
        assert r.headers["vary"] == "Accept-Encoding"
        r, body = fetch("br;q=0, gzip;q=0.5")
        assert r.headers["content-encoding"] == "gzip"
        r, body = fetch("gzip, zstd")
        assert (
            r.headers["content-encoding"] == "zstd"
            and body == (tree / "style.css.zst").read_bytes()
        )
        assert r.headers["etag"].endswith('-zst"')
        r, body = fetch("br;level=5, gzip;q=0.1")  # a parameter other than q: br is ignored
        assert r.headers["content-encoding"] == "gzip"
    # curl decodes the gzip sibling it asked for
    out = curl("--compressed", "-H", "Accept-Encoding: gzip", f"{srv.url}/static/style.css")
    assert out == CSS


def test_head_has_no_body_and_keeps_the_connection(srv):
    with srv.connect() as conn:
        r = conn.request("HEAD", "/static/hello.txt")
        assert r.status == 200 and r.header("Content-Length") == str(len(HELLO))
        assert r.header("ETag") and r.body == b""
        r = conn.request("GET", "/static/hello.txt")  # the next response starts right after
        assert r.status == 200 and r.body == HELLO


def test_index_files_are_off(srv):
    for target in ("/static/sub/", "/static/sub", "/static/", "/static"):
        r = httpx.get(srv.url + target)
        assert r.status_code == 404 and r.content == b"not found", target  # the application's
    assert httpx.get(f"{srv.url}/static/sub/index.html").content == b"<p>index</p>\n"


# ---- misses and methods ---------------------------------------------------------------


def test_miss_falls_through_to_the_app(srv):
    r = httpx.get(f"{srv.url}/static/nope.txt")
    assert r.status_code == 404 and r.content == b"not found"
    r = httpx.post(f"{srv.url}/static/hello.txt", content=b"x")  # not GET or HEAD: the app's
    assert r.status_code == 404 and r.content == b"not found"
    assert httpx.get(f"{srv.url}/hello").content == b"hello world"


def test_strict_answers_404_and_405(strict):
    r = httpx.get(f"{strict.url}/static/nope.txt")
    assert r.status_code == 404 and r.content == b"Not Found\n"
    r = httpx.post(f"{strict.url}/static/hello.txt", content=b"x")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    r = httpx.get(f"{strict.url}/static/sub/")
    assert r.status_code == 404 and r.content == b"Not Found\n"
    assert httpx.get(f"{strict.url}/static/hello.txt").content == HELLO
    assert httpx.get(f"{strict.url}/hello").content == b"hello world"  # outside the mount


# ---- traversal ----------------------------------------------------------------------------

TRAVERSALS = [
    "/static/../secret.txt",
    "/static/%2e%2e/secret.txt",
    "/static/%2E%2E/secret.txt",
    "/static/..%2fsecret.txt",
    "/static/%2e%2e%2fsecret.txt",
    "/static/sub/../../secret.txt",
    "/static/sub/%2e%2e/%2e%2e/secret.txt",
    "/static/link_out",
    "/static/sub/rel_out",
    "/static/hello.txt%00",
    "/static/%00/../secret.txt",
    "/static/..\\secret.txt",
    "/static/%5c..%5csecret.txt",
    "/static//../secret.txt",
    "/static/./../secret.txt",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_never_serves_outside(srv, target):
    out = get(srv.port, target)
    assert SECRET not in out, (target, out)
    status = int(out.split(b" ", 2)[1])
    assert status in (400, 404), (target, out[:200])


def test_symlink_inside_the_tree_and_server_unharmed(srv):
    r = httpx.get(f"{srv.url}/static/link_in")
    assert r.status_code in (200, 404)  # served under openat2, refused by the O_NOFOLLOW walk
    if r.status_code == 200:
        assert r.content == HELLO
    assert httpx.get(f"{srv.url}/static/hello.txt").content == HELLO


# ---- HTTP/2 -------------------------------------------------------------------------------


def test_http2_prior_knowledge(srv, tree):
    url = f"{srv.url}/static/data.bin"
    data = (tree / "data.bin").read_bytes()
    head = curl("--http2-prior-knowledge", "-D", "-", "-o", "/dev/null", url).decode()
    assert head.startswith("HTTP/2 200"), head
    assert f"content-length: {len(data)}\r\n" in head
    assert "accept-ranges: bytes\r\n" in head and "etag: " in head
    assert curl("--http2-prior-knowledge", url) == data
    assert curl("--http2-prior-knowledge", "-r", "10-19", url) == data[10:20]
    out = curl("--http2-prior-knowledge", "-w", "%{http_code}", f"{srv.url}/static/nope.txt")
    assert out == b"not found404"
    # several streams of one connection, static and application ones (nghttp: curl 7.88
    # fails a second request over a prior-knowledge connection, to any server path)
    urls = [url, f"{srv.url}/hello", f"{srv.url}/static/hello.txt", f"{srv.url}/static/nope"]
    out = subprocess.run(["nghttp", "-s", *urls], capture_output=True, timeout=30).stdout
    stats = out[out.rindex(b"***** Statistics *****") :].decode()
    for code, size, path in [
        (200, "1M", "/static/data.bin"),
        (200, "11", "/hello"),
        (200, str(len(HELLO)), "/static/hello.txt"),
        (404, "9", "/static/nope"),
    ]:
        assert re.search(rf" {code} +{size} {path}\n", stats), stats


def test_h2load_many_streams(srv):
    out = subprocess.run(
        ["h2load", "-n", "400", "-c", "4", "-m", "20", f"{srv.url}/static/style.css"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "400 succeeded" in out and "0 failed" in out, out
    assert httpx.get(f"{srv.url}/static/hello.txt").content == HELLO


# ---- the access log -----------------------------------------------------------------------


def test_static_hits_are_in_the_access_log(srv):
    marker = f"/static/hello.txt?log={srv.iface}"
    assert httpx.get(srv.url + marker).status_code == 200
    line = f'"GET {marker} HTTP/1.1" 200 {len(HELLO)} '
    assert srv.wait_for_log(line), srv.log_tail()
    curl("--http2-prior-knowledge", "-o", "/dev/null", srv.url + marker + "&h2")
    assert srv.wait_for_log(f'"GET {marker}&h2 HTTP/2.0" 200 {len(HELLO)} '), srv.log_tail()
    r = httpx.get(srv.url + marker + "&r", headers={"Range": "bytes=0-3"})
    assert r.status_code == 206
    assert srv.wait_for_log(f'"GET {marker}&r HTTP/1.1" 206 4 '), srv.log_tail()


def access_line(server, token):
    assert server.wait_for_log(token), server.log_tail()
    return next(line for line in server.log().splitlines() if token in line)


@pytest.mark.parametrize("iface", ["wsgi", "asgi"])
def test_static_hit_logs_the_forwarded_client(tree, iface):
    """The access line of a static hit names the client a trusted proxy forwarded, as an app
    request's does: X-Forwarded-For from a peer in --forwarded-allow-ips, and a PROXY header's
    client (that client a trusted proxy too: its X-Forwarded-For then names the client)."""
    token = f"xff-{iface}"
    with static_server(tree, iface, "--forwarded-allow-ips", "127.0.0.1") as srv:
        with srv.connect() as conn:
            r = conn.request(
                "GET", f"/static/hello.txt?{token}", headers=[("X-Forwarded-For", "192.0.2.44")]
            )
            assert r.status == 200 and r.body == HELLO
            r = conn.request(
                "GET", f"/hello?{token}-app", headers=[("X-Forwarded-For", "192.0.2.45")]
            )
            assert r.status == 200
        assert "192.0.2.44:0 - " in access_line(srv, f"?{token} "), srv.log_tail()
        assert "192.0.2.45:0 - " in access_line(srv, f"?{token}-app "), srv.log_tail()
    with static_server(
        tree, iface, "--forwarded-allow-ips", "127.0.0.1,192.0.2.8", "--proxy-protocol"
    ) as srv:
        for src, xff, want in (
            ("192.0.2.7", (), "192.0.2.7:56324 - "),
            ("192.0.2.8", [("X-Forwarded-For", "198.51.100.9")], "198.51.100.9:0 - "),
        ):
            head = f"PROXY TCP4 {src} 198.51.100.1 56324 443\r\n".encode()
            target = f"/static/hello.txt?pp-{src}"
            out = raw(
                srv.port, head + build_request("GET", target, [*xff, ("Connection", "close")])
            )
            assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(HELLO), out
            assert want in access_line(srv, f"?pp-{src} "), srv.log_tail()


# ---- files changing under a response ------------------------------------------------------


def paused_download(port, target, size, received, paused, resume):
    """Reads 256 KiB of the response, waits for resume, then reads the rest to EOF."""
    sock = socket.create_connection((HOST, port), timeout=20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.sendall(build_request("GET", target, [("Connection", "close")]))
    try:
        while chunk := sock.recv(65536):
            received.append(len(chunk))
            if sum(received) > 256 * 1024 and not paused.is_set():
                paused.set()
                resume.wait(20)
    except OSError:
        pass
    finally:
        sock.close()


@pytest.mark.parametrize("how", ["rename", "truncate"])
def test_file_replaced_while_sent(srv, tree, how):
    path = tree / f"changing-{how}.bin"
    size = 32 * MIB
    path.write_bytes(b"a" * size)
    received, paused, resume = [], threading.Event(), threading.Event()
    args = (srv.port, f"/static/{path.name}", size, received, paused, resume)
    t = threading.Thread(target=paused_download, args=args)
    t.start()
    try:
        assert paused.wait(10)
        if how == "rename":
            tmp = tree / "replacement.tmp"
            tmp.write_bytes(b"b" * 1000)
            os.replace(tmp, path)
        else:
            with open(path, "r+b") as f:
                f.truncate(1000)
    finally:
        resume.set()
    t.join(30)
    assert not t.is_alive()
    total = sum(received)
    if how == "rename":  # the open file keeps its old contents: the whole old response
        assert total > size
    else:  # the announced length cannot be honoured: the connection ends early
        assert total < size
    # the worker is still there and serving
    assert httpx.get(f"{srv.url}/static/hello.txt").content == HELLO
    r = httpx.get(f"{srv.url}/static/{path.name}")
    assert r.status_code == 200 and len(r.content) == 1000


# ---- many downloads ---------------------------------------------------------------------


@pytest.mark.serial
def test_1000_concurrent_downloads_keep_rss_bounded(tree):
    big = tree / "big10.bin"
    big.write_bytes(os.urandom(10 * MIB))
    with static_server(tree, "wsgi") as server:
        pid = worker_pid(server)
        httpx.get(f"{server.url}/static/hello.txt")  # warm
        baseline = peak = rss_kib(pid)
        proc = subprocess.Popen(
            ["h2load", "--h1", "-n", "1000", "-c", "1000", f"{server.url}/static/big10.bin"],
            stdout=subprocess.PIPE,
            text=True,
        )
        while proc.poll() is None:
            peak = max(peak, rss_kib(pid))
            time.sleep(0.05)
        out = proc.stdout.read()
        assert "1000 succeeded" in out, out
        total = int(re.search(r"traffic: \S+ \((\d+)\) total", out).group(1))
        assert total >= 1000 * 10 * MIB, out
        growth_mib = (peak - baseline) / 1024
        print(f"RSS {baseline} KiB -> peak {peak} KiB over {total} bytes")
        if not UNDER_ASAN:
            assert growth_mib < 48, f"RSS {baseline} KiB -> peak {peak} KiB"
        assert httpx.get(f"{server.url}/static/hello.txt").content == HELLO


# ---- Django admin from collectstatic ------------------------------------------------------


def test_django_admin_css_from_collectstatic(tmp_path):
    pytest.importorskip("django")
    root = tmp_path / "staticfiles"
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR), "STATIC_ROOT": str(root)}
    env["DJANGO_SETTINGS_MODULE"] = "apps.djangoproj.static_settings"
    subprocess.run(
        [sys.executable, "-m", "django", "collectstatic", "--noinput", "-v", "0"],
        env=env,
        check=True,
        timeout=120,
    )
    css = root / "admin" / "css" / "base.css"
    assert css.is_file()
    spec = "apps.djangoproj.wsgi:application"
    with run_server(spec) as plain:  # without --static Django answers 404
        assert httpx.get(f"{plain.url}/static/admin/css/base.css").status_code == 404
    with run_server(spec, "--static", f"/static/={root}") as srv:
        r = httpx.get(f"{srv.url}/static/admin/css/base.css")
        assert r.status_code == 200 and r.content == css.read_bytes()
        assert r.headers["content-type"] == "text/css; charset=utf-8"
        js = httpx.get(f"{srv.url}/static/admin/js/core.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]
        assert httpx.get(f"{srv.url}/static/admin/css/nope.css").status_code == 404


# ---- options ------------------------------------------------------------------------------


def test_bad_static_dir_is_a_clear_error(tmp_path):
    missing = tmp_path / "missing"
    result = run_cli("apps.basic:app", "--static", f"/static={missing}")
    assert result.returncode == 1
    assert f"error: --static /static={missing}: no such directory" in result.stderr
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = run_cli("apps.basic:app", "--static", f"/static={afile}")
    assert result.returncode == 1 and "not a directory" in result.stderr
    for bad in ("static=dir", "/a/../b=dir", "/static"):
        result = run_cli("apps.basic:app", "--static", bad)
        assert result.returncode == 2 and "--static" in result.stderr, result.stderr


def test_options_from_env_and_config_file(tree, tmp_path):
    env = {
        "PYSERVER_STATIC": f"/files={tree} /other={tree / 'sub'}",
        "PYSERVER_STATIC_STRICT": "true",
        "PYSERVER_STATIC_MAX_AGE": "60",
    }
    with run_server("apps.basic:app", env=env) as srv:
        r = httpx.get(f"{srv.url}/files/hello.txt")
        assert r.content == HELLO and r.headers["cache-control"] == "public, max-age=60"
        assert httpx.get(f"{srv.url}/other/index.html").content == b"<p>index</p>\n"
        assert httpx.get(f"{srv.url}/files/nope").content == b"Not Found\n"
    conf = tmp_path / "conf.py"
    conf.write_text(f"static = ['/c={tree}']\nstatic_max_age = 7\n")
    with run_server("apps.basic:app", "-c", str(conf)) as srv:
        r = httpx.get(f"{srv.url}/c/hello.txt")
        assert r.content == HELLO and r.headers["cache-control"] == "public, max-age=7"
        assert httpx.get(f"{srv.url}/c/nope").content == b"not found"


def test_relative_dir_and_no_cache_control(tree):
    with run_server("apps.basic:app", "--static", "/s=root", cwd=tree.parent) as srv:
        r = httpx.get(f"{srv.url}/s/hello.txt")
        assert r.content == HELLO and "cache-control" not in r.headers


def test_under_a_master_with_workers(tree):
    with run_server("apps.basic:app", "-w", "2", "--static", f"/static={tree}") as srv:
        for _ in range(10):
            assert httpx.get(f"{srv.url}/static/hello.txt").content == HELLO
        assert httpx.get(f"{srv.url}/hello").content == b"hello world"


def test_mount_at_root_leaves_misses_to_the_app(tree):
    shutil.copy(tree / "hello.txt", tree / "sub" / "robots.txt")
    with run_server("apps.asgi_basic:app", "--static", f"/={tree / 'sub'}") as srv:
        assert httpx.get(f"{srv.url}/robots.txt").content == HELLO
        assert httpx.get(f"{srv.url}/hello").content == b"hello world"


def test_pipelined_static_and_app_requests(srv, tree):
    data = (tree / "data.bin").read_bytes()
    with srv.connect() as conn:
        conn.send(
            build_request("GET", "/static/data.bin")
            + build_request("HEAD", "/static/hello.txt")
            + build_request("GET", "/hello")
            + build_request("GET", "/static/hello.txt", [("Range", "bytes=0-4")])
        )
        assert conn.read_response().body == data
        head = conn.read_response("HEAD")
        assert head.status == 200 and head.body == b""
        assert conn.read_response().body == b"hello world"
        r = conn.read_response()
        assert r.status == 206 and r.body == HELLO[:5]


def test_wsgi_threads(tree):
    with run_server("apps.basic:app", "--threads", "4", "--static", f"/static={tree}") as srv:
        with srv.connect() as conn:
            for _ in range(3):
                assert conn.request("GET", "/static/hello.txt").body == HELLO
                assert conn.request("GET", "/hello").body == b"hello world"


def test_over_tls_http1_and_h2(tree, tmp_path):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", "k.pem", "-out", "c.pem",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=tmp_path, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    args = ["--ssl-certfile", str(tmp_path / "c.pem"), "--ssl-keyfile", str(tmp_path / "k.pem")]
    data = (tree / "data.bin").read_bytes()
    with run_server("apps.asgi_basic:app", *args, "--static", f"/static={tree}") as srv:
        url = f"https://{HOST}:{srv.port}/static/data.bin"
        assert curl("-k", "--http1.1", url, url) == data * 2
        assert curl("-k", "--http2", url) == data
        assert curl("-k", "--http2", "-r", "5-9", url) == data[5:10]


def free_fd_slots(pid, limit):
    """Descriptor numbers below limit that pid does not use (what it can still open)."""
    used = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    return sum(1 for n in range(limit) if n not in used)


def set_fd_limit(pid, free):
    """Lowers pid's RLIMIT_NOFILE so that exactly `free` more descriptors can be opened."""
    used = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    limit, spare = 0, 0
    while spare < free or limit in used:
        spare += limit not in used
        limit += 1
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"], check=True)
    return limit


@pytest.mark.parametrize("iface", ["wsgi", "asgi"])
def test_out_of_descriptors_answers_503_then_serves_again(tree, iface):
    """A static hit that cannot open its file (EMFILE) is answered 503 with Connection: close
    (never the app, never a hang), and the worker serves files again once descriptors free."""
    with static_server(tree, iface) as srv:
        pid = worker_pid(srv)
        with srv.connect() as conn:  # warm up: whatever the first requests open lazily
            assert conn.request("GET", "/static/hello.txt").body == HELLO
            assert conn.request("GET", "/hello").status == 200
        settled_fd_count(pid)
        limit = set_fd_limit(pid, 2)
        with srv.connect() as a, srv.connect() as b:
            assert wait_for(lambda: free_fd_slots(pid, limit) == 0), os.listdir(f"/proc/{pid}/fd")
            r = a.request("GET", "/static/hello.txt")
            assert r.status == 503, r
            assert r.header("Connection") == "close"
            assert a.wait_closed() == b""
            b.close()
            assert wait_for(lambda: free_fd_slots(pid, limit) == 2), os.listdir(f"/proc/{pid}/fd")
        with srv.connect() as c:
            for _ in range(3):
                r = c.request("GET", "/static/hello.txt")
                assert r.status == 200 and r.body == HELLO, r
            assert c.request("GET", "/hello").status == 200
        assert srv.wait_for_log("no descriptor for a static file"), srv.log_tail()


def test_no_descriptor_leaks(srv, tree):
    pid = worker_pid(srv)
    before = settled_fd_count(pid)
    for _ in range(20):
        with srv.connect() as conn:
            conn.request("GET", "/static/hello.txt")
            conn.request("GET", "/static/hello.txt", headers={"Range": "bytes=0-1"})
            conn.request("GET", "/static/style.css", headers={"Accept-Encoding": "gzip"})
            conn.request("GET", "/static/nope.txt")
            conn.send(build_request("GET", "/static/data.bin"))
            conn.read_until(b"\r\n\r\n")  # and leave mid-body
    curl("--http2-prior-knowledge", "-o", "/dev/null", f"{srv.url}/static/data.bin")
    assert wait_for(lambda: settled_fd_count(pid) <= before, 10), (before, fd_count(pid))
