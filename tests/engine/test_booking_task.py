"""The bundled booking task (calendar mock): its reference passes and every broken variant in
examples/booking gets the verdict written in EXPECTED.toml, the service reaching its own
calendar instance and the oracle reading that instance's journal."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from engine import Task, Verdict, load_task
from engine._mocks import MockFabric
from tests.conftest import ROOT, run_engine

TASK = ROOT / "tasks" / "booking"
EXAMPLES = ROOT / "examples" / "booking"


async def _check_examples(tmp_path: Path, cache_dir: Path, runtime: str) -> None:
    expected = tomllib.loads((EXAMPLES / "EXPECTED.toml").read_text())
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    task: Task = load_task(TASK)
    async with MockFabric() as fabric:
        results, _, _ = await run_engine([(task, f) for f in folders], tmp_path, cache_dir,
                                         concurrency=2, runtime=runtime,
                                         attachments=[fabric.attach])
        assert fabric.host.running == 0  # every calendar instance stopped at its teardown
    problems = []
    for folder, result in zip(folders, results, strict=True):
        want = expected[folder.name]
        got: dict[str, object] = {"verdict": result.verdict.value,
                                  "phase": result.phase.value if result.phase else None}
        if result.verdict is Verdict.FAIL and result.phase and result.phase.value == "oracle":
            got["categories"] = sorted({i.category or "" for i in result.items if not i.passed})
        wanted = {"verdict": want["verdict"], "phase": want.get("phase")}
        if "categories" in want:
            wanted["categories"] = want["categories"]
        if got != wanted:
            failing = sorted(i.nodeid for i in result.items if not i.passed)
            problems.append(f"{folder.name}: got {got}, want {wanted} ({result.reason}; "
                            f"failing: {failing})")
    assert not problems, "\n".join(problems)


async def test_booking_examples_get_their_expected_verdicts(tmp_path: Path,
                                                            cache_dir: Path) -> None:
    await _check_examples(tmp_path, cache_dir, "process")


@pytest.mark.docker
async def test_booking_examples_on_docker(tmp_path: Path, cache_dir: Path,
                                          docker_ready: None) -> None:
    await _check_examples(tmp_path, cache_dir, "docker")


def test_booking_oracle_has_enough_items_in_every_category() -> None:
    counts: dict[str, int] = {}
    for path in (TASK / "oracle").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cats = [str(getattr(d.args[0], "value", "")) for d in node.decorator_list
                        if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "category"]
                assert len(cats) == 1, f"{path.name}::{node.name} needs one category"
                counts[cats[0]] = counts.get(cats[0], 0) + 1
    assert sum(counts.values()) >= 25, counts
    assert set(counts) == {"api_surface", "authorization", "validation", "state",
                           "side_effects", "workflow"}


def test_the_task_declares_the_calendar_mock() -> None:
    task = load_task(TASK)
    assert [(m.kind, m.env, m.scenario) for m in task.config.mocks] == [
        ("calendar", "CALENDAR_URL", "busy")]
    assert "CALENDAR_URL" in (TASK / "spec.md").read_text()
