"""The ray executor on a real multi-node Ray cluster on this machine (process runtime; the
docker runtime where Docker answers; a PostgreSQL store where PostgreSQL is installed).

The cluster (``ray.cluster_utils.Cluster``): a head that runs no evaluation (no CPU, no
``anvil_slot``) and two worker nodes with three slots each. Each run connects to it the way
``anvil run --executor ray --ray-address ADDR`` does, and lets go at its end.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
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
    Notice,
    PhaseFinished,
    PhaseStarted,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
)
from engine._lifecycle import AttachmentFactory  # noqa: E402
from engine._ray import NO_SLOTS, RayExecutor  # noqa: E402
from engine._reaper import Orphan, marked_processes, reap_orphans  # noqa: E402
from engine._store import PhaseRecord  # noqa: E402
from engine._tracing import default_attachments  # noqa: E402
from engine.cli._run import repeat_plan  # noqa: E402
from engine.runtimes.docker import SCOPE_LABEL  # noqa: E402
from engine.types import Phase, Verdict  # noqa: E402
from tests.conftest import MakeSubmission, run_engine  # noqa: E402
from tests.engine import test_store_postgres  # noqa: E402
from tests.engine.test_mock_wiring import _submission, _task  # noqa: E402
from tests.pg import Postgres  # noqa: E402

# The session's PostgreSQL server, shared with the store's own tests (it skips, or fails
# under ANVIL_REQUIRE_DOCKER, where PostgreSQL is not installed).
postgres = test_store_postgres.postgres


def _start(cache_dir: Path, workers: int, slots: int = 3) -> Cluster:
    # Nodes inherit this environment: their runtime cache is the session's (venvs are
    # built once). Ray listens on this machine's own address (it turns 127.0.0.1 into it).
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1, resources={"anvil_slot": slots},
                             include_dashboard=False)
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
    assert executor.slots == 6
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


async def _run_collecting(
    planned: Sequence[Planned], home: Path, cache_dir: Path, executor: RayExecutor, *,
    attachments: Sequence[AttachmentFactory] = (), watch: object = None,
) -> tuple[list[EvaluationFinished], Store, str, list[Event]]:
    """A run like ``run_engine``'s that also keeps every event of the run's bus; ``watch``
    (a callable) sees each event as it comes."""
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    events: list[Event] = []

    async def collect(stream: MemoryObjectReceiveStream[Event]) -> None:
        async with stream:
            async for event in stream:
                events.append(event)
                if callable(watch):
                    watch(event)

    settings = RunSettings(home=home, retry_delay=0.1, executor=executor,
                           attachments=attachments)
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, settings)
        run_id = await runner.start(planned)
        results = await runner.execute(run_id, [collect])
    order = {str(p.submission): i for i, p in enumerate(planned)}
    results.sort(key=lambda r: order[r.submission])
    return results, store, run_id, events


async def test_a_node_removed_mid_run_leaves_one_verdict_per_evaluation(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Four services that never listen hold all four slots in `health` for 4 s: the node
    # removed then is running two of them. Two more evaluations wait for a slot.
    modes = ["silent"] * 4 + ["ok", "fail_item"]
    pairs = [(tiny_task, make_submission(mode)) for mode in modes]
    local, _, _ = await run_engine(pairs, tmp_path / "local", cache_dir, concurrency=6)
    monkeypatch.setenv("ANVIL_CACHE", str(cache_dir))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cluster = _start(cache_dir, workers=2, slots=2)
    in_health: set[str] = set()
    all_busy = anyio.Event()

    def watch(event: Event) -> None:
        if isinstance(event, PhaseStarted) and event.phase is Phase.HEALTH:
            in_health.add(event.evaluation_id)
        elif isinstance(event, PhaseFinished) and event.phase is Phase.HEALTH:
            in_health.discard(event.evaluation_id)
        if len(in_health) == 4:
            all_busy.set()

    removed: list[str] = []
    try:
        executor = RayExecutor(address=cluster.address, runtime="process",
                               home=tmp_path / "ray")
        doomed = cluster.list_all_nodes()[1]  # a worker (the head is first)

        async def remove_a_busy_node() -> None:
            with anyio.fail_after(40):
                await all_busy.wait()
            removed.append(doomed.node_id)
            # SIGKILL, as a machine that dies: its raylet, its workers with it
            await anyio.to_thread.run_sync(functools.partial(
                cluster.remove_node, doomed, allow_graceful=False))

        planned = [Planned(t.root, s, t) for t, s in pairs]
        async with anyio.create_task_group() as tg:
            tg.start_soon(remove_a_busy_node)
            remote, store, run_id, events = await _run_collecting(
                planned, tmp_path / "ray", cache_dir, executor, watch=watch)
    finally:
        cluster.shutdown()

    assert removed, "the node was removed mid-run"
    assert [_outcome(r) for r in remote] == [_outcome(r) for r in local]
    lost = [e for e in events if isinstance(e, EvaluationFinished) and not e.final]
    # what it was running: at most its two slots (CI under load once saw one: which of
    # them are still unfinished when the kill lands depends on timing)
    assert 1 <= len(lost) <= 2, [e.reason for e in lost]
    assert all(e.verdict is Verdict.ERROR and e.reason.startswith("Ray: ") for e in lost)
    # Exactly one verdict per evaluation, recorded once; the lost ones on their 2nd attempt
    finals = Counter(e.evaluation_id for e in events
                     if isinstance(e, EvaluationFinished) and e.final)
    assert sorted(finals.values()) == [1] * 6
    rows = store.evaluations(run_id)
    assert [(r.status, r.verdict) for r in rows] == [("done", r.verdict.value) for r in remote]
    retried = {e.evaluation_id for e in lost}
    assert {r.id: r.attempt for r in rows if r.id in retried} == dict.fromkeys(retried, 2)
    assert len({r.node for r in remote if r.evaluation_id in retried}) == 1  # the survivor
    store.close()

    # What the dead node's workers left (their services) carries anvil's marks: `anvil gc`
    # (the reaper) ends it, once the dead workers are gone.
    deadline = time.monotonic() + 20
    while (left := [p for p in marked_processes() if p.run_id == run_id]):
        reap_orphans()
        assert time.monotonic() < deadline, f"still running after gc: {left}"
        await anyio.sleep(0.2)


async def test_ray_evaluations_are_traced_into_the_runs_store(
    cluster: Cluster, tmp_path: Path, cache_dir: Path,
) -> None:
    # A task with a mock: the node's spans include the service's calls to it.
    task, home = _task(tmp_path), tmp_path / "ray"
    planned = [Planned(task.root, _submission(tmp_path, "one"), task)]
    executor = RayExecutor(address=cluster.address, runtime="process", home=home)
    driver_store = Store(f"sqlite:///{home / 'anvil.db'}")  # the run's, as `anvil run` has it
    (result,), store, _, events = await _run_collecting(
        planned, home, cache_dir, executor, attachments=default_attachments(driver_store))
    driver_store.close()
    assert result.verdict is Verdict.PASS and result.node, result.reason
    assert not [e for e in events if isinstance(e, Notice)]

    spans = store.spans(result.evaluation_id)
    (root,) = [s for s in spans if s.parent_id is None]
    assert root.name == "evaluation"
    assert root.attributes_dict()["anvil.evaluation.id"] == result.evaluation_id
    phases = {s.name: s for s in spans if s.parent_id == root.span_id}
    assert set(phases) == {p.value for p in Phase}
    items = [s for s in spans if s.parent_id == phases["oracle"].span_id
             and "anvil.item.nodeid" in s.attributes_dict()]
    assert len(items) == len(result.items) > 0
    mock_calls = [s for s in spans if s.attributes_dict().get("anvil.mock.kind") == "echo"]
    assert mock_calls and {s.parent_id for s in mock_calls} <= {i.span_id for i in items}
    store.close()


async def test_a_node_that_cannot_reach_the_store_says_so_once_and_scores_without_spans(
    cluster: Cluster, tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path,
    cache_dir: Path,
) -> None:
    # The driver traces into a store that does not hold the run: what a node sees when a
    # sqlite path names another file on its machine (no shared filesystem).
    home = tmp_path / "ray"
    elsewhere = Store(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    planned = [Planned(tiny_task.root, make_submission(mode), tiny_task)
               for mode in ("ok", "fail_item", "ok", "ok")]
    executor = RayExecutor(address=cluster.address, runtime="process", home=home)
    results, store, _, events = await _run_collecting(
        planned, home, cache_dir, executor, attachments=default_attachments(elsewhere))
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.FAIL, Verdict.PASS,
                                            Verdict.PASS]
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert len(notices) == 1, notices  # one machine: one line, whichever worker saw it
    assert "cannot record spans" in notices[0] and "does not hold run" in notices[0]
    assert not any(store.spans(r.evaluation_id) for r in results)
    assert not any(elsewhere.spans(r.evaluation_id) for r in results)
    store.close()
    elsewhere.close()


async def test_evaluations_of_a_submission_prefer_the_node_that_ran_it(
    cluster: Cluster, tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path,
    cache_dir: Path,
) -> None:
    # `anvil run --repeat 3` of two submissions (repeats 2 and 3 through links), in the
    # order A, A', A'', B, B', B'': spread alone would put each submission on both nodes.
    home = tmp_path / "ray"
    first = [Planned(tiny_task.root, make_submission("ok", name=n), tiny_task)
             for n in ("a", "b")]
    planned = sorted(repeat_plan(first, 3, home / "runs" / "repeats"),
                     key=lambda p: p.submission.name)
    assert len({p.submission for p in planned}) == 6
    executor = RayExecutor(address=cluster.address, runtime="process", home=home)
    results, store, _, _ = await _run_collecting(planned, home, cache_dir, executor)
    store.close()
    assert [r.verdict for r in results] == [Verdict.PASS] * 6
    by_submission: dict[str, Counter[str | None]] = {}
    for r in results:
        by_submission.setdefault(Path(r.submission).name, Counter())[r.node] += 1
    # Each node has a slot for every evaluation of the submission it took first.
    assert [len(nodes) for nodes in by_submission.values()] == [1, 1], by_submission
    assert len({r.node for r in results}) == 2  # the two first ones were spread


def _containers(scope: str, run_id: str) -> list[str]:
    """The containers ``docker ps -a`` lists with this session's scope and run's labels."""
    done = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
         f"label={SCOPE_LABEL}={scope}", "--filter", f"label=anvil.run={run_id}"],
        capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


@pytest.mark.docker
async def test_ray_on_docker_gives_the_local_verdicts_and_leaves_no_container(
    docker_ready: None, anvil_scope: str, cluster: Cluster, tiny_task: Task,
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    # `loopback` listens on the container's own 127.0.0.1: unreachable on docker only.
    modes = ["ok", "fail_item", "crash", "loopback", "ok", "fail_item"]
    pairs = [(tiny_task, make_submission(mode)) for mode in modes]
    local, local_store, local_run = await run_engine(pairs, tmp_path / "local", cache_dir,
                                                     runtime="docker")
    executor = RayExecutor(address=cluster.address, runtime="docker", home=tmp_path / "ray")
    remote, store, run_id = await run_engine(pairs, tmp_path / "ray", cache_dir,
                                             runtime="docker", executor=executor)
    local_store.close()
    store.close()

    assert [_outcome(r) for r in remote] == [_outcome(r) for r in local]
    assert [(r.verdict, r.phase) for r in local] == [
        (Verdict.PASS, None), (Verdict.FAIL, Phase.ORACLE), (Verdict.FAIL, Phase.STARTUP),
        (Verdict.FAIL, Phase.HEALTH), (Verdict.PASS, None), (Verdict.FAIL, Phase.ORACLE)]
    assert all(r.attempt == 1 for r in remote), [r.reason for r in remote]
    assert len({r.node for r in remote}) == 2, "both worker nodes ran evaluations"
    # Each node tore down what it started: no container of either run is left.
    assert _containers(anvil_scope, local_run) == []
    assert _containers(anvil_scope, run_id) == []


def test_a_ray_run_records_into_postgres_and_report_reads_it(
    postgres: Postgres, cluster: Cluster, tiny_task: Task, make_submission: MakeSubmission,
    tmp_path: Path, cache_dir: Path,
) -> None:
    # `anvil run --executor ray --db postgresql+psycopg://...`: the driver records the
    # verdicts, the nodes write their spans into the same database.
    url = postgres.fresh_database()
    modes = ["ok", "fail_item", "crash", "ok"]
    submissions = [make_submission(mode) for mode in modes]
    home = tmp_path / "home"
    env = {**os.environ, "ANVIL_CACHE": str(cache_dir)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(tiny_task.root), "--submissions",
         str(submissions[0].parent), "--runtime", "process", "--executor", "ray",
         "--ray-address", cluster.address, "--json", "--home", str(home), "--db", url],
        env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    (run_id,) = {line["run_id"] for line in lines}
    expected = {"ok": ("pass", None), "fail_item": ("fail", "oracle"),
                "crash": ("fail", "startup")}
    want = {s.name: expected[m] for s, m in zip(submissions, modes, strict=True)}
    assert {Path(line["submission"]).name: (line["verdict"], line["phase"])
            for line in lines} == want
    assert len({line["node"] for line in lines}) == 2, "both worker nodes ran evaluations"
    assert not (home / "anvil.db").exists(), "the run's store is PostgreSQL only"

    store = Store(url)
    try:
        # One verdict per evaluation, recorded once: one row each, one attempt, and no
        # phase or item recorded twice.
        rows = store.evaluations(run_id)
        assert sorted((r.id, r.status, r.verdict, r.attempt) for r in rows) == sorted(
            (line["evaluation_id"], "done", line["verdict"], 1) for line in lines)
        with Session(store.engine) as session:
            phases = session.exec(select(PhaseRecord)).all()
        per_phase = Counter((p.evaluation_id, p.phase) for p in phases)
        assert per_phase and set(per_phase.values()) == {1}
        items = Counter(i.evaluation_id for i in store.items([r.id for r in rows]))
        by_mode = {m: next(r for r in rows if r.submission == str(s)) for s, m in
                   zip(submissions, modes, strict=True)}
        assert items[by_mode["crash"].id] == 0
        for row in rows:
            assert items[row.id] == row.items_passed + row.items_failed + row.items_skipped
        assert items[by_mode["ok"].id] > 0

        # The nodes traced each evaluation into PostgreSQL: a root, its phases, the items.
        for row, mode in ((by_mode["ok"], "ok"), (by_mode["fail_item"], "fail_item")):
            spans = store.spans(row.id)
            (root,) = [s for s in spans if s.parent_id is None]
            assert root.name == "evaluation", mode
            assert root.attributes_dict()["anvil.evaluation.id"] == row.id
            children = {s.name: s for s in spans if s.parent_id == root.span_id}
            assert set(children) == {p.value for p in Phase}, mode
            traced_items = [s for s in spans if s.parent_id == children["oracle"].span_id
                            and "anvil.item.nodeid" in s.attributes_dict()]
            assert len(traced_items) == items[row.id], mode
    finally:
        store.close()

    # `anvil report` from another home reads the run from PostgreSQL alone.
    shown = subprocess.run(
        [sys.executable, "-m", "engine", "report", run_id, "--format", "json", "--db", url,
         "--home", str(tmp_path / "reader")],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["run"]["id"], report["run"]["status"]) == (run_id, "finished")
    assert {Path(e["submission"]).name: (e["verdict"], e["phase"])
            for e in report["evaluations"]} == want
    failed = [i["nodeid"] for e in report["evaluations"] for i in e["failed_items"]]
    assert failed == ["test_tiny.py::test_put_then_get"]
