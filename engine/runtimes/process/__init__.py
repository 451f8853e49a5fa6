"""The process runtime: the Dockerfile subset emulated locally, venvs cached, a port shim.

Modules import one way: ``_context`` (the submission as a build context) and
``_faults`` (whose fault a failed step is) <- ``_emulate`` <- ``_venv`` <-
``_runtime``; the shim (``_shim/sitecustomize.py``) is data loaded by the
services, never imported here.
"""

from ._emulate import BASE_PATH as BASE_PATH
from ._emulate import emulate as emulate
from ._emulate import expand as expand
from ._runtime import PreparedService as PreparedService
from ._runtime import ProcessRuntime as ProcessRuntime
from ._venv import gc_venvs as gc_venvs

__all__ = ["BASE_PATH", "PreparedService", "ProcessRuntime", "emulate", "expand", "gc_venvs"]
