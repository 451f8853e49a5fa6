"""What `anvil` prints and how it exits, as a user (or a script) sees it.

Real `anvil` subprocesses on the process runtime where a run is involved; typer's
CliRunner for what needs no run (help, version, argument checks).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from typer.testing import CliRunner

from engine import Store
from engine.cli import ExitCode, app
from engine.runtimes import runtime_names
from tests.conftest import FIXTURES, MakeSubmission
from tests.engine.test_cli import TINY, _env, anvil

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _store(home: Path) -> Store:
    return Store(f"sqlite:///{home / 'anvil.db'}")


def _long_crash(make_submission: MakeSubmission, name: str, text: str) -> Path:
    """A submission whose service prints ``text`` and exits 3 before it listens."""
    dockerfile = (FIXTURES / "tiny_service" / "Dockerfile").read_text().replace(
        'CMD ["python", "server.py"]',
        f'CMD ["python", "-c", "print({text!r}, flush=True); raise SystemExit(3)"]')
    return make_submission("ok", name=name, dockerfile=dockerfile)


# -- 1. subscribers are isolated -------------------------------------------------


def test_json_into_head_stops_json_output_only(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """`anvil run --json | head -1`: the run finishes, scores and stores every evaluation,
    exits as it would have, and prints no traceback."""
    for name in ("a-ok", "b-lossy", "c-ok"):
        make_submission("fail_item" if "lossy" in name else "ok", name=name)
    home = tmp_path / "home"
    # --concurrency 1: the 2nd line is written after head has gone (a real EPIPE)
    producer = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", str(TINY), "-s", str(tmp_path / "submissions"),
         "--runtime", "process", "--concurrency", "1", "--json", "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cache_dir))
    assert producer.stdout is not None
    head = subprocess.Popen(["head", "-1"], stdin=producer.stdout, stdout=subprocess.PIPE,
                            text=True)
    producer.stdout.close()  # only head holds the read end now
    try:
        first, _ = head.communicate(timeout=120)
        _, err = producer.communicate(timeout=120)
    finally:
        producer.kill()
        head.kill()
    assert producer.returncode == ExitCode.OK, err
    assert json.loads(first)["verdict"] in ("pass", "fail")
    assert "--json output stopped (the reader closed the pipe); the run goes on" in err
    assert "Traceback" not in err and "BrokenPipeError" not in err
    (run_dir,) = home.glob("runs/*")
    store = _store(home)
    assert store.run(run_dir.name).status == "finished"  # type: ignore[union-attr]
    rows = store.evaluations(run_dir.name)
    assert [(Path(r.submission).name, r.status, r.verdict) for r in rows] == [
        ("a-ok", "done", "pass"), ("b-lossy", "done", "fail"), ("c-ok", "done", "pass")]
    kinds = [json.loads(line)["kind"] for line in (run_dir / "events.jsonl").read_text()
             .splitlines()]
    assert kinds.count("EvaluationFinished") == 3 and kinds[-1] == "RunFinished"
    assert "pass=2 fail=1 error=0" in err


# -- 2. output -------------------------------------------------------------------


def test_lines_stay_whole_and_user_text_is_literal_when_stderr_is_not_a_terminal(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """No COLUMNS, no terminal: a verdict line of ~250 characters is one line, the run id
    greps, `[red]` in a name or reason prints as written, and no bar escapes appear."""
    name = "sub-[red]x-" + "n" * 60  # a folder name: no "/" in it
    reason = "[bold]boom[/bold] " + "x" * 150
    _long_crash(make_submission, name, reason)
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "-s", str(tmp_path / "submissions" / name),
                 "--runtime", "process", home=home, cache=cache_dir)
    assert done.returncode == ExitCode.OK, done.stderr
    (run_dir,) = home.glob("runs/*")
    lines = done.stderr.splitlines()
    assert f"run {run_dir.name} on the process runtime: 1 evaluation" in lines
    (verdict,) = [ln for ln in lines if ln.startswith("fail  at startup")]
    assert name in verdict and reason in verdict and len(verdict) > 250
    assert lines[-1] == f"pass=0 fail=1 error=0 (1 evaluation; run {run_dir.name})"
    assert not ANSI.search(done.stderr) and "━" not in done.stderr


def test_report_table_keeps_long_reasons_and_writes_files_into_new_folders(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    reason = "[bold]boom[/bold] " + "y" * 150
    _long_crash(make_submission, "long", reason)
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "-s", str(tmp_path / "submissions"), "--runtime", "process",
                 home=home, cache=cache_dir)
    assert done.returncode == ExitCode.OK, done.stderr
    piped = anvil("report", home=home, cache=cache_dir)  # stdout is a pipe
    assert piped.returncode == ExitCode.OK, piped.stderr
    (row,) = [ln for ln in piped.stdout.splitlines() if "long" in ln]
    assert reason in row  # whole, on one row, markup as written

    out = tmp_path / "new" / "deeper" / "report.txt"
    written = anvil("report", "-f", "table", "-o", str(out), home=home, cache=cache_dir)
    assert written.returncode == ExitCode.OK, written.stderr
    assert written.stdout == "" and f"wrote {out}" in written.stderr
    assert reason in out.read_text() and "startup" in out.read_text()

    junit = tmp_path / "j" / "r.xml"
    assert anvil("report", "-f", "junit", "-o", str(junit), home=home,
                 cache=cache_dir).returncode == ExitCode.OK
    assert junit.read_text().startswith("<?xml")

    (tmp_path / "file").write_text("in the way")
    blocked = anvil("report", "-o", str(tmp_path / "file" / "r.txt"), home=home, cache=cache_dir)
    assert blocked.returncode == ExitCode.USAGE
    assert blocked.stderr.startswith(f"error: {tmp_path / 'file' / 'r.txt'}: cannot write")
    assert len(blocked.stderr.splitlines()) == 1 and "Traceback" not in blocked.stderr


# -- 3. a failure says what failed and where to look ------------------------------


def test_run_ends_with_a_short_summary_of_failed_items_and_log_folders(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    make_submission("ok", name="good")
    make_submission("fail_item", name="lossy")
    make_submission("crash", name="crashy")
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "-s", str(tmp_path / "submissions"), "--runtime", "process",
                 home=home, cache=cache_dir)
    assert done.returncode == ExitCode.OK, done.stderr
    lines = done.stderr.splitlines()
    start = lines.index("short summary: 2 of 3 evaluations did not pass")
    summary = lines[start:]
    assert "FAIL tiny lossy at oracle: 1/4 items failed (state)" in summary
    assert any(ln.startswith("  FAILED tiny lossy test_tiny.py::test_put_then_get [state] - ")
               for ln in summary)
    assert any(ln.startswith("FAIL tiny crashy at startup: service exited 3") for ln in summary)
    logs = [Path(ln.removeprefix("  logs: ")) for ln in summary if ln.startswith("  logs: ")]
    assert [p.name.split("-", 1)[1] for p in logs] == ["tiny-crashy", "tiny-lossy"]
    assert all((p / "service.log").is_file() for p in logs)
    assert "boom: missing configuration" in (logs[0] / "service.log").read_text()
    assert not any("good" in ln for ln in summary[:-1])  # a pass is not in the summary


def test_terminal_progress_shows_each_running_evaluation_and_its_phase(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """With stderr on a terminal (a pty), the live display lists running evaluations with
    their current phase; the oracle phase counts the items done so far."""
    make_submission("slow_item", name="sluggish")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    env = {**_env(cache_dir), "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", str(TINY), "-s", str(tmp_path / "submissions"),
         "--runtime", "process", "--home", str(tmp_path / "home")],
        stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # the pty's buffer must not fill up
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer is gone
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=120) == ExitCode.OK
        reader.join(timeout=10)
    finally:
        proc.kill()
        os.close(master)
    screen = ANSI.sub("", b"".join(chunks).decode(errors="replace"))
    assert re.search(r"tiny\s+sluggish\s+oracle\s+\d items? done", screen), screen[-2000:]
    assert "fail  at oracle   tiny sluggish" in screen


# -- 4. the command line ----------------------------------------------------------


def test_help_lists_choices_flags_without_types_and_the_exit_code_table() -> None:
    runner = CliRunner()
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0
    for code in ExitCode:
        assert re.search(rf"^\s+{code.value}\s+{code.name.lower()}:", top.output, re.M), code
    run_help = runner.invoke(app, ["run", "--help"])
    assert "--runtime <" + "|".join(runtime_names()) + ">" in run_help.output
    assert re.search(r"--json\s+JSON Lines", run_help.output)
    assert "<bool>" not in run_help.output + top.output
    report_help = runner.invoke(app, ["report", "--help"])
    assert "--format <table|json|ctrf|junit>" in report_help.output


def test_version_and_bad_choices() -> None:
    runner = CliRunner()
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == ExitCode.OK
    assert re.fullmatch(r"anvil \S+\n", version.output)
    bad_runtime = runner.invoke(app, ["verify", str(TINY), str(TINY), "--runtime", "vm"])
    assert bad_runtime.exit_code == ExitCode.USAGE
    assert "'vm' is not one of auto" in bad_runtime.output
    bad_format = runner.invoke(app, ["report", "-f", "xml"])
    assert bad_format.exit_code == ExitCode.USAGE


def test_exit_codes_are_the_documented_numbers() -> None:
    assert {c.name: c.value for c in ExitCode} == {
        "OK": 0, "FAILED": 1, "USAGE": 2, "ERROR": 3, "INCOMPLETE": 4, "INTERRUPTED": 130}


# -- 5. paths ---------------------------------------------------------------------


def test_a_missing_task_folder_is_a_usage_error_before_anything_runs(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    make_submission("ok")
    home = tmp_path / "home"
    missing = tmp_path / "no-such-task"
    done = anvil("run", str(TINY), str(missing), "-s", str(tmp_path / "submissions"),
                 "--runtime", "process", home=home, cache=cache_dir)
    assert done.returncode == ExitCode.USAGE
    assert done.stderr == f"error: {missing}: no such task folder\n"
    assert not (home / "runs").exists()


def test_a_task_without_submissions_is_reported_and_the_exit_code_says_so(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    other = tmp_path / "tasks" / "other"
    shutil.copytree(TINY, other)
    toml = other / "task.toml"
    toml.write_text(toml.read_text().replace('id = "tiny"', 'id = "other"'))
    subs = tmp_path / "subs"
    (subs / "tiny").mkdir(parents=True)
    shutil.copytree(make_submission("ok"), subs / "tiny" / "one")
    done = anvil("run", str(TINY), str(other), "-s", str(subs), "--json",
                 "--runtime", "process", home=tmp_path / "home", cache=cache_dir)
    assert done.returncode == ExitCode.INCOMPLETE, done.stderr
    assert [json.loads(ln)["task"] for ln in done.stdout.splitlines()] == ["tiny"]
    assert f"{subs / 'other'}: no submissions for task other" in done.stderr
    assert done.stderr.splitlines()[-1] == "not evaluated: task other had no submissions"


def test_verify_refuses_a_folder_of_submissions_as_usage(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    make_submission("ok", name="one")
    make_submission("crash", name="two")
    folder = tmp_path / "submissions"
    done = anvil("verify", str(TINY), str(folder), "--runtime", "process", home=tmp_path,
                 cache=cache_dir)
    assert done.returncode == ExitCode.USAGE
    assert done.stdout == (f"SELF_VERIFY_ERROR usage: {folder} is a folder of 2 submissions "
                           "(one, two); verify takes one submission folder (with a Dockerfile)\n")
    assert not (tmp_path / "runs").exists()


def test_verify_says_when_the_harness_could_not_judge(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """A Dockerfile line the process runtime cannot emulate is anvil's limit, not the
    submission's failure: SELF_VERIFY_ERROR harness, exit 3, not SELF_VERIFY_FAIL."""
    text = (FIXTURES / "tiny_service" / "Dockerfile").read_text()
    sub = make_submission("ok", dockerfile=text.replace("EXPOSE", "RUN apt-get update\nEXPOSE"))
    done = anvil("verify", str(TINY), str(sub), "--runtime", "process", home=tmp_path,
                 cache=cache_dir)
    assert done.returncode == ExitCode.ERROR
    (line,) = done.stdout.splitlines()
    assert line.startswith("SELF_VERIFY_ERROR harness: ") and line.endswith("(phase=build)")
    assert "apt-get update" in line and done.stderr == ""
