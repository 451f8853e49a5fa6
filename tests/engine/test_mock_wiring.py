"""The mock fabric wired into evaluations: each gets its own instances, the service reaches
them from its process or container and the oracle from the host, teardown stops them, and a
task whose mocks cannot be served is refused before any evaluation starts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Evaluation, InputError, Task, Verdict, load_task, plan
from engine._mocks import MockAttachment, MockFabric, instance_names
from tests.conftest import FIXTURES, run_engine

SERVICE = '''
import json
import os
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ECHO = os.environ.get("ECHO_URL")
if not ECHO:
    print("ECHO_URL is not set", flush=True)
    sys.exit(3)
if os.environ.get("MODE") == "crash":
    sys.exit(4)


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
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path == "/config":
            return self._send(200, {"echo_url": ECHO})
        return self._send(404, {"detail": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = urllib.request.Request(ECHO + "/v1/echoes", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            echo = json.loads(answer.read())
        return self._send(201, {"note": echo["id"]})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

DOCKERFILE = '''FROM python:3.11-slim
WORKDIR /srv/app
COPY server.py .
ENV MODE=ok
EXPOSE 8000
CMD ["python", "server.py"]
'''

ORACLE = '''
import json
import os
from urllib.parse import urlsplit

import pytest
import requests

BASE = os.environ["BASE_URL"]


@pytest.mark.category("side_effects")
def test_a_note_goes_through_the_mock(echo):
    answer = requests.post(BASE + "/notes", json={"text": "hi"}, timeout=10)
    assert answer.status_code == 201, answer.text
    note = answer.json()["note"]
    (call,) = echo.requests("POST", "/v1/echoes")
    assert json.loads(call["body"]) == {"text": "hi"}
    assert call["item"] == "test_notes.py::test_a_note_goes_through_the_mock"
    assert json.loads(call["response"])["id"] == note
    # the oracle reaches the same instance by itself, through the provider's own API
    got = requests.get(os.environ["ECHO_URL"] + "/v1/echoes/" + note, timeout=5)
    assert got.status_code == 200 and got.json()["body"] == {"text": "hi"}


@pytest.mark.category("isolation")
def test_this_evaluation_sees_only_its_own_calls(echo, mocks):
    calls = echo.requests(item=None)
    assert [c["method"] for c in calls] == ["POST", "GET"]
    assert list(mocks) == ["echo"] and mocks["echo"].url == os.environ["ECHO_URL"]


@pytest.mark.category("isolation")
def test_the_admin_surface_wants_this_evaluations_token(echo):
    assert os.environ["ECHO_URL_TOKEN"] == echo.token
    wrong = requests.get(echo.url + "/__mock__/journal", headers={"X-Mock-Token": "no"},
                         timeout=5)
    assert wrong.status_code == 401


@pytest.mark.category("wiring")
def test_the_service_was_given_the_same_instance():
    given = urlsplit(requests.get(BASE + "/config", timeout=5).json()["echo_url"])
    mine = urlsplit(os.environ["ECHO_URL"])
    assert given.port == mine.port
    assert given.hostname == os.environ.get("EXPECT_SERVICE_HOST", "127.0.0.1")
'''


def _submission(root: Path, name: str, mode: str = "ok") -> Path:
    folder = root / "submissions" / name
    folder.mkdir(parents=True)
    (folder / "server.py").write_text(SERVICE)
    (folder / "Dockerfile").write_text(DOCKERFILE.replace("MODE=ok", f"MODE={mode}"))
    return folder


def _task(root: Path, mocks: str = '[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n') -> Task:
    folder = root / "notes-task"
    shutil.copytree(FIXTURES / "tiny_task", folder)
    for item in (folder / "oracle").glob("test_*.py"):
        item.unlink()
    (folder / "oracle" / "test_notes.py").write_text(ORACLE)
    toml = (folder / "task.toml").read_text().replace('id = "tiny"', 'id = "notes"')
    (folder / "task.toml").write_text(toml + "\n" + mocks)
    return load_task(folder)


def _closed(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


@pytest.fixture(params=["process", "docker"])
def runtime_name(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_ready")
    return str(request.param)


async def test_each_evaluation_gets_its_own_instances_reached_by_service_and_oracle(
    runtime_name: str, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a container reaches the host by its alias; the oracle, on the host, by the address
    monkeypatch.setenv("EXPECT_SERVICE_HOST",
                       "host.docker.internal" if runtime_name == "docker" else "127.0.0.1")
    task = _task(tmp_path)
    subs = [_submission(tmp_path, "one"), _submission(tmp_path, "two")]
    attached: list[MockAttachment] = []
    async with MockFabric() as fabric:

        def attach(evaluation: Evaluation) -> MockAttachment | None:
            attachment = fabric.attach(evaluation)
            assert attachment is not None
            attached.append(attachment)
            return attachment

        results, _, _ = await run_engine([(task, s) for s in subs], tmp_path, cache_dir,
                                         concurrency=2, runtime=runtime_name,
                                         attachments=[attach])
        assert [r.verdict for r in results] == [Verdict.PASS, Verdict.PASS], \
            [r.reason for r in results]
        assert fabric.host.running == 0  # every instance stopped at its teardown
    assert len(attached) == 2
    ((_, _, one),), ((_, _, two),) = attached[0].hosted, attached[1].hosted
    assert one.url != two.url and one.token != two.token
    assert one.app.seed != two.app.seed  # seeded from the evaluation id
    # bound where the runtime's services reach: loopback, or the bridge gateway (never 0.0.0.0)
    assert one.url.startswith("http://127.0.0.1:") == (runtime_name == "process")
    assert "0.0.0.0" not in one.url
    assert _closed(one.url) and _closed(two.url)
    # what the service sent is in each instance's own journal, attributed to the item
    for hosted in (one, two):
        posts = hosted.app.journal.select("POST")
        assert [e["item"] for e in posts] == ["test_notes.py::test_a_note_goes_through_the_mock"]


async def test_instances_are_stopped_when_the_service_crashes(
    tmp_path: Path, cache_dir: Path
) -> None:
    task = _task(tmp_path)
    attached: list[MockAttachment] = []
    async with MockFabric() as fabric:

        def attach(evaluation: Evaluation) -> MockAttachment | None:
            attachment = fabric.attach(evaluation)
            assert attachment is not None
            attached.append(attachment)
            return attachment

        (result,), _, _ = await run_engine([(task, _submission(tmp_path, "c", "crash"))],
                                           tmp_path, cache_dir, attachments=[attach])
        assert result.verdict is Verdict.FAIL and result.phase is not None
        assert result.phase.value == "startup"
        assert fabric.host.running == 0
    (_, _, hosted), = attached[0].hosted
    assert _closed(hosted.url)


async def test_a_task_without_mocks_gets_no_attachment(tmp_path: Path) -> None:
    task = load_task(FIXTURES / "tiny_task")
    async with MockFabric() as fabric:
        evaluation = Evaluation("r", "r.0", task, tmp_path, tmp_path)
        assert fabric.attach(evaluation) is None


def test_instances_are_named_by_kind_or_by_env_when_a_kind_repeats(tmp_path: Path) -> None:
    task = _task(tmp_path, '[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n'
                           '[[mocks]]\nkind = "echo"\nenv = "AUDIT_URL"\n'
                           '[[mocks]]\nkind = "payment"\nenv = "PAYMENT_URL"\n')
    assert instance_names(task.config.mocks) == ["echo_url", "audit_url", "payment"]


def test_plan_refuses_an_uninstalled_kind_before_any_evaluation(tmp_path: Path) -> None:
    task = _task(tmp_path, '[[mocks]]\nkind = "weather"\nenv = "WEATHER_URL"\n')
    sub = _submission(tmp_path, "one")
    with pytest.raises(InputError) as caught:
        plan([task.root], sub)
    message = str(caught.value)
    assert "kind = 'weather'" in message and "no installed distribution provides" in message
    assert '[project.entry-points."anvil.mocks"]' in message


def test_plan_refuses_an_unknown_scenario(tmp_path: Path) -> None:
    task = _task(tmp_path, '[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\nscenario = "nope"\n')
    with pytest.raises(InputError, match="mock 'echo' has no scenario 'nope'"):
        plan([task.root], _submission(tmp_path, "one"))


def _anvil(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_anvil_run_refuses_the_task_and_starts_nothing(tmp_path: Path) -> None:
    task = _task(tmp_path, '[[mocks]]\nkind = "weather"\nenv = "WEATHER_URL"\n')
    sub = _submission(tmp_path, "one")
    home = tmp_path / "home"
    done = _anvil("run", str(task.root), "-s", str(sub), "--runtime", "process",
                  "--home", str(home), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "weather" in done.stderr and "anvil.mocks" in done.stderr
    assert not (home / "runs").exists()  # no evaluation started, no run recorded


def test_anvil_verify_serves_the_task_mocks(tmp_path: Path, cache_dir: Path) -> None:
    task = _task(tmp_path)
    done = _anvil("verify", str(task.root), str(_submission(tmp_path, "one")),
                  "--runtime", "process", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert done.stdout.strip() == "SELF_VERIFY_PASS", done.stdout + done.stderr
    assert done.returncode == 0

