"""The checkout task (tasks/checkout): its service charges through the evaluation's payment
mock. Both references (the official ``stripe`` library, raw HTTP) pass every item and every
broken variant in examples/checkout gets the verdict EXPECTED.toml gives it, with the
payment mock served by a real fabric."""

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
    run_examples,
    verdict_problems,
)

TASK = ROOT / "tasks" / "checkout"
EXAMPLES = ROOT / "examples" / "checkout"
REFERENCES = ("reference-http", "reference-sdk")


def _expected() -> dict[str, dict[str, object]]:
    return expected_verdicts(EXAMPLES)


async def test_every_checkout_example_gets_its_expected_verdict(
    tmp_path: Path, cache_dir: Path
) -> None:
    expected = _expected()
    folders = example_folders(EXAMPLES)
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    assert set(REFERENCES) <= set(expected) and len(folders) >= 8
    results = await run_examples(TASK, folders, tmp_path, cache_dir)
    # both references pass at least 100 items, every one of them
    problems = verdict_problems(folders, results, expected, passing_items=100)
    assert not problems, "\n".join(problems)
    # a broken variant caught by one item only is one oracle edit away from passing
    failed = {f.name: sum(i.failed for i in r.items)
              for f, r in zip(folders, results, strict=True)
              if expected[f.name].get("phase") == "oracle"}
    assert len(failed) == len(expected) - len(REFERENCES) and min(failed.values()) >= 2, failed
    # the pinned reference of the task is one of the two, byte for byte
    pinned = TASK / "reference" / "main.py"
    assert any(pinned.read_bytes() == (EXAMPLES / r / "main.py").read_bytes()
               for r in REFERENCES)


async def test_every_checkout_example_gets_its_expected_verdict_on_docker(
    docker_ready: None, tmp_path: Path, cache_dir: Path
) -> None:
    # each container reaches its own payment instance (host.docker.internal), the mock on
    # the host delivers webhooks to the container's published port
    await check_examples(TASK, EXAMPLES, example_folders(EXAMPLES), tmp_path, cache_dir,
                         "docker", passing_items=100)


def test_checkout_oracle_has_enough_items_in_every_category() -> None:
    counts = oracle_categories(TASK / "oracle")
    assert sum(counts.values()) >= 25
    assert set(counts) == CATEGORIES and min(counts.values()) >= 3, counts


def test_task_declares_the_payment_mock_and_the_spec_names_it() -> None:
    task = load_task(TASK)
    assert [(m.kind, m.env) for m in task.config.mocks] == [("payment", "PAYMENT_URL")]
    spec = (TASK / "spec.md").read_text()
    assert "PAYMENT_URL" in spec and "sk_test_checkout_" in spec and "Idempotency-Key" in spec
    dockerfile = (EXAMPLES / "reference-sdk" / "Dockerfile").read_text()
    assert "pip install" in dockerfile and "stripe" in dockerfile
    assert "import stripe" in (EXAMPLES / "reference-sdk" / "main.py").read_text()
    assert "stripe" not in (EXAMPLES / "reference-http" / "requirements.txt").read_text()


@pytest.mark.parametrize("name", sorted(set(_expected()) - set(REFERENCES)))
def test_every_broken_variant_says_what_is_broken(name: str) -> None:
    want = _expected()[name]
    assert want["verdict"] == "fail" and want["phase"] == "oracle" and want["bug"]
    assert f"# BROKEN ({name})" in (EXAMPLES / name / "main.py").read_text()
