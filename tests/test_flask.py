"""Flask through pyserver: routes, JSON, form, file upload, redirect, abort(404)."""

import hashlib
import os

import httpx
import pytest
import requests
from helpers import run_server


@pytest.fixture(scope="module", params=["application", "app"], ids=["validated", "raw"])
def flask_url(request):
    with run_server(f"apps.flask_app:{request.param}") as srv:
        yield srv.url


def test_flask_index(flask_url):
    response = requests.get(f"{flask_url}/", timeout=10)
    assert response.status_code == 200
    assert response.text == "hello from flask"


def test_flask_route_with_converter(flask_url):
    response = httpx.get(f"{flask_url}/users/42", timeout=10)
    assert response.json() == {"id": 42, "name": "user-42"}
    assert httpx.get(f"{flask_url}/users/not-a-number", timeout=10).status_code == 404


def test_flask_json_post(flask_url):
    payload = {"list": [1, 2, 3], "text": "caf\u00e9", "nested": {"ok": True}}
    response = httpx.post(f"{flask_url}/json", json=payload, timeout=10)
    assert response.status_code == 200
    assert response.json()["received"] == payload


def test_flask_form_post(flask_url):
    response = requests.post(f"{flask_url}/form", data={"a": "1", "b": "x y"}, timeout=10)
    assert response.json() == {"fields": {"a": "1", "b": "x y"}}


def test_flask_file_upload(flask_url):
    content = os.urandom(3 * 1024 * 1024 + 7)
    response = requests.post(
        f"{flask_url}/upload",
        files={"file": ("data.bin", content, "application/octet-stream")},
        data={"note": "multipart"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.json() == {
        "filename": "data.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": "multipart",
    }


def test_flask_redirect(flask_url):
    response = requests.get(f"{flask_url}/redirect", allow_redirects=False, timeout=10)
    assert response.status_code == 302
    assert response.headers["Location"] == "/"
    followed = requests.get(f"{flask_url}/redirect", timeout=10)
    assert followed.status_code == 200 and followed.text == "hello from flask"


def test_flask_abort_404(flask_url):
    response = httpx.get(f"{flask_url}/missing", timeout=10)
    assert response.status_code == 404
    assert "Not Found" in response.text


def test_flask_method_not_allowed(flask_url):
    assert httpx.delete(f"{flask_url}/", timeout=10).status_code == 405


def test_flask_head_request(flask_url):
    response = httpx.head(f"{flask_url}/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len("hello from flask"))
    assert response.content == b""
