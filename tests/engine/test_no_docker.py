"""A machine where Docker was never installed, reproduced for real: a private mount
namespace with an empty /run hides every Docker socket, and DOCKER_HOST is unset."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, MakeSubmission

HIDE_DOCKER = "mount -t tmpfs tmpfs /run && exec \"$@\""


def without_docker(*argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
                   timeout: float = 240) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to hide the Docker socket")
    clean = {k: v for k, v in (env or os.environ).items() if k != "DOCKER_HOST"}
    clean.pop("ANVIL_REQUIRE_DOCKER", None)
    return subprocess.run(["unshare", "-m", "sh", "-c", HIDE_DOCKER, "sh", *argv],
                          capture_output=True, text=True, cwd=cwd, env=clean, timeout=timeout)


def test_the_namespace_really_hides_docker() -> None:
    code = ("from engine.runtimes.docker._client import docker_host; "
            "print(docker_host())")
    seen = without_docker(sys.executable, "-c", code)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == "None"


def test_run_auto_falls_back_to_the_process_runtime_and_says_why(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    sub = make_submission("ok")
    env = {**os.environ, "ANVIL_CACHE": str(cache_dir)}
    result = without_docker(sys.executable, "-m", "engine", "run", str(FIXTURES / "tiny_task"),
                            "--submissions", str(sub), "--home", str(tmp_path / "home"),
                            env=env)
    assert result.returncode == 0, result.stderr
    assert "runtime: process (auto: docker: no Docker here" in result.stderr
    assert "Traceback" not in result.stderr and "AssertionError" not in result.stderr
    assert "pass" in result.stderr


def test_run_docker_without_docker_is_one_clear_line(tmp_path: Path) -> None:
    result = without_docker(sys.executable, "-m", "engine", "run", str(FIXTURES / "tiny_task"),
                            "--submissions", str(tmp_path), "--runtime", "docker",
                            "--home", str(tmp_path / "home"))
    assert result.returncode == 3  # ExitCode.ERROR: anvil cannot judge here
    assert "no Docker here" in result.stderr and "Traceback" not in result.stderr


def test_docker_tests_skip_saying_why() -> None:
    result = without_docker(sys.executable, "-m", "pytest", "-q", "-rs",
                            "-p", "no:cacheprovider", "tests/engine/test_docker_api.py",
                            "tests/engine/test_docker_runtime.py")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "skipped" in result.stdout and "failed" not in result.stdout
    assert "no Docker" in result.stdout
