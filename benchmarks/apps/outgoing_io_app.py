"""Raw ASGI app whose every request awaits an asyncio.open_connection round trip to a local
echo server (benchmarks/apps/echo_server.py, port $BENCH_ECHO_PORT), then answers 12 bytes."""

import asyncio
import os

BODY = b"Hello World!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(BODY))]
ECHO_HOST = "127.0.0.1"
ECHO_PORT = int(os.environ.get("BENCH_ECHO_PORT", "8499"))


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    reader, writer = await asyncio.open_connection(ECHO_HOST, ECHO_PORT)
    try:
        writer.write(BODY)
        body = await reader.read()  # the echo, then its close (the TIME_WAIT stays there)
    finally:
        writer.close()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})
