"""What every mock must satisfy, bundled or third-party: ``check_mock(MyMock)``.

Run it in a plug-in's own tests (``assert check_mock(WeatherMock) == []``); anvil's
test suite runs it over every installed kind.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.routing import BaseRoute, Mount, Route

from ._base import ADMIN, Context
from .types import MockService


def check_mock(mock: Any) -> list[str]:
    """The ways ``mock`` (a class) breaks the :class:`~mocks.MockService` contract; empty
    when it keeps it."""
    problems: list[str] = []
    kind = getattr(mock, "kind", None)
    if not isinstance(kind, str) or not kind:
        problems.append("kind must be a non-empty string class attribute")
    scenarios = list(getattr(mock, "scenarios", []))
    if "default" not in scenarios:
        problems.append("scenarios must include 'default'")
    try:
        fresh = mock(Context("conformance", str(kind)))
    except Exception as exc:  # noqa: BLE001 - every failure is a finding
        return [*problems, f"cannot be created with a Context: {exc!r}"]
    if not isinstance(fresh, MockService):
        problems.append("instances do not implement MockService (routes, seed, openapi)")
        return problems
    for scenario in scenarios:
        try:
            mock(Context("conformance", str(kind))).seed(scenario, None)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"scenario {scenario!r} does not seed: {exc!r}")
    try:
        mock(Context("conformance", str(kind))).seed("no such scenario", None)
        problems.append("an unknown scenario must raise KeyError")
    except KeyError:
        pass
    except Exception as exc:  # noqa: BLE001
        problems.append(f"an unknown scenario must raise KeyError, not {exc!r}")
    routes = list(fresh.routes())
    if not routes:
        problems.append("routes() is empty")
    for route in routes:
        if not isinstance(route, BaseRoute):
            problems.append(f"routes() has {route!r}, not a Starlette route")
        elif isinstance(route, Route | Mount) and route.path.startswith(ADMIN):
            problems.append(f"route {route.path} is under {ADMIN}/, which the fabric owns")
    contract = fresh.openapi()
    if not isinstance(contract, dict) or not str(contract.get("openapi", "")).startswith("3."):
        problems.append("openapi() must return an OpenAPI 3 document")
    elif not contract.get("paths"):
        problems.append("openapi() documents no paths")
    try:
        json.dumps(contract, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append(f"openapi() is not JSON: {exc}")
    if json.dumps(contract, default=str) != json.dumps(
            mock(Context("conformance", str(kind))).openapi(), default=str):
        problems.append("openapi() differs between two fresh instances")
    return problems
