"""Claims and store durability: two anvils never run one evaluation, no write is dropped."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from engine import (
    EvaluationStarted,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
    Verdict,
)
from tests.conftest import MakeSubmission


def make_store(tmp_path: Path, evaluations: int = 1, **kw: float) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'a.db'}", **kw)
    store.create_run("r", "process", {},
                     [(f"r.{i}", "t", "/t", f"/s{i}") for i in range(evaluations)])
    return store


def test_a_claim_held_by_a_live_anvil_cannot_be_taken(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    other = Store(store.url)  # another connection, as another anvil would have
    assert store.claim("r.0", f"host:{os.getpid()}", 600)
    assert not other.claim("r.0", "elsewhere:1", 600)
    assert store.claim("r.0", f"host:{os.getpid()}", 600)  # renewing one's own claim


def test_a_claim_of_a_dead_owner_on_this_host_is_taken_over(tmp_path: Path) -> None:
    import socket

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    store = make_store(tmp_path)
    assert store.claim("r.0", f"{socket.gethostname()}:{dead}", 600)
    assert store.claim("r.0", f"{socket.gethostname()}:{os.getpid()}", 600)


def test_an_expired_lease_is_taken_over_and_a_done_evaluation_never(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.claim("r.0", "far:1", -1)  # a lease already over
    assert store.claim("r.0", "near:2", 600)
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute("UPDATE evaluations SET status='done'")
    assert not store.claim("r.0", "near:2", 600)


def test_two_anvils_opening_a_fresh_store_at_once_both_work(tmp_path: Path) -> None:
    """Seen in a fault campaign: 'database is locked' / 'table runs already exists'."""
    code = ("import sys; from engine import Store; s = Store(sys.argv[1]); "
            "s.create_run(sys.argv[2], 'process', {}, [])")
    for attempt in range(4):
        url = f"sqlite:///{tmp_path / f'fresh{attempt}.db'}"
        procs = [subprocess.Popen([sys.executable, "-c", code, url, f"run{n}"],
                                  stderr=subprocess.PIPE, text=True) for n in range(3)]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], errors
        assert Store(url).run("run2") is not None


def test_an_older_store_gains_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    make_store(tmp_path)
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute("ALTER TABLE evaluations DROP COLUMN items_skipped")
        db.execute("ALTER TABLE evaluations DROP COLUMN lease_until")
    (row,) = Store(f"sqlite:///{tmp_path / 'a.db'}").evaluations("r")
    assert (row.id, row.items_skipped, row.lease_until) == ("r.0", 0, None)


async def test_a_store_write_that_fails_is_retried_not_dropped(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """Another process holds the database for 1.5 s (longer than the busy timeout) while the
    evaluation's events are written: they land once the lock is gone."""
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}", busy_timeout=0.05)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        db = sqlite3.connect(tmp_path / "anvil.db", isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(1.5)
        db.execute("ROLLBACK")
        db.close()

    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(tiny_task.root, make_submission("ok"), tiny_task)])
        holder = threading.Thread(target=hold)
        holder.start()
        locked.wait(10)
        try:
            (result,) = await runner.execute(run_id)
        finally:
            release.set()
            holder.join()
    assert result.verdict is Verdict.PASS
    (row,) = store.evaluations(run_id)
    assert (row.status, row.verdict, row.items_passed) == ("done", "pass", 4)
    assert len(store.items([row.id])) == 4


def test_two_resumes_of_one_run_never_run_one_evaluation_twice(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    import anyio

    from engine import load_task
    from tests.conftest import FIXTURES

    task = load_task(FIXTURES / "tiny_task")
    home = tmp_path / "home"
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    subs = [make_submission("ok") for _ in range(6)]

    async def create() -> str:
        runner = Runner(store, ProcessRuntime(cache_dir),
                        RunSettings(home=home, options={"concurrency": 2}))
        return await runner.start([Planned(task.root, s, task) for s in subs])

    run_id = anyio.run(create)
    env = {**os.environ, "ANVIL_CACHE": str(cache_dir)}
    argv = [sys.executable, "-m", "engine", "run", "--resume", run_id, "--home", str(home)]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    # The one that finished first may see evaluations the other still runs: INCOMPLETE (4),
    # saying which it left to the other anvil.
    for proc, (_out, err) in zip(procs, outs, strict=True):
        assert proc.returncode in (0, 4), err
        assert proc.returncode == 0 or "another anvil is running it" in err, err
    started = Counter(
        e["evaluation_id"]
        for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()
        if (e := json.loads(line))["kind"] == EvaluationStarted.__name__)
    assert set(started) == {f"{run_id}.{i}" for i in range(6)}
    assert set(started.values()) == {1}, started
    assert {r.verdict for r in store.evaluations(run_id)} == {"pass"}


def test_claims_are_released_when_done(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.claim("r.0", "a:1", 600)
    from engine import EvaluationFinished

    store.apply(EvaluationFinished(run_id="r", evaluation_id="r.0", task="t", submission="/s0",
                                   verdict=Verdict.PASS, phase=None, reason="", items=(),
                                   duration_s=1.0, attempt=1))
    (row,) = store.evaluations("r")
    assert (row.owner, row.lease_until, row.status) == (None, None, "done")
