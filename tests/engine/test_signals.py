"""Ctrl-C as a user presses it: once tears down and keeps what finished; twice forces the
exit after teardown has had its deadline, leaving no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine._reaper import marked_processes
from tests.conftest import FIXTURES, MakeSubmission


def test_a_second_ctrl_c_forces_the_exit_within_the_teardown_deadline(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    for _ in range(2):
        make_submission("stubborn")
    home = tmp_path / "home"
    env = {**os.environ, "ANVIL_CACHE": str(cache_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", str(FIXTURES / "tiny_task"), "--submissions",
         str(tmp_path / "submissions"), "--runtime", "process", "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not [p for p in marked_processes() if p.owner == proc.pid]:
            assert time.monotonic() < deadline and proc.poll() is None, "no service started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)  # the second press comes a moment later, as a user's would
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "again" in err and "Traceback" not in err
    assert took <= 10 + 3  # the tiny task's teardown deadline, plus start-up slack
    deadline = time.monotonic() + 5
    while [p for p in marked_processes() if p.owner == proc.pid]:
        assert time.monotonic() < deadline, "the forced exit left processes behind"
        time.sleep(0.05)


def test_a_run_trims_the_venv_cache_to_its_budget_when_it_ends(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "ANVIL_CACHE": str(cache), "ANVIL_CACHE_BUDGET": "1"}
    argv = [sys.executable, "-m", "engine", "run", str(FIXTURES / "tiny_task"), "--submissions",
            str(make_submission("ok")), "--runtime", "process", "--home", str(tmp_path / "h")]
    kept = subprocess.run(argv, capture_output=True, text=True, env={**env,
                          "ANVIL_CACHE_BUDGET": "10G"}, timeout=120)
    assert kept.returncode == 0, kept.stderr
    assert [p for p in (cache / "venvs").iterdir() if p.is_dir()]  # within budget: kept
    trimmed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert trimmed.returncode == 0, trimmed.stderr
    assert "removed 1 venv" in trimmed.stderr
    assert not [p for p in (cache / "venvs").iterdir()
                if p.is_dir() and not p.name.startswith(".")]
