"""``anvil tasks check``: what can be checked mechanically about a task package.

Each check ends ``ok``, ``fail``, ``warn`` (worth a look, not wrong) or ``skip``
(could not be checked here, and the line says why). A task passes when no
check fails. Every problem is its own line, naming the file and line.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio

from ._errors import AnvilError, InputError
from ._oracle import oracle_command, oracle_env
from ._run import evaluate_once
from ._task import Task, TaskInspection, TaskProblem, inspect_task
from .runtimes import make_runtime
from .types import Verdict

Status = Literal["ok", "fail", "warn", "skip"]

COLLECT_TIMEOUT = 120.0  # a conftest that hangs at import must not hang the check
MAX_NAMED = 20  # items named in one warning line before "and N more"
# Markers pytest itself knows; an oracle may register more in its conftest.
BUILTIN_MARKERS = ("category", "tier", "visibility", "requirement", "level", "parametrize",
                   "skip", "skipif", "xfail", "usefixtures", "filterwarnings")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str

    @property
    def ok(self) -> bool:
        """False only for a failed check: warnings and skips do not fail a task."""
        return self.status != "fail"


async def check_task(path: Path, runtime_name: str, home: Path) -> list[Check]:
    """Every check of one task, in order; a check that cannot run says why it was skipped.

    Raises:
        InputError: ``path`` is not a folder (a usage error, not a task that fails).
    """
    if not path.is_dir():
        raise InputError(path, "no such task folder")
    found = await anyio.to_thread.run_sync(inspect_task, path)
    if found.layout is None:
        return [Check("task files", "fail", str(p)) for p in found.problems]
    checks = _static_checks(found)
    oracle_checks = await _check_oracle(found)
    checks += oracle_checks
    checks.append(await _check_reference(found, runtime_name, home))
    return checks


def _static_checks(found: TaskInspection) -> list[Check]:
    root = found.root
    checks: list[Check] = []
    if found.layout == "backendforge":
        checks.append(Check("task.toml", "skip",
                            "skipped (BackendForge layout: defaults apply, port 8000, "
                            "any HTTP answer on /health or / is healthy)"))
    else:
        checks += _lines("task.toml", found.problems_in(root / "task.toml"),
                         f"id {found.config.id}" if found.config else "")
    spec = found.problems_in(root / "spec.md")
    checks += _lines("spec.md", spec, "not empty")
    openapi = root / "openapi.yaml"
    problems = found.problems_in(openapi)
    checks += _lines("openapi.yaml", problems, "" if problems else _openapi_version(openapi))
    return checks


def _lines(name: str, problems: list[TaskProblem], ok_detail: str) -> list[Check]:
    if problems:
        return [Check(name, "fail", str(p)) for p in problems]
    return [Check(name, "ok", ok_detail)]


def _openapi_version(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    version = re.search(r"""^openapi:\s*["']?([0-9][0-9.]*)""", text, re.MULTILINE)
    return f"valid OpenAPI {version.group(1) if version else '3'}"


# --- the oracle --------------------------------------------------------------------------


async def _check_oracle(found: TaskInspection) -> list[Check]:
    folder = found.root / ("tests" if found.layout == "backendforge" else "oracle")
    problems = found.problems_in(folder)
    if problems or found.oracle_dir is None:
        checks = [Check("oracle files", "fail", str(p)) for p in problems]
        checks.append(Check("oracle collects", "skip",
                            "skipped (the oracle files have problems: see above)"))
        return checks
    with tempfile.TemporaryDirectory(prefix="anvil-check-") as scratch:
        collected = await collect_oracle(found.oracle_dir, Path(scratch))
    if collected.errors:
        return [Check("oracle collects", "fail", e) for e in collected.errors]
    if not collected.items:
        return [Check("oracle collects", "fail", f"{found.oracle_dir}: the oracle has no items")]
    checks = [Check("oracle collects", "ok", f"{len(collected.items)} items")]
    bare = [nodeid for nodeid, category in collected.items if category is None]
    if bare:
        named = ", ".join(bare[:MAX_NAMED]) + (
            f" and {len(bare) - MAX_NAMED} more" if len(bare) > MAX_NAMED else "")
        checks.append(Check(
            "categories", "warn",
            f"{len(bare)} of {len(collected.items)} items have no "
            f"@pytest.mark.category(...) marker (reports group items by it): {named}"))
    else:
        counts: dict[str, int] = {}
        for _nodeid, category in collected.items:
            counts[str(category)] = counts.get(str(category), 0) + 1
        checks.append(Check("categories", "ok",
                            ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))))
    return checks


@dataclass
class Collected:
    """What collecting the oracle found: items with their category, and readable errors."""

    items: list[tuple[str, str | None]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# A plugin of this check only: pytest writes each collected item's category as it collects.
_COLLECTOR = '''\
import json
import os


def pytest_collection_finish(session):
    with open(os.environ["ANVIL_COLLECTED"], "w", encoding="utf-8") as fh:
        for item in session.items:
            marker = item.get_closest_marker("category")
            category = str(marker.args[0]) if marker is not None and marker.args else None
            fh.write(json.dumps({"nodeid": item.nodeid, "category": category}) + "\\n")
'''


async def collect_oracle(oracle_dir: Path, workdir: Path) -> Collected:
    """Collect the oracle as a run would (same pytest command line), without running items.

    Collection errors are explained as ``file:line: error``: the line of an
    unknown marker (the oracle runs with ``--strict-markers``), of a failing
    import or of a syntax error, rather than pytest's summary.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "_anvil_check_collector.py").write_text(_COLLECTOR, encoding="utf-8")
    collected_path = workdir / "collected.jsonl"
    results_path = workdir / "collect-results.jsonl"
    path_var = os.pathsep.join(filter(None, [str(workdir), os.environ.get("PYTHONPATH")]))
    argv = oracle_command(oracle_dir, workdir, ["--collect-only", "-p", "_anvil_check_collector"])
    env = oracle_env("http://127.0.0.1:9", results_path, 0,
                     {"ANVIL_COLLECTED": str(collected_path), "PYTHONPATH": path_var})
    with anyio.move_on_after(COLLECT_TIMEOUT) as scope:
        result = await anyio.run_process(argv, cwd=workdir, check=False, env=env,
                                         stdin=subprocess.DEVNULL)
    if scope.cancelled_caught:
        return Collected(errors=[f"{oracle_dir}: collecting did not finish in "
                                 f"{COLLECT_TIMEOUT:g} s (does a conftest block at import?)"])
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    found = Collected()
    for record in _json_lines(collected_path):
        category = record.get("category")
        found.items.append((str(record["nodeid"]), None if category is None else str(category)))
    for record in _json_lines(results_path):
        if "collect_error" in record:
            found.errors.append(_explain(str(record["collect_error"]), str(record["message"]),
                                         oracle_dir, workdir))
    if result.returncode not in (0, 5) and not found.errors:
        # Failed before collecting any file (a conftest that does not import, a bad option).
        found.errors.append(_explain("", output, oracle_dir, workdir))
    return found


def _json_lines(path: Path) -> list[dict[str, object]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


_UNKNOWN_MARKER = re.compile(r"'([^']+)' not found in `markers` configuration option")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)|^\s*([^\s:"][^:\n"]*\.py):(\d+)(?::|$)',
                    re.MULTILINE)


def _explain(nodeid: str, text: str, oracle_dir: Path, workdir: Path) -> str:
    """One collection error as ``file:line: what``, the place found in the oracle's own files."""
    source = oracle_dir / nodeid if nodeid not in ("", ".") else None
    marker = _UNKNOWN_MARKER.search(text)
    if marker and source is not None:
        name = marker.group(1)
        line = _line_matching(source, re.compile(rf"\bmark\s*\.\s*{re.escape(name)}\b"))
        close = difflib.get_close_matches(name, BUILTIN_MARKERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = f"{source}:{line}" if line else str(source)
        return (f"{where}: unknown marker {name!r} (the oracle runs with --strict-markers: "
                f"register it in conftest.py{hint})")
    place = _last_frame(text, oracle_dir, workdir)
    if place is None:
        where = str(source) if source is not None else str(oracle_dir)
    else:
        where = f"{place[0]}:{place[1]}"
    return f"{where}: {_error_line(text)}"


def _line_matching(path: Path, pattern: re.Pattern[str]) -> int | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return next((n for n, line in enumerate(lines, start=1) if pattern.search(line)), None)


def _last_frame(text: str, oracle_dir: Path, workdir: Path) -> tuple[Path, int] | None:
    """The innermost traceback frame that is in the oracle's files (not pytest's or Python's)."""
    root = oracle_dir.resolve()
    found: tuple[Path, int] | None = None
    for match in _FRAME.finditer(text):
        name, line = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
        for base in (workdir, oracle_dir):
            candidate = (base / name).resolve()
            if (candidate == root or root in candidate.parents) and candidate.is_file():
                found = (candidate, int(line))
                break
    return found


def _error_line(text: str) -> str:
    """The error itself: pytest's last ``E`` line, else the last line that is not a summary."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    if errors:
        return errors[-1][:500]
    meaningful = [line for line in lines
                  if not line.startswith(("=", "!", "_", "ERROR ", "no tests ran", "Interrupted"))
                  and not re.match(r"^\d+ errors? in [\d.]+s$", line)]
    return (meaningful[-1] if meaningful else "error")[:500]


# --- the reference -----------------------------------------------------------------------


async def _check_reference(found: TaskInspection, runtime_name: str, home: Path) -> Check:
    reference = found.root / "reference"
    if not reference.is_dir():
        return Check("reference passes", "skip", "skipped (reference/ missing)")
    if found.problems:
        return Check("reference passes", "skip", "skipped (the task is not valid: see above)")
    task: Task = found.task()
    home.mkdir(parents=True, exist_ok=True)
    try:
        runtime, _ = await make_runtime(runtime_name, home)
        async with runtime:
            result = await evaluate_once(task, reference, runtime, home)
    except AnvilError as exc:
        return Check("reference passes", "fail", f"could not run the reference: {exc}")
    if result.verdict is Verdict.PASS:
        return Check("reference passes", "ok", f"all {result.items_passed} items pass")
    failed = [i.nodeid for i in result.items if not i.passed][:5]
    where = f" at {result.phase.value}" if result.phase else ""
    detail = f"{result.verdict.value}{where}: {result.reason}" + (
        f"; failing: {', '.join(failed)}" if failed else "")
    return Check("reference passes", "fail", detail)
