"""Open-loop fixed-rate HTTP/1.1 load generator (standard library only).

    python benchmarks/harness/fixedrate.py --host 127.0.0.1 --port 8400 \
        --rate 30 --duration 15 /api/items /.well-known/nodeinfo /api/instance

A new request starts every 1/RATE s whatever the server does (no coordinated
omission): request i goes to PATHS[i % len(PATHS)] at start + i/RATE, on an idle
keep-alive connection if one is free, else on a new connection.  Latency is
measured from the scheduled start to the last byte of the body.  A request that
fails, times out or answers non-2xx counts as an error.  Prints one JSON object.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time


class Pool:
    def __init__(self, host, port):
        self.host, self.port, self.idle, self.opened = host, port, [], 0

    async def get(self):
        while self.idle:
            reader, writer = self.idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port)

    def put(self, conn):
        self.idle.append(conn)


async def read_response(reader):
    """(status, body, keep_alive) of one response."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    keep_alive = headers.get("connection", "").lower() != "close" and lines[0].startswith(
        "HTTP/1.1"
    )
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers expected
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.read()
        keep_alive = False
    return status, body, keep_alive


async def exchange(pool, host, path, holder):
    """Send one GET on a pooled connection; (status, keep_alive)."""
    holder.append(await pool.get())
    reader, writer = holder[0]
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    status, _body, keep_alive = await read_response(reader)
    return status, keep_alive


async def one(pool, host, path, scheduled, timeout, results):
    holder = []  # the connection, once there is one
    errors = (
        OSError,
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        ValueError,
        asyncio.TimeoutError,
    )
    try:
        status, keep_alive = await asyncio.wait_for(exchange(pool, host, path, holder), timeout)
    except errors as exc:
        if holder:
            holder[0][1].close()
        latency = (time.perf_counter() - scheduled) * 1e3
        results.append((path, latency, type(exc).__name__))
        return
    latency = (time.perf_counter() - scheduled) * 1e3
    if keep_alive:
        pool.put(holder[0])
    else:
        holder[0][1].close()
    results.append((path, latency, None if 200 <= status < 300 else f"status {status}"))


def pct(sorted_values, q):
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


async def run(host, port, paths, rate, duration, timeout):
    pool, results, tasks = Pool(host, port), [], []
    total = int(rate * duration)
    start = time.perf_counter() + 0.05
    late = 0.0
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            late = max(late, -delay)
        path = paths[i % len(paths)]
        tasks.append(asyncio.create_task(one(pool, host, path, scheduled, timeout, results)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for _, writer in pool.idle:
        writer.close()
    ok = sorted(lat for _, lat, err in results if err is None)
    errors = [err for _, _, err in results if err is not None]
    per_path = {}
    for p in paths:
        lats = sorted(lat for q, lat, err in results if q == p and err is None)
        per_path[p] = {"p50_ms": pct(lats, 50), "p99_ms": pct(lats, 99), "n": len(lats)}
    return {
        "rate": rate,
        "duration_s": duration,
        "elapsed_s": elapsed,
        "requests": len(results),
        "ok": len(ok),
        "errors": len(errors),
        "error_kinds": {e: errors.count(e) for e in set(errors)},
        "p50_ms": pct(ok, 50),
        "p95_ms": pct(ok, 95),
        "p99_ms": pct(ok, 99),
        "max_ms": ok[-1] if ok else None,
        "mean_ms": statistics.fmean(ok) if ok else None,
        "connections_opened": pool.opened,
        "max_send_lag_ms": late * 1e3,
        "per_path": per_path,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, default=30.0, help="requests per second")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of sending")
    ap.add_argument("--timeout", type=float, default=10.0, help="per request, seconds")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args(argv)
    res = asyncio.run(run(a.host, a.port, a.paths, a.rate, a.duration, a.timeout))
    json.dump(res, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
