"""Runtimes: turning a submission into a running service on loopback.

One package per runtime (``docker/``, ``process/``), found by name through the
``anvil.runtimes`` entry-point group. Sibling packages do not import each other
except ``docker`` reading the Dockerfile with ``process``'s parser.
"""

from ._choose import cache_dir as cache_dir
from ._choose import make_runtime as make_runtime
from ._choose import runtime_factory as runtime_factory
from ._choose import runtime_names as runtime_names

__all__ = ["cache_dir", "make_runtime", "runtime_factory", "runtime_names"]
