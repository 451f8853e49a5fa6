"""The contract between anvil's mock fabric and each mock service (bundled or plug-in).

A mock is a class implementing :class:`MockService`, found by its ``kind`` through
the ``anvil.mocks`` entry-point group. The fabric (``mocks._base``) gives every
mock, for free: per-instance isolation, deterministic ids and time (through the
:class:`MockContext` it hands the mock), the request journal, fault injection and
the admin surface under ``/__mock__/``. A mock only describes its provider API:
its routes, its scenarios, its OpenAPI document.

Determinism rules a mock must follow: ids only from ``ctx.new_id``, time only from
``ctx.now``, no randomness, no wall clock, JSON bodies built with stable key order
(``mocks.json_response``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from starlette.routing import BaseRoute


@runtime_checkable
class MockContext(Protocol):
    """What the fabric gives one mock instance."""

    @property
    def seed(self) -> str:
        """The evaluation's seed (the same seed and requests give the same bytes)."""
        ...

    @property
    def instance(self) -> str:
        """This instance's name (e.g. ``payment``); part of every id it makes."""
        ...

    def new_id(self, prefix: str) -> str:
        """A deterministic id ``{prefix}_{24 chars}`` from (seed, instance, counter)."""
        ...

    def now(self) -> int:
        """The virtual clock, unix seconds: starts at a fixed instant, moves only when the
        admin surface advances it."""
        ...

    def emit(self, event: Mapping[str, Any]) -> None:
        """Record a side event in the journal (e.g. a webhook the mock delivered)."""
        ...


@runtime_checkable
class MockService(Protocol):
    """One provider API. The fabric creates a fresh object per instance and on reset."""

    kind: ClassVar[str]  # the name task.toml uses: [[mocks]] kind = "payment"
    scenarios: ClassVar[Sequence[str]]  # named seeds; "default" is always one of them

    def __init__(self, ctx: MockContext) -> None: ...

    def routes(self) -> Sequence[BaseRoute]:
        """The provider API's Starlette routes, mounted at the instance's root."""
        ...

    def seed(self, scenario: str, data: Mapping[str, Any] | None = None) -> None:
        """Load a named scenario (and optional data) into a fresh instance.

        Raises:
            KeyError: an unknown scenario.
        """
        ...

    def openapi(self) -> dict[str, Any]:
        """The mock's own OpenAPI 3 document (served at ``/__mock__/openapi.json``)."""
        ...


@runtime_checkable
class MockAdmin(Protocol):
    """Optional: a mock with admin routes of its own (e.g. webhook faults).

    They are served behind the instance's token, like the fabric's; put them under
    ``/__mock__/<kind>/`` so they never clash with the fabric's own.
    """

    def admin_routes(self) -> Sequence[BaseRoute]: ...


@runtime_checkable
class MockTask(Protocol):
    """Optional: a mock with work of its own besides answering (e.g. webhook deliveries).

    The fabric runs ``run()`` in the instance's host task group from the moment the
    instance serves, cancels it when the instance stops, and on every reset cancels it
    and runs the fresh mock's ``run()``. A mock object may be created and dropped without
    ``run()`` ever running (a reset, a conformance check): acquire what needs closing
    inside ``run()``, not in ``__init__``.
    """

    async def run(self) -> None: ...


@dataclass(frozen=True)
class ProviderCall:
    """One call a service made to a mock's provider API, as the mock saw it: what an
    observer (``MockApp.on_call``; anvil's tracing) gets once the call is answered.

    Times are wall-clock unix nanoseconds (the mock's virtual clock is in the journal);
    ``status`` and ``response`` are None when a fault dropped the connection;
    ``headers`` are raw, secrets included: the observer redacts what it keeps.
    """

    instance: str
    method: str
    path: str
    query: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    status: int | None
    response_headers: Sequence[tuple[str, str]]
    response: bytes | None
    fault: str | None
    item: str | None  # the oracle item running when the call came in
    start_ns: int
    end_ns: int
