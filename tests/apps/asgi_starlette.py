"""A Starlette application: JSON, forms, uploads, streaming, SSE, background tasks,
disconnect polling, exception handlers, BaseHTTPMiddleware plus a pure ASGI middleware,
and a lifespan context manager that yields state.

ASGI_TEST_EVENTS (a file) receives one line per lifespan event and background task."""

import asyncio
import contextlib
import hashlib
import os

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route


def record(event):
    path = os.environ.get("ASGI_TEST_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(event + "\n")


async def wait_for_file(path, limit=30.0):
    """Waits (awaiting on the loop) until `path` exists, at most `limit` seconds: a gate that
    the test opens by creating the file."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not os.path.exists(path) and loop.time() < deadline:
        await asyncio.sleep(0.01)


class TeapotError(Exception):
    pass


async def json_echo(request: Request):
    data = await request.json()
    return JSONResponse({"received": data, "method": request.method})


async def form(request: Request):
    async with request.form() as data:
        fields = {}
        for key, value in data.multi_items():
            if hasattr(value, "read"):
                content = await value.read()
                fields[key] = {
                    "filename": value.filename,
                    "size": len(content),
                    "sha256": hashlib.sha256(content).hexdigest(),
                }
            else:
                fields[key] = value
    return JSONResponse({"fields": fields, "content_type": request.headers["content-type"]})


async def upload(request: Request):
    """A multipart upload, read through UploadFile in 1 MiB pieces."""
    async with request.form(max_part_size=64 << 20) as data:
        upload = data["file"]
        digest, size = hashlib.sha256(), 0
        while chunk := await upload.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        return JSONResponse(
            {"filename": upload.filename, "size": size, "sha256": digest.hexdigest()}
        )


async def stream(request: Request):
    count = int(request.query_params.get("n", "5"))

    async def numbers():
        for index in range(count):
            yield f"line {index}\n"
            await asyncio.sleep(0.01)

    return StreamingResponse(numbers(), media_type="text/plain")


async def sse(request: Request):
    """?n=COUNT&delay=SECONDS; or &gate=DIR: after event i, wait until DIR/i exists."""
    count = int(request.query_params.get("n", "3"))
    delay = float(request.query_params.get("delay", "0.2"))
    gate = request.query_params.get("gate")

    async def events():
        for index in range(count):
            yield f"id: {index}\nevent: tick\ndata: tick {index}\n\n"
            if gate:
                await wait_for_file(os.path.join(gate, str(index)))
            else:
                await asyncio.sleep(delay)

    headers = {"Cache-Control": "no-cache"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


async def background(request: Request):
    """?token=T; &gate=PATH: the task waits until PATH exists (else 0.2 s), then records."""
    token = request.query_params["token"]
    gate = request.query_params.get("gate")

    async def after():
        if gate:
            await wait_for_file(gate)
        else:
            await asyncio.sleep(0.2)
        record(f"background {token}")

    return PlainTextResponse("response first", background=BackgroundTask(after))


async def is_disconnected(request: Request):
    """Polls request.is_disconnected() for up to 10 s; records when it turns True."""
    token = request.query_params["token"]
    record(f"polling {token}")
    for _ in range(200):
        if await request.is_disconnected():
            record(f"disconnected {token}")
            break
        await asyncio.sleep(0.05)
    return PlainTextResponse("done")


async def connected(request: Request):
    """is_disconnected() is False while the client waits for the answer."""
    await request.body()
    return JSONResponse({"disconnected": await request.is_disconnected()})


async def http_error(request: Request):
    raise HTTPException(status_code=409, detail="conflict on purpose")


async def custom_error(request: Request):
    raise TeapotError("short and stout")


async def crash(request: Request):
    raise RuntimeError("starlette view crashed on purpose")


async def state(request: Request):
    return JSONResponse(
        {
            "db": request.state.db,
            "middleware": request.headers.get("x-pure-asgi"),
            "scope_state_keys": sorted(request.scope.get("state", {})),
        }
    )


async def teapot_handler(request: Request, exc: TeapotError):
    return JSONResponse({"error": str(exc)}, status_code=418)


class TimingMiddleware(BaseHTTPMiddleware):
    """Adds x-base-middleware. It leaves /is-disconnected alone: BaseHTTPMiddleware wraps
    receive() in a task group, so the already-cancelled receive() that
    request.is_disconnected() makes never sees a message behind it (a Starlette limitation,
    on every server)."""

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/is-disconnected":
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def dispatch(self, request, call_next):
        response = await call_next(request)
        response.headers["x-base-middleware"] = "seen"
        return response


class PureAsgiMiddleware:
    """Adds a request header for the app and a response header for the client."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        scope["headers"] = [*scope["headers"], (b"x-pure-asgi", b"in")]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), (b"x-pure-asgi", b"out")]
            await send(message)

        await self.app(scope, receive, send_wrapper)


@contextlib.asynccontextmanager
async def lifespan(app):
    record("startup")
    yield {"db": "connected"}
    record("shutdown")


app = Starlette(
    routes=[
        Route("/json", json_echo, methods=["POST"]),
        Route("/form", form, methods=["POST"]),
        Route("/upload", upload, methods=["POST"]),
        Route("/stream", stream),
        Route("/sse", sse),
        Route("/background", background),
        Route("/is-disconnected", is_disconnected),
        Route("/connected", connected, methods=["GET", "POST"]),
        Route("/http-error", http_error),
        Route("/custom-error", custom_error),
        Route("/crash", crash),
        Route("/state", state),
    ],
    middleware=[Middleware(TimingMiddleware), Middleware(PureAsgiMiddleware)],
    exception_handlers={TeapotError: teapot_handler},
    lifespan=lifespan,
)
