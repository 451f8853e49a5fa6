"""Venv builds: whose fault a failed pip step is, and the venv cache's LRU garbage collection.

The package index is real: a PEP 503 simple index served on 127.0.0.1 by this test
(one project, ``anvil-probe``), an index answering 503, or a closed port.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from engine import BuildFailed, HarnessError, ProcessRuntime, Verdict
from engine.runtimes.process import PreparedService, gc_venvs
from engine.runtimes.process._venv import COMPLETE
from engine.types import BuildRequest, StartRequest
from tests.conftest import MakeSubmission, run_engine


def _wheel() -> tuple[str, bytes]:
    name = "anvil_probe-1.0-py3-none-any.whl"
    files = {
        "anvil_probe/__init__.py": b"VALUE = 42\n",
        "anvil_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: anvil-probe\n"
                                              b"Version: 1.0\n",
        "anvil_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: anvil-test\n"
                                           b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("anvil_probe-1.0.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr("anvil_probe-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return name, buffer.getvalue()


class _Index(BaseHTTPRequestHandler):
    status = 200
    wheel = _wheel()

    def do_GET(self) -> None:
        name, data = self.wheel
        digest = hashlib.sha256(data).hexdigest()
        pages = {
            "/simple/": b'<a href="anvil-probe/">anvil-probe</a>',
            "/simple/anvil-probe/": f'<a href="/files/{name}#sha256={digest}">{name}</a>'
                                    .encode(),
            f"/files/{name}": data,
        }
        body = pages.get(self.path)
        status = self.status if self.status != 200 else (200 if body is not None else 404)
        body = body if status == 200 and body is not None else b"not here"
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if "simple" in self.path
                         else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(status: int) -> Iterator[str]:
    handler = type("Handler", (_Index,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def pip_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """pip sees only the index a test names: no machine config, no retries, no cache."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return monkeypatch


@pytest.fixture
def index(pip_env: pytest.MonkeyPatch) -> Iterator[str]:
    for url in _serve(200):
        pip_env.setenv("PIP_INDEX_URL", url)
        yield url


def _requiring(make_submission: MakeSubmission, requirement: str) -> Path:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /srv/app\n"
        f"RUN pip install --no-cache-dir {requirement}\n"
        "COPY server.py .\nCMD [\"python\", \"server.py\"]\n")
    return sub


async def _build(runtime: ProcessRuntime, sub: Path, work: Path) -> PreparedService:
    work.mkdir(parents=True, exist_ok=True)
    art = await runtime.build(BuildRequest(submission=sub, workdir=work,
                                           log_path=work / "build.log"))
    assert isinstance(art, PreparedService)
    return art


async def test_a_requirement_missing_from_a_reachable_index_is_the_candidates_fail(
    index: str, make_submission: MakeSubmission, tmp_path: Path
) -> None:
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        # The index works: the project it has installs.
        art = await _build(runtime, _requiring(make_submission, "anvil-probe"), tmp_path / "a")
        assert art.venv is not None
        check = [str(art.venv / "bin" / "python"), "-c", "import anvil_probe as p; print(p.VALUE)"]
        assert (await anyio.run_process(check)).stdout == b"42\n"
        with pytest.raises(BuildFailed) as info:
            await _build(runtime, _requiring(make_submission, "anvil-no-such-project"),
                         tmp_path / "b")
    reason = str(info.value)
    assert "Dockerfile:3: `pip install` failed (1)" in reason
    assert "No matching distribution found for anvil-no-such-project" in reason
    assert "\n" not in reason


@pytest.mark.parametrize("server", ["closed port", "503"])
async def test_an_index_that_cannot_be_reached_is_a_transient_harness_error(
    server: str, pip_env: pytest.MonkeyPatch, make_submission: MakeSubmission, tmp_path: Path
) -> None:
    async def build() -> None:
        async with ProcessRuntime(tmp_path / "cache") as runtime:
            await _build(runtime, _requiring(make_submission, "anvil-probe"), tmp_path / "w")

    if server == "503":
        for url in _serve(503):
            pip_env.setenv("PIP_INDEX_URL", url)
            with pytest.raises(HarnessError) as info:
                await build()
        assert "503" in str(info.value)
    else:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        pip_env.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
        with pytest.raises(HarnessError) as info:
            await build()
        assert "Connection refused" in str(info.value)
    assert info.value.transient
    assert "Dockerfile:3: `pip install` could not reach the package index" in str(info.value)
    assert not list((tmp_path / "cache" / "venvs").glob(f"*/{COMPLETE}"))


async def test_an_unreachable_index_is_an_error_verdict_not_a_fail(
    pip_env: pytest.MonkeyPatch, tiny_task, make_submission: MakeSubmission,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    for url in _serve(503):
        pip_env.setenv("PIP_INDEX_URL", url)
        (result,), _, _ = await run_engine(
            [(tiny_task, _requiring(make_submission, "anvil-probe"))], tmp_path,
            tmp_path / "cache", retry_delay=0)
    assert (result.verdict, result.phase) == (Verdict.ERROR, "build"), result.reason
    assert "could not reach the package index" in result.reason


async def test_a_venv_that_cannot_be_created_is_a_harness_error(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    sub = _requiring(make_submission, "anvil-probe")
    async with ProcessRuntime(tmp_path / "c1", python="/nonexistent/python3") as runtime:
        with pytest.raises(HarnessError, match="python -m venv.*No such file"):
            await _build(runtime, sub, tmp_path / "a")
    blocked = tmp_path / "c2"
    blocked.mkdir()
    (blocked / "venvs").write_text("a file where the venvs folder goes")
    async with ProcessRuntime(blocked) as runtime:
        with pytest.raises(HarnessError, match="create the venv"):
            await _build(runtime, sub, tmp_path / "b")


async def test_a_full_disk_is_a_harness_error(make_submission: MakeSubmission,
                                              tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does."""
    sub = make_submission("ok")
    (sub / "requirements.txt").write_text("# nothing\n")
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY . .\n"
                                    "RUN pip install -r requirements.txt\n"
                                    "CMD [\"python\", \"server.py\"]\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        with pytest.raises(HarnessError) as info:
            await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                             log_path=Path("/dev/full")))
    assert "No space left on device" in str(info.value) and "ENOSPC" in str(info.value)
    assert info.value.transient


# -- the venv cache: leases and LRU garbage collection -------------------------------


def _submission_with(make_submission: MakeSubmission, marker: str) -> Path:
    """A submission whose venv is its own (the requirements file differs), quick to build."""
    sub = make_submission("ok")
    (sub / "requirements.txt").write_text(f"# {marker}\n")
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\nCOPY . .\n"
                                    "RUN pip install -r requirements.txt\n"
                                    "CMD [\"python\", \"server.py\"]\n")
    return sub


def _size(path: Path) -> int:
    return sum(os.lstat(os.path.join(d, n)).st_blocks * 512
               for d, dirs, files in os.walk(path) for n in dirs + files)


async def test_gc_removes_least_recently_used_venvs_first_and_never_one_in_use(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    subs = {name: _submission_with(make_submission, name) for name in ("a", "b", "c", "d")}
    async with ProcessRuntime(cache) as runtime:
        arts = {}
        for name in ("a", "b", "c", "d"):
            arts[name] = await _build(runtime, subs[name], tmp_path / name)
        for name in ("b", "c", "d"):
            await runtime.release(arts[name])
        await runtime.release(arts["a"])
        arts["a2"] = await _build(runtime, subs["a"], tmp_path / "a2")  # a hit: a is used last
        venv = {n: arts[n].venv for n in "abcd"}
        assert arts["a2"].venv == venv["a"]
        await runtime.release(arts["a2"])
        held = await _build(runtime, subs["b"], tmp_path / "b2")  # b is in use from now on

        budget = _size(venv["a"]) + _size(venv["b"]) + 1
        removed = await anyio.to_thread.run_sync(gc_venvs, cache, budget)
        # c and d were least recently used; b is older still, but in use.
        assert removed == [venv["c"], venv["d"]]
        assert all(venv[n] and (venv[n] / COMPLETE).exists() for n in "ab")  # type: ignore[operator]

        assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == [venv["a"]]
        assert (venv["b"] / COMPLETE).exists()  # type: ignore[operator]
        await runtime.release(held)
        assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == [venv["b"]]
    assert not [p for p in (cache / "venvs").iterdir() if p.is_dir()]


async def test_gc_spares_a_venv_another_anvil_holds_and_one_that_is_being_built(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    async with ProcessRuntime(cache) as runtime:
        art = await _build(runtime, _submission_with(make_submission, "x"), tmp_path / "x")
        await runtime.release(art)
    assert art.venv is not None
    lock = art.venv.parent / f"{art.venv.name}.lock"
    half_built = art.venv.parent / "0123456789abcdef"  # a build that died midway: no marker
    half_built.mkdir()
    (half_built / "junk").write_bytes(b"x" * 10_000)
    for mode in ("LOCK_SH", "LOCK_EX"):  # a lease of another anvil; another anvil building
        code = (f"import fcntl, os, sys; fd = os.open({str(lock)!r}, os.O_RDWR); "
                f"fcntl.flock(fd, fcntl.{mode}); print('held', flush=True); sys.stdin.read()")
        async with await anyio.open_process([sys.executable, "-c", code]) as holder:
            try:
                assert holder.stdout is not None
                with anyio.fail_after(10):
                    line = await BufferedByteReceiveStream(holder.stdout).receive_until(b"\n", 99)
                assert line == b"held"
                removed = await anyio.to_thread.run_sync(gc_venvs, cache, 0)
                assert art.venv.is_dir() and (art.venv / COMPLETE).exists()
                assert removed == ([half_built] if mode == "LOCK_SH" else [])
            finally:
                holder.kill()
    assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == [art.venv]


async def test_two_runtimes_share_a_venv_and_a_gc_between_them_cannot_break_it(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    sub = _submission_with(make_submission, "shared")
    async with ProcessRuntime(cache) as one, ProcessRuntime(cache) as two:
        first = await _build(one, sub, tmp_path / "1")
        assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == []
        second = await _build(two, sub, tmp_path / "2")
        assert first.venv == second.venv
        await one.release(first)
        assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == []  # two still holds it
        await two.release(second)
        assert await anyio.to_thread.run_sync(gc_venvs, cache, 0) == [first.venv]


async def test_stop_removes_the_evaluation_root_and_keeps_its_logs(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await _build(runtime, make_submission("ok"), work)
        assert (art.workdir / "server.py").is_file()
        inst = await runtime.start(art, StartRequest(port=8000, env={}, workdir=work,
                                                     log_path=work / "service.log",
                                                     log_cap=10_000))
        with anyio.fail_after(10):
            await inst.wait_listening()
        await runtime.stop(inst)
        assert not art.root.exists()
        assert (work / "build.log").read_text() and (work / "service.log").exists()
        assert art.lease is not None and not art.lease.held


async def test_two_anvils_building_one_venv_at_once_build_it_once(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    """Two runtimes (separate cache objects, like two anvil processes) agree through flock."""
    cache = tmp_path / "cache"
    sub = _submission_with(make_submission, "raced")
    arts: dict[str, PreparedService] = {}
    async with ProcessRuntime(cache) as one, ProcessRuntime(cache) as two:
        async with anyio.create_task_group() as tg:
            for name, runtime in (("1", one), ("2", two)):

                async def build(name: str = name, runtime: ProcessRuntime = runtime) -> None:
                    arts[name] = await _build(runtime, sub, tmp_path / name)

                tg.start_soon(build)
        assert arts["1"].venv == arts["2"].venv
        logs = [(tmp_path / n / "build.log").read_text() for n in ("1", "2")]
        assert sum("creating" in log for log in logs) == 1
        assert sum("cache hit" in log for log in logs) == 1
