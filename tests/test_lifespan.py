"""The ASGI lifespan protocol (pyserver.lifespan) and the ASGI worker runner (pyserver.asgi_runner).

Lifespan is driven directly on a plain asyncio loop with small apps (tests/apps/lifespan_apps.py),
Django's ASGIHandler and Starlette. asgi_runner.run() is driven with a real EvSelectorCore and a
stand-in for the C server object that serves one request over a real TCP connection. Last, real
ASGI workers (`_core.serve` through tests/apps/lifespan_serve.py) are started, requested and
stopped with SIGTERM.
"""

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import types
import uuid

import httpx
import pytest
from apps import lifespan_apps
from helpers import TESTS_DIR, free_port, server_env, wait_for

from pyserver import _core, asgi_runner
from pyserver.lifespan import STARTUP_FAILURE, Lifespan


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def logger():
    log = logging.getLogger(f"test.lifespan.{uuid.uuid4().hex}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.handler = ListHandler()
    log.addHandler(log.handler)
    yield log
    log.removeHandler(log.handler)


def messages(log, level=None):
    return [r.getMessage() for r in log.handler.records if level is None or r.levelno == level]


def run_lifespan(app, mode, log, between=None):
    """Startup, an optional coroutine function `between(lifespan)`, shutdown; on a fresh loop.
    Returns (startup result, the Lifespan)."""

    async def main():
        lifespan = Lifespan(app, mode, log)
        ok = await lifespan.startup()
        if ok:
            if between is not None:
                await between(lifespan)
            await lifespan.shutdown()
        return ok, lifespan

    return asyncio.run(main())


# ---- the protocol ----


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_startup_and_shutdown_run_in_order_around_serving(mode, logger):
    app = lifespan_apps.Ordered()

    async def serve(lifespan):
        app.events.append("serving")

    ok, lifespan = run_lifespan(app, mode, logger, serve)
    assert ok and not lifespan.should_exit
    assert app.events == [
        "lifespan.startup",
        "startup done",
        "serving",
        "lifespan.shutdown",
        "shutdown done",
    ]
    assert messages(logger, logging.INFO) == [
        "Waiting for application startup.",
        "Application startup complete.",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
    ]


def test_scope_carries_asgi_versions_and_the_state_dict(logger):
    app = lifespan_apps.Ordered()
    ok, lifespan = run_lifespan(app, "on", logger)
    (scope,) = app.scopes
    assert scope["type"] == "lifespan"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.0"}
    assert scope["state"] is lifespan.state
    assert lifespan.state == {"db": "connected"}


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_startup_failed_message_means_exit_code_3(mode, logger):
    app = lifespan_apps.StartupFails()
    ok, lifespan = run_lifespan(app, mode, logger)
    assert not ok and lifespan.should_exit and lifespan.startup_failed
    assert app.events == ["startup"]
    errors = messages(logger, logging.ERROR)
    assert errors == ["no database", "Application startup failed. Exiting."]
    assert STARTUP_FAILURE == 3


def test_exception_in_on_mode_fails_startup_with_the_traceback_logged(logger):
    app = lifespan_apps.StartupRaises()
    ok, lifespan = run_lifespan(app, "on", logger)
    assert not ok and lifespan.should_exit and lifespan.error_occurred
    records = [r for r in logger.handler.records if r.levelno == logging.ERROR]
    assert records[0].getMessage().startswith("Exception in 'lifespan' protocol")
    assert isinstance(records[0].exc_info[1], RuntimeError)
    assert records[-1].getMessage() == "Application startup failed. Exiting."


def test_exception_in_auto_mode_means_lifespan_unsupported_and_serving_goes_on(logger):
    app = lifespan_apps.HttpOnly()
    served = []

    async def serve(lifespan):
        served.append(lifespan.state)

    ok, lifespan = run_lifespan(app, "auto", logger, serve)
    assert ok and not lifespan.should_exit
    assert served == [{}]
    assert "ASGI 'lifespan' protocol appears unsupported." in messages(logger, logging.INFO)
    assert messages(logger, logging.ERROR) == []
    # shutdown is not sent to an app that rejected the protocol
    assert [s["type"] for s in app.scopes] == ["lifespan"]


def test_django_asgi_handler_in_auto_mode_is_unsupported_and_continues(logger, monkeypatch):
    # Whichever Django project this process configured first is fine: ASGIHandler rejects
    # every scope but "http" before it looks at a setting.
    monkeypatch.setenv(
        "DJANGO_SETTINGS_MODULE",
        os.environ.get("DJANGO_SETTINGS_MODULE", "apps.djangoproj.settings"),
    )
    from django.core.asgi import get_asgi_application

    handler = get_asgi_application()
    ok, lifespan = run_lifespan(handler, "auto", logger)
    assert ok and not lifespan.should_exit
    assert "ASGI 'lifespan' protocol appears unsupported." in messages(logger, logging.INFO)
    assert messages(logger, logging.ERROR) == []

    ok, lifespan = run_lifespan(handler, "on", logger)
    assert not ok  # the same app with --lifespan on stops the worker


def test_off_mode_never_calls_the_app_with_lifespan(logger):
    app = lifespan_apps.Ordered()
    ok, lifespan = run_lifespan(app, "off", logger)
    assert ok and lifespan.state == {}
    assert app.scopes == [] and app.events == []
    assert logger.handler.records == []


def test_shutdown_failed_is_logged(logger):
    app = lifespan_apps.ShutdownFails()
    ok, lifespan = run_lifespan(app, "on", logger)
    assert ok and lifespan.shutdown_failed
    assert app.events == ["shutdown"]
    assert messages(logger, logging.ERROR) == [
        "could not flush",
        "Application shutdown failed. Exiting.",
    ]


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_exception_during_shutdown_is_an_error_even_in_auto_mode(mode, logger):
    app = lifespan_apps.ShutdownRaises()
    ok, lifespan = run_lifespan(app, mode, logger)
    assert ok and lifespan.error_occurred
    errors = [r for r in logger.handler.records if r.levelno == logging.ERROR]
    assert errors[0].getMessage().startswith("Exception in 'lifespan' protocol")
    assert "appears unsupported" not in " ".join(messages(logger))


def test_app_returning_without_answering_startup_does_not_hang(logger):
    app = lifespan_apps.ReturnsEarly()
    ok, lifespan = asyncio.run(asyncio.wait_for(_startup_only(app, "auto", logger), 5))
    assert ok
    assert app.events == ["startup ignored"]


async def _startup_only(app, mode, log):
    lifespan = Lifespan(app, mode, log)
    ok = await lifespan.startup()
    await lifespan.shutdown()
    return ok, lifespan


def test_messages_out_of_order_are_rejected(logger):
    class Twice(lifespan_apps.Recorder):
        async def lifespan(self, scope, receive, send):
            await receive()
            await send({"type": "lifespan.startup.complete"})
            try:
                await send({"type": "lifespan.startup.complete"})
            except RuntimeError as exc:
                self.events.append(str(exc))
            try:
                await send({"type": "http.response.start"})
            except RuntimeError as exc:
                self.events.append(str(exc))
            await receive()
            await send({"type": "lifespan.shutdown.complete"})

    app = Twice()
    ok, _ = run_lifespan(app, "on", logger)
    assert ok
    assert len(app.events) == 2 and "already answered" in app.events[0]
    assert "Unexpected ASGI lifespan message" in app.events[1]


def test_invalid_mode_is_refused(logger):
    with pytest.raises(ValueError):
        Lifespan(lifespan_apps.Ordered(), "sometimes", logger)


def test_starlette_lifespan_context_manager_state(logger):
    app, events = lifespan_apps.starlette_app()
    seen = []

    async def serve(lifespan):
        seen.append(dict(lifespan.state))
        events.append("serving")

    ok, lifespan = run_lifespan(app, "on", logger, serve)
    assert ok
    assert events == ["enter", "serving", "exit"]
    assert seen == [{"pool": "ready"}]
    assert messages(logger, logging.ERROR) == []


# ---- asgi_runner.run on the libev selector ----


class StandInServer:
    """Plays the C AsgiServer's part for run(): start(loop, state) begins serving; here one
    request over a real TCP connection on the same loop, after which it stops the loop as the C
    server does once a graceful stop has finished; finish() closes what is left."""

    def __init__(self, app):
        self.app = app
        self.calls = []
        self.response = None
        self.loop = None

    def start(self, loop, state):
        self.calls.append("start")
        self.loop = loop
        self.state = state
        self._task = loop.create_task(self._one_request())

    def finish(self):
        self.calls.append("finish")

    async def _one_request(self):
        async def handle(reader, writer):
            await reader.readline()
            body = []

            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message):
                body.append(message.get("body", b""))

            scope = {"type": "http", "path": "/", "state": dict(self.state)}
            await self.app(scope, receive, send)
            writer.write(b"".join(body))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /\n")
        self.response = await reader.read()
        writer.close()
        server.close()
        await server.wait_closed()
        self.loop.stop()


def config(log, **kwargs):
    return types.SimpleNamespace(error_logger=log, **kwargs)


def test_runner_serves_between_startup_and_shutdown_then_closes_everything(logger):
    app = lifespan_apps.Ordered()
    server = StandInServer(app)
    core = _core.EvSelectorCore()
    assert asgi_runner.run(app, core, config(logger, lifespan="on"), server) == 0
    assert server.calls == ["start", "finish"]
    assert server.response == b"ok"
    assert app.events == [
        "lifespan.startup",
        "startup done",
        "http",
        "lifespan.shutdown",
        "shutdown done",
    ]
    assert server.state == {"db": "connected"}
    assert app.scopes[1]["state"] == {"db": "connected"}
    assert server.loop.is_closed() and core.closed


def test_runner_exits_3_without_starting_the_server_when_startup_fails(logger):
    for app in (lifespan_apps.StartupFails(), lifespan_apps.StartupRaises()):
        server = StandInServer(app)
        core = _core.EvSelectorCore()
        assert asgi_runner.run(app, core, config(logger, lifespan="on"), server) == 3
        assert server.calls == [] and core.closed


def test_runner_defaults_to_auto_and_serves_an_app_without_lifespan(logger):
    app = lifespan_apps.HttpOnly()
    server = StandInServer(app)
    assert asgi_runner.run(app, _core.EvSelectorCore(), config(logger), server) == 0
    assert server.response == b"ok" and server.calls == ["start", "finish"]
    assert "ASGI 'lifespan' protocol appears unsupported." in messages(logger, logging.INFO)


def test_runner_off_mode_and_leftover_work_is_cleaned_up(logger):
    leftovers = {}

    class Busy(lifespan_apps.Recorder):
        async def http(self, scope, receive, send):
            loop = asyncio.get_running_loop()
            leftovers["task"] = loop.create_task(asyncio.sleep(3600))
            leftovers["job"] = loop.run_in_executor(None, time.sleep, 0.2)

            async def agen():
                try:
                    yield 1
                    yield 2
                finally:
                    leftovers["agen closed"] = True

            leftovers["agen"] = gen = agen()
            await gen.__anext__()
            await super().http(scope, receive, send)

    app = Busy()
    server = StandInServer(app)
    assert asgi_runner.run(app, _core.EvSelectorCore(), config(logger, lifespan="off"), server) == 0
    assert [s["type"] for s in app.scopes] == ["http"]
    assert leftovers["task"].cancelled()
    assert leftovers["job"].done()  # the default executor was shut down, its job awaited
    assert leftovers["agen closed"]


# ---- real ASGI workers ----


class Worker:
    def __init__(self, proc, port, log_path, events_path):
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.events_path = events_path

    def log(self):
        return self.log_path.read_text()

    def events(self):
        return self.events_path.read_text().splitlines() if self.events_path.exists() else []

    def get(self, path):
        """GET path, retrying while the worker is not listening yet; returns the response."""
        deadline = time.monotonic() + 15
        while True:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10)
            except httpx.ConnectError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"worker is not serving; its log:\n{self.log()}") from exc
                time.sleep(0.05)

    def stop(self):
        """SIGTERM (graceful stop); returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)


@contextlib.contextmanager
def worker(tmp_path, mode, startup=""):
    port = free_port()
    events = tmp_path / "events"
    log_path = tmp_path / "worker.log"
    env = server_env({"LIFESPAN_TEST_EVENTS": str(events), "LIFESPAN_TEST_STARTUP": startup})
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(TESTS_DIR / "apps" / "lifespan_serve.py")]
            + ["apps.lifespan_apps:served", str(port), mode],
            cwd=TESTS_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Worker(proc, port, log_path, events)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_real_worker_starts_up_before_serving_and_shuts_down_after_the_last_request(tmp_path):
    with worker(tmp_path, "on", startup="slow") as w:
        response = w.get("/state")  # sent while startup still sleeps: answered after it
        assert response.status_code == 200
        assert response.json()["state"] == {"db": "connected"}
        slow = {}
        client = threading.Thread(target=lambda: slow.update(r=w.get("/slow")))
        client.start()
        assert wait_for(lambda: "request start /slow" in w.events(), 15), w.events()
        assert w.stop() == 0  # graceful: the slow request finishes first
        client.join(15)
        assert slow["r"].status_code == 200
    assert w.events() == [
        "startup",
        "request start /state",
        "request end /state",
        "request start /slow",
        "request end /slow",
        "shutdown",
    ]
    log = w.log()
    assert log.index("Application startup complete.") < log.index(
        "Waiting for application shutdown"
    )
    assert "Application shutdown complete." in log


@pytest.mark.parametrize(
    ("mode", "startup"), [("on", "fail"), ("auto", "fail"), ("on", "raise"), ("on", "reject")]
)
def test_real_worker_exits_3_when_startup_fails(tmp_path, mode, startup):
    with worker(tmp_path, mode, startup=startup) as w:
        assert w.proc.wait(15) == 3
    assert "Application startup failed. Exiting." in w.log()
    assert w.events() == []


@pytest.mark.parametrize(("mode", "startup"), [("auto", "reject"), ("auto", "raise")])
def test_real_worker_in_auto_mode_serves_an_app_without_lifespan(tmp_path, mode, startup):
    with worker(tmp_path, mode, startup=startup) as w:
        response = w.get("/state")
        assert response.status_code == 200 and response.json()["state"] == {}
        assert w.stop() == 0
    assert "ASGI 'lifespan' protocol appears unsupported." in w.log()
    assert "shutdown" not in w.events()


def test_real_worker_with_lifespan_off_never_sends_it(tmp_path):
    with worker(tmp_path, "off") as w:
        response = w.get("/state")
        assert response.status_code == 200 and response.json()["state"] == {}
        assert w.stop() == 0
    assert w.events() == ["request start /state", "request end /state"]
    # The startup line names the app (apps.lifespan_apps:...): not a lifespan message.
    lines = [
        line for line in w.log().splitlines() if "] Application apps.lifespan_apps" not in line
    ]
    assert "lifespan" not in "\n".join(lines).lower()
