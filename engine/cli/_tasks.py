"""``anvil tasks list|check|new``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._errors import AnvilError, InputError, TaskFormatError
from .._skeleton import write_skeleton
from .._task import discover_tasks, load_task
from .._taskcheck import check_task
from ._app import (
    ExitCode,
    HomeOpt,
    RuntimeOpt,
    code_of,
    err,
    fail,
    run_async,
    tasks_app,
)


@tasks_app.command("list")
def tasks_list(
    root: Annotated[Path, typer.Argument(help="Folder holding task folders.")] = Path("tasks"),
) -> None:
    """List the task packages under ROOT."""
    table = Table("id", "title", "domain", "mocks", "path")
    found = discover_tasks(root)
    if not found:
        raise fail(f"{root}: no task folders")
    for path in found:
        try:
            task = load_task(path)
        except TaskFormatError as exc:
            table.add_row(escape(path.name), f"[red]{escape(exc.problem)}[/]", "", "",
                          escape(str(path)))
            continue
        mocks = ", ".join(m.kind for m in task.config.mocks) or "-"
        table.add_row(*(escape(cell) for cell in (task.id, task.config.title, task.config.domain,
                                                   mocks, str(path))))
    Console(highlight=False).print(table)


@tasks_app.command("check")
def tasks_check(
    tasks: Annotated[list[Path], typer.Argument(help="Task folders to check.")],
    runtime: RuntimeOpt = "auto",
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Check task packages: files parse and validate (every problem on its own line, with
    file and line), the oracle collects and marks each item's category, the reference
    passes. What cannot be checked (no reference/, no task.toml) is said, not failed.
    Also prints the items per category and, when the oracle uses scoring markers, per tier,
    visibility and level, and the number of requirements; warns (file:line, test) about
    tests that send requests in a `for` loop, whose first failure hides the other cases."""
    marks = {"ok": "[green]ok[/]  ", "fail": "[red]FAIL[/]", "warn": "[yellow]warn[/]",
             "skip": "[dim]skip[/]"}
    ok = True
    for path in tasks:
        try:
            checks = run_async(check_task, path, runtime, home.resolve())
        except AnvilError as exc:
            raise fail(str(exc), code_of(exc)) from None
        for check in checks:
            detail = escape(f"{path.resolve().name}: {check.name}: {check.detail}")
            err.print(f"{marks[check.status]} {detail}", highlight=False)
            ok = ok and check.ok
    raise typer.Exit(ExitCode.OK if ok else ExitCode.FAILED)


@tasks_app.command("new")
def tasks_new(
    task_id: Annotated[str, typer.Argument(
        help="The new task's id: letters, digits, '_', '.', '-'.", show_default=False)],
    root: Annotated[Path, typer.Option(help="Folder that holds task folders.")] = Path("tasks"),
) -> None:
    """Write a task skeleton ROOT/TASK_ID (task.toml, spec.md, openapi.yaml, oracle/ with one
    example item per category, reference/) that `anvil tasks check` passes as written."""
    try:
        folder = write_skeleton(root, task_id)
    except InputError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    err.print(f"wrote {escape(str(folder))}: edit spec.md, openapi.yaml, oracle/ and "
              f"reference/, then run `anvil tasks check {escape(str(folder))}`", highlight=False)
