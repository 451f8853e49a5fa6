"""Docker API calls: a deadline per attempt, one retry, then a harness error."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import anyio
import pytest
from aiodocker.exceptions import DockerError

from engine import HarnessError
from engine.runtimes.docker import build_context, call, parse_size


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


def test_build_context_is_reproducible_and_honours_dockerignore(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "app.pyc").write_bytes(b"junk")
    first, digest = build_context(tmp_path)
    (tmp_path / "secret.env").write_text("X=1")
    (tmp_path / ".dockerignore").write_text("secret.env\n")
    os.utime(tmp_path / "app.py", (1, 1))  # mtimes do not matter
    again, digest_again = build_context(tmp_path)
    names = tarfile.open(fileobj=io.BytesIO(again)).getnames()
    assert ".dockerignore" in names and "secret.env" not in names
    assert "__pycache__/app.pyc" not in names
    (tmp_path / ".dockerignore").unlink()
    (tmp_path / "secret.env").unlink()
    assert build_context(tmp_path) == (first, digest)


@pytest.mark.parametrize(("text", "size"), [("10G", 10 * 2**30), ("500M", 500 * 2**20),
                                            ("1.5GB", int(1.5 * 2**30)), ("1024", 1024),
                                            ("2GiB", 2 * 2**30)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size
