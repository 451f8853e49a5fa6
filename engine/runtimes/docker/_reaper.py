"""Reaping containers and networks a killed or expired anvil left on the daemon."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from functools import partial
from typing import Any

from aiodocker.exceptions import DockerError

from ..._errors import HarnessError
from ..._reaper import alive
from ._client import LEASE_LABEL, OWNER_LABEL, call, current_scope, scope_filter


async def reap_docker(
    docker: Any, *, everything: bool = False, scope: str | None = None
) -> list[str]:
    """Remove containers and networks labelled by an anvil that is gone or out of lease.

    A container's owner is ``host:pid``; it is reaped when that process no longer
    runs on this host or its ``anvil.lease`` (unix time) has passed. With
    ``everything``, every anvil-labelled container and network goes.

    Args:
        docker: the client.
        everything: remove live runs' objects too.
        scope: look only at objects of this ``anvil.scope`` (default: ``ANVIL_SCOPE``;
            unset, every anvil object on the daemon).

    Returns:
        The names removed.
    """
    labels_wanted = scope_filter(scope or current_scope())
    host = socket.gethostname()
    now = time.time()
    removed: list[str] = []

    def expired(labels: dict[str, str]) -> bool:
        if everything:
            return True
        owner_host, _, pid = labels.get(OWNER_LABEL, ":").rpartition(":")
        try:
            lease = float(labels.get(LEASE_LABEL, "inf"))
        except ValueError:
            lease = 0.0
        gone = owner_host == host and pid.isdigit() and not alive(int(pid))
        return gone or lease < now

    label_filter = json.dumps({"label": labels_wanted})
    try:
        containers = await call("list containers",
                                lambda: docker.containers.list(all="true", filters=label_filter))
        networks = await call("list networks",
                              lambda: docker.networks.list(filters={"label": labels_wanted}))
    except DockerError as exc:
        raise HarnessError(f"Docker API list: {exc.message}") from exc
    for container in containers:
        labels = container["Labels"] or {}
        if expired(labels):
            with contextlib.suppress(DockerError):
                await call("remove container", partial(container.delete, force=True, v=True))
            removed.append((container["Names"] or [container.id])[0].lstrip("/"))
    for net in networks:
        if expired(net.get("Labels") or {}):
            with contextlib.suppress(DockerError):
                network = await call("get network", partial(docker.networks.get, net["Id"]))
                await call("remove network", network.delete)
            removed.append(net["Name"])
    return removed
