"""EvEventLoop: the asyncio loop pyserver runs ASGI apps on (pyserver.evselector).

asyncio's SelectorEventLoop over an EvSelector whose thread-safe wake-ups go through the core's
ev_async rather than asyncio's self-pipe socket; the core's select() hands back the selector keys
itself. Every asyncio facility must keep working on it: threads waking the loop, executors,
sockets, subprocesses, signal handlers, and close() giving back what the loop opened.
"""

import asyncio
import gc
import os
import selectors
import signal
import socket
import socketserver
import sys
import threading
import time
import warnings
import weakref
from asyncio import base_events, events, selector_events

import pytest
from helpers import ROOT, current_loop, fetch, run_server

from pyserver import _core
from pyserver.evselector import EvEventLoop, EvSelector

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def loop():
    yield from current_loop(EvEventLoop())


class _Echo(socketserver.StreamRequestHandler):
    def handle(self):
        while line := self.rfile.readline():
            self.wfile.write(line)


class _SlowEcho(socketserver.StreamRequestHandler):
    def handle(self):
        while line := self.rfile.readline():
            time.sleep(0.6)
            self.wfile.write(line)


def _serve_in_thread(handler):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def echo_port():
    """A threaded line echo server outside any event loop."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


# ---- wake-ups ----


def test_call_soon_threadsafe_does_not_write_the_self_pipe(loop):
    """The wake-up is the core's ev_async: nothing is queued on asyncio's self-pipe socket,
    which stays for signal numbers only."""
    ran = []
    for n in range(100):
        loop.call_soon_threadsafe(ran.append, n)
    with pytest.raises(BlockingIOError):
        loop._ssock.recv(4096)
    loop.run_until_complete(asyncio.sleep(0))
    assert ran == list(range(100))


def test_ten_thousand_call_soon_threadsafe_from_eight_threads_all_run(loop):
    """No lost wake-up: the loop sleeps in select(None) between bursts (no timer pending), and
    every call from every thread runs, in each thread's order."""
    threads_n, per_thread = 8, 1250
    seen = {t: [] for t in range(threads_n)}
    total = threads_n * per_thread
    done = loop.create_future()
    count = 0

    def note(t, i):
        nonlocal count
        seen[t].append(i)
        count += 1
        if count == total:
            done.set_result(None)

    def producer(t):
        for i in range(per_thread):
            loop.call_soon_threadsafe(note, t, i)
            if i % 97 == 0:
                time.sleep(0.001)  # lets the loop go back to sleep mid-stream

    async def main():
        workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads_n)]
        for w in workers:
            w.start()
        try:
            await asyncio.wait_for(done, 60)
        finally:
            for w in workers:
                w.join()

    loop.run_until_complete(main())
    assert count == total
    assert all(seen[t] == list(range(per_thread)) for t in range(threads_n))


def test_a_thread_wakes_a_loop_blocked_without_timers(loop):
    async def main():
        fut = loop.create_future()
        timer = threading.Timer(0.2, loop.call_soon_threadsafe, (fut.set_result, "woken"))
        started = time.monotonic()
        timer.start()
        result = await asyncio.wait_for(fut, 10)
        timer.join()
        return result, time.monotonic() - started

    result, elapsed = loop.run_until_complete(main())
    assert result == "woken"
    assert 0.15 <= elapsed < 5


def test_run_in_executor_many_jobs(loop):
    def work(n):
        return n * 3, threading.get_ident()

    async def main():
        return await asyncio.gather(*(loop.run_in_executor(None, work, n) for n in range(500)))

    results = loop.run_until_complete(main())
    assert [r[0] for r in results] == [n * 3 for n in range(500)]
    assert threading.get_ident() not in {r[1] for r in results}


def test_sync_to_async_round_trips(loop):
    asgiref_sync = pytest.importorskip("asgiref.sync")

    def work(n):
        return n + 1

    async def main():
        out = []
        for n in range(200):  # one after the other: a wake-up per call
            out.append(await asgiref_sync.sync_to_async(work)(n))
        return out

    assert loop.run_until_complete(main()) == [n + 1 for n in range(200)]


# ---- sockets, subprocesses, signals ----


def test_open_connection_to_a_server_in_another_thread(loop, echo_port):
    async def main():
        reader, writer = await asyncio.open_connection("127.0.0.1", echo_port)
        replies = []
        for n in range(50):
            writer.write(b"line %d\n" % n)
            await writer.drain()
            replies.append(await asyncio.wait_for(reader.readline(), 5))
        writer.close()
        await writer.wait_closed()
        return replies

    assert loop.run_until_complete(main()) == [b"line %d\n" % n for n in range(50)]


def test_open_connection_to_a_server_on_the_same_loop(loop):
    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        replies = []
        for word in (b"one", b"two", b"three"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(word + b"\n")
            replies.append(await asyncio.wait_for(reader.readline(), 5))
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return replies

    assert loop.run_until_complete(main()) == [b"ONE\n", b"TWO\n", b"THREE\n"]


def test_subprocesses_exit_codes_and_output(loop):
    """The child watcher reports each exit through a thread-safe wake-up of the loop."""

    async def one(n):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            f"import sys; print({n}); sys.exit({n % 3})",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        return proc.returncode, out

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(6))), 60)

    assert loop.run_until_complete(main()) == [(n % 3, b"%d\n" % n) for n in range(6)]


def test_signal_handlers_still_run_through_the_self_pipe(loop):
    async def main():
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got.set_result, "signalled")
        try:
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            first = await asyncio.wait_for(got, 5)
            # and a thread's wake-up still works with a handler installed
            fut = loop.create_future()
            threading.Timer(0.05, loop.call_soon_threadsafe, (fut.set_result, "woken")).start()
            return first, await asyncio.wait_for(fut, 5)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)

    assert loop.run_until_complete(main()) == ("signalled", "woken")


# ---- lifetime ----


class _ShiftedClockLoop(EvEventLoop):
    """A loop whose clock runs an hour ahead, as a test clock or a subclass may."""

    calls = 0

    def time(self):
        _ShiftedClockLoop.calls += 1
        return time.monotonic() + 3600.0


@pytest.mark.parametrize("how", ["subclass", "instance"])
def test_overridden_time_and_process_events_are_used(how):
    """The C runner calls asyncio's methods itself only where the loop has them: a time()
    or _process_events() of a subclass or set on the instance is what runs."""
    loop = _ShiftedClockLoop() if how == "subclass" else EvEventLoop()
    calls = {"time": 0, "events": 0}
    if how == "instance":
        base_time, base_events = loop.time, loop._process_events

        def shifted_time():
            calls["time"] += 1
            return base_time() + 3600.0

        def counted_events(events):
            calls["events"] += 1
            return base_events(events)

        loop.time = shifted_time
        loop._process_events = counted_events
    try:
        _ShiftedClockLoop.calls = 0
        fired = []
        start = time.monotonic()
        loop.call_later(0.05, fired.append, "later")
        loop.run_until_complete(asyncio.sleep(0.1))
        assert fired == ["later"]
        assert time.monotonic() - start < 5
        if how == "subclass":
            assert _ShiftedClockLoop.calls > 0
        else:
            assert calls["time"] > 0 and calls["events"] > 0
        # the clock the timers used is the shifted one
        assert loop.time() - time.monotonic() > 3000
    finally:
        loop.close()


def test_close_gives_back_every_descriptor():
    before = open_fds()
    for _ in range(20):
        loop = EvEventLoop()
        loop.call_soon_threadsafe(lambda: None)
        loop.run_until_complete(asyncio.sleep(0.001))
        assert open_fds() > before  # its epoll fd, eventfd and self-pipe pair
        loop.close()
    assert open_fds() == before


def test_wakeup_after_close_is_a_noop():
    loop = EvEventLoop()
    core = loop._selector._core
    loop.close()
    loop._write_to_self()
    core.wakeup()
    with pytest.raises(RuntimeError):
        loop.call_soon_threadsafe(lambda: None)


def test_an_unclosed_loop_is_collected():
    """The keys the core holds point back at the loop: the cycle must be visible to the GC."""
    loop = EvEventLoop()
    a, b = socket.socketpair()
    loop.add_reader(a, lambda: None)
    ref = weakref.ref(loop)
    del loop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    assert ref() is None
    a.close()
    b.close()


def test_core_select_reports_keys_and_skips_fds_without_one():
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    core = _core.EvSelectorCore()
    try:
        core.register(a.fileno(), R, "key-a")
        core.register(c.fileno(), R)  # no key: poll() reports it, select() does not
        b.send(b"x")
        d.send(b"x")
        assert core.select(1) == [("key-a", R)]
        assert sorted(core.poll(0)) == sorted([(a.fileno(), R), (c.fileno(), R)])
        core.modify(a.fileno(), R | W, "key-a2")
        assert core.select(0) == [("key-a2", R | W)]
    finally:
        core.close()
        for s in (a, b, c, d):
            s.close()


def test_evselector_select_is_the_core_select():
    a, b = socket.socketpair()
    with EvSelector() as sel:
        key = sel.register(a, R, "data")
        b.send(b"x")
        assert sel.select(1) == [(key, R)]
        key2 = sel.modify(a, R, "other data")
        assert sel.select(0) == [(key2, R)]
        assert sel.select(0)[0][0].data == "other data"
        assert (key2.fileobj, key2.fd, key2.events) == (a, a.fileno(), R)
        key3 = sel.modify(a.fileno(), R | W, "by fd")
        assert (key3.fileobj, key3.events, key3.data) == (a, R | W, "by fd")
        assert sel.get_key(a) is sel.get_key(a.fileno()) is key3
        with pytest.raises(KeyError):
            sel.get_key(b.fileno())
        with pytest.raises(ValueError):
            sel.get_key(-1)
        assert sel.unregister(a.fileno()) is key3
        assert sel.get_map() == {}
    a.close()
    b.close()


def test_evloop_over_another_selector_keeps_the_self_pipe():
    loop = EvEventLoop(selectors.DefaultSelector())
    try:
        loop.call_soon_threadsafe(lambda: None)
        assert loop._ssock.recv(16) == b"\0"
    finally:
        loop.close()


# ---- under the server ----


@pytest.fixture(scope="module")
def srv():
    servers = [_serve_in_thread(_Echo), _serve_in_thread(_SlowEcho)]
    env = {
        "ASGI_LOOP_ECHO_PORT": str(servers[0][0].server_address[1]),
        "ASGI_LOOP_SLOW_PORT": str(servers[1][0].server_address[1]),
    }
    try:
        with run_server("apps.asgi_loop:app", "--no-access-log", env=env) as srv:
            yield srv
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join()


def test_server_runs_apps_on_the_ev_event_loop(srv):
    resp = fetch(srv.port, "GET", "/loop")
    assert resp.status == 200
    assert resp.body == b"pyserver.evselector.EvEventLoop"


def test_server_executor_and_sync_to_async(srv):
    for _ in range(3):
        resp = fetch(srv.port, "GET", "/threads")
        assert (resp.status, resp.body) == (200, b"128 ok")


def test_server_outgoing_connection(srv):
    for _ in range(3):
        resp = fetch(srv.port, "GET", "/connect")
        assert (resp.status, resp.body) == (200, b"ping")


def test_request_task_waiting_on_a_stream_survives_a_garbage_collection(srv):
    """asyncio holds tasks weakly; a request task waiting for a StreamReader is reachable only
    through the server, which must hold it until the application ends."""
    result = {}

    def slow():
        try:
            result["slow"] = fetch(srv.port, "GET", "/slow", timeout=10)
        except (OSError, AssertionError) as exc:  # the task was collected: never answered
            result["slow"] = exc

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.2)  # /slow now waits for its echo
    assert fetch(srv.port, "GET", "/gc").status == 200
    thread.join()
    resp = result["slow"]
    assert not isinstance(resp, Exception), f"/slow not answered: {resp!r}; {srv.log_tail()}"
    assert (resp.status, resp.body) == (200, b"ping")
    assert "Task was destroyed" not in srv.log_tail()


def test_server_subprocess(srv):
    resp = fetch(srv.port, "GET", "/subprocess")
    assert (resp.status, resp.body) == (200, b"0 from the child")


# ---- asyncio's private names: checked once, asyncio's own methods when one is gone ----


def test_helpers_check_asyncios_private_names_against_this_python():
    helpers = _core.EvLoopHelpers(
        events.Handle,
        events.TimerHandle,
        base_events.BaseEventLoop,
        selector_events.BaseSelectorEventLoop,
        lambda handle, exc: None,
    )
    assert helpers.missing == ()
    assert EvEventLoop._run_once is not base_events.BaseEventLoop._run_once
    assert EvEventLoop.call_soon is not base_events.BaseEventLoop.call_soon


class _SelectorLoopOfAnotherPython:
    """Stands for a BaseSelectorEventLoop whose private names a CPython release renamed."""


def test_helpers_missing_a_name_hand_out_asyncios_own_methods(caplog):
    with caplog.at_level("WARNING", logger="pyserver.error"):
        helpers = _core.EvLoopHelpers(
            events.Handle,
            events.TimerHandle,
            base_events.BaseEventLoop,
            _SelectorLoopOfAnotherPython,
            lambda handle, exc: None,
        )
    assert "BaseSelectorEventLoop._process_events" in helpers.missing
    assert "BaseSelectorEventLoop._selector" in helpers.missing
    assert not any(name.startswith(("Handle.", "TimerHandle.")) for name in helpers.missing)
    warnings = [r for r in caplog.records if r.name == "pyserver.error"]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    assert "BaseSelectorEventLoop._process_events" in warnings[0].getMessage()
    assert helpers.method("run_once") is base_events.BaseEventLoop._run_once
    assert helpers.method("call_soon") is base_events.BaseEventLoop.call_soon
    assert helpers.method("get_debug") is base_events.BaseEventLoop.get_debug

    class StockLoop(asyncio.SelectorEventLoop):
        _run_once = helpers.method("run_once")
        call_soon = helpers.method("call_soon")

    async def work():
        await asyncio.sleep(0.01)
        return await asyncio.get_running_loop().run_in_executor(None, sum, [1, 2, 3])

    loop = StockLoop()
    try:
        assert loop.run_until_complete(work()) == 6
    finally:
        loop.close()
    # Called directly, the C methods do what asyncio's own do too.
    loop = asyncio.SelectorEventLoop()
    try:
        ran = []
        helpers.call_soon(loop, ran.append, 1)
        helpers.run_once(loop)
        assert ran == [1]
    finally:
        loop.close()


# A Python whose asyncio lacks a private name the C loop reads: sitecustomize drops
# BaseSelectorEventLoop._write_to_self before pyserver starts (EvEventLoop sets its own on
# each loop, so asyncio's methods still work there).
_DROP_NAME = """\
from asyncio import selector_events
del selector_events.BaseSelectorEventLoop._write_to_self
"""


def test_server_runs_asyncios_own_loop_methods_when_a_private_name_is_gone(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_DROP_NAME)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    with run_server("apps.asgi_loop:app", "--no-access-log", env=env) as srv:
        assert srv.wait_for_log("BaseSelectorEventLoop._write_to_self"), srv.log_tail()
        resp = fetch(srv.port, "GET", "/run_once")
        assert (resp.status, resp.body) == (200, b"asyncio")
        for _ in range(3):
            resp = fetch(srv.port, "GET", "/threads")
            assert (resp.status, resp.body) == (200, b"128 ok")
        resp = fetch(srv.port, "GET", "/subprocess")
        assert (resp.status, resp.body) == (200, b"0 from the child")
        lines = [line for line in srv.log().splitlines() if "lacks" in line]
    assert len(lines) == 1, lines
    assert (
        "[WARNING] asyncio of this Python lacks BaseSelectorEventLoop._write_to_self:" in lines[0]
    )


def test_server_runs_the_c_loop_methods_on_this_python():
    with run_server("apps.asgi_loop:app", "--no-access-log") as srv:
        resp = fetch(srv.port, "GET", "/run_once")
        assert (resp.status, resp.body) == (200, b"pyserver")
        assert "lacks" not in srv.log()
