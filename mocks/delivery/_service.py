"""The delivery mock as the fabric sees it: routes, API keys, idempotency, scenarios."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .._base import json_response
from ..types import MockContext
from ._domain import RECIPIENT_STATUSES, Delivery, DeliveryError, Obj, invalid
from ._openapi import document

KEY_PREFIX = "dk_test_"
Handler = Callable[[Request, Obj], Awaitable[tuple[int, Obj]]]


def _error(error: DeliveryError) -> Response:
    return json_response(error.body(), error.status)


class DeliveryMock:
    """A shipping and notifications provider (see the package docstring).

    Scenarios: ``default`` (empty) and ``flaky_sms`` (sms to a number whose last digit is
    odd fails with ``carrier_unavailable``). Seed data (``POST /__mock__/seed``) may hold
    ``addresses`` (create parameters, stored in order) and ``outcomes`` (``{recipient:
    status}``, forcing one recipient's result on every channel).
    """

    kind: ClassVar[str] = "delivery"
    scenarios: ClassVar[Sequence[str]] = ("default", "flaky_sms")

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx
        self.state = Delivery(ctx)
        # Idempotency-Key -> (request fingerprint, status, body): successes only
        self.replays: dict[str, tuple[str, int, Obj]] = {}

    def seed(self, scenario: str, data: Mapping[str, Any] | None = None) -> None:
        """Load ``scenario`` then ``data``.

        Raises:
            KeyError: an unknown scenario.
            ValueError: seed data the API would refuse.
        """
        if scenario not in self.scenarios:
            raise KeyError(scenario)
        self.state.flaky_sms = scenario == "flaky_sms"
        data = dict(data or {})
        try:
            for spec in data.get("addresses") or []:
                self.state.create_address(spec)
        except DeliveryError as exc:
            raise ValueError(exc.message) from None
        outcomes = data.get("outcomes") or {}
        if not isinstance(outcomes, dict) or not all(
                v in RECIPIENT_STATUSES for v in outcomes.values()):
            raise ValueError(f"outcomes maps recipients to one of {RECIPIENT_STATUSES}")
        self.state.outcomes = {str(k): str(v) for k, v in outcomes.items()}

    def openapi(self) -> dict[str, Any]:
        return document()

    def routes(self) -> Sequence[BaseRoute]:
        endpoints: list[tuple[str, str, Handler]] = [
            ("/v1/addresses", "POST", self._create_address),
            ("/v1/addresses/{id}", "GET", self._get_address),
            ("/v1/parcels", "POST", self._create_parcel),
            ("/v1/parcels/{id}", "GET", self._get_parcel),
            ("/v1/shipments", "POST", self._create_shipment),
            ("/v1/shipments", "GET", self._list_shipments),
            ("/v1/shipments/{id}", "GET", self._get_shipment),
            ("/v1/shipments/{id}/buy", "POST", self._buy),
            ("/v1/trackers", "GET", self._list_trackers),
            ("/v1/trackers/{id}", "GET", self._get_tracker),
            ("/v1/messages", "POST", self._send),
            ("/v1/messages", "GET", self._list_messages),
            ("/v1/messages/{id}", "GET", self._get_message),
        ]
        return [Route(path, self._endpoint(handler), methods=[method])
                for path, method, handler in endpoints]

    # -- the HTTP layer ------------------------------------------------------------------

    def _endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            denied = _check_key(request)
            if denied is not None:
                return _error(denied)
            body: Obj = {}
            raw = await request.body()
            if request.method == "POST":
                if raw.strip():
                    try:
                        parsed = json.loads(raw)
                    except ValueError:
                        return _error(DeliveryError(400, "invalid_json",
                                                    "the body is not valid JSON"))
                    if not isinstance(parsed, dict):
                        return _error(DeliveryError(400, "invalid_json",
                                                    "the body must be a JSON object"))
                    body = parsed
                key = request.headers.get("idempotency-key")
                if key:
                    return await self._idempotent(key, request, body, handler)
            try:
                status, content = await handler(request, body)
            except DeliveryError as exc:
                return _error(exc)
            return json_response(content, status)

        return endpoint

    async def _idempotent(self, key: str, request: Request, body: Obj,
                          handler: Handler) -> Response:
        """Same key and same request: the stored answer again (``Idempotent-Replayed:
        true``), nothing done; same key, another request: 409; failures are not stored,
        so a corrected request may reuse the key."""
        if len(key) > 255:
            return _error(invalid("Idempotency-Key", "at most 255 characters"))
        fingerprint = hashlib.sha256(json.dumps(
            [request.method, request.url.path, body], sort_keys=True).encode()).hexdigest()
        stored = self.replays.get(key)
        if stored is not None:
            if stored[0] != fingerprint:
                return _error(DeliveryError(
                    409, "idempotency_conflict",
                    f"Idempotency-Key {key!r} was used for another request", "Idempotency-Key"))
            return json_response(stored[2], stored[1], {"Idempotent-Replayed": "true"})
        try:
            status, content = await handler(request, body)
        except DeliveryError as exc:
            return _error(exc)
        # copy now: a later change to the object (a purchase) must not change the replay
        self.replays[key] = (fingerprint, status, json.loads(json.dumps(content)))
        return json_response(content, status)

    # -- handlers ------------------------------------------------------------------------

    async def _create_address(self, _request: Request, body: Obj) -> tuple[int, Obj]:
        return 201, self.state.create_address(body)

    async def _get_address(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, _get(self.state.addresses, "address", request)

    async def _create_parcel(self, _request: Request, body: Obj) -> tuple[int, Obj]:
        return 201, self.state.create_parcel(body)

    async def _get_parcel(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, _get(self.state.parcels, "parcel", request)

    async def _create_shipment(self, _request: Request, body: Obj) -> tuple[int, Obj]:
        return 201, self.state.create_shipment(body)

    async def _get_shipment(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, self.state.shipment(request.path_params["id"])

    async def _list_shipments(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, _page(request, list(self.state.shipments.values()),
                          ("reference", "status"))

    async def _buy(self, request: Request, body: Obj) -> tuple[int, Obj]:
        return 200, self.state.buy(request.path_params["id"], body)

    async def _get_tracker(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, self.state.tracker(request.path_params["id"])

    async def _list_trackers(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        trackers = [self.state.tracker(t) for t in self.state.trackers]
        return 200, _page(request, trackers, ("tracking_code", "status", "shipment_id"))

    async def _send(self, _request: Request, body: Obj) -> tuple[int, Obj]:
        return 201, self.state.send(body)

    async def _get_message(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, self.state.message(request.path_params["id"])

    async def _list_messages(self, request: Request, _body: Obj) -> tuple[int, Obj]:
        return 200, _page(request, list(self.state.messages.values()),
                          ("channel", "reference", "status"))


def _check_key(request: Request) -> DeliveryError | None:
    key = request.headers.get("x-api-key", "")
    auth = request.headers.get("authorization", "")
    if not key and auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
    if not key:
        return DeliveryError(401, "unauthorized", "no API key: send Authorization: Bearer "
                             f"{KEY_PREFIX}... or X-Api-Key: {KEY_PREFIX}...")
    if not key.startswith(KEY_PREFIX) or len(key) == len(KEY_PREFIX):
        return DeliveryError(401, "unauthorized",
                             f"invalid API key {key[:8]}***: test keys start with {KEY_PREFIX}")
    return None


def _get(objects: Mapping[str, Obj], kind: str, request: Request) -> Obj:
    object_id = request.path_params["id"]
    found = objects.get(object_id)
    if found is None:
        raise DeliveryError(404, "resource_missing", f"no such {kind}: {object_id!r}", "id")
    return found


def _page(request: Request, objects: list[Obj], filters: Sequence[str]) -> Obj:
    """``{"object": "list", "data", "has_more"}`` in creation order: equality ``filters``
    from the query, then ``starting_after`` (an id) and ``limit`` (1 to 100, default 20)."""
    query = request.query_params
    for name in filters:
        if name in query:
            objects = [o for o in objects if str(o.get(name)) == query[name]]
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise invalid("limit", "limit must be an integer") from None
    if not 1 <= limit <= 100:
        raise invalid("limit", "limit must be between 1 and 100")
    after = query.get("starting_after")
    if after:
        ids = [o["id"] for o in objects]
        if after not in ids:
            raise invalid("starting_after", f"{after!r} is not in this list")
        objects = objects[ids.index(after) + 1:]
    return {"object": "list", "data": objects[:limit], "has_more": len(objects) > limit}
