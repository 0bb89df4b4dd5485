"""Applications that say what they were given, for the uwsgi tests (WSGI `app`, ASGI
`asgi_app`), by path:

/big?n=N      N bytes (a repeating pattern, see pattern()) with Content-Length
/stream?n=N   the same N bytes in 64 KiB pieces without Content-Length
anything else JSON: the method, path, query, raw target, scheme, client, server, protocol,
              the headers (lower-case names, in order) and the body's length and SHA-256
"""

import hashlib
import json
from urllib.parse import parse_qs

PIECE = 65536


def pattern(n):
    """The body of /big?n=N and /stream?n=N."""
    unit = bytes(range(256)) * (PIECE // 256)
    return (unit * (n // PIECE + 1))[:n]


def _size(query):
    return int(parse_qs(query).get("n", ["0"])[0])


def app(environ, start_response):
    path, query = environ["PATH_INFO"], environ.get("QUERY_STRING", "")
    if path == "/big":
        body = pattern(_size(query))
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/stream":
        body = pattern(_size(query))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return (body[i : i + PIECE] for i in range(0, len(body), PIECE))
    digest, size = hashlib.sha256(), 0
    while chunk := environ["wsgi.input"].read(PIECE):
        digest.update(chunk)
        size += len(chunk)
    headers = [
        [k[5:].lower().replace("_", "-"), v] for k, v in environ.items() if k.startswith("HTTP_")
    ]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers.append([key.lower().replace("_", "-"), environ[key]])
    seen = {
        "method": environ["REQUEST_METHOD"],
        "path": path,
        "query": query,
        "raw": environ.get("RAW_URI"),
        "scheme": environ["wsgi.url_scheme"],
        "client": [environ.get("REMOTE_ADDR"), int(environ.get("REMOTE_PORT") or 0)],
        "server": [environ["SERVER_NAME"], environ["SERVER_PORT"]],
        "protocol": environ["SERVER_PROTOCOL"],
        "headers": sorted(headers),
        "body_len": size,
        "body_sha256": digest.hexdigest(),
    }
    body = json.dumps(seen).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    path, query = scope["path"], scope["query_string"].decode("latin-1")
    if path in ("/big", "/stream"):
        body = pattern(_size(query))
        headers = [(b"content-length", b"%d" % len(body))] if path == "/big" else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if path == "/big":
            await send({"type": "http.response.body", "body": body})
            return
        for i in range(0, len(body), PIECE):
            await send(
                {"type": "http.response.body", "body": body[i : i + PIECE], "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})
        return
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        digest.update(chunk)
        size += len(chunk)
        if not message.get("more_body"):
            break
    client = scope["client"] or [None, 0]
    seen = {
        "method": scope["method"],
        "path": path,
        "query": query,
        "raw": scope["raw_path"].decode("latin-1") + ("?" + query if query else ""),
        "scheme": scope["scheme"],
        "client": [client[0], client[1]],
        "server": [scope["server"][0], str(scope["server"][1])],
        "protocol": "HTTP/" + scope["http_version"],
        "headers": sorted([k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]),
        "body_len": size,
        "body_sha256": digest.hexdigest(),
    }
    body = json.dumps(seen).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
