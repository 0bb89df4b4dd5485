"""A pyserver gunicorn worker with WebSocket settings (CONFIG_KWARGS), for test_ws.py."""

from pyserver.workers import PyserverASGIWorker


class SmallMessagesWorker(PyserverASGIWorker):
    CONFIG_KWARGS = {"ws_max_size": 100, "ws_per_message_deflate": False}
