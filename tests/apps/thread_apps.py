"""WSGI applications for the --threads tests (tests/test_threads.py)."""

import asyncio
import os
import sys
import threading
import time
from urllib.parse import parse_qs

TEXT = [("Content-Type", "text/plain")]


def _query(environ):
    return {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ)
    if path == "/sleep":
        if "say" in q:  # tells the test the request reached the application
            print(f"sleeping {q['say']}", file=sys.stderr, flush=True)
        time.sleep(float(q.get("s", "1")))
        body = f"slept {threading.current_thread().name}".encode()
        start_response("200 OK", TEXT + [("Content-Length", str(len(body)))])
        return [body]
    if path == "/pid":
        body = str(os.getpid()).encode()
        start_response("200 OK", TEXT + [("Content-Length", str(len(body)))])
        return [body]
    if path == "/fast":
        start_response("200 OK", TEXT)
        return [b"fast"]
    if path == "/info":
        body = (
            f"multithread={environ['wsgi.multithread']} "
            f"thread={threading.current_thread().name} "
            f"main={threading.current_thread() is threading.main_thread()}"
        ).encode()
        start_response("200 OK", TEXT)
        return [body]
    if path == "/boom":
        raise RuntimeError("boom in a thread")
    if path == "/echo":
        data = environ["wsgi.input"].read()
        start_response("200 OK", TEXT)
        return [data]
    if path == "/stream":
        return _stream(start_response, int(q.get("n", "100")), int(q.get("size", "65536")))
    if path == "/write":
        write = start_response("200 OK", TEXT)
        for i in range(int(q.get("n", "3"))):
            write(b"w%d;" % i)
        return []
    if path == "/badheader":
        start_response("200 OK", [("X-Bad", "a\r\nb")])
        return [b"never sent"]
    if path == "/many":
        start_response("200 OK", TEXT)
        return [b"%d," % i for i in range(int(q.get("n", "10")))]
    if path == "/file":
        f = open(q["path"], "rb")  # noqa: SIM115 - the file_wrapper closes it
        start_response("200 OK", TEXT)
        return environ["wsgi.file_wrapper"](f)
    start_response("404 Not Found", TEXT)
    return [b"not found"]


def _stream(start_response, n, size):
    start_response("200 OK", TEXT)
    chunk = b"x" * size

    def gen():
        try:
            for _ in range(n):
                yield chunk
        finally:
            print(
                f"stream closed in {threading.current_thread().name}", file=sys.stderr, flush=True
            )

    return gen()


def _flask_app():
    from flask import Flask, g, request

    flask_app = Flask(__name__)

    @flask_app.get("/g")
    def per_request():
        g.value = request.args["v"]
        time.sleep(0.3)  # the other requests set their own g meanwhile
        return f"{g.value} {threading.current_thread().name}"

    return flask_app


flask_app = _flask_app()


async def asgi_app(scope, receive, send):
    """ASGI: reports the default executor's thread names and size."""
    if scope["type"] != "http":
        return
    loop = asyncio.get_running_loop()
    names = await asyncio.gather(
        *(loop.run_in_executor(None, _slow_name) for _ in range(int(scope["query_string"] or 4)))
    )
    body = " ".join(sorted(set(names))).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _slow_name():
    time.sleep(0.3)
    return threading.current_thread().name
