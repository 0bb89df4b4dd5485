"""WSGI app of tests/test_keepalive_race.py: /hello, and /block?s=SECONDS, which holds the
worker's loop thread (a WSGI app runs on it) for that long."""

import time
from urllib.parse import parse_qs


def app(environ, start_response):
    if environ["PATH_INFO"] == "/block":
        time.sleep(float(parse_qs(environ["QUERY_STRING"])["s"][0]))
    body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
