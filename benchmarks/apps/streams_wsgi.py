"""streams (WSGI): a large file sent three ways, and an upload read to the end.

/        "Hello World!" (the readiness check)
/file    the file of $BENCH_STREAM_FILE through wsgi.file_wrapper (501 without one)
/gen     the same file from a generator, 64 KiB a chunk
/upload  reads wsgi.input to the end in 64 KiB reads, answers the byte count
"""

import os

CHUNK = 64 * 1024
HELLO = b"Hello World!"


def _path():
    return os.environ["BENCH_STREAM_FILE"]


def _chunks(path):
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _answer(start_response, status, body):
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path in ("/file", "/gen"):
        name = _path()
        headers = [
            ("Content-Type", "application/octet-stream"),
            ("Content-Length", str(os.path.getsize(name))),
        ]
        if path == "/gen":
            start_response("200 OK", headers)
            return _chunks(name)
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is None:
            return _answer(start_response, "501 Not Implemented", b"no wsgi.file_wrapper")
        start_response("200 OK", headers)
        return wrapper(open(name, "rb"), 1024 * 1024)
    if path == "/upload":
        stream, n = environ["wsgi.input"], 0
        while chunk := stream.read(CHUNK):
            n += len(chunk)
        return _answer(start_response, "200 OK", str(n).encode())
    return _answer(start_response, "200 OK", HELLO)
