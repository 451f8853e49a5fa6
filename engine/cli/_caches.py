"""Keeping the venv and build-image caches within their budget."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from rich.markup import escape

from .._subscribers import (
    plural,
)
from ..runtimes import cache_dir
from ..runtimes.docker import (
    gc_images,
    parse_size,
)
from ..runtimes.process import gc_venvs
from ..types import Runtime
from ._app import (
    err,
)


async def trim_venvs(home: Path, budget: int) -> None:
    gone = await anyio.to_thread.run_sync(gc_venvs, cache_dir(home), budget)
    for venv in gone:
        err.print(f"removed venv {escape(venv.name)}")
    if gone:
        err.print(f"removed {plural(len(gone), 'venv')} (cache budget {budget / 2**30:g} GiB)")


async def auto_gc(home: Path, runtime: Runtime) -> None:
    """Keep the caches within ANVIL_CACHE_BUDGET (default 10G) when a run ends."""
    try:
        budget = parse_size(os.environ.get("ANVIL_CACHE_BUDGET") or "10G")
    except ValueError:
        err.print("[yellow]ANVIL_CACHE_BUDGET is not a size; caches not trimmed[/]")
        return
    await trim_venvs(home, budget)
    docker = getattr(runtime, "docker", None)
    if runtime.name == "docker" and docker is not None:
        gone = await gc_images(docker, cache_dir(home), budget)
        if gone:
            err.print(f"removed {plural(len(gone), 'build image')} "
                      f"(cache budget {budget / 2**30:g} GiB)")
