"""Helpers shared by the tests: run a real pyserver process, speak raw HTTP/1.x to it.

Nothing here mocks anything: `run_server` starts `python -m pyserver` on a loopback port,
and the clients are plain sockets with a timeout on every one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
HOST = "127.0.0.1"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
SOCK_TIMEOUT = 10.0
LOG_TAIL = 4000
PORT_ATTEMPTS = 3  # run_server: starts on another free port when the picked one was taken
# Under `make test-asan` (scripts/asan-python.sh): memory bounds and timing limits relax.
UNDER_ASAN = os.environ.get("PYSERVER_ASAN") == "1" or "libasan" in os.environ.get("LD_PRELOAD", "")


# --------------------------------------------------------------------------- processes


# free_port() hands out ports below the kernel's ephemeral range, which bind(("", 0)) and
# every client's connect() draw from: a port picked there cannot be taken by some other
# socket's automatic bind between the pick and the server's own bind. Each pytest-xdist
# worker draws from its own slice of the range, so parallel workers never pick the same one.
PORT_POOL_START = 20000
_ports_given: set[int] = set()


def port_pool() -> range:
    """This process's slice of PORT_POOL_START up to the ephemeral range (empty if too small)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            end = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
    size = (end - PORT_POOL_START) // max(workers, 1)
    if size < 1000:
        return range(0)
    start = PORT_POOL_START + worker * size
    return range(start, start + size)


def free_port() -> int:
    """A loopback port nothing listens on, not given out before by this process."""
    pool = port_pool()
    for _ in range(100):
        port = random.choice(pool) if pool else 0
        if port in _ports_given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                continue
            port = probe.getsockname()[1]
        _ports_given.add(port)
        return port
    raise AssertionError(f"no free port in {pool}")


def server_env(extra: dict | None = None) -> dict:
    """The environment of a server process: ours, the repo root first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for name in [name for name in env if name.startswith(("PYSERVER_", "WEB_CONCURRENCY"))]:
        del env[name]
    env.update(extra or {})
    return env


def pyserver_command() -> list[str]:
    """How to start the server: `python -m pyserver`, or $PYSERVER_TEST_COMMAND if set
    (e.g. "pyserver" to test an installed console script)."""
    override = os.environ.get("PYSERVER_TEST_COMMAND")
    return shlex.split(override) if override else [sys.executable, "-m", "pyserver"]


def console_script() -> Path:
    return Path(sys.executable).parent / "pyserver"


class Server:
    """A running server process; `port`/`uds` say where it listens."""

    def __init__(self, proc: subprocess.Popen, log_path: str, port=None, uds=None):
        self.proc, self.log_path, self.port, self.uds = proc, log_path, port, uds

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def log_tail(self) -> str:
        return self.log()[-LOG_TAIL:]

    def wait_for_log(self, text: str, timeout: float = 5.0) -> bool:
        return wait_for(lambda: text in self.log(), timeout)

    def connect(self, timeout: float = SOCK_TIMEOUT) -> HTTPConn:
        if self.uds is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(self.uds)
        else:
            sock = socket.create_connection((HOST, self.port), timeout=timeout)
        return HTTPConn(sock)


def can_connect(port=None, uds=None) -> bool:
    family = socket.AF_UNIX if uds is not None else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(uds if uds is not None else (HOST, port))
        except OSError:
            return False
        return True


def wait_ready(srv: Server, ready=None) -> None:
    """Wait until the server accepts connections; fail with its log if it dies or stalls."""
    ready = ready or (lambda: can_connect(srv.port, srv.uds))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise AssertionError(
                f"server exited with {srv.proc.returncode} before accepting connections;"
                f" log:\n{srv.log_tail()}"
            )
        if ready():
            return
        time.sleep(0.05)
    raise AssertionError(f"server not ready after {START_TIMEOUT}s; log:\n{srv.log_tail()}")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_server(srv: Server) -> str | None:
    """SIGTERM, wait, SIGKILL fallback. Returns a problem description, or None if clean."""
    problem = None
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            problem = f"server did not exit within {STOP_TIMEOUT}s of SIGTERM (killed)"
    if srv.proc.poll() is None or group_alive(srv.pid):
        if not wait_for(lambda: not group_alive(srv.pid), 5.0):
            problem = problem or "processes of the server's group outlived it (killed)"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(srv.pid, signal.SIGKILL)
        srv.proc.wait(5)
    return problem


@contextlib.contextmanager
def run_server(
    spec: str,
    *args: str,
    env: dict | None = None,
    port: int | None = None,
    uds: str | None = None,
    listen: bool = True,
    pass_fds=(),
    command: list[str] | None = None,
    ready=None,
    cwd=None,
):
    """Start pyserver serving `spec` and yield a Server; stop it (and check it stops) after.

    `listen=False` leaves out --host/--port/--uds so the caller's `args` say where to listen
    (-b, --fd, PYSERVER_PORT); `port`/`uds` still say where to connect.

    A port picked here (no `port`, no `uds`) is free when picked but may be taken by another
    process before the server binds it; then the server is started again on another one.
    """
    pick_port = port is None and uds is None and listen
    for attempt in range(1, PORT_ATTEMPTS + 1):
        if pick_port:
            port = free_port()
        argv = [*(command or pyserver_command()), spec]
        if listen:
            argv += ["--uds", uds] if uds is not None else ["--host", HOST, "--port", str(port)]
        argv += ["--app-dir", str(TESTS_DIR), *args]
        log = tempfile.NamedTemporaryFile(prefix="pyserver-test-", suffix=".log", delete=False)
        with log:
            proc = subprocess.Popen(
                argv,
                cwd=cwd or TESTS_DIR,
                env=server_env(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        srv = Server(proc, log.name, port=port, uds=uds)
        try:
            wait_ready(srv, ready)
            break
        except BaseException:
            stop_server(srv)
            if pick_port and attempt < PORT_ATTEMPTS and lost_port_race(srv):
                os.unlink(log.name)
                continue
            raise
    try:
        yield srv
    except BaseException:
        stop_server(srv)
        raise
    problem = stop_server(srv)
    assert problem is None, f"{problem}; command {argv}; log:\n{srv.log_tail()}"
    os.unlink(log.name)


def lost_port_race(srv: Server) -> bool:
    """The server exited because its port was taken between free_port() and its bind."""
    return srv.proc.poll() is not None and "Address already in use" in srv.log()


def run_cli(*args: str, env: dict | None = None, timeout: float = 20.0, command=None, cwd=None):
    """Run the CLI to completion (for --help, --version, import errors)."""
    return subprocess.run(
        [*(command or pyserver_command()), *args],
        cwd=cwd or TESTS_DIR,
        env=server_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------- /proc


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_fd_count(pid: int, timeout: float = 5.0) -> int:
    """The fd count once it stops changing (connections of earlier tests may still close)."""
    previous = fd_count(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        current = fd_count(pid)
        if current == previous:
            return current
        previous = current
    return previous


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------- raw HTTP


class ConnectionClosed(AssertionError):
    """The peer closed (or reset) before a complete response head arrived."""


class ReadTimeout(AssertionError):
    """The peer sent nothing (and did not close) for the socket's whole timeout."""


@dataclass
class Response:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    complete: bool = True
    raw_head: bytes = b""
    chunk_sizes: list[int] | None = None
    trailers: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str, default: str | None = None) -> str | None:
        values = self.header_all(name)
        return values[0] if values else default

    def header_all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def has_header(self, name: str) -> bool:
        return bool(self.header_all(name))

    def tokens(self, name: str) -> set[str]:
        """The comma-separated tokens of a header, lower-cased (for Connection)."""
        return {
            token.strip().lower()
            for value in self.header_all(name)
            for token in value.split(",")
            if token.strip()
        }

    @property
    def closes(self) -> bool:
        return "close" in self.tokens("Connection")

    def __repr__(self) -> str:
        return (
            f"<Response {self.version} {self.status} {self.reason!r} headers={self.headers}"
            f" body={self.body[:200]!r}{'...' if len(self.body) > 200 else ''}"
            f" ({len(self.body)} bytes, complete={self.complete})>"
        )


class HTTPConn:
    """A socket plus a read buffer, so that pipelined responses can be read one by one."""

    def __init__(self, sock: socket.socket | None, data: bytes = b""):
        self.sock = sock
        self.buf = bytearray(data)
        self.eof = sock is None

    def __enter__(self) -> HTTPConn:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def _fill(self, size: int = 65536) -> bool:
        if self.eof:
            return False
        try:
            data = self.sock.recv(size)
        except ConnectionResetError:
            data = b""
        except TimeoutError:
            raise ReadTimeout(
                f"no data from the server for {self.sock.gettimeout()}s;"
                f" unread bytes so far: {bytes(self.buf[:300])!r}"
            ) from None
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_until(self, delim: bytes) -> bytes | None:
        """Bytes up to and including delim, or None at EOF without it."""
        while True:
            index = self.buf.find(delim)
            if index >= 0:
                out = bytes(self.buf[: index + len(delim)])
                del self.buf[: index + len(delim)]
                return out
            if not self._fill():
                return None

    def read_exact(self, size: int) -> bytes:
        """Up to `size` bytes; fewer only at EOF."""
        while len(self.buf) < size and self._fill(max(65536, size - len(self.buf))):
            pass
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out

    def read_to_eof(self) -> bytes:
        while self._fill():
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def wait_closed(self, timeout: float = 5.0) -> bytes | None:
        """Wait for the peer to close; returns unread bytes that came first, None on timeout."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            return self.read_to_eof()
        except ReadTimeout:
            return None
        finally:
            self.sock.settimeout(old)

    def request(self, method: str, target: str, **kwargs) -> Response:
        self.send(build_request(method, target, **kwargs))
        return self.read_response(method)

    def read_response(self, method: str = "GET") -> Response:
        raw_head = self.read_until(b"\r\n\r\n")
        if raw_head is None:
            raise ConnectionClosed(f"connection closed before a response head; got {self.buf!r}")
        response = parse_head(raw_head)
        if response.status < 200 or response.status in (204, 304) or method == "HEAD":
            return response
        if "chunked" in response.tokens("Transfer-Encoding"):
            self._read_chunked(response)
        elif response.has_header("Content-Length"):
            length = int(response.header("Content-Length"))
            response.body = self.read_exact(length)
            response.complete = len(response.body) == length
        else:
            response.body = self.read_to_eof()
        return response

    def _read_chunked(self, response: Response) -> None:
        body, sizes = bytearray(), []
        response.chunk_sizes = sizes
        response.complete = False
        while True:
            line = self.read_until(b"\r\n")
            if line is None:
                break
            size_text = line[:-2].split(b";", 1)[0].strip()
            assert size_text and all(c in b"0123456789abcdefABCDEF" for c in size_text), (
                f"bad chunk-size line {line!r} in response"
            )
            size = int(size_text, 16)
            sizes.append(size)
            if size == 0:
                response.trailers = self._read_trailers()
                response.complete = response.trailers is not None
                response.trailers = response.trailers or []
                break
            data = self.read_exact(size + 2)
            body += data[:size]
            if len(data) < size + 2:
                break
            assert data[size:] == b"\r\n", f"chunk of {size} bytes not followed by CRLF"
        response.body = bytes(body)

    def _read_trailers(self) -> list[tuple[str, str]] | None:
        trailers = []
        while True:
            line = self.read_until(b"\r\n")
            if line is None:
                return None
            if line == b"\r\n":
                return trailers
            name, _, value = line[:-2].decode("latin-1").partition(":")
            trailers.append((name, value.strip()))


def parse_head(raw_head: bytes) -> Response:
    lines = raw_head[:-4].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    assert version.startswith("HTTP/") and code.isdigit(), f"bad status line {lines[0]!r}"
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        assert sep and name and name == name.strip(), f"bad response header line {line!r}"
        headers.append((name, value.strip(" \t")))
    return Response(version, int(code), reason, headers, raw_head=raw_head)


def parse_response(raw: bytes, method: str = "GET") -> Response:
    """Parse one response out of bytes already received (e.g. from raw_request)."""
    return HTTPConn(None, raw).read_response(method)


def parse_responses(raw: bytes) -> list[Response]:
    conn, responses = HTTPConn(None, raw), []
    while conn.buf:
        responses.append(conn.read_response())
    return responses


def build_request(
    method: str,
    target: str,
    headers=(),
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: bool = True,
) -> bytes:
    """A request as bytes. Adds Host and Content-Length unless given or told not to."""
    headers = list(headers.items() if isinstance(headers, dict) else headers)
    names = {name.lower() for name, _ in headers}
    if host and "host" not in names:
        headers.insert(0, ("Host", HOST))
    if body and not names & {"content-length", "transfer-encoding"}:
        headers.append(("Content-Length", str(len(body))))
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return head.encode("latin-1") + b"\r\n" + body


def chunked(*parts: bytes, extension: bytes = b"") -> bytes:
    """Encode parts as a chunked body (empty parts skipped), each chunk with `extension`."""
    out = [b"%x%s\r\n%s\r\n" % (len(part), extension, part) for part in parts if part]
    return b"".join(out) + b"0\r\n\r\n"


def raw_request(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, return everything received until the server closes the connection."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(data)
        conn = HTTPConn(sock)
        try:
            return conn.read_to_eof()
        except ReadTimeout:
            raise AssertionError(
                f"server did not close the connection within {timeout}s; received {conn.buf!r}"
            ) from None


def fetch(port: int, method: str, target: str, timeout: float = SOCK_TIMEOUT, **kw) -> Response:
    """One request on a fresh connection; returns the parsed response."""
    with HTTPConn(socket.create_connection((HOST, port), timeout=timeout)) as conn:
        return conn.request(method, target, **kw)


def assert_serving(port: int, target: str = "/hello", body: bytes = b"hello world") -> None:
    """The server still answers a normal request correctly on a new connection."""
    response = fetch(port, "GET", target)
    assert response.status == 200, f"server no longer serving normally: {response!r}"
    assert response.body == body, f"server no longer serving normally: {response!r}"


def worker_pid(srv: Server) -> int:
    """The pid of the process that runs the app (apps.basic only: GET /pid)."""
    response = fetch(srv.port, "GET", "/pid")
    assert response.status == 200, response
    return int(response.body)


def current_loop(loop):
    """Fixture body: `loop` is the current event loop while the test runs; then its
    tasks are cancelled, its async generators and default executor shut down, and it
    is closed."""
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()
