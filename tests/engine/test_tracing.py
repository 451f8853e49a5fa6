"""One trace per evaluation, made while it runs: evaluation -> phases -> items -> calls,
with the calls anvil itself makes (health probes, mock checks, Docker API calls) under
their phase and the calls the service makes to its mocks under the item that ran."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from engine import Phase, Store, Verdict
from engine._mocks import MockFabric
from engine._store import SpanRecord
from engine._traces import load_trace, unaccounted_ns, waterfall
from engine._tracing import default_attachments
from telemetry import derived_span_id
from tests.conftest import run_engine
from tests.engine.test_mock_wiring import _submission, _task

NOTE_ITEM = "test_notes.py::test_a_note_goes_through_the_mock"


@pytest.fixture(params=["process", "docker"])
def runtime_name(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_ready")
        monkeypatch.setenv("EXPECT_SERVICE_HOST", "host.docker.internal")
    return str(request.param)


def _attributes(span: SpanRecord) -> dict[str, object]:
    return span.attributes_dict()


async def test_a_traced_evaluation_has_phases_probes_and_the_services_mock_calls(
    runtime_name: str, tmp_path: Path, cache_dir: Path
) -> None:
    task = _task(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with MockFabric() as fabric:
        (result,), store, _ = await run_engine(
            [(task, _submission(tmp_path, "one"))], tmp_path, cache_dir, runtime=runtime_name,
            attachments=default_attachments(store, fabric))
    assert result.verdict is Verdict.PASS, result.reason
    spans = store.spans(result.evaluation_id)
    (root,) = [s for s in spans if s.parent_id is None]
    phases = {s.name: s for s in spans if s.parent_id == root.span_id}
    assert set(phases) == {p.value for p in Phase}
    under = {name: [s for s in spans if s.parent_id == phase.span_id]
             for name, phase in phases.items()}

    # wiring: anvil checked the mock instance answers
    checks = [s for s in under["wiring"] if _attributes(s).get("anvil.peer") == "mock"]
    assert [_attributes(s)["url.path"] for s in checks] == ["/__mock__/clock"]
    assert _attributes(checks[0])["http.response.status_code"] == 200

    # the item: the oracle's call through the proxy, and the call the service made to the
    # mock meanwhile, with what it sent and what the mock answered
    (item,) = [s for s in under["oracle"] if _attributes(s).get("anvil.item.nodeid") == NOTE_ITEM]
    assert item.span_id == derived_span_id(root.trace_id, NOTE_ITEM)
    mock_calls = [s for s in spans if s.parent_id == item.span_id
                  and _attributes(s).get("anvil.mock.instance") == "echo"]
    posts = [s for s in mock_calls if _attributes(s)["http.request.method"] == "POST"]
    (post,) = posts
    assert post.kind == "server" and _attributes(post)["url.path"] == "/v1/echoes"
    assert _attributes(post)["anvil.mock.kind"] == "echo"
    assert _attributes(post)["http.response.status_code"] in (200, 201)
    events = {e["name"]: e["attributes"] for e in post.events_list()}
    assert json.loads(events["http.request"]["anvil.body"]) == {"text": "hi"}
    assert json.loads(events["http.response"]["anvil.body"])["body"] == {"text": "hi"}
    assert item.start_ns <= post.start_ns <= post.end_ns <= item.end_ns
    (proxied,) = [s for s in spans if s.parent_id == item.span_id and s.kind == "client"]
    # the service's call to the mock happened while the proxy waited for its answer
    assert proxied.start_ns <= post.start_ns and post.end_ns <= proxied.end_ns

    # the calls anvil made to the runtime: Docker API calls under the phase that made them
    docker = {name: [s for s in spans_ if _attributes(s).get("anvil.peer") == "docker"]
              for name, spans_ in under.items()}
    if runtime_name == "docker":
        assert any(str(_attributes(s)["url.path"]).endswith("/containers/create")
                   for s in docker["startup"])
        assert docker["build"] and docker["teardown"]
    else:
        assert not any(docker.values())

    # every moment of the evaluation is in a phase: no gap the timeline cannot explain
    trace = load_trace(store, store.evaluation(result.evaluation_id))
    gap = unaccounted_ns(trace)
    print(f"unaccounted {gap / 1e6:.2f} ms of {(root.end_ns - root.start_ns) / 1e6:.0f} ms")
    assert gap < 50_000_000, f"{gap / 1e6:.1f} ms of the evaluation is in no phase"

    # and the waterfall shows the mock call under its item
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(waterfall(trace))
    text = console.export_text()
    assert "echo ← POST /v1/echoes" in text
    assert text.index("test_a_note_goes_through_the_mock") < text.index("echo ← POST")
