"""pyserver: a WSGI/ASGI application server whose core is C (libev + llhttp)."""

__version__ = "0.1.0"
