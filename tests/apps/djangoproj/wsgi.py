"""WSGI entry point: apps.djangoproj.wsgi:application (wrapped in the PEP 3333 validator)."""

import os
from wsgiref.validate import validator

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "apps.djangoproj.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402 (needs the settings variable)

django_application = get_wsgi_application()
application = validator(django_application)
