"""Summaries, result files, the console table and docs/benchmarks.md."""

import json
import os
import shlex
import statistics

SCENARIO_ORDER = ["hello-wsgi", "hello-asgi", "bottle-ab", "django-asgi", "idle", "streams"]
SCENARIO_ORDER += ["django-sync", "django-wsgi-db", "sync-to-async", "outgoing-io"]
SCENARIO_ORDER += [f"websocket-echo-{n}" for n in ("64", "16k", "64-deflate", "16k-deflate")]
SCENARIO_ORDER += [f"hello-tls-{n}" for n in ("wsgi", "asgi", "wsgi-newconn", "asgi-newconn")]
SCENARIO_ORDER += ["hello-tls-wsgi-resume", "hello-tls-asgi-resume"]
SCENARIO_ORDER += ["hello-h2c", "hello-h2-tls", "instructions"]
FIXED_RATE_KEYS = ("fr_p50_ms", "fr_p95_ms", "fr_p99_ms", "fr_max_ms")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs, servers, reference="pyserver", ceiling="nginx"):
    """One row per server: medians over rounds and medians of per-round ratios."""
    by_server = {name: [r for r in runs if r["server"] == name] for name in servers}
    ok = {
        name: {r["round"]: r for r in rs if r["status"] == "ok"} for name, rs in by_server.items()
    }
    rows = []
    for name in servers:
        rs, good = by_server[name], ok[name]
        row = {"server": name, "rounds": len(rs), "rounds_ok": len(good)}
        if not good:
            failures = [r for r in rs if r["status"] != "ok"]
            row["status"] = failures[0]["status"] if failures else "not run"
            row["error"] = failures[0].get("error", "") if failures else ""
            rows.append(row)
            continue
        row["status"] = "ok"
        for key in ("rps", "p50_ms", "p99_ms", "max_ms", "req_per_cpu_s", "cpu_s"):
            row[key] = _median([r.get(key) for r in good.values()])
        row["errors"] = sum(r.get("errors", 0) for r in good.values())
        if any(r.get("client_cpu_pct") is not None for r in good.values()):
            row["client_cpu_pct"] = _median([r.get("client_cpu_pct") for r in good.values()])
            row["unit"] = "msg" if any(r.get("ws") for r in good.values()) else "req"
        if any(r.get("fr_p50_ms") is not None for r in good.values()):
            for key in FIXED_RATE_KEYS + ("fr_rate",):
                row[key] = _median([r.get(key) for r in good.values()])
            row["fr_errors"] = sum(r.get("fr_errors", 0) for r in good.values())
            row["fr_requests"] = sum(r.get("fr_requests", 0) for r in good.values())
            # pyserver's latency ÷ this server's (below 1: pyserver answers faster).
            for key in ("fr_p50_ms", "fr_p95_ms", "fr_p99_ms"):
                row[f"vs_reference_{key}"] = _ratio_median(ok.get(reference, {}), good, key)
        for key in WS_BROADCAST_KEYS:
            if any(r.get(key) is not None for r in good.values()):
                row[key] = _median([r.get(key) for r in good.values()])
        row["vs_reference"] = _ratio_median(ok.get(reference, {}), good)
        row["vs_reference_cpu"] = _ratio_median(ok.get(reference, {}), good, "req_per_cpu_s")
        row["of_ceiling"] = _ratio_median(good, ok.get(ceiling, {}))
        rows.append(row)
    return rows


def app_cost_parts(app_us, summary):
    """{server: (CPU µs per request, of which the server's own part by difference)}."""
    parts = {}
    for s in summary:
        if s.get("status") == "ok" and s.get("req_per_cpu_s"):
            total = 1e6 / s["req_per_cpu_s"]
            parts[s["server"]] = (total, total - app_us)
    return parts


def app_cost_line(app_us, summary):
    """One sentence: the application's CPU per request alone, and each server's own part."""
    parts = app_cost_parts(app_us, summary)
    each = ", ".join(
        f"{name} {total:.1f} µs ({own:.1f} µs its own)" for name, (total, own) in parts.items()
    )
    return (
        f"Application alone (harness/appcost.py, no server): {app_us:.1f} µs CPU per request. "
        f"CPU per request under load, and each server's own part by difference: {each}."
    )


def _ratio_median(num, den, key="rps"):
    """Median over the rounds present in both of num[round][key] / den[round][key]."""
    ratios = [
        num[k][key] / den[k][key] for k in num if k in den and num[k].get(key) and den[k].get(key)
    ]
    return _median(ratios)


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def load_results(results_dir):
    found = {}
    if os.path.isdir(results_dir):
        for name in os.listdir(results_dir):
            if name.endswith(".json"):
                with open(os.path.join(results_dir, name)) as f:
                    data = json.load(f)
                found[data["scenario"]] = data
    order = {n: i for i, n in enumerate(SCENARIO_ORDER)}
    return [found[k] for k in sorted(found, key=lambda n: (order.get(n, 99), n))]


# --- formatting -------------------------------------------------------------------------

COLUMNS = ["server", "req/s", "p50 ms", "p99 ms", "max ms", "errors", "req/CPU-s"]
COLUMNS += ["pyserver ÷ it", "pyserver ÷ it (CPU)", "of nginx", "rounds"]


def _num(v, fmt="{:,.0f}"):
    return "–" if v is None else fmt.format(v)


WS_COLUMNS = ["server", "msg/s", "p50 ms", "p99 ms", "max ms", "errors", "msg/CPU-s"]
WS_COLUMNS += ["client CPU", "pyserver ÷ it", "pyserver ÷ it (CPU)", "rounds"]


def _ws(summary):
    return any(s.get("client_cpu_pct") is not None for s in summary)


def _ws_columns(summary):
    """WS_COLUMNS, in requests for a load client that reports its CPU too (tlsload)."""
    units = {s.get("unit") for s in summary if s.get("client_cpu_pct") is not None}
    if units != {"req"}:  # results written before "unit" existed are WebSocket ones
        return WS_COLUMNS
    return [c.replace("msg", "req") for c in WS_COLUMNS]


def ws_table_rows(summary, reference="pyserver"):
    """Rows of the WebSocket echo scenarios: messages, and the load client's CPU share."""
    rows = []
    for s in summary:
        rounds = f"{s['rounds_ok']}/{s['rounds']}"
        if s["status"] != "ok":
            rows.append(_failed_row(s, len(WS_COLUMNS)))
            continue
        ref = s["server"] == reference
        rows.append(
            [s["server"], _num(s["rps"]), _num(s["p50_ms"], "{:.2f}"), _num(s["p99_ms"], "{:.2f}")]
            + [_num(s["max_ms"], "{:.1f}"), _num(s["errors"]), _num(s["req_per_cpu_s"])]
            + [_num(s["client_cpu_pct"], "{:.0f}%")]
            + ["1" if ref else _num(s["vs_reference"], "{:.2f}×")]
            + ["1" if ref else _num(s["vs_reference_cpu"], "{:.2f}×")]
            + [rounds]
        )
    return rows


def table_rows(summary, reference="pyserver"):
    rows = []
    for s in summary:
        rounds = f"{s['rounds_ok']}/{s['rounds']}"
        if s["status"] != "ok":
            rows.append([s["server"], s["status"].upper()] + [""] * (len(COLUMNS) - 3) + [rounds])
            continue
        if s["server"] == reference:
            ratios = ["1", "1"]
        else:
            ratios = [_num(s["vs_reference"], "{:.2f}×"), _num(s["vs_reference_cpu"], "{:.2f}×")]
        rows.append(
            [s["server"], _num(s["rps"]), _num(s["p50_ms"], "{:.2f}"), _num(s["p99_ms"], "{:.2f}")]
            + [_num(s["max_ms"], "{:.1f}"), _num(s["errors"]), _num(s["req_per_cpu_s"])]
            + ratios
            + [_num(s["of_ceiling"], "{:.0%}"), rounds]
        )
    return rows


FR_COLUMNS = ["server", "p50 ms", "p95 ms", "p99 ms", "errors", "p99 pyserver ÷ it"]
FR_COLUMNS += ["max req/s", "wrk p99 ms", "wrk errors", "req/CPU-s", "pyserver ÷ it"]
FR_COLUMNS += ["pyserver ÷ it (CPU)", "rounds"]


def _fixed_rate(summary):
    return any(s.get("fr_p50_ms") is not None for s in summary)


def fr_table_rows(summary, reference="pyserver"):
    """Rows for the fixed-rate + maximum-throughput scenarios (django-asgi)."""
    rows = []
    for s in summary:
        rounds = f"{s['rounds_ok']}/{s['rounds']}"
        if s["status"] != "ok":
            rows.append(
                [s["server"], s["status"].upper()] + [""] * (len(FR_COLUMNS) - 3) + [rounds]
            )
            continue
        ref = s["server"] == reference
        rows.append(
            [s["server"]]
            + [_num(s.get(k), "{:.1f}") for k in ("fr_p50_ms", "fr_p95_ms", "fr_p99_ms")]
            + [f"{s.get('fr_errors', 0):,}/{s.get('fr_requests', 0):,}"]
            + ["1" if ref else _num(s.get("vs_reference_fr_p99_ms"), "{:.2f}×")]
            + [_num(s["rps"]), _num(s["p99_ms"], "{:.1f}"), _num(s["errors"])]
            + [_num(s["req_per_cpu_s"])]
            + ["1" if ref else _num(s["vs_reference"], "{:.2f}×")]
            + ["1" if ref else _num(s["vs_reference_cpu"], "{:.2f}×")]
            + [rounds]
        )
    return rows


# --- memory scenarios (idle, streams) ---------------------------------------------------

IDLE_TITLES = {
    "idle": "10,000 idle keep-alive connections (one GET answered on each)",
    "head": "1,000 connections each holding an incomplete 60 KiB head",
}
IDLE_COLUMNS = ["server", "held", "server's answers", "RSS before MiB", "RSS held MiB"]
IDLE_COLUMNS += ["after closing MiB", "KiB per connection", "pyserver-wsgi ÷ it"]
IDLE_COLUMNS += ["pyserver-asgi ÷ it", "rounds"]
STREAM_TITLES = {
    "file": "1 GiB download, zero-copy (wsgi.file_wrapper, http.response.pathsend, nginx "
    "static file)",
    "gen": "1 GiB download from the application (WSGI generator, ASGI send() per 64 KiB)",
    "upload": "1 GiB upload read to the end by the application",
}
STREAM_COLUMNS = ["server", "MiB/s", "client CPU", "server CPU-s", "MiB/CPU-s"]
STREAM_COLUMNS += ["RSS before MiB", "peak RSS growth MiB", "pyserver-wsgi ÷ it"]
STREAM_COLUMNS += ["pyserver-asgi ÷ it", "rounds"]
_MiB = 1024.0


def _kind(summary):
    if any(s.get("kind") == "instr" for s in summary):
        return "instructions"
    if any("phase" in s for s in summary):
        return "idle"
    if any("transfer" in s for s in summary):
        return "streams"
    return "load"


def _ratio_cells(s):
    return [
        "1" if s["server"] == ref else _num(s.get(f"vs_{ref}"), "{:.2f}×")
        for ref in ("pyserver-wsgi", "pyserver-asgi")
    ]


def _failed_row(s, width):
    rounds = f"{s['rounds_ok']}/{s['rounds']}"
    word = "NOT SUPPORTED" if s["status"] == "unsupported" else s["status"].upper()
    return [s["server"], word] + [""] * (width - 3) + [rounds]


def idle_rows(summary, phase):
    rows = []
    for s in summary:
        if s.get("phase", phase) != phase:
            continue
        if s["status"] != "ok":
            rows.append(_failed_row(s, len(IDLE_COLUMNS)))
            continue
        rows.append(
            [s["server"], f"{s['open']:,.0f}/{s['connections']:,.0f}", s["answers"]]
            + [_num(s[k] / _MiB, "{:.1f}") for k in ("rss_before_kib", "rss_held_kib")]
            + [_num(s["rss_after_close_kib"] / _MiB, "{:.1f}")]
            + [_num(s["per_conn_kib"], "{:.2f}") if s["per_conn_kib"] is not None else "n/a"]
            + _ratio_cells(s)
            + [f"{s['rounds_ok']}/{s['rounds']}"]
        )
    return rows


def stream_rows(summary, transfer):
    rows = []
    for s in summary:
        if s.get("transfer") != transfer:
            continue
        if s["status"] != "ok":
            rows.append(_failed_row(s, len(STREAM_COLUMNS)))
            continue
        rows.append(
            [s["server"], _num(s["mib_s"]), _num(s["client_cpu_pct"], "{:.0f}%")]
            + [_num(s["server_cpu_s"], "{:.2f}"), _num(s["mib_per_cpu_s"])]
            + [_num(s["rss_before_kib"] / _MiB, "{:.1f}")]
            + [_num(s["rss_growth_kib"] / _MiB, "{:+.1f}")]
            + _ratio_cells(s)
            + [f"{s['rounds_ok']}/{s['rounds']}"]
        )
    return rows


INSTR_COLUMNS = ["server", "interface", "instructions / request", "pyserver ÷ it", "requests"]
INSTR_COLUMNS += ["rounds"]


def instr_rows(summary):
    rows = []
    for s in summary:
        if s["status"] != "ok":
            rows.append(_failed_row(s, len(INSTR_COLUMNS)))
            continue
        rows.append(
            [s["server"], s["interface"], _num(s["instr_per_req"])]
            + [_num(s.get("vs_reference"), "{:.3f}×"), f"{s['requests']} + {2 * s['requests']}"]
            + [f"{s['rounds_ok']}/{s['rounds']}"]
        )
    return rows


def _memory_tables(summary):
    """[(title, columns, rows)] of an idle, streams or instructions summary."""
    if _kind(summary) == "instructions":
        return [("Instructions per request (callgrind)", INSTR_COLUMNS, instr_rows(summary))]
    if _kind(summary) == "idle":
        return [(t, IDLE_COLUMNS, idle_rows(summary, p)) for p, t in IDLE_TITLES.items()]
    return [
        (t, STREAM_COLUMNS, stream_rows(summary, k))
        for k, t in STREAM_TITLES.items()
        if stream_rows(summary, k)
    ]


# A scenario's WebSocket subscribers during the maximum and the fixed-rate phases.
WS_BROADCAST_KEYS = ("ws_delivered_pct", "ws_p99_ms", "fr_ws_delivered_pct", "fr_ws_p99_ms")


def ws_broadcast_table(summary):
    """The WebSocket side of a load scenario with subscribers (django-channels)."""
    columns = ["server", "ws delivered % (max)", "ws p99 ms (max)"]
    columns += ["ws delivered % (fixed rate)", "ws p99 ms (fixed rate)"]
    body = []
    for row in summary:
        if row.get("status") != "ok":
            continue
        cells = [row.get(key) for key in WS_BROADCAST_KEYS]
        body.append([row["server"]] + ["-" if c is None else f"{c:.1f}" for c in cells])
    return _text(columns, body)


def text_table(summary):
    if _kind(summary) != "load":
        return "\n\n".join(f"{t}\n{_text(c, r)}" for t, c, r in _memory_tables(summary))
    if _fixed_rate(summary):
        return _text(FR_COLUMNS, fr_table_rows(summary))
    if _ws(summary):
        return _text(_ws_columns(summary), ws_table_rows(summary))
    return _text(COLUMNS, table_rows(summary))


def _text(columns, body):
    rows = [columns] + body
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = []
    for n, r in enumerate(rows):
        rest = zip(r[1:], widths[1:], strict=True)
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in rest]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md(columns, body):
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " ---: |" * (len(columns) - 1)]
    for r in body:
        name = f"**{r[0]}**" if r[0].startswith("pyserver") else r[0]
        lines.append("| " + " | ".join([name] + r[1:]) + " |")
    return "\n".join(lines)


def markdown_table(summary):
    if _fixed_rate(summary):
        columns, body = FR_COLUMNS, fr_table_rows(summary)
    elif _ws(summary):
        columns, body = _ws_columns(summary), ws_table_rows(summary)
    else:
        columns, body = COLUMNS, table_rows(summary)
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " ---: |" * (len(columns) - 1)]
    for r in body:
        name = f"**{r[0]}**" if r[0] == "pyserver" else r[0]
        lines.append("| " + " | ".join([name] + r[1:]) + " |")
    return "\n".join(lines)


def _loadavg_range(runs):
    values = [r["loadavg_before"] for r in runs if r.get("loadavg_before") is not None]
    if not values:
        return "not recorded"
    return f"{min(values):.1f} to {max(values):.1f}"


def _cmd(argv):
    if argv and argv[0] == "#":  # a description, not a command line
        return " ".join(argv)
    return shlex.join(argv)


def markdown(results, charts):
    """docs/benchmarks.md from the result files of every scenario."""
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by benchmarks/run.py (`make bench`); edit the generator, "
        "not this file. -->",
        "",
        "How pyserver compares with the servers people use today. The method: each server "
        "and the load generator run on the same machine, the server pinned to CPU 0 and "
        "the load generator to CPU 1 (unless a scenario says otherwise); one worker "
        "process per server unless the scenario says otherwise; the load runs for a "
        "warm-up period first, then the measured period. Rounds are interleaved "
        "(pyserver, peer 1, peer 2, …, then again), and the table shows the median per "
        "server and the **median of per-round ratios**: on a shared, noisy machine a "
        "ratio taken in one run means more than an absolute figure.",
        "",
        "Columns: *req/s* throughput; *p50*/*p99*/*max* latency reported by the load "
        "generator; *errors* socket errors plus non-2xx answers (wrk) or failed plus "
        "non-2xx requests (ab), summed over rounds (wrk counts a read error each time a "
        "server closes a keep-alive connection, as uwsgi --http-socket does after every "
        "response); *req/CPU-s* requests per second of "
        "CPU time used by the server's whole process tree (utime+stime of every process "
        "and thread, from /proc, around the measured period): servers with helper "
        "threads cannot hide their cost; *pyserver ÷ it* how many times pyserver's "
        "throughput is this server's, and *(CPU)* the same for requests per CPU-second "
        "(steadier when other work shares the machine); *of nginx* this server's "
        "throughput as a fraction of nginx answering from its config (the practical "
        "ceiling). The 1-minute load average before each run is recorded: well above 0 "
        "means other work shared the machine and absolute numbers are low.",
        "",
        "The `idle` and `streams` scenarios measure memory (and, for streams, "
        "throughput of 1 GiB bodies) rather than requests per second; the notes under "
        "their tables explain their columns.",
        "",
        "Run it: `make bench`, or `.venv/bin/python benchmarks/run.py --help` "
        "(`--quick` for a 2 s smoke run; `--baseline REF` adds pyserver as built from git "
        "REF to hello-wsgi, hello-asgi and instructions, a same-run A/B of two builds). "
        "Peers live in `benchmarks/.venv-peers`, "
        "created on the first run; raw results are in `benchmarks/results/`.",
        "",
    ]
    for data in results:
        if data.get("kind", "load") != "load":
            out += _memory_markdown(data, charts.get(data["scenario"]))
            continue
        out += _scenario_markdown(data, charts.get(data["scenario"]))
    return "\n".join(out).rstrip() + "\n"


def _baseline_lines(data):
    b = data.get("baseline")
    if not b:
        return []
    return [
        f"- Same-run A/B: `pyserver@{b['ref']}` is pyserver built from commit "
        f"`{b['commit'][:12]}` (a git worktree in `{b['dir']}`, extension built in place with "
        "the same Python); its *pyserver ÷ it* is new build ÷ old build."
    ]


def _config_files(data, once=False):
    """The servers' configuration files as fenced blocks (each text once when once)."""
    out, seen = [], set()
    for name, info in data["commands"].items():
        for path, text in info.get("files", {}).items():
            if once and text in seen:
                continue
            seen.add(text)
            out += [
                f"`{name}` configuration (`{os.path.basename(path)}`):",
                "",
                "```nginx",
                text.rstrip(),
                "```",
                "",
            ]
    return out


def _scenario_markdown(data, chart):
    p, m = data["params"], data["machine"]
    if p["load"] == "max+fixed-rate":
        load = (
            f"(a) wrk, {p['connections']} connections, keep-alive, on `{p['path']}`, "
            f"{p['warmup']} s warm-up + {p['duration']} s measured, every server; then (b) "
            f"open-loop {p['rate']:g} req/s for {p['rate_duration']} s after a "
            f"{p['warmup']} s wrk warm-up, every server again ({p.get('rate_basis', '')})"
        )
    elif p["load"] == "fixed-rate+wrk":
        load = (
            f"(a) open-loop {p['rate']:g} req/s for {p['rate_duration']} s over "
            + ", ".join(f"`{x}`" for x in p["paths"])
            + f", then (b) wrk, {p['connections']} connections, keep-alive, on `{p['path']}`, "
            f"{p['duration']} s measured (a {p['warmup']} s wrk warm-up precedes (a))"
        )
    elif p["load"] == "wsload":
        load = (
            f"wsload, {p['connections']} WebSocket connections, one message in flight on "
            f"each, {p['warmup']} s warm-up + {p['duration']} s measured"
        )
    elif p["load"] == "tlsload":
        load = (
            f"tlsload, {p['connections']} connections at a time, a new TLS 1.3 connection per "
            "request"
            + (", resuming with a session ticket used once" if p.get("tls_resume") else "")
            + f", {p['warmup']} s warm-up + {p['duration']} s measured"
        )
    elif p["load"] == "h2load":
        over = "HTTP/2 over TLS 1.3 (ALPN h2)" if p.get("tls") else "h2c (prior knowledge)"
        load = (
            f"h2load, {over}, {p['connections']} connections × {p.get('h2_streams')} "
            f"concurrent streams, {p['warmup']} s warm-up + {p['duration']} s measured"
        )
    elif p["load"] == "wrk":
        load = (
            f"wrk, {p['connections']} connections, keep-alive"
            + (" over TLS 1.3 (https://)" if p.get("tls") else "")
            + f", {p['warmup']} s warm-up + {p['duration']} s measured"
        )
    else:
        load = (
            f"ab, {p['connections']} concurrent, {p['requests']:,} requests, a new "
            "connection"
            + (" and a full TLS 1.3 handshake (`-f TLS1.3`)" if p.get("tls") else "")
            + f" per request, after a warm-up of {p['warmup_requests']:,}"
        )
    mode = "full run" if data["mode"] == "full" else "**quick smoke run: indicative only**"
    out = [
        f"## {data['scenario']}",
        "",
        data["description"],
        "",
        f"- Run: {data['date']} ({mode}), {p['rounds']} round(s) interleaved, {load}.",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['os']}, Linux {m['kernel']}.",
        f"- Load average (1 min) before the runs: {_loadavg_range(data['runs'])}.",
        f"- Pinning: server `{data['server_cpus'] or 'not pinned'}`, load generator "
        f"`{data['client_cpus'] or 'not pinned'}` (taskset CPU lists).",
        *_baseline_lines(data),
        "",
        markdown_table(data["summary"]),
        "",
    ]
    if data.get("app_cost_us"):
        out += [
            app_cost_line(data["app_cost_us"], data["summary"])
            + " The server's own part includes what serving many connections costs the "
            "application (caches), so it is an upper bound.",
            "",
        ]
    if _fixed_rate(data["summary"]):
        out += [
            f"Columns: *p50/p95/p99 ms* latency at {p['rate']:g} req/s (open loop, from the "
            "scheduled start of each request to the last byte, all URLs together, median "
            "over rounds); *errors* failed, timed-out or non-2xx requests / requests sent "
            "(all rounds); *p99 pyserver ÷ it* pyserver's p99 divided by this server's "
            "(below 1: pyserver is faster); *max req/s*, *wrk p99 ms*, *wrk errors* the wrk "
            "throughput run; *req/CPU-s* and the *pyserver ÷ it* ratios as above (median "
            "of per-round ratios).",
            "",
        ]
    if p["load"] == "h2load":
        out += [
            "*errors* h2load's failed requests (which include errored and timed-out ones) "
            "plus non-2xx answers plus answers whose body was short (h2load's DATA bytes ÷ "
            "12 below the requests done); *p50/p99/max* from h2load's per-request log "
            "(`--log-file`: time from sending a request to its last byte).",
            "",
        ]
    if p["load"] == "tlsload":
        shares = []
        for srv in dict.fromkeys(r["server"] for r in data["runs"] if r.get("tlsload")):
            got = [r["tlsload"] for r in data["runs"] if r["server"] == srv and r.get("tlsload")]
            hs = sum(t["handshakes"] for t in got)
            if hs:
                offered = sum(t.get("offered", 0) for t in got) / hs
                resumed = sum(t["resumed"] for t in got) / hs
                shares.append(f"{srv} {resumed:.0%} (a ticket offered in {offered:.0%})")
        out += [
            "Handshakes resumed (all measured rounds; a handshake offers a ticket when the "
            "client holds an unused one, so a server that sends fewer new tickets than it "
            "accepts gets fewer offers): " + (", ".join(shares) or "none") + ". "
            "*client CPU* is tlsload's own CPU share; latency is from connect() to the "
            "answer's last byte.",
            "",
        ]
    miscounted = sorted({r["server"] for r in data["runs"] if r.get("ab_length_miscounted")})
    if miscounted:
        out += [
            "ab counted every answer of " + ", ".join(miscounted) + " as a *Length* failure: "
            "over TLS it took the first answer's body as empty (that server sends the head "
            "and the body in separate TLS records), while the body bytes it got were exactly "
            "12 per request; those are left out of *errors* (`ab_length_miscounted` in the "
            "results).",
            "",
        ]
    failed = [s for s in data["summary"] if s["status"] != "ok"]
    for s in failed:
        out.append(f"- **{s['server']}** {s['status']}: {s.get('error', '').strip()}")
    if failed:
        out.append("")
    if chart:
        out += [f"![{data['scenario']}: requests per second]({chart})", ""]
    out += ["### Versions", "", "| component | version |", "| --- | --- |"]
    out += [f"| {k} | {v or 'not installed'} |" for k, v in data["versions"].items()]
    out += [
        "",
        "### Commands",
        "",
        "Run from the repository root; the load generator command is the measured "
        "one (the warm-up differs only in duration or request count).",
        "",
        "```sh",
    ]
    for name, info in data["commands"].items():
        out.append(f"# {name}: {info['summary']}")
        out.append(_cmd(info["server"]) if info.get("server") else "# (not started)")
        if info.get("fixed_rate"):
            out.append(_cmd(info["fixed_rate"]))
        out.append(_cmd(info["load"]) if info.get("load") else "# (not run)")
    out += ["```", ""]
    if data.get("tls"):
        t = data["tls"]
        out += [
            "The run's certificates (in `" + os.path.dirname(t["files"]["ca"]) + "`, "
            "`server.ext` holding the extensions below):",
            "",
            "```sh",
            *[_cmd(argv) for argv in t["commands"]],
            "```",
            "",
            "```",
            t["server.ext"].rstrip(),
            "```",
            "",
        ]
    out += _config_files(data)
    return out


MEMORY_NOTES = {
    "idle": [
        "Goal (issue 8): at most 4 KiB per idle connection for pyserver.",
        "*held* connections still open when RSS was read / opened; *server's answers* "
        "the status codes the client got (`closed`: the server closed the connection, "
        "`reset`: it reset it); *RSS* VmRSS summed over the server's process tree (nginx: "
        "master and worker; granian: main process and worker) just before the client "
        "connects, one second after the last connection is settled and the server has read "
        "every byte sent to it (its sockets' receive queues in /proc/net/tcp are empty; "
        "`unread_bytes` in the results), and one second after "
        "the client has reset them all; *KiB per connection* (RSS held − RSS before) ÷ "
        "connections held, only when at least 90% are still held (n/a otherwise); "
        "*pyserver-… ÷ it* pyserver's KiB per connection divided by this server's "
        "(below 1: pyserver uses less). RSS does not depend on the machine's load; the "
        "kernel's socket buffers are not in it. nginx answers a head larger than its "
        "`large_client_header_buffers` (default 4 × 8 KiB) with 400 and closes: the "
        "incomplete-head row shows that, not a memory figure.",
    ],
    "streams": [
        "*MiB/s* bytes moved ÷ curl's total time (median over rounds); *client CPU* "
        "curl's user+system time ÷ its wall time (near 100%: the client limits the "
        "figure); *server CPU-s* CPU time of the server's process tree during the "
        "transfer; *MiB/CPU-s* MiB per second of server CPU (steadier on a shared "
        "machine); *peak RSS growth* the server's peak resident memory during the transfer "
        "minus its RSS before it (worst round): the sum of its processes' VmHWM, reset "
        "through /proc/PID/clear_refs just before the transfer (VmRSS sampled every 10 ms "
        "where that reset is refused); "
        "*pyserver-… ÷ it* pyserver's MiB/s divided by this server's (median of "
        "per-round ratios). NOT SUPPORTED: the server does not offer the interface the "
        "row needs (the app answers 501). nginx takes part in the zero-copy download "
        "only: it has no application to stream from or to read an upload (proxying one "
        "would measure the proxy and its upstream together).",
    ],
}


def _memory_markdown(data, chart):
    p, m = data["params"], data["machine"]
    mode = "full run" if data["mode"] == "full" else "**quick smoke run: indicative only**"
    took = f", {data['elapsed_s']} s in all" if data.get("elapsed_s") is not None else ""
    out = [
        f"## {data['scenario']}",
        "",
        data["description"],
        "",
        f"- Run: {data['date']} ({mode}), {p['rounds']} round(s){took}.",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['os']}, Linux {m['kernel']}.",
        f"- Load average (1 min) before the runs: {_loadavg_range(data['runs'])}.",
        f"- Pinning: server `{data['server_cpus'] or 'not pinned'}`, client "
        f"`{data['client_cpus'] or 'not pinned'}` (taskset CPU lists).",
        "",
    ]
    for title, columns, rows in _memory_tables(data["summary"]):
        out += [f"**{title}**", "", _md(columns, rows), ""]
    out += MEMORY_NOTES.get(data["kind"], []) + [""]
    failed = [s for s in data["summary"] if s["status"] != "ok"]
    for s in failed:
        what = s.get("phase") or s.get("transfer") or ""
        out.append(f"- **{s['server']}** ({what}) {s['status']}: {s.get('error', '').strip()}")
    if failed:
        out.append("")
    if chart:
        out += [f"![{data['scenario']}]({chart})", ""]
    out += ["### Versions", "", "| component | version |", "| --- | --- |"]
    out += [f"| {k} | {v or 'not installed'} |" for k, v in data["versions"].items()]
    where = "Run from the repository root; `$TMP` is the run's temporary directory."
    out += ["", "### Commands", "", where, "", "```sh"]
    loads = []
    for name, info in data["commands"].items():
        out.append(f"# {name}: {info['summary']}")
        out.append(_cmd(info["server"]) if info.get("server") else "# (not started)")
        loads += [c for c in info.get("loads", []) if c not in loads]
    out.append("# the client, against each server in turn (for the rows it has)")
    out += [_cmd(c) for c in loads] or ["# (not run)"]
    out += ["```", ""]
    out += _config_files(data, once=True)
    return out
