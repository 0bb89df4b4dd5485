"""pyserver's gunicorn worker classes under a real gunicorn arbiter (gunicorn from PyPI).

Every test starts `python -m gunicorn -k pyserver.workers...` in its own process group on a
loopback port and kills that whole group at the end, whatever happened.
"""

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import HOST, TESTS_DIR, free_port, server_env, wait_for

gunicorn_config = pytest.importorskip("gunicorn.config")

WORKER = "pyserver.workers.PyserverWorker"
BOOT_TIMEOUT = 20.0
# gunicorn 24+ opens a control socket in ~/.gunicorn by default: not for parallel test servers.
_SETTINGS = {setting.name for setting in gunicorn_config.KNOWN_SETTINGS}
NO_CONTROL_SOCKET = ["--no-control-socket"] if "control_socket_disable" in _SETTINGS else []


class Gunicorn:
    def __init__(self, proc, port, log_path):
        self.proc, self.port, self.log_path = proc, port, log_path

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def log(self):
        return Path(self.log_path).read_text(errors="replace")

    def get(self, path, **kwargs):
        # A new connection per request: the closest to many independent clients.
        kwargs.setdefault("timeout", 10)
        return httpx.get(self.url + path, **kwargs)

    def booted_pids(self):
        """The pids of every worker the arbiter has started so far (from its log)."""
        return {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", self.log())}

    def wait_log(self, text, count=1, timeout=BOOT_TIMEOUT):
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            exited = self.proc.poll() is not None  # then the log is complete: fail at once
            if (exited and self.log().count(text) < count) or time.monotonic() > deadline:
                state = f"gunicorn exited with {self.proc.returncode}" if exited else "timeout"
                raise AssertionError(
                    f"{text!r} x{count} not in the log ({state}):\n{self.log()[-4000:]}"
                )
            time.sleep(0.05)


def _kill_group(proc):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def gunicorn(
    app,
    *args,
    workers=2,
    worker=WORKER,
    env=None,
    wait_workers=True,
    binds=None,
    port=None,
    listen=True,
    pass_fds=(),
):
    """Runs gunicorn on a free loopback port; yields a Gunicorn once the workers booted.

    `listen=False` leaves out that TCP bind: `binds` say where to listen (fd://N with the fd
    in `pass_fds`, ...) and `port` where to connect."""
    port = port or free_port()
    log_file = tempfile.NamedTemporaryFile(prefix="gunicorn-", suffix=".log", delete=False)
    bind_args = ["-b", f"{HOST}:{port}"] if listen else []
    for extra in binds or ():
        bind_args += ["-b", extra]
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        "-k",
        worker,
        "-w",
        str(workers),
        *bind_args,
        *NO_CONTROL_SOCKET,
        "--graceful-timeout",
        "10",
        *args,
        app,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=TESTS_DIR,
        env=server_env(env),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    log_file.close()
    g = Gunicorn(proc, port, log_file.name)
    try:
        if wait_workers:
            g.wait_log("Booting worker", workers)
            _wait_answering(g)
        yield g
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        _kill_group(proc)
        os.unlink(log_file.name)


def _wait_answering(g):
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        try:
            with socket.create_connection((HOST, g.port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline or g.proc.poll() is not None:
                raise AssertionError("gunicorn does not listen:\n" + g.log()[-4000:]) from None
            time.sleep(0.05)


def _pid(response):
    assert response.status_code == 200, response.text
    assert response.text.startswith("pid="), response.text
    return int(response.text[4:])


class Load:
    """A few client threads sending requests until stopped; every outcome is kept."""

    def __init__(self, g, path="/", threads=4, pause=0.005):
        self.g, self.path, self.pause = g, path, pause
        self.ok, self.failures, self.pids = 0, [], set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self):
        while not self._stop.is_set():
            try:
                response = self.g.get(self.path)
                pid = _pid(response)
                with self._lock:
                    self.ok += 1
                    self.pids.add(pid)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                with self._lock:
                    self.failures.append(repr(exc))
            time.sleep(self.pause)

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


# ---- frameworks ----


def test_django_wsgi_two_workers():
    with gunicorn("apps.djangoproj.wsgi:application") as g:
        response = g.get("/json/?a=1")
        assert response.status_code == 200
        assert response.json()["framework"] == "django"
        assert response.json()["query"] == {"a": "1"}
        assert g.get("/no/such/page/").status_code == 404
        assert "Using worker: pyserver.workers.PyserverWorker" in g.log()


def test_django_wsgi_root_path_from_raw_env():
    with gunicorn("apps.djangoproj.wsgi:application", "-e", "SCRIPT_NAME=/prefix") as g:
        response = g.get("/prefix/json/")
        assert response.status_code == 200
        assert response.json()["script_name"] == "/prefix"


def test_django_asgi_two_workers():
    with gunicorn("apps.asgi_djangoproj.asgi:application") as g:
        response = g.get("/async/?a=1")
        assert response.status_code == 200
        body = response.json()
        assert (body["framework"], body["kind"], body["query"]) == ("django", "async", {"a": "1"})
        assert g.get("/sync/").status_code == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_http2_prior_knowledge_when_http_protocols_ask():
    """gunicorn's own settings turn h2c on (its default, h1, keeps HTTP/1.1 only: see
    test_h2_rfc9113.py's gunicorn tests)."""
    args = ("--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge")
    with gunicorn("apps.basic:app", *args) as g:
        r = subprocess.run(
            ["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version}"]
            + [g.url + "/"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.stdout == "2", r.stderr


def test_flask_app():
    with gunicorn("apps.flask_app:app") as g:
        assert g.get("/").text == "hello from flask"
        assert g.get("/users/7").json() == {"id": 7, "name": "user-7"}


def test_starlette_lifespan_startup_and_shutdown(tmp_path):
    events = tmp_path / "events"
    env = {"ASGI_TEST_EVENTS": str(events)}
    with gunicorn("apps.asgi_starlette:app", env=env) as g:
        response = g.get("/state")
        assert response.status_code == 200
        assert response.json()["db"]
        # The other worker may still be starting up when the first one answers.
        _wait_for(lambda: _lines(events).count("startup") == 2, what="startup in both workers")
        g.proc.send_signal(signal.SIGTERM)
        assert g.proc.wait(20) == 0
    assert events.read_text().splitlines().count("shutdown") == 2


def test_forced_asgi_worker_class():
    worker = "pyserver.workers.PyserverASGIWorker"
    with gunicorn("apps.asgi_starlette:app", worker=worker, workers=1) as g:
        assert g.get("/state").status_code == 200


def test_unix_socket_and_tcp_binds():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.sock")
        with gunicorn("apps.gunicorn_app:app", binds=[f"unix:{path}"], workers=1) as g:
            assert _pid(g.get("/")) > 0
            transport = httpx.HTTPTransport(uds=path)
            with httpx.Client(transport=transport, timeout=10) as client:
                assert _pid(client.get("http://localhost/")) > 0


def _listening_socket():
    """A loopback TCP socket listening on a free port, inheritable (for fd:// binds)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, 0))
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


def test_fd_bind_is_served():
    """-b fd://N: gunicorn's arbiter takes over a listening socket it inherited; both
    workers serve on it once the test has closed its own copy."""
    with _listening_socket() as listener:
        port, fd = listener.getsockname()[1], listener.fileno()
        binds = [f"fd://{fd}"]
        with gunicorn(
            "apps.gunicorn_app:app", binds=binds, listen=False, port=port, pass_fds=(fd,)
        ) as g:
            listener.close()  # only gunicorn holds the listening socket now
            assert f"Listening at: http://{HOST}:{port}" in g.log()
            assert {_pid(g.get("/")) for _ in range(5)} <= g.booted_pids()
            assert g.get("/", params={"x": "1"}).status_code == 200


def test_every_worker_serves_every_bind(tmp_path):
    """A TCP port and a unix socket at once, two workers. Worker A is held in a request
    while both binds are checked on B; then B is held (the only worker left to take that
    request) and A, released, must answer on both binds.

    (An fd:// bind cannot be mixed in: with one, gunicorn's create_sockets listens on the
    inherited fds only and drops the address binds, whatever the worker class.)"""
    path = str(tmp_path / "g.sock")
    events = tmp_path / "events"
    env = {"GUNICORN_APP_EVENTS": str(events)}
    with gunicorn("apps.gunicorn_app:app", binds=[f"unix:{path}"], env=env) as g:
        assert f"Listening at: http://{HOST}:{g.port},unix:{path} " in g.log()
        workers = g.booted_pids()
        assert len(workers) == 2, g.log()

        def unix_get():
            # A new connection each time, like g.get: a kept-alive one stays with its worker.
            transport = httpx.HTTPTransport(uds=path)
            with httpx.Client(transport=transport, timeout=10) as client:
                return client.get("http://localhost/")

        clients = {"tcp": lambda: g.get("/"), "unix": unix_get}
        held = []  # (thread, gate, results) of each request held in a worker

        def hold(index):
            """Sends a request that blocks its worker until released; returns that pid."""
            gate, results = tmp_path / f"gate-{index}", []
            params = {"gate": str(gate)}
            thread = threading.Thread(
                target=lambda: results.append(g.get("/sleep", params=params).text)
            )
            thread.start()
            held.append((thread, gate, results))
            _wait_for(lambda: len(_lines(events)) > index, 15, f"held request {index}")
            return int(_lines(events)[index].split()[1])

        def release(index):
            thread, gate, results = held[index]
            gate.touch()
            thread.join(15)
            assert results == ["slept"]

        try:
            busy = hold(0)
            (other,) = workers - {busy}
            for name, get in clients.items():
                assert _pid(get()) == other, name
            assert hold(1) == other  # the only worker left to take it
            release(0)
            for name, get in clients.items():
                assert _pid(get()) == busy, name
            release(1)
        finally:
            for _, gate, _ in held:
                gate.touch()


RELOAD_APPS = {
    "wsgi": (
        "VERSION = {version!r}\n"
        "\n"
        "\n"
        "def app(environ, start_response):\n"
        "    body = VERSION.encode()\n"
        "    start_response('200 OK', [('Content-Length', str(len(body)))])\n"
        "    return [body]\n"
    ),
    "asgi": (
        "VERSION = {version!r}\n"
        "\n"
        "\n"
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    body = VERSION.encode()\n"
        "    headers = [(b'content-length', str(len(body)).encode())]\n"
        "    await send({{'type': 'http.response.start', 'status': 200, 'headers': headers}})\n"
        "    await send({{'type': 'http.response.body', 'body': body}})\n"
    ),
}


@pytest.mark.parametrize("interface", sorted(RELOAD_APPS))
def test_reload_serves_the_edited_app(tmp_path, interface):
    """--reload: editing the application's module makes the worker stop (gunicorn's reloader
    thread clears `alive`, the core's heartbeat tick sees it) and the new worker serves the
    new code."""
    module = tmp_path / "reload_app.py"
    module.write_text(RELOAD_APPS[interface].format(version="first"))
    args = ("--reload", "--chdir", str(tmp_path), "--pythonpath", str(tmp_path))
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    with gunicorn("reload_app:app", *args, workers=1, env=env) as g:
        assert g.get("/").text == "first"
        first = g.booted_pids()
        module.write_text(RELOAD_APPS[interface].format(version="the second one"))
        # gunicorn's reloader (a thread, polling once a second) notes a file's mtime on its
        # first pass and reloads when it grows later; that first pass may come after the
        # edit on a slow machine, so the mtime moves on until the new code answers.
        bumped = [time.monotonic(), 0]

        def serves_the_new_code():
            if g.get("/").text == "the second one":
                return True
            if time.monotonic() - bumped[0] > 2.5:
                bumped[0], bumped[1] = time.monotonic(), bumped[1] + 1
                stamp = time.time() + bumped[1]
                os.utime(module, (stamp, stamp))
            return False

        _wait_for(serves_the_new_code, 30, "the edited app to be served")
        assert f"Worker reloading: {module} modified" in g.log()
        assert g.booted_pids() - first, "no new worker booted"


def _unloadable_cert(directory):
    """(certfile, keyfile): files that exist (gunicorn's arbiter checks that much) but hold
    no certificate or key."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nplaceholder\n-----END PRIVATE KEY-----\n")
    return str(cert), str(key)


@pytest.mark.parametrize("workers", [1, 2])
def test_unloadable_certificate_exits_with_code_3(tmp_path, workers):
    """--certfile/--keyfile that do not load: each worker logs why and refuses to start with
    WORKER_BOOT_ERROR (3), and the arbiter stops instead of respawning workers in a loop.
    (Serving TLS under gunicorn is tests/test_tls.py's.)

    The arbiter's own exit status is 3 with one worker. With several, gunicorn (27.0.1) may
    exit 1: when a second worker's exit 3 is reaped inside halt() -> stop(), its
    reap_workers() raises a second HaltServer that nothing catches (a traceback in the log).
    That is gunicorn's, whatever the worker class; the worker's 3 and the stop are pyserver's."""
    cert, key = _unloadable_cert(tmp_path)
    args = ("--certfile", cert, "--keyfile", key)
    with gunicorn("apps.gunicorn_app:app", *args, workers=workers, wait_workers=False) as g:
        status = g.proc.wait(30)
        log = g.log()
    assert status == 3 if workers == 1 else status != 0, log[-4000:]
    assert f"TLS: cannot load the certificate chain {cert}" in log
    assert "exited with code 3" in log
    assert "Worker failed to boot" in log
    booted = len(re.findall("Booting worker with pid", log))
    assert booted <= workers, log[-4000:]  # none respawned


# ---- process management ----


APPS = pytest.mark.parametrize("app", ["apps.gunicorn_app:app", "apps.gunicorn_app:asgi_app"])


@APPS
def test_hup_under_load_loses_no_request(app):
    with gunicorn(app) as g:
        before = g.booted_pids()
        assert len(before) == 2, g.log()
        with Load(g) as load:
            _wait_for(lambda: load.ok >= 20, what="requests before the HUP")
            g.proc.send_signal(signal.SIGHUP)
            # New workers answer and the old ones finish and exit, all under load; then
            # some more requests go to the new workers alone.
            _wait_for(lambda: load.pids - before, BOOT_TIMEOUT, "a new worker answering")
            _wait_for(lambda: not any(_alive(pid) for pid in before), BOOT_TIMEOUT, "old exit")
            settled = load.ok
            _wait_for(lambda: load.ok >= max(settled + 20, 51), what="requests after the HUP")
        assert load.failures == []
        assert load.ok > 50
        assert load.pids - before, "no request reached a new worker"
        after = {_pid(g.get("/")) for _ in range(20)}
        assert not (after & before), "old workers still answer after the HUP"


@APPS
def test_term_completes_in_flight_requests(app, tmp_path):
    events = tmp_path / "events"
    with gunicorn(app, env={"GUNICORN_APP_EVENTS": str(events)}) as g:
        results = []

        def slow():
            try:
                results.append(g.get("/sleep?s=1.5", timeout=15).text)
            except Exception as exc:  # noqa: BLE001
                results.append(repr(exc))

        threads = [threading.Thread(target=slow) for _ in range(2)]
        for thread in threads:
            thread.start()
        # Both requests are in the application (one after the other if the same worker
        # took both) when the TERM comes.
        started = lambda: sum(line.startswith("sleep-start") for line in _lines(events))  # noqa: E731
        _wait_for(lambda: started() == 2, 15, "both requests in the application")
        g.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(20)
        assert results == ["slept", "slept"]
        assert g.proc.wait(20) == 0


@APPS
def test_blocked_worker_is_killed_by_the_arbiter_timeout(tmp_path, app):
    hooks = tmp_path / "hooks"
    env = {"GUNICORN_HOOKS_FILE": str(hooks)}
    args = ("--timeout", "2", "-c", "apps/gunicorn_hooks.py")
    with gunicorn(app, *args, workers=1, env=env) as g:
        first = _pid(g.get("/"))
        started = time.monotonic()
        with pytest.raises(httpx.HTTPError):
            g.get("/sleep?s=30", timeout=20)
        assert time.monotonic() - started < 15
        g.wait_log(f"WORKER TIMEOUT (pid:{first})")
        g.wait_log("Booting worker", 2)
        assert _pid(g.get("/")) != first
        assert "worker_abort" in hooks.read_text().splitlines()


@APPS
def test_max_requests_recycles_workers(app):
    args = ("--max-requests", "15", "--max-requests-jitter", "5")
    with gunicorn(app, *args) as g:
        with Load(g, threads=2, pause=0.01) as load:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (len(load.pids) < 4 or load.ok < 100):
                time.sleep(0.1)
        assert load.failures == []
        assert len(load.pids) >= 4, load.pids
        assert "Autorestarting worker after current request." in g.log()


# ---- logs, errors, hooks ----


def test_access_log_format_wsgi():
    fmt = "%(h)s %(r)s %(s)s %(b)s"
    args = ("--access-logfile", "-", "--access-logformat", fmt)
    with gunicorn("apps.flask_app:app", *args, workers=1) as g:
        body = g.get("/users/3?x=1").content
        g.wait_log(f"127.0.0.1 GET /users/3?x=1 HTTP/1.1 200 {len(body)}")
        assert g.get("/missing").status_code == 404
        g.wait_log("127.0.0.1 GET /missing HTTP/1.1 404 ")


def test_access_log_format_asgi():
    fmt = "%(h)s %(r)s %(s)s %(b)s %({x-pure-asgi}o)s"
    args = ("--access-logfile", "-", "--access-logformat", fmt)
    with gunicorn("apps.asgi_starlette:app", *args, workers=1) as g:
        body = g.get("/state?y=2").content
        g.wait_log(f"127.0.0.1 GET /state?y=2 HTTP/1.1 200 {len(body)} ")


def test_request_id_from_the_environment():
    """--request-id has no gunicorn setting: -e PYSERVER_REQUEST_ID=true turns it on, and the
    core's access lines take %(rid)s."""
    args = ("-e", "PYSERVER_REQUEST_ID=true", "--access-logfile", "-")
    args += ("--access-logformat", "RID %(rid)s %(r)s")
    with gunicorn("apps.reqid_apps:wsgi", *args, workers=1) as g:
        r = g.get("/g", headers={"X-Request-ID": "not valid"})
        rid = r.json()["id"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid) and r.headers["x-request-id"] == rid
        g.wait_log(f"RID {rid} GET /g HTTP/1.1")


def test_import_error_exits_with_app_load_error():
    with gunicorn("apps.broken_import:app", workers=1, wait_workers=False) as g:
        assert g.proc.wait(30) == 4
        assert "apps.broken_import fails on import on purpose" in g.log()


def test_lifespan_startup_failure_stops_the_arbiter():
    env = {"LIFESPAN_TEST_STARTUP": "fail"}
    with gunicorn("apps.lifespan_apps:served", workers=1, env=env, wait_workers=False) as g:
        assert g.proc.wait(30) == 3
        assert "Application startup failed" in g.log()


def test_server_hooks_fire(tmp_path):
    hooks = tmp_path / "hooks"
    env = {"GUNICORN_HOOKS_FILE": str(hooks)}
    with gunicorn("apps.gunicorn_app:app", "-c", "apps/gunicorn_hooks.py", env=env) as g:
        _pid(g.get("/?a=1"))
        _wait_for(lambda: "post_request GET / 200" in _lines(hooks))
        # One worker answered; the other may still be booting.
        _wait_for(lambda: _lines(hooks).count("post_worker_init") == 2, what="both workers")
        lines = hooks.read_text().splitlines()
        assert lines.count("post_fork") == 2
        assert lines.count("post_worker_init") == 2
        assert "pre_request GET /" in lines
        g.proc.send_signal(signal.SIGINT)
        assert g.proc.wait(20) == 0
    lines = hooks.read_text().splitlines()
    assert lines.count("worker_int") == 2
    assert lines.count("worker_exit") == 2


def test_server_hooks_fire_for_asgi(tmp_path):
    hooks = tmp_path / "hooks"
    env = {"GUNICORN_HOOKS_FILE": str(hooks)}
    args = ("-c", "apps/gunicorn_hooks.py")
    with gunicorn("apps.asgi_starlette:app", *args, workers=1, env=env) as g:
        assert g.get("/state").status_code == 200
        # post_request runs once the app returned, which may be after the client has it all.
        _wait_for(lambda: "post_request GET /state 200" in hooks.read_text().splitlines())
        assert "pre_request GET /state" in hooks.read_text().splitlines()


def test_usr1_reopens_the_access_log(tmp_path):
    access = tmp_path / "access.log"
    args = ("--access-logfile", str(access), "--access-logformat", "%(r)s")
    with gunicorn("apps.gunicorn_app:app", *args, workers=1) as g:
        _pid(g.get("/first"))
        _wait_for(lambda: "GET /first" in access.read_text())
        access.rename(tmp_path / "access.log.1")
        g.proc.send_signal(signal.SIGUSR1)  # the arbiter passes it on to its workers
        _wait_for(access.exists)  # the arbiter reopened its own files

        # The arbiter reopens its files before it signals the worker, so a request
        # answered at once may still be logged in the old file; soon one lands in the new.
        counter = itertools.count()

        def logged_in_the_new_file():
            target = f"/second-{next(counter)}"
            _pid(g.get(target))
            return wait_for(lambda: f"GET {target} " in access.read_text(), 2.0)

        _wait_for(logged_in_the_new_file, 15, "a request logged in the reopened file")
        _pid(g.get("/third"))
        _wait_for(lambda: "GET /third" in access.read_text())
        assert "GET /third" not in (tmp_path / "access.log.1").read_text()


def test_workers_exit_when_the_arbiter_dies():
    with gunicorn("apps.gunicorn_app:app") as g:
        _pid(g.get("/"))
        pids = g.booted_pids()
        assert len(pids) == 2, g.log()
        os.kill(g.proc.pid, signal.SIGKILL)
        g.proc.wait(5)
        _wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10)


def test_gunicorn_request_limits_are_mapped():
    args = ("--limit-request-line", "100", "--limit-request-fields", "5")
    with gunicorn("apps.gunicorn_app:app", *args, workers=1) as g:
        assert g.get("/?" + "a" * 50).status_code == 200
        assert g.get("/?" + "a" * 200).status_code == 414
        headers = {f"x-h{i}": "1" for i in range(10)}
        assert g.get("/", headers=headers).status_code == 431
        # Each refusal says why on gunicorn's error log (INFO, its default level).
        assert "Rejected 414 from " in g.log() and ": request line too long" in g.log()
        assert '"GET / HTTP/1.1" from ' in g.log() and ": too many header fields" in g.log()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of the (dead) arbiter is reaped by init soon; /proc tells it apart.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    return False


def _wait_for(predicate, timeout=10.0, what=None):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)


def _lines(path):
    """The lines of a file that the server side appends to; [] until it exists."""
    return path.read_text().splitlines() if path.exists() else []


# ---- in-process ----


def test_default_request_hooks_are_not_called():
    from pyserver.workers import _is_default_hook

    cfg = gunicorn_config.Config()
    assert _is_default_hook(cfg, "pre_request")
    assert _is_default_hook(cfg, "post_request")
    cfg.set("pre_request", lambda worker, req: None)
    cfg.set("post_request", lambda worker, req: None)  # gunicorn wraps a 2-argument hook
    assert not _is_default_hook(cfg, "pre_request")
    assert not _is_default_hook(cfg, "post_request")


def test_pyserver_does_not_need_gunicorn():
    code = (
        "import sys\n"
        "sys.modules['gunicorn'] = None\n"
        "import pyserver, pyserver.cli, pyserver.config, pyserver.workers_proc\n"
        "try:\n"
        "    import pyserver.workers\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=TESTS_DIR.parent,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    # What works today: pyserver-ev is not on the package index yet.
    assert "pip install gunicorn" in out.stdout
    assert "pyserver-ev" not in out.stdout


def test_protocol_uwsgi():
    """gunicorn's --protocol uwsgi: the worker's listeners speak the uwsgi protocol."""
    from test_uwsgi import nginx_like, packet, send_raw, split_response

    with gunicorn("apps.uwsgi_echo:app", "--protocol", "uwsgi", workers=1) as g:
        status, _, data = split_response(send_raw(g.port, packet(nginx_like("/g?x=1"))))
        assert status == "HTTP/1.1 200 OK", g.log()[-2000:]
        seen = json.loads(data)
        assert (seen["path"], seen["query"]) == ("/g", "x=1")
        assert seen["client"] == ["192.0.2.7", 40000]


def test_health_check_and_drain_from_the_environment():
    """PYSERVER_HEALTH_CHECK_PATH and PYSERVER_DRAIN_DELAY (gunicorn has no such settings):
    the arbiter's SIGTERM starts the worker's drain, the health check answers 503 while the
    application still answers, then the worker stops and the arbiter exits 0."""
    env = {"PYSERVER_HEALTH_CHECK_PATH": "/healthz", "PYSERVER_DRAIN_DELAY": "1.5"}
    with gunicorn("apps.health_apps:wsgi", workers=1, env=env) as g:
        _wait_for(lambda: g.get("/healthz").status_code == 200, what="the health check")
        assert g.get("/healthz").text == "ok\n"
        started = time.monotonic()
        g.proc.send_signal(signal.SIGTERM)
        _wait_for(lambda: g.get("/healthz").status_code == 503, 10, "the health check's 503")
        assert g.get("/during-drain").text == "app"
        assert json.loads(g.get("/seen").text) == ["/during-drain"]
        assert g.proc.wait(15) == 0, g.log()
        assert time.monotonic() - started >= 1.4, g.log()
        assert "draining for 1.5 s" in g.log()
