"""The delivery mock's state and rules: shipping (addresses, parcels, shipments, rates,
trackers) and notifications (messages with per-recipient results).

Everything here is a pure function of the requests so far and the virtual clock: ids
from ``ctx.new_id``, time from ``ctx.now``, outcomes from fixed rules on the recipient
(documented in the OpenAPI document and in :data:`OUTCOME_RULES`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..types import MockContext

Obj = dict[str, Any]

#: (carrier, service, base price in cents, cents per ounce started, delivery days), in the
#: order rates are listed: by carrier, then service. The cheapest depends on the weight
#: (USPS GroundAdvantage below 30 oz, UPS Ground above; equal at 30 oz).
SERVICES = (
    ("FedEx", "Express", 2400, 45, 1),
    ("UPS", "Ground", 700, 10, 4),
    ("USPS", "GroundAdvantage", 400, 20, 5),
    ("USPS", "Priority", 900, 30, 2),
)
MAX_WEIGHT_OZ = 1120  # 70 lb, the carriers' limit
#: Tracker statuses and when each is reached, in seconds after the label was bought.
TIMELINE = (("pre_transit", 0), ("in_transit", 3_600), ("out_for_delivery", 86_400),
            ("delivered", 100_800))
CHANNELS = ("email", "sms", "push")
RECIPIENT_STATUSES = ("delivered", "bounced", "failed", "invalid")
MAX_RECIPIENTS = 100
BODY_LIMITS = {"email": 100_000, "sms": 1_600, "push": 4_000}
OUTCOME_RULES = {
    "email": "invalid unless name@domain.tld; bounced at the domain bounce.test",
    "sms": "invalid unless E.164 (+ and 7 to 15 digits); bounced when it ends in 0000; "
           "in scenario flaky_sms, failed (carrier_unavailable) when its last digit is odd",
    "push": "invalid unless 8+ characters of [A-Za-z0-9_:-]; bounced (unregistered) when it "
            "starts with stale",
}
_EMAIL = re.compile(r"[^@\s]+@([^@\s]+\.[^@\s]+)")
_PHONE = re.compile(r"\+[1-9][0-9]{6,14}")
_PUSH = re.compile(r"[A-Za-z0-9_:\-]{8,}")
_COUNTRY = re.compile(r"[A-Z]{2}")


class DeliveryError(Exception):
    """One error answer: ``{"error": {"code", "message", "param"}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param

    def body(self) -> Obj:
        return {"error": {"code": self.code, "message": self.message, "param": self.param}}


def invalid(param: str, message: str) -> DeliveryError:
    return DeliveryError(400, "parameter_invalid", message, param)


def missing_param(param: str) -> DeliveryError:
    return DeliveryError(400, "parameter_missing", f"{param} is required", param)


def not_found(kind: str, object_id: str, param: str = "id") -> DeliveryError:
    return DeliveryError(404, "resource_missing", f"no such {kind}: {object_id!r}", param)


def iso(seconds: int) -> str:
    """Unix seconds as RFC 3339 in UTC (``2026-01-01T00:00:00Z``)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(body: Mapping[str, Any], name: str, *, required: bool = False,
          limit: int = 500, param: str | None = None) -> str | None:
    param = param or name
    value = body.get(name)
    if value is None:
        if required:
            raise missing_param(param)
        return None
    if not isinstance(value, str):
        raise invalid(param, f"{param} must be a string")
    if required and not value.strip():
        raise invalid(param, f"{param} must not be empty")
    if len(value) > limit:
        raise invalid(param, f"{param} is longer than {limit} characters")
    return value


def _positive(body: Mapping[str, Any], name: str, *, required: bool = False,
              limit: float | None = None, param: str | None = None) -> float | None:
    param = param or name
    value = body.get(name)
    if value is None:
        if required:
            raise missing_param(param)
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(param, f"{param} must be a number")
    if value <= 0 or (limit is not None and value > limit):
        bound = f" and at most {limit:g}" if limit is not None else ""
        raise invalid(param, f"{param} must be greater than 0{bound}")
    return value


def _metadata(body: Mapping[str, Any]) -> dict[str, str]:
    value = body.get("metadata")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise invalid("metadata", "metadata must be an object of strings")
    return {str(k): v for k, v in value.items()}


class Delivery:
    """One instance's objects (see the module docstring).

    Args:
        ctx: ids and clock.
        flaky_sms: the ``flaky_sms`` scenario's rule is on.
    """

    def __init__(self, ctx: MockContext, *, flaky_sms: bool = False) -> None:
        self.ctx = ctx
        self.flaky_sms = flaky_sms
        self.outcomes: dict[str, str] = {}  # recipient -> forced status (seed data)
        self.addresses: dict[str, Obj] = {}
        self.parcels: dict[str, Obj] = {}
        self.shipments: dict[str, Obj] = {}
        self.rates: dict[str, str] = {}  # rate id -> shipment id
        self.trackers: dict[str, Obj] = {}  # tracker id -> {shipment, code, bought}
        self.messages: dict[str, Obj] = {}

    # -- shipping ------------------------------------------------------------------------

    def create_address(self, body: Mapping[str, Any], param: str = "") -> Obj:
        where = f"{param}." if param else ""
        if not isinstance(body, Mapping):
            raise invalid(param or "address", f"{param or 'address'} must be an object or id")
        fields = {name: _text(body, name, required=name in {"street1", "city", "zip", "country"},
                              param=where + name)
                  for name in ("name", "company", "street1", "street2", "city", "state", "zip",
                               "country", "email", "phone")}
        if not _COUNTRY.fullmatch(str(fields["country"])):
            raise invalid(where + "country", "country must be an ISO 3166 alpha-2 code (US)")
        address_id = self.ctx.new_id("adr")
        address = {"id": address_id, "object": "address", **fields,
                   "created_at": iso(self.ctx.now())}
        self.addresses[address_id] = address
        return address

    def create_parcel(self, body: Mapping[str, Any], param: str = "") -> Obj:
        where = f"{param}." if param else ""
        if not isinstance(body, Mapping):
            raise invalid(param or "parcel", f"{param or 'parcel'} must be an object or id")
        weight = _positive(body, "weight_oz", required=True, limit=MAX_WEIGHT_OZ,
                           param=where + "weight_oz")
        sizes = {name: _positive(body, name, limit=200, param=where + name)
                 for name in ("length", "width", "height")}
        parcel_id = self.ctx.new_id("prcl")
        parcel = {"id": parcel_id, "object": "parcel", "weight_oz": weight,
                  **sizes, "created_at": iso(self.ctx.now())}
        self.parcels[parcel_id] = parcel
        return parcel

    def _address_of(self, body: Mapping[str, Any], name: str) -> Obj:
        value = body.get(name)
        if value is None:
            raise missing_param(name)
        if isinstance(value, str):
            found = self.addresses.get(value)
            if found is None:
                raise not_found("address", value, name)
            return found
        return self.create_address(value, name)

    def _parcel_of(self, body: Mapping[str, Any]) -> Obj:
        value = body.get("parcel")
        if value is None:
            raise missing_param("parcel")
        if isinstance(value, str):
            found = self.parcels.get(value)
            if found is None:
                raise not_found("parcel", value, "parcel")
            return found
        return self.create_parcel(value, "parcel")

    def create_shipment(self, body: Mapping[str, Any]) -> Obj:
        reference = _text(body, "reference")
        metadata = _metadata(body)
        # validate everything before creating anything: a refused call leaves no objects
        for name in ("to_address", "from_address", "parcel"):
            if body.get(name) is None:
                raise missing_param(name)
        self._check_inline(body)
        to_address = self._address_of(body, "to_address")
        from_address = self._address_of(body, "from_address")
        parcel = self._parcel_of(body)
        shipment_id = self.ctx.new_id("shp")
        billed = math.ceil(float(parcel["weight_oz"]))
        rates = []
        for carrier, service, base, per_oz, days in SERVICES:
            rate_id = self.ctx.new_id("rate")
            rate: Obj = {"id": rate_id, "object": "rate", "shipment_id": shipment_id,
                         "carrier": carrier, "service": service,
                         "amount": base + per_oz * billed, "currency": "USD",
                         "delivery_days": days}
            self.rates[rate_id] = shipment_id
            rates.append(rate)
        shipment = {"id": shipment_id, "object": "shipment", "status": "unpurchased",
                    "reference": reference, "metadata": metadata, "to_address": to_address,
                    "from_address": from_address, "parcel": parcel, "rates": rates,
                    "selected_rate": None, "tracking_code": None, "tracker_id": None,
                    "label": None, "created_at": iso(self.ctx.now()), "purchased_at": None}
        self.shipments[shipment_id] = shipment
        return shipment

    def _check_inline(self, body: Mapping[str, Any]) -> None:
        """Dry-run the inline objects' validation (ids are checked for existence)."""
        for name in ("to_address", "from_address"):
            value = body[name]
            if isinstance(value, str):
                if value not in self.addresses:
                    raise not_found("address", value, name)
            elif not isinstance(value, Mapping):
                raise invalid(name, f"{name} must be an object or an address id")
            else:
                for field in ("street1", "city", "zip", "country"):
                    _text(value, field, required=True, param=f"{name}.{field}")
                if not _COUNTRY.fullmatch(str(value["country"])):
                    raise invalid(f"{name}.country",
                                  "country must be an ISO 3166 alpha-2 code (US)")
        parcel = body["parcel"]
        if isinstance(parcel, str):
            if parcel not in self.parcels:
                raise not_found("parcel", parcel, "parcel")
        elif not isinstance(parcel, Mapping):
            raise invalid("parcel", "parcel must be an object or a parcel id")
        else:
            _positive(parcel, "weight_oz", required=True, limit=MAX_WEIGHT_OZ,
                      param="parcel.weight_oz")
            for name in ("length", "width", "height"):
                _positive(parcel, name, limit=200, param=f"parcel.{name}")

    def shipment(self, shipment_id: str) -> Obj:
        found = self.shipments.get(shipment_id)
        if found is None:
            raise not_found("shipment", shipment_id)
        return found

    def buy(self, shipment_id: str, body: Mapping[str, Any]) -> Obj:
        shipment = self.shipment(shipment_id)
        rate_id = body.get("rate")
        if isinstance(rate_id, Mapping):
            rate_id = rate_id.get("id")
        if rate_id is None:
            raise missing_param("rate")
        if not isinstance(rate_id, str):
            raise invalid("rate", "rate must be a rate id")
        if self.rates.get(rate_id) != shipment_id:
            raise not_found("rate", rate_id, "rate")
        if shipment["status"] != "unpurchased":
            raise DeliveryError(409, "shipment_already_purchased",
                                f"shipment {shipment_id} already has a label", "rate")
        rate = next(r for r in shipment["rates"] if r["id"] == rate_id)
        tracker_id = self.ctx.new_id("trk")
        code = "DLV" + tracker_id[4:20].upper()
        now = self.ctx.now()
        self.trackers[tracker_id] = {"shipment": shipment_id, "code": code, "bought": now,
                                     "days": rate["delivery_days"]}
        shipment.update({
            "status": "purchased", "selected_rate": rate, "tracking_code": code,
            "tracker_id": tracker_id, "purchased_at": iso(now),
            "label": {"object": "label", "format": "PDF",
                      "label_url": f"https://labels.delivery.test/{shipment_id}.pdf"},
        })
        return shipment

    def tracker(self, tracker_id: str) -> Obj:
        found = self.trackers.get(tracker_id)
        if found is None:
            raise not_found("tracker", tracker_id)
        elapsed = self.ctx.now() - found["bought"]
        reached = [(status, offset) for status, offset in TIMELINE if elapsed >= offset]
        shipment = self.shipments[found["shipment"]]
        return {
            "id": tracker_id, "object": "tracker", "tracking_code": found["code"],
            "shipment_id": found["shipment"], "carrier": shipment["selected_rate"]["carrier"],
            "status": reached[-1][0],
            "est_delivery_date": iso(found["bought"] + TIMELINE[-1][1]),
            "tracking_details": [{"status": status, "datetime": iso(found["bought"] + offset)}
                                 for status, offset in reached],
            "updated_at": iso(found["bought"] + reached[-1][1]),
        }

    def tracker_by_code(self, code: str) -> Obj | None:
        for tracker_id, found in self.trackers.items():
            if found["code"] == code:
                return self.tracker(tracker_id)
        return None

    # -- notifications -------------------------------------------------------------------

    def outcome(self, channel: str, to: str) -> tuple[str, str | None]:
        """``(status, error code)`` of one recipient (see :data:`OUTCOME_RULES`)."""
        if to in self.outcomes:
            forced = self.outcomes[to]
            return forced, None if forced == "delivered" else f"forced_{forced}"
        if channel == "email":
            match = _EMAIL.fullmatch(to)
            if match is None:
                return "invalid", "invalid_email"
            if match.group(1).lower() == "bounce.test":
                return "bounced", "mailbox_unavailable"
        elif channel == "sms":
            if not _PHONE.fullmatch(to):
                return "invalid", "invalid_phone_number"
            if to.endswith("0000"):
                return "bounced", "unreachable_number"
            if self.flaky_sms and int(to[-1]) % 2 == 1:
                return "failed", "carrier_unavailable"
        elif not _PUSH.fullmatch(to):
            return "invalid", "invalid_device_token"
        elif to.startswith("stale"):
            return "bounced", "device_unregistered"
        return "delivered", None

    def send(self, body: Mapping[str, Any]) -> Obj:
        channel = body.get("channel")
        if channel is None:
            raise missing_param("channel")
        if channel not in CHANNELS:
            raise invalid("channel", f"channel must be one of {', '.join(CHANNELS)}")
        to = body.get("to")
        if to is None:
            raise missing_param("to")
        recipients = [to] if isinstance(to, str) else to
        if (not isinstance(recipients, list) or not recipients
                or not all(isinstance(r, str) and r.strip() for r in recipients)):
            raise invalid("to", "to must be a non-empty string or a non-empty list of them")
        if len(recipients) > MAX_RECIPIENTS:
            raise invalid("to", f"at most {MAX_RECIPIENTS} recipients per message")
        if len(set(recipients)) != len(recipients):
            raise invalid("to", "a recipient is listed twice")
        subject = _text(body, "subject", required=channel == "email", limit=998)
        text = _text(body, "body", required=True, limit=BODY_LIMITS[channel])
        reference = _text(body, "reference")
        metadata = _metadata(body)
        results = []
        for recipient in recipients:
            status, code = self.outcome(channel, recipient)
            results.append({"to": recipient, "status": status, "error_code": code})
        counts = {status: sum(r["status"] == status for r in results)
                  for status in RECIPIENT_STATUSES}
        delivered = counts["delivered"]
        message = {
            "id": self.ctx.new_id("msg"), "object": "message", "channel": channel,
            "status": ("delivered" if delivered == len(results)
                       else "partial" if delivered else "failed"),
            "subject": subject, "body": text, "reference": reference, "metadata": metadata,
            "recipients": results, "counts": counts, "created_at": iso(self.ctx.now()),
        }
        self.messages[message["id"]] = message
        self.ctx.emit({"type": "message.sent", "message": message["id"], "channel": channel,
                       "reference": reference,
                       "recipients": [[r["to"], r["status"]] for r in results]})
        return message

    def message(self, message_id: str) -> Obj:
        found = self.messages.get(message_id)
        if found is None:
            raise not_found("message", message_id)
        return found
