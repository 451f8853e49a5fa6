"""The store: a real SQLite file in WAL mode, resumable runs, no duplicates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine import EvaluationFinished, EvaluationStarted, HarnessError, Phase, Store, Verdict


def test_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    Store(f"sqlite:///{tmp_path / 'a.db'}").create_run("r", "process", {}, [])
    mode = sqlite3.connect(tmp_path / "a.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_an_evaluation_is_recorded_once_per_run(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(HarnessError, match="UNIQUE constraint failed"):
        store.create_run("r", "process", {}, [("r.0", "t", "/t", "/s"), ("r.1", "t", "/t", "/s")])


def test_retry_attempt_replaces_and_final_verdict_marks_done(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    store.create_run("r", "process", {"concurrency": 2}, [("r.0", "t", "/t", "/s")])
    store.apply(EvaluationStarted(run_id="r", evaluation_id="r.0", task="t", submission="/s",
                                  attempt=1))
    common = dict(run_id="r", evaluation_id="r.0", task="t", submission="/s", items=(),
                  duration_s=1.0)
    store.apply(EvaluationFinished(verdict=Verdict.ERROR, phase=Phase.ORACLE, reason="x",
                                   attempt=1, final=False, **common))  # type: ignore[arg-type]
    (row,) = store.evaluations("r")
    assert (row.status, row.verdict) == ("pending", "error")
    store.apply(EvaluationFinished(verdict=Verdict.PASS, phase=None, reason="ok", attempt=2,
                                   **common))  # type: ignore[arg-type]
    (row,) = store.evaluations("r")
    assert (row.status, row.verdict, row.attempt) == ("done", "pass", 2)
    assert store.run("latest").options_dict() == {"concurrency": 2}  # type: ignore[union-attr]
