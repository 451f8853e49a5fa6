"""Scoring metrics from oracle markers: real `anvil run`s on the process runtime, a task whose
oracle items carry tier/visibility/requirement/level markers, and every metric checked
against values worked out by hand below.

The task's oracle (7 items) and which submission fails which item:

    item                  category     tier        vis      req  level  fails for
    test_health           api_surface  (base)      (public) R1   leaf   -
    test_unknown_is_404   validation   base        private  R1   leaf   -
    test_put_then_get     state        evolved-r1  private  R2   mid    fail_item (b)
    test_chain_journey    workflow     evolved-r2  public   R2   root   gap (d)
    test_slow_answers     workflow     evolved-r1  public   R3   leaf   slow_item (c)
    test_plain            -            (no markers at all)             -
    test_skipped          -            base        public   R4   leaf   always skipped

Submissions of the first run: a ok, b fail_item, c slow_item, d gap (an ok service that the
journey item rejects), e crash (fails at startup), f oracle_crash (the oracle process dies:
anvil's ``error``, left out of every rate).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from engine import Store
from tests.conftest import FIXTURES
from tests.engine.test_cli import anvil

CONFTEST = '''\
import os

import pytest
import requests

BASE_URL = os.environ["BASE_URL"]


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


@pytest.fixture(scope="session")
def mode():
    return requests.get(f"{BASE_URL}/", timeout=5).json()["mode"]


@pytest.fixture(scope="session", autouse=True)
def _oracle_dies(mode):
    if mode == "oracle_crash":
        os._exit(3)  # the oracle itself dies: the verdict is anvil's error
'''

ORACLE = '''\
import os
import uuid

import pytest
import requests

BASE_URL = os.environ["BASE_URL"]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R1")
@pytest.mark.level("leaf")
def test_health():
    assert requests.get(f"{BASE_URL}/health", timeout=5).status_code == 200


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.visibility("private")
@pytest.mark.requirement("R1")
@pytest.mark.level("leaf")
def test_unknown_is_404():
    assert requests.get(f"{BASE_URL}/items/{uuid.uuid4().hex}", timeout=5).status_code == 404


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("private")
@pytest.mark.requirement("R2")
@pytest.mark.level("mid")
def test_put_then_get():
    key = uuid.uuid4().hex
    requests.put(f"{BASE_URL}/items/{key}", json={"value": "v"}, timeout=5)
    assert requests.get(f"{BASE_URL}/items/{key}", timeout=5).status_code == 200


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R2")
@pytest.mark.level("root")
def test_chain_journey(mode):
    assert mode != "gap", "the journey breaks although each endpoint works"


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R3")
@pytest.mark.level("leaf")
def test_slow_answers():
    assert requests.get(f"{BASE_URL}/slow").status_code == 200  # the item deadline bounds it


def test_plain():
    assert requests.get(f"{BASE_URL}/health", timeout=5).status_code == 200


@pytest.mark.requirement("R4")
@pytest.mark.level("leaf")
def test_skipped():
    pytest.skip("never judged")
'''

FIRST = {"a": "ok", "b": "fail_item", "c": "slow_item", "d": "gap", "e": "crash",
         "f": "oracle_crash"}


def make_task(root: Path) -> Path:
    task = root / "scored"
    shutil.copytree(FIXTURES / "tiny_task", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('id = "tiny"', 'id = "scored"'))
    for old in (task / "oracle").iterdir():
        old.unlink()
    (task / "oracle" / "conftest.py").write_text(CONFTEST)
    (task / "oracle" / "test_scored.py").write_text(ORACLE)
    return task


def make_submissions(folder: Path, modes: dict[str, str]) -> Path:
    for name, mode in modes.items():
        sub = folder / name
        shutil.copytree(FIXTURES / "tiny_service", sub)
        dockerfile = sub / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace("ENV MODE=ok", f"ENV MODE={mode}"))
    return folder


class Scored:
    def __init__(self, root: Path, cache: Path) -> None:
        self.root, self.cache = root, cache
        self.home = root / "home"
        self.task = make_task(root)

    def run(self, name: str, modes: dict[str, str], code: int = 3) -> str:
        subs = make_submissions(self.root / name, modes)
        done = anvil("run", str(self.task), "--submissions", str(subs), "--runtime", "process",
                     home=self.home, cache=self.cache)
        assert done.returncode == code, done.stderr  # 3: an evaluation ended in error (f)
        return str(self.report("latest")["run"]["id"])

    def report(self, *args: str) -> dict:  # type: ignore[type-arg]
        done = anvil("report", *args, "--format", "json", home=self.home, cache=self.cache)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Scored, str]:
    """One real run of the six submissions, shared by the tests that only read it."""
    s = Scored(tmp_path_factory.mktemp("metrics"), cache_dir)
    return s, s.run("first", FIRST)


def test_markers_travel_from_the_oracle_to_the_store(scored: tuple[Scored, str]) -> None:
    s, run_id = scored
    store = Store(f"sqlite:///{s.home / 'anvil.db'}")
    evals = {Path(e.submission).name: e for e in store.evaluations(run_id)}
    assert {n: e.verdict for n, e in evals.items()} == {
        "a": "pass", "b": "fail", "c": "fail", "d": "fail", "e": "fail", "f": "error"}
    items = {i.nodeid.rpartition("::")[2]: i for i in store.items([evals["a"].id])}
    assert {n: i.markers_dict() for n, i in items.items()} == {
        "test_health": {"tier": "base", "visibility": "public", "requirement": "R1",
                        "level": "leaf"},
        "test_unknown_is_404": {"tier": "base", "visibility": "private", "requirement": "R1",
                                "level": "leaf"},
        "test_put_then_get": {"tier": "evolved-r1", "visibility": "private",
                              "requirement": "R2", "level": "mid"},
        "test_chain_journey": {"tier": "evolved-r2", "visibility": "public",
                               "requirement": "R2", "level": "root"},
        "test_slow_answers": {"tier": "evolved-r1", "visibility": "public",
                              "requirement": "R3", "level": "leaf"},
        "test_plain": {"tier": "base", "visibility": "public"},
        "test_skipped": {"tier": "base", "visibility": "public", "requirement": "R4",
                         "level": "leaf"},
    }
    # The defaults are written as such, not left to the reader.
    assert json.loads(items["test_plain"].markers or "") == {"tier": "base",
                                                              "visibility": "public"}
    report = s.report(run_id)
    (failed,) = [e for e in report["evaluations"] if e["submission"].endswith("/b")]
    assert failed["failed_items"][0]["markers"]["tier"] == "evolved-r1"
    store.close()


def test_every_metric_matches_the_hand_computed_value(scored: tuple[Scored, str]) -> None:
    s, run_id = scored
    m = s.report(run_id)["metrics"]
    # a-e are judged, f (error) is not: 1 of 5 pass.
    assert (m["evaluations"], m["judged"], m["errors"], m["pending"]) == (6, 5, 1, 0)
    assert m["success"] == {"passed": 1, "total": 5, "rate": 0.2}
    # a-d ran the oracle: 4 x 6 judged items (the skip is left out); b, c, d fail one each.
    assert m["item_pass_rate"] == {"passed": 21, "total": 24, "rate": 0.875}
    # base: a and b, c, d (their failed item is r1/r2); +r1: a, d; final (+r2): a. e fails all.
    assert [(t["label"], t["tiers"], t["passed"]) for t in m["tiers"]] == [
        ("base", ["base"], 4),
        ("+evolved-r1", ["base", "evolved-r1"], 2),
        ("final", ["base", "evolved-r1", "evolved-r2"], 1),
    ]
    assert all(t["total"] == 5 for t in m["tiers"])
    assert m["tier_relative_change"] == pytest.approx((0.2 - 0.8) / 0.8)
    # R1, R2, R3 per evaluation (R4 is only skipped): a 3, b 2 (R2), c 2 (R3), d 2 (R2).
    assert m["requirement_accuracy"] == {"passed": 9, "total": 12, "rate": 0.75}
    assert m["balanced_score"] == pytest.approx(2 * 0.875 * 0.75 / (0.875 + 0.75), abs=1e-4)
    # leaf: health, 404, slow (x4), c's slow fails; mid: b fails; root: d fails.
    assert m["levels"] == {"leaf": {"passed": 11, "total": 12, "rate": round(11 / 12, 4)},
                           "mid": {"passed": 3, "total": 4, "rate": 0.75},
                           "root": {"passed": 3, "total": 4, "rate": 0.75}}
    # b and d: every leaf passes, a chain fails; c fails a leaf; a fails nothing.
    assert m["integration_gap"] == {"passed": 2, "total": 4, "rate": 0.5}
    assert m["failed_items_by_category"] == [
        {"task": "scored", "submission": "b", "categories": {"state": 1}},
        {"task": "scored", "submission": "c", "categories": {"workflow": 1}},
        {"task": "scored", "submission": "d", "categories": {"workflow": 1}},
    ]
    assert m["failed_evaluations_by_phase"] == {"scored": {
        "build": 0, "startup": 1, "health": 0, "wiring": 0, "oracle": 3, "error": 1}}
    # Per submission, every one listed: a none, b c d at the oracle, e at startup, f error.
    assert [(row["submission"], {p: n for p, n in row["phases"].items() if n})
            for row in m["failed_evaluations_by_phase_per_submission"]] == [
        ("a", {}), ("b", {"oracle": 1}), ("c", {"oracle": 1}), ("d", {"oracle": 1}),
        ("e", {"startup": 1}), ("f", {"error": 1})]
    # Each submission ran once and none is the reference: no repeats, nothing to quarantine.
    assert (m["repeats"], m["quarantine"]) == (None, None)

    table = anvil("report", run_id, home=s.home, cache=s.cache).stdout
    for line in ("item pass rate", "88% (21/24)", "requirement accuracy", "75% (9/12)",
                 "integration gap", "50% (2/4)", "+evolved-r1", "relative change base -> final:"
                 " -75.0%", "layered scores", "failed items by category",
                 "failed evaluations by phase", "1 error(s) excluded",
                 "repeats: each task x submission was evaluated once",
                 "quarantine: no item fails for the reference or flips"):
        assert line in table, line


def test_a_store_without_the_markers_column_still_reports(scored: tuple[Scored, str]) -> None:
    s, run_id = scored
    old = s.root / "old-home"
    shutil.copytree(s.home, old, ignore=shutil.ignore_patterns("runs", "cache*"))
    with sqlite3.connect(old / "anvil.db") as db:
        db.execute("ALTER TABLE items DROP COLUMN markers")
    done = anvil("report", run_id, "--format", "json", home=old, cache=s.cache)
    assert done.returncode == 0, done.stderr
    m = json.loads(done.stdout)["metrics"]
    # Every item is now base and public with no requirement or level.
    assert m["success"]["rate"] == 0.2 and m["item_pass_rate"]["passed"] == 21
    assert [t["label"] for t in m["tiers"]] == ["base"]
    assert m["tiers"][0]["passed"] == 1  # only base: every failed item counts
    assert (m["requirement_accuracy"], m["balanced_score"], m["levels"],
            m["integration_gap"]) == (None, None, {}, None)
    table = anvil("report", run_id, home=old, cache=s.cache).stdout
    assert "requirements: no item has a requirement marker" in table
    assert "levels: no item has a level marker" in table
    assert "layered scores" not in table


def test_against_lists_regressions_first(scored: tuple[Scored, str]) -> None:
    s, first = scored
    # a breaks (pass -> fail), b is fixed (fail -> pass); c-f are not run again.
    second = s.run("second", {"a": "fail_item", "b": "ok"}, code=0)
    done = anvil("report", second, "--against", first, "--format", "json", home=s.home,
                 cache=s.cache)
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)
    assert (diff["run"], diff["against"]) == (second, first)
    rows = [(c["kind"], c["submission"], (c["item"] or "").rpartition("::")[2], c["before"],
             c["after"]) for c in diff["changes"]]
    assert rows == [
        ("regression", "a", "", "pass", "fail"),
        ("regression", "a", "test_put_then_get", "passed", "failed"),
        ("fix", "b", "", "fail", "pass"),
        ("fix", "b", "test_put_then_get", "failed", "passed"),
        ("other", "c", "", "fail", "absent"),
        ("other", "d", "", "fail", "absent"),
        ("other", "e", "", "fail", "absent"),
        ("other", "f", "", "error", "absent"),
    ]
    assert (diff["regressions"], diff["fixes"], diff["other"]) == (2, 2, 4)
    table = anvil("report", second, "--against", first, home=s.home, cache=s.cache).stdout
    lines = table.splitlines()
    assert "2 regression(s), 2 fix(es), 4 other change(s)" in lines[0]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines[1:]
             if line.startswith("│")]
    assert [row[:3] + row[4:] for row in cells] == [
        ["regression", "scored", "a", "pass", "fail"],
        ["regression", "scored", "a", "passed", "failed"],
        ["fix", "scored", "b", "fail", "pass"],
        ["fix", "scored", "b", "failed", "passed"],
        *(["other", "scored", name, before, "absent"]
          for name, before in (("c", "fail"), ("d", "fail"), ("e", "fail"), ("f", "error"))),
    ]
    refused = anvil("report", second, "--against", first, "--format", "junit", home=s.home,
                    cache=s.cache)
    assert refused.returncode != 0 and "--against" in refused.stderr
