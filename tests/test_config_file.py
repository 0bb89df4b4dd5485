"""-c/--config FILE (gunicorn-style Python settings and server hooks) and pyproject.toml's
[tool.pyserver]: what they set, how bad settings are reported, and the precedence
CLI > environment > --config file > pyproject.toml > defaults. Real server processes."""

import os
import signal
import textwrap
from collections import Counter

from helpers import (
    HOST,
    TESTS_DIR,
    assert_serving,
    fetch,
    free_port,
    raw_request,
    run_cli,
    run_server,
    wait_for,
    worker_pid,
)


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


def line_status(port, length):
    """The status of a GET whose request line is `length` bytes long."""
    target = "/hello?" + "x" * (length - len("GET /hello? HTTP/1.1"))
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    raw = raw_request(port, request.encode())
    return int(raw.split(b" ", 2)[1])


# ---- settings ---------------------------------------------------------------------------


def test_gunicorn_settings_bind_workers_and_limits(tmp_path):
    port = free_port()
    conf = write(
        tmp_path / "conf.py",
        f"""
        import multiprocessing  # modules are skipped
        from os import getpid  # and what they give
        bind = "{HOST}:{port}"
        workers = 2
        keepalive = 2
        graceful_timeout = 5
        limit_request_line = 100
        max_requests = 1000
        max_requests_jitter = 10
        loglevel = "debug"
        _private = "skipped"
        """,
    )
    with run_server("apps.basic:app", "-c", conf, listen=False, port=port) as srv:
        assert_serving(port)
        assert line_status(port, 90) == 200
        assert line_status(port, 120) == 414
        assert worker_pid(srv) != srv.pid  # a master
        assert wait_for(lambda: "Booting worker 2 with pid" in srv.log()), srv.log()
        log = srv.log()
    assert "Booting worker 3" not in log
    assert "[DEBUG]" in log  # loglevel


def test_gunicorn_limit_zero_means_the_largest(tmp_path):
    conf = write(tmp_path / "conf.py", "limit_request_line = 0\n")
    with run_server("apps.basic:app", "-c", conf) as srv:
        assert line_status(srv.port, 20000) == 200


def test_pyserver_option_names_and_pyserver_config_env(tmp_path):
    conf = write(tmp_path / "conf.py", "limit_request_line = 100\nserver_header = False\n")
    with run_server("apps.basic:app", env={"PYSERVER_CONFIG": conf}) as srv:
        assert line_status(srv.port, 120) == 414
        response = fetch(srv.port, "GET", "/hello")
        assert not response.has_header("server")


def test_app_from_the_config_file(tmp_path):
    conf = write(tmp_path / "conf.py", 'wsgi_app = "apps.basic:app"\n')
    port = free_port()
    args = (f"--config={conf}", "--host", HOST, "--port", str(port))
    with run_server(*args, listen=False, port=port):
        assert_serving(port)


def test_unknown_setting_is_an_error_naming_it(tmp_path):
    conf = write(tmp_path / "conf.py", "workers = 1\nworkres = 2\n")
    out = run_cli("apps.basic:app", "-c", conf)
    assert out.returncode == 2
    assert f"config file {conf}: workres: unknown setting" in out.stderr


def test_bad_value_is_reported_like_the_cli(tmp_path):
    conf = write(tmp_path / "conf.py", 'workers = "many"\n')
    out = run_cli("apps.basic:app", "-c", conf)
    assert out.returncode == 2
    assert f"config file {conf}: workers: expected an integer, got 'many'" in out.stderr
    cli = run_cli("apps.basic:app", "--workers", "many")
    assert "expected an integer, got 'many'" in cli.stderr
    conf = write(tmp_path / "conf2.py", "workers = 500\n")
    out = run_cli("apps.basic:app", "-c", conf)
    assert out.returncode == 2 and "workers: must be between 1 and 128" in out.stderr


def test_missing_or_broken_file(tmp_path):
    out = run_cli("apps.basic:app", "-c", str(tmp_path / "nope.py"))
    assert out.returncode == 2 and "no such file" in out.stderr
    conf = write(tmp_path / "conf.py", "workers = 1 +\n")
    out = run_cli("apps.basic:app", "-c", conf)
    assert out.returncode == 2 and "SyntaxError" in out.stderr


def test_threads_setting_is_the_threads_option(tmp_path):
    bad = write(tmp_path / "bad.py", "threads = 0\n")
    out = run_cli("apps.basic:app", "-c", bad)
    assert out.returncode == 2 and "threads: must be between 1 and 1024, got 0" in out.stderr
    conf = write(tmp_path / "conf.py", "threads = 4\n")
    with run_server("apps.basic:app", "-c", conf) as srv:
        assert_serving(srv.port)
        log = srv.log()
    assert "WARNING" not in log and "4 application threads" in log
    one = write(tmp_path / "one.py", "threads = 1\n")
    with run_server("apps.basic:app", "-c", one) as srv:
        assert_serving(srv.port)
        assert "Running in a single process, 1 thread" in srv.log()


def test_unsupported_settings_and_hooks(tmp_path):
    cases = {
        "worker_clas = 'sync'\n": "worker_clas: unknown setting",
        "def helper():\n    pass\n": "helper: unknown setting",
        "on_starting = 3\n": "on_starting: a server hook must be a function",
    }
    for i, (text, message) in enumerate(cases.items()):
        out = run_cli("apps.basic:app", "-c", write(tmp_path / f"c{i}.py", text))
        assert out.returncode == 2, text
        assert message in out.stderr, (text, out.stderr)
    ok = write(tmp_path / "ok.py", "proxy_protocol = False\naccess_log_format = '%(h)s'\n")
    with run_server("apps.basic:app", "-c", ok) as srv:
        assert_serving(srv.port)
        # access_log_format is gunicorn's, and used: the line is just the client's address.
        assert wait_for(lambda: "\n127.0.0.1\n" in srv.log()), srv.log()
        assert "WARNING" not in srv.log()


def test_accesslog_none_turns_the_access_log_off(tmp_path):
    conf = write(tmp_path / "conf.py", "accesslog = None\n")
    with run_server("apps.basic:app", "-c", conf) as srv:
        assert_serving(srv.port)
        assert wait_for(lambda: "Listening" in srv.log())
        assert '"GET /hello HTTP/1.1" 200' not in srv.log()
    with run_server("apps.basic:app") as srv:
        assert_serving(srv.port)
        assert wait_for(lambda: '"GET /hello HTTP/1.1" 200' in srv.log())


# ---- precedence ------------------------------------------------------------------------


def test_precedence_cli_over_env_over_file_over_pyproject(tmp_path):
    """limit_request_line: pyproject 100, file 200, env 300, CLI 400; each level hides the
    ones below it."""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "site"\n\n[tool.pyserver]\nlimit-request-line = 100\n'
        f'app-dir = "{TESTS_DIR}"\n'
    )
    conf = write(tmp_path / "conf.py", "limit_request_line = 200\n")
    env = {"PYSERVER_LIMIT_REQUEST_LINE": "300"}
    steps = [
        ((), None, 100),
        (("-c", conf), None, 200),
        (("-c", conf), env, 300),
        (("-c", conf, "--limit-request-line", "400"), env, 400),
    ]
    for args, environ, limit in steps:
        with run_server("apps.basic:app", *args, env=environ, cwd=tmp_path) as srv:
            assert line_status(srv.port, limit) == 200, (args, environ)
            assert line_status(srv.port, limit + 10) == 414, (args, environ)
    # Without [tool.pyserver] nor anything else: the default 8190.
    os.unlink(tmp_path / "pyproject.toml")
    with run_server("apps.basic:app", cwd=tmp_path) as srv:
        assert line_status(srv.port, 8190) == 200


def test_pyproject_errors_name_the_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pyserver]\nworkerz = 2\n")
    out = run_cli("apps.basic:app", cwd=tmp_path)
    assert out.returncode == 2 and "[tool.pyserver]: workerz: unknown option" in out.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.pyserver]\nworkers = 'x'\n")
    out = run_cli("apps.basic:app", cwd=tmp_path)
    assert out.returncode == 2 and "workers: expected an integer, got 'x'" in out.stderr


# ---- hooks -----------------------------------------------------------------------------

HOOKS_CONF = """
import os
import signal
_OUT = {out!r}


def _note(name, *extra):
    with open(_OUT, "a") as f:
        f.write(" ".join([name, str(os.getpid()), *map(str, extra)]) + "\\n")


def on_starting(server):
    _note("on_starting", server.pid)


def when_ready(server):
    _note("when_ready")


def pre_fork(server, worker):
    _note("pre_fork", worker.number)


def post_fork(server, worker):
    _note("post_fork", worker.number, server.pid)


def post_worker_init(worker):
    _note("post_worker_init", worker.number)


def worker_exit(server, worker):
    _note("worker_exit", worker.number)


def on_exit(server):
    _note("on_exit")


def pre_request(worker, req):
    _note("pre_request", req.method, req.path)


def post_request(worker, req, environ, resp):
    _note("post_request", req.path, resp.status_code, resp.sent)
"""


def read_notes(path):
    if not os.path.exists(path):
        return []
    return [line.split() for line in open(path).read().splitlines()]


def test_hooks_fire_once_in_the_right_process_under_a_master(tmp_path):
    out = tmp_path / "hooks.txt"
    conf = write(tmp_path / "conf.py", HOOKS_CONF.format(out=str(out)))
    with run_server("apps.basic:app", "-c", conf, "--workers", "2") as srv:
        master = srv.pid
        inits = lambda: [n for n in read_notes(out) if n[0] == "post_worker_init"]  # noqa: E731
        assert wait_for(lambda: len(inits()) == 2)
        response = fetch(srv.port, "GET", "/hello")
        assert response.status == 200
        assert wait_for(lambda: any(n[0] == "post_request" for n in read_notes(out)))
    notes = read_notes(out)
    counts = Counter(n[0] for n in notes)
    assert counts == {
        "on_starting": 1,
        "when_ready": 1,
        "on_exit": 1,
        "pre_fork": 2,
        "post_fork": 2,
        "post_worker_init": 2,
        "worker_exit": 2,
        "pre_request": 1,
        "post_request": 1,
    }, notes
    by_name = {}
    for n in notes:
        by_name.setdefault(n[0], []).append(n)
    for name in ("on_starting", "when_ready", "on_exit"):
        assert int(by_name[name][0][1]) == master, notes
    assert all(int(n[1]) == master for n in by_name["pre_fork"]), notes  # in the master
    assert sorted(n[2] for n in by_name["pre_fork"]) == ["1", "2"]
    assert int(by_name["on_starting"][0][2]) == master
    workers = {int(n[1]) for n in by_name["post_fork"]}
    assert len(workers) == 2 and master not in workers
    for name in ("post_worker_init", "worker_exit"):
        assert {int(n[1]) for n in by_name[name]} == workers, notes
    assert {n[2] for n in by_name["post_fork"]} == {"1", "2"}
    assert all(int(n[3]) == master for n in by_name["post_fork"])  # server.pid
    pre, post = by_name["pre_request"][0], by_name["post_request"][0]
    assert int(pre[1]) in workers and pre[1] == post[1]
    assert pre[2:] == ["GET", "/hello"] and post[2:] == ["/hello", "200", "11"]
    # Order in each process.
    names = [n[0] for n in notes]
    assert names.index("on_starting") < names.index("when_ready") < names.index("pre_fork")
    assert names.index("pre_fork") < names.index("post_fork")
    assert names[-1] == "on_exit"


def test_hooks_in_a_single_process(tmp_path):
    out = tmp_path / "hooks.txt"
    conf = write(tmp_path / "conf.py", HOOKS_CONF.format(out=str(out)))
    with run_server("apps.basic:app", "-c", conf) as srv:
        assert fetch(srv.port, "GET", "/hello").status == 200
        single = srv.pid
    notes = read_notes(out)
    assert [n[0] for n in notes] == [
        "on_starting",
        "when_ready",
        "post_worker_init",
        "pre_request",
        "post_request",
        "worker_exit",
        "on_exit",
    ], notes
    assert {int(n[1]) for n in notes} == {single}


def test_a_failing_startup_hook_stops_the_server(tmp_path):
    conf = write(tmp_path / "conf.py", "def when_ready(server):\n    raise RuntimeError('no')\n")
    out = run_cli("apps.basic:app", "--port", str(free_port()), "-c", conf)
    assert out.returncode == 1
    assert "the when_ready hook failed: RuntimeError('no')" in out.stderr


def test_no_request_hooks_no_wrapper(tmp_path):
    """Without pre_request/post_request the application is called as it is: a file_wrapper
    response still reaches the core (sendfile path) and the environ is the server's."""
    conf = write(tmp_path / "conf.py", "def on_exit(server):\n    pass\n")
    with run_server("apps.basic:app", "-c", conf) as srv:
        response = fetch(srv.port, "GET", "/environ")
        assert response.status == 200
        assert_serving(srv.port)


def test_request_hooks_with_an_asgi_app_warn(tmp_path):
    conf = write(tmp_path / "conf.py", "def pre_request(worker, req):\n    raise SystemExit\n")
    with run_server("apps.asgi_basic:app", "-c", conf, "--lifespan", "off") as srv:
        assert fetch(srv.port, "GET", "/").status in (200, 404)
        assert "pre_request/post_request hooks are for WSGI applications" in srv.log()


def test_pre_fork_runs_for_every_fork_and_a_failing_one_is_logged(tmp_path):
    out = tmp_path / "forks.txt"
    conf = write(
        tmp_path / "conf.py",
        f"def pre_fork(server, worker):\n"
        f"    with open({str(out)!r}, 'a') as f:\n"
        f"        f.write(str(worker.number) + '\\n')\n"
        f"    raise RuntimeError('pre_fork says no')\n",
    )
    with run_server("apps.basic:app", "-c", conf, "--workers", "2") as srv:
        assert fetch(srv.port, "GET", "/hello").status == 200  # forked all the same
        assert wait_for(lambda: srv.log().count("Exception in the pre_fork hook") == 2)
        assert "pre_fork says no" in srv.log()
        os.kill(srv.pid, signal.SIGHUP)  # a rolling restart forks two replacements
        assert wait_for(lambda: len(read_notes(out)) == 4, 15), read_notes(out)
    numbers = [n[0] for n in read_notes(out)]
    assert sorted(numbers[:2]) == ["1", "2"] and len(set(numbers[2:])) == 2, numbers
