"""anvil's mock fabric: deterministic, isolated provider mocks that plug in by entry point.

A mock implements :class:`MockService` (``mocks.types``); the fabric wraps each
instance in a :class:`MockApp` (deterministic ids and clock, journal, faults, the
admin surface under ``/__mock__/``) and :class:`MockHost` serves instances on real
ports. Mocks are found by kind in the ``anvil.mocks`` entry-point group
(:func:`available`, :func:`load_mock`).

The front door imports lazily: the oracle process loads ``mocks._fixtures`` (which
needs only pytest, requests and the standard library) and must not pay for
Starlette or uvicorn.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._base import Context as Context
    from ._base import Fault as Fault
    from ._base import FaultError as FaultError
    from ._base import Journal as Journal
    from ._base import MockApp as MockApp
    from ._base import json_response as json_response
    from ._conformance import check_mock as check_mock
    from ._host import Hosted as Hosted
    from ._host import MockHost as MockHost
    from ._host import MockHostError as MockHostError
    from ._registry import MockNotInstalled as MockNotInstalled
    from ._registry import available as available
    from ._registry import load_mock as load_mock
    from .types import MockAdmin as MockAdmin
    from .types import MockContext as MockContext
    from .types import MockService as MockService
    from .types import MockTask as MockTask
    from .types import ProviderCall as ProviderCall

_WHERE = {
    "Context": "_base",
    "Fault": "_base",
    "FaultError": "_base",
    "Journal": "_base",
    "MockApp": "_base",
    "json_response": "_base",
    "check_mock": "_conformance",
    "Hosted": "_host",
    "MockHost": "_host",
    "MockHostError": "_host",
    "MockNotInstalled": "_registry",
    "available": "_registry",
    "load_mock": "_registry",
    "MockAdmin": "types",
    "MockContext": "types",
    "MockService": "types",
    "MockTask": "types",
    "ProviderCall": "types",
}

__all__ = [
    "Context",
    "Fault",
    "FaultError",
    "Hosted",
    "Journal",
    "MockAdmin",
    "MockApp",
    "MockContext",
    "MockHost",
    "MockHostError",
    "MockNotInstalled",
    "MockService",
    "MockTask",
    "ProviderCall",
    "available",
    "check_mock",
    "json_response",
    "load_mock",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mocks' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # next time without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
