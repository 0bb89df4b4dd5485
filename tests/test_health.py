"""--health-check-path and --drain-delay: the health check is answered by the core (HTTP/1.1
and HTTP/2, WSGI and ASGI) without calling the application, kept out of the access log and
of the request metrics; on SIGTERM the server keeps serving for the drain delay while the
health check answers 503, then stops gracefully. A second SIGTERM or a SIGINT ends the
drain; SIGHUP (a rolling restart) does not drain.

One server per scenario; every wait is on an event (a response, a log line, an exit), with
a bound.
"""

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import HOST, fetch, free_port, run_cli, run_server, wait_for
from test_h2 import H2
from test_metrics import await_scrape, scrape
from test_process import children

WSGI = "apps.health_apps:wsgi"
ASGI = "apps.health_apps:asgi"
HEALTH = ("--health-check-path", "/healthz")


def seen(port):
    """The paths the (single-process) application was called with so far."""
    response = fetch(port, "GET", "/seen")
    assert response.status == 200, response
    return json.loads(response.body)


def assert_healthy(response, method="GET"):
    assert response.status == 200, response
    assert response.header("Content-Type") == "text/plain; charset=utf-8"
    assert response.header("Cache-Control") == "no-store"
    assert response.header("Content-Length") == "3"
    assert response.body == (b"" if method == "HEAD" else b"ok\n")


# --------------------------------------------------------------------------- answering


@pytest.fixture(scope="module")
def wsgi_srv():
    """A single process with the health check and the metrics endpoint; yields (server,
    metrics port)."""
    mport = free_port()
    with run_server(WSGI, *HEALTH, "--metrics-bind", f"{HOST}:{mport}") as srv:
        yield srv, mport


def test_get_and_head_are_answered_without_the_app(wsgi_srv):
    srv, _ = wsgi_srv
    with srv.connect() as conn:  # one keep-alive connection, the app's request after
        assert_healthy(conn.request("GET", "/healthz"))
        assert_healthy(conn.request("HEAD", "/healthz"), "HEAD")
        assert_healthy(conn.request("GET", "/healthz?probe=kubelet&x=%2F"))
        last = conn.request("GET", "/healthz")
        assert_healthy(last)
        assert not last.closes
        assert conn.request("GET", "/after").body == b"app"
    paths = seen(srv.port)
    assert "/after" in paths and "/healthz" not in paths


def test_other_paths_and_forms(wsgi_srv):
    srv, _ = wsgi_srv
    for target in ("/healthz/", "/healthzz", "/health", "/Healthz", "/x/healthz"):
        assert fetch(srv.port, "GET", target).body == b"app", target
    paths = seen(srv.port)
    assert {"/healthz/", "/healthzz", "/health", "/Healthz", "/x/healthz"} <= set(paths)
    # The absolute form names the same path.
    assert_healthy(fetch(srv.port, "GET", f"http://{HOST}:{srv.port}/healthz?a=1"))
    assert "/healthz" not in seen(srv.port)


def test_other_methods_get_405(wsgi_srv):
    srv, _ = wsgi_srv
    for method, body in (("POST", b"x=1"), ("PUT", b""), ("OPTIONS", b""), ("DELETE", b"")):
        with srv.connect() as conn:
            response = conn.request(method, "/healthz", body=body)
            assert response.status == 405, response
            assert response.header("Allow") == "GET, HEAD"
            assert response.body == b"Method Not Allowed\n"
            # the connection goes on: the next request is answered
            assert conn.request("GET", "/healthz").status == 200
    assert "/healthz" not in seen(srv.port)


def test_http2_streams_get_the_same_answers(wsgi_srv):
    srv, _ = wsgi_srv
    with H2(srv.port) as c:
        ok = c.response(c.request("/healthz?probe=1"))
        head = c.response(c.request("/healthz", "HEAD"))
        post = c.response(c.request("/healthz", "POST", body=b"x"))
        app = c.response(c.request("/h2-after"))
    assert ok["status"] == 200 and ok["body"] == b"ok\n"
    assert ok["headers"]["cache-control"] == "no-store"
    assert ok["headers"]["content-type"] == "text/plain; charset=utf-8"
    assert head["status"] == 200 and head["body"] == b""
    assert head["headers"]["content-length"] == "3"
    assert post["status"] == 405 and post["headers"]["allow"] == "GET, HEAD"
    assert app["status"] == 200 and app["body"] == b"app"
    paths = seen(srv.port)
    assert "/h2-after" in paths and "/healthz" not in paths


def test_metrics_count_health_checks_apart(wsgi_srv):
    srv, mport = wsgi_srv
    before = scrape(mport)
    requests = before.sum("pyserver_requests_total")
    checks = before.value("pyserver_health_checks_total")
    with srv.connect() as conn:
        for _ in range(5):
            assert conn.request("GET", "/healthz").status == 200
        assert conn.request("POST", "/healthz").status == 405
        assert conn.request("GET", "/counted").status == 200
    after = await_scrape(mport, lambda s: s.sum("pyserver_requests_total") >= requests + 1)
    assert after.sum("pyserver_requests_total") == requests + 1
    assert after.value("pyserver_health_checks_total") == checks + 6


def test_access_log_leaves_health_checks_out(wsgi_srv):
    srv, _ = wsgi_srv
    assert fetch(srv.port, "GET", "/healthz?logged=no").status == 200
    assert fetch(srv.port, "GET", "/access-marker").status == 200
    assert srv.wait_for_log("/access-marker"), srv.log_tail()
    assert not re.search(r'"[A-Z]+ /healthz[ ?]', srv.log()), srv.log_tail()


def test_asgi_app_is_not_called_either():
    with run_server(ASGI, *HEALTH) as srv:
        with srv.connect() as conn:
            assert_healthy(conn.request("GET", "/healthz"))
            assert_healthy(conn.request("HEAD", "/healthz"), "HEAD")
            assert conn.request("POST", "/healthz", body=b"{}").status == 405
            assert conn.request("GET", "/after").body == b"app"
        with H2(srv.port) as c:
            assert c.response(c.request("/healthz"))["body"] == b"ok\n"
        paths = seen(srv.port)
        assert "/after" in paths and "/healthz" not in paths


def test_bad_values_are_refused():
    for args, words in (
        (("--health-check-path", "healthz"), "--health-check-path"),
        (("--health-check-path", "/health?x"), "--health-check-path"),
        (("--drain-delay", "-1"), "--drain-delay"),
    ):
        result = run_cli(WSGI, *args)
        assert result.returncode == 2, result
        assert words in result.stderr, result.stderr


# --------------------------------------------------------------------------- drain


def poll_health(port, status, timeout=5.0):
    """The first health check answer (each on a new connection) with this status."""
    last = []

    def check():
        last[:] = [fetch(port, "GET", "/healthz", timeout=2)]
        return last[0].status == status

    assert wait_for(check, timeout), f"the health check never answered {status}: {last}"
    return last[0]


def wait_serving(srv, workers):
    """Waits until the single process answers, or until each of the master's workers sits in
    its loop's poll: the signal watchers have started (a SIGTERM that comes while a process
    boots stops it without a drain)."""
    if workers == 0:
        assert fetch(srv.port, "GET", "/healthz").status == 200
        return

    def polling():
        found = 0
        for child in children(srv.pid):
            with contextlib.suppress(OSError):
                found += Path(f"/proc/{child}/wchan").read_text() in ("ep_poll", "do_epoll_wait")
        return found == workers

    assert wait_for(polling, 15), srv.log_tail()


DRAIN = 1.5


@pytest.mark.parametrize(
    ("spec", "workers"), [(WSGI, 2), (ASGI, 0)], ids=["wsgi-two-workers", "asgi-single-process"]
)
def test_sigterm_drains_then_stops(spec, workers):
    args = ("-w", str(workers)) if workers else ()
    with run_server(spec, *HEALTH, "--drain-delay", str(DRAIN), *args) as srv:
        wait_serving(srv, workers)
        assert fetch(srv.port, "GET", "/healthz").status == 200
        started = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        draining = poll_health(srv.port, 503)
        assert draining.body == b"draining\n" and draining.closes
        assert draining.header("Cache-Control") == "no-store"
        # Still serving: new connections reach the application.
        assert fetch(srv.port, "GET", "/during-drain").body == b"app"
        drainers = workers or 1
        assert wait_for(lambda: srv.log().count("draining for 1.5 s") == drainers), srv.log()
        assert srv.proc.wait(DRAIN + 10) == 0, srv.log_tail()
        elapsed = time.monotonic() - started
    assert elapsed >= DRAIN - 0.1, f"stopped {elapsed:.2f} s after SIGTERM, before the drain ended"


@pytest.mark.parametrize(
    ("workers", "second"),
    [(2, signal.SIGTERM), (2, signal.SIGINT), (0, signal.SIGTERM), (0, signal.SIGINT)],
    ids=["master-term", "master-int", "single-term", "single-int"],
)
def test_second_signal_ends_the_drain(workers, second):
    args = ("-w", str(workers)) if workers else ()
    with run_server(WSGI, *HEALTH, "--drain-delay", "60", *args) as srv:
        wait_serving(srv, workers)
        srv.proc.send_signal(signal.SIGTERM)
        poll_health(srv.port, 503)
        srv.proc.send_signal(second)
        assert srv.proc.wait(10) == 0, srv.log_tail()
        assert "ends the drain" in srv.log() or "ending the drain" in srv.log()


def test_workers_that_get_both_terms_as_one_do_not_drain():
    """The master's second TERM may reach a worker before it took the first, and then the
    two are one (signals do not queue): the worker reads in its slot that the drain was
    ended, and stops. The workers are held stopped while the master sends both."""
    with run_server(WSGI, *HEALTH, "--drain-delay", "60", "-w", "2") as srv:
        wait_serving(srv, 2)
        workers = children(srv.pid)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        try:
            srv.proc.send_signal(signal.SIGTERM)
            assert srv.wait_for_log("draining 2 workers for 60 s"), srv.log_tail()
            srv.proc.send_signal(signal.SIGTERM)
            assert srv.wait_for_log("ending the drain"), srv.log_tail()
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
        assert srv.proc.wait(10) == 0, srv.log_tail()
        assert "draining for 60 s" not in srv.log()


def test_hup_restarts_without_draining():
    with run_server(WSGI, *HEALTH, "--drain-delay", "60", "-w", "2") as srv:
        wait_serving(srv, 2)
        old = children(srv.pid)
        srv.proc.send_signal(signal.SIGHUP)
        # The old workers stop at once, not after the drain delay, while new ones serve.
        assert wait_for(lambda: not old & children(srv.pid), 15), srv.log_tail()
        wait_serving(srv, 2)
        assert fetch(srv.port, "GET", "/healthz").status == 200
        assert "draining for" not in srv.log()
        srv.proc.send_signal(signal.SIGQUIT)  # not the 60 s drain a SIGTERM would start
        assert srv.proc.wait(10) == 0, srv.log_tail()
