from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


def json_view(request):
    return JsonResponse(
        {
            "framework": "django",
            "method": request.method,
            "path": request.path,
            "script_name": request.META.get("SCRIPT_NAME", ""),
            "query": request.GET.dict(),
        }
    )


@csrf_exempt
@require_POST
def form_view(request):
    return JsonResponse({"fields": request.POST.dict(), "content_type": request.content_type})


def stream_view(request):
    count = int(request.GET.get("n", "10"))
    return StreamingHttpResponse((f"chunk-{i}\n" for i in range(count)), content_type="text/plain")


def boom_view(request):
    raise RuntimeError("django view failure")
