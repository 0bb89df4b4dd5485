"""An ASGI app exercising the asyncio loop pyserver runs it on (tests/test_evloop.py).

/loop        the loop's class, module-qualified
/threads     64 run_in_executor calls and 64 sync_to_async calls, results checked
/connect     an asyncio.open_connection round trip to $ASGI_LOOP_ECHO_PORT (an echo server)
/slow        the same to $ASGI_LOOP_SLOW_PORT (an echo server that waits before answering)
/gc          gc.collect(), the number of objects it found unreachable
/subprocess  asyncio.create_subprocess_exec of `python -c print(...)`, its output
/run_once    whose _run_once and call_soon the loop runs: "pyserver" (C) or "asyncio"
"""

import asyncio
import gc
import os
import sys
import threading

from asgiref.sync import sync_to_async


def square(n):
    return n * n, threading.get_ident()


async def loop_name():
    loop = asyncio.get_running_loop()
    return f"{type(loop).__module__}.{type(loop).__qualname__}"


async def threads():
    loop = asyncio.get_running_loop()
    runs = [loop.run_in_executor(None, square, n) for n in range(64)]
    runs += [sync_to_async(square, thread_sensitive=False)(n) for n in range(64)]
    results = await asyncio.gather(*runs)
    assert [r[0] for r in results] == [n * n for n in range(64)] * 2
    assert threading.get_ident() not in {r[1] for r in results}
    return f"{len(results)} ok"


async def connect(port_var="ASGI_LOOP_ECHO_PORT"):
    reader, writer = await asyncio.open_connection("127.0.0.1", int(os.environ[port_var]))
    writer.write(b"ping\n")
    await writer.drain()
    line = await reader.readline()  # no wait_for: its timer would hold the task
    writer.close()
    await writer.wait_closed()
    return line.decode().strip()


async def slow():
    # While it waits, the task is referenced only through the StreamReader's waiter (its
    # protocol holds the reader weakly): only the server keeps it alive.
    return await connect("ASGI_LOOP_SLOW_PORT")


async def collect():
    return str(gc.collect())


async def subprocess():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "print('from the child')", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return f"{proc.returncode} {out.decode().strip()}"


async def run_once():
    from asyncio import base_events

    cls = type(asyncio.get_running_loop())
    stock = [
        cls._run_once is base_events.BaseEventLoop._run_once,
        cls.call_soon is base_events.BaseEventLoop.call_soon,
    ]
    return "asyncio" if all(stock) else "pyserver" if not any(stock) else "mixed"


ROUTES = {
    "/loop": loop_name,
    "/threads": threads,
    "/connect": connect,
    "/slow": slow,
    "/gc": collect,
    "/subprocess": subprocess,
    "/run_once": run_once,
}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    handler = ROUTES.get(scope["path"])
    status, body = (200, (await handler()).encode()) if handler else (404, b"not found")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})
