"""The same workload scored by the local executor and by the ray executor, side by side.

The ray executor runs on a local cluster (``ray.cluster_utils.Cluster``: a head with no
slot, two worker nodes with ``--slots`` each, one CPU each), the local executor at
``--concurrency`` = both nodes' slots: the same capacity, on the same machine, one run
after the other. The workload is ``--evaluations`` copies of the tests' tiny service
against the tiny task (``--workload tiny``), or the bundled taskboard examples repeated to
that count (``--workload taskboard``); the process runtime, traces on, the venv cache
warmed first so no run pays for pip.

Ray's dispatch overhead per evaluation is measured on the driver's side of each Ray task
(:class:`engine._ray.Dispatch`): from the submit to the node's first event, plus from
the node's verdict to the driver. It is measured in a run that submits an evaluation only
when a slot is free (``queued=0``), so that waiting for a slot is not counted as Ray's.

The driver connects once for the three Ray runs (one Ray job): the first pays for Ray's
worker processes (started, anvil imported, each slot's runtime and oracle worker made),
the next two find them warm, as every evaluation after the first wave of a long run does.

    .venv/bin/python bench/cluster.py [--evaluations 24] [--slots 2] [--workload tiny]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from engine import Planned, ProcessRuntime, Runner, RunSettings, Store, load_task  # noqa: E402
from engine._executors import Executor, LocalExecutor  # noqa: E402
from engine._mocks import MockFabric  # noqa: E402
from engine._ray import Dispatch, RayExecutor  # noqa: E402
from engine._tracing import default_attachments  # noqa: E402
from engine.cli._run import repeat_plan  # noqa: E402

FIXTURES = ROOT / "tests" / "engine" / "fixtures"


@dataclass
class Outcome:
    wall_s: float
    durations: list[float]  # each evaluation's own time (its lifecycle)
    verdicts: list[str]


def workload(kind: str, count: int, folder: Path) -> list[Planned]:
    if kind == "tiny":
        task = load_task(FIXTURES / "tiny_task")
        planned = []
        for i in range(count):
            sub = folder / "submissions" / f"tiny-{i:03d}"
            shutil.copytree(FIXTURES / "tiny_service", sub)
            planned.append(Planned(task.root, sub, task))
        return planned
    task = load_task(ROOT / "tasks" / "taskboard")
    examples = sorted(p for p in (ROOT / "examples" / "taskboard").iterdir() if p.is_dir())
    first = [Planned(task.root, p, task) for p in examples]
    repeats = -(-count // len(first))
    return repeat_plan(first, repeats, folder / "links")[:count]


async def score(planned: Sequence[Planned], home: Path, cache: Path, executor: Executor,
                concurrency: int) -> Outcome:
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    try:
        async with ProcessRuntime(cache) as runtime, MockFabric() as fabric:
            settings = RunSettings(home=home, concurrency=concurrency, executor=executor,
                                   attachments=default_attachments(store, fabric))
            runner = Runner(store, runtime, settings)
            run_id = await runner.start(planned)
            began = time.monotonic()
            results = await runner.execute(run_id)
            wall = time.monotonic() - began
    finally:
        store.close()
    return Outcome(wall, [r.duration_s for r in results], sorted(r.verdict.value for r in results))


def overhead_lines(dispatches: Sequence[Dispatch], first_wave: int) -> tuple[list[str], float]:
    by_submit = sorted(dispatches, key=lambda d: d.submitted)
    warm = by_submit[first_wave:] or by_submit
    share = [d.overhead_s / d.wall_s for d in dispatches]
    warm_share = [d.overhead_s / d.wall_s for d in warm]
    ms = [d.overhead_s * 1000 for d in dispatches]
    warm_ms = [d.overhead_s * 1000 for d in warm]
    to_node = statistics.median((d.taken - d.submitted) * 1000 for d in warm)
    back = statistics.median((d.received - d.answered) * 1000 for d in warm)
    lines = [
        f"  all {len(ms)} evaluations:   mean {statistics.mean(ms):7.1f} ms  median "
        f"{statistics.median(ms):7.1f} ms  = {100 * statistics.mean(share):5.2f} % of an "
        "evaluation's wall time (mean)",
        f"  after the first wave ({len(warm)}, warm Ray workers): mean "
        f"{statistics.mean(warm_ms):7.1f} ms  median {statistics.median(warm_ms):7.1f} ms  = "
        f"{100 * statistics.mean(warm_share):5.2f} %  (to the node {to_node:.1f} ms, "
        f"verdict back {back:.1f} ms, medians)",
    ]
    return lines, statistics.mean(warm_ms) / 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=24)
    parser.add_argument("--slots", type=int, default=2, help="anvil_slot of each node")
    parser.add_argument("--workload", choices=("tiny", "taskboard"), default="tiny")
    args = parser.parse_args()
    slots = 2 * args.slots
    with tempfile.TemporaryDirectory(prefix="anvil-bench-cluster-") as tmp:
        folder = Path(tmp)
        cache = Path(os.environ.get("ANVIL_CACHE") or folder / "cache")
        os.environ["ANVIL_CACHE"] = str(cache)  # the nodes' runtime cache: the same venvs
        os.environ.pop("RAY_ADDRESS", None)
        planned = workload(args.workload, args.evaluations, folder)
        print(f"workload: {len(planned)} evaluations ({args.workload}), process runtime, "
              f"traces on; capacity {slots} (local --concurrency {slots}; ray: 2 nodes x "
              f"{args.slots} anvil_slot)")
        began = time.monotonic()
        await score(planned[:1], folder / "warm", cache, LocalExecutor(), 1)
        print(f"venv cache warmed in {time.monotonic() - began:.1f} s")

        local = await score(planned, folder / "local", cache, LocalExecutor(), slots)
        began = time.monotonic()
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=1, resources={"anvil_slot": args.slots},
                                 include_dashboard=False)
            cluster.wait_for_nodes()
            up = time.monotonic() - began
            ray.init(address=cluster.address, namespace="anvil", log_to_driver=False)
            home = folder / "ray"

            def executor(queued: int | None = None) -> RayExecutor:
                return RayExecutor(address=cluster.address, runtime="process", home=home,
                                   queued=queued)

            cold = await score(planned, home, cache, executor(), slots)
            warm = await score(planned, home, cache, executor(), slots)
            measured = executor(queued=0)
            exact = await score(planned, home, cache, measured, slots)
        finally:
            ray.shutdown()
            cluster.shutdown()

    assert local.verdicts == cold.verdicts == warm.verdicts == exact.verdicts, "disagree"
    evaluation = statistics.mean(local.durations)
    print(f"local cluster up in {up:.1f} s (not counted)")
    print(f"wall time, local executor:                      {local.wall_s:6.1f} s")
    print(f"wall time, ray executor, cold Ray workers:      {cold.wall_s:6.1f} s "
          f"({cold.wall_s / local.wall_s:.2f}x local)")
    print(f"wall time, ray executor, warm Ray workers:      {warm.wall_s:6.1f} s "
          f"({warm.wall_s / local.wall_s:.2f}x local)")
    print(f"wall time, ray, warm, a slot free at each submit: {exact.wall_s:4.1f} s")
    print(f"an evaluation's own time (local, mean):         {evaluation * 1000:6.0f} ms")
    lines, overhead = overhead_lines(measured.dispatches, slots)
    print("Ray's dispatch overhead per evaluation (submit -> node's first event, + node's "
          "verdict -> driver):")
    print("\n".join(lines))
    print(f"a lab of N machines x {args.slots} slots, 10,000 evaluations of this workload "
          "(evaluation time + warm overhead per slot; the driver and the store assumed to "
          "keep up):")
    for machines in (1, 4, 16, 64):
        hours = 10_000 * (evaluation + overhead) / (machines * args.slots) / 3600
        print(f"  N = {machines:3d}: {hours:6.2f} h")


if __name__ == "__main__":
    anyio.run(main)
