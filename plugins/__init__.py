"""Discovery of anvil's plug-ins through Python entry points.

Three groups: ``anvil.runtimes`` (a class implementing the engine's ``Runtime``
protocol), ``anvil.mocks`` (mock services) and ``anvil.reporters``. A plug-in is
one line in its package's ``pyproject.toml``::

    [project.entry-points."anvil.runtimes"]
    cluster = "anvil_cluster:ClusterRuntime"

This package knows nothing of the engine: it finds and loads objects by name.
"""

from __future__ import annotations

from ._discovery import MOCKS as MOCKS
from ._discovery import REPORTERS as REPORTERS
from ._discovery import RUNTIMES as RUNTIMES
from ._discovery import PluginError as PluginError
from ._discovery import available as available
from ._discovery import load as load

__all__ = ["MOCKS", "REPORTERS", "RUNTIMES", "PluginError", "available", "load"]
