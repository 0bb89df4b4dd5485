"""A Django project with Channels served as WSGI plus ASGI on one port, for
tests/test_hybrid_channels.py (`pyserver apps.hybrid_channels:wsgi_application
--asgi-app apps.hybrid_channels:application`).

HTTP (WSGI, through Django's WSGIHandler):
/where/            JSON: how the view ran (wsgi.version, wsgi.multithread, the thread)
/slow/?s=SECONDS   JSON after sleeping that long (requests in progress at a stop)
/items/            JSON list, a second plain view
/notify/?text=T    a sync view sending T to group "news" (async_to_sync), and which thread
                   ran that coroutine
/unsafe/           JSON after calling a function under Django's async_unsafe guard (the ORM's)
HTTP under --asgi-path /events/ (ASGI, through Django's ASGIHandler):
/events/stream/    an async view streaming three server-sent events
/events/upload/    an async view: JSON with the size of the request body it read
WebSockets (ASGI, Channels):
/ws/echo/          a sync WebsocketConsumer echoing text and bytes
/ws/news/          an AsyncWebsocketConsumer in group "news": says {"pid": ...} on connect;
                   each text it receives goes to the whole group

The channel layer is in memory, or Redis when HYBRID_REDIS_URL is set (channels_redis).
The lifespan protocol reaches `application`: it prints "hybrid lifespan startup" and
"hybrid lifespan shutdown" (the tests read them in the server's log).
"""

import asyncio
import json
import os
import sys
import threading
import time

import django
from django.conf import settings

if not settings.configured:
    redis_url = os.environ.get("HYBRID_REDIS_URL")
    layer = (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [redis_url]}}
        if redis_url
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
    settings.configure(
        DEBUG=False,
        SECRET_KEY="test-only",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["channels"],
        CHANNEL_LAYERS={"default": layer},
        ASGI_APPLICATION=f"{__name__}.application",
    )
    django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import JsonResponse, StreamingHttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils.asyncio import async_unsafe  # noqa: E402


def where(request):
    version = request.META.get("wsgi.version")
    return JsonResponse(
        {
            "wsgi_version": list(version) if version else None,
            "multithread": request.META.get("wsgi.multithread"),
            "thread": threading.current_thread().name,
        }
    )


@async_unsafe("the ORM")
def orm_like():
    """Django's guard of the ORM and other sync-only code: it refuses to run in a thread
    that has a running event loop."""
    return "sync code ran"


def unsafe(request):
    return JsonResponse({"result": orm_like()})


async def tell(text):
    await get_channel_layer().group_send("news", {"type": "news.item", "text": text})
    return threading.current_thread().name


def notify(request):
    """A sync view telling the group, as projects do from their views and signals; says
    which thread ran the coroutine."""
    text = request.GET.get("text", "")
    return JsonResponse({"sent": text, "ran_on": async_to_sync(tell)(text)})


def slow(request):
    seconds = float(request.GET.get("s", "0.5"))
    print(f"slow view started on {threading.current_thread().name}", file=sys.stderr, flush=True)
    time.sleep(seconds)
    return JsonResponse({"slept": seconds})


def items(request):
    return JsonResponse({"items": [{"id": i, "name": f"item {i}"} for i in range(10)]})


async def stream(request):
    under_wsgi = "wsgi.version" in request.META

    async def events():
        for i in range(3):
            yield f"data: {json.dumps({'n': i, 'wsgi': under_wsgi})}\n\n"
            await asyncio.sleep(0.01)

    return StreamingHttpResponse(events(), content_type="text/event-stream")


async def upload(request):
    return JsonResponse({"bytes": len(request.body), "wsgi": "wsgi.version" in request.META})


urlpatterns = [
    path("where/", where),
    path("slow/", slow),
    path("unsafe/", unsafe),
    path("notify/", notify),
    path("items/", items),
    path("events/stream/", stream),
    path("events/upload/", upload),
]


class EchoConsumer(WebsocketConsumer):
    def connect(self):
        self.accept()

    def receive(self, text_data=None, bytes_data=None):
        if text_data is not None:
            self.send(text_data=text_data)
        else:
            self.send(bytes_data=bytes_data)


class NewsConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        await self.channel_layer.group_add("news", self.channel_name)
        await self.accept()
        await self.send(text_data=json.dumps({"pid": os.getpid()}))

    async def disconnect(self, code):
        await self.channel_layer.group_discard("news", self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        await self.channel_layer.group_send("news", {"type": "news.item", "text": text_data})

    async def news_item(self, event):
        await self.send(text_data=event["text"])


wsgi_application = get_wsgi_application()

router = ProtocolTypeRouter(
    {
        "http": get_asgi_application(),
        "websocket": URLRouter(
            [
                path("ws/echo/", EchoConsumer.as_asgi()),
                path("ws/news/", NewsConsumer.as_asgi()),
            ]
        ),
    }
)


async def application(scope, receive, send):
    """The router, with the lifespan protocol answered (Channels' router has no lifespan)."""
    if scope["type"] != "lifespan":
        await router(scope, receive, send)
        return
    while True:
        message = await receive()
        phase = message["type"].rsplit(".", 1)[-1]
        print(f"hybrid lifespan {phase} pid {os.getpid()}", file=sys.stderr, flush=True)
        await send({"type": f"{message['type']}.complete"})
        if phase == "shutdown":
            return
