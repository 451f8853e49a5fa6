"""Loading task packages: both shapes, strict settings, and every problem named with file and line.

A task that is not valid is refused by ``load_task`` itself, so a run refuses it
before any evaluation starts (the run plans with ``load_task``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine import Phase, TaskFormatError, load_task
from engine._task import MockConfig, inspect_task
from tests.conftest import FIXTURES, ROOT

TINY = FIXTURES / "tiny_task"


def _copy(tmp_path: Path) -> Path:
    task_dir = tmp_path / "t"
    shutil.copytree(TINY, task_dir)
    return task_dir


def _problem_lines(task_dir: Path) -> list[str]:
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    return str(info.value).splitlines()


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
    assert task.reference is None


def _broken(tmp_path: Path, toml: str) -> Path:
    task_dir = _copy(tmp_path)
    (task_dir / "task.toml").write_text(toml)
    return task_dir


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    task_dir = _broken(tmp_path, 'id = "x"\n\n[service\nport = 1\n')
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    assert str(info.value).startswith(f"{task_dir / 'task.toml'}:3: invalid TOML")
    assert info.value.line == 3


@pytest.mark.parametrize(
    ("toml", "line", "problem"),
    [
        ('id = "x"\n[service]\nprot = 8000\n', 3,
         "service.prot: unknown key (did you mean 'port'?)"),
        ('id = "x"\n[oracle]\nitem_timeout = -1\n', 3,
         "oracle.item_timeout: Input should be greater than 0"),
        ('title = "no id"\n', None, "id: required key missing"),
        ('id = "has space"\n', 1, "id: String should match pattern"),
        # strict: TOML strings, booleans and floats are not quietly turned into integers
        ('id = "x"\n\n[service]\nport = "8000"\n', 4,
         "service.port: Input should be a valid integer, got a string '8000'"),
        ('id = "x"\n[service]\npids_limit = true\n', 3,
         "service.pids_limit: Input should be a valid integer, got a boolean True"),
        ('id = "x"\n[service]\nmemory_mb = 512.5\n', 3,
         "service.memory_mb: Input should be a valid integer"),
        ('id = "x"\nservice = 5\n', 2, "service: Input should be a valid dictionary"),
    ],
)
def test_invalid_settings_name_the_key_and_line(
    tmp_path: Path, toml: str, line: int | None, problem: str
) -> None:
    task_dir = _broken(tmp_path, toml)
    (only,) = _problem_lines(task_dir)
    where = f"{task_dir / 'task.toml'}:{line}: " if line else f"{task_dir / 'task.toml'}: "
    assert only.startswith(where + problem), only


def test_an_integer_is_a_valid_number_of_seconds(tmp_path: Path) -> None:
    task = load_task(_broken(tmp_path, 'id = "x"\n[service]\nstartup_timeout = 5\n'))
    assert task.timeout(Phase.STARTUP) == 5.0


def test_every_toml_problem_is_its_own_line_with_its_line_number(tmp_path: Path) -> None:
    toml = (
        'id = "x"\n'                  # 1
        'colour = "blue"\n'           # 2
        '\n'                          # 3
        '[service]\n'                 # 4
        'port = "8000"\n'             # 5
        'helth_path = "/health"\n'    # 6
        '\n'                          # 7
        '[[mocks]]\n'                 # 8
        'kind = "payment"\n'          # 9
        'env = "PAYMENT_URL"\n'       # 10
        '\n'                          # 11
        '[[mocks]]\n'                 # 12
        'kind = "calendar"\n'         # 13
        'scenery = "busy"\n'          # 14
    )
    task_dir = _broken(tmp_path, toml)
    path = task_dir / "task.toml"
    assert _problem_lines(task_dir) == [
        f"{path}:2: colour: unknown key (known keys: id, title, domain, service, oracle, mocks)",
        f"{path}:5: service.port: Input should be a valid integer, got a string '8000'",
        f"{path}:6: service.helth_path: unknown key (did you mean 'health_path'?)",
        f"{path}:12: mocks[1].env: required key missing",
        f"{path}:14: mocks[1].scenery: unknown key (did you mean 'scenario'?)",
    ]


def test_mocks_are_read_in_order(tmp_path: Path) -> None:
    task = load_task(_broken(tmp_path, (
        'id = "x"\n[[mocks]]\nkind = "payment"\nenv = "PAYMENT_URL"\n'
        '[[mocks]]\nkind = "calendar"\nenv = "CALENDAR_URL"\nscenario = "busy"\n')))
    assert task.config.mocks == [
        MockConfig(kind="payment", env="PAYMENT_URL", scenario="default"),
        MockConfig(kind="calendar", env="CALENDAR_URL", scenario="busy"),
    ]


@pytest.mark.parametrize("missing", ["spec.md", "openapi.yaml", "oracle"])
def test_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    task_dir = _copy(tmp_path)
    target = task_dir / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    assert str(target) in str(info.value)


@pytest.mark.parametrize("text", ["", "  \n\n\t\n"])
def test_empty_spec_is_refused(tmp_path: Path, text: str) -> None:
    task_dir = _copy(tmp_path)
    (task_dir / "spec.md").write_text(text)
    assert _problem_lines(task_dir) == [
        f"{task_dir / 'spec.md'}: empty (it is the specification candidates are given)"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("openapi: 3.0.3\ninfo: {title: x\npaths: {}\n", ":3: does not parse as YAML: "),
        ("- just\n- a list\n", ": not an OpenAPI document: the top level is not a mapping"),
        ("swagger: '2.0'\ninfo: {title: x, version: '1'}\npaths: {}\n",
         ": not an OpenAPI 3 document: no `openapi: 3.x` key"),
        ("openapi: 3.0\ninfo: {title: x, version: '1'}\npaths: {}\n",
         ": openapi: 3.0 is not an OpenAPI 3 version string"),
        ("openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n",
         ": at info: 'version' is a required property"),
        ("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get:\n"
         "      responses:\n        '200':\n          description: ok\n          content:\n"
         "            application/json:\n              schema: {$ref: '#/components/schemas/No'}\n",
         ": unresolvable reference: "),
    ],
)
def test_openapi_that_is_not_openapi_3_is_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    task_dir = _copy(tmp_path)
    (task_dir / "openapi.yaml").write_text(text)
    (only,) = _problem_lines(task_dir)
    assert only.startswith(f"{task_dir / 'openapi.yaml'}{expected}"), only


def test_syntax_error_in_the_oracle_names_file_and_line(tmp_path: Path) -> None:
    task_dir = _copy(tmp_path)
    (task_dir / "oracle" / "test_more.py").write_text("import os\n\n\ndef test_x(:\n    pass\n")
    (task_dir / "oracle" / "helpers").mkdir()
    (task_dir / "oracle" / "helpers" / "util.py").write_text("def f():\nreturn 1\n")
    assert _problem_lines(task_dir) == [
        f"{task_dir / 'oracle' / 'helpers' / 'util.py'}:2: IndentationError: "
        "expected an indented block after function definition on line 1 in 'return 1'",
        f"{task_dir / 'oracle' / 'test_more.py'}:4: SyntaxError: invalid syntax in 'def test_x(:'",
    ]


def test_a_compile_warning_in_the_oracle_is_no_problem(tmp_path: Path) -> None:
    task_dir = _copy(tmp_path)
    (task_dir / "oracle" / "test_regex.py").write_text(
        'import re\n\n\ndef test_x():\n    assert re.match("\\d", "1")\n')
    assert load_task(task_dir).id == "tiny"  # "\d" warns at compile time; warnings are errors here


def test_every_problem_of_every_file_is_reported_at_once(tmp_path: Path) -> None:
    task_dir = _broken(tmp_path, 'id = "x"\n[service]\nport = "8000"\n')
    (task_dir / "spec.md").write_text("")
    (task_dir / "openapi.yaml").write_text("openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n")
    (task_dir / "oracle" / "test_tiny.py").write_text("def test_x(:\n")
    lines = _problem_lines(task_dir)
    assert [line.split(": ")[0] for line in lines] == [
        f"{task_dir / 'task.toml'}:3",
        f"{task_dir / 'spec.md'}",
        f"{task_dir / 'openapi.yaml'}",
        f"{task_dir / 'oracle' / 'test_tiny.py'}:1",
    ]
    found = inspect_task(task_dir)
    assert [p.path.name for p in found.problems_in(task_dir / "oracle")] == ["test_tiny.py"]
    assert found.config is None and found.layout == "anvil"


def test_oracle_in_subfolders_counts(tmp_path: Path) -> None:
    task_dir = _copy(tmp_path)
    (task_dir / "oracle" / "test_tiny.py").rename(task_dir / "oracle" / "conftest_moved.py")
    with pytest.raises(TaskFormatError, match="no pytest files"):
        load_task(task_dir)
    (task_dir / "oracle" / "api").mkdir()
    (task_dir / "oracle" / "conftest_moved.py").rename(task_dir / "oracle" / "api" / "test_a.py")
    assert load_task(task_dir).oracle_dir == (task_dir / "oracle").resolve()


def test_folder_that_is_no_task(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="not a task"):
        load_task(tmp_path)
    with pytest.raises(TaskFormatError, match="no such task folder"):
        load_task(tmp_path / "nope")
