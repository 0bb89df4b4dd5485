"""Apps for tests/test_h2.py: one WSGI and one ASGI application, with routes for bodies,
streaming, trailers, resets and slow responses. H2_EVENTS names a file each app appends
what the test must see happen on the server side (close() called, http.disconnect)."""

import asyncio
import hashlib
import json
import os
import time


def record(event):
    path = os.environ.get("H2_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


def _query(qs):
    out = {}
    for part in qs.split("&"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


class Recorded:
    """A response iterable that records its close()."""

    def __init__(self, name, chunks):
        self.name = name
        self.chunks = chunks

    def __iter__(self):
        return iter(self.chunks)

    def close(self):
        record(f"close {self.name}")


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ.get("QUERY_STRING", ""))
    if path == "/echo":
        body = environ["wsgi.input"].read()
        out = json.dumps(
            {
                "protocol": environ["SERVER_PROTOCOL"],
                "method": environ["REQUEST_METHOD"],
                "length": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "host": environ.get("HTTP_HOST"),
                "scheme": environ["wsgi.url_scheme"],
                "remote": [environ["REMOTE_ADDR"], environ["REMOTE_PORT"]],
                "server": [environ["SERVER_NAME"], environ["SERVER_PORT"]],
            }
        ).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [out]
    if path == "/big":
        size = int(q.get("size", "1000000"))
        start_response("200 OK", [("Content-Length", str(size))])
        return [b"x" * size]
    if path == "/stream":
        n, size = int(q.get("n", "10")), int(q.get("size", "1000"))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return Recorded(q.get("name", "stream"), (bytes([65 + i % 26]) * size for i in range(n)))
    if path == "/write":
        size, n = int(q.get("size", "100000")), int(q.get("n", "10"))
        write = start_response("200 OK", [])
        for i in range(n):
            write(bytes([65 + i % 26]) * size)
        return []
    if path == "/nocontent":
        start_response("204 No Content", [])
        return [b"not allowed"]
    if path == "/short":
        start_response("200 OK", [("Content-Length", "100")])
        return [b"only ten b"]
    if path == "/long":
        start_response("200 OK", [("Content-Length", "5")])
        return [b"five plus more"]
    if path == "/slow":
        time.sleep(float(q.get("s", "1")))
        start_response("200 OK", [])
        return [b"slow done"]
    if path == "/crash":
        raise RuntimeError("boom")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{environ['SERVER_PROTOCOL']} {path}".encode()]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    q = _query(scope["query_string"].decode())
    if path == "/echo":
        h = hashlib.sha256()
        length = 0
        delay = float(q.get("delay", "0"))
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                record("disconnect echo")
                return
            h.update(m.get("body", b""))
            length += len(m.get("body", b""))
            if delay:
                await asyncio.sleep(delay)
            if not m.get("more_body"):
                break
        out = json.dumps(
            {
                "http_version": scope["http_version"],
                "length": length,
                "sha256": h.hexdigest(),
                "scheme": scope["scheme"],
            }
        ).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": out})
        return
    if path == "/stream":
        n, size = int(q.get("n", "10")), int(q.get("size", "1000"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n):
            await send(
                {
                    "type": "http.response.body",
                    "body": bytes([65 + i % 26]) * size,
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/trailers":
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"with trailers"})
        await send({"type": "http.response.trailers", "headers": [(b"X-Checksum", b"abc123")]})
        return
    if path == "/hold":
        # A response that never ends by itself: the client resets it.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        while (m := await receive())["type"] != "http.disconnect":
            pass
        record(f"{m['type']} hold")
        return
    if path == "/headers":
        # Mixed-case names of several lengths (the lower-casing works 8 bytes at a time)
        # and fields HTTP/2 forbids, which the server drops.
        headers = [
            (b"X-A", b"1"),
            (b"X-Eight1", b"2"),
            (b"x-lower-already-but-Z", b"3"),
            (b"X-Mixed-Case-Field-Name-Longer-Than-Sixteen", b"4"),
            (b"Connection", b"keep-alive"),
            (b"Keep-Alive", b"timeout=5"),
            (b"Upgrade", b"h2c"),
            (b"Content-Length", b"2"),
        ]
        status = int(q.get("status", "200"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if path == "/slow":
        await asyncio.sleep(float(q.get("s", "1")))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"slow done"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": f"{scope['http_version']} {path}".encode()})
