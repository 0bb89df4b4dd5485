"""For tests/test_health.py: applications that remember every path they were called
with, so a test can tell that the health check never reached them.

GET /seen answers the paths this process's application saw so far (JSON, /seen itself
left out); GET /pid the process's pid; any other path answers "app".
"""

import json
import os

SEEN = []


def _answer(path):
    if path == "/seen":
        return json.dumps(SEEN).encode()
    SEEN.append(path)
    if path == "/pid":
        return str(os.getpid()).encode()
    return b"app"


def wsgi(environ, start_response):
    body = _answer(environ.get("PATH_INFO", "/"))
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = _answer(scope["path"])
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
