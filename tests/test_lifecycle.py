"""Process options and logs: --user/--group, --chdir, --env, --umask,
--timeout-graceful-shutdown, --access-logfile/--error-logfile (and USR1), the error-log line
format, --wsgi-errors-level. Real server processes."""

import grp
import json
import os
import pwd
import re
import signal
import socket
import time

import pytest
from helpers import (
    HOST,
    TESTS_DIR,
    assert_serving,
    fetch,
    free_port,
    run_cli,
    run_server,
    wait_for,
)

ERROR_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[(\d+)\] \[([A-Z]+)\] (.*)$"
)


def info(port):
    response = fetch(port, "GET", "/info")
    assert response.status == 200, response
    return json.loads(response.body)


def nobody_ids():
    try:
        uid = pwd.getpwnam("nobody").pw_uid
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        pytest.skip("no nobody/nogroup on this machine")
    return uid, gid


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="--user/--group need root")


# ---- --user / --group ---------------------------------------------------------------------


@needs_root
def test_user_group_single_process_drops_after_binding(tmp_path):
    uid, gid = nobody_ids()
    with run_server("apps.ops_app:app", "--user", "nobody", "--group", "nogroup") as srv:
        got = info(srv.port)
        status = open(f"/proc/{srv.pid}/status").read()
    assert got["pid"] == srv.pid
    assert (got["uid"], got["gid"]) == (uid, gid)
    assert got["imported_as"] == [uid, gid]  # imported after the switch
    assert 0 not in got["groups"]  # root's supplementary groups are gone
    assert re.search(rf"^Uid:\s+{uid}\s+{uid}\s+{uid}\s+{uid}$", status, re.M), status


@needs_root
def test_user_group_workers_under_a_master_accept_on_the_root_bound_socket():
    uid, gid = nobody_ids()
    # Port 80-ish needs root to bind: a privileged port proves the bind happened as root.
    with socket.socket() as probe:
        for port in range(900, 1000):
            if probe.connect_ex((HOST, port)) != 0:
                break
    with run_server(
        "apps.ops_app:app",
        "--user",
        str(uid),
        "--group",
        "nogroup",
        "--workers",
        "2",
        port=port,
    ) as srv:
        got = info(srv.port)
        master_status = open(f"/proc/{srv.pid}/status").read()
    assert got["ppid"] == srv.pid and got["pid"] != srv.pid
    assert (got["uid"], got["gid"]) == (uid, gid)
    assert got["imported_as"] == [uid, gid]
    assert re.search(r"^Uid:\s+0\s", master_status, re.M)  # the master stays root


@needs_root
@pytest.mark.parametrize("workers", ["1", "2"], ids=["single-process", "master"])
def test_user_group_own_the_unix_socket_file(tmp_path, workers):
    uid, gid = nobody_ids()
    path = str(tmp_path / "app.sock")
    args = ("--user", "nobody", "--group", "nogroup", "--workers", workers, "--uds-perms", "660")
    with run_server("apps.ops_app:app", *args, uds=path) as srv:
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (uid, gid)
        assert oct(st.st_mode & 0o777) == "0o660"
        with srv.connect() as conn:
            conn.send(b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert json.loads(conn.read_response().body)["uid"] == uid


def test_unknown_user_is_an_error():
    out = run_cli("apps.ops_app:app", "--user", "no-such-user-here")
    assert out.returncode == 1  # as --user failing to switch: the system's, not the option's
    assert "user: no such user 'no-such-user-here'" in out.stderr


# ---- --chdir / --env / --umask ----------------------------------------------------------


def test_chdir_env_umask(tmp_path):
    with run_server(
        "apps.ops_app:app",
        "--chdir",
        str(tmp_path),
        "--env",
        "OPS_A=1",
        "--env",
        "OPS_B=x=y",
        "--umask",
        "027",
    ) as srv:
        got = info(srv.port)
    assert got["cwd"] == str(tmp_path) == got["import_cwd"]
    assert got["env"] == {"OPS_A": "1", "OPS_B": "x=y"}
    assert got["umask"] == 0o027
    with run_server("apps.ops_app:app") as srv:
        got = info(srv.port)
    assert got["cwd"] == str(TESTS_DIR) and got["env"] == {}


def test_env_from_environment_and_bad_values():
    with run_server("apps.ops_app:app", env={"PYSERVER_ENV": "OPS_C=3 OPS_D=4"}) as srv:
        assert info(srv.port)["env"] == {"OPS_C": "3", "OPS_D": "4"}
    out = run_cli("apps.ops_app:app", "--env", "NOEQUALS")
    assert out.returncode == 2 and "expected KEY=VALUE" in out.stderr
    out = run_cli("apps.ops_app:app", "--umask", "999")
    assert out.returncode == 2 and "expected an octal umask" in out.stderr


def test_chdir_to_a_missing_directory(tmp_path):
    out = run_cli("apps.ops_app:app", "--chdir", str(tmp_path / "nope"))
    assert out.returncode == 1 and "cannot change to" in out.stderr


# ---- --timeout-graceful-shutdown --------------------------------------------------------


def test_timeout_graceful_shutdown_is_graceful_timeout():
    """A request in progress at SIGTERM is cut after the grace period: 1 s, not 30."""
    with run_server("apps.asgi_basic:app", "--timeout-graceful-shutdown", "1") as srv:
        conn = srv.connect()
        conn.send(b"GET /sleep?s=20 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        started = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(15)
        elapsed = time.monotonic() - started
        conn.close()
    assert 0.8 < elapsed < 8.0, elapsed
    out = run_cli("apps.basic:app", "--timeout-graceful-shutdown", "-1")
    assert out.returncode == 2


# ---- logs ---------------------------------------------------------------------------------


def test_startup_lines_say_what_was_detected_and_where(tmp_path):
    v4, v6 = free_port(), free_port()
    binds = ("-b", f"[::1]:{v6}", "-b", f"{HOST}:{v4}")
    with run_server("apps.basic:app", "--workers", "2", *binds, listen=False, port=v4) as srv:
        ok = wait_for(lambda: srv.log().count("Application apps.basic:app: WSGI") == 2)
        log = srv.log()
    assert ok, log
    lines = [ERROR_LINE.match(line) for line in log.splitlines()]
    assert all(lines), log
    by_message = {m.group(3): m for m in lines}
    assert any(re.fullmatch(r"Listening on http://\[::1\]:\d+", k) for k in by_message), log
    assert any(re.fullmatch(r"Listening on http://127\.0\.0\.1:\d+", k) for k in by_message)
    assert int(by_message["Running 2 worker processes, 1 thread each"].group(1)) == srv.pid
    workers = {int(m.group(1)) for m in lines if m.group(3).startswith("Application ")}
    assert len(workers) == 2 and srv.pid not in workers  # imported in each worker
    assert {m.group(2) for m in lines} <= {"INFO", "DEBUG", "WARNING"}


def test_startup_lines_asgi_single_process():
    with run_server("apps.asgi_basic:app", "--lifespan", "off") as srv:
        assert wait_for(lambda: "Running in a single process" in srv.log())
        log = srv.log()
    assert re.search(r"\[INFO\] Application apps\.asgi_basic:app: ASGI, lifespan off$", log, re.M)


def test_access_and_error_logfiles_and_usr1_reopen(tmp_path):
    access, error = tmp_path / "access.log", tmp_path / "error.log"
    args = ("--access-logfile", str(access), "--error-logfile", str(error))
    with run_server("apps.basic:app", *args) as srv:
        assert_serving(srv.port)
        assert wait_for(
            lambda: access.exists() and '"GET /hello HTTP/1.1" 200' in access.read_text()
        )
        assert "Listening on" in error.read_text()
        assert '"GET /hello' not in srv.log() and "Listening on" not in srv.log()
        lines = [ERROR_LINE.match(line) for line in error.read_text().splitlines()]
        assert all(lines), error.read_text()
        assert {int(m.group(1)) for m in lines} == {srv.pid}
        # logrotate: move the files away, USR1, the server writes new ones.
        os.rename(access, tmp_path / "access.log.1")
        os.rename(error, tmp_path / "error.log.1")
        srv.proc.send_signal(signal.SIGUSR1)
        assert wait_for(lambda: access.exists() and error.exists(), 5.0)
        assert fetch(srv.port, "GET", "/hello?after").status == 200
        assert wait_for(lambda: "/hello?after" in access.read_text())
    assert "/hello?after" not in (tmp_path / "access.log.1").read_text()


def test_dash_means_the_standard_streams(tmp_path):
    with run_server("apps.basic:app", "--access-logfile", "-", "--error-logfile", "-") as srv:
        assert_serving(srv.port)
        assert wait_for(lambda: '"GET /hello HTTP/1.1" 200' in srv.log())
        assert "Listening on" in srv.log()
    assert not os.path.exists(TESTS_DIR / "-")


def test_unwritable_logfile_is_a_startup_error(tmp_path):
    out = run_cli("apps.basic:app", "--error-logfile", str(tmp_path / "no" / "dir.log"))
    assert out.returncode == 1 and "cannot open log file" in out.stderr


@pytest.mark.parametrize(
    ("option", "shown_at"),
    [
        (("--wsgi-errors-level", "warning"), "WARNING"),
        (("--wsgi-errors-level", "info"), "INFO"),
        (("--wsgi-errors-level", "error"), "ERROR"),
    ],
)
def test_wsgi_errors_level(option, shown_at):
    """wsgi.errors lines are logged on pyserver.error at the chosen level, text unchanged:
    Flask's "INFO in app" stays an INFO-looking line at WARNING, not an ERROR."""
    with run_server("apps.ops_app:app", *option) as srv:
        assert fetch(srv.port, "GET", "/errors?INFO+in+app:+hello").status == 200
        assert wait_for(lambda: "INFO+in+app:+hello" in srv.log())
        line = next(line for line in srv.log().splitlines() if "INFO+in+app:+hello" in line)
    m = ERROR_LINE.match(line)
    assert m, line
    assert m.group(2) == shown_at and m.group(3) == "INFO+in+app:+hello", line


def test_wsgi_errors_below_the_log_level_are_dropped():
    with run_server("apps.ops_app:app", "--wsgi-errors-level", "debug") as srv:
        assert fetch(srv.port, "GET", "/errors?quiet-line").status == 200
        assert fetch(srv.port, "GET", "/info").status == 200
        assert wait_for(lambda: '"GET /info' in srv.log())
        assert not [line for line in srv.log().splitlines() if line.endswith("quiet-line")]


# ---- --reload and a broken file -----------------------------------------------------------

GOOD = 'def app(environ, start_response):\n    start_response("200 OK", [])\n    return [b"%s"]\n'


def test_reload_shows_the_traceback_and_waits_for_the_next_change(tmp_path):
    """A broken file is imported once (traceback shown), not again until it changes; the
    previous worker keeps serving meanwhile; the fix is picked up."""
    module = tmp_path / "reloadme.py"
    module.write_text(GOOD % "v1")
    with run_server("reloadme:app", "--reload", "--app-dir", str(tmp_path)) as srv:
        assert fetch(srv.port, "GET", "/").body == b"v1"
        module.write_text("def app(environ, start_response):\n    return [b'v2'\n")
        assert wait_for(lambda: "Waiting for a watched file to change" in srv.log(), 15.0), (
            srv.log()
        )
        time.sleep(3.0)  # the master's boot backoff would have retried several times by now
        log = srv.log()
        assert log.count('error while importing module "reloadme"') == 1, log
        assert "Traceback" in log and "SyntaxError" in log
        assert fetch(srv.port, "GET", "/").body == b"v1"  # the old worker still serves
        module.write_text(GOOD % "v3")
        assert wait_for(lambda: fetch(srv.port, "GET", "/").body == b"v3", 15.0), srv.log()
        assert srv.log().count('error while importing module "reloadme"') == 1


def test_umask_from_config_file_as_python_int(tmp_path):
    conf = tmp_path / "conf.py"
    conf.write_text("umask = 0o027\nraw_env = ['OPS_F=file']\n")
    with run_server("apps.ops_app:app", "-c", str(conf)) as srv:
        got = info(srv.port)
    assert got["umask"] == 0o027 and got["env"] == {"OPS_F": "file"}


def test_flask_app_logger_info_is_not_an_error():
    """Flask's default handler writes "[time] INFO in ops_flask: ..." to wsgi.errors: it is
    written as it comes (as gunicorn does), not given a level of the server's."""
    pytest.importorskip("flask")
    with run_server("apps.ops_flask:app") as srv:
        assert fetch(srv.port, "GET", "/log").status == 200
        assert wait_for(lambda: "flask-info-line" in srv.log())
        line = next(line for line in srv.log().splitlines() if "flask-info-line" in line)
    assert not ERROR_LINE.match(line), line
    assert re.fullmatch(r"\[[^]]+\] INFO in ops_flask: flask-info-line", line), line
