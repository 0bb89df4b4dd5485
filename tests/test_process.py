"""The master process: workers, signals, watchdog, recycling, rolling restart.

Every test runs a real master with real workers and real signals. The load
client sends requests from a few threads for a bounded time, half of them on
keep-alive connections, half on new connections. A request counts as lost
unless it gets a complete 2xx. A request written on a reused connection that
the server had just closed as idle (the keep-alive race of RFC 9112 9.3.1) is
retried once on a new connection, as HTTP clients do, but counted: a stopping
worker answers busy keep-alive connections with "Connection: close" rather
than closing them, so the zero-loss tests expect no retry either.
run_server() checks that no process of the server's group outlives the
master.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import HOST, free_port, run_cli, run_server, wait_for

APP = "apps.proc_app:app"


# --------------------------------------------------------------------------- helpers


def children(pid: int) -> set[int]:
    """The pids whose parent is pid (the master's workers)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def wait_workers(pid: int, count: int, timeout: float = 10.0) -> set[int]:
    assert wait_for(lambda: len(children(pid)) == count, timeout), (
        f"expected {count} workers, have {children(pid)}"
    )
    return children(pid)


def sleeping_in_a_view(pid: int) -> int:
    """How many of the master's workers are inside a view's time.sleep()."""
    count = 0
    for child in children(pid):
        try:
            count += "nanosleep" in Path(f"/proc/{child}/wchan").read_text()
        except OSError:
            pass
    return count


def alive(pid: int) -> bool:
    """Whether pid runs: a zombie that nobody reaps (an orphan's, under a
    PID 1 that does not wait) has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def get(port: int, path: str = "/", timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_serving(port: int, workers: set[int] | None = None, timeout: float = 10.0) -> None:
    """Wait until requests are answered (by one of `workers`, when given)."""

    def answered():
        try:
            status, body = get(port, "/pid", timeout=2.0)
        except OSError:
            return False
        return status == 200 and (workers is None or int(body) in workers)

    assert wait_for(answered, timeout), "server does not answer"


class Load:
    """Requests from `threads` threads until stop(); counts what was lost."""

    def __init__(self, port: int, threads: int = 3, path: str = "/pid"):
        self.port, self.path = port, path
        self.ok = 0
        self.retried = 0
        self.failures: list[str] = []
        self.pids: set[int] = set()
        self.lock = threading.Lock()
        self.running = True
        self.threads = [threading.Thread(target=self.worker, args=(i,)) for i in range(threads)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.running = False
        for t in self.threads:
            t.join(30)

    def record(self, status: int | None, body: bytes, error: str | None) -> None:
        with self.lock:
            if error is None and status is not None and 200 <= status < 300:
                self.ok += 1
                self.pids.add(int(body))
            else:
                self.failures.append(error or f"status {status}")

    def one(self, conn: http.client.HTTPConnection) -> None:
        conn.request("GET", self.path)
        resp = conn.getresponse()
        body = resp.read()
        self.record(resp.status, body, None)
        if resp.will_close:
            conn.close()

    def worker(self, index: int) -> None:
        keep_alive = index % 2 == 0
        conn = None
        while self.running:
            fresh = conn is None or conn.sock is None
            if conn is None or not keep_alive:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
                fresh = True
            try:
                self.one(conn)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                conn = None
                if fresh:
                    self.record(None, b"", f"{type(exc).__name__} on a new connection")
                    continue
                with self.lock:
                    self.retried += 1
                conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
                try:
                    self.one(conn)
                except OSError as exc2:
                    self.record(None, b"", f"retry failed: {exc2!r}")
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                self.record(None, b"", repr(exc))
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def assert_nothing_lost(self, minimum: int = 50) -> None:
        assert not self.failures, f"{len(self.failures)} lost: {self.failures[:5]} (ok {self.ok})"
        assert self.retried == 0, f"{self.retried} keep-alive requests hit a closed connection"
        assert self.ok >= minimum, f"only {self.ok} requests answered"


def master(*args: str, workers: int = 2, **kwargs):
    return run_server(APP, "-w", str(workers), "--graceful-timeout", "10", *args, **kwargs)


# --------------------------------------------------------------------------- tests


def test_one_worker_without_options_runs_in_a_single_process():
    with run_server(APP) as srv:
        wait_serving(srv.port)
        assert children(srv.pid) == set()
        assert int(get(srv.port, "/pid")[1]) == srv.pid


def test_workers_option_forks_that_many_workers_with_titles():
    with master(workers=3) as srv:
        pids = wait_workers(srv.pid, 3)
        wait_serving(srv.port)
        assert "Booting worker 3" in srv.log()
        try:
            import setproctitle  # noqa: F401
        except ImportError:
            return
        assert Path(f"/proc/{srv.pid}/cmdline").read_bytes().startswith(b"pyserver: master [")
        titles = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] for p in pids}
        assert titles == {b"pyserver: worker 1", b"pyserver: worker 2", b"pyserver: worker 3"}


def test_environment_sets_the_workers_and_recycling():
    env = {"WEB_CONCURRENCY": "2", "PYSERVER_MAX_REQUESTS": "5", "PYSERVER_TIMEOUT": "20"}
    with run_server(APP, env=env) as srv:
        first = wait_workers(srv.pid, 2)
        for _ in range(30):
            assert get(srv.port, "/hello")[0] == 200
        # Requests one at a time all wake the same idle worker (see the next
        # tests): it has been replaced, and the count is back at two.
        assert wait_for(lambda: len(first - children(srv.pid)) >= 1, 10), srv.log_tail()
        assert "requests: retiring" in srv.log()
        wait_workers(srv.pid, 2)


def voluntary_switches(pids: set[int]) -> int:
    """How many times the processes went to sleep and were woken, in all."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def test_a_new_connection_wakes_one_worker_not_all():
    with master(workers=4) as srv:
        workers = wait_workers(srv.pid, 4)
        wait_serving(srv.port)
        before = voluntary_switches(workers)
        requests = 200
        for _ in range(requests):
            assert get(srv.port, "/pid")[0] == 200
        woken = voluntary_switches(workers) - before
        # The worker that serves wakes about twice per connection (the
        # request, then the client's close). Were every worker woken by each
        # new connection, four workers would make that 4 or more.
        assert woken < 3 * requests, f"{woken} wakeups for {requests} connections"


def test_a_busy_worker_leaves_new_connections_to_an_idle_one():
    with master() as srv:
        wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        results = []

        def slow():
            results.append(get(srv.port, "/sleep/1/pid"))

        first = threading.Thread(target=slow)
        first.start()
        assert wait_for(lambda: sleeping_in_a_view(srv.pid) == 1, 5), (
            "the slow request never started"
        )
        status, pid = get(srv.port, "/pid")
        first.join(10)
        assert status == 200 and len(results) == 1 and results[0][0] == 200
        assert pid != results[0][1], "the new connection went to the busy worker"


def test_hup_rolling_restart_under_load_loses_no_request():
    with master() as srv:
        old = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        with Load(srv.port) as load:
            time.sleep(0.7)
            os.kill(srv.pid, signal.SIGHUP)
            assert wait_for(lambda: not (children(srv.pid) & old), 10), srv.log_tail()
            time.sleep(0.7)
        new = wait_workers(srv.pid, 2)
        load.assert_nothing_lost()
        assert not (new & old)
        assert load.pids & new, "the new workers served requests"
        assert "rolling restart" in srv.log()


def tcp_listeners(port: int) -> set[int]:
    """The socket inodes of the listening IPv4 sockets on port (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
            found.add(int(fields[9]))
    return found


def accept_queues(port: int) -> dict[int, int]:
    """Connections waiting in each listening IPv4 socket on port, by inode."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
            found[int(fields[9])] = int(fields[4].split(":")[1], 16)
    return found


def spread_over_listeners(srv, count: int = 40) -> dict[int, int]:
    """With every worker stopped, where count new connections queue."""
    workers = children(srv.pid)
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection((HOST, srv.port), timeout=10)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            socks.append(sock)
        wait_for(lambda: sum(accept_queues(srv.port).values()) == count, 5)
        return accept_queues(srv.port)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        for sock in socks:
            sock.close()


def wait_listeners(port: int, count: int) -> set[int]:
    assert wait_for(lambda: len(tcp_listeners(port)) == count, 10), tcp_listeners(port)
    return tcp_listeners(port)


def test_reuse_port_lanes_outlive_their_workers_and_hups_lose_nothing():
    """Each worker serves a lane of its own; the master keeps the lanes, so a new
    worker takes over its predecessor's socket with whatever is queued on it."""
    with master("--reuse-port") as srv:
        wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        # The master's shared socket and one lane per worker.
        lanes = wait_listeners(srv.port, 3)
        with Load(srv.port) as load:
            for _ in range(3):
                old = children(srv.pid)
                time.sleep(0.5)
                os.kill(srv.pid, signal.SIGHUP)
                gone = wait_for(lambda old=old: not (children(srv.pid) & old), 10)
                assert gone, srv.log_tail()
            time.sleep(0.5)
        load.assert_nothing_lost()
        wait_workers(srv.pid, 2)
        assert tcp_listeners(srv.port) == lanes  # the very same sockets


def test_reuse_port_ttou_closes_a_lane_without_losing_a_connection():
    with master("--reuse-port", workers=3) as srv:
        wait_workers(srv.pid, 3)
        wait_serving(srv.port)
        before = wait_listeners(srv.port, 4)
        with Load(srv.port) as load:
            time.sleep(0.5)
            os.kill(srv.pid, signal.SIGTTOU)
            wait_workers(srv.pid, 2)
            after = wait_listeners(srv.port, 3)
            time.sleep(0.5)
            os.kill(srv.pid, signal.SIGTTIN)
            wait_workers(srv.pid, 3)
            grown = wait_listeners(srv.port, 4)
            time.sleep(0.5)
        load.assert_nothing_lost()
        assert after < before
        assert after < grown
        # The kernel spreads new connections over every socket again.
        queues = spread_over_listeners(srv)
        assert set(queues) == grown and min(queues.values()) > 0, queues


def test_reuse_port_connections_queued_on_a_killed_workers_lane_reach_its_replacement():
    with master("--reuse-port", workers=1) as srv:
        (victim,) = wait_workers(srv.pid, 1)
        wait_serving(srv.port)
        wait_listeners(srv.port, 2)
        os.kill(victim, signal.SIGSTOP)
        # Requests land on the shared socket and on the lane; nobody accepts them.
        socks = []
        for _ in range(20):
            sock = socket.create_connection((HOST, srv.port), timeout=15)
            sock.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            socks.append(sock)
        os.kill(victim, signal.SIGKILL)
        for sock in socks:
            with sock:
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 200"), reply
            assert int(reply.split(b"\r\n\r\n", 1)[1]) not in (victim, srv.pid)


def test_max_requests_recycles_workers_under_load_without_losing_requests():
    with master("--max-requests", "50", "--max-requests-jitter", "10") as srv:
        old = wait_workers(srv.pid, 2)
        with Load(srv.port) as load:
            assert wait_for(lambda: not (children(srv.pid) & old), 15), srv.log_tail()
            time.sleep(0.5)
        load.assert_nothing_lost(minimum=100)
        assert len(load.pids) > 2
        assert "requests: retiring" in srv.log()


def test_term_lets_requests_in_flight_finish_then_exits_zero():
    with master() as srv:
        workers = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        results = []

        def slow():
            try:
                results.append(get(srv.port, "/sleep/1"))
            except OSError as exc:
                results.append(exc)

        # One slow request per worker (a worker runs one WSGI call at a time;
        # a connection still in the listen backlog at the stop is not in flight).
        threads = [threading.Thread(target=slow) for _ in range(2)]
        for count, t in enumerate(threads, 1):
            t.start()
            assert wait_for(lambda n=count: sleeping_in_a_view(srv.pid) == n, 5)
        os.kill(srv.pid, signal.SIGTERM)
        for t in threads:
            t.join(10)
        assert results == [(200, b"slept")] * 2
        assert srv.proc.wait(10) == 0
        assert not any(alive(p) for p in workers)
        with pytest.raises(OSError):
            socket.create_connection((HOST, srv.port), timeout=1).close()


def refused(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def sleeping_anywhere(pid: int) -> int:
    """Like sleeping_in_a_view, counting the process itself too (a single process)."""
    own = "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    return own + sleeping_in_a_view(pid)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stopping_server_refuses_new_connections_at_once_and_finishes_the_rest(workers):
    """At the last stop the sockets pyserver bound stop listening: a new client is refused
    (and can go elsewhere) instead of waiting in a queue that nobody reads."""
    args = ("-w", "2", "--graceful-timeout", "10") if workers == 2 else ()
    with run_server(APP, *args) as srv:
        wait_serving(srv.port)
        results = []
        slow = threading.Thread(target=lambda: results.append(get(srv.port, "/sleep/2")))
        slow.start()
        assert wait_for(lambda: sleeping_anywhere(srv.pid) == 1, 5)
        os.kill(srv.pid, signal.SIGTERM)
        assert wait_for(lambda: refused(srv.port), 5), srv.log_tail()
        slow.join(10)
        assert results == [(200, b"slept")]
        assert srv.proc.wait(10) == 0


def socket_activation():
    """A listening socket made the way systemd passes one (at fd 3, LISTEN_PID naming the
    exec'd process): the socket, its port, and run_server's command and pass_fds."""
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen(64)
    fd = listener.fileno()
    wrapper = (
        "import os, sys; os.dup2(int(sys.argv[1]), 3); os.close(int(sys.argv[1]));"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1');"
        "os.execv(sys.executable, [sys.executable, '-m', 'pyserver', *sys.argv[2:]])"
    )
    command = [sys.executable, "-c", wrapper, str(fd)]
    return listener, port, {"command": command, "pass_fds": (fd,)}


def test_a_socket_activated_server_leaves_new_connections_to_the_next_one():
    """An inherited socket is not pyserver's to shut: a connection made while it stops
    stays queued in it for whoever serves the socket next."""
    listener, port, activated = socket_activation()
    with listener:
        with run_server(APP, listen=False, port=port, **activated) as srv:
            wait_serving(srv.port)
            # A keep-alive connection the server has accepted, then left idle.
            idle = socket.create_connection((HOST, port), timeout=10)
            idle.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
            assert idle.recv(1000).startswith(b"HTTP/1.1 200 ")
            results = []
            slow = threading.Thread(target=lambda: results.append(get(srv.port, "/sleep/2")))
            slow.start()
            assert wait_for(lambda: sleeping_anywhere(srv.pid) == 1, 5)
            os.kill(srv.pid, signal.SIGTERM)
            # The stop has begun once the idle connection is closed (after the view).
            assert idle.recv(100) == b""
            idle.close()
            late = socket.create_connection((HOST, port), timeout=5)
            late.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            slow.join(10)
            assert results == [(200, b"slept")]
            assert srv.proc.wait(10) == 0
        # The next server is this test: the late connection is still in the queue.
        listener.settimeout(5)
        accepted, _ = listener.accept()
        with late, accepted:
            assert accepted.recv(100).startswith(b"GET /pid HTTP/1.1")


def test_killed_worker_is_replaced_within_a_second():
    with master() as srv:
        before = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        assert wait_for(lambda: len(children(srv.pid) - {victim}) == 2, 5)
        assert time.monotonic() - start < 1.5
        assert srv.wait_for_log(f"Worker (pid {victim}) was sent SIGKILL! Perhaps out of memory?")
        wait_serving(srv.port, children(srv.pid))


def test_worker_stuck_while_booting_is_killed_by_the_watchdog():
    env = {"PROC_APP_IMPORT_SLEEP": "60"}
    with master("--timeout", "1", workers=1, env=env) as srv:
        first = wait_workers(srv.pid, 1)
        assert srv.wait_for_log(f"WORKER TIMEOUT (pid {min(first)}) while booting", 10), (
            srv.log_tail()
        )
        # The worker shows where it was stuck, then a new one boots.
        assert srv.wait_for_log("proc_app.py", 5), srv.log_tail()
        assert wait_for(lambda: children(srv.pid) and not (children(srv.pid) & first), 10)


def test_stuck_worker_is_killed_by_the_watchdog_and_the_log_names_the_request():
    with master("--timeout", "2") as srv:
        before = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        stuck = []
        thread = threading.Thread(
            target=lambda: stuck.append(_try_get(srv.port, "/sleep/10?why=stuck"))
        )
        thread.start()
        assert wait_for(lambda: sleeping_in_a_view(srv.pid) == 1, 5)
        # The other worker keeps serving meanwhile.
        assert get(srv.port, "/hello", timeout=5)[0] == 200
        assert srv.wait_for_log("WORKER TIMEOUT (pid", 8), srv.log_tail()
        assert "handling GET /sleep/10?why=stuck" in srv.log()
        thread.join(10)
        assert stuck and not isinstance(stuck[0], tuple), "the stuck request was cut"
        after = wait_workers(srv.pid, 2)
        assert len(after - before) == 1
        assert get(srv.port, "/hello")[0] == 200


def _try_get(port, path):
    try:
        return get(port, path, timeout=15)
    except (OSError, http.client.HTTPException) as exc:
        return exc


def test_import_error_exits_3_without_a_respawn_loop():
    start = time.monotonic()
    proc = run_cli(
        "apps.broken_import:app",
        "-w",
        "2",
        "--port",
        str(free_port()),
        "--app-dir",
        ".",
        timeout=20,
    )
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - start < 10
    assert proc.stderr.count("Booting worker") <= 3, proc.stderr
    assert "Worker failed to boot" in proc.stderr


def test_ttin_and_ttou_change_the_worker_count():
    with master() as srv:
        wait_workers(srv.pid, 2)
        os.kill(srv.pid, signal.SIGTTIN)
        wait_workers(srv.pid, 3)
        os.kill(srv.pid, signal.SIGTTOU)
        wait_workers(srv.pid, 2)
        for _ in range(3):
            os.kill(srv.pid, signal.SIGTTOU)
            time.sleep(0.2)
        wait_workers(srv.pid, 1)  # never below one
        time.sleep(0.5)
        assert len(children(srv.pid)) == 1
        wait_serving(srv.port)


def test_max_rss_recycles_a_worker_that_grows_past_it():
    with master("--max-rss", "150", workers=1) as srv:
        (old,) = wait_workers(srv.pid, 1)
        wait_serving(srv.port)
        assert get(srv.port, "/alloc/200") == (200, b"allocated")
        assert wait_for(lambda: old not in children(srv.pid), 10), srv.log_tail()
        new = wait_workers(srv.pid, 1)
        assert "(max-rss 150 MiB): retiring" in srv.log()
        wait_serving(srv.port, new)


def test_socket_activation_serves_the_listen_fds_socket():
    listener, port, activated = socket_activation()
    try:
        with run_server(APP, "-w", "2", listen=False, port=port, **activated) as srv:
            listener.close()  # only the server holds it now
            wait_workers(srv.pid, 2)
            wait_serving(srv.port)
            assert f"Listening on http://{HOST}:{port}" in srv.log()
    finally:
        listener.close()


def test_workers_share_a_unix_socket_with_its_permissions(tmp_path):
    path = str(tmp_path / "server.sock")
    with run_server(APP, "-w", "2", "--uds-perms", "660", uds=path) as srv:
        wait_workers(srv.pid, 2)
        assert oct(os.stat(path).st_mode & 0o777) == "0o660"
        pids = set()
        for _ in range(20):
            with srv.connect() as conn:
                conn.send(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                pids.add(int(conn.read_response().body))
        assert pids <= children(srv.pid)
    assert not os.path.exists(path), "the master removes the socket file"


def test_pid_file_is_written_and_removed(tmp_path):
    pid_file = tmp_path / "server.pid"
    with master("--pid", str(pid_file)) as srv:
        assert wait_for(pid_file.exists)
        assert pid_file.read_text().strip() == str(srv.pid)
    assert not pid_file.exists()


def test_workers_exit_when_the_master_is_killed():
    with master() as srv:
        workers = wait_workers(srv.pid, 2)
        os.kill(srv.pid, signal.SIGKILL)
        srv.proc.wait(5)
        assert wait_for(lambda: not any(alive(p) for p in workers), 5)


def test_workers_exit_when_the_master_is_killed_while_they_boot():
    # They learn the master's pid before the fork: after it died, getppid() is
    # another process's and would pass for the master.
    with master(env={"PROC_APP_IMPORT_SLEEP": "2"}) as srv:
        workers = wait_workers(srv.pid, 2)
        os.kill(srv.pid, signal.SIGKILL)
        srv.proc.wait(5)
        assert wait_for(lambda: not any(alive(p) for p in workers), 10)


def test_second_int_stops_at_once():
    with master() as srv:
        workers = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        thread = threading.Thread(target=lambda: _try_get(srv.port, "/sleep/8"))
        thread.start()
        assert wait_for(lambda: sleeping_in_a_view(srv.pid) == 1, 5)
        start = time.monotonic()
        os.kill(srv.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(srv.pid, signal.SIGINT)
        assert srv.proc.wait(5) == 0
        assert time.monotonic() - start < 4
        thread.join(10)
        assert not any(alive(p) for p in workers)


def importers(path: Path) -> list[int]:
    """The pids that imported apps.proc_app, in order (PROC_APP_IMPORT_LOG)."""
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_preload_imports_the_app_once_in_the_master(tmp_path):
    imports = tmp_path / "imports"
    with master("--preload", env={"PROC_APP_IMPORT_LOG": str(imports)}) as srv:
        workers = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        served = {int(get(srv.port, "/pid")[1]) for _ in range(20)}
        assert served <= workers, (served, workers)
        assert importers(imports) == [srv.pid]


def test_without_preload_each_worker_imports_the_app(tmp_path):
    """The counterpart of the test above: the master never imports the app itself."""
    imports = tmp_path / "imports"
    with master(env={"PROC_APP_IMPORT_LOG": str(imports)}) as srv:
        workers = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        assert wait_for(lambda: sorted(importers(imports)) == sorted(workers), 10.0), (
            importers(imports),
            workers,
        )
        assert srv.pid not in importers(imports)


def test_usr1_is_forwarded_and_the_server_keeps_serving():
    with master() as srv:
        workers = wait_workers(srv.pid, 2)
        wait_serving(srv.port)
        os.kill(srv.pid, signal.SIGUSR1)
        time.sleep(0.5)
        assert children(srv.pid) == workers
        wait_serving(srv.port)


def test_usr1_while_the_workers_boot_does_not_kill_them():
    env = {"PROC_APP_IMPORT_SLEEP": "1.0"}
    with master(env=env) as srv:
        workers = wait_workers(srv.pid, 2)
        os.kill(srv.pid, signal.SIGUSR1)
        wait_serving(srv.port)
        assert children(srv.pid) == workers
        assert "killed by signal" not in srv.log()


def access_log_config(tmp_path, access_log):
    """A --log-config file sending the access log to access_log."""
    log_config = tmp_path / "logging.json"
    log_config.write_text(
        json.dumps(
            {
                "version": 1,
                "disable_existing_loggers": False,
                "handlers": {"file": {"class": "logging.FileHandler", "filename": str(access_log)}},
                "loggers": {"pyserver.access": {"handlers": ["file"], "propagate": False}},
            }
        )
    )
    return log_config


@pytest.mark.parametrize("workers", [1, 2], ids=["single-process", "master"])
def test_usr1_reopens_log_files(tmp_path, workers):
    access_log = tmp_path / "access.log"
    log_config = access_log_config(tmp_path, access_log)
    args = ("--log-config", str(log_config))
    with master(*args) if workers > 1 else run_server(APP, *args) as srv:
        wait_workers(srv.pid, workers if workers > 1 else 0)
        wait_serving(srv.port)
        assert wait_for(lambda: "GET /pid" in access_log.read_text())
        access_log.rename(tmp_path / "access.log.1")
        os.kill(srv.pid, signal.SIGUSR1)
        assert wait_for(access_log.exists, 5), "the log file was not reopened"

        # Both workers reopen theirs, each when it gets to the signal: soon every
        # request lands in the new file.
        def a_batch_lands_in_the_new_file():
            before = access_log.read_text().count("GET /hello")
            for _ in range(20):
                assert get(srv.port, "/hello")[0] == 200
            return wait_for(lambda: access_log.read_text().count("GET /hello") - before == 20, 2)

        assert wait_for(a_batch_lands_in_the_new_file, 15)


def test_usr1_sent_while_the_workers_boot_reaches_them(tmp_path):
    # A booting worker ignores USR1; the master sends it again once the worker
    # is ready, or that worker would write to the rotated file for good.
    access_log = tmp_path / "access.log"
    log_config = access_log_config(tmp_path, access_log)
    with master("--log-config", str(log_config), env={"PROC_APP_IMPORT_SLEEP": "2"}) as srv:
        wait_workers(srv.pid, 2)
        assert wait_for(access_log.exists, 5)
        access_log.rename(tmp_path / "access.log.1")
        os.kill(srv.pid, signal.SIGUSR1)  # the workers are still importing the app
        wait_serving(srv.port)
        assert wait_for(access_log.exists, 5), "the log file was not reopened"
        pids, sent = set(), 0
        deadline = time.monotonic() + 10
        while (len(pids) < 2 or sent < 40) and time.monotonic() < deadline:
            status, body = get(srv.port, "/pid")
            assert status == 200
            pids.add(int(body))
            sent += 1
        assert len(pids) == 2, "both workers answered"
        # wait_serving's request adds one line, written after its response went
        assert wait_for(lambda: access_log.read_text().count("GET /pid") >= sent, 5)
        assert "GET /pid" not in (tmp_path / "access.log.1").read_text()


def test_worker_sigint_is_an_immediate_stop_and_it_is_replaced():
    with master() as srv:
        before = wait_workers(srv.pid, 2)
        victim = min(before)
        os.kill(victim, signal.SIGINT)
        assert wait_for(lambda: victim not in children(srv.pid) and len(children(srv.pid)) == 2)
        wait_serving(srv.port)


RELOAD_APP = """
def app(environ, start_response):
    body = b"VERSION"
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""


def test_reload_restarts_the_workers_with_the_edited_file(tmp_path):
    source = tmp_path / "proc_reload_app.py"
    source.write_text(RELOAD_APP.replace("VERSION", "v1"))
    with run_server("proc_reload_app:app", "--reload", "--app-dir", str(tmp_path)) as srv:
        (old,) = wait_workers(srv.pid, 1)
        assert wait_for(lambda: _try_get(srv.port, "/") == (200, b"v1"), 10)
        source.write_text(RELOAD_APP.replace("VERSION", "v2"))
        later = time.time() + 5  # a new mtime even on a coarse clock
        os.utime(source, (later, later))
        assert wait_for(lambda: _try_get(srv.port, "/") == (200, b"v2"), 10), srv.log_tail()
        assert wait_for(lambda: old not in children(srv.pid), 10)
        assert "Changes detected" in srv.log()


def test_reload_survives_a_broken_edit_and_recovers(tmp_path):
    source = tmp_path / "proc_reload_app.py"
    source.write_text(RELOAD_APP.replace("VERSION", "v1"))
    with run_server("proc_reload_app:app", "--reload", "--app-dir", str(tmp_path)) as srv:
        wait_workers(srv.pid, 1)
        assert wait_for(lambda: _try_get(srv.port, "/") == (200, b"v1"), 10)
        source.write_text("raise RuntimeError('broken on purpose')\n")
        later = time.time() + 5
        os.utime(source, (later, later))
        # The broken worker waits for the next change instead of exiting to be retried.
        assert srv.wait_for_log("Waiting for a watched file to change", 10), srv.log_tail()
        assert srv.proc.poll() is None
        assert _try_get(srv.port, "/") == (200, b"v1"), "the old worker still serves"
        source.write_text(RELOAD_APP.replace("VERSION", "v3"))
        later += 5
        os.utime(source, (later, later))
        assert wait_for(lambda: _try_get(srv.port, "/") == (200, b"v3"), 15), srv.log_tail()
