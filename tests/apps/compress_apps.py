"""Apps for tests/test_compress.py: the same routes as WSGI and ASGI.

/text/N       text/plain, N bytes in one piece (with Content-Length)
/json/N       application/json, N bytes
/png/N        image/png, N bytes (a type not compressed)
/stream/N/K   text/plain, K pieces of N bytes, no Content-Length
/sized/N/K    the same with Content-Length (N * K)
/sse/N/K      text/event-stream, K pieces of N bytes
/big/MIB      text/plain, MIB MiB in 64 KiB pieces, no Content-Length
/head/NAME    /text/4096 with the header NAME given by the query (?value=...)
/file?path=P  text/css: the file P, sent with wsgi.file_wrapper or http.response.pathsend
/pid          the worker's pid (helpers.worker_pid)
/status/CODE  CODE with a text/plain body of 4096 bytes (204 and 304 without a body)
"""

import os
from urllib.parse import parse_qs, unquote

LINE = b"pyserver compresses this line of text, which repeats a lot. 0123456789\n"


def body(n: int) -> bytes:
    """n bytes of text, the same for every call (what the tests compare with)."""
    return (LINE * (n // len(LINE) + 1))[:n]


def route(path: str, query: str):
    """(status, headers, pieces, length_known) for a path."""
    parts = [p for p in path.split("/") if p]
    kind = parts[0] if parts else ""
    nums = [int(p) for p in parts[1:] if p.isdigit()]
    if kind in ("text", "json", "png"):
        ctype = {"text": "text/plain; charset=utf-8", "json": "application/json"}.get(
            kind, "image/png"
        )
        data = body(nums[0])
        return 200, [("Content-Type", ctype)], [data], True
    if kind in ("stream", "sized", "sse"):
        n, k = nums
        ctype = "text/event-stream" if kind == "sse" else "text/plain"
        headers = [("Content-Type", ctype)]
        if kind == "sized":
            headers.append(("Content-Length", str(n * k)))
        return 200, headers, [body(n)] * k, False
    if kind == "big":
        piece = body(64 * 1024)
        return 200, [("Content-Type", "text/plain")], (piece for _ in range(nums[0] * 16)), False
    if kind == "head":
        value = unquote(parse_qs(query).get("value", [""])[0])
        headers = [("Content-Type", "text/html"), (parts[1], value)]
        status = 206 if parts[1].lower() == "content-range" else 200
        return status, headers, [body(4096)], True
    if kind == "pid":
        return 200, [("Content-Type", "text/plain")], [str(os.getpid()).encode()], True
    if kind == "status":
        code = nums[0]
        if code in (204, 304):
            return code, [("Content-Type", "text/plain")], [], True
        return code, [("Content-Type", "text/plain")], [body(4096)], True
    return 404, [("Content-Type", "text/plain")], [b"no such route\n"], True


REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 304: "Not Modified"}


def wsgi(environ, start_response):
    if environ["PATH_INFO"] == "/file":
        path = unquote(parse_qs(environ["QUERY_STRING"])["path"][0])
        start_response("200 OK", [("Content-Type", "text/css")])
        return environ["wsgi.file_wrapper"](open(path, "rb"))  # noqa: SIM115 (the server closes it)
    status, headers, pieces, known = route(environ["PATH_INFO"], environ.get("QUERY_STRING", ""))
    start_response(f"{status} {REASONS.get(status, 'Other')}", headers)
    if known:
        return list(pieces)
    return iter(pieces)  # streamed: no length the server could add


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    query = scope.get("query_string", b"").decode("latin-1")
    if scope["path"] == "/file":
        path = unquote(parse_qs(query)["path"][0])
        headers = [(b"content-type", b"text/css")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.pathsend", "path": path})
        return
    status, headers, pieces, known = route(scope["path"], query)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    if known:
        await send({"type": "http.response.body", "body": b"".join(pieces)})
        return
    for piece in pieces:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
