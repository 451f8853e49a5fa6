"""An evaluation's trace, read back from the store: a tree of spans, shown as a terminal
waterfall (``anvil traces``) or as JSON.

The tree is evaluation → phases → oracle items → HTTP calls (see
:mod:`engine._tracing`). Each line has the span's timing, a bar placing it within
the evaluation, the status code of a call, the contract violations of a call, and
under a failed item what its trace shows (see :mod:`engine._explain`) and the
assertion that failed it. Calls the service made to a mock show as
``payment ← POST /v1/charges``; repeated identical calls of anvil's own (health
probes) are one line, ``×N``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from telemetry import VIOLATION_EVENT, VIOLATION_KIND, VIOLATION_MESSAGE, SpanData, otlp_json

from ._explain import Explanation, explain_trace
from ._store import EvaluationRecord, SpanRecord, Store

BAR_WIDTH = 32
BODY_PREVIEW = 160


@dataclass
class Node:
    """A span and the spans under it, earliest first."""

    span: SpanRecord
    children: list[Node] = field(default_factory=list)

    @property
    def attributes(self) -> dict[str, Any]:
        return self.span.attributes_dict()

    @property
    def is_item(self) -> bool:
        return "anvil.item.nodeid" in self.attributes

    @property
    def is_phase(self) -> bool:
        return "anvil.phase" in self.attributes

    @property
    def is_mock_call(self) -> bool:
        return "anvil.mock.instance" in self.attributes

    @property
    def failed(self) -> bool:
        return self.span.status == "error"

    def walk(self) -> Iterator[Node]:
        """This node and every node under it, depth first, earliest first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def to_json(self) -> dict[str, Any]:
        s = self.span
        return {
            "span_id": s.span_id, "parent_id": s.parent_id, "name": s.name, "kind": s.kind,
            "start_ns": s.start_ns, "end_ns": s.end_ns,
            "duration_ms": round((s.end_ns - s.start_ns) / 1e6, 3), "status": s.status,
            "status_message": s.status_message, "attributes": self.attributes,
            "events": s.events_list(), "children": [c.to_json() for c in self.children],
        }


@dataclass
class Trace:
    """The latest attempt's trace of one evaluation (``root`` is None when none was kept)."""

    evaluation: EvaluationRecord
    root: Node | None
    attempts: int  # traces stored for the evaluation: one per attempt that started
    #: What each failed item's trace shows, by node id (see :mod:`engine._explain`).
    explanations: dict[str, Explanation] = field(default_factory=dict)
    filtered: bool = False  # :func:`select` kept only some items

    def to_json(self) -> dict[str, Any]:
        ev = self.evaluation
        return {
            "evaluation_id": ev.id, "task": ev.task_id, "submission": ev.submission,
            "verdict": ev.verdict, "phase": ev.phase, "reason": ev.reason,
            "trace_id": self.root.span.trace_id if self.root else None,
            "attempts": self.attempts,
            "explanations": [{"nodeid": e.nodeid, "kind": e.kind, "line": e.line}
                             for e in self.explanations.values()],
            "root": self.root.to_json() if self.root else None,
        }


def load_trace(store: Store, evaluation: EvaluationRecord) -> Trace:
    """The evaluation's latest trace as a tree (spans whose parent is missing hang under
    the root, so none is lost from view)."""
    spans = store.spans(evaluation.id)
    roots = [s for s in spans if s.parent_id is None]
    if not roots:
        return Trace(evaluation, None, 0)
    latest = max(roots, key=lambda s: s.start_ns)
    mine = [s for s in spans if s.trace_id == latest.trace_id]
    nodes = {s.span_id: Node(s) for s in mine}
    root = nodes[latest.span_id]
    for span in sorted(mine, key=lambda s: s.start_ns):
        if span is latest:
            continue
        parent = nodes.get(span.parent_id or "", root)
        parent.children.append(nodes[span.span_id])
    explanations = {e.nodeid: e for e in explain_trace(spans)}
    return Trace(evaluation, root, len({s.trace_id for s in roots}), explanations)


def select(trace: Trace, failed: bool = False, item: str | None = None) -> Trace:
    """Keep only the failed items and/or the items whose node id is or contains ``item``,
    and the spans on the way to them (the root, the oracle phase); the rest goes."""
    if trace.root is None or not (failed or item):
        return trace

    def keep(node: Node) -> bool:
        nodeid = str(node.attributes.get("anvil.item.nodeid", node.span.name))
        if failed and not node.failed:
            return False
        return item is None or item == nodeid or item in nodeid

    def prune(node: Node) -> Node | None:
        if node.is_item:
            return node if keep(node) else None
        kept = [p for p in (prune(c) for c in node.children) if p is not None]
        return Node(node.span, kept) if kept else None

    root = prune(trace.root) or Node(trace.root.span, [])
    return Trace(trace.evaluation, root, trace.attempts, trace.explanations, filtered=True)


def items(trace: Trace) -> list[Node]:
    """The oracle items' spans, earliest first, wherever they hang."""
    if trace.root is None:
        return []
    return [n for n in trace.root.walk() if n.is_item]


def item_ids(trace: Trace) -> list[str]:
    return [str(n.attributes["anvil.item.nodeid"]) for n in items(trace)]


def find_item(trace: Trace, nodeid: str) -> Node | None:
    return next((n for n in items(trace) if n.attributes.get("anvil.item.nodeid") == nodeid),
                None)


# -- the terminal waterfall ----------------------------------------------------------------

_VERDICT_STYLE = {"pass": "green", "fail": "red", "error": "magenta"}


def unaccounted_ns(trace: Trace) -> int:
    """Nanoseconds of the evaluation (its root span) that no phase span covers: time the
    timeline cannot explain (0 without a trace)."""
    if trace.root is None:
        return 0
    root = trace.root.span
    covered, reached = 0, root.start_ns
    for phase in sorted((n.span for n in trace.root.children if n.is_phase),
                        key=lambda s: s.start_ns):
        start, end = max(phase.start_ns, reached), min(phase.end_ns, root.end_ns)
        if end > start:
            covered += end - start
            reached = end
    return max(root.end_ns - root.start_ns - covered, 0)


def waterfall(trace: Trace, details: bool = False) -> Table:
    """The trace as a table: tree, duration, where in the evaluation, what happened.

    With ``details``, each call shows the start of its request and response bodies.
    """
    ev = trace.evaluation
    table = Table(box=None, show_header=True, pad_edge=False, expand=False,
                  title_justify="left", header_style="bold")
    verdict = ev.verdict or ev.status
    style = _VERDICT_STYLE.get(verdict, "yellow")
    where = f" at {ev.phase}" if ev.phase else ""
    table.title = (f"{escape(ev.id)}  {escape(ev.task_id)}  {escape(_short(ev.submission))}  "
                   f"[{style}]{verdict.upper()}[/]{escape(where)}")
    table.add_column("span", no_wrap=True, overflow="ellipsis", max_width=80)
    table.add_column("status", justify="right", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("when", no_wrap=True, width=BAR_WIDTH)
    if trace.root is None:
        table.add_row(Text("no trace recorded for this evaluation (it never reached the "
                           "oracle, or ran before traces were kept)", style="dim"), "", "", "")
        return table
    # The bars span what is shown: the whole evaluation, or the items a filter kept.
    shown = items(trace) if trace.filtered else trace.root.children
    under = [n.span for n in shown] or [trace.root.span]
    t0 = min(s.start_ns for s in under)
    t1 = max(max(s.end_ns for s in under), t0 + 1)
    why = {nodeid: e.line for nodeid, e in trace.explanations.items()}
    _rows(table, trace.root, "", "", (t0, t1), details, why)
    notes = [f"latest of {trace.attempts} attempts"] if trace.attempts > 1 else []
    gap = unaccounted_ns(trace)
    if gap >= 1_000_000:  # under a millisecond is the clock's and the event loop's
        notes.append(f"{gap / 1e6:.0f} ms of the evaluation is in no phase")
    if notes:
        table.caption = "; ".join(notes)
    return table


def _rows(table: Table, node: Node, lead: str, child_lead: str, window: tuple[int, int],
          details: bool, why: dict[str, str]) -> None:
    label, status, style = _describe(node)
    text = Text(lead, style="dim")
    text.append(label, style=style)
    table.add_row(text, status, _duration(node.span), _bar(node.span, window, style))
    notes: list[Text] = []
    explained = why.get(str(node.attributes.get("anvil.item.nodeid"))) if node.is_item else None
    if explained:
        notes.append(Text(f"→ {explained}", style="bold red"))
    if node.is_item and node.failed and node.span.status_message:
        for line in _assertion(node.span.status_message):
            notes.append(Text(line, style="red"))
    if node.span.kind == "client":
        notes += [Text(f"✗ contract: {_one_line(_local(v))}", style="yellow")
                  for v in violations(node.span)]
    if details and (node.span.kind == "client" or node.is_mock_call):
        for event in node.span.events_list():
            body = str(event["attributes"].get("anvil.body", ""))
            if body:
                arrow = "→" if event["name"] == "http.request" else "←"
                notes.append(Text(f"{arrow} {_one_line(body)}", style="dim"))
    if node.span.kind == "client" and node.span.status == "error" and not node.attributes.get(
            "http.response.status_code"):
        notes.append(Text(_one_line(node.span.status_message), style="red"))
    for note in notes:
        gutter = child_lead + ("│  " if node.children else "   ")
        table.add_row(Text(gutter, style="dim") + note, "", "", "")
    runs = _repeats(node.children)
    for i, (child, times) in enumerate(runs):
        last = i == len(runs) - 1
        lead_here = child_lead + ("└─ " if last else "├─ ")
        below = child_lead + ("   " if last else "│  ")
        if times > 1:
            label, status, style = _describe(child)
            text = Text(lead_here, style="dim")
            text.append(f"{label} ×{times}", style=style)
            table.add_row(text, status, "", _bar(child.span, window, style))
            continue
        _rows(table, child, lead_here, below, window, details, why)


def _repeats(children: list[Node]) -> list[tuple[Node, int]]:
    """Children with runs of identical calls of anvil's own (health probes: same label,
    same outcome, nothing under them) folded into their first, with a count."""
    runs: list[tuple[Node, int]] = []
    for child in children:
        if runs and _same_probe(runs[-1][0], child):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((child, 1))
    return runs


def _same_probe(a: Node, b: Node) -> bool:
    if a.children or b.children or "anvil.probe" not in a.attributes:
        return False
    return _describe(a)[:2] == _describe(b)[:2] and a.attributes.get(
        "anvil.probe") == b.attributes.get("anvil.probe")


def _describe(node: Node) -> tuple[str, str, str]:
    """The label, the status column and the style of a span's line."""
    span, attributes = node.span, node.attributes
    if span.parent_id is None:
        return f"{span.name} {attributes.get('anvil.evaluation.id', '')}".strip(), "", "bold"
    if node.is_item:
        outcome = str(attributes.get("anvil.item.outcome", ""))
        category = attributes.get("anvil.item.category")
        label = str(attributes.get("anvil.item.nodeid", span.name))
        label += f" [{category}]" if category else ""
        style = {"passed": "green", "failed": "red", "error": "red"}.get(outcome, "yellow")
        return label, outcome, style
    if node.is_phase:
        return span.name, "failed" if node.failed else "", "bold red" if node.failed else "bold"
    if span.kind == "client" or node.is_mock_call:
        label, status = call_label(node)
        code = attributes.get("http.response.status_code")
        style = ("red" if code is None or code >= 500 else "green" if code < 400
                 else "yellow")
        return label, status, style
    return span.name, span.status if span.status != "unset" else "", ""


def call_label(node: Node) -> tuple[str, str]:
    """``("PUT /items/a?x=1", "200")`` for an HTTP call's span; the status column is the
    error type when no answer came (``ClientConnectionError``). A call the service made
    to a mock reads ``payment ← POST /v1/charges``; a Docker API call, ``docker GET ...``."""
    attributes = node.attributes
    method = attributes.get("http.request.method_original") or attributes.get(
        "http.request.method", node.span.name)
    target = str(attributes.get("url.path", ""))
    if attributes.get("url.query"):
        target += f"?{attributes['url.query']}"
    label = f"{method} {target}"
    if node.is_mock_call:
        label = f"{attributes['anvil.mock.instance']} ← {label}"
    elif attributes.get("anvil.peer") == "docker":
        label = f"docker {label}"
    code = attributes.get("http.response.status_code")
    if code is None:
        return label, str(attributes.get("error.type", "error")).rsplit(".", 1)[-1]
    return label, str(code)


def violations(span: SpanRecord, kinds: frozenset[str] | None = None) -> list[str]:
    """The contract violations the proxy recorded on a call (of ``kinds`` only, if given)."""
    return [str(e["attributes"].get(VIOLATION_MESSAGE, "")) for e in span.events_list()
            if e["name"] == VIOLATION_EVENT
            and (kinds is None or e["attributes"].get(VIOLATION_KIND) in kinds)]


def _local(violation: str) -> str:
    """A violation shown under its call: ``response: 'date' missing from item 0`` (the
    call's method and path are on the line above)."""
    head, sep, rest = violation.partition(": ")
    side = head.split(" ", 1)[0]
    return f"{side}: {rest}" if sep and side in ("request", "response") else violation


def _bar(span: SpanRecord, window: tuple[int, int], style: str) -> Text:
    t0, t1 = window
    scale = BAR_WIDTH / (t1 - t0)
    start = min(BAR_WIDTH - 1, max(0, int((span.start_ns - t0) * scale)))
    end = min(BAR_WIDTH, max(start + 1, round((span.end_ns - t0) * scale)))
    length = end - start
    return Text(" " * start + "━" * length, style=style or "white")


def _duration(span: SpanRecord) -> str:
    ns = max(0, span.end_ns - span.start_ns)
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f}s"
    return f"{ns / 1e6:.1f}ms"


def _assertion(message: str, lines: int = 4) -> list[str]:
    kept = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    return kept[:lines] + (["…"] if len(kept) > lines else [])


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= BODY_PREVIEW else flat[: BODY_PREVIEW - 1] + "…"


def _short(submission: str) -> str:
    return submission.rstrip("/").rsplit("/", 1)[-1]


def span_data(record: SpanRecord) -> SpanData:
    """A stored span as a :class:`~telemetry.SpanData` (to export it again)."""
    return SpanData.from_dict({
        "trace_id": record.trace_id, "span_id": record.span_id, "parent_id": record.parent_id,
        "name": record.name, "kind": record.kind, "start_ns": record.start_ns,
        "end_ns": record.end_ns, "status": record.status,
        "status_message": record.status_message, "attributes": record.attributes_dict(),
        "events": record.events_list(),
    })


def export_otlp_json(store: Store, evaluations: Sequence[EvaluationRecord]) -> dict[str, Any]:
    """Every stored span of ``evaluations`` (all their attempts: one trace each) as one
    OTLP/JSON bundle."""
    return otlp_json(span_data(s) for e in evaluations for s in store.spans(e.id))


def resolve(store: Store, ref: str) -> Sequence[EvaluationRecord]:
    """The evaluations ``ref`` names: one evaluation id, or every evaluation of a run id
    (``latest``: the newest run). Empty when it names nothing."""
    found = store.evaluation(ref)
    if found is not None:
        return [found]
    run = store.run(ref)
    return store.evaluations(run.id) if run is not None else []
