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
    check_examples,
    example_folders,
    expected_verdicts,
    oracle_categories,
)

TASK = ROOT / "tasks" / "booking"
EXAMPLES = ROOT / "examples" / "booking"


async def _check_examples(tmp_path: Path, cache_dir: Path, runtime: str) -> None:
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected_verdicts(EXAMPLES)), (
        "every example has an expected verdict")
    await check_examples(TASK, EXAMPLES, folders, tmp_path, cache_dir, runtime)


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
