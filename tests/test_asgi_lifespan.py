"""The ASGI lifespan protocol: --lifespan on/auto/off, startup before serving, shutdown after
in-flight requests, state in every request scope, exit code 3 when startup fails."""

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    TESTS_DIR,
    build_request,
    can_connect,
    fetch,
    free_port,
    run_cli,
    run_server,
    wait_for,
)


def events(path):
    return Path(path).read_text().splitlines() if Path(path).exists() else []


def test_lifespan_on_runs_startup_before_requests_and_shutdown_after(tmp_path):
    log = str(tmp_path / "events")
    with run_server(
        "apps.asgi_basic:app", "--lifespan", "on", env={"ASGI_TEST_EVENTS": log}
    ) as srv:
        # The listening socket may accept into its backlog before startup ends; the first
        # request must still be served only after it.
        assert fetch(srv.port, "GET", "/sleep?s=0&event=request").status == 200
        assert events(log) == ["startup", "request-start", "request-done"]
    assert events(log) == ["startup", "request-start", "request-done", "shutdown"]


def test_lifespan_state_reaches_every_request_scope(tmp_path):
    with run_server("apps.asgi_basic:app", "--lifespan", "on") as srv:
        for _ in range(3):
            result = json.loads(fetch(srv.port, "GET", "/scope/state").body)
            assert result["greeting"] == "hello from lifespan"
            assert {"greeting", "loop_id", "pid"} <= set(result["state"])
            assert result["state_leaked"] is False


def test_shutdown_waits_for_in_flight_requests(tmp_path):
    log = str(tmp_path / "events")
    with run_server(
        "apps.asgi_basic:app", "--lifespan", "on", env={"ASGI_TEST_EVENTS": log}
    ) as srv:
        conn = srv.connect()
        conn.send(build_request("GET", "/sleep?s=1&event=inflight"))
        assert wait_for(lambda: "inflight-start" in events(log), 5.0), events(log)
        responses = []
        reader = threading.Thread(target=lambda: responses.append(conn.read_response()))
        reader.start()
        srv.proc.send_signal(signal.SIGTERM)
        reader.join(10)
        conn.close()
        srv.proc.wait(10)
    assert responses and responses[0].status == 200, responses
    assert responses[0].body == b"slept"
    assert events(log) == ["startup", "inflight-start", "inflight-done", "shutdown"]


@pytest.mark.parametrize("mode", ["fail", "raise"])
def test_startup_failure_exits_with_code_3(mode):
    result = run_cli(
        "apps.asgi_basic:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--app-dir",
        str(TESTS_DIR),
        "--lifespan",
        "on",
        env={"ASGI_TEST_STARTUP": mode},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    expected = "startup failed on purpose" if mode == "fail" else "startup raised on purpose"
    assert expected in output, output


def test_lifespan_auto_tolerates_an_app_that_rejects_lifespan():
    with run_server("apps.asgi_basic:legacy_lifespan_app", "--lifespan", "auto") as srv:
        response = fetch(srv.port, "GET", "/hello")
        assert (response.status, response.body) == (200, b"hello world")


def test_lifespan_auto_is_the_default_and_runs_startup(tmp_path):
    log = str(tmp_path / "events")
    with run_server("apps.asgi_basic:app", env={"ASGI_TEST_EVENTS": log}) as srv:
        result = json.loads(fetch(srv.port, "GET", "/scope/state").body)
        assert result["greeting"] == "hello from lifespan"
        assert events(log) == ["startup"]
    assert events(log) == ["startup", "shutdown"]


def test_lifespan_off_never_calls_the_app_for_lifespan(tmp_path):
    log = str(tmp_path / "events")
    with run_server(
        "apps.asgi_basic:app", "--lifespan", "off", env={"ASGI_TEST_EVENTS": log}
    ) as srv:
        result = json.loads(fetch(srv.port, "GET", "/scope/state").body)
        assert result["problems"] == []
        assert result["greeting"] is None
    assert events(log) == []


def test_limit_max_requests_retires_the_worker_gracefully(tmp_path):
    """After N requests the worker finishes its lifespan and the master replaces it; no
    request fails. uvicorn: fails by design (it exits; there is no master)."""
    log = str(tmp_path / "events")
    with run_server(
        "apps.asgi_basic:app", "--limit-max-requests", "5", env={"ASGI_TEST_EVENTS": log}
    ) as srv:
        pids = set()
        # The master replaces a retiring worker within its next check (about a
        # second): keep requesting, each must succeed, until a new pid answers.
        deadline = time.monotonic() + 15
        while len(pids) < 2 and time.monotonic() < deadline:
            assert wait_for(lambda: can_connect(srv.port), 10.0)
            response = fetch(srv.port, "GET", "/pid")
            assert response.status == 200, response
            pids.add(int(response.body))
            time.sleep(0.05)
        assert len(pids) >= 2, "the worker was never replaced"
        assert wait_for(lambda: events(log).count("shutdown") >= 1, 5.0), events(log)
        assert events(log).count("startup") >= 2, events(log)
