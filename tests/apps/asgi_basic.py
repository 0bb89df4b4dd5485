"""The raw ASGI 3 application behind most ASGI tests (no framework in between).

`app` dispatches on the first segment of the path (`/echo/...` -> the `echo` handler), like
apps/basic.py does for WSGI, so one server process serves every behaviour. It also speaks
the lifespan protocol; the environment variables below steer it:

    ASGI_TEST_EVENTS   a file that lifespan and some handlers append one line per event to
                       ("startup", "shutdown", "request-start", ...), to check their order
    ASGI_TEST_STARTUP  "fail": answer lifespan.startup.failed; "raise": raise in startup

`asgi2_app` is an ASGI 2 (double callable) class; `legacy_lifespan_app` rejects lifespan the
way Django does (raises on a non-HTTP scope).
"""

import asyncio
import contextvars
import hashlib
import json
import os
import struct
import sys
import time
from urllib.parse import parse_qsl

ROUTES = {}
TEXT = [(b"content-type", b"text/plain")]


def route(name):
    def register(handler):
        ROUTES[name] = handler
        return handler

    return register


def record(event):
    """Append one line to $ASGI_TEST_EVENTS (if set)."""
    path = os.environ.get("ASGI_TEST_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(event + "\n")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    assert scope["type"] == "http", scope["type"]
    # path includes root_path (the ASGI spec); route on what follows it
    segment = scope["path"][len(scope.get("root_path", "")) :].split("/", 2)[1]
    handler = ROUTES.get(segment, not_found)
    await handler(scope, receive, send)


async def lifespan(scope, receive, send):
    message = await receive()
    assert message["type"] == "lifespan.startup", message
    mode = os.environ.get("ASGI_TEST_STARTUP", "")
    if mode == "raise":
        raise RuntimeError("startup raised on purpose")
    if mode == "fail":
        await send({"type": "lifespan.startup.failed", "message": "startup failed on purpose"})
        return
    if "state" in scope:
        scope["state"]["greeting"] = "hello from lifespan"
        scope["state"]["loop_id"] = id(asyncio.get_running_loop())
        scope["state"]["pid"] = os.getpid()
    record("startup")
    await send({"type": "lifespan.startup.complete"})
    message = await receive()
    assert message["type"] == "lifespan.shutdown", message
    record("shutdown")
    await send({"type": "lifespan.shutdown.complete"})


# --------------------------------------------------------------------------- helpers


def query(scope):
    """The query string as a dict of last values."""
    return dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))


def header(scope, name, default=None):
    for key, value in scope["headers"]:
        if key == name:
            return value
    return default


async def respond(send, body, status=200, headers=TEXT):
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def wait_for_file(path, limit=30.0):
    """Waits (on the event loop) until `path` exists, at most `limit` seconds: a gate that the
    test opens by creating the file, so nothing depends on how fast the machine is."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def append_line(path, line):
    with open(path, "a") as out:
        out.write(line + "\n")


async def respond_json(send, value, status=200):
    body = json.dumps(value).encode()
    await respond(send, body, status, [(b"content-type", b"application/json")])


async def read_body(receive):
    """The whole request body and the number of http.request messages it came in."""
    parts, messages = [], 0
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        messages += 1
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts), messages


def jsonable(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    return value


# --------------------------------------------------------------------------- handlers


async def not_found(scope, receive, send):
    await respond(send, b"not found", 404)


@route("hello")
async def hello(scope, receive, send):
    await respond(send, b"hello world")


@route("pid")
async def pid(scope, receive, send):
    await respond(send, str(os.getpid()).encode())


@route("query")
async def echo_query(scope, receive, send):
    await respond(send, scope["query_string"])


def is_pair(value, first_type, second_type):
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], first_type)
        and isinstance(value[1], second_type)
    )


def scope_problems(scope):
    """Every way `scope` breaks the ASGI HTTP connection scope (spec 2.3/2.4), as strings.

    `extensions` is reported apart (see /scope) since uvicorn leaves it out.
    """
    problems = []

    def check(condition, what):
        if not condition:
            problems.append(what)

    check(scope.get("type") == "http", f"type {scope.get('type')!r}")
    asgi = scope.get("asgi")
    check(isinstance(asgi, dict), f"asgi {asgi!r}")
    if isinstance(asgi, dict):
        check(asgi.get("version") == "3.0", f"asgi.version {asgi.get('version')!r}")
        check(asgi.get("spec_version") in ("2.3", "2.4"), f"spec_version {asgi!r}")
    check(
        scope.get("http_version") in ("1.0", "1.1"), f"http_version {scope.get('http_version')!r}"
    )
    method = scope.get("method")
    check(isinstance(method, str) and method == method.upper(), f"method {method!r}")
    check(scope.get("scheme") == "http", f"scheme {scope.get('scheme')!r}")
    check(isinstance(scope.get("path"), str), f"path {scope.get('path')!r}")
    check(isinstance(scope.get("raw_path"), bytes), f"raw_path {scope.get('raw_path')!r}")
    check(
        isinstance(scope.get("query_string"), bytes), f"query_string {scope.get('query_string')!r}"
    )
    check(isinstance(scope.get("root_path"), str), f"root_path {scope.get('root_path')!r}")
    headers = scope.get("headers")
    check(isinstance(headers, (list, tuple)), f"headers {type(headers).__name__}")
    for item in headers or ():
        check(is_pair(item, bytes, bytes), f"header item {item!r}")
        if is_pair(item, bytes, bytes):
            check(item[0] == item[0].lower(), f"header name not lower-case {item[0]!r}")
    client = scope.get("client")
    check(client is None or is_pair(client, str, int), f"client {client!r}")
    server = scope.get("server")
    check(
        server is None or is_pair(server, str, int) or (is_pair(server, str, type(None))),
        f"server {server!r}",
    )
    check(isinstance(scope.get("state"), dict), f"state {scope.get('state')!r}")
    return problems


@route("scope")
async def scope_view(scope, receive, send):
    """The scope as JSON, plus what is wrong with it, plus a state-leak probe."""
    body, _ = await read_body(receive)
    state = scope.get("state")
    leaked = isinstance(state, dict) and "mutated_by_request" in state
    if isinstance(state, dict):
        state["mutated_by_request"] = scope["path"]  # must not reach the next request
    extensions = scope.get("extensions")
    described = {
        key: jsonable(value) for key, value in scope.items() if key not in ("state", "extensions")
    }
    await respond_json(
        send,
        {
            "problems": scope_problems(scope),
            "scope": described,
            "types": {key: type(value).__name__ for key, value in scope.items()},
            "extensions_type": type(extensions).__name__,
            "extensions": sorted(extensions) if isinstance(extensions, dict) else None,
            "state": sorted(state) if isinstance(state, dict) else None,
            "greeting": state.get("greeting") if isinstance(state, dict) else None,
            "state_leaked": leaked,
            "body": body.decode("latin-1"),
            "loop_matches_lifespan": isinstance(state, dict)
            and state.get("loop_id") == id(asyncio.get_running_loop()),
        },
    )


@route("echo")
async def echo(scope, receive, send):
    """The request body back, with the number of http.request messages in x-messages."""
    body, messages = await read_body(receive)
    headers = [*TEXT, (b"x-messages", str(messages).encode())]
    await respond(send, body, headers=headers)


@route("stream")
async def stream(scope, receive, send):
    """?n=COUNT&delay=SECONDS&cl=1: COUNT body messages "chunk-i\\n" with more_body.
    &gate=PATH: after the first message, waits until PATH exists before the others."""
    params = query(scope)
    count = int(params.get("n", "5"))
    delay = float(params.get("delay", "0"))
    gate = params.get("gate")
    chunks = [f"chunk-{index}\n".encode() for index in range(count)]
    headers = list(TEXT)
    if params.get("cl") == "1":
        headers.append((b"content-length", str(sum(map(len, chunks))).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for index, chunk in enumerate(chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if gate and index == 0:
            await wait_for_file(gate)
        if delay:
            await asyncio.sleep(delay)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@route("big")
async def big(scope, receive, send):
    """?size=BYTES: 64 KiB body messages, each starting with its index (8 bytes, big-endian),
    with Content-Length; the same body as apps.basic's /big."""
    size = int(query(scope).get("size", str(1 << 30)))
    chunk = 65536
    filler = b"x" * (chunk - 8)
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(size // chunk * chunk).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for index in range(size // chunk):
        body = struct.pack(">Q", index) + filler
        await send({"type": "http.response.body", "body": body, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@route("upload")
async def upload(scope, receive, send):
    """Hashes the body message by message (pausing every 8 MiB, so that the client is faster
    than the app and the server has to apply backpressure); reports bytes and SHA-256."""
    digest = hashlib.sha256()
    total = next_pause = 0
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        part = message.get("body", b"")
        total += len(part)
        digest.update(part)
        if total >= next_pause:
            next_pause += 8 << 20
            await asyncio.sleep(0.02)
        if not message.get("more_body", False):
            break
    await respond_json(send, {"bytes": total, "sha256": digest.hexdigest()})


@route("receive-waits")
async def receive_waits(scope, receive, send):
    """Reads the body, then checks that another receive() blocks while the client is there."""
    body, _ = await read_body(receive)
    try:
        message = await asyncio.wait_for(receive(), 0.3)
    except asyncio.TimeoutError:
        result = "waited"
    else:
        result = f"returned {message['type']}"
    await respond(send, result.encode())


@route("disconnect")
async def disconnect(scope, receive, send):
    """?marker=PATH&propagate=1: streams 1 KiB chunks every 20 ms until send() fails (or 10 s
    pass).

    A concurrent receive() records the message type in PATH ("http.disconnect") when it
    returns; the send loop records "send-raised <class> oserror=<bool>" or
    "send-never-raised". With propagate=1 the send() error is re-raised to the server.
    """
    params = query(scope)
    marker = params["marker"]
    await read_body(receive)

    def note(line):
        with open(marker, "a") as out:
            out.write(line + "\n")

    async def watch():
        message = await receive()
        note(message["type"])

    watcher = asyncio.ensure_future(watch())
    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            await send({"type": "http.response.body", "body": b"x" * 1024, "more_body": True})
            await asyncio.sleep(0.02)
        note("send-never-raised")
    except Exception as exc:
        note(f"send-raised {type(exc).__name__} oserror={isinstance(exc, OSError)}")
        if params.get("propagate") == "1":
            watcher.cancel()
            raise
    try:
        await asyncio.wait_for(watcher, 2)
    except asyncio.TimeoutError:
        note("receive-never-returned")


@route("body-progress")
async def body_progress(scope, receive, send):
    """Answers each http.request message as it arrives with a line "<its body length>\n", so
    a client can check that body chunks reach the app before the body is complete."""
    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        line = f"{len(message.get('body', b''))}\n".encode()
        await send({"type": "http.response.body", "body": line, "more_body": True})
        if not message.get("more_body", False):
            break
    await send({"type": "http.response.body", "body": b"end\n"})


@route("partial-body")
async def partial_body(scope, receive, send):
    """?marker=PATH: records the type of every message receive() returns until the body ends
    or the client leaves (a client that sends half a body, then disconnects)."""
    marker = query(scope)["marker"]
    while True:
        message = await receive()
        with open(marker, "a") as out:
            out.write(message["type"] + "\n")
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    if message["type"] == "http.request":
        await respond(send, b"whole body")


@route("receive-after-response")
async def receive_after_response(scope, receive, send):
    """?marker=PATH: completes the response, then records what another receive() returns."""
    marker = query(scope)["marker"]
    await read_body(receive)
    await respond(send, b"done")
    try:
        message = await asyncio.wait_for(receive(), 2)
        result = message["type"]
    except asyncio.TimeoutError:
        result = "receive-timed-out"
    with open(marker, "a") as out:
        out.write(result + "\n")


@route("raise-before")
async def raise_before(scope, receive, send):
    raise RuntimeError("raised before the response started (on purpose)")


@route("raise-after")
async def raise_after(scope, receive, send):
    headers = [*TEXT, (b"content-length", b"100")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"partial", "more_body": True})
    raise RuntimeError("raised after the response started (on purpose)")


@route("raise-after-chunked")
async def raise_after_chunked(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": TEXT})
    await send({"type": "http.response.body", "body": b"partial", "more_body": True})
    raise RuntimeError("raised after the response started (on purpose)")


@route("no-response")
async def no_response(scope, receive, send):
    """Returns without sending anything."""


@route("start-only")
async def start_only(scope, receive, send):
    """Starts the response, then returns without a body."""
    await send({"type": "http.response.start", "status": 200, "headers": TEXT})


@route("pathsend")
async def pathsend(scope, receive, send):
    """?path=P: the file P through the http.response.pathsend extension."""
    if "http.response.pathsend" not in scope.get("extensions", {}):
        await respond(send, b"no http.response.pathsend in scope extensions", 501)
        return
    path = query(scope)["path"]
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(os.path.getsize(path)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.pathsend", "path": path})


@route("generated-headers")
async def generated_headers(scope, receive, send):
    """Response headers from a generator (an iterable, as the spec allows) of fresh pairs,
    one value too big for the allocator to keep around once freed."""
    size = int(query(scope).get("size", "300000"))
    headers = ((b"x-gen-%d" % i, b"v" * size) for i in range(2))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@route("early-hint")
async def early_hint(scope, receive, send):
    if "http.response.early_hint" not in scope.get("extensions", {}):
        await respond(send, b"no http.response.early_hint in scope extensions", 501)
        return
    links = [b"</style.css>; rel=preload; as=style", b"</app.js>; rel=preload; as=script"]
    await send({"type": "http.response.early_hint", "links": links})
    await respond(send, b"final response")


@route("trailers")
async def trailers(scope, receive, send):
    """Body "part1part2"; trailer x-checksum: its SHA-256, when the extension is offered."""
    offered = "http.response.trailers" in scope.get("extensions", {})
    await send({"type": "http.response.start", "status": 200, "headers": TEXT, "trailers": offered})
    await send({"type": "http.response.body", "body": b"part1", "more_body": True})
    await send({"type": "http.response.body", "body": b"part2", "more_body": False})
    if offered:
        checksum = hashlib.sha256(b"part1part2").hexdigest().encode()
        await send(
            {
                "type": "http.response.trailers",
                "headers": [(b"x-checksum", checksum)],
                "more_trailers": False,
            }
        )


@route("extensions")
async def extensions(scope, receive, send):
    await respond_json(send, sorted(scope.get("extensions") or {}))


@route("sleep")
async def sleep(scope, receive, send):
    """?s=SECONDS&event=NAME: sleeps; records NAME-start and NAME-done if given."""
    params = query(scope)
    event = params.get("event")
    if event:
        record(f"{event}-start")
    await asyncio.sleep(float(params.get("s", "1")))
    if event:
        record(f"{event}-done")
    await respond(send, b"slept")


@route("gate")
async def gate_view(scope, receive, send):
    """?path=GATE&marker=PATH: appends "start" to PATH, waits until GATE exists (at most 30 s,
    awaiting on the loop), appends "done" and answers "opened" (or "gate never opened")."""
    params = query(scope)
    append_line(params["marker"], "start")
    await wait_for_file(params["path"])
    append_line(params["marker"], "done")
    await respond(send, b"opened" if os.path.exists(params["path"]) else b"gate never opened")


@route("outgoing")
async def outgoing(scope, receive, send):
    """?url=U: fetches U with httpx.AsyncClient on this loop and returns its body."""
    import httpx

    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        response = await client.get(query(scope)["url"])
    await respond(send, b"upstream said: " + response.content)


@route("timeout")
async def timeout(scope, receive, send):
    """asyncio.timeout (3.11+) around a long sleep; asyncio.wait_for before 3.11."""
    started = time.monotonic()
    try:
        if hasattr(asyncio, "timeout"):
            async with asyncio.timeout(0.1):
                await asyncio.sleep(10)
        else:
            await asyncio.wait_for(asyncio.sleep(10), 0.1)
    except (asyncio.TimeoutError, TimeoutError):
        result = f"timed out after {time.monotonic() - started:.2f}s"
    else:
        result = "no timeout"
    await respond(send, result.encode())


@route("subprocess")
async def subprocess_view(scope, receive, send):
    proc = await asyncio.create_subprocess_exec(
        "echo", "hello", "from", "echo", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 5)
    await respond(send, out + f"exit {proc.returncode}".encode())


@route("loop")
async def loop_view(scope, receive, send):
    """Which loop runs the app: its class and whether it is the one lifespan ran on."""
    loop = asyncio.get_running_loop()
    state = scope.get("state") or {}
    await respond_json(
        send,
        {
            "class": type(loop).__name__,
            "module": type(loop).__module__,
            "same_as_lifespan": state.get("loop_id") == id(loop),
            "selector": type(getattr(loop, "_selector", None)).__name__,
        },
    )


REQUEST_ID = contextvars.ContextVar("request_id", default=None)


@route("task")
async def task_view(scope, receive, send):
    """The request's task as the app sees it before its first await and after one: what
    asyncio.current_task() is, whether all_tasks() has it, the Python stack's depth, and the
    context variable an earlier request set (each request's task has its own context)."""
    seen_before = REQUEST_ID.get()
    REQUEST_ID.set(scope["query_string"].decode())
    task = asyncio.current_task()
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    first = {
        "is_task": isinstance(task, asyncio.Task),
        "in_all_tasks": task in asyncio.all_tasks(),
        "depth": depth,
        "seen_before": seen_before,
    }
    if "sleep" in scope["query_string"].decode():
        await asyncio.sleep(0)
    await respond_json(send, {**first, "same_task_after_await": asyncio.current_task() is task})


# --------------------------------------------------------------------------- other apps


class Asgi2App:
    """An ASGI 2 application: instantiated with the scope, then awaited with receive/send."""

    def __init__(self, scope):
        assert scope["type"] in ("http", "lifespan"), scope
        self.scope = scope

    async def __call__(self, receive, send):
        if self.scope["type"] == "lifespan":
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            return
        body, _ = await read_body(receive)
        reply = f"asgi2 {self.scope['method']} {self.scope['path']} {body.decode()}"
        await respond(send, reply.encode())


asgi2_app = Asgi2App


async def legacy_lifespan_app(scope, receive, send):
    """Rejects lifespan by raising, like Django's ASGIHandler; serves /hello."""
    if scope["type"] != "http":
        raise ValueError(f"only http is supported, got {scope['type']!r}")
    await hello(scope, receive, send)
