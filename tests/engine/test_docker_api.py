"""Docker API calls, build contexts and the image record: what needs no Docker daemon."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import threading
import tracemalloc
from pathlib import Path

import anyio
import pytest
from aiodocker.exceptions import DockerError

from engine import HarnessError
from engine.runtimes.docker import (
    call,
    forget_images,
    parse_size,
    recorded_images,
    touch_image,
    write_context,
)


async def test_a_hung_call_is_retried_then_reported_as_harness_error() -> None:
    attempts = 0

    async def hang() -> None:
        nonlocal attempts
        attempts += 1
        await anyio.sleep(60)

    with pytest.raises(HarnessError, match="hang failed 2 times: no answer within 0.1s"):
        await call("hang", hang, per_attempt=0.1)
    assert attempts == 2


async def test_a_server_error_is_retried_and_may_succeed() -> None:
    answers = iter([DockerError(500, "daemon busy"), "ok"])

    async def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await call("flaky", flaky) == "ok"


async def test_a_client_error_is_not_retried_and_reaches_the_caller() -> None:
    attempts = 0

    async def missing() -> None:
        nonlocal attempts
        attempts += 1
        raise DockerError(404, "no such image")

    with pytest.raises(DockerError):
        await call("missing", missing)
    assert attempts == 1


def _context(folder: Path, out: Path) -> tuple[list[str], str]:
    """Write the context of ``folder`` to the file ``out``: (names in the tar, sha256)."""
    with open(out, "wb") as fh:
        digest, size = write_context(folder, fh)
    assert size == out.stat().st_size
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest  # hashed as written
    return names, digest


def test_build_context_is_reproducible_and_honours_dockerignore(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (sub / "app.py").write_text("print(1)\n")
    (sub / "__pycache__").mkdir()
    (sub / "__pycache__" / "app.pyc").write_bytes(b"junk")
    first_names, first = _context(sub, tmp_path / "1.tar")
    (sub / "secret.env").write_text("X=1")
    (sub / ".dockerignore").write_text("secret.env\n")
    os.utime(sub / "app.py", (1, 1))  # mtimes do not matter
    names, _ = _context(sub, tmp_path / "2.tar")
    assert ".dockerignore" in names and "secret.env" not in names
    assert "__pycache__/app.pyc" not in names
    (sub / ".dockerignore").unlink()
    (sub / "secret.env").unlink()
    assert _context(sub, tmp_path / "3.tar") == (first_names, first)
    (sub / "app.py").chmod(0o755)  # the mode is part of what is built
    assert _context(sub, tmp_path / "4.tar")[1] != first


def test_a_large_context_is_streamed_not_held_in_memory(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (sub / "weights.bin").write_bytes(os.urandom(32 * 2**20))
    tracemalloc.start()
    try:
        with open(tmp_path / "ctx.tar", "wb") as out:
            _digest, size = write_context(sub, out)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 32 * 2**20
    assert peak < 2 * 2**20  # a buffer's worth, never the 32 MiB


def test_dockerignore_follows_dockers_rules(tmp_path: Path) -> None:
    files = ["Dockerfile", "app.py", "notes.md", "docs/README.md", "docs/guide.md",
             "docs/deep/more.md", "build/out.bin", "build/keep.txt", "build/sub/keep.txt",
             "pkg/mod.pyc", "pkg/sub/mod.pyc", "mod.pyc", "pkg/app.py", "src/notes.md",
             "data/a.csv", "data/b.csv"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / ".dockerignore").write_text(
        "# a comment\n"
        "/notes.md\n"           # anchored: src/notes.md stays
        "docs/*.md\n"           # one level: docs/deep/more.md stays
        "!docs/README.md\n"     # re-included: the last match wins
        "build\n"               # a folder: everything under it...
        "!build/keep.txt\n"     # ...but this
        "**/*.pyc\n"            # any depth, the top included
        "./data/\n"             # cleaned like Docker does: `data`
        "Dockerfile\n"          # the Dockerfile is sent whatever the file says
    )
    names = set(_context(tmp_path, tmp_path.parent / "ctx.tar")[0])
    kept = {n for n in files if n in names}
    assert kept == {"Dockerfile", "app.py", "docs/README.md", "docs/deep/more.md",
                    "build/keep.txt", "pkg/app.py", "src/notes.md"}
    assert ".dockerignore" in names and "docs" in names and "data" not in names


def test_build_context_holds_symlinks_as_links_and_reads_nothing_outside(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"x" * 100_000)
    sub = tmp_path / "sub"
    (sub / "d").mkdir(parents=True)
    (sub / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (sub / "link-out").symlink_to(outside)
    (sub / "d" / "up").symlink_to("..")  # a loop, if followed
    (sub / "dangling").symlink_to(tmp_path / "nowhere")
    with open(tmp_path / "ctx.tar", "wb") as fh:
        _digest, size = write_context(sub, fh)
    assert size < 20_000  # nothing of outside/big.bin
    with tarfile.open(tmp_path / "ctx.tar") as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {"link-out": str(outside), "d/up": "..", "dangling": str(tmp_path / "nowhere")}


def test_writing_the_context_to_a_full_disk_is_the_harness_fault(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\n")
    with open("/dev/full", "wb", buffering=0) as full, \
            pytest.raises(HarnessError, match="writing the build context failed"):
        write_context(tmp_path, full)


_HAMMER = """
import sys
from pathlib import Path
from engine.runtimes.docker import touch_image
cache, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(count):
    touch_image(cache, f"anvil-build:{prefix}{i}")
"""


def test_image_record_keeps_every_entry_when_two_anvils_write_at_once(tmp_path: Path) -> None:
    cache, count = tmp_path / "cache", 150
    procs = [subprocess.Popen([sys.executable, "-c", _HAMMER, str(cache), name, str(count)])
             for name in ("a", "b")]
    try:
        # ...and threads of this process, at the same time.
        threads = [threading.Thread(target=lambda n=n: [
            touch_image(cache, f"anvil-build:{n}{i}") for i in range(count)]) for n in "cd"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    recorded = recorded_images(cache)
    assert set(recorded) == {f"anvil-build:{n}{i}" for n in "abcd" for i in range(count)}
    assert not list(cache.glob("*.tmp"))
    forget_images(cache, [f"anvil-build:a{i}" for i in range(count)])
    assert set(recorded_images(cache)) == {f"anvil-build:{n}{i}" for n in "bcd"
                                           for i in range(count)}


@pytest.mark.parametrize(("text", "size"), [("10G", 10 * 2**30), ("500M", 500 * 2**20),
                                            ("1.5GB", int(1.5 * 2**30)), ("1024", 1024),
                                            ("2GiB", 2 * 2**30)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size
