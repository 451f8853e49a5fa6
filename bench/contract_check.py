"""CPU of the contract check per call: requests and responses without memory, with
memory, responses only with memory, and that with the fast path (the default).

Replays the calls a run recorded (its proxy spans: method, path, query, headers and
bodies as the store kept them) through a fresh :class:`telemetry.Contract` of each
task per way, in one sitting, and checks that memory changes no violation and that
responses only finds every response and route violation of the full check. Needs a
run in the store first (``make run`` makes one)::

    .venv/bin/python bench/contract_check.py [--db sqlite:///.anvil/anvil.db] [--run latest]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from urllib.parse import parse_qsl

import yaml

from engine._store import Store
from telemetry import CallRecord, Contract


def _calls(store: Store, evaluation_ids: list[str]) -> list[CallRecord]:
    calls = []
    for evaluation_id in evaluation_ids:
        for span in sorted(store.spans(evaluation_id), key=lambda s: s.start_ns):
            a = span.attributes_dict()
            if span.kind != "client" or "anvil.peer" in a or "http.response.status_code" not in a:
                continue
            events = {e["name"]: e["attributes"] for e in span.events_list()}
            sent, got = events.get("http.request", {}), events.get("http.response", {})
            calls.append(CallRecord(
                a["http.request.method"], a["url.path"], parse_qsl(a.get("url.query", "")),
                [(k.removeprefix("http.request.header."), v[0]) for k, v in sent.items()
                 if k.startswith("http.request.header.")],
                str(sent.get("anvil.body", "")).encode(), a["http.response.status_code"],
                [(k.removeprefix("http.response.header."), v[0]) for k, v in got.items()
                 if k.startswith("http.response.header.")],
                str(got.get("anvil.body", "")).encode()))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{Path('.anvil/anvil.db').resolve()}")
    parser.add_argument("--run", default="latest")
    args = parser.parse_args()
    store = Store(args.db)
    run = store.run(args.run)
    if run is None:
        raise SystemExit(f"no run {args.run!r} in {args.db} (`make run` makes one)")
    by_task: dict[str, tuple[str, list[str]]] = {}
    for ev in store.evaluations(run.id):
        by_task.setdefault(ev.task_id, (ev.task_path, []))[1].append(ev.id)
    totals = [0.0, 0.0, 0.0, 0.0]
    count = 0
    for task_id, (task_path, ids) in sorted(by_task.items()):
        calls = _calls(store, ids)
        document = yaml.safe_load((Path(task_path) / "openapi.yaml").read_text())
        results = []
        for memo, requests, fast in ((0, True, False), (8192, True, False),
                                     (8192, False, False), (8192, False, True)):
            contract = Contract(document, memo=memo, requests=requests, fast=fast)
            began = time.process_time()
            found = [contract.inspect(call) for call in calls]
            results.append((time.process_time() - began, found))
        (full, plain), (warm, remembered), (lean, responses), (quick, fast_found) = results
        same = plain == remembered and responses == fast_found and all(
            [v for v in a[0] if v.kind != "request"] == b[0]
            for a, b in zip(plain, responses, strict=True))
        n = len(calls)
        print(f"{task_id:10} {n:5} calls  {full / n * 1e3:.3f} -> {warm / n * 1e3:.3f} "
              f"(remembered) -> {lean / n * 1e3:.3f} (responses only) -> "
              f"{quick / n * 1e3:.3f} ms/call (fast path); "
              f"{'same violations' if same else 'VIOLATIONS DIFFER'}")
        for i, spent in enumerate((full, warm, lean, quick)):
            totals[i] += spent
        count += len(calls)
    if count:
        print(f"all        {count:5} calls  {totals[0] / count * 1e3:.3f} -> "
              f"{totals[1] / count * 1e3:.3f} -> {totals[2] / count * 1e3:.3f} -> "
              f"{totals[3] / count * 1e3:.3f} ms/call: {totals[0] / totals[3]:.2f}x less CPU "
              f"than checking both sides afresh, {totals[2] / totals[3]:.2f}x less than "
              "responses only without the fast path")


if __name__ == "__main__":
    main()
