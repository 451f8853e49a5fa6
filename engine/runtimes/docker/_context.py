"""Build contexts: a reproducible tar of the submission, honouring .dockerignore."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

_ALWAYS_IGNORED = (".git", "__pycache__", ".venv", "node_modules", ".anvil")


def _ignore_patterns(folder: Path) -> list[str]:
    path = folder / ".dockerignore"
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


def _context_files(folder: Path) -> Iterator[Path]:
    patterns = _ignore_patterns(folder)
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _ALWAYS_IGNORED)
        for name in sorted(files):
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            if rel == "Dockerfile" or not any(fnmatch(rel, p) for p in patterns):
                yield path


def build_context(folder: Path) -> tuple[bytes, str]:
    """A reproducible tar of ``folder`` and its sha256: same files, same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _context_files(folder):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.pax_headers = {}
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()
