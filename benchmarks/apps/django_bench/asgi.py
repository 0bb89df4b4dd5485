import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.apps.django_bench.settings")
os.environ["DJANGO_BENCH_ASGI"] = "1"  # settings.py: no persistent connections under ASGI
application = get_asgi_application()
