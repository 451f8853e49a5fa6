"""Cached build images: the record of what this home built, and LRU removal under a budget.

``HOME/cache/docker-images.json`` maps each ``anvil-build:<hash>`` tag this home's runs
built or reused to when it was last used. It is the only list image GC works from: an
image on the daemon that is not in the record (another home's, another user's) is
never touched. Every read-modify-write of the record holds an exclusive ``flock`` on a
lock file beside it, so two anvils sharing a home never lose each other's entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from aiodocker.exceptions import DockerError

from ..._errors import HarnessError
from ._client import BUILD_REPO, CONTEXT_LABEL, call

_FILE = "docker-images.json"


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[Path]:
    """Hold the record's lock; yields the record's path."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f"{_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield cache_dir / _FILE


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def _write(path: Path, used: dict[str, float]) -> None:
    # A unique temporary name: threads of one process share a pid.
    fd, tmp = tempfile.mkstemp(prefix=f"{_FILE}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(used, out)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _update(cache_dir: Path, change: Callable[[dict[str, float]], None]) -> None:
    with _locked(cache_dir) as path:
        used = _read(path)
        change(used)
        _write(path, used)


def recorded_images(cache_dir: Path) -> dict[str, float]:
    """Tag -> last use (unix time) of every image this home's runs built or reused."""
    with _locked(cache_dir) as path:
        return _read(path)


def touch_image(cache_dir: Path, tag: str) -> None:
    """Record that ``tag`` was used now (blocking: call it from a worker thread)."""
    _update(cache_dir, lambda used: used.__setitem__(tag, time.time()))


def forget_images(cache_dir: Path, tags: Iterable[str]) -> None:
    """Drop ``tags`` from the record (they were removed, or are gone)."""
    gone = set(tags)

    def drop(used: dict[str, float]) -> None:
        for tag in gone:
            used.pop(tag, None)

    _update(cache_dir, drop)


async def gc_images(docker: Any, cache_dir: Path, budget_bytes: int) -> list[tuple[str, int]]:
    """Remove this home's build images, least recently used first, until they fit the budget.

    Only tags in the home's record are considered, and only while they still are
    anvil build images (``anvil-build:*`` with anvil's context label). Images in use
    by a container stay (the daemon refuses; they are skipped), and so do images a run
    used while GC was running. Recorded tags whose
    image is gone are dropped from the record.

    Returns:
        (tag, size) of every image removed.

    Raises:
        HarnessError: the daemon did not answer.
    """
    used = await anyio.to_thread.run_sync(recorded_images, cache_dir)
    entries: list[tuple[float, str, int]] = []
    missing: list[str] = []
    for tag, last in used.items():
        if not tag.startswith(BUILD_REPO + ":"):
            continue
        try:
            info = await call(f"inspect image {tag}", partial(docker.images.inspect, tag))
        except DockerError as exc:
            if exc.status == 404:
                missing.append(tag)
                continue
            raise HarnessError(f"Docker API inspect image {tag}: {exc.message}") from exc
        labels = (info.get("Config") or {}).get("Labels") or {}
        if CONTEXT_LABEL in labels:
            entries.append((last, tag, int(info.get("Size", 0))))
    total = sum(size for _, _, size in entries)
    removed: list[tuple[str, int]] = []
    for last, tag, size in sorted(entries):
        if total <= budget_bytes:
            break
        now = await anyio.to_thread.run_sync(recorded_images, cache_dir)
        if now.get(tag, last) != last:
            continue  # a run used it since we looked: it is not the least recent any more
        try:
            await call(f"remove image {tag}", partial(docker.images.delete, tag))
        except DockerError:
            continue  # in use by a container, or removed meanwhile
        removed.append((tag, size))
        total -= size
    if removed or missing:
        await anyio.to_thread.run_sync(forget_images, cache_dir,
                                       [*missing, *(t for t, _ in removed)])
    return removed


def parse_size(text: str) -> int:
    """``10G``, ``500M``, ``1.5GB``, ``1024`` -> bytes."""
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = cleaned[-1] if cleaned and cleaned[-1] in units else ""
    number = cleaned[: len(cleaned) - len(unit)]
    return int(float(number) * units[unit])
