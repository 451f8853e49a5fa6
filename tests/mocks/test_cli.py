"""``anvil mocks list`` and ``anvil mocks serve`` as a user runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

ENV = {**os.environ, "COLUMNS": "200"}


def _anvil(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], env=ENV,
                          capture_output=True, text=True, timeout=60)


@contextmanager
def _serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """``anvil mocks serve ARGS``; yields the process and what it printed before serving."""
    with subprocess.Popen([sys.executable, "-m", "engine", "mocks", "serve", *args], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            printed: dict[str, str] = {}
            for line in proc.stdout:  # the ANVIL_MOCKS line comes last, once it answers
                if line.startswith("export ANVIL_MOCKS="):
                    printed.update(json.loads(line.split("=", 1)[1].strip().strip("'"))[0])
                    break
            assert printed, proc.stderr.read()
            yield proc, printed
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def test_mocks_list_shows_every_installed_kind_and_its_scenarios() -> None:
    done = _anvil("mocks", "list")
    assert done.returncode == 0, done.stderr
    echo = next(line for line in done.stdout.splitlines() if " echo " in line)
    assert "default, preloaded" in echo and "mocks.echo:EchoMock" in echo
    assert "anvil-harness" in echo


def test_mocks_serve_answers_deterministically_and_stops_on_sigint() -> None:
    ids = []
    for _ in range(2):
        with _serving("echo", "--seed", "demo", "--scenario", "preloaded") as (proc, mock):
            assert mock["url"].startswith("http://127.0.0.1:") and mock["scenario"] == "preloaded"
            listed = requests.get(mock["url"] + "/v1/echoes", timeout=5).json()["data"]
            ids.append([e["id"] for e in listed])
            journal = requests.get(mock["url"] + "/__mock__/journal", timeout=5,
                                   headers={"X-Mock-Token": mock["token"]})
            assert journal.status_code == 200 and len(journal.json()["entries"]) == 1
            assert requests.get(mock["url"] + "/__mock__/journal", timeout=5).status_code == 401
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 0
            port = int(mock["url"].rsplit(":", 1)[1])
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", port)) != 0
    assert ids[0] == ids[1] and len(ids[0]) == 1  # same seed, same ids


def test_mocks_serve_takes_a_port_and_a_token(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _serving("echo", "--port", str(port), "--token", "t0k") as (proc, mock):
        assert mock["url"] == f"http://127.0.0.1:{port}" and mock["token"] == "t0k"
        assert requests.get(mock["url"] + "/__mock__/clock", timeout=5,
                            headers={"Authorization": "Bearer t0k"}).json() == {
            "now": 1_767_225_600}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_mocks_serve_refuses_unknown_kinds_and_scenarios() -> None:
    done = _anvil("mocks", "serve", "weather")
    assert done.returncode == 2
    assert "'weather'" in done.stderr and "anvil.mocks" in done.stderr
    done = _anvil("mocks", "serve", "echo", "--scenario", "nope")
    assert done.returncode == 2 and "no scenario 'nope'" in done.stderr
