"""The process runtime with real processes: port sharing, venv cache, Dockerfile subset."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from engine import BuildFailed, HarnessError, Phase, PhaseStarted, ProcessRuntime, Verdict
from engine.runtimes.process import BASE_PATH, PreparedService
from engine.types import BuildRequest
from tests.conftest import MakeSubmission, run_engine


async def test_ten_services_hard_coding_port_8000_run_at_once(
    tiny_task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    subs = [make_submission("ok") for _ in range(10)]
    results, _, _ = await run_engine([(tiny_task, s) for s in subs], tmp_path, cache_dir,
                                     concurrency=10)
    assert [r.verdict for r in results] == [Verdict.PASS] * 10, [r.reason for r in results]
    # They really ran side by side: ten distinct loopback ports were bound for 8000.
    ports = set()
    for binds in (tmp_path / "runs").glob("*/*/binds.txt"):
        (line,) = [ln for ln in binds.read_text().splitlines() if ln.split()[2] == "4"]
        asked, real, _family, scope = line.split()
        assert (asked, scope) == ("8000", "any")
        ports.add(real)
    assert len(ports) == 10


async def test_services_overlap_in_time(
    tiny_task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    from engine import Planned, Runner, RunSettings, Store

    subs = [make_submission("ok") for _ in range(4)]
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live, peak = 0, 0
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path, concurrency=4))
        run_id = await runner.start([Planned(tiny_task.root, s, tiny_task) for s in subs])

        async def count(stream):  # type: ignore[no-untyped-def]
            nonlocal live, peak
            async with stream:
                async for ev in stream:
                    if isinstance(ev, PhaseStarted) and ev.phase is Phase.STARTUP:
                        live += 1
                        peak = max(peak, live)
                    elif isinstance(ev, PhaseStarted) and ev.phase is Phase.TEARDOWN:
                        live -= 1

        await runner.execute(run_id, [count])
    assert peak > 1


async def test_same_requirements_share_one_venv_built_once(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    subs = []
    for _ in range(3):
        sub = make_submission("ok")
        (sub / "requirements.txt").write_text("# nothing to install\n")
        text = (sub / "Dockerfile").read_text().replace(
            "COPY server.py .", "COPY requirements.txt .\nRUN pip install -r requirements.txt\n"
            "COPY server.py .")
        (sub / "Dockerfile").write_text(text)
        subs.append(sub)
    cache = tmp_path / "cache"
    async with ProcessRuntime(cache) as runtime:
        artifacts = []
        async with anyio.create_task_group() as tg:
            for i, sub in enumerate(subs):
                work = tmp_path / f"w{i}"
                work.mkdir()

                async def build(sub: Path = sub, work: Path = work) -> None:
                    artifacts.append(await runtime.build(
                        BuildRequest(submission=sub, workdir=work, log_path=work / "build.log")))

                tg.start_soon(build)
    venvs = {a.venv for a in artifacts if isinstance(a, PreparedService)}
    assert len(venvs) == 1 and len(list((cache / "venvs").glob("*/.anvil-complete"))) == 1
    logs = [(tmp_path / f"w{i}" / "build.log").read_text() for i in range(3)]
    assert sum("creating" in log for log in logs) == 1
    assert sum("cache hit" in log for log in logs) == 2


@pytest.mark.parametrize(
    ("dockerfile", "error", "message"),
    [
        ("FROM python:3.11-slim\nRUN apt-get install -y curl\nCMD [\"python\", \"server.py\"]\n",
         HarnessError, "Dockerfile:2: the process runtime only emulates"),
        ("FROM python:3.11-slim\nCOPY missing.py .\nCMD [\"python\", \"server.py\"]\n",
         BuildFailed, "Dockerfile:2: COPY failed: missing.py not found"),
        ("WORKDIR /app\nCMD [\"python\", \"server.py\"]\n",
         BuildFailed, "the first instruction must be FROM"),
        ("FROM python:3.11-slim\nCOPY . .\n", BuildFailed, "no CMD or ENTRYPOINT"),
        ("FROM python:3.11-slim\nCOPY . .\nRUN pip install no-such-package-anvil-test==0.0.0\n"
         "CMD [\"python\", \"server.py\"]\n", BuildFailed, "Dockerfile:3: `pip install` failed"),
    ],
)
async def test_build_errors_name_the_file_and_line(
    dockerfile: str, error: type[Exception], message: str, make_submission: MakeSubmission,
    tmp_path: Path,
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text(dockerfile)
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        with pytest.raises(error) as info:
            await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                             log_path=tmp_path / "build.log"))
    assert message in str(info.value)


async def test_dockerfile_subset_is_emulated(make_submission: MakeSubmission,
                                             tmp_path: Path) -> None:
    sub = make_submission("ok")
    (sub / "conf").mkdir()
    (sub / "conf" / "a.txt").write_text("a")
    (sub / "Dockerfile").write_text(
        "# comment\nFROM python:3.11-slim AS base\nARG X=1\nWORKDIR /srv\nWORKDIR app\n"
        "COPY --chown=app:app server.py ./\nCOPY conf /etc/svc/\n"
        "ENV A=1 B=\"two words\"\nENV LEGACY some value\nRUN mkdir -p /data && \\\n"
        "    pip install --upgrade pip\nUSER app\nEXPOSE 8000\n"
        "ENTRYPOINT [\"python\"]\nCMD [\"/srv/app/server.py\"]\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                               log_path=tmp_path / "build.log"))
    assert isinstance(art, PreparedService)
    assert art.workdir == tmp_path / "root" / "srv" / "app"
    assert (art.workdir / "server.py").is_file()
    assert (tmp_path / "root" / "etc" / "svc" / "a.txt").read_text() == "a"
    assert (tmp_path / "root" / "data").is_dir()
    assert art.env == {"PATH": BASE_PATH, "A": "1", "B": "two words", "LEGACY": "some value"}
    assert art.argv == ["python", str(tmp_path / "root" / "srv" / "app" / "server.py")]


async def test_exit_of_a_started_service_is_seen_at_once(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    from engine.types import StartRequest

    sub = make_submission("crash")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                               log_path=tmp_path / "build.log"))
        started = time.monotonic()
        inst = await runtime.start(art, StartRequest(
            port=8000, env={}, workdir=tmp_path, log_path=tmp_path / "svc.log", log_cap=1000))
        with anyio.fail_after(5):
            info = await inst.wait_exit()
        assert time.monotonic() - started < 2
        assert (info.returncode, info.reason) == (3, "exited 3")
        await runtime.stop(inst)
        await runtime.stop(inst)  # stop is idempotent


async def test_an_error_inside_the_runtime_leaves_as_itself(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="boom"):
        async with ProcessRuntime(tmp_path / "cache"):
            raise HarnessError("boom")
