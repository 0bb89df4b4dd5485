"""The servers under test: how each one is started for a scenario.

A server's `argv(ctx, scenario, port)` returns the command line (run from the
repository root, not pinned yet) and may write files (nginx's configuration)
into `ctx.tmpdir`; the text of such files is returned for the report.
"""

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import tls

HOST = "127.0.0.1"


@dataclass
class Context:
    root: str  # repository root, the servers' working directory
    peers_venv: str  # benchmarks/.venv-peers
    project_python: str  # .venv/bin/python of the project
    tmpdir: str  # scratch directory of this harness run

    def project_bin(self, name):
        return os.path.join(os.path.dirname(self.project_python_rel), name)

    def peer_bin(self, name):
        return os.path.relpath(os.path.join(self.peers_venv, "bin", name), self.root)

    @property
    def project_python_rel(self):
        return os.path.relpath(self.project_python, self.root)


@dataclass
class ServerSpec:
    name: str
    role: str  # "project", "peer" or "ceiling"
    summary: str
    argv: Callable  # (ctx, scenario, port) -> (argv, {path: file text})
    max_workers: int = 0  # 0: no limit
    binary: str = ""  # an executable on PATH instead of a Python package
    env: dict = field(default_factory=dict)
    # Where it is installed: "project" (.venv), "peers" (.venv-peers) or "" (a binary).
    venv: str = ""
    module: str = ""  # import name that must be present in the peers venv
    dist: str = ""  # distribution whose version is reported
    # A file that must be mapped in one of the server's processes once it answers (the
    # baseline build's extension: proof that the old build is the one running).
    loads: str = ""
    # TLS: the options naming the certificate and key files (cert flag, key flag); HTTP/2:
    # {"h2c": argv for prior-knowledge cleartext HTTP/2, "h2": argv for HTTP/2 over TLS}.
    tls: tuple = ()
    h2: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.binary:
            return
        self.venv = self.venv or ("project" if self.role == "project" else "peers")
        self.dist = self.dist or PEER_DISTS.get(self.name, self.name)
        if self.venv == "peers":
            self.module = self.module or self.dist


# Distribution (and import) name of peers whose name differs from the server's.
PEER_DISTS = {"uwsgi": "pyuwsgi"}
PYSERVER_TLS = ("--ssl-certfile", "--ssl-keyfile")
PYSERVER_H2 = {"h2c": ["--http", "auto"], "h2": ["--http", "auto"]}


def protocol_argv(spec, ctx, sc):
    """SPEC's extra options for the scenario's TLS and HTTP/2 (nginx: in its config)."""
    if spec.binary == "nginx":
        return []
    argv = []
    if sc.tls:
        paths = tls.cert_paths(ctx.tmpdir)
        argv += [spec.tls[0], paths["cert"], spec.tls[1], paths["key"]]
    if sc.http2:
        argv += spec.h2[sc.http2]
    return argv


def protocol_unsupported(spec, sc):
    """Why SPEC cannot serve the scenario's protocol, or "" when it can."""
    if spec.binary == "nginx":
        return ""
    if sc.tls and not spec.tls:
        return f"{spec.name} has no TLS support here"
    if sc.http2 and sc.http2 not in spec.h2:
        proto = "HTTP/2 over TLS" if sc.http2 == "h2" else "cleartext HTTP/2 (h2c)"
        return f"{spec.name} does not implement {proto}"
    return ""


def _workers_flag(flag, scenario):
    return [flag, str(scenario.workers)] if scenario.workers > 1 else []


def _behind_nginx(ctx, port, server_argv):
    """SERVER_ARGV (speaking uwsgi on PORT + 1) behind nginx's uwsgi_pass on PORT."""
    wrapper = [ctx.project_python_rel, "benchmarks/peers/behind_nginx.py"]
    return wrapper + [str(port), str(port + 1), ctx.tmpdir, "--", *server_argv], {}


def pyserver_argv(ctx, sc, port):
    if sc.launcher == "uwsgi_pass":
        argv = [ctx.project_python_rel, "-m", "pyserver", sc.app]
        argv += ["-b", f"uwsgi://{HOST}:{port + 1}", "--no-access-log"]
        return _behind_nginx(ctx, port, argv + _workers_flag("-w", sc))
    if sc.launcher == "gunicorn":
        argv = [ctx.project_bin("gunicorn"), "-w", str(sc.workers)]
        argv += ["-k", "pyserver.workers.PyserverWorker", "-b", f"{HOST}:{port}"]
        return argv + ["--log-level", "warning", sc.app], {}
    argv = [ctx.project_python_rel, "-m", "pyserver", sc.app]
    argv += ["--host", HOST, "--port", str(port), "--no-access-log"]
    return argv + _workers_flag("-w", sc), {}


def pyserver_gunicorn_argv(ctx, sc, port):
    argv = [ctx.project_bin("gunicorn"), "-w", str(sc.workers)]
    argv += ["-k", "pyserver.workers.PyserverWorker", "-b", f"{HOST}:{port}"]
    return argv + ["--log-level", "warning", sc.app], {}


def pyserver_wsgi_argv(ctx, sc, port):
    argv = [ctx.project_python_rel, "-m", "pyserver", sc.wsgi_app or sc.app]
    argv += ["--host", HOST, "--port", str(port), "--no-access-log"]
    return argv + _workers_flag("-w", sc), {}


def pyserver_hybrid_argv(threads):
    """pyserver with the project's WSGI application for HTTP and its ASGI one beside it
    (--asgi-app: WebSockets, lifespan) on THREADS application threads."""

    def argv_of(ctx, sc, port):
        argv = [ctx.project_python_rel, "-m", "pyserver", sc.wsgi_app, "--asgi-app", sc.app]
        argv += ["--threads", str(threads), "--host", HOST, "--port", str(port)]
        return argv + ["--no-access-log"] + _workers_flag("-w", sc), {}

    return argv_of


def pyserver_asgi_argv(ctx, sc, port):
    argv = [ctx.project_python_rel, "-m", "pyserver", sc.asgi_app or sc.app]
    argv += ["--host", HOST, "--port", str(port), "--no-access-log"]
    return argv + _workers_flag("-w", sc), {}


def gunicorn_gthread_argv(ctx, sc, port):
    argv = [ctx.peer_bin("gunicorn"), "-w", str(sc.workers), "-k", "gthread"]
    argv += ["--threads", str(sc.threads or 1)]
    argv += ["-b", f"{HOST}:{port}", "--log-level", "warning", sc.app]
    return argv, {}


def uwsgi_threads_argv(ctx, sc, port):
    # --http11-socket: keep-alive (--http-socket closes after every response).
    argv = [ctx.peer_bin("uwsgi"), "--http11-socket", f"{HOST}:{port}", "--module", sc.app]
    argv += ["--processes", str(sc.workers), "--threads", str(sc.threads or 1)]
    argv += ["--disable-logging", "--need-app"]
    if sc.workers > 1:
        argv.append("--master")
    return argv, {}


def bjoern_argv(ctx, sc, port):
    python = ctx.peer_bin("python")
    return [python, "benchmarks/peers/run_bjoern.py", sc.app, HOST, str(port)], {}


def meinheld_argv(ctx, sc, port):
    python = ctx.peer_bin("python")
    return [python, "benchmarks/peers/run_meinheld.py", sc.app, HOST, str(port)], {}


def fastpysgi_argv(ctx, sc, port):
    # Its CLI: one process, keep-alive on, WSGI or ASGI told apart by the callable.
    return [ctx.peer_bin("fastpysgi"), sc.app, "--host", HOST, "--port", str(port)], {}


def socketify_argv(ctx, sc, port):
    argv = [ctx.peer_bin("python"), "-m", "socketify", sc.app, "--interface", sc.interface]
    argv += ["--host", HOST, "--port", str(port), "--ws", "none"]
    return argv + _workers_flag("--workers", sc), {}


def granian_argv(ctx, sc, port):
    argv = [ctx.peer_bin("granian"), "--interface", sc.interface]
    # WebSockets stay on where the scenario uses them (echo, or subscribers beside HTTP).
    ws = sc.ws_size or sc.ws_subscribers
    argv += ["--workers", str(sc.workers)] + ([] if ws else ["--no-ws"])
    argv += ["--host", HOST, "--port", str(port)]
    if sc.threads and sc.interface == "wsgi":
        argv += ["--blocking-threads", str(sc.threads)]
    argv += ["--log-level", "warning", "--no-access-log", sc.app]
    return argv, {}


def uwsgi_argv(ctx, sc, port):
    socket = ["--socket", f"{HOST}:{port + 1}"] if sc.launcher == "uwsgi_pass" else []
    socket = socket or ["--http-socket", f"{HOST}:{port}"]
    argv = [ctx.peer_bin("uwsgi"), *socket, "--module", sc.app]
    argv += ["--processes", str(sc.workers), "--disable-logging", "--need-app"]
    if sc.workers > 1:
        argv.append("--master")
    return _behind_nginx(ctx, port, argv) if sc.launcher == "uwsgi_pass" else (argv, {})


def gunicorn_argv(ctx, sc, port):
    argv = [ctx.peer_bin("gunicorn"), "-w", str(sc.workers), "-k", "sync"]
    argv += ["-b", f"{HOST}:{port}", "--log-level", "warning", sc.app]
    return argv, {}


def gunicorn_whitenoise_argv(ctx, sc, port):
    argv = [ctx.peer_bin("gunicorn"), "-w", str(sc.workers), "-k", "sync"]
    argv += ["-b", f"{HOST}:{port}", "--log-level", "warning"]
    return argv + ["benchmarks.apps.static_files:whitenoise_app"], {}


def uvicorn_argv(ctx, sc, port):
    argv = [ctx.peer_bin("uvicorn"), sc.app, "--host", HOST, "--port", str(port)]
    argv += ["--loop", "uvloop", "--http", "httptools", "--no-access-log"]
    argv += ["--log-level", "warning"]
    return argv + _workers_flag("--workers", sc), {}


def uvicorn_ws_argv(impl):
    """uvicorn with the WebSocket implementation IMPL (websockets, wsproto)."""

    def argv(ctx, sc, port):
        cmd, files = uvicorn_argv(ctx, sc, port)
        return cmd + ["--ws", impl], files

    return argv


def hypercorn_argv(ctx, sc, port):
    argv = [ctx.peer_bin("hypercorn"), "-b", f"{HOST}:{port}", "-w", str(sc.workers)]
    argv += ["--log-level", "warning", sc.app]
    return argv, {}


def uvicorn_worker_argv(ctx, sc, port):
    argv = [ctx.peer_bin("gunicorn"), "-w", str(sc.workers), "-k", "uvicorn_worker.UvicornWorker"]
    argv += ["-b", f"{HOST}:{port}", "--log-level", "warning", sc.app]
    return argv, {}


def gunicorn_asgi_argv(ctx, sc, port):
    """gunicorn's own ASGI worker; HTTP/2 by ALPN, and by prior knowledge for h2c."""
    argv = [ctx.peer_bin("gunicorn"), "-w", str(sc.workers), "-k", "asgi"]
    argv += ["-b", f"{HOST}:{port}", "--log-level", "warning", sc.app]
    return argv, {}


def uvicorn_h2_argv(ctx, sc, port):
    """uvicorn's experimental HTTP/2 (uvicorn >= 0.54: the zttp parser)."""
    argv = [ctx.peer_bin("uvicorn"), sc.app, "--host", HOST, "--port", str(port)]
    argv += ["--loop", "uvloop", "--http", "zttp", "--http2", "--no-access-log"]
    argv += ["--log-level", "warning"]
    return argv + _workers_flag("--workers", sc), {}


def daphne_argv(ctx, sc, port):
    # -v 0: no access log on stdout (the gunicorn-run servers log none either).
    argv = [ctx.peer_bin("daphne"), "-b", HOST, "-p", str(port), "-v", "0", sc.app]
    return argv, {}


def peregrine_argv(ctx, sc, port):
    """peregrine-server, one worker; it imports uvloop from its own venv when present."""
    argv = [ctx.peer_bin("peregrine"), "--workers", str(sc.workers)]
    argv += ["--host", HOST, "--port", str(port), "--protocol", sc.interface]
    if sc.threads and sc.interface == "wsgi":
        argv += ["--wsgi-threads", str(sc.threads)]
    if sc.ws_deflate:
        argv.append("--ws-compress")
    return argv + [sc.app], {}


NGINX_CONF = """\
worker_processes {workers};
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{main}events {{ worker_connections {worker_connections}; }}
http {{
    access_log off;
    default_type text/plain;
    keepalive_requests 1000000;
{http}    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen {host}:{port}{listen};
        location / {{ return 200 "Hello World!"; }}
{server}    }}
}}
"""


def _nginx_lines(text, indent):
    """Extra directives of a scenario, one a line, indented; {tmp} is the run's tmpdir."""
    return "".join(f"{indent}{line.strip()}\n" for line in text.splitlines() if line.strip())


def nginx_argv(ctx, sc, port):
    tmp = os.path.join(ctx.tmpdir, "nginx")
    os.makedirs(tmp, exist_ok=True)
    conf = os.path.join(tmp, "nginx.conf")
    extra = {k: v.replace("{tmp}", ctx.tmpdir) for k, v in sc.nginx.items()}
    listen = (" ssl" if sc.tls else "") + (" http2" if sc.http2 else "")
    server = extra.get("server", "")
    if sc.tls:  # TLS 1.3 only, the run's certificate (nginx 1.22: `listen ... ssl http2`)
        paths = tls.cert_paths(ctx.tmpdir)
        server += f"\nssl_certificate {paths['cert']};\nssl_certificate_key {paths['key']};"
        server += "\nssl_protocols TLSv1.3;"
    text = NGINX_CONF.format(
        listen=listen,
        workers=sc.workers,
        tmp=tmp,
        host=HOST,
        port=port,
        main=_nginx_lines(extra.get("main", ""), ""),
        worker_connections=extra.get("worker_connections", "4096"),
        http=_nginx_lines(extra.get("http", ""), "    "),
        server=_nginx_lines(server, "        "),
    )
    with open(conf, "w") as f:
        f.write(text)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return [nginx, "-p", tmp, "-e", os.path.join(tmp, "error.log"), "-c", conf], {conf: text}


_SPECS = [
    ServerSpec(
        "peregrine",
        "peer",
        "peregrine-server (Swift core embedding CPython), uvloop installed beside it",
        peregrine_argv,
        dist="peregrine-server",
        module="peregrine",
        tls=("--tls-cert", "--tls-key"),
    ),
    ServerSpec(
        "pyserver",
        "project",
        "pyserver (this project)",
        pyserver_argv,
        tls=PYSERVER_TLS,
        h2=PYSERVER_H2,
    ),
    ServerSpec(
        "pyserver-middleware",
        "project",
        "pyserver without --compress serving the app behind its framework's gzip middleware",
        pyserver_argv,
        dist="pyserver",
    ),
    ServerSpec(
        "pyserver-gunicorn",
        "project",
        "gunicorn -k pyserver.workers.PyserverWorker",
        pyserver_gunicorn_argv,
        dist="pyserver",
    ),
    ServerSpec(
        "pyserver-1thread",
        "project",
        "pyserver --threads 1, the reference of a --threads scenario",
        pyserver_argv,
        dist="pyserver",
    ),
    ServerSpec(
        "pyserver-wsgi",
        "project",
        "pyserver serving the same project as WSGI",
        pyserver_wsgi_argv,
        dist="pyserver",
        tls=PYSERVER_TLS,
        h2=PYSERVER_H2,
    ),
    ServerSpec(
        "pyserver-hybrid4",
        "project",
        "pyserver: the project's WSGI app on 4 threads, its ASGI app beside it (--asgi-app)",
        pyserver_hybrid_argv(4),
        dist="pyserver",
    ),
    ServerSpec(
        "pyserver-hybrid8",
        "project",
        "pyserver: the project's WSGI app on 8 threads, its ASGI app beside it (--asgi-app)",
        pyserver_hybrid_argv(8),
        dist="pyserver",
    ),
    ServerSpec(
        "pyserver-asgi",
        "project",
        "pyserver serving the same project as ASGI",
        pyserver_asgi_argv,
        dist="pyserver",
        tls=PYSERVER_TLS,
        h2=PYSERVER_H2,
    ),
    ServerSpec(
        "gunicorn-gthread",
        "peer",
        "gunicorn gthread worker (-k gthread --threads N)",
        gunicorn_gthread_argv,
        dist="gunicorn",
    ),
    ServerSpec(
        "uwsgi-threads",
        "peer",
        "uwsgi --http11-socket --threads N (keep-alive)",
        uwsgi_threads_argv,
        dist="pyuwsgi",
    ),
    ServerSpec("bjoern", "peer", "bjoern.run(app, host, port)", bjoern_argv, max_workers=1),
    ServerSpec(
        "fastpysgi",
        "peer",
        "fastpysgi CLI (C, libuv + llhttp); as ASGI it polls, a CPU busy even when idle",
        fastpysgi_argv,
        max_workers=1,
    ),
    ServerSpec(
        "socketify",
        "peer",
        "socketify (uWebSockets, libuv) --interface wsgi|asgi --ws none",
        socketify_argv,
    ),
    ServerSpec(
        "granian",
        "peer",
        "granian (Rust/hyper), default threads",
        granian_argv,
        tls=("--ssl-certificate", "--ssl-keyfile"),
        h2={"h2c": ["--http", "2"], "h2": ["--http", "2"]},
    ),
    ServerSpec("uwsgi", "peer", "uwsgi --http-socket (closes after each response)", uwsgi_argv),
    ServerSpec(
        "gunicorn",
        "peer",
        "gunicorn sync worker (no keep-alive)",
        gunicorn_argv,
        tls=("--certfile", "--keyfile"),
    ),
    ServerSpec(
        "gunicorn-whitenoise",
        "peer",
        "WhiteNoise in front of the WSGI app, gunicorn sync worker",
        gunicorn_whitenoise_argv,
        module="whitenoise",
        dist="whitenoise",
    ),
    ServerSpec("meinheld", "peer", "meinheld (keep-alive on)", meinheld_argv, max_workers=1),
    ServerSpec(
        "uvicorn",
        "peer",
        "uvicorn --loop uvloop --http httptools",
        uvicorn_argv,
        tls=("--ssl-certfile", "--ssl-keyfile"),
    ),
    ServerSpec(
        "uvicorn-websockets",
        "peer",
        "uvicorn --loop uvloop --http httptools --ws websockets",
        uvicorn_ws_argv("websockets"),
        dist="uvicorn",
    ),
    ServerSpec(
        "uvicorn-wsproto",
        "peer",
        "uvicorn --loop uvloop --http httptools --ws wsproto",
        uvicorn_ws_argv("wsproto"),
        dist="uvicorn",
        module="wsproto",
    ),
    ServerSpec(
        "hypercorn",
        "peer",
        "hypercorn (asyncio; HTTP/2 by ALPN, h2c by prior knowledge or Upgrade)",
        hypercorn_argv,
        tls=("--certfile", "--keyfile"),
        h2={"h2c": [], "h2": []},
    ),
    ServerSpec(
        "uvicorn-worker",
        "peer",
        "gunicorn -k uvicorn_worker.UvicornWorker (uvicorn-worker; uvloop + httptools)",
        uvicorn_worker_argv,
        module="uvicorn_worker",
        dist="uvicorn-worker",
    ),
    ServerSpec(
        "gunicorn-asgi",
        "peer",
        "gunicorn -k asgi (gunicorn's own ASGI worker; HTTP/2 with --http-protocols h2,h1)",
        gunicorn_asgi_argv,
        dist="gunicorn",
        tls=("--certfile", "--keyfile"),
        h2={
            "h2c": ["--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge"],
            "h2": ["--http-protocols", "h2,h1"],
        },
    ),
    ServerSpec(
        "uvicorn-h2",
        "peer",
        "uvicorn --loop uvloop --http zttp --http2 (uvicorn's experimental HTTP/2)",
        uvicorn_h2_argv,
        dist="uvicorn",
        module="zttp",
        tls=("--ssl-certfile", "--ssl-keyfile"),
        h2={"h2c": [], "h2": []},
    ),
    ServerSpec("daphne", "peer", "daphne (Twisted)", daphne_argv, max_workers=1),
    ServerSpec("nginx", "ceiling", 'nginx return 200 "Hello World!"', nginx_argv, binary="nginx"),
]
SERVERS = {spec.name: spec for spec in _SPECS}


def register_baseline(ref, site_dir, extension, commit):
    """Add `pyserver@REF`: pyserver as built from REF, started like `pyserver` with SITE_DIR
    (a directory holding only a `pyserver` link to the baseline package) first on the path.
    `python -P` keeps the working directory (this checkout) off sys.path, so the baseline
    package wins; the name of the server."""
    name = f"pyserver@{ref}"

    def argv(ctx, sc, port):
        site = os.path.relpath(site_dir, ctx.root)
        cmd = ["env", f"PYTHONPATH={site}:.", ctx.project_python_rel, "-P", "-m", "pyserver"]
        cmd += [sc.app, "--host", HOST, "--port", str(port), "--no-access-log"]
        return cmd + _workers_flag("-w", sc), {}

    SERVERS[name] = ServerSpec(
        name,
        "project",
        f"pyserver built from {ref} (commit {commit[:12]}), same Python and flags",
        argv,
        dist="pyserver",
        loads=extension,
        tls=PYSERVER_TLS,
        h2=PYSERVER_H2,
    )
    return name
