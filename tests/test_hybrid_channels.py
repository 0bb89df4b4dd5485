"""--asgi-app: a Django project with Channels on one port, plain HTTP through Django's
WSGIHandler on the application threads, WebSockets, lifespan and --asgi-path prefixes
through the ASGI application on the worker's loop (tests/apps/hybrid_channels.py)."""

import asyncio
import http.client
import json
import os
import signal
import socket
import threading

import httpx
import pytest
import websockets
from helpers import HOST, TESTS_DIR, free_port, run_cli, run_server, wait_for
from websockets.exceptions import ConnectionClosed

pytest.importorskip("channels")

WSGI = "apps.hybrid_channels:wsgi_application"
ASGI = "apps.hybrid_channels:application"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def get_json(port, target):
    r = httpx.get(f"http://{HOST}:{port}{target}", trust_env=False, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def check_echo(port):
    async def main():
        async with websockets.connect(f"ws://{HOST}:{port}/ws/echo/") as ws:
            await ws.send("hello hybrid")
            text = await ws.recv()
            await ws.send(b"\x00\x01")
            return text, await ws.recv()

    assert run(main()) == ("hello hybrid", b"\x00\x01")


def check_broadcast(port):
    async def main():
        members = [await websockets.connect(f"ws://{HOST}:{port}/ws/news/") for _ in range(3)]
        for ws in members:
            assert "pid" in json.loads(await ws.recv())
        await members[1].send("extra extra")
        got = [await asyncio.wait_for(ws.recv(), 10) for ws in members]
        for ws in members:
            await ws.close()
        return got

    assert run(main()) == ["extra extra"] * 3


@pytest.fixture(scope="module")
def srv():
    with run_server(WSGI, "--asgi-app", ASGI, "--asgi-path", "/events/", "--threads", "4") as s:
        yield s


def test_http_views_run_under_wsgi_on_the_application_threads(srv):
    where = get_json(srv.port, "/where/")
    assert where["wsgi_version"] == [1, 0]
    assert where["multithread"] is True
    assert where["thread"].startswith("pyserver-thread-")
    assert get_json(srv.port, "/items/")["items"][9]["id"] == 9
    assert get_json(srv.port, "/unsafe/") == {"result": "sync code ran"}
    assert srv.wait_for_log('"GET /where/ HTTP/1.1" 200')


def test_websocket_echo_goes_to_the_asgi_application(srv):
    check_echo(srv.port)
    assert srv.wait_for_log('"GET /ws/echo/ HTTP/1.1" 101')


def test_group_broadcast_reaches_every_member(srv):
    check_broadcast(srv.port)


def test_sync_views_tell_groups_through_the_workers_loop(srv):
    """async_to_sync in a view on an application thread runs on the worker's asyncio loop
    (its main thread), as under an ASGI server: the consumers' channel layer."""

    async def main():
        async with websockets.connect(f"ws://{HOST}:{srv.port}/ws/news/") as ws:
            await ws.recv()  # {"pid": ...}
            answer = await asyncio.to_thread(get_json, srv.port, "/notify/?text=breaking")
            return answer, await asyncio.wait_for(ws.recv(), 10)

    answer, got = run(main())
    assert answer == {"sent": "breaking", "ran_on": "MainThread"}
    assert got == "breaking"


def test_lifespan_startup_reaches_the_asgi_application(srv):
    assert srv.wait_for_log("hybrid lifespan startup")
    assert "ASGI application apps.hybrid_channels:application" in srv.log()


def test_asgi_path_streams_from_an_async_view(srv):
    with httpx.stream("GET", srv.url + "/events/stream/", trust_env=False, timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    # Under ASGI: Django's request.META has no wsgi.version.
    assert events == [{"n": i, "wsgi": False} for i in range(3)]


def test_asgi_path_prefixes_end_at_a_segment_and_read_absolute_targets(srv):
    # An absolute-form target is routed by its path.
    with socket.create_connection((HOST, srv.port), timeout=10) as sock:
        sock.sendall(b"GET http://example.com/events/stream/ HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b'"n": 2' not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    assert b'"wsgi": false' in data
    # "/wher" takes "/wher" and what lies under "/wher/", not "/where/".
    with run_server(WSGI, "--asgi-app", ASGI, "--threads", "2", "--asgi-path", "/wher") as s:
        assert get_json(s.port, "/where/")["wsgi_version"] == [1, 0]
    with run_server(WSGI, "--asgi-app", ASGI, "--threads", "2", "--asgi-path", "/where/") as s:
        assert get_json(s.port, "/where/")["wsgi_version"] is None  # Django's ASGIHandler


def test_http_and_websockets_alternate_on_one_worker(srv):
    """A request body for the WSGI side right after WebSocket traffic: each kind keeps its
    own body handling (buffered for WSGI, streamed for ASGI)."""
    check_echo(srv.port)
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=10)
    for _ in range(3):
        conn.request("POST", "/where/", body=b"x" * 200_000)
        r = conn.getresponse()
        assert r.status == 200
        assert json.loads(r.read())["wsgi_version"] == [1, 0]
        conn.request("GET", "/events/stream/")
        r = conn.getresponse()
        assert r.status == 200 and b'"wsgi": false' in r.read()
    conn.close()


def test_http2_streams_are_routed_like_http1(srv):
    async def main():
        async with httpx.AsyncClient(http1=False, http2=True, timeout=10, trust_env=False) as c:
            where, events = await asyncio.gather(
                c.get(srv.url + "/where/"), c.get(srv.url + "/events/stream/")
            )
            return where, events

    where, events = run(main())
    assert where.http_version == "HTTP/2" and events.http_version == "HTTP/2"
    assert where.json()["wsgi_version"] == [1, 0]
    assert where.json()["thread"].startswith("pyserver-thread-")
    assert '"wsgi": false' in events.text and events.text.count("data: ") == 3


def test_http2_streams_of_both_sides_one_after_the_other(srv):
    """One connection, streams taking turns: each side's per-connection state (the
    addresses in WSGI's and in ASGI's shape) is its own."""

    async def main():
        async with httpx.AsyncClient(http1=False, http2=True, timeout=10, trust_env=False) as c:
            return [
                await c.get(srv.url + path)
                for path in ("/events/stream/", "/where/", "/events/stream/", "/where/")
            ]

    answers = run(main())
    assert [r.status_code for r in answers] == [200] * 4
    where, events = answers[1], answers[2]
    assert where.json()["wsgi_version"] == [1, 0]
    assert where.json()["thread"].startswith("pyserver-thread-")
    assert '"wsgi": false' in events.text and events.text.count("data: ") == 3


def test_threads_1_warns_that_slow_views_hold_websockets():
    with run_server(WSGI, "--asgi-app", ASGI) as s:
        assert s.wait_for_log("--asgi-app with --threads 1")
        where = get_json(s.port, "/where/")
        assert where["wsgi_version"] == [1, 0] and where["multithread"] is False
        check_echo(s.port)
        # The views run on the loop's thread, but not inside asyncio's running loop: the
        # ORM's guard against async contexts lets them through.
        assert get_json(s.port, "/unsafe/") == {"result": "sync code ran"}
        check_echo(s.port)
        assert get_json(s.port, "/unsafe/") == {"result": "sync code ran"}
        # The loop's thread cannot wait for its own loop: asgiref runs the coroutine on a
        # loop of its own, in another thread.
        notified = get_json(s.port, "/notify/?text=x")
        assert notified["sent"] == "x" and notified["ran_on"] != "MainThread"


def test_gunicorn_worker_takes_the_asgi_app_from_its_environment():
    pytest.importorskip("gunicorn")
    from test_gunicorn import gunicorn

    args = ["-e", f"PYSERVER_ASGI_APP={ASGI}", "-e", "PYSERVER_ASGI_PATHS=/events/"]
    with gunicorn(WSGI, *args, "--threads", "4", workers=1) as g:
        where = get_json(g.port, "/where/")
        assert where["wsgi_version"] == [1, 0] and where["multithread"] is True
        check_echo(g.port)
        check_broadcast(g.port)
        events = httpx.get(g.url + "/events/stream/", trust_env=False, timeout=10).text
        assert '"wsgi": false' in events
        assert get_json(g.port, "/notify/?text=x")["ran_on"] == "MainThread"


def test_two_workers_share_groups_through_redis(redis_url):
    """channels_redis: a client on each worker; a group message sent through one worker
    reaches the client of the other."""
    env = {"HYBRID_REDIS_URL": redis_url}
    args = ["--asgi-app", ASGI, "--threads", "2", "--workers", "2", "--reuse-port"]
    with run_server(WSGI, *args, env=env) as s:
        # Both workers up (each ran lifespan startup), each on its own SO_REUSEPORT lane.
        assert wait_for(lambda: s.log().count("hybrid lifespan startup") == 2, 15), s.log()

        async def main():
            by_pid = {}
            opened = []
            for _ in range(40):  # the kernel spreads connections over the lanes
                ws = await websockets.connect(f"ws://{HOST}:{s.port}/ws/news/")
                opened.append(ws)
                pid = json.loads(await ws.recv())["pid"]
                by_pid.setdefault(pid, ws)
                if len(by_pid) == 2:
                    break
            assert len(by_pid) == 2, "every connection went to one worker"
            sender, receiver = by_pid.values()
            await sender.send("across workers")
            got = await asyncio.wait_for(receiver.recv(), 10)
            for ws in opened:
                await ws.close()
            return got

        assert run(main()) == "across workers"


def test_sigterm_finishes_thread_requests_and_closes_websockets_with_1001():
    with run_server(WSGI, "--asgi-app", ASGI, "--threads", "4") as s:
        results = []

        def slow_request():
            conn = http.client.HTTPConnection(HOST, s.port, timeout=20)
            conn.request("GET", "/slow/?s=1")
            r = conn.getresponse()
            results.append((r.status, json.loads(r.read())))
            conn.close()

        async def main():
            conns = [await websockets.connect(f"ws://{HOST}:{s.port}/ws/echo/") for _ in range(2)]
            for ws in conns:
                await ws.send("x")
                assert await ws.recv() == "x"
            threads = [threading.Thread(target=slow_request) for _ in range(2)]
            for t in threads:
                t.start()
            log_has_two = lambda: s.log().count("slow view started") == 2  # noqa: E731
            assert await asyncio.to_thread(wait_for, log_has_two, 10)
            os.kill(s.pid, signal.SIGTERM)
            codes = []
            for ws in conns:
                with pytest.raises(ConnectionClosed) as info:
                    await ws.recv()
                codes.append(info.value.rcvd.code)
            for t in threads:
                await asyncio.to_thread(t.join, 20)
            return codes

        assert run(main()) == [1001, 1001]
        assert results == [(200, {"slept": 1.0})] * 2
        s.proc.wait(10)
        assert s.proc.returncode == 0
        assert "hybrid lifespan shutdown" in s.log()


def cli_error(*args):
    result = run_cli(*args, "--host", HOST, "--port", str(free_port()), "--threads", "2")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return result.returncode, lines, result.stderr


def test_asgi_app_naming_a_wsgi_callable_exits_2_with_one_line():
    code, lines, stderr = cli_error(WSGI, "--app-dir", str(TESTS_DIR), "--asgi-app", WSGI)
    assert code == 2, stderr
    assert len(lines) == 1 and "is a WSGI application" in lines[0], stderr


def test_asgi_app_beside_an_asgi_app_exits_2_with_one_line():
    code, lines, stderr = cli_error(ASGI, "--app-dir", str(TESTS_DIR), "--asgi-app", ASGI)
    assert code == 2, stderr
    assert len(lines) == 1 and "--asgi-app is for a WSGI APP" in lines[0], stderr


def test_asgi_app_with_interface_asgi_exits_2():
    code, lines, stderr = cli_error(WSGI, "--interface", "asgi", "--asgi-app", ASGI)
    assert code == 2, stderr
    assert len(lines) == 1 and "--asgi-app" in lines[0], stderr


def test_asgi_path_without_asgi_app_exits_2():
    code, lines, stderr = cli_error(WSGI, "--asgi-path", "/events/")
    assert code == 2, stderr
    assert len(lines) == 1 and "--asgi-path needs --asgi-app" in lines[0], stderr


def test_unimportable_asgi_app_exits_3():
    code, lines, stderr = cli_error(
        WSGI, "--app-dir", str(TESTS_DIR), "--asgi-app", "no_such_module_for_pyserver:app"
    )
    assert code == 3, stderr
    assert len(lines) == 1 and "no_such_module_for_pyserver" in lines[0], stderr
    assert "Traceback" not in stderr


def test_asgi_app_from_the_environment():
    env = {"PYSERVER_ASGI_APP": ASGI, "PYSERVER_ASGI_PATHS": "/events/ /other/"}
    with run_server(WSGI, "--threads", "2", env=env) as s:
        assert s.wait_for_log("HTTP paths /events, /other")
        check_echo(s.port)


def test_asgi_app_naming_a_wsgi_callable_under_a_master_exits_2():
    """The workers import the applications; the master stops at the first that cannot
    serve, with the worker's status, instead of forking it again."""
    code, lines, stderr = cli_error(
        WSGI, "--app-dir", str(TESTS_DIR), "--asgi-app", WSGI, "--workers", "2"
    )
    assert code == 2, stderr
    assert any("is a WSGI application" in line for line in lines), stderr


def test_max_requests_counts_websockets_and_http_alike():
    with run_server(WSGI, "--asgi-app", ASGI, "--threads", "2", "--max-requests", "4") as s:

        async def news_pid():
            async with websockets.connect(f"ws://{HOST}:{s.port}/ws/news/") as ws:
                return json.loads(await ws.recv())["pid"]

        first = run(news_pid())  # request 1: the WebSocket upgrade
        for _ in range(3):  # requests 2 to 4: WSGI views
            get_json(s.port, "/items/")
        assert wait_for(lambda: run(news_pid()) != first, 15), s.log_tail()


def test_metrics_count_the_views_and_the_websockets():
    mport = free_port()
    with run_server(
        WSGI, "--asgi-app", ASGI, "--threads", "2", "--metrics-bind", f"{HOST}:{mport}"
    ) as s:
        get_json(s.port, "/items/")
        check_echo(s.port)

        def metrics():
            return httpx.get(f"http://{HOST}:{mport}/metrics", trust_env=False, timeout=10).text

        def counted():
            text = metrics()
            return (
                'pyserver_requests_total{method="GET",status="2xx"} 1' in text
                and "pyserver_websocket_connections_total 1" in text
                and "pyserver_websocket_messages_received_total 2" in text
            )

        assert wait_for(counted, 10), metrics()


def test_hup_starts_again_with_both_applications():
    with run_server(WSGI, "--asgi-app", ASGI, "--threads", "2") as s:
        check_echo(s.port)
        os.kill(s.pid, signal.SIGHUP)
        assert s.wait_for_log("Reloading: starting again", 15)
        assert wait_for(lambda: s.log().count("hybrid lifespan startup") == 2, 15), s.log()
        assert get_json(s.port, "/where/")["wsgi_version"] == [1, 0]
        check_echo(s.port)


def test_watchdog_replaces_a_worker_whose_view_is_stuck_in_a_thread():
    args = ["--asgi-app", ASGI, "--threads", "2", "--workers", "1", "--timeout", "2"]
    with run_server(WSGI, *args) as s:

        async def news_pid():
            async with websockets.connect(f"ws://{HOST}:{s.port}/ws/news/") as ws:
                return json.loads(await ws.recv())["pid"]

        first = run(news_pid())
        conn = http.client.HTTPConnection(HOST, s.port, timeout=30)
        conn.request("GET", "/slow/?s=60")
        assert s.wait_for_log("WORKER TIMEOUT", timeout=15), s.log_tail()
        assert wait_for(lambda: run(news_pid()) != first, 15), s.log_tail()
        conn.close()
        assert "GET /slow/?s=60" in s.log()


def test_large_bodies_stream_to_either_side(srv):
    """A body of 2 MiB: buffered (spooled past 1 MiB) for the WSGI view, read as it
    arrives by the ASGI one, on the same keep-alive connection."""
    body = os.urandom(2 << 20)  # under Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB)
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=20)
    conn.request("POST", "/events/upload/", body=body)
    r = conn.getresponse()
    assert r.status == 200
    assert json.loads(r.read()) == {"bytes": len(body), "wsgi": False}
    conn.request("POST", "/where/", body=body)
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["wsgi_version"] == [1, 0]
    conn.close()


def test_asgi_app_from_a_config_file(tmp_path):
    conf = tmp_path / "pyserver.conf.py"
    conf.write_text(f'asgi_app = "{ASGI}"\nasgi_paths = ["/events/"]\nthreads = 2\n')
    with run_server(WSGI, "-c", str(conf)) as s:
        assert s.wait_for_log("HTTP paths /events")
        check_echo(s.port)
        assert '"wsgi": false' in httpx.get(s.url + "/events/stream/", trust_env=False).text


def test_asgi_app_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.pyserver]\nasgi-app = "{ASGI}"\nasgi-paths = ["/events/"]\nthreads = 2\n'
    )
    with run_server(WSGI, cwd=tmp_path) as s:
        assert s.wait_for_log("HTTP paths /events")
        check_echo(s.port)
