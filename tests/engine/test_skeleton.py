"""``anvil tasks new``: a skeleton that ``anvil tasks check`` passes as written, for real
(its reference is built and run by the process runtime), and whose oracle catches a
reference that breaks its contract."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from engine import load_task
from engine._skeleton import CATEGORIES, skeleton_files
from engine._task import TaskConfig
from engine._taskcheck import check_task


def _anvil(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=180,
        env={**os.environ, "ANVIL_CACHE": str(cache), "COLUMNS": "250"},
    )


def test_new_task_passes_tasks_check_as_written(tmp_path: Path, cache_dir: Path) -> None:
    done = _anvil("tasks", "new", "demo-api", "--root", str(tmp_path / "tasks"), cache=cache_dir)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "tasks" / "demo-api"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        skeleton_files("demo-api"))
    done = _anvil("tasks", "check", str(folder), "--runtime", "process",
                  "--home", str(tmp_path / "home"), cache=cache_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    counts = {c: 5 if c == "validation" else 1 for c in CATEGORIES}  # 5 parametrised cases
    assert "ok   demo-api: categories: " + ", ".join(
        f"{c} {counts[c]}" for c in sorted(CATEGORIES)) in lines
    assert "ok   demo-api: reference passes: all 10 items pass" in lines
    assert not [line for line in lines if not line.startswith("ok ")], lines


def test_skeleton_task_loads_and_its_mocks_example_is_valid(tmp_path: Path) -> None:
    files = skeleton_files("shop.v2")
    task_dir = tmp_path / "shop.v2"
    for relative, text in files.items():
        (task_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (task_dir / relative).write_text(text)
    task = load_task(task_dir)
    assert (task.id, task.config.title, task.config.mocks) == ("shop.v2", "Shop v2", [])
    # The commented [[mocks]] example is a working one once uncommented.
    uncommented = re.sub(r"^# (\[\[mocks\]\]|\w+ = )", r"\1", files["task.toml"],
                         flags=re.MULTILINE)
    config = TaskConfig.model_validate(tomllib.loads(uncommented))
    assert [(m.kind, m.env, m.scenario) for m in config.mocks] == [
        ("payment", "PAYMENT_URL", "default")]


async def test_skeleton_oracle_catches_a_reference_that_breaks_the_contract(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANVIL_CACHE", str(cache_dir))
    task_dir = tmp_path / "leaky"
    for relative, text in skeleton_files("leaky").items():
        (task_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (task_dir / relative).write_text(text)
    server = task_dir / "reference" / "server.py"
    ownership = 'if item is None or item["owner"] != owner:'
    assert ownership in server.read_text()
    server.write_text(server.read_text().replace(ownership, "if item is None:"))
    checks = await check_task(task_dir, "process", tmp_path / "home")
    reference = checks[-1]
    assert (reference.name, reference.status) == ("reference passes", "fail")
    assert reference.detail.startswith("fail at oracle: ")
    assert reference.detail.endswith(
        "failing: test_authorization.py::test_no_token_is_401_and_another_owners_item_is_404")


@pytest.mark.parametrize("task_id", ["bad id", "_under", "a/b", "..", "x\n"])
def test_invalid_id_is_a_usage_error(tmp_path: Path, cache_dir: Path, task_id: str) -> None:
    done = _anvil("tasks", "new", task_id, "--root", str(tmp_path), cache=cache_dir)
    assert done.returncode == 2
    assert "not a valid task id" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_is_refused_and_left_alone(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "spec.md").write_text("my work")
    done = _anvil("tasks", "new", "mine", "--root", str(tmp_path), cache=cache_dir)
    assert done.returncode == 2
    assert f"{tmp_path / 'mine'}: already exists" in done.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["spec.md"]
    assert (tmp_path / "mine" / "spec.md").read_text() == "my work"
