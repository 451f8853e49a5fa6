"""The checkout task (tasks/checkout): its service charges through the evaluation's payment
mock. Both references (the official ``stripe`` library, raw HTTP) pass every item and every
broken variant in examples/checkout gets the verdict EXPECTED.toml gives it, with the
payment mock served by a real fabric."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from engine import EvaluationFinished, Task, Verdict, load_task
from engine._mocks import MockFabric
from tests.conftest import ROOT, run_engine

TASK = ROOT / "tasks" / "checkout"
EXAMPLES = ROOT / "examples" / "checkout"
REFERENCES = ("reference-http", "reference-sdk")
CATEGORIES = {"api_surface", "authorization", "validation", "state", "side_effects",
              "workflow"}


def _expected() -> dict[str, dict[str, object]]:
    return tomllib.loads((EXAMPLES / "EXPECTED.toml").read_text())


async def _run(folders: list[Path], tmp_path: Path, cache_dir: Path, runtime: str
               ) -> list[EvaluationFinished]:
    task: Task = load_task(TASK)
    async with MockFabric() as fabric:
        results, _, _ = await run_engine([(task, f) for f in folders], tmp_path, cache_dir,
                                         concurrency=2, runtime=runtime,
                                         attachments=[fabric.attach])
        assert fabric.host.running == 0, "every payment instance stops at its teardown"
    return results


def _check(folders: list[Path], results: list[EvaluationFinished]) -> None:
    expected = _expected()
    for folder, result in zip(folders, results, strict=True):
        want = expected[folder.name]
        got = {"verdict": result.verdict.value,
               "phase": result.phase.value if result.phase else None}
        assert got == {"verdict": want["verdict"], "phase": want.get("phase")}, (
            f"{folder.name}: {result.reason}")
        if result.verdict is Verdict.PASS:
            assert result.items and all(i.passed for i in result.items), folder.name
        if result.verdict is Verdict.FAIL and result.phase and result.phase.value == "oracle":
            categories = sorted({str(i.category) for i in result.items if not i.passed})
            assert categories == want["categories"], folder.name


async def test_every_checkout_example_gets_its_expected_verdict(
    tmp_path: Path, cache_dir: Path
) -> None:
    expected = _expected()
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
    assert {p.name for p in folders} == set(expected), "every example has an expected verdict"
    assert set(REFERENCES) <= set(expected) and len(folders) >= 8
    results = await _run(folders, tmp_path, cache_dir, "process")
    _check(folders, results)
    # the pinned reference of the task is one of the two, byte for byte
    pinned = TASK / "reference" / "main.py"
    assert any(pinned.read_bytes() == (EXAMPLES / r / "main.py").read_bytes()
               for r in REFERENCES)


async def test_every_checkout_example_gets_its_expected_verdict_on_docker(
    docker_ready: None, tmp_path: Path, cache_dir: Path
) -> None:
    # each container reaches its own payment instance (host.docker.internal), the mock on
    # the host delivers webhooks to the container's published port
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
    results = await _run(folders, tmp_path, cache_dir, "docker")
    _check(folders, results)


def test_checkout_oracle_has_enough_items_in_every_category() -> None:
    counts: dict[str, int] = {}
    for path in (TASK / "oracle").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cats = [str(d.args[0].value) for d in node.decorator_list
                        if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "category"
                        and isinstance(d.args[0], ast.Constant)]
                assert len(cats) == 1, f"{path.name}::{node.name} needs one category"
                counts[cats[0]] = counts.get(cats[0], 0) + 1
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
