"""FastAPI through pyserver, with httpx and raw sockets."""

import hashlib
import os

import httpx
import pytest
from helpers import run_server


@pytest.fixture(scope="module")
def client():
    with run_server("apps.asgi_fastapi:app") as srv:
        with httpx.Client(base_url=srv.url, timeout=20, trust_env=False) as session:
            yield session


def test_valid_json_body(client):
    response = client.post("/items", json={"name": "pen", "price": 2.5, "tags": ["office"]})
    assert response.status_code == 200
    assert response.json() == {
        "item": {"name": "pen", "price": 2.5, "tags": ["office"]},
        "total": 3.0,
    }


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "pen", "price": -1}, "price"),
        ({"name": "", "price": 1}, "name"),
        ({"price": 1}, "name"),
    ],
)
def test_invalid_json_body_is_422(client, payload, field):
    response = client.post("/items", json=payload)
    assert response.status_code == 422
    locations = [error["loc"] for error in response.json()["detail"]]
    assert ["body", field] in locations


def test_malformed_json_is_422(client):
    response = client.post(
        "/items", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422


def test_path_and_query_params(client):
    response = client.get("/items/42", params={"q": "caf\u00e9", "limit": "3"})
    assert response.json() == {"item_id": 42, "q": "caf\u00e9", "limit": 3}
    assert client.get("/items/not-a-number").status_code == 422


def test_dependency(client):
    assert client.get("/me", headers={"X-User": "alice"}).json() == {"name": "alice"}
    response = client.get("/me")
    assert response.status_code == 401
    assert response.json() == {"detail": "no user"}


def test_sync_endpoint_runs_in_threadpool(client):
    assert client.get("/sync", params={"n": 12}).json() == {"square": 144}


def test_upload_file(client):
    content = os.urandom(3 << 20)
    response = client.post("/upload", files={"file": ("data.bin", content)})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "filename": "data.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def test_streaming_response(client):
    with client.stream("GET", "/stream", params={"n": 30}) as response:
        assert response.status_code == 200
        body = b"".join(response.iter_bytes())
    assert body == b"".join(f"row {i}\n".encode() for i in range(30))


def test_lifespan_state(client):
    assert client.get("/state").json() == {"started": "yes"}


def test_openapi_schema(client):
    schema = client.get("/openapi.json").json()
    assert "/items/{item_id}" in schema["paths"]
