"""Django Channels through pyserver and through pyserver's gunicorn worker: a sync echo
consumer and a group-broadcast chat over the in-memory channel layer."""

import asyncio

import pytest
import websockets
from helpers import HOST, run_server

pytest.importorskip("channels")

APP = "apps.ws_channels:application"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def check_echo(port):
    async def main():
        async with websockets.connect(f"ws://{HOST}:{port}/ws/echo/") as ws:
            await ws.send("hello channels")
            text = await ws.recv()
            await ws.send(b"\x00\x01")
            return text, await ws.recv()

    assert run(main()) == ("hello channels", b"\x00\x01")


def check_chat(port):
    async def main():
        room = f"ws://{HOST}:{port}/ws/chat/lobby/"
        members = [await websockets.connect(room) for _ in range(3)]
        other = await websockets.connect(f"ws://{HOST}:{port}/ws/chat/elsewhere/")
        await members[0].send("hi all")
        got = [await asyncio.wait_for(m.recv(), 10) for m in members]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(other.recv(), 0.5)
        for ws in [*members, other]:
            await ws.close()
        return got

    assert run(main()) == ["hi all"] * 3


@pytest.fixture(scope="module")
def srv():
    with run_server(APP) as server:
        yield server


def test_channels_echo(srv):
    check_echo(srv.port)
    assert srv.wait_for_log('"GET /ws/echo/ HTTP/1.1" 101')


def test_channels_group_chat(srv):
    check_chat(srv.port)


def test_channels_http_beside_websockets(srv):
    import httpx

    assert httpx.get(srv.url + "/", trust_env=False).text == "django http"


def test_channels_unknown_route_is_refused(srv):
    from websockets.exceptions import InvalidStatus

    async def main():
        with pytest.raises(InvalidStatus) as info:
            await websockets.connect(f"ws://{HOST}:{srv.port}/ws/nowhere/")
        return info.value.response.status_code

    # Channels' URLRouter raises for an unknown route: before accept, that is a 500.
    assert run(main()) == 500


def test_channels_under_gunicorn_worker():
    pytest.importorskip("gunicorn")
    from test_gunicorn import gunicorn

    with gunicorn(APP, worker="pyserver.workers.PyserverASGIWorker", workers=1) as g:
        check_echo(g.port)
        check_chat(g.port)
