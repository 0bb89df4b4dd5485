"""Benchmark scenarios (described in docs/benchmarks.md): which app, which load, which servers."""

from dataclasses import dataclass


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
    ]
}
