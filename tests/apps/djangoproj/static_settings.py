"""The test project with the admin's static files, for `collectstatic` (test_static.py):
STATIC_ROOT comes from the environment."""

import os

from apps.djangoproj.settings import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.staticfiles",
]
STATIC_URL = "/static/"
STATIC_ROOT = os.environ["STATIC_ROOT"]
