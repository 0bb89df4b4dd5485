"""The WebSocket side of the django-channels scenario: N subscribers and one publisher on a
Channels group, while wrk loads the HTTP side.

    python benchmarks/harness/wsbroadcast.py PORT PATH SUBSCRIBERS INTERVAL_MS

Opens SUBSCRIBERS WebSockets to ws://127.0.0.1:PORT/PATH, prints "ready N" once they are
open, then one more connection (the publisher) sends {"seq": i, "t": send time} every
INTERVAL_MS; the consumer passes each to the whole group. On SIGTERM or SIGINT it stops
publishing, waits 1 s for what is in flight and prints one JSON line: messages sent,
expected (sent x subscribers), delivered, delivered_pct, and the delivery latency (send
to receipt, one clock) p50/p99/max in ms. Needs the `websockets` package.
"""

import asyncio
import json
import signal
import sys
import time

import websockets


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def subscribe(url, latencies, counts, i, opened):
    async with websockets.connect(url, max_queue=None, ping_interval=None) as ws:
        opened.set_result(None)
        async for raw in ws:
            msg = json.loads(raw)
            latencies.append((time.time() - msg["t"]) * 1000.0)
            counts[i] += 1


async def main(port, path, subscribers, interval):
    url = f"ws://127.0.0.1:{port}{path}"
    latencies, counts = [], [0] * subscribers
    tasks, opened = [], []
    for i in range(subscribers):
        fut = asyncio.get_running_loop().create_future()
        tasks.append(asyncio.create_task(subscribe(url, latencies, counts, i, fut)))
        opened.append(fut)
        await asyncio.wait([fut, tasks[-1]], return_when=asyncio.FIRST_COMPLETED)
        if tasks[-1].done():
            tasks[-1].result()  # raises: the connection failed
    print(f"ready {subscribers}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    sent = 0
    async with websockets.connect(url, ping_interval=None) as pub:
        next_at = time.monotonic()
        while not stop.is_set():
            await pub.send(json.dumps({"seq": sent, "t": time.time()}))
            sent += 1
            next_at += interval
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
            except asyncio.TimeoutError:
                pass
        await asyncio.sleep(1.0)
    lost_connections = sum(1 for t in tasks if t.done())
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    lat = sorted(latencies)
    expected = sent * subscribers
    print(
        json.dumps(
            {
                "subscribers": subscribers,
                "sent": sent,
                "expected": expected,
                "delivered": len(lat),
                "delivered_pct": 100.0 * len(lat) / expected if expected else None,
                "closed_early": lost_connections,
                "p50_ms": percentile(lat, 0.50),
                "p99_ms": percentile(lat, 0.99),
                "max_ms": lat[-1] if lat else None,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    port, path, subs, interval_ms = sys.argv[1:5]
    asyncio.run(main(int(port), path, int(subs), float(interval_ms) / 1000.0))
