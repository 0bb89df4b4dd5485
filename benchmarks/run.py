"""Benchmark pyserver against peer servers and nginx; write docs/benchmarks.md.

    .venv/bin/python benchmarks/run.py [--scenario hello-wsgi] [--quick] ...
    .venv/bin/python benchmarks/run.py --scenario hello-wsgi,hello-asgi,instructions \
        --baseline REF        # same-run A/B: pyserver against pyserver built from git REF
    .venv/bin/python benchmarks/run.py --scenario websocket-echo    # the four echo variants
    .venv/bin/python benchmarks/run.py --scenario django-wsgi-db    # starts its own PostgreSQL

Installs what it needs on first use: Debian packages (wrk, ab, nginx, ...) and the
peer servers in their own virtualenv, benchmarks/.venv-peers.  Standard library only.
"""

import argparse
import atexit
import dataclasses
import datetime
import glob
import json
import os
import re
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import environment, instructions, loadgen, memory, procs, report, tls
from harness.scenarios import SCENARIO_GROUPS, SCENARIOS
from harness.servers import (
    HOST,
    SERVERS,
    Context,
    protocol_argv,
    protocol_unsupported,
    register_baseline,
)

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
PEERS_VENV = os.path.join(BENCH_DIR, ".venv-peers")
PROJECT_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
LOGS_DIR = os.path.join(BENCH_DIR, ".logs")
BASELINE_DIR = os.path.join(BENCH_DIR, ".baseline")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
IMG_DIR = os.path.join(ROOT, "docs", "img")

VERSION_DISTS = {
    "peers": [
        "bjoern",
        "fastpysgi",
        "socketify",
        "cffi",
        "granian",
        "gunicorn",
        "pyuwsgi",
        "meinheld",
        "greenlet",
        "uvicorn",
        "uvloop",
        "httptools",
        "hypercorn",
        "daphne",
        "bottle",
        "uvicorn-worker",
        "django",
        "psycopg",
    ],
    "project": ["pyserver-ev", "bottle", "gunicorn", "django", "psycopg"],
}


# Stands for the run's temporary directory in the recorded commands.
TMP_PLACEHOLDER = "/tmp/pyserver-bench-XXXXXX"
FULL = {"duration": 10, "warmup": 3, "rounds": 3, "requests": 50000}
QUICK = {"duration": 2, "warmup": 1, "rounds": 1, "requests": 10000}


def log(msg=""):
    print(msg, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scenario",
        default="",
        help="comma-separated scenarios (default: all): "
        + ", ".join(SCENARIOS)
        + "; groups: "
        + ", ".join(f"{g} ({', '.join(m)})" for g, m in SCENARIO_GROUPS.items()),
    )
    ap.add_argument(
        "--servers",
        default="",
        help="comma-separated servers to run (default: all of each scenario): "
        + ", ".join(SERVERS),
    )
    ap.add_argument("--duration", type=int, help="measured seconds, wrk (default: 10)")
    ap.add_argument("--warmup", type=int, help="warm-up seconds, wrk (default: 3)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default: 3)")
    ap.add_argument("--connections", type=int, default=100, help="concurrent connections")
    ap.add_argument("--requests", type=int, help="requests per ab run (default: 50000)")
    ap.add_argument("--port", type=int, default=8400, help="port the servers listen on")
    ap.add_argument(
        "--rate-duration",
        type=int,
        help="seconds of each fixed-rate (open-loop latency) run (default: the scenario's, 15)",
    )
    ap.add_argument(
        "--project-python",
        default=PROJECT_PYTHON,
        help="Python that runs `-m pyserver` (default: .venv/bin/python)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 s measured, 1 s warm-up, 1 round, 10000 ab requests "
        "(options given explicitly still win)",
    )
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="do not check or install Debian packages and peers",
    )
    ap.add_argument(
        "--reinstall-peers",
        action="store_true",
        help="pip-install the peers again (e.g. to retry meinheld)",
    )
    ap.add_argument(
        "--no-write",
        action="store_true",
        help="print only: leave results/, docs/benchmarks.md and charts alone",
    )
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="also run pyserver as built from git REF (pyserver@REF) in the scenarios that "
        "compare builds (hello-wsgi, hello-asgi, instructions); built once in "
        "benchmarks/.baseline/REF",
    )
    ap.add_argument("--list", action="store_true", help="list scenarios and servers, exit")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: recompute summaries from results/*.json, redraw charts and doc",
    )
    args = ap.parse_args(argv)
    # A scenario's own round count (idle: 1, streams: 5) yields to --rounds and --quick.
    args.rounds_given = args.rounds is not None or args.quick
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    wanted = ",".join(
        ",".join(SCENARIO_GROUPS.get(n.strip(), [n.strip()])) for n in args.scenario.split(",")
    )
    args.scenarios = _pick(wanted, SCENARIOS, "scenario")
    args.baseline_name = f"pyserver@{args.baseline}" if args.baseline else None
    if args.baseline_name:  # known by name now (--servers); built in main()
        SERVERS[args.baseline_name] = None
    args.server_filter = _pick(args.servers, SERVERS, "server") if args.servers else None
    return args


def _git(*argv, cwd=ROOT):
    proc = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


def prepare_baseline(ref, python):
    """Check REF out in a git worktree under benchmarks/.baseline and build its extension in
    place with PYTHON (once per commit); register pyserver@REF.  {ref, commit, dir}."""
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", ref)
    tree = os.path.join(BASELINE_DIR, safe)
    if not os.path.exists(os.path.join(tree, ".git")):
        os.makedirs(BASELINE_DIR, exist_ok=True)
        _git("worktree", "prune")
        log(f"baseline: git worktree add {os.path.relpath(tree, ROOT)} {commit[:12]}")
        _git("worktree", "add", "--detach", tree, commit)
    elif _git("rev-parse", "HEAD", cwd=tree) != commit:
        _git("checkout", "--detach", "-q", commit, cwd=tree)
    stamp = os.path.join(tree, ".bench-built")
    built = open(stamp).read().strip() if os.path.exists(stamp) else ""
    extensions = glob.glob(os.path.join(tree, "pyserver", "_core*.so"))
    if built != commit or not extensions:
        build_log = os.path.join(LOGS_DIR, f"baseline-{safe}-build.log")
        log(f"baseline: building {ref} ({commit[:12]}), log {os.path.relpath(build_log, ROOT)}")
        with open(build_log, "w") as out:
            proc = subprocess.run(
                [python, "setup.py", "-q", "build_ext", "--inplace", "--force"],
                cwd=tree,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"baseline build failed: {procs.tail(build_log, 10)}")
        with open(stamp, "w") as f:
            f.write(commit + "\n")
        extensions = glob.glob(os.path.join(tree, "pyserver", "_core*.so"))
    site = os.path.join(BASELINE_DIR, f"{safe}.site")
    os.makedirs(site, exist_ok=True)
    link = os.path.join(site, "pyserver")
    if not os.path.islink(link):
        os.symlink(os.path.join("..", safe, "pyserver"), link)
    register_baseline(ref, site, extensions[0], commit)
    log(f"baseline: pyserver@{ref} = {commit[:12]}, {os.path.relpath(extensions[0], ROOT)}")
    return {"ref": ref, "commit": commit, "dir": os.path.relpath(tree, ROOT)}


def _pick(value, known, what):
    names = [n.strip() for n in value.split(",") if n.strip()] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown {what}(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return names


# --- one measured run -------------------------------------------------------------------


def server_env(spec, sc=None, extra=None):
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ROOT
    env["PYTHONUNBUFFERED"] = "1"
    env.update(spec.env)
    if sc is not None:
        env.update(sc.env)
    env.update(extra or {})
    return env


def scenario_env(ctx, sc):
    """The scenario's extra environment: its files in the run's temporary directory."""
    return {var: os.path.join(ctx.tmpdir, name) for var, name in sc.tmp_env.items()}


def scenario_setup(ctx, sc, extra):
    """Run the scenario's one-off setup step (the Django database, after the sidecar)."""
    if sc.setup:
        argv = [ctx.project_python, *sc.setup]
        env = server_env(SERVERS["pyserver"], sc, extra)
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"setup {' '.join(sc.setup)} failed: {proc.stderr[-500:]}")
        log(f"   setup: {proc.stdout.strip()}")


def start_sidecar(ctx, sc, extra_env):
    """The scenario's helper process (an echo server), on the load generator's CPUs, once
    its port accepts; None when it has none. Stopped by stop_sidecar (or at exit)."""
    if not sc.sidecar:
        return None
    args = [a.format(**extra_env) if "{" in a else a for a in sc.sidecar]
    argv = loadgen.pinned(sc.client_cpus, [ctx.project_python, *args])
    log_path = os.path.join(LOGS_DIR, f"{sc.name}-sidecar.log")
    env = server_env(SERVERS["pyserver"], sc, extra_env)
    with open(log_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    atexit.register(stop_sidecar, proc)
    deadline = time.monotonic() + 60  # initdb on a loaded machine
    while procs.port_is_free(sc.sidecar_port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_sidecar(proc)
            raise RuntimeError(f"sidecar did not start: {procs.tail(log_path, 8)}")
        time.sleep(0.1)
    log(f"   sidecar: {' '.join(args)} (pid {proc.pid})")
    return proc


def stop_sidecar(proc):
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def is_full_run(args):
    """The method's figures (10 s, 3 s warm-up, 3 rounds or more); shorter runs are marked
    as smoke runs in the results and the doc."""
    return not args.quick and all(getattr(args, k) >= FULL[k] for k in FULL if k != "requests")


def connections(sc, args):
    return sc.connections or args.connections


def measure_fixed_rate_and_wrk(sc, args, port, server):
    """Django-style: open-loop latency at sc.rate req/s, then wrk max throughput (with CPU)."""
    url = f"http://{HOST}:{port}{sc.path}"
    script = None
    if sc.wrk_paths:
        lua = os.path.join(LOGS_DIR, f"{sc.name}-rotate.lua")
        script = loadgen.write_rotation_script(lua, sc.wrk_paths)
    conns = connections(sc, args)
    loadgen.run_wrk(url, args.warmup, conns, cpus=sc.client_cpus, script=script)
    time.sleep(1)
    fr = loadgen.run_fixed_rate(HOST, port, sc.paths, sc.rate, sc.rate_duration, sc.client_cpus)
    if not server.alive():
        raise procs.LaunchError("died during the fixed-rate run")
    before = procs.tree_cpu(server.pid)
    res = loadgen.run_wrk(url, args.duration, conns, cpus=sc.client_cpus, script=script)
    after = procs.tree_cpu(server.pid)
    res["fixed_rate_command"] = fr.pop("load_command")
    for key, value in fr.items():
        res[f"fr_{key}"] = value
    return res, before, after


def measure_fixed_rate(sc, args, port, server):
    """Open-loop latency only, at sc.rate req/s after a wrk warm-up: {fr_*: value}."""
    url = f"http://{HOST}:{port}{sc.path}"
    loadgen.run_wrk(url, args.warmup, connections(sc, args), cpus=sc.client_cpus)
    time.sleep(1)
    duration = args.rate_duration or sc.rate_duration
    fr = loadgen.run_fixed_rate(HOST, port, sc.paths, sc.rate, duration, sc.client_cpus)
    if not server.alive():
        raise procs.LaunchError("died during the fixed-rate run")
    out = {"fixed_rate_command": fr.pop("load_command")}
    out.update({f"fr_{key}": value for key, value in fr.items()})
    return out


def load(sc, args, port, warmup):
    """Run the scenario's load generator once; warm-up runs are shorter."""
    url = tls.url(sc, port, HOST)
    if sc.load == "tlsload":
        duration = args.warmup if warmup else args.duration
        conns = connections(sc, args)
        return loadgen.run_tlsload(port, sc.path, conns, duration, sc.tls_resume, sc.client_cpus)
    if sc.load == "h2load":
        duration = args.warmup if warmup else args.duration
        log_file = None if warmup else os.path.join(LOGS_DIR, f"{sc.name}-h2load.tsv")
        conns, streams = connections(sc, args), sc.h2_streams
        res = loadgen.run_h2load(url, duration, conns, streams, sc.client_cpus, log_file)
        return count_short_bodies(res, sc.body)
    if sc.load == "wsload":
        duration = args.warmup if warmup else args.duration
        conns = connections(sc, args)
        return loadgen.run_wsload(
            port,
            sc.path,
            conns,
            sc.ws_size,
            duration,
            sc.ws_deflate,
            sc.client_cpus,
            binary=sc.ws_binary,
        )
    if sc.load == "wrk":
        duration = args.warmup if warmup else args.duration
        script = None
        if sc.wrk_paths:
            lua = os.path.join(LOGS_DIR, f"{sc.name}-rotate.lua")
            script = loadgen.write_rotation_script(lua, sc.wrk_paths)
        conns = connections(sc, args)
        return loadgen.run_wrk(
            url, duration, conns, cpus=sc.client_cpus, script=script, headers=sc.wrk_headers
        )
    requests = warmup_requests(args) if warmup else args.requests
    res = loadgen.run_ab(url, requests, connections(sc, args), cpus=sc.client_cpus)
    return forgive_ab_length(res, sc.body)


def count_short_bodies(res, body):
    """h2load counts a 2xx answer as a success whatever its body: answers the DATA bytes
    it got (body_bytes) cannot cover with BODY each are added to `errors`."""
    if body and res.get("body_bytes") is not None and res["requests"]:
        short = res["requests"] - res["body_bytes"] // len(body)
        if short > 0:
            res["errors"] += short
            res["short_bodies"] = short
    return res


def forgive_ab_length(res, body):
    """ab takes the first answer's body length as the right one for all; over TLS it reads
    0 when a server sends the head and the body in separate records (gunicorn), and then
    counts every later answer as a "Length" failure. When the bytes ab got are exactly
    BODY's length times the requests completed, those failures are ab's, not the server's:
    they leave `errors` and are kept as `ab_length_miscounted`."""
    length = res.get("failed_detail", {}).get("length", 0)
    if body and length and res.get("body_bytes") == len(body) * (res["requests"] or 0):
        res["errors"] -= length
        res["ab_length_miscounted"] = length
    return res


def warmup_requests(args):
    return max(args.requests // 10, args.connections)


def scenario_args(sc, name):
    """The scenario's extra options for server NAME; a --baseline build (pyserver@REF) gets
    pyserver's, so that the A/B runs both builds alike."""
    if name not in sc.server_args and name.startswith("pyserver@"):
        name = "pyserver"
    return sc.server_args.get(name, [])


def start_broadcast(ctx, sc, port):
    """The scenario's WebSocket subscribers (harness/wsbroadcast.py, on the client CPUs),
    returned once all are connected; None when it has none. Raises LaunchError."""
    if not sc.ws_subscribers:
        return None
    script = os.path.join(BENCH_DIR, "harness", "wsbroadcast.py")
    argv = [ctx.project_python, script, str(port), sc.ws_path, str(sc.ws_subscribers)]
    argv = loadgen.pinned(sc.client_cpus, argv + [str(sc.ws_interval_ms)])
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("ready"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise procs.LaunchError(f"WebSocket subscribers did not connect: {err[-400:]}")
    return proc


def stop_broadcast(proc, prefix):
    """Stops the subscribers; their figures as {PREFIX + name: value} (delivered_pct,
    p99_ms, ...), or {PREFIX + "error": ...} when they printed none."""
    if proc is None:
        return {}
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    try:
        figures = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {prefix + "error": (err or out)[-400:]}
    return {prefix + key: value for key, value in figures.items()}


def run_once(ctx, sc, spec, args, rnd, extra_env=None):
    """Start SPEC's server, warm it up, measure it, stop it; return a run record."""
    port = args.port
    if spec.name in sc.server_apps:
        sc = dataclasses.replace(sc, app=sc.server_apps[spec.name])
    argv, files = spec.argv(ctx, sc, port)
    # "{VAR}" in a scenario's server options: its files in the run's tmpdir (scenario_env)
    fill = extra_env or {}
    extra = [a.format(**fill) if "{" in a else a for a in scenario_args(sc, spec.name)]
    argv += extra + protocol_argv(spec, ctx, sc)
    exe = argv[0]
    argv = loadgen.pinned(sc.server_cpus, argv)
    log_name = spec.name.replace("/", "_")
    log_path = os.path.join(LOGS_DIR, f"{sc.name}-{log_name}-r{rnd}.log")
    rec = {"server": spec.name, "round": rnd, "command": argv, "files": files}
    rec["loadavg_before"] = os.getloadavg()[0]
    if not procs.wait_port_free(port):
        rec.update(status="failed", error=f"port {port} still busy before start")
        return rec
    server = procs.Server(argv, ROOT, server_env(spec, sc, extra_env), log_path)
    broadcast = None
    try:
        if not os.path.exists(os.path.join(ROOT, exe)) and not shutil.which(exe):
            raise procs.LaunchError(f"{exe} not found")
        server.start()
        if sc.tls or sc.http2:
            get = tls.probe(sc, tls.cert_paths(ctx.tmpdir)["ca"])
            server.wait_ready(HOST, port, sc.path, sc.body, get=get)
        else:
            server.wait_ready(HOST, port, sc.path, sc.body)
        if spec.loads and not procs.tree_maps(server.pid, spec.loads):
            raise procs.LaunchError(
                f"answers, but {os.path.relpath(spec.loads, ROOT)} is not loaded"
            )
        if sc.check:
            try:
                sc.check(HOST, port)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise procs.LaunchError(f"wrong answer: {exc}") from exc
        broadcast = start_broadcast(ctx, sc, port)
        if sc.load == "fixed-rate":
            rec.update(measure_fixed_rate(sc, args, port, server), status="ok")
            return rec
        if sc.load == "fixed-rate+wrk":
            res, before, after = measure_fixed_rate_and_wrk(sc, args, port, server)
            alive = server.alive()
        else:
            res, before, after, alive = measure(sc, args, port, server, log_path)
    except (procs.LaunchError, OSError) as exc:
        rec.update(status="failed", error=str(exc), launch_failed=True)
        return rec
    except loadgen.LoadError as exc:
        rec.update(status="failed", error=f"load: {exc}")
        return rec
    finally:
        rec.update(stop_broadcast(broadcast, "fr_ws_" if sc.load == "fixed-rate" else "ws_"))
        server.stop()
        if not procs.wait_port_free(port):
            log(f"  warning: port {port} still busy after stopping {spec.name}")
    rec.update(res)
    rec["cpu_s"] = procs.cpu_delta(before, after)
    rec["req_per_cpu_s"] = res["requests"] / rec["cpu_s"] if rec["cpu_s"] > 0 else None
    if not alive:
        rec.update(status="crashed", error=f"exited during the run: {procs.tail(log_path, 8)}")
    elif sc.ws_deflate and not res["ws"]["deflate"]:
        answer = res["ws"]["extensions"] or "no Sec-WebSocket-Extensions"
        rec.update(status="unsupported", error=f"did not accept permessage-deflate ({answer})")
    else:
        rec["status"] = "ok"
    return rec


def measure(sc, args, port, server, log_path):
    """Warm-up then the measured wrk/ab run: (result, cpu before, cpu after, alive)."""
    load(sc, args, port, warmup=True)
    if not server.alive():
        raise procs.LaunchError(f"died during warm-up: {procs.tail(log_path, 8)}")
    before = procs.tree_cpu(server.pid)
    res = load(sc, args, port, warmup=False)
    after = procs.tree_cpu(server.pid)
    return res, before, after, server.alive()


def target_starter(ctx, sc, args, extra_env):
    """start(target, rnd, tag) for harness/memory.py: a ready server and its run record."""

    def start(target, rnd, tag, prefix=()):
        spec = SERVERS[target.server]
        tsc = dataclasses.replace(sc, app=target.app, interface=target.interface)
        argv, files = spec.argv(ctx, tsc, args.port)
        argv += scenario_args(sc, spec.name) + list(target.args)
        exe = argv[0]
        argv = loadgen.pinned(sc.server_cpus, [*prefix, *argv])
        log_path = os.path.join(LOGS_DIR, f"{sc.name}-{target.label}-{tag}-r{rnd}.log")
        rec = {"server": target.label, "round": rnd, "command": argv, "files": files}
        rec["loadavg_before"] = os.getloadavg()[0]
        if not procs.wait_port_free(args.port):
            raise procs.LaunchError(f"port {args.port} still busy before start")
        if not os.path.exists(os.path.join(ROOT, exe)) and not shutil.which(exe):
            raise procs.LaunchError(f"{exe} not found")
        server = procs.Server(argv, ROOT, server_env(spec, sc, extra_env), log_path)
        try:
            server.start()
            server.wait_ready(HOST, args.port, "/", b"Hello World!", sc.ready_timeout)
            if spec.loads and not procs.tree_maps(server.pid, spec.loads):
                lib = os.path.relpath(spec.loads, ROOT)
                raise procs.LaunchError(f"answers, but {lib} is not loaded: another build runs")
        except (procs.LaunchError, OSError) as exc:
            server.stop()
            procs.wait_port_free(args.port)
            raise procs.LaunchError(str(exc)) from exc
        return server, rec

    return start


def run_memory_scenario(ctx, sc, args, servers, extra_env):
    """Runs of an idle or streams scenario over the targets whose server can run."""
    targets = [t for t in sc.targets if t.server in servers]
    sc = dataclasses.replace(sc, rounds=scenario_rounds(sc, args))
    start = target_starter(ctx, sc, args, extra_env)
    if not targets:
        return targets, []
    if sc.kind == "idle":
        return targets, memory.run_idle(sc, args, targets, start, log)
    if sc.kind == "instructions":
        return targets, instructions.run(sc, args, targets, start, log, ctx.tmpdir)
    stream_file = extra_env["BENCH_STREAM_FILE"]
    return targets, memory.run_streams(sc, args, targets, start, log, ctx.tmpdir, stream_file)


def scenario_rounds(sc, args):
    return args.rounds if args.rounds_given or not sc.rounds else sc.rounds


def summarize(sc_kind, runs, names):
    if sc_kind == "idle":
        return memory.summarize_idle(runs, names)
    if sc_kind == "streams":
        return memory.summarize_streams(runs, names)
    if sc_kind == "instructions":
        return instructions.summarize(runs, names)
    return report.summarize(runs, names)


def _ms(value):
    return "-" if value is None else f"{value:.1f}"


def progress_line(n, total, rec):
    head = f"  [{n:>2}/{total}] round {rec['round']} {rec['server']:<10}"
    if rec["status"] != "ok":
        return f"{head} {rec['status'].upper()}: {rec.get('error', '')[:300]}"
    if rec.get("rps") is None and "fr_rate" in rec:
        p50, p95, p99 = (_ms(rec.get(f"fr_{q}_ms")) for q in ("p50", "p95", "p99"))
        return (
            f"{head} {rec['fr_rate']:g} req/s open loop: p50 {p50} p95 {p95} p99 {p99} ms, "
            f"errors {rec['fr_errors']}/{rec['fr_requests']}  "
            f"(load avg {rec['loadavg_before']:.1f})"
        )
    p50 = f"{rec['p50_ms']:.2f}" if rec.get("p50_ms") is not None else "-"
    p99 = f"{rec['p99_ms']:.2f}" if rec.get("p99_ms") is not None else "-"
    cpu = f"{rec['req_per_cpu_s']:,.0f}" if rec.get("req_per_cpu_s") else "-"
    if rec.get("fr_p50_ms") is not None:
        head += (
            f" {rec['fr_rate']:g} req/s: p50 {rec['fr_p50_ms']:.1f} p95 {rec['fr_p95_ms']:.1f}"
            f" p99 {rec['fr_p99_ms']:.1f} ms, errors {rec['fr_errors']};  max:"
        )
    unit = "msg" if rec.get("ws") else "req"
    if rec.get("client_cpu_pct") is not None:
        cpu += f" {unit}/CPU-s, client CPU {rec['client_cpu_pct']:.0f}%,"
    else:
        cpu += " req/CPU-s"
    if rec.get("tlsload", {}).get("resume_offered"):
        t = rec["tlsload"]
        cpu += f" resumed {t['resumed']:,}/{t['handshakes']:,} (ticket offered {t['offered']:,}),"
    return (
        f"{head} {rec['rps']:>10,.0f} {unit}/s  p50 {p50} ms  p99 {p99} ms  "
        f"errors {rec['errors']:,}  {cpu}  (load avg {rec['loadavg_before']:.1f})"
    )


# --- a scenario -------------------------------------------------------------------------


def _which(binary):
    return shutil.which(binary) or os.path.exists(os.path.join("/usr/sbin", binary))


PYSERVER_OPTIONS = {"tls": "--ssl-certfile", "http2": "--http"}
_project_help = {}


def project_lacks(ctx, sc):
    """Why this tree's pyserver cannot serve the scenario's protocol (its CLI has no
    --ssl-certfile or --http yet), or "" when it has the options."""
    if not (sc.tls or sc.http2):
        return ""
    if ctx.project_python not in _project_help:
        try:
            proc = subprocess.run(
                [ctx.project_python, "-m", "pyserver", "--help"],
                cwd=ROOT,
                env=server_env(SERVERS["pyserver"]),
                capture_output=True,
                text=True,
                timeout=60,
            )
            _project_help[ctx.project_python] = proc.stdout
        except (OSError, subprocess.TimeoutExpired):
            _project_help[ctx.project_python] = ""
    text = _project_help[ctx.project_python]
    missing = [
        opt
        for what, opt in PYSERVER_OPTIONS.items()
        if getattr(sc, what) and not re.search(re.escape(opt) + r"(?![\w-])", text)
    ]
    if not missing:
        return ""
    return (
        f"this tree's pyserver has no {' or '.join(missing)} option "
        "(TLS / HTTP/2 not merged into it yet)"
    )


def available(sc, names, peer_modules, install_status, ctx=None):
    """Split NAMES into runnable servers and {name: reason} for the others."""
    ok, skipped = [], {}
    for name in names:
        spec = SERVERS[name]
        lacks = protocol_unsupported(spec, sc)
        if not lacks and spec.role == "project" and ctx is not None:
            lacks = project_lacks(ctx, sc)
        if lacks:
            skipped[name] = lacks
        elif spec.max_workers and sc.workers > spec.max_workers:
            skipped[name] = f"runs {spec.max_workers} process only, scenario needs {sc.workers}"
        elif spec.binary and not _which(spec.binary):
            skipped[name] = f"{spec.binary} not found"
        elif spec.venv == "peers" and spec.module and spec.module not in peer_modules:
            reason = install_status.get(spec.dist) or install_status.get(spec.module)
            if reason == "ok":  # pip installed it but it does not load
                error = environment.import_error(environment.venv_python(PEERS_VENV), spec.module)
                skipped[name] = (
                    f"installed in the peers venv, `import {spec.module}` fails: {error}"
                )
            else:
                detail = f" ({reason})" if reason else ""
                skipped[name] = f"not installed in the peers venv{detail}"
        else:
            ok.append(name)
    return ok, skipped


def _untmp(text, ctx):
    return text.replace(ctx.tmpdir, TMP_PLACEHOLDER)


def measure_app_cost(ctx, sc):
    """CPU microseconds of one call of the scenario's app without a server
    (harness/appcost.py), pinned like the servers; None if it fails."""
    argv = [ctx.project_python, "-m", "benchmarks.harness.appcost", sc.app, sc.interface, sc.path]
    if sc.server_cpus:
        argv = ["taskset", "-c", sc.server_cpus, *argv]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        log(f"  app cost: failed: {proc.stderr.strip()[-300:]}")
        return None
    return float(proc.stdout.split()[-1])


def run_scenario(ctx, sc, args, peer_modules, install_status):
    names = [n for n in sc.servers if args.server_filter is None or n in args.server_filter]
    servers, skipped = available(sc, names, peer_modules, install_status, ctx)
    missing_app_modules = [m for m in sc.modules if m not in peer_modules]
    for m in missing_app_modules:
        log(f"  warning: {m} is missing in the peers venv; peers will fail to load the app")
    log(f"\n== {sc.name}: {sc.description}")
    log(
        f"   servers: {', '.join(servers)}"
        + (f"; skipped: {', '.join(skipped)}" if skipped else "")
    )
    for name, why in skipped.items():
        log(f"   skip {name}: {why}")
    runs, launch_failed = [], set()
    total, n = args.rounds * len(servers), 0
    commands = {}
    started = time.monotonic()
    versions = collect_versions(ctx.project_python)
    sidecar = None
    tls_info = None
    try:
        if sc.tls:
            paths, cert_cmds = tls.make_certs(ctx.tmpdir)
            tls_info = {"files": {k: _untmp(v, ctx) for k, v in paths.items()}}
            tls_info["commands"] = cert_cmds
            tls_info["server.ext"] = tls.SERVER_EXT
        extra_env = scenario_env(ctx, sc)
        sidecar = start_sidecar(ctx, sc, extra_env)
        scenario_setup(ctx, sc, extra_env)
    except (RuntimeError, OSError) as exc:
        log(f"   setup failed: {exc}")
        servers, extra_env = [], {}
        skipped = {n: f"scenario setup failed: {exc}" for n in names}
    if sc.kind != "load":
        targets, runs = run_memory_scenario(ctx, sc, args, servers, extra_env)
        for rec in runs:
            cmd = commands.setdefault(
                rec["server"], {"summary": SERVERS[_server_of(sc, rec)].summary}
            )
            if "command" in rec and "server" not in cmd:
                cmd["server"] = [_untmp(a, ctx) for a in rec["command"]]
                files = rec.get("files", {}).items()
                cmd["files"] = {_untmp(p, ctx): _untmp(t, ctx) for p, t in files}
            if rec.get("load_command"):
                cmd.setdefault("loads", [])
                load_cmd = [_untmp(a, ctx) for a in rec["load_command"]]
                if load_cmd not in cmd["loads"]:
                    cmd["loads"].append(load_cmd)
        servers = [t.label for t in targets]
        skipped = {t.label: skipped[t.server] for t in sc.targets if t.server in skipped}
    # max+fixed-rate: every server's maximum first, then latency at a rate taken from it.
    phases = [sc] if sc.load != "max+fixed-rate" else [dataclasses.replace(sc, load="wrk"), None]
    total = args.rounds * len(servers) * len(phases) if sc.kind == "load" else 0
    rate_basis = ""
    for psc in phases:
        if psc is None:
            psc, rate_basis = fixed_rate_phase(sc, args, runs, servers)
            if psc is None:
                log(f"   no fixed-rate phase: {rate_basis}")
                break
            sc = dataclasses.replace(sc, rate=psc.rate, rate_duration=psc.rate_duration)
            log(f"   fixed rate: {rate_basis}")
        phase_runs = []
        for rnd in range(1, (args.rounds if sc.kind == "load" else 0) + 1):
            for name in servers:
                n += 1
                spec = SERVERS[name]
                if name in launch_failed:
                    if psc.load == "fixed-rate":
                        continue
                    rec = {
                        "server": name,
                        "round": rnd,
                        "status": "failed",
                        "error": "did not start in an earlier round; not retried",
                    }
                else:
                    rec = run_once(ctx, psc, spec, args, rnd, extra_env)
                    if rec.get("launch_failed"):
                        launch_failed.add(name)
                phase_runs.append(rec)
                cmd = commands.setdefault(name, {"summary": spec.summary})
                if "command" in rec and "server" not in cmd:
                    cmd["server"] = [_untmp(a, ctx) for a in rec["command"]]
                    files = rec.get("files", {}).items()
                    cmd["files"] = {_untmp(p, ctx): _untmp(t, ctx) for p, t in files}
                if rec.get("load_command"):
                    cmd.setdefault("load", [_untmp(a, ctx) for a in rec["load_command"]])
                if rec.get("fixed_rate_command"):
                    cmd.setdefault("fixed_rate", rec["fixed_rate_command"])
                log(progress_line(n, total, rec))
        if psc.load == "fixed-rate":
            merge_fixed_rate(runs, phase_runs)
        else:
            runs.extend(phase_runs)
    stop_sidecar(sidecar)
    app_cost = measure_app_cost(ctx, sc) if sc.app_cost else None
    summary = summarize(sc.kind, runs, servers)
    for name, why in skipped.items():
        summary.append(
            {"server": name, "status": "skipped", "error": why, "rounds": 0, "rounds_ok": 0}
        )
    rounds = scenario_rounds(sc, args)
    log(f"\n{sc.name}: median of {rounds} round(s), {time.monotonic() - started:.0f} s\n")
    log(report.text_table(summary))
    if sc.ws_subscribers:
        log("\n" + report.ws_broadcast_table(summary))
    for s in summary:
        if s["status"] != "ok":
            log(f"  {s['server']}: {s['status']}: {s.get('error', '')[:400]}")
    if app_cost is not None:
        log(report.app_cost_line(app_cost, summary))
    return {
        "app_cost_us": app_cost,
        "scenario": sc.name,
        "kind": sc.kind,
        "description": sc.description,
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "mode": "full" if is_full_run(args) else "quick",
        "elapsed_s": round(time.monotonic() - started),
        "params": {
            "load": sc.load,
            "duration": args.duration,
            "warmup": args.warmup,
            "rounds": rounds,
            "connections": connections(sc, args),
            "rate": sc.rate,
            "rate_duration": sc.rate_duration,
            "rate_basis": rate_basis,
            "paths": list(sc.paths),
            "requests": args.requests,
            "warmup_requests": warmup_requests(args),
            "workers": sc.workers,
            "app": sc.app,
            "path": sc.path,
            "tls": sc.tls,
            "http2": sc.http2,
            "h2_streams": sc.h2_streams,
            "tls_resume": sc.tls_resume,
        },
        "tls": tls_info,
        "server_cpus": sc.server_cpus,
        "client_cpus": sc.client_cpus,
        "machine": environment.machine_info(),
        "versions": scenario_versions(sc, names, versions),
        "roles": {name: SERVERS[_server_of(sc, name)].role for name in servers + list(skipped)},
        "commands": commands,
        "summary": summary,
        "runs": [{k: v for k, v in r.items() if k not in ("files", "launch_failed")} for r in runs],
    }


def fixed_rate_phase(sc, args, runs, servers):
    """(scenario of the latency phase, how its rate was chosen): sc.rate_fraction of the
    slowest peer's median maximum (of the slowest server's when no peer ran); (None, why)
    when nothing ran."""
    medians = {}
    for name in servers:
        values = [r["rps"] for r in runs if r["server"] == name and r["status"] == "ok"]
        if values:
            medians[name] = statistics.median(values)
    peers = {n: v for n, v in medians.items() if SERVERS[n].role == "peer"} or medians
    if not peers:
        return None, "no server finished the maximum-throughput phase"
    slowest = min(peers, key=peers.get)
    rate = round(sc.rate_fraction * peers[slowest], 1)
    duration = args.rate_duration or sc.rate_duration
    psc = dataclasses.replace(sc, load="fixed-rate", rate=rate, rate_duration=duration)
    basis = f"{rate:g} req/s = {sc.rate_fraction:.0%} of {slowest}'s {peers[slowest]:,.0f} req/s"
    return psc, basis


def merge_fixed_rate(runs, fr_runs):
    """The latency phase's figures into the same server's and round's maximum-phase record."""
    by_key = {(r["server"], r["round"]): r for r in runs}
    for fr in fr_runs:
        rec = by_key.get((fr["server"], fr["round"]))
        if rec is None or rec["status"] != "ok":
            continue
        if fr["status"] == "ok":
            rec.update({k: v for k, v in fr.items() if k.startswith("fr_")})
            rec["fixed_rate_command"] = fr["fixed_rate_command"]
        else:
            rec["fr_error"] = fr.get("error", fr["status"])


def _server_of(sc, rec_or_label):
    """The SERVERS name behind a run record's or a target's label."""
    label = rec_or_label["server"] if isinstance(rec_or_label, dict) else rec_or_label
    for t in sc.targets:
        if t.label == label:
            return t.server
    return label


def collect_versions(project_python):
    v = {}
    peers_python = environment.venv_python(PEERS_VENV)
    v["python (peers venv)"] = environment.python_version(peers_python)
    v["python (project .venv)"] = environment.python_version(project_python)
    for dist, ver in environment.dist_versions(project_python, VERSION_DISTS["project"]).items():
        v[f"{dist.removesuffix('-ev')} (project .venv)"] = ver
    v.update(environment.dist_versions(peers_python, VERSION_DISTS["peers"]))
    v["nginx"] = environment.tool_version(["nginx", "-v"], r"nginx/(\S+)")
    v["libuv1 (Debian)"] = environment.deb_version("libuv1")
    v["wrk"] = environment.tool_version(["wrk", "-v"], r"wrk (\S+)")
    v["ab"] = environment.tool_version(["ab", "-V"], r"Version (\S+)")
    v["curl"] = environment.tool_version(["curl", "--version"], r"curl (\S+)")
    v["h2load"] = environment.tool_version(["h2load", "--version"], r"nghttp2/(\S+)")
    v["openssl"] = environment.tool_version(["openssl", "version"], r"OpenSSL (\S+)")
    v["valgrind"] = environment.tool_version(["valgrind", "--version"], r"valgrind-(\S+)")
    postgres = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if postgres:
        v["postgresql"] = environment.tool_version([postgres[-1], "--version"], r"\) (\S+)")
    return v


def scenario_versions(sc, names, versions):
    """The versions that matter for a scenario, in a stable order."""
    wanted = ["python (project .venv)", "pyserver (project .venv)", "python (peers venv)"]
    for name in names:
        spec = SERVERS[name]
        if spec.dist and spec.venv == "peers":
            wanted.append(spec.dist)
        if name == "uvicorn":
            wanted += ["uvloop", "httptools"]
        if name == "meinheld":
            wanted.append("greenlet")
        if name == "socketify":
            wanted += ["cffi", "libuv1 (Debian)"]
        if name == "nginx":
            wanted.append("nginx")
        if name == "uvicorn-worker":
            wanted += ["gunicorn", "uvicorn", "uvloop", "httptools"]
        if name == "pyserver-gunicorn" or (name == "pyserver" and sc.launcher == "gunicorn"):
            wanted.append("gunicorn (project .venv)")
    if "django" in sc.modules:
        wanted += ["django (project .venv)", "django"]
    if "bottle" in sc.modules:
        wanted += ["bottle", "bottle (project .venv)"]
    loads = {"fixed-rate+wrk": ["wrk"], "idle": [], "streams": ["curl"], "wsload": []}
    loads["tlsload"] = []
    loads["instructions"] = ["valgrind"]
    loads["max+fixed-rate"] = ["wrk"]
    if "psycopg" in sc.modules:
        wanted += ["psycopg (project .venv)", "psycopg", "postgresql"]
    wanted += loads.get(sc.load, [sc.load])
    if sc.tls or sc.http2:
        wanted += ["openssl", "curl"]
    seen = []
    for key in wanted:
        if key not in seen:
            seen.append(key)
    return {key: versions.get(key) for key in seen}


# --- outputs ----------------------------------------------------------------------------


def write_outputs(all_results):
    for data in all_results:
        path = os.path.join(RESULTS_DIR, f"{data['scenario']}.json")
        report.write_json(path, data)
        log(f"wrote {os.path.relpath(path, ROOT)}")
    results = report.load_results(RESULTS_DIR)
    write_doc(results)


def resummarize():
    """Summaries of the stored results recomputed from their runs (after a report change)."""
    results = report.load_results(RESULTS_DIR)
    for data in results:
        skipped = [s for s in data["summary"] if s["status"] == "skipped"]
        names = list(
            dict.fromkeys(s["server"] for s in data["summary"] if s["status"] != "skipped")
        )
        data["summary"] = summarize(data.get("kind", "load"), data["runs"], names) + skipped
    return results


def write_doc(results):
    charts = draw_charts(results)
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w") as f:
        f.write(report.markdown(results, charts))
    log(f"wrote {os.path.relpath(DOC, ROOT)}")


def draw_charts(results):
    """Charts via matplotlib in the peers venv; {scenario: path relative to docs/}."""
    python = environment.venv_python(PEERS_VENV)
    paths = [os.path.join(RESULTS_DIR, f"{d['scenario']}.json") for d in results]
    script = os.path.join(BENCH_DIR, "harness", "charts.py")
    try:
        proc = subprocess.run(
            [python, script, IMG_DIR, *paths], capture_output=True, text=True, timeout=300
        )
    except OSError as exc:
        log(f"charts skipped: {exc}")
        return {}
    if proc.returncode != 0:
        log(f"charts failed: {proc.stderr.strip()[-500:]}")
        return {}
    charts = {}
    for line in proc.stdout.split():
        scenario = os.path.splitext(os.path.basename(line))[0]
        charts[scenario] = os.path.relpath(line, os.path.dirname(DOC))
        log(f"wrote {os.path.relpath(line, ROOT)}")
    return charts


def raise_nofile(want):
    """Raise RLIMIT_NOFILE towards WANT (servers and clients inherit it); the limit got."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limits in ((want, max(want, hard)), (min(want, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv=None):
    args = parse_args(argv)
    if args.report_only:
        write_outputs(resummarize())
        return 0
    if args.list:
        for sc in SCENARIOS.values():
            log(f"{sc.name}: {', '.join(sc.servers)}\n    {sc.description}")
        return 0
    install_status = {}
    if not args.no_install:
        still_missing = environment.ensure_apt_packages()
        if still_missing:
            log(f"setup: still missing Debian packages: {', '.join(still_missing)}")
        install_status = environment.ensure_peers_venv(PEERS_VENV, args.reinstall_peers)
        requires = {r for name in args.scenarios for r in SCENARIOS[name].project_requires}
        environment.ensure_project_packages(os.path.abspath(args.project_python), sorted(requires))
    os.makedirs(LOGS_DIR, exist_ok=True)
    raise_nofile(65536)
    baseline = None
    if args.baseline:
        try:
            baseline = prepare_baseline(args.baseline, os.path.abspath(args.project_python))
        except (RuntimeError, OSError) as exc:
            log(f"baseline: {exc}")
            SERVERS.pop(args.baseline_name)
        # Both sides of the A/B prove which extension they run.
        current = glob.glob(os.path.join(ROOT, "pyserver", "_core*.so"))
        SERVERS["pyserver"].loads = current[0] if current else ""
        for sc in SCENARIOS.values():
            if sc.baseline and args.baseline_name in SERVERS:
                sc.servers.insert(sc.servers.index("pyserver") + 1, args.baseline_name)
                old = [t for t in sc.targets if t.server == "pyserver"]
                sc.targets += tuple(
                    dataclasses.replace(
                        t,
                        label=args.baseline_name + t.label.removeprefix("pyserver"),
                        server=args.baseline_name,
                    )
                    for t in old
                )
    peers_python = environment.venv_python(PEERS_VENV)
    modules = {s.module for s in SERVERS.values() if s.module}
    modules |= {m for sc in SCENARIOS.values() for m in sc.modules}
    peer_modules = environment.importable(peers_python, sorted(modules))
    project_python = os.path.abspath(args.project_python)
    pyserver_version = environment.dist_versions(project_python, ["pyserver-ev"])["pyserver-ev"]
    machine = environment.machine_info()
    log(
        f"machine: {machine['cpu']}, {machine['cores']} cores; "
        f"pyserver: {pyserver_version or 'not installed'}; "
        f"server logs in {os.path.relpath(LOGS_DIR, ROOT)}/"
    )
    if not os.path.exists(project_python):
        log(f"warning: {os.path.relpath(project_python, ROOT)} is missing: pyserver will fail")
    all_results = []
    with tempfile.TemporaryDirectory(prefix="pyserver-bench-") as tmpdir:
        os.chmod(tmpdir, 0o755)
        ctx = Context(ROOT, PEERS_VENV, project_python, tmpdir)
        for name in args.scenarios:
            sc = SCENARIOS[name]
            if args.server_filter and not set(sc.servers) & set(args.server_filter):
                continue
            data = run_scenario(ctx, sc, args, peer_modules, install_status)
            if baseline and args.baseline_name in sc.servers:
                data["baseline"] = baseline
                data["versions"][args.baseline_name] = baseline["commit"]
            all_results.append(data)
    if all_results and not args.no_write:
        write_outputs(all_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
