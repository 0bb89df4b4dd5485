"""The WSGI applications behind most tests.

`app` dispatches on the first segment of PATH_INFO (`/echo/...` -> the `echo` handler), so
one server process serves every behaviour and the paths read like the tests that use them.

Every handler is wrapped in `wsgiref.validate.validator` unless it is registered with
`validate=False`; each of those says why (it breaks a rule the validator enforces on purpose,
e.g. `read()` without a size, invalid headers, a str body, or it must hand the server the
bare `wsgi.file_wrapper` object so that the sendfile path is exercised).
"""

import hashlib
import json
import os
import struct
import sys
from urllib.parse import parse_qs
from wsgiref.validate import validator

ROUTES = {}

TEXT = [("Content-Type", "text/plain")]


def route(name, validate=True):
    """Register a handler under /<name>; wrap it in the PEP 3333 validator by default."""

    def register(handler):
        ROUTES[name] = validator(handler) if validate else handler
        return handler

    return register


def app(environ, start_response):
    segment = environ.get("PATH_INFO", "/").split("/", 2)[1]
    handler = ROUTES.get(segment, not_found)
    return handler(environ, start_response)


def query(environ):
    """The query string as a dict of last values."""
    parsed = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    return {key: values[-1] for key, values in parsed.items()}


def respond(start_response, body, status="200 OK", headers=TEXT):
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


@validator
def not_found(environ, start_response):
    return respond(start_response, b"not found", "404 Not Found")


@route("hello")
def hello(environ, start_response):
    return respond(start_response, b"hello world")


@route("nolength")
def nolength(environ, start_response):
    """A body of three chunks and no Content-Length: chunked on 1.1, close-delimited on 1.0."""
    start_response("200 OK", list(TEXT))
    return [b"hello", b" ", b"world"]


@route("query")
def echo_query(environ, start_response):
    return respond(start_response, environ.get("QUERY_STRING", "").encode("latin-1"))


@route("pid")
def pid(environ, start_response):
    """The pid of the process running the app (the worker), for RSS and fd sampling."""
    return respond(start_response, str(os.getpid()).encode())


def jsonable(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [jsonable(item) for item in value]}
    return {"__type__": type(value).__name__, "callable": callable(value)}


@route("environ")
def environ_json(environ, start_response):
    """The environ as JSON: plain values as they are, tuples tagged, objects by type name."""
    body = json.dumps({key: jsonable(value) for key, value in environ.items()}).encode()
    return respond(start_response, body, headers=[("Content-Type", "application/json")])


environ_app = validator(environ_json)


@route("echo")
def echo(environ, start_response):
    """The request body, read in 64 KiB pieces until read() returns b""."""
    stream = environ["wsgi.input"]
    parts = []
    while True:
        part = stream.read(65536)
        if not part:
            break
        parts.append(part)
    body = b"".join(parts)
    declared = environ.get("CONTENT_LENGTH", "<absent>") or "<empty>"
    headers = [*TEXT, ("X-Request-Content-Length", declared)]
    return respond(start_response, body, headers=headers)


@route("no-read")
def no_read(environ, start_response):
    """Answers without touching wsgi.input (so `Expect: 100-continue` must not be honoured)."""
    return respond(start_response, b"body not read")


@route("upload")
def upload(environ, start_response):
    """Reads wsgi.input with read(65536) and reports the byte count and SHA-256."""
    stream = environ["wsgi.input"]
    digest = hashlib.sha256()
    total = 0
    while True:
        part = stream.read(65536)
        if not part:
            break
        total += len(part)
        digest.update(part)
    body = json.dumps({"bytes": total, "sha256": digest.hexdigest()}).encode()
    return respond(start_response, body, headers=[("Content-Type", "application/json")])


def input_ops(stream, mode, size):
    """Read a whole wsgi.input the way `mode` says; returns the pieces in order."""
    if mode == "read":
        return [stream.read()]
    if mode == "read-1":
        return [stream.read(-1)]
    if mode == "read-n":
        return list(iter(lambda: stream.read(size), b""))
    if mode == "readline":
        return list(iter(stream.readline, b""))
    if mode == "readline-n":
        return list(iter(lambda: stream.readline(size), b""))
    if mode == "readlines":
        return stream.readlines()
    if mode == "iter":
        return list(stream)
    raise ValueError(f"unknown mode {mode!r}")


@route("input", validate=False)  # not validated: uses read() and read(-1) without a size
def input_modes(environ, start_response):
    """Reads wsgi.input by ?mode=...&n=..., then reads past the end three more ways."""
    params = query(environ)
    stream = environ["wsgi.input"]
    pieces = input_ops(stream, params["mode"], int(params.get("n", "4")))
    after = [stream.read(1), stream.readline(), stream.read()]
    result = {
        "pieces": [piece.decode("latin-1") for piece in pieces],
        "types": sorted({type(piece).__name__ for piece in [*pieces, *after]}),
        "after": [piece.decode("latin-1") for piece in after],
    }
    return respond(start_response, json.dumps(result).encode())


@route("stream")
def stream(environ, start_response):
    """?chunks=N&size=S: N chunks of S bytes from a generator, no Content-Length."""
    params = query(environ)
    count, size = int(params.get("chunks", "5")), int(params.get("size", "10"))
    start_response("200 OK", list(TEXT))
    return (bytes([ord("a") + i % 26]) * size for i in range(count))


class ChunkStream:
    """A lazily generated body: chunk i is its index (8 bytes, big-endian) then filler.

    `marker`: a file written with "closed" when close() is called.
    `raise_at`: raise RuntimeError instead of producing chunk number `raise_at`.
    """

    def __init__(self, count, size, marker=None, raise_at=None):
        self.count, self.size = count, size
        self.marker, self.raise_at = marker, raise_at
        self.filler = b"x" * (size - 8)

    def __iter__(self):
        for index in range(self.count):
            if index == self.raise_at:
                raise RuntimeError(f"ChunkStream raised at chunk {index}")
            yield struct.pack(">Q", index) + self.filler

    def close(self):
        if self.marker:
            with open(self.marker, "a") as marker:
                marker.write("closed\n")


@route("big")
def big(environ, start_response):
    """?size=BYTES&chunk=BYTES&cl=1|0&marker=PATH&raise_at=N: a big lazily generated body."""
    params = query(environ)
    chunk = int(params.get("chunk", "65536"))
    total = int(params.get("size", str(1 << 30)))
    raise_at = int(params["raise_at"]) if "raise_at" in params else None
    body = ChunkStream(total // chunk, chunk, params.get("marker"), raise_at)
    headers = [("Content-Type", "application/octet-stream")]
    if params.get("cl", "1") == "1":
        headers.append(("Content-Length", str(body.count * chunk)))
    start_response("200 OK", headers)
    return body


def file_response(environ, start_response):
    """?path=P&offset=N&cl=M: P through wsgi.file_wrapper, seeked to N, Content-Length M."""
    params = query(environ)
    handle = open(params["path"], "rb")
    offset = int(params.get("offset", "0"))
    handle.seek(offset)
    headers = [("Content-Type", "application/octet-stream")]
    if "cl" in params:
        headers.append(("Content-Length", params["cl"]))
    elif params.get("nolength") != "1":
        headers.append(("Content-Length", str(os.fstat(handle.fileno()).st_size - offset)))
    start_response("200 OK", headers)
    return environ["wsgi.file_wrapper"](handle, 65536)


# Not validated: the validator would wrap the file_wrapper object in its own iterator and
# hide it from the server, and the sendfile path is the point of this route.
route("file", validate=False)(file_response)
route("file-validated")(file_response)


@route("errors")
def errors(environ, start_response):
    """Writes ?msg=... to wsgi.errors (it must reach the server's error log)."""
    stream = environ["wsgi.errors"]
    stream.write(query(environ).get("msg", "no message") + "\n")
    stream.flush()
    return respond(start_response, b"logged")


@route("raise-before", validate=False)  # not validated: misbehaves on purpose (raises)
def raise_before(environ, start_response):
    token = query(environ).get("token", "")
    raise RuntimeError(f"boom-before-start-response {token}")


@route("raise-after", validate=False)  # not validated: misbehaves on purpose (raises)
def raise_after(environ, start_response):
    """Sends a first chunk, then raises. ?cl=N declares a Content-Length of N."""
    params = query(environ)
    headers = list(TEXT)
    if "cl" in params:
        headers.append(("Content-Length", params["cl"]))
    start_response("200 OK", headers)

    def body():
        yield b"first-chunk;"
        raise RuntimeError(f"boom-after-first-chunk {params.get('token', '')}")

    return body()


BAD_HEADERS = {
    "crlf-value": ("X-Ok", "a\r\nX-Injected: evil"),
    "lf-value": ("X-Ok", "a\nX-Injected: evil"),
    "cr-value": ("X-Ok", "a\rX-Injected: evil"),
    "nul-value": ("X-Ok", "a\x00X-Injected: evil"),
    "crlf-name": ("X-Ok\r\nX-Injected", "evil"),
    "space-name": ("X Injected", "evil"),
    "colon-name": ("X-Injected:", "evil"),
    "empty-name": ("", "X-Injected-evil"),
}


@route("bad-header", validate=False)  # not validated: returns invalid headers on purpose
def bad_header(environ, start_response):
    kind = query(environ)["kind"]
    if kind == "status":
        start_response("200 OK\r\nX-Injected: evil", list(TEXT))
    elif kind == "non-str-value":
        start_response("200 OK", [*TEXT, ("X-Injected", 42)])
    else:
        start_response("200 OK", [*TEXT, BAD_HEADERS[kind]])
    return [b"should not be sent"]


@route("str-body", validate=False)  # not validated: yields str on purpose
def str_body(environ, start_response):
    start_response("200 OK", list(TEXT))
    return ["a str is not a valid body chunk"]


@route("write")
def write_callable(environ, start_response):
    """Output of the write() callable must come before the iterable's output."""
    write = start_response("200 OK", list(TEXT))
    write(b"from-write-1;")
    write(b"from-write-2;")
    return [b"from-iterable"]


@route("exc-info")
def exc_info(environ, start_response):
    """?mode=replace|twice|after-headers: the three start_response exc_info rules."""
    mode = query(environ)["mode"]
    start_response("200 OK", list(TEXT))
    if mode == "replace":
        try:
            raise ValueError("replaced by exc_info")
        except ValueError:
            start_response("500 Internal Server Error", list(TEXT), sys.exc_info())
        return [b"replaced"]
    if mode == "twice":
        try:
            start_response("201 Created", list(TEXT))
        except Exception as exc:  # the server must refuse a second call without exc_info
            return [f"second call raised {type(exc).__name__}".encode()]
        return [b"second call accepted"]
    return exc_info_after_headers(start_response)


def exc_info_after_headers(start_response):
    yield b"partial;"
    try:
        raise ValueError("too late")
    except ValueError:
        try:
            start_response("500 Internal Server Error", list(TEXT), sys.exc_info())
        except ValueError:  # PEP 3333: headers are sent, so the server re-raises exc_info
            yield b"reraised"
            return
    yield b"not-reraised"


@route("status")
def status(environ, start_response):
    """?code=204|304 (or any code): a bodyless status."""
    code = query(environ).get("code", "204")
    reasons = {"204": "No Content", "304": "Not Modified"}
    start_response(f"{code} {reasons.get(code, 'Status')}", [("X-Status", code)])
    return []


@route("length-mismatch")
def length_mismatch(environ, start_response):
    """?declared=N&actual=M: declares Content-Length N, yields M bytes in 2 chunks."""
    params = query(environ)
    declared, actual = int(params["declared"]), int(params["actual"])
    start_response("200 OK", [*TEXT, ("Content-Length", str(declared))])
    half = actual // 2
    return [b"m" * half, b"n" * (actual - half)]
