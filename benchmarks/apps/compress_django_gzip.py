"""The Django view of compress_apps behind django.middleware.gzip.GZipMiddleware."""

import os

os.environ["BENCH_DJANGO_GZIP"] = "1"

from benchmarks.apps.compress_apps import django_app as application  # noqa: E402, F401
