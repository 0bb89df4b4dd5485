"""A small Django project for the django-asgi benchmark scenario.

The database is SQLite at $DJANGO_BENCH_DB (default /tmp/pyserver-bench-django.sqlite3);
`python -m benchmarks.apps.django_bench.setup_db` creates it with 50 rows.
"""
