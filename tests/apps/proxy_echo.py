"""Applications that echo what the server says about the client and the scheme, as JSON.

app        WSGI: {"scheme": wsgi.url_scheme, "remote_addr": ..., "remote_port": ... or null,
                 "http_host": HTTP_HOST or null, "server_name": ..., "server_port": ...,
                 "body_len": bytes of the body, "body_sha256": its hex digest}
asgi_app   ASGI: {"scheme": scope["scheme"], "client": scope["client"],
                 "server": scope["server"], "host": the host header or null, "hosts": how
                 many host headers, "body_len", "body_sha256"}; a WebSocket is accepted,
                 sent the same JSON (without the body fields) as one text message, and closed.
"""

import hashlib
import json


def app(environ, start_response):
    digest, size = hashlib.sha256(), 0
    stream = environ["wsgi.input"]
    while chunk := stream.read(65536):
        digest.update(chunk)
        size += len(chunk)
    body = json.dumps(
        {
            "scheme": environ["wsgi.url_scheme"],
            "remote_addr": environ.get("REMOTE_ADDR"),
            "remote_port": environ.get("REMOTE_PORT"),
            "http_host": environ.get("HTTP_HOST"),
            "server_name": environ["SERVER_NAME"],
            "server_port": environ["SERVER_PORT"],
            "body_len": size,
            "body_sha256": digest.hexdigest(),
        }
    ).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def _seen(scope):
    client = scope["client"]
    hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
    server = scope["server"]
    return {
        "scheme": scope["scheme"],
        "client": list(client) if client else None,
        "server": list(server) if server else None,
        "host": hosts[-1] if hosts else None,
        "hosts": len(hosts),
    }


async def asgi_app(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(_seen(scope))})
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["type"] != "http":
        return  # no lifespan support: the server goes on without it
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        digest.update(chunk)
        size += len(chunk)
        if not message.get("more_body"):
            break
    seen = _seen(scope)
    seen.update(body_len=size, body_sha256=digest.hexdigest())
    body = json.dumps(seen).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
