"""websocket-echo: an ASGI app that sends every WebSocket message back as it came (text as
text, bytes as bytes); plain HTTP requests get b"Hello World!" (the readiness check)."""

BODY = b"Hello World!"


async def app(scope, receive, send):
    if scope["type"] == "websocket":
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
    elif scope["type"] == "http":
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"12")],
            }
        )
        await send({"type": "http.response.body", "body": BODY})
    elif scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
