"""An ASGI app for the idle-WebSocket measurement: `GET /` answers "Hello World!" (the
readiness check), a WebSocket on any path is accepted and echoes what it receives."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"12")],
            }
        )
        await send({"type": "http.response.body", "body": b"Hello World!"})
        return
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        reply = {"type": "websocket.send"}
        if message.get("text") is not None:
            reply["text"] = message["text"]
        else:
            reply["bytes"] = message.get("bytes") or b""
        await send(reply)
