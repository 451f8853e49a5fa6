"""The Docker runtime against a real Docker engine (required in CI, skipped elsewhere)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from engine import (
    EvaluationFinished,
    Phase,
    PhaseFinished,
    PhaseStarted,
    Planned,
    Runner,
    RunSettings,
    Store,
    Task,
    Verdict,
    load_task,
)
from engine.runtimes.docker import OWNER_LABEL, DockerImage, DockerRuntime, docker_client
from engine.types import BuildRequest
from tests.conftest import FIXTURES, ROOT, MakeSubmission, run_engine

pytestmark = pytest.mark.usefixtures("docker_ready")


async def _anvil_containers() -> list[str]:
    client = await docker_client()
    try:
        found = await client.containers.list(
            all="true", filters=json.dumps({"label": [OWNER_LABEL]}))
        return [c["Names"][0] for c in found]
    finally:
        await client.close()


def anvil_containers() -> list[str]:
    return anyio.run(_anvil_containers)


@pytest.fixture(scope="module", autouse=True)
def leaves_no_container(docker_ready: None) -> Iterator[None]:
    yield
    assert anvil_containers() == [], "the docker tests left containers behind"


def task_with(tmp_path: Path, **service: object) -> Task:
    folder = tmp_path / "task"
    shutil.copytree(FIXTURES / "tiny_task", folder)
    toml = (folder / "task.toml").read_text()
    extra = "".join(f"{k} = {v!r}\n" for k, v in service.items())
    (folder / "task.toml").write_text(toml.replace("[service]\n", f"[service]\n{extra}"))
    return load_task(folder)


async def test_examples_get_the_same_verdicts_as_with_the_process_runtime(
    tmp_path: Path, cache_dir: Path
) -> None:
    examples = ROOT / "examples" / "taskboard"
    expected = tomllib.loads((examples / "EXPECTED.toml").read_text())
    folders = sorted(p for p in examples.iterdir() if p.is_dir())
    task = load_task(ROOT / "tasks" / "taskboard")
    pairs = [(task, f) for f in folders]
    on_docker, _, _ = await run_engine(pairs, tmp_path / "d", cache_dir, runtime="docker")
    on_process, _, _ = await run_engine(pairs, tmp_path / "p", cache_dir, runtime="process")

    def summary(r: EvaluationFinished) -> tuple[str, str | None, list[str]]:
        return (r.verdict.value, r.phase.value if r.phase else None,
                sorted({i.category or "" for i in r.items if not i.passed}))

    for folder, docker, process in zip(folders, on_docker, on_process, strict=True):
        assert summary(docker) == summary(process), (folder.name, docker.reason, process.reason)
        assert summary(docker)[:2] == (expected[folder.name]["verdict"],
                                       expected[folder.name].get("phase")), docker.reason


async def test_unchanged_submission_is_a_cache_hit(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    sub = make_submission("ok")
    (sub / "marker.txt").write_text(str(time.time_ns()))  # a context never built before
    async with DockerRuntime(tmp_path / "cache") as runtime:
        first = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / "b1.log"))
        second = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / "b2.log"))
        (sub / "marker.txt").write_text("changed")
        third = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / "b3.log"))
    assert isinstance(first, DockerImage) and isinstance(second, DockerImage)
    assert (first.cached, second.cached, second.tag) == (False, True, first.tag)
    assert "Step 1/" in (tmp_path / "b1.log").read_text()
    log = (tmp_path / "b2.log").read_text()
    assert "cache hit, no build step ran" in log and "Step" not in log
    assert isinstance(third, DockerImage) and third.tag != first.tag


async def test_concurrent_builds_of_one_context_build_once(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    sub = make_submission("ok")
    (sub / "marker.txt").write_text(str(time.time_ns()))
    async with DockerRuntime(tmp_path / "cache") as runtime:
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(runtime.build, BuildRequest(sub, tmp_path, tmp_path / f"{i}.log"))
    logs = [(tmp_path / f"{i}.log").read_text() for i in range(3)]
    assert sum("Step 1/" in log for log in logs) == 1
    assert sum("cache hit" in log for log in logs) == 2


async def _timed(task: Task, sub: Path, tmp_path: Path) -> tuple[EvaluationFinished, float]:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    marks: dict[str, float] = {}
    async with DockerRuntime(tmp_path / "cache") as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(task.root, sub, task)])

        async def watch(stream):  # type: ignore[no-untyped-def]
            async with stream:
                async for ev in stream:
                    if isinstance(ev, PhaseStarted) and ev.phase is Phase.STARTUP:
                        marks["start"] = time.monotonic()
                    if isinstance(ev, PhaseStarted) and ev.phase is Phase.TEARDOWN:
                        marks["failed"] = time.monotonic()

        (result,) = await runner.execute(run_id, [watch])
    return result, marks["failed"] - marks["start"]


async def test_container_exiting_at_start_is_failed_within_two_seconds(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path
) -> None:
    result, elapsed = await _timed(tiny_task, make_submission("crash"), tmp_path)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.STARTUP)
    assert "exited 3" in result.reason and "boom: missing configuration" in result.reason
    assert elapsed < 2.0  # the health deadline is 4 s: this came from the die event


async def test_memory_hog_is_failed_with_reason_oom(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    task = task_with(tmp_path, memory_mb=64)
    result, elapsed = await _timed(task, make_submission("oom"), tmp_path)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.STARTUP)
    assert "oom" in result.reason
    assert elapsed < 4.0


async def test_fork_bomb_is_contained_by_the_pid_limit(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    task = task_with(tmp_path, pids_limit=64)
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    worst = 0.0
    peak = before

    async def probe_host() -> None:
        nonlocal worst, peak
        while True:
            started = time.monotonic()
            await anyio.run_process([sys.executable, "-c", "pass"])
            worst = max(worst, time.monotonic() - started)
            peak = max(peak, len([p for p in os.listdir("/proc") if p.isdigit()]))
            await anyio.sleep(0.2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(probe_host)
        result, _ = await _timed(task, make_submission("forkbomb"), tmp_path)
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    assert result.verdict is not Verdict.ERROR, result.reason
    assert peak - before < 64 + 40  # the bomb never got past its pid limit
    assert worst < 3.0  # the machine stayed responsive


async def test_eight_evaluations_run_at_once_without_collision(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path
) -> None:
    subs = [make_submission("ok") for _ in range(8)]
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    live = peak = 0
    urls: set[str] = set()
    async with DockerRuntime(tmp_path / "cache") as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path, concurrency=8))
        run_id = await runner.start([Planned(tiny_task.root, s, tiny_task) for s in subs])

        async def watch(stream):  # type: ignore[no-untyped-def]
            nonlocal live, peak
            async with stream:
                async for ev in stream:
                    if isinstance(ev, PhaseStarted) and ev.phase is Phase.HEALTH:
                        live += 1
                        peak = max(peak, live)
                    elif isinstance(ev, PhaseStarted) and ev.phase is Phase.TEARDOWN:
                        live -= 1
                    elif isinstance(ev, PhaseFinished) and ev.phase is Phase.HEALTH:
                        urls.add(ev.message)

        results = await runner.execute(run_id, [watch])
    assert [r.verdict for r in results] == [Verdict.PASS] * 8, [r.reason for r in results]
    assert len(urls) == 8 and all("http://127.0.0.1:" in u for u in urls)
    assert peak > 1


def _spawn_docker_run(tmp_path: Path, make_submission: MakeSubmission) -> tuple[
        subprocess.Popen[str], Path]:
    for _ in range(3):
        make_submission("slow_item")
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", str(FIXTURES / "tiny_task"), "--submissions",
         str(tmp_path / "submissions"), "--runtime", "docker", "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while len(anvil_containers()) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "containers did not come up"
        time.sleep(0.2)
    return proc, home


def test_sigkill_then_gc_leaves_no_container(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    proc, home = _spawn_docker_run(tmp_path, make_submission)
    proc.kill()
    proc.communicate()
    assert len(anvil_containers()) >= 3  # orphans, until gc
    gc = subprocess.run([sys.executable, "-m", "engine", "gc", "--home", str(home)],
                        capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert anvil_containers() == []


def test_sigint_exits_130_and_leaves_no_container(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    proc, _home = _spawn_docker_run(tmp_path, make_submission)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert anvil_containers() == [], err


async def test_a_new_base_image_means_a_new_build(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    client = await docker_client()

    async def make_base(label: str) -> None:
        data = f"FROM python:3.11-slim\nLABEL anvil.test={label}\n".encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        await client.images.build(fileobj=buf, tag="anvil-test-base:1", encoding="identity")

    sub = make_submission("ok")
    (sub / "marker.txt").write_text(str(time.time_ns()))  # a context never built before
    text = (sub / "Dockerfile").read_text().replace("FROM python:3.11-slim",
                                                    "FROM anvil-test-base:1")
    (sub / "Dockerfile").write_text(text)
    try:
        await make_base(f"one-{time.time_ns()}")
        async with DockerRuntime(tmp_path / "cache") as runtime:
            first = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / "1.log"))
            await make_base(f"two-{time.time_ns()}")
            second = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / "2.log"))
        assert isinstance(first, DockerImage) and isinstance(second, DockerImage)
        assert not first.cached and not second.cached and first.tag != second.tag
    finally:
        with contextlib.suppress(Exception):
            await client.images.delete("anvil-test-base:1", force=True)
        await client.close()


async def test_gc_images_removes_least_recently_used_beyond_the_budget(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    from engine.runtimes.docker import gc_images, touch_image

    cache = tmp_path / "cache"
    tags = []
    async with DockerRuntime(cache) as runtime:
        for i in range(3):
            sub = make_submission("ok")
            (sub / "marker.txt").write_text(f"{i}-{time.time_ns()}")
            image = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / f"{i}.log"))
            assert isinstance(image, DockerImage)
            tags.append(image.tag)
    touch_image(cache, tags[1])  # used again: tags[0] is now the least recently used
    touch_image(cache, tags[2])
    client = await docker_client()
    try:
        size = int((await client.images.inspect(tags[2]))["Size"])
        removed = await gc_images(client, cache, budget_bytes=2 * size)
        names = [tag for tag, _ in removed]
        assert tags[0] in names and tags[1] not in names and tags[2] not in names
        for tag in tags[1:]:
            await client.images.inspect(tag)  # still there
    finally:
        await client.close()


async def test_oom_during_the_oracle_fails_it_with_reason_oom(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    task = task_with(tmp_path, memory_mb=64)
    (result,), _, _ = await run_engine([(task, make_submission("oom_on_slow"))], tmp_path,
                                       cache_dir, runtime="docker")
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.ORACLE)
    assert result.reason == "service oom during the oracle"


async def test_reaper_removes_containers_whose_lease_expired_or_owner_is_gone() -> None:
    from engine.runtimes.docker import reap_docker

    client = await docker_client()
    host = socket.gethostname()
    cases = {
        "expired": {OWNER_LABEL: "elsewhere:1", "anvil.lease": str(int(time.time()) - 5)},
        "owner-gone": {OWNER_LABEL: f"{host}:999999", "anvil.lease": str(2**40)},
        "alive": {OWNER_LABEL: f"{host}:{os.getpid()}", "anvil.lease": str(2**40)},
    }
    ids = {}
    try:
        for name, labels in cases.items():
            container = await client.containers.create(
                {"Image": "python:3.11-slim", "Cmd": ["sleep", "60"], "Labels": labels},
                name=f"anvil-reap-test-{name}-{time.time_ns()}")
            ids[name] = container.id
        removed = await reap_docker(client)
        remaining = {c.id for c in await client.containers.list(all="true")}
        assert ids["expired"] not in remaining and ids["owner-gone"] not in remaining
        assert ids["alive"] in remaining
        assert len([r for r in removed if "reap-test" in r]) == 2
    finally:
        await reap_docker(client, everything=True)
        await client.close()


@pytest.mark.parametrize(("mode", "reason"), [
    ("loopback", "listens on 127.0.0.1:8000 only"),
    ("wrong_port", "listens on port 8080"),
    ("silent", "never listened on port 8000"),
])
async def test_unreachable_service_is_explained_as_with_the_process_runtime(
    mode: str, reason: str, tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path,
    cache_dir: Path,
) -> None:
    (result,), _, _ = await run_engine([(tiny_task, make_submission(mode))], tmp_path,
                                       cache_dir, runtime="docker")
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.HEALTH)
    assert reason in result.reason


async def test_cmd_that_is_not_executable_fails_startup_like_the_process_runtime(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\nCMD [\"no-such-program\"]\n")
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir,
                                       runtime="docker")
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.STARTUP)
    assert "no-such-program" in result.reason
