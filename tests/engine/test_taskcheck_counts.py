"""``anvil tasks check``: items counted per tier, visibility and level, requirements
counted, and tests that send requests in a ``for`` loop flagged (a warning, not a failure).

The oracles are small ones written here with known markers and loops; pytest collects them
for real in a subprocess, as a run would. Nothing runs a service: the tasks have no
reference/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine._taskcheck import Check, check_task
from tests.conftest import FIXTURES

# Ten items with the tiny task's four (no scoring marker): module, class, function and
# parametrize-case marks, the closest winning.
MARKED = '''\
import pytest

pytestmark = [pytest.mark.tier("evolved-r1"), pytest.mark.visibility("private")]


@pytest.mark.category("state")
@pytest.mark.requirement("R-a")
@pytest.mark.level("leaf")
def test_a():
    pass


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-a")
@pytest.mark.level("mid")
@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.visibility("public")), 3])
def test_b(n):
    pass


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-b")
@pytest.mark.level("root")
class TestJourney:
    def test_c(self):
        pass

    @pytest.mark.level("leaf")
    def test_d(self):
        pass
'''

CONFTEST = '''\
import pytest
import requests

URL = "http://127.0.0.1:9"


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


class Account:
    def get(self, path):
        return requests.get(URL + path, timeout=1)

    def create(self, name):
        return self.get("/create/" + name)  # sends through another method


@pytest.fixture
def alice():
    return Account()


@pytest.fixture
def make_thing():
    def _make(name):
        return requests.post(URL + "/things", json={"name": name}, timeout=1)

    return _make
'''

# `# flagged` ends the line of each `for` the check must name; every other loop is not a
# request loop over inputs.
LOOPS = '''\
import pytest
import requests

URL = "http://127.0.0.1:9"


def fetch(path):
    return requests.get(URL + path, timeout=1)


def label(path):
    return path.upper()


def walk(paths):
    for path in paths:
        fetch(path)


@pytest.mark.category("validation")
def test_direct():
    for path in ["/a", "/b"]:  # flagged
        requests.get(URL + path, timeout=1)


@pytest.mark.category("validation")
@pytest.mark.parametrize("n", [1, 2])
def test_through_a_helper(n):
    for path in ["/a", "/b"]:  # flagged
        fetch(path)


@pytest.mark.category("validation")
def test_through_a_fixture_factory(make_thing):
    names = ("x", "y")
    for name in names:  # flagged
        make_thing(name)


@pytest.mark.category("validation")
def test_through_a_fixture_method(alice):
    for name in ("x", "y"):  # flagged
        alice.create(name)


@pytest.mark.category("state")
def test_repeats_in_range():
    for _ in range(3):
        requests.get(URL + "/a", timeout=1)


@pytest.mark.category("state")
def test_loop_without_request():
    total = 0
    for path in ["/a", "/b"]:
        total += len(label(path))
    fetch("/a")


@pytest.mark.category("state")
def test_comprehension_and_helper_loop():
    [requests.get(URL + p, timeout=1) for p in ("/a", "/b")]
    walk(["/a"])


@pytest.mark.category("state")
@pytest.mark.parametrize("body", [{"get": 1}])
def test_method_of_parametrized_data(body, alice):
    for key in ("get",):
        body.get(key)
'''


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "t"
    shutil.copytree(FIXTURES / "tiny_task", folder)
    return folder


async def _checks(task_dir: Path, home: Path) -> dict[str, list[Check]]:
    by_name: dict[str, list[Check]] = {}
    for check in await check_task(task_dir, "process", home):
        by_name.setdefault(check.name, []).append(check)
    return by_name


def _details(checks: dict[str, list[Check]], name: str) -> list[tuple[str, str]]:
    return [(c.status, c.detail) for c in checks.get(name, [])]


def _flagged(path: Path) -> list[tuple[int, str]]:
    """(line, test name) of each loop marked ``# flagged`` in ``path``."""
    found, test = [], ""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("def test_"):
            test = line[4:].partition("(")[0]
        if line.endswith("# flagged"):
            found.append((number, test))
    return found


async def test_items_are_counted_per_tier_visibility_level_and_requirement(
    task_dir: Path, tmp_path: Path
) -> None:
    (task_dir / "oracle" / "test_marked.py").write_text(MARKED)
    checks = await _checks(task_dir, tmp_path / "home")
    assert _details(checks, "oracle collects") == [("ok", "10 items")]
    assert _details(checks, "categories") == [
        ("ok", "api_surface 1, state 5, validation 1, workflow 3")]
    assert _details(checks, "tiers") == [
        ("ok", "base 7, evolved-r1 1, evolved-r2 2 (4 without a tier marker, counted as base)")]
    assert _details(checks, "visibility") == [
        ("ok", "private 5, public 5 (4 without a visibility marker, counted as public)")]
    assert _details(checks, "levels") == [("ok", "leaf 2, mid 3, root 1, none 4")]
    assert _details(checks, "requirements") == [
        ("ok", "2 requirements (4 items without a requirement marker)")]
    assert "loops" not in checks  # no test here loops
    assert all(c.ok for cs in checks.values() for c in cs)


async def test_fully_marked_oracle_has_no_notes_of_defaults(
    task_dir: Path, tmp_path: Path
) -> None:
    oracle = task_dir / "oracle"
    (oracle / "test_tiny.py").unlink()
    (oracle / "test_marked.py").write_text(
        MARKED.replace('pytest.mark.visibility("private")]',
                       'pytest.mark.visibility("private"), pytest.mark.level("leaf"), '
                       'pytest.mark.requirement("R-c")]'))
    checks = await _checks(task_dir, tmp_path / "home")
    assert _details(checks, "tiers") == [("ok", "base 3, evolved-r1 1, evolved-r2 2")]
    assert _details(checks, "visibility") == [("ok", "private 5, public 1")]
    assert _details(checks, "levels") == [("ok", "leaf 2, mid 3, root 1")]
    assert _details(checks, "requirements") == [("ok", "2 requirements")]


async def test_an_oracle_without_scoring_markers_gets_no_marker_lines(
    task_dir: Path, tmp_path: Path
) -> None:
    checks = await _checks(task_dir, tmp_path / "home")
    assert {"tiers", "visibility", "levels", "requirements"}.isdisjoint(checks)


async def test_requests_in_a_for_loop_are_flagged_with_file_line_and_test(
    task_dir: Path, tmp_path: Path
) -> None:
    oracle = task_dir / "oracle"
    (oracle / "conftest.py").write_text(CONFTEST)
    loops = oracle / "test_loops.py"
    loops.write_text(LOOPS)
    checks = await _checks(task_dir, tmp_path / "home")
    assert _details(checks, "oracle collects") == [("ok", "13 items")]
    expected = [
        ("warn", f"{loops.resolve()}:{line}: test_loops.py::{test}: "
                 "loops hide cases: use pytest.mark.parametrize")
        for line, test in _flagged(loops)
    ]
    assert len(expected) == 4
    # One line per test function, however many items its parametrize makes.
    assert _details(checks, "loops") == expected
    assert all(c.ok for cs in checks.values() for c in cs)  # a warning fails no task


def test_cli_prints_the_counts_and_the_loop_warning_and_exits_0(
    task_dir: Path, tmp_path: Path
) -> None:
    oracle = task_dir / "oracle"
    (oracle / "test_marked.py").write_text(MARKED)
    (oracle / "test_loops.py").write_text(
        'import requests\n\n\ndef test_each():\n    for p in ("/a", "/b"):\n'
        '        requests.get("http://127.0.0.1:9" + p, timeout=1)\n')
    done = subprocess.run(
        [sys.executable, "-m", "engine", "tasks", "check", str(task_dir),
         "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for line in ("ok   t: levels: leaf 2, mid 3, root 1, none 5",
                 "ok   t: requirements: 2 requirements (5 items without a requirement marker)",
                 f"warn t: loops: {(oracle / 'test_loops.py').resolve()}:5: "
                 "test_loops.py::test_each: loops hide cases: use pytest.mark.parametrize"):
        assert line in lines, done.stderr
    assert any(line.startswith("ok   t: tiers: base 8, ") for line in lines), done.stderr
