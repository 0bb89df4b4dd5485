"""hello-wsgi: the smallest useful WSGI application (12 bytes, Content-Length)."""

BODY = b"Hello World!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]


def app(environ, start_response):
    start_response("200 OK", HEADERS)
    return [BODY]
