"""What an application costs by itself: its callable called directly in a loop, with no
server, so that a server's CPU per request splits into the application's part and its own.

    python -m benchmarks.harness.appcost MODULE:ATTR wsgi|asgi PATH [CALLS]

prints the CPU microseconds of one call (process time over CALLS calls after a warm-up).
An ASGI app is awaited in one asyncio task, one call after the other (no task per call:
that is the server's cost); each call gets a fresh copy of an HTTP/1.1 scope, a receive()
that returns the empty body and a send() that keeps nothing.  A WSGI app gets a fresh
environ, its iterable is consumed and closed.  Standard library only (plus the app).
"""

import asyncio
import importlib
import io
import sys
import time

WARMUP = 2000


def load(spec):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def asgi_cost(app, path, calls):
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 40000),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk"), (b"accept", b"*/*")],
        "state": {},
    }
    request = {"type": "http.request", "body": b"", "more_body": False}

    async def receive():
        return request

    async def send(message):
        pass

    async def run(n):
        for _ in range(n):
            await app(dict(scope), receive, send)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run(WARMUP))
        start = time.process_time()
        loop.run_until_complete(run(calls))
        return time.process_time() - start
    finally:
        loop.close()


def wsgi_cost(app, path, calls):
    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "wrk",
        "HTTP_ACCEPT": "*/*",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }

    def start_response(status, headers, exc_info=None):
        return None

    def run(n):
        for _ in range(n):
            env = dict(environ)
            env["wsgi.input"] = io.BytesIO(b"")
            result = app(env, start_response)
            try:
                for _chunk in result:
                    pass
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    run(WARMUP)
    start = time.process_time()
    run(calls)
    return time.process_time() - start


def main(argv):
    spec, interface, path = argv[:3]
    calls = int(argv[3]) if len(argv) > 3 else 20000
    app = load(spec)
    cost = asgi_cost if interface == "asgi" else wsgi_cost
    seconds = cost(app, path, calls)
    print(f"{seconds / calls * 1e6:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
