"""What a new user of gunicorn or uvicorn trips over, through the real command line, real
clients and the real log output: access lines for every answer, short usage errors, access
logs written as configured, gunicorn config files, start-up errors that say what and where.
"""

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys

import pytest
from helpers import ROOT, free_port, run_cli, run_server, wait_for

ASGI = "apps.newuser_apps:asgi"
WSGI = "apps.newuser_apps:wsgi"


def get(srv, target):
    conn = srv.connect()
    try:
        return conn.request("GET", target)
    finally:
        conn.close()


# ---- every answer gets an access line, whichever interface ----------------------------


@pytest.mark.parametrize("path", ["/raise", "/silent"])
@pytest.mark.parametrize("json_lines", [False, True])
def test_asgi_500_has_an_access_line(path, json_lines):
    args = ["--access-log-json"] if json_lines else []
    with run_server(ASGI, *args) as srv:
        assert get(srv, path).status == 500
        assert get(srv, "/after").status == 200  # the line after it is there: so would it be
        assert srv.wait_for_log("/after"), srv.log_tail()
        log = srv.log()
    if json_lines:
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert [(r["path"], r["status"]) for r in records] == [(path, 500), ("/after", 200)]
    else:
        assert f'"GET {path} HTTP/1.1" 500 ' in log, log
    # The error line names the request, whichever way the application failed.
    assert f"(GET {path})" in log, log


# ---- usage errors: two lines, and a suggestion for a mistyped option -----------------


@pytest.mark.parametrize(
    "args, env, error",
    [
        (["--wokers", "4", ASGI], {}, "unrecognized arguments: --wokers"),
        (["--port", "abc", ASGI], {}, "argument --port: expected an integer, got 'abc'"),
        ([ASGI], {"PYSERVER_PORT": "x"}, "environment variable PYSERVER_PORT"),
        (["-c", "nosuch.conf.py", ASGI], {}, "config file nosuch.conf.py: no such file"),
    ],
)
def test_usage_error_is_two_lines(args, env, error):
    result = run_cli(*args, env=env)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "usage: pyserver [OPTIONS] APP", result.stderr
    assert lines[1].startswith("pyserver: error: ") and error in lines[1], result.stderr
    assert len(lines) <= 3, result.stderr
    if args[0] == "--wokers":
        assert lines[2] == "Did you mean '--workers'?"


def test_usage_error_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pyserver]\nwokers = 2\n")
    result = run_cli(ASGI, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[:2] == [
        "usage: pyserver [OPTIONS] APP",
        "pyserver: error: pyproject.toml [tool.pyserver]: wokers: unknown option",
    ], result.stderr


def test_hidden_options_are_in_help():
    out = run_cli("--help").stdout
    assert "--timeout-request-header SECONDS" in out
    assert "--limit-connections N" in out


def test_module_alone_means_module_application(tmp_path):
    (tmp_path / "mysite").mkdir()
    (tmp_path / "mysite" / "__init__.py").write_text("")
    (tmp_path / "mysite" / "wsgi.py").write_text(
        "def application(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Length', '4')])\n"
        "    return [b'site']\n"
    )
    with run_server("mysite.wsgi", "--app-dir", str(tmp_path)) as srv:
        assert get(srv, "/").body == b"site"
        assert "Application mysite.wsgi:application: WSGI" in srv.log()


# ---- setup.py: Linux only, and every missing library in one message ------------------


def run_setup(code, env=None):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_names_every_missing_library():
    # pkg-config finds nothing: OpenSSL and nghttp2 are then missing (the others are found
    # by their headers), and llhttp too where Debian 12's node-llhttp sources are absent
    # (Debian 13 has llhttp as a library, which only pkg-config finds); all are named at
    # once with one install line.
    code = "import sys, runpy; sys.argv = ['setup.py', 'build_ext']; runpy.run_path('setup.py')"
    result = run_setup(code, env={"PKG_CONFIG_LIBDIR": "/nonexistent", "PKG_CONFIG_PATH": ""})
    llhttp_sources = all(
        os.path.exists(os.path.join("/usr/share/llhttp", name))
        for name in ("llhttp.c", "api.c", "http.c")
    )
    count = 2 if llhttp_sources else 3
    assert result.returncode == 1
    assert f"pyserver needs {count} more system libraries to build:" in result.stderr, result.stderr
    assert "OpenSSL 3" in result.stderr and "nghttp2" in result.stderr
    assert ("llhttp (" in result.stderr) == (not llhttp_sources)
    install = "install them with: apt-get install "
    packages = result.stderr.split(install, 1)[1].split("\n", 1)[0].split()
    assert packages[-2:] == ["libssl-dev", "libnghttp2-dev"] and len(packages) == count


def test_setup_refuses_other_platforms():
    code = (
        "import sys, runpy; sys.platform = 'darwin'; sys.argv = ['setup.py', 'build_ext'];"
        " runpy.run_path('setup.py')"
    )
    result = run_setup(code)
    assert result.returncode == 1
    assert result.stderr.strip() == "error: pyserver runs on Linux only; this is darwin"


# ---- docs/configuration.md lists every option, in its tables -------------------------


def test_configuration_page_lists_every_option():
    from pyserver.cli import build_parser

    text = (ROOT / "docs" / "configuration.md").read_text()
    parser, _ = build_parser()
    flags = {
        flag
        for action in parser._actions
        if action.help != argparse.SUPPRESS and action.dest not in ("help", "version")
        for flag in action.option_strings
        if flag.startswith("--") and not flag.startswith("--no-")
    }
    missing = sorted(f for f in flags if f"`{f}" not in text and f"/{f}" not in text)
    assert missing == [], missing
    # A table row belongs to a table: it follows a header row or another row.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i and not lines[i - 1].startswith("|"):
            assert lines[i + 1].startswith("| ---"), f"orphan table row, line {i + 1}: {line}"


# ---- access lines as configured, with the request's fields on every record -----------


@pytest.mark.parametrize("app", [ASGI, WSGI])
def test_custom_access_format_is_written_as_given(app, tmp_path):
    logfile = tmp_path / "access.log"
    fmt = "%(h)s %(m)s %(U)s %(s)s"
    with run_server(app, "--access-logformat", fmt) as srv:
        get(srv, "/one")
        assert srv.wait_for_log("GET /one 200"), srv.log_tail()
        assert "127.0.0.1 GET /one 200\n" in srv.log()
        assert "INFO:" not in srv.log()
    with run_server(app, "--access-logformat", fmt, "--access-logfile", str(logfile)) as srv:
        get(srv, "/two")
        assert wait_for(lambda: logfile.exists() and logfile.read_text()), srv.log_tail()
    assert logfile.read_text() == "127.0.0.1 GET /two 200\n"


@pytest.mark.parametrize("app", [ASGI, WSGI])
def test_access_record_has_the_fields_whatever_the_format(app, tmp_path):
    config = tmp_path / "log.json"
    config.write_text(
        json.dumps(
            {
                "version": 1,
                "disable_existing_loggers": False,
                "formatters": {"f": {"format": "FIELDS %(method)s %(path)s %(status)d"}},
                "handlers": {
                    "h": {
                        "class": "logging.StreamHandler",
                        "formatter": "f",
                        "stream": "ext://sys.stdout",
                    }
                },
                "loggers": {"pyserver.access": {"handlers": ["h"], "propagate": False}},
            }
        )
    )
    with run_server(app, "--log-config", str(config)) as srv:
        get(srv, "/f")
        assert srv.wait_for_log("FIELDS "), srv.log_tail()
        assert "FIELDS GET /f 200\n" in srv.log()
        assert "Logging error" not in srv.log()


# ---- start-up errors: the traceback of the application's error, checks before import ---


def test_import_error_shows_the_traceback_after_the_summary(tmp_path):
    (tmp_path / "deep.py").write_text("def settings():\n    return 1 / 0\n")
    (tmp_path / "site_app.py").write_text("import deep\n\ndeep.settings()\napplication = None\n")
    result = run_cli("site_app", "--port", "0", "--app-dir", str(tmp_path))
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines[0].startswith('pyserver: error: error while importing module "site_app"')
    assert "ZeroDivisionError" in lines[0]
    assert lines[1] == "Traceback (most recent call last):", result.stderr
    assert 'deep.py", line 2, in settings' in result.stderr
    assert "importlib" not in result.stderr and "pyserver/importer.py" not in result.stderr


def test_on_starting_hook_logs(tmp_path):
    conf = tmp_path / "conf.py"
    conf.write_text("def on_starting(server):\n    server.log.info('HOOK on_starting ran')\n")
    with run_server(ASGI, "-c", str(conf)) as srv:
        assert srv.wait_for_log("HOOK on_starting ran"), srv.log_tail()
        line = next(line for line in srv.log().splitlines() if "HOOK" in line)
    assert line.endswith("[INFO] HOOK on_starting ran"), line


def test_a_typical_gunicorn_conf_loads(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-days", "2", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text(
        f"certfile = {str(cert)!r}\nkeyfile = {str(key)!r}\nciphers = 'ECDHE+AESGCM'\n"
        "cert_reqs = 0\nworker_class = 'uvicorn.workers.UvicornWorker'\nproc_name = 'site'\n"
        "def worker_int(worker):\n    pass\n"
    )
    port = free_port()
    with run_server(ASGI, "-c", str(conf), port=port) as srv:
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 5)) as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(100).startswith(b"HTTP/1.1 200")
        warnings = [line for line in srv.log().splitlines() if "[WARNING]" in line]
    assert len(warnings) == 1, warnings
    assert "ignored: worker_class, proc_name, worker_int (" in warnings[0], warnings


def test_unwritable_pid_file_is_said_before_serving(tmp_path):
    pid = tmp_path / "no" / "such" / "dir" / "server.pid"
    result = run_cli(ASGI, "--port", "0", "--pid", str(pid))
    assert result.returncode == 1
    assert "Listening on" not in result.stderr, result.stderr
    assert f"cannot write the pid file {pid}: no such directory" in result.stderr


def test_certificate_without_its_key(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-days", "2", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    result = run_cli(ASGI, "--port", "0", "--ssl-certfile", str(cert))
    assert result.returncode == 1
    assert f"no private key in {cert}; give --ssl-keyfile" in result.stderr, result.stderr


def test_metrics_bind_needs_a_port():
    result = run_cli(ASGI, "--port", "0", "--metrics-bind", "127.0.0.1")
    assert result.returncode == 2
    assert "--metrics-bind takes HOST:PORT (a port too), got '127.0.0.1'" in result.stderr


def test_unknown_user_exits_1():
    result = run_cli(ASGI, "--user", "no-such-user-for-pyserver")
    assert result.returncode == 1, result.stderr
    assert "no such user 'no-such-user-for-pyserver'" in result.stderr


def test_port_in_use_is_said_before_the_import(tmp_path):
    (tmp_path / "slow_app.py").write_text(
        "print('IMPORTING slow_app', flush=True)\nasync def app(scope, receive, send):\n    pass\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("slow_app:app", "--port", str(port), "--app-dir", str(tmp_path))
    assert result.returncode == 1
    assert "Address already in use" in result.stderr
    assert "IMPORTING" not in result.stdout + result.stderr


def test_sync_callable_of_three_is_asgi():
    with run_server("apps.newuser_apps:three_args") as srv:
        assert get(srv, "/").body == b"ok"
        assert "Application apps.newuser_apps:three_args: ASGI" in srv.log()


@pytest.mark.parametrize("threads", ["1", "4"])
def test_wsgi_body_shorter_than_its_content_length_is_logged(threads):
    with run_server(WSGI, "--threads", threads) as srv:
        conn = srv.connect()
        conn.send(b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
        head = conn.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 10" in head
        conn.close()
        text = "WSGI application sent 3 of the 10 body bytes its Content-Length announced"
        assert srv.wait_for_log(text), srv.log_tail()
        assert "(GET /short): the connection is closed" in srv.log()


@pytest.mark.parametrize("threads", ["1", "4"])
def test_wsgi_errors_text_is_written_as_it_comes(threads, tmp_path):
    errors = tmp_path / "errors.log"
    args = ["--threads", threads, "--error-logfile", str(errors)]
    with run_server(WSGI, *args) as srv:
        assert get(srv, "/flask-error").status == 200
        assert wait_for(lambda: "ERROR in app" in errors.read_text()), srv.log_tail()
    line = next(line for line in errors.read_text().splitlines() if "ERROR in app" in line)
    assert line == "[2026-01-01 00:00:00,000] ERROR in app: Exception on /flask-error [GET]"


# ---- processes: worker numbers after HUP, what a stop signal drains -------------------


def _children(pid):
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                title = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")[0]
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found[int(entry)] = title.decode()
    return found


def test_worker_numbers_stay_1_to_n_after_hup():
    pytest.importorskip("setproctitle")
    import signal
    import urllib.request

    metrics = free_port()
    with run_server(WSGI, "-w", "2", "--metrics-bind", f"127.0.0.1:{metrics}") as srv:
        assert wait_for(lambda: len(_children(srv.pid)) == 2, 10)
        first = set(_children(srv.pid))
        os.kill(srv.pid, signal.SIGHUP)

        def replaced():
            now = _children(srv.pid)
            return len(now) == 2 and not (set(now) & first)

        assert wait_for(replaced, 20), srv.log_tail()
        assert sorted(_children(srv.pid).values()) == ["pyserver: worker 1", "pyserver: worker 2"]
        url = f"http://127.0.0.1:{metrics}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        labels = sorted(
            line.split('"')[1]
            for line in text.splitlines()
            if line.startswith("pyserver_worker_rss")
        )
        assert labels == ["1", "2"], text
        assert "Booting worker 3" not in srv.log()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_stop_signal_says_what_it_drains(workers):
    import signal

    with run_server(ASGI, "-w", workers) as srv:
        conn = srv.connect()
        conn.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert srv.wait_for_log("SLOW started"), srv.log_tail()
        os.kill(srv.pid, signal.SIGTERM)
        text = "Handling signal: term: draining 1 request in progress on 1 connection (up to "
        assert srv.wait_for_log(text, timeout=3), srv.log_tail()
        # Said when the signal came, not when the request ended.
        assert "Finished" not in srv.log()
        assert conn.read_response().status == 200
        conn.close()
        if workers == "2":
            assert "Handling signal: term: stopping 2 workers gracefully" in srv.log()


# ---- make run installs what building needs; package names this Debian release has -----


def make_dry_run(target):
    """What `make TARGET` runs on a machine where nothing is done yet (-B: every rule)."""
    result = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_only_what_building_needs():
    out = make_dry_run("run")
    for tool in ("clang-format", "prometheus", "nginx", "wrk", "apache2-utils", ".[test]"):
        assert tool not in out, (tool, out)
    assert "libev-dev" in out and "'libllhttp-dev|node-llhttp'" in out
    # make test still gets everything a fresh machine needs.
    test = make_dry_run("test")
    for tool in ("prometheus", "'nginx-light|nginx'", "libnginx-mod-stream", ".[test]"):
        assert tool in test, (tool, test)


@pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v apt-cache"], capture_output=True).returncode != 0,
    reason="not a Debian system",
)
def test_apt_deps_picks_the_name_this_release_has():
    def apt_deps(*words):
        return subprocess.run(
            ["scripts/apt-deps.sh", *words],
            cwd=ROOT,
            env={**os.environ, "APT_DEPS_DRY_RUN": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )

    # An installed alternative is enough: apt is not asked at all.
    assert apt_deps("no-such-package-for-pyserver|build-essential").returncode == 0
    gone = apt_deps("no-such-package-for-pyserver|no-such-either")
    assert gone.returncode == 1
    assert "has no package no-such-package-for-pyserver or no-such-either" in gone.stderr
    # A missing package: the first alternative that has a candidate is the one installed.
    policy = subprocess.run(["apt-cache", "policy", "cowsay"], capture_output=True, text=True)
    installed = subprocess.run(["dpkg-query", "-W", "cowsay"], capture_output=True)
    if "Candidate: (none)" in policy.stdout or not policy.stdout or installed.returncode == 0:
        pytest.skip("needs a package list with cowsay, not installed")
    picked = apt_deps("no-such-package-for-pyserver|cowsay")
    assert picked.returncode == 0 and picked.stdout.strip() == "installing: cowsay"


def test_readme_says_linux_only_and_what_hup_does_to_a_single_process():
    text = (ROOT / "README.md").read_text()
    assert "runs on Linux only" in text
    assert "HUP or USR1 sent to it end it" not in text
    signals = text[text.index("Signals:") :].split("\n\n")[0]
    assert "executes itself again" in signals and "reopens its log files on SIGUSR1" in signals
    assert "pip install pyserver-ev` does not work until then" in text
