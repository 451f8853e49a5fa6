"""`anvil run --executor ray` against a cluster started the way a lab starts one.

``ray start --head`` in a temporary folder of its own (one node, one CPU, two
``anvil_slot``), then the real CLI in a subprocess with ``--ray-address``. The cluster is
stopped by the ids of its own processes: ``ray stop`` would end every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")

from engine import Store, Task  # noqa: E402
from tests.conftest import MakeSubmission  # noqa: E402

RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cluster_processes(temp: Path, port: int) -> list[psutil.Process]:
    """The processes of the cluster whose folder is ``temp`` and whose GCS is at ``port``,
    with their children (each names one or the other on its command line)."""
    marks = (str(temp), f":{port}")
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or ())
        if any(mark in line for mark in marks):
            found[proc.pid] = proc
            try:
                found.update({c.pid: c for c in proc.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
    found.pop(os.getpid(), None)
    return list(found.values())


@contextmanager
def ray_head(temp: Path, env: dict[str, str]) -> Iterator[str]:
    """``ray start --head`` with two slots; its address; its processes ended on exit."""
    port = _free_port()
    try:
        subprocess.run(
            [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=1",
             "--resources", json.dumps({"anvil_slot": 2}), f"--temp-dir={temp}",
             "--include-dashboard=false", "--disable-usage-stats",
             f"--ray-client-server-port={_free_port()}"],
            env=env, check=True, capture_output=True, text=True, timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        procs = _cluster_processes(temp, port)
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        assert not alive, f"cluster processes still running: {alive}"


def test_anvil_run_on_a_cluster_started_with_ray_start(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    submissions = [make_submission(mode) for mode in ("ok", "fail_item", "ok")]
    home = tmp_path / "home"
    env = {**os.environ, "ANVIL_CACHE": str(cache_dir)}
    env.pop("RAY_ADDRESS", None)
    # Short: Ray's sockets live under it, and a socket's path has at most 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="anvil-ray-", dir="/tmp"))
    try:
        with ray_head(temp, env) as address:
            done = subprocess.run(
                [sys.executable, "-m", "engine", "run", str(tiny_task.root),
                 "--submissions", str(submissions[0].parent), "--runtime", "process",
                 "--executor", "ray", "--ray-address", address, "--json",
                 "--home", str(home)],
                env=env, capture_output=True, text=True, timeout=90, check=False)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    verdicts = {Path(line["submission"]).name: line["verdict"] for line in lines}
    assert verdicts == {s.name: "fail" if "fail_item" in s.name else "pass"
                        for s in submissions}
    # `node`: the host that ran it (one node here); `ray start`'s host is this machine
    nodes = {line["node"] for line in lines}
    assert len(nodes) == 1 and nodes.pop().startswith(f"{socket.gethostname()}/")
    # The node traced each evaluation into the driver's store (one filesystem here).
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    try:
        for line in lines:
            names = {s.name for s in store.spans(line["evaluation_id"])}
            assert {"evaluation", "build", "oracle", "teardown"} <= names, line
    finally:
        store.close()
