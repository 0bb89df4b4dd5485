"""Benchmark scenarios (described in docs/benchmarks.md): which app, which load, which servers."""

import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Target:
    """One server with one app in a memory scenario (idle, streams)."""

    label: str  # the row's name: "pyserver-wsgi", "uvicorn", ...
    server: str  # a name from servers.SERVERS
    app: str
    interface: str
    transfers: tuple = ()  # streams: which of STREAM_TRANSFERS it is asked for
    http2: str = ""  # instructions: "h2c" counts requests over cleartext HTTP/2 (h2load)
    args: tuple = ()  # extra server options of this target ("--threads", "4")
    variant: str = ""  # names what args change ("threads4"): its label ends in -VARIANT
    websocket: bool = False  # instructions: count 64-byte WebSocket echoes, not requests


@dataclass
class Scenario:
    name: str
    description: str
    app: str  # module:attr, importable from the repository root
    interface: str  # "wsgi" or "asgi"
    servers: list  # names from servers.SERVERS, pyserver first
    path: str = "/"
    body: bytes = b"Hello World!"  # what the readiness check expects
    load: str = "wrk"  # "wrk" (keep-alive, timed) or "ab" (connection per request)
    workers: int = 1
    server_cpus: str = "0"  # taskset list for the server, None for no pinning
    client_cpus: str = "1"  # taskset list for the load generator
    modules: tuple = ()  # imports the app needs in every venv (reported if missing)
    # load == "fixed-rate+wrk": open-loop latency at `rate` req/s over `paths` for
    # `rate_duration` s, then wrk (`connections`) on `path` for the maximum throughput.
    paths: tuple = ()
    rate: float = 0.0
    rate_duration: int = 15
    connections: int = 0  # 0: the --connections option
    env: dict = field(default_factory=dict)  # extra environment of every server
    tmp_env: dict = field(default_factory=dict)  # {VAR: file name in the run's tmpdir}
    setup: tuple = ()  # argv after the project python, run once before the runs
    check: Callable = None  # (host, port) -> None, raises ValueError if a URL is wrong
    launcher: str = ""  # "gunicorn": pyserver runs as `gunicorn -k pyserver.workers...`;
    # "uwsgi_pass": pyserver and uwsgi speak uwsgi behind nginx (peers/behind_nginx.py)
    # Memory scenarios: kind "idle" or "streams" (harness/memory.py) run each target
    # (a server with its app) instead of `servers` with `app` under `load`.
    kind: str = "load"
    targets: tuple = ()
    server_args: dict = field(default_factory=dict)  # {server: extra argv for it}
    nginx: dict = field(default_factory=dict)  # main, worker_connections, http, server
    rounds: int = 0  # 0: the --rounds option

    def __post_init__(self):
        if self.targets and not self.servers:
            self.servers = list(dict.fromkeys(t.server for t in self.targets))

    wrk_paths: tuple = ()  # wrk's max-throughput run rotates over these (default: `path`)
    wsgi_app: str = ""  # the same project as WSGI, for the pyserver-wsgi server
    sidecar: tuple = ()  # argv after the project python: a helper process for the scenario
    sidecar_port: int = 0  # ... which is ready once this port accepts
    baseline: bool = False  # --baseline REF adds pyserver@REF right after pyserver
    # load == "wsload": WebSocket echo of ws_size-byte messages (permessage-deflate offered
    # when ws_deflate; binary frames when ws_binary, else text); servers keep their WebSocket
    # support on.
    ws_size: int = 0
    ws_deflate: bool = False
    ws_binary: bool = False
    threads: int = 0  # threads of the one worker (pyserver --threads, gthread, granian, uwsgi)
    asgi_app: str = ""  # the same project as ASGI, for the pyserver-asgi server
    # load == "max+fixed-rate": first every server's maximum (wrk), then open-loop latency
    # at rate_fraction of the slowest peer's maximum.
    rate_fraction: float = 0.0
    project_requires: tuple = ()  # pip requirements the project .venv needs for the app
    ready_timeout: float = 30.0  # seconds a server has to answer its first request
    # TLS 1.3 with the run's ECDSA P-256 certificate (harness/tls.py) on every server; HTTP/2:
    # "h2c" (cleartext, prior knowledge) or "h2" (over TLS, ALPN); load "h2load" runs
    # `connections` clients of h2_streams concurrent streams each.
    tls: bool = False
    http2: str = ""
    h2_streams: int = 10
    tls_resume: bool = False  # load "tlsload": offer the newest session ticket (-r)
    # The application scenarios: also time the app alone (harness/appcost.py), to split
    # each server's CPU per request into the application's part and its own.
    app_cost: bool = False
    # WebSocket subscribers kept connected through every measured run (harness/wsbroadcast.py):
    # ws_subscribers clients on ws_path receive a group broadcast every ws_interval_ms.
    ws_subscribers: int = 0
    ws_interval_ms: int = 100
    ws_path: str = ""
    # {server: module:attr}: that server runs another app than `app` (the compression
    # scenarios: the framework's gzip middleware for the servers that do not compress).
    server_apps: dict = field(default_factory=dict)
    wrk_headers: tuple = ()  # request headers wrk sends ("Accept-Encoding: gzip", ...)


DJANGO_PATHS = ("/api/items", "/.well-known/nodeinfo", "/api/instance")


def _get_json(host, port, path):
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise ValueError(f"{path}: status {resp.status} {body[:80]!r}")
    ctype = resp.getheader("content-type", "")
    if ctype != "application/json":
        raise ValueError(f"{path}: content-type {ctype!r}")
    return json.loads(body)


def check_django(host, port):
    """All three views answer 200 with the expected JSON (50 rows in the list)."""
    items = _get_json(host, port, DJANGO_PATHS[0])
    rows = items.get("items", [])
    if items.get("count") != 50 or len(rows) != 50:
        raise ValueError(f"{DJANGO_PATHS[0]}: {len(rows)} rows, expected 50")
    want = {"id", "name", "description", "price", "active"}
    if set(rows[0]) != want or rows[0]["name"] != "item 1" or rows[49]["price"] != 150:
        raise ValueError(f"{DJANGO_PATHS[0]}: unexpected rows {rows[0]!r} ... {rows[49]!r}")
    nodeinfo = _get_json(host, port, DJANGO_PATHS[1])
    if "nodeinfo" not in nodeinfo["links"][0]["rel"]:
        raise ValueError(f"{DJANGO_PATHS[1]}: {nodeinfo!r}")
    instance = _get_json(host, port, DJANGO_PATHS[2])
    if instance.get("uri") != "bench.example" or "stats" not in instance:
        raise ValueError(f"{DJANGO_PATHS[2]}: {instance!r}")


def _hello_answer(conn, n):
    conn.request("GET", "/")
    resp = conn.getresponse()
    body = resp.read()
    length = resp.getheader("content-length")
    if resp.status != 200 or body != b"Hello World!" or length != "12":
        raise ValueError(
            f"request {n}: status {resp.status}, Content-Length {length!r}, {body[:60]!r}"
        )


def check_hello(host, port):
    """Two GETs, the second on the first one's connection unless the server closed it (uwsgi
    --http-socket does without saying so): each answers 200 with b"Hello World!" and a
    single Content-Length: 12 (duplicate fields would read "12, 12")."""
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        _hello_answer(conn, 1)
        try:
            _hello_answer(conn, 2)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=5)
            _hello_answer(conn, 2)
    finally:
        conn.close()


IDLE_TIMEOUTS = 120  # seconds: every server keeps idle connections and heads this long
STREAM_FILE = "stream-1g.bin"  # in the run's tmpdir, made and removed by the scenario
HELLO_WSGI = "benchmarks.apps.hello_wsgi:app"
HELLO_ASGI = "benchmarks.apps.hello_asgi:app"
STREAMS_WSGI = "benchmarks.apps.streams_wsgi:app"
STREAMS_ASGI = "benchmarks.apps.streams_asgi:app"
# name -> (what it measures, path); the order of the streams tables.
STREAM_TRANSFERS = {
    "file": ("1 GiB download, zero-copy: wsgi.file_wrapper, pathsend, nginx static", "/file"),
    "gen": ("1 GiB download from the app: WSGI generator, ASGI send() per 64 KiB", "/gen"),
    "upload": ("1 GiB upload (POST) read to the end by the app in 64 KiB reads", "/upload"),
}
ALL_TRANSFERS = tuple(STREAM_TRANSFERS)


SYNC_PATHS = ("/sync/api/items?page=2", "/sync/.well-known/nodeinfo", "/sync/api/instance")


def check_django_sync(host, port):
    """The sync views: a page of 20 items with 3 tags each, COUNT figures, the static view."""
    page = _get_json(host, port, SYNC_PATHS[0])
    rows = page.get("items", [])
    if page.get("page") != 2 or len(rows) != 20 or rows[0]["id"] != 21:
        raise ValueError(f"{SYNC_PATHS[0]}: page {page.get('page')}, {len(rows)} rows")
    if [t["label"] for t in rows[0]["tags"]] != ["tag 21.0", "tag 21.1", "tag 21.2"]:
        raise ValueError(f"{SYNC_PATHS[0]}: tags {rows[0]['tags']!r}")
    usage = _get_json(host, port, SYNC_PATHS[1]).get("usage", {})
    if usage != {"items": 50, "active_items": 50, "tags": 150}:
        raise ValueError(f"{SYNC_PATHS[1]}: usage {usage!r}")
    if _get_json(host, port, SYNC_PATHS[2]).get("uri") != "bench.example":
        raise ValueError(f"{SYNC_PATHS[2]}: wrong document")


def check_django_db(host, port):
    """The dashboard view: ten items with their tag count and totals, from PostgreSQL."""
    doc = _get_json(host, port, DB_PATH)
    rows = doc.get("items", [])
    if len(rows) != 10 or rows[0] != {"id": 1, "name": "item 1", "price": 101}:
        raise ValueError(f"{DB_PATH}: {len(rows)} rows, first {rows[:1]!r}")
    if doc.get("tags") != 30 or doc.get("totals") != {"items": 50, "value": 6275}:
        raise ValueError(f"{DB_PATH}: tags {doc.get('tags')!r}, totals {doc.get('totals')!r}")


DB_PATH = "/db/dashboard"
PG_PORT = 8497
ECHO_PORT = 8499
WS_ECHO = "benchmarks.apps.ws_echo:app"
WS_SERVERS = [
    "pyserver",
    "peregrine",
    "uvicorn-websockets",
    "uvicorn-wsproto",
    "granian",
    "daphne",
    "hypercorn",
]


def _websocket_echo(size, label, deflate, binary=False):
    with_deflate = (
        "permessage-deflate offered (context takeover, the client compresses with igzip level 1; "
        "a server that does not accept it is shown as UNSUPPORTED)"
        if deflate
        else "no extension offered"
    )
    kind = "binary" if binary else "text"
    return Scenario(
        f"websocket-echo-{label}" + ("-binary" if binary else "") + ("-deflate" if deflate else ""),
        f"Issue 10: WebSocket echo, {size:,}-byte {kind} messages, {with_deflate}. An ASGI "
        "echo app (benchmarks/apps/ws_echo.py, which answers text with text and bytes with "
        "bytes); the load client is benchmarks/wsload/wsload.c "
        "(C, epoll, one thread, pinned to the other CPU): 16 connections, each sends a "
        "message, waits for its echo, checks it byte for byte, sends the next (JSON-like "
        "text cut at random offsets, sent as "
        + ("binary frames" if binary else "text frames")
        + "). *msg/s* messages echoed per second, *msg/CPU-s* "
        "messages per CPU-second of the server's process tree, *client CPU* the load "
        "client's own CPU share (near 100% would mean the client limits the figure); latency is "
        "the round trip of one message. Goal recorded in the issue: pyserver >= 3x uvicorn "
        "and >= 1.5x granian in messages per CPU-second.",
        app=WS_ECHO,
        interface="asgi",
        servers=list(WS_SERVERS),
        load="wsload",
        connections=16,
        ws_size=size,
        ws_deflate=deflate,
        ws_binary=binary,
        baseline=True,
    )


WEBSOCKET_ECHO = [
    _websocket_echo(size, label, deflate, binary)
    for binary in (False, True)
    for deflate in (False, True)
    for size, label in ((64, "64"), (16384, "16k"))
]
TLS_WHY = (
    "Every server gets the same ECDSA P-256 certificate, made for the run by the openssl "
    "CLI (a CA and a server certificate for 127.0.0.1 and localhost, in the run's temporary "
    "directory) and answers only after a TLS 1.3 GET with curl (the certificate checked "
    "against the CA) returned 200 and b'Hello World!'. nginx is limited to TLS 1.3; the "
    "others negotiate it with every client used here (ab and h2load report the version)."
)
TLS_SERVERS = {
    "wsgi": ["pyserver", "peregrine", "granian", "gunicorn", "nginx"],
    "asgi": ["pyserver", "peregrine", "uvicorn", "granian", "hypercorn", "nginx"],
}


def _hello_tls(interface, load):
    app = HELLO_WSGI if interface == "wsgi" else HELLO_ASGI
    if load == "wrk":
        how = (
            "keep-alive: wrk against https:// (Debian's wrk links OpenSSL; it offers no ALPN, "
            "so every server speaks HTTP/1.1), one TLS handshake per connection, then "
            "requests on it"
        )
        if interface == "wsgi":
            how += (
                ". gunicorn's sync worker closes after every response, so its row is in "
                "effect a new connection (and handshake) per request"
            )
    elif load == "tlsload":
        how = (
            "a new connection per request with TLS 1.3 session resumption: "
            "benchmarks/tlsload/tlsload.c (C, epoll, one thread, OpenSSL) keeps 100 "
            "connections going, each connects, offers a session ticket the server sent "
            "earlier (the newest unused one; each ticket is offered once, as RFC 8446 asks "
            "of clients), sends one GET with `Connection: close`, reads the answer and "
            "closes; "
            "*resumed* is the share of handshakes the server resumed (PSK with a fresh ECDHE "
            "key exchange: no certificate, no signature), *client CPU* the client's own CPU "
            "share (near 100%: the client limits the figure; OpenSSL 3.0's per-connection "
            "cost on the client side is several hundred microseconds here, in libcrypto and "
            "the kernel's TCP setup, so req/CPU-s is the figure to compare)"
        )
    else:
        how = (
            "a new connection per request: `ab -f TLS1.3` without -k, a full TLS 1.3 "
            "handshake (ECDHE X25519 + ECDSA P-256 signature) for every request; ab keeps no "
            "session cache, so no handshake is resumed (resumption is not measured). ab's "
            "single thread also verifies every handshake's signature, so it can limit the "
            "figure: req/CPU-s is the one to compare"
        )
    goal = (
        " Goal in issue 12: keep-alive throughput >= 0.85x nginx, and ahead of every Python "
        "peer in requests per CPU-second."
        if load == "wrk"
        else ""
    )
    return Scenario(
        f"hello-tls-{interface}" + {"wrk": "", "ab": "-newconn", "tlsload": "-resume"}[load],
        f"Issue 12: the hello-{interface} app over TLS 1.3, {how}. One worker process per "
        f"server. {TLS_WHY}{goal}",
        app=app,
        interface=interface,
        servers=list(TLS_SERVERS[interface]),
        load=load,
        tls=True,
        tls_resume=load == "tlsload",
    )


def _hello_h2(http2):
    over = (
        "cleartext HTTP/2 by prior knowledge (h2c): h2load against http://"
        if http2 == "h2c"
        else "HTTP/2 over TLS 1.3, negotiated by ALPN: h2load against https://"
    )
    tls_note = f" {TLS_WHY}" if http2 == "h2" else ""
    return Scenario(
        "hello-h2c" if http2 == "h2c" else "hello-h2-tls",
        f"Issue 13: the hello-asgi app over {over}, the issue's load shape: 10 connections "
        "with 32 concurrent streams each (`h2load -c 10 -m 32 -D ...`); latency percentiles "
        "from h2load's per-request log. pyserver-wsgi serves the hello-wsgi app the same way. "
        "pyserver runs with `--http auto`, granian with `--http 2` (HTTP/2 only), hypercorn "
        "with its defaults, gunicorn with its own ASGI worker (`-k asgi --http-protocols "
        "h2,h1`"
        + (", `--http2-cleartext prior-knowledge`" if http2 == "h2c" else "")
        + "), uvicorn with its experimental HTTP/2 (`--http zttp --http2`, the zttp parser), "
        "nginx with "
        + (
            "`listen ... http2` (nginx 1.22: without ssl, h2c by prior knowledge only). "
            if http2 == "h2c"
            else "`listen ... ssl http2`. "
        )
        + "Every server must answer curl's HTTP/2 GET in HTTP/2 before it is measured (a "
        "server whose ALPN does not select h2 is shown as failed); h2load's failed requests "
        f"are counted as errors. Goal in the issue: >= 2x granian per CPU-second, >= 0.7x "
        f"nginx.{tls_note}",
        app=HELLO_ASGI,
        wsgi_app=HELLO_WSGI,
        interface="asgi",
        servers=[
            "pyserver",
            "pyserver-wsgi",
            "granian",
            "hypercorn",
            "gunicorn-asgi",
            "uvicorn-h2",
            "nginx",
        ],
        load="h2load",
        connections=10,
        h2_streams=32,
        tls=http2 == "h2",
        http2=http2,
        baseline=True,
    )


STATIC_DIR = "static"  # in the run's tmpdir: $BENCH_STATIC_DIR, written by the setup step


def _check_static(name, size):
    """The file as benchmarks/apps/static_files.py writes it: bytes 0..250, repeated."""
    pattern = bytes(range(251))
    want = (pattern * (size // len(pattern) + 1))[:size]

    def check(host, port):
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", f"/static/{name}")
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200 or body != want:
            raise ValueError(f"/static/{name}: {resp.status}, {len(body)} bytes")

    return check


def _static(name, size, label):
    return Scenario(
        f"static-{label}",
        f"Issue 15: a {label.upper()}iB file (`/static/{name}`, page-cached, in the run's "
        "temporary directory) served by each server's own static-file support, keep-alive "
        "load with wrk, one worker process: pyserver `--static /static=DIR` (C core, "
        "sendfile), nginx `location /static/ { alias DIR/; }` with `sendfile on`, granian "
        "`--static-path-route /static --static-path-mount DIR`, uWSGI `--static-map "
        "/static=DIR` (--http11-socket, keep-alive), WhiteNoise in front of the hello "
        "WSGI app under gunicorn's sync worker (which closes every connection). "
        "Goal in the issue: >= 0.9x nginx.",
        app=HELLO_WSGI,
        interface="wsgi",
        path=f"/static/{name}",
        body=None,
        check=_check_static(name, size),
        servers=["pyserver", "nginx", "granian", "uwsgi-threads", "gunicorn-whitenoise"],
        tmp_env={"BENCH_STATIC_DIR": STATIC_DIR},
        setup=("-m", "benchmarks.apps.static_files"),
        server_args={
            "pyserver": ["--static", "/static={BENCH_STATIC_DIR}"],
            "granian": [
                "--static-path-route",
                "/static",
                "--static-path-mount",
                "{BENCH_STATIC_DIR}",
            ],
            "uwsgi-threads": ["--static-map", "/static={BENCH_STATIC_DIR}"],
        },
        nginx={
            "http": "sendfile on;\ntcp_nopush on;",
            "server": f"location /static/ {{ alias {{tmp}}/{STATIC_DIR}/; }}",
        },
    )


STATIC = [_static("4k.bin", 4096, "4k"), _static("1m.bin", 1 << 20, "1m")]

# The application scenarios (issue 32): what users judge servers by.  name -> (app,
# interface, path, the servers beside pyserver, what the app is).
ITEM = {"id": 42, "name": "widget", "tags": ["new", "sale"], "price": 9.5, "limit": 10}
APP_SERVERS_ASGI = ["pyserver", "peregrine", "granian", "uvicorn"]
APP_SERVERS_WSGI = ["pyserver", "peregrine", "granian", "gunicorn-gthread"]
APPS = {
    "fastapi-json": (
        "benchmarks.apps.fastapi_json:app",
        "asgi",
        "/items/42",
        "a FastAPI `async def` view with a path parameter, a dependency and a pydantic "
        "response model (benchmarks/apps/fastapi_json.py)",
    ),
    "starlette-json": (
        "benchmarks.apps.starlette_json:app",
        "asgi",
        "/items/42",
        "a Starlette route returning a JSONResponse (benchmarks/apps/starlette_json.py)",
    ),
    "flask-json": (
        "benchmarks.apps.flask_json:app",
        "wsgi",
        "/items/42",
        "a Flask view returning a dict (benchmarks/apps/flask_json.py)",
    ),
    "python-work-asgi": (
        "benchmarks.apps.python_work:asgi_app",
        "asgi",
        "/",
        "a raw ASGI app doing about 30 us of plain Python per request, then 12 bytes "
        "(benchmarks/apps/python_work.py)",
    ),
    "python-work-wsgi": (
        "benchmarks.apps.python_work:wsgi_app",
        "wsgi",
        "/",
        "a raw WSGI app doing about 30 us of plain Python per request, then 12 bytes "
        "(benchmarks/apps/python_work.py)",
    ),
}
APP_CONNECTIONS = (10, 100, 1000)


def _check_app_body(path, expected):
    """A GET of PATH answers 200 with EXPECTED: bytes, or a document as JSON (frameworks
    differ in key order and spacing)."""

    def check(host, port):
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        try:
            same = body == expected if isinstance(expected, bytes) else json.loads(body) == expected
        except ValueError:
            same = False
        if resp.status != 200 or not same:
            raise ValueError(f"{path}: status {resp.status} {body[:80]!r}")

    return check


def _app_scenario(name, connections):
    app, interface, path, what = APPS[name]
    expected = b"Hello World!" if name.startswith("python-work") else ITEM
    return Scenario(
        f"{name}-c{connections}",
        f"Issue 32: {what}; keep-alive load with wrk at {connections:,} connections, one "
        "worker process per server (peregrine with uvloop installed beside it, granian "
        "and uvicorn with uvloop + httptools). *req/CPU-s* is what matters on a loaded "
        "machine: requests per CPU-second of the server's process tree. Goal in the issue: "
        "pyserver >= 1.1x peregrine and >= 1.5x granian per CPU-second at 100 and 1,000 "
        "connections, >= 1.0x peregrine at 10.",
        app=app,
        interface=interface,
        path=path,
        body=None,
        check=_check_app_body(path, expected),
        servers=list(APP_SERVERS_ASGI if interface == "asgi" else APP_SERVERS_WSGI),
        connections=connections,
        baseline=True,
        threads=1 if interface == "wsgi" else 0,
        app_cost=True,
    )


APP_SCENARIOS = [_app_scenario(name, c) for name in APPS for c in APP_CONNECTIONS]

# The compression scenarios (issue 37): the same 20 KB JSON body (benchmarks/apps/
# compress_apps.py) gzip-compressed by the server's core (pyserver --compress, peregrine
# --compress) or by the framework's middleware (Django's and Starlette's GZipMiddleware,
# level 6) under pyserver and under the server the framework's users run.
COMPRESS_APP = "benchmarks.apps.compress_apps"
COMPRESS = {
    "compress-django": (
        "wsgi",
        "a Django view (benchmarks/apps/compress_apps.py, no middleware) compressed by the "
        "server; Django's GZipMiddleware (compress_django_gzip.py) under pyserver without "
        "--compress and under gunicorn gthread",
        f"{COMPRESS_APP}:django_app",
        {
            "pyserver-middleware": "benchmarks.apps.compress_django_gzip:application",
            "gunicorn-gthread": "benchmarks.apps.compress_django_gzip:application",
        },
    ),
    "compress-fastapi": (
        "asgi",
        "a FastAPI view compressed by the server; Starlette's GZipMiddleware "
        "(compresslevel 6) under pyserver without --compress and under uvicorn",
        f"{COMPRESS_APP}:fastapi_app",
        {
            "pyserver-middleware": f"{COMPRESS_APP}:fastapi_gzip_app",
            "uvicorn": f"{COMPRESS_APP}:fastapi_gzip_app",
        },
    ),
    "compress-flask": (
        "wsgi",
        "a Flask view compressed by the server (Flask has no gzip middleware of its own)",
        f"{COMPRESS_APP}:flask_app",
        {},
    ),
}


def _check_compressed_body(path, accept):
    """A GET of PATH with Accept-Encoding ACCEPT answers 200, compressed with one of the
    codings it names, with the catalog document."""

    def check(host, port):
        import gzip

        from apps.compress_apps import BODY  # benchmarks/ is on the path, as for harness

        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", path, headers={"Accept-Encoding": accept})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        coding = resp.getheader("content-encoding", "")
        if resp.status != 200 or coding not in accept or coding not in ("gzip", "br", "zstd"):
            raise ValueError(f"{path}: status {resp.status}, content-encoding {coding!r}")
        if coding == "br":
            import brotli

            body = brotli.decompress(raw)
        elif coding == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        else:
            body = gzip.decompress(raw)
        if json.loads(body) != json.loads(BODY):
            raise ValueError(f"{path}: the {coding} body is not the catalog")

    return check


COMPRESS_ACCEPT = {
    "": (
        "gzip",
        "every request with `Accept-Encoding: gzip` (the one coding all of them have; the "
        "middleware at level 6 (zlib, 3,513 bytes), pyserver at its default 5 (libdeflate, "
        "3,289 bytes), peregrine at its own (3,532 bytes))",
    ),
    "-browser": (
        "gzip, deflate, br, zstd",
        "every request with a browser's `Accept-Encoding: gzip, deflate, br, zstd` (each "
        "server picks its coding: pyserver zstd, peregrine br, the middleware gzip)",
    ),
}


def _compress_scenario(name, variant, connections=100):
    interface, what, app, server_apps = COMPRESS[name]
    accept, how = COMPRESS_ACCEPT[variant]
    peer = "gunicorn-gthread" if interface == "wsgi" else "uvicorn"
    servers = ["pyserver", "peregrine"]
    servers += [s for s in ("pyserver-middleware", peer) if s in server_apps]
    return Scenario(
        f"{name}{variant}-c{connections}",
        f"Issue 37: {what}. A 20,725-byte JSON body, {how}; "
        f"keep-alive load with wrk at {connections} connections, one worker process per "
        "server. Goal in the issue: pyserver --compress >= 3x the middleware's and "
        "peregrine --compress's requests per CPU-second at the same level.",
        app=app,
        interface=interface,
        path="/catalog",
        body=None,
        check=_check_compressed_body("/catalog", accept),
        servers=servers,
        connections=connections,
        threads=1 if interface == "wsgi" else 0,
        server_apps=server_apps,
        wrk_headers=(f"Accept-Encoding: {accept}",),
        server_args={
            "pyserver": ["--compress"],
            "peregrine": ["--compress"],
        },
        baseline=False,
        app_cost=True,
    )


COMPRESS_SCENARIOS = [_compress_scenario(n, v) for v in COMPRESS_ACCEPT for n in COMPRESS]
HELLO_TLS = [_hello_tls(i, load) for load in ("wrk", "ab", "tlsload") for i in ("wsgi", "asgi")]
HELLO_H2 = [_hello_h2(mode) for mode in ("h2c", "h2")]
SCENARIO_GROUPS = {
    "websocket-echo": [sc.name for sc in WEBSOCKET_ECHO],
    "hello-tls": [sc.name for sc in HELLO_TLS],
    "hello-h2": [sc.name for sc in HELLO_H2],
    "static": [sc.name for sc in STATIC],
    "apps": [sc.name for sc in APP_SCENARIOS],
    "compress": [sc.name for sc in COMPRESS_SCENARIOS],
    **{name: [f"{name}-c{c}" for c in APP_CONNECTIONS] for name in APPS},
}

SCENARIOS = {
    s.name: s
    for s in [
        Scenario(
            "hello-wsgi",
            "Raw WSGI callable returning 12 bytes with Content-Length; keep-alive load "
            "with wrk, one worker process per server.",
            app="benchmarks.apps.hello_wsgi:app",
            interface="wsgi",
            check=check_hello,
            baseline=True,
            servers=[
                "pyserver",
                "peregrine",
                "fastpysgi",
                "bjoern",
                "socketify",
                "granian",
                "uwsgi",
                "gunicorn",
                "meinheld",
                "nginx",
            ],
        ),
        Scenario(
            "hello-wsgi-threads",
            "Issue 11: the cost of the thread pool's handoff. hello-wsgi (keep-alive, wrk) "
            "served by pyserver --threads 4 against pyserver --threads 1 (the application "
            "on the loop thread), one worker, pinned to one CPU as in the other scenarios: "
            "*pyserver ÷ it* is the --threads 4 figure ÷ the --threads 1 one (goal in the "
            "issue: >= 0.8x). With --baseline REF, pyserver@REF runs --threads 4 too.",
            app="benchmarks.apps.hello_wsgi:app",
            interface="wsgi",
            check=check_hello,
            baseline=True,
            servers=["pyserver", "pyserver-1thread"],
            server_args={"pyserver": ["--threads", "4"], "pyserver-1thread": ["--threads", "1"]},
        ),
        Scenario(
            "hello-asgi",
            "Raw ASGI callable, two send() calls, 12 bytes with Content-Length; keep-alive "
            "load with wrk, one worker process per server.",
            app="benchmarks.apps.hello_asgi:app",
            interface="asgi",
            check=check_hello,
            baseline=True,
            servers=[
                "pyserver",
                "peregrine",
                "fastpysgi",
                "uvicorn",
                "socketify",
                "granian",
                "hypercorn",
                "nginx",
            ],
        ),
        Scenario(
            "bottle-ab",
            "Bottle app /hello -> 'Hello World!', 2 worker processes, ab -c 100 -n 50000 "
            "without keep-alive (a new connection per request). Server and ab share both "
            "cores, as in the commonly cited setup.",
            app="benchmarks.apps.bottle_app:app",
            interface="wsgi",
            path="/hello",
            servers=["pyserver", "uwsgi", "gunicorn", "nginx"],
            load="ab",
            workers=2,
            server_cpus=None,
            client_cpus=None,
            modules=("bottle",),
        ),
        Scenario(
            "bottle-uwsgi",
            "bottle-ab's Bottle app behind nginx (one worker) with `include uwsgi_params; "
            "uwsgi_pass`: pyserver (-b uwsgi://) and uWSGI (--socket), 2 worker processes "
            "each, ab -c 100 -n 50000 against nginx (a new connection per request on both "
            "hops). Requests per CPU-second count nginx's CPU and the server's.",
            app="benchmarks.apps.bottle_app:app",
            interface="wsgi",
            path="/hello",
            servers=["pyserver", "uwsgi"],
            load="ab",
            workers=2,
            server_cpus=None,
            client_cpus=None,
            modules=("bottle",),
            launcher="uwsgi_pass",
        ),
        Scenario(
            "bottle-uwsgi-wrk",
            "bottle-uwsgi with wrk -c 100 against nginx: keep-alive from the client to "
            "nginx, still a new uwsgi connection per request from nginx to the server.",
            app="benchmarks.apps.bottle_app:app",
            interface="wsgi",
            path="/hello",
            servers=["pyserver", "uwsgi"],
            workers=2,
            server_cpus=None,
            client_cpus=None,
            modules=("bottle",),
            launcher="uwsgi_pass",
        ),
        Scenario(
            "django-asgi",
            "Django 5 project served as ASGI under `gunicorn -w 1` (pyserver's worker class "
            "vs uvicorn's, uvicorn-worker package) and under daphne. Three async views: a "
            "JSON list of 50 SQLite rows via the async ORM (`/api/items`), a "
            "`/.well-known/nodeinfo` document and a small instance-info document. "
            "(a) Latency at a fixed 30 req/s, open loop (a new request every 1/30 s "
            "whatever the answers, round-robin over the three URLs, keep-alive "
            "connections opened as needed; latency from the scheduled start); (b) maximum "
            "throughput, wrk on the list view.",
            app="benchmarks.apps.django_bench.asgi:application",
            interface="asgi",
            path=DJANGO_PATHS[0],
            body=None,
            servers=["pyserver", "uvicorn-worker", "daphne"],
            load="fixed-rate+wrk",
            modules=("django",),
            paths=DJANGO_PATHS,
            rate=30.0,
            rate_duration=15,
            connections=50,
            env={"DJANGO_SETTINGS_MODULE": "benchmarks.apps.django_bench.settings"},
            tmp_env={"DJANGO_BENCH_DB": "django-bench.sqlite3"},
            setup=("-m", "benchmarks.apps.django_bench.setup_db"),
            check=check_django,
            launcher="gunicorn",
        ),
        Scenario(
            "idle",
            "Memory of idle connections. One worker process per server; a client process "
            "(harness/idleclient.py, pinned to the other CPU) opens 10,000 keep-alive "
            "connections, each sends one `GET /` and reads the answer, then stays open and "
            "silent; then, against a freshly started server, 1,000 connections that each "
            "send an incomplete 60 KiB head (request line and 15 header fields of 4,000 "
            "bytes, no blank line). Resident memory (VmRSS summed over the server's "
            "process tree) before and after, per connection held. Every server's "
            f"keep-alive and head timeouts are set to {IDLE_TIMEOUTS} s (or its maximum) "
            "and its connection limits above 10,000. One round: RSS does not move with the "
            "machine's load (the per-connection figures repeated to within 1% in trial runs).",
            app=HELLO_WSGI,
            interface="wsgi",
            servers=[],
            load="idle",
            kind="idle",
            targets=(
                Target("pyserver-wsgi", "pyserver", HELLO_WSGI, "wsgi"),
                Target("pyserver-asgi", "pyserver", HELLO_ASGI, "asgi"),
                Target("uvicorn", "uvicorn", HELLO_ASGI, "asgi"),
                Target("granian-asgi", "granian", HELLO_ASGI, "asgi"),
                Target("nginx", "nginx", "", ""),
            ),
            server_args={
                "pyserver": [
                    "--timeout-keep-alive",
                    str(IDLE_TIMEOUTS),
                    "--timeout-request-header",
                    str(IDLE_TIMEOUTS),
                    "--limit-connections",
                    "20000",
                ],
                "uvicorn": ["--timeout-keep-alive", str(IDLE_TIMEOUTS)],
                # 60 s is the most granian accepts; the measurement takes a few seconds.
                "granian": [
                    "--http1-header-read-timeout",
                    "60000",
                    "--backlog",
                    "4096",
                    "--backpressure",
                    "20000",
                ],
            },
            nginx={
                "main": "worker_rlimit_nofile 20000;",
                "worker_connections": "16384",
                "http": f"keepalive_timeout {IDLE_TIMEOUTS}s;\n"
                f"client_header_timeout {IDLE_TIMEOUTS}s;",
            },
            rounds=1,
        ),
        Scenario(
            "streams",
            "Large bodies. A 1 GiB file (in the run's temporary directory, page-cached) "
            "downloaded with sendfile (wsgi.file_wrapper, ASGI http.response.pathsend, "
            "nginx serving it as a static file) and from the application (a WSGI generator "
            "of 64 KiB chunks, ASGI one send() per 64 KiB), and 1 GiB uploaded (POST with "
            "Content-Length) and read to the end by the application in 64 KiB reads. "
            "Client: curl pinned to the other CPU, one transfer at a time. Throughput, the "
            "client's CPU, the server's CPU time, and the server's peak resident memory "
            "(VmHWM summed over its process tree, reset before each transfer) above what it "
            "used before the transfer: it must stay flat. Five rounds: a transfer takes "
            "well under a second, so its throughput moves with whatever else runs.",
            app=STREAMS_WSGI,
            interface="wsgi",
            servers=[],
            load="streams",
            kind="streams",
            targets=(
                Target("pyserver-wsgi", "pyserver", STREAMS_WSGI, "wsgi", ALL_TRANSFERS),
                Target("pyserver-asgi", "pyserver", STREAMS_ASGI, "asgi", ALL_TRANSFERS),
                Target("gunicorn", "gunicorn", STREAMS_WSGI, "wsgi", ALL_TRANSFERS),
                Target("uvicorn", "uvicorn", STREAMS_ASGI, "asgi", ALL_TRANSFERS),
                Target("granian-wsgi", "granian", STREAMS_WSGI, "wsgi", ALL_TRANSFERS),
                Target("granian-asgi", "granian", STREAMS_ASGI, "asgi", ALL_TRANSFERS),
                Target("nginx", "nginx", "", "", ("file",)),
            ),
            tmp_env={"BENCH_STREAM_FILE": STREAM_FILE},
            server_args={"gunicorn": ["--timeout", "300"]},
            nginx={
                "http": "sendfile on;\nclient_max_body_size 0;",
                "server": "location = /file { default_type application/octet-stream; "
                f"alias {{tmp}}/{STREAM_FILE}; }}",
            },
            rounds=5,
        ),
        Scenario(
            "django-sync",
            "The Django project of issue 16, sync views (what most projects have), served as "
            "ASGI: each view runs through asgiref's sync_to_async. Three JSON endpoints over "
            "SQLite: a paginated list with nested rows (20 items and their tags), a nodeinfo "
            "document from three COUNT queries, a small static document. (a) Latency at a "
            "fixed 95 req/s, open loop (evenly spaced arrivals, round-robin over the three "
            "URLs); (b) maximum throughput, wrk rotating over the three URLs. pyserver "
            "standalone and as a gunicorn worker against gunicorn + UvicornWorker (uvloop), "
            "granian and daphne; pyserver-wsgi serves the same project as WSGI for reference.",
            app="benchmarks.apps.django_bench.asgi:application",
            wsgi_app="benchmarks.apps.django_bench.wsgi:application",
            interface="asgi",
            path=SYNC_PATHS[2],
            body=None,
            servers=[
                "pyserver",
                "pyserver-gunicorn",
                "uvicorn-worker",
                "granian",
                "daphne",
                "pyserver-wsgi",
            ],
            load="fixed-rate+wrk",
            modules=("django",),
            paths=SYNC_PATHS,
            wrk_paths=SYNC_PATHS,
            rate=95.0,
            rate_duration=15,
            connections=50,
            env={"DJANGO_SETTINGS_MODULE": "benchmarks.apps.django_bench.settings"},
            tmp_env={"DJANGO_BENCH_DB": "django-bench.sqlite3"},
            setup=("-m", "benchmarks.apps.django_bench.setup_db"),
            check=check_django_sync,
        ),
        Scenario(
            "django-channels",
            "Issue 33: a Django project with Channels (the django-sync project, sync JSON "
            "views over SQLite, plus a Channels consumer on the in-memory layer). wrk rotates "
            "over the three JSON views (32 connections) while 200 WebSocket clients stay "
            "connected and receive a group broadcast every 100 ms (harness/wsbroadcast.py, "
            "on the load generator's CPU). pyserver-hybrid4 and pyserver-hybrid8 serve the "
            "views as WSGI on 4 or 8 application threads and the WebSockets through the ASGI "
            "application (--asgi-app); the others serve everything as ASGI. (a) Maximum "
            "throughput; (b) latency at a fixed rate of 70% of the slowest peer's maximum, "
            "open loop. WebSocket figures: messages delivered (sent x subscribers) and the "
            "delivery p99 of each phase. Goals: HTTP max >= 1.5x the best ASGI server, "
            "HTTP p99 <= 0.6x its, every message delivered, delivery p99 no worse.",
            app="benchmarks.apps.django_bench.channels_asgi:application",
            wsgi_app="benchmarks.apps.django_bench.wsgi:application",
            interface="asgi",
            path=SYNC_PATHS[2],
            body=None,
            servers=[
                "pyserver-hybrid4",
                "pyserver-hybrid8",
                "pyserver",
                "uvicorn-worker",
                "granian",
                "daphne",
                "peregrine",
            ],
            load="max+fixed-rate",
            modules=("django", "channels"),
            paths=SYNC_PATHS,
            wrk_paths=SYNC_PATHS,
            rate_fraction=0.7,
            rate_duration=15,
            connections=32,
            env={"DJANGO_SETTINGS_MODULE": "benchmarks.apps.django_bench.settings"},
            tmp_env={"DJANGO_BENCH_DB": "django-bench.sqlite3"},
            setup=("-m", "benchmarks.apps.django_bench.setup_db"),
            check=check_django_sync,
            project_requires=("channels",),
            ws_subscribers=200,
            ws_interval_ms=100,
            ws_path="/ws/bench/",
        ),
        Scenario(
            "sync-to-async",
            "Raw ASGI app awaiting asgiref's sync_to_async of a trivial function per "
            "request, then 12 bytes: a thread hop and a thread-safe wake-up of the event loop "
            "per request. Keep-alive load with wrk, one worker process per server.",
            app="benchmarks.apps.sync_to_async_app:app",
            interface="asgi",
            servers=["pyserver", "uvicorn", "granian"],
            modules=("asgiref",),
        ),
        Scenario(
            "outgoing-io",
            "Raw ASGI app whose every request awaits an asyncio.open_connection round trip "
            "to a local echo server (its own process, on the load generator's CPU), then "
            "answers 12 bytes. Keep-alive load with wrk, one worker process per server.",
            app="benchmarks.apps.outgoing_io_app:app",
            interface="asgi",
            servers=["pyserver", "uvicorn", "granian"],
            env={"BENCH_ECHO_PORT": str(ECHO_PORT)},
            sidecar=("-m", "benchmarks.apps.echo_server", str(ECHO_PORT)),
            sidecar_port=ECHO_PORT,
        ),
        Scenario(
            "django-wsgi-db",
            "Issue 11: the Django project on PostgreSQL (a throwaway cluster: initdb in the "
            "run's temporary directory, started before and stopped after the scenario, on the "
            "load generator's CPU), one sync JSON view doing 3 queries and a 20 ms simulated "
            "upstream wait (time.sleep). One worker process, 8 threads: pyserver --threads 8, "
            "gunicorn gthread -w 1 --threads 8, uWSGI --processes 1 --threads 8 "
            "(--http11-socket, keep-alive), granian --interface wsgi --blocking-threads 8; "
            "pyserver-asgi serves the same project as ASGI (Django runs sync views in one "
            "thread there: thread_sensitive sync_to_async). Persistent database connections "
            "(CONN_MAX_AGE), one per thread (none for pyserver-asgi, whose requests each "
            "get a new thread from asgiref). (a) Maximum throughput: wrk, 50 connections; "
            "(b) latency at a fixed rate of 70% of the slowest peer's maximum, open loop. "
            "Goals in the issue: max >= 1.3x gunicorn gthread, p99 <= 0.7x gthread's.",
            app="benchmarks.apps.django_bench.wsgi:application",
            asgi_app="benchmarks.apps.django_bench.asgi:application",
            interface="wsgi",
            path=DB_PATH,
            body=None,
            servers=["pyserver", "gunicorn-gthread", "uwsgi-threads", "granian", "pyserver-asgi"],
            load="max+fixed-rate",
            modules=("django", "psycopg"),
            paths=(DB_PATH,),
            rate_fraction=0.7,
            rate_duration=15,
            connections=50,
            threads=8,
            server_args={"pyserver": ["--threads", "8"]},
            env={
                "DJANGO_SETTINGS_MODULE": "benchmarks.apps.django_bench.settings",
                "DJANGO_BENCH_PG": f"127.0.0.1:{PG_PORT}",
            },
            tmp_env={"BENCH_PG_DIR": "pg"},
            sidecar=("benchmarks/harness/pgcluster.py", "{BENCH_PG_DIR}", str(PG_PORT)),
            sidecar_port=PG_PORT,
            setup=("-m", "benchmarks.apps.django_bench.setup_db"),
            check=check_django_db,
            project_requires=("psycopg[binary]",),
        ),
        *WEBSOCKET_ECHO,
        *HELLO_TLS,
        *HELLO_H2,
        *STATIC,
        *APP_SCENARIOS,
        *COMPRESS_SCENARIOS,
        Scenario(
            "instructions",
            "CPU instructions per request of pyserver (and, with --baseline REF, of the build "
            "of REF: a same-run A/B of two builds), counted by valgrind's callgrind (this "
            "machine's perf has no hardware instruction counter): the hello-wsgi and "
            "hello-asgi apps, counting switched on after 200 warm-up requests, then N "
            "requests and 2N requests one at a time over one keep-alive connection; "
            "(count of 2N - count of N) / N, PYTHONHASHSEED=0. The -h2c rows count the same "
            "apps over cleartext HTTP/2 in hello-h2's load shape: `h2load -n N -c 10 -m 32` "
            "(10 connections of 32 concurrent streams; the connections' set-up cancels out "
            "in the difference). The -ws row counts 64-byte text messages echoed by the "
            "websocket-echo app over one WebSocket connection, one at a time (per message, "
            "not per request). It does not depend on what "
            "else the machine runs; two runs of one build differed by about 1% in trials "
            "(12,688 and 12,835 for hello-wsgi), so a smaller difference between builds means "
            "nothing. *pyserver ÷ it*: this build's count ÷ that one's (below 1: this build "
            "runs fewer instructions).",
            app=HELLO_WSGI,
            interface="wsgi",
            servers=[],
            load="instructions",
            kind="instructions",
            targets=(
                Target("pyserver-wsgi", "pyserver", HELLO_WSGI, "wsgi"),
                Target("pyserver-asgi", "pyserver", HELLO_ASGI, "asgi"),
                Target("pyserver-wsgi-h2c", "pyserver", HELLO_WSGI, "wsgi-h2c", http2="h2c"),
                Target("pyserver-asgi-h2c", "pyserver", HELLO_ASGI, "asgi-h2c", http2="h2c"),
                Target(
                    "pyserver-asgi-ws", "pyserver", WS_ECHO, "asgi", variant="ws", websocket=True
                ),
            ),
            rounds=1,
            baseline=True,
            ready_timeout=300.0,
            env={"PYTHONHASHSEED": "0"},
        ),
        Scenario(
            "instructions-threads",
            "Issue 11: the instructions scenario's method (callgrind, one request at a time "
            "over one keep-alive connection, every thread of the server counted) on "
            "hello-wsgi served by pyserver --threads 1 and --threads 4: the second row less "
            "the first is what the thread pool's handoff costs a request that finds every "
            "thread idle (a wake-up, a wait and a completion through the loop each). "
            "*pyserver ÷ it* compares a row with the same row of the --baseline build.",
            app=HELLO_WSGI,
            interface="wsgi",
            servers=[],
            load="instructions",
            kind="instructions",
            targets=(
                Target("pyserver-wsgi", "pyserver", HELLO_WSGI, "wsgi"),
                Target(
                    "pyserver-wsgi-threads4",
                    "pyserver",
                    HELLO_WSGI,
                    "wsgi",
                    args=("--threads", "4"),
                    variant="threads4",
                ),
            ),
            rounds=1,
            baseline=True,
            ready_timeout=300.0,
            env={"PYTHONHASHSEED": "0"},
        ),
    ]
}
