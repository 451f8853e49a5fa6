"""The ``anvil`` Typer apps, the exit-code table and what every command shares."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from rich.markup import escape

from .._errors import AnvilError, InputError
from .._store import Store, default_url
from .._subscribers import (
    stderr_console,
)
from ..runtimes import runtime_names

T = TypeVar("T")



class ExitCode(enum.IntEnum):
    """What the exit status of every anvil command means (listed in ``anvil --help``)."""

    OK = 0  # done; `run`: every evaluation got a verdict, pass or fail
    FAILED = 1  # what was judged did not pass: `verify` (the submission), `tasks check`
    USAGE = 2  # bad arguments or input (click uses 2 for its own usage errors too)
    ERROR = 3  # anvil could not judge: an evaluation ended in `error`, no runtime, no store
    INCOMPLETE = 4  # `run`: part of what was asked was not evaluated (a task without submissions)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: `anvil run --resume RUN_ID` goes on


EXIT_CODES = """Exit codes (every command):

\b
  0    ok: done; `run`: every evaluation got a verdict (pass or fail)
  1    failed: `verify`: the submission failed; `tasks check`: a check failed
  2    usage: bad arguments or input (a missing folder, an unknown run id, ...)
  3    error: anvil could not judge (an evaluation ended in error, no runtime, no store)
  4    incomplete: `run`: a task had no submissions or an evaluation was not done
  130  interrupted: finished evaluations are kept; `anvil run --resume RUN_ID` goes on
"""

app = typer.Typer(
    help="Score candidate backend services against hidden HTTP oracles.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags without `<bool>`, nothing boxed or cut
)
tasks_app = typer.Typer(help="List, check and create task packages.", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(tasks_app, name="tasks")
docker_app = typer.Typer(help="Docker runtime set-up.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(docker_app, name="docker")
mocks_app = typer.Typer(help="List and serve mock providers (the anvil.mocks plug-ins).",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(mocks_app, name="mocks")

err = stderr_console()
RUNTIMES = runtime_names()


def runtime_choice(value: str) -> str:
    if value not in RUNTIMES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(RUNTIMES)}")
    return value


RuntimeOpt = Annotated[str, typer.Option(
    "--runtime", metavar="<" + "|".join(RUNTIMES) + ">", callback=runtime_choice,
    help="Where services run; auto: docker when a daemon answers, else process.",
)]

HomeOpt = Annotated[
    Path,
    typer.Option("--home", envvar="ANVIL_HOME", metavar="DIR",
                 help="Folder for runs, logs, caches and the db."),
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="ANVIL_DB", metavar="URL",
                 help="SQLAlchemy URL of the store [default: sqlite:///HOME/anvil.db]; "
                      "postgresql+psycopg://USER:PASSWORD@HOST/DB: one store shared by many "
                      "drivers (the postgres extra)."),
]


def anvil_error(exc: BaseException) -> AnvilError | None:
    """The AnvilError behind ``exc``, also from inside an ExceptionGroup."""
    if isinstance(exc, AnvilError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = anvil_error(inner)
            if found is not None:
                return found
    return None


def run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run`` whose AnvilErrors leave as themselves, never wrapped in a group."""
    try:
        return anyio.run(fn, *args)
    except BaseExceptionGroup as group:
        found = anvil_error(group)
        if found is None:
            raise
        raise found from None


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def code_of(exc: AnvilError) -> ExitCode:
    """Bad input is the user's to fix (usage); anything else kept anvil from judging."""
    return ExitCode.USAGE if isinstance(exc, InputError) else ExitCode.ERROR


def version(value: bool) -> None:
    if value:
        try:
            number = dist_version("anvil-harness")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        print(f"anvil {number}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=version, help="Print anvil's version and exit.",
    )] = False,
) -> None:
    """Score candidate backend services against hidden HTTP oracles."""


def open_store(home: Path, db: str | None) -> Store:
    return Store(db or default_url(home.resolve()))
