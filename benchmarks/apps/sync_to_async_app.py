"""Raw ASGI app that awaits asgiref's sync_to_async of a trivial function per request, then
answers 12 bytes: the cost of one thread hop and one thread-safe wake-up of the loop."""

from asgiref.sync import sync_to_async

BODY = b"Hello World!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(BODY))]


def trivial():
    return BODY


trivial_async = sync_to_async(trivial)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = await trivial_async()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})
