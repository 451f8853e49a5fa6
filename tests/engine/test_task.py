"""Loading task packages: both shapes, and clear errors naming file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine import Phase, TaskFormatError, load_task
from tests.conftest import FIXTURES, ROOT

TINY = FIXTURES / "tiny_task"


def test_anvil_task_loads_with_its_settings() -> None:
    task = load_task(ROOT / "tasks" / "taskboard")
    assert task.id == "taskboard"
    assert task.config.service.health_path == "/health"
    assert task.timeout(Phase.HEALTH) == 10
    assert task.reference == ROOT / "tasks" / "taskboard" / "reference"


def test_backendforge_task_without_toml_gets_defaults(tmp_path: Path) -> None:
    task_dir = tmp_path / "Todo API"
    task_dir.mkdir()
    for name in ("spec.md", "openapi.yaml"):
        shutil.copy(TINY / name, task_dir / name)
    shutil.copytree(TINY / "oracle", task_dir / "tests")
    task = load_task(task_dir)
    assert task.id == "Todo-API"
    assert task.oracle_dir == (task_dir / "tests").resolve()
    assert task.config.service.port == 8000 and task.config.service.health_path is None


def _broken(tmp_path: Path, toml: str) -> Path:
    task_dir = tmp_path / "t"
    shutil.copytree(TINY, task_dir)
    (task_dir / "task.toml").write_text(toml)
    return task_dir


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    task_dir = _broken(tmp_path, 'id = "x"\n\n[service\nport = 1\n')
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    assert str(info.value).startswith(f"{task_dir / 'task.toml'}:3: invalid TOML")


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('id = "x"\n[service]\nprot = 8000\n', "service.prot: Extra inputs are not permitted"),
        ('id = "x"\n[oracle]\nitem_timeout = -1\n', "oracle.item_timeout: Input should be greater"),
        ('title = "no id"\n', "id: Field required"),
        ('id = "has space"\n', "id: String should match pattern"),
    ],
)
def test_invalid_settings_name_the_key(tmp_path: Path, toml: str, problem: str) -> None:
    with pytest.raises(TaskFormatError) as info:
        load_task(_broken(tmp_path, toml))
    assert problem in str(info.value)
    assert "task.toml" in str(info.value)


@pytest.mark.parametrize("missing", ["spec.md", "openapi.yaml", "oracle"])
def test_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    task_dir = tmp_path / "t"
    shutil.copytree(TINY, task_dir)
    target = task_dir / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    assert str(target) in str(info.value)


def test_folder_that_is_no_task(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="not a task"):
        load_task(tmp_path)
    with pytest.raises(TaskFormatError, match="no such task folder"):
        load_task(tmp_path / "nope")
