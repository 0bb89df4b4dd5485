"""Requests lost during a rolling restart (SIGHUP to the master) under load.

Each server runs two workers; client threads send requests for a fixed time
(half on keep-alive connections, half on a new connection each) while the
master gets SIGHUP every few seconds. A request counts as lost unless it gets a
complete 2xx answer. A request written on a reused keep-alive connection that
the server closed is counted apart ("stale keep-alive"): HTTP clients retry
those on a new connection, but a server that stops workers cleanly answers
them with "Connection: close" instead of racing the client.

    .venv/bin/python benchmarks/hup_loss.py [--duration 12] [--hups 4]

Peers come from benchmarks/.venv-peers (created by benchmarks/run.py). Writes
benchmarks/results/restart/hup-loss.json and docs/benchmarks-restart.md.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
PEERS = os.path.join(ROOT, "benchmarks", ".venv-peers", "bin")
RESULT = os.path.join(ROOT, "benchmarks", "results", "restart", "hup-loss.json")
DOC = os.path.join(ROOT, "docs", "benchmarks-restart.md")
HOST = "127.0.0.1"

WSGI_APP = "benchmarks.apps.hello_wsgi:app"
ASGI_APP = "benchmarks.apps.hello_asgi:app"


def servers(port: int) -> dict[str, dict]:
    bind = f"{HOST}:{port}"
    pyserver = [
        PROJECT_PYTHON,
        "-m",
        "pyserver",
        WSGI_APP,
        "-w",
        "2",
        "-b",
        bind,
        "--no-access-log",
    ]
    return {
        "pyserver": {"argv": pyserver, "summary": "pyserver -w 2 (WSGI)"},
        "pyserver-reuse-port": {
            "argv": [*pyserver, "--reuse-port"],
            "summary": "pyserver -w 2 --reuse-port (WSGI)",
        },
        "gunicorn": {
            "argv": [
                os.path.join(PEERS, "gunicorn"),
                "-k",
                "sync",
                "-w",
                "2",
                "-b",
                bind,
                WSGI_APP,
            ],
            "summary": "gunicorn -k sync -w 2 (WSGI)",
        },
        "uvicorn": {
            "argv": [
                os.path.join(PEERS, "python"),
                "-m",
                "uvicorn",
                ASGI_APP,
                "--workers",
                "2",
                "--host",
                HOST,
                "--port",
                str(port),
                "--no-access-log",
            ],
            "summary": "uvicorn --workers 2 (ASGI; uvicorn's WSGI support is deprecated)",
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def answered(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=2)
        conn.request("GET", "/")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


class Load:
    def __init__(self, port: int, threads: int):
        self.port = port
        self.ok = self.lost = self.stale = 0
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.running = True
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]

    def count(self, field: str, error: str | None = None) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)
            if error:
                self.errors[error] = self.errors.get(error, 0) + 1

    def run(self, index: int) -> None:
        keep_alive = index % 2 == 0
        conn = None
        while self.running:
            fresh = conn is None or not keep_alive
            if fresh:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
            try:
                conn.request("GET", "/")
                resp = conn.getresponse()
                resp.read()
                if 200 <= resp.status < 300:
                    self.count("ok")
                else:
                    self.count("lost", f"status {resp.status}")
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                stale = not fresh and isinstance(
                    exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                )
                self.count("stale" if stale else "lost", type(exc).__name__)
                conn.close()
                conn = None
        if conn is not None:
            conn.close()


def measure(name: str, spec: dict, port: int, duration: float, hups: int, threads: int) -> dict:
    proc = subprocess.Popen(
        spec["argv"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not answered(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)
        time.sleep(1.0)  # both workers up
        load = Load(port, threads)
        for t in load.threads:
            t.start()
        interval = duration / (hups + 1)
        for _ in range(hups):
            time.sleep(interval)
            os.kill(proc.pid, signal.SIGHUP)
        time.sleep(interval)
        load.running = False
        for t in load.threads:
            t.join(30)
        return {
            "server": name,
            "summary": spec["summary"],
            "argv": spec["argv"],
            "ok": load.ok,
            "lost": load.lost,
            "stale_keep_alive": load.stale,
            "sent": load.ok + load.lost + load.stale,
            "errors": load.errors,
        }
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def write_doc(data: dict) -> None:
    p = data["params"]
    lines = [
        "# Rolling restart under load",
        "",
        "<!-- Generated by benchmarks/hup_loss.py; edit the generator, not this file. -->",
        "",
        "Requests lost while the master restarts its workers (SIGHUP), measured by "
        "`benchmarks/hup_loss.py`: two workers per server, "
        f"{p['threads']} client threads for {p['duration']:g} s (half on keep-alive "
        "connections, half on a new connection per request), SIGHUP sent "
        f"{p['hups']} times at even intervals. *lost*: requests without a complete 2xx "
        "answer (connection refused or reset, no answer, error status). *stale "
        "keep-alive*: requests written on a kept-alive connection the server had closed "
        "(clients usually retry them; a clean stop answers them with `Connection: close` "
        "instead).",
        "",
        f"- Run: {data['date']}, {data['machine']}.",
        "",
        "| server | sent | lost | stale keep-alive | errors |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in data["results"]:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "–"
        lines.append(
            f"| {r['summary']} | {r['sent']:,} | {r['lost']:,} | {r['stale_keep_alive']:,} "
            f"| {errors} |"
        )
    lines += ["", "```sh"]
    for r in data["results"]:
        lines.append(
            " ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in r["argv"])
        )
    lines += ["```", ""]
    with open(DOC, "w") as f:
        f.write("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--hups", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--servers", default="pyserver,pyserver-reuse-port,gunicorn,uvicorn")
    args = ap.parse_args()
    results = []
    for name in args.servers.split(","):
        port = free_port()
        spec = servers(port)[name]
        print(f"{name}: {spec['summary']}", flush=True)
        r = measure(name, spec, port, args.duration, args.hups, args.threads)
        print(
            f"  sent {r['sent']}, lost {r['lost']}, stale keep-alive "
            f"{r['stale_keep_alive']}, errors {r['errors']}",
            flush=True,
        )
        results.append(r)
    data = {
        "scenario": "hup-loss",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, Linux {platform.release()}",
        "params": {"duration": args.duration, "hups": args.hups, "threads": args.threads},
        "results": results,
    }
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    write_doc(data)
    print(f"wrote {os.path.relpath(RESULT, ROOT)} and {os.path.relpath(DOC, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
