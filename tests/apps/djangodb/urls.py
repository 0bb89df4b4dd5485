import threading

from django.db import connection
from django.http import JsonResponse
from django.urls import path


def query(request):
    seconds = float(request.GET.get("sleep", "0"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), pg_sleep(%s)::text", [seconds])
        backend = cursor.fetchone()[0]
        cursor.execute(
            "SELECT count(*) FROM generate_series(1, %s)", [int(request.GET.get("n", "10"))]
        )
        count = cursor.fetchone()[0]
    return JsonResponse(
        {"backend": backend, "count": count, "thread": threading.current_thread().name}
    )


def sessions(request):
    """Client backends connected to the database now, this request's one included."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        return JsonResponse({"sessions": cursor.fetchone()[0]})


urlpatterns = [path("query/", query), path("sessions/", sessions)]
