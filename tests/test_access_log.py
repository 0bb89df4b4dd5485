"""The access log: one line per request, the same from WSGI and ASGI over TCP, IPv6 and unix
sockets, and under the gunicorn worker.

The default line is `CLIENT - USER [TIME] "METHOD TARGET HTTP/x.y" STATUS BYTES SECONDS`, where
CLIENT is `address:port`, `[address]:port` for IPv6 and `-` over a unix socket.
`--access-logformat` takes gunicorn's atoms, formatted in C; `--access-log-json` (or the format
`json`) writes one JSON object per request, whose fields a logging formatter also receives as
record attributes.
"""

import base64
import json
import re
import socket
import textwrap

import pytest
from helpers import HTTPConn, free_port, run_cli, run_server, stop_server, wait_for
from wsclient import handshake

APPS = {"wsgi": "apps.basic:app", "asgi": "apps.asgi_basic:app"}
ALOG_APPS = {"wsgi": "apps.alog_apps:wsgi", "asgi": "apps.alog_apps:asgi"}
REQUESTS = [("GET", "/hello?x=1"), ("POST", "/missing/a%20b")]
BODY = b"access log body"

TIME = r"\[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\]"
SECONDS = r"\d+\.\d{6}"
PREFIX = re.compile(r"^[A-Z]+:\s+")


def ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def connect_tcp(family, host, port) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect((host, port))
    return sock


def access_lines(srv, count, marker='" '):
    """The last `count` access lines of the server's log (lines with `marker` that are not
    the error log's), without the default format's prefix (a format given is written bare)."""
    lines = []

    def enough():
        lines[:] = [
            PREFIX.sub("", line)
            for line in srv.log().splitlines()
            if marker in line and not line.startswith(("[", " ", "Traceback"))
        ]
        return len(lines) >= count

    assert wait_for(enough), srv.log_tail()
    return lines[-count:]


def serve_and_log(spec, transport, tmp_path, *args):
    """Sends REQUESTS on one connection; returns (access lines, the client as the log should
    show it, the body lengths)."""
    if transport == "unix":
        path = str(tmp_path / f"{spec.split('.')[1]}.sock")
        with run_server(spec, *args, uds=path) as srv:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(path)
            return (*send_all(srv, sock), "-")
    if transport == "ipv6":
        port = free_port()

        def ready():
            try:
                connect_tcp(socket.AF_INET6, "::1", port).close()
                return True
            except OSError:
                return False

        with run_server(
            spec, "--host", "::1", "--port", str(port), *args, listen=False, port=port, ready=ready
        ) as srv:
            sock = connect_tcp(socket.AF_INET6, "::1", port)
            client = f"[::1]:{sock.getsockname()[1]}"
            return (*send_all(srv, sock), client)
    with run_server(spec, *args) as srv:
        sock = connect_tcp(socket.AF_INET, "127.0.0.1", srv.port)
        client = f"127.0.0.1:{sock.getsockname()[1]}"
        return (*send_all(srv, sock), client)


def send_all(srv, sock):
    with HTTPConn(sock) as conn:
        responses = [conn.request(method, target) for method, target in REQUESTS]
    assert [r.status for r in responses] == [200, 404]
    return access_lines(srv, len(REQUESTS)), [len(r.body) for r in responses]


@pytest.mark.parametrize("transport", ["tcp", "ipv6", "unix"])
def test_wsgi_and_asgi_write_the_same_default_line(transport, tmp_path):
    if transport == "ipv6" and not ipv6_available():
        pytest.skip("no IPv6 loopback")
    seen = {}
    for name, spec in APPS.items():
        lines, sizes, client = serve_and_log(spec, transport, tmp_path)
        expected = [
            rf'{re.escape(client)} - - {TIME} "GET /hello\?x=1 HTTP/1\.1" 200 {sizes[0]} '
            rf"{SECONDS}",
            rf'{re.escape(client)} - - {TIME} "POST /missing/a%20b HTTP/1\.1" 404 {sizes[1]} '
            rf"{SECONDS}",
        ]
        for line, pattern in zip(lines, expected, strict=True):
            assert re.fullmatch(pattern, line), (name, line)
        seen[name] = [re.sub(rf"{TIME}|{SECONDS}$", "X", line) for line in lines]
        seen[name] = [line.replace(client, "CLIENT") for line in seen[name]]
    # The two apps answer the same sizes, so the lines are the same apart from the client.
    assert seen["wsgi"] == seen["asgi"]


# ---- every atom ----

ATOMS = "h l u t r m U q H s B b f a T D M L p".split()
EXTRA = ["{x-odd}i", "{X-ODD}i", "{x-out}o", "{content-type}o", "{missing}i", "{missing}o"]
ENV = ["{remote_addr}e", "{remote_port}e", "{path_info}e", "{raw_uri}e", "{http_x_odd}e"]
ALL_ATOMS = [*ATOMS, *EXTRA, *ENV, "client"]
EVERY_ATOM = "|".join(f"%({atom})s" for atom in ALL_ATOMS)
ODD_UA = b'ua "q" \\ \xff\te'


def odd_request(port_host, target=b"/atoms/p%20q?x=1&y=%41"):
    auth = base64.b64encode(b"bob:secret")
    return (
        b"GET " + target + b" HTTP/1.1\r\nHost: " + port_host + b"\r\n"
        b"User-Agent: " + ODD_UA + b"\r\n"
        b"Referer: http://ref/\r\n"
        b"Authorization: Basic " + auth + b"\r\n"
        b"X-Odd: a\x80b\r\n\r\n"
    )


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_every_atom(interface):
    with run_server(ALOG_APPS[interface], "--access-logformat", EVERY_ATOM) as srv:
        with srv.connect() as conn:
            conn.send(odd_request(f"127.0.0.1:{srv.port}".encode()))
            response = conn.read_response()
            port = conn.local_port()
        assert response.status == 200 and response.body == BODY
        (line,) = access_lines(srv, 1, marker="|")
    fields = dict(zip(ALL_ATOMS, line.split("|"), strict=True))
    ua = r"ua \x22q\x22 \x5c \xff\x09e"
    assert fields == {
        **fields,  # checked below: t and the durations
        "h": "127.0.0.1",
        "l": "-",
        "u": "bob",
        "r": "GET /atoms/p%20q?x=1&y=%41 HTTP/1.1",
        "m": "GET",
        "U": "/atoms/p q",
        "q": "x=1&y=%41",
        "H": "HTTP/1.1",
        "s": "200",
        "B": str(len(BODY)),
        "b": str(len(BODY)),
        "f": "http://ref/",
        "a": ua,
        "p": f"<{srv.pid}>",
        "{x-odd}i": r"a\x80b",
        "{X-ODD}i": r"a\x80b",
        "{x-out}o": r"o\xe9",
        "{content-type}o": "text/plain",
        "{missing}i": "-",
        "{missing}o": "-",
        "{remote_addr}e": "127.0.0.1",
        "{remote_port}e": str(port),
        "{path_info}e": "/atoms/p q",
        "{raw_uri}e": "/atoms/p%20q?x=1&y=%41",
        "{http_x_odd}e": r"a\x80b",
        "client": f"127.0.0.1:{port}",
    }
    assert re.fullmatch(TIME, fields["t"]), fields["t"]
    # One clock reading per request end: the units agree; the app slept 50 ms.
    micros = int(fields["D"])
    assert 50_000 <= micros < 10_000_000, fields
    assert int(fields["M"]) == micros // 1000
    assert int(fields["T"]) == micros // 1_000_000
    assert fields["L"] == f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_a_request_without_body_auth_or_headers(interface):
    fmt = "%(u)s|%(b)s|%(B)s|%(f)s|%(a)s|%({x-out}o)s|%(q)s|%(s)s"
    with run_server(ALOG_APPS[interface], "--access-logformat", fmt) as srv:
        with srv.connect() as conn:
            conn.send(b"HEAD /nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n")
            assert conn.read_response("HEAD").status == 404
        (line,) = access_lines(srv, 1, marker="|")
    # HEAD: the application's body is counted (gunicorn counts it too), not sent.
    assert line == f"-|{len(b'nothing here')}|{len(b'nothing here')}|-|-|-||404"


# ---- JSON ----

JSON_FIELDS = [
    "time",
    "client",
    "remote_addr",
    "remote_port",
    "user",
    "request",
    "method",
    "path",
    "query",
    "protocol",
    "status",
    "bytes",
    "duration",
    "referer",
    "user_agent",
    "pid",
]


def raw_json_lines(srv, count):
    """The last `count` JSON access lines: written bare, one object a line."""
    lines = []

    def enough():
        lines[:] = [line for line in srv.log().splitlines() if line.startswith('{"time": ')]
        return len(lines) >= count

    assert wait_for(enough), srv.log_tail()
    return lines[-count:]


def json_lines(srv, count):
    return [json.loads(line) for line in raw_json_lines(srv, count)]


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
@pytest.mark.parametrize("option", [("--access-log-json",), ("--access-logformat", "json")])
def test_json_lines_parse_with_every_byte_escaped(interface, option):
    # Every byte a field value may carry: obs-text, quotes, backslash, tab.
    target = b"/atoms/%22q%5c%FF?%22=%7F"
    with run_server(ALOG_APPS[interface], *option) as srv:
        with srv.connect() as conn:
            conn.send(odd_request(f"127.0.0.1:{srv.port}".encode(), target))
            assert conn.read_response().status == 200
            conn.send(b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.read_response().status == 404
            port = conn.local_port()
        raw = raw_json_lines(srv, 2)
        first, second = json_lines(srv, 2)
    assert all(line.isascii() for line in raw)
    assert list(first) == JSON_FIELDS
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", first["time"])
    assert 0.05 <= first.pop("duration") < 10
    assert first == {
        **first,
        "client": f"127.0.0.1:{port}",
        "remote_addr": "127.0.0.1",
        "remote_port": port,
        "user": "bob",
        "request": "GET /atoms/%22q%5c%FF?%22=%7F HTTP/1.1",
        "method": "GET",
        "path": '/atoms/"q\\\xff',
        "query": "%22=%7F",
        "protocol": "HTTP/1.1",
        "status": 200,
        "bytes": len(BODY),
        "referer": "http://ref/",
        "user_agent": ODD_UA.decode("latin-1"),
        "pid": srv.pid,
    }
    assert second["user"] is None and second["referer"] is None and second["status"] == 404
    assert second["query"] == "" and second["user_agent"] is None


def log_config(tmp_path, formatter):
    path = tmp_path / "log.json"
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"access": formatter},
        "handlers": {
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "stream": "ext://sys.stdout",
            }
        },
        "loggers": {"pyserver.access": {"handlers": ["access"], "propagate": False}},
    }
    path.write_text(json.dumps(config))
    return str(path)


def python_json_logger_formatter():
    try:
        import pythonjsonlogger.json  # noqa: F401 - python-json-logger 3+

        return "pythonjsonlogger.json.JsonFormatter"
    except ImportError:
        pytest.importorskip("pythonjsonlogger.jsonlogger")
        return "pythonjsonlogger.jsonlogger.JsonFormatter"


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_python_json_logger_receives_the_fields(interface, tmp_path):
    formatter = {"()": python_json_logger_formatter(), "fmt": "%(levelname)s %(message)s"}
    config = log_config(tmp_path, formatter)
    with run_server(ALOG_APPS[interface], "--access-log-json", "--log-config", config) as srv:
        with srv.connect() as conn:
            conn.send(odd_request(b"x"))
            assert conn.read_response().status == 200
            port = conn.local_port()

        def logged():
            return [
                json.loads(line)
                for line in srv.log().splitlines()
                if line.startswith("{") and '"levelname"' in line
            ]

        assert wait_for(logged), srv.log_tail()
        (record,) = logged()
    # The fields are the record's own attributes, so the formatter writes them at the top.
    assert record["levelname"] == "INFO"
    assert record["method"] == "GET" and record["status"] == 200
    assert record["remote_port"] == port and record["user"] == "bob"
    assert record["user_agent"] == ODD_UA.decode("latin-1")
    assert record["path"] == "/atoms/p q" and record["bytes"] == len(BODY)
    # The fields are encoded once: the message is not the JSON line again as a string.
    assert record.get("message", "") == "", record["message"]


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_a_message_handler_of_ones_own_writes_the_json_line(interface, tmp_path):
    config = log_config(tmp_path, {"format": "ACCESS %(message)s"})
    with run_server(ALOG_APPS[interface], "--access-log-json", "--log-config", config) as srv:
        with srv.connect() as conn:
            conn.send(odd_request(b"x"))
            assert conn.read_response().status == 200
            port = conn.local_port()
        assert srv.wait_for_log("ACCESS {"), srv.log_tail()
        (line,) = [line for line in srv.log().splitlines() if line.startswith("ACCESS ")]
    fields = json.loads(line.removeprefix("ACCESS "))
    assert fields["remote_port"] == port and fields["method"] == "GET"


def test_a_stdlib_format_reads_the_fields_as_record_attributes(tmp_path):
    fmt = "ACCESS %(method)s %(path)s %(status)d %(bytes)d %(duration).3f %(user)s"
    config = log_config(tmp_path, {"format": fmt})
    with run_server(ALOG_APPS["wsgi"], "--access-log-json", "--log-config", config) as srv:
        with srv.connect() as conn:
            conn.send(odd_request(b"x"))
            assert conn.read_response().status == 200
        assert srv.wait_for_log("ACCESS "), srv.log_tail()
        (line,) = [line for line in srv.log().splitlines() if line.startswith("ACCESS ")]
    assert re.fullmatch(rf"ACCESS GET /atoms/p q 200 {len(BODY)} \d+\.\d{{3}} bob", line), line


# ---- off, errors, config files ----


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
@pytest.mark.parametrize(
    "option", [("--no-access-log",), ("--log-level", "warning")], ids=["off", "warning"]
)
def test_no_access_lines_when_the_log_is_off(interface, option):
    with run_server(ALOG_APPS[interface], "--access-logformat", "ACCESS %(r)s", *option) as srv:
        with srv.connect() as conn:
            for _ in range(3):
                conn.send(b"GET /atoms HTTP/1.1\r\nHost: x\r\n\r\n")
                assert conn.read_response().status == 200
            # A refused request is not logged either.
            conn.send(b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n")
            assert conn.read_response().status == 400
        # The log is complete once the server has exited cleanly.
        assert stop_server(srv) is None and srv.proc.returncode == 0
        log = srv.log()
    assert "ACCESS" not in log, log


@pytest.mark.parametrize(
    "fmt, message",
    [
        ("%(h)s %(zz)s", "unknown atom %(zz)s"),
        ("%(h)d", "%(h) must be followed by 's'"),
        ("50%", "a '%' at offset 2"),
        ("%({secret}e)s", "%({secret}e)s: not a request variable"),
    ],
)
def test_a_bad_format_is_a_cli_error(fmt, message):
    result = run_cli("apps.basic:app", "--access-logformat", fmt)
    assert result.returncode == 2, result
    assert f"pyserver: error: access log format: {message}" in result.stderr


def test_the_environment_sets_the_format():
    result = run_cli("apps.basic:app", env={"PYSERVER_ACCESS_LOG_FORMAT": "%(nope)s"})
    assert result.returncode == 2 and "unknown atom %(nope)s" in result.stderr, result
    with run_server(ALOG_APPS["asgi"], env={"PYSERVER_ACCESS_LOG_JSON": "1"}) as srv:
        with srv.connect() as conn:
            assert conn.request("GET", "/x?q").status == 404
        (line,) = json_lines(srv, 1)
    assert line["path"] == "/x" and line["query"] == "q" and line["status"] == 404


def test_json_and_another_format_is_a_cli_error():
    result = run_cli("apps.basic:app", "--access-log-json", "--access-logformat", "%(h)s")
    assert result.returncode == 2, result
    assert "--access-log-json and --access-logformat: give only one" in result.stderr


def test_the_config_file_and_pyproject_set_the_format(tmp_path):
    conf = tmp_path / "conf.py"
    conf.write_text('access_log_format = "FROMFILE %(m)s %(U)s %(s)s"\n')
    with run_server(ALOG_APPS["wsgi"], "-c", str(conf)) as srv:
        with srv.connect() as conn:
            conn.request("GET", "/atoms/a")
        assert access_lines(srv, 1, marker="FROMFILE") == ["FROMFILE GET /atoms/a 200"]
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [tool.pyserver]
        access-log-format = "FROMTOML %(m)s %(s)s"
        """)
    )
    with run_server(ALOG_APPS["wsgi"], cwd=tmp_path) as srv:
        with srv.connect() as conn:
            conn.request("GET", "/nope")
        assert access_lines(srv, 1, marker="FROMTOML") == ["FROMTOML GET 404"]
    conf.write_text('access_log_format = "%(nope)s"\n')
    result = run_cli("apps.basic:app", "-c", str(conf))
    assert result.returncode == 2 and "unknown atom %(nope)s" in result.stderr, result


# ---- WebSocket handshakes ----


def test_websocket_handshakes_are_logged(tmp_path):
    with run_server(ALOG_APPS["asgi"]) as srv:
        sock, status, _, _ = handshake(srv.port, "/ws", headers={"User-Agent": "wsclient"})
        client = f"127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        assert status == 101
        sock, status, _, _ = handshake(srv.port, "/ws-deny")
        denied = f"127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        assert status == 403
        lines = access_lines(srv, 2)
    assert re.fullmatch(rf'{client} - - {TIME} "GET /ws HTTP/1\.1" 101 0 {SECONDS}', lines[0])
    assert re.fullmatch(
        rf'{denied} - - {TIME} "GET /ws-deny HTTP/1\.1" 403 \d+ {SECONDS}', lines[1]
    )


# ---- the gunicorn worker ----

SAME_FORMAT = '%(h)s %(u)s "%(r)s" %(s)s %(B)s "%(a)s" %({x-out}o)s'


def gunicorn_lines(app, transport, tmp_path, fmt):
    from test_gunicorn import gunicorn

    binds = [f"unix:{tmp_path / 'g.sock'}"] if transport == "unix" else None
    args = ("--access-logfile", "-", "--access-logformat", fmt)
    with gunicorn(app, *args, workers=1, binds=binds) as g:
        if transport == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(str(tmp_path / "g.sock"))
        else:
            sock = connect_tcp(socket.AF_INET, "127.0.0.1", g.port)
        with HTTPConn(sock) as conn:
            conn.send(odd_request(b"x"))
            assert conn.read_response().status == 200
        g.wait_log('"GET /atoms')
        return [line for line in g.log().splitlines() if '"GET /atoms' in line]


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_the_gunicorn_worker_writes_the_same_line_in_c(transport, tmp_path):
    pytest.importorskip("gunicorn")
    lines = {}
    for name, app in ALOG_APPS.items():
        lines[name] = gunicorn_lines(app, transport, tmp_path, SAME_FORMAT)
        with (
            run_server(app, "--access-logformat", SAME_FORMAT, uds=str(tmp_path / "p.sock"))
            if transport == "unix"
            else run_server(app, "--access-logformat", SAME_FORMAT)
        ) as srv:
            with srv.connect() as conn:
                conn.send(odd_request(b"x"))
                assert conn.read_response().status == 200
            lines[name + " pyserver"] = access_lines(srv, 1, marker='"GET /atoms')
    host = "-" if transport == "unix" else "127.0.0.1"
    # Formatted by the core: the byte above 0x7e and the quotes are escaped (gunicorn's own
    # Logger would write them as they are).
    expected = (
        f'{host} bob "GET /atoms/p%20q?x=1&y=%41 HTTP/1.1" 200 {len(BODY)} '
        r'"ua \x22q\x22 \x5c \xff\x09e" o\xe9'
    )
    assert lines == {key: [expected] for key in lines}


def test_a_format_the_core_does_not_know_stays_with_gunicorns_logger(tmp_path):
    pytest.importorskip("gunicorn")
    lines = gunicorn_lines(ALOG_APPS["wsgi"], "tcp", tmp_path, '%(h)s "%(r)s" %(zz)s')
    # gunicorn's Logger writes '-' for an atom it does not have.
    assert lines == ['127.0.0.1 "GET /atoms/p%20q?x=1&y=%41 HTTP/1.1" -'], lines
