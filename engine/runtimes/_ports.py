"""Explaining why a service is not reachable, from the ports it listens on (both runtimes)."""

from __future__ import annotations


def explain_ports(listening: set[tuple[int, bool]], port: int) -> str:
    """Why nothing answers on ``port``, from the (port, loopback only) pairs listened on."""
    if not listening:
        return f"the service never listened on port {port}"
    if (port, True) in listening and (port, False) not in listening:
        return (f"the service listens on 127.0.0.1:{port} only; it must listen on 0.0.0.0 "
                "to be reachable from outside its container")
    other = sorted({p for p, _lo in listening if p != port})
    if other and (port, False) not in listening:
        ports = ", ".join(map(str, other))
        return f"the service listens on port {ports}, the task expects port {port}"
    return ""
