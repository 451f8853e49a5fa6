"""A parser for the Dockerfile subset the process runtime emulates.

Supported: FROM, WORKDIR, COPY/ADD (local files), RUN pip install, ENV, ARG,
EXPOSE, CMD, ENTRYPOINT, USER, LABEL (the last two are accepted and ignored).
Anything else is reported with its line so the user knows to use the Docker
runtime for it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import BuildFailed


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

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
    result = Dockerfile(path)
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped by Docker too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical = pending + stripped
        pending = ""
        keyword, _, args = logical.partition(" ")
        result.instructions.append(Instruction(keyword.upper(), args.strip(), start))
    if pending:
        keyword, _, args = pending.partition(" ")
        result.instructions.append(Instruction(keyword.upper(), args.strip(), start))
    firsts = [i for i in result.instructions if i.keyword not in ("ARG",)]
    if not firsts or firsts[0].keyword != "FROM":
        raise BuildFailed(f"{path}: the first instruction must be FROM")
    return result


def split_shell(args: str, where: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError as exc:
        raise BuildFailed(f"{where}: cannot parse: {exc}") from exc
