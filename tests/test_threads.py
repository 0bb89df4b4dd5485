"""--threads N: WSGI applications on a pool of threads per worker, the loop keeping the I/O.

Real servers (single process, under the master, under gunicorn), real sockets and clients;
the applications are tests/apps/thread_apps.py. The time bounds leave headroom for a loaded
2-core machine.
"""

from __future__ import annotations

import concurrent.futures
import glob
import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from helpers import (
    HOST,
    UNDER_ASAN,
    fd_count,
    free_port,
    rss_kib,
    run_cli,
    run_server,
    settled_fd_count,
    wait_for,
)

APP = "apps.thread_apps:app"


def get(srv, path, timeout=10.0):
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def timed_get(srv, path):
    start = time.monotonic()
    status, body = get(srv, path)
    return status, body, time.monotonic() - start


def parallel(srv, paths):
    """Sends each path on its own connection at once; returns [(status, body, seconds)]
    and the wall time of the whole batch."""
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
        results = list(pool.map(lambda p: timed_get(srv, p), paths))
    return results, time.monotonic() - start


# --------------------------------------------------------------------------- the option


def test_threads_option_environment_and_config_file(tmp_path):
    conf = tmp_path / "conf.py"
    conf.write_text("threads = 3\n")
    for args, env in (
        (("--threads", "4"), None),
        ((), {"PYSERVER_THREADS": "4"}),
        (("-c", str(conf)), None),
    ):
        with run_server(APP, *args, env=env) as srv:
            status, body = get(srv, "/info")
            assert status == 200
            assert body.startswith(b"multithread=True thread=pyserver-thread-"), body
            assert body.endswith(b"main=False")
            assert "application threads" in srv.log()
    with run_server(APP) as srv:
        assert get(srv, "/info")[1] == b"multithread=False thread=MainThread main=True"
    out = run_cli(APP, "--threads", "0")
    assert out.returncode == 2 and "must be between 1 and 1024, got 0" in out.stderr


def test_one_thread_keeps_the_loop_thread():
    with run_server(APP, "--threads", "1") as srv:
        assert get(srv, "/info")[1] == b"multithread=False thread=MainThread main=True"


# --------------------------------------------------------------------------- concurrency


def test_four_slow_requests_run_at_once_on_four_threads():
    with run_server(APP, "--threads", "4") as srv:
        results, wall = parallel(srv, ["/sleep?s=1"] * 4)
        assert [r[0] for r in results] == [200] * 4
        names = {r[1] for r in results}
        assert len(names) == 4, names  # four different threads
        assert wall < 2.5, wall


def test_a_fast_request_is_answered_while_threads_sleep():
    with run_server(APP, "--threads", "5", "--no-access-log") as srv:
        get(srv, "/fast")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            slow = [pool.submit(timed_get, srv, "/sleep?s=1.5") for _ in range(4)]
            time.sleep(0.3)  # the four are inside time.sleep()
            fast = [timed_get(srv, "/fast") for _ in range(5)]
            assert all(f.result()[0] == 200 for f in slow)
        worst = max(t for _, _, t in fast)
        print(f"fast request latency with 4 threads busy: worst {worst * 1000:.1f} ms")
        assert all(s == 200 and b == b"fast" for s, b, _ in fast)
        assert worst < 0.5, worst


def test_a_request_beyond_the_threads_waits_for_a_free_one():
    with run_server(APP, "--threads", "2") as srv:
        results, wall = parallel(srv, ["/sleep?s=1"] * 3)
        assert [r[0] for r in results] == [200] * 3  # waited, not refused
        times = sorted(r[2] for r in results)
        assert times[-1] >= 1.8, times  # the third started once a thread was free
        assert wall < 3.5, wall


def test_limit_concurrency_counts_requests_in_threads():
    with run_server(APP, "--threads", "4", "--limit-concurrency", "2") as srv:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(get, srv, "/sleep?s=1") for _ in range(2)]
            time.sleep(0.4)
            assert get(srv, "/fast")[0] == 503
            assert [f.result()[0] for f in slow] == [200, 200]
        # Once the server has seen those two connections close:
        assert wait_for(lambda: get(srv, "/fast")[0] == 200, 5.0)


# --------------------------------------------------------------------------- behaviour


def test_an_exception_in_a_thread_is_a_500_with_its_traceback():
    with run_server(APP, "--threads", "2") as srv:
        status, body = get(srv, "/boom")
        assert status == 500
        assert srv.wait_for_log("RuntimeError: boom in a thread")
        log = srv.log()
        assert "Exception in WSGI application (GET /boom)" in log
        assert 'thread_apps.py", line' in log
        assert get(srv, "/fast") == (200, b"fast")


def test_bodies_write_and_file_wrapper_on_threads(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    with run_server(APP, "--threads", "3") as srv:
        payload = os.urandom(300_000)
        response = httpx.post(srv.url + "/echo", content=payload, timeout=10)
        assert response.status_code == 200 and response.content == payload
        assert get(srv, "/write?n=4") == (200, b"w0;w1;w2;w3;")
        response = httpx.get(srv.url + f"/file?path={big}", timeout=10)
        assert response.headers["content-length"] == str(big.stat().st_size)
        assert response.content == big.read_bytes()
        response = httpx.get(srv.url + "/stream?n=40&size=100000", timeout=10)
        assert response.content == b"x" * 4_000_000
        assert srv.wait_for_log("stream closed in pyserver-thread-")


def test_keep_alive_and_pipelined_requests_on_threads():
    with run_server(APP, "--threads", "2") as srv, srv.connect() as conn:
        conn.send(
            b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        bodies = [conn.read_response().body for _ in range(4)]
        assert bodies[:3] == [b"fast"] * 3
        assert bodies[3].startswith(b"multithread=True")


def test_a_client_that_half_closes_after_its_request_gets_the_response():
    # The loop does not read while a thread has the request: the end of the
    # client's input is not taken for a disconnect.
    with run_server(APP, "--threads", "2") as srv:
        with socket.create_connection((HOST, srv.port)) as sock:
            sock.sendall(b"GET /sleep?s=0.3 HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(10)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
        assert b"\r\n\r\nslept pyserver-thread-" in data, data


def test_an_invalid_head_from_a_thread_is_a_500_and_logged():
    with run_server(APP, "--threads", "2") as srv, srv.connect() as conn:
        conn.send(b"GET /badheader HTTP/1.1\r\nHost: x\r\n\r\n")
        resp = conn.read_response()
        assert resp.status == 500
        assert b"never sent" not in resp.body
        assert srv.wait_for_log("invalid status or header in the response: 200 OK")
        assert "Exception in WSGI application (GET /badheader)" in srv.log()
        assert get(srv, "/fast") == (200, b"fast")


def test_sized_and_long_list_responses_on_threads():
    # A list up to 64 KiB goes to the loop in one piece with its end; a longer
    # one item by item, the thread waiting for room.
    with run_server(APP, "--threads", "2") as srv:
        for n in (1, 10, 30_000):
            response = httpx.get(srv.url + f"/many?n={n}", timeout=10)
            expected = b"".join(b"%d," % i for i in range(n))
            assert response.status_code == 200
            assert response.headers["content-length"] == str(len(expected))
            assert response.content == expected


def test_flask_g_is_per_request_on_threads():
    with run_server("apps.thread_apps:flask_app", "--threads", "4") as srv:
        results, wall = parallel(srv, [f"/g?v=value{i}" for i in range(4)])
        for i, (status, body, _) in enumerate(results):
            assert status == 200
            value, thread = body.decode().split()
            assert value == f"value{i}"
            assert thread.startswith("pyserver-thread-")
        assert wall < 1.2, wall  # they overlapped


def test_client_gone_during_a_request_in_a_thread():
    with run_server(APP, "--threads", "2", "--no-access-log") as srv:
        for _ in range(3):
            get(srv, "/fast")
        before = settled_fd_count(srv.pid)
        for _ in range(4):
            with socket.create_connection((HOST, srv.port)) as sock:
                sock.sendall(b"GET /sleep?s=0.5 HTTP/1.1\r\nHost: x\r\n\r\n")
                time.sleep(0.05)
        # A streaming response whose client leaves: the thread stops and close() runs.
        with socket.create_connection((HOST, srv.port)) as sock:
            sock.sendall(b"GET /stream?n=100000&size=65536 HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(65536)
        assert srv.wait_for_log("stream closed in pyserver-thread-", timeout=10)
        time.sleep(1.0)  # the sleeping ones finish and find their clients gone
        assert get(srv, "/fast") == (200, b"fast")
        assert wait_for(lambda: fd_count(srv.pid) <= before, 5.0), (fd_count(srv.pid), before)
        assert "Traceback" not in srv.log()


def test_a_slow_reader_does_not_block_the_other_threads():
    with run_server(APP, "--threads", "2", "--no-access-log") as srv:
        get(srv, "/fast")
        rss_before = rss_kib(srv.pid)
        slow = socket.create_connection((HOST, srv.port))
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        # 2 GB that the client does not read: the thread must wait, not buffer it.
        slow.sendall(b"GET /stream?n=32768&size=65536 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.0)
        latencies = [timed_get(srv, "/fast") for _ in range(5)]
        assert all(s == 200 for s, _, _ in latencies)
        assert max(t for _, _, t in latencies) < 0.5, latencies
        grown = rss_kib(srv.pid) - rss_before
        assert grown < 32 * 1024, f"RSS grew by {grown} KiB behind a slow reader"
        slow.close()
        assert srv.wait_for_log("stream closed in pyserver-thread-", timeout=10)


# --------------------------------------------------------------------------- stopping


def test_term_waits_for_requests_in_threads():
    with run_server(APP, "--threads", "3") as srv:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(timed_get, srv, f"/sleep?s=1&say={i}") for i in range(3)]
            # TERM once the three run in the application, not while they are still on
            # their way (a connection not yet accepted is reset when the listener closes).
            assert wait_for(lambda: srv.log().count("sleeping ") == 3, timeout=10), srv.log()
            os.kill(srv.pid, signal.SIGTERM)
            assert [f.result()[0] for f in slow] == [200] * 3
        srv.proc.wait(10)
        assert srv.proc.returncode == 0


def test_graceful_timeout_ends_a_stuck_thread_request():
    with run_server(APP, "--threads", "2", "--graceful-timeout", "1") as srv:
        with socket.create_connection((HOST, srv.port)) as sock:
            sock.sendall(b"GET /sleep?s=30&say=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert srv.wait_for_log("sleeping 1", timeout=10), srv.log()
            start = time.monotonic()
            os.kill(srv.pid, signal.SIGTERM)
            srv.proc.wait(10)
            assert time.monotonic() - start < 6
            assert sock.recv(100) == b""  # closed without an answer


def master(*args):
    return run_server(APP, "--workers", "1", "--timeout", "30", *args)


def test_max_requests_counts_requests_in_threads():
    with master("--threads", "2", "--max-requests", "4") as srv:
        first = get(srv, "/pid")[1]
        results, _ = parallel(srv, ["/sleep?s=0.3"] * 3)
        assert all(r[0] == 200 for r in results)
        assert wait_for(lambda: get(srv, "/pid")[1] != first, 10.0)


def test_hup_waits_for_requests_in_threads():
    with master("--threads", "2") as srv:
        first = get(srv, "/pid")[1]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(get, srv, "/sleep?s=1.5") for _ in range(2)]
            time.sleep(0.4)
            os.kill(srv.pid, signal.SIGHUP)
            assert [f.result()[0] for f in slow] == [200, 200]
        assert wait_for(lambda: get(srv, "/pid")[1] != first, 10.0)


def test_watchdog_logs_a_stuck_thread_and_replaces_the_worker():
    with run_server(APP, "--workers", "1", "--timeout", "2", "--threads", "2") as srv:
        first = get(srv, "/pid")[1]
        sock = socket.create_connection((HOST, srv.port))
        sock.sendall(b"GET /sleep?s=60 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert srv.wait_for_log("WORKER TIMEOUT", timeout=10), srv.log_tail()
        assert wait_for(lambda: get(srv, "/pid")[1] != first, 10.0)
        sock.close()
        log = srv.log()
        assert "pyserver-thread-" in log and "GET /sleep?s=60" in log
        assert "time.sleep(float(q.get(" in log  # the stuck thread's own stack


# --------------------------------------------------------------------------- gunicorn, ASGI


def test_gunicorn_threads_setting_runs_threads():
    pytest.importorskip("gunicorn")
    from test_gunicorn import gunicorn

    with gunicorn(APP, "--threads", "4", "--chdir", os.path.dirname(__file__), workers=1) as g:
        status = httpx.get(g.url + "/info", timeout=10)
        assert status.text.startswith("multithread=True thread=pyserver-thread-")
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda _: g.get("/sleep?s=1").status_code, range(4)))
        assert codes == [200] * 4
        # Four 1 s requests one after another would take 4 s.
        assert time.monotonic() - start < (3.5 if UNDER_ASAN else 2.5)


def test_asgi_threads_size_the_default_executor():
    with run_server("apps.thread_apps:asgi_app", "--threads", "3") as srv:
        start = time.monotonic()
        status, body = get(srv, "/?6")
        names = body.decode().split()
        assert status == 200
        assert len(names) == 3 and all(n.startswith("pyserver-executor") for n in names)
        assert time.monotonic() - start < 1.5  # 6 x 0.3 s on 3 threads


def test_threads_start_in_the_worker_after_a_preload_fork():
    with master("--preload", "--threads", "2") as srv:
        results, wall = parallel(srv, ["/sleep?s=0.5"] * 2)
        assert [r[0] for r in results] == [200, 200]
        assert all(r[1].startswith(b"slept pyserver-thread-") for r in results)
        assert wall < 1.4, wall


# --------------------------------------------------------------------------- Django + PostgreSQL


def _as_postgres(argv):
    """initdb and postgres refuse to run as root: run them as the postgres user then."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser") is None:
        pytest.skip("running as root without runuser")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no postgres user")
    return ["runuser", "-u", "postgres", "--", *argv]


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL cluster on a unix socket in a temporary directory; yields the
    environment that points libpq (and Django's settings) at it."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("PostgreSQL (initdb) is not installed")
    pytest.importorskip("psycopg")
    bindir = os.path.dirname(found[-1])
    # Not under pytest's tmp_path: its parents are root's own (0700) when run as root.
    root = Path(tempfile.mkdtemp(prefix="pyserver-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data, port = root / "data", str(free_port())
    subprocess.run(
        _as_postgres([f"{bindir}/initdb", "-D", str(data), "-U", "postgres", "--auth=trust"]),
        check=True,
        capture_output=True,
    )
    options = f"-k {root} -p {port} -c listen_addresses='' -c max_connections=40"
    pg_ctl = f"{bindir}/pg_ctl"
    subprocess.run(
        _as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l", f"{root}/log", "-w", "start"]),
        check=True,
        capture_output=True,
    )
    try:
        yield {"PGHOST": str(root), "PGPORT": port}
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def test_django_postgres_queries_from_four_threads(postgres):
    spec = "apps.djangodb.wsgi:application"
    with run_server(spec, "--threads", "4", env=postgres) as srv:
        assert get(srv, "/query/?n=5")[0] == 200
        results, wall = parallel(srv, ["/query/?sleep=1&n=100"] * 4)
        answers = [json.loads(body) for _, body, _ in results]
        assert [s for s, _, _ in results] == [200] * 4, results
        assert all(a["count"] == 100 for a in answers)
        assert len({a["thread"] for a in answers}) == 4
        assert len({a["backend"] for a in answers}) == 4  # a connection per thread
        assert wall < 2.5, wall  # the four queries overlapped
        # CONN_MAX_AGE=0: each request closed its connection on its own thread (close()
        # of the response runs there), so only the asking request's one is left.
        assert wait_for(lambda: json.loads(get(srv, "/sessions/")[1])["sessions"] == 1, 5.0)
