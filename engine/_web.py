"""``anvil serve``: a small web UI over the store, to open a failure and read it.

Runs → a run's evaluations → an evaluation's items, failed first → one item's trace as
a waterfall; a click on a span shows its attributes, the request and response (headers
and bodies, from the span's events) and any contract violations, with the service's
log beside it. Plain server-rendered pages (Jinja2, autoescaped) with inline CSS and a
few lines of JavaScript: nothing is fetched from the network. Each page has a JSON twin
under ``/api`` that carries the same data; while a run is still running, its pages (and
the runs page) poll their twin every two seconds and reload when it changed.

The run page shows the charts of ``anvil report --plot`` that the run has data for, as
SVG images (``/runs/<id>/charts/<name>.svg``) drawn by :mod:`engine._plots`; each run's
are drawn once and kept while its evaluations stay as they were.

The item page shows the service log's lines of the item's time window: the runtimes
write the log with a times sidecar (``service.log.times``, see :mod:`engine._logs`)
that says when each chunk of it arrived. A log without one (written by an older anvil)
shows its last lines instead.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import DictLoader, Environment
from sqlalchemy import func
from sqlmodel import Session, col, select
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ._logs import lines_between
from ._metrics import compute
from ._plots import charts_with_data, svg_charts
from ._store import EvaluationRecord, ItemRecord, RunRecord, Store
from ._traces import Node, Trace, call_label, find_item, load_trace

LOG_NAMES = ("service.log", "oracle.log", "build.log")
LOG_TAIL_LINES = 200
LOG_WINDOW_LINES = 500
# Lines that arrive just before an item starts or just after it ends are often its own
# (a request logged once answered, a slow pipe); never reaching into a neighbour item.
LOG_MARGIN_NS = 200_000_000
POLL_MS = 2000
LOG_READ_MAX = 4 * 1024 * 1024  # a whole log page never reads more than this
RUNS_SHOWN = 200
REQUEST_EVENT, RESPONSE_EVENT = "http.request", "http.response"
VIOLATION_EVENT = "contract.violation"
_FAILED = ("failed", "error")
CHART_RUNS_KEPT = 16  # runs whose drawn charts stay in memory (an SVG is tens of kB)
CHART_TITLES = {"phases": "failed evaluations by phase",
                "categories": "failed items by category",
                "tiers": "all-pass success by cumulative tier", "pass_at_k": "pass@k"}


# -- what each page shows, as plain data (the JSON endpoints return it as it is) ------------


def runs_data(store: Store) -> list[dict[str, Any]]:
    """The newest runs, each with how many of its evaluations ended in each verdict."""
    with Session(store.engine) as session:
        runs = session.exec(select(RunRecord).order_by(col(RunRecord.created_at).desc())
                            .limit(RUNS_SHOWN)).all()
        ids = [r.id for r in runs]
        counted = session.exec(
            select(EvaluationRecord.run_id, EvaluationRecord.verdict, EvaluationRecord.status,
                   func.count())
            .where(col(EvaluationRecord.run_id).in_(ids))
            .group_by(col(EvaluationRecord.run_id), col(EvaluationRecord.verdict),
                      col(EvaluationRecord.status))).all()
    counts: dict[str, dict[str, int]] = {r: {} for r in ids}
    for run_id, verdict, status, n in counted:
        key = verdict if status == "done" and verdict else status
        counts[run_id][key] = counts[run_id].get(key, 0) + n
    return [{
        "id": r.id, "created": _when(r.created_at), "finished": _when(r.finished_at),
        "wall_s": _seconds(r.created_at, r.finished_at), "status": r.status,
        "runtime": r.runtime, "evaluations": sum(counts[r.id].values()), "counts": counts[r.id],
    } for r in runs]


def is_live(status: str | None) -> bool:
    """True for a run still running: its pages poll for changes."""
    return status == "running"


def run_data(store: Store, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id!r}")
    return {
        "id": run.id, "created": _when(run.created_at), "finished": _when(run.finished_at),
        "wall_s": _seconds(run.created_at, run.finished_at), "status": run.status,
        "runtime": run.runtime,
        "evaluations": [_evaluation_summary(e) for e in store.evaluations(run.id)],
    }


class Charts:
    """The SVG charts of runs (:func:`engine._plots.charts_with_data`), drawn once per run.

    A run's charts are drawn again only when one of its evaluations changed (a running or
    resumed run); the last :data:`CHART_RUNS_KEPT` runs' are kept. One lock around the
    drawing: matplotlib's settings are global, and the page and its images ask at once.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._drawn: OrderedDict[str, tuple[str, dict[str, bytes]]] = OrderedDict()

    def of(self, run_id: str) -> dict[str, bytes]:
        """Chart name -> SVG document, for each chart run ``run_id`` has data for."""
        run = self._store.run(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id!r}")
        evaluations = self._store.evaluations(run.id)
        stamp = hashlib.sha256(json.dumps(
            [run.status, [[e.id, e.status, e.verdict, e.phase, e.attempt, e.items_passed,
                           e.items_failed, e.items_skipped] for e in evaluations]]
        ).encode()).hexdigest()
        with self._lock:
            cached = self._drawn.get(run.id)
            if cached is not None and cached[0] == stamp:
                self._drawn.move_to_end(run.id)
                return cached[1]
            items: dict[str, list[ItemRecord]] = {}
            for item in self._store.items([e.id for e in evaluations]):
                items.setdefault(item.evaluation_id, []).append(item)
            metrics = compute(evaluations, items)
            drawn = svg_charts(metrics, charts_with_data(metrics))
            self._drawn[run.id] = (stamp, drawn)
            self._drawn.move_to_end(run.id)
            while len(self._drawn) > CHART_RUNS_KEPT:
                self._drawn.popitem(last=False)
            return drawn


def evaluation_data(store: Store, home: Path, evaluation_id: str) -> dict[str, Any]:
    """An evaluation and its items, failed (and errored) items first, each in stored order."""
    ev = _evaluation(store, evaluation_id)
    ordered = sorted(store.items([ev.id]), key=lambda i: i.outcome not in _FAILED)
    folder = log_folder(home, ev)
    run = store.run(ev.run_id)
    return {
        **_evaluation_summary(ev),
        "run_status": run.status if run else None,
        "items": [_item_summary(i) for i in ordered],
        "logs": [name for name in LOG_NAMES if folder and (folder / name).is_file()],
    }


def item_data(store: Store, home: Path, evaluation_id: str, nodeid: str) -> dict[str, Any]:
    """One item: its result, its trace flattened into waterfall rows, its service log lines.

    Each row's ``offset_pct`` and ``width_pct`` place its bar within the item's span
    (or within all its spans, when a call outlasts the item). ``service_log`` holds the
    lines that arrived while the item ran (``timestamped``, each with ``at_ms`` since
    the item started), or the log's last lines when the log has no times sidecar.
    """
    ev = _evaluation(store, evaluation_id)
    record = next((i for i in store.items([ev.id]) if i.nodeid == nodeid), None)
    trace = load_trace(store, ev)
    node = find_item(trace, nodeid)
    if record is None and node is None:
        raise HTTPException(404, f"no item {nodeid!r} in {evaluation_id}")
    spans: list[dict[str, Any]] = []
    if node is not None:
        flat = list(_walk(node, 0))
        t0 = min(n.span.start_ns for n, _ in flat)
        t1 = max(max(n.span.end_ns for n, _ in flat), t0 + 1)
        spans = [_span_row(n, depth, t0, t1) for n, depth in flat]
    folder = log_folder(home, ev)
    service_log = folder / "service.log" if folder else None
    return {
        "evaluation": _evaluation_summary(ev),
        "item": _item_summary(record) if record else {
            "nodeid": nodeid, "outcome": node.attributes.get("anvil.item.outcome", "")
            if node else "", "category": None, "duration_s": None, "message": "",
            "traceback": ""},
        "spans": spans,
        "window": [_clock(node.span.start_ns), _clock(node.span.end_ns)] if node else None,
        "service_log": _service_log(service_log, node, trace),
    }


def _service_log(path: Path | None, node: Node | None, trace: Trace) -> dict[str, Any]:
    """The lines of ``path`` that arrived while ``node`` ran; its tail without times."""
    if path is not None and node is not None:
        nodes = trace.root.walk() if trace.root else iter(())
        start, end = _log_window(node, [n for n in nodes if n.is_item or n.is_phase])
        found = lines_between(path, start, end, limit=LOG_WINDOW_LINES)
        if found is not None:
            t0 = node.span.start_ns
            return {"path": str(path), "timestamped": True,
                    "lines": [line for _, line in found],
                    "at_ms": [round((at - t0) / 1e6, 1) for at, _ in found],
                    "margin_ms": [round((t0 - start) / 1e6, 1), round((end - node.span.end_ns)
                                                                     / 1e6, 1)]}
    return {"path": str(path) if path else None, "timestamped": False,
            "lines": _tail(path, LOG_TAIL_LINES) if path else [], "at_ms": None,
            "margin_ms": None}


def _log_window(node: Node, others: list[Node]) -> tuple[int, int]:
    """The item's span widened by the margin, but not into the item before or after it,
    nor out of the phase it ran in (the harness's health probes are no item's)."""
    span = node.span
    start, end = span.start_ns - LOG_MARGIN_NS, span.end_ns + LOG_MARGIN_NS
    for other in others:
        if other is node:
            continue
        if other.is_phase and other.span.start_ns <= span.start_ns <= other.span.end_ns:
            start, end = max(start, other.span.start_ns), min(end, other.span.end_ns)
        elif other.span.end_ns <= span.start_ns:
            start = max(start, other.span.end_ns)
        elif other.span.start_ns >= span.end_ns:
            end = min(end, other.span.start_ns)
    return start, end


def log_folder(home: Path, ev: EvaluationRecord) -> Path | None:
    """``HOME/runs/<run>/<position>-<task>-<submission>/``, as the runner names it."""
    runs = home / "runs" / ev.run_id
    name = "".join(c if c.isalnum() or c in "-_." else "_"
                   for c in ev.submission.rstrip("/").rsplit("/", 1)[-1])
    exact = runs / f"{ev.position:03d}-{ev.task_id}-{name}"
    if exact.is_dir():
        return exact
    # Named by an older anvil: the position prefix is unique within a run.
    found = sorted(runs.glob(f"{ev.position:03d}-*")) if runs.is_dir() else []
    return found[0] if found else None


def _evaluation(store: Store, evaluation_id: str) -> EvaluationRecord:
    ev = store.evaluation(evaluation_id)
    if ev is None:
        raise HTTPException(404, f"no evaluation {evaluation_id!r}")
    return ev


def _evaluation_summary(ev: EvaluationRecord) -> dict[str, Any]:
    return {
        "id": ev.id, "run_id": ev.run_id, "task": ev.task_id, "submission": ev.submission,
        "name": ev.submission.rstrip("/").rsplit("/", 1)[-1], "status": ev.status,
        "verdict": ev.verdict, "phase": ev.phase, "reason": ev.reason,
        "duration_s": ev.duration_s, "attempt": ev.attempt, "items_passed": ev.items_passed,
        "items_failed": ev.items_failed, "items_skipped": ev.items_skipped,
    }


def _item_summary(item: ItemRecord) -> dict[str, Any]:
    return {"nodeid": item.nodeid, "outcome": item.outcome, "category": item.category,
            "duration_s": item.duration_s, "message": item.message,
            "traceback": item.traceback}


def _walk(node: Node, depth: int) -> Iterator[tuple[Node, int]]:
    yield node, depth
    for child in node.children:
        yield from _walk(child, depth + 1)


def _span_row(node: Node, depth: int, t0: int, t1: int) -> dict[str, Any]:
    span, attributes = node.span, node.attributes
    window = t1 - t0
    offset = (span.start_ns - t0) / window * 100
    width = max(0.4, (span.end_ns - span.start_ns) / window * 100)
    request = response = None
    violations: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    for event in span.events_list():
        name, attrs = event.get("name", ""), dict(event.get("attributes") or {})
        if name == REQUEST_EVENT:
            request = _message(attrs, "http.request.header.")
        elif name == RESPONSE_EVENT:
            response = _message(attrs, "http.response.header.")
        elif name == VIOLATION_EVENT:
            violations.append(attrs)
        else:
            other.append({"name": name, "attributes": attrs})
    label, status = _label(node)
    return {
        "span_id": span.span_id, "parent_id": span.parent_id, "name": span.name,
        "kind": span.kind, "depth": depth, "label": label, "status": status,
        "state": span.status, "status_message": span.status_message,
        "start_ns": span.start_ns, "end_ns": span.end_ns,
        "duration_ms": round((span.end_ns - span.start_ns) / 1e6, 3),
        "offset_pct": round(min(offset, 99.6), 3), "width_pct": round(min(width, 100), 3),
        "attributes": attributes, "request": request, "response": response,
        "violations": violations, "events": other,
    }


def _message(attrs: dict[str, Any], header_prefix: str) -> dict[str, Any]:
    """A request or response event as headers and a body (JSON bodies pretty-printed)."""
    headers = {k.removeprefix(header_prefix): v for k, v in attrs.items()
               if k.startswith(header_prefix)}
    body = str(attrs.get("anvil.body", ""))
    truncated = bool(attrs.get("anvil.body.truncated"))
    if body and not truncated and attrs.get("anvil.body.encoding", "utf-8") == "utf-8":
        try:
            body = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return {"headers": headers, "body": body, "size": attrs.get("anvil.body.size"),
            "truncated": truncated, "encoding": attrs.get("anvil.body.encoding", "utf-8")}


def _label(node: Node) -> tuple[str, str]:
    span, attributes = node.span, node.attributes
    if node.is_item:
        return (str(attributes.get("anvil.item.nodeid", span.name)).rsplit("::", 1)[-1],
                str(attributes.get("anvil.item.outcome", "")))
    if span.kind == "client":
        return call_label(node)
    return span.name, span.status if span.status != "unset" else ""


def _tail(path: Path, lines: int) -> list[str]:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read()
    except OSError:
        return []
    kept = data.decode("utf-8", "replace").splitlines()
    if size > 256 * 1024:
        kept = kept[1:]  # the first line read may be cut
    return kept[-lines:]


def _clock(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def _when(at: datetime | None) -> str | None:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end.replace(tzinfo=None) - start.replace(tzinfo=None)).total_seconds(), 1)


# -- pages -----------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em}header a{color:#fff}
main{padding:1em 1.2em}a{color:#1f5fbf;text-decoration:none}a:hover{text-decoration:underline}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{background:#eef0f4;font-weight:600}
pre{background:#fff;border:1px solid #e3e6eb;padding:.5em;overflow:auto;max-height:28em;
margin:.3em 0;white-space:pre-wrap;word-break:break-all}
.pass,.passed{color:#1a7f37}.fail,.failed,.error{color:#c0262d}.skipped{color:#8a6d00}
.badge{font-weight:600;text-transform:uppercase}
.cols{display:flex;gap:1em;align-items:flex-start}.cols>section{flex:1;min-width:0}
.wf td{padding:.15em .4em;cursor:pointer}.wf td+td{white-space:nowrap}
pre.log{max-height:48em}.wf tr.sel{background:#dde8fb}
.track{position:relative;height:12px;min-width:240px;background:#f0f2f5}
.bar{position:absolute;top:1px;height:10px;background:#5b8def;border-radius:2px}
.bar.err{background:#d9534f}.bar.item{background:#9aa5b8}
.detail h3{margin:.8em 0 .2em}.muted{color:#6b7385}.violation{color:#c0262d}
.at{color:#6b7385}
.charts{display:flex;flex-wrap:wrap;gap:1em;margin:.5em 0 1em}
.charts figure{margin:0;background:#fff;border:1px solid #e3e6eb;padding:.4em}
.charts img{display:block;max-width:100%;height:auto}
"""

_JS = """
function pick(id){
  document.querySelectorAll('.detail').forEach(d=>{d.hidden=d.dataset.span!==id});
  document.querySelectorAll('.wf tr[data-span]').forEach(r=>{
    r.classList.toggle('sel',r.dataset.span===id)});
}
document.querySelectorAll('pre.log').forEach(p=>{p.scrollTop=p.scrollHeight});
document.querySelectorAll('.wf tr[data-span]').forEach(r=>{
  r.addEventListener('click',()=>pick(r.dataset.span));
  r.addEventListener('keydown',e=>{if(e.key==='Enter')pick(r.dataset.span)});
});
"""

# While a run runs: poll the page's JSON twin, reload when it differs from what the page
# was rendered from (embedded beside the script). The reloaded page of a finished run
# carries no script, so polling stops by itself.
_POLL_JS = """
(function(){
  const state=document.getElementById('poll-state');
  const shown=JSON.stringify(JSON.parse(state.textContent));
  async function poll(){
    try{
      const r=await fetch(state.dataset.url,{cache:'no-store'});
      if(r.ok&&JSON.stringify(await r.json())!==shown){location.reload();return}
    }catch(e){}
    setTimeout(poll,POLL_MS);
  }
  setTimeout(poll,POLL_MS);
})();
""".replace("POLL_MS", str(POLL_MS))

_TEMPLATES = {
    "base.html": """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{% block title %}anvil{% endblock %}</title><style>{{ css }}</style></head><body>
<header><a href="/">anvil</a>{% block crumbs %}{% endblock %}</header>
<main>{% block main %}{% endblock %}</main>
{% if poll %}<script type="application/json" id="poll-state" data-url="{{ poll.url }}">
{{- poll.state | safe }}</script><script class="live">{{ poll_js | safe }}</script>
{% endif %}</body></html>""",
    "runs.html": """{% extends "base.html" %}{% block title %}anvil · runs{% endblock %}
{% block main %}<h2>Runs</h2>
{% if not runs %}<p class="muted">No run in this store yet.</p>{% else %}
<table><tr><th>run</th><th>created</th><th>runtime</th><th>wall</th><th>status</th>
<th>evaluations</th><th>pass</th><th>fail</th><th>error</th><th>other</th></tr>
{% for r in runs %}<tr><td><a href="/runs/{{ r.id | urlencode }}">{{ r.id }}</a></td>
<td>{{ r.created }}</td><td>{{ r.runtime }}</td>
<td>{{ r.wall_s ~ ' s' if r.wall_s is not none else '' }}</td><td>{{ r.status }}</td>
<td>{{ r.evaluations }}</td><td class="pass">{{ r.counts.get('pass', 0) }}</td>
<td class="fail">{{ r.counts.get('fail', 0) }}</td>
<td class="error">{{ r.counts.get('error', 0) }}</td>
<td>{{ r.evaluations - r.counts.get('pass', 0) - r.counts.get('fail', 0)
       - r.counts.get('error', 0) }}</td></tr>{% endfor %}</table>{% endif %}
{% endblock %}""",
    "run.html": """{% extends "base.html" %}{% block title %}anvil · {{ run.id }}{% endblock %}
{% block crumbs %} / run {{ run.id }}{% endblock %}
{% block main %}<h2>Run {{ run.id }}</h2>
<p class="muted">created {{ run.created }} · {{ run.runtime }} · {{ run.status }}
{% if run.wall_s is not none %} · {{ run.wall_s }} s{% endif %}</p>
{% if charts %}<div class="charts">{% for name in charts %}<figure><img class="chart"
 src="/runs/{{ run.id | urlencode }}/charts/{{ name }}.svg" alt="{{ titles[name] }}">
</figure>{% endfor %}</div>{% endif %}
<table><tr><th>evaluation</th><th>task</th><th>submission</th><th>verdict</th><th>phase</th>
<th>duration</th><th>items (pass/fail/skip)</th><th>reason</th></tr>
{% for e in run.evaluations %}<tr>
<td><a href="/evaluations/{{ e.id | urlencode }}">{{ e.id }}</a></td><td>{{ e.task }}</td>
<td title="{{ e.submission }}">{{ e.name }}</td>
<td class="badge {{ e.verdict or e.status }}">{{ e.verdict or e.status }}</td>
<td>{{ e.phase or '' }}</td>
<td>{{ '%.2f s' % e.duration_s if e.duration_s is not none else '' }}</td>
<td>{{ e.items_passed }}/{{ e.items_failed }}/{{ e.items_skipped }}</td>
<td>{{ e.reason }}</td></tr>{% endfor %}</table>{% endblock %}""",
    "evaluation.html": """{% extends "base.html" %}
{% block title %}anvil · {{ ev.id }}{% endblock %}
{% block crumbs %} / <a href="/runs/{{ ev.run_id | urlencode }}">run {{ ev.run_id }}</a>
 / {{ ev.id }}{% endblock %}
{% block main %}<h2>{{ ev.task }} · {{ ev.name }}
<span class="badge {{ ev.verdict or ev.status }}">{{ ev.verdict or ev.status }}</span></h2>
<p class="muted">{% if ev.phase %}at {{ ev.phase }} · {% endif %}
{% if ev.duration_s is not none %}{{ '%.2f' % ev.duration_s }} s · {% endif %}
attempt {{ ev.attempt }} · {{ ev.submission }}</p>
{% if ev.reason %}<pre>{{ ev.reason }}</pre>{% endif %}
<h3>Items</h3>{% if not ev["items"] %}<p class="muted">No oracle item ran.</p>{% else %}
<table class="items"><tr><th>item</th><th>outcome</th><th>category</th><th>took</th>
<th>message</th></tr>{% for i in ev["items"] %}<tr class="item">
<td><a href="/evaluations/{{ ev.id | urlencode }}/item?nodeid={{ i.nodeid | urlencode }}">
{{ i.nodeid }}</a></td><td class="{{ i.outcome }}">{{ i.outcome }}</td>
<td>{{ i.category or '' }}</td><td>{{ '%.3f s' % i.duration_s }}</td>
<td>{% if i.message %}<pre>{{ i.message }}</pre>{% endif %}</td></tr>{% endfor %}
</table>{% endif %}
{% if ev.logs %}<h3>Logs</h3><p>{% for name in ev.logs %}
<a href="/evaluations/{{ ev.id | urlencode }}/logs/{{ name }}">{{ name }}</a>
{% endfor %}</p>{% endif %}{% endblock %}""",
    "item.html": """{% extends "base.html" %}
{% block title %}anvil · {{ it.item.nodeid }}{% endblock %}
{% block crumbs %} / <a href="/runs/{{ ev.run_id | urlencode }}">run {{ ev.run_id }}</a>
 / <a href="/evaluations/{{ ev.id | urlencode }}">{{ ev.id }}</a>{% endblock %}
{% block main %}<h2>{{ it.item.nodeid }}
<span class="badge {{ it.item.outcome }}">{{ it.item.outcome }}</span></h2>
{% if it.item.message %}<pre class="message">{{ it.item.message }}</pre>{% endif %}
<div class="cols"><section>
<h3>Trace</h3>{% if not it.spans %}<p class="muted">No trace recorded for this item.</p>
{% else %}<p class="muted">The item ran {{ it.window[0] }} – {{ it.window[1] }}.
Click a span for its request, response and attributes.</p>
<table class="wf"><tr><th>span</th><th>status</th><th>took</th><th style="width:45%">when</th>
</tr>{% for s in it.spans %}<tr data-span="{{ s.span_id }}" tabindex="0"
 class="span {{ s.kind }}"><td style="padding-left:{{ 0.4 + s.depth * 1.2 }}em">{{ s.label }}
</td><td class="{{ 'error' if s.state == 'error' else '' }}">{{ s.status }}</td>
<td>{{ '%.1f ms' % s.duration_ms }}</td><td><div class="track"><div class="bar
{{ 'err' if s.state == 'error' else ('item' if s.depth == 0 else '') }}"
style="left:{{ s.offset_pct }}%;width:{{ s.width_pct }}%"></div></div></td></tr>
{% endfor %}</table>
{% for s in it.spans %}<div class="detail" data-span="{{ s.span_id }}" hidden>
<h3>{{ s.label }} <span class="muted">{{ s.kind }} span {{ s.span_id }}</span></h3>
{% if s.status_message %}<pre class="error">{{ s.status_message }}</pre>{% endif %}
{% for v in s.violations %}<pre class="violation">contract violation: {% for k, x in
v.items() %}{{ k }}={{ x }} {% endfor %}</pre>{% endfor %}
{% for title, m in (("Request", s.request), ("Response", s.response)) %}{% if m %}
<h3>{{ title }} <span class="muted">{{ m.size }} bytes{% if m.truncated %}, truncated
{% endif %}{% if m.encoding != 'utf-8' %}, {{ m.encoding }}{% endif %}</span></h3>
<table class="headers">{% for k, vs in m.headers.items() %}<tr><th>{{ k }}</th>
<td>{{ vs | join(', ') if vs is not string else vs }}</td></tr>{% endfor %}</table>
<pre class="body {{ title | lower }}-body">{{ m.body }}</pre>{% endif %}{% endfor %}
{% for e in s.events %}<h3>{{ e.name }}</h3><pre>{% for k, x in e.attributes.items() %}
{{ k }}: {{ x }}{% endfor %}</pre>{% endfor %}
<h3>Attributes</h3><table class="attributes">{% for k, x in s.attributes.items() %}<tr>
<th>{{ k }}</th><td>{{ x }}</td></tr>{% endfor %}</table></div>{% endfor %}{% endif %}
</section><section class="service-log"><h3>service.log</h3>
{% set log = it.service_log %}{% if log.timestamped %}
<p class="muted">service.log lines written while this item ran (from {{ log.margin_ms[0] }} ms
before it to {{ log.margin_ms[1] }} ms after it), in ms since the item started.</p>
{% if log.lines %}<pre class="log timed">{% for line in log.lines %}{% if not loop.first %}
{% endif %}<span class="at">{{ '%+9.1f' % log.at_ms[loop.index0] }}</span>  {{ line }}
{%- endfor %}</pre>{% else %}<p class="muted">The service wrote nothing meanwhile.</p>{% endif %}
{% elif log.lines %}<p class="muted">Its last {{ log.lines | length }} lines (this log has no
times beside it, so the lines of the item's time window are not known).</p>
<pre class="log">{{ log.lines | join('\n') }}</pre>
{% else %}<p class="muted">No service log.</p>{% endif %}
{% if log.path %}<p><a href="/evaluations/{{ ev.id | urlencode }}/logs/service.log">the whole
service.log</a></p>{% endif %}</section></div>
<script>{{ js | safe }}</script>{% endblock %}""",
}

_env = Environment(loader=DictLoader(_TEMPLATES), autoescape=True)


def _page(name: str, *, poll: tuple[str, Any] | None = None, **context: Any) -> HTMLResponse:
    """Render a page; ``poll`` (its JSON twin's URL and data) makes it refresh itself."""
    state = None
    if poll is not None:
        url, data = poll
        # JSON inside <script>: "<" escaped so no string in it can close the element.
        state = {"url": url, "state": json.dumps(data).replace("<", "\\u003c")}
    html = _env.get_template(name).render(css=_CSS, js=_JS, poll_js=_POLL_JS, poll=state,
                                          **context)
    return HTMLResponse(html)


def create_app(store: Store, home: Path) -> Starlette:
    """The web UI over ``store``; evaluation logs are read under ``home``.

    Endpoints are synchronous: Starlette runs them in worker threads, so a slow
    database read never blocks the server's event loop.
    """
    charts = Charts(store)

    def runs_page(request: Request) -> Response:
        runs = runs_data(store)
        live = any(is_live(r["status"]) for r in runs)
        return _page("runs.html", runs=runs, poll=("/api/runs", runs) if live else None)

    def runs_json(request: Request) -> Response:
        return JSONResponse(runs_data(store))

    def run_page(request: Request) -> Response:
        run = run_data(store, request.path_params["run_id"])
        url = f"/api/runs/{quote(run['id'], safe='')}"
        # Drawn now, so the page's images come from the cache.
        names = list(charts.of(run["id"]))
        return _page("run.html", run=run, charts=names, titles=CHART_TITLES,
                     poll=(url, run) if is_live(run["status"]) else None)

    def chart_svg(request: Request) -> Response:
        name = request.path_params["name"]
        svg = charts.of(request.path_params["run_id"]).get(name)
        if svg is None:
            raise HTTPException(404, f"no chart {name!r} for this run")
        # Revalidated on each view (a running run's charts change), answered 304 while
        # unchanged. The CSP keeps an SVG opened on its own from running anything.
        headers = {"ETag": f'"{hashlib.sha256(svg).hexdigest()[:32]}"',
                   "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
                   "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}
        if request.headers.get("if-none-match") == headers["ETag"]:
            return Response(status_code=304, headers=headers)
        return Response(svg, media_type="image/svg+xml", headers=headers)

    def run_json(request: Request) -> Response:
        return JSONResponse(run_data(store, request.path_params["run_id"]))

    def evaluation_page(request: Request) -> Response:
        ev = evaluation_data(store, home, request.path_params["evaluation_id"])
        url = f"/api/evaluations/{quote(ev['id'], safe='')}"
        return _page("evaluation.html", ev=ev,
                     poll=(url, ev) if is_live(ev["run_status"]) else None)

    def evaluation_json(request: Request) -> Response:
        return JSONResponse(evaluation_data(store, home, request.path_params["evaluation_id"]))

    def _item(request: Request) -> dict[str, Any]:
        nodeid = request.query_params.get("nodeid")
        if not nodeid:
            raise HTTPException(400, "the item's ?nodeid= is missing")
        return item_data(store, home, request.path_params["evaluation_id"], nodeid)

    def item_page(request: Request) -> Response:
        data = _item(request)
        return _page("item.html", it=data, ev=data["evaluation"])

    def item_json(request: Request) -> Response:
        return JSONResponse(_item(request))

    def log_text(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in LOG_NAMES:
            raise HTTPException(404, f"no log {name!r}")
        folder = log_folder(home, _evaluation(store, request.path_params["evaluation_id"]))
        try:
            with open(folder / name if folder else Path("/nonexistent"), "rb") as fh:
                data = fh.read(LOG_READ_MAX)
        except OSError:
            raise HTTPException(404, f"no {name} for this evaluation") from None
        return PlainTextResponse(data.decode("utf-8", "replace"))

    routes: Sequence[Route] = [
        Route("/", runs_page),
        Route("/api/runs", runs_json),
        Route("/runs/{run_id}", run_page),
        Route("/api/runs/{run_id}", run_json),
        Route("/runs/{run_id}/charts/{name}.svg", chart_svg),
        Route("/evaluations/{evaluation_id}", evaluation_page),
        Route("/api/evaluations/{evaluation_id}", evaluation_json),
        Route("/evaluations/{evaluation_id}/item", item_page),
        Route("/api/evaluations/{evaluation_id}/item", item_json),
        Route("/evaluations/{evaluation_id}/logs/{name}", log_text),
    ]
    return Starlette(routes=list(routes))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
