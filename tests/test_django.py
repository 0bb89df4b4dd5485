"""Django through pyserver: JSON view, form POST, 404, streaming response, view error."""

import httpx
import pytest
import requests
from helpers import run_server


@pytest.fixture(scope="module")
def django_url():
    with run_server("apps.djangoproj.wsgi:application") as srv:
        yield srv.url


def test_django_json_view(django_url):
    response = httpx.get(f"{django_url}/json/?a=1&b=two", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "framework": "django",
        "method": "GET",
        "path": "/json/",
        "script_name": "",
        "query": {"a": "1", "b": "two"},
    }


def test_django_form_post(django_url):
    response = requests.post(
        f"{django_url}/form/", data={"name": "caf\u00e9", "n": "42"}, timeout=10
    )
    assert response.status_code == 200
    assert response.json() == {
        "fields": {"name": "caf\u00e9", "n": "42"},
        "content_type": "application/x-www-form-urlencoded",
    }


def test_django_form_rejects_get(django_url):
    assert httpx.get(f"{django_url}/form/", timeout=10).status_code == 405


def test_django_unknown_url_is_404(django_url):
    response = httpx.get(f"{django_url}/no/such/page/", timeout=10)
    assert response.status_code == 404
    assert b"Not Found" in response.content


def test_django_append_slash_redirects(django_url):
    response = httpx.get(f"{django_url}/json", timeout=10)
    assert response.status_code == 301
    assert response.headers["location"] == "/json/"


def test_django_streaming_response(django_url):
    with httpx.stream("GET", f"{django_url}/stream/?n=50", timeout=10) as response:
        assert response.status_code == 200
        assert response.headers.get("transfer-encoding") == "chunked"
        body = b"".join(response.iter_bytes())
    assert body == b"".join(f"chunk-{i}\n".encode() for i in range(50))


def test_django_view_exception_is_500_and_server_keeps_serving(django_url):
    assert httpx.get(f"{django_url}/boom/", timeout=10).status_code == 500
    assert httpx.get(f"{django_url}/json/", timeout=10).status_code == 200


def test_django_keep_alive_client_session(django_url):
    with httpx.Client(base_url=django_url, timeout=10) as client:
        for index in range(20):
            assert client.get(f"/json/?i={index}").json()["query"] == {"i": str(index)}
