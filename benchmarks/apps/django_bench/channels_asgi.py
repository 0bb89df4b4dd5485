"""The django_bench project as ASGI with a Channels consumer, for the django-channels
scenario: HTTP through Django's ASGIHandler, WebSockets at /ws/bench/ in group "bench"; each
text a client sends goes to every member of the group (the in-memory channel layer of
settings.CHANNEL_LAYERS: one worker process)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.apps.django_bench.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

http_application = get_asgi_application()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

GROUP = "bench"


class BroadcastConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        await self.channel_layer.group_send(GROUP, {"type": "bench.message", "text": text_data})

    async def bench_message(self, event):
        await self.send(text_data=event["text"])


application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": URLRouter([path("ws/bench/", BroadcastConsumer.as_asgi())]),
    }
)
