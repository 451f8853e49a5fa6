"""The warm oracle worker: a forked oracle run is what a cold one would have been (its
environment, directory, session, randomness, output, exit code), dies whole on a
deadline, and a worker that dies mid-run is the harness's fault, never the candidate's."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from engine import HarnessError, Outcome, run_oracle
from engine._oracle_worker import OracleWorker, oracle_worker
from tests.engine.test_oracle import NOWHERE, oracle

WITNESS = """
    import json, os, random, sys

    def test_sees_what_a_cold_process_sees():
        seen = {"base": os.environ["BASE_URL"], "mark": os.environ.get("WITNESS_MARK"),
                "cwd": os.getcwd(), "path": sys.path[:2], "pid": os.getpid(),
                "leader": os.getsid(0) == os.getpid(), "random": random.random()}
        with open("seen.json", "w") as fh:
            json.dump(seen, fh)

    def test_fails():
        print("said on stdout")  # shown under the failure, in oracle.log
        assert 1 == 2, "the failure comes back"
"""


async def _witness(oracle_dir: Path, tmp_path: Path, name: str,
                   worker: OracleWorker | None) -> dict[str, object]:
    workdir = tmp_path / name
    workdir.mkdir()
    items = await run_oracle(oracle_dir, NOWHERE, workdir, item_timeout=30,
                             extra_env={"WITNESS_MARK": name}, worker=worker)
    assert [(i.nodeid.split("::")[1], i.outcome) for i in items] == [
        ("test_sees_what_a_cold_process_sees", Outcome.PASSED), ("test_fails", Outcome.FAILED)]
    assert "the failure comes back" in items[1].message
    seen: dict[str, object] = json.loads((workdir / "seen.json").read_text())
    seen["log"] = (workdir / "oracle.log").read_text()
    seen["workdir"] = str(workdir)
    return seen


@pytest.fixture
def oracle_dir(tmp_path: Path) -> Path:
    return oracle(tmp_path, WITNESS)


async def test_a_forked_run_sees_what_a_cold_run_sees(oracle_dir: Path, tmp_path: Path) -> None:
    cold = await _witness(oracle_dir, tmp_path, "cold", None)
    async with oracle_worker() as worker:
        assert worker is not None
        warm = [await _witness(oracle_dir, tmp_path, f"warm{i}", worker) for i in range(2)]
        assert worker.spawned == 2
    for seen in (cold, *warm):
        assert seen["base"] == NOWHERE and seen["leader"] is True
        # pytest puts the oracle's folder first, then what `python -m` put: the directory
        assert seen["cwd"] == seen["workdir"]
        assert seen["path"] == [str(oracle_dir), seen["workdir"]]
        assert seen["mark"] == Path(str(seen["workdir"])).name  # its own environment only
        assert "said on stdout" in str(seen["log"]) and "1 passed" in str(seen["log"])
    # each fork is its own process, with its own randomness
    assert len({seen["pid"] for seen in (cold, *warm)}) == 3
    assert warm[0]["random"] != warm[1]["random"]


SLEEPER = """
    import os, time

    def test_sleeps():
        with open("pid", "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its parent (the worker) to reap it is dead too
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


async def _until(check: Callable[[], bool], within: float) -> None:
    """Poll another process's state (there is nothing to wait on) until ``check()``."""
    with anyio.fail_after(within):
        while not check():  # noqa: ASYNC110 - another process's state: no event to wait on
            await anyio.sleep(0.05)


async def _pid_of(path: Path) -> int:
    await _until(lambda: path.exists() and bool(path.read_text()), 20)
    return int(path.read_text())


async def test_a_deadline_kills_the_forked_run(oracle_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "sleeper").mkdir()
    folder = oracle(tmp_path / "sleeper", SLEEPER)
    async with oracle_worker() as worker:
        assert worker is not None
        with anyio.move_on_after(3):
            await run_oracle(folder, NOWHERE, tmp_path, item_timeout=120, worker=worker)
        pid = int((tmp_path / "pid").read_text())
        await _until(lambda: not _alive(pid), 5)
        # the worker still serves the next run
        assert len(await run_oracle(oracle_dir, NOWHERE, tmp_path, item_timeout=30,
                                    worker=worker)) == 2


async def test_a_worker_that_dies_mid_run_is_a_harness_error(oracle_dir: Path,
                                                              tmp_path: Path) -> None:
    (tmp_path / "sleeper").mkdir()
    folder = oracle(tmp_path / "sleeper", SLEEPER)
    caught: list[HarnessError] = []
    async with oracle_worker() as worker:
        assert worker is not None

        async def kill_worker() -> None:
            pid = await _pid_of(tmp_path / "pid")
            os.kill(worker.process.pid, signal.SIGKILL)
            await _until(lambda: not _alive(pid), 5)  # and its fork goes with it

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_worker)
            try:
                await run_oracle(folder, NOWHERE, tmp_path, item_timeout=120, worker=worker)
            except HarnessError as exc:
                caught.append(exc)
        assert caught and "oracle worker died" in str(caught[0])
        # with the worker gone, the next oracle starts cold and still runs
        workdir = tmp_path / "after"
        workdir.mkdir()
        assert len(await run_oracle(oracle_dir, NOWHERE, workdir, item_timeout=30,
                                    worker=worker)) == 2


def test_a_run_can_do_without_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine._run import RunSettings

    monkeypatch.setenv("ANVIL_ORACLE_WORKER", "0")
    assert RunSettings(home=Path(".")).oracle_worker is False
    monkeypatch.delenv("ANVIL_ORACLE_WORKER")
    assert RunSettings(home=Path(".")).oracle_worker is True

