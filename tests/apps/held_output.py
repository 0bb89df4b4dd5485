"""Apps for tests/test_held_output.py: responses that the core holds back until its loop
is about to sleep, and what must not wait for that.

/block?ms=N      the application call blocks the worker's loop for N ms (a synchronous
                 view, or a coroutine step that computes), then answers "blocked"
/echo?id=K       answers "id=K" (each connection's own answer)
/hint-then-block?file=F
                 ASGI only: sends 103 Early Hints, then blocks the loop until F exists (at
                 most 10 s) and answers "released" or "timed out"
"""

import os
import time
from urllib.parse import parse_qs

TEXT = [(b"content-type", b"text/plain")]


def _query(qs):
    return {k: v[0] for k, v in parse_qs(qs).items()}


def _wait_for_file(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.005)
    return False


def _answer(path, q):
    if path == "/block":
        time.sleep(int(q.get("ms", "100")) / 1000)
        return b"blocked"
    if path == "/echo":
        return b"id=" + q.get("id", "").encode()
    return b"not found"


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    q = _query(scope["query_string"].decode())
    if scope["path"] == "/hint-then-block":
        await send({"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload"]})
        body = b"released" if _wait_for_file(q["file"]) else b"timed out"
    else:
        body = _answer(scope["path"], q)
    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
    await send({"type": "http.response.body", "body": body})


def wsgi_app(environ, start_response):
    body = _answer(environ["PATH_INFO"], _query(environ.get("QUERY_STRING", "")))
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
