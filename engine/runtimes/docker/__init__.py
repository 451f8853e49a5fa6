"""The Docker runtime: aiodocker client, build contexts, images, reaper, base-image bootstrap.

Modules import one way: ``_client`` <- ``_context``, ``_images``, ``_reaper``,
``_bootstrap`` <- ``_runtime``.
"""

from ._bootstrap import PRIMARY as PRIMARY
from ._bootstrap import BootstrapResult as BootstrapResult
from ._bootstrap import bootstrap as bootstrap
from ._bootstrap import has_base_image as has_base_image
from ._client import OWNER_LABEL as OWNER_LABEL
from ._client import call as call
from ._client import docker_client as docker_client
from ._context import build_context as build_context
from ._images import gc_images as gc_images
from ._images import parse_size as parse_size
from ._images import touch_image as touch_image
from ._reaper import reap_docker as reap_docker
from ._runtime import DockerImage as DockerImage
from ._runtime import DockerRuntime as DockerRuntime

__all__ = [
    "OWNER_LABEL", "PRIMARY", "BootstrapResult", "DockerImage", "DockerRuntime", "bootstrap",
    "build_context", "call", "docker_client", "gc_images", "has_base_image", "parse_size",
    "reap_docker",
    "touch_image",
]
