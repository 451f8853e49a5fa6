"""Every bundled example submission gets the verdict written next to it (EXPECTED.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from engine import Task, Verdict, load_task
from tests.conftest import ROOT, run_engine

EXAMPLES = ROOT / "examples" / "taskboard"


async def test_examples_get_their_expected_verdicts(tmp_path: Path, cache_dir: Path) -> None:
    expected = tomllib.loads((EXAMPLES / "EXPECTED.toml").read_text())
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    assert len(folders) >= 5
    task: Task = load_task(ROOT / "tasks" / "taskboard")
    results, _, _ = await run_engine([(task, f) for f in folders], tmp_path, cache_dir)
    for folder, result in zip(folders, results, strict=True):
        want = expected[folder.name]
        got = {"verdict": result.verdict.value,
               "phase": result.phase.value if result.phase else None}
        assert got == {"verdict": want["verdict"], "phase": want.get("phase")}, (
            f"{folder.name}: {result.reason}")
        if result.verdict is Verdict.FAIL and result.phase and result.phase.value == "oracle":
            categories = sorted({i.category for i in result.items if not i.passed})
            assert categories == want["categories"], folder.name


def test_bundled_task_has_enough_items_in_every_category() -> None:
    import ast

    counts: dict[str, int] = {}
    for path in (ROOT / "tasks" / "taskboard" / "oracle").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cats = [d.args[0].value for d in node.decorator_list
                        if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "category"]
                assert len(cats) == 1, f"{path.name}::{node.name} needs one category"
                counts[cats[0]] = counts.get(cats[0], 0) + 1
    assert sum(counts.values()) >= 25
    assert set(counts) == {"api_surface", "authorization", "validation", "state",
                           "side_effects", "workflow"}
