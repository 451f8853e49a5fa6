"""A BackendForge-sized sweep: N evaluations in one ``anvil run``, timed, with anvil's peak memory.

The paper's sweep is 56 tasks x 14 candidates = 784 evaluations. This one has its
shape, built from what is bundled: task copies in turn (taskboard, checkout, booking,
notify, taskboard again...), each copy a folder copy of ``tasks/<task>`` under a new
id (``<task>-t<k>``: only the ``id = "..."`` line of task.toml changes), and each
copy given 14 candidates: the task's example submissions (``examples/<task>/``, as
its EXPECTED.toml lists them) cycled in order, copied under new names
(``<submission>-c<n>``, n-th use of that submission in the copy) into
``DIR/<task-id>/``, the layout ``anvil run --submissions DIR`` pairs tasks with. The
copies stop at ``--evaluations`` (the last task copy may have fewer candidates), so
every evaluation is distinct (anvil refuses two tasks with one id, and resolves links,
so submissions are real copies). ``--evaluations 784`` is the paper's 56 x 14.

Before the timed run, the runtime's cache (``--cache``, default anvil's own
``.anvil/cache``) is warmed untimed: every distinct submission built once by the
runtime's own build, as bench/throughput.py does (its ``--_prepare`` pass), so the
sweep pays for no venv creation or image build, as in a sweep's steady state.

Then ``anvil run <task copies...> --submissions DIR --json --home <tmp> --runtime R``
runs once as a subprocess, through a small wrapper that writes anvil's own
``getrusage(RUSAGE_SELF)`` at exit: its ``ru_maxrss`` is the peak memory printed (the
anvil process alone; not its services, oracles or mocks, which are other processes;
``RUSAGE_CHILDREN`` of this script would be the largest process of the whole tree,
so it is not used). Printed: N, wall time, evaluations per minute, verdict counts,
anvil's peak RSS and CPU seconds, and the oracle items run (sum of ``items_passed +
items_failed`` over the JSON lines). Each copy's verdict is checked against its
original's EXPECTED.toml verdict; a WARNING line counts the ones that differ.

    .venv/bin/python bench/sweep.py --evaluations N [--runtime process|docker]
        [--concurrency C] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from throughput import TASKS, VERDICTS, WRAPPER  # a sibling script: bench/ is on sys.path

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = 14  # per task copy, as in the paper (56 tasks x 14 candidates)
ID_LINE = re.compile(r'^id\s*=\s*"[^"\n]*"', re.MULTILINE)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the sweep: a copied submission under a copied task."""

    task: str  # the bundled task it copies
    task_id: str  # the copy's id
    submission: str  # the example submission it copies
    name: str  # the copy's folder name
    expected: str  # the original's verdict in EXPECTED.toml


def examples(task: str) -> dict[str, str]:
    """The task's example submissions (EXPECTED.toml order) and their expected verdicts."""
    expected = tomllib.loads((ROOT / "examples" / task / "EXPECTED.toml").read_text())
    return {sub: entry["verdict"] for sub, entry in expected.items()
            if (ROOT / "examples" / task / sub).is_dir()}


def sweep(n: int) -> list[Evaluation]:
    """``n`` evaluations: task copies in turn, up to 14 cycled candidates each."""
    subs = {task: examples(task) for task in TASKS}
    out: list[Evaluation] = []
    copy = 0
    while len(out) < n:
        task = TASKS[copy % len(TASKS)]
        task_id = f"{task}-t{copy // len(TASKS) + 1}"
        names = list(subs[task])
        for i in range(min(CANDIDATES, n - len(out))):
            sub = names[i % len(names)]
            out.append(Evaluation(task, task_id, sub, f"{sub}-c{i // len(names) + 1}",
                                  subs[task][sub]))
        copy += 1
    return out


def lay_out(work: list[Evaluation], scratch: Path) -> list[Path]:
    """Copy the task folders (new ids) to ``scratch/tasks`` and the submissions to
    ``scratch/subs/<task-id>/<name>``; return the task copies' folders in order."""
    tasks: dict[str, Path] = {}
    for ev in work:
        if ev.task_id not in tasks:
            folder = scratch / "tasks" / ev.task_id
            shutil.copytree(ROOT / "tasks" / ev.task, folder, symlinks=True)
            toml = folder / "task.toml"
            text, count = ID_LINE.subn(f'id = "{ev.task_id}"', toml.read_text(), count=1)
            if count != 1:
                sys.exit(f"{ROOT / 'tasks' / ev.task / 'task.toml'}: no id line to change")
            toml.write_text(text)
            tasks[ev.task_id] = folder
        shutil.copytree(ROOT / "examples" / ev.task / ev.submission,
                        scratch / "subs" / ev.task_id / ev.name, symlinks=True)
    return list(tasks.values())


def warm(work: list[Evaluation], scratch: Path, runtime: str, cache: Path,
         env: dict[str, str]) -> float:
    """Build every distinct submission once with the runtime's own build (untimed for the
    sweep), through bench/throughput.py's ``--_prepare`` pass; return its seconds."""
    folder = scratch / "warm"
    folder.mkdir()
    distinct = dict.fromkeys((ev.task, ev.submission) for ev in work)
    (folder / "work.json").write_text(json.dumps([[t, s, s] for t, s in distinct]))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "throughput.py"), "--_prepare", str(folder),
         "--runtime", runtime, "--cache", str(cache)],
        cwd=folder, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"warming the cache failed:\n{done.stderr[-3000:]}")
    # The process runtime's laid-out submissions are left for a loop that will not run.
    shutil.rmtree(folder, ignore_errors=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:-1]))
    parser.add_argument("--evaluations", type=int, required=True, metavar="N",
                        help="evaluations in the sweep (784: the paper's 56 tasks x 14)")
    parser.add_argument("--runtime", choices=("process", "docker"), default="process")
    parser.add_argument("--concurrency", type=int, default=None, metavar="C",
                        help="anvil run --concurrency (default: anvil's default)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".anvil" / "cache",
                        help="the runtime cache (ANVIL_CACHE; default: %(default)s)")
    args = parser.parse_args()
    if args.evaluations < 1:
        parser.error("--evaluations must be at least 1")
    cache = args.cache.resolve()
    env = {**os.environ, "ANVIL_CACHE": str(cache)}
    env.pop("ANVIL_HOME", None)
    env.pop("ANVIL_DB", None)
    work = sweep(args.evaluations)
    with tempfile.TemporaryDirectory(prefix="anvil-sweep-") as tmp:
        scratch = Path(tmp)
        task_folders = lay_out(work, scratch)
        distinct = len({(ev.task, ev.submission) for ev in work})
        used = ", ".join(dict.fromkeys(ev.task for ev in work))
        print(f"sweep: {len(work)} evaluations = {len(task_folders)} task copy(ies) x up to "
              f"{CANDIDATES} candidates ({distinct} distinct submissions of {used}), "
              f"runtime {args.runtime}, {os.cpu_count()} cores", flush=True)
        seconds = warm(work, scratch, args.runtime, cache, env)
        print(f"caches warm: every distinct submission built once by the {args.runtime} "
              f"runtime, untimed ({seconds:.1f} s; cache {cache})", flush=True)
        usage_file = scratch / "anvil-rusage.json"
        argv = [sys.executable, "-c", WRAPPER, str(usage_file), "run",
                *map(str, task_folders), "--submissions", str(scratch / "subs"),
                "--json", "--home", str(scratch / "home"), "--runtime", args.runtime]
        if args.concurrency is not None:
            argv += ["--concurrency", str(args.concurrency)]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False)
        wall = time.monotonic() - started
        if done.returncode not in (0, 3):  # 3: an evaluation ended in error (counted)
            sys.exit(f"anvil run exited {done.returncode}:\n{done.stderr[-3000:]}")
        usage = json.loads(usage_file.read_text()) if usage_file.exists() else None

    by_key = {(ev.task_id, ev.name): ev for ev in work}
    verdicts: dict[tuple[str, str], str] = {}
    items = 0
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            verdicts[(record["task"], Path(record["submission"]).name)] = record["verdict"]
            items += (record["items_passed"] or 0) + (record["items_failed"] or 0)
    counts = Counter(verdicts.values())
    concurrency = args.concurrency if args.concurrency is not None else "default"
    print()
    print(f"N                   {len(work)} ({len(verdicts)} verdicts)")
    print(f"wall time           {wall:.1f} s ({wall / len(work):.2f} s per evaluation; "
          f"runtime {args.runtime}, concurrency {concurrency})")
    print(f"evaluations/minute  {len(verdicts) / wall * 60:.1f}")
    print("verdicts            " + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS))
    if usage is not None:
        print(f"anvil peak memory   {usage['maxrss_kib'] / 1024:.0f} MiB (max RSS of the anvil "
              f"process: its RUSAGE_SELF at exit); its CPU {usage['cpu_s']:.1f} s")
    else:
        print("anvil peak memory   - (the wrapper wrote no rusage)")
    print(f"oracle items run    {items} (items_passed + items_failed; "
          f"{items / max(len(verdicts), 1):.1f} per evaluation)")
    wrong = [f"  {tid}/{name}: {verdicts.get((tid, name), 'missing')}, expected "
             f"{ev.expected} ({ev.task}/{ev.submission})"
             for (tid, name), ev in by_key.items()
             if verdicts.get((tid, name)) != ev.expected]
    if wrong:
        print(f"WARNING: {len(wrong)} verdicts differ from EXPECTED.toml:")
        print("\n".join(wrong))
    else:
        print("verdicts agree with EXPECTED.toml for every copy")


if __name__ == "__main__":
    main()
