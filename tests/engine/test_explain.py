"""Failure explanations: each failed item of a real evaluation gets the one line its trace
shows (wrong status, a contract violation, a missing or wrong mock call, a harness-side
fault, a dropped call), and `anvil run` prints them with the command that opens the trace."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import Store, Task, Verdict
from engine._explain import explain, explain_trace
from engine._tracing import default_attachments
from tests.conftest import FIXTURES, MakeSubmission, run_engine
from tests.engine.test_cli import anvil


async def test_the_tiny_tasks_wrong_status_is_read_from_its_assertion_and_last_call(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    (result,), store, _ = await run_engine([(tiny_task, make_submission("fail_item"))],
                                           tmp_path, cache_dir,
                                           attachments=default_attachments(store))
    assert result.verdict is Verdict.FAIL
    failed = [i for i in result.items if i.failed]
    (why,) = explain(store.spans(result.evaluation_id), failed)
    assert why.nodeid == "test_tiny.py::test_put_then_get" and why.kind == "status"
    assert re.fullmatch(r"wrong status: expected 200, got 404 from GET /items/[0-9a-f]{32}",
                        why.line), why.line
    # the same from what the store kept (ItemRecord rows), as `anvil` reads it later
    stored = [i for i in store.items([result.evaluation_id]) if i.outcome != "passed"]
    assert explain(store.spans(result.evaluation_id), stored) == [why]


SERVICE = '''
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ECHO = os.environ["ECHO_URL"]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/drop":
            self.close_connection = True  # no answer at all
            return None
        if self.path == "/messages":
            return self._send(200, [{"text": "no date"}])
        return self._send(200, {"status": "ok"})  # /health, and /forbidden too

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path == "/loud":
            body = {k: v.upper() for k, v in body.items()}
        if self.path != "/quiet":
            request = urllib.request.Request(
                ECHO + "/v1/echoes", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=5).read()
        return self._send(201, {"ok": True})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

ORACLE = '''
import json
import os

import pytest
import requests

BASE = os.environ["BASE_URL"]


@pytest.mark.category("auth")
def test_status():
    r = requests.get(BASE + "/forbidden", timeout=5)
    assert r.status_code == 403


@pytest.mark.category("api_surface")
def test_shape():
    r = requests.get(BASE + "/messages", timeout=5)
    assert r.json()[0]["date"]


@pytest.mark.category("side_effects")
def test_mock_missing(echo):
    requests.post(BASE + "/quiet", json={"text": "hi"}, timeout=5)
    (call,) = echo.requests("POST", "/v1/echoes")


@pytest.mark.category("side_effects")
def test_mock_payload(echo):
    requests.post(BASE + "/loud", json={"text": "hi"}, timeout=5)
    (call,) = echo.requests("POST", "/v1/echoes")
    assert json.loads(call["body"]) == {"text": "hi"}


@pytest.mark.category("side_effects")
def test_mock_count(echo):
    requests.post(BASE + "/notes", json={"text": "hi"}, timeout=5)
    assert len(echo.requests(method="POST", path="/v1/echoes")) >= 2


@pytest.mark.category("workflow")
def test_dropped():
    requests.get(BASE + "/drop", timeout=5)


@pytest.mark.category("workflow")
def test_refused():
    requests.get(BASE + "/health", timeout=5)
    requests.get("http://127.0.0.1:9/nothing-listens-here", timeout=5)


@pytest.mark.category("workflow")
def test_plain():
    requests.get(BASE + "/health", timeout=5)
    assert False, "the plain reason"


@pytest.mark.category("workflow")
def test_passes(echo):
    requests.post(BASE + "/notes", json={"text": "hi"}, timeout=5)
    (call,) = echo.requests("POST", "/v1/echoes")
'''

MESSAGES = {"get": {"responses": {"200": {"description": "ok", "content": {
    "application/json": {"schema": {"type": "array", "items": {
        "type": "object", "required": ["date", "text"],
        "properties": {"date": {"type": "string"}, "text": {"type": "string"}}}}}}}}}}


@pytest.fixture(scope="module")
def explained_run(tmp_path_factory: pytest.TempPathFactory,
                  cache_dir: Path) -> tuple[Path, Any, str]:
    """One real `anvil run` of a task with an echo mock and a contract, whose items fail
    each in their own way: (home, the run's finished process, the evaluation id)."""
    base = tmp_path_factory.mktemp("explain")
    task = base / "explain-task"
    shutil.copytree(FIXTURES / "tiny_task", task)
    for item in (task / "oracle").glob("test_*.py"):
        item.unlink()
    (task / "oracle" / "test_why.py").write_text(ORACLE)
    toml = (task / "task.toml").read_text().replace('id = "tiny"', 'id = "why"')
    (task / "task.toml").write_text(toml + '\n[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n')
    document = yaml.safe_load((task / "openapi.yaml").read_text())
    document["paths"]["/messages"] = MESSAGES
    (task / "openapi.yaml").write_text(yaml.safe_dump(document))
    submission = base / "sub"
    submission.mkdir()
    (submission / "server.py").write_text(SERVICE)
    (submission / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /srv/app\nCOPY server.py .\nEXPOSE 8000\n"
        'CMD ["python", "server.py"]\n')
    home = base / "home"
    done = anvil("run", str(task), "-s", str(submission), "--runtime", "process", "--json",
                 home=home, cache=cache_dir)
    assert done.returncode == 0, done.stderr  # every evaluation judged
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["verdict"] == "fail" and result["items_failed"] == 8, result
    return home, done, result["evaluation_id"]


def test_each_failed_item_gets_the_line_its_trace_shows(
        explained_run: tuple[Path, Any, str]) -> None:
    home, _, evaluation_id = explained_run
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    failed = [i for i in store.items([evaluation_id]) if i.outcome != "passed"]
    found = {e.nodeid.split("::")[1]: (e.kind, e.line)
             for e in explain(store.spans(evaluation_id), failed)}
    assert found == {
        "test_status": ("status", "wrong status: expected 403, got 200 from GET /forbidden"),
        "test_shape": ("contract", "response shape violation: response to GET /messages: "
                                   "'date' missing from item 0"),
        "test_mock_missing": ("mock_missing", "required mock call missing: no POST "
                                              "/v1/echoes during this item; the mocks "
                                              "received no call"),
        "test_mock_payload": ("mock_payload", found["test_mock_payload"][1]),
        "test_mock_count": ("mock_count", "mock calls: POST /v1/echoes reached the mock once "
                                          "during this item, the oracle expects >= 2"),
        "test_dropped": ("dropped", found["test_dropped"][1]),
        "test_refused": ("harness", "harness-side fault: connection refused reaching the "
                                    "service's proxy (after GET /health)"),
        "test_plain": ("assertion", "assertion failed: AssertionError: the plain reason "
                                    "(last call: GET /health → 200)"),
    }
    # the item spans alone say the same (what `anvil traces` shows under each item)
    from_spans = explain_trace(store.spans(evaluation_id))
    assert {e.nodeid.split("::")[1]: (e.kind, e.line) for e in from_spans} == found
    payload = found["test_mock_payload"][1]
    # the body the service sent, from the mock call's span under the item
    assert payload == ('mock call with the wrong payload: echo ← POST /v1/echoes sent '
                       '{"text": "HI"}: assert {\'text\': \'HI\'} == {\'text\': \'hi\'}'), payload
    assert found["test_dropped"][1].startswith(
        "the service answered nothing to GET /drop: "), found["test_dropped"]


def test_run_prints_the_first_explanations_and_the_trace_command(
        explained_run: tuple[Path, Any, str]) -> None:
    home, done, evaluation_id = explained_run
    lines = done.stderr.splitlines()
    items = [i for i, line in enumerate(lines) if line.startswith("  FAILED ")]
    assert len(items) == 8
    for at, expected in zip(items[:3], ["→ wrong status: expected 403, got 200",
                                        "→ response shape violation: ",
                                        "→ required mock call missing: "], strict=True):
        assert lines[at + 1].strip().startswith(expected), lines[at : at + 2]
    assert not lines[items[3] + 1].strip().startswith("→")  # only the first ones
    command = f"  trace: anvil traces {evaluation_id} --failed --home {home}"
    assert command in lines, done.stderr
    assert lines.index(command) > items[-1]


def test_the_trace_command_names_the_store_but_never_its_password(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from engine.cli._run import _traces_options

    monkeypatch.delenv("ANVIL_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert _traces_options((tmp_path / ".anvil").resolve(), None) == ""
    assert _traces_options(tmp_path / "my home", "postgresql://anvil:s3cret@db/anvil") == (
        f" --home '{tmp_path / 'my home'}' --db 'postgresql://anvil:***@db/anvil'")
