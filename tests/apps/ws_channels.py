"""A Django Channels project in one module, for tests/test_ws_channels.py.

/ws/echo/         a sync WebsocketConsumer echoing text and bytes
/ws/chat/<room>/  an AsyncWebsocketConsumer: every message goes to the room's group
                  through the in-memory channel layer, and back to every member
/                 plain Django HTTP (a view answering "django http")

`application` is the ProtocolTypeRouter, as a project's asgi.py would build it.
"""

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="test-only",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["channels"],
        CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}},
        ASGI_APPLICATION=f"{__name__}.application",
    )
    django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def index(request):
    return HttpResponse("django http")


urlpatterns = [path("", index)]


class EchoConsumer(WebsocketConsumer):
    def connect(self):
        self.accept()

    def receive(self, text_data=None, bytes_data=None):
        if text_data is not None:
            self.send(text_data=text_data)
        else:
            self.send(bytes_data=bytes_data)


class ChatConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        self.group = "chat_" + self.scope["url_route"]["kwargs"]["room"]
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        await self.channel_layer.group_send(self.group, {"type": "chat.message", "text": text_data})

    async def chat_message(self, event):
        await self.send(text_data=event["text"])


http_app = get_asgi_application()

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": URLRouter(
            [
                path("ws/echo/", EchoConsumer.as_asgi()),
                path("ws/chat/<str:room>/", ChatConsumer.as_asgi()),
            ]
        ),
    }
)
