"""The applications of tests/test_request_id.py: each answers with what it saw of the
request ID and request start fields, as JSON.

WSGI: {"id": HTTP_X_REQUEST_ID, "start": HTTP_X_REQUEST_START}
ASGI: {"id": [every x-request-id value], "start": [every x-request-start value]}
/own  the application sets its own X-Request-ID: app-chosen
"""

import json


def _answer(path, payload):
    body = json.dumps(payload).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if path == "/own":
        headers.append(("X-Request-ID", "app-chosen"))
    return headers, body


def wsgi(environ, start_response):
    seen = {"id": environ.get("HTTP_X_REQUEST_ID"), "start": environ.get("HTTP_X_REQUEST_START")}
    headers, body = _answer(environ["PATH_INFO"], seen)
    start_response("200 OK", headers)
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].replace("lifespan.", "")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    fields = scope["headers"]
    seen = {
        "id": [v.decode("latin-1") for n, v in fields if n == b"x-request-id"],
        "start": [v.decode("latin-1") for n, v in fields if n == b"x-request-start"],
    }
    headers, body = _answer(scope["path"], seen)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(n.encode(), v.encode()) for n, v in headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
