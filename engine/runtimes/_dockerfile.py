"""Reading a submission as Docker reads it: the Dockerfile, and the .dockerignore.

The parser reads lines as BuildKit does: a UTF-8 byte-order mark is dropped,
the ``# escape=`` directive is honoured, a line ends in a continuation when its
escape character is followed only by blanks, comment and empty lines inside a
continuation are dropped, and heredoc bodies (``RUN <<EOF``) stay inside their
instruction. Which instructions a runtime can carry out is the runtime's
business (the process runtime emulates a subset and names the line it cannot).

We keep this parser rather than ``dockerfile-parse``: that library (2.0.1)
keeps the byte-order mark in the first keyword, turns a ``\\`` followed by blanks
(accepted by Docker) into a bogus instruction, and drops a final continued line.

:class:`DockerIgnore` gives .dockerignore its Docker meaning (patterns
anchored at the context root, ``**``, ``!`` exceptions, the last match wins,
a path is excluded when it or one of its parents matches), on ``pathspec``.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import PathSpec
from pathspec.pattern import Pattern

from .._errors import BuildFailed

_BOM = "\ufeff"
_DIRECTIVE = re.compile(r"#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")
_HEREDOC = re.compile(r"<<-?\s*([\"']?)([A-Za-z_][\w.-]*)\1")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int
    heredocs: tuple[str, ...] = ()  # bodies of ``<<EOF`` documents, in order

    def exec_form(self) -> list[str] | None:
        """The JSON-array form (``["uvicorn", "app:app"]``), or None for shell form."""
        text = self.args.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return None
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
        return None


@dataclass
class Dockerfile:
    path: Path
    instructions: list[Instruction] = field(default_factory=list)

    def command(self) -> list[str]:
        """ENTRYPOINT + CMD as an argv (shell forms wrapped in ``/bin/sh -c``)."""
        entry: list[str] = []
        cmd: list[str] = []
        for ins in self.instructions:
            if ins.keyword in ("CMD", "ENTRYPOINT"):
                argv = ins.exec_form()
                if argv is None:
                    argv = ["/bin/sh", "-c", ins.args.strip()]
                if ins.keyword == "CMD":
                    cmd = argv
                else:
                    entry = argv  # a CMD of this Dockerfile stays (only an inherited one goes)
        argv = entry + cmd
        if not argv:
            raise BuildFailed(f"{self.path}: no CMD or ENTRYPOINT: nothing to run")
        return argv


def parse_dockerfile(path: Path) -> Dockerfile:
    """Parse ``path`` into instructions, joining continuation lines.

    Raises:
        BuildFailed: the file is missing, empty, or does not start with FROM.
    """
    if not path.is_file():
        raise BuildFailed(f"{path}: no Dockerfile in the submission")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BuildFailed(f"{path}: cannot read: {exc}") from exc
    result = Dockerfile(path, _instructions(text.removeprefix(_BOM)))
    firsts = [i for i in result.instructions if i.keyword not in ("ARG",)]
    if not firsts or firsts[0].keyword != "FROM":
        raise BuildFailed(f"{path}: the first instruction must be FROM")
    return result


def _instructions(text: str) -> list[Instruction]:
    lines = text.splitlines()
    escape = "\\"
    index = 0
    while index < len(lines):  # parser directives: only before anything else
        directive = _DIRECTIVE.match(lines[index].strip())
        if not directive:
            break
        if directive.group(1).lower() == "escape" and directive.group(2) in ("\\", "`"):
            escape = directive.group(2)
        index += 1
    continuation = re.compile(re.escape(escape) + r"[ \t]*$")
    result: list[Instruction] = []
    pending: str | None = None
    start = 0
    while index < len(lines):
        raw = lines[index]
        index += 1
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation: Docker drops these lines there too
        if pending is None:
            pending, start = "", index
        ends = continuation.search(raw)
        if ends:
            pending += raw[: ends.start()].strip() + " "
            continue
        logical = pending + stripped
        pending = None
        keyword, _, args = logical.partition(" ")
        bodies: list[str] = []
        if keyword.upper() in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(args):
                body: list[str] = []
                while index < len(lines) and lines[index].strip() != match.group(2):
                    body.append(lines[index])
                    index += 1
                index += 1  # the terminator
                bodies.append("\n".join(body))
        result.append(Instruction(keyword.upper(), args.strip(), start, tuple(bodies)))
    if pending:
        keyword, _, args = pending.strip().partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
    return result


def split_shell(args: str, where: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError as exc:
        raise BuildFailed(f"{where}: cannot parse: {exc}") from exc


class DockerIgnore:
    """The .dockerignore of a build context, with Docker's meaning.

    A path is ignored when the last pattern matching it, or matching one of its
    parent folders, is not an ``!`` exception (moby's ``MatchesOrParentMatches``).
    Patterns are anchored at the context root: ``*.pyc`` is only the root's, and
    ``**/*.pyc`` is every folder's.
    """

    def __init__(self, lines: list[str]) -> None:
        cleaned = []
        for line in lines:
            if line.startswith("#"):
                continue
            pattern = line.strip()
            invert = pattern.startswith("!")
            if invert:
                pattern = pattern[1:].strip()
            if not pattern:
                continue
            pattern = posixpath.normpath(pattern).lstrip("/")
            if pattern in ("", "."):
                continue
            cleaned.append(("!/" if invert else "/") + pattern)
        self.patterns: list[Pattern] = list(PathSpec.from_lines("gitignore", cleaned).patterns)
        self.has_exceptions = any(p.include is False for p in self.patterns)

    @classmethod
    def read(cls, context: Path) -> DockerIgnore:
        """The context's .dockerignore (none when absent, or when it is not a regular file:
        a link is never followed out of the submission)."""
        path = context / ".dockerignore"
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return cls([])
            return cls(path.read_text(encoding="utf-8", errors="replace").splitlines())
        except OSError:
            return cls([])

    def ignored(self, rel: str) -> bool:
        """Whether ``rel`` (a path relative to the context, ``/``-separated) is excluded."""
        if not self.patterns:
            return False
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        excluded = False
        for pattern in self.patterns:
            if any(pattern.match_file(c) is not None for c in candidates):
                excluded = bool(pattern.include)
        return excluded
