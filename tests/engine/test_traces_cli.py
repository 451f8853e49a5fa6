"""`anvil traces` shows what `anvil run` recorded: every oracle item, every HTTP call it
made through the recording proxy, status codes and the failing assertion."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine import Store
from tests.conftest import FIXTURES
from tests.engine.test_cli import TINY, anvil

# The tiny oracle's calls per item (tests/engine/fixtures/tiny_task/oracle/test_tiny.py).
CALLS = {"test_health": ["GET /health"], "test_put_then_get": ["PUT /items/", "GET /items/"],
         "test_unknown_is_404": ["GET /items/"], "test_slow_answers": ["GET /slow"]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, str, str]:
    """One real `anvil run` of a service that fails one item: (home, run id, evaluation id)."""
    base = tmp_path_factory.mktemp("traces")
    submission = base / "fail-item"
    submission.mkdir()
    for name in ("Dockerfile", "server.py"):
        text = (FIXTURES / "tiny_service" / name).read_text()
        (submission / name).write_text(text.replace("ENV MODE=ok", "ENV MODE=fail_item"))
    home = base / "home"
    done = anvil("run", str(TINY), "-s", str(submission), "--runtime", "process", "--json",
                 home=home, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["verdict"] == "fail" and result["items_failed"] == 1, result
    return home, result["run_id"], result["evaluation_id"]


def traces(recorded: tuple[Path, str, str], cache: Path, *args: str) -> Any:
    home, _, _ = recorded
    return anvil("traces", *args, home=home, cache=cache)


def test_the_waterfall_shows_every_item_and_each_call_once(
        recorded: tuple[Path, str, str], cache_dir: Path) -> None:
    _, _, evaluation_id = recorded
    done = traces(recorded, cache_dir, evaluation_id)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert evaluation_id in out and "FAIL at oracle" in out
    lines = out.splitlines()
    # evaluation -> its six phases in order; the health probes under health
    phases = [i for i, line in enumerate(lines)
              if re.search(r"^[├└]─ (build|startup|health|wiring|oracle|teardown) ", line)]
    assert [lines[i].split()[1] for i in phases] == [
        "build", "startup", "health", "wiring", "oracle", "teardown"]
    health, wiring, oracle, teardown = phases[2:]
    assert any(re.search(r"└─ GET /health( ×\d+)? +200", line)
               for line in lines[health + 1 : wiring])
    lines = lines[oracle:teardown]
    calls = [line for line in lines if re.search(r"[├└]─ (GET|PUT) /", line)]
    assert len(calls) == sum(len(c) for c in CALLS.values())  # each call once, no more
    starts = [i for i, line in enumerate(lines) if "test_tiny.py::" in line] + [len(lines)]
    assert len(starts) == len(CALLS) + 1
    for at, end in zip(starts, starts[1:], strict=False):
        item = lines[at].split("::")[1].split()[0]
        under = [line for line in lines[at + 1 : end] if "├─ " in line or "└─ " in line]
        assert len(under) == len(CALLS[item]), (item, under)
        for call, line in zip(CALLS[item], under, strict=True):
            assert call in line, (item, line)
    assert all(re.search(r" (200|404) +\d+\.\dms +━", line) for line in calls), calls
    assert "assert 404 == 200" in out  # the failing assertion, under its item
    assert "test_put_then_get [state]" in out and "failed" in out


def test_failed_shows_only_the_failed_item_with_its_bodies(
        recorded: tuple[Path, str, str], cache_dir: Path) -> None:
    _, _, evaluation_id = recorded
    out = traces(recorded, cache_dir, evaluation_id, "--failed").stdout
    assert "test_put_then_get" in out
    assert "test_health" not in out and "test_unknown_is_404" not in out
    assert "→ wrong status: expected 200, got 404 from GET /items/" in out  # what it shows
    assert '→ {"value": "v"}' in out  # the PUT's request body
    assert '← {"detail": "not found"}' in out  # the GET's answer


def test_json_of_one_item_is_the_span_tree(recorded: tuple[Path, str, str],
                                           cache_dir: Path) -> None:
    home, _, evaluation_id = recorded
    done = traces(recorded, cache_dir, evaluation_id, "--item", "test_unknown_is_404", "--json")
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert trace["evaluation_id"] == evaluation_id and trace["verdict"] == "fail"
    (oracle,) = trace["root"]["children"]  # the filter keeps the path to the item
    assert oracle["name"] == "oracle" and oracle["attributes"]["anvil.phase"] == "oracle"
    (item,) = oracle["children"]
    assert item["name"].endswith("::test_unknown_is_404") and item["status"] == "unset"
    (call,) = item["children"]
    assert call["kind"] == "client" and call["parent_id"] == item["span_id"]
    assert call["attributes"]["http.response.status_code"] == 404
    assert call["attributes"]["http.request.method"] == "GET"
    assert [e["name"] for e in call["events"]] == ["http.request", "http.response"]
    stored = Store(f"sqlite:///{home / 'anvil.db'}").spans(evaluation_id)
    assert call["span_id"] in {s.span_id for s in stored}


def test_a_run_id_shows_its_evaluations_and_unknown_names_are_usage_errors(
        recorded: tuple[Path, str, str], cache_dir: Path) -> None:
    _, run_id, evaluation_id = recorded
    by_run = traces(recorded, cache_dir, run_id, "--json")
    assert [t["evaluation_id"] for t in json.loads(by_run.stdout)] == [evaluation_id]
    unknown = traces(recorded, cache_dir, "no-such-run.7")
    assert unknown.returncode == 2 and "no evaluation or run" in unknown.stderr
    no_item = traces(recorded, cache_dir, evaluation_id, "--item", "nothing_like_it")
    assert no_item.returncode == 2 and "test_health" in no_item.stderr


def test_export_names_its_formats_and_writes_every_span(
        recorded: tuple[Path, str, str], cache_dir: Path, tmp_path: Path) -> None:
    home, _, evaluation_id = recorded
    bogus = traces(recorded, cache_dir, evaluation_id, "--export", "zipkin", str(tmp_path / "x"))
    assert bogus.returncode == 2 and "the formats are otlp-json" in bogus.stderr
    assert not (tmp_path / "x").exists()
    done = traces(recorded, cache_dir, evaluation_id, "--export", "otlp-json",
                  str(tmp_path / "t.json"))
    assert done.returncode == 0, done.stderr
    spans = [s for rs in json.loads((tmp_path / "t.json").read_text())["resourceSpans"]
             for scope in rs["scopeSpans"] for s in scope["spans"]]
    stored = Store(f"sqlite:///{home / 'anvil.db'}").spans(evaluation_id)
    assert sorted(s["spanId"] for s in spans) == sorted(s.span_id for s in stored)


def test_the_body_limit_is_the_users_to_set(tmp_path: Path, cache_dir: Path) -> None:
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "-s", str(FIXTURES / "tiny_service"), "--runtime", "process",
                 "--json", "--trace-body-limit", "4", home=home, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    evaluation_id = json.loads(done.stdout)["evaluation_id"]
    spans = Store(f"sqlite:///{home / 'anvil.db'}").spans(evaluation_id)
    (put,) = [s for s in spans if s.attributes_dict().get("http.request.method") == "PUT"]
    sent = next(e["attributes"] for e in put.events_list() if e["name"] == "http.request")
    assert sent["anvil.body"] == '{"va' and sent["anvil.body.truncated"] is True
    assert sent["anvil.body.size"] == len(b'{"value": "v"}')
    bad = anvil("run", str(TINY), "-s", str(FIXTURES / "tiny_service"), "--trace-body-limit",
                "-1", home=home, cache=cache_dir)
    assert bad.returncode == 2 and "trace-body-limit" in bad.stderr
