"""The echo mock's routes, scenarios and contract."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .._base import json_response
from ..types import MockContext


class EchoMock:
    """Stores JSON bodies under deterministic ids (see the package docstring)."""

    kind: ClassVar[str] = "echo"
    scenarios: ClassVar[Sequence[str]] = ("default", "preloaded")

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx
        self.echoes: dict[str, dict[str, Any]] = {}

    def routes(self) -> Sequence[BaseRoute]:
        return [
            Route("/v1/echoes", self.create, methods=["POST"]),
            Route("/v1/echoes", self.list, methods=["GET"]),
            Route("/v1/echoes/{id}", self.get, methods=["GET"]),
            Route("/v1/notify", self.notify, methods=["POST"]),
        ]

    def seed(self, scenario: str, data: Mapping[str, Any] | None = None) -> None:
        if scenario not in self.scenarios:
            raise KeyError(scenario)
        if scenario == "preloaded":
            self._store({"preloaded": True})
        for body in (data or {}).get("echoes", []):
            self._store(body)

    def _store(self, body: Any) -> dict[str, Any]:
        echo = {"id": self.ctx.new_id("echo"), "object": "echo", "created": self.ctx.now(),
                "body": body}
        self.echoes[echo["id"]] = echo
        return echo

    async def create(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            return json_response({"error": {"message": "the body is not JSON"}}, 400)
        return json_response(self._store(body), 201)

    async def list(self, _request: Request) -> Response:
        return json_response({"object": "list", "data": list(self.echoes.values())})

    async def get(self, request: Request) -> Response:
        echo = self.echoes.get(request.path_params["id"])
        if echo is None:
            return json_response({"error": {"message": "no such echo"}}, 404)
        return json_response(echo)

    async def notify(self, request: Request) -> Response:
        self.ctx.emit({"type": "notified", "body": (await request.body()).decode()})
        return json_response({"notified": True})

    def openapi(self) -> dict[str, Any]:
        echo = {"type": "object", "required": ["id", "object", "created", "body"],
                "properties": {"id": {"type": "string"}, "object": {"const": "echo"},
                               "created": {"type": "integer"}, "body": {}}}
        one = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Echo"}}}}
        return {
            "openapi": "3.1.0",
            "info": {"title": "anvil echo mock", "version": "1"},
            "paths": {
                "/v1/echoes": {
                    "post": {"requestBody": {"content": {"application/json": {"schema": {}}}},
                             "responses": {"201": {"description": "stored", **one}}},
                    "get": {"responses": {"200": {"description": "every echo"}}},
                },
                "/v1/echoes/{id}": {"get": {
                    "parameters": [{"name": "id", "in": "path", "required": True,
                                    "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the echo", **one},
                                  "404": {"description": "no such echo"}}}},
                "/v1/notify": {"post": {"responses": {"200": {"description": "recorded"}}}},
            },
            "components": {"schemas": {"Echo": echo}},
        }
