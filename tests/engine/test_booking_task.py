"""The bundled booking task (calendar mock): its reference passes and every broken variant in
examples/booking gets the verdict written in EXPECTED.toml, the service reaching its own
calendar instance and the oracle reading that instance's journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import load_task
from tests.conftest import ROOT
from tests.engine.examples import (
    CATEGORIES,
    example_folders,
    expected_verdicts,
    oracle_categories,
    run_examples,
    verdict_problems,
)

TASK = ROOT / "tasks" / "booking"
EXAMPLES = ROOT / "examples" / "booking"


async def _check_examples(tmp_path: Path, cache_dir: Path, runtime: str) -> None:
    expected = expected_verdicts(EXAMPLES)
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    results = await run_examples(TASK, folders, tmp_path, cache_dir, runtime)
    # the reference passes at least 100 items, every one of them
    problems = verdict_problems(folders, results, expected, passing_items=100)
    assert not problems, "\n".join(problems)
    # a broken variant caught by one item only is one oracle edit away from passing
    failed = {f.name: sum(i.failed for i in r.items)
              for f, r in zip(folders, results, strict=True)
              if expected[f.name].get("phase") == "oracle"}
    assert len(failed) >= 8 and min(failed.values()) >= 2, failed


async def test_booking_examples_get_their_expected_verdicts(tmp_path: Path,
                                                            cache_dir: Path) -> None:
    await _check_examples(tmp_path, cache_dir, "process")


@pytest.mark.docker
async def test_booking_examples_on_docker(tmp_path: Path, cache_dir: Path,
                                          docker_ready: None) -> None:
    await _check_examples(tmp_path, cache_dir, "docker")


def test_booking_oracle_has_enough_items_in_every_category() -> None:
    counts = oracle_categories(TASK / "oracle")
    assert sum(counts.values()) >= 25, counts
    assert set(counts) == CATEGORIES


def test_the_task_declares_the_calendar_mock() -> None:
    task = load_task(TASK)
    assert [(m.kind, m.env, m.scenario) for m in task.config.mocks] == [
        ("calendar", "CALENDAR_URL", "busy")]
    assert "CALENDAR_URL" in (TASK / "spec.md").read_text()
