"""Views of the ASGI test project. ASGI_TEST_EVENTS (a file) receives event lines."""

import asyncio
import os
import threading

from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST


def record(event):
    path = os.environ.get("ASGI_TEST_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(event + "\n")


def loop_running_here():
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def async_view(request):
    await asyncio.sleep(0.01)
    return JsonResponse(
        {
            "framework": "django",
            "kind": "async",
            "method": request.method,
            "path": request.path,
            "query": request.GET.dict(),
            "loop_running_here": loop_running_here(),
        }
    )


def sync_view(request):
    """Django runs a sync view through sync_to_async: in a thread, off the event loop."""
    return JsonResponse(
        {
            "kind": "sync",
            "loop_running_here": loop_running_here(),
            "main_thread": threading.current_thread() is threading.main_thread(),
        }
    )


@require_POST
def form_view(request):
    return JsonResponse({"fields": request.POST.dict(), "content_type": request.content_type})


async def stream_view(request):
    count = int(request.GET.get("n", "10"))

    async def chunks():
        for index in range(count):
            yield f"chunk-{index}\n".encode()
            await asyncio.sleep(0.005)

    return StreamingHttpResponse(chunks(), content_type="text/plain")


async def cancel_view(request):
    """Sleeps 10 s; Django (>= 5.0) cancels it when the client disconnects."""
    token = request.GET["token"]
    record(f"started {token}")
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        record(f"cancelled {token}")
        raise
    record(f"finished {token}")
    return JsonResponse({"finished": True})


async def boom_view(request):
    raise RuntimeError("django async view crashed on purpose")
