"""``anvil tasks check``: the real collection error with file and line, items without a
category, every task.toml problem on its own line, and what was skipped said as such.

The checks run for real: pytest collects the oracle in a subprocess, exactly as a run
would (``--strict-markers``, anvil's plugin). No test here needs a runtime: the tasks
checked have no reference/ (the skeleton tests run one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine._taskcheck import Check, check_task
from tests.conftest import FIXTURES

TINY = FIXTURES / "tiny_task"


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "t"
    shutil.copytree(TINY, folder)
    return folder


async def _check(task_dir: Path, home: Path) -> dict[str, list[Check]]:
    by_name: dict[str, list[Check]] = {}
    for check in await check_task(task_dir, "process", home):
        by_name.setdefault(check.name, []).append(check)
    return by_name


def _one(checks: dict[str, list[Check]], name: str) -> Check:
    (only,) = checks[name]
    return only


async def test_a_valid_task_without_reference_passes_and_says_what_was_skipped(
    task_dir: Path, tmp_path: Path
) -> None:
    checks = await _check(task_dir, tmp_path / "home")
    assert [(c.name, c.status) for cs in checks.values() for c in cs] == [
        ("task.toml", "ok"), ("spec.md", "ok"), ("openapi.yaml", "ok"),
        ("oracle collects", "ok"), ("categories", "ok"), ("reference passes", "skip"),
    ]
    assert _one(checks, "oracle collects").detail == "4 items"
    assert _one(checks, "categories").detail == "api_surface 1, state 1, validation 1, workflow 1"
    assert _one(checks, "reference passes").detail == "skipped (reference/ missing)"
    assert not (tmp_path / "home").exists()  # nothing to run: no runtime was started


async def test_marker_typo_shows_the_real_error_at_its_line(
    task_dir: Path, tmp_path: Path
) -> None:
    test_file = task_dir / "oracle" / "test_tiny.py"
    source = test_file.read_text()
    test_file.write_text(source.replace('mark.category("state")', 'mark.categroy("state")'))
    line = source.splitlines().index('@pytest.mark.category("state")') + 1
    checks = await _check(task_dir, tmp_path)
    collect = _one(checks, "oracle collects")
    assert collect.status == "fail"
    assert collect.detail == (
        f"{test_file}:{line}: unknown marker 'categroy' (the oracle runs with --strict-markers: "
        "register it in conftest.py; did you mean 'category'?)")


@pytest.mark.parametrize(
    ("name", "source", "line", "error"),
    [
        ("test_imp.py", "import os\nimport nosuchmod\n\n\ndef test_y():\n    pass\n", 2,
         "ModuleNotFoundError: No module named 'nosuchmod'"),
        ("test_data.py", "def load():\n    raise ValueError('bad data')\n\n\nDATA = load()\n", 2,
         "ValueError: bad data"),
        ("conftest.py", "import os\n\nraise RuntimeError('conftest boom')\n", 3,
         "RuntimeError: conftest boom"),
    ],
)
async def test_import_time_errors_name_the_oracles_own_file_and_line(
    task_dir: Path, tmp_path: Path, name: str, source: str, line: int, error: str
) -> None:
    (task_dir / "oracle" / name).write_text(source)
    collect = _one(await _check(task_dir, tmp_path), "oracle collects")
    assert collect.status == "fail"
    assert collect.detail == f"{(task_dir / 'oracle' / name).resolve()}:{line}: {error}"


async def test_syntax_error_is_named_and_collection_is_skipped(
    task_dir: Path, tmp_path: Path
) -> None:
    (task_dir / "oracle" / "test_syn.py").write_text("import pytest\n\ndef test_x(:\n    pass\n")
    checks = await _check(task_dir, tmp_path)
    assert _one(checks, "oracle files").detail == (
        f"{(task_dir / 'oracle' / 'test_syn.py').resolve()}:3: "
        "SyntaxError: invalid syntax in 'def test_x(:'")
    assert _one(checks, "oracle collects").status == "skip"


async def test_items_without_category_are_a_warning_naming_them(
    task_dir: Path, tmp_path: Path
) -> None:
    (task_dir / "oracle" / "test_bare.py").write_text(
        "def test_plain():\n    pass\n\n\nclass TestGroup:\n    def test_method(self):\n"
        "        pass\n")
    checks = await _check(task_dir, tmp_path)
    warning = _one(checks, "categories")
    assert warning.status == "warn" and warning.ok
    assert warning.detail == (
        "2 of 6 items have no @pytest.mark.category(...) marker (reports group items by it): "
        "test_bare.py::test_plain, test_bare.py::TestGroup::test_method")
    assert all(c.ok for cs in checks.values() for c in cs)


async def test_every_task_toml_problem_is_a_line(task_dir: Path, tmp_path: Path) -> None:
    (task_dir / "task.toml").write_text('id = "t"\n[service]\nport = "8000"\ncolour = 1\n')
    checks = await _check(task_dir, tmp_path)
    toml = task_dir / "task.toml"
    assert [(c.status, c.detail) for c in checks["task.toml"]] == [
        ("fail", f"{toml}:3: service.port: Input should be a valid integer, got a string '8000'"),
        ("fail", f"{toml}:4: service.colour: unknown key (known keys: port, health_path, "
                 "build_timeout, startup_timeout, health_timeout, wiring_timeout, "
                 "teardown_timeout, memory_mb, cpus, pids_limit)"),
    ]
    # What does not depend on task.toml is still checked.
    assert _one(checks, "oracle collects").status == "ok"


async def test_reference_of_an_invalid_task_is_not_run(task_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "tiny_service", task_dir / "reference")
    (task_dir / "spec.md").write_text("\n")
    checks = await _check(task_dir, tmp_path / "home")
    assert _one(checks, "spec.md").status == "fail"
    reference = _one(checks, "reference passes")
    assert (reference.status, reference.detail) == (
        "skip", "skipped (the task is not valid: see above)")
    assert not (tmp_path / "home").exists()


def _backendforge(tmp_path: Path) -> Path:
    folder = tmp_path / "Todo API"
    folder.mkdir()
    for name in ("spec.md", "openapi.yaml"):
        shutil.copy(TINY / name, folder / name)
    shutil.copytree(TINY / "oracle", folder / "tests")
    return folder


async def test_backendforge_folder_is_valid_with_skips(tmp_path: Path) -> None:
    checks = await _check(_backendforge(tmp_path), tmp_path / "home")
    statuses = {name: [c.status for c in cs] for name, cs in checks.items()}
    assert statuses == {"task.toml": ["skip"], "spec.md": ["ok"], "openapi.yaml": ["ok"],
                        "oracle collects": ["ok"], "categories": ["ok"],
                        "reference passes": ["skip"]}
    assert "BackendForge layout" in _one(checks, "task.toml").detail


def _anvil(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})


def test_cli_backendforge_folder_exits_0_with_skip_lines(tmp_path: Path) -> None:
    folder = _backendforge(tmp_path)
    done = _anvil("tasks", "check", str(folder), "--home", str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "skip Todo API: reference passes: skipped (reference/ missing)" in lines
    assert "ok   Todo API: oracle collects: 4 items" in lines


def test_cli_prints_each_problem_literally_and_exits_1(task_dir: Path, tmp_path: Path) -> None:
    (task_dir / "task.toml").write_text('id = "t"\n[[mocks]]\nkind = "payment"\n[service]\nx=1\n')
    done = _anvil("tasks", "check", str(task_dir), "--home", str(tmp_path / "home"))
    assert done.returncode == 1, done.stderr
    toml = task_dir / "task.toml"
    lines = done.stderr.splitlines()
    # Brackets in the text are not taken for rich markup.
    assert f"FAIL t: task.toml: {toml}:2: mocks[0].env: required key missing" in lines
    assert any(line.startswith(f"FAIL t: task.toml: {toml}:5: service.x: unknown key")
               for line in lines), lines


async def test_missing_openapi_is_a_failed_line_not_a_crash(task_dir: Path, tmp_path: Path) -> None:
    (task_dir / "openapi.yaml").unlink()
    checks = await _check(task_dir, tmp_path)
    assert [(c.status, c.detail) for c in checks["openapi.yaml"]] == [
        ("fail", f"{task_dir / 'openapi.yaml'}: missing (every task ships its visible contract)")]


def test_cli_missing_task_folder_is_a_usage_error(tmp_path: Path) -> None:
    done = _anvil("tasks", "check", str(tmp_path / "nope"), "--home", str(tmp_path / "home"))
    assert done.returncode == 2
    assert f"{tmp_path / 'nope'}: no such task folder" in done.stderr


async def test_a_conftest_that_hangs_is_bounded(
    task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("engine._taskcheck.COLLECT_TIMEOUT", 1.0)
    (task_dir / "oracle" / "conftest.py").write_text("import time\n\ntime.sleep(120)\n")
    started = time.monotonic()
    collect = _one(await _check(task_dir, tmp_path), "oracle collects")
    assert time.monotonic() - started < 30
    assert (collect.status, collect.detail) == (
        "fail", f"{(task_dir / 'oracle').resolve()}: collecting did not finish in 1 s "
                "(does a conftest block at import?)")
