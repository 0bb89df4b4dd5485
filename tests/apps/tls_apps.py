"""Applications behind tests/test_tls.py: what a request over TLS shows the application.

`wsgi` answers /env with the TLS part of its environ as JSON, /file?size=N with a
wsgi.file_wrapper response of the file named by $TLS_TEST_FILE (N bytes of it), /pid with
the worker's pid, /own-sts with its own Strict-Transport-Security header, anything else
with "hello". `asgi` answers with the scope's scheme and
its "tls" extension as JSON, /pathsend with an http.response.pathsend of $TLS_TEST_FILE,
and echoes WebSocket messages (text, prefixed with the scope's scheme).
"""

import json
import os

ENV_KEYS = (
    "SERVER_PROTOCOL",
    "wsgi.url_scheme",
    "HTTPS",
    "SSL_PROTOCOL",
    "SSL_CIPHER",
    "SSL_CLIENT_CERT",
    "SSL_CLIENT_S_DN",
    "SSL_CLIENT_VERIFY",
)


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/env":
        body = json.dumps({key: environ.get(key) for key in ENV_KEYS}).encode()
    elif path == "/file":
        size = int(environ["QUERY_STRING"].partition("=")[2])
        f = open(os.environ["TLS_TEST_FILE"], "rb")  # noqa: SIM115 - closed by the server
        start_response("200 OK", [("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](f, 1 << 20)
    elif path == "/pid":
        body = str(os.getpid()).encode()
    elif path == "/own-sts":
        start_response(
            "200 OK", [("Strict-Transport-Security", "max-age=5"), ("Content-Length", "3")]
        )
        return [b"own"]
    else:
        body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return
            text = msg.get("text") or (msg.get("bytes") or b"").decode()
            await send({"type": "websocket.send", "text": f"{scope['scheme']} {text}"})
    if scope["path"] == "/pathsend":
        size = os.path.getsize(os.environ["TLS_TEST_FILE"])
        headers = [(b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.pathsend", "path": os.environ["TLS_TEST_FILE"]})
        return
    tls = scope["extensions"].get("tls")
    body = json.dumps({"scheme": scope["scheme"], "tls": tls}).encode()
    if scope["path"] == "/mutate":  # the next request on the connection must not see this
        tls["client_cert_chain"].append("changed")
        tls["cipher_suite"] = 0
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
