"""``anvil tasks check``: what can be checked mechanically about a task package.

Each check ends ``ok``, ``fail``, ``warn`` (worth a look, not wrong) or ``skip``
(could not be checked here, and the line says why). A task passes when no
check fails. Every problem is its own line, naming the file and line.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio

from ._errors import AnvilError, InputError
from ._oracle import oracle_command, oracle_env
from ._run import evaluate_once
from ._store import ITEM_MARKER_DEFAULTS
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
    spec = "instruction.md" if found.layout == "harbor" else "spec.md"
    checks += _lines(spec, found.problems_in(root / spec), "not empty")
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
    folder = found.root / ("oracle" if found.layout == "anvil" else "tests")
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
    bare = [item.nodeid for item in collected.items if item.category is None]
    if bare:
        named = ", ".join(bare[:MAX_NAMED]) + (
            f" and {len(bare) - MAX_NAMED} more" if len(bare) > MAX_NAMED else "")
        checks.append(Check(
            "categories", "warn",
            f"{len(bare)} of {len(collected.items)} items have no "
            f"@pytest.mark.category(...) marker (reports group items by it): {named}"))
    else:
        counts = _count(str(item.category) for item in collected.items)
        checks.append(Check("categories", "ok",
                            ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))))
    checks += _marker_counts(collected.items)
    checks += await anyio.to_thread.run_sync(_loop_checks, collected.items, found.oracle_dir)
    return checks


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


@dataclass(frozen=True)
class CollectedItem:
    """One collected item: its category, its scoring markers as written (absent ones left
    out, no defaults) and where its test function is (for reading its source)."""

    nodeid: str
    category: str | None = None
    markers: dict[str, str] = field(default_factory=dict)
    file: str | None = None  # the function's source file; None for a non-function item
    line: int = 0  # the function's first line (its first decorator's)
    function: str = ""


@dataclass
class Collected:
    """What collecting the oracle found: items with their category, and readable errors."""

    items: list[CollectedItem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# A plugin of this check only: pytest writes each collected item's category, scoring markers
# and function as it collects.
_COLLECTOR = '''\
import inspect
import json
import os


def _arg(item, name):
    marker = item.get_closest_marker(name)
    return str(marker.args[0]) if marker is not None and marker.args else None


def pytest_collection_finish(session):
    with open(os.environ["ANVIL_COLLECTED"], "w", encoding="utf-8") as fh:
        for item in session.items:
            record = {"nodeid": item.nodeid, "category": _arg(item, "category"), "markers": {
                name: value for name in ("tier", "visibility", "requirement", "level")
                if (value := _arg(item, name)) is not None}}
            function = getattr(item, "function", None)
            code = getattr(inspect.unwrap(function), "__code__", None) if function else None
            if code is not None:
                record.update(file=code.co_filename, line=code.co_firstlineno,
                              function=code.co_name)
            fh.write(json.dumps(record) + "\\n")
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
        category, markers, file = record.get("category"), record.get("markers"), record.get("file")
        line = record.get("line")
        found.items.append(CollectedItem(
            nodeid=str(record["nodeid"]),
            category=None if category is None else str(category),
            markers={str(k): str(v) for k, v in markers.items()} if isinstance(markers, dict)
            else {},
            file=None if file is None else str(file),
            line=line if isinstance(line, int) else 0,
            function=str(record.get("function", ""))))
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


# --- the items' scoring markers and loops ------------------------------------------------

SCORING_MARKERS = ("tier", "visibility", "requirement", "level")
LEVEL_ORDER = ("leaf", "mid", "root")


def _marker_counts(items: list[CollectedItem]) -> list[Check]:
    """Counts per tier, visibility and level, and the number of requirements.

    Said only for an oracle that uses scoring markers at all: for one that does not,
    every item would be counted under the defaults, which says nothing the report does not.
    """
    if not any(item.markers for item in items):
        return []
    checks = []
    for name, title in (("tier", "tiers"), ("visibility", "visibility")):
        default = ITEM_MARKER_DEFAULTS[name]
        counts = _count(item.markers.get(name, default) for item in items)
        unmarked = sum(name not in item.markers for item in items)
        note = f" ({unmarked} without a {name} marker, counted as {default})" if unmarked else ""
        checks.append(Check(title, "ok", _counts_text(counts) + note))
    # The oracle plugin refuses any other level at collection, so these are all there are.
    levels = _count(item.markers.get("level", "none") for item in items)
    checks.append(Check("levels", "ok", ", ".join(
        f"{level} {levels[level]}" for level in (*LEVEL_ORDER, "none") if level in levels)))
    requirements = {item.markers["requirement"] for item in items if "requirement" in item.markers}
    without = sum("requirement" not in item.markers for item in items)
    checks.append(Check("requirements", "ok", f"{len(requirements)} requirements" + (
        f" ({without} items without a requirement marker)" if without else "")))
    return checks


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


#: What a call to the service looks like when no oracle helper is in between.
HTTP_MODULES = frozenset({"requests", "httpx"})
HTTP_METHODS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request",
                          "stream"})
CLIENT_NAME = re.compile(r"(^|_)(session|client|http)$", re.IGNORECASE)


def _loop_checks(items: list[CollectedItem], oracle_dir: Path) -> list[Check]:
    """A warning per test function that sends requests inside a ``for`` loop over inputs.

    One item then checks several cases and its first failure hides the rest; the
    cases belong in ``pytest.mark.parametrize``. A loop over ``range(...)`` repeats
    one request rather than trying inputs, and is not flagged. A request is a call
    of ``requests``/``httpx``, of a client object, or of any function of the oracle
    (helper, fixture factory, method) that itself makes one, wherever in ``oracle_dir``
    (conftest.py included) it is defined.
    """
    sources = sorted({str(p) for p in oracle_dir.rglob("*.py") if "__pycache__" not in p.parts}
                     | {item.file for item in items if item.file})
    trees = dict(filter(None, (_parse(Path(file)) for file in sources)))
    senders = _request_functions(trees.values())
    checks: list[Check] = []
    seen: set[tuple[str, int]] = set()
    for item in items:
        if item.file is None or (item.file, item.line) in seen or item.file not in trees:
            continue
        seen.add((item.file, item.line))
        function = _function_at(trees[item.file], item.function, item.line)
        loop = _request_loop(function, senders) if function is not None else None
        if loop is not None:
            test = item.nodeid.partition("[")[0]
            checks.append(Check("loops", "warn", f"{item.file}:{loop.lineno}: {test}: "
                                "loops hide cases: use pytest.mark.parametrize"))
    return checks


def _parse(path: Path) -> tuple[str, ast.Module] | None:
    try:
        return str(path), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None  # the oracle collected, so this is not its problem to report here


def _functions(trees: Iterable[ast.AST]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield node


def _request_functions(trees: Iterable[ast.Module]) -> frozenset[str]:
    """Names of the oracle's functions that send a request, directly or through another.

    The test modules and conftest.py files the items come from are read: a fixture
    that returns a factory (``make_task``) counts, as its nested function sends.
    """
    defined = [(f.name, f, _receivers(f)) for f in _functions(trees)]
    senders: set[str] = set()
    while True:
        more = {name for name, node, receivers in defined if name not in senders
                and any(_is_request(call, senders, receivers) for call in _calls(node))}
        if not more:
            return frozenset(senders)
        senders |= more


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(node) if isinstance(n, ast.Call))


def _receivers(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The names a method of the oracle may be called on inside ``function``: its
    parameters (fixtures such as ``alice``) and ``self``."""
    args = function.args
    return frozenset({"self", *(a.arg for a in [*args.posonlyargs, *args.args,
                                                 *args.kwonlyargs])})


def _is_request(call: ast.Call, senders: frozenset[str] | set[str],
                receivers: frozenset[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in senders or func.id == "urlopen"
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value.id if isinstance(func.value, ast.Name) else ""
    if func.attr in HTTP_METHODS and (owner in HTTP_MODULES or CLIENT_NAME.search(owner)):
        return True
    # ``alice.post(...)`` on a fixture whose class sends; ``self.call`` inside that class. Not
    # on any object: ``body.get(...)`` is a dict's, even where the oracle defines a ``get``.
    return func.attr in senders and owner in receivers


def _function_at(tree: ast.Module, name: str,
                 line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition of ``name`` whose first line (first decorator's) is ``line``."""
    named = [f for f in _functions([tree]) if f.name == name]
    for node in named:
        if min([node.lineno, *(d.lineno for d in node.decorator_list)]) == line:
            return node
    return named[0] if len(named) == 1 else None


def _request_loop(function: ast.FunctionDef | ast.AsyncFunctionDef,
                  senders: frozenset[str]) -> ast.For | ast.AsyncFor | None:
    """The first ``for`` statement of the function that sends a request in its body."""
    # A parametrized argument is data (``body.get`` is a dict's), not a fixture to call.
    receivers = _receivers(function) - _parametrized(function)
    for node in ast.walk(function):
        if not isinstance(node, ast.For | ast.AsyncFor) or _is_range(node.iter):
            continue
        if any(_is_request(call, senders, receivers)
               for statement in node.body for call in _calls(statement)):
            return node
    return None


def _parametrized(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names: set[str] = set()
    for decorator in function.decorator_list:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr == "parametrize" and decorator.args):
            first = decorator.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.update(n.strip() for n in first.value.split(","))
            elif isinstance(first, ast.List | ast.Tuple):
                names.update(e.value for e in first.elts
                             if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names


def _is_range(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
            and expr.func.id == "range")


# --- the reference -----------------------------------------------------------------------


async def _check_reference(found: TaskInspection, runtime_name: str, home: Path) -> Check:
    name = found.reference_name
    reference = found.root / name if name else None
    if reference is None or not reference.is_dir():
        why = (f"{name}/ missing" if name else "solution/ has no Dockerfile: not a service")
        return Check("reference passes", "skip", f"skipped ({why})")
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
