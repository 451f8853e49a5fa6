"""Docker vs process runtime, measured side by side in one sitting.

Prints: cold build and cache-hit build of the taskboard reference (docker image,
process venv), container/process start to first healthy answer, and the wall
time of the bundled workload (examples/taskboard) on each runtime, warm caches.
Needs a Docker daemon and the base image (`anvil docker bootstrap`); with
--bootstrap it also times a forced rebuild of the base image.

    .venv/bin/python bench/runtimes.py [--bootstrap]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from engine import Phase, PhaseFinished, Planned, Runner, RunSettings, Store, load_task
from engine.runtimes.docker import DockerRuntime, bootstrap, docker_client
from engine.runtimes.process import ProcessRuntime
from engine.types import BuildRequest, Runtime

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tasks" / "taskboard"


async def timed_build(runtime: Runtime, sub: Path, work: Path) -> float:
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    await runtime.build(BuildRequest(sub, work, work / "build.log"))
    return time.monotonic() - started


async def start_to_healthy(runtime: Runtime, home: Path) -> float:
    task = load_task(TASK)
    store = Store(f"sqlite:///{home / 'db.sqlite'}")
    runner = Runner(store, runtime, RunSettings(home=home))
    run_id = await runner.start([Planned(task.root, task.root / "reference", task)])
    took: dict[Phase, float] = {}

    async def watch(stream):  # type: ignore[no-untyped-def]
        async with stream:
            async for ev in stream:
                if isinstance(ev, PhaseFinished):
                    took[ev.phase] = ev.duration_s

    await runner.execute(run_id, [watch])
    return took[Phase.STARTUP] + took[Phase.HEALTH]


def workload(runtime: str, home: Path) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "engine", "run", str(TASK), "--submissions",
                    str(ROOT / "examples" / "taskboard"), "--runtime", runtime, "--home",
                    str(home)], check=True, capture_output=True)
    return time.monotonic() - started


async def main(with_bootstrap: bool) -> None:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as tmp:
        tmp_path = Path(tmp)
        if with_bootstrap:
            docker = await docker_client()
            result = await bootstrap(docker, force=True, say=lambda _m: None)
            await docker.close()
            rows.append(("base image bootstrap (debootstrap + import)",
                         f"{result.seconds:.1f} s", "-"))
        sub = tmp_path / "reference"
        shutil.copytree(TASK / "reference", sub)
        (sub / "bench-marker.txt").write_text(str(time.time_ns()))  # a never-seen context
        async with DockerRuntime(tmp_path / "cache", layer_cache=False) as docker_rt:
            docker_cold = await timed_build(docker_rt, sub, tmp_path / "d1")
            docker_hit = await timed_build(docker_rt, sub, tmp_path / "d2")
            docker_health = await start_to_healthy(docker_rt, tmp_path / "dh")
        async with ProcessRuntime(tmp_path / "pcache") as process_rt:
            process_cold = await timed_build(process_rt, sub, tmp_path / "p1")
            process_hit = await timed_build(process_rt, sub, tmp_path / "p2")
            process_health = await start_to_healthy(process_rt, tmp_path / "ph")
        rows += [
            ("cold build of the reference", f"{docker_cold:.2f} s", f"{process_cold:.2f} s"),
            ("cache-hit build (unchanged)", f"{docker_hit:.3f} s", f"{process_hit:.3f} s"),
            ("start to first healthy answer", f"{docker_health:.2f} s",
             f"{process_health:.2f} s"),
        ]
        workload("docker", tmp_path / "wd")  # warm both caches first
        workload("process", tmp_path / "wp")
        on_docker = workload("docker", tmp_path / "wd")
        on_process = workload("process", tmp_path / "wp")
        rows.append(("bundled workload, 8 evaluations, warm", f"{on_docker:.1f} s",
                     f"{on_process:.1f} s"))
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'docker':>10}  {'process':>10}")
    for name, d, p in rows:
        print(f"{name:{width}}  {d:>10}  {p:>10}")
    print(f"workload ratio docker/process: {on_docker / on_process:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", action="store_true", help="also time a base rebuild")
    anyio.run(main, parser.parse_args().bootstrap)
