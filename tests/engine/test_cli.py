"""The CLI as a user runs it: real `anvil` subprocesses, real services, a real SQLite file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from engine import Store
from engine._reaper import marked_processes
from tests.conftest import FIXTURES, MakeSubmission

SCHEMAS = Path(__file__).parent / "schemas"
TINY = FIXTURES / "tiny_task"


def anvil(*args: str, home: Path, cache: Path, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "engine", *args, "--home", str(home)] if args[0] not in (
            "tasks", "gc") else [sys.executable, "-m", "engine", *args],
        capture_output=True, text=True, timeout=240, env=_env(cache), **kw,
    )


def _env(cache: Path) -> dict[str, str]:
    """As from a script: no terminal, no COLUMNS (rich would assume 80 columns)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "ANVIL_CACHE": str(cache)}


def spawn(*args: str, home: Path, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", *args, "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cache),
    )


def events(home: Path) -> list[dict]:  # type: ignore[type-arg]
    found = []
    for path in sorted(home.glob("runs/*/events.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def in_oracle(seen: list[dict]) -> set[str]:  # type: ignore[type-arg]
    """Evaluations whose oracle phase has started and not finished yet."""
    started = {e["evaluation_id"] for e in seen if e["kind"] == "PhaseStarted"
               and e["phase"] == "oracle"}
    return started - {e["evaluation_id"] for e in seen if e["kind"] == "PhaseFinished"
                      and e["phase"] == "oracle"}


def kill_left_by(owner: int) -> None:
    """Clean-up for a test that failed midway: whatever the anvil ``owner`` left running."""
    for orphan in marked_processes():
        if orphan.owner == owner:
            try:
                os.kill(orphan.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_of(home: Path) -> str:
    (folder,) = home.glob("runs/*")
    return folder.name


def test_json_lines_on_stdout_and_human_output_on_stderr(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    make_submission("ok", name="good")
    make_submission("fail_item", name="lossy")
    subs = tmp_path / "submissions"
    done = anvil("run", str(TINY), "--submissions", str(subs), "--runtime", "process", "--json",
                 home=tmp_path / "home", cache=cache_dir)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    by_name = {Path(r["submission"]).name: r for r in rows}
    assert set(by_name) == {"good", "lossy"}
    good, lossy = by_name["good"], by_name["lossy"]
    for key in ("run_id", "evaluation_id", "task", "submission", "verdict", "phase",
                "items_passed", "items_failed", "failed_items", "duration_s"):
        assert key in good
    assert (good["verdict"], good["phase"], good["items_passed"]) == ("pass", None, 4)
    assert (lossy["verdict"], lossy["phase"], lossy["items_failed"]) == ("fail", "oracle", 1)
    (item,) = lossy["failed_items"]
    assert item["nodeid"] == "test_tiny.py::test_put_then_get" and item["category"] == "state"
    assert "pass=1 fail=1 error=0" in done.stderr


def test_sigint_tears_down_exits_130_and_resume_finishes_the_run(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    for _ in range(3):
        make_submission("slow_item")
    home = tmp_path / "home"
    proc = spawn("run", str(TINY), "--submissions", str(tmp_path / "submissions"),
                 "--runtime", "process", home=home, cache=cache_dir)
    try:
        wait_for(lambda: sum(1 for e in events(home) if e["kind"] == "PhaseStarted"
                             and e["phase"] == "oracle") >= 2)
        run_id = run_of(home)
        assert [p for p in marked_processes() if p.run_id == run_id]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
        kill_left_by(proc.pid)
    assert proc.returncode == 130, err
    # the hint is one line a script can grep, whatever its length
    assert any(f"go on with `anvil run --resume {run_id}`" in line for line in err.splitlines())
    assert [p for p in marked_processes() if p.run_id == run_id] == []
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    assert store.run(run_id).status == "interrupted"  # type: ignore[union-attr]
    unfinished = {r.id for r in store.evaluations(run_id) if r.status != "done"}
    assert unfinished  # the interrupted oracles left their evaluations to do

    resumed = anvil("run", "--resume", run_id, "--json", home=home, cache=cache_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert {json.loads(line)["evaluation_id"] for line in resumed.stdout.splitlines()} == (
        unfinished)
    rows = store.evaluations(run_id)
    assert [(r.status, r.verdict, r.phase, r.items_passed) for r in rows] == [
        ("done", "fail", "oracle", 3)] * 3
    assert store.run(run_id).status == "finished"  # type: ignore[union-attr]
    assert "pass=0 fail=3 error=0 (3 evaluations" in resumed.stderr


def test_kill9_then_resume_finishes_with_the_same_verdicts(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    modes = ["ok", "fail_item", "crash", "ok", "slow_item", "fail_item"]
    expected = {"ok": ("pass", None), "fail_item": ("fail", "oracle"),
                "crash": ("fail", "startup"), "slow_item": ("fail", "oracle")}
    names = {}
    for i, mode in enumerate(modes):
        names[f"s{i}-{mode}"] = mode
        make_submission(mode, name=f"s{i}-{mode}")
    home = tmp_path / "home"
    proc = spawn("run", str(TINY), "--submissions", str(tmp_path / "submissions"),
                 "--runtime", "process", "--concurrency", "1", home=home, cache=cache_dir)
    try:
        wait_for(lambda: sum(1 for e in events(home) if e["kind"] == "EvaluationFinished") >= 2
                 and bool(in_oracle(events(home))))
    finally:
        proc.kill()  # SIGKILL: no teardown, no final writes
        proc.communicate()
    try:
        run_id = run_of(home)
        store = Store(f"sqlite:///{home / 'anvil.db'}")
        finished_before = {r.id: r.verdict for r in store.evaluations(run_id)
                           if r.status == "done"}
        assert 2 <= len(finished_before) < len(modes)

        resumed = anvil("run", "--resume", run_id, "--json", home=home, cache=cache_dir)
        assert resumed.returncode == 0, resumed.stderr
        # the totals are the whole run's, not only what this resume did
        assert (f"pass=2 fail=4 error=0 (6 evaluations, {len(finished_before)} done before this "
                f"resume; run {run_id})") in resumed.stderr.splitlines()
        redone = [json.loads(line) for line in resumed.stdout.splitlines()]
        assert {r["evaluation_id"] for r in redone}.isdisjoint(finished_before)
        rows = store.evaluations(run_id)
        assert len(rows) == len(modes) and len({r.submission for r in rows}) == len(modes)
        for row in rows:
            assert row.status == "done"
            assert (row.verdict, row.phase) == expected[names[Path(row.submission).name]]
        assert {r.id: r.verdict for r in rows if r.id in finished_before} == finished_before
        assert [p for p in marked_processes() if p.run_id == run_id] == []
    finally:
        kill_left_by(proc.pid)  # the resume reaps them; a failure before it must too


def test_verify_prints_one_line_and_reveals_nothing(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    good = anvil("verify", str(TINY), str(make_submission("ok")), "--runtime", "process",
                 home=tmp_path, cache=cache_dir)
    assert (good.returncode, good.stdout) == (0, "SELF_VERIFY_PASS\n")
    bad = anvil("verify", str(TINY), str(make_submission("fail_item")), "--runtime", "process",
                home=tmp_path, cache=cache_dir)
    assert (bad.returncode, bad.stdout) == (1, "SELF_VERIFY_FAIL phase=oracle\n")
    crash = anvil("verify", str(TINY), str(make_submission("crash")), "--runtime", "process",
                  home=tmp_path, cache=cache_dir)
    assert crash.stdout == "SELF_VERIFY_FAIL phase=startup\n"
    for done in (good, bad, crash):
        assert "test_" not in done.stdout + done.stderr
        assert "/items" not in done.stdout + done.stderr
        assert done.stderr == ""


def test_verify_public_details_public_items_only(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """--public: each public item's outcome (and a failure's assertion); the private ones
    as one coarse line that names none of them."""
    def task_with(private: str) -> Path:
        task = tmp_path / f"task-{private}"
        shutil.copytree(TINY, task)
        oracle = task / "oracle" / "test_tiny.py"
        oracle.write_text(oracle.read_text().replace(
            f"def {private}(", f"@pytest.mark.visibility(\"private\")\ndef {private}("))
        return task

    hidden = task_with("test_put_then_get")  # the item fail_item breaks
    shown = task_with("test_unknown_is_404")
    bad = make_submission("fail_item")
    done = anvil("verify", str(hidden), str(bad), "--runtime", "process", "--public",
                 home=tmp_path / "h1", cache=cache_dir)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "SELF_VERIFY_FAIL phase=oracle",
        "PUBLIC PASS test_tiny.py::test_health",
        "PUBLIC PASS test_tiny.py::test_unknown_is_404",
        "PUBLIC PASS test_tiny.py::test_slow_answers",
        "PRIVATE FAIL phase=oracle",
    ]
    done = anvil("verify", str(shown), str(bad), "--runtime", "process", "--public",
                 home=tmp_path / "h2", cache=cache_dir)
    lines = done.stdout.splitlines()
    assert lines[0] == "SELF_VERIFY_FAIL phase=oracle"
    (failed,) = [line for line in lines if line.startswith("PUBLIC FAIL")]
    assert failed.startswith("PUBLIC FAIL test_tiny.py::test_put_then_get: ")
    assert "test_unknown_is_404" not in done.stdout and lines[-1] == "PRIVATE PASS"
    crash = anvil("verify", str(hidden), str(make_submission("crash")), "--runtime",
                  "process", "--public", home=tmp_path / "h3", cache=cache_dir)
    assert crash.stdout.splitlines() == ["SELF_VERIFY_FAIL phase=startup",
                                         "PRIVATE FAIL phase=startup"]


def test_reports_validate_against_ctrf_and_junit_schemas(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    for mode in ("ok", "fail_item", "crash"):
        make_submission(mode)
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "--submissions", str(tmp_path / "submissions"),
                 "--runtime", "process", home=home, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    ctrf = json.loads(anvil("report", "latest", "--format", "ctrf", home=home,
                            cache=cache_dir).stdout)
    jsonschema.validate(ctrf, json.loads((SCHEMAS / "ctrf.schema.json").read_text()))
    summary = ctrf["results"]["summary"]
    # 4 + 4 items, plus one case for the crash at startup
    assert (summary["tests"], summary["passed"], summary["failed"]) == (9, 7, 2)

    junit = anvil("report", "latest", "--format", "junit", home=home, cache=cache_dir).stdout
    xmlschema.XMLSchema(SCHEMAS / "junit.xsd").validate(junit)
    assert junit.count("<testsuite ") == 3 and junit.count("<failure ") == 2

    report = json.loads(anvil("report", "--format", "json", home=home, cache=cache_dir).stdout)
    total = report["summary"]
    assert (total["passed"], total["failed"], total["errors"]) == (1, 2, 0)
    assert total["failed_by_phase"] == {"oracle": 1, "startup": 1}
    assert total["failed_items_by_category"] == {"state": 1}
    table = anvil("report", home=home, cache=cache_dir)
    assert table.returncode == 0 and "startup 1" in table.stdout


def test_missing_submissions_folder_is_one_clear_line(tmp_path: Path, cache_dir: Path) -> None:
    done = anvil("run", str(TINY), "--submissions", str(tmp_path / "nope"), home=tmp_path,
                 cache=cache_dir)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path / 'nope'}: no such submissions folder"


def test_malformed_task_is_reported_and_other_tasks_still_run(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    broken = tmp_path / "tasks" / "broken"
    shutil.copytree(TINY, broken)
    (broken / "task.toml").write_text('id = "broken"\n[service]\nport = "eighty"\n')
    subs = tmp_path / "subs"
    for task_id in ("tiny", "broken"):
        (subs / task_id).mkdir(parents=True)
        shutil.copytree(make_submission("ok"), subs / task_id / "one")
    done = anvil("run", str(TINY), str(broken), "--submissions", str(subs), "--json",
                 "--runtime", "process", home=tmp_path / "home", cache=cache_dir)
    assert done.returncode == 3  # ExitCode.ERROR: an evaluation ended in error
    assert f"{broken / 'task.toml'}:3: service.port:" in done.stderr
    rows = {r["task"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert rows["tiny"]["verdict"] == "pass"
    assert rows["broken"]["verdict"] == "error" and "task.toml" in rows["broken"]["reason"]


def test_tasks_check_passes_the_bundled_task(tmp_path: Path, cache_dir: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = anvil("tasks", "check", str(root / "tasks" / "taskboard"), "--runtime", "process",
                 "--home", str(tmp_path), home=tmp_path, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    collected = re.search(r"oracle collects: (\d+) items", done.stderr)
    assert collected and int(collected[1]) >= 100, done.stderr  # as dense as BackendForge's
    assert f"reference passes: all {collected[1]} items pass" in done.stderr


def test_tasks_check_names_the_broken_openapi(tmp_path: Path, cache_dir: Path) -> None:
    task = tmp_path / "t"
    shutil.copytree(TINY, task)
    (task / "openapi.yaml").write_text("openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n")
    done = anvil("tasks", "check", str(task), "--runtime", "process", "--home", str(tmp_path),
                 home=tmp_path, cache=cache_dir)
    assert done.returncode == 1
    assert f"{task / 'openapi.yaml'}: at info:" in done.stderr
    assert "reference passes:" in done.stderr and "missing" in done.stderr


@pytest.mark.parametrize("command", [["--help"], ["run", "--help"], ["report", "--help"]])
def test_help_explains(command: list[str], tmp_path: Path, cache_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "engine", *command], capture_output=True,
                          text=True, env=_env(cache_dir))
    assert done.returncode == 0 and "Usage" in done.stdout


def test_backendforge_style_task_runs_with_defaults(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    task = tmp_path / "bf-kv"
    task.mkdir()
    for name in ("spec.md", "openapi.yaml"):
        shutil.copy(TINY / name, task / name)
    shutil.copytree(TINY / "oracle", task / "tests")
    # BackendForge tests carry no category markers: drop them
    test_file = task / "tests" / "test_tiny.py"
    test_file.write_text("\n".join(line for line in test_file.read_text().splitlines()
                                   if "mark.category" not in line))
    (task / "tests" / "conftest.py").unlink()
    done = anvil("run", str(task), "--submissions", str(make_submission("ok")), "--json",
                 "--runtime", "process", home=tmp_path / "home", cache=cache_dir)
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["task"], row["verdict"], row["items_passed"]) == ("bf-kv", "pass", 4)


def test_a_task_named_twice_is_evaluated_once(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    done = anvil("run", str(TINY), str(TINY), "--submissions", str(make_submission("ok")),
                 "--json", "--runtime", "process", home=tmp_path / "home", cache=cache_dir)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1
