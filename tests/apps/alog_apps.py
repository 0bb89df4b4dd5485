"""The applications of tests/test_access_log.py: the same answers from WSGI and ASGI.

/atoms     sleeps 50 ms (so the duration atoms have something to measure), then answers 200
           with a body, Content-Type and an X-Out header with a byte above 0x7f
/anything  404 with a body
WebSocket (ASGI): /ws accepts and closes; /ws-deny closes before accepting (403)
"""

import asyncio
import time

BODY = b"access log body"
NOT_FOUND = b"nothing here"


def wsgi(environ, start_response):
    if environ["PATH_INFO"].startswith("/atoms"):
        time.sleep(0.05)
        headers = [("Content-Type", "text/plain"), ("X-Out", "o\xe9")]
        start_response("200 OK", [*headers, ("Content-Length", str(len(BODY)))])
        return [BODY]
    start_response("404 Not Found", [("Content-Length", str(len(NOT_FOUND)))])
    return [NOT_FOUND]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].replace("lifespan.", "")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if scope["path"] == "/ws":
            await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["path"].startswith("/atoms"):
        await asyncio.sleep(0.05)
        status, body = 200, BODY
        headers = [(b"content-type", b"text/plain"), (b"x-out", b"o\xe9")]
    else:
        status, body, headers = 404, NOT_FOUND, []
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
