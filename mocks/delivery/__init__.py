"""A shipping and notifications provider (EasyPost/Novu-like): the ``delivery`` mock.

Shipping: addresses, parcels, shipments with rates whose prices depend only on the
service level and the parcel's weight, buying a rate (a label and a tracker), and
trackers whose status follows the virtual clock. Notifications: messages per channel
(email, sms, push) to one or many recipients, each with its own result. Every route
is JSON under ``/v1/``, wants an API key (``Authorization: Bearer dk_test_...`` or
``X-Api-Key: dk_test_...``) and honours ``Idempotency-Key`` on POST. See
``_service.DeliveryMock`` for scenarios and seed data, ``_openapi`` for the contract.
"""

from __future__ import annotations

from ._service import DeliveryMock as DeliveryMock

__all__ = ["DeliveryMock"]
