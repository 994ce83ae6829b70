"""A local webhook endpoint for the benchmarks: an asyncio HTTP/1.1 server (keep-alive) in a
process of its own, answering each POST 204 after the latency its path asks for.

    server = start({"/a": 8.0, "/b": 0.001})   # or {"": 0.05}: every path
    url = server.url                           # http://127.0.0.1:<port>
    ...
    server.stop()

The longest matching path prefix sets the latency. Requests are counted per prefix (``counts``
asks the server process).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import time
from dataclasses import dataclass
from typing import Any


def _serve(port: int, latencies: dict[str, float], counts: Any) -> None:
    prefixes = sorted(latencies, key=len, reverse=True)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request, *lines = head.split(b"\r\n")
                path = request.split(b" ")[1].decode()
                length = 0
                for line in lines:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                prefix = next((p for p in prefixes if path.startswith(p)), "")
                counts[prefix] = counts.get(prefix, 0) + 1
                await asyncio.sleep(latencies.get(prefix, 0.0))
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(client, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@dataclass
class Server:
    url: str
    process: multiprocessing.Process
    counts: Any  # a manager's dict: requests per path prefix

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(10)


def start(latencies: dict[str, float]) -> Server:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    counts = multiprocessing.Manager().dict()
    process = multiprocessing.Process(target=_serve, args=(port, latencies, counts), daemon=True)
    process.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return Server(f"http://127.0.0.1:{port}", process, counts)
