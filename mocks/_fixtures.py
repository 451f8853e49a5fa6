"""pytest plugin for oracles (``-p mocks._fixtures``): the evaluation's mock instances.

Fixtures:

* ``mocks``: every instance of the evaluation, a mapping by instance name (the mock's
  kind, e.g. ``mocks["payment"]``; the env var lowercased when a task declares a kind
  twice);
* one fixture per instance, by that name (``payment``, ``calendar``, ...).

Each is a :class:`MockClient`: ``.url``, ``.token``, ``.requests(method, path)``
(journal entries of provider calls; by default only those made while this item ran),
``.events()``, ``.journal()``, ``.advance(seconds)``, ``.now()``, ``.fault(...)``,
``.clear_faults()``, ``.reset()``, ``.seed(scenario, data)``.

The instances come from ``ANVIL_MOCKS`` (JSON, set by the engine): a list of
``{"name", "kind", "env", "url", "token", "scenario"}``. ``anvil mocks serve`` prints
such a line, so an oracle can also run against a standalone mock.

It imports nothing but pytest and the standard library at import time (``requests``
once a fixture talks to a mock): it is loaded by every oracle process.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

MOCKS_ENV = "ANVIL_MOCKS"
RESERVED = frozenset({"mocks", "request"})  # never shadowed by an instance's fixture
TIMEOUT = 10.0


class MockError(AssertionError):
    """A mock's admin surface refused a call (the message has its answer)."""


class _ThisItem:
    def __repr__(self) -> str:
        return "THIS_ITEM"


#: ``item=`` default: only journal entries made while the current oracle item ran.
THIS_ITEM: Any = _ThisItem()


class MockClient:
    """One mock instance as the oracle sees it (see the module docstring)."""

    def __init__(self, spec: Mapping[str, Any], nodeid: str | None = None) -> None:
        self.name = str(spec["name"])
        self.kind = str(spec.get("kind", self.name))
        self.env = str(spec.get("env", ""))
        self.url = str(spec["url"]).rstrip("/")
        self.token = str(spec["token"])
        self.scenario = str(spec.get("scenario", "default"))
        self.nodeid = nodeid

    def __repr__(self) -> str:
        return f"<mock {self.name} at {self.url}>"

    def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              body: Mapping[str, Any] | None = None) -> Any:
        import requests  # only when a fixture is used: most oracles never pay for it

        answer = requests.request(
            method, f"{self.url}/__mock__/{path}", params=params, json=body,
            headers={"X-Mock-Token": self.token}, timeout=TIMEOUT)
        if answer.status_code >= 400:
            raise MockError(f"mock {self.name}: {method} /__mock__/{path} answered "
                            f"{answer.status_code}: {answer.text[:500]}")
        return answer.json()

    def journal(self, method: str | None = None, path: str | None = None,
                item: str | None = THIS_ITEM, since: int = 0) -> dict[str, Any]:
        """The journal as the mock returns it: ``{"dropped": N, "entries": [...]}``.

        ``path`` is a glob (``/v1/payment_intents/*``); ``item=None`` means every item.
        """
        params: dict[str, Any] = {"since": since}
        if method:
            params["method"] = method
        if path:
            params["path"] = path
        chosen = self.nodeid if item is THIS_ITEM else item
        if chosen:
            params["item"] = chosen
        result: dict[str, Any] = self._call("GET", "journal", params=params)
        return result

    def requests(self, method: str | None = None, path: str | None = None,
                 item: str | None = THIS_ITEM) -> list[dict[str, Any]]:
        """Provider calls (``method``, ``path``, ``query``, ``headers``, ``body``,
        ``status``, ``response``, ``fault``, ``item``, ``time``), oldest first."""
        entries = self.journal(method, path, item)["entries"]
        return [e for e in entries if e["kind"] == "request"]

    def events(self, item: str | None = THIS_ITEM) -> list[dict[str, Any]]:
        """Side events the mock recorded (e.g. webhooks it delivered)."""
        return [e["event"] for e in self.journal(item=item)["entries"] if e["kind"] == "event"]

    def now(self) -> int:
        """The mock's virtual clock (unix seconds)."""
        return int(self._call("GET", "clock")["now"])

    def advance(self, seconds: int) -> int:
        """Move the mock's virtual clock forward; return the new time."""
        return int(self._call("POST", "clock/advance", body={"seconds": seconds})["now"])

    def fault(self, path: str = "*", method: str | None = None, *, status: int | None = None,
              latency: float = 0.0, drop: bool = False, malformed: bool = False,
              body: Any = None, times: int | None = None, fraction: float = 1.0
              ) -> list[dict[str, Any]]:
        """Arm a fault on matching calls (``path`` a glob); return the armed faults.

        ``status``: answer it without running the mock; ``latency``: seconds before
        answering; ``drop``: run the mock, then close the connection unanswered;
        ``malformed``: run the mock, then send half the body. ``times``: the next N
        matching calls (None: all); ``fraction``: that share of them, seeded.
        """
        spec: dict[str, Any] = {"path": path, "method": method, "status": status,
                                "latency": latency, "drop": drop, "malformed": malformed,
                                "times": times, "fraction": fraction}
        if body is not None:
            spec["body"] = body
        faults: list[dict[str, Any]] = self._call("POST", "faults", body=spec)["faults"]
        return faults

    def clear_faults(self) -> None:
        self._call("DELETE", "faults")

    def reset(self) -> None:
        """Back to the state the instance was created in (journal emptied)."""
        self._call("POST", "reset")

    def seed(self, scenario: str = "default", data: Mapping[str, Any] | None = None) -> None:
        """A fresh state in ``scenario`` (journal emptied)."""
        self._call("POST", "seed", body={"scenario": scenario, "data": data})

    def mark(self, nodeid: str | None) -> None:
        """Attribute calls from now on to ``nodeid`` (anvil does it for every item)."""
        self._call("POST", "item", body={"nodeid": nodeid})


def declared() -> list[dict[str, Any]]:
    """The instances ``ANVIL_MOCKS`` describes (none when it is unset or empty)."""
    raw = os.environ.get(MOCKS_ENV, "").strip()
    if not raw:
        return []
    value = json.loads(raw)
    if not isinstance(value, list):
        raise pytest.UsageError(f"{MOCKS_ENV} must be a JSON list of mock instances")
    return [dict(v) for v in value]


class Mocks(Mapping[str, MockClient]):
    """Every mock instance of the evaluation, by name."""

    def __init__(self, clients: Mapping[str, MockClient]) -> None:
        self._clients = dict(clients)

    def __getitem__(self, name: str) -> MockClient:
        try:
            return self._clients[name]
        except KeyError:
            names = ", ".join(self._clients) or "none"
            raise KeyError(f"no mock instance {name!r} in this evaluation "
                           f"(instances: {names})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)


def _client(spec: Mapping[str, Any], request: pytest.FixtureRequest) -> MockClient:
    client = MockClient(spec, request.node.nodeid)
    if not os.environ.get("ANVIL_RESULTS"):  # under anvil the engine marks every item
        client.mark(request.node.nodeid)
    return client


@pytest.fixture(name="mocks")
def mocks_fixture(request: pytest.FixtureRequest) -> Mocks:
    """Every mock instance of this evaluation, by name (see the module docstring)."""
    return Mocks({spec["name"]: _client(spec, request) for spec in declared()})


def _named_fixture(spec: Mapping[str, Any]) -> Any:
    def fixture(request: pytest.FixtureRequest) -> MockClient:
        return _client(spec, request)

    fixture.__doc__ = f"The {spec.get('kind', spec['name'])} mock instance of this evaluation."
    return pytest.fixture(name=str(spec["name"]))(fixture)


def pytest_configure(config: pytest.Config) -> None:
    """One fixture per declared instance, registered as a plugin of its own."""
    holder = types.ModuleType("anvil_mock_instances")
    for spec in declared():
        name = str(spec["name"])
        if name not in RESERVED:
            setattr(holder, f"fixture_{len(vars(holder))}", _named_fixture(spec))
    config.pluginmanager.register(holder, "anvil-mock-instances")
