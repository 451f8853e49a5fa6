"""`anvil serve`: the web UI over a store filled by a real evaluation that fails one item.

The pages are read through Starlette's TestClient (HTML and their JSON twins); two tests
drive the UI in headless Chromium (Debian's, through playwright) over a real server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from starlette.testclient import TestClient

from engine import Store, load_task
from engine._events import EvaluationStarted, RunFinished
from engine._logs import times_path
from engine._tracing import default_attachments
from engine._web import create_app, is_loopback
from tests.conftest import FIXTURES, ROOT, run_engine

FAILING = "test_tiny.py::test_put_then_get"
CHROMIUM = "/usr/bin/chromium"
SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


@dataclass
class Recorded:
    home: Path
    run_id: str
    evaluation_id: str


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Recorded:
    """One real evaluation, through the recording proxy, of a service that fails an item."""
    base = tmp_path_factory.mktemp("web")
    submission = base / "fail-item"
    shutil.copytree(FIXTURES / "tiny_service", submission)
    dockerfile = submission / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("ENV MODE=ok", "ENV MODE=fail_item"))
    # This copy logs each request it handles (markup in it), so each item has its lines.
    server = submission / "server.py"
    server.write_text(server.read_text().replace(
        "    def log_message(self, *args):\n",
        "    def log_message(self, *args):\n"
        "        print(f'handled {self.command} {self.path} <i>{MODE}</i>', flush=True)\n"))
    home = base / "home"
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    task = load_task(FIXTURES / "tiny_task")
    (result,), _, run_id = anyio.run(
        lambda: run_engine([(task, submission)], home, cache_dir,
                           attachments=default_attachments(store)))
    store.close()
    assert result.verdict.value == "fail" and result.items_failed == 1, result
    return Recorded(home, run_id, result.evaluation_id)


@pytest.fixture
def client(recorded: Recorded) -> Iterator[TestClient]:
    store = Store(f"sqlite:///{recorded.home / 'anvil.db'}")
    with TestClient(create_app(store, recorded.home)) as test_client:
        yield test_client
    store.close()


def item_url(recorded: Recorded, nodeid: str, api: bool = False) -> str:
    prefix = "/api" if api else ""
    return f"{prefix}/evaluations/{recorded.evaluation_id}/item?nodeid={quote(nodeid)}"


def test_runs_lead_to_the_run_and_its_failed_evaluation(client: TestClient,
                                                        recorded: Recorded) -> None:
    (run,) = client.get("/api/runs").json()
    assert run["id"] == recorded.run_id and run["status"] == "finished"
    assert run["runtime"] == "process" and run["counts"] == {"fail": 1}
    page = client.get("/")
    assert page.status_code == 200 and f'href="/runs/{recorded.run_id}"' in page.text
    evaluations = client.get(f"/api/runs/{recorded.run_id}").json()["evaluations"]
    assert [(e["id"], e["verdict"], e["phase"]) for e in evaluations] == [
        (recorded.evaluation_id, "fail", "oracle")]
    assert evaluations[0]["duration_s"] > 0 and evaluations[0]["items_failed"] == 1
    html = client.get(f"/runs/{recorded.run_id}").text
    assert f'href="/evaluations/{recorded.evaluation_id}"' in html and ">fail<" in html


def test_an_evaluation_lists_its_failed_item_first_with_its_message(
        client: TestClient, recorded: Recorded) -> None:
    data = client.get(f"/api/evaluations/{recorded.evaluation_id}").json()
    outcomes = [i["outcome"] for i in data["items"]]
    assert outcomes[0] == "failed" and outcomes[1:] == ["passed"] * 3, outcomes
    assert data["items"][0]["nodeid"] == FAILING
    assert "assert 404 == 200" in data["items"][0]["message"]
    assert {"service.log", "oracle.log"} <= set(data["logs"])
    html = client.get(f"/evaluations/{recorded.evaluation_id}").text
    assert html.index("test_put_then_get") < html.index("test_health")
    assert "assert 404 == 200" in html
    log = client.get(f"/evaluations/{recorded.evaluation_id}/logs/oracle.log")
    assert log.status_code == 200 and "test_put_then_get" in log.text
    assert client.get(f"/evaluations/{recorded.evaluation_id}/logs/..%2Fanvil.db"
                      ).status_code == 404


def test_an_item_page_is_its_waterfall_with_bodies_headers_and_the_service_log(
        client: TestClient, recorded: Recorded) -> None:
    data = client.get(item_url(recorded, FAILING, api=True)).json()
    assert data["item"]["outcome"] == "failed"
    item, put, get = data["spans"]
    assert item["depth"] == 0 and item["offset_pct"] == 0 and item["state"] == "error"
    key = put["label"].removeprefix("PUT /items/")
    assert key and (put["status"], get["label"], get["status"]) == (
        "200", f"GET /items/{key}", "404")
    assert put["parent_id"] == get["parent_id"] == item["span_id"]
    assert 0 <= put["offset_pct"] < get["offset_pct"] < 100  # placed in call order
    assert all(0 < s["width_pct"] <= 100 for s in data["spans"])
    start, end = data["window"]
    assert start.endswith(" UTC") and start <= end
    assert json.loads(put["request"]["body"]) == {"value": "v"}
    assert put["request"]["headers"]["content-type"] == ["application/json"]
    assert json.loads(get["response"]["body"]) == {"detail": "not found"}
    assert get["violations"] == []  # no contract check in the tiny task
    log = data["service_log"]
    assert log["timestamped"] and f"handled PUT /items/{key} <i>fail_item</i>" in log["lines"]
    assert f"handled GET /items/{key} <i>fail_item</i>" in log["lines"]
    took_ms = (item["end_ns"] - item["start_ns"]) / 1e6
    assert all(-200 <= at <= took_ms + 200 for at in log["at_ms"]), log
    html = client.get(item_url(recorded, FAILING)).text
    assert "service.log lines written while this item ran" in html
    assert html.count('class="detail"') == 3 and "&#34;detail&#34;: &#34;not found&#34;" in html
    assert "<script>" in html and "http://" not in html.split("<main>")[0]  # nothing fetched


def test_unknown_names_are_404_and_markup_in_data_is_escaped(client: TestClient,
                                                             recorded: Recorded) -> None:
    assert client.get("/runs/nope").status_code == 404
    assert client.get("/api/evaluations/nope.1").status_code == 404
    assert client.get(item_url(recorded, "<b>nothing</b>")).status_code == 404
    assert client.get(f"/evaluations/{recorded.evaluation_id}/item").status_code == 400
    page = client.get(item_url(recorded, FAILING)).text
    assert "&lt;i&gt;fail_item&lt;/i&gt;" in page and "<i>fail_item" not in page
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")


def test_each_item_shows_the_service_log_lines_of_its_own_time_window(
        client: TestClient, recorded: Recorded) -> None:
    """The line the service printed during the failing item is on its page, not the
    page of the item that ran before it; that item has its own line."""
    failing = client.get(item_url(recorded, FAILING, api=True)).json()
    key = failing["spans"][1]["label"].removeprefix("PUT /items/")
    health = client.get(item_url(recorded, "test_tiny.py::test_health", api=True)).json()
    assert health["service_log"]["timestamped"]
    assert health["service_log"]["lines"] == ["handled GET /health <i>fail_item</i>"]
    assert not any(key in line for line in health["service_log"]["lines"])
    assert not any("/health" in line for line in failing["service_log"]["lines"])
    html = client.get(item_url(recorded, "test_tiny.py::test_health")).text
    shown = html.split('class="service-log"')[1]
    assert "GET /health" in shown and key not in shown
    assert re.search(r'<span class="at">\s*[+-]\d+\.\d</span>  handled GET /health', shown)


def test_a_log_without_times_shows_its_tail_as_before(recorded: Recorded,
                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(recorded.home, home)
    (log,) = (home / "runs" / recorded.run_id).glob("*/service.log")
    times_path(log).unlink()
    with log.open("a") as out:
        out.writelines(f"line {n} <script>alert({n})</script>\n" for n in range(250))
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    with TestClient(create_app(store, home)) as old:
        data = old.get(item_url(recorded, FAILING, api=True)).json()["service_log"]
        page = old.get(item_url(recorded, FAILING)).text
    store.close()
    assert not data["timestamped"] and len(data["lines"]) == 200
    assert data["lines"][-1].startswith("line 249 ")  # its tail
    assert "Its last 200" in page and "line 249 &lt;script&gt;alert(249)" in page
    assert "<script>alert" not in page


def test_the_run_page_shows_the_charts_the_run_has_data_for(client: TestClient,
                                                           recorded: Recorded) -> None:
    """One evaluation failed one `state` item in the oracle: the phases and categories
    charts, no tiers (no tier markers) nor pass@k (not repeated)."""
    html = client.get(f"/runs/{recorded.run_id}").text
    charts = re.findall(r'<img class="chart"\s+src="([^"]+)"', html)
    assert charts == [f"/runs/{recorded.run_id}/charts/{name}.svg"
                      for name in ("phases", "categories")]
    texts = {}
    for url in charts:
        answer = client.get(url)
        assert answer.status_code == 200, url
        assert answer.headers["content-type"] == "image/svg+xml"
        root = ET.fromstring(answer.content)
        assert root.tag == f"{SVG}svg"
        texts[url.rsplit("/", 1)[1]] = {"".join(t.itertext()).strip()
                                        for t in root.iter(f"{SVG}text")}
        # Unchanged since: 304, from the run's drawn charts.
        again = client.get(url, headers={"If-None-Match": answer.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    assert {"failed evaluations by phase", "oracle", "fail-item"} <= texts["phases.svg"]
    assert {"failed items by category", "state"} <= texts["categories.svg"]
    for missing in ("tiers", "pass_at_k", "nope"):
        assert client.get(f"/runs/{recorded.run_id}/charts/{missing}.svg").status_code == 404
    assert client.get("/runs/nope/charts/phases.svg").status_code == 404


def test_a_run_with_nothing_finished_has_no_charts(tmp_path: Path) -> None:
    store, run_id, _ = _live_store(tmp_path)
    with TestClient(create_app(store, tmp_path)) as live:
        assert 'class="chart"' not in live.get(f"/runs/{run_id}").text
        assert live.get(f"/runs/{run_id}/charts/phases.svg").status_code == 404
    store.close()


def _live_store(home: Path) -> tuple[Store, str, str]:
    """A store holding a run that is still running, as the runner leaves it midway."""
    home.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    run_id, evaluation_id = "live-run", "live-run.0"
    store.create_run(run_id, "process", {}, [(evaluation_id, "tiny", "/t", "/s/sub")])
    return store, run_id, evaluation_id


def test_pages_of_a_running_run_poll_and_those_of_a_finished_run_do_not(
        tmp_path: Path, client: TestClient, recorded: Recorded) -> None:
    store, run_id, evaluation_id = _live_store(tmp_path)
    pages = {"/": "/api/runs", f"/runs/{run_id}": f"/api/runs/{run_id}",
             f"/evaluations/{evaluation_id}": f"/api/evaluations/{evaluation_id}"}
    with TestClient(create_app(store, tmp_path)) as live:
        for page, api in pages.items():
            html = live.get(page).text
            state = re.search(r'<script type="application/json" id="poll-state" '
                              r'data-url="([^"]+)">(.*?)</script>', html, re.S)
            assert state and state[1] == api, page
            assert json.loads(state[2]) == live.get(api).json()  # what it compares against
            assert "setTimeout(poll,2000)" in html
        store.apply(RunFinished(run_id=run_id, interrupted=False, duration_s=1.0))
        for page in pages:
            assert "poll-state" not in live.get(page).text, page
    store.close()
    for page in ("/", f"/runs/{recorded.run_id}", f"/evaluations/{recorded.evaluation_id}",
                 item_url(recorded, FAILING)):
        assert "poll-state" not in client.get(page).text, page


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    with TestClient(create_app(store, tmp_path)) as empty:
        assert empty.get("/api/runs").json() == []
        assert "No run in this store yet" in empty.get("/").text
    store.close()


def test_serve_refuses_a_non_loopback_host_without_expose(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "engine", "serve", "--host", "0.0.0.0",
                           "--home", str(tmp_path)], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert done.returncode == 2 and "--expose" in done.stderr, done.stderr


def _browser_problem() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture
def browser_ready() -> None:
    """Runs for real in CI (CI or ANVIL_REQUIRE_DOCKER set); elsewhere skips, saying why."""
    problem = _browser_problem()
    if problem:
        if os.environ.get("CI") or os.environ.get("ANVIL_REQUIRE_DOCKER"):
            pytest.fail(f"the browser test is required here: {problem}")
        pytest.skip(problem)


@pytest.fixture
def served(recorded: Recorded) -> Iterator[str]:
    """`anvil serve` on a free loopback port, ready: its base URL."""
    with _serve(recorded.home) as url:
        yield url


@contextlib.contextmanager
def _serve(home: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--port", str(port),
                             "--home", str(home)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/runs", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:  # not listening yet (URLError is an OSError)
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"anvil serve did not come up: {proc.communicate()[1]}")
            time.sleep(0.05)  # polling a condition under a deadline
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_in_chromium_a_failed_item_opens_to_its_request_and_response(
        browser_ready: None, served: str, recorded: Recorded, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            outside: list[str] = []
            page.on("request", lambda r: None if r.url.startswith(served)
                    else outside.append(r.url))
            page.goto(f"{served}/runs/{recorded.run_id}")
            charts = page.locator("img.chart")
            expect(charts).to_have_count(2)
            # Each SVG loaded and decoded: it has a size (a broken image has none).
            page.wait_for_function("() => [...document.querySelectorAll('img.chart')]"
                                   ".every(i => i.complete && i.naturalWidth > 100)",
                                   timeout=10_000)
            page.get_by_role("link", name=recorded.evaluation_id).click()
            expect(page.locator("h2")).to_contain_text("FAIL", ignore_case=True)
            page.locator("table.items a").first.click()  # failed first
            expect(page.locator("pre.message")).to_contain_text("assert 404 == 200")
            detail = page.locator(".detail:visible")
            expect(detail).to_have_count(0)
            page.locator("tr.span", has_text="GET /items/").click()
            expect(detail).to_have_count(1)
            expect(detail.locator("pre.response-body")).to_contain_text('"not found"')
            page.locator("tr.span", has_text="PUT /items/").click()
            expect(detail.locator("pre.request-body")).to_contain_text('"value": "v"')
            expect(detail.locator("pre.response-body")).to_contain_text('"key": "')
            expect(page.locator("tr.span.sel")).to_contain_text("PUT /items/")
            shot = tmp_path / "web-ui-failed-item.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    assert outside == []  # the UI works offline: every request went to anvil serve
    print(f"screenshot: {shot}")


def test_in_chromium_a_running_runs_page_reloads_when_the_run_changes(
        browser_ready: None, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    store, run_id, evaluation_id = _live_store(tmp_path / "home")
    try:
        with _serve(tmp_path / "home") as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.goto(f"{url}/runs/{run_id}")
                expect(page.locator("td.badge")).to_have_text("pending")
                store.apply(EvaluationStarted(run_id=run_id, evaluation_id=evaluation_id,
                                              task="tiny", submission="/s/sub", attempt=1))
                expect(page.locator("td.badge")).to_have_text("running", timeout=10_000)
                store.apply(RunFinished(run_id=run_id, interrupted=False, duration_s=1.0))
                expect(page.locator("p.muted")).to_contain_text("finished", timeout=10_000)
                expect(page.locator("script.live")).to_have_count(0)  # it stopped polling
            finally:
                browser.close()
    finally:
        store.close()
