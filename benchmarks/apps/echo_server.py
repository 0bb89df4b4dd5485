"""The echo server of the outgoing-io scenario: echoes the first bytes each connection sends,
then closes it (standard library, its own process, pinned with the load generator).

    python -m benchmarks.apps.echo_server PORT
"""

import asyncio
import sys


async def echo(reader, writer):
    data = await reader.read(65536)
    writer.write(data)
    await writer.drain()
    writer.close()


async def main(port):
    server = await asyncio.start_server(echo, "127.0.0.1", port, backlog=1024)
    print(f"echo server on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
