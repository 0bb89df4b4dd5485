"""Applications that echo what the server says about the client and the scheme, as JSON.

app        WSGI: {"scheme": wsgi.url_scheme, "remote_addr": ..., "remote_port": ... or null,
                 "http_host": HTTP_HOST or null, "server_name": ..., "server_port": ...}
asgi_app   ASGI: {"scheme": scope["scheme"], "client": scope["client"],
                 "server": scope["server"], "host": the host header or null}
"""

import json


def app(environ, start_response):
    body = json.dumps(
        {
            "scheme": environ["wsgi.url_scheme"],
            "remote_addr": environ.get("REMOTE_ADDR"),
            "remote_port": environ.get("REMOTE_PORT"),
            "http_host": environ.get("HTTP_HOST"),
            "server_name": environ["SERVER_NAME"],
            "server_port": environ["SERVER_PORT"],
        }
    ).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return  # no lifespan support: the server goes on without it
    client = scope["client"]
    hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
    server = scope["server"]
    body = json.dumps(
        {
            "scheme": scope["scheme"],
            "client": list(client) if client else None,
            "server": list(server) if server else None,
            "host": hosts[-1] if hosts else None,
            "hosts": len(hosts),
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
