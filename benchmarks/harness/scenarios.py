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
    ]
}
