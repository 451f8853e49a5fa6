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
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiodocker.events import DockerEvents

from engine import (
    EvaluationFinished,
    ExitInfo,
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
from engine.runtimes.docker import (
    OWNER_LABEL,
    SCOPE_ENV,
    SCOPE_LABEL,
    DockerImage,
    DockerRuntime,
    docker_client,
    recorded_images,
)
from engine.types import BuildRequest, StartRequest
from tests.conftest import FIXTURES, ROOT, MakeSubmission, run_engine

pytestmark = pytest.mark.usefixtures("docker_ready")


async def _anvil_containers(**labels: str) -> list[str]:
    """Names of this session's containers (its ``anvil.scope``), nobody else's."""
    wanted = [f"{SCOPE_LABEL}={os.environ[SCOPE_ENV]}", *(f"{k}={v}" for k, v in labels.items())]
    client = await docker_client()
    try:
        found = await client.containers.list(all="true", filters=json.dumps({"label": wanted}))
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
    lines = (folder / "task.toml").read_text().splitlines(keepends=True)
    toml = "".join(ln for ln in lines if ln.partition("=")[0].strip() not in service)
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


async def test_fork_bomb_fills_its_pid_limit_and_no_more(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    async with DockerRuntime(tmp_path / "cache") as runtime:
        image = await runtime.build(BuildRequest(make_submission("forkbomb"), tmp_path,
                                                 tmp_path / "build.log"))
        instance = await runtime.start(image, _start_request(tmp_path, pids_limit=64))
        try:
            container = runtime.docker.containers.container(  # type: ignore[union-attr]
                instance.container_id)  # type: ignore[attr-defined]
            with anyio.fail_after(20):
                while True:  # the bomb forks until the kernel refuses: wait for that
                    pids = (await container.stats(stream=False))[0]["pids_stats"]
                    assert pids["current"] <= pids["limit"] == 64
                    if pids["current"] == 64:
                        break
                    await anyio.sleep(0.1)
        finally:
            await runtime.stop(instance)
        pid = instance.pid  # type: ignore[attr-defined]
    assert pid and not Path(f"/proc/{pid}").exists()  # the whole container went with it
    assert await _anvil_containers() == []


async def test_eight_evaluations_run_four_at_once_without_collision(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path
) -> None:
    subs = [make_submission("ok") for _ in range(8)]
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    live = peak = daemon_peak = 0
    urls: set[str] = set()
    async with DockerRuntime(tmp_path / "cache") as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path, concurrency=4))
        run_id = await runner.start([Planned(tiny_task.root, s, tiny_task) for s in subs])

        async def watch(stream):  # type: ignore[no-untyped-def]
            nonlocal live, peak, daemon_peak
            async with stream:
                async for ev in stream:
                    if isinstance(ev, PhaseStarted) and ev.phase is Phase.HEALTH:
                        live += 1
                        peak = max(peak, live)
                        running = await _anvil_containers(**{"anvil.run": run_id})
                        daemon_peak = max(daemon_peak, len(running))
                    elif isinstance(ev, PhaseStarted) and ev.phase is Phase.TEARDOWN:
                        live -= 1
                    elif isinstance(ev, PhaseFinished) and ev.phase is Phase.HEALTH:
                        urls.add(ev.message)

        results = await runner.execute(run_id, [watch])
    assert [r.verdict for r in results] == [Verdict.PASS] * 8, [r.reason for r in results]
    assert len(urls) == 8 and all("http://127.0.0.1:" in u for u in urls)
    assert 1 < peak <= 4 and daemon_peak <= 4  # at once, and never more than --concurrency


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


async def _build_unique(runtime: DockerRuntime, make_submission: MakeSubmission,
                        tmp_path: Path, label: str) -> str:
    sub = make_submission("ok")
    (sub / "marker.txt").write_text(f"{label}-{time.time_ns()}")  # a context never built
    image = await runtime.build(BuildRequest(sub, tmp_path, tmp_path / f"{label}.log"))
    assert isinstance(image, DockerImage) and not image.cached
    return image.tag


async def test_gc_images_removes_this_homes_least_recently_used_beyond_the_budget(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    from engine.runtimes.docker import gc_images, touch_image

    mine, other = tmp_path / "home" / "cache", tmp_path / "other-home" / "cache"
    client = await docker_client()
    try:
        async with DockerRuntime(mine) as runtime:
            tags = [await _build_unique(runtime, make_submission, tmp_path, f"m{i}")
                    for i in range(3)]
        async with DockerRuntime(other) as runtime:
            foreign = await _build_unique(runtime, make_submission, tmp_path, "other")
        assert set(recorded_images(mine)) == set(tags)  # what this home built, nothing else
        touch_image(mine, tags[1])  # used again: tags[0] is now the least recently used
        touch_image(mine, tags[2])
        size = int((await client.images.inspect(tags[2]))["Size"])
        removed = await gc_images(client, mine, budget_bytes=2 * size)
        assert [tag for tag, _ in removed] == [tags[0]]
        assert set(recorded_images(mine)) == set(tags[1:])
        for tag in (*tags[1:], foreign):
            await client.images.inspect(tag)  # still there
        # A budget of nothing empties this home, and only this home.
        removed = await gc_images(client, mine, budget_bytes=0)
        assert sorted(tag for tag, _ in removed) == sorted(tags[1:])
        assert recorded_images(mine) == {}
        await client.images.inspect(foreign)
        assert [t for t, _ in await gc_images(client, other, budget_bytes=0)] == [foreign]
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


async def test_reaper_removes_its_scopes_containers_whose_lease_expired_or_owner_is_gone(
    anvil_scope: str,
) -> None:
    from engine.runtimes.docker import reap_docker

    client = await docker_client()
    host = socket.gethostname()
    mine = {SCOPE_LABEL: anvil_scope}
    expired = {OWNER_LABEL: "elsewhere:1", "anvil.lease": str(int(time.time()) - 5)}
    cases = {
        "expired": {**mine, **expired},
        "owner-gone": {**mine, OWNER_LABEL: f"{host}:999999", "anvil.lease": str(2**40)},
        "alive": {**mine, OWNER_LABEL: f"{host}:{os.getpid()}", "anvil.lease": str(2**40)},
        # Another run's orphan on the same daemon: not this session's to remove.
        "other-scope": {SCOPE_LABEL: f"{anvil_scope}-other", **expired},
    }
    ids = {}
    try:
        for name, labels in cases.items():
            container = await client.containers.create(
                {"Image": "python:3.11-slim", "Cmd": ["sleep", "60"], "Labels": labels},
                name=f"anvil-reap-test-{name}-{time.time_ns()}")
            ids[name] = container.id
        removed = await reap_docker(client)  # the scope comes from ANVIL_SCOPE
        remaining = {c.id for c in await client.containers.list(all="true")}
        assert ids["expired"] not in remaining and ids["owner-gone"] not in remaining
        assert ids["alive"] in remaining and ids["other-scope"] in remaining
        assert sorted(r.split("-")[3] for r in removed) == ["expired", "owner"]
        removed = await reap_docker(client, everything=True)
        assert [r.split("-")[3] for r in removed] == ["alive"]
        remaining = {c.id for c in await client.containers.list(all="true")}
        assert ids["other-scope"] in remaining
    finally:
        for container_id in ids.values():  # what this test made, and nothing else
            with contextlib.suppress(Exception):
                await client.containers.container(container_id).delete(force=True)
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


def _start_request(tmp_path: Path, **limits: Any) -> StartRequest:
    lease = str(int(time.time()) + 300)
    return StartRequest(port=8000, env={}, workdir=tmp_path, log_path=tmp_path / "service.log",
                        log_cap=2**20, labels={"anvil.evaluation": "direct", "anvil.lease": lease},
                        **limits)


async def _container_events(since: float) -> list[tuple[str, str]]:
    """(action, id) of this session's container creations and removals from ``since`` to now,
    read back from the daemon's own event log."""
    filters = {"type": ["container"], "event": ["create", "destroy"],
               "label": [f"{SCOPE_LABEL}={os.environ[SCOPE_ENV]}"]}
    client = await docker_client()
    try:
        events = DockerEvents(client)  # type: ignore[no-untyped-call]
        subscriber = events.subscribe(create_task=False)  # type: ignore[no-untyped-call]
        await events.run(since=f"{since:.3f}", until=f"{time.time():.3f}",
                         filters=json.dumps(filters))
        found = []
        while (event := await subscriber.get()) is not None:
            found.append((event["Action"], event["Actor"]["ID"]))
        return found
    finally:
        await client.close()


async def _run_watching(
    task: Task, sub: Path, tmp_path: Path, on_event: Callable[[Any], Awaitable[None]]
) -> EvaluationFinished:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with DockerRuntime(tmp_path / "cache") as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path))
        run_id = await runner.start([Planned(task.root, sub, task)])

        async def watch(stream):  # type: ignore[no-untyped-def]
            async with stream:
                async for ev in stream:
                    await on_event(ev)

        (result,) = await runner.execute(run_id, [watch])
    return result


async def _inspect_running(evaluation_id: str) -> dict[str, Any]:
    """What the daemon and the kernel say about the evaluation's running container."""
    (name,) = await _anvil_containers(**{"anvil.evaluation": evaluation_id})
    client = await docker_client()
    try:
        container = client.containers.container(name.lstrip("/"))
        info = await container.show()
        stats = (await container.stats(stream=False))[0]
        status = Path(f"/proc/{info['State']['Pid']}/status").read_text()
        (binding,) = info["NetworkSettings"]["Ports"]["8000/tcp"]
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{binding['HostPort']}/health") as resp:
            health = resp.status
    finally:
        await client.close()
    proc = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    return {"host": info["HostConfig"], "binding": binding, "stats": stats, "proc": proc,
            "health": health}


@pytest.mark.parametrize("limits", [{}, {"memory_mb": 200, "cpus": 0.5, "pids_limit": 100}],
                         ids=["task.toml defaults", "task.toml limits"])
async def test_a_running_container_is_locked_down_as_the_readme_promises(
    limits: dict[str, Any], make_submission: MakeSubmission, tmp_path: Path
) -> None:
    task = task_with(tmp_path, **limits)
    want = {"memory_mb": 1024, "cpus": 1.0, "pids_limit": 256, **limits}  # README's defaults
    seen: dict[str, Any] = {}

    async def inspect(ev: Any) -> None:
        if isinstance(ev, PhaseStarted) and ev.phase is Phase.ORACLE:  # up: slow_item stalls
            seen.update(await _inspect_running(ev.evaluation_id))

    result = await _run_watching(task, make_submission("slow_item"), tmp_path, inspect)
    assert result.phase is Phase.ORACLE, result.reason  # the container lived through it
    host, stats, proc = seen["host"], seen["stats"], seen["proc"]
    memory = want["memory_mb"] * 2**20
    assert (host["Memory"], host["MemorySwap"], stats["memory_stats"]["limit"]) == (memory,) * 3
    assert host["NanoCpus"] == int(want["cpus"] * 1e9)
    assert host["PidsLimit"] == stats["pids_stats"]["limit"] == want["pids_limit"]
    assert "no-new-privileges" in host["SecurityOpt"] and proc["NoNewPrivs"] == "1"
    assert host["CapDrop"] == ["ALL"] and int(proc["CapEff"], 16) == 0  # no capability left
    assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}
    assert seen["binding"]["HostIp"] == "127.0.0.1" and seen["health"] == 200
    assert await _anvil_containers() == []


@pytest.mark.parametrize(("setting", "mode", "verdict", "phase", "reason"), [
    # Creating and starting the container is the daemon's work: past its deadline it is
    # anvil's `error` (retried), never the candidate's `fail`.
    ({"startup_timeout": 0.01}, "ok", Verdict.ERROR, Phase.STARTUP,
     "startup timed out after 0.01s"),
    ({"health_timeout": 1}, "silent", Verdict.FAIL, Phase.HEALTH, "no HTTP answer within 1s"),
], ids=["startup", "health"])
async def test_a_phase_past_its_deadline_ends_and_its_container_is_gone(
    setting: dict[str, float], mode: str, verdict: Verdict, phase: Phase, reason: str,
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    task = task_with(tmp_path, **setting)
    since = time.time()
    (result,), _, _ = await run_engine([(task, make_submission(mode))], tmp_path, cache_dir,
                                       runtime="docker", retry_delay=0)
    assert (result.verdict, result.phase) == (verdict, phase)
    assert reason in result.reason
    events = await _container_events(since)
    created = {cid for action, cid in events if action == "create"}
    assert created and created == {cid for action, cid in events if action == "destroy"}
    assert await _anvil_containers() == []


async def test_a_teardown_past_its_deadline_keeps_the_verdict_and_the_container_goes(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    task = task_with(tmp_path, teardown_timeout=0.001)
    since = time.time()
    teardown: list[PhaseFinished] = []

    async def record(ev: Any) -> None:
        if isinstance(ev, PhaseFinished) and ev.phase is Phase.TEARDOWN:
            teardown.append(ev)

    result = await _run_watching(task, make_submission("ok"), tmp_path, record)
    assert result.verdict is Verdict.PASS, result.reason
    assert [(t.ok, t.message) for t in teardown] == [(False, "timed out after 0.001s")]
    events = await _container_events(since)
    created = {cid for action, cid in events if action == "create"}
    assert len(created) == 1 and created == {cid for action, cid in events
                                             if action == "destroy"}
    assert await _anvil_containers() == []


async def test_a_container_killed_from_outside_ends_its_instance_by_event(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    async with DockerRuntime(tmp_path / "cache") as runtime:
        image = await runtime.build(BuildRequest(make_submission("ok"), tmp_path,
                                                 tmp_path / "build.log"))
        instance = await runtime.start(image, _start_request(tmp_path))
        try:
            await instance.wait_listening()
            client = await docker_client()
            try:
                await client.containers.container(
                    instance.container_id).kill(signal="SIGKILL")  # type: ignore[attr-defined]
            finally:
                await client.close()
            # Nothing polls the container: only its die event can end the wait.
            with anyio.fail_after(5):
                info = await instance.wait_exit()
        finally:
            await runtime.stop(instance)
    # killed through Docker by someone but anvil: not the service's exit, the harness's
    assert info == ExitInfo(137, "was killed through the Docker API (signal 9)", harness=True)
    assert await _anvil_containers() == []


async def test_a_service_that_floods_then_crashes_shows_its_last_lines(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    cap = 64 * 1024
    program = ("import sys; [print('flood', i, 'x' * 1000) for i in range(2000)]; "
               "print('last words: the database is gone'); sys.exit(4)")
    cmd = json.dumps(["python", "-c", program])
    sub = make_submission("ok", dockerfile=f"FROM python:3.11-slim\nCMD {cmd}\n")
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir,
                                       runtime="docker", log_cap=cap)
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.STARTUP)
    assert "exited 4" in result.reason and "last words: the database is gone" in result.reason
    (log,) = tmp_path.rglob("service.log")
    text = log.read_text()
    assert text.startswith("flood 0 x") and f"[anvil: log capped at {cap} bytes" in text
    assert text.endswith("flood 1999 " + "x" * 1000 + "\nlast words: the database is gone\n")
    assert log.stat().st_size <= cap + 200  # head, marker and tail: the cap holds
