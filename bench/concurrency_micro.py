"""Threads or asyncio for a relay's concurrent sends? A micro-measurement.

    .venv/bin/python bench/concurrency_micro.py --requests 3000 --in-flight 64 --latency 0.05

A local HTTP/1.1 server (asyncio, in a process of its own, keep-alive) answers every POST
after ``--latency`` seconds. Then, in this process, ``--requests`` POSTs of a 400-byte body
go out with ``--in-flight`` at once, three ways, each ``--runs`` times alternately:

- ``threads``: httpcore's sync ``ConnectionPool`` shared by that many threads (what the relay
  does: a send thread per send under way, :mod:`django_dsched.outbox.dispatch`);
- ``asyncio``: httpcore's ``AsyncConnectionPool`` with that many tasks on one event loop;
- ``threads+loop``: one event loop on one thread, fed from a queue by the caller's thread
  (what an asyncio relay would need for its synchronous parts: the database, handlers).

Per way it prints requests per second, the ceiling (in flight / latency), and this process's
CPU seconds per 1,000 requests (user + system), the figure that matters on 2 cores shared
with PostgreSQL and the scheduler. Asserts nothing; keep the numbers small on a busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import queue
import resource
import socket
import statistics
import threading
import time
from collections.abc import Callable

import httpcore

BODY = b"x" * 400


def serve(port: int, latency: float) -> None:
    """A minimal keep-alive HTTP/1.1 server: every request answered 204 after ``latency``."""

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                await asyncio.sleep(latency)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(client, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def with_threads(url: str, requests: int, in_flight: int) -> None:
    pool = httpcore.ConnectionPool(max_connections=in_flight)
    left = iter(range(requests))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if next(left, None) is None:
                    return
            pool.request("POST", url, content=BODY)

    threads = [threading.Thread(target=work) for _ in range(in_flight)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.close()


async def _asyncio(url: str, requests: int, in_flight: int) -> None:
    async with httpcore.AsyncConnectionPool(max_connections=in_flight) as pool:
        left = iter(range(requests))

        async def work() -> None:
            while next(left, None) is not None:
                await pool.request("POST", url, content=BODY)

        await asyncio.gather(*(work() for _ in range(in_flight)))


def with_asyncio(url: str, requests: int, in_flight: int) -> None:
    asyncio.run(_asyncio(url, requests, in_flight))


def with_loop_thread(url: str, requests: int, in_flight: int) -> None:
    """The caller hands each request to a loop thread and collects its outcome."""
    handed: queue.Queue[int | None] = queue.Queue()
    done: queue.Queue[int] = queue.Queue()

    async def main() -> None:
        async with httpcore.AsyncConnectionPool(max_connections=in_flight) as pool:
            loop = asyncio.get_running_loop()

            async def work() -> None:
                while True:
                    item = await loop.run_in_executor(None, handed.get)
                    if item is None:
                        return
                    await pool.request("POST", url, content=BODY)
                    done.put(item)

            await asyncio.gather(*(work() for _ in range(in_flight)))

    thread = threading.Thread(target=lambda: asyncio.run(main()))
    thread.start()
    for n in range(requests):
        handed.put(n)
    for _ in range(requests):
        done.get()
    for _ in range(in_flight):
        handed.put(None)
    thread.join()


WAYS: dict[str, Callable[[str, int, int], None]] = {
    "threads": with_threads,
    "asyncio": with_asyncio,
    "threads+loop": with_loop_thread,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port, options.latency), daemon=True)
    server.start()
    time.sleep(0.5)
    url = f"http://127.0.0.1:{port}/hook"
    ceiling = options.in_flight / options.latency
    print(
        f"{options.requests} requests, {options.in_flight} in flight, {options.latency * 1000:g} "
        f"ms each: ceiling {ceiling:,.0f}/s; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in WAYS}
    try:
        for run in range(options.runs):
            for name, way in WAYS.items() if run % 2 == 0 else reversed(WAYS.items()):
                began, spent = time.monotonic(), cpu()
                way(url, options.requests, options.in_flight)
                seconds, used = time.monotonic() - began, cpu() - spent
                rate = options.requests / seconds
                per_1k = 1000 * used / options.requests
                results[name].append((rate, per_1k))
                print(f"  run {run + 1} {name:<13} {rate:8,.0f}/s  cpu {per_1k:.3f} s/1k")
    finally:
        server.terminate()
    for name, rows in results.items():
        rate = statistics.median(r for r, _ in rows)
        used = statistics.median(c for _, c in rows)
        print(
            f"{name:<13} median {rate:8,.0f}/s ({rate / ceiling:.2f} of the ceiling), "
            f"cpu {used:.3f} s per 1,000 requests"
        )


if __name__ == "__main__":
    main()
