"""An ASGI app for the idle-WebSocket measurement: lifespan and http scopes as hello-asgi
(`GET /` answers "Hello World!", the readiness check); a WebSocket on any path is
accepted and echoes what it receives."""

from benchmarks.apps import hello_asgi


async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return await hello_asgi.app(scope, receive, send)
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
