"""Choosing a runtime by name: ``auto``, ``docker`` or ``process``."""

from __future__ import annotations

import os
from pathlib import Path

from ._bootstrap import PRIMARY, has_base_image
from ._docker import DockerRuntime, docker_client
from ._errors import InputError, RuntimeUnavailable
from ._process import ProcessRuntime
from .types import Runtime

RUNTIMES = ("auto", "docker", "process")


def cache_dir(home: Path) -> Path:
    return Path(os.environ.get("ANVIL_CACHE") or home / "cache")


async def docker_answers(need_base: bool = False) -> str | None:
    """None when a Docker daemon answers (and, with ``need_base``, has the base image)."""
    try:
        client = await docker_client()
    except RuntimeUnavailable as exc:
        return str(exc)
    try:
        if need_base and not await has_base_image(client):
            return f"Docker answers but has no {PRIMARY} base image: run `anvil docker bootstrap`"
    finally:
        await client.close()
    return None


async def make_runtime(name: str, home: Path) -> tuple[Runtime, str]:
    """The runtime called ``name`` (not yet entered) and a line saying which and why.

    Raises:
        InputError: an unknown runtime name.
        RuntimeUnavailable: ``docker`` asked for and no daemon answers.
    """
    cache = cache_dir(home)
    if name == "process":
        return ProcessRuntime(cache), "runtime: process"
    if name == "docker":
        why = await docker_answers()
        if why:
            raise RuntimeUnavailable(f"--runtime docker: {why}")
        return DockerRuntime(cache), "runtime: docker"
    if name == "auto":
        why = await docker_answers(need_base=True)
        if why is None:
            return DockerRuntime(cache), "runtime: docker (auto: the Docker daemon answers)"
        return ProcessRuntime(cache), f"runtime: process (auto: {why})"
    raise InputError(f"--runtime {name}", f"unknown runtime; choose one of {', '.join(RUNTIMES)}")
