"""A small WSGI application for `make run`: pyserver pyserver.demo:app.

/      "Hello, world!"
/info  what the server and the request look like from the application
"""

import os
import platform

from pyserver import __version__

HELLO = b"Hello, world!\n"


def _response(start_response, status, body, content_type="text/plain; charset=utf-8"):
    start_response(
        status,
        [("Content-Type", content_type), ("Content-Length", str(len(body)))],
    )
    return [body]


def _info(environ):
    lines = [
        f"pyserver {__version__}",
        f"{platform.python_implementation()} {platform.python_version()}",
        f"pid: {os.getpid()}",
        "",
        f"method: {environ.get('REQUEST_METHOD', '')}",
        f"script_name: {environ.get('SCRIPT_NAME', '')}",
        f"path_info: {environ.get('PATH_INFO', '')}",
        f"query_string: {environ.get('QUERY_STRING', '')}",
        f"protocol: {environ.get('SERVER_PROTOCOL', '')}",
        f"remote_addr: {environ.get('REMOTE_ADDR', '')}",
        f"server_software: {environ.get('SERVER_SOFTWARE', '')}",
        f"wsgi.version: {environ.get('wsgi.version')}",
        f"wsgi.url_scheme: {environ.get('wsgi.url_scheme', '')}",
        f"wsgi.multithread: {environ.get('wsgi.multithread')}",
        f"wsgi.multiprocess: {environ.get('wsgi.multiprocess')}",
        "",
        "headers:",
    ]
    for key in sorted(environ):
        if key.startswith("HTTP_"):
            lines.append(f"  {key[5:].replace('_', '-').title()}: {environ[key]}")
    return ("\n".join(lines) + "\n").encode("utf-8", "replace")


def app(environ, start_response):
    """The demo WSGI application."""
    path = environ.get("PATH_INFO", "/")
    if path == "/":
        return _response(start_response, "200 OK", HELLO, "text/plain")
    if path == "/info":
        return _response(start_response, "200 OK", _info(environ))
    return _response(start_response, "404 Not Found", b"Not Found\n")
