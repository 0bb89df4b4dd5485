"""Echo applications for tests/test_rfc9112.py: what the server told the application about
the request line, as JSON, for any method and any target (including `*`).

Neither is wrapped in wsgiref's validator: it warns about methods it does not know and
refuses a PATH_INFO of "*", both of which these tests send on purpose.
"""

import json
import os

CALLS = {"n": 0}


def app(environ, start_response):
    """WSGI: the request line as the environ gives it, plus the body length read."""
    CALLS["n"] += 1
    body = environ["wsgi.input"].read()
    keys = (
        "REQUEST_METHOD",
        "PATH_INFO",
        "QUERY_STRING",
        "RAW_URI",
        "HTTP_HOST",
        "SERVER_NAME",
        "SERVER_PORT",
    )
    info = {key: environ.get(key) for key in keys}
    info.update(body=len(body), calls=CALLS["n"], pid=os.getpid())
    data = json.dumps(info).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


async def asgi_app(scope, receive, send):
    """ASGI: the request line as the scope gives it, plus the body length received."""
    if scope["type"] != "http":
        return
    CALLS["n"] += 1
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    hosts = [value.decode("latin-1") for name, value in scope["headers"] if name == b"host"]
    info = {
        "method": scope["method"],
        "path": scope["path"],
        "raw_path": scope["raw_path"].decode("latin-1"),
        "query_string": scope["query_string"].decode("latin-1"),
        "hosts": hosts,
        "server": list(scope["server"]) if scope["server"] else None,
        "body": size,
        "calls": CALLS["n"],
        "pid": os.getpid(),
    }
    data = json.dumps(info).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})
