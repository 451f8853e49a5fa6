"""Mocks by kind: the ``anvil.mocks`` entry-point group (through :mod:`plugins`).

A distribution provides a mock with one line in its ``pyproject.toml``::

    [project.entry-points."anvil.mocks"]
    weather = "anvil_weather:WeatherMock"
"""

from __future__ import annotations

from importlib.util import find_spec

import plugins

from .types import MockService

#: The mocks this distribution bundles, used when it runs from a source tree without
#: being installed (installed entry points win).
BUNDLED = {
    "calendar": "mocks.calendar:CalendarMock",
    "delivery": "mocks.delivery:DeliveryMock",
    "echo": "mocks.echo:EchoMock",
    "payment": "mocks.payment:PaymentMock",
}


class MockNotInstalled(plugins.PluginError):
    """No installed distribution provides a mock kind, or its plug-in does not load."""


def _bundled() -> dict[str, str]:
    return {kind: target for kind, target in BUNDLED.items()
            if find_spec(target.partition(":")[0]) is not None}


def available() -> dict[str, str]:
    """``kind -> "module:attr"`` of every installed mock, sorted by kind."""
    return plugins.available(plugins.MOCKS, _bundled())


def install_hint(kind: str) -> str:
    """What to do about a kind nobody provides (for messages)."""
    installed = ", ".join(available()) or "none"
    return (f"no installed distribution provides mock kind {kind!r} (installed: {installed}); "
            f"install the distribution whose pyproject.toml declares it under "
            f'[project.entry-points."{plugins.MOCKS}"] ({kind} = "module:MockClass")')


def load_mock(kind: str) -> type[MockService]:
    """The mock class for ``kind``, checked against the :class:`MockService` contract.

    Raises:
        MockNotInstalled: no plug-in provides ``kind``, it does not import, or what it
            names is not a mock class of that kind.
    """
    if kind not in available():
        raise MockNotInstalled(install_hint(kind))
    try:
        found = plugins.load(plugins.MOCKS, kind, _bundled())
    except plugins.PluginError as exc:
        raise MockNotInstalled(str(exc)) from exc
    missing = [name for name in ("routes", "seed", "openapi", "scenarios")
               if not hasattr(found, name)]
    if not isinstance(found, type) or missing:
        raise MockNotInstalled(
            f"mock plug-in {kind!r} ({available()[kind]}) is not a MockService class"
            + (f" (missing: {', '.join(missing)})" if missing else ""))
    declared = getattr(found, "kind", kind)
    if declared != kind:
        raise MockNotInstalled(f"mock plug-in {kind!r} ({available()[kind]}) says its kind "
                               f"is {declared!r}")
    if "default" not in found.scenarios:  # type: ignore[attr-defined]
        raise MockNotInstalled(f"mock plug-in {kind!r} has no 'default' scenario")
    return found
