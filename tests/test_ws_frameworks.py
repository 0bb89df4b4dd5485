"""Starlette and FastAPI WebSocket endpoints through pyserver, with the websockets client."""

import asyncio
import json

import pytest
import websockets
from helpers import HOST, run_server
from websockets.exceptions import InvalidStatus


@pytest.fixture(scope="module")
def starlette_srv():
    with run_server("apps.ws_frameworks:starlette_app") as server:
        yield server


@pytest.fixture(scope="module")
def fastapi_srv():
    with run_server("apps.ws_frameworks:fastapi_app") as server:
        yield server


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def url(srv, path):
    return f"ws://{HOST}:{srv.port}{path}"


def test_starlette_websocket_route_echo(starlette_srv):
    async def main():
        async with websockets.connect(url(starlette_srv, "/ws/echo")) as ws:
            await ws.send("hi")
            text = await ws.recv()
            await ws.send(b"\x01\x02")
            data = await ws.recv()
            return text, data

    assert run(main()) == ("hi", b"\x01\x02")
    assert starlette_srv.wait_for_log('"GET /ws/echo HTTP/1.1" 101')


def test_starlette_json_and_close(starlette_srv):
    async def main():
        async with websockets.connect(url(starlette_srv, "/ws/json")) as ws:
            await ws.send(json.dumps({"a": [1, 2]}))
            reply = json.loads(await ws.recv())
            await ws.wait_closed()
            return reply, ws.close_code

    assert run(main()) == ({"got": {"a": [1, 2]}, "path": "/ws/json"}, 1000)


def test_starlette_close_before_accept_is_403(starlette_srv):
    async def main():
        with pytest.raises(InvalidStatus) as info:
            await websockets.connect(url(starlette_srv, "/ws/reject"))
        return info.value.response.status_code

    assert run(main()) == 403


def test_starlette_unknown_websocket_route_is_403(starlette_srv):
    # Starlette closes an unmatched websocket before accepting it.
    async def main():
        with pytest.raises(InvalidStatus) as info:
            await websockets.connect(url(starlette_srv, "/nowhere"))
        return info.value.response.status_code

    assert run(main()) == 403


def test_starlette_subprotocol(starlette_srv):
    async def main():
        async with websockets.connect(
            url(starlette_srv, "/ws/sub"), subprotocols=["other", "chat"]
        ) as ws:
            return ws.subprotocol, await ws.recv()

    assert run(main()) == ("chat", "subprotocol=chat")


def test_fastapi_websocket_with_path_and_query(fastapi_srv):
    async def main():
        async with websockets.connect(url(fastapi_srv, "/ws/lobby?name=ann")) as ws:
            await ws.send("hello")
            return await ws.recv()

    assert run(main()) == "lobby:ann:hello"


def test_fastapi_dependency_rejection_and_acceptance(fastapi_srv):
    async def main():
        with pytest.raises(InvalidStatus) as info:
            await websockets.connect(url(fastapi_srv, "/ws-dep"))
        async with websockets.connect(url(fastapi_srv, "/ws-dep?token=good")) as ws:
            return info.value.response.status_code, await ws.recv()

    assert run(main()) == (403, "token=good")


def test_fastapi_http_and_websocket_on_one_server(fastapi_srv):
    import httpx

    assert httpx.get(f"{fastapi_srv.url}/ok", trust_env=False).json() == {"ok": True}
    test_fastapi_websocket_with_path_and_query(fastapi_srv)
