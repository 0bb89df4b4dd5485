"""Raw ASGI WebSocket applications for tests/test_ws*.py, dispatched on the path.

/echo          accept (the first offered subprotocol), echo every message
/scope         accept, send the scope (JSON) and close
/close403      close before accept (the server answers 403)
/deny          a denial response: 418, a header and a body
/raise-before  raise before accept (500)
/raise-after   accept then raise (close 1011)
/flood?n=N&size=S  accept, send N binary messages of S bytes, then a text "done"
/hold          accept; read nothing; record the disconnect in the events file
/disconnect    accept, then wait for websocket.disconnect; write "CODE REASON" to
               the file named by WS_TEST_EVENTS
/headers       accept with an extra response header
/sub-popped    accept with a subprotocol that the headers' generator removes from the message
/generated-headers?size=S  accept with two headers of S bytes from a generator, then echo
/close-code    accept, close with 4001 "bye"
/slow-reader?delay=D  accept, sleep D seconds before each receive, echo
/bad-accept    200 websocket.accept with 20 headers and a bad one (each a TypeError), then
               accept and send how much traced memory the failed ones kept
/wait-for      receive() under asyncio.wait_for timing out, then echo (see the test)
/send-wait-for send() under asyncio.wait_for timing out (a client that does not read), then
               the texts "after" and "ok"
"""

import asyncio
import gc
import json
import os
import tracemalloc
from urllib.parse import parse_qs

EVENTS = os.environ.get("WS_TEST_EVENTS")


def record(line):
    if EVENTS:
        with open(EVENTS, "a") as f:
            f.write(line + "\n")


def _jsonable(scope):
    out = {}
    for key, value in scope.items():
        if key == "headers":
            out[key] = [[n.decode(), v.decode()] for n, v in value]
        elif isinstance(value, bytes):
            out[key] = value.decode("latin-1")
        elif isinstance(value, tuple):
            out[key] = list(value)
        else:
            out[key] = value
    return out


async def bad_accepts(send):
    """Accepts after 200 refused accepts; returns the bytes of traced memory they kept."""
    headers = [(b"x-h%d" % i, b"v") for i in range(20)] + [("str-name", b"v")]
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            try:
                await send({"type": "websocket.accept", "headers": headers})
            except TypeError:
                pass
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    await send({"type": "websocket.accept"})
    return kept


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
        body = f"http scope {scope['path']}".encode()
        await send(
            {
                "type": "http.response.start",
                "status": 404,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    assert scope["type"] == "websocket"
    path = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    message = await receive()
    assert message["type"] == "websocket.connect", message
    if path == "/close403":
        await send({"type": "websocket.close"})
        return
    if path == "/deny":
        await send(
            {
                "type": "websocket.http.response.start",
                "status": 418,
                "headers": [(b"content-type", b"text/plain"), (b"x-denied", b"yes")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"websocket"})
        return
    if path == "/raise-before":
        raise RuntimeError("boom before accept")
    if path == "/bad-accept":
        await send({"type": "websocket.send", "text": str(await bad_accepts(send))})
        await receive()
        return
    accept = {"type": "websocket.accept"}
    if scope["subprotocols"]:
        accept["subprotocol"] = (
            scope["subprotocols"][-1] if path == "/last-sub" else scope["subprotocols"][0]
        )
    if path == "/headers":
        accept["headers"] = [(b"x-extra", b"1")]
    if path == "/sub-popped":  # the header iterator takes the (fresh) subprotocol away

        def popping():
            accept.pop("subprotocol")
            yield (b"x-popped", b"1")

        accept["subprotocol"] = "".join(["ch", "at"])
        accept["headers"] = popping()
    if path == "/generated-headers":  # fresh pairs from an iterator, one value big
        size = int(query.get("size", "300000"))
        accept["headers"] = ((b"x-gen-%d" % i, b"v" * size) for i in range(2))
    await send(accept)
    if path == "/wait-for":
        # A receive() given up on, then the client's message: it must not be
        # lost, nor the next receive() fail with the abandoned one's cancellation.
        for n in (1, 2):
            try:
                await asyncio.wait_for(receive(), 0.1)
            except asyncio.TimeoutError:
                pass
            await send({"type": "websocket.send", "text": "timed out"})
            if n == 1:
                await asyncio.sleep(0.5)  # the message arrives meanwhile
            message = await receive()
            await send({"type": "websocket.send", "text": f"{n}:{message.get('text')}"})
        await receive()
        return
    if path == "/send-wait-for":
        # send() given up on while the client reads nothing, then two more sends.
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            try:
                await asyncio.wait_for(send({"type": "websocket.send", "bytes": chunk}), 0.2)
            except asyncio.TimeoutError:
                break
        await send({"type": "websocket.send", "text": "after"})
        await send({"type": "websocket.send", "text": "ok"})
        await receive()
        return
    if path == "/raise-after":
        raise RuntimeError("boom after accept")
    if path == "/scope":
        await send({"type": "websocket.send", "text": json.dumps(_jsonable(scope))})
        await send({"type": "websocket.close", "code": 1000})
        return
    if path == "/close-code":
        await send({"type": "websocket.close", "code": 4001, "reason": "bye"})
        message = await receive()
        record(f"{message['type']} {message.get('code')}")
        return
    if path == "/flood":
        n, size = int(query.get("n", "100")), int(query.get("size", "65536"))
        chunk = b"x" * size
        for i in range(n):
            await send({"type": "websocket.send", "bytes": chunk})
            if i % 100 == 0:
                record(f"sent {i}")
        await send({"type": "websocket.send", "text": "done"})
        record("flood done")
        message = await receive()
        return
    if path == "/noread":
        record("noread accepted")
        await asyncio.sleep(float(query.get("seconds", "30")))
        return
    if path in ("/disconnect", "/hold"):
        message = await receive()
        while message["type"] != "websocket.disconnect":
            message = await receive()
        record(f"{message['code']} {message.get('reason', '')}")
        return
    delay = float(query.get("delay", "0"))
    while True:
        if delay:
            await asyncio.sleep(delay)
        message = await receive()
        if message["type"] == "websocket.disconnect":
            record(f"{message['code']} {message.get('reason', '')}")
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
