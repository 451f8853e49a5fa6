"""Teardown ends every process of a service, whatever session or process group it made."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import psutil
import pytest

from engine import ProcessRuntime
from engine._reaper import INSTANCE_VAR, alive, pids_marked, service_processes
from engine.types import BuildRequest, StartRequest

# The service double-forks a daemon that calls setsid() and sleeps: it leaves the
# service's process tree (reparented) and its process group and session.
SERVER = r'''
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

pid_file = os.path.join(os.environ["HOME"], "daemon.pid")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(pid_file + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        time.sleep(170)
    os._exit(0)
os.wait()
if os.environ.get("MODE") == "exit":
    sys.exit(4)  # the leader goes; its daemon lives on, reparented

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()

ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
'''


def _submission(tmp_path: Path, mode: str) -> Path:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "server.py").write_text(SERVER)
    (sub / "Dockerfile").write_text(f"FROM python:3.11-slim\nWORKDIR /app\nCOPY server.py .\n"
                                    f"ENV MODE={mode}\nCMD [\"python\", \"server.py\"]\n")
    return sub


async def _daemon_pid(workdir: Path) -> int:
    """The daemon's pid, once it wrote it (atomically, by rename): a condition, waited on
    with a deadline."""
    pid_file = workdir / "daemon.pid"
    with anyio.fail_after(10):
        while True:
            if pid_file.exists():
                return int(pid_file.read_text())
            await anyio.sleep(0.02)


@pytest.mark.parametrize("mode", ["serve", "exit"])
async def test_a_setsid_grandchild_is_gone_after_stop(tmp_path: Path, mode: str) -> None:
    sub = _submission(tmp_path, mode)
    work = tmp_path / "work"
    work.mkdir()
    daemon = 0
    try:
        async with ProcessRuntime(tmp_path / "cache") as runtime:
            art = await runtime.build(BuildRequest(submission=sub, workdir=work,
                                                   log_path=work / "build.log"))
            inst = await runtime.start(art, StartRequest(
                port=8000, env={"ANVIL_EVALUATION": "ev-reaper"}, workdir=work,
                log_path=work / "service.log", log_cap=10_000))
            daemon = await _daemon_pid(work)
            leader = inst.process.pid  # type: ignore[attr-defined]
            assert alive(daemon)
            # The leader made its own session (its pid is its session and group id); the
            # daemon made another one.
            assert os.getsid(daemon) not in (leader, os.getsid(0))
            assert os.getpgid(daemon) != leader
            assert psutil.Process(daemon).ppid() != leader  # reparented: not in the tree
            if mode == "exit":
                with anyio.fail_after(10):
                    assert (await inst.wait_exit()).returncode == 4
            # Found by its mark, whether the leader is still there or not.
            mark = dict(psutil.Process(daemon).environ())[INSTANCE_VAR]
            assert daemon in [p.pid for p in service_processes(leader, (INSTANCE_VAR, mark))]
            assert daemon in pids_marked("ANVIL_EVALUATION", "ev-reaper")  # the lifecycle's mark
            await runtime.stop(inst)
            assert not alive(daemon)
            assert pids_marked(INSTANCE_VAR, mark) == []
    finally:
        if daemon and alive(daemon):
            os.kill(daemon, 9)
