"""The command line: help/version, import errors, entry points and the ways to listen."""

import json
import os
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers import (
    HOST,
    TESTS_DIR,
    HTTPConn,
    assert_serving,
    console_script,
    fetch,
    free_port,
    run_cli,
    run_server,
    wait_for,
)


def test_help_exits_zero_and_lists_options():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
    for option in ("--host", "--port", "--uds", "--fd", "--root-path", "--timeout-keep-alive"):
        assert option in result.stdout, f"{option} missing from --help"


def test_version_exits_zero_and_prints_a_version():
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "pyserver" in output.lower()
    assert any(part[:1].isdigit() for part in output.replace("v", " ").split()), output


@pytest.mark.parametrize(
    ("spec", "mentioned"),
    [
        ("no_such_module_for_pyserver:app", "no_such_module_for_pyserver"),
        ("apps.basic:no_such_attribute", "no_such_attribute"),
    ],
    ids=["missing-module", "missing-attribute"],
)
def test_unimportable_app_exits_3_with_one_clear_line(spec, mentioned):
    result = run_cli(spec, "--host", HOST, "--port", str(free_port()), "--app-dir", str(TESTS_DIR))
    assert result.returncode == 3, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert mentioned in lines[0]
    assert "Traceback" not in result.stderr


def test_app_module_raising_on_import_exits_3():
    result = run_cli(
        "apps.broken_import:app",
        "--host",
        HOST,
        "--port",
        str(free_port()),
        "--app-dir",
        str(TESTS_DIR),
    )
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "fails on import on purpose" in result.stderr


def test_python_dash_m_serves_requests():
    with run_server("apps.basic:app") as srv:
        assert_serving(srv.port)


def test_console_script_serves_requests():
    script = console_script()
    assert script.exists(), f"console script not installed at {script}"
    assert run_cli("--version", command=[str(script)]).returncode == 0
    with run_server("apps.basic:app", command=[str(script)]) as srv:
        assert_serving(srv.port)


def test_root_path_sets_script_name_and_strips_path_info():
    with run_server("apps.basic:app", "--root-path", "/api") as srv:
        response = fetch(srv.port, "GET", "/api/environ/x?q=1")
        assert response.status == 200, response
        environ = json.loads(response.body)
        assert environ["SCRIPT_NAME"] == "/api"
        assert environ["PATH_INFO"] == "/environ/x"
        assert environ["QUERY_STRING"] == "q=1"


@pytest.fixture
def uds_path():
    directory = tempfile.mkdtemp(prefix="pyserver-uds-")
    yield str(Path(directory) / "server.sock")
    for leftover in Path(directory).iterdir():
        leftover.unlink()
    Path(directory).rmdir()


def test_uds_serves_raw_unix_socket_clients(uds_path):
    with run_server("apps.basic:app", uds=uds_path) as srv:
        with srv.connect() as conn:
            response = conn.request("GET", "/hello")
            assert (response.status, response.body) == (200, b"hello world")
            response = conn.request("POST", "/echo", body=b"over a unix socket")
            assert (response.status, response.body) == (200, b"over a unix socket")


def test_uds_serves_curl(uds_path):
    with run_server("apps.basic:app", uds=uds_path):
        result = subprocess.run(
            [
                "curl",
                "-sS",
                "--max-time",
                "10",
                "--unix-socket",
                uds_path,
                "http://localhost/hello",
            ],
            capture_output=True,
            timeout=20,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"hello world"


def test_bind_option_listens_on_host_and_port():
    port = free_port()
    with run_server("apps.basic:app", "-b", f"{HOST}:{port}", listen=False, port=port) as srv:
        assert_serving(srv.port)


def test_bind_option_repeated_listens_on_every_address(uds_path):
    port = free_port()
    with run_server(
        "apps.basic:app", "-b", f"{HOST}:{port}", "-b", f"unix:{uds_path}", listen=False, port=port
    ) as srv:
        assert_serving(srv.port)
        assert wait_for(lambda: os.path.exists(uds_path), 5.0)
        with HTTPConn(unix_socket(uds_path)) as conn:
            assert conn.request("GET", "/hello").body == b"hello world"


def unix_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def test_inherited_listening_fd_is_served():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, 0))
    listener.listen(128)
    listener.set_inheritable(True)
    port, fd = listener.getsockname()[1], listener.fileno()
    try:
        with run_server(
            "apps.basic:app", "--fd", str(fd), listen=False, port=port, pass_fds=(fd,)
        ) as srv:
            listener.close()  # only the server holds the listening socket now
            assert_serving(srv.port)
            assert_serving(srv.port, "/query?inherited=1", b"inherited=1")
    finally:
        listener.close()


def test_pyserver_port_environment_variable_sets_the_port():
    port = free_port()
    with run_server(
        "apps.basic:app", "--host", HOST, listen=False, port=port, env={"PYSERVER_PORT": str(port)}
    ) as srv:
        assert_serving(srv.port)


def test_keep_alive_timeout_closes_idle_connection():
    # 2 s, not 1: the second request below must come within it even on a loaded machine.
    with run_server("apps.basic:app", "--timeout-keep-alive", "2") as srv:
        with srv.connect() as conn:
            assert conn.request("GET", "/hello").status == 200
            # still open right after a response: a second request on it is answered
            assert conn.request("GET", "/hello").body == b"hello world"
            leftover = conn.wait_closed(timeout=5.0)
            assert leftover is not None, "idle keep-alive connection still open after 5s"
            assert leftover == b"", f"unexpected bytes before close: {leftover!r}"
        assert_serving(srv.port)


def test_access_log_has_a_line_per_request():
    with run_server("apps.basic:app") as srv:
        token = uuid.uuid4().hex
        assert fetch(srv.port, "GET", f"/query?{token}").status == 200
        assert srv.wait_for_log(token), srv.log_tail()
        line = next(line for line in srv.log().splitlines() if token in line)
        assert "GET" in line and "200" in line, line


def test_no_access_log_option_silences_access_lines():
    with run_server("apps.basic:app", "--no-access-log") as srv:
        token = uuid.uuid4().hex
        assert fetch(srv.port, "GET", f"/query?{token}").status == 200
        assert fetch(srv.port, "GET", "/errors?msg=marker-after-request").status == 200
        assert srv.wait_for_log("marker-after-request"), srv.log_tail()
        assert token not in srv.log()


def test_sigterm_stops_the_server_with_exit_code_zero():
    with run_server("apps.basic:app") as srv:
        assert_serving(srv.port)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(10) == 0, srv.log_tail()


def test_sigterm_lets_an_open_idle_connection_go():
    with run_server("apps.basic:app") as srv:
        conn = HTTPConn(socket.create_connection((HOST, srv.port), timeout=10))
        with conn:
            assert conn.request("GET", "/hello").status == 200
            srv.proc.send_signal(signal.SIGTERM)
            assert srv.proc.wait(10) == 0, srv.log_tail()
            assert conn.wait_closed(5.0) == b""
