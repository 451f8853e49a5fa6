"""Harbor task folders imported as anvil tasks (engine._harbor, docs/harbor.md).

The fixture tests/engine/fixtures/harbor_task is a Harbor task for an HTTP service: its
task.toml in Harbor's schema with an ``[anvil]`` table, instruction.md, tests/ (pytest files
and a test.sh writing CTRF and reward.txt) and solution/ (a service with a Dockerfile).
Runs are real: the `anvil` CLI in a subprocess on the process runtime, and test.sh run by
bash against the reference service.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import TaskFormatError, load_task
from engine._task import inspect_task
from tests.conftest import FIXTURES

HARBOR = FIXTURES / "harbor_task"
TOML = HARBOR / "task.toml"
BROKEN = ("1 <= len(text)", "0 <= len(text)")  # the broken copy accepts an empty note
EMPTY_ITEM = "test_notes.py::test_create_rejects_invalid_text[empty]"


def anvil(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=240, env={**env, "ANVIL_CACHE": str(cache)})


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    shutil.copytree(HARBOR, folder)
    return folder


def submissions(root: Path) -> Path:
    """The fixture's solution and a broken copy, as one folder of submissions."""
    shutil.copytree(HARBOR / "solution", root / "good")
    shutil.copytree(HARBOR / "solution", root / "broken")
    server = root / "broken" / "server.py"
    text = server.read_text()
    assert BROKEN[0] in text
    server.write_text(text.replace(*BROKEN))
    return root


@pytest.fixture(scope="module")
def run_rows(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> list[dict[str, Any]]:
    """One `anvil run` of the Harbor fixture over its solution and a broken copy."""
    base = tmp_path_factory.mktemp("harbor-run")
    subs = submissions(base / "subs")
    done = anvil("run", str(HARBOR), "--submissions", str(subs), "--runtime", "process",
                 "--json", "--home", str(base / "home"), cache=cache_dir)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


# --- the mapping ---------------------------------------------------------------------------


def test_harbor_fields_and_the_anvil_table_make_the_task() -> None:
    found = inspect_task(HARBOR)
    assert (found.layout, found.problems) == ("harbor", ())
    task = found.task()
    config = task.config
    # [task].name "anvil-fixtures/notes-api" without its org; description; metadata.category
    assert (config.id, config.title, config.domain) == ("notes-api", "Notes HTTP API", "backend")
    assert config.oracle.timeout == 60.0  # [verifier].timeout_sec
    svc = config.service
    assert (svc.build_timeout, svc.cpus, svc.memory_mb) == (300.0, 1.0, 512)  # [environment]
    # [anvil.service] / [anvil.oracle]: what Harbor has no word for
    assert (svc.port, svc.health_path, svc.startup_timeout) == (8000, "/health", 10.0)
    assert config.oracle.item_timeout == 5.0
    assert svc.wiring_timeout == 15.0  # not given anywhere: anvil's default
    assert task.oracle_dir == HARBOR / "tests"
    assert task.reference == HARBOR / "solution"


def test_without_an_anvil_table_harbor_defaults_and_anvils_apply(task_dir: Path) -> None:
    (task_dir / "task.toml").write_text('version = "1.0"\n[metadata]\nauthor_name = "x"\n')
    config = load_task(task_dir).config
    assert (config.id, config.title, config.domain) == ("notes", "notes", "")  # folder name
    # Harbor's defaults for what Harbor defines: verifier 600 s, build 600 s, 2048 MB, 1 CPU
    assert config.oracle.timeout == 600.0
    assert (config.service.build_timeout, config.service.memory_mb) == (600.0, 2048)
    # anvil's for the rest: port 8000, any HTTP answer on /health or / is healthy
    assert (config.service.port, config.service.health_path) == (8000, None)
    assert config.oracle.item_timeout == 30.0


def test_anvil_table_wins_over_values_derived_from_harbor(task_dir: Path) -> None:
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + "timeout = 42\n")  # lands in [anvil.oracle]
    assert load_task(task_dir).config.oracle.timeout == 42.0


def test_harbors_deprecated_memory_size_is_read(task_dir: Path) -> None:
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 512", 'memory = "1.5G"'))
    assert load_task(task_dir).config.service.memory_mb == 1536


def test_solution_without_a_dockerfile_is_no_reference(task_dir: Path) -> None:
    (task_dir / "solution" / "Dockerfile").unlink()  # a solve.sh-only solution
    task = load_task(task_dir)
    assert task.reference is None


def test_the_other_layouts_are_not_taken_for_harbor(tmp_path: Path) -> None:
    assert inspect_task(FIXTURES / "tiny_task").layout == "anvil"
    bf = tmp_path / "bf"
    shutil.copytree(FIXTURES / "tiny_task", bf)
    (bf / "task.toml").unlink()
    (bf / "oracle").rename(bf / "tests")
    assert inspect_task(bf).layout == "backendforge"


# --- scoring services with it --------------------------------------------------------------


def test_anvil_run_passes_the_solution_and_fails_the_broken_copy_item_by_item(
    run_rows: list[dict[str, Any]],
) -> None:
    by_name = {Path(r["submission"]).name: r for r in run_rows}
    good, broken = by_name["good"], by_name["broken"]
    assert (good["task"], good["verdict"], good["items_passed"]) == ("notes-api", "pass", 11)
    assert (broken["verdict"], broken["phase"]) == ("fail", "oracle")
    assert (broken["items_passed"], broken["items_failed"]) == (10, 1)
    (item,) = broken["failed_items"]
    assert (item["nodeid"], item["category"]) == (EMPTY_ITEM, "validation")
    assert "422" in item["message"]


@pytest.fixture
def reference_service(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The fixture's solution and its broken copy, started as plain processes on free ports."""
    subs = submissions(tmp_path / "subs")
    started: dict[str, str] = {}
    procs = []
    try:
        for name in ("good", "broken"):
            proc = subprocess.Popen([sys.executable, str(subs / name / "server.py")],
                                    env={**os.environ, "PORT": "0"}, stdout=subprocess.PIPE,
                                    text=True)
            procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()  # printed once it listens; "" if it died
            assert line.startswith("listening on "), line
            started[name] = f"http://127.0.0.1:{line.split()[-1]}"
        yield started
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()  # reaps it and closes its pipe


def _test_sh(task_dir: Path, base_url: str, logs: Path) -> tuple[str, dict[str, Any]]:
    done = subprocess.run(
        ["bash", str(task_dir / "tests" / "test.sh")], capture_output=True, text=True,
        timeout=120, env={**os.environ, "BASE_URL": base_url, "LOGS_DIR": str(logs),
                          "PYTHON": sys.executable, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert (logs / "reward.txt").is_file(), done.stdout + done.stderr
    return (logs / "reward.txt").read_text().strip(), json.loads((logs / "ctrf.json").read_text())


def test_harbors_test_sh_agrees_with_anvils_items(
    task_dir: Path, tmp_path: Path, reference_service: dict[str, str],
    run_rows: list[dict[str, Any]],
) -> None:
    """test.sh (what Harbor would run) and anvil's runner judge the same items the same way."""
    reward, ctrf = _test_sh(task_dir, reference_service["good"], tmp_path / "logs-good")
    assert reward == "1"
    assert ctrf["results"]["summary"]["passed"] == ctrf["results"]["summary"]["tests"] == 11
    reward, ctrf = _test_sh(task_dir, reference_service["broken"], tmp_path / "logs-broken")
    assert reward == "0"
    failed_by_ctrf = {t["name"] for t in ctrf["results"]["tests"] if t["status"] == "failed"}
    (broken,) = [r for r in run_rows if Path(r["submission"]).name == "broken"]
    failed_by_anvil = {i["nodeid"].split("::")[-1] for i in broken["failed_items"]}
    assert failed_by_ctrf == failed_by_anvil == {EMPTY_ITEM.split("::")[-1]}


def test_tasks_check_is_ok(tmp_path: Path, cache_dir: Path) -> None:
    done = anvil("tasks", "check", str(HARBOR), "--runtime", "process", "--home",
                 str(tmp_path), cache=cache_dir)
    assert done.returncode == 0, done.stderr
    assert "task.toml: id notes-api" in done.stderr
    assert "oracle collects: 11 items" in done.stderr
    assert "categories: api_surface 3, state 2, validation 5, workflow 1" in done.stderr


# --- what is wrong, said once, naming the file -----------------------------------------------


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


@pytest.mark.parametrize(("part", "said"), [
    ("instruction.md", "missing (Harbor's task prompt"),
    ("tests", "missing (Harbor's verifier folder"),
    ("tests/test_notes.py", "no pytest files (test_*.py)"),
    ("openapi.yaml", "missing (Harbor has no contract file"),
    ("task.toml", "missing (a Harbor task folder"),
])
def test_a_missing_part_is_one_error_naming_its_file(
    task_dir: Path, part: str, said: str
) -> None:
    _remove(task_dir / part)
    named = task_dir / ("tests" if part.startswith("tests") else part)
    (problem,) = inspect_task(task_dir).problems
    assert (problem.path, problem.line) == (named, None)
    assert problem.problem.startswith(said)
    with pytest.raises(TaskFormatError) as caught:
        load_task(task_dir)
    assert str(caught.value) == f"{named}: {problem.problem}"


def test_an_instruction_of_only_a_canary_line_is_empty(task_dir: Path) -> None:
    (task_dir / "instruction.md").write_text("<!-- harbor-canary GUID 1234 -->\n\n")
    (problem,) = inspect_task(task_dir).problems
    assert problem.path == task_dir / "instruction.md"
    assert problem.problem.startswith("empty")


def test_tests_that_never_read_base_url_are_refused(task_dir: Path) -> None:
    test = task_dir / "tests" / "test_notes.py"
    text = test.read_text()
    assert 'os.environ.get("BASE_URL", "http://localhost:8000")' in text
    test.write_text(text.replace('os.environ.get("BASE_URL", "http://localhost:8000")',
                                 '"http://localhost:8000"'))
    (problem,) = inspect_task(task_dir).problems
    assert problem.path == task_dir / "tests"
    assert "no test file reads BASE_URL" in problem.problem


def _line_of(toml: Path, text: str) -> int:
    return toml.read_text().splitlines().index(text) + 1


@pytest.mark.parametrize(("before", "after", "key", "said"), [
    ("timeout_sec = 60.0    # anvil: the oracle's whole budget",
     'timeout_sec = 60.0\nenv = { API_KEY = "k" }', "env = { API_KEY = \"k\" }",
     "verifier.env: API_KEY cannot be given to anvil's oracle"),
    ("memory_mb = 512", 'memory_mb = 512\nos = "windows"', 'os = "windows"',
     "environment.os: 'windows': anvil runs Linux services only"),
    ('schema_version = "1.1"', 'schema_version = "1.1"\nsteps = [{ name = "one" }]',
     'steps = [{ name = "one" }]', "steps: multi-step Harbor tasks cannot be imported"),
    ("timeout_sec = 60.0    # anvil: the oracle's whole budget", 'timeout_sec = "60"',
     'timeout_sec = "60"', "verifier.timeout_sec: Input should be a valid number, got a string"),
    ("[verifier]", "[verifer]", "[verifer]", "verifer: unknown key (did you mean 'verifier'?"),
    ("port = 8000", "prot = 8000", "prot = 8000",
     "anvil.service.prot: unknown key (did you mean 'port'?)"),
    ("port = 8000", 'port = "8000"', 'port = "8000"',
     "anvil.service.port: Input should be a valid integer, got a string '8000'"),
])
def test_what_cannot_apply_or_is_wrong_is_named_at_its_line(
    task_dir: Path, before: str, after: str, key: str, said: str
) -> None:
    toml = task_dir / "task.toml"
    text = toml.read_text()
    assert before in text
    toml.write_text(text.replace(before, after, 1))
    (problem,) = inspect_task(task_dir).problems
    assert (problem.path, problem.line) == (toml, _line_of(toml, key))
    assert problem.problem.startswith(said), problem.problem


def test_every_problem_is_said_not_only_the_first(task_dir: Path) -> None:
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("port = 8000", "prot = 8000"))
    (task_dir / "instruction.md").unlink()
    problems = inspect_task(task_dir).problems
    assert [p.path for p in problems] == [toml, task_dir / "instruction.md"]
