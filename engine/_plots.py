"""Charts of a run's metrics (``anvil report --plot DIR``, and the run page of ``anvil
serve``), as SVG and PNG, with matplotlib.

matplotlib is imported inside the drawing functions only: it costs about half a second
to load, which no other command should pay. Figures are drawn on the Agg canvas without
pyplot, so nothing global (backends, open figures) is touched, and the SVG carries no
date and a fixed id salt: the same run gives the same file.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ._metrics import PHASES, Metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = ("svg", "png")


def _label(task: str, submission: str, tasks: int) -> str:
    return submission if tasks == 1 else f"{task}/{submission}"


def chart_data(m: Metrics) -> dict[str, tuple[list[str], dict[str, list[int]]]]:
    """The stacked bar charts' data: chart name -> (candidate labels, segment -> a count
    per candidate). Every candidate of the run is a bar, failures or not."""
    candidates = list(m.submission_phase_failures)
    tasks = len({task for task, _ in candidates})
    labels = [_label(task, sub, tasks) for task, sub in candidates]
    seen_phases = {p for counts in m.submission_phase_failures.values() for p in counts}
    phases = [*PHASES, *sorted(seen_phases - {*PHASES, "error"}), "error"]
    categories = sorted({c for counts in m.category_failures.values() for c in counts})
    empty: Counter[str] = Counter()
    return {
        "phases": (labels, {p: [m.submission_phase_failures[c][p] for c in candidates]
                            for p in phases}),
        "categories": (labels, {cat: [m.category_failures.get(c, empty)[cat]
                                      for c in candidates] for cat in categories}),
    }


def chart_names(m: Metrics) -> list[str]:
    """The charts :func:`write_charts` draws for ``m``, in its order (matplotlib not loaded).

    * ``phases``: failed evaluations per phase (``error``: anvil's), a stacked bar per
      candidate (task × submission; repeats add up);
    * ``categories``: failed items per category, a stacked bar per candidate;
    * ``tiers``: all-pass success under each cumulative tier, when items carry tiers;
    * ``pass_at_k``: pass@k for k = 1..K, when the run was repeated.
    """
    names = ["phases", "categories"]
    if len(m.tiers) > 1:
        names.append("tiers")
    if m.repeats is not None:
        names.append("pass_at_k")
    return names


def charts_with_data(m: Metrics) -> list[str]:
    """The charts that show something of ``m``, for the web UI: as :func:`chart_names`,
    without ``phases`` before an evaluation has finished nor ``categories`` before an item
    has failed (their bars would all be empty)."""
    return [name for name in chart_names(m)
            if (name != "phases" or m.judged + m.errors > 0)
            and (name != "categories" or m.category_failures)]


def _figures(m: Metrics, names: Sequence[str]) -> list[tuple[str, Figure]]:
    data = chart_data(m)
    figures: list[tuple[str, Figure]] = []
    for name in names:
        if name == "phases":
            figure = _stacked(*data["phases"], "failed evaluations by phase", "evaluations")
        elif name == "categories":
            figure = _stacked(*data["categories"], "failed items by category", "items")
        elif name == "tiers":
            figure = _bars([t.label for t in m.tiers], [t.success.value for t in m.tiers],
                           "all-pass success by cumulative tier", "success")
        elif name == "pass_at_k" and m.repeats is not None:
            figure = _bars([f"pass@{p.k}" for p in m.repeats.pass_at_k],
                           [p.value for p in m.repeats.pass_at_k],
                           f"pass@k over {m.repeats.repeats} repeats", "pass@k")
        else:
            raise ValueError(f"no chart {name!r} for this run")
        figures.append((name, figure))
    return figures


@contextmanager
def _drawing() -> Iterator[None]:
    """rcParams that make the SVG reproducible: no date (see the savefig calls), a fixed
    id salt, text kept as text."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "anvil", "svg.fonttype": "none"}):
        yield


def _save(figure: Figure, target: Path | BinaryIO, fmt: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # attaches itself: Agg, whatever the default backend
    figure.savefig(target, format=fmt, dpi=120, bbox_inches="tight",
                   metadata={"Date": None} if fmt == "svg" else None)


def write_charts(m: Metrics, folder: Path) -> list[Path]:
    """Draw the run's charts (:func:`chart_names`) into ``folder`` (created) as SVG and PNG;
    return the paths.

    Raises:
        OSError: ``folder`` or a file in it cannot be written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with _drawing():
        for name, figure in _figures(m, chart_names(m)):
            for fmt in FORMATS:
                path = folder / f"{name}.{fmt}"
                _save(figure, path, fmt)
                written.append(path)
    return written


def svg_charts(m: Metrics, names: Sequence[str]) -> dict[str, bytes]:
    """The charts ``names`` (of :func:`chart_names`) as SVG documents, the same bytes
    :func:`write_charts` writes.

    matplotlib's rcParams are global: callers drawing from several threads hold one lock
    around this call.

    Raises:
        ValueError: a name is not one of the run's charts.
    """
    drawn = {}
    with _drawing():
        for name, figure in _figures(m, names):
            buffer = io.BytesIO()
            _save(figure, buffer, "svg")
            drawn[name] = buffer.getvalue()
    return drawn


def _figure(bars: int) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(max(5.0, 1.0 + 0.7 * bars), 4.0))
    return figure, figure.add_subplot()


def _stacked(labels: Sequence[str], segments: Mapping[str, Sequence[int]], title: str,
             unit: str) -> Figure:
    from matplotlib.ticker import MaxNLocator

    figure, ax = _figure(len(labels))
    positions = list(range(len(labels)))
    bottom = [0] * len(labels)
    palette = _palette(len(segments))
    for (name, counts), color in zip(segments.items(), palette, strict=True):
        if not any(counts):
            continue  # a phase nothing failed at stays out of the legend
        ax.bar(positions, counts, bottom=bottom, label=name, color=color)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    if any(bottom):
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no failures", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks(positions, labels, rotation=30, ha="right")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.5 ticks
    ax.set_ylabel(unit)
    ax.set_title(title)
    return figure


def _bars(labels: Sequence[str], values: Sequence[float | None], title: str,
          unit: str) -> Figure:
    figure, ax = _figure(len(labels))
    shown = [100 * v if v is not None else 0.0 for v in values]
    bars = ax.bar(range(len(labels)), shown, color=_palette(1)[0])
    ax.bar_label(bars, labels=["-" if v is None else f"{100 * v:.0f}%" for v in values])
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylim(0, 110)
    ax.set_ylabel(f"{unit} (%)")
    ax.set_title(title)
    return figure


def _palette(n: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
