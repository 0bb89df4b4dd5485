"""A WSGI application for the gunicorn worker tests: which process answered, and a slow view.

/            "pid=<worker pid>"
/sleep?s=N   sleeps N seconds (blocking the worker's loop), then "slept"

With $GUNICORN_APP_EVENTS set, /sleep appends "sleep-start <pid>" to that file as it starts,
so a test can tell when a request is in the application.
"""

import os
import time
from urllib.parse import parse_qs


def _record_start():
    path = os.environ.get("GUNICORN_APP_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(f"sleep-start {os.getpid()}\n")


def app(environ, start_response):
    if environ["PATH_INFO"] == "/sleep":
        seconds = float(parse_qs(environ["QUERY_STRING"]).get("s", ["1"])[0])
        _record_start()
        time.sleep(seconds)
        body = b"slept"
    else:
        body = f"pid={os.getpid()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi_app(scope, receive, send):
    """The same two views for ASGI (the sleep blocks the event loop on purpose)."""
    if scope["type"] != "http":
        return  # no lifespan support: the server goes on without it
    if scope["path"] == "/sleep":
        seconds = float(parse_qs(scope["query_string"].decode()).get("s", ["1"])[0])
        _record_start()
        time.sleep(seconds)
        body = b"slept"
    else:
        body = f"pid={os.getpid()}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
