"""streams (ASGI): a large file sent three ways, and an upload read to the end.

/        "Hello World!" (the readiness check)
/file    the file of $BENCH_STREAM_FILE with http.response.pathsend (501 when the
         server does not offer the extension)
/gen     the same file in 64 KiB http.response.body messages (more_body=True)
/upload  receives the body to the end, answers the byte count
"""

import os

CHUNK = 64 * 1024
HELLO = b"Hello World!"


async def _answer(send, status, body):
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    path = scope["path"]
    if path in ("/file", "/gen"):
        name = os.environ["BENCH_STREAM_FILE"]
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(os.path.getsize(name)).encode()),
            ],
        }
        if path == "/file":
            if "http.response.pathsend" not in (scope.get("extensions") or {}):
                return await _answer(send, 501, b"no http.response.pathsend")
            await send(start)
            return await send({"type": "http.response.pathsend", "path": name})
        await send(start)
        with open(name, "rb") as f:
            while chunk := f.read(CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        return await send({"type": "http.response.body", "body": b""})
    if path == "/upload":
        n, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            n += len(message.get("body", b""))
            more = message.get("more_body", False)
        return await _answer(send, 200, str(n).encode())
    return await _answer(send, 200, HELLO)
