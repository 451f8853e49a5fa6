"""Choosing a runtime by name (``auto``, ``process``)."""

from __future__ import annotations

import os
from pathlib import Path

from ._errors import InputError
from ._process import ProcessRuntime

RUNTIMES = ("auto", "process")


def make_runtime(name: str, home: Path) -> tuple[ProcessRuntime, str]:
    """The runtime called ``name`` and a line saying which one runs and why.

    Raises:
        InputError: an unknown runtime name.
    """
    cache = Path(os.environ.get("ANVIL_CACHE") or home / "cache")
    if name == "process":
        return ProcessRuntime(cache), "runtime: process"
    if name == "auto":
        # The Docker runtime is a separate slice (issue: Docker runtime on aiodocker);
        # until it lands, auto always falls back to the embedded process runtime.
        return ProcessRuntime(cache), "runtime: process (auto: no Docker runtime in this build)"
    raise InputError(f"--runtime {name}", f"unknown runtime; choose one of {', '.join(RUNTIMES)}")
