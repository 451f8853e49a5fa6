"""What the tests of bundled tasks share: run a task's example submissions (with a real mock
fabric when the task declares mocks), compare each verdict with its EXPECTED.toml, and count
the oracle's items per category."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from engine import EvaluationFinished, Verdict, load_task
from engine._mocks import MockFabric
from tests.conftest import run_engine

CATEGORIES = frozenset({"api_surface", "authorization", "validation", "state", "side_effects",
                        "workflow"})


def expected_verdicts(examples: Path) -> dict[str, dict[str, object]]:
    return tomllib.loads((examples / "EXPECTED.toml").read_text())


def example_folders(examples: Path) -> list[Path]:
    return sorted(p for p in examples.iterdir() if p.is_dir())


async def run_examples(task_dir: Path, folders: list[Path], tmp_path: Path, cache_dir: Path,
                       runtime: str = "process", concurrency: int = 2
                       ) -> list[EvaluationFinished]:
    """Every folder against the task, in folder order; each mock instance is checked to stop
    at its evaluation's teardown."""
    task = load_task(task_dir)
    pairs = [(task, f) for f in folders]
    if not task.config.mocks:
        results, _, _ = await run_engine(pairs, tmp_path, cache_dir, concurrency=concurrency,
                                         runtime=runtime)
        return results
    async with MockFabric() as fabric:
        results, _, _ = await run_engine(pairs, tmp_path, cache_dir, concurrency=concurrency,
                                         runtime=runtime, attachments=[fabric.attach])
        assert fabric.host.running == 0, "every mock instance stops at its teardown"
    return results


def verdict_problems(folders: list[Path], results: list[EvaluationFinished],
                     expected: dict[str, dict[str, object]],
                     passing_items: int | None = None) -> list[str]:
    """One line per example whose verdict, phase or failed categories differ from
    EXPECTED.toml; with ``passing_items``, a pass must also have at least that many items,
    every one passed."""
    problems = []
    for folder, result in zip(folders, results, strict=True):
        want = expected[folder.name]
        got: dict[str, object] = {"verdict": result.verdict.value,
                                  "phase": result.phase.value if result.phase else None}
        wanted: dict[str, object] = {"verdict": want["verdict"], "phase": want.get("phase")}
        if result.verdict is Verdict.FAIL and result.phase and result.phase.value == "oracle":
            got["categories"] = sorted({i.category or "" for i in result.items if not i.passed})
            wanted["categories"] = want.get("categories")
        if got != wanted:
            failing = sorted(i.nodeid for i in result.items if not i.passed)
            problems.append(f"{folder.name}: got {got}, want {wanted} ({result.reason}; "
                            f"failing: {failing})")
        elif result.verdict is Verdict.PASS and passing_items is not None and not (
                len(result.items) >= passing_items and all(i.passed for i in result.items)):
            problems.append(f"{folder.name}: passed with {len(result.items)} items, "
                            f"not all passed or fewer than {passing_items}")
    return problems


def oracle_categories(oracle: Path) -> dict[str, int]:
    """Items per category in an oracle folder; every item must carry exactly one."""
    counts: dict[str, int] = {}
    for path in oracle.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cats = [str(getattr(d.args[0], "value", "")) for d in node.decorator_list
                        if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "category"]
                assert len(cats) == 1, f"{path.name}::{node.name} needs one category"
                counts[cats[0]] = counts.get(cats[0], 0) + 1
    return counts


async def check_examples(task_dir: Path, examples: Path, folders: list[Path], tmp_path: Path,
                         cache_dir: Path, runtime: str = "process", *, concurrency: int = 2,
                         passing_items: int | None = None) -> None:
    """Run ``folders`` and assert each gets the verdict EXPECTED.toml gives it."""
    results = await run_examples(task_dir, folders, tmp_path, cache_dir, runtime, concurrency)
    problems = verdict_problems(folders, results, expected_verdicts(examples), passing_items)
    assert not problems, "\n".join(problems)
