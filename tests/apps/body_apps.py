"""Apps for tests/test_body_buffering.py: a WSGI `app` and an ASGI `asgi_app` that read
request bodies and say what they saw.

Both report the body's size and SHA-256. The WSGI app also reports how many of its process's
descriptors are files in $TMPDIR (the server's spool files for request bodies) while it
runs, so a test can tell a body held in memory from a spooled one.
"""

import asyncio
import contextlib
import hashlib
import json
import os
from urllib.parse import parse_qs

TEXT = [("Content-Type", "text/plain")]
DISCONNECT_LINE = "body-apps: http.disconnect"
DUPLEX_BYTES = 8 << 20


def spool_fds():
    """How many open descriptors of this process are files in $TMPDIR."""
    tmpdir = os.path.realpath(os.environ.get("TMPDIR") or "/tmp") + os.sep
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(tmpdir):
            count += 1
    return count


def read_pieces(stream, mode, size):
    """The whole of wsgi.input, read the way `mode` says: an iterable of pieces."""
    if mode == "read":
        return [stream.read()]
    if mode == "read-n":
        return iter(lambda: stream.read(size), b"")
    if mode == "readline":
        return iter(stream.readline, b"")
    if mode == "readline-n":
        return iter(lambda: stream.readline(size), b"")
    if mode == "readlines":
        return stream.readlines()
    if mode == "iter":
        return stream
    raise ValueError(mode)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    params = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if path == "/hello":
        body = b"hello world"
    elif path == "/pid":
        body = str(os.getpid()).encode()
    elif path in ("/input", "/raise"):
        spooled = spool_fds()
        mode, size = params.get("mode", "read-n"), int(params.get("n", "65536"))
        digest, total, lengths = hashlib.sha256(), 0, []
        for piece in read_pieces(environ["wsgi.input"], mode, size):
            digest.update(piece)
            total += len(piece)
            lengths.append(len(piece))
        if path == "/raise":
            raise RuntimeError("the app failed after reading its body")
        body = json.dumps(
            {
                "bytes": total,
                "sha256": digest.hexdigest(),
                "lengths": lengths if "lengths" in params else None,
                "spooled": spooled,
                "terminated": environ.get("wsgi.input_terminated"),
            }
        ).encode()
    else:
        start_response("404 Not Found", list(TEXT))
        return [b"not found"]
    start_response("200 OK", [*TEXT, ("Content-Length", str(len(body)))])
    return [body]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/hello":
        body = b"hello world"
    elif path == "/pid":
        body = str(os.getpid()).encode()
    elif path == "/input":
        digest, total = hashlib.sha256(), 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                print(f"{DISCONNECT_LINE} after {total} bytes", flush=True)
                return
            part = message.get("body", b"")
            digest.update(part)
            total += len(part)
            if not message.get("more_body", False):
                break
        body = json.dumps({"bytes": total, "sha256": digest.hexdigest()}).encode()
    elif path == "/duplex":
        # Streams a large response while it waits for the request body.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunk = {"type": "http.response.body", "body": b"x" * DUPLEX_BYTES, "more_body": True}
        sender = asyncio.ensure_future(send(chunk))
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                print(f"{DISCONNECT_LINE} in /duplex", flush=True)
                with contextlib.suppress(Exception):
                    await sender
                return
            if not message.get("more_body", False):
                break
        await sender
        await send({"type": "http.response.body", "body": b""})
        return
    else:
        body = b"not found"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
