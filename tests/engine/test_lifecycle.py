"""Each phase failure yields its verdict, with real processes and real HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from engine import (
    EvaluationFinished,
    Event,
    HarnessError,
    Phase,
    PhaseStarted,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
    Unsupported,
    Verdict,
    load_task,
)
from engine._reaper import marked_processes
from engine.types import Artifact, BuildRequest, Instance
from tests.conftest import FIXTURES, MakeSubmission, run_engine
from tests.engine.test_promises import run_watched


async def test_passing_submission_gets_pass_with_every_item(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    (result,), _store, _ = await run_engine([(tiny_task, make_submission("ok"))], tmp_path,
                                            cache_dir)
    assert result.verdict is Verdict.PASS, result.reason
    assert result.phase is None
    assert result.items_passed == 4 and result.items_failed == 0


@pytest.mark.parametrize(
    ("mode", "phase", "reason"),
    [
        ("crash", Phase.STARTUP, "exited 3"),
        ("silent", Phase.HEALTH, "never listened on port 8000"),
        ("wrong_port", Phase.HEALTH, "listens on port 8080"),
        ("loopback", Phase.HEALTH, "listens on 127.0.0.1:8000 only"),
    ],
)
async def test_service_failures_fail_at_their_phase(
    mode: str, phase: Phase, reason: str, tiny_task: Task, make_submission: MakeSubmission,
    tmp_path: Path, cache_dir: Path,
) -> None:
    (result,), _, _ = await run_engine([(tiny_task, make_submission(mode))], tmp_path, cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, phase)
    assert reason in result.reason


async def test_crash_reason_quotes_the_service_log(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    (result,), _, _ = await run_engine([(tiny_task, make_submission("crash"))], tmp_path,
                                       cache_dir)
    assert "boom: missing configuration" in result.reason


async def test_submission_without_dockerfile_fails_build_naming_the_file(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").unlink()
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.BUILD)
    assert str(sub / "Dockerfile") in result.reason


async def test_not_runnable_cmd_fails_startup(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\nCMD [\"no-such-program\"]\n")
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.STARTUP)
    assert "no-such-program" in result.reason


async def test_failing_items_fail_oracle_with_their_categories(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    (result,), _, _ = await run_engine([(tiny_task, make_submission("fail_item"))], tmp_path,
                                       cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.ORACLE)
    failed = [i for i in result.items if not i.passed]
    assert [i.nodeid for i in failed] == ["test_tiny.py::test_put_then_get"]
    assert failed[0].category == "state"
    assert failed[0].message.splitlines()[:2] == [
        'AssertionError: {"detail": "not found"}', "assert 404 == 200"]


async def test_hanging_item_is_bounded_by_the_item_deadline(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    started = time.monotonic()
    (result,), _, _ = await run_engine([(tiny_task, make_submission("slow_item"))], tmp_path,
                                       cache_dir)
    assert time.monotonic() - started < 30  # the service sleeps 60 s in that item
    (slow,) = [i for i in result.items if not i.passed]
    assert slow.nodeid.endswith("test_slow_answers")
    assert "timed out after 2s" in slow.message
    assert result.items_passed == 3


async def test_oracle_that_does_not_import_is_an_error_reported_once(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    task_dir = tmp_path / "broken-task"
    import shutil

    shutil.copytree(FIXTURES / "tiny_task", task_dir)
    (task_dir / "oracle" / "test_broken.py").write_text("import no_such_module_xyz\n")
    task = load_task(task_dir)
    (result,), store, run_id = await run_engine([(task, make_submission("ok"))], tmp_path,
                                                cache_dir)
    assert result.verdict is Verdict.ERROR
    assert result.attempt == 1  # deterministic: another attempt could not help
    assert "test_broken.py" in result.reason and "no_such_module_xyz" in result.reason
    (row,) = store.evaluations(run_id)
    assert (row.verdict, row.attempt, row.status) == ("error", 1, "done")


async def test_flooding_service_is_capped_and_still_judged(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    cap = 64 * 1024
    (result,), _, _ = await run_engine([(tiny_task, make_submission("flood"))], tmp_path,
                                       cache_dir, log_cap=cap)
    assert result.verdict is Verdict.PASS, result.reason
    (log,) = (tmp_path / "runs").glob("*/*/service.log")
    assert cap * 0.8 <= log.stat().st_size <= cap + 200  # the tail keeps whole chunks
    head, marker, tail = log.read_text().partition(f"[anvil: log capped at {cap} bytes:")
    assert marker and len(head) >= cap // 2 - 100
    assert len(tail) >= cap // 4  # the latest lines are kept after the marker


async def test_teardown_kills_the_whole_process_group(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("child")
    pid_file = tmp_path / "child.pid"
    dockerfile = (sub / "Dockerfile").read_text()
    (sub / "Dockerfile").write_text(dockerfile.replace(
        "EXPOSE", f"ENV CHILD_PID_FILE={pid_file}\nEXPOSE"))
    # Checked when the verdict is published: the runtime is still open, so its own close
    # (which ends whatever is left) cannot hide a teardown that missed the grandchild.
    watched = await run_watched(tiny_task, sub, tmp_path, cache_dir)
    assert watched.result is not None and watched.result.verdict is Verdict.PASS
    child = int(pid_file.read_text())
    assert child in watched.alive_after[Phase.ORACLE]
    assert watched.alive_at_finish == []


async def test_crashed_service_is_noticed_within_two_seconds(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """The health deadline is 4 s; the exit must be seen long before it."""
    sub = make_submission("crash")
    # Warm the (empty) venv so the measurement covers startup and health only.
    await run_engine([(tiny_task, make_submission("ok"))], tmp_path / "warm", cache_dir)
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    seen: dict[Phase, float] = {}
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(tiny_task.root, sub, tiny_task)])

        async def watch(stream):  # type: ignore[no-untyped-def]
            async with stream:
                async for event in stream:
                    if isinstance(event, PhaseStarted):
                        seen[event.phase] = time.monotonic()
                    if isinstance(event, EvaluationFinished):
                        seen[Phase.TEARDOWN] = time.monotonic()

        (result,) = await runner.execute(run_id, [watch])
    assert result.phase is Phase.STARTUP
    assert seen[Phase.TEARDOWN] - seen[Phase.STARTUP] < 2.0


async def test_cancelled_run_tears_down_every_service(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    subs = [make_submission("slow_item") for _ in range(3)]
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(tiny_task.root, s, tiny_task) for s in subs])
        oracles_started = 0
        alive_at_cancel: list[int] = []

        async def cancel_in_oracle(stream):  # type: ignore[no-untyped-def]
            nonlocal oracles_started
            async with stream:
                async for event in stream:
                    if isinstance(event, PhaseStarted) and event.phase is Phase.ORACLE:
                        oracles_started += 1
                        if oracles_started == len(subs):
                            alive_at_cancel.extend(
                                p.pid for p in marked_processes() if p.run_id == run_id)
                            runner.cancel()

        with anyio.fail_after(60):
            results = await runner.execute(run_id, [cancel_in_oracle])
        # Before the runtime closes (its close would end whatever teardown missed).
        left = [p for p in marked_processes() if p.run_id == run_id]
    assert runner.interrupted and results == []
    assert len(alive_at_cancel) >= len(subs) and left == []
    rows = store.evaluations(run_id)
    assert {r.status for r in rows} == {"running"} and all(r.verdict is None for r in rows)
    assert store.run(run_id).status == "interrupted"  # type: ignore[union-attr]


async def test_service_dying_mid_oracle_fails_the_oracle_at_once(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    (result,), _, _ = await run_engine([(tiny_task, make_submission("die_on_slow"))], tmp_path,
                                       cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.ORACLE)
    assert result.reason == "service exited 5 during the oracle"
    assert result.items_passed == 3  # the items before it are kept


class FlakyBuild(ProcessRuntime):
    """The real process runtime with one injected harness fault at the first build."""

    def __init__(self, cache_dir: Path, fault: Exception) -> None:
        super().__init__(cache_dir)
        self.fault: Exception | None = fault
        self.builds = 0

    async def build(self, request: BuildRequest) -> Artifact:
        self.builds += 1
        if self.fault is not None:
            fault, self.fault = self.fault, None
            raise fault
        return await super().build(request)


async def _run_with(runtime: ProcessRuntime, task: Task, sub: Path,
                    home: Path) -> EvaluationFinished:
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    async with runtime:
        runner = Runner(store, runtime, RunSettings(home=home, retry_delay=0))
        run_id = await runner.start([Planned(task.root, sub, task)])
        (result,) = await runner.execute(run_id)
    store.close()
    return result


async def test_a_transient_harness_fault_is_retried_and_the_retry_decides(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    runtime = FlakyBuild(cache_dir, HarnessError("No space left on device"))
    result = await _run_with(runtime, tiny_task, make_submission("ok"), tmp_path)
    assert (result.verdict, result.attempt, runtime.builds) == (Verdict.PASS, 2, 2)


async def test_a_deterministic_refusal_is_reported_once(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    runtime = FlakyBuild(cache_dir, Unsupported("Dockerfile:3: cannot emulate RUN apt-get"))
    result = await _run_with(runtime, tiny_task, make_submission("ok"), tmp_path)
    assert (result.verdict, result.attempt, runtime.builds) == (Verdict.ERROR, 1, 1)
    assert "cannot emulate" in result.reason


async def test_a_failed_health_probe_says_what_it_got(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    """A service answering 500 on the health path has answered: the reason says so."""
    import shutil

    task_dir = tmp_path / "task-500"
    shutil.copytree(FIXTURES / "tiny_task", task_dir)
    toml = (task_dir / "task.toml").read_text()
    (task_dir / "task.toml").write_text(toml.replace('health_path = "/health"',
                                                     'health_path = "/items/none"'))
    (result,), _, _ = await run_engine([(load_task(task_dir), make_submission("ok"))],
                                       tmp_path, cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.HEALTH)
    assert "no healthy answer" in result.reason and "answered 404" in result.reason


class BrokenStop(ProcessRuntime):
    """The real process runtime whose stop fails after stopping (a fault inside teardown)."""

    async def stop(self, instance: Instance) -> None:
        await super().stop(instance)
        raise HarnessError("the runtime failed while stopping")


async def test_a_teardown_fault_during_a_cancel_does_not_replace_the_cancel(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """Ctrl-C mid-oracle, and teardown fails: the run is interrupted (resumable), not
    scored `error` by the teardown fault."""
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with BrokenStop(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(tiny_task.root, make_submission("slow_item"),
                                             tiny_task)])

        async def cancel_at_oracle(stream: MemoryObjectReceiveStream[Event]) -> None:
            async with stream:
                async for event in stream:
                    if isinstance(event, PhaseStarted) and event.phase is Phase.ORACLE:
                        runner.cancel()

        with anyio.fail_after(60):
            results = await runner.execute(run_id, [cancel_at_oracle])
    assert runner.interrupted and results == []
    (row,) = store.evaluations(run_id)
    assert row.status != "done" and row.verdict is None  # `--resume` redoes it
