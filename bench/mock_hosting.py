"""How to host mock instances: one uvicorn server per instance (one port each) or one
server multiplexing every instance under a path prefix (``/i/<name>/...``).

Measured side by side in one run, with the bundled echo mock:

* start cost: wall time to make an instance answerable (per-port: a MockApp, a bound
  socket and a uvicorn server; multiplexed: a MockApp registered in a dict);
* memory per instance: Python heap growth (tracemalloc) over N instances, divided by N
  (a port also holds one file descriptor and the kernel's socket buffers);
* requests per second: a client in another process (so client and server each have a
  core) drives POST and GET round-robin over the instances on keep-alive connections;
  the client is the bottleneck, so the server's own CPU per request is given too, and
  what it means on one core;
* stop cost: wall time to take an instance down.

    .venv/bin/python bench/mock_hosting.py [--instances 200] [--seconds 5]

(No file in bench/ is named after a package of ours: run as a script, ``bench/``
comes first on sys.path.)
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import psutil

from mocks._base import MockApp
from mocks._host import MockHost, bind, serve
from mocks.echo import EchoMock

ROOT = Path(__file__).resolve().parent.parent

CLIENT = r"""
import json, sys, time, requests
urls, seconds = json.loads(sys.argv[1]), float(sys.argv[2])
sessions = [requests.Session() for _ in urls]
done, i, end = 0, 0, time.monotonic() + seconds
while time.monotonic() < end:
    k = i % len(urls)
    if i % 2:
        sessions[k].get(urls[k] + "/v1/echoes/none")
    else:
        sessions[k].post(urls[k] + "/v1/echoes", json={"n": i})
    i += 1
    done += 1
print(done / seconds)
"""


class Multiplexer:
    """One ASGI app serving many MockApps under ``/i/<name>``."""

    def __init__(self) -> None:
        self.apps: dict[str, MockApp] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        _, _, name, *_ = scope["path"].split("/", 3) + [""]
        app = self.apps.get(name)
        if app is None:
            body = b'{"error":"no such instance"}'
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await app({**scope, "root_path": scope.get("root_path", "") + f"/i/{name}"},
                  receive, send)


def heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def client(urls: list[str], seconds: float) -> tuple[float, float]:
    """Requests per second the client got, and server CPU seconds per request."""
    me = psutil.Process()
    before = sum(me.cpu_times()[:2])
    out = await anyio.run_process([sys.executable, "-c", CLIENT, json.dumps(urls), str(seconds)],
                                  cwd=ROOT)
    rate = float(out.stdout)
    return rate, (sum(me.cpu_times()[:2]) - before) / (rate * seconds)


def figures(start: float, stop: float, memory: float, load: list[tuple[float, float]],
            n: int) -> dict[str, float]:
    (rate8, cpu8), (rate_n, cpu_n) = load
    return {"start_ms": start * 1e3, "stop_ms": stop * 1e3, "kib_heap_per_instance": memory / 1024,
            "req_s_8": rate8, f"req_s_{n}": rate_n, "server_cpu_us_per_req": cpu8 * 1e6,
            f"server_cpu_us_per_req_{n}": cpu_n * 1e6, "one_core_req_s": 1 / cpu8}


async def per_port(n: int, seconds: float) -> dict[str, float]:
    async with MockHost() as host:
        warm = await host.start(EchoMock, instance="warm", seed="w")
        await host.stop(warm)
        started = time.perf_counter()
        hosted = [await host.start(EchoMock, instance=f"i{k}", seed="s") for k in range(n)]
        start_cost = (time.perf_counter() - started) / n
        for h in hosted:
            await host.stop(h)
        tracemalloc.start()
        before = heap()
        hosted = [await host.start(EchoMock, instance=f"i{k}", seed="s") for k in range(n)]
        memory = (heap() - before) / n
        tracemalloc.stop()
        load = [await client([h.url for h in hosted[:8]], seconds),
                await client([h.url for h in hosted], seconds)]
        started = time.perf_counter()
        for h in hosted:
            await host.stop(h)
        stop_cost = (time.perf_counter() - started) / n
    return figures(start_cost, stop_cost, memory, load, n)


async def multiplexed(n: int, seconds: float) -> dict[str, float]:
    mux = Multiplexer()
    async with anyio.create_task_group() as tg:
        sock = bind("127.0.0.1")
        url = await tg.start(serve, mux, sock)
        mux.apps["warm"] = MockApp(EchoMock, seed="w", instance="warm", token="t")
        del mux.apps["warm"]
        started = time.perf_counter()
        for k in range(n):
            mux.apps[f"i{k}"] = MockApp(EchoMock, seed="s", instance=f"i{k}", token="t")
        start_cost = (time.perf_counter() - started) / n
        mux.apps.clear()
        tracemalloc.start()
        before = heap()
        for k in range(n):
            mux.apps[f"i{k}"] = MockApp(EchoMock, seed="s", instance=f"i{k}", token="t")
        memory = (heap() - before) / n
        tracemalloc.stop()
        urls = [f"{url}/i/i{k}" for k in range(n)]
        load = [await client(urls[:8], seconds), await client(urls, seconds)]
        started = time.perf_counter()
        for k in range(n):
            del mux.apps[f"i{k}"]
        stop_cost = (time.perf_counter() - started) / n
        tg.cancel_scope.cancel()
    return figures(start_cost, stop_cost, memory, load, n)


async def main_async(n: int, seconds: float) -> None:
    print(f"{n} instances, {seconds:g}s of load per figure, client in its own process")
    for name, fn in (("one port per instance", per_port), ("one multiplexing server", multiplexed)):
        figures = await fn(n, seconds)
        print(f"{name:26} " + "  ".join(f"{k}={v:,.2f}" for k, v in figures.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    anyio.run(main_async, args.instances, args.seconds)


if __name__ == "__main__":
    main()
