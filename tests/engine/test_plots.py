"""`anvil report --plot DIR`: the charts of a real repeated run, as SVG and PNG files.

The tiny task with its put_then_get item in tier ``evolved-r1``, against three submissions
run twice each: ok (passes), broken (fail_item: put_then_get fails) and crash (startup).
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image
import pytest
from PIL import Image

from engine import Store
from engine._metrics import compute
from engine._plots import chart_data
from tests.conftest import FIXTURES
from tests.engine.test_cli import anvil

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"
CHARTS = ("phases", "categories", "tiers", "pass_at_k")


class Plotted:
    def __init__(self, root: Path, cache: Path) -> None:
        self.root, self.cache, self.home = root, cache, root / "home"
        task = root / "tiered"
        shutil.copytree(FIXTURES / "tiny_task", task)
        oracle = task / "oracle" / "test_tiny.py"
        oracle.write_text(oracle.read_text().replace(
            '@pytest.mark.category("state")\n',
            '@pytest.mark.category("state")\n@pytest.mark.tier("evolved-r1")\n'))
        for name, mode in (("ok", "ok"), ("broken", "fail_item"), ("crash", "crash")):
            sub = root / "subs" / name
            shutil.copytree(FIXTURES / "tiny_service", sub)
            dockerfile = sub / "Dockerfile"
            dockerfile.write_text(dockerfile.read_text().replace("ENV MODE=ok",
                                                                 f"ENV MODE={mode}"))
        done = anvil("run", str(task), "--submissions", str(root / "subs"), "--runtime",
                     "process", "--repeat", "2", home=self.home, cache=cache)
        assert done.returncode == 0, done.stderr
        self.plots = root / "out" / "charts"
        self.done = anvil("report", "latest", "--plot", str(self.plots), "--format", "json",
                          home=self.home, cache=cache)


@pytest.fixture(scope="module")
def plotted(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Plotted:
    return Plotted(tmp_path_factory.mktemp("plots"), cache_dir)


def test_every_chart_is_written_as_svg_and_png(plotted: Plotted) -> None:
    done = plotted.done
    assert done.returncode == 0, done.stderr
    assert '"metrics"' in done.stdout  # the report itself still goes to stdout
    expected = [plotted.plots / f"{name}.{fmt}" for name in CHARTS for fmt in ("svg", "png")]
    assert [line.removeprefix("wrote ") for line in done.stderr.splitlines()
            if line.startswith("wrote ")] == [str(p) for p in expected]
    for png in plotted.plots.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        with Image.open(png) as image:
            image.verify()
        pixels = matplotlib.image.imread(png)
        assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert pixels.min() < pixels.max()  # something is drawn
    for svg in plotted.plots.glob("*.svg"):
        assert ET.parse(svg).getroot().tag == f"{SVG}svg"


def _texts(svg: Path) -> set[str]:
    """The SVG's text elements (text stays text: svg.fonttype none)."""
    return {"".join(t.itertext()).strip() for t in ET.parse(svg).getroot().iter(f"{SVG}text")}


def test_the_charts_show_the_run(plotted: Plotted) -> None:
    phases = _texts(plotted.plots / "phases.svg")
    assert {"failed evaluations by phase", "ok", "broken", "crash", "oracle",
            "startup"} <= phases
    assert "build" not in phases  # nothing failed at build: not in the legend
    categories = _texts(plotted.plots / "categories.svg")
    assert {"failed items by category", "state"} <= categories
    # base: ok and broken (its failed item is evolved-r1) of 6; final: ok only.
    tiers = _texts(plotted.plots / "tiers.svg")
    assert {"base", "final", "67%", "33%"} <= tiers
    # pass@1 = (1 + 0 + 0) / 3; pass@2 likewise (ok passes both, the others neither).
    assert {"pass@1", "pass@2", "33%"} <= _texts(plotted.plots / "pass_at_k.svg")


def test_chart_data_counts_each_candidate(plotted: Plotted) -> None:
    store = Store(f"sqlite:///{plotted.home / 'anvil.db'}")
    try:
        record = store.run("latest")
        assert record is not None
        evaluations = store.evaluations(record.id)
        items: dict[str, list] = {}  # type: ignore[type-arg]
        for item in store.items([e.id for e in evaluations]):
            items.setdefault(item.evaluation_id, []).append(item)
    finally:
        store.close()
    data = chart_data(compute(evaluations, items))
    labels, phases = data["phases"]
    assert labels == ["broken", "crash", "ok"]
    assert {p: counts for p, counts in phases.items() if any(counts)} == {
        "startup": [0, 2, 0], "oracle": [2, 0, 0]}
    labels, categories = data["categories"]
    assert (labels, categories) == (["broken", "crash", "ok"], {"state": [2, 0, 0]})


def test_plot_errors_are_reported(plotted: Plotted) -> None:
    blocked = plotted.root / "blocked"
    blocked.write_text("a file where the folder should be")
    done = anvil("report", "latest", "--plot", str(blocked), home=plotted.home,
                 cache=plotted.cache)
    assert done.returncode != 0 and "cannot write the charts" in done.stderr
    done = anvil("report", "latest", "--against", "latest", "--plot", str(plotted.root / "x"),
                 home=plotted.home, cache=plotted.cache)
    assert done.returncode != 0 and "--plot" in done.stderr
    assert not (plotted.root / "x").exists()
