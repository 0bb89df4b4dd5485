"""EvSelector: asyncio's SelectorEventLoop running on a libev loop (pyserver._core.EvSelectorCore).

Everything here runs real asyncio programs (timers, sockets, subprocesses, threads, httpx) on
`asyncio.SelectorEventLoop(EvSelector(EvSelectorCore()))`, plus the selector contract itself.
"""

import asyncio
import hashlib
import http.server
import os
import selectors
import signal
import socket
import sys
import threading
import time

import httpx
import pytest
from helpers import current_loop

from pyserver import _core
from pyserver.evselector import EvSelector

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def new_selector():
    return EvSelector(_core.EvSelectorCore())


@pytest.fixture
def loop():
    yield from current_loop(asyncio.SelectorEventLoop(new_selector()))


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


# ---- the selector contract ----


def test_event_loop_really_uses_the_libev_selector(loop):
    async def main():
        return asyncio.get_running_loop()

    assert loop.run_until_complete(main()) is loop
    # asyncio's self-pipe is registered through EvSelector into the core
    assert len(loop._selector._core) >= 1
    assert isinstance(loop._selector, EvSelector)


def test_read_and_write_on_one_fd_report_the_right_mask(pair):
    a, b = pair
    sel = new_selector()
    key = sel.register(a, R | W, "data")
    assert key.fd == a.fileno() and key.events == R | W and key.data == "data"
    assert sel.select(0) == [(key, W)]  # nothing to read yet, room to write
    b.send(b"x")
    assert sel.select(1) == [(key, R | W)]
    key = sel.modify(a, R, "other")
    assert key.data == "other"
    assert sel.select(0) == [(key, R)]
    a.recv(1)
    assert sel.select(0) == []
    key = sel.modify(a, W)
    assert sel.select(0) == [(key, W)]
    sel.close()


def test_select_timeout_waits_then_returns_nothing(pair):
    a, _ = pair
    sel = new_selector()
    sel.register(a, R)
    started = time.monotonic()
    assert sel.select(0.2) == []
    assert 0.18 <= time.monotonic() - started < 1.0
    started = time.monotonic()
    assert sel.select(0) == [] and sel.select(-1) == []
    # No waiting: a select that blocked would block for good (nothing becomes readable);
    # the bound only leaves room for a loaded machine.
    assert time.monotonic() - started < 0.5
    sel.close()


def test_map_keys_and_errors_follow_the_selectors_contract(pair):
    a, b = pair
    sel = new_selector()
    key = sel.register(a, R)
    sel.register(b.fileno(), W)
    assert sel.get_key(a) is key
    assert sel.get_map()[a.fileno()] is key
    assert len(sel.get_map()) == 2 and set(sel.get_map()) == {a.fileno(), b.fileno()}
    with pytest.raises(KeyError):
        sel.register(a, W)
    with pytest.raises(ValueError):
        sel.register(b, 0)
    with pytest.raises(ValueError):
        sel.register(-1, R)
    with pytest.raises(ValueError):
        sel.register("not a file", R)
    with pytest.raises(KeyError):
        sel.get_key(10_000)
    with pytest.raises(KeyError):
        sel.modify(12345, R)
    assert sel.unregister(a) is key
    with pytest.raises(KeyError):
        sel.unregister(a)
    closed = socket.socket()
    closed_fd = closed.fileno()
    closed.close()
    with pytest.raises(OSError):
        sel.register(closed_fd, R)  # like epoll_ctl, a dead fd fails at once
    assert closed_fd not in sel.get_map()
    sel.close()
    assert sel.get_map() is None
    with pytest.raises(RuntimeError):
        sel.get_key(b)
    with pytest.raises(RuntimeError):
        sel.register(b, R)


def test_core_rejects_misuse_without_crashing(pair):
    a, _ = pair
    core = _core.EvSelectorCore()
    assert core.owns_loop and not core.closed
    with pytest.raises(TypeError):
        _core.EvSelectorCore(1)
    with pytest.raises(ValueError):
        core.register(a.fileno(), 4)
    with pytest.raises(ValueError):
        core.register(-3, R)
    with pytest.raises(OverflowError):
        core.register(2**40, R)
    with pytest.raises(KeyError):
        core.unregister(a.fileno())
    with pytest.raises(ValueError):
        core.poll(float("nan"))
    core.register(a.fileno(), R)
    core.close()
    core.close()
    assert core.closed and len(core) == 0
    for call in (lambda: core.poll(0), lambda: core.register(a.fileno(), R)):
        with pytest.raises(ValueError):
            call()


def test_unregistered_object_whose_fileno_fails_can_still_be_unregistered():
    sel = new_selector()
    s = socket.socket()
    key = sel.register(s, R)
    fd = s.fileno()
    s.close()  # fileno() is now -1: found by identity, as the standard selectors do
    assert sel.unregister(s) is key
    assert fd not in sel.get_map()
    sel.close()


def test_closed_and_reused_fd_number_is_watched_again():
    sel = new_selector()
    for _ in range(50):
        a, b = socket.socketpair()
        fd = a.fileno()
        sel.register(a, R)
        # Closed while still registered (epoll silently forgets it), then unregistered.
        a.close()
        sel.unregister(fd)
        b.close()
        a, b = socket.socketpair()
        if a.fileno() != fd:  # the kernel hands out the lowest free number: same one
            a, b = b, a
        assert a.fileno() == fd
        key = sel.register(a, R)
        assert sel.select(0) == []
        b.send(b"!")
        assert sel.select(1) == [(key, R)]
        sel.unregister(a)
        a.close()
        b.close()
    sel.close()


def test_dealloc_with_watchers_still_registered(pair):
    a, b = pair
    for _ in range(100):
        core = _core.EvSelectorCore()
        core.register(a.fileno(), R)
        core.register(b.fileno(), R | W)
        assert core.poll(0) == [(b.fileno(), W)]
        del core  # stops the watchers and frees the loop


KEY_DROPPED_AT_CLOSE = """
import gc, socket
from pyserver._core import EvSelectorCore

class Key:
    def __del__(self):
        gc.collect()  # traverses the core while close() is dropping its keys

core = EvSelectorCore()
a, b = socket.socketpair()
core.register(a.fileno(), 1, Key())
core.register(b.fileno(), 1, Key())
core.close()
assert len(core) == 0 and core.closed
print("closed")
"""


def test_close_drops_keys_whose_finaliser_runs_the_gc():
    # The debug allocator fills freed memory, so a slot the GC could still
    # reach after close() freed it crashes the child instead of passing.
    import subprocess

    env = dict(os.environ, PYTHONMALLOC="debug")
    proc = subprocess.run(
        [sys.executable, "-c", KEY_DROPPED_AT_CLOSE],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "closed"


def test_poll_releases_the_gil_while_libev_waits(pair):
    a, _ = pair
    core = _core.EvSelectorCore()
    core.register(a.fileno(), R)
    count = 0
    stop = threading.Event()

    def spin():
        nonlocal count
        while not stop.is_set():
            count += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        time.sleep(0.05)
        before = count
        assert core.poll(0.3) == []
        during = count - before
    finally:
        stop.set()
        thread.join()
        core.close()
    assert during > 10_000  # the other thread ran the whole time


def test_a_signal_interrupts_a_blocking_poll(pair):
    a, _ = pair
    core = _core.EvSelectorCore()
    core.register(a.fileno(), R)

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    main = threading.get_ident()
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(Interrupted):
            core.poll(None)
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
        core.close()
    assert time.monotonic() - started < 5


def test_many_fds_registered_and_unregistered_repeatedly_do_not_leak():
    sel = new_selector()
    core = sel._core
    before = open_fds()
    for _ in range(2000):
        a, b = socket.socketpair()
        key = sel.register(a, R | W)
        b.send(b"x")
        assert sel.select(0) == [(key, R | W)]
        sel.unregister(a)
        a.close()
        b.close()
    assert open_fds() == before
    assert len(core) == 0 and len(sel.get_map()) == 0
    sel.close()


def ready_over_polls(sel, polls=40):
    """The union of what `polls` non-blocking polls report (level-triggered readiness)."""
    ready = set()
    for _ in range(polls):
        ready.update(sel.select(0))
    return ready


def test_ten_thousand_sockets_churn():
    sel = new_selector()
    before = open_fds()
    for _ in range(3):
        pairs = [socket.socketpair() for _ in range(5000)]
        readers = {sel.register(a, R).fd for a, _ in pairs}
        writers = {sel.register(b, W).fd for _, b in pairs}
        # libev hands out at most its current batch per poll (it grows the batch as it
        # fills): what is not reported stays ready for the next poll.
        ready = ready_over_polls(sel)
        assert {key.fd for key, ev in ready} == writers
        for _, b in pairs[::2]:
            b.send(b"x")
        ready = ready_over_polls(sel)
        got_read = {key.fd for key, ev in ready if ev == R}
        assert got_read == {a.fileno() for a, _ in pairs[::2]} and got_read <= readers
        assert {key.fd for key, ev in ready if ev == W} == writers
        for a, b in pairs:
            sel.unregister(a)
            sel.unregister(b)
            a.close()
            b.close()
        assert sel.select(0) == []
    assert open_fds() == before
    assert len(sel._core) == 0
    sel.close()


# ---- asyncio programs on the selector ----


def test_sleeps_wake_in_deadline_order(loop):
    async def main():
        order = []

        async def sleeper(delay, name):
            await asyncio.sleep(delay)
            order.append(name)

        started = loop.time()
        await asyncio.gather(
            sleeper(0.06, "c"), sleeper(0.02, "a"), sleeper(0.04, "b"), sleeper(0, "first")
        )
        return order, loop.time() - started

    order, elapsed = loop.run_until_complete(main())
    assert order == ["first", "a", "b", "c"]
    assert 0.06 <= elapsed < 1.0


def test_timeout_and_wait_for_expire_on_time(loop):
    async def main():
        started = loop.time()
        # asyncio.TimeoutError: the builtin TimeoutError only from Python 3.11 on.
        with pytest.raises(asyncio.TimeoutError):
            if hasattr(asyncio, "timeout"):  # Python 3.11+
                async with asyncio.timeout(0.1):
                    await asyncio.sleep(10)
            else:
                await asyncio.wait_for(asyncio.sleep(10), 0.1)
        first = loop.time() - started
        started = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 0.1)
        second = loop.time() - started
        assert await asyncio.wait_for(asyncio.sleep(0.01, "done"), 1) == "done"
        return first, second

    first, second = loop.run_until_complete(main())
    assert 0.1 <= first < 1.0
    assert 0.1 <= second < 1.0


def test_call_soon_threadsafe_wakes_a_blocked_loop(loop):
    async def main():
        fut = loop.create_future()
        # No timers are pending: the loop blocks in select(None) until the thread writes
        # asyncio's self-pipe.
        timer = threading.Timer(0.2, loop.call_soon_threadsafe, (fut.set_result, "woken"))
        started = time.monotonic()
        timer.start()
        result = await fut
        timer.join()
        return result, time.monotonic() - started

    result, elapsed = loop.run_until_complete(main())
    assert result == "woken"
    assert 0.15 <= elapsed < 2.0


def test_run_in_executor_results_come_back(loop):
    def work(n):
        time.sleep(0.05)
        return n * n, threading.get_ident()

    async def main():
        return await asyncio.gather(*(loop.run_in_executor(None, work, n) for n in range(8)))

    results = loop.run_until_complete(main())
    assert [r[0] for r in results] == [n * n for n in range(8)]
    assert threading.get_ident() not in {r[1] for r in results}


def test_subprocess_stdout_is_read(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; sys.stdout.write('x' * 300000); print('end')",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        return proc.returncode, out

    code, out = loop.run_until_complete(main())
    assert code == 0
    assert out == b"x" * 300000 + b"end\n"


async def _echo(reader, writer):
    while data := await reader.read(256 * 1024):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


def test_tcp_echo_with_large_transfers_both_ways(loop):
    payload = os.urandom(1 << 20) * 24  # 24 MiB

    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send():
            view = memoryview(payload)
            for i in range(0, len(view), 1 << 20):
                writer.write(view[i : i + (1 << 20)])
                await writer.drain()
            writer.write_eof()

        async def receive():
            digest, total = hashlib.sha256(), 0
            while data := await reader.read(1 << 20):
                digest.update(data)
                total += len(data)
            return total, digest.hexdigest()

        _, (total, digest) = await asyncio.gather(send(), receive())
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return total, digest

    total, digest = loop.run_until_complete(main())
    assert total == len(payload)
    assert digest == hashlib.sha256(payload).hexdigest()


def test_write_backpressure_holds_the_buffer_while_the_peer_reads_slowly(loop):
    chunk = b"y" * (256 * 1024)
    rounds = 128  # 32 MiB
    peak = 0

    async def produce(reader, writer):
        nonlocal peak
        for _ in range(rounds):
            writer.write(chunk)
            peak = max(peak, writer.transport.get_write_buffer_size())
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(produce, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=64 * 1024)
        total = 0
        while data := await reader.read(64 * 1024):
            total += len(data)
            if total < 4 * 1024 * 1024:
                await asyncio.sleep(0.001)  # a slow start: the server must wait on writability
        writer.close()
        server.close()
        await server.wait_closed()
        return total

    assert loop.run_until_complete(main()) == len(chunk) * rounds
    assert peak <= 2 * len(chunk)  # drain() waited instead of buffering the whole stream


def test_many_asyncio_connections_open_and_close_without_leaking(loop):
    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]

        async def one(i):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping %d" % i)
            data = await reader.readexactly(len(b"ping %d" % i))
            writer.close()
            await writer.wait_closed()
            return data

        for _ in range(5):
            results = await asyncio.gather(*(one(i) for i in range(200)))
            assert results == [b"ping %d" % i for i in range(200)]
        server.close()
        await server.wait_closed()

    loop.run_until_complete(asyncio.sleep(0))
    before = open_fds()
    loop.run_until_complete(main())
    for _ in range(200):  # transports finish closing on later iterations
        loop.run_until_complete(asyncio.sleep(0.01))
        if open_fds() == before:
            break
    assert open_fds() == before


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


def test_httpx_async_client_request_to_a_local_server(loop):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"

    async def main():
        async with httpx.AsyncClient() as client:
            responses = await asyncio.gather(*(client.get(f"{url}/r{i}") for i in range(10)))
        return [(r.status_code, r.text) for r in responses]

    try:
        results = loop.run_until_complete(main())
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
    assert results == [(200, f"hello from /r{i}") for i in range(10)]


def test_udp_datagrams_round_trip(loop):
    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.transport = transport

        def datagram_received(self, data, addr):
            self.transport.sendto(data.upper(), addr)

    class Client(asyncio.DatagramProtocol):
        def __init__(self):
            self.replies = asyncio.Queue()

        def datagram_received(self, data, addr):
            self.replies.put_nowait(data)

    async def main():
        server, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        addr = server.get_extra_info("sockname")
        client, proto = await loop.create_datagram_endpoint(Client, remote_addr=addr)
        replies = []
        for word in (b"one", b"two", b"three"):
            client.sendto(word)
            replies.append(await asyncio.wait_for(proto.replies.get(), 5))
        client.close()
        server.close()
        return replies

    assert loop.run_until_complete(main()) == [b"ONE", b"TWO", b"THREE"]


def test_add_signal_handler_runs_through_the_self_pipe(loop):
    async def main():
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR2, got.set_result, "signalled")
        try:
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR2)).start()
            return await asyncio.wait_for(got, 5)
        finally:
            loop.remove_signal_handler(signal.SIGUSR2)

    assert loop.run_until_complete(main()) == "signalled"


def test_selector_without_a_core_makes_its_own(pair):
    a, b = pair
    with EvSelector() as sel:
        assert sel._core.owns_loop
        key = sel.register(a, R)
        b.send(b"x")
        assert sel.select(1) == [(key, R)]
    assert sel._core.closed
