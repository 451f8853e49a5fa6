"""The Docker runtime: aiodocker client, build contexts, images, reaper, base-image bootstrap.

Modules import one way: ``_client`` <- ``_context``, ``_images``, ``_reaper``,
``_bootstrap`` <- ``_runtime``.
"""

from ._bootstrap import PRIMARY as PRIMARY
from ._bootstrap import BootstrapResult as BootstrapResult
from ._bootstrap import bootstrap as bootstrap
from ._bootstrap import has_base_image as has_base_image
from ._client import OWNER_LABEL as OWNER_LABEL
from ._client import SCOPE_ENV as SCOPE_ENV
from ._client import SCOPE_LABEL as SCOPE_LABEL
from ._client import call as call
from ._client import current_scope as current_scope
from ._client import docker_client as docker_client
from ._context import write_context as write_context
from ._images import forget_images as forget_images
from ._images import gc_images as gc_images
from ._images import parse_size as parse_size
from ._images import recorded_images as recorded_images
from ._images import touch_image as touch_image
from ._reaper import reap_docker as reap_docker
from ._runtime import DockerImage as DockerImage
from ._runtime import DockerRuntime as DockerRuntime

__all__ = [
    "OWNER_LABEL", "PRIMARY", "SCOPE_ENV", "SCOPE_LABEL", "BootstrapResult", "DockerImage",
    "DockerRuntime", "bootstrap", "call", "current_scope", "docker_client", "forget_images",
    "gc_images", "has_base_image", "parse_size", "reap_docker", "recorded_images",
    "touch_image", "write_context",
]
