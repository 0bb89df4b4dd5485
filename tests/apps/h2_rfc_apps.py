"""Apps for tests/test_h2_rfc9113.py: the routes of apps.h2_apps, plus /pid (the worker's
pid, for RSS), /mirror (ASGI: the request body sent back as it is read), /download (a
deterministic body of any size in 64 KiB pieces) and /early (ASGI: 103 Early Hints first)."""

import hashlib
import json
import os

from apps import h2_apps

PIECE = 65536


def pattern(i):
    """Piece i of /download's body: 64 KiB that differ from piece to piece."""
    return hashlib.sha256(i.to_bytes(8, "big")).digest() * (PIECE // 32)


def download_sha256(size):
    h = hashlib.sha256()
    for i in range(-(-size // PIECE)):
        h.update(pattern(i)[: min(PIECE, size - i * PIECE)])
    return h.hexdigest()


def _size(qs):
    for part in qs.split("&"):
        if part.startswith("size="):
            return int(part[5:])
    return PIECE


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/pid":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(os.getpid()).encode()]
    if path == "/download":
        size = _size(environ.get("QUERY_STRING", ""))
        start_response("200 OK", [("Content-Length", str(size))])
        return (pattern(i)[: min(PIECE, size - i * PIECE)] for i in range(-(-size // PIECE)))
    if path == "/upload":
        h = hashlib.sha256()
        length = 0
        stream = environ["wsgi.input"]
        while chunk := stream.read(PIECE):
            h.update(chunk)
            length += len(chunk)
        body = json.dumps({"length": length, "sha256": h.hexdigest()}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    return h2_apps.wsgi(environ, start_response)


async def asgi(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/pid":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
        return
    if scope["type"] == "http" and scope["path"] == "/mirror":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                return
            more = m.get("more_body", False)
            await send(
                {"type": "http.response.body", "body": m.get("body", b""), "more_body": more}
            )
            if not more:
                return
    if scope["type"] == "http" and scope["path"] == "/download":
        size = _size(scope["query_string"].decode())
        headers = [(b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(-(-size // PIECE)):
            piece = pattern(i)[: min(PIECE, size - i * PIECE)]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["type"] == "http" and scope["path"] == "/early":
        links = [b"</style.css>; rel=preload; as=style", b"</app.js>; rel=preload; as=script"]
        await send({"type": "http.response.early_hint", "links": links})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"after hints"})
        return
    await h2_apps.asgi(scope, receive, send)
