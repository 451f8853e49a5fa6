"""The oracle-side pytest plugin (``-p mocks._fixtures``), in a real pytest process against
real instances: fixtures by instance name, journal per item, clock, faults."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from mocks import MockHost
from mocks.echo import EchoMock

ORACLE = '''
import json

import pytest
import requests

from mocks._fixtures import MockClient, MockError


def test_a_named_fixture_sees_the_calls_of_this_item(echo):
    requests.post(echo.url + "/v1/echoes", json={"from": "item one"}, timeout=5)
    (call,) = echo.requests("POST", "/v1/echoes")
    assert json.loads(call["body"]) == {"from": "item one"} and call["status"] == 201
    assert call["item"] == "test_oracle.py::test_a_named_fixture_sees_the_calls_of_this_item"


def test_only_this_item_by_default(echo):
    assert echo.requests() == []
    assert [c["path"] for c in echo.requests(item=None)] == ["/v1/echoes"]
    assert echo.journal(item=None)["dropped"] == 0


def test_clock_faults_and_events(echo):
    assert echo.now() == 1767225600
    assert echo.advance(60) == 1767225660
    (armed,) = echo.fault("/v1/echoes", "POST", status=503, times=1)
    assert armed["status"] == 503
    assert requests.post(echo.url + "/v1/echoes", json={}, timeout=5).status_code == 503
    (call,) = echo.requests("POST")
    assert call["fault"] == "status" and call["time"] == 1767225660
    requests.post(echo.url + "/v1/notify", data=b"x", timeout=5)
    assert echo.events() == [{"type": "notified", "body": "x"}]
    echo.fault(status=500)
    echo.clear_faults()
    assert requests.get(echo.url + "/v1/echoes", timeout=5).status_code == 200


def test_the_mocks_mapping_has_every_instance(mocks, echo):
    assert sorted(mocks) == ["echo", "other"] and len(mocks) == 2
    assert mocks["echo"].url == echo.url and mocks["other"].url != echo.url
    assert mocks["other"].kind == "echo" and mocks["other"].env == "OTHER_URL"
    with pytest.raises(KeyError, match="instances: echo, other"):
        mocks["nope"]


def test_a_wrong_token_is_an_assertion_with_the_answer(echo):
    intruder = MockClient({"name": "echo", "url": echo.url, "token": "wrong"})
    with pytest.raises(MockError, match="answered 401"):
        intruder.journal()


def test_seed_and_reset(other):
    other.seed("preloaded")
    assert len(requests.get(other.url + "/v1/echoes", timeout=5).json()["data"]) == 1
    other.reset()
    assert requests.get(other.url + "/v1/echoes", timeout=5).json()["data"] == []
'''


async def test_oracle_fixtures_reach_the_evaluation_instances(tmp_path: Path) -> None:
    (tmp_path / "test_oracle.py").write_text(ORACLE)
    async with MockHost() as host:
        echo = await host.start(EchoMock, instance="echo", seed="s")
        other = await host.start(EchoMock, instance="other", seed="s")
        described = [
            {"name": "echo", "kind": "echo", "env": "ECHO_URL", "url": echo.url,
             "token": echo.token, "scenario": "default"},
            {"name": "other", "kind": "echo", "env": "OTHER_URL", "url": other.url,
             "token": other.token, "scenario": "default"},
        ]
        env = {k: v for k, v in os.environ.items() if k != "ANVIL_RESULTS"}
        env.update({"ANVIL_MOCKS": json.dumps(described), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        done = await anyio.run_process(
            [sys.executable, "-m", "pytest", str(tmp_path), "-p", "mocks._fixtures",
             "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), "-c", os.devnull,
             "-W", "error"],
            env=env, cwd=tmp_path, check=False)
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output
    assert "6 passed" in output


async def test_without_mocks_the_mapping_is_empty(tmp_path: Path) -> None:
    (tmp_path / "test_none.py").write_text("def test_none(mocks):\n    assert dict(mocks) == {}\n")
    env = {k: v for k, v in os.environ.items() if k != "ANVIL_MOCKS"}
    done = await anyio.run_process(
        [sys.executable, "-m", "pytest", str(tmp_path), "-p", "mocks._fixtures",
         "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), "-c", os.devnull],
        env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout.decode()
