"""Shared enums, protocols and type aliases of the engine.

A runtime turns a submission into a running service on loopback. The engine
drives it through :class:`Runtime`; everything runtime-specific (venvs,
images, containers) stays behind these protocols.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable


class Phase(enum.StrEnum):
    """The phases of one evaluation, in the order they run."""

    BUILD = "build"
    STARTUP = "startup"
    HEALTH = "health"
    WIRING = "wiring"
    ORACLE = "oracle"
    TEARDOWN = "teardown"


class Verdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


class Outcome(enum.StrEnum):
    """Outcome of one oracle item."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class ExitInfo:
    """How a service ended: ``reason`` is short and user-facing (``exited 1``, ``oom``).

    ``harness`` is set when the runtime, not the service, ended it (the Docker daemon
    went away): the evaluation is then anvil's retried ``error``, never a ``fail``.
    """

    returncode: int | None
    reason: str
    harness: bool = False


@dataclass(frozen=True)
class BuildRequest:
    """What a runtime needs to build one submission."""

    submission: Path
    workdir: Path  # private scratch folder of the evaluation
    log_path: Path  # build output goes here


@dataclass(frozen=True)
class StartRequest:
    """What a runtime needs to start one service."""

    port: int  # the port the task says the service listens on
    env: Mapping[str, str]
    workdir: Path
    log_path: Path  # service stdout/stderr go here, capped at ``log_cap`` bytes
    log_cap: int
    labels: Mapping[str, str] = field(default_factory=dict)
    memory_mb: int = 1024
    cpus: float = 1.0
    pids_limit: int = 256


@runtime_checkable
class Artifact(Protocol):
    """Something a runtime built and can start (a prepared folder, an image)."""

    @property
    def description(self) -> str: ...


@runtime_checkable
class Instance(Protocol):
    """A running service."""

    async def wait_listening(self) -> str:
        """Wait until the service listens and return its base URL on loopback."""
        ...

    async def wait_exit(self) -> ExitInfo:
        """Wait until the service ends by itself and say how it ended."""
        ...

    def diagnose(self) -> str:
        """A short hint on why the service is not reachable (e.g. which port it bound)."""
        ...


@runtime_checkable
class Runtime(Protocol):
    """Builds submissions and runs them as services on loopback.

    A runtime is an async context manager: it owns the tasks that watch its
    instances (log pumps, exit watchers, the Docker events stream).

    ``build`` raises :class:`~engine.BuildFailed` for the candidate's faults and
    :class:`~engine.HarnessError` for its own; ``start`` raises
    :class:`~engine.ServiceExited` when the service cannot be started.
    ``stop`` must be safe to call on any instance, more than once.
    """

    name: str

    async def __aenter__(self) -> Runtime:
        """Open the runtime (daemon connection, watchers) for one run."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    async def build(self, request: BuildRequest) -> Artifact: ...

    async def start(self, artifact: Artifact, request: StartRequest) -> Instance: ...

    async def stop(self, instance: Instance) -> None: ...

    async def release(self, artifact: Artifact) -> None:
        """Let go of what ``build`` made for one evaluation (a private copy of the
        submission, a cache lease); shared caches stay. Idempotent."""
        ...

    def reachable_url(self, url: str) -> str:
        """``url`` of a server anvil runs on this machine, as a service of this runtime
        reaches it (a container cannot reach the host's 127.0.0.1)."""
        ...

    @property
    def listen_host(self) -> str:
        """The address anvil binds a server on so that this runtime's services reach it.

        Loopback for local processes; the bridge gateway for containers (never every
        interface). Valid once the runtime is entered.
        """
        ...


@runtime_checkable
class RuntimeFactory(Protocol):
    """What a runtime plug-in's entry point names: usually the runtime class itself.

    ``priority`` orders the candidates of ``--runtime auto`` (highest first);
    ``unavailable`` says why the runtime cannot run here (None: it can).
    """

    name: str
    priority: int

    def __call__(self, cache_dir: Path) -> Runtime: ...

    async def unavailable(self) -> str | None: ...
