"""The submission as a build context, and the evaluation's root folder, with Docker's rules.

A build context is read as Docker reads it: the .dockerignore applies, a
symlink is copied as a symlink (its text unchanged, never its target's content),
and a path named by COPY is resolved *inside* the context, as BuildKit does
for a COPY source: an absolute link target starts again at the context root
and ``..`` stops there. So nothing outside the submission is ever read, a link
to /usr/share/doc is one small link in the copy, and ``d/up -> ..`` is not
recursed into. A COPY whose source is a dangling link or a link loop is the
candidate's build failure, said in one line.

The root folder (container ``/`` of the evaluation) is written with the same
scoped resolution, so a link the submission put there cannot make a later
COPY or ``RUN mkdir`` write outside the root.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import stat
from collections import deque
from pathlib import Path

from ..._errors import BuildFailed
from .._dockerfile import DockerIgnore

MAX_LINKS = 40  # as the kernel's ELOOP limit
JUNK = frozenset({"__pycache__", ".git", ".venv", "node_modules", ".anvil"})


class LinkError(Exception):
    """A path that goes through a dangling link or a link loop (message: what and why)."""


def scoped(root: Path, rel: str) -> Path:
    """``rel`` under ``root``, every symlink on the way resolved inside ``root``.

    An absolute link target restarts at ``root``; ``..`` never climbs above it.
    Missing components are kept as named (the caller checks existence).

    Raises:
        LinkError: more than :data:`MAX_LINKS` links on the way (a loop).
    """
    parts = deque(p for p in rel.split("/") if p not in ("", "."))
    current: list[str] = []
    links = 0
    while parts:
        part = parts.popleft()
        if part == "..":
            if current:
                current.pop()
            continue
        candidate = root.joinpath(*current, part)
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:  # missing (or under a file): the rest is kept as named
            current.append(part)
            current.extend(p for p in parts if p not in ("", "."))
            break
        if not stat.S_ISLNK(mode):
            current.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise LinkError(f"{rel}: a symlink loop")
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = []
        parts.extendleft(reversed([p for p in target.split("/") if p not in ("", ".")]))
    return root.joinpath(*current)


class BuildContext:
    """A submission folder read as Docker reads a build context."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()  # the folder itself may be reached through a link
        self.ignore = DockerIgnore.read(self.folder)

    def sources(self, source: str, where: str) -> list[str]:
        """The context paths (relative) a COPY source names, wildcards expanded.

        Raises:
            BuildFailed: nothing matches, or the source is a dangling link or a loop.
        """
        rel = os.path.normpath(source.lstrip("/")) if source.strip("/") else "."
        if rel.startswith(".."):
            rel = "."  # Docker clamps paths at the context root
        found = self._expand(rel) if any(c in rel for c in "*?[") else [rel]
        result = []
        for path in found:
            if path != "." and self.ignore.ignored(path):
                continue
            try:
                real = scoped(self.folder, path)
            except LinkError as exc:
                raise BuildFailed(f"{where}: COPY failed: {exc}") from None
            if os.path.exists(real):
                result.append(path)
            elif os.path.lexists(self.folder / path) and _is_link(self.folder / path):
                target = os.readlink(self.folder / path)
                raise BuildFailed(f"{where}: COPY failed: {path} is a symlink to {target}, "
                                  "which is not in the build context")
        if not result:
            raise BuildFailed(f"{where}: COPY failed: {source} not found in the build context")
        return result

    def _expand(self, pattern: str) -> list[str]:
        matches = [""]
        for part in pattern.split("/"):
            if not any(c in part for c in "*?["):
                matches = [f"{m}/{part}" if m else part for m in matches]
                continue
            grown = []
            for match in matches:
                try:
                    folder = scoped(self.folder, match)
                    names = sorted(os.listdir(folder))
                except (LinkError, OSError):
                    continue
                grown += [f"{match}/{n}" if match else n
                          for n in names if fnmatch.fnmatchcase(n, part)]
            matches = grown
        return matches

    def copy(self, rel: str, root: Path, dest: str, into_dir: bool) -> None:
        """Copy the context path ``rel`` to the container path ``dest`` of ``root``.

        A folder is copied as its content (links inside it as links, ignored
        paths and junk left out); a file (or a link to one, resolved in the context)
        as a file, named ``dest``, or kept by its name inside ``dest`` with ``into_dir``.

        Raises:
            LinkError: ``dest`` goes through a link loop in the root.
        """
        source = scoped(self.folder, rel)
        if source.is_dir():
            self._copy_tree(source, rel if rel != "." else "", root, dest)
        else:
            _copy_file(source, root, f"{dest}/{posixpath.basename(rel)}" if into_dir else dest)

    def _copy_tree(self, folder: Path, rel: str, root: Path, dest: str) -> None:
        target = scoped(root, dest)
        target.mkdir(parents=True, exist_ok=True)
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = f"{rel}/{entry.name}" if rel else entry.name
                if entry.name in JUNK:
                    continue
                if self.ignore.ignored(path):
                    if not (self.ignore.has_exceptions and entry.is_dir(follow_symlinks=False)):
                        continue
                    # an `!` exception may bring back something inside: look, copy only that
                    self._copy_tree(Path(entry.path), path, root, f"{dest}/{entry.name}")
                    continue
                out = f"{dest}/{entry.name}"
                if entry.is_symlink():
                    _copy_link(Path(entry.path), root, out)
                elif entry.is_dir(follow_symlinks=False):
                    self._copy_tree(Path(entry.path), path, root, out)
                elif entry.is_file(follow_symlinks=False):
                    _copy_file(Path(entry.path), root, out)
                # sockets, fifos and devices are not content: Docker skips them too


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _copy_file(source: Path, root: Path, dest: str) -> None:
    target = _writable(root, dest)
    shutil.copy2(source, target, follow_symlinks=False)


def _copy_link(source: Path, root: Path, dest: str) -> None:
    target = _writable(root, dest)
    os.symlink(os.readlink(source), target)


def _writable(root: Path, dest: str) -> Path:
    """Where to write the container path ``dest``: its folder resolved inside ``root``,
    created if missing; whatever was at the path itself (file or link) replaced."""
    parent, _, name = dest.rstrip("/").rpartition("/")
    folder = scoped(root, parent)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if _is_link(target) or target.is_file():
        target.unlink()
    return target
