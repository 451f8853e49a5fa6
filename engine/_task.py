"""Task packages: loading and validating ``tasks/<id>/``.

Two shapes are accepted:

* anvil's own: ``task.toml``, ``spec.md``, ``openapi.yaml``, ``oracle/``,
  optionally ``reference/``;
* BackendForge's: no ``task.toml``; ``spec.md``, ``openapi.yaml`` and a
  ``tests/`` folder of pytest files using ``requests`` and ``BASE_URL``.
  Defaults apply (port 8000, health probe accepts any HTTP answer).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import TaskFormatError
from .types import Phase


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    kind: str
    env: str
    scenario: str = "default"


class TaskConfig(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    title: str = ""
    domain: str = ""
    service: ServiceConfig = ServiceConfig()
    oracle: OracleConfig = OracleConfig()
    mocks: list[MockConfig] = []


@dataclass(frozen=True)
class Task:
    """A loaded, validated task package."""

    root: Path
    config: TaskConfig
    oracle_dir: Path

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def reference(self) -> Path | None:
        ref = self.root / "reference"
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


def load_task(path: Path | str) -> Task:
    """Load the task package at ``path``.

    Raises:
        TaskFormatError: the folder is missing, a file is missing or does not
            parse; the message names the file (and line where known).
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskFormatError(root, "no such task folder")
    toml_path = root / "task.toml"
    if toml_path.is_file():
        config = _parse_toml(toml_path)
        oracle_dir = root / "oracle"
    elif (root / "tests").is_dir():
        # BackendForge layout: defaults, id from the folder name.
        config = TaskConfig(id=_safe_id(root.resolve().name), title=root.name)
        oracle_dir = root / "tests"
    else:
        raise TaskFormatError(root, "not a task: no task.toml (and no tests/ folder)")
    for name in ("spec.md", "openapi.yaml"):
        if not (root / name).is_file():
            raise TaskFormatError(root / name, "missing (every task ships its visible contract)")
    if not oracle_dir.is_dir():
        raise TaskFormatError(oracle_dir, "missing oracle folder")
    if not any(oracle_dir.glob("test_*.py")) and not any(oracle_dir.glob("*_test.py")):
        raise TaskFormatError(oracle_dir, "no pytest files (test_*.py) in the oracle folder")
    return Task(root=root.resolve(), config=config, oracle_dir=oracle_dir.resolve())


def _safe_id(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).strip("-.")
    return cleaned or "task"


def _parse_toml(path: Path) -> TaskConfig:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 has no .lineno: the position is only in the message.
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        message = str(exc)[: found.start()].strip() if found else str(exc)
        line = int(found.group(1)) if found else None
        raise TaskFormatError(path, f"invalid TOML: {message}", line) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read: {exc}") from exc
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise TaskFormatError(path, f"{where}: {first['msg']}{more}") from exc


def discover_tasks(root: Path | str) -> list[Path]:
    """Task folders directly below ``root`` (those with a task.toml or a tests/ folder)."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(
        p
        for p in base.iterdir()
        if p.is_dir() and ((p / "task.toml").is_file() or (p / "tests").is_dir())
    )
