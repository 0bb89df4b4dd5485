"""Starlette through pyserver, with real clients (httpx, http.client, raw sockets)."""

import hashlib
import http.client
import os
import time
from pathlib import Path

import httpx
import pytest
from helpers import HOST, build_request, run_server, wait_for

MIB = 1 << 20


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("starlette") / "events")


@pytest.fixture(scope="module")
def srv(events_file):
    with run_server("apps.asgi_starlette:app", env={"ASGI_TEST_EVENTS": events_file}) as server:
        yield server
    assert Path(events_file).read_text().splitlines()[-1] == "shutdown"


@pytest.fixture(scope="module")
def client(srv):
    with httpx.Client(base_url=srv.url, timeout=20, trust_env=False) as session:
        yield session


def events(path):
    return Path(path).read_text().splitlines() if Path(path).exists() else []


def test_json_round_trip(client):
    payload = {"name": "caf\u00e9", "items": [1, 2, 3], "nested": {"ok": True}}
    response = client.post("/json", json=payload)
    assert response.status_code == 200
    assert response.json() == {"received": payload, "method": "POST"}


def test_urlencoded_form(client):
    response = client.post("/form", data={"name": "caf\u00e9", "n": "42"})
    assert response.status_code == 200
    assert response.json() == {
        "fields": {"name": "caf\u00e9", "n": "42"},
        "content_type": "application/x-www-form-urlencoded",
    }


def test_multipart_form_with_fields_and_a_file(client):
    content = os.urandom(10_000)
    response = client.post(
        "/form", data={"title": "report"}, files={"doc": ("doc.bin", content, "application/x")}
    )
    assert response.status_code == 200, response.text
    fields = response.json()["fields"]
    assert fields["title"] == "report"
    assert fields["doc"] == {
        "filename": "doc.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def test_50mib_multipart_upload(client):
    content = os.urandom(MIB) * 50
    response = client.post("/upload", files={"file": ("big.bin", content)})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "filename": "big.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def test_streaming_response(client):
    with client.stream("GET", "/stream?n=20") as response:
        assert response.status_code == 200
        assert response.headers["transfer-encoding"] == "chunked"
        body = b"".join(response.iter_bytes())
    assert body == b"".join(f"line {i}\n".encode() for i in range(20))


def test_server_sent_events_arrive_one_by_one(srv, tmp_path):
    """Each event reaches the client while the generator waits before the next: it waits for
    a file that the client creates only once it has the event, so an event held back (until
    the next one, or the end) would never arrive and the read would time out."""
    params = {"n": "3", "gate": str(tmp_path)}
    with httpx.stream(
        "GET", f"{srv.url}/sse", params=params, timeout=10, trust_env=False
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        arrivals, buffer = [], ""
        for text in response.iter_text():
            buffer += text
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                (tmp_path / str(len(arrivals))).touch()  # the generator may go on
                arrivals.append(event)
    assert arrivals == [f"id: {i}\nevent: tick\ndata: tick {i}" for i in range(3)]


def test_background_task_runs_after_the_response(client, events_file, tmp_path):
    token = f"bg-{time.monotonic_ns()}"
    gate = tmp_path / "gate"  # the task records only once the test has checked it did not yet
    response = client.get("/background", params={"token": token, "gate": str(gate)})
    assert response.text == "response first"
    assert f"background {token}" not in events(events_file)
    gate.touch()
    assert wait_for(lambda: f"background {token}" in events(events_file), 5.0)


def test_is_disconnected_turns_true_when_the_client_leaves(srv, events_file):
    token = f"dc-{time.monotonic_ns()}"
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=10)
    conn.request("GET", f"/is-disconnected?token={token}")
    assert wait_for(lambda: f"polling {token}" in events(events_file), 5.0)
    conn.close()
    assert wait_for(lambda: f"disconnected {token}" in events(events_file), 5.0), events(
        events_file
    )


def test_is_disconnected_is_false_while_connected(client):
    response = client.post("/connected", content=b"some body")
    assert response.json() == {"disconnected": False}


def test_http_exception(client):
    response = client.get("/http-error")
    assert response.status_code == 409
    assert response.text == "conflict on purpose"


def test_custom_exception_handler(client):
    response = client.get("/custom-error")
    assert response.status_code == 418
    assert response.json() == {"error": "short and stout"}


def test_unhandled_exception_is_500_and_logged(srv, client):
    response = client.get("/crash")
    assert response.status_code == 500
    assert srv.wait_for_log("starlette view crashed on purpose")
    assert client.post("/json", json=[1]).status_code == 200


def test_middlewares_and_lifespan_state(client):
    response = client.get("/state")
    assert response.status_code == 200
    assert response.headers["x-base-middleware"] == "seen"
    assert response.headers["x-pure-asgi"] == "out"
    assert response.json() == {
        "db": "connected",
        "middleware": "in",
        "scope_state_keys": ["db"],
    }


def test_unknown_route_is_404(client):
    assert client.get("/no/such/route").status_code == 404


def test_raw_socket_keep_alive_across_routes(srv):
    with srv.connect() as conn:
        for _ in range(3):
            conn.send(build_request("GET", "/stream?n=2"))
            assert conn.read_response().body == b"line 0\nline 1\n"
            response = conn.request("GET", "/state")
            assert response.status == 200, response


def test_lifespan_startup_ran_once(events_file, srv):
    assert events(events_file).count("startup") == 1
