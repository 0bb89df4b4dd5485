"""--asgi-app beside a WSGI application: the Python side of a worker that serves both.

The C core routes the requests (csrc/py/hybrid.c); asyncio runs the ASGI application on the
worker's loop thread (pyserver.asgi_runner) while, with --threads N, the WSGI views run on
the application threads. LoopLink makes those views and the loop work together the way
they do under an ASGI server.
"""

import os

__all__ = ["LoopLink"]


class LoopLink:
    """The WSGI application, with asgiref's async_to_sync (Channels' group_send from a sync
    view, a signal handler, ...) running its coroutine on the worker's asyncio loop instead
    of on a new loop in a new thread: as under an ASGI server, where a sync view runs in
    sync_to_async's thread and async_to_sync goes back to the server's loop. So the
    channel layer (in-memory, or channels_redis's connections) is the one the consumers
    use. Only for application threads (--threads N > 1): the loop's own thread cannot wait
    for its own loop. `loop` is set by the runner while asyncio's loop runs."""

    def __init__(self, app):
        self.app = app
        self.loop = None
        try:
            from asgiref.sync import SyncToAsync
        except ImportError:  # no asgiref: nothing to link
            self._local = None
        else:
            self._local = SyncToAsync.threadlocal

    def __call__(self, environ, start_response):
        local, loop = self._local, self.loop
        if local is not None and getattr(local, "main_event_loop", None) is not loop:
            # asgiref's own names for "the loop this thread's sync code came from"
            local.main_event_loop = loop
            local.main_event_loop_pid = os.getpid() if loop is not None else None
        return self.app(environ, start_response)
