"""Dockerfile-subset emulation: what a Dockerfile means, laid out in a root folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import HarnessError
from engine.runtimes._dockerfile import parse_dockerfile
from engine.runtimes.process import BASE_PATH, emulate, expand


def _emulate(tmp_path: Path, dockerfile: str, files: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    context = tmp_path / "ctx"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {"main.py": "print(1)\n"}).items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(text)
    root = tmp_path / "root"
    root.mkdir()
    return emulate(parse_dockerfile(context / "Dockerfile"), context, root), root


def test_every_pip_install_becomes_a_step_of_one_venv(tmp_path: Path) -> None:
    plan, _ = _emulate(tmp_path, (
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY . .\n"
        "RUN pip install --no-cache-dir -r requirements.txt\n"
        "RUN pip install --upgrade pip && pip install gunicorn && python -m pip install .\n"
        "CMD [\"python\", \"main.py\"]\n"),
        {"requirements.txt": "fastapi\n", "main.py": "", "pyproject.toml": "[project]\n"})
    assert [s.args for s in plan.pip_steps] == [["-r", "requirements.txt"], ["gunicorn"], ["."]]
    assert plan.pip_steps[0].where.endswith("Dockerfile:4")


def test_step_digest_follows_the_files_it_names(tmp_path: Path) -> None:
    dockerfile = ("FROM python:3.11-slim\nCOPY requirements.txt .\n"
                  "RUN pip install -r requirements.txt\nCMD [\"python\"]\n")
    one, _ = _emulate(tmp_path / "a", dockerfile, {"requirements.txt": "fastapi\n"})
    two, _ = _emulate(tmp_path / "b", dockerfile, {"requirements.txt": "flask\n"})
    same, _ = _emulate(tmp_path / "c", dockerfile, {"requirements.txt": "fastapi\n"})
    assert one.pip_steps[0].digest != two.pip_steps[0].digest
    assert one.pip_steps[0].digest == same.pip_steps[0].digest


def test_env_is_expanded_and_container_paths_are_mapped(tmp_path: Path) -> None:
    plan, root = _emulate(tmp_path, (
        "FROM python:3.11-slim\nARG APP=/srv/app\nWORKDIR $APP\nCOPY main.py ./\n"
        "ENV PATH=\"/root/.local/bin:$PATH\" PYTHONPATH=${APP} DB=${APP}/db.sqlite\n"
        "ENV MISSING=${NOPE:-fallback}\n"
        "CMD python /srv/app/main.py\n"))
    app = root / "srv" / "app"
    assert plan.workdir == app and (app / "main.py").is_file()
    assert plan.env["PATH"] == "/root/.local/bin:" + BASE_PATH
    assert plan.env["PYTHONPATH"] == str(app)
    assert plan.env["DB"] == f"{app}/db.sqlite"
    assert plan.env["MISSING"] == "fallback"
    assert plan.argv == ["/bin/sh", "-c", f"python {app}/main.py"]


def test_cmd_survives_a_later_entrypoint(tmp_path: Path) -> None:
    plan, _ = _emulate(tmp_path, ("FROM python:3.11-slim\nCOPY main.py .\nCMD [\"main.py\"]\n"
                                  "ENTRYPOINT [\"python\"]\n"))
    assert plan.argv == ["python", "main.py"]


@pytest.mark.parametrize(("dockerfile", "problem"), [
    ("FROM python:3.11 AS build\nRUN pip install x\nFROM python:3.11-slim\nCMD [\"x\"]\n",
     "multi-stage builds are beyond the process runtime"),
    ("FROM python:3.11-slim\nCOPY --from=build /x /x\nCMD [\"x\"]\n", "COPY --from"),
    ("FROM python:3.11-slim\nRUN pip install --target=/deps x\nCMD [\"x\"]\n",
     "writes outside a venv"),
])
def test_what_cannot_be_emulated_is_a_harness_error_naming_the_line(
    tmp_path: Path, dockerfile: str, problem: str
) -> None:
    with pytest.raises(HarnessError, match=problem) as info:
        _emulate(tmp_path, dockerfile)
    assert "Dockerfile:2" in str(info.value) or "Dockerfile:3" in str(info.value)


def test_expand() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert expand("$A-${A}-${B:-d}-${EMPTY:-e}-$B", env) == "1-1-d-e-"
