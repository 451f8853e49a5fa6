"""Every bundled example submission gets the verdict written next to it (EXPECTED.toml)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT
from tests.engine.examples import (
    CATEGORIES,
    check_examples,
    example_folders,
    expected_verdicts,
    oracle_categories,
)

EXAMPLES = ROOT / "examples" / "taskboard"


async def test_examples_get_their_expected_verdicts(tmp_path: Path, cache_dir: Path) -> None:
    expected = expected_verdicts(EXAMPLES)
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    assert len(folders) >= 5
    await check_examples(ROOT / "tasks" / "taskboard", EXAMPLES, folders, tmp_path, cache_dir,
                         concurrency=4)


def test_bundled_task_has_enough_items_in_every_category() -> None:
    counts = oracle_categories(ROOT / "tasks" / "taskboard" / "oracle")
    assert sum(counts.values()) >= 25
    assert set(counts) == CATEGORIES
