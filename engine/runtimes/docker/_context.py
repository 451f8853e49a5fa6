"""Build contexts: a reproducible tar of the submission, honouring .dockerignore.

The tar is written to a file (never held in memory) and hashed as it is written:
same files, same modes, same bytes, whatever the mtimes and owners. Symlinks go in
as links, as ``docker build`` sends them; nothing outside the submission is read.

``.dockerignore`` follows Docker's rules (moby ``patternmatcher``, read by the
shared :class:`DockerIgnore`, so both runtimes see one context): patterns are
anchored at the context root, ``*`` stays within one path component, ``**`` spans
any number, a pattern that matches a folder excludes what it holds, ``!`` re-includes,
the last matching pattern wins, and the Dockerfile and .dockerignore are always sent.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..._errors import BuildFailed, HarnessError
from .._dockerfile import DockerIgnore

_ALWAYS_IGNORED = (".git", "__pycache__", ".venv", "node_modules", ".anvil")
_ALWAYS_SENT = ("Dockerfile", ".dockerignore")  # as the docker CLI does


class _Ignore:
    def __init__(self, folder: Path) -> None:
        self.rules = DockerIgnore.read(folder)  # shared with the process runtime
        self.negations = self.rules.has_exceptions

    def excluded(self, rel: str) -> bool:
        return rel not in _ALWAYS_SENT and self.rules.ignored(rel)


def context_entries(folder: Path) -> Iterator[tuple[Path, str]]:
    """(path, name in the tar) of everything the context holds, in a stable order."""
    ignore = _Ignore(folder)
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        walk_into = []
        leaves = list(files)
        for name in dirs:
            if name in _ALWAYS_IGNORED:
                continue
            if (base / name).is_symlink():
                leaves.append(name)  # a link to a folder is a link, not its content
                continue
            rel = (base / name).relative_to(folder).as_posix()
            if not ignore.excluded(rel):
                yield base / name, rel
            elif not ignore.negations:
                continue  # nothing under an excluded folder can come back: skip it
            walk_into.append(name)
        dirs[:] = sorted(walk_into)
        for name in sorted(leaves):
            rel = (base / name).relative_to(folder).as_posix()
            if not ignore.excluded(rel):
                yield base / name, rel


class _HashingWriter:
    """A write-only file that hashes what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        try:
            return self.out.write(data)
        except OSError as exc:
            raise HarnessError(f"writing the build context failed: {exc}") from exc


def write_context(folder: Path, out: IO[bytes]) -> tuple[str, int]:
    """Write the reproducible context tar of ``folder`` to ``out``; return (sha256, size).

    Raises:
        BuildFailed: a file of the submission cannot be read (the candidate's).
        HarnessError: the tar cannot be written (e.g. the disk is full).
    """
    writer = _HashingWriter(out)
    # "w|": a plain stream, so the writer needs no seek or tell.
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path, rel in context_entries(folder):
            try:
                info = tar.gettarinfo(str(path), arcname=rel)
            except OSError as exc:
                raise BuildFailed(f"cannot read {rel} in the submission: {exc.strerror}") from exc
            if info is None:
                continue  # a socket: docker build skips it too
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.pax_headers = {}
            if not info.isreg():
                tar.addfile(info)
                continue
            try:
                fh = open(path, "rb")  # noqa: SIM115 - closed below, errors told apart
            except OSError as exc:
                raise BuildFailed(f"cannot read {rel} in the submission: {exc.strerror}") from exc
            with fh:
                try:
                    tar.addfile(info, fh)
                except OSError as exc:  # e.g. it shrank while read (ENOSPC is a HarnessError)
                    raise BuildFailed(f"cannot read {rel} in the submission: {exc}") from exc
    out.flush()
    return writer.sha.hexdigest(), writer.size
