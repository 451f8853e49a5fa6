"""Scoring metrics of a run, computed from its stored evaluations and item results.

Pure functions: no store, no I/O. Every function takes the run's evaluations and their
items (``evaluation id -> items``), as :func:`engine._report.scoreboard` loads them.

Which evaluations count:

* An evaluation is *judged* when its verdict is ``pass`` or ``fail``. An ``error`` is
  anvil's fault, not the candidate's: it is left out of every rate and counted in
  ``errors`` (as the scoreboard does); an unfinished one is counted in ``pending``.
* Rates over items (item pass rate, requirement accuracy, balanced score, levels, the
  integration gap) use the judged evaluations whose oracle ran (that have stored items):
  a service that never reached the oracle has no item results, and its failure is counted
  by the all-pass success rates and the phase table instead. The item pass rate is thus
  the scoreboard's, item for item.
* A skipped item is neither passed nor failed: it is left out of item-level rates.

Markers (see :mod:`engine._oracle_plugin`): ``tier`` (default ``base``), ``visibility``
(default ``public``), ``requirement`` and ``level`` (none by default).

Repeated runs (``anvil run --repeat K``): a run holds each task × submission K times,
matched here by (task id, submission folder name); in position order, the i-th of them is
repeat i. pass@k, the flip rate and the quarantine candidates come from those groups.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._store import EvaluationRecord, ItemRecord

PHASES = ("build", "startup", "health", "wiring", "oracle")
LEVELS = ("leaf", "mid", "root")
ItemsByEvaluation = Mapping[str, Sequence[ItemRecord]]


@dataclass(frozen=True)
class Rate:
    """``passed`` out of ``total``; ``value`` is None when there is nothing to rate."""

    passed: int
    total: int

    @property
    def value(self) -> float | None:
        return self.passed / self.total if self.total else None

    def to_json(self) -> dict[str, Any]:
        value = self.value
        return {"passed": self.passed, "total": self.total,
                "rate": None if value is None else round(value, 4)}


@dataclass(frozen=True)
class TierRate:
    """All-pass success over the items of ``tiers`` (a cumulative set: base, +R1, ...)."""

    label: str  # "base", "+evolved-r1", ..., "final"
    tiers: tuple[str, ...]
    success: Rate


@dataclass
class Metrics:
    evaluations: int
    judged: int
    errors: int
    pending: int
    success: Rate  # task-level all-pass success (pass@1) over judged evaluations
    items: Rate  # item pass rate
    tiers: list[TierRate]
    tier_change: float | None  # relative change of the success rate from base to final
    requirements: Rate | None  # None: no item carries a requirement marker
    balanced: float | None
    levels: dict[str, Rate]
    integration_gap: Rate | None  # None: no evaluation has both leaf and mid/root items
    category_failures: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    phase_failures: dict[str, Counter[str]] = field(default_factory=dict)
    # Every candidate (task id, submission folder name), failures or not: the charts' bars.
    submission_phase_failures: dict[tuple[str, str], Counter[str]] = field(
        default_factory=dict)
    repeats: Repeats | None = None  # None: each task × submission was evaluated once
    quarantine: Quarantine | None = None  # None: no item the reference fails or that flips

    def to_json(self) -> dict[str, Any]:
        def opt(rate: Rate | None) -> dict[str, Any] | None:
            return None if rate is None else rate.to_json()

        return {
            "evaluations": self.evaluations, "judged": self.judged, "errors": self.errors,
            "pending": self.pending,
            "success": self.success.to_json(),
            "item_pass_rate": self.items.to_json(),
            "tiers": [{"label": t.label, "tiers": list(t.tiers), **t.success.to_json()}
                      for t in self.tiers],
            "tier_relative_change": _round(self.tier_change),
            "requirement_accuracy": opt(self.requirements),
            "balanced_score": _round(self.balanced),
            "levels": {level: rate.to_json() for level, rate in self.levels.items()},
            "integration_gap": opt(self.integration_gap),
            "failed_items_by_category": [
                {"task": task, "submission": sub, "categories": dict(counts)}
                for (task, sub), counts in self.category_failures.items()],
            "failed_evaluations_by_phase": {task: dict(counts)
                                            for task, counts in self.phase_failures.items()},
            "failed_evaluations_by_phase_per_submission": [
                {"task": task, "submission": sub, "phases": dict(counts)}
                for (task, sub), counts in self.submission_phase_failures.items()],
            "repeats": None if self.repeats is None else self.repeats.to_json(),
            "quarantine": (None if self.quarantine is None
                           else self.quarantine.to_json(self.success, self.items)),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def compute(evaluations: Sequence[EvaluationRecord], items: ItemsByEvaluation) -> Metrics:
    """Every metric of one run (see each function for its exact definition)."""
    judged = judged_evaluations(evaluations)
    tiers = tier_success(judged, items)
    repeats = repeated_runs(evaluations, items)
    candidates = quarantine_candidates(judged, items, repeats.flaky if repeats else ())
    return Metrics(
        evaluations=len(evaluations),
        judged=len(judged),
        errors=sum(1 for e in evaluations if e.verdict == "error"),
        pending=sum(1 for e in evaluations if e.verdict is None),
        success=success_rate(judged),
        items=item_pass_rate(judged, items),
        tiers=tiers,
        tier_change=relative_change(tiers),
        requirements=requirement_accuracy(judged, items),
        balanced=balanced_score(judged, items),
        levels=level_rates(judged, items),
        integration_gap=integration_gap(judged, items),
        category_failures=category_failures(judged, items),
        phase_failures=phase_failures(evaluations),
        submission_phase_failures=submission_phase_failures(evaluations),
        repeats=repeats,
        quarantine=quarantine(judged, items, candidates) if candidates else None,
    )


def judged_evaluations(evaluations: Iterable[EvaluationRecord]) -> list[EvaluationRecord]:
    """The evaluations with a candidate verdict (``pass`` or ``fail``)."""
    return [e for e in evaluations if e.verdict in ("pass", "fail")]


def _is_failed(item: ItemRecord) -> bool:
    return item.outcome in ("failed", "error")


def _rated(evaluation: EvaluationRecord, items: ItemsByEvaluation) -> list[ItemRecord]:
    """The evaluation's passed or failed items (skips left out)."""
    return [i for i in items.get(evaluation.id, ()) if i.outcome != "skipped"]


def success_rate(judged: Sequence[EvaluationRecord]) -> Rate:
    """Task-level all-pass success, pass@1: the share of judged evaluations whose verdict is
    ``pass`` (every phase succeeded and no oracle item failed)."""
    return Rate(sum(1 for e in judged if e.verdict == "pass"), len(judged))


def item_pass_rate(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation) -> Rate:
    """Passed items over passed + failed + errored items, pooled over the judged
    evaluations whose oracle ran."""
    rated = [i for e in judged for i in _rated(e, items)]
    return Rate(sum(1 for i in rated if not _is_failed(i)), len(rated))


_ROUND = re.compile(r"(?:^|[-_])r(\d+)$")


def tier_order(tier: str) -> tuple[int, int, str]:
    """``base`` first, then ``...-rN`` tiers by N, then any other tier by name."""
    if tier == "base":
        return (0, 0, tier)
    found = _ROUND.search(tier)
    return (1, int(found.group(1)), tier) if found else (2, 0, tier)


def _passes_without(evaluation: EvaluationRecord, rated: Sequence[ItemRecord],
                    dropped: Callable[[ItemRecord], bool]) -> bool:
    """Would ``evaluation`` pass if the oracle had no ``dropped`` items?

    A pass passes whatever is dropped. A fail passes only when it failed in the oracle
    phase, some item failed, and every failed item is dropped; a fail in an earlier
    phase, or in the oracle without a failed item to blame (its deadline), still fails.
    """
    if evaluation.verdict == "pass":
        return True
    failed = [i for i in rated if _is_failed(i)]
    if evaluation.phase != "oracle" or not failed:
        return False
    return all(dropped(i) for i in failed)


def _passes_under(evaluation: EvaluationRecord, rated: Sequence[ItemRecord],
                  tiers: frozenset[str]) -> bool:
    """Would ``evaluation`` pass if the oracle had only the items of ``tiers``?"""
    return _passes_without(evaluation, rated, lambda i: i.markers_dict()["tier"] not in tiers)


def tier_success(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation) -> list[TierRate]:
    """All-pass success under each cumulative tier, BackendForge-style.

    The tiers found on the run's items are ordered by :func:`tier_order` (``base``,
    ``evolved-r1``, ``evolved-r2``, ...); the k-th rate counts an evaluation as a success
    when it passes with only the items of the first k tiers (see :func:`_passes_under`).
    The last, labelled ``final``, is every tier: the ordinary success rate. ``base`` is
    always present (items without a tier marker are ``base``).
    """
    found = {i.markers_dict()["tier"] for e in judged for i in _rated(e, items)}
    ordered = sorted(found | {"base"}, key=tier_order)
    rates = []
    for k in range(1, len(ordered) + 1):
        chosen = frozenset(ordered[:k])
        passed = sum(1 for e in judged if _passes_under(e, _rated(e, items), chosen))
        label = "base" if k == 1 else "final" if k == len(ordered) else f"+{ordered[k - 1]}"
        rates.append(TierRate(label, tuple(ordered[:k]), Rate(passed, len(judged))))
    return rates


def relative_change(tiers: Sequence[TierRate]) -> float | None:
    """(final − base) / base of the success rate: -0.25 means a quarter of the base
    successes are lost to the evolved tiers. None without a base success or a later tier."""
    if len(tiers) < 2:
        return None
    base, final = tiers[0].success.value, tiers[-1].success.value
    if not base or final is None:
        return None
    return (final - base) / base


def requirement_accuracy(judged: Sequence[EvaluationRecord],
                         items: ItemsByEvaluation) -> Rate | None:
    """Requirement-level accuracy, E2EDev-style: per evaluation whose oracle ran, each
    requirement id found on its (non-skipped) items counts as met only if all its items
    passed; the rate pools met requirements over all (evaluation, requirement) pairs.
    Items without a requirement marker do not take part. None when no item has one.
    """
    met = total = 0
    for e in judged:
        by_requirement: dict[str, bool] = {}
        for i in _rated(e, items):
            requirement = i.markers_dict().get("requirement")
            if requirement is not None:
                by_requirement[requirement] = (by_requirement.get(requirement, True)
                                               and not _is_failed(i))
        total += len(by_requirement)
        met += sum(by_requirement.values())
    return Rate(met, total) if total else None


def balanced_score(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation) -> float | None:
    """The harmonic mean of the item pass rate and the requirement accuracy.

    Harmonic rather than arithmetic, as an F1 score is: it stays near the lower of the
    two, so a candidate cannot score well by passing many easy items while missing whole
    requirements (or the reverse). 0 when either is 0; None when either is undefined.
    """
    item_rate = item_pass_rate(judged, items).value
    requirements = requirement_accuracy(judged, items)
    req_rate = requirements.value if requirements is not None else None
    if item_rate is None or req_rate is None:
        return None
    if item_rate + req_rate == 0:
        return 0.0
    return 2 * item_rate * req_rate / (item_rate + req_rate)


def level_rates(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation) -> dict[str, Rate]:
    """Item pass rate per ``level`` marker (leaf, mid, root, then any other level by name),
    ForgingGround-style; items without a level are not counted. Empty when none has one."""
    counts: dict[str, list[int]] = {}
    for e in judged:
        for i in _rated(e, items):
            level = i.markers_dict().get("level")
            if level is not None:
                passed_total = counts.setdefault(level, [0, 0])
                passed_total[0] += not _is_failed(i)
                passed_total[1] += 1
    return {level: Rate(*counts[level]) for level in sorted(counts, key=level_order)}


def level_order(level: str) -> tuple[int, str]:
    """leaf, mid, root first, then any other level by name."""
    return (LEVELS.index(level) if level in LEVELS else len(LEVELS), level)


def integration_gap(judged: Sequence[EvaluationRecord],
                    items: ItemsByEvaluation) -> Rate | None:
    """The integration gap: parts work, their composition does not.

    Over the judged evaluations whose oracle ran with at least one ``leaf`` item and at
    least one ``mid`` or ``root`` item (skips left out), the share where every leaf item
    passed and at least one mid or root item failed. ``passed`` counts those gap
    evaluations (the "hits"), ``total`` the evaluations considered. None when no
    evaluation has both kinds of items.
    """
    gaps = total = 0
    for e in judged:
        rated = _rated(e, items)
        leaves = [i for i in rated if i.markers_dict().get("level") == "leaf"]
        chains = [i for i in rated if i.markers_dict().get("level") in ("mid", "root")]
        if not leaves or not chains:
            continue
        total += 1
        gaps += not any(_is_failed(i) for i in leaves) and any(_is_failed(i) for i in chains)
    return Rate(gaps, total) if total else None


def category_failures(judged: Sequence[EvaluationRecord],
                      items: ItemsByEvaluation) -> dict[tuple[str, str], Counter[str]]:
    """Failed items per category, per (task id, submission folder name), in run order;
    submissions without a failed item are left out. Uncategorized items count as
    ``uncategorized``."""
    table: dict[tuple[str, str], Counter[str]] = {}
    for e in judged:
        failed = Counter(i.category or "uncategorized"
                         for i in items.get(e.id, ()) if _is_failed(i))
        if failed:
            table.setdefault((e.task_id, Path(e.submission).name), Counter()).update(failed)
    return table


def phase_failures(evaluations: Sequence[EvaluationRecord]) -> dict[str, Counter[str]]:
    """Per task id, failed evaluations per phase (every one of build, startup, health,
    wiring, oracle, zeros included; any other phase a fail names, if ever) and ``error``
    for anvil's errors, whatever their phase. Tasks with neither are left out."""
    table: dict[str, Counter[str]] = {}
    for e in evaluations:
        if e.verdict not in ("fail", "error"):
            continue
        counts = table.setdefault(e.task_id, Counter({p: 0 for p in (*PHASES, "error")}))
        counts["error" if e.verdict == "error" else e.phase or "?"] += 1
    return table


def _candidate(e: EvaluationRecord) -> tuple[str, str]:
    return (e.task_id, Path(e.submission).name)


def submission_phase_failures(
        evaluations: Sequence[EvaluationRecord]) -> dict[tuple[str, str], Counter[str]]:
    """As :func:`phase_failures`, per (task id, submission folder name) in run order, every
    candidate included (all zeros when it never failed); repeats add up."""
    table: dict[tuple[str, str], Counter[str]] = {}
    for e in evaluations:
        counts = table.setdefault(_candidate(e), Counter({p: 0 for p in (*PHASES, "error")}))
        if e.verdict in ("fail", "error"):
            counts["error" if e.verdict == "error" else e.phase or "?"] += 1
    return table


# -- repeated runs -----------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al., 2021, "Evaluating Large Language Models
    Trained on Code"): given ``n`` repeats of which ``c`` passed, the probability that at
    least one of ``k`` repeats drawn without replacement passes, 1 − C(n−c, k) / C(n, k).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every draw of k holds a pass (C(n-c, k) is 0)
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def repeat_groups(evaluations: Sequence[EvaluationRecord]
                  ) -> dict[tuple[str, str], list[EvaluationRecord]]:
    """Evaluations per (task id, submission folder name), each group in position order:
    its i-th evaluation is repeat i (``anvil run --repeat`` plans repeat after repeat)."""
    groups: dict[tuple[str, str], list[EvaluationRecord]] = {}
    for e in sorted(evaluations, key=lambda e: e.position):
        groups.setdefault(_candidate(e), []).append(e)
    return groups


@dataclass(frozen=True)
class PassAtK:
    k: int
    value: float | None  # None: no task × submission has k judged repeats
    groups: int  # the task × submission pairs averaged: those with at least k judged repeats

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "value": _round(self.value), "groups": self.groups}


@dataclass(frozen=True)
class FlakyItem:
    """An item whose outcome differed between repeats of one task × submission."""

    task: str
    submission: str  # folder name
    nodeid: str
    passed: int  # repeats it passed in
    total: int  # repeats it was judged in (passed, failed or errored)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "submission": self.submission, "item": self.nodeid,
                "passed": self.passed, "total": self.total}


@dataclass
class Repeats:
    repeats: int  # K: the most evaluations any task × submission has in the run
    pass_at_k: list[PassAtK]  # k = 1..K
    flips: Rate  # ``passed`` counts the flipping items, ``total`` the items considered
    flaky: list[FlakyItem]

    def to_json(self) -> dict[str, Any]:
        return {"repeats": self.repeats, "pass_at_k": [p.to_json() for p in self.pass_at_k],
                "flip_rate": self.flips.to_json(),
                "flipping_items": [f.to_json() for f in self.flaky]}


def repeated_runs(evaluations: Sequence[EvaluationRecord],
                  items: ItemsByEvaluation) -> Repeats | None:
    """pass@k and the flip rate of a run whose task × submission pairs were repeated.

    * pass@k, for k = 1..K: :func:`pass_at_k` of each task × submission with n its judged
      repeats (errors left out) and c those that passed, averaged over the pairs with
      n >= k.
    * flip rate: among the items (task, submission, node id) judged in at least two
      repeats (skips and repeats whose oracle did not run left out), the share whose
      outcome differs between repeats (passed in one, failed or errored in another).

    None when every task × submission was evaluated once.
    """
    groups = repeat_groups(evaluations)
    most = max((len(g) for g in groups.values()), default=0)
    if most < 2:
        return None
    counts = [(len(judged), sum(1 for e in judged if e.verdict == "pass"))
              for judged in map(judged_evaluations, groups.values())]
    estimates = []
    for k in range(1, most + 1):
        values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
        estimates.append(PassAtK(k, sum(values) / len(values) if values else None, len(values)))
    flaky: list[FlakyItem] = []
    considered = 0
    for (task, sub), group in groups.items():
        outcomes: dict[str, list[bool]] = {}
        for e in judged_evaluations(group):
            for i in _rated(e, items):
                outcomes.setdefault(i.nodeid, []).append(not _is_failed(i))
        for nodeid, passes in outcomes.items():
            if len(passes) < 2:
                continue
            considered += 1
            if len(set(passes)) > 1:
                flaky.append(FlakyItem(task, sub, nodeid, sum(passes), len(passes)))
    return Repeats(most, estimates, Rate(len(flaky), considered), flaky)


# -- quarantine --------------------------------------------------------------------------


REFERENCE = "reference"  # the task's reference solution's folder name (Task.reference)


@dataclass(frozen=True)
class Quarantined:
    """An item not to be trusted: the task's reference fails it, or it flips."""

    task: str
    nodeid: str
    reasons: tuple[str, ...]  # "reference fails", "flips"

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "item": self.nodeid, "reasons": list(self.reasons)}


@dataclass
class Quarantine:
    items: list[Quarantined]
    success: Rate  # all-pass success with the quarantined items left out
    item_rate: Rate  # item pass rate with the quarantined items left out

    def to_json(self, success: Rate, item_rate: Rate) -> dict[str, Any]:
        return {"items": [q.to_json() for q in self.items],
                "success": {"with": success.to_json(), "without": self.success.to_json()},
                "item_pass_rate": {"with": item_rate.to_json(),
                                   "without": self.item_rate.to_json()}}


def quarantine_candidates(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation,
                          flaky: Sequence[FlakyItem]) -> list[Quarantined]:
    """Items (task id, node id) that the task's reference failed or errored in any judged
    evaluation, or that flipped for any submission (``flaky``, see :func:`repeated_runs`),
    in that order. The reference is the submission folder named ``reference``: the task's own
    ``reference/`` or one among the submissions."""
    reasons: dict[tuple[str, str], list[str]] = {}
    for e in judged:
        if Path(e.submission).name == REFERENCE:
            for i in _rated(e, items):
                if _is_failed(i):
                    found = reasons.setdefault((e.task_id, i.nodeid), [])
                    if "reference fails" not in found:
                        found.append("reference fails")
    for f in flaky:
        found = reasons.setdefault((f.task, f.nodeid), [])
        if "flips" not in found:
            found.append("flips")
    return [Quarantined(task, nodeid, tuple(why)) for (task, nodeid), why in reasons.items()]


def quarantine(judged: Sequence[EvaluationRecord], items: ItemsByEvaluation,
               candidates: Sequence[Quarantined]) -> Quarantine:
    """The headline scores with the ``candidates`` left out of every evaluation of their
    task: an item pass rate over the other items, and all-pass success where a fail whose
    failed items are all quarantined counts as a pass (see :func:`_passes_without`)."""
    dropped = {(q.task, q.nodeid) for q in candidates}

    def is_dropped(task: str) -> Callable[[ItemRecord], bool]:
        return lambda i: (task, i.nodeid) in dropped

    passed = rated_count = successes = 0
    for e in judged:
        rated = _rated(e, items)
        kept = [i for i in rated if (e.task_id, i.nodeid) not in dropped]
        rated_count += len(kept)
        passed += sum(1 for i in kept if not _is_failed(i))
        successes += _passes_without(e, rated, is_dropped(e.task_id))
    return Quarantine(list(candidates), Rate(successes, len(judged)), Rate(passed, rated_count))


# -- comparing two runs ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A verdict that differs between a baseline run and this one."""

    kind: str  # regression | fix | other
    task: str
    submission: str  # folder name
    nodeid: str | None  # None: the evaluation's verdict; else one item's outcome
    before: str
    after: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "task": self.task, "submission": self.submission,
                "item": self.nodeid, "before": self.before, "after": self.after}


_KIND_ORDER = {"regression": 0, "fix": 1, "other": 2}


def _kind(before: str, after: str, good: tuple[str, ...], bad: tuple[str, ...]) -> str:
    if before in good and after in bad:
        return "regression"
    if before in bad and after in good:
        return "fix"
    return "other"


# An evaluation's ``error`` is anvil's (neither good nor bad); an item's is the candidate's.
_VERDICTS = (("pass",), ("fail",))
_OUTCOMES = (("passed",), ("failed", "error"))


def compare(
    evaluations: Sequence[EvaluationRecord], items: ItemsByEvaluation,
    baseline: Sequence[EvaluationRecord], baseline_items: ItemsByEvaluation,
) -> list[Change]:
    """What changed verdict from ``baseline`` to this run: regressions first, then fixes,
    then other changes (to or from ``error``, unfinished, or present in one run only).

    Evaluations are matched by (task id, submission folder name). For a matched pair,
    each item present in both runs whose outcome went between passed and failed/errored
    is listed too (an item whose oracle did not run in one of the runs is not).
    """
    def key(e: EvaluationRecord) -> tuple[str, str]:
        return (e.task_id, Path(e.submission).name)

    before = {key(e): e for e in baseline}
    after = {key(e): e for e in evaluations}
    changes: list[Change] = []
    for k in [*after, *(k for k in before if k not in after)]:
        old, new = before.get(k), after.get(k)
        old_verdict = (old.verdict or "pending") if old else "absent"
        new_verdict = (new.verdict or "pending") if new else "absent"
        if old_verdict != new_verdict:
            changes.append(Change(_kind(old_verdict, new_verdict, *_VERDICTS), *k, None,
                                  old_verdict, new_verdict))
        if old is None or new is None:
            continue
        old_items = {i.nodeid: i.outcome for i in baseline_items.get(old.id, ())}
        for i in items.get(new.id, ()):
            was = old_items.get(i.nodeid)
            if was is not None and was != i.outcome:
                changes.append(Change(_kind(was, i.outcome, *_OUTCOMES), *k, i.nodeid, was,
                                      i.outcome))
    # Stable: within a kind, run order (evaluations, then their items) is kept.
    return sorted(changes, key=lambda c: _KIND_ORDER[c.kind])
