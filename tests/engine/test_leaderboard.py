"""`anvil leaderboard`: three real runs on the process runtime, one per candidate set (a folder
per model), ranked in one table whose every column is checked against values worked out by
hand below, in Markdown, CSV and JSON.

The task's oracle (4 items) and which mode of the tiny service fails which:

    item                 tier        req  level  fails for
    test_health          base        R1   leaf   -
    test_unknown_is_404  base        R1   leaf   -
    test_put_then_get    evolved-r1  R2   mid    fail_item
    test_journey         evolved-r2  R3   root   gap (a service the journey item rejects)

The candidate sets:

    alpha  `anvil run --repeat 2`: ok, gap                       (models/alpha/)
    beta   `anvil run`: ok, fail_item, crash (startup), oracle_crash (the oracle process
           dies: anvil's error, left out of every rate)        (models/beta/)
    gamma  through the engine's API, which records no submissions folder (named after
           its submissions' common parent): ok, crash           (models/gamma/)
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import dataclass
from fractions import Fraction as F
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from engine import Store, load_task
from engine._report import render_leaderboard
from engine.cli import app
from tests.conftest import FIXTURES, run_engine
from tests.engine.test_cli import anvil

CONFTEST = '''\
import os

import pytest
import requests

BASE_URL = os.environ["BASE_URL"]


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
@pytest.mark.tier("base")
@pytest.mark.requirement("R1")
@pytest.mark.level("leaf")
def test_health():
    assert requests.get(f"{BASE_URL}/health", timeout=5).status_code == 200


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R1")
@pytest.mark.level("leaf")
def test_unknown_is_404():
    assert requests.get(f"{BASE_URL}/items/{uuid.uuid4().hex}", timeout=5).status_code == 404


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R2")
@pytest.mark.level("mid")
def test_put_then_get():
    key = uuid.uuid4().hex
    requests.put(f"{BASE_URL}/items/{key}", json={"value": "v"}, timeout=5)
    assert requests.get(f"{BASE_URL}/items/{key}", timeout=5).status_code == 200


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R3")
@pytest.mark.level("root")
def test_journey(mode):
    assert mode != "gap", "the journey breaks although each endpoint works"
'''

COLUMNS = [
    "rank", "name", "run", "evaluations", "judged", "errors", "task_pass_rate",
    "item_pass_rate", "requirement_accuracy", "balanced_score", "level_leaf", "level_mid",
    "level_root", "integration_gap", "success_up_to_base", "success_up_to_evolved-r1",
    "success_up_to_evolved-r2", "tier_relative_change", "pass_at_1", "pass_at_2",
    "item_flip_rate", "failed_build", "failed_startup", "failed_health", "failed_wiring",
    "failed_oracle",
]
HEADER = ("| rank | candidate set | run | evaluations | judged | errors "
          "| task pass rate (pass@1) | item pass rate | requirement accuracy | balanced score "
          "| leaf items | mid items | root items | integration gap | success up to base "
          "| success up to evolved-r1 | success up to evolved-r2 | change base to final "
          "| pass@1 | pass@2 | item flip rate | failed at build | failed at startup "
          "| failed at health | failed at wiring | failed at oracle |")
RATES = ("task_pass_rate", "item_pass_rate", "requirement_accuracy", "level_leaf",
         "level_mid", "level_root", "integration_gap", "success_up_to_base",
         "success_up_to_evolved-r1", "success_up_to_evolved-r2", "item_flip_rate")


def balanced(items: F, requirements: F) -> F:
    return 2 * items * requirements / (items + requirements)


# Each set's expected row; a rate is (passed, total), None where the set has no data.
EXPECTED: dict[str, dict[str, Any]] = {
    # alpha: ok passes both repeats; gap fails test_journey (r2, R3, root) in both.
    # Items 4 + 3 per repeat; requirements 3 + 2 per repeat; both gap evaluations have
    # every leaf passing and the root failing. Under base and base+r1 all 4 pass.
    "alpha": {
        "evaluations": 4, "judged": 4, "errors": 0,
        "task_pass_rate": (2, 4), "item_pass_rate": (14, 16),
        "requirement_accuracy": (10, 12), "balanced_score": balanced(F(14, 16), F(10, 12)),
        "level_leaf": (8, 8), "level_mid": (4, 4), "level_root": (2, 4),
        "integration_gap": (2, 4), "success_up_to_base": (4, 4),
        "success_up_to_evolved-r1": (4, 4), "success_up_to_evolved-r2": (2, 4),
        "tier_relative_change": F(-1, 2),
        # pass@k = mean over (ok: n=2, c=2 -> 1) and (gap: n=2, c=0 -> 0), k = 1, 2.
        "pass_at_1": F(1, 2), "pass_at_2": F(1, 2), "item_flip_rate": (0, 8),
        "failed_build": 0, "failed_startup": 0, "failed_health": 0, "failed_wiring": 0,
        "failed_oracle": 2,
    },
    # beta: ok passes; fail_item fails test_put_then_get (r1, R2, mid); crash fails at
    # startup (no items); oracle_crash is an error: out of every rate.
    "beta|v2": {
        "evaluations": 4, "judged": 3, "errors": 1,
        "task_pass_rate": (1, 3), "item_pass_rate": (7, 8),
        "requirement_accuracy": (5, 6), "balanced_score": balanced(F(7, 8), F(5, 6)),
        "level_leaf": (4, 4), "level_mid": (1, 2), "level_root": (2, 2),
        "integration_gap": (1, 2),
        # base: ok and fail_item (its failed item is r1); crash never.
        "success_up_to_base": (2, 3), "success_up_to_evolved-r1": (1, 3),
        "success_up_to_evolved-r2": (1, 3), "tier_relative_change": F(-1, 2),
        "pass_at_1": None, "pass_at_2": None, "item_flip_rate": None,
        "failed_build": 0, "failed_startup": 1, "failed_health": 0, "failed_wiring": 0,
        "failed_oracle": 1,
    },
    # gamma: ok passes everything, crash fails at startup.
    "gamma": {
        "evaluations": 2, "judged": 2, "errors": 0,
        "task_pass_rate": (1, 2), "item_pass_rate": (4, 4),
        "requirement_accuracy": (3, 3), "balanced_score": F(1),
        "level_leaf": (2, 2), "level_mid": (1, 1), "level_root": (1, 1),
        "integration_gap": (0, 1), "success_up_to_base": (1, 2),
        "success_up_to_evolved-r1": (1, 2), "success_up_to_evolved-r2": (1, 2),
        "tier_relative_change": F(0),
        "pass_at_1": None, "pass_at_2": None, "item_flip_rate": None,
        "failed_build": 0, "failed_startup": 1, "failed_health": 0, "failed_wiring": 0,
        "failed_oracle": 0,
    },
}
# Task pass rate first, then item pass rate: gamma and alpha both pass 1/2 of their
# evaluations, gamma's items all pass (alpha's 14/16); beta passes 1/3.
ORDER = ["gamma", "alpha", "beta|v2"]


@dataclass
class Boards:
    home: Path
    cache: Path
    runs: dict[str, str]  # candidate set -> run id

    def leaderboard(self, fmt: str) -> str:
        done = anvil("leaderboard", self.runs["gamma"], self.runs["beta"], self.runs["alpha"],
                     "--name", f"{self.runs['beta']}=beta|v2", "--format", fmt,
                     home=self.home, cache=self.cache)
        assert done.returncode == 0, done.stderr
        return done.stdout


def _submissions(folder: Path, modes: dict[str, str]) -> Path:
    for name, mode in modes.items():
        sub = folder / name
        shutil.copytree(FIXTURES / "tiny_service", sub)
        dockerfile = sub / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace("ENV MODE=ok", f"ENV MODE={mode}"))
    return folder


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Boards:
    root = tmp_path_factory.mktemp("leaderboard")
    home = root / "home"
    task = root / "journeys"
    shutil.copytree(FIXTURES / "tiny_task", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('id = "tiny"', 'id = "journeys"'))
    for old in (task / "oracle").iterdir():
        old.unlink()
    (task / "oracle" / "conftest.py").write_text(CONFTEST)
    (task / "oracle" / "test_journeys.py").write_text(ORACLE)
    runs: dict[str, str] = {}
    for name, modes, extra, code in (
            ("alpha", {"ok": "ok", "gap": "gap"}, ("--repeat", "2"), 0),
            ("beta", {"ok": "ok", "fail_item": "fail_item", "crash": "crash",
                      "oracle_crash": "oracle_crash"}, (), 3)):  # 3: an evaluation erred
        subs = _submissions(root / "models" / name, modes)
        done = anvil("run", str(task), "--submissions", str(subs), "--runtime", "process",
                     *extra, home=home, cache=cache_dir)
        assert done.returncode == code, done.stderr
        runs[name] = _latest(home)
    gamma = _submissions(root / "models" / "gamma", {"ok": "ok", "crash": "crash"})
    loaded = load_task(task)
    anyio.run(lambda: run_engine([(loaded, gamma / "ok"), (loaded, gamma / "crash")], home,
                                 cache_dir))
    runs["gamma"] = _latest(home)
    return Boards(home, cache_dir, runs)


def _latest(home: Path) -> str:
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    try:
        record = store.run("latest")
        assert record is not None
        return record.id
    finally:
        store.close()


def _run_ids(boards: Boards) -> dict[str, str]:
    return {("beta|v2" if name == "beta" else name): run for name, run in boards.runs.items()}


def test_csv_has_a_row_per_candidate_set_with_every_column(boards: Boards) -> None:
    rows = list(csv.DictReader(io.StringIO(boards.leaderboard("csv"))))
    assert list(rows[0]) == COLUMNS
    assert [r["name"] for r in rows] == ORDER
    assert [r["rank"] for r in rows] == ["1", "2", "3"]
    runs = _run_ids(boards)
    for row in rows:
        expected = EXPECTED[row["name"]]
        assert row["run"] == runs[row["name"]]
        for key in COLUMNS[3:]:
            want = expected[key]
            if isinstance(want, tuple):
                want = F(*want)
            if want is None:
                assert row[key] == "", (row["name"], key)
            elif isinstance(want, int):
                assert row[key] == str(want), (row["name"], key)
            else:
                assert float(row[key]) == pytest.approx(float(want), abs=5e-5), (row["name"],
                                                                                  key)


def test_json_carries_each_rate_with_its_counts(boards: Boards) -> None:
    board = json.loads(boards.leaderboard("json"))
    assert [c["key"] for c in board["columns"]] == COLUMNS[3:]
    rows = board["rows"]
    assert [(r["rank"], r["name"]) for r in rows] == list(enumerate(ORDER, 1))
    runs = _run_ids(boards)
    for row in rows:
        expected = EXPECTED[row["name"]]
        assert row["run"] == runs[row["name"]]
        for key in COLUMNS[3:]:
            want = expected[key]
            if key in RATES and want is not None:
                passed, total = want
                assert row[key] == {"passed": passed, "total": total,
                                    "rate": round(passed / total, 4)}, (row["name"], key)
            elif isinstance(want, F):
                assert row[key] == pytest.approx(float(want), abs=5e-5), (row["name"], key)
            else:
                assert row[key] == want, (row["name"], key)


def test_markdown_is_one_table_with_the_header_row(boards: Boards) -> None:
    lines = boards.leaderboard("md").splitlines()
    assert lines[0] == HEADER
    assert lines[1].startswith("| ---: | --- | --- | ---: |")
    assert len(lines) == 2 + 3
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[2:]]
    assert all(len(row) == len(COLUMNS) for row in cells), cells
    by_name = {row[1]: dict(zip(COLUMNS, row, strict=True)) for row in cells}
    assert [row[1] for row in cells] == ["gamma", "alpha", "beta\\|v2"]  # | escaped
    alpha, beta = by_name["alpha"], by_name["beta\\|v2"]
    assert alpha["task_pass_rate"] == "50.0% (2/4)"
    assert alpha["item_pass_rate"] == "87.5% (14/16)"
    assert alpha["balanced_score"] == f"{100 * float(balanced(F(14, 16), F(10, 12))):.1f}%"
    assert alpha["tier_relative_change"] == "-50.0%"
    assert (alpha["pass_at_1"], alpha["pass_at_2"]) == ("50.0%", "50.0%")
    assert alpha["item_flip_rate"] == "0.0% (0/8)"
    assert beta["task_pass_rate"] == "33.3% (1/3)" and beta["errors"] == "1"
    assert (beta["pass_at_2"], beta["item_flip_rate"]) == ("-", "-")
    assert by_name["gamma"]["failed_startup"] == "1"


def test_a_row_is_named_after_its_submissions_folder(boards: Boards) -> None:
    """alpha and beta recorded their folder (`anvil run --submissions`); gamma did not and
    is named after its submissions' common parent. Names that collide get their run id."""
    store = Store(f"sqlite:///{boards.home / 'anvil.db'}")
    try:
        records = [r for name in ("alpha", "beta", "gamma")
                   if (r := store.run(boards.runs[name])) is not None]
        assert len(records) == 3 and "submissions" not in records[2].options_dict()
        board = json.loads(render_leaderboard(store, records, "json"))
        assert [r["name"] for r in board["rows"]] == ["gamma", "alpha", "beta"]
        same = {boards.runs["alpha"]: "same", boards.runs["gamma"]: "same"}
        board = json.loads(render_leaderboard(store, records, "json", same))
    finally:
        store.close()
    assert [r["name"] for r in board["rows"]] == [
        f"same ({boards.runs['gamma']})", f"same ({boards.runs['alpha']})", "beta"]


def test_bad_arguments_are_usage_errors(boards: Boards) -> None:
    alpha, home = boards.runs["alpha"], str(boards.home)
    runner = CliRunner()
    for args, said in (
            (("nope",), "no run 'nope'"),
            ((alpha, "latest", "latest"), "given twice"),
            ((alpha, "--name", "alpha"), "expected RUN=NAME"),
            ((alpha, "--name", f"{boards.runs['beta']}=b"), "not one of the runs given"),
            ((alpha, "--format", "xml"), "xml")):
        done = runner.invoke(app, ["leaderboard", *args, "--home", home])
        assert done.exit_code == 2 and said in done.output, (args, done.output)
    out = boards.home.parent / "out" / "board.md"
    done = runner.invoke(app, ["leaderboard", alpha, "-o", str(out), "--home", home])
    assert done.exit_code == 0, done.output
    assert out.read_text().splitlines()[2].startswith("| 1 | alpha |")
