"""Finding plug-ins by group and name (``importlib.metadata`` entry points)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points

RUNTIMES = "anvil.runtimes"
MOCKS = "anvil.mocks"
REPORTERS = "anvil.reporters"


class PluginError(LookupError):
    """A plug-in that is not installed or does not load; the message says what to do."""


def available(group: str, builtins: Mapping[str, str] | None = None) -> dict[str, str]:
    """``name -> "module:attr"`` of every plug-in of ``group``.

    ``builtins`` are the host package's own plug-ins, used when the package runs
    from a source tree without being installed; installed entry points win.
    """
    found = dict(builtins or {})
    for ep in entry_points(group=group):
        found[ep.name] = ep.value
    return dict(sorted(found.items()))


def load(group: str, name: str, builtins: Mapping[str, str] | None = None) -> object:
    """The object the plug-in ``name`` of ``group`` points at.

    Raises:
        PluginError: no such plug-in (the message lists those installed), or it
            does not import.
    """
    known = available(group, builtins)
    target = known.get(name)
    if target is None:
        names = ", ".join(known) or "none"
        raise PluginError(
            f"no {group} plug-in named {name!r} (installed: {names}); install the package "
            f"that provides it (it declares an entry point in the {group!r} group)")
    module_name, _, attr = target.partition(":")
    try:
        obj: object = import_module(module_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{group} plug-in {name!r} ({target}) does not load: {exc}") from exc
    return obj
