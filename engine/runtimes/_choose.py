"""Choosing a runtime by name (``auto`` or any installed runtime plug-in).

Runtimes are found through the ``anvil.runtimes`` entry-point group; the two
bundled ones are also known by their module paths, so a source tree that was
not installed still runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import plugins

from .._errors import InputError, RuntimeUnavailable
from ..types import Runtime, RuntimeFactory

BUILTIN = {
    "docker": "engine.runtimes.docker:DockerRuntime",
    "process": "engine.runtimes.process:ProcessRuntime",
}


def runtime_names() -> list[str]:
    """``auto`` and every installed runtime, for ``--runtime`` choices."""
    return ["auto", *plugins.available(plugins.RUNTIMES, BUILTIN)]


def cache_dir(home: Path) -> Path:
    return Path(os.environ.get("ANVIL_CACHE") or home / "cache")


def runtime_factory(name: str) -> RuntimeFactory:
    """The factory of the runtime plug-in ``name``.

    Raises:
        InputError: no such runtime, or its plug-in does not load.
    """
    try:
        factory = plugins.load(plugins.RUNTIMES, name, BUILTIN)
    except plugins.PluginError as exc:
        raise InputError(f"--runtime {name}", str(exc)) from None
    if not isinstance(factory, RuntimeFactory):
        raise InputError(f"--runtime {name}", f"{factory!r} is not a runtime factory "
                         "(needs name, priority, unavailable() and a (cache_dir) constructor)")
    return factory


async def make_runtime(name: str, home: Path) -> tuple[Runtime, str]:
    """The runtime called ``name`` (not yet entered) and a line saying which and why.

    ``auto`` takes the available runtime of highest priority (docker, then process).

    Raises:
        InputError: an unknown runtime name.
        RuntimeUnavailable: the runtime asked for cannot run here.
    """
    cache = cache_dir(home)
    if name != "auto":
        factory = runtime_factory(name)
        why = await factory.unavailable()
        if why:
            raise RuntimeUnavailable(f"--runtime {name}: {why}")
        return factory(cache), f"runtime: {name}"
    factories = [runtime_factory(n) for n in runtime_names() if n != "auto"]
    reasons: list[str] = []
    for factory in sorted(factories, key=lambda f: -f.priority):
        why = await factory.unavailable()
        if why is None:
            because = f" (auto: {'; '.join(reasons)})" if reasons else ""
            return factory(cache), f"runtime: {factory.name}{because}"
        reasons.append(f"{factory.name}: {why}")
    raise RuntimeUnavailable("no runtime can run here: " + "; ".join(reasons))
