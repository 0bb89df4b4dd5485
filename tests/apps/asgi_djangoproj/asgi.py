"""ASGI entry point: apps.asgi_djangoproj.asgi:application (Django's ASGIHandler)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "apps.asgi_djangoproj.settings")

from django.core.asgi import get_asgi_application  # noqa: E402 (needs the settings variable)

application = get_asgi_application()
