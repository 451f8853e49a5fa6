"""Every bundled example submission gets the verdict written next to it (EXPECTED.toml)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT
from tests.engine.examples import (
    CATEGORIES,
    example_folders,
    expected_verdicts,
    oracle_categories,
    run_examples,
    verdict_problems,
)

EXAMPLES = ROOT / "examples" / "taskboard"


async def test_examples_get_their_expected_verdicts(tmp_path: Path, cache_dir: Path) -> None:
    expected = expected_verdicts(EXAMPLES)
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    assert len(folders) >= 5
    results = await run_examples(ROOT / "tasks" / "taskboard", folders, tmp_path, cache_dir,
                                 concurrency=4)
    # the reference passes at least 100 items, every one of them
    problems = verdict_problems(folders, results, expected, passing_items=100)
    assert not problems, "\n".join(problems)
    # a broken variant caught by one item only is one oracle edit away from passing
    failed = {f.name: sum(i.failed for i in r.items)
              for f, r in zip(folders, results, strict=True)
              if expected[f.name].get("phase") == "oracle"}
    assert len(failed) >= 3 and min(failed.values()) >= 2, failed


def test_bundled_task_has_enough_items_in_every_category() -> None:
    counts = oracle_categories(ROOT / "tasks" / "taskboard" / "oracle")
    assert sum(counts.values()) >= 25
    assert set(counts) == CATEGORIES
