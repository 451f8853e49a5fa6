"""What the recording proxy costs a call, and how many spans the store exporter takes.

Side by side in one run: a real service (uvicorn + Starlette, in its own process) and
a client process that alternates calls made directly with calls made through the
recording proxy (tracing on, bodies captured, spans written to a real SQLite store),
so both see the same machine at the same moment. Each call is a new connection, as
an oracle's ``requests.get`` makes it. Then the store exporter alone: spans shaped
like the proxy's (attributes, request and response events with 1 KiB bodies) ended
as fast as one thread can, and the rate at which they land in SQLite.

    .venv/bin/python bench/proxy.py [--calls 1000] [--spans 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from opentelemetry.trace import SpanKind

from engine._proxy import serve_proxy
from engine._store import Store
from engine._tracing import TraceRecorder
from telemetry import Capture, client_attributes, set_response

ROOT = Path(__file__).resolve().parent.parent

SERVICE = '''
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def item(request):
    return JSONResponse({"id": request.path_params["key"], "title": "a task", "done": False,
                         "tags": ["x", "y"], "owner": 7})

async def create(request):
    body = await request.json()
    return JSONResponse({"id": 1, "size": len(body["text"])}, status_code=201)

app = Starlette(routes=[Route("/items/{key}", item), Route("/items", create, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            access_log=False)
'''

CLIENT = '''
import json, sys, time, requests
direct, proxied, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = {"text": "x" * 4096}
out = {"GET": {"direct": [], "proxy": []}, "POST": {"direct": [], "proxy": []}}
for base in (direct, proxied) * 20:  # warm-up
    requests.get(base + "/items/w", timeout=10)
for i in range(calls):
    for kind in ("GET", "POST"):
        # Alternate which side goes first, so neither is always the colder one.
        order = [("direct", direct), ("proxy", proxied)]
        for side, base in (order if i % 2 else order[::-1]):
            start = time.perf_counter()
            if kind == "GET":
                r = requests.get(f"{base}/items/{i}", timeout=10)
            else:
                r = requests.post(f"{base}/items", json=body, timeout=10)
            out[kind][side].append(time.perf_counter() - start)
            assert r.status_code in (200, 201), r.status_code
print(json.dumps(out))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if q < 100 else max(
        values)


async def latency(calls: int, home: Path) -> tuple[dict[str, dict[str, list[float]]], int]:
    port = free_port()
    service = subprocess.Popen([sys.executable, "-c", SERVICE, str(port)],  # noqa: ASYNC220
                               cwd=ROOT)
    try:
        direct = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.05)
        store = Store(f"sqlite:///{home / 'anvil.db'}")
        async with TraceRecorder(store) as recorder:
            trace_id = "0" * 31 + "1"
            recorder.register(trace_id, "bench.0")
            async with serve_proxy(direct, recorder.tracing, recorder.capture,
                                   trace_id=trace_id, parent_id="0" * 15 + "1") as proxy:
                done = await anyio.run_process(
                    [sys.executable, "-c", CLIENT, direct, proxy.url, str(calls)], cwd=ROOT)
            await anyio.to_thread.run_sync(recorder.flush)
        stored = len(store.spans("bench.0"))
        store.close()
        return json.loads(done.stdout), stored
    finally:
        service.terminate()
        service.wait()  # noqa: ASYNC220


def exporter_rate(spans: int, home: Path) -> tuple[float, float, int]:
    """Spans/s one thread can end, and spans/s that reach the store (end to flush)."""
    store = Store(f"sqlite:///{home / 'spans.db'}")
    recorder = TraceRecorder(store)
    tracer = recorder.tracing.tracer
    capture = Capture()
    body = json.dumps({"text": "y" * 1000}).encode()
    headers = [("Content-Type", "application/json"), ("Authorization", "Bearer t"),
               ("Content-Length", str(len(body)))]
    root = tracer.start_span("evaluation")
    recorder.register(f"{root.get_span_context().trace_id:032x}", "bench.1")
    start = time.perf_counter()
    from opentelemetry import trace

    context = trace.set_span_in_context(root)
    for i in range(spans):
        span = tracer.start_span("POST", context=context, kind=SpanKind.CLIENT,
                                 attributes=client_attributes("POST", f"http://127.0.0.1:9/x/{i}"))
        span.add_event("http.request", capture.request_event(headers, body, len(body)))
        set_response(span, 201)
        span.add_event("http.response", capture.response_event(headers, body, len(body)))
        span.end()
    ended = time.perf_counter() - start
    recorder.flush()
    landed = time.perf_counter() - start
    root.end()
    recorder.flush()
    stored = len(store.spans("bench.1"))
    recorder.tracing.shutdown()
    store.close()
    return spans / ended, spans / landed, stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per kind and side")
    parser.add_argument("--spans", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="anvil-bench-proxy-") as tmp:
        home = Path(tmp)
        results, stored = anyio.run(latency, args.calls, home)
        print(f"latency per call, {args.calls} calls per row and side, new connection each "
              f"(machine: {os.cpu_count()} cores)")
        print(f"{'call':<22} {'direct p50':>10} {'p99':>8} {'proxy p50':>10} {'p99':>8} "
              f"{'p50 x':>6} {'p99 x':>6} {'added p50':>10}")
        for kind, label in (("GET", "GET small JSON"), ("POST", "POST 4 KiB JSON")):
            d, p = results[kind]["direct"], results[kind]["proxy"]
            d50, d99, p50, p99 = (percentile(d, 50), percentile(d, 99), percentile(p, 50),
                                  percentile(p, 99))
            print(f"{label:<22} {d50 * 1e3:>8.2f}ms {d99 * 1e3:>6.2f}ms {p50 * 1e3:>8.2f}ms "
                  f"{p99 * 1e3:>6.2f}ms {p50 / d50:>5.2f}x {p99 / d99:>5.2f}x "
                  f"{(p50 - d50) * 1e3:>8.2f}ms")
        expected = 2 * args.calls + 20
        print(f"spans stored for the proxied calls: {stored} of {expected}")
        made, landed, kept = exporter_rate(args.spans, home)
        print(f"store exporter: {args.spans} spans (2 events, 1 KiB bodies each): "
              f"ended at {made:,.0f} spans/s, in SQLite at {landed:,.0f} spans/s "
              f"({kept} stored)")


if __name__ == "__main__":
    main()
