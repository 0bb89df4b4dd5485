"""The ASGI lifespan protocol, with uvicorn's semantics.

    lifespan = Lifespan(app, mode, logger)     # mode: "auto" | "on" | "off"
    if not await lifespan.startup():           # False: the worker must exit with code 3
        ...
    server.start(loop, lifespan.state)          # every request scope gets a copy of state
    ...
    await lifespan.shutdown()

"on": an exception from the app or `lifespan.startup.failed` fails startup. "auto": an exception
raised before startup completed means the app does not speak lifespan (Django's ASGIHandler
raises for any scope but "http"); that is logged at info level and serving goes on, but
`lifespan.startup.failed` still fails startup. "off": the app never sees a lifespan scope.
"""

import asyncio

__all__ = ["Lifespan", "STARTUP_FAILURE"]

STARTUP_FAILURE = 3  # the worker's exit code when startup fails

_SEND_TYPES = frozenset(
    {
        "lifespan.startup.complete",
        "lifespan.startup.failed",
        "lifespan.shutdown.complete",
        "lifespan.shutdown.failed",
    }
)


class Lifespan:
    """Runs the app's lifespan scope as a task and follows it through startup and shutdown.

    `state` is the dict the app fills in during startup. After startup(), `should_exit` tells
    whether startup failed; `error_occurred` whether the app's lifespan task raised.
    """

    def __init__(self, app, mode, logger):
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"lifespan mode must be 'auto', 'on' or 'off', not {mode!r}")
        self.app = app
        self.mode = mode
        self.logger = logger
        self.state = {}
        self.should_exit = False
        self.error_occurred = False
        self.startup_failed = False
        self.shutdown_failed = False
        self._task = None
        self._receive_queue = None
        self._startup_event = None
        self._shutdown_event = None

    async def startup(self):
        """Sends lifespan.startup and waits for the answer. Returns True when serving may
        start, False when the worker must exit with STARTUP_FAILURE."""
        if self.mode == "off":
            return True
        self.logger.info("Waiting for application startup.")
        self._receive_queue = asyncio.Queue()
        self._startup_event = asyncio.Event()
        self._shutdown_event = asyncio.Event()
        # A strong reference: the loop keeps only weak ones to its tasks.
        self._task = asyncio.get_running_loop().create_task(self._main())
        await self._receive_queue.put({"type": "lifespan.startup"})
        await self._startup_event.wait()
        if self.startup_failed or (self.error_occurred and self.mode == "on"):
            self.logger.error("Application startup failed. Exiting.")
            self.should_exit = True
            return False
        if not self.error_occurred:
            self.logger.info("Application startup complete.")
        return True

    async def shutdown(self):
        """Sends lifespan.shutdown and waits until the app has answered (or its lifespan task
        has ended). Failures are logged; they do not change the exit code."""
        if self.mode == "off" or self._task is None or self.error_occurred:
            return
        self.logger.info("Waiting for application shutdown.")
        await self._receive_queue.put({"type": "lifespan.shutdown"})
        await self._shutdown_event.wait()
        if self.shutdown_failed or (self.error_occurred and self.mode == "on"):
            self.logger.error("Application shutdown failed. Exiting.")
        else:
            self.logger.info("Application shutdown complete.")

    async def _main(self):
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        try:
            await self.app(scope, self._receive, self._send)
        except BaseException as exc:
            self.error_occurred = True
            if self.startup_failed or self.shutdown_failed:
                return  # already reported through the failed message
            if self.mode == "auto" and not self._startup_event.is_set():
                self.logger.info("ASGI 'lifespan' protocol appears unsupported.")
            else:
                self.logger.error("Exception in 'lifespan' protocol\n", exc_info=exc)
        finally:
            self._startup_event.set()
            self._shutdown_event.set()

    async def _receive(self):
        return await self._receive_queue.get()

    async def _send(self, message):
        kind = message["type"]
        if kind not in _SEND_TYPES:
            raise RuntimeError(f"Unexpected ASGI lifespan message type: {kind!r}")
        starting = kind.startswith("lifespan.startup.")
        if starting:
            if self._startup_event.is_set() or self._shutdown_event.is_set():
                raise RuntimeError(f"Got {kind!r} after startup was already answered")
        elif not self._startup_event.is_set() or self._shutdown_event.is_set():
            raise RuntimeError(f"Got {kind!r} out of order")
        if kind.endswith(".failed"):
            if starting:
                self.startup_failed = True
            else:
                self.shutdown_failed = True
            if message.get("message"):
                self.logger.error(message["message"])
        (self._startup_event if starting else self._shutdown_event).set()
