"""The WSGI environ (PEP 3333) as the application sees it."""

import json
import uuid

import pytest
from helpers import HOST, chunked


def environ_of(server, target="/environ", method="GET", headers=(), body=b"", version="HTTP/1.1"):
    """The environ of one request, as returned by the /environ app, plus the client port."""
    with server.connect() as conn:
        response = conn.request(method, target, headers=headers, body=body, version=version)
        assert response.status == 200, response
        environ = json.loads(response.body)
        return environ, conn.local_port()


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_request_method(server, method):
    environ, _ = environ_of(server, method=method)
    assert environ["REQUEST_METHOD"] == method


def test_script_name_empty_by_default(server):
    environ, _ = environ_of(server, "/environ/a/b")
    assert environ.get("SCRIPT_NAME", "") == ""
    assert environ["PATH_INFO"] == "/environ/a/b"


def test_path_info_is_percent_decoded_and_latin1(server):
    environ, _ = environ_of(server, "/environ/caf%C3%A9/a%20b")
    assert environ["PATH_INFO"] == "/environ/caf\u00c3\u00a9/a b"
    assert environ["PATH_INFO"].encode("latin-1").decode("utf-8") == "/environ/caf\u00e9/a b"


def test_path_info_decodes_encoded_slash(server):
    environ, _ = environ_of(server, "/environ/a%2Fb")
    assert environ["PATH_INFO"] == "/environ/a/b"


def test_query_string_is_raw(server):
    environ, _ = environ_of(server, "/environ?a=%20b&c=d+e&caf%C3%A9=1&empty=")
    assert environ["QUERY_STRING"] == "a=%20b&c=d+e&caf%C3%A9=1&empty="
    assert environ["PATH_INFO"] == "/environ"


def test_query_string_empty_when_absent(server):
    environ, _ = environ_of(server, "/environ")
    assert environ.get("QUERY_STRING", "") == ""


def test_raw_uri_is_the_request_target(server):
    environ, _ = environ_of(server, "/environ/caf%C3%A9?x=%20y")
    assert environ["RAW_URI"] == "/environ/caf%C3%A9?x=%20y"


def test_absolute_form_target_is_split_into_path_and_query(server):
    environ, _ = environ_of(server, f"http://{HOST}:{server.port}/environ/abs?y=1")
    assert environ["PATH_INFO"] == "/environ/abs"
    assert environ["QUERY_STRING"] == "y=1"


def test_content_type_and_length_absent_without_body(server):
    environ, _ = environ_of(server)
    assert environ.get("CONTENT_TYPE", "") == ""
    assert environ.get("CONTENT_LENGTH", "") == ""
    assert "HTTP_CONTENT_TYPE" not in environ
    assert "HTTP_CONTENT_LENGTH" not in environ


def test_content_type_and_length_from_request(server):
    environ, _ = environ_of(
        server,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        body=b"a=1&b",
    )
    assert environ["CONTENT_TYPE"] == "application/x-www-form-urlencoded"
    assert environ["CONTENT_LENGTH"] == "5"
    assert "HTTP_CONTENT_TYPE" not in environ
    assert "HTTP_CONTENT_LENGTH" not in environ


def test_chunked_request_has_no_content_length(server):
    headers = {"Transfer-Encoding": "chunked"}
    environ, _ = environ_of(server, method="POST", headers=headers, body=chunked(b"abc"))
    assert environ.get("CONTENT_LENGTH", "") == ""
    assert "HTTP_CONTENT_LENGTH" not in environ


def test_server_name_and_port(server):
    environ, _ = environ_of(server)
    assert isinstance(environ["SERVER_NAME"], str) and environ["SERVER_NAME"]
    assert environ["SERVER_PORT"] == str(server.port)


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_server_protocol_is_request_version(server, version):
    environ, _ = environ_of(server, version=version)
    assert environ["SERVER_PROTOCOL"] == version


def test_remote_addr_and_port_are_the_client(server):
    environ, client_port = environ_of(server)
    assert environ["REMOTE_ADDR"] == "127.0.0.1"
    assert environ["REMOTE_PORT"] == str(client_port)


def test_headers_become_http_variables(server):
    environ, _ = environ_of(server, headers={"X-Custom-Header": "v1", "Accept": "text/html"})
    assert environ["HTTP_X_CUSTOM_HEADER"] == "v1"
    assert environ["HTTP_ACCEPT"] == "text/html"
    assert environ["HTTP_HOST"] == HOST


def test_repeated_headers_joined_with_comma(server):
    headers = [("X-Multi", "a"), ("X-Other", "o"), ("X-Multi", "b")]
    environ, _ = environ_of(server, headers=headers)
    assert environ["HTTP_X_MULTI"] == "a, b"
    assert environ["HTTP_X_OTHER"] == "o"


def test_header_names_with_underscore_are_dropped(server):
    headers = [("X_Forwarded_For", "evil"), ("X-Forwarded-For", "good"), ("X_Only_Underscore", "1")]
    environ, _ = environ_of(server, headers=headers)
    assert environ["HTTP_X_FORWARDED_FOR"] == "good"
    assert "HTTP_X_ONLY_UNDERSCORE" not in environ
    assert "evil" not in json.dumps(environ)


def test_header_values_keep_inner_whitespace_and_strip_ows(server):
    environ, _ = environ_of(server, headers=[("X-Spaces", "  a  b\t ")])
    assert environ["HTTP_X_SPACES"] == "a  b"


def test_cgi_variables_are_str(server):
    environ, _ = environ_of(server, "/environ?q=1", headers={"X-A": "b"})
    for key, value in environ.items():
        if "." not in key:
            assert isinstance(value, str), (key, value)


def test_wsgi_variables(server):
    environ, _ = environ_of(server)
    assert environ["wsgi.version"] == {"__tuple__": [1, 0]}
    assert environ["wsgi.url_scheme"] == "http"
    assert environ["wsgi.multithread"] is False
    assert isinstance(environ["wsgi.multiprocess"], bool)
    assert environ["wsgi.run_once"] is False
    assert "__type__" in environ["wsgi.input"]
    assert "__type__" in environ["wsgi.errors"]
    assert environ["wsgi.file_wrapper"]["callable"] is True


def test_environ_does_not_leak_between_requests(server):
    with server.connect() as conn:
        first = json.loads(
            conn.request("POST", "/environ?first", headers={"X-Leak": "1"}, body=b"abc").body
        )
        second = json.loads(conn.request("GET", "/environ").body)
    assert first["HTTP_X_LEAK"] == "1"
    assert "HTTP_X_LEAK" not in second
    assert second.get("CONTENT_LENGTH", "") == ""
    assert second.get("QUERY_STRING", "") == ""
    assert second["REQUEST_METHOD"] == "GET"


def test_wsgi_errors_write_reaches_server_log(server):
    token = f"wsgi-errors-{uuid.uuid4().hex}"
    with server.connect() as conn:
        assert conn.request("GET", f"/errors?msg={token}").status == 200
    assert server.wait_for_log(token, 5.0), f"{token} not in server log:\n{server.log_tail()}"
