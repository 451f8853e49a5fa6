"""One conformance suite for every installed runtime (bundled or plug-in): what the
lifecycle relies on. A third-party runtime passes the same checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import anyio
import pytest
from aiohttp import web

import plugins
from engine import ServiceExited
from engine.runtimes import runtime_factory
from engine.runtimes._choose import BUILTIN
from engine.types import BuildRequest, Instance, Runtime, StartRequest
from tests.conftest import MakeSubmission

NAMES = sorted(plugins.available(plugins.RUNTIMES, BUILTIN))


@pytest.fixture(params=NAMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    if name == "docker":
        request.getfixturevalue("docker_ready")
    return name


@asynccontextmanager
async def opened(name: str, cache_dir: Path) -> AsyncIterator[Runtime]:
    async with runtime_factory(name)(cache_dir) as runtime:
        yield runtime


async def started(runtime: Runtime, sub: Path, work: Path,
                  env: dict[str, str] | None = None) -> Instance:
    work.mkdir(parents=True, exist_ok=True)
    artifact = await runtime.build(BuildRequest(sub, work, work / "build.log"))
    assert artifact.description
    return await runtime.start(artifact, StartRequest(
        port=8000, env=env or {}, workdir=work, log_path=work / "service.log",
        log_cap=1 << 20, labels={"anvil.run": "conformance", "anvil.evaluation": work.name}))


async def get(url: str) -> tuple[int, object]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(url) as resp:
            return resp.status, await resp.json()


async def answering(url: str) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                await get(url)
                return
            except aiohttp.ClientError:
                await anyio.sleep(0.1)


async def test_build_start_answer_stop(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    async with opened(runtime_name, cache_dir) as runtime:
        instance = await started(runtime, make_submission("ok"), tmp_path / "w")
        try:
            with anyio.fail_after(30):
                base = await instance.wait_listening()
            assert base.startswith("http://127.0.0.1:") or base.startswith("http://[::1]:")
            await answering(base + "/health")
            assert await get(base + "/health") == (200, {"status": "ok"})
        finally:
            await runtime.stop(instance)
        await runtime.stop(instance)  # stopping twice is safe
        with anyio.fail_after(10):
            await instance.wait_exit()
        with pytest.raises(aiohttp.ClientError):
            await get(base + "/health")


async def test_an_exit_is_noticed_by_event_with_the_log(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    async with opened(runtime_name, cache_dir) as runtime:
        instance = await started(runtime, make_submission("crash"), tmp_path / "w")
        try:
            with anyio.fail_after(15):  # far below any health deadline: no polling to it
                info = await instance.wait_exit()
            assert info.returncode == 3 and "3" in info.reason
            assert "boom: missing configuration" in (tmp_path / "w" / "service.log").read_text()
        finally:
            await runtime.stop(instance)


async def test_a_server_on_listen_host_is_reachable_from_the_service(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """What the mock fabric relies on: anvil listens on ``listen_host`` and hands the
    service ``reachable_url(...)``; the service calls it from wherever it runs."""

    async def hello(_request: web.Request) -> web.Response:
        return web.json_response({"hello": "from the provider"})

    app = web.Application()
    app.router.add_get("/hello", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    async with opened(runtime_name, cache_dir) as runtime:
        site = web.TCPSite(runner, runtime.listen_host, 0)
        await site.start()
        try:
            port = runner.addresses[0][1]
            url = runtime.reachable_url(f"http://{runtime.listen_host}:{port}")
            instance = await started(runtime, make_submission("ok"), tmp_path / "w",
                                     {"RELAY_URL": url})
            try:
                base = await instance.wait_listening()
                await answering(base + "/health")
                assert await get(base + "/relay") == (200, {"hello": "from the provider"})
            finally:
                await runtime.stop(instance)
        finally:
            await runner.cleanup()


async def test_a_command_that_cannot_run_fails_startup(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text('FROM python:3.11-slim\nCMD ["/no/such/program"]\n')
    async with opened(runtime_name, cache_dir) as runtime:
        try:
            instance = await started(runtime, sub, tmp_path / "w")
        except ServiceExited:
            return  # refused at start: fine
        try:
            with anyio.fail_after(15):
                info = await instance.wait_exit()
            assert info.returncode not in (0, None)
        finally:
            await runtime.stop(instance)


def test_every_runtime_declares_what_auto_needs() -> None:
    for name in NAMES:
        factory = runtime_factory(name)
        assert factory.name == name and isinstance(factory.priority, int)


async def test_a_service_past_its_memory_limit_ends(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """``memory_mb`` is a limit: a container is OOM-killed, a process gets MemoryError."""
    work = tmp_path / "w"
    work.mkdir()
    async with opened(runtime_name, cache_dir) as runtime:
        artifact = await runtime.build(BuildRequest(make_submission("oom"), work,
                                                    work / "build.log"))
        instance = await runtime.start(artifact, StartRequest(
            port=8000, env={}, workdir=work, log_path=work / "service.log", log_cap=1 << 20,
            labels={"anvil.run": "conformance", "anvil.evaluation": "oom"}, memory_mb=64))
        try:
            with anyio.fail_after(30):
                info = await instance.wait_exit()
            assert info.returncode not in (0, None), info
        finally:
            await runtime.stop(instance)


REAP_SCRIPT = """
import sys, anyio
from pathlib import Path
from engine.runtimes import runtime_factory
from engine.types import BuildRequest, StartRequest
from engine._reaper import owner_env

async def main(name, sub, work, cache):
    work = Path(work)
    async with runtime_factory(name)(Path(cache)) as runtime:
        art = await runtime.build(BuildRequest(Path(sub), work, work / "build.log"))
        inst = await runtime.start(art, StartRequest(
            port=8000, env=owner_env("reap-test"), workdir=work,
            log_path=work / "service.log", log_cap=1 << 20,
            labels={"anvil.run": "reap-test", "anvil.evaluation": "reap"}))
        print(await inst.wait_listening(), flush=True)
        await anyio.sleep_forever()

anyio.run(main, *sys.argv[1:])
"""


def test_what_a_killed_anvil_left_is_reaped_by_gc(
    runtime_name: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """kill -9 of the anvil that started a service, then `anvil gc`: the service is gone."""
    import os
    import signal
    import subprocess
    import sys

    work = tmp_path / "w"
    work.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", REAP_SCRIPT, runtime_name, str(make_submission("ok")),
         str(work), str(cache_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        base = holder.stdout.readline().strip()
        assert base.startswith("http://"), "the service did not start"
        anyio.run(answering, base + "/health")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()  # reaps it and closes its pipe
    gc = subprocess.run([sys.executable, "-m", "engine", "gc"], capture_output=True,
                        text=True, timeout=120, env=os.environ)
    assert gc.returncode == 0, gc.stderr

    async def gone() -> None:
        with anyio.fail_after(15):
            while True:
                try:
                    await get(base + "/health")
                except aiohttp.ClientError:
                    return
                await anyio.sleep(0.1)

    anyio.run(gone)
