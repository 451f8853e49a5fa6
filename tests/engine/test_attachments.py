"""The lifecycle's seams: what an evaluation acquires besides its service (mock instances,
a proxy) is wired in by an Attachment and released by teardown, whatever the verdict."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from engine import Evaluation, ItemStarted, Runtime, Task, Verdict, load_task
from tests.conftest import FIXTURES, MakeSubmission, run_engine

RELAY_ITEM = '''
import os

import pytest
import requests


@pytest.mark.category("side_effects")
def test_relay_reaches_the_provider():
    answer = requests.get(os.environ["BASE_URL"] + "/relay", timeout=5)
    assert answer.status_code == 200 and answer.json() == {"hello": "from the provider"}
    seen = requests.get(os.environ["RELAY_URL"] + "/seen", timeout=5).json()
    assert seen == [["GET", "/hello", "test_relay.py::test_relay_reaches_the_provider"]]
'''


class Provider:
    """A real HTTP server on the runtime's listen host, acquired per evaluation."""

    provides = frozenset({"relay"})

    def __init__(self) -> None:
        self.url = ""
        self.closed = False
        self.current_item = ""
        self.seen: list[list[str]] = []
        self.items: list[str] = []

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> dict[str, str]:
        async def hello(request: web.Request) -> web.Response:
            self.seen.append([request.method, request.path, self.current_item])
            return web.json_response({"hello": "from the provider"})

        async def seen(_request: web.Request) -> web.Response:
            return web.json_response(self.seen)

        app = web.Application()
        app.router.add_get("/hello", hello)
        app.router.add_get("/seen", seen)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, runtime.listen_host, 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://{runtime.listen_host}:{port}"

        async def close() -> None:
            await runner.cleanup()
            self.closed = True

        stack.push_async_callback(close)
        return {"RELAY_URL": runtime.reachable_url(self.url)}

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> tuple[str, dict[str, str]]:
        return base_url, {"RELAY_URL": self.url}

    async def item_started(self, nodeid: str) -> None:
        self.current_item = nodeid
        self.items.append(nodeid)


@pytest.fixture
def relay_task(tmp_path: Path) -> Task:
    root = tmp_path / "relay-task"
    shutil.copytree(FIXTURES / "tiny_task", root)
    (root / "oracle" / "test_relay.py").write_text(RELAY_ITEM)
    toml = (root / "task.toml").read_text().replace('id = "tiny"', 'id = "relay"')
    (root / "task.toml").write_text(toml + '\n[[mocks]]\nkind = "relay"\nenv = "RELAY_URL"\n')
    return load_task(root)


@pytest.fixture
def providers() -> list[Provider]:
    """Every Provider the attachment factory below made, in order."""
    return []


@pytest.fixture
def attach(providers: list[Provider]) -> Callable[[Evaluation], Provider]:
    def make(_ev: Evaluation) -> Provider:
        providers.append(Provider())
        return providers[-1]

    return make


async def test_attachment_env_reaches_service_and_oracle_and_is_released(
    relay_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
    providers: list[Provider], attach: Callable[[Evaluation], Provider],
) -> None:
    (result,), store, run_id = await run_engine(
        [(relay_task, make_submission("ok"))], tmp_path, cache_dir, attachments=[attach])
    assert result.verdict is Verdict.PASS, result.reason
    (provider,) = providers
    assert provider.closed  # teardown closed the evaluation's exit stack
    assert provider.items == [i.nodeid for i in result.items]  # every item start, in order
    with pytest.raises(aiohttp.ClientError):
        async with aiohttp.ClientSession() as session:
            await session.get(provider.url + "/seen")


async def test_attachment_is_released_when_the_service_crashes(
    relay_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
    providers: list[Provider], attach: Callable[[Evaluation], Provider],
) -> None:
    (result,), _, _ = await run_engine(
        [(relay_task, make_submission("crash"))], tmp_path, cache_dir, attachments=[attach])
    assert result.verdict is Verdict.FAIL
    assert providers and providers[0].closed


async def test_mocks_nobody_serves_are_a_harness_error_reported_once(
    relay_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    (result,), _, _ = await run_engine([(relay_task, make_submission("ok"))], tmp_path,
                                       cache_dir)
    assert result.verdict is Verdict.ERROR
    assert "relay" in result.reason and result.attempt == 1  # deterministic: not retried


def test_item_started_is_an_event() -> None:
    event = ItemStarted(evaluation_id="r.0", nodeid="t.py::x")
    assert '"nodeid": "t.py::x"' in event.to_json()
