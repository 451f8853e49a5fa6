"""Task packages: loading and validating ``tasks/<id>/``.

Three shapes are accepted:

* anvil's own: ``task.toml``, ``spec.md``, ``openapi.yaml``, ``oracle/``,
  optionally ``reference/``;
* BackendForge's: no ``task.toml``; ``spec.md``, ``openapi.yaml`` and a
  ``tests/`` folder of pytest files using ``requests`` and ``BASE_URL``.
  Defaults apply (port 8000, health probe accepts any HTTP answer).
* Harbor's: ``task.toml`` in Harbor's schema, ``instruction.md``, ``tests/`` (its pytest
  files are the oracle), optionally ``solution/`` as the reference, plus anvil's
  ``openapi.yaml``; read by ``engine._harbor`` (docs/harbor.md).

Everything that can be checked without running anything is checked when a task
loads (a few milliseconds, plus ~0.1 s of OpenAPI validation for a large
contract), so a task that is not valid is refused before any evaluation starts:
task.toml parses and holds only known keys of the right types, spec.md is not
empty, openapi.yaml is an OpenAPI 3 document, every oracle file compiles.
Every problem found is reported, one line each, naming file and line.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
import tomllib
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import _harbor
from ._errors import TaskFormatError
from .types import Phase

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    # strict: `port = "8000"` is a string in TOML and is refused, not coerced.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ServiceConfig(_Strict):
    port: int = Field(8000, ge=1, le=65535)
    health_path: str | None = None  # None: any HTTP answer on /health or /
    build_timeout: float = Field(600.0, gt=0)
    startup_timeout: float = Field(30.0, gt=0)
    health_timeout: float = Field(30.0, gt=0)
    wiring_timeout: float = Field(15.0, gt=0)
    teardown_timeout: float = Field(20.0, gt=0)
    # Container limits (docker runtime): sane for a 2-core, 24 GiB machine running several.
    memory_mb: int = Field(1024, ge=16)
    cpus: float = Field(1.0, gt=0)
    pids_limit: int = Field(256, ge=16)


class OracleConfig(_Strict):
    timeout: float = Field(300.0, gt=0)
    item_timeout: float = Field(30.0, gt=0)


class MockConfig(_Strict):
    kind: str  # the mock's name in the `anvil.mocks` entry-point group, e.g. "payment"
    env: str  # the variable that carries the mock's base URL to the service
    scenario: str = "default"  # the seeded state the mock starts each evaluation in


class TaskConfig(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = ""
    domain: str = ""
    service: ServiceConfig = ServiceConfig()
    oracle: OracleConfig = OracleConfig()
    mocks: list[MockConfig] = []


# The model behind each table of task.toml (array indexes dropped), for "did you mean".
_TABLES: dict[tuple[str, ...], type[BaseModel]] = {
    (): TaskConfig,
    ("service",): ServiceConfig,
    ("oracle",): OracleConfig,
    ("mocks",): MockConfig,
}


@dataclass(frozen=True)
class Task:
    """A loaded, validated task package."""

    root: Path
    config: TaskConfig
    oracle_dir: Path
    # The reference's folder under root: Harbor's is solution/; None: the task has none.
    reference_name: str | None = "reference"

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def reference(self) -> Path | None:
        if self.reference_name is None:
            return None
        ref = self.root / self.reference_name
        return ref if ref.is_dir() else None

    def lease_seconds(self) -> float:
        """The longest an evaluation of this task can take: every phase's deadline."""
        return sum(self.timeout(phase) for phase in Phase)

    def timeout(self, phase: Phase) -> float:
        svc = self.config.service
        return {
            Phase.BUILD: svc.build_timeout,
            Phase.STARTUP: svc.startup_timeout,
            Phase.HEALTH: svc.health_timeout,
            Phase.WIRING: svc.wiring_timeout,
            Phase.ORACLE: self.config.oracle.timeout,
            Phase.TEARDOWN: svc.teardown_timeout,
        }[phase]


@dataclass(frozen=True)
class TaskProblem:
    """One thing wrong with a task package, where it is."""

    path: Path
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.problem}"


Layout = Literal["anvil", "backendforge", "harbor"]


@dataclass(frozen=True)
class TaskInspection:
    """What :func:`inspect_task` found: the task's parts and every problem.

    ``config`` is None when task.toml does not validate; ``oracle_dir`` is
    None when there is no oracle folder.
    """

    root: Path
    layout: Layout | None
    config: TaskConfig | None
    oracle_dir: Path | None
    problems: tuple[TaskProblem, ...]
    reference_name: str | None = "reference"

    def problems_in(self, *paths: Path) -> list[TaskProblem]:
        """The problems of the given files (or of anything under the given folders)."""
        wanted = [q.resolve() for q in paths]
        found = []
        for problem in self.problems:
            at = problem.path.resolve()
            if any(at == q or q in at.parents for q in wanted):
                found.append(problem)
        return found

    def task(self) -> Task:
        """The task, if nothing is wrong with it.

        Raises:
            TaskFormatError: naming the first problem's file and line; its
                message lists every problem, one per line.
        """
        if self.problems:
            first = self.problems[0]
            error = TaskFormatError(first.path, first.problem, first.line)
            if len(self.problems) > 1:
                error.args = ("\n".join(str(p) for p in self.problems),)
            raise error
        assert self.config is not None and self.oracle_dir is not None
        return Task(root=self.root, config=self.config, oracle_dir=self.oracle_dir,
                    reference_name=self.reference_name)


def load_task(path: Path | str) -> Task:
    """Load the task package at ``path``.

    Raises:
        TaskFormatError: the folder is missing, a file is missing, empty or does
            not parse, task.toml has unknown keys or wrong types, an oracle file
            does not compile; the message names each problem's file (and line
            where known), one problem per line.
    """
    return inspect_task(path).task()


def inspect_task(path: Path | str) -> TaskInspection:
    """Check everything about the task at ``path`` that needs nothing run; collect all problems."""
    root = Path(path)  # problems name files as the user wrote the path
    if not root.is_dir():
        return TaskInspection(root, None, None, None, (TaskProblem(root, "no such task folder"),))
    problems: list[TaskProblem] = []
    toml_path = root / "task.toml"
    layout: Layout
    config: TaskConfig | None
    if toml_path.is_file() and _harbor.is_harbor(root, _peek_toml(toml_path)):
        return _inspect_harbor(root)
    if _harbor.lacks_config(root):
        problem = TaskProblem(toml_path, "missing (a Harbor task folder, with instruction.md "
                                         "and tests/, needs its task.toml)")
        return TaskInspection(root, None, None, None, (problem,))
    if toml_path.is_file():
        layout = "anvil"
        config = _parse_toml(toml_path, problems)
        oracle_dir = root / "oracle"
    elif (root / "tests").is_dir():
        # BackendForge layout: defaults, id from the folder name.
        layout = "backendforge"
        config = TaskConfig(id=_safe_id(root.resolve().name), title=root.resolve().name)
        oracle_dir = root / "tests"
    else:
        problem = TaskProblem(root, "not a task: no task.toml (and no tests/ folder)")
        return TaskInspection(root, None, None, None, (problem,))
    problems += _check_spec(root / "spec.md")
    problems += check_openapi(root / "openapi.yaml")
    problems += _check_oracle_files(oracle_dir)
    return TaskInspection(
        root=root.resolve(),
        layout=layout,
        config=config,
        oracle_dir=oracle_dir.resolve() if oracle_dir.is_dir() else None,
        problems=tuple(problems),
    )


def _inspect_harbor(root: Path) -> TaskInspection:
    """A Harbor folder: its task.toml mapped to anvil's (engine._harbor), tests/ as the oracle."""
    toml_path = root / "task.toml"
    problems: list[TaskProblem] = []
    config = None
    loaded = _read_toml(toml_path, problems)
    if loaded is not None:
        config = _harbor_config(toml_path, *loaded, root.resolve().name, problems)
    for issue in _harbor.folder_issues(root):
        problems.append(TaskProblem(issue.path or root, issue.message))
    oracle_dir = root / _harbor.TESTS
    if not any(p.path == oracle_dir for p in problems):  # else it is said already
        problems += _check_oracle_files(oracle_dir)
    openapi = root / "openapi.yaml"
    if openapi.is_file():
        problems += check_openapi(openapi)
    else:
        problems.append(TaskProblem(openapi, "missing (Harbor has no contract file: anvil needs "
                                             "the service's OpenAPI 3 contract at the task "
                                             "root, which Harbor ignores)"))
    return TaskInspection(
        root=root.resolve(),
        layout="harbor",
        config=config,
        oracle_dir=oracle_dir.resolve() if oracle_dir.is_dir() else None,
        problems=tuple(problems),
        reference_name=_harbor.reference_name(root),
    )


def _harbor_config(path: Path, text: str, data: dict[str, Any], folder: str,
                   problems: list[TaskProblem]) -> TaskConfig | None:
    settings, issues = _harbor.read_config(data, folder)
    lines = _key_lines(text)
    problems += [TaskProblem(path, i.message, _line_of(i.key, lines)) for i in issues]
    if issues:
        return None
    try:
        return TaskConfig.model_validate(settings)
    except ValidationError as exc:
        # Harbor's values were checked by engine._harbor: what is left is the [anvil] table,
        # which holds an anvil task.toml's keys one table down.
        invalid = []
        for error in exc.errors():
            loc = (_harbor.ANVIL_TABLE, *error["loc"])
            message = f"{_harbor.ANVIL_TABLE}.{_describe(error, tuple(error['loc']))}"
            invalid.append(TaskProblem(path, message, _line_of(loc, lines)))
        problems += sorted(invalid, key=lambda p: p.line or 0)
        return None


def _safe_id(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).strip("-.")
    return cleaned or "task"


# --- task.toml ---------------------------------------------------------------------------


def _peek_toml(path: Path) -> dict[str, Any] | None:
    """The content of a task.toml, or None when it does not parse (said later, with its line)."""
    loaded = _read_toml(path, [])
    return loaded[1] if loaded is not None else None


def _read_toml(path: Path, problems: list[TaskProblem]) -> tuple[str, dict[str, Any]] | None:
    """A TOML file's text and content; None (and the problem said) when it does not parse."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 has no .lineno: the position is only in the message.
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        message = str(exc)[: found.start()].strip() if found else str(exc)
        line = int(found.group(1)) if found else None
        problems.append(TaskProblem(path, f"invalid TOML: {message}", line))
        return None
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(TaskProblem(path, f"cannot read: {exc}"))
        return None


def _parse_toml(path: Path, problems: list[TaskProblem]) -> TaskConfig | None:
    loaded = _read_toml(path, problems)
    if loaded is None:
        return None
    text, data = loaded
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        lines = _key_lines(text)
        invalid = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            invalid.append(TaskProblem(path, _describe(error, loc), _line_of(loc, lines)))
        problems += sorted(invalid, key=lambda p: p.line or 0)  # in file order
        return None


def _describe(error: Any, loc: tuple[str | int, ...]) -> str:
    """One pydantic error as a task author reads it: the dotted key, then what is wrong."""
    key = _dotted(loc) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        known = list(_TABLES.get(_table_of(loc[:-1]), TaskConfig).model_fields)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"{key}: unknown key ({hint})"
    if kind == "missing":
        return f"{key}: required key missing"
    message = str(error["msg"])
    if kind.endswith("_type"):
        message += f", got {_toml_type(error.get('input'))} {error.get('input')!r}"
    return f"{key}: {message}"


def _dotted(loc: Sequence[str | int]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _table_of(loc: Sequence[str | int]) -> tuple[str, ...]:
    return tuple(p for p in loc if isinstance(p, str))


def _toml_type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
             dict: "a table", list: "an array"}
    return names.get(type(value), f"a {type(value).__name__}")


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
                     r"""(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def _key_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """Where each key and table of a TOML text is, by its path (``("mocks", 0, "kind")``).

    A line scan, not a parser: good for the flat files task.toml are; a key it
    cannot place just gets no line number.
    """
    lines: dict[tuple[str | int, ...], int] = {}
    arrays: dict[tuple[str | int, ...], int] = {}
    table: tuple[str | int, ...] = ()
    multiline: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if multiline:
            if multiline in raw:
                multiline = None
            continue
        header = _HEADER.match(raw)
        if header:
            path: tuple[str | int, ...] = tuple(_split_key(header.group(2)))
            if header.group(1) == "[[":
                arrays[path] = arrays.get(path, -1) + 1
                path = (*path, arrays[path])
            table = path
            lines.setdefault(table, number)
            continue
        assign = _ASSIGN.match(raw)
        if assign:
            lines.setdefault((*table, *_split_key(assign.group(1))), number)
            rest = raw[assign.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) == 1:
                    multiline = quote
    return lines


def _split_key(key: str) -> Iterator[str]:
    for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.\s]+', key):
        yield part[1:-1] if part[:1] in "\"'" else part


def _line_of(loc: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> int | None:
    """The line of ``loc``, else of the nearest table that holds it (a missing key's table)."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


# --- spec.md and openapi.yaml ------------------------------------------------------------


def _check_spec(path: Path) -> list[TaskProblem]:
    if not path.is_file():
        return [TaskProblem(path, "missing (every task ships its visible contract)")]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [TaskProblem(path, f"cannot read: {exc}")]
    if not text.strip():
        return [TaskProblem(path, "empty (it is the specification candidates are given)")]
    return []


def check_openapi(path: Path) -> list[TaskProblem]:
    """Problems of an ``openapi.yaml``: it must parse as YAML and validate as OpenAPI 3."""
    if not path.is_file():
        return [TaskProblem(path, "missing (every task ships its visible contract)")]
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [TaskProblem(path, f"cannot read: {exc}")]
    return [TaskProblem(path, problem, line) for problem, line in _openapi_problems(raw)]


@functools.lru_cache(maxsize=64)
def _openapi_problems(raw: bytes) -> tuple[tuple[str, int | None], ...]:
    """Validation by content: a run loads each task once per plan and once per resume."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
    try:
        document = yaml.load(raw, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        return ((f"does not parse as YAML: {reason}", line),)
    if not isinstance(document, dict):
        return (("not an OpenAPI document: the top level is not a mapping", None),)
    version = document.get("openapi")
    if version is None:
        return (("not an OpenAPI 3 document: no `openapi: 3.x` key", None),)
    if not isinstance(version, str) or not version.startswith("3."):
        return ((f"openapi: {version!r} is not an OpenAPI 3 version string "
                 "(write it quoted, e.g. \"3.0.3\")", None),)
    # Imported here: ~0.3 s, paid only by commands that load tasks.
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
    from referencing.exceptions import Unresolvable

    try:
        validate(document)
    except OpenAPIValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return ((f"at {where}: {exc.message}", None),)
    except Unresolvable as exc:
        return ((f"unresolvable reference: {exc}", None),)
    except (TypeError, ValueError, KeyError) as exc:
        # The validator trips over some malformed documents instead of reporting them.
        return ((f"not a valid OpenAPI document ({type(exc).__name__}: {exc})", None),)
    return ()


# --- the oracle's files ------------------------------------------------------------------


def oracle_files(oracle_dir: Path) -> list[Path]:
    """The oracle's Python files, as pytest would find them (hidden and cache folders skipped)."""
    return sorted(
        p for p in oracle_dir.rglob("*.py")
        if not any(part.startswith((".", "__pycache__"))
                   for part in p.relative_to(oracle_dir).parts)
    )


def _check_oracle_files(oracle_dir: Path) -> list[TaskProblem]:
    if not oracle_dir.is_dir():
        return [TaskProblem(oracle_dir, "missing oracle folder")]
    files = oracle_files(oracle_dir)
    if not any(p.name.startswith("test_") or p.name.endswith("_test.py") for p in files):
        return [TaskProblem(oracle_dir, "no pytest files (test_*.py) in the oracle folder")]
    problems: list[TaskProblem] = []
    for path in files:
        try:
            source = path.read_bytes()
            # An invalid escape in a string warns at compile time: not this check's business.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ast.parse(source, filename=str(path))
        except SyntaxError as exc:  # IndentationError included
            text = f" in {exc.text.strip()!r}" if exc.text and exc.text.strip() else ""
            problems.append(TaskProblem(
                path, f"{type(exc).__name__}: {exc.msg}{text}", exc.lineno or None))
        except (OSError, ValueError) as exc:  # ValueError: NUL bytes, bad encoding
            problems.append(TaskProblem(path, f"cannot read: {exc}"))
    return problems


def discover_tasks(root: Path | str) -> list[Path]:
    """Task folders directly below ``root`` (those with a task.toml or a tests/ folder:
    anvil's, Harbor's and BackendForge's)."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(
        p
        for p in base.iterdir()
        if p.is_dir() and ((p / "task.toml").is_file() or (p / "tests").is_dir())
    )
