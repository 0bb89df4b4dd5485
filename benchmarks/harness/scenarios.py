"""Benchmark scenarios (described in docs/benchmarks.md): which app, which load, which servers."""

import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass, field


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
    launcher: str = ""  # "gunicorn": pyserver runs as `gunicorn -k pyserver.workers...`
    wrk_paths: tuple = ()  # wrk's max-throughput run rotates over these (default: `path`)
    wsgi_app: str = ""  # the same project as WSGI, for the pyserver-wsgi server
    sidecar: tuple = ()  # argv after the project python: a helper process for the scenario
    sidecar_port: int = 0  # ... which is ready once this port accepts


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


ECHO_PORT = 8499

SCENARIOS = {
    s.name: s
    for s in [
        Scenario(
            "hello-wsgi",
            "Raw WSGI callable returning 12 bytes with Content-Length; keep-alive load "
            "with wrk, one worker process per server.",
            app="benchmarks.apps.hello_wsgi:app",
            interface="wsgi",
            servers=["pyserver", "bjoern", "granian", "uwsgi", "gunicorn", "meinheld", "nginx"],
        ),
        Scenario(
            "hello-asgi",
            "Raw ASGI callable, two send() calls, 12 bytes with Content-Length; keep-alive "
            "load with wrk, one worker process per server.",
            app="benchmarks.apps.hello_asgi:app",
            interface="asgi",
            servers=["pyserver", "uvicorn", "granian", "hypercorn", "nginx"],
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
    ]
}
