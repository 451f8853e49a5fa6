"""Dockerfile-subset emulation: what a Dockerfile means, laid out in a root folder."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from engine import BuildFailed, HarnessError, ServiceExited, Unsupported
from engine.runtimes._dockerfile import DockerIgnore, parse_dockerfile
from engine.runtimes.process import BASE_PATH, emulate, expand
from engine.runtimes.process._faults import classify


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
    with pytest.raises(Unsupported, match=problem) as info:
        _emulate(tmp_path, dockerfile)
    assert "Dockerfile:2" in str(info.value) or "Dockerfile:3" in str(info.value)
    assert isinstance(info.value, HarnessError) and not info.value.transient  # not retried


def test_expand() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert expand("$A-${A}-${B:-d}-${EMPTY:-e}-$B", env) == "1-1-d-e-"


def _parse(tmp_path: Path, text: str | bytes):  # type: ignore[no-untyped-def]
    path = tmp_path / "Dockerfile"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return [(i.keyword, i.args, i.line) for i in parse_dockerfile(path).instructions]


def test_the_parser_reads_lines_as_buildkit_does(tmp_path: Path) -> None:
    # A byte-order mark; `\` followed by blanks continues; comment and empty lines
    # inside a continuation are dropped.
    assert _parse(tmp_path, "\ufeffFROM python:3.11\nRUN pip install \\  \n  # why\n\n"
                            "  fastapi\nCMD [\"x\"]\n") == [
        ("FROM", "python:3.11", 1), ("RUN", "pip install fastapi", 2), ("CMD", '["x"]', 6)]
    # The escape directive.
    assert _parse(tmp_path, "# escape=`\nFROM x\nRUN pip install `\n  y\nCMD a\n")[1] == (
        "RUN", "pip install y", 3)
    # A continued last line is kept.
    assert _parse(tmp_path, "FROM x\nCMD run \\\n")[-1] == ("CMD", "run", 2)


def test_a_heredoc_stays_in_its_instruction_and_is_refused_by_name(tmp_path: Path) -> None:
    dockerfile = "FROM x\nRUN <<EOF\necho hi\nmkdir /x\nEOF\nCMD [\"a\"]\n"
    assert [k for k, _a, _l in _parse(tmp_path, dockerfile)] == ["FROM", "RUN", "CMD"]
    with pytest.raises(Unsupported, match="Dockerfile:2: .* heredoc in RUN"):
        _emulate(tmp_path / "e", dockerfile)


@pytest.mark.parametrize(("patterns", "path", "ignored"), [
    (["*.md"], "a.md", True),
    (["*.md"], "sub/a.md", False),  # anchored at the root, unlike .gitignore
    (["**/*.md"], "sub/deep/a.md", True),
    (["**/*.md"], "a.md", True),
    (["docs"], "docs/a/b.txt", True),  # a folder excludes what it holds
    (["docs/"], "docs/a.txt", True),
    (["docs", "!docs/keep.txt"], "docs/keep.txt", False),
    (["docs", "!docs/keep.txt"], "docs/other.txt", True),
    (["*", "!server.py"], "server.py", False),
    (["!server.py", "*"], "server.py", True),  # the last match wins
    (["/build"], "build/x", True),
    (["a/*"], "a/b/c.txt", True),  # a parent matching is enough
    (["# not a pattern"], "# not a pattern", False),
])
def test_dockerignore_patterns(patterns: list[str], path: str, ignored: bool) -> None:
    assert DockerIgnore(patterns).ignored(path) is ignored


@pytest.mark.parametrize(("kwargs", "expected", "transient"), [
    ({"error": OSError(errno.ENOSPC, "No space left on device")}, HarnessError, True),
    ({"error": OSError(errno.EMFILE, "Too many open files")}, HarnessError, True),
    ({"error": OSError(errno.EAGAIN, "Resource temporarily unavailable")}, HarnessError, True),
    ({"error": OSError(errno.ENOENT, "No such file or directory")}, BuildFailed, None),
    ({"error": OSError(errno.ENOENT, "No such file"), "ours": True}, HarnessError, True),
    ({"returncode": 1, "output": "ERROR: No matching distribution found for nope"},
     BuildFailed, None),
    ({"returncode": 1, "output": "ERROR: No matching distribution found for nope",
      "evidence": "http://127.0.0.1:1/simple/nope/: connection error: Connection refused"},
     HarnessError, True),
    ({"returncode": 1, "output": "WARNING: Retrying (Retry(total=4)) after connection broken"},
     HarnessError, True),
    ({"returncode": 1, "output": "OSError: [Errno 28] No space left on device"},
     HarnessError, True),
    ({"returncode": -9, "output": ""}, HarnessError, True),
    ({"returncode": 1, "output": "", "ours": True}, HarnessError, True),
])
def test_classify_by_cause(kwargs: dict[str, object], expected: type[Exception],
                           transient: bool | None) -> None:
    found = classify("Dockerfile:3", "pip install", **kwargs)  # type: ignore[arg-type]
    assert type(found) is expected
    if transient is not None:
        assert isinstance(found, HarnessError) and found.transient is transient
    assert "Dockerfile:3" in str(found)


def test_classify_a_cmd_that_cannot_run_as_the_given_candidate_failure() -> None:
    found = classify("CMD", "/no/such", error=OSError(errno.ENOENT, "No such file or directory"),
                     candidate=ServiceExited)
    assert type(found) is ServiceExited and "cannot run `/no/such`" in str(found)
