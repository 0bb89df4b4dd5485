"""pyserver.importer: --interface auto tells ASGI from WSGI on real framework objects, and
ASGI 2 (double callable) apps are recognised and wrapped into ASGI 3."""

import asyncio
import functools
import inspect
import os

import bottle
import flask
import pytest
from asgiref.wsgi import WsgiToAsgi
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware

from pyserver.importer import as_asgi3, asgi2_to_asgi3, detect_interface, is_asgi2


def django_handlers():
    """Django's ASGIHandler and WSGIHandler, configured with the ASGI test project.

    DJANGO_SETTINGS_MODULE is taken back out of the environment afterwards (the settings
    stay loaded in this process), so that servers started later do not inherit it."""
    before = os.environ.get("DJANGO_SETTINGS_MODULE")
    try:
        from apps.asgi_djangoproj.asgi import application as asgi_handler
        from django.core.wsgi import get_wsgi_application

        return asgi_handler, get_wsgi_application()
    finally:
        if before is None:
            os.environ.pop("DJANGO_SETTINGS_MODULE", None)


# --------------------------------------------------------------------------- WSGI objects


def wsgi_function(environ, start_response):
    start_response("200 OK", [])
    return [b""]


class WsgiCallable:
    def __call__(self, environ, start_response):
        return wsgi_function(environ, start_response)


class WsgiClassApp:
    """PEP 3333 allows a class: instantiating it with (environ, start_response) is the call."""

    def __init__(self, environ, start_response):
        self.start_response = start_response

    def __iter__(self):
        self.start_response("200 OK", [])
        yield b""


def wsgi_decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


# --------------------------------------------------------------------------- ASGI 3 objects


async def asgi3_function(scope, receive, send):
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


class Asgi3Callable:
    async def __call__(self, scope, receive, send):
        await asgi3_function(scope, receive, send)


class Asgi3Methods:
    async def handle(self, scope, receive, send):
        await asgi3_function(scope, receive, send)


class AwaitableClassApp:
    """An ASGI 3 "awaitable class": cls(scope, receive, send) is awaited directly."""

    def __init__(self, scope, receive, send):
        self.args = scope, receive, send

    def __await__(self):
        return asgi3_function(*self.args).__await__()


# --------------------------------------------------------------------------- ASGI 2 objects


class Asgi2Class:
    def __init__(self, scope):
        self.scope = scope

    async def __call__(self, receive, send):
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        body = f"asgi2 {self.scope['path']} {message['body'].decode()}".encode()
        await send({"type": "http.response.body", "body": body})


def asgi2_function(scope):
    async def instance(receive, send):
        await asgi3_function(scope, receive, send)

    return instance


WSGI_APPS = {
    "function": lambda: wsgi_function,
    "callable-instance": WsgiCallable,
    "pep3333-class": lambda: WsgiClassApp,
    "decorated-function": lambda: wsgi_decorated(wsgi_function),
    "wsgiref-validator": lambda: __import__("wsgiref.validate").validate.validator(wsgi_function),
    "partial": lambda: functools.partial(wsgi_function),
    "flask": lambda: flask.Flask("detect"),
    "bottle": bottle.Bottle,
    "django-wsgi-handler": lambda: django_handlers()[1],
    "apps.basic": lambda: __import__("apps.basic").basic.app,
}

ASGI3_APPS = {
    "async-function": lambda: asgi3_function,
    "async-call-instance": Asgi3Callable,
    "bound-async-method": lambda: Asgi3Methods().handle,
    "awaitable-class": lambda: AwaitableClassApp,
    "partial-of-async": lambda: functools.partial(asgi3_function),
    "starlette": Starlette,
    "starlette-middleware": lambda: GZipMiddleware(Starlette()),
    "fastapi": FastAPI,
    "django-asgi-handler": lambda: django_handlers()[0],
    "asgiref-wsgi-to-asgi": lambda: WsgiToAsgi(wsgi_function),
    "apps.asgi_basic": lambda: __import__("apps.asgi_basic").asgi_basic.app,
    "apps.asgi_starlette": lambda: __import__("apps.asgi_starlette").asgi_starlette.app,
    "apps.asgi_fastapi": lambda: __import__("apps.asgi_fastapi").asgi_fastapi.app,
}

ASGI2_APPS = {
    "class-with-async-call": lambda: Asgi2Class,
    "function-returning-coroutine-function": lambda: asgi2_function,
    "apps.asgi_basic.asgi2_app": lambda: __import__("apps.asgi_basic").asgi_basic.asgi2_app,
}


@pytest.mark.parametrize("make", WSGI_APPS.values(), ids=WSGI_APPS.keys())
def test_wsgi_apps_are_detected_as_wsgi(make):
    assert detect_interface(make()) == "wsgi"


@pytest.mark.parametrize("make", ASGI3_APPS.values(), ids=ASGI3_APPS.keys())
def test_asgi3_apps_are_detected_as_asgi3(make):
    app = make()
    assert detect_interface(app) == "asgi"
    assert is_asgi2(app) is False
    assert as_asgi3(app) is app


@pytest.mark.parametrize("make", ASGI2_APPS.values(), ids=ASGI2_APPS.keys())
def test_asgi2_apps_are_detected_as_asgi2(make):
    app = make()
    assert detect_interface(app) == "asgi"
    assert is_asgi2(app) is True
    assert as_asgi3(app) is not app


def test_asgiref_markers_win():
    def single(scope, receive, send):  # sync, three arguments: would look like neither
        return asgi3_function(scope, receive, send)

    single._asgi_single = True
    assert is_asgi2(single) is False

    class Marked(Asgi3Callable):
        _asgi_double = True

    assert is_asgi2(Marked()) is True


def run_asgi3(app, path="/x", body=b"payload"):
    """Call an ASGI 3 app once with an HTTP scope; return the messages it sent."""
    scope = {"type": "http", "path": path, "method": "POST", "headers": []}
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_asgi2_to_asgi3_instantiates_per_scope_and_awaits_the_instance():
    wrapped = asgi2_to_asgi3(Asgi2Class)
    assert inspect.iscoroutinefunction(wrapped)
    assert detect_interface(wrapped) == "asgi" and is_asgi2(wrapped) is False
    sent = run_asgi3(wrapped, "/first")
    assert sent[0] == {"type": "http.response.start", "status": 200, "headers": []}
    assert sent[1]["body"] == b"asgi2 /first payload"
    assert run_asgi3(wrapped, "/second")[1]["body"] == b"asgi2 /second payload"


def test_as_asgi3_wraps_an_asgi2_function():
    sent = run_asgi3(as_asgi3(asgi2_function))
    assert sent[0]["status"] == 204
