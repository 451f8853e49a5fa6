"""Cached build images: when each was last used, and LRU removal under a disk budget."""

from __future__ import annotations

import contextlib
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from aiodocker.exceptions import DockerError

from ._client import BUILD_REPO, CONTEXT_LABEL, call

_FILE = "docker-images.json"


def _load(cache_dir: Path) -> dict[str, float]:
    try:
        return dict(json.loads((cache_dir / _FILE).read_text()))
    except (OSError, ValueError):
        return {}


def touch_image(cache_dir: Path, tag: str) -> None:
    """Record that ``tag`` was used now (atomic rewrite of a small JSON file)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    used = _load(cache_dir)
    used[tag] = time.time()
    tmp = cache_dir / f"{_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(used))
    tmp.replace(cache_dir / _FILE)


async def gc_images(docker: Any, cache_dir: Path, budget_bytes: int) -> list[tuple[str, int]]:
    """Remove build images, least recently used first, until they fit ``budget_bytes``.

    Returns (tag, size) of every image removed. Images in use by a container stay.
    """
    images = await call("list images", lambda: docker.images.list(
        filters={"label": [CONTEXT_LABEL]}))
    used = _load(cache_dir)
    entries = []
    for image in images:
        tags = [t for t in image.get("RepoTags") or [] if t.startswith(BUILD_REPO + ":")]
        if tags:
            last = max(used.get(t, image.get("Created", 0)) for t in tags)
            entries.append((last, tags[0], int(image.get("Size", 0))))
    total = sum(size for _, _, size in entries)
    removed = []
    for _last, tag, size in sorted(entries):
        if total <= budget_bytes:
            break
        with contextlib.suppress(DockerError):
            await call(f"remove image {tag}", partial(docker.images.delete, tag))
            removed.append((tag, size))
            total -= size
    return removed


def parse_size(text: str) -> int:
    """``10G``, ``500M``, ``1.5GB``, ``1024`` -> bytes."""
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = cleaned[-1] if cleaned and cleaned[-1] in units else ""
    number = cleaned[: len(cleaned) - len(unit)]
    return int(float(number) * units[unit])
