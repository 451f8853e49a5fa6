"""The notify task (tasks/notify): its service ships and notifies through the evaluation's
delivery mock. The reference passes every item and every broken variant in examples/notify
gets the verdict EXPECTED.toml gives it, with the mock served by a real fabric."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine import load_task
from tests.conftest import ROOT
from tests.engine.examples import (
    CATEGORIES,
    check_examples,
    example_folders,
    expected_verdicts,
    run_examples,
    verdict_problems,
)

TASK = ROOT / "tasks" / "notify"
EXAMPLES = ROOT / "examples" / "notify"
REFERENCES = ("reference", "reference-stdlib")  # FastAPI + urllib; http.server + http.client


def _expected() -> dict[str, dict[str, object]]:
    return expected_verdicts(EXAMPLES)


async def test_every_notify_example_gets_its_expected_verdict(tmp_path: Path,
                                                              cache_dir: Path) -> None:
    expected = _expected()
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected), "every example has a verdict"
    assert set(REFERENCES) <= {p.name for p in folders} and len(folders) >= 10
    results = await run_examples(TASK, folders, tmp_path, cache_dir)
    # both references pass at least 100 items, every one of them
    problems = verdict_problems(folders, results, expected, passing_items=100)
    assert not problems, "\n".join(problems)
    # a broken variant caught by one item only is one oracle edit away from passing
    failed = {f.name: sum(i.failed for i in r.items)
              for f, r in zip(folders, results, strict=True)
              if expected[f.name].get("phase") == "oracle"}
    assert len(failed) == len(expected) - len(REFERENCES) and min(failed.values()) >= 2, failed


async def test_every_notify_example_gets_its_expected_verdict_on_docker(
    docker_ready: None, tmp_path: Path, cache_dir: Path
) -> None:
    # each container reaches its own instance through the host alias, the oracle from the
    # host; a variant that never calls the mock shows the oracle really reads that instance
    await check_examples(TASK, EXAMPLES, example_folders(EXAMPLES), tmp_path, cache_dir,
                         "docker", passing_items=100)


def test_the_reference_is_the_tasks_own() -> None:
    for name in ("main.py", "Dockerfile", "requirements.txt"):
        assert (EXAMPLES / "reference" / name).read_bytes() == (
            TASK / "reference" / name).read_bytes(), name


def test_notify_oracle_has_enough_items_and_asserts_on_the_journal() -> None:
    counts: dict[str, int] = {}
    journal_items = 0
    for path in (TASK / "oracle").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cats = [str(d.args[0].value) for d in node.decorator_list
                        if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "category"
                        and isinstance(d.args[0], ast.Constant)]
                assert len(cats) == 1, f"{path.name}::{node.name} needs one category"
                counts[cats[0]] = counts.get(cats[0], 0) + 1
                journal_items += bool({a.arg for a in node.args.args} & {"delivery", "faulty"})
    assert sum(counts.values()) >= 25
    assert set(counts) == CATEGORIES and min(counts.values()) >= 4, counts
    assert journal_items >= 10, "items must assert on the delivery mock's journal"


def test_task_declares_the_delivery_mock_and_the_spec_names_it() -> None:
    task = load_task(TASK)
    assert [(m.kind, m.env) for m in task.config.mocks] == [("delivery", "DELIVERY_URL")]
    spec = (TASK / "spec.md").read_text()
    assert "DELIVERY_URL" in spec and "dk_test_" in spec and "Idempotency-Key" in spec


@pytest.mark.parametrize("name", sorted(set(_expected()) - set(REFERENCES)))
def test_every_broken_variant_says_what_is_broken(name: str) -> None:
    want = _expected()[name]
    assert want["verdict"] == "fail" and want["phase"] == "oracle" and want["bug"]
    assert f"# BROKEN ({name})" in (EXAMPLES / name / "main.py").read_text()
