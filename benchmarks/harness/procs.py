"""Server processes: start in their own session, wait for readiness, measure CPU, stop."""

import errno
import http.client
import os
import signal
import socket
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


class LaunchError(Exception):
    """The server did not start or did not answer 200 in time."""


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()


def process_tree(pid):
    """PIDs of the process, all of its descendants and every member of its session."""
    children = {}
    session = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None:
            continue
        child, ppid, sid = int(entry), int(fields[1]), int(fields[3])
        children.setdefault(ppid, []).append(child)
        if sid == pid:
            session.add(child)
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in tree:
            tree.add(p)
            todo.extend(children.get(p, ()))
    return tree | session


def tree_cpu(pid):
    """{pid: utime+stime in seconds} for the process tree of PID (threads included)."""
    times = {}
    for p in process_tree(pid):
        fields = _stat_fields(p)
        if fields is not None:
            times[p] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return times


def cpu_delta(before, after):
    """CPU seconds spent between two tree_cpu() snapshots (new processes count from zero)."""
    return sum(t - before.get(p, 0.0) for p, t in after.items())


def tree_maps(pid, path):
    """True if PATH (resolved) is mapped in a process of PID's tree (/proc/P/maps)."""
    want = os.path.realpath(path)
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/maps") as f:
                if any(line.rstrip().endswith(want) for line in f):
                    return True
        except OSError:
            continue
    return False


def port_is_free(port, host="127.0.0.1"):
    """True if a server could bind HOST:PORT now (nothing listens there)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def wait_port_free(port, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def http_get(host, port, path, timeout=2.0):
    """(status, body) of one GET request."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


class Server:
    """One running server: `argv` started with cwd/env, output to `log_path`."""

    def __init__(self, argv, cwd, env, log_path):
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.log_path = log_path
        self.proc = None

    def start(self):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, host, port, path, body, timeout=30.0, get=http_get):
        """Poll until HOST:PORT answers PATH with 200 (and BODY); raise LaunchError if not.
        GET(host, port, path) -> (status, body) asks (default: plain HTTP/1.1)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive():
                # argparse and tracebacks end with the reason; usage text comes before it
                last = tail(self.log_path, 8)
                reason = [ln for ln in last.splitlines() if "error" in ln.lower()]
                why = reason[-1].strip() if reason else last
                raise LaunchError(f"exited with code {self.proc.returncode}: {why}")
            try:
                status, got = get(host, port, path)
            except OSError as exc:
                last = f"{type(exc).__name__}: {exc}"
            except http.client.HTTPException as exc:
                last = f"bad HTTP: {type(exc).__name__}: {exc}"
            else:
                if status == 200 and (body is None or got == body):
                    return
                last = f"answered {status} {got[:60]!r}"
            time.sleep(0.1)
        raise LaunchError(f"not ready after {timeout:.0f} s ({last}): {tail(self.log_path, 8)}")

    def stop(self, timeout=5.0):
        """Stop the whole process group: SIGINT, then SIGTERM, then SIGKILL."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # session leader, so also the process group id
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; wait for the rest of the group too.
            if not _group_alive(pgid, timeout):
                break
        else:
            self.proc.wait()


def group_members(pgid):
    """PIDs of the live (not zombie) processes of process group PGID."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None and int(fields[2]) == pgid and fields[0] != b"Z":
                members.append(int(entry))
    return members


def _group_alive(pgid, timeout):
    """True if live members of process group PGID are still there after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


def status_kib(pid, field):
    """A kB field of /proc/PID/status (VmRSS, VmHWM) in KiB, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0


def tree_rss(pid, pids=None):
    """{pid: VmRSS in KiB} for the process tree of PID (or for the PIDS given)."""
    out = {}
    for p in pids if pids is not None else process_tree(pid):
        kib = status_kib(p, "VmRSS")
        if kib is not None:
            out[p] = kib
    return out
