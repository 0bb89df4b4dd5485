"""The compression scenarios (issue 37): a view answering GET /catalog with the same
20 KB JSON document in each framework, once plain (for servers that compress it
themselves: pyserver --compress, peregrine --compress) and once behind the framework's
own gzip middleware (what Django and FastAPI projects run today), at gzip level 6 (the
level of Django's GZipMiddleware; Starlette's is set to it).

The document is built once at import and encoded once: the scenarios time compression,
not serialisation."""

import json
import os

CATALOG_PATH = "/catalog"
GZIP_LEVEL = 6


def catalog():
    """About 20 KB of JSON shaped like a product listing: repeated keys, varied values,
    the kind of body that compresses 4-6x."""
    colours = ["red", "green", "blue", "black", "white", "silver", "orange"]
    rows = [
        {
            "id": i,
            "sku": f"SKU-{i * 7919 % 100000:05d}",
            "name": f"widget {i}",
            "colour": colours[i % len(colours)],
            "price": round(3.5 + (i * 37 % 200) / 7, 2),
            "stock": i * 13 % 97,
            "tags": ["new", "sale"] if i % 3 == 0 else ["classic"],
            "description": f"A sturdy widget, model {i}, for everyday use.",
            "barcode": f"{(i + 1) * 2654435761 % 2**32:08x}{i * 40503 % 65536:04x}",
            "rating": round((i * 7 % 50) / 10, 1),
        }
        for i in range(100)
    ]
    return {"count": len(rows), "items": rows}


BODY = json.dumps(catalog(), separators=(",", ":")).encode()


# ---- Flask ----------------------------------------------------------------------------
def _flask_app():
    from flask import Flask, Response

    app = Flask(__name__)

    @app.get(CATALOG_PATH)
    def read_catalog():
        return Response(BODY, mimetype="application/json")

    return app


# ---- FastAPI --------------------------------------------------------------------------
def _fastapi_app(gzip):
    from fastapi import FastAPI, Response

    app = FastAPI()
    if gzip:
        from starlette.middleware.gzip import GZipMiddleware

        app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=GZIP_LEVEL)

    @app.get(CATALOG_PATH)
    async def read_catalog():
        return Response(BODY, media_type="application/json")

    return app


# ---- Django ---------------------------------------------------------------------------
def _django_app(gzip):
    """One process configures Django once: the gzip variant is another module
    (compress_django_gzip) that sets BENCH_DJANGO_GZIP before importing this one."""
    import django
    from django.conf import settings

    if not settings.configured:
        middleware = ["django.middleware.gzip.GZipMiddleware"] if gzip else []
        settings.configure(
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            SECRET_KEY="benchmarks-only",
            ROOT_URLCONF=__name__,
            MIDDLEWARE=middleware,
            INSTALLED_APPS=[],
            USE_TZ=True,
        )
        django.setup()
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


def _django_view(request):
    from django.http import HttpResponse

    return HttpResponse(BODY, content_type="application/json")


def _urlpatterns():
    try:
        from django.urls import path
    except ImportError:  # the peers venv of a server without Django never asks
        return []
    return [path(CATALOG_PATH.lstrip("/"), _django_view)]


urlpatterns = _urlpatterns()


def __getattr__(name):
    """The apps are built on first use, so that a venv without one framework can still
    serve the others."""
    makers = {
        "flask_app": _flask_app,
        "fastapi_app": lambda: _fastapi_app(False),
        "fastapi_gzip_app": lambda: _fastapi_app(True),
        "django_app": lambda: _django_app(os.environ.get("BENCH_DJANGO_GZIP") == "1"),
    }
    if name not in makers:
        raise AttributeError(name)
    app = makers[name]()
    globals()[name] = app
    return app
