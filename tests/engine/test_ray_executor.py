"""The ray executor on a real multi-node Ray cluster on this machine (process runtime).

The cluster (``ray.cluster_utils.Cluster``): a head that runs no evaluation (no CPU, no
``anvil_slot``) and two worker nodes with two slots each. Each run connects to it the way
``anvil run --executor ray --ray-address ADDR`` does, and lets go at its end.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from sqlmodel import Session, select  # noqa: E402

from engine import (  # noqa: E402
    EvaluationFinished,
    Event,
    HarnessError,
    PhaseFinished,
    PhaseStarted,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
)
from engine._ray import NO_SLOTS, RayExecutor  # noqa: E402
from engine._reaper import Orphan, marked_processes, reap_orphans  # noqa: E402
from engine._store import PhaseRecord  # noqa: E402
from engine.types import Phase, Verdict  # noqa: E402
from tests.conftest import MakeSubmission, run_engine  # noqa: E402

NODE = {"num_cpus": 1, "resources": {"anvil_slot": 2}, "include_dashboard": False}


def _start(cache_dir: Path, workers: int) -> Cluster:
    # Nodes inherit this environment: their runtime cache is the session's (venvs are
    # built once). Ray listens on this machine's own address (it turns 127.0.0.1 into it).
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(workers):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


@pytest.fixture(scope="module")
def cluster(cache_dir: Path) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANVIL_CACHE", str(cache_dir))
        patch.delenv("RAY_ADDRESS", raising=False)
        cluster = _start(cache_dir, workers=2)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _outcome(result: EvaluationFinished) -> tuple[str, Verdict, Phase | None, list[str]]:
    failed = sorted(i.nodeid for i in result.items if i.failed)
    return Path(result.submission).name, result.verdict, result.phase, failed


async def test_ray_gives_the_local_verdicts_with_work_on_both_nodes(
    cluster: Cluster, tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path,
    cache_dir: Path,
) -> None:
    modes = ["ok", "fail_item", "crash", "ok", "fail_item", "ok"]
    pairs = [(tiny_task, make_submission(mode)) for mode in modes]
    local, _, _ = await run_engine(pairs, tmp_path / "local", cache_dir, concurrency=4)
    executor = RayExecutor(address=cluster.address, runtime="process", home=tmp_path / "ray")
    remote, store, run_id = await run_engine(pairs, tmp_path / "ray", cache_dir,
                                             executor=executor)

    assert [_outcome(r) for r in remote] == [_outcome(r) for r in local]
    assert [r.verdict for r in remote].count(Verdict.FAIL) == 3  # not all alike by accident
    assert all(r.node for r in remote) and not any(r.node for r in local)
    assert len({r.node for r in remote}) == 2, "both worker nodes ran evaluations"
    assert executor.slots == 4
    assert not ray.is_initialized(), "the run let go of the cluster"

    # The events came to the driver's bus: the store has each evaluation's phases and items.
    rows = store.evaluations(run_id)
    assert [(r.status, r.verdict) for r in rows] == [("done", r.verdict.value) for r in remote]
    with Session(store.engine) as session:
        phases = session.exec(select(PhaseRecord)).all()
    by_evaluation = {r.id: [p.phase for p in phases if p.evaluation_id == r.id] for r in rows}
    ok_id = rows[0].id
    assert by_evaluation[ok_id] == ["build", "startup", "health", "wiring", "oracle",
                                    "teardown"]
    items = store.items([r.id for r in rows])
    assert {i.evaluation_id for i in items} == {rows[i].id for i in (0, 1, 3, 4, 5)}
    # Logs are where the local executor writes them (one filesystem on this machine).
    assert any((tmp_path / "ray" / "runs" / run_id).glob("001-*/service.log"))


async def test_a_cluster_without_slots_errs_every_evaluation_at_once(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    bare = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                         "include_dashboard": False})
    try:
        executor = RayExecutor(address=bare.address, runtime="process", home=tmp_path)
        pairs = [(tiny_task, make_submission("ok")) for _ in range(3)]
        begun = time.monotonic()
        results, store, run_id = await run_engine(pairs, tmp_path, cache_dir,
                                                  executor=executor)
        took = time.monotonic() - begun
    finally:
        bare.shutdown()
    assert [(r.verdict, r.reason, r.attempt) for r in results] == [
        (Verdict.ERROR, NO_SLOTS, 1)] * 3
    assert [r.status for r in store.evaluations(run_id)] == ["done"] * 3
    assert took < 10, f"took {took:.1f}s"


async def test_a_worker_killed_mid_evaluation_is_retried_to_one_verdict(
    cluster: Cluster, tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path,
    cache_dir: Path,
) -> None:
    # A service that never listens keeps its evaluation in `health` for 4 s: time to kill
    # the Ray worker running it. Its service process is marked with that worker's pid.
    submission = make_submission("silent")
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    events: list[Event] = []
    in_health = anyio.Event()

    async def collect(stream: MemoryObjectReceiveStream[Event]) -> None:
        async with stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, PhaseStarted) and event.phase is Phase.HEALTH:
                    in_health.set()

    executor = RayExecutor(address=cluster.address, runtime="process", home=tmp_path)
    settings = RunSettings(home=tmp_path, retry_delay=0.1, executor=executor)
    killed: list[Orphan] = []
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, settings)
        run_id = await runner.start([Planned(tiny_task.root, submission, tiny_task)])

        async def kill_its_worker() -> None:
            with anyio.fail_after(30):
                await in_health.wait()  # the service runs: started by the worker to kill
            mine = [p for p in marked_processes() if p.run_id == run_id]
            assert mine and mine[0].owner != os.getpid()
            os.kill(mine[0].owner, signal.SIGKILL)
            killed.extend(mine)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_its_worker)
            (result,) = await runner.execute(run_id, [collect])
    try:
        crashed = [e for e in events if isinstance(e, EvaluationFinished) and not e.final]
        assert [(e.verdict, e.attempt, e.phase) for e in crashed] == [
            (Verdict.ERROR, 1, Phase.HEALTH)]
        assert "WorkerCrashedError" in crashed[0].reason or "died" in crashed[0].reason
        assert any(isinstance(e, PhaseFinished) and e.phase is Phase.HEALTH and not e.ok
                   and e.message == crashed[0].reason for e in events)
        # The retry ran to the candidate's own verdict: exactly one, recorded once.
        assert (result.verdict, result.phase, result.attempt) == (Verdict.FAIL, Phase.HEALTH, 2)
        assert [(r.status, r.verdict, r.attempt) for r in store.evaluations(run_id)] == [
            ("done", "fail", 2)]
    finally:
        # What the dead worker left is an orphan: the next run (or `anvil gc`) reaps it.
        reaped = {o.pid for o in reap_orphans() if o.run_id == run_id}
        store.close()
    assert {o.pid for o in killed} <= reaped


async def test_an_address_where_no_cluster_answers_is_refused_at_once(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    executor = RayExecutor(address=address, runtime="process", home=tmp_path)
    begun = time.monotonic()
    with pytest.raises(HarnessError, match=f"no cluster answers at {address}"):
        async with executor.session():
            pass
    assert time.monotonic() - begun < 6
    assert not ray.is_initialized()
