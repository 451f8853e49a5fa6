"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import pytest

from engine import (
    EvaluationFinished,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
    load_task,
)
from engine.runtimes.docker import PRIMARY, SCOPE_ENV, DockerRuntime, docker_client

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "engine" / "fixtures"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv cache for the session: each distinct requirements set is built once."""
    path = Path(os.environ.get("ANVIL_TEST_CACHE") or tmp_path_factory.mktemp("anvil-cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def tiny_task() -> Task:
    return load_task(FIXTURES / "tiny_task")


MakeSubmission = Callable[..., Path]


@pytest.fixture
def make_submission(tmp_path: Path) -> MakeSubmission:
    """Copy the stdlib tiny service into a new submission whose MODE is ``mode``."""
    counter = iter(range(1_000_000))

    def make(mode: str = "ok", name: str | None = None, dockerfile: str | None = None) -> Path:
        folder = tmp_path / "submissions" / (name or f"{mode}-{next(counter)}")
        shutil.copytree(FIXTURES / "tiny_service", folder)
        text = dockerfile or (folder / "Dockerfile").read_text()
        (folder / "Dockerfile").write_text(text.replace("ENV MODE=ok", f"ENV MODE={mode}"))
        return folder

    return make


async def run_engine(
    pairs: Sequence[tuple[Task, Path]],
    home: Path,
    cache_dir: Path,
    concurrency: int = 4,
    runtime: str = "process",
    **settings: object,
) -> tuple[list[EvaluationFinished], Store, str]:
    """Run the real engine over ``pairs``; verdicts come in pair order."""
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    chosen = ProcessRuntime(cache_dir) if runtime == "process" else DockerRuntime(cache_dir)
    async with chosen as runtime_:
        runner = Runner(store, runtime_, RunSettings(home=home, concurrency=concurrency,
                                                    **settings))  # type: ignore[arg-type]
        run_id = await runner.start([Planned(t.root, s, t) for t, s in pairs])
        results = await runner.execute(run_id)
    order = {str(s.resolve()): i for i, (_t, s) in enumerate(pairs)}
    results.sort(key=lambda r: order[r.submission])
    return results, store, run_id


async def _docker_problem() -> str | None:
    try:
        client = await docker_client()
    except Exception as exc:  # noqa: BLE001 - any reason is a reason to skip
        return str(exc)
    try:
        await client.images.inspect(PRIMARY)
    except Exception:  # noqa: BLE001
        return f"no base image {PRIMARY}: run `anvil docker bootstrap`"
    finally:
        await client.close()
    return None


@pytest.fixture(scope="session", autouse=True)
def anvil_scope() -> Iterator[str]:
    """This session's ``ANVIL_SCOPE``: every container it makes carries the label, and its
    reapers and assertions see nothing else (other runs on the daemon stay untouched).

    Set in the environment, so the anvil processes tests spawn inherit it.
    """
    scope = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SCOPE_ENV, scope)
        yield scope


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Docker tests run for real in CI (ANVIL_REQUIRE_DOCKER=1) and skip, saying why, elsewhere."""
    problem = anyio.run(_docker_problem)
    if problem:
        if os.environ.get("ANVIL_REQUIRE_DOCKER"):
            pytest.fail(f"Docker is required here (ANVIL_REQUIRE_DOCKER): {problem}")
        pytest.skip(f"no Docker: {problem}")
