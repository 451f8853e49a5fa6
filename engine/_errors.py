"""Errors of the engine.

The tree keeps the candidate's failures and the harness's faults apart: the
first become a ``fail`` verdict, the second an ``error`` verdict (retried, never
counted against the candidate).

    AnvilError
    ├── InputError              bad input given to anvil (path, task, submission)
    │   └── TaskFormatError     a task package that does not parse or is incomplete
    ├── CandidateFailure        the service under test failed a phase  -> ``fail``
    │   ├── BuildFailed
    │   ├── ServiceExited
    │   └── ServiceUnhealthy
    └── HarnessError            anvil's own fault or environment       -> ``error``
        ├── RuntimeUnavailable  no runtime can run services here
        ├── Unsupported         a deterministic refusal: retrying cannot help
        └── OracleBroken        the task's oracle cannot be collected or run (not retried)

``HarnessError.transient`` says whether another attempt may succeed (a daemon
hiccup, a full disk being cleaned) or not (an instruction the runtime cannot
emulate, an oracle that does not import): only transient errors are retried.
"""

from __future__ import annotations

from pathlib import Path

from .types import Phase


class AnvilError(Exception):
    """Root of every error anvil raises on purpose."""


class InputError(AnvilError):
    """Bad input given to anvil: the message names the file and the problem."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class TaskFormatError(InputError):
    """A task package that does not parse or misses a file."""

    def __init__(self, path: Path | str, problem: str, line: int | None = None) -> None:
        self.line = line
        where = f"{path}:{line}" if line else str(path)
        InputError.__init__(self, path, problem)
        self.args = (f"{where}: {problem}",)


class CandidateFailure(AnvilError):
    """The submission failed a phase; the evaluation's verdict is ``fail``."""

    phase: Phase | None = None  # None: the phase that was running

    def __init__(self, reason: str, phase: Phase | None = None) -> None:
        if phase is not None:
            self.phase = phase
        self.reason = reason
        super().__init__(reason)


class BuildFailed(CandidateFailure):
    phase = Phase.BUILD


class ServiceExited(CandidateFailure):
    """The service process or container ended before the evaluation was done.

    Before it became healthy that is a ``startup`` failure; during the oracle,
    an ``oracle`` failure.
    """

    phase = Phase.STARTUP

    def __init__(
        self, reason: str, returncode: int | None = None, phase: Phase | None = None
    ) -> None:
        self.returncode = returncode
        super().__init__(reason, phase)


class ServiceUnhealthy(CandidateFailure):
    phase = Phase.HEALTH


class HarnessError(AnvilError):
    """anvil or its environment failed; the evaluation's verdict is ``error``."""

    transient: bool = True  # another attempt may succeed


class Unsupported(HarnessError):
    """Something anvil deterministically cannot do (e.g. a Dockerfile instruction the
    process runtime cannot emulate, a task's mocks no installed fabric serves)."""

    transient = False


class RuntimeUnavailable(HarnessError):
    """No runtime can run services on this machine (e.g. the Docker daemon is down)."""


class OracleBroken(HarnessError):
    """The task's oracle does not collect or crashed: the task's fault, not the candidate's."""

    transient = False
