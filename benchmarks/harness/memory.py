"""Memory scenarios: `idle` (connections held open) and `streams` (1 GiB bodies).

Each scenario runs its targets (a server with an app) one at a time.  `start(target,
rnd, tag)` (from run.py) starts a target's server and waits until it answers; it
returns (server, record) or raises procs.LaunchError.  The records these runners
return go to results/<scenario>.json; summarize_idle / summarize_streams make the
rows report.py prints.
"""

import json
import os
import resource
import select
import statistics
import subprocess
import sys
import threading
import time

from . import loadgen, procs
from .scenarios import STREAM_TRANSFERS

IDLECLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "idleclient.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(IDLECLIENT)))
# phase -> (connections, extra idleclient arguments)
IDLE_PHASES = {
    "idle": (10000, []),
    "head": (1000, ["--mode", "head", "--head-bytes", str(60 * 1024)]),
}
STREAM_SIZE = 1 << 30
REFERENCES = ("pyserver-wsgi", "pyserver-asgi")
KiB = 1024


def _rel(argv):
    return [os.path.relpath(a, ROOT) if a.startswith(ROOT + os.sep) else a for a in argv]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _stop(server, port, log):
    server.stop()
    if not procs.wait_port_free(port):
        log(f"  warning: port {port} still busy after stopping {server.argv[0]}")


# --- idle -------------------------------------------------------------------------------


def _read_json_line(proc, timeout):
    """The next line PROC prints, parsed; raises LoadError after TIMEOUT seconds or at EOF."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise loadgen.LoadError(f"idle client printed nothing in {timeout:.0f} s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.poll() is not None else ""
        raise loadgen.LoadError(f"idle client exited: {err.strip()[-300:]}")
    return json.loads(line)


def unread_bytes(port):
    """Bytes received on established 127.0.0.1:PORT server sockets that no one has read."""
    total = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                total += int(queues.split(":")[1], 16)
    return total


def wait_read(port, timeout=20.0):
    """Wait until the server has read everything sent to it (or TIMEOUT); bytes left."""
    deadline = time.monotonic() + timeout
    while (left := unread_bytes(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _rss_total(pid):
    return sum(procs.tree_rss(pid).values())


def idle_once(sc, target, phase, port, server, client_cpus):
    """Hold PHASE's connections against SERVER; RSS before, held and after closing (KiB)."""
    count, extra = IDLE_PHASES[phase]
    time.sleep(0.5)
    res = {"phase": phase, "connections": count, "rss_before_kib": _rss_total(server.pid)}
    argv = [sys.executable, IDLECLIENT, "--port", str(port), "--connections", str(count)]
    argv = loadgen.pinned(client_cpus, argv + extra)
    res["load_command"] = _rel(argv)
    client = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        res["client"] = _read_json_line(client, 180)
        # The server's RSS holds a head only once it has read it from its socket.
        res["wait_read_s"] = time.monotonic()
        wait_read(port)
        res["wait_read_s"] = round(time.monotonic() - res["wait_read_s"], 2)
        time.sleep(1.0)  # let the server finish whatever it does with the last ones
        res["unread_bytes"] = unread_bytes(port)
        held = procs.tree_rss(server.pid)
        res["rss_held_kib"] = sum(held.values())
        res["rss_held_procs_kib"] = {str(p): v for p, v in sorted(held.items())}
        alive_held = server.alive()
        client.stdin.write("\n")
        client.stdin.flush()
        _read_json_line(client, 60)
        client.wait(30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    time.sleep(1.0)
    res["rss_after_close_kib"] = _rss_total(server.pid)
    res["open"] = res["client"]["open"]
    growth = res["rss_held_kib"] - res["rss_before_kib"]
    res["rss_growth_kib"] = growth
    # Per connection only when (nearly) all of them were still held when RSS was read.
    held_enough = res["open"] >= 0.9 * count
    res["per_conn_kib"] = growth / res["open"] if held_enough else None
    return res, alive_held and server.alive()


def run_idle(sc, args, targets, start, log):
    """Every target, every phase, each on a freshly started server; the run records."""
    rounds = sc.rounds or args.rounds
    runs, total, n = [], rounds * len(targets) * len(IDLE_PHASES), 0
    for rnd in range(1, rounds + 1):
        for t in targets:
            for phase in IDLE_PHASES:
                n += 1
                rec = _idle_record(sc, args, t, phase, rnd, start, log)
                runs.append(rec)
                log(_idle_progress(n, total, rec))
    return runs


def _idle_record(sc, args, t, phase, rnd, start, log):
    try:
        server, rec = start(t, rnd, phase)
    except procs.LaunchError as exc:
        return {
            "server": t.label,
            "round": rnd,
            "phase": phase,
            "status": "failed",
            "error": str(exc),
        }
    try:
        res, alive = idle_once(sc, t, phase, args.port, server, sc.client_cpus)
    except (loadgen.LoadError, OSError, ValueError) as exc:
        rec.update(phase=phase, status="failed", error=f"load: {exc}")
        return rec
    finally:
        _stop(server, args.port, log)
    rec.update(res)
    rec["status"] = "ok" if alive else "crashed"
    if not alive:
        rec["error"] = "the server exited while holding the connections"
    return rec


def _idle_progress(n, total, rec):
    head = f"  [{n:>2}/{total}] round {rec['round']} {rec['server']:<14} {rec['phase']:<5}"
    if rec["status"] != "ok":
        return f"{head} {rec['status'].upper()}: {rec.get('error', '')[:300]}"
    c = rec["client"]
    per = rec["per_conn_kib"]
    per = f"{per:.2f} KiB/conn" if per is not None else "per conn: n/a"
    return (
        f"{head} held {rec['open']:,}/{rec['connections']:,}  answers {answers_text(c)}  "
        f"RSS {rec['rss_before_kib'] / KiB:.1f} -> {rec['rss_held_kib'] / KiB:.1f} MiB "
        f"(after close {rec['rss_after_close_kib'] / KiB:.1f})  {per}"
        + (f"  unread {rec['unread_bytes']:,} bytes" if rec.get("unread_bytes") else "")
    )


def answers_text(client):
    """How the server treated the connections: '200 ×10,000', '400 ×1,000; closed 1,000'."""
    parts = [f"{code} ×{k:,}" for code, k in sorted(client.get("statuses", {}).items())]
    if client.get("mode") == "head" and not parts:
        parts = ["none"]
    for key, word in (
        ("closed_by_server", "closed"),
        ("reset_by_server", "reset"),
        ("connect_errors", "connect errors"),
    ):
        if client.get(key):
            parts.append(f"{word} {client[key]:,}")
    return "; ".join(parts) or "none"


def summarize_idle(runs, labels):
    """A row per (target, phase): medians over rounds and pyserver ÷ it per connection."""
    rows = []
    for phase in IDLE_PHASES:
        ok = {}
        for r in runs:
            if r.get("phase") == phase and r["status"] == "ok":
                ok.setdefault(r["server"], {})[r["round"]] = r
        for label in labels:
            rs = [r for r in runs if r["server"] == label and r.get("phase") == phase]
            good = ok.get(label, {})
            row = {"server": label, "phase": phase, "rounds": len(rs), "rounds_ok": len(good)}
            if not good:
                row["status"] = rs[0]["status"] if rs else "not run"
                row["error"] = rs[0].get("error", "") if rs else ""
                rows.append(row)
                continue
            row["status"] = "ok"
            for key in ("open", "connections", "rss_before_kib", "rss_held_kib"):
                row[key] = _median([r.get(key) for r in good.values()])
            row["rss_after_close_kib"] = _median(
                [r.get("rss_after_close_kib") for r in good.values()]
            )
            row["per_conn_kib"] = _median([r.get("per_conn_kib") for r in good.values()])
            last = good[max(good)]
            row["answers"] = answers_text(last["client"])
            if last.get("unread_bytes"):  # the server had not read all it was sent
                row["answers"] += f"; {last['unread_bytes'] / KiB:,.0f} KiB unread"
            for ref in REFERENCES:
                row[f"vs_{ref}"] = _ratio(ok.get(ref, {}), good, "per_conn_kib")
            rows.append(row)
    return rows


def _ratio(num, den, key):
    ratios = [
        num[k][key] / den[k][key] for k in num if k in den and num[k].get(key) and den[k].get(key)
    ]
    return _median(ratios)


# --- streams ----------------------------------------------------------------------------


def make_stream_file(path, size=STREAM_SIZE):
    """SIZE bytes of a repeated random MiB at PATH, readable by every user (nginx)."""
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)
    os.chmod(path, 0o644)


def reset_peaks(pids):
    """Reset VmHWM of PIDS to their current RSS (/proc/PID/clear_refs); True if all were."""
    done = True
    for p in pids:
        try:
            with open(f"/proc/{p}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            done = False
    return done


class _RssSampler(threading.Thread):
    """Polls the VmRSS sum of fixed PIDS every INTERVAL seconds; keeps the peak."""

    def __init__(self, pids, interval=0.01):
        super().__init__(daemon=True)
        self.pids, self.interval = pids, interval
        self.peak, self.samples = 0, 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, sum(procs.tree_rss(None, self.pids).values()))
            self.samples += 1
            self.done.wait(self.interval)


def curl_command(url, transfer, path, out, client_cpus):
    argv = ["curl", "-s", "-S", "--max-time", "240", "-o", out]
    argv += ["-w", "%{http_code} %{size_download} %{size_upload} %{time_total}"]
    if transfer == "upload":
        argv += ["-X", "POST", "-T", path, "-H", "Expect:"]
        argv += ["-H", "Content-Type: application/octet-stream"]
    return loadgen.pinned(client_cpus, [*argv, url])


def transfer_once(server, port, transfer, stream_file, tmpdir, client_cpus, interface):
    """One transfer with curl: throughput, client and server CPU, server peak RSS.

    The peak is the sum of the processes' VmHWM, reset just before the transfer, when
    the kernel lets us reset it (else the highest VmRSS sum sampled every 10 ms).
    """
    url = f"http://127.0.0.1:{port}{STREAM_TRANSFERS[transfer][1]}"
    out = os.path.join(tmpdir, "curl-answer") if transfer == "upload" else "/dev/null"
    argv = curl_command(url, transfer, stream_file, out, client_cpus)
    res = {"transfer": transfer, "load_command": [a.replace(tmpdir, "$TMP") for a in argv]}
    pids = procs.process_tree(server.pid)
    res["rss_before_kib"] = sum(procs.tree_rss(None, pids).values())
    hwm_reset = reset_peaks(pids)
    cpu_before = procs.tree_cpu(server.pid)
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = _RssSampler(pids)
    sampler.start()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise loadgen.LoadError("curl did not finish in 300 s") from exc
    finally:
        sampler.done.set()
        sampler.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_after = procs.tree_cpu(server.pid)
    res["rss_sampled_peak_kib"] = sampler.peak
    res["rss_samples"] = sampler.samples
    res["rss_after_kib"] = sum(procs.tree_rss(None, pids).values())
    res["hwm_kib"] = sum(procs.status_kib(p, "VmHWM") or 0 for p in pids)
    res["peak_from"] = "VmHWM" if hwm_reset else "VmRSS samples"
    peak = max(res["hwm_kib"], sampler.peak) if hwm_reset else sampler.peak
    res["rss_peak_kib"] = max(peak, res["rss_before_kib"])
    res["rss_growth_kib"] = res["rss_peak_kib"] - res["rss_before_kib"]
    res["server_cpu_s"] = procs.cpu_delta(cpu_before, cpu_after)
    res["client_cpu_s"] = (usage.ru_utime - usage_before.ru_utime) + (
        usage.ru_stime - usage_before.ru_stime
    )
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 4:
        raise loadgen.LoadError(f"curl exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    code, down, up, seconds = int(fields[0]), int(fields[1]), int(fields[2]), float(fields[3])
    res.update(http_code=code, seconds=seconds)
    moved = up if transfer == "upload" else down
    res["bytes"] = moved
    if code == 501:
        res["status"] = "unsupported"
        what = "wsgi.file_wrapper" if interface == "wsgi" else "http.response.pathsend"
        res["error"] = f"answered 501: no {what}"
        return res
    if code != 200 or moved != STREAM_SIZE:
        raise loadgen.LoadError(f"status {code}, {moved:,} bytes moved of {STREAM_SIZE:,}")
    if transfer == "upload":
        with open(out) as f:
            answer = f.read().strip()
        os.unlink(out)
        if answer != str(STREAM_SIZE):
            raise loadgen.LoadError(f"the app read {answer[:40]!r} bytes, not {STREAM_SIZE:,}")
    res["mib_s"] = moved / seconds / (1 << 20) if seconds > 0 else None
    res["client_cpu_pct"] = 100 * res["client_cpu_s"] / seconds if seconds > 0 else None
    res["mib_per_cpu_s"] = moved / (1 << 20) / res["server_cpu_s"] if res["server_cpu_s"] else None
    res["status"] = "ok"
    return res


def run_streams(sc, args, targets, start, log, tmpdir, stream_file):
    """Each round: each target's server started once, its transfers one after another."""
    rounds = sc.rounds or args.rounds
    total = rounds * sum(len(t.transfers) for t in targets)
    log(f"   writing the {STREAM_SIZE >> 20} MiB file {os.path.basename(stream_file)}")
    make_stream_file(stream_file)
    runs, n = [], 0
    try:
        for rnd in range(1, rounds + 1):
            for t in targets:
                for rec in _streams_target(sc, args, t, rnd, start, log, tmpdir, stream_file):
                    n += 1
                    runs.append(rec)
                    log(_streams_progress(n, total, rec))
    finally:
        os.unlink(stream_file)
    return runs


def _streams_target(sc, args, t, rnd, start, log, tmpdir, stream_file):
    try:
        server, base = start(t, rnd, "streams")
    except procs.LaunchError as exc:
        for transfer in t.transfers:
            yield {
                "server": t.label,
                "round": rnd,
                "transfer": transfer,
                "status": "failed",
                "error": str(exc),
            }
        return
    try:
        for transfer in t.transfers:
            rec = dict(base, transfer=transfer)
            if not server.alive():
                rec.update(status="crashed", error="the server exited during an earlier transfer")
                yield rec
                continue
            try:
                res = transfer_once(
                    server, args.port, transfer, stream_file, tmpdir, sc.client_cpus, t.interface
                )
                rec.update(res)
            except (loadgen.LoadError, OSError) as exc:
                rec.update(status="failed", error=f"load: {exc}")
            if rec["status"] == "ok" and not server.alive():
                rec.update(status="crashed", error="the server exited during the transfer")
            yield rec
    finally:
        _stop(server, args.port, log)


def _streams_progress(n, total, rec):
    head = f"  [{n:>2}/{total}] round {rec['round']} {rec['server']:<14} {rec['transfer']:<6}"
    if rec["status"] != "ok":
        return f"{head} {rec['status'].upper()}: {rec.get('error', '')[:300]}"
    return (
        f"{head} {rec['mib_s']:>8,.0f} MiB/s  client CPU {rec['client_cpu_pct']:.0f}%  "
        f"server {rec['server_cpu_s']:.2f} CPU-s  RSS {rec['rss_before_kib'] / KiB:.1f} MiB, "
        f"peak +{rec['rss_growth_kib'] / KiB:.1f} MiB  (load avg {rec['loadavg_before']:.1f})"
    )


def summarize_streams(runs, labels):
    """A row per (transfer, target): median throughput, worst peak RSS growth, ratios."""
    rows = []
    for transfer in STREAM_TRANSFERS:
        ok = {}
        for r in runs:
            if r.get("transfer") == transfer and r["status"] == "ok":
                ok.setdefault(r["server"], {})[r["round"]] = r
        for label in labels:
            rs = [r for r in runs if r["server"] == label and r.get("transfer") == transfer]
            if not rs:
                continue
            good = ok.get(label, {})
            row = {"server": label, "transfer": transfer, "rounds": len(rs), "rounds_ok": len(good)}
            if not good:
                row["status"] = rs[0]["status"]
                row["error"] = rs[0].get("error", "")
                rows.append(row)
                continue
            row["status"] = "ok"
            for key in ("mib_s", "client_cpu_pct", "server_cpu_s", "mib_per_cpu_s"):
                row[key] = _median([r.get(key) for r in good.values()])
            row["rss_before_kib"] = _median([r.get("rss_before_kib") for r in good.values()])
            row["rss_growth_kib"] = max(r["rss_growth_kib"] for r in good.values())
            row["rss_peak_kib"] = max(r["rss_peak_kib"] for r in good.values())
            for ref in REFERENCES:
                row[f"vs_{ref}"] = _ratio(ok.get(ref, {}), good, "mib_s")
            rows.append(row)
    return rows
