"""python-work: raw ASGI and WSGI applications that do a fixed amount of plain Python
per request (about 30 us on the benchmark machine: a loop over small dicts and strings,
no I/O, no C-accelerated library), then answer 12 bytes."""

BODY = b"Hello World!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"12")]
WSGI_HEADERS = [("Content-Type", "text/plain"), ("Content-Length", "12")]
ROUNDS = 60


def work():
    """The fixed work: returns a checksum so that nothing is optimised away."""
    total = 0
    for i in range(ROUNDS):
        d = {"id": i, "name": f"item-{i}", "tags": ["a", "b", str(i)]}
        total += len(d["name"]) + len(d["tags"]) + d["id"] % 7
    return total


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    work()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def wsgi_app(environ, start_response):
    work()
    start_response("200 OK", WSGI_HEADERS)
    return [BODY]
