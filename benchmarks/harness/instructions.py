"""The `instructions` scenario: CPU instructions a server executes per request, counted by
valgrind's callgrind (this machine's `perf stat -e instructions` has no hardware counter).

Each target's server starts under `valgrind --tool=callgrind --instr-atstart=no`, answers
a warm-up uncounted, then counting is switched on (`callgrind_control -i on`) for N
requests and dumped, then for 2N more and dumped again: (second - first) / N is the cost
of one request, whatever fixed cost switching and dumping adds.  Requests go one at a time
over one keep-alive connection (the client's speed does not change the count).  The count
does not depend on the machine's load (two runs of one build were about 1% apart in trials):
the figure to compare two builds with (`--baseline REF`), next to the timed scenarios.
"""

import glob
import http.client
import os
import shutil
import subprocess

from . import loadgen, procs
from .servers import HOST

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARMUP = 200


def valgrind_prefix(out_dir, label):
    out = os.path.join(out_dir, f"callgrind.{label}.%p")
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes"] + [
        f"--callgrind-out-file={out}"
    ]


def _requests(port, n):
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        for _ in range(n):
            conn.request("GET", "/")
            resp = conn.getresponse()
            if resp.status != 200 or resp.read() != b"Hello World!":
                raise loadgen.LoadError(f"answered {resp.status}")
    finally:
        conn.close()


def _h2_requests(port, n):
    """N GETs over cleartext HTTP/2, hello-h2's shape: 10 connections of 32 streams."""
    argv = ["h2load", "-n", str(n), "-c", "10", "-m", "32", f"http://{HOST}:{port}/"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    if f"{n} succeeded" not in out:
        raise loadgen.LoadError(f"h2load: {out.strip()[-300:]!r}")


def _ws_messages(port, n):
    """N 64-byte text messages echoed one at a time over one WebSocket connection."""
    from websockets.sync.client import connect

    message = ('{"seq": 0, "text": "' + "x" * 64)[:64]
    with connect(f"ws://{HOST}:{port}/", open_timeout=60, close_timeout=10) as ws:
        for _ in range(n):
            ws.send(message)
            if ws.recv(timeout=60) != message:
                raise loadgen.LoadError("the echo differs from the message")


def _control(pids, *flags):
    for pid in sorted(pids):
        subprocess.run(["callgrind_control", *flags, str(pid)], capture_output=True, timeout=120)


def _dumped_ir(out_dir, label, seen):
    """Instructions (Ir) in the dump files of LABEL not in SEEN (which it extends)."""
    total = 0
    for path in sorted(glob.glob(os.path.join(out_dir, f"callgrind.{label}.*"))):
        if path in seen:
            continue
        seen.add(path)
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total += int(line.split()[1])
                    break
    return total


def run(sc, args, targets, start, log, tmpdir):
    """Every target once per round: its instructions per request; the run records."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return [
            {"server": t.label, "round": 1, "status": "failed", "error": "valgrind not installed"}
            for t in targets
        ]
    n_req = max(100, min(args.requests // 10, 2000))
    runs, total, n = [], (sc.rounds or args.rounds) * len(targets), 0
    for rnd in range(1, (sc.rounds or args.rounds) + 1):
        for t in targets:
            n += 1
            rec = _one(sc, args, t, rnd, start, tmpdir, n_req)
            runs.append(rec)
            if rec["status"] == "ok":
                log(
                    f"  [{n:>2}/{total}] round {rnd} {t.label:<22} "
                    f"{rec['instr_per_req']:,.0f} instructions/request ({n_req} requests)"
                )
            else:
                log(f"  [{n:>2}/{total}] round {rnd} {t.label:<22} FAILED: {rec['error'][:300]}")
    return runs


def _one(sc, args, t, rnd, start, tmpdir, n_req):
    out_dir = os.path.join(tmpdir, "callgrind")
    os.makedirs(out_dir, exist_ok=True)
    label = f"{t.label.replace('/', '_')}-r{rnd}"
    try:
        server, rec = start(t, rnd, "callgrind", valgrind_prefix(out_dir, label))
    except procs.LaunchError as exc:
        return {"server": t.label, "round": rnd, "status": "failed", "error": str(exc)}
    rec.update(interface=t.interface, app=t.app, requests=n_req, variant=t.variant)
    if getattr(t, "http2", "") == "h2c" and not shutil.which("h2load"):
        server.stop(timeout=30)
        procs.wait_port_free(args.port, 60)
        rec.update(status="failed", error="h2load not installed")
        return rec
    requests = _h2_requests if getattr(t, "http2", "") == "h2c" else _requests
    if getattr(t, "websocket", False):
        requests = _ws_messages
    try:
        requests(args.port, WARMUP)
        pids = procs.process_tree(server.pid)
        seen = set(glob.glob(os.path.join(out_dir, f"callgrind.{label}.*")))
        _control(pids, "-i", "on")
        requests(args.port, n_req)
        _control(pids, "-d")
        first = _dumped_ir(out_dir, label, seen)
        requests(args.port, 2 * n_req)
        _control(pids, "-d")
        second = _dumped_ir(out_dir, label, seen)
        if not server.alive():
            raise procs.LaunchError(f"exited: {procs.tail(server.log_path, 8)}")
    except (
        OSError,
        http.client.HTTPException,
        subprocess.SubprocessError,
        loadgen.LoadError,
        procs.LaunchError,
    ) as exc:
        rec.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        return rec
    finally:
        server.stop(timeout=30)
        procs.wait_port_free(args.port, 60)
    if not first or not second:
        rec.update(status="failed", error="callgrind wrote no counts")
        return rec
    how = (
        "by h2load -c 10 -m 32 (h2c)"
        if requests is _h2_requests
        else "64-byte WebSocket echoes on one connection"
        if requests is _ws_messages
        else "on one keep-alive connection"
    )
    rec.update(
        status="ok",
        instr_first=first,
        instr_second=second,
        instr_per_req=(second - first) / n_req,
        load_command=[
            "#",
            f"callgrind_control -i on PID; {n_req} GETs {how}; "
            f"callgrind_control -d PID; {2 * n_req} GETs; callgrind_control -d PID",
        ],
    )
    return rec


def summarize(runs, labels, reference="pyserver"):
    """A row per target: median instructions per request, and the pyserver build's count
    divided by it (the pyserver target of the same interface and variant is the
    reference)."""
    rows = []
    medians = {}
    for label in labels:
        rs = [r for r in runs if r["server"] == label]
        good = [r for r in rs if r["status"] == "ok"]
        row = {"server": label, "rounds": len(rs), "rounds_ok": len(good), "kind": "instr"}
        if not good:
            row["status"] = rs[0]["status"] if rs else "not run"
            row["error"] = rs[0].get("error", "") if rs else ""
            rows.append(row)
            continue
        values = sorted(r["instr_per_req"] for r in good)
        row.update(
            status="ok",
            interface=good[0]["interface"],
            variant=good[0].get("variant", ""),
            instr_per_req=values[len(values) // 2],
            requests=good[0]["requests"],
        )
        medians[label] = row
        rows.append(row)
    for row in rows:
        if row["status"] != "ok":
            continue
        variant = f"-{row['variant']}" if row.get("variant") else ""
        ref = medians.get(f"{reference}-{row['interface']}{variant}")
        row["vs_reference"] = ref["instr_per_req"] / row["instr_per_req"] if ref else None
    return rows
