"""A WSGI application for the gunicorn worker tests: which process answered, and a slow view.

/                  "pid=<worker pid>"
/sleep?s=N         sleeps N seconds (blocking the worker's loop), then "slept"
/sleep?gate=PATH   blocks the worker's loop until PATH exists (at most 30 s), then "slept"

With $GUNICORN_APP_EVENTS set, /sleep appends "sleep-start <pid>" to that file as it starts,
so a test can tell when a request is in the application, and which worker has it.
"""

import os
import time
from urllib.parse import parse_qs


def _sleep(query):
    """The /sleep view's work: record the start, then block."""
    params = parse_qs(query)
    path = os.environ.get("GUNICORN_APP_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(f"sleep-start {os.getpid()}\n")
    if "gate" in params:
        gate, deadline = params["gate"][0], time.monotonic() + 30
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(float(params.get("s", ["1"])[0]))
    return b"slept"


def app(environ, start_response):
    if environ["PATH_INFO"] == "/sleep":
        body = _sleep(environ["QUERY_STRING"])
    else:
        body = f"pid={os.getpid()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi_app(scope, receive, send):
    """The same views for ASGI (the sleep blocks the event loop on purpose)."""
    if scope["type"] != "http":
        return  # no lifespan support: the server goes on without it
    if scope["path"] == "/sleep":
        body = _sleep(scope["query_string"].decode())
    else:
        body = f"pid={os.getpid()}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
