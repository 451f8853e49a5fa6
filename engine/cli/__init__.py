"""The ``anvil`` command line: one module per group of commands, all on one Typer app."""

from __future__ import annotations

import logging
import os
import sys
import traceback

# Each module registers its commands on the app; the import order is the order of --help.
# isort: off
from . import _run, _report, _tasks, _mocks, _maintenance  # noqa: F401
# isort: on
from ._app import ExitCode as ExitCode
from ._app import app as app

__all__ = ["ExitCode", "app", "main"]


def main() -> None:
    if os.environ.get("ANVIL_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)
    try:
        app()
    except Exception:  # a bug of ours: the traceback is for us; the exit code stays in the table
        traceback.print_exc()
        sys.exit(ExitCode.ERROR)
