"""Starlette and FastAPI WebSocket endpoints for tests/test_ws_frameworks.py.

starlette_app:  /ws/echo (text and bytes), /ws/json (receive_json/send_json), /ws/reject
                (close before accept: 403), /ws/sub (the subprotocol "chat" when offered)
fastapi_app:    /ws/{room} (echo with the room and a query parameter), /ws-dep (a
                dependency that rejects without ?token=good: 403), plus GET /ok
"""

from fastapi import Depends, FastAPI, WebSocket, WebSocketDisconnect, WebSocketException, status
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute


async def echo(ws):
    await ws.accept()
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is not None:
                await ws.send_text(message["text"])
            else:
                await ws.send_bytes(message["bytes"])
    except WebSocketDisconnect:
        return


async def json_echo(ws):
    await ws.accept()
    data = await ws.receive_json()
    await ws.send_json({"got": data, "path": ws.url.path})
    await ws.close(code=1000)


async def reject(ws):
    await ws.close()


async def sub(ws):
    chosen = "chat" if "chat" in ws.scope["subprotocols"] else None
    await ws.accept(subprotocol=chosen)
    await ws.send_text(f"subprotocol={chosen}")
    await ws.close()


starlette_app = Starlette(
    routes=[
        WebSocketRoute("/ws/echo", echo),
        WebSocketRoute("/ws/json", json_echo),
        WebSocketRoute("/ws/reject", reject),
        WebSocketRoute("/ws/sub", sub),
    ]
)

fastapi_app = FastAPI()


@fastapi_app.get("/ok")
async def ok():
    return {"ok": True}


@fastapi_app.websocket("/ws/{room}")
async def room(websocket: WebSocket, room: str, name: str = "anon"):
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(f"{room}:{name}:{text}")
    except WebSocketDisconnect:
        pass


async def token(websocket: WebSocket, token: str = ""):
    if token != "good":
        raise WebSocketException(code=status.WS_1008_POLICY_VIOLATION)
    return token


@fastapi_app.websocket("/ws-dep")
async def guarded(websocket: WebSocket, tok: str = Depends(token)):
    await websocket.accept()
    await websocket.send_text(f"token={tok}")
    await websocket.close()
