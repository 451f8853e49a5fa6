"""``anvil tasks check``: what can be checked mechanically about a task package."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from openapi_spec_validator import validate as validate_openapi
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from ._errors import AnvilError, TaskFormatError
from ._oracle import collect_items
from ._run import evaluate_once
from ._task import Task, load_task
from .runtimes import make_runtime
from .types import Verdict


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_openapi(path: Path) -> Check:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return Check("openapi.yaml", False, f"{path}: does not parse: {exc}")
    if not isinstance(document, dict):
        return Check("openapi.yaml", False, f"{path}: not a mapping")
    try:
        validate_openapi(document)
    except OpenAPIValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return Check("openapi.yaml", False, f"{path}: at {where}: {exc.message}")
    return Check("openapi.yaml", True, f"valid OpenAPI {document.get('openapi', '?')}")


async def check_task(path: Path, runtime_name: str, home: Path) -> list[Check]:
    """Every check of one task, in order; later checks are skipped when the task does not load."""
    try:
        task = load_task(path)
    except TaskFormatError as exc:
        return [Check("task files", False, str(exc))]
    checks = [Check("task files", True, f"id {task.id}")]
    spec = task.root / "spec.md"
    spec_ok = bool(spec.read_text(encoding="utf-8", errors="replace").strip())
    checks.append(Check("spec.md", spec_ok, "not empty" if spec_ok else f"{spec}: empty"))
    checks.append(check_openapi(task.root / "openapi.yaml"))
    with tempfile.TemporaryDirectory(prefix="anvil-check-") as scratch:
        try:
            items = await collect_items(task.oracle_dir, Path(scratch))
            checks.append(Check("oracle collects", True, f"{len(items)} items"))
        except AnvilError as exc:
            checks.append(Check("oracle collects", False, str(exc)))
            return checks
    checks.append(await _check_reference(task, runtime_name, home))
    return checks


async def _check_reference(task: Task, runtime_name: str, home: Path) -> Check:
    if task.reference is None:
        return Check("reference passes", False, f"{task.root / 'reference'}: missing")
    home.mkdir(parents=True, exist_ok=True)
    runtime, _ = await make_runtime(runtime_name, home)
    async with runtime:
        result = await evaluate_once(task, task.reference, runtime, home)
    if result.verdict is Verdict.PASS:
        return Check("reference passes", True, f"all {result.items_passed} items pass")
    failed = [i.nodeid for i in result.items if not i.passed][:5]
    where = f" at {result.phase.value}" if result.phase else ""
    detail = f"{result.verdict.value}{where}: {result.reason}" + (
        f"; failing: {', '.join(failed)}" if failed else "")
    return Check("reference passes", False, detail)
