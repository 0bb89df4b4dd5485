"""Bottle through pyserver: routes, JSON, form, static files (wsgi.file_wrapper), ranges."""

import hashlib
import os
import subprocess

import httpx
import pytest
import requests
from helpers import run_server


@pytest.fixture(scope="module")
def static_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    (root / "hello.txt").write_text("static hello\n")
    (root / "big.bin").write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    return root


@pytest.fixture(scope="module", params=["application", "app"], ids=["validated", "raw"])
def bottle_url(request, static_root):
    """Both the validated app and the bare one (whose file_wrapper the server sees)."""
    spec = f"apps.bottle_app:{request.param}"
    with run_server(spec, env={"BOTTLE_STATIC_ROOT": str(static_root)}) as srv:
        yield srv.url


def test_bottle_route(bottle_url):
    response = requests.get(f"{bottle_url}/hello/world", timeout=10)
    assert response.status_code == 200
    assert response.text == "hello world"


def test_bottle_json(bottle_url):
    response = httpx.get(f"{bottle_url}/json?x=1", timeout=10)
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"framework": "bottle", "query": {"x": "1"}}


def test_bottle_form(bottle_url):
    response = requests.post(f"{bottle_url}/form", data={"k": "v"}, timeout=10)
    assert response.json() == {"fields": {"k": "v"}}


def test_bottle_404(bottle_url):
    assert httpx.get(f"{bottle_url}/nope", timeout=10).status_code == 404


def test_bottle_static_file(bottle_url, static_root):
    response = httpx.get(f"{bottle_url}/static/hello.txt", timeout=10)
    assert response.status_code == 200
    assert response.text == "static hello\n"
    assert response.headers["content-length"] == "13"


def test_bottle_big_static_file_matches_hash(bottle_url, static_root):
    expected = (static_root / "big.bin").read_bytes()
    response = requests.get(f"{bottle_url}/static/big.bin", timeout=30)
    assert response.status_code == 200
    assert int(response.headers["Content-Length"]) == len(expected)
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(expected).digest()


def test_bottle_static_range_request(bottle_url, static_root):
    expected = (static_root / "big.bin").read_bytes()
    response = httpx.get(
        f"{bottle_url}/static/big.bin", headers={"Range": "bytes=1000-1999"}, timeout=10
    )
    assert response.status_code == 206
    assert response.content == expected[1000:2000]


def test_bottle_static_with_curl(bottle_url, static_root):
    result = subprocess.run(
        ["curl", "-sS", "--max-time", "20", f"{bottle_url}/static/big.bin"],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (static_root / "big.bin").read_bytes()


def test_bottle_static_missing_is_404(bottle_url):
    assert httpx.get(f"{bottle_url}/static/missing.txt", timeout=10).status_code == 404
