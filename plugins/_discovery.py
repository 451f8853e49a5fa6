"""Finding plug-ins by group and name (``importlib.metadata`` entry points)."""

from __future__ import annotations

import os
import sys
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
    for name, value in _installed(group):
        found[name] = value
    return dict(sorted(found.items()))


_SCANNED: dict[tuple[str, tuple[tuple[str, int], ...]], list[tuple[str, str]]] = {}


def _installed(group: str) -> list[tuple[str, str]]:
    """The group's entry points. Scanning every installed distribution takes
    milliseconds and a run asks once per evaluation, so the answer is kept while the
    import path and its folders stay as they were (installing or removing a
    distribution changes its folder's modification time)."""
    key = (group, tuple(_stamp(path) for path in sys.path))
    if key not in _SCANNED:
        if len(_SCANNED) > 16:  # stale answers of an earlier import path
            _SCANNED.clear()
        _SCANNED[key] = [(ep.name, ep.value) for ep in entry_points(group=group)]
    return _SCANNED[key]


def _stamp(path: str) -> tuple[str, int]:
    try:
        return path, os.stat(path or ".").st_mtime_ns
    except OSError:
        return path, -1


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
