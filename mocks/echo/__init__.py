"""A tiny mock for tests and examples: it stores what it is sent and echoes it back.

Routes (all JSON): ``POST /v1/echoes`` stores the body and answers
``{"id", "object": "echo", "created", "body"}``; ``GET /v1/echoes/{id}``;
``GET /v1/echoes`` lists them in creation order; ``POST /v1/notify`` records a side
event in the journal. Scenarios: ``default`` (empty) and ``preloaded`` (one echo).
"""

from __future__ import annotations

from ._service import EchoMock as EchoMock

__all__ = ["EchoMock"]
