"""The payment mock against localstripe (the public Stripe fake on PyPI), side by side.

Measured in one run, each server in its own process on 127.0.0.1:

* throughput on one flow over raw HTTP, the same for both (median of ``--repeat`` runs,
  interleaved, each on fresh state): create a customer (with
  metadata), create and confirm a payment intent with ``pm_card_visa``, read it back,
  refund part of it, read the customer (5 requests per round). The server is pinned to
  CPU 0 and the client (``requests`` on a keep-alive session, another process) to CPU 1.
  One sequential client cannot saturate a server, so next to the requests per second it
  saw, the table gives the server's CPU time per request (psutil) and what that makes on
  one core: requests per CPU-second. The anvil mock runs with its journal on (every
  request and answer kept, the default) and off (``journal_entries=0``);
* the six everyday flows of the official ``stripe`` library
  (``tests/mocks/test_payment_sdk.FLOWS``), each on fresh state, passed or not;
* determinism: the same two requests on fresh state twice, byte-identical or not.

localstripe is installed from PyPI into its own venv (``--localstripe-venv``, created on
first use) and served with its own aiohttp app bound to 127.0.0.1 (its CLI binds every
interface). It keeps its store in ``/tmp/localstripe.pickle``, rewritten on every write;
the bench removes that file when done if it was not there before.

    .venv/bin/python bench/payment_mock.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import requests
import stripe

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mocks.test_payment_sdk import FLOWS, client_for  # noqa: E402

PICKLE = Path("/tmp/localstripe.pickle")
KEY = {"Authorization": "Bearer sk_test_bench"}

SERVE_ANVIL = r"""
import sys, anyio
from mocks import MockHost
from mocks.payment import PaymentMock

async def main():
    async with MockHost() as host:
        hosted = await host.start(PaymentMock, instance="payment", seed="bench",
                                  journal_entries=int(sys.argv[1]))
        print(hosted.url, hosted.token, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the bench closes stdin

anyio.run(main)
"""

SERVE_LOCALSTRIPE = r"""
import socket, sys, threading, os
from aiohttp import web
from localstripe.server import app

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(256)
print(f"http://127.0.0.1:{sock.getsockname()[1]} -", flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
web.run_app(app, sock=sock, access_log=None, print=None)
"""

CLIENT = r"""
import json, sys, time, requests
url, rounds, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = requests.Session()
s.headers["Authorization"] = "Bearer sk_test_bench"

def call(method, path, data=None):
    answer = s.request(method, url + path, data=data)
    if answer.status_code != 200:
        raise SystemExit(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
    return answer.json()

def one(i):
    c = call("POST", "/v1/customers", {"email": f"c{i}@example.com", "metadata[order_id]": i})
    pi = call("POST", "/v1/payment_intents", {
        "amount": 2000, "currency": "usd", "customer": c["id"], "payment_method": "pm_card_visa",
        "confirm": "true", "payment_method_types[]": "card"})
    call("GET", f"/v1/payment_intents/{pi['id']}")
    call("POST", "/v1/refunds", {"payment_intent": pi["id"], "amount": 500})
    call("GET", f"/v1/customers/{c['id']}")

for i in range(warm):
    one(-i)
print("warm", flush=True)
sys.stdin.readline()  # the bench reads the server's CPU time, then says go
start = time.perf_counter()
for i in range(rounds):
    one(i)
print(json.dumps({"requests": rounds * 5, "seconds": time.perf_counter() - start}), flush=True)
"""


@dataclass
class Server:
    name: str
    url: str
    token: str | None
    process: subprocess.Popen[str]


@contextlib.contextmanager
def serving(name: str, argv: list[str], *, env: dict[str, str] | None = None
            ) -> Iterator[Server]:
    """A server process on CPU 0; its first stdout line is ``URL TOKEN``."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               cwd=ROOT, env={**os.environ, **(env or {})})
    try:
        pin(process.pid, 0)
        assert process.stdout is not None
        line = process.stdout.readline().split()
        if not line:
            raise SystemExit(f"{name} did not start (exit {process.wait(10)})")
        url, token = line[0], (line[1] if len(line) > 1 and line[1] != "-" else None)
        wait_until_up(url)
        yield Server(name, url, token, process)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def pin(pid: int, cpu: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(pid, {cpus[cpu % len(cpus)]})


def wait_until_up(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            requests.get(url + "/v1/customers", headers=KEY, timeout=2)
            return
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def throughput(server: Server, rounds: int, warm: int) -> dict[str, float]:
    """Requests per second the client saw, and the server's CPU per request."""
    client = subprocess.Popen([sys.executable, "-c", CLIENT, server.url, str(rounds), str(warm)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert client.stdin is not None and client.stdout is not None
    pin(client.pid, 1)
    if client.stdout.readline().strip() != "warm":
        raise SystemExit(f"the client failed against {server.name}")
    watched = psutil.Process(server.process.pid)
    before = watched.cpu_times()
    client.stdin.write("go\n")
    client.stdin.flush()
    line = client.stdout.readline()
    after = watched.cpu_times()
    client.wait(30)
    if not line:
        raise SystemExit(f"the client failed against {server.name}")
    result = json.loads(line)
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"rps": result["requests"] / result["seconds"],
            "cpu_ms": 1000 * cpu / result["requests"],
            "core_rps": result["requests"] / cpu if cpu else float("inf")}


def fresh(server: Server) -> None:
    """Empty state: the fabric's reset, localstripe's own flush."""
    if server.token is not None:
        answer = requests.post(server.url + "/__mock__/reset", timeout=10,
                               headers={"X-Mock-Token": server.token})
    else:
        answer = requests.delete(server.url + "/_config/data", timeout=10)
    answer.raise_for_status()


def flows(server: Server) -> dict[str, str]:
    """Each SDK flow on fresh state: "passed" or why not."""
    results = {}
    for name, flow in FLOWS.items():
        fresh(server)
        results[name] = outcome(flow, client_for(server.url))
    return results


def outcome(flow: Callable[[stripe.StripeClient], None], client: stripe.StripeClient) -> str:
    try:
        flow(client)
    except AssertionError as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1].line or ""
        return f"failed: {(str(exc).splitlines() or [where])[0][:70]}"
    except BaseException as exc:  # noqa: BLE001 - pytest.raises' Failed, stripe errors...
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:60] if str(exc) else ''}"
    return "passed"


def deterministic(server: Server) -> bool:
    """The same two requests on fresh state twice: the same bytes?"""
    runs = []
    for _ in range(2):
        fresh(server)
        bodies = []
        for path, data in (("/v1/customers", {"email": "ada@example.com"}),
                           ("/v1/payment_intents", {
                               "amount": "2000", "currency": "usd", "confirm": "true",
                               "payment_method": "pm_card_visa",
                               "payment_method_types[]": "card"})):
            bodies.append(requests.post(server.url + path, data=data, headers=KEY,
                                        timeout=10).content)
        runs.append(bodies)
    return runs[0] == runs[1]


def localstripe_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing localstripe from PyPI into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "localstripe"],
                       check=True)
    return python


def version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                           "print(m.version('localstripe'))"], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed rounds (5 requests each)")
    parser.add_argument("--warm", type=int, default=20, help="untimed rounds first")
    parser.add_argument("--repeat", type=int, default=3, help="runs per server (median kept)")
    parser.add_argument("--localstripe-venv", type=Path,
                        default=Path.home() / ".cache" / "anvil" / "bench-localstripe")
    args = parser.parse_args()
    ls_python = localstripe_python(args.localstripe_venv)
    ls_name = f"localstripe {version(ls_python)}"
    had_pickle = PICKLE.exists()
    samples: dict[str, list[dict[str, float]]] = {}
    flow_results: dict[str, dict[str, str]] = {}
    determinism: dict[str, bool] = {}
    try:
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(serving(name, argv)) for name, argv in (
                ("anvil payment, journal on", [sys.executable, "-c", SERVE_ANVIL, "5000"]),
                ("anvil payment, journal off", [sys.executable, "-c", SERVE_ANVIL, "0"]),
                (ls_name, [str(ls_python), "-c", SERVE_LOCALSTRIPE]))]
            # Interleaved repeats on fresh state: drift in the machine's load hits all alike.
            for _ in range(args.repeat):
                for server in servers:
                    fresh(server)
                    samples.setdefault(server.name, []).append(
                        throughput(server, args.rounds, args.warm))
            for server in (servers[0], servers[2]):
                label = "anvil payment" if server is servers[0] else ls_name
                flow_results[label] = flows(server)
                determinism[label] = deterministic(server)
    finally:
        if not had_pickle:
            PICKLE.unlink(missing_ok=True)
    rows = [(name, {key: statistics.median(run[key] for run in runs) for key in runs[0]})
            for name, runs in samples.items()]

    print(f"\nthroughput: median of {args.repeat} runs of {args.rounds} rounds x 5 requests, "
          "server on one CPU, client on another")
    print(f"{'server':30} {'req/s seen':>11} {'CPU ms/req':>11} {'req/s on one core':>18}")
    for name, row in rows:
        print(f"{name:30} {row['rps']:11.0f} {row['cpu_ms']:11.3f} {row['core_rps']:18.0f}")
    names = list(flow_results)
    print(f"\nofficial stripe {stripe.VERSION} library, six flows (fresh state each):")
    print(f"{'flow':32} " + " ".join(f"{n:40}" for n in names))
    for flow in FLOWS:
        print(f"{flow:32} " + " ".join(f"{flow_results[n][flow]:40}" for n in names))
    passed = {n: sum(r == "passed" for r in flow_results[n].values()) for n in names}
    print(f"{'passed':32} " + " ".join(f"{f'{passed[n]}/{len(FLOWS)}':40}" for n in names))
    print(f"{'byte-identical on replay':32} "
          + " ".join(f"{'yes' if determinism[n] else 'no':40}" for n in names))
    on, off, ls = (row for _, row in rows)
    print(f"\nratios: anvil/localstripe on one core: journal on "
          f"{on['core_rps'] / ls['core_rps']:.1f}x, journal off "
          f"{off['core_rps'] / ls['core_rps']:.1f}x; journal off/on "
          f"{off['core_rps'] / on['core_rps']:.2f}x; req/s seen anvil(on)/localstripe "
          f"{on['rps'] / ls['rps']:.1f}x; SDK flows {passed['anvil payment']}/{len(FLOWS)} vs "
          f"{passed[ls_name]}/{len(FLOWS)}")


if __name__ == "__main__":
    main()
