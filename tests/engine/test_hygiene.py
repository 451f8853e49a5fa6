"""Resource hygiene over many evaluations: after 100 of them, open files, threads, child
processes and scratch disk are back at their start level, and memory has not grown with
the count. Logs are kept; each evaluation's private copy of the submission is not."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio

from engine import Task, Verdict
from engine._reaper import marked_processes
from tests.conftest import MakeSubmission, run_engine


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def pool_threads() -> list[threading.Thread]:
    """anyio's worker threads (``to_thread``): a pool, reused and bounded."""
    return [t for t in threading.enumerate() if type(t).__name__ == "WorkerThread"]


def own_threads() -> int:
    """Every other thread of this process."""
    return threading.active_count() - len(pool_threads())


def scratch_bytes(home: Path) -> int:
    """Bytes under runs/ that are not logs, reports or the event log."""
    kept = {".log", ".jsonl", ".txt", ".ini"}
    return sum(p.stat().st_size for p in (home / "runs").rglob("*")
               if p.is_file() and not p.is_symlink() and p.suffix not in kept)


async def test_a_hundred_evaluations_leave_nothing_behind(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    modes = ["ok", "fail_item", "crash"]
    # Warm-up: caches, imports, thread pools reach their steady size.
    await run_engine([(tiny_task, make_submission(modes[i % 3])) for i in range(12)],
                     tmp_path / "warm", cache_dir, concurrency=8)
    pairs = [(tiny_task, make_submission(modes[i % 3])) for i in range(100)]
    fds, threads, rss = open_fds(), own_threads(), rss_mb()

    results, store, run_id = await run_engine(pairs, tmp_path / "home", cache_dir,
                                              concurrency=8)
    store.close()
    assert [r.verdict for r in results].count(Verdict.ERROR) == 0
    assert {r.verdict for r in results} == {Verdict.PASS, Verdict.FAIL}
    assert len(list((tmp_path / "home" / "runs" / run_id).glob("*/service.log"))) == 100

    print(f"\nafter 100 evaluations: open files {fds} -> {open_fds()}, threads {threads} -> "
          f"{own_threads()} (+{len(pool_threads())} in anyio's pool), RSS {rss:.0f} -> "
          f"{rss_mb():.0f} MiB, scratch bytes "
          f"left {scratch_bytes(tmp_path / 'home')}")  # shown with `pytest -s`
    assert open_fds() <= fds + 2, "file descriptors leaked"
    # anyio's worker pool keeps threads a burst added (they are pruned only when the pool
    # is used again), bounded by its limiter: those are not leaks, every other thread is.
    assert own_threads() <= threads + 1, "threads leaked"
    assert len(pool_threads()) <= anyio.to_thread.current_default_thread_limiter().total_tokens
    assert [p for p in marked_processes() if p.run_id == run_id] == [], "processes leaked"
    assert scratch_bytes(tmp_path / "home") < 64 * 1024, "private copies left on disk"
    grown = rss_mb() - rss
    assert grown < 40, f"memory grew by {grown:.0f} MiB over 100 evaluations"
