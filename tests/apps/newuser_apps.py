"""The applications of tests/test_newuser.py (what a new user runs into).

asgi: /raise raises before http.response.start, /silent returns without a response, /slow
answers after a second, anything else answers 200 "ok". wsgi: 200 "ok", except /flask-error
writes an "ERROR in app" line to wsgi.errors as Flask's logger does, and /short sends fewer
bytes than its Content-Length.
three_args: a sync callable with ASGI's three positional parameters returning a coroutine.
"""

import asyncio


class Boom(Exception):
    pass


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].replace("lifespan.", "")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    if scope["path"] == "/raise":
        raise Boom("before the response")
    if scope["path"] == "/silent":
        return
    if scope["path"] == "/slow":
        print("SLOW started", flush=True)
        await asyncio.sleep(1.0)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/flask-error":
        environ["wsgi.errors"].write(
            "[2026-01-01 00:00:00,000] ERROR in app: Exception on /flask-error [GET]\n"
        )
        environ["wsgi.errors"].flush()
    if path == "/short":
        start_response("200 OK", [("Content-Length", "10")])
        return [b"abc"]
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def three_args(scope, receive, send):
    return asgi(scope, receive, send)
