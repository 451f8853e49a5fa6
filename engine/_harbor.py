"""Harbor task folders read as anvil tasks (``engine._task`` turns the result into a Task).

Harbor (the successor of terminal-bench) gives an agent ``instruction.md`` and a
container built from ``environment/``, lets it work, then copies ``tests/`` into that
container and runs ``tests/test.sh``, which writes a reward to
``/logs/verifier/reward.txt`` (or ``reward.json``), and usually a CTRF report of the
pytest run it did. anvil keeps what scores an HTTP service and replaces the rest:

* ``task.toml``: ``[task].name`` (its part after ``org/``) is the id, ``description`` the
  title, ``[metadata].category`` the domain; ``[verifier].timeout_sec`` is the oracle's
  budget, ``[environment].build_timeout_sec``, ``cpus`` and ``memory_mb`` the service's
  build deadline and limits (Harbor's defaults when absent: 600 s, 600 s, 1 CPU,
  2048 MB). An ``[anvil]`` table, which Harbor ignores, holds what Harbor has no word
  for: it is an anvil task.toml without the required ``id`` (``[anvil.service]`` port,
  health_path, the other phase timeouts; ``[anvil.oracle]`` item_timeout;
  ``[[anvil.mocks]]``), and its values win over the ones derived from Harbor's.
* ``instruction.md`` is the specification; ``tests/``'s pytest files are the oracle,
  run by anvil's own runner against ``BASE_URL`` (``test.sh`` is not run);
  ``solution/`` is the reference when it is a service folder (has a Dockerfile).

What cannot apply is refused with the key or file named, never silently dropped when
it would change a verdict: multi-step tasks, ``[verifier].env`` (the oracle runs with
``BASE_URL`` only), a non-Linux ``[environment].os``, a ``tests/`` folder with no pytest
files or none that reads ``BASE_URL``. docs/harbor.md lists every part.

This module knows Harbor's schema and nothing of anvil's models: it returns an anvil
task.toml's content as a plain mapping and its problems as :class:`Issue`, and
``engine._task`` validates the one and places the other (file and line).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The top-level keys of Harbor's task.toml (schema 1.0 to 1.3); ``version`` is 1.0's name
#: for ``schema_version``.
HARBOR_KEYS = frozenset({"schema_version", "version", "task", "metadata", "verifier", "agent",
                         "environment", "solution", "source", "steps"})
ANVIL_TABLE = "anvil"
INSTRUCTION = "instruction.md"
TESTS = "tests"
SOLUTION = "solution"

Key = tuple[str | int, ...]


@dataclass(frozen=True)
class Issue:
    """One problem of a Harbor folder: at ``key`` of task.toml, or about the file ``path``."""

    message: str
    key: Key = ()
    path: Path | None = None


class _Section(BaseModel):
    # Harbor ignores keys it does not know and adds fields between releases: only the
    # fields anvil reads are typed (strictly, like anvil's own task.toml); the rest pass.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class _Package(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""


class _Verifier(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = {}


class _Agent(_Section):
    timeout_sec: float | None = Field(None, gt=0)


class _Environment(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    cpus: float = Field(1, gt=0)
    memory_mb: int = Field(2048, ge=16)
    memory: str | None = None  # deprecated by Harbor for memory_mb: "2G", "512M"
    os: str = "linux"


class _Config(_Section):
    schema_version: str | None = None
    version: str | None = None
    task: _Package | None = None
    metadata: dict[str, Any] = {}
    verifier: _Verifier = _Verifier()
    agent: _Agent = _Agent()
    environment: _Environment = _Environment()
    solution: dict[str, Any] = {}
    steps: list[Any] = []
    anvil: dict[str, Any] = {}


def is_harbor(root: Path, data: Mapping[str, Any] | None) -> bool:
    """Whether the folder with this task.toml content (None: it does not parse) is Harbor's.

    anvil's own task.toml has an ``id``; Harbor's has none and has Harbor's sections, or
    at least the folder has Harbor's ``instruction.md`` where anvil's has ``spec.md``.
    """
    has_instruction = (root / INSTRUCTION).is_file() and not (root / "spec.md").is_file()
    if data is None:
        return has_instruction
    return "id" not in data and (bool(HARBOR_KEYS & data.keys()) or has_instruction)


def lacks_config(root: Path) -> bool:
    """A Harbor folder (instruction.md and tests/, no spec.md) whose task.toml is missing."""
    return (not (root / "task.toml").exists() and (root / INSTRUCTION).is_file()
            and (root / TESTS).is_dir() and not (root / "spec.md").exists())


def read_config(data: Mapping[str, Any], folder_name: str) -> tuple[dict[str, Any], list[Issue]]:
    """An anvil task.toml's content from a Harbor task.toml's, with what keeps it from applying.

    Returns:
        The content (``id``, ``title``, ``domain``, ``service``, ``oracle``, ``mocks``:
        Harbor's values with the ``[anvil]`` table merged over them), to be validated as
        anvil's TaskConfig; its ``[anvil]`` part is not validated here. When the issues
        are not empty the content is not to be used.
    """
    issues = [Issue(f"{key}: unknown key (did you mean {close[0]!r}? Harbor ignores "
                    "unknown keys, so this value would be lost)", (key,))
              for key in data if key not in HARBOR_KEYS and key != ANVIL_TABLE
              and (close := difflib.get_close_matches(key, [*HARBOR_KEYS, ANVIL_TABLE], n=1))]
    try:
        config = _Config.model_validate(data)
    except ValidationError as exc:
        issues += [_issue(error) for error in exc.errors()]
        return {}, issues
    issues += _refusals(config)
    memory_mb = config.environment.memory_mb
    if config.environment.memory is not None and "memory_mb" not in data.get("environment", {}):
        parsed = _megabytes(config.environment.memory)
        if parsed is None:
            issues.append(Issue(f"environment.memory: {config.environment.memory!r} is not "
                                "a size like \"2G\" or \"512M\"", ("environment", "memory")))
        else:
            memory_mb = parsed
    name = config.task.name.partition("/")[2] if config.task else folder_name
    category = config.metadata.get("category")
    settings: dict[str, Any] = {
        "id": _safe_id(name),
        "title": (config.task.description if config.task else "") or name,
        "domain": category if isinstance(category, str) else "",
        "service": {"build_timeout": config.environment.build_timeout_sec,
                    "cpus": config.environment.cpus, "memory_mb": memory_mb},
        "oracle": {"timeout": config.verifier.timeout_sec},
    }
    for key, value in config.anvil.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            settings[key] = {**settings[key], **value}  # [anvil.service] over Harbor's values
        else:
            settings[key] = value
    return settings, issues


def _refusals(config: _Config) -> list[Issue]:
    """The parts of a valid Harbor task.toml that would change a verdict if ignored."""
    issues = []
    if config.steps:
        issues.append(Issue("steps: multi-step Harbor tasks cannot be imported (anvil scores "
                            "one service against one oracle): make each step its own task",
                            ("steps",)))
    if config.verifier.env:
        issues.append(Issue(f"verifier.env: {', '.join(sorted(config.verifier.env))} cannot "
                            "be given to anvil's oracle, which runs the tests with BASE_URL "
                            "only; remove it (tests needing it would fail every service)",
                            ("verifier", "env")))
    if config.environment.os != "linux":
        issues.append(Issue(f"environment.os: {config.environment.os!r}: anvil runs Linux "
                            "services only", ("environment", "os")))
    return issues


def folder_issues(root: Path) -> list[Issue]:
    """What is missing from a Harbor folder for anvil to score services with it.

    One issue per missing part, naming its file: instruction.md (not empty once Harbor's
    canary lines are stripped), tests/ with pytest files of which at least one reads
    ``BASE_URL``. (openapi.yaml is checked by ``engine._task``, like any layout's.)
    """
    issues = []
    instruction = root / INSTRUCTION
    if not instruction.is_file():
        issues.append(Issue("missing (Harbor's task prompt: anvil gives it to candidates "
                            "as the specification)", path=instruction))
    else:
        try:
            text = instruction.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(Issue(f"cannot read: {exc}", path=instruction))
        else:
            if not _strip_canary(text).strip():
                issues.append(Issue("empty (it is the specification candidates are given)",
                                    path=instruction))
    tests = root / TESTS
    if not tests.is_dir():
        issues.append(Issue("missing (Harbor's verifier folder: anvil runs its pytest files "
                            "as the oracle)", path=tests))
        return issues
    files = [p for p in sorted(tests.rglob("*.py"))
             if not any(part.startswith((".", "__pycache__"))
                        for part in p.relative_to(tests).parts)]
    if not any(p.name.startswith("test_") or p.name.endswith("_test.py") for p in files):
        issues.append(Issue("no pytest files (test_*.py): anvil runs tests/ as pytest items "
                            "against BASE_URL; a verifier that is only test.sh (shell "
                            "checks, rewardkit, a judge) cannot score a service", path=tests))
    elif not any(_mentions_base_url(p) for p in files):
        issues.append(Issue("no test file reads BASE_URL: anvil's oracle reaches the service "
                            "only there (e.g. os.environ.get(\"BASE_URL\", "
                            "\"http://localhost:8000\"))", path=tests))
    return issues


def reference_name(root: Path) -> str | None:
    """``solution`` when it is a service a runtime can build (has a Dockerfile), else None:
    Harbor's usual ``solve.sh`` acts inside the agent's container and is no submission."""
    return SOLUTION if (root / SOLUTION / "Dockerfile").is_file() else None


_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def _strip_canary(text: str) -> str:
    """The instruction as Harbor gives it: leading canary comment lines are dropped."""
    lines = text.splitlines()
    while lines and (_CANARY.match(lines[0].strip()) or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines)


_BASE_URL = re.compile(rb"""["']BASE_URL["']""")  # the variable's name, as code reads it


def _mentions_base_url(path: Path) -> bool:
    try:
        return _BASE_URL.search(path.read_bytes()) is not None
    except OSError:
        return False


def _megabytes(size: str) -> int | None:
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([GMK])\s*", size.upper())
    if not found:
        return None
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}[found.group(2)]
    return int(float(found.group(1)) * scale)


def _issue(error: Any) -> Issue:
    loc: Key = tuple(error["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    message = str(error["msg"])
    if error["type"].endswith("_type"):
        value = error.get("input")
        names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
                 dict: "a table", list: "an array"}
        message += f", got {names.get(type(value), type(value).__name__)} {value!r}"
    return Issue(f"{key}: {message}", loc)


def _safe_id(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).strip("-.")
    return cleaned or "task"
