"""Apps for tests/test_h2_streams.py, the same routes in WSGI and ASGI: /pid (the worker's
pid), /request (the request as the application sees it, as JSON: its headers in order, the
Cookie and Host values), /post (reads the body, answers its length), /slow?s= (answers
after s seconds), /big (1 MiB in one piece, the same bytes object every time) and
/pieces (1 MiB in 64 KiB pieces made as they are asked for)."""

import asyncio
import json
import os
import time

MIB = 1 << 20
PIECE = 65536
BIG = b"x" * MIB


def _seconds(qs):
    for part in qs.split("&"):
        if part.startswith("s="):
            return float(part[2:])
    return 1.0


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/pid":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(os.getpid()).encode()]
    if path == "/request":
        seen = {
            "cookie": environ.get("HTTP_COOKIE"),
            "host": environ.get("HTTP_HOST"),
            "headers": [[k, v] for k, v in environ.items() if k.startswith("HTTP_")],
        }
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(seen).encode()]
    if path == "/post":
        n = len(environ["wsgi.input"].read())
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(n).encode()]
    if path == "/slow":
        time.sleep(_seconds(environ.get("QUERY_STRING", "")))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"slow done"]
    if path == "/big":
        start_response("200 OK", [("Content-Length", str(MIB))])
        return [BIG]
    if path == "/pieces":
        start_response("200 OK", [("Content-Length", str(MIB))])
        return (b"y" * PIECE for _ in range(MIB // PIECE))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok " + path.encode()]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while (m := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    start = {"type": "http.response.start", "status": 200, "headers": []}
    if path == "/pid":
        await send(start)
        await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
        return
    if path == "/request":
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        cookies = [v for k, v in headers if k == "cookie"]
        hosts = [v for k, v in headers if k == "host"]
        seen = {
            "cookie": cookies[0] if len(cookies) == 1 else cookies,
            "host": hosts[0] if len(hosts) == 1 else hosts,
            "headers": headers,
        }
        await send(start)
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})
        return
    if path == "/post":
        n, more = 0, True
        while more:
            m = await receive()
            if m["type"] == "http.disconnect":
                return
            n += len(m.get("body", b""))
            more = m.get("more_body", False)
        await send(start)
        await send({"type": "http.response.body", "body": str(n).encode()})
        return
    if path == "/slow":
        await asyncio.sleep(_seconds(scope["query_string"].decode()))
        await send(start)
        await send({"type": "http.response.body", "body": b"slow done"})
        return
    if path == "/big":
        await send({**start, "headers": [(b"content-length", str(MIB).encode())]})
        await send({"type": "http.response.body", "body": BIG})
        return
    if path == "/pieces":
        await send({**start, "headers": [(b"content-length", str(MIB).encode())]})
        for _ in range(MIB // PIECE):
            await send({"type": "http.response.body", "body": b"y" * PIECE, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send(start)
    await send({"type": "http.response.body", "body": b"ok " + path.encode()})
