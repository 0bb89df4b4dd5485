"""Django's ASGIHandler through pyserver: async and sync views, forms, streaming, errors, and
a view cancelled when its client disconnects (Django >= 5.0 listens for http.disconnect)."""

import time
from pathlib import Path

import django
import httpx
import pytest
from helpers import build_request, run_server, wait_for


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("django") / "events")


@pytest.fixture(scope="module")
def srv(events_file):
    with run_server(
        "apps.asgi_djangoproj.asgi:application", env={"ASGI_TEST_EVENTS": events_file}
    ) as server:
        yield server


@pytest.fixture(scope="module")
def client(srv):
    with httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as session:
        yield session


def events(path):
    return Path(path).read_text().splitlines() if Path(path).exists() else []


def test_async_view(client):
    response = client.get("/async/", params={"a": "1", "b": "caf\u00e9"})
    assert response.status_code == 200
    assert response.json() == {
        "framework": "django",
        "kind": "async",
        "method": "GET",
        "path": "/async/",
        "query": {"a": "1", "b": "caf\u00e9"},
        "loop_running_here": True,
    }


def test_sync_view_runs_off_the_loop(client):
    response = client.get("/sync/")
    assert response.status_code == 200
    assert response.json() == {"kind": "sync", "loop_running_here": False, "main_thread": False}


def test_form_post(client):
    response = client.post("/form/", data={"name": "caf\u00e9", "n": "42"})
    assert response.json() == {
        "fields": {"name": "caf\u00e9", "n": "42"},
        "content_type": "application/x-www-form-urlencoded",
    }


def test_streaming_response_with_async_iterator(client):
    with client.stream("GET", "/stream/", params={"n": 40}) as response:
        assert response.status_code == 200
        assert response.headers.get("transfer-encoding") == "chunked"
        body = b"".join(response.iter_bytes())
    assert body == b"".join(f"chunk-{i}\n".encode() for i in range(40))


def test_view_error_is_500(client):
    response = client.get("/boom/")
    assert response.status_code == 500
    assert client.get("/async/").status_code == 200


def test_append_slash_redirect(client):
    response = client.get("/async")
    assert response.status_code == 301
    assert response.headers["location"] == "/async/"


def test_unknown_url_is_404(client):
    assert client.get("/no/such/page/").status_code == 404


@pytest.mark.skipif(django.VERSION < (5, 0), reason="Django < 5 does not cancel on disconnect")
def test_view_is_cancelled_when_the_client_disconnects(srv, events_file):
    token = f"t{time.monotonic_ns()}"
    conn = srv.connect()
    conn.send(build_request("GET", f"/cancel/?token={token}"))
    assert wait_for(lambda: f"started {token}" in events(events_file), 5.0), events(events_file)
    conn.close()
    assert wait_for(lambda: f"cancelled {token}" in events(events_file), 5.0), events(events_file)
    assert f"finished {token}" not in events(events_file)
