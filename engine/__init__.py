"""anvil's engine: lifecycle, scheduler, event bus, runtimes, oracle runner, store.

The front door imports lazily: ``import engine`` (which every oracle process
does to load ``engine._oracle_plugin``) costs nothing until a name is used, so
the oracle's pytest does not pay for sqlalchemy, aiohttp or aiodocker.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._errors import AnvilError as AnvilError
    from ._errors import BuildFailed as BuildFailed
    from ._errors import CandidateFailure as CandidateFailure
    from ._errors import HarnessError as HarnessError
    from ._errors import InputError as InputError
    from ._errors import OracleBroken as OracleBroken
    from ._errors import RuntimeUnavailable as RuntimeUnavailable
    from ._errors import ServiceExited as ServiceExited
    from ._errors import ServiceUnhealthy as ServiceUnhealthy
    from ._errors import TaskFormatError as TaskFormatError
    from ._errors import Unsupported as Unsupported
    from ._events import EvaluationFinished as EvaluationFinished
    from ._events import EvaluationStarted as EvaluationStarted
    from ._events import Event as Event
    from ._events import EventBus as EventBus
    from ._events import ItemFinished as ItemFinished
    from ._events import ItemStarted as ItemStarted
    from ._events import Notice as Notice
    from ._events import PhaseFinished as PhaseFinished
    from ._events import PhaseStarted as PhaseStarted
    from ._events import RunFinished as RunFinished
    from ._events import RunStarted as RunStarted
    from ._lifecycle import Evaluation as Evaluation
    from ._lifecycle import HealthProbe as HealthProbe
    from ._lifecycle import Lifecycle as Lifecycle
    from ._lifecycle import Limits as Limits
    from ._oracle import ItemResult as ItemResult
    from ._oracle import run_oracle as run_oracle
    from ._run import Plan as Plan
    from ._run import Planned as Planned
    from ._run import Runner as Runner
    from ._run import RunSettings as RunSettings
    from ._run import evaluate_once as evaluate_once
    from ._run import plan as plan
    from ._store import Store as Store
    from ._task import Task as Task
    from ._task import TaskConfig as TaskConfig
    from ._task import load_task as load_task
    from .runtimes.process import ProcessRuntime as ProcessRuntime
    from .types import ExitInfo as ExitInfo
    from .types import Outcome as Outcome
    from .types import Phase as Phase
    from .types import Runtime as Runtime
    from .types import Verdict as Verdict

_WHERE = {
    "AnvilError": "_errors",
    "BuildFailed": "_errors",
    "CandidateFailure": "_errors",
    "Evaluation": "_lifecycle",
    "EvaluationFinished": "_events",
    "EvaluationStarted": "_events",
    "Event": "_events",
    "EventBus": "_events",
    "ExitInfo": "types",
    "HarnessError": "_errors",
    "HealthProbe": "_lifecycle",
    "InputError": "_errors",
    "ItemFinished": "_events",
    "ItemStarted": "_events",
    "ItemResult": "_oracle",
    "Lifecycle": "_lifecycle",
    "Limits": "_lifecycle",
    "Notice": "_events",
    "OracleBroken": "_errors",
    "Outcome": "types",
    "Phase": "types",
    "PhaseFinished": "_events",
    "PhaseStarted": "_events",
    "Plan": "_run",
    "Planned": "_run",
    "ProcessRuntime": "runtimes.process",
    "RunFinished": "_events",
    "RunSettings": "_run",
    "RunStarted": "_events",
    "Runner": "_run",
    "Runtime": "types",
    "RuntimeUnavailable": "_errors",
    "ServiceExited": "_errors",
    "ServiceUnhealthy": "_errors",
    "Store": "_store",
    "Task": "_task",
    "TaskConfig": "_task",
    "TaskFormatError": "_errors",
    "Unsupported": "_errors",
    "Verdict": "types",
    "evaluate_once": "_run",
    "load_task": "_task",
    "plan": "_run",
    "run_oracle": "_oracle",
}

__all__ = [
    "AnvilError",
    "BuildFailed",
    "CandidateFailure",
    "Evaluation",
    "EvaluationFinished",
    "EvaluationStarted",
    "Event",
    "EventBus",
    "ExitInfo",
    "HarnessError",
    "HealthProbe",
    "InputError",
    "ItemFinished",
    "ItemStarted",
    "ItemResult",
    "Lifecycle",
    "Limits",
    "Notice",
    "OracleBroken",
    "Outcome",
    "Phase",
    "PhaseFinished",
    "PhaseStarted",
    "Plan",
    "Planned",
    "ProcessRuntime",
    "RunFinished",
    "RunSettings",
    "RunStarted",
    "Runner",
    "Runtime",
    "RuntimeUnavailable",
    "ServiceExited",
    "ServiceUnhealthy",
    "Store",
    "Task",
    "TaskConfig",
    "TaskFormatError",
    "Unsupported",
    "Verdict",
    "evaluate_once",
    "load_task",
    "plan",
    "run_oracle",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # next time without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
