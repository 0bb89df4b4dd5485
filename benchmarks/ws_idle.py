"""Memory of idle WebSockets: resident memory per open, silent WebSocket.

Each server runs one worker serving benchmarks/apps/ws_echo.py, pinned to CPU 0; a
client process (harness/idleclient.py --mode ws, pinned to CPU 1) opens the
connections, completes each handshake (101) and holds them. RSS is VmRSS summed over
the server's process tree before and while they are held. Pings are pushed past the
measurement (600 s) where a server has them, so no connection is closed for a
missing pong.

    .venv/bin/python benchmarks/ws_idle.py [--connections 5000] [--servers a,b]

Peers come from benchmarks/.venv-peers (created by benchmarks/run.py). Writes
benchmarks/results/ws-idle/ws-idle.json and prints one line per server.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness import loadgen, memory, procs  # noqa: E402

PROJECT_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
PEERS = os.path.join(ROOT, "benchmarks", ".venv-peers", "bin")
IDLECLIENT = os.path.join(ROOT, "benchmarks", "harness", "idleclient.py")
RESULT = os.path.join(ROOT, "benchmarks", "results", "ws-idle", "ws-idle.json")
HOST = "127.0.0.1"
APP = "benchmarks.apps.ws_echo:app"
PING = "600"


def servers(port: int) -> dict[str, list[str]]:
    p = str(port)
    uvicorn = [os.path.join(PEERS, "uvicorn"), APP, "--host", HOST, "--port", p]
    uvicorn += ["--no-access-log", "--ws-ping-interval", PING, "--timeout-keep-alive", PING]
    return {
        "pyserver": [PROJECT_PYTHON, "-m", "pyserver", APP, "--host", HOST, "--port", p]
        + ["--no-access-log", "--ws-ping-interval", PING, "--limit-connections", "20000"],
        "uvicorn-websockets": [*uvicorn, "--ws", "websockets"],
        "uvicorn-wsproto": [*uvicorn, "--ws", "wsproto"],
        "granian": [os.path.join(PEERS, "granian"), "--interface", "asgi", "--host", HOST]
        + ["--port", p, "--workers", "1", "--backpressure", "20000", APP],
        "daphne": [os.path.join(PEERS, "daphne"), "-b", HOST, "-p", p]
        + ["--ping-interval", PING, "--ping-timeout", PING, APP],
        "hypercorn": [os.path.join(PEERS, "hypercorn"), "--bind", f"{HOST}:{port}"]
        + ["--workers", "1", "--backlog", "4096", APP],
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def measure(name: str, argv: list[str], port: int, count: int, tmp: str) -> dict:
    server = procs.Server(loadgen.pinned("0", argv), ROOT, dict(os.environ), f"{tmp}/{name}.log")
    server.start()
    res: dict = {"server": name, "command": argv, "connections": count}
    try:
        server.wait_ready(HOST, port, "/", b"Hello World!")
        time.sleep(1.0)
        res["rss_before_kib"] = sum(procs.tree_rss(server.pid).values())
        cmd = [sys.executable, IDLECLIENT, "--port", str(port), "--connections", str(count)]
        cmd = loadgen.pinned("1", [*cmd, "--mode", "ws", "--path", "/ws"])
        client = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            res["client"] = memory._read_json_line(client, 180)
            time.sleep(2.0)  # whatever the server does after the last handshake
            res["rss_held_kib"] = sum(procs.tree_rss(server.pid).values())
            res["alive"] = server.alive()
            client.stdin.write("\n")
            client.stdin.flush()
            memory._read_json_line(client, 60)
            client.wait(30)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        opened = res["client"]["statuses"].get("101", 0)
        res["handshakes_101"] = opened
        growth = res["rss_held_kib"] - res["rss_before_kib"]
        res["per_conn_kib"] = round(growth / opened, 2) if opened >= 0.9 * count else None
    except (procs.LaunchError, loadgen.LoadError) as exc:
        res["error"] = str(exc)
    finally:
        server.stop()
        procs.wait_port_free(port)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--servers", default="", help="comma-separated subset")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections * 2 + 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(want, hard)), hard))
    port = free_port()
    table = servers(port)
    names = [n for n in args.servers.split(",") if n] or list(table)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            res = measure(name, table[name], port, args.connections, tmp)
            runs.append(res)
            per = res.get("per_conn_kib")
            print(
                f"{name:20} 101s {res.get('handshakes_101', 0):5}  "
                f"per connection {per if per is not None else '-'} KiB  {res.get('error', '')}",
                flush=True,
            )
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "runs": runs,
    }
    with open(RESULT, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
