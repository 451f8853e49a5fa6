"""Mocks are found by kind through the ``anvil.mocks`` entry points, and every installed
mock keeps the contract (the conformance check a plug-in can run on itself)."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.routing import BaseRoute, Route

from mocks import MockNotInstalled, available, check_mock, load_mock
from mocks.echo import EchoMock


def test_bundled_kinds_are_entry_points() -> None:
    found = available()
    assert found["echo"] == "mocks.echo:EchoMock"
    assert found["payment"] == "mocks.payment:PaymentMock"
    assert load_mock("echo") is EchoMock


def test_an_unknown_kind_says_what_to_install() -> None:
    with pytest.raises(MockNotInstalled) as caught:
        load_mock("weather")
    message = str(caught.value)
    assert "'weather'" in message and "installed: " in message and "echo" in message
    assert '[project.entry-points."anvil.mocks"]' in message


@pytest.mark.parametrize("kind", sorted(available()))
def test_every_installed_mock_keeps_the_contract(kind: str) -> None:
    assert check_mock(load_mock(kind)) == []


def test_the_conformance_check_finds_broken_mocks() -> None:
    class NoDefault(EchoMock):
        scenarios = ("other",)

    class LenientSeed(EchoMock):
        def seed(self, scenario: str, data: object = None) -> None:
            pass

    class NoRoutes(EchoMock):
        def routes(self) -> list[BaseRoute]:
            return []

    class Squatter(EchoMock):
        def routes(self) -> list[BaseRoute]:
            return [Route("/__mock__/reset", self.list)]

    assert check_mock(NoDefault) == ["scenarios must include 'default'"]
    assert check_mock(NoRoutes) == ["routes() is empty"]
    assert check_mock(Squatter) == ["route /__mock__/reset is under /__mock__/, which the "
                                    "fabric owns"]
    assert check_mock(LenientSeed) == ["an unknown scenario must raise KeyError"]
    assert check_mock(object) == ["kind must be a non-empty string class attribute",
                                  "scenarios must include 'default'",
                                  "cannot be created with a Context: TypeError("
                                  "'object() takes no arguments')"]


def test_the_readme_example_mock_keeps_the_contract() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("A mock is a class"):]
    code = section[section.index("```python\n") + 10:section.index("```\n", 10)]
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    assert check_mock(namespace["WeatherMock"]) == []
