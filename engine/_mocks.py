"""The mock fabric as an :class:`~engine._lifecycle.Attachment`: each evaluation gets its
own instance of every mock its task declares (``[[mocks]]``).

At startup, before the service starts, one instance per ``[[mocks]]`` entry is
served on the runtime's listen host, created fresh in the entry's scenario with a seed
derived from the evaluation id (a retry sees the same ids). The service gets ``ENV`` =
the instance's URL as the service reaches it; the oracle process gets ``ENV`` = the same
instance as reachable from this machine, ``ENV_TOKEN`` = its admin token, and
``ANVIL_MOCKS`` (JSON, read by the ``mocks._fixtures`` pytest plugin). Every instance
is registered on the evaluation's exit stack, so teardown stops it whatever happened.

A service never starts without the URLs its task declares: either every instance
answers or startup raises (``error``: the harness's fault, never the candidate's).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType

import aiohttp

from mocks import (
    Hosted,
    MockHost,
    MockHostError,
    MockNotInstalled,
    ProviderCall,
    available,
    load_mock,
)
from mocks._registry import install_hint
from telemetry import PEER, client_tracing

from ._errors import HarnessError, Unsupported
from ._lifecycle import Evaluation
from ._task import MockConfig, Task
from .types import Runtime

log = logging.getLogger("anvil.engine")

MOCKS_ENV = "ANVIL_MOCKS"


def mock_problems(task: Task) -> list[str]:
    """Why ``task``'s mocks cannot be served here (an uninstalled kind, an unknown
    scenario): one line each; empty when every declared mock can be served."""
    problems = []
    installed = available()
    for config in task.config.mocks:
        if config.kind not in installed:
            problems.append(_not_installed(config.kind))
            continue
        try:
            mock = load_mock(config.kind)
        except MockNotInstalled as exc:
            problems.append(str(exc))
            continue
        if config.scenario not in mock.scenarios:
            problems.append(f"mock {config.kind!r} has no scenario {config.scenario!r} "
                            f"(it has: {', '.join(mock.scenarios)})")
    return problems


def _not_installed(kind: str) -> str:
    return f"[[mocks]] kind = {kind!r}: {install_hint(kind)}"


def instance_names(mocks: list[MockConfig]) -> list[str]:
    """Each entry's instance name: its kind, or its env var (lowercased) when the task
    declares that kind more than once."""
    kinds = [m.kind for m in mocks]
    return [m.kind if kinds.count(m.kind) == 1 else m.env.lower() for m in mocks]


class MockFabric:
    """The mock instances of a run, hosted in a task group the caller owns.

    ``async with MockFabric() as fabric:`` then give ``fabric.attach`` to
    ``RunSettings.attachments``.
    """

    def __init__(self) -> None:
        self.host = MockHost()
        #: Given an evaluation, what to tell of each call its service makes to a mock
        #: (``observe(kind, call)``); anvil's tracing sets it (see ``engine._tracing``).
        self.observer: Callable[[Evaluation], Callable[[str, ProviderCall], None]] | None = None

    async def __aenter__(self) -> MockFabric:
        await self.host.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        return await self.host.__aexit__(exc_type, exc, tb)

    def attach(self, evaluation: Evaluation) -> MockAttachment | None:
        """The attachment factory: None for a task without mocks."""
        if not evaluation.task.config.mocks:
            return None
        observe = self.observer(evaluation) if self.observer is not None else None
        return MockAttachment(self.host, evaluation, observe)


class MockAttachment:
    """One evaluation's mock instances (see the module docstring)."""

    def __init__(self, host: MockHost, evaluation: Evaluation,
                 observe: Callable[[str, ProviderCall], None] | None = None) -> None:
        self.host = host
        self.evaluation = evaluation
        self.observe = observe
        self.mocks = list(evaluation.task.config.mocks)
        installed = available()
        self.provides = frozenset(m.kind for m in self.mocks if m.kind in installed)
        self.hosted: list[tuple[MockConfig, str, Hosted]] = []

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> Mapping[str, str]:
        """Serve one fresh instance per ``[[mocks]]`` entry; return the service's env.

        Raises:
            Unsupported: a kind that does not load or an unknown scenario.
            HarnessError: an instance cannot be hosted (transient).
        """
        env: dict[str, str] = {}
        for config, name in zip(self.mocks, instance_names(self.mocks), strict=True):
            try:
                mock = load_mock(config.kind)
            except MockNotInstalled as exc:
                raise Unsupported(str(exc)) from None
            try:
                hosted = await self.host.start(
                    mock, instance=name, seed=self.evaluation.evaluation_id,
                    scenario=config.scenario, host=runtime.listen_host)
            except KeyError as exc:
                raise Unsupported(f"mock {config.kind!r}: {exc.args[0]}") from None
            except MockHostError as exc:
                raise HarnessError(f"mock {config.kind!r} cannot be hosted: {exc}") from exc
            except Exception as exc:  # a bug in the mock's own set-up: retrying cannot help
                raise Unsupported(f"mock {config.kind!r} does not start: {exc!r}") from exc
            stack.push_async_callback(self.host.stop, hosted)
            if self.observe is not None:
                hosted.app.on_call = functools.partial(self.observe, config.kind)
            self.hosted.append((config, name, hosted))
            env[config.env] = runtime.reachable_url(hosted.url)
        return env

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> tuple[str, dict[str, str]]:
        """Check each instance answers at the oracle's address; return the oracle's env.

        Raises:
            HarnessError: an instance does not answer (transient).
        """
        env: dict[str, str] = {}
        described = []
        timeout = aiohttp.ClientTimeout(total=5)
        tracing = client_tracing(**{PEER: "mock"})
        async with aiohttp.ClientSession(timeout=timeout, trace_configs=[tracing]) as session:
            for config, name, hosted in self.hosted:
                url = f"{hosted.url}/__mock__/clock"
                try:
                    async with session.get(url, headers={"X-Mock-Token": hosted.token}) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except (aiohttp.ClientError, TimeoutError) as exc:
                    raise HarnessError(f"mock {name} does not answer at {hosted.url}: "
                                       f"{type(exc).__name__}") from exc
                if not ok:
                    raise HarnessError(f"mock {name} answered {resp.status} at {url}")
                env[config.env] = hosted.url
                env[f"{config.env}_TOKEN"] = hosted.token
                described.append({"name": name, "kind": config.kind, "env": config.env,
                                  "url": hosted.url, "token": hosted.token,
                                  "scenario": config.scenario})
        env[MOCKS_ENV] = json.dumps(described)
        return base_url, env

    async def item_started(self, nodeid: str) -> None:
        for _, _, hosted in self.hosted:
            hosted.app.mark_item(nodeid)

    async def oracle_finished(self) -> None:
        """Every instance must still serve when the oracle ends: one that stopped during it
        refused the service's calls, and the items that failed for it are anvil's fault.

        Raises:
            HarnessError: an instance stopped (transient: the evaluation is retried).
        """
        stopped = [name for _, name, hosted in self.hosted if hosted.stopped]
        if stopped:
            raise HarnessError(f"mock {', '.join(stopped)} stopped during the oracle: the "
                               "service's calls to it were refused (anvil's fault, retried)")
