"""Docker vs process runtime, like against like, measured side by side in one sitting.

Each row compares the two runtimes in the same cache state, over several samples
(median shown; min-max in brackets):

* cold build: nothing cached on either side. Docker builds without its layer cache
  (the reference's ``pip install --no-cache-dir`` keeps no pip cache either); the
  process runtime builds into an empty venv cache with an empty pip cache
  (``PIP_CACHE_DIR`` fresh per sample). Package sources may still differ: pip on the
  host reads the host's pip config, pip in the container the base image's.
* code changed, same requirements: the Docker layer with the pip step and the
  cached venv are reused; only the code is new.
* unchanged submission: a cache hit on both sides.
* start to first healthy answer, of the reference through the whole engine.
* the bundled workload (examples/taskboard, 8 evaluations), warm caches.

Only right verdicts count: a sample whose verdicts differ from what the examples
expect (EXPECTED.toml; the reference must pass) is shown as wrong and left out of
the median. Needs a Docker daemon and the base image (`anvil docker bootstrap`).

    .venv/bin/python bench/runtimes.py [--samples 3] [--bootstrap]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import tomllib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from engine import (
    Phase,
    PhaseFinished,
    Planned,
    Runner,
    RunSettings,
    Store,
    Verdict,
    load_task,
)
from engine.runtimes.docker import DockerRuntime, bootstrap, docker_client, gc_images
from engine.runtimes.process import ProcessRuntime
from engine.types import BuildRequest, Runtime

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tasks" / "taskboard"
EXAMPLES = ROOT / "examples" / "taskboard"
RUNTIMES = ("docker", "process")


@dataclass
class Row:
    name: str
    times: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in RUNTIMES})
    wrong: dict[str, int] = field(default_factory=lambda: {r: 0 for r in RUNTIMES})

    def median(self, runtime: str) -> float | None:
        return statistics.median(self.times[runtime]) if self.times[runtime] else None

    def cell(self, runtime: str) -> str:
        times = self.times[runtime]
        if not times:
            text = "n/a"
        elif len(times) == 1:
            text = _seconds(times[0])
        else:
            text = (f"{_seconds(statistics.median(times))} "
                    f"[{_seconds(min(times))}-{_seconds(max(times))}]")
        return text + (f" ({self.wrong[runtime]} wrong)" if self.wrong[runtime] else "")

    def ratio(self) -> str:
        docker, process = self.median("docker"), self.median("process")
        return f"{docker / process:.2f}" if docker and process else "n/a"


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if value >= 1 else f"{value * 1000:.3g}ms"


def make_runtime(name: str, cache: Path, *, cold: bool = False) -> AbstractAsyncContextManager[
        Runtime]:
    if name == "docker":
        return DockerRuntime(cache, layer_cache=not cold)
    return ProcessRuntime(cache)


def fresh_copy(work: Path, label: str) -> Path:
    """The reference as a submission whose context was never built before."""
    sub = work / "subs" / f"{label}-{time.time_ns()}"
    shutil.copytree(TASK / "reference", sub)
    (sub / "bench-marker.txt").write_text(str(time.time_ns()))
    return sub


async def timed_build(runtime: Runtime, sub: Path, work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    await runtime.build(BuildRequest(sub, work, work / "build.log"))
    return time.monotonic() - started


async def cold_builds(row: Row, work: Path, samples: int) -> None:
    """Nothing cached: Docker without layer cache, the process runtime with empty caches."""
    for i in range(samples):
        for name in RUNTIMES:
            cache = work / f"cold-{name}-{i}"
            pip_cache = work / f"pip-cache-{name}-{i}"
            previous = os.environ.get("PIP_CACHE_DIR")
            os.environ["PIP_CACHE_DIR"] = str(pip_cache)  # read by the pip the host runs
            try:
                async with make_runtime(name, cache, cold=True) as runtime:
                    row.times[name].append(await timed_build(
                        runtime, fresh_copy(work, "cold"), work / f"b-cold-{name}-{i}"))
            finally:
                if previous is None:
                    os.environ.pop("PIP_CACHE_DIR", None)
                else:
                    os.environ["PIP_CACHE_DIR"] = previous
                shutil.rmtree(pip_cache, ignore_errors=True)


async def warm_builds(changed: Row, hit: Row, caches: dict[str, Path], work: Path,
                      samples: int) -> None:
    """Requirements cached on both sides: changed code, then an unchanged submission."""
    for name in RUNTIMES:
        async with make_runtime(name, caches[name]) as runtime:
            await timed_build(runtime, fresh_copy(work, "prime"), work / f"prime-{name}")
            for i in range(samples):
                sub = fresh_copy(work, "changed")
                changed.times[name].append(
                    await timed_build(runtime, sub, work / f"b-changed-{name}-{i}"))
                hit.times[name].append(
                    await timed_build(runtime, sub, work / f"b-hit-{name}-{i}"))


async def engine_run(runtime: Runtime, home: Path, submissions: list[Path],
                     on_phase: Callable[[PhaseFinished], Awaitable[None]] | None = None,
                     ) -> tuple[float, dict[str, tuple[str, str | None]]]:
    """Run the taskboard over ``submissions``: (wall time, folder name -> (verdict, phase))."""
    task = load_task(TASK)
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    home.mkdir(parents=True, exist_ok=True)
    runner = Runner(store, runtime, RunSettings(home=home))
    run_id = await runner.start([Planned(task.root, s, task) for s in submissions])

    async def watch(stream):  # type: ignore[no-untyped-def]
        async with stream:
            async for ev in stream:
                if on_phase is not None and isinstance(ev, PhaseFinished):
                    await on_phase(ev)

    started = time.monotonic()
    results = await runner.execute(run_id, [watch])
    took = time.monotonic() - started
    names = {str(s.resolve()): s.name for s in submissions}
    return took, {names[r.submission]: (r.verdict.value, r.phase.value if r.phase else None)
                  for r in results}


async def start_to_healthy(row: Row, caches: dict[str, Path], work: Path,
                           samples: int) -> None:
    for name in RUNTIMES:
        async with make_runtime(name, caches[name]) as runtime:
            for i in range(samples):
                took: dict[Phase, float] = {}

                async def note(ev: PhaseFinished, took: dict[Phase, float] = took) -> None:
                    took[ev.phase] = ev.duration_s

                sub = work / "subs" / "reference"
                if not sub.exists():
                    shutil.copytree(TASK / "reference", sub)
                _, verdicts = await engine_run(runtime, work / f"h-{name}-{i}", [sub], note)
                if verdicts["reference"] != (Verdict.PASS.value, None):
                    row.wrong[name] += 1
                    continue
                row.times[name].append(took[Phase.STARTUP] + took[Phase.HEALTH])


async def workload(row: Row, caches: dict[str, Path], work: Path, samples: int) -> None:
    expected = tomllib.loads((EXAMPLES / "EXPECTED.toml").read_text())
    want = {n: (e["verdict"], e.get("phase")) for n, e in expected.items()}
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
    for name in RUNTIMES:
        async with make_runtime(name, caches[name]) as runtime:
            await engine_run(runtime, work / f"w-{name}-warmup", folders)  # warm every cache
            for i in range(samples):
                took, verdicts = await engine_run(runtime, work / f"w-{name}-{i}", folders)
                wrong = [n for n, v in verdicts.items() if v != want.get(n)]
                if wrong:
                    row.wrong[name] += 1
                    print(f"  {name} workload sample {i}: wrong verdicts for {', '.join(wrong)}")
                    continue
                row.times[name].append(took)


async def main(samples: int, with_bootstrap: bool) -> None:
    # Containers carry this label; another anvil on the daemon never sees them.
    os.environ.setdefault("ANVIL_SCOPE", f"bench-{os.getpid()}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as tmp:
        work = Path(tmp)
        caches = {name: work / f"cache-{name}" for name in RUNTIMES}
        try:
            if with_bootstrap:
                docker = await docker_client()
                try:
                    result = await bootstrap(docker, force=True, say=lambda _m: None)
                finally:
                    await docker.close()
                print(f"base image bootstrap (debootstrap + import): {result.seconds:.1f}s")
            steps: list[tuple[str, Callable[[], Awaitable[None]]]] = []
            cold, changed, hit = Row("cold build, no cache"), Row(
                "build, code changed (requirements cached)"), Row("build, unchanged (cache hit)")
            healthy, load = Row("start to first healthy answer"), Row(
                "bundled workload, 8 evaluations, warm")
            rows = [cold, changed, hit, healthy, load]
            steps = [
                ("cold builds", lambda: cold_builds(cold, work, samples)),
                ("warm builds", lambda: warm_builds(changed, hit, caches, work, samples)),
                ("start to healthy", lambda: start_to_healthy(healthy, caches, work, samples)),
                ("workload", lambda: workload(load, caches, work, samples)),
            ]
            for label, step in steps:
                print(f"{label} ({samples} samples each)...", flush=True)
                await step()
        finally:
            await _drop_images(work)
    width = max(len(r.name) for r in rows)
    cells = {(r.name, n): r.cell(n) for r in rows for n in RUNTIMES}
    col = max(len(c) for c in cells.values())
    print(f"\n{'':{width}}  {'docker':>{col}}  {'process':>{col}}  docker/process")
    for r in rows:
        print(f"{r.name:{width}}  {cells[r.name, 'docker']:>{col}}  "
              f"{cells[r.name, 'process']:>{col}}  {r.ratio():>14}")
    print("ratios docker/process (medians): "
          + ", ".join(f"{label} {r.ratio()}" for label, r in zip(
              ("cold build", "changed build", "cache hit", "start to healthy", "workload"),
              rows, strict=True)))


async def _drop_images(work: Path) -> None:
    """Remove the images this bench built (and only those: its homes' records)."""
    try:
        docker = await docker_client()
    except Exception:  # noqa: BLE001 - nothing to clean without a daemon
        return
    try:
        for cache in sorted(work.glob("cache-docker*")) + sorted(work.glob("cold-docker-*")):
            await gc_images(docker, cache, budget_bytes=0)
    finally:
        await docker.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="samples per measurement")
    parser.add_argument("--bootstrap", action="store_true", help="also time a base rebuild")
    args = parser.parse_args()
    anyio.run(main, args.samples, args.bootstrap)
