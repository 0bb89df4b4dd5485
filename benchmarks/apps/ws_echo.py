"""websocket-echo: an ASGI app that sends every WebSocket message back as it came (text as
text, bytes as bytes); lifespan and plain HTTP as hello-asgi (b"Hello World!", the
readiness check)."""

from benchmarks.apps import hello_asgi


async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return await hello_asgi.app(scope, receive, send)
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        msg = await receive()
        if msg["type"] != "websocket.receive":
            return
        if msg.get("text") is not None:
            await send({"type": "websocket.send", "text": msg["text"]})
        else:
            await send({"type": "websocket.send", "bytes": msg["bytes"]})
