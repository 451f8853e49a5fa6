"""Reports of a run: scoreboard table, JSON, CTRF and JUnit XML.

The scoreboard follows the BackendForge method: a task counts as solved by a
submission only if every oracle item passes; failures are counted by the
phase that failed and by item category. The finer metrics (cumulative tiers,
requirements, levels, failure tables) are :mod:`engine._metrics`'s; two runs are
compared by :func:`render_comparison`; several runs, one per candidate set, are ranked
side by side by :func:`render_leaderboard`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._metrics import (
    PHASES,
    Change,
    Metrics,
    Rate,
    compare,
    compute,
    level_order,
    tier_order,
)
from ._store import EvaluationRecord, ItemRecord, RunRecord, Store

Format = Literal["table", "json", "ctrf", "junit"]
FORMATS: tuple[str, ...] = get_args(Format)

WIDE = 100_000  # columns of a table that goes to a file or a pipe: no row is wrapped or cut


@dataclass
class TaskScore:
    task: str
    evaluations: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    items_passed: int = 0
    items_total: int = 0  # items judged: passed, failed or errored
    items_skipped: int = 0  # neither passed nor failed: never counted as passed
    by_phase: Counter[str] = field(default_factory=Counter)
    by_category: Counter[str] = field(default_factory=Counter)

    @property
    def success_rate(self) -> float:
        judged = self.passed + self.failed  # errors are the harness's, not counted
        return self.passed / judged if judged else 0.0

    @property
    def item_pass_rate(self) -> float:
        return self.items_passed / self.items_total if self.items_total else 0.0


@dataclass
class Scoreboard:
    run: RunRecord
    evaluations: Sequence[EvaluationRecord]
    items: dict[str, list[ItemRecord]]
    tasks: list[TaskScore]

    @property
    def metrics(self) -> Metrics:
        """The run's scoring metrics (:mod:`engine._metrics`)."""
        return compute(self.evaluations, self.items)

    @property
    def total(self) -> TaskScore:
        total = TaskScore("all")
        for t in self.tasks:
            total.evaluations += t.evaluations
            total.passed += t.passed
            total.failed += t.failed
            total.errors += t.errors
            total.items_passed += t.items_passed
            total.items_total += t.items_total
            total.items_skipped += t.items_skipped
            total.by_phase.update(t.by_phase)
            total.by_category.update(t.by_category)
        return total


def scoreboard(store: Store, run: RunRecord) -> Scoreboard:
    evaluations = store.evaluations(run.id)
    items: dict[str, list[ItemRecord]] = defaultdict(list)
    for item in store.items([e.id for e in evaluations]):
        items[item.evaluation_id].append(item)
    scores: dict[str, TaskScore] = {}
    for ev in evaluations:
        score = scores.setdefault(ev.task_id, TaskScore(ev.task_id))
        score.evaluations += 1
        if ev.verdict == "pass":
            score.passed += 1
        elif ev.verdict == "fail":
            score.failed += 1
            score.by_phase[ev.phase or "?"] += 1
        elif ev.verdict == "error":
            score.errors += 1
        for item in items[ev.id]:
            if item.outcome == "skipped":
                score.items_skipped += 1
                continue
            score.items_total += 1
            if item.outcome == "passed":
                score.items_passed += 1
            else:
                score.by_category[item.category or "uncategorized"] += 1
    return Scoreboard(run, evaluations, dict(items), list(scores.values()))


def render_report(
    store: Store, run: RunRecord, fmt: str, console: Console | None = None
) -> str | None:
    """Render ``fmt`` as text; a ``table`` given a ``console`` is printed there instead.

    A table rendered as text (for a file) is as wide as its longest row: no
    reason is cut or wrapped.
    """
    board = scoreboard(store, run)
    if fmt == "table":
        if console is not None:
            _print_table(board, console)
            return None
        buffer = io.StringIO()
        _print_table(board, Console(file=buffer, width=WIDE, color_system=None,
                                    force_terminal=False, highlight=False))
        return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
    if fmt == "json":
        return json.dumps(_as_json(board), indent=2) + "\n"
    if fmt == "ctrf":
        return json.dumps(_as_ctrf(board), indent=2) + "\n"
    if fmt == "junit":
        return _as_junit(board)
    raise ValueError(fmt)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _print_table(board: Scoreboard, console: Console) -> None:
    run = board.run
    console.print(f"run [bold]{escape(run.id)}[/] ({run.status}, {escape(run.runtime)} runtime)")
    evals = Table("task", "submission", "verdict", "phase", "items")
    evals.add_column("reason", overflow="fold")  # wraps inside its cell on a terminal, never cut
    for ev in board.evaluations:
        style = {"pass": "green", "fail": "red", "error": "yellow"}.get(ev.verdict or "", "dim")
        items = f"{ev.items_passed}/{ev.items_passed + ev.items_failed}"
        if ev.items_skipped:
            items += f" ({ev.items_skipped} skipped)"
        evals.add_row(
            escape(ev.task_id), escape(Path(ev.submission).name),
            f"[{style}]{ev.verdict or ev.status}[/]", ev.phase or "", items, escape(ev.reason),
        )
    console.print(evals)
    scores = Table("task", "solved", "success", "item pass rate", "errors",
                   "failed by phase", "failed items by category")
    for t in [*board.tasks, board.total] if len(board.tasks) > 1 else board.tasks:
        scores.add_row(
            escape(t.task), f"{t.passed}/{t.passed + t.failed}", _pct(t.success_rate),
            _pct(t.item_pass_rate), str(t.errors),
            ", ".join(f"{k} {v}" for k, v in sorted(t.by_phase.items())) or "-",
            escape(", ".join(f"{k} {v}" for k, v in t.by_category.most_common())) or "-",
        )
    console.print(scores)
    _print_metrics(board.metrics, console)


def _rate(rate: Rate | None) -> str:
    if rate is None or rate.value is None:
        return "-"
    return f"{_pct(rate.value)} ({rate.passed}/{rate.total})"


def _print_metrics(m: Metrics, console: Console) -> None:
    """The metrics sections; one whose markers no item carries is one dim line."""
    excluded = f"{m.errors} error(s) excluded" if m.errors else "no errors"
    if m.pending:
        excluded += f", {m.pending} unfinished"
    summary = Table("metric", "value", title="metrics")
    summary.add_row("all-pass success (pass@1)", f"{_rate(m.success)}; {excluded}")
    summary.add_row("item pass rate", _rate(m.items))
    if m.requirements is not None:
        summary.add_row("requirement accuracy", _rate(m.requirements))
        summary.add_row("balanced score (harmonic mean)",
                        "-" if m.balanced is None else _pct(m.balanced))
    if m.integration_gap is not None:
        summary.add_row("integration gap", _rate(m.integration_gap))
    console.print(summary)
    if len(m.tiers) > 1:
        tiers = Table("tier", "items of", "success", title="success by cumulative tier")
        for t in m.tiers:
            tiers.add_row(escape(t.label), escape(" + ".join(t.tiers)), _rate(t.success))
        console.print(tiers)
        if m.tier_change is not None:
            console.print(f"relative change base -> final: {100 * m.tier_change:+.1f}%")
    else:
        console.print("[dim]tiers: every item is base (no tier markers)[/]")
    if m.requirements is None:
        console.print("[dim]requirements: no item has a requirement marker[/]")
    if m.levels:
        levels = Table("level", "item pass rate", title="layered scores")
        for level, rate in m.levels.items():
            levels.add_row(escape(level), _rate(rate))
        console.print(levels)
    else:
        console.print("[dim]levels: no item has a level marker[/]")
    if m.category_failures:
        names = sorted({c for counts in m.category_failures.values() for c in counts})
        cats = Table("task", "submission", *map(escape, names), "total",
                     title="failed items by category")
        for (task, sub), counts in m.category_failures.items():
            cats.add_row(escape(task), escape(sub), *(str(counts[c]) for c in names),
                         str(sum(counts.values())))
        console.print(cats)
    if m.phase_failures:
        seen = {p for counts in m.phase_failures.values() for p in counts}
        columns = [*PHASES, *sorted(seen - {*PHASES, "error"}), "error"]
        phases = Table("task", *columns, title="failed evaluations by phase")
        for task, counts in m.phase_failures.items():
            phases.add_row(escape(task), *(str(counts[p]) for p in columns))
        console.print(phases)
    _print_repeats(m, console)


def _print_repeats(m: Metrics, console: Console) -> None:
    """pass@k and flips of a repeated run; the quarantine candidates and the scores
    without them."""
    if m.repeats is not None:
        r = m.repeats
        repeats = Table("metric", "value", title=f"repeated runs ({r.repeats} repeats)")
        for p in r.pass_at_k:
            value = "-" if p.value is None else _pct(p.value)
            repeats.add_row(f"pass@{p.k}", f"{value} (over {p.groups} task x submission)")
        repeats.add_row("item flip rate", _rate(r.flips))
        console.print(repeats)
        if r.flaky:
            flaky = Table("task", "submission", "item", "passed", title="flipping items")
            for f in r.flaky:
                flaky.add_row(escape(f.task), escape(f.submission), escape(f.nodeid),
                              f"{f.passed}/{f.total}")
            console.print(flaky)
    else:
        console.print("[dim]repeats: each task x submission was evaluated once "
                      "(anvil run --repeat K)[/]")
    q = m.quarantine
    if q is None:
        console.print("[dim]quarantine: no item fails for the reference or flips[/]")
        return
    candidates = Table("task", "item", "why", title="quarantine candidates")
    for c in q.items:
        candidates.add_row(escape(c.task), escape(c.nodeid), ", ".join(c.reasons))
    console.print(candidates)
    scores = Table("metric", "with them", "without them",
                   title="scores with and without the quarantine candidates")
    scores.add_row("all-pass success (pass@1)", _rate(m.success), _rate(q.success))
    scores.add_row("item pass rate", _rate(m.items), _rate(q.item_rate))
    console.print(scores)


def _score_json(t: TaskScore) -> dict[str, Any]:
    return {
        "task": t.task, "evaluations": t.evaluations, "passed": t.passed, "failed": t.failed,
        "errors": t.errors, "success_rate": round(t.success_rate, 4),
        "items_passed": t.items_passed, "items_total": t.items_total,
        "items_skipped": t.items_skipped, "item_pass_rate": round(t.item_pass_rate, 4),
        "failed_by_phase": dict(t.by_phase), "failed_items_by_category": dict(t.by_category),
    }


def _as_json(board: Scoreboard) -> dict[str, Any]:
    run = board.run
    return {
        "run": {"id": run.id, "status": run.status, "runtime": run.runtime,
                "created_at": run.created_at.isoformat(),
                "finished_at": run.finished_at.isoformat() if run.finished_at else None},
        "summary": _score_json(board.total),
        "tasks": [_score_json(t) for t in board.tasks],
        "metrics": board.metrics.to_json(),
        "evaluations": [
            {"evaluation_id": ev.id, "task": ev.task_id, "submission": ev.submission,
             "verdict": ev.verdict, "phase": ev.phase, "reason": ev.reason,
             "items_passed": ev.items_passed, "items_failed": ev.items_failed,
             "items_skipped": ev.items_skipped, "duration_s": ev.duration_s,
             "failed_items": [
                 {"nodeid": i.nodeid, "category": i.category, "markers": i.markers_dict(),
                  "message": i.message}
                 for i in board.items.get(ev.id, []) if i.outcome not in ("passed", "skipped")
             ]}
            for ev in board.evaluations
        ],
    }


def render_comparison(
    store: Store, run: RunRecord, baseline: RunRecord, fmt: str, console: Console | None = None
) -> str | None:
    """What changed verdict from ``baseline`` to ``run`` (regressions first), as ``table``
    or ``json``; a ``table`` given a ``console`` is printed there instead."""
    now, before = scoreboard(store, run), scoreboard(store, baseline)
    changes = compare(now.evaluations, now.items, before.evaluations, before.items)
    if fmt == "json":
        counts = Counter(c.kind for c in changes)
        return json.dumps({
            "run": run.id, "against": baseline.id,
            "regressions": counts["regression"], "fixes": counts["fix"],
            "other": counts["other"], "changes": [c.to_json() for c in changes],
        }, indent=2) + "\n"
    if fmt != "table":
        raise ValueError(fmt)
    if console is not None:
        _print_changes(run, baseline, changes, console)
        return None
    buffer = io.StringIO()
    _print_changes(run, baseline, changes, Console(file=buffer, width=WIDE, color_system=None,
                                                   force_terminal=False, highlight=False))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def _print_changes(run: RunRecord, baseline: RunRecord, changes: list[Change],
                   console: Console) -> None:
    counts = Counter(c.kind for c in changes)
    console.print(f"run [bold]{escape(run.id)}[/] against [bold]{escape(baseline.id)}[/]: "
                  f"{counts['regression']} regression(s), {counts['fix']} fix(es), "
                  f"{counts['other']} other change(s)")
    if not changes:
        return
    table = Table("change", "task", "submission", "item", "before", "after")
    for c in changes:
        style = {"regression": "red", "fix": "green"}.get(c.kind, "yellow")
        table.add_row(f"[{style}]{c.kind}[/]", escape(c.task), escape(c.submission),
                      escape(c.nodeid) if c.nodeid else "(verdict)", c.before, c.after)
    console.print(table)


_CTRF_STATUS = {"passed": "passed", "failed": "failed", "error": "failed", "skipped": "skipped"}


def _cases(board: Scoreboard, ev: EvaluationRecord) -> list[dict[str, Any]]:
    """Test cases of one evaluation: its items, or one case for the phase that failed."""
    suite = f"{ev.task_id}/{Path(ev.submission).name}"
    cases = [
        {"name": i.nodeid, "suite": suite, "status": _CTRF_STATUS.get(i.outcome, "other"),
         "duration": i.duration_s, "message": i.message, "trace": i.traceback,
         "category": i.category or "uncategorized", "error": i.outcome == "error"}
        for i in board.items.get(ev.id, [])
    ]
    if ev.verdict in ("fail", "error") and ev.phase != "oracle":
        cases.append({
            "name": f"{ev.phase or 'evaluation'} phase", "suite": suite,
            "status": "failed", "duration": ev.duration_s or 0.0, "message": ev.reason,
            "trace": "", "category": f"phase:{ev.phase}", "error": ev.verdict == "error",
        })
    elif ev.verdict is None:
        cases.append({"name": "evaluation", "suite": suite, "status": "pending", "duration": 0.0,
                      "message": "not finished", "trace": "", "category": "", "error": False})
    return cases


def _ms(ts: Any) -> int:
    return int(ts.timestamp() * 1000) if ts else 0


def _as_ctrf(board: Scoreboard) -> dict[str, Any]:
    tests = []
    for ev in board.evaluations:
        for case in _cases(board, ev):
            test: dict[str, Any] = {
                "name": case["name"], "status": case["status"],
                "duration": int(case["duration"] * 1000), "suite": case["suite"].split("/", 1),
                "tags": [case["category"]] if case["category"] else [],
            }
            if case["message"]:
                test["message"] = case["message"]
            if case["trace"]:
                test["trace"] = case["trace"]
            tests.append(test)
    counts = Counter(t["status"] for t in tests)
    run = board.run
    return {
        "reportFormat": "CTRF",
        "specVersion": "0.0.0",
        "results": {
            "tool": {"name": "anvil"},
            "summary": {
                "tests": len(tests), "passed": counts["passed"], "failed": counts["failed"],
                "pending": counts["pending"], "skipped": counts["skipped"],
                "other": counts["other"], "start": _ms(run.created_at),
                "stop": _ms(run.finished_at or run.created_at),
            },
            "tests": tests,
            "extra": {"run_id": run.id, "runtime": run.runtime},
        },
    }


def _as_junit(board: Scoreboard) -> str:
    root = ET.Element("testsuites", name=f"anvil run {board.run.id}")
    host = socket.gethostname()
    for n, ev in enumerate(board.evaluations):
        cases = _cases(board, ev)
        failures = sum(1 for c in cases if c["status"] == "failed" and not c["error"])
        errors = sum(1 for c in cases if c["status"] == "failed" and c["error"])
        skipped = sum(1 for c in cases if c["status"] in ("skipped", "pending"))
        started = ev.started_at or board.run.created_at
        suite = ET.SubElement(
            root, "testsuite", name=cases[0]["suite"] if cases else ev.task_id,
            tests=str(len(cases)), failures=str(failures), errors=str(errors),
            skipped=str(skipped), time=f"{ev.duration_s or 0.0:.3f}",
            timestamp=started.strftime("%Y-%m-%dT%H:%M:%S"), hostname=host, id=str(n),
            package=ev.task_id,
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (("verdict", ev.verdict or "pending"), ("phase", ev.phase or ""),
                           ("submission", ev.submission), ("evaluation_id", ev.id)):
            ET.SubElement(props, "property", name=key, value=value)
        for case in cases:
            tc = ET.SubElement(suite, "testcase", name=case["name"], classname=case["suite"],
                               time=f"{case['duration']:.3f}")
            if case["status"] == "failed":
                tag = "error" if case["error"] else "failure"
                el = ET.SubElement(tc, tag, message=case["message"][:500], type=case["category"])
                el.text = case["trace"] or case["message"]
            elif case["status"] in ("skipped", "pending"):
                ET.SubElement(tc, "skipped", message=case["message"][:500])
        ET.SubElement(suite, "system-out").text = ""
        ET.SubElement(suite, "system-err").text = ""
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# -- leaderboard -----------------------------------------------------------------------------

LeaderboardFormat = Literal["md", "csv", "json"]
LEADERBOARD_FORMATS: tuple[str, ...] = get_args(LeaderboardFormat)

Cell = int | float | Rate | None


@dataclass(frozen=True)
class Column:
    """One metric column of the leaderboard."""

    key: str  # the CSV header and JSON key
    header: str  # the Markdown header
    kind: Literal["count", "rate", "score", "change"]
    cell: Callable[[Metrics], Cell]


@dataclass(frozen=True)
class Standing:
    """A candidate set's row: the run that evaluated it, the name it goes by, its metrics."""

    name: str
    run: str
    metrics: Metrics


def candidate_set_name(run: RunRecord, evaluations: Sequence[EvaluationRecord]) -> str:
    """The name of the candidate set ``run`` evaluated.

    The name of its submissions folder, which ``anvil run --submissions DIR`` records in the
    run's options. A run that did not record it (started through the engine's API) is named
    after the common parent folder of its evaluations' submissions (the links ``--repeat``
    makes under the run's folder left out), one folder up when that folder is named as the
    run's only task (``DIR/<task id>/<submission>``); a run without evaluations by its id.
    """
    recorded = run.options_dict().get("submissions")
    if recorded:
        return Path(recorded).name
    repeats = os.path.join(os.sep, "runs", run.id, "repeat-")
    parents = sorted({str(Path(e.submission).parent) for e in evaluations
                      if repeats not in e.submission})
    if not parents:
        return run.id
    common = Path(os.path.commonpath(parents))
    if {e.task_id for e in evaluations} == {common.name}:
        common = common.parent
    return common.name or run.id


def _up_to(tier: str, m: Metrics) -> Rate:
    """Success with the items of the tiers up to ``tier``: a run without items of ``tier``
    has the rate of its last tier before it (the same items)."""
    return [t for t in m.tiers if tier_order(t.tiers[-1]) <= tier_order(tier)][-1].success


def _pass_at(k: int, m: Metrics) -> float | None:
    found = [p for p in m.repeats.pass_at_k if p.k == k] if m.repeats else []
    return found[0].value if found else None


def _failed_at(phase: str, m: Metrics) -> int:
    return sum(counts[phase] for counts in m.phase_failures.values())


def leaderboard_columns(metrics: Sequence[Metrics]) -> list[Column]:
    """The columns for these candidate sets: the report's metrics, each kind of them shown
    when at least one set has data for it (the others show ``-``)."""
    columns = [
        Column("evaluations", "evaluations", "count", lambda m: m.evaluations),
        Column("judged", "judged", "count", lambda m: m.judged),
        Column("errors", "errors", "count", lambda m: m.errors),
        Column("task_pass_rate", "task pass rate (pass@1)", "rate", lambda m: m.success),
        Column("item_pass_rate", "item pass rate", "rate", lambda m: m.items),
    ]
    if any(m.requirements is not None for m in metrics):
        columns += [
            Column("requirement_accuracy", "requirement accuracy", "rate",
                   lambda m: m.requirements),
            Column("balanced_score", "balanced score", "score", lambda m: m.balanced),
        ]
    levels = sorted({level for m in metrics for level in m.levels}, key=level_order)
    columns += [Column(f"level_{level}", f"{level} items", "rate",
                       partial(lambda level, m: m.levels.get(level), level))
                for level in levels]
    if any(m.integration_gap is not None for m in metrics):
        columns.append(Column("integration_gap", "integration gap", "rate",
                              lambda m: m.integration_gap))
    tiers = sorted({t.tiers[-1] for m in metrics if len(m.tiers) > 1 for t in m.tiers},
                   key=tier_order)
    if tiers:
        columns += [Column(f"success_up_to_{tier}", f"success up to {tier}", "rate",
                           partial(_up_to, tier)) for tier in tiers]
        columns.append(Column("tier_relative_change", "change base to final", "change",
                              lambda m: m.tier_change))
    most = max((m.repeats.repeats for m in metrics if m.repeats is not None), default=0)
    if most:
        columns += [Column(f"pass_at_{k}", f"pass@{k}", "score", partial(_pass_at, k))
                    for k in range(1, most + 1)]
        columns.append(Column("item_flip_rate", "item flip rate", "rate",
                              lambda m: m.repeats.flips if m.repeats else None))
    seen = {p for m in metrics for counts in m.phase_failures.values() for p in counts}
    phases = [*PHASES, *sorted(seen - {*PHASES, "error"})]  # "error" is the errors column
    columns += [Column(f"failed_{phase}", f"failed at {phase}", "count",
                       partial(_failed_at, phase)) for phase in phases]
    return columns


def rank(standings: Sequence[Standing]) -> list[Standing]:
    """Best first: by task pass rate, then item pass rate (a set without one last), then
    name."""
    def key(s: Standing) -> tuple[float, float, str]:
        success, items = s.metrics.success.value, s.metrics.items.value
        return (-success if success is not None else 1.0,
                -items if items is not None else 1.0, s.name)

    return sorted(standings, key=key)


def standings(store: Store, runs: Sequence[RunRecord],
              names: Mapping[str, str] | None = None) -> list[Standing]:
    """A row per run, ranked; ``names`` (run id -> name) overrides
    :func:`candidate_set_name`. Two rows that would share a name get their run id after it."""
    rows = []
    for run in runs:
        board = scoreboard(store, run)
        name = (names or {}).get(run.id) or candidate_set_name(run, board.evaluations)
        rows.append(Standing(name, run.id, board.metrics))
    taken = Counter(s.name for s in rows)
    rows = [Standing(f"{s.name} ({s.run})", s.run, s.metrics) if taken[s.name] > 1 else s
            for s in rows]
    return rank(rows)


def render_leaderboard(store: Store, runs: Sequence[RunRecord], fmt: str,
                       names: Mapping[str, str] | None = None) -> str:
    """The leaderboard of ``runs`` (a row per run: its candidate set) as ``md``, ``csv`` or
    ``json``."""
    ranked = standings(store, runs, names)
    columns = leaderboard_columns([s.metrics for s in ranked])
    if fmt == "md":
        return _leaderboard_md(ranked, columns)
    if fmt == "csv":
        buffer = io.StringIO()
        out = csv.writer(buffer, lineterminator="\n")
        out.writerow(["rank", "name", "run", *(c.key for c in columns)])
        for n, s in enumerate(ranked, 1):
            out.writerow([n, s.name, s.run, *(_csv_cell(c.cell(s.metrics)) for c in columns)])
        return buffer.getvalue()
    if fmt == "json":
        return json.dumps({
            "columns": [{"key": c.key, "header": c.header} for c in columns],
            "rows": [{"rank": n, "name": s.name, "run": s.run,
                      **{c.key: _json_cell(c.cell(s.metrics)) for c in columns}}
                     for n, s in enumerate(ranked, 1)],
        }, indent=2) + "\n"
    raise ValueError(fmt)


def _csv_cell(cell: Cell) -> str | int:
    if isinstance(cell, Rate):
        cell = cell.value
    if cell is None:
        return ""
    return cell if isinstance(cell, int) else f"{round(cell, 4)}"


def _json_cell(cell: Cell) -> Any:
    if isinstance(cell, Rate):
        return cell.to_json()
    return round(cell, 4) if isinstance(cell, float) else cell


def _md_cell(cell: Cell, kind: str) -> str:
    value = cell.value if isinstance(cell, Rate) else cell
    if value is None:
        return "-"
    if kind == "count":
        return str(value)
    if kind == "change":
        return f"{100 * value:+.1f}%"
    shown = f"{100 * value:.1f}%"
    return f"{shown} ({cell.passed}/{cell.total})" if isinstance(cell, Rate) else shown


def _md_text(text: str) -> str:
    """A table cell's text: a ``|`` would end the cell, a newline the row."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _leaderboard_md(ranked: Sequence[Standing], columns: Sequence[Column]) -> str:
    headers = ["rank", "candidate set", "run", *(c.header for c in columns)]
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join(["---:", "---", "---", *("---:" for _ in columns)]) + " |"]
    for n, s in enumerate(ranked, 1):
        cells = [str(n), _md_text(s.name), _md_text(s.run),
                 *(_md_cell(c.cell(s.metrics), c.kind) for c in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
