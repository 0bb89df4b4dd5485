"""Load generators: wrk (keep-alive) and ab (a connection per request), and their parsers."""

import json
import os
import re
import subprocess
import sys

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


class LoadError(Exception):
    """The load generator failed or printed something we cannot read."""


def pinned(cpus, argv):
    """ARGV under `taskset -c CPUS`, or ARGV itself when CPUS is None."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def _ms(text):
    """'512.00us' / '1.20ms' / '2.01s' -> milliseconds."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if not m:
        raise LoadError(f"unreadable duration {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def wrk_command(url, duration, connections, threads=1, cpus=None, script=None, headers=()):
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency"]
    for header in headers:
        argv += ["-H", header]
    argv.append(url)
    if script:
        argv[1:1] = ["-s", script]
    return pinned(cpus, argv)


ROTATE_LUA = """\
local paths = {%s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
"""


def write_rotation_script(path, paths):
    """A wrk Lua script at PATH whose requests go round-robin over PATHS; returns PATH."""
    with open(path, "w") as f:
        f.write(ROTATE_LUA % ", ".join(json.dumps(p) for p in paths))
    return path


def parse_wrk(out):
    """Results of `wrk --latency` output: rps, latencies (ms), errors."""
    res = {}
    m = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    if not m:
        raise LoadError(f"no Requests/sec in wrk output: {out.strip()[-300:]!r}")
    res["rps"] = float(m.group(1))
    m = re.search(r"^\s*(\d+) requests in ([\d.]+\w+),", out, re.M)
    res["requests"] = int(m.group(1)) if m else None
    res["elapsed_s"] = _ms(m.group(2)) / 1e3 if m else None
    dist = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    res["p50_ms"] = _ms(dist["50"]) if "50" in dist else None
    res["p99_ms"] = _ms(dist["99"]) if "99" in dist else None
    m = re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
    res["max_ms"] = _ms(m.group(3)) if m else None
    socket_errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        socket_errors = dict(zip(socket_errors, map(int, m.groups()), strict=True))
    res["socket_errors"] = socket_errors
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    res["non_2xx"] = int(m.group(1)) if m else 0
    res["errors"] = sum(socket_errors.values()) + res["non_2xx"]
    return res


def run_wrk(url, duration, connections, cpus=None, threads=1, script=None, headers=()):
    """Run wrk for DURATION seconds and return parse_wrk() of its output plus the command."""
    argv = wrk_command(url, duration, connections, threads, cpus, script, headers)
    out = _run(argv, timeout=duration + 60)
    res = parse_wrk(out)
    res["load_command"] = argv
    return res


def ab_command(url, requests, connections, cpus=None):
    # -r: keep going on socket receive errors (they are counted, not fatal).
    argv = ["ab", "-r", "-q", "-c", str(connections), "-n", str(requests)]
    if url.startswith("https:"):  # a full TLS 1.3 handshake per request (ab keeps no sessions)
        argv += ["-f", "TLS1.3"]
    return pinned(cpus, argv + [url])


def parse_ab(out):
    """Results of ab output: rps, latencies (ms), failed requests, longest request."""
    res = {}
    m = re.search(r"^Requests per second:\s+([\d.]+)", out, re.M)
    if not m:
        raise LoadError(f"no 'Requests per second' in ab output: {out.strip()[-300:]!r}")
    res["rps"] = float(m.group(1))
    m = re.search(r"^Complete requests:\s+(\d+)", out, re.M)
    res["requests"] = int(m.group(1)) if m else None
    m = re.search(r"^Time taken for tests:\s+([\d.]+) seconds", out, re.M)
    res["elapsed_s"] = float(m.group(1)) if m else None
    dist = dict(re.findall(r"^\s+(50|66|75|80|90|95|98|99|100)%\s+(\d+)", out, re.M))
    res["p50_ms"] = float(dist["50"]) if "50" in dist else None
    res["p99_ms"] = float(dist["99"]) if "99" in dist else None
    # "100%  19 (longest request)"
    res["max_ms"] = float(dist["100"]) if "100" in dist else None
    m = re.search(r"^Failed requests:\s+(\d+)", out, re.M)
    res["failed"] = int(m.group(1)) if m else 0
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", out)
    kinds = ("connect", "receive", "length", "exceptions")
    res["failed_detail"] = dict(zip(kinds, map(int, m.groups()), strict=True)) if m else {}
    m = re.search(r"^HTML transferred:\s+(\d+) bytes", out, re.M)
    res["body_bytes"] = int(m.group(1)) if m else None
    m = re.search(r"^Non-2xx responses:\s+(\d+)", out, re.M)
    res["non_2xx"] = int(m.group(1)) if m else 0
    res["errors"] = res["failed"] + res["non_2xx"]
    m = re.search(r"^SSL/TLS Protocol:\s+(\S+)", out, re.M)
    if m:  # "TLSv1.3,TLS_AES_256_GCM_SHA384,256,256"
        res["tls"] = m.group(1)
    return res


def run_ab(url, requests, connections, cpus=None, timeout=600):
    """Run `ab -c CONNECTIONS -n REQUESTS` (no keep-alive) and return parse_ab() of it."""
    argv = ab_command(url, requests, connections, cpus)
    out = _run(argv, timeout=timeout)
    res = parse_ab(out)
    res["load_command"] = argv
    return res


def h2load_command(url, duration, connections, streams, cpus=None, log_file=None):
    """h2load for DURATION seconds: CONNECTIONS clients of STREAMS concurrent streams each;
    h2c by prior knowledge on http://, ALPN h2 on https://."""
    argv = ["h2load", "-t", "1", "-c", str(connections), "-m", str(streams)]
    argv += ["-D", f"{duration:g}"]
    if log_file:
        argv.append(f"--log-file={log_file}")
    return pinned(cpus, argv + [url])


def _h2load_latencies(log_file):
    """(p50, p99, max) in ms of the per-request durations (3rd column, microseconds) of
    h2load's --log-file; Nones when it has none."""
    durations = []
    try:
        with open(log_file) as f:
            for line in f:
                fields = line.split("\t")
                if len(fields) >= 3:
                    durations.append(int(fields[2]))
    except (OSError, ValueError):
        return None, None, None
    if not durations:
        return None, None, None
    durations.sort()
    n = len(durations)

    def q(p):
        return durations[min(n - 1, int(p * n))] / 1e3

    return q(0.50), q(0.99), durations[-1] / 1e3


def parse_h2load(out):
    """Results of h2load output: rps, requests done, errors (failed, which counts errored and
    timed-out requests too, plus non-2xx answers), protocol and TLS version."""
    res = {}
    m = re.search(r"^finished in ([\d.]+)(\w+), ([\d.]+) req/s", out, re.M)
    if not m:
        raise LoadError(f"no 'finished in' in h2load output: {out.strip()[-300:]!r}")
    res["elapsed_s"] = _ms(m.group(1) + m.group(2)) / 1e3
    res["rps"] = float(m.group(3))
    m = re.search(
        r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        out,
        re.M,
    )
    if not m:
        raise LoadError(f"no 'requests:' line in h2load output: {out.strip()[-300:]!r}")
    total, started, done, ok, failed, errored, timeout = map(int, m.groups())
    res["requests"] = done
    res["h2load_requests"] = {"done": done, "succeeded": ok, "failed": failed}
    res["h2load_requests"].update(errored=errored, timeout=timeout)
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
    res["non_2xx"] = sum(map(int, m.groups()[1:])) if m else 0
    res["errors"] = failed + res["non_2xx"]
    m = re.search(r"^traffic: .*\((\d+)\) data", out, re.M)
    res["body_bytes"] = int(m.group(1)) if m else None
    m = re.search(r"^Application protocol: (\S+)", out, re.M)
    res["protocol"] = m.group(1) if m else None
    m = re.search(r"^TLS Protocol: (\S+)", out, re.M)
    if m:
        res["tls"] = m.group(1)
    if res["protocol"] not in ("h2", "h2c"):
        raise LoadError(f"h2load negotiated no HTTP/2 ({res['protocol']}): {out.strip()[-300:]}")
    if res["requests"] == 0:
        raise LoadError(f"h2load completed no request: {out.strip()[-300:]}")
    return res


def run_h2load(url, duration, connections, streams, cpus=None, log_file=None):
    """Run h2load for DURATION seconds; parse_h2load() of it plus latency percentiles from
    its per-request log (when LOG_FILE) and the command."""
    argv = h2load_command(url, duration, connections, streams, cpus, log_file)
    out = _run(argv, timeout=duration + 60, done_marker="finished in")
    res = parse_h2load(out)
    res["p50_ms"], res["p99_ms"], res["max_ms"] = (
        _h2load_latencies(log_file) if log_file else (None, None, None)
    )
    if log_file:
        os.unlink(log_file)
    res["load_command"] = argv
    return res


def _run(argv, timeout, done_marker="Requests"):
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"{argv[0]} did not finish in {timeout} s") from exc
    except FileNotFoundError as exc:
        raise LoadError(f"{exc.filename} is not installed") from exc
    if proc.returncode != 0 and done_marker not in proc.stdout:
        raise LoadError(
            f"{' '.join(argv)} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"
        )
    return proc.stdout


HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
WSLOAD_SRC = os.path.join(os.path.dirname(HARNESS_DIR), "wsload", "wsload.c")
WSLOAD = os.path.join(os.path.dirname(HARNESS_DIR), ".build", "wsload")


def build_wsload():
    """Compile benchmarks/wsload/wsload.c (cc -O2, zlib, ISA-L) when missing or older than its
    source; the binary's path.  Raises LoadError when it does not compile."""
    if os.path.exists(WSLOAD) and os.path.getmtime(WSLOAD) >= os.path.getmtime(WSLOAD_SRC):
        return WSLOAD
    os.makedirs(os.path.dirname(WSLOAD), exist_ok=True)
    argv = ["cc", "-O2", "-Wall", "-Wextra", "-o", WSLOAD, WSLOAD_SRC, "-lz", "-lisal"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LoadError(f"{' '.join(argv)}: {proc.stderr[-400:]}")
    return WSLOAD


def wsload_command(
    port, path, connections, size, duration, deflate, cpus=None, host=None, binary=False
):
    argv = [WSLOAD, "-h", host or "127.0.0.1", "-p", str(port), "-u", path]
    argv += ["-c", str(connections), "-s", str(size), "-d", f"{duration:g}"]
    return pinned(cpus, argv + (["-z"] if deflate else []) + (["-b"] if binary else []))


def run_wsload(port, path, connections, size, duration, deflate, cpus=None, binary=False):
    """Echo load over WebSockets (wsload.c): messages/s as rps, round-trip latency, the
    client's own CPU share, whether permessage-deflate was negotiated.  binary: binary
    frames instead of text."""
    build_wsload()
    argv = wsload_command(port, path, connections, size, duration, deflate, cpus, binary=binary)
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=duration + 60
        )
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"wsload did not finish in {duration + 60} s") from exc
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise LoadError(
            f"unreadable wsload output: {(proc.stdout + proc.stderr)[-300:]!r}"
        ) from exc
    if out["upgraded"] == 0:
        raise LoadError(f"no connection upgraded: {out['first_error']}")
    res = {
        "rps": out["msg_per_s"],
        "requests": out["messages"],
        "elapsed_s": out["duration_s"],
        "p50_ms": out["p50_ms"],
        "p99_ms": out["p99_ms"],
        "max_ms": out["max_ms"],
        "errors": out["errors"],
        "client_cpu_pct": out["client_cpu_pct"],
        "ws": out,
    }
    rel = os.path.relpath(WSLOAD, os.path.dirname(os.path.dirname(HARNESS_DIR)))
    res["load_command"] = [rel if a == WSLOAD else a for a in argv]
    return res


TLSLOAD_SRC = os.path.join(os.path.dirname(HARNESS_DIR), "tlsload", "tlsload.c")
TLSLOAD = os.path.join(os.path.dirname(HARNESS_DIR), ".build", "tlsload")


def build_tlsload():
    """Compile benchmarks/tlsload/tlsload.c (cc -O2, OpenSSL) when missing or older than its
    source; the binary's path.  Raises LoadError when it does not compile."""
    if os.path.exists(TLSLOAD) and os.path.getmtime(TLSLOAD) >= os.path.getmtime(TLSLOAD_SRC):
        return TLSLOAD
    os.makedirs(os.path.dirname(TLSLOAD), exist_ok=True)
    argv = ["cc", "-O2", "-Wall", "-Wextra", "-o", TLSLOAD, TLSLOAD_SRC, "-lssl", "-lcrypto"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LoadError(f"{' '.join(argv)}: {proc.stderr[-400:]}")
    return TLSLOAD


def run_tlsload(port, path, connections, duration, resume, cpus=None, host="127.0.0.1"):
    """A new TLS 1.3 connection per request (tlsload.c), resuming sessions when RESUME:
    rps, latency from connect to the last byte, errors, handshakes resumed, client CPU."""
    build_tlsload()
    argv = [TLSLOAD, "-h", host, "-p", str(port), "-u", path, "-c", str(connections)]
    argv = pinned(cpus, argv + ["-d", f"{duration:g}"] + (["-r"] if resume else []))
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=duration + 60
        )
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"tlsload did not finish in {duration + 60} s") from exc
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise LoadError(
            f"unreadable tlsload output: {(proc.stdout + proc.stderr)[-300:]!r}"
        ) from exc
    if out["requests"] == 0:
        raise LoadError(f"no request answered: {out['first_error']}")
    res = {k: out[k] for k in ("rps", "requests", "p50_ms", "p99_ms", "max_ms")}
    res.update(errors=out["errors"] + out["non_2xx"], elapsed_s=out["duration_s"])
    res.update(client_cpu_pct=out["client_cpu_pct"], tls=out["tls"], tlsload=out)
    rel = os.path.relpath(TLSLOAD, os.path.dirname(os.path.dirname(HARNESS_DIR)))
    res["load_command"] = [rel if a == TLSLOAD else a for a in argv]
    return res


FIXEDRATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixedrate.py")


def fixed_rate_command(host, port, paths, rate, duration, cpus=None, python=None):
    argv = [python or sys.executable, FIXEDRATE, "--host", host, "--port", str(port)]
    argv += ["--rate", f"{rate:g}", "--duration", f"{duration:g}", *paths]
    return pinned(cpus, argv)


def run_fixed_rate(host, port, paths, rate, duration, cpus=None):
    """Open-loop load at RATE req/s over PATHS (fixedrate.py): latency percentiles, errors."""
    argv = fixed_rate_command(host, port, paths, rate, duration, cpus)
    out = _run(argv, timeout=duration + 60)
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise LoadError(f"unreadable fixedrate output: {out[-300:]!r}") from exc
    # Recorded relative to the repository root, like the servers' commands.
    root = os.path.dirname(os.path.dirname(os.path.dirname(FIXEDRATE)))
    res["load_command"] = [
        os.path.relpath(a, root) if a.startswith(root + os.sep) else a for a in argv
    ]
    return res
