from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "benchmarks.apps.django_bench"
    label = "bench"
