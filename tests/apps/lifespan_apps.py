"""Small ASGI apps that exercise the lifespan protocol (tests/test_lifespan.py).

Each app class records what happened to it in `self.events`, so a test can check the order of
startup, serving and shutdown. `starlette_app()` builds a Starlette app whose lifespan is an
async context manager yielding its state. `served` is for real servers (see its comment).
"""

import asyncio
import contextlib
import json
import os


class Recorder:
    """Base: an ASGI app that records events and serves "http" with a tiny response."""

    def __init__(self):
        self.events = []
        self.scopes = []

    async def __call__(self, scope, receive, send):
        self.scopes.append(scope)
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
        else:
            await self.http(scope, receive, send)

    async def lifespan(self, scope, receive, send):
        raise NotImplementedError

    async def http(self, scope, receive, send):
        self.events.append("http")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Ordered(Recorder):
    """Completes startup and shutdown, putting a value into the state on startup."""

    async def lifespan(self, scope, receive, send):
        message = await receive()
        self.events.append(message["type"])
        await asyncio.sleep(0.01)  # a startup that takes a loop trip or two
        scope["state"]["db"] = "connected"
        self.events.append("startup done")
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        self.events.append(message["type"])
        await asyncio.sleep(0.01)
        self.events.append("shutdown done")
        await send({"type": "lifespan.shutdown.complete"})


class StartupFails(Recorder):
    async def lifespan(self, scope, receive, send):
        await receive()
        self.events.append("startup")
        await send({"type": "lifespan.startup.failed", "message": "no database"})


class StartupRaises(Recorder):
    async def lifespan(self, scope, receive, send):
        await receive()
        self.events.append("startup")
        raise RuntimeError("startup exploded")


class ShutdownFails(Recorder):
    async def lifespan(self, scope, receive, send):
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        self.events.append("shutdown")
        await send({"type": "lifespan.shutdown.failed", "message": "could not flush"})


class ShutdownRaises(Recorder):
    async def lifespan(self, scope, receive, send):
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        self.events.append("shutdown")
        raise RuntimeError("shutdown exploded")


class HttpOnly(Recorder):
    """Raises for any scope but "http", as Django's ASGIHandler does."""

    async def lifespan(self, scope, receive, send):
        raise ValueError(f"can only handle ASGI/HTTP connections, not {scope['type']}")


class ReturnsEarly(Recorder):
    """Returns without answering startup (no exception): lifespan ends, serving goes on."""

    async def lifespan(self, scope, receive, send):
        await receive()
        self.events.append("startup ignored")


def starlette_app():
    """A Starlette app with a lifespan context manager; returns (app, events)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    events = []

    @contextlib.asynccontextmanager
    async def lifespan(app):
        events.append("enter")
        yield {"pool": "ready"}
        events.append("exit")

    async def home(request):
        return JSONResponse({"pool": request.state.pool})

    return Starlette(routes=[Route("/", home)], lifespan=lifespan), events


# ---- for real servers (tests/apps/lifespan_serve.py) ----
#
# `served` is steered by environment variables:
#     LIFESPAN_TEST_EVENTS   a file that gets one line per event ("startup", "request start", ...)
#     LIFESPAN_TEST_STARTUP  "fail": answer startup.failed; "raise": raise in startup;
#                            "reject": raise on the lifespan scope like Django; "slow": take 0.5 s


def record(event):
    path = os.environ.get("LIFESPAN_TEST_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(event + "\n")


async def served(scope, receive, send):
    if scope["type"] == "lifespan":
        await _served_lifespan(scope, receive, send)
        return
    path = scope["path"]
    record(f"request start {path}")
    if path == "/slow":
        await asyncio.sleep(1.0)
    body = json.dumps({"state": scope.get("state"), "pid": os.getpid()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
    record(f"request end {path}")


async def _served_lifespan(scope, receive, send):
    how = os.environ.get("LIFESPAN_TEST_STARTUP", "")
    if how == "reject":
        raise ValueError("can only handle ASGI/HTTP connections, not lifespan")
    await receive()
    if how == "raise":
        raise RuntimeError("startup raised on purpose")
    if how == "fail":
        await send({"type": "lifespan.startup.failed", "message": "startup failed on purpose"})
        return
    if how == "slow":
        await asyncio.sleep(0.5)
    scope["state"]["db"] = "connected"
    record("startup")
    await send({"type": "lifespan.startup.complete"})
    await receive()
    record("shutdown")
    await send({"type": "lifespan.shutdown.complete"})
