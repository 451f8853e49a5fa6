"""Payment intents, the charges their confirmation makes, and refunds.

The state machine is Stripe's::

    requires_payment_method --(payment method)--> requires_confirmation --confirm-->
        succeeded                  (capture_method automatic / automatic_async)
        requires_capture --capture--> succeeded      (capture_method manual)
        requires_payment_method + last_payment_error  (a declined card: 402)
    any of the first three, or requires_capture --cancel--> canceled

A refund never takes more than what was captured minus what was already refunded.
``amount_received`` is what was captured; refunds do not lower it (as on Stripe).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from . import _objects as obj
from ._cards import PAYMENT_METHODS
from ._errors import StripeError, invalid, unexpected_state
from ._form import Params, apply_metadata
from ._ledger import Ledger, Obj

CURRENCIES = frozenset((
    "usd aed aud bgn brl cad chf cny czk dkk eur gbp hkd huf idr ils inr isk jpy krw mxn myr "
    "nok nzd php pln ron sek sgd thb try twd zar").split())
ZERO_DECIMAL = frozenset({"jpy", "krw", "isk", "twd", "huf"})
#: The smallest amount Stripe charges, in the currency's minor unit.
MINIMUM = {"usd": 50, "eur": 50, "gbp": 30, "cad": 50, "aud": 50, "chf": 50, "jpy": 50,
           "dkk": 250, "nok": 300, "sek": 300, "mxn": 1000, "hkd": 400, "sgd": 50}
MAXIMUM = 99_999_999
SYMBOLS = {"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥", "cad": "$", "aud": "$"}

CANCELABLE = ("requires_payment_method", "requires_capture", "requires_confirmation",
              "requires_action", "processing")
CONFIRMABLE = ("requires_confirmation", "requires_payment_method", "requires_action")
REDIRECT_MESSAGE = (
    "This PaymentIntent is configured to accept payment methods enabled in your Dashboard, "
    "some of which may require a full page redirect to succeed. If you do not want to accept "
    "redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and "
    "`automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and "
    "Payment Intents. If you do want to accept redirect-based payment methods, set a "
    "`return_url` when confirming the PaymentIntent.")

_COMMON = ("description", "metadata", "receipt_email", "setup_future_usage", "shipping",
           "statement_descriptor", "statement_descriptor_suffix", "transfer_group",
           "payment_method", "payment_method_data", "payment_method_options",
           "payment_method_types", "capture_method", "expand", "application_fee_amount",
           "transfer_data", "on_behalf_of", "payment_method_configuration",
           # The newest API's name for payment_method_types (stripe-python 16+ sends it).
           "allowed_payment_method_types", "amount_details", "customer_account")
CREATE_PARAMS = (*_COMMON, "amount", "currency", "customer", "confirm",
                 "automatic_payment_methods", "confirmation_method", "return_url",
                 "off_session", "error_on_requires_action", "use_stripe_sdk", "mandate",
                 "mandate_data", "radar_options", "excluded_payment_method_types",
                 "confirmation_token", "payment_details")
CONFIRM_PARAMS = ("payment_method", "payment_method_data", "payment_method_options",
                  "payment_method_types", "return_url", "off_session", "receipt_email",
                  "setup_future_usage", "shipping", "capture_method", "expand",
                  "error_on_requires_action", "use_stripe_sdk", "mandate", "mandate_data",
                  "radar_options", "confirmation_token", "payment_details",
                  "allowed_payment_method_types", "excluded_payment_method_types",
                  "amount_details", "amount_to_confirm")
UPDATE_PARAMS = (*_COMMON, "amount", "currency", "customer", "excluded_payment_method_types",
                 "payment_details")
#: What may still change once a payment intent has succeeded or was canceled.
LATE_UPDATES = frozenset({"description", "metadata", "receipt_email", "shipping", "expand"})


def money(amount: int, currency: str) -> str:
    """``$20.00`` / ``¥500`` / ``20.00 SEK``, as Stripe words amounts in its messages."""
    units = str(amount) if currency in ZERO_DECIMAL else f"{amount / 100:.2f}"
    symbol = SYMBOLS.get(currency)
    return f"{symbol}{units}" if symbol else f"{units} {currency.upper()}"


class Payments:
    """Payment intents, charges and refunds over one :class:`Ledger`."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.ctx = ledger.ctx

    # -- validation helpers --------------------------------------------------------------

    def _currency(self, params: Params, *, required: bool) -> str | None:
        text = params.string("currency", required=required)
        if text is None:
            return None
        currency = text.lower()
        if currency not in CURRENCIES:
            raise invalid(f"Invalid currency: {text}. Stripe currently supports these "
                          f"currencies: {', '.join(sorted(CURRENCIES))}", param="currency")
        return currency

    def _amount(self, params: Params, currency: str, *, required: bool) -> int | None:
        amount = params.integer("amount", required=required, minimum=1)
        if amount is None:
            return None
        minimum = MINIMUM.get(currency, 50)
        if amount < minimum:
            raise invalid(f"Amount must be at least {money(minimum, currency)} {currency}",
                          param="amount", code="amount_too_small")
        if amount > MAXIMUM:
            raise invalid(f"Amount must be no more than {money(MAXIMUM, currency)}",
                          param="amount", code="amount_too_large")
        return amount

    def _customer(self, params: Params) -> str | None:
        customer_id = params.string("customer")
        if customer_id is not None:
            self.ledger.get("cus", customer_id, param="customer", status=400)
        return customer_id

    def _payment_method_source(self, params: Params) -> Callable[[], Obj] | None:
        """What will give the payment method, validated now, made only when called
        (so a request that fails validation creates nothing)."""
        pm_id = params.string("payment_method")
        data = params.hash("payment_method_data")
        if pm_id is not None and data is not None:
            raise invalid("You may only specify one of these parameters: payment_method, "
                          "payment_method_data.", param="payment_method_data")
        if pm_id is not None:
            if pm_id in PAYMENT_METHODS:
                return lambda: self.ledger.payment_method(pm_id)
            found = self.ledger.payment_method(pm_id)
            return lambda: found
        if data is not None:
            data.only(self.ledger.PM_PARAMS)
            data.enum("type", ("card",), required=True)
            card_params = data.hash("card", required=True)
            assert card_params is not None
            metadata: dict[str, str] = {}
            apply_metadata(metadata, data.metadata())
            card, month, year, cvc = self.ledger._card_from(card_params)
            return lambda: self.ledger._new_payment_method(card, month, year, cvc, metadata)
        return None

    def _options(self, params: Params) -> tuple[dict[str, object] | None, list[str] | None]:
        """``automatic_payment_methods`` and ``payment_method_types`` as given (None: not)."""
        apm = params.hash("automatic_payment_methods")
        types = (params.strings("payment_method_types")
                 or params.strings("allowed_payment_method_types") or None)
        if apm is not None and types is not None:
            raise invalid("You may only specify one of these parameters: "
                          "automatic_payment_methods, payment_method_types.",
                          param="automatic_payment_methods")
        for kind in types or ():
            if kind != "card":
                raise invalid(f"The payment method type provided: {kind} is invalid. This "
                              "mock supports: card.", param="payment_method_types")
        if apm is None:
            return None, types
        apm.only(("enabled", "allow_redirects"))
        enabled = apm.boolean("enabled", required=True)
        redirects = apm.enum("allow_redirects", ("always", "never")) or "always"
        return ({"allow_redirects": redirects, "enabled": True} if enabled else {}), types

    # -- payment intents -----------------------------------------------------------------

    def create(self, params: Params) -> Obj:
        ledger = self.ledger
        params.only(CREATE_PARAMS)
        currency = self._currency(params, required=True)
        assert currency is not None
        amount = self._amount(params, currency, required=True)
        assert amount is not None
        customer = self._customer(params)
        capture_method = params.enum("capture_method", ("automatic", "automatic_async",
                                                        "manual")) or "automatic_async"
        params.enum("confirmation_method", ("automatic", "manual"))
        confirm = bool(params.boolean("confirm"))
        apm, types = self._options(params)
        if apm is None and types is None:
            apm = {"allow_redirects": "always", "enabled": True}  # Stripe's default since 2023
        source = self._payment_method_source(params)
        return_url = params.string("return_url")
        for flag in ("error_on_requires_action", "use_stripe_sdk"):
            params.boolean(flag)
        if params.string("off_session") not in (None, "true", "false", "one_off", "recurring"):
            raise invalid(f"Invalid off_session: {params.string('off_session')}",
                          param="off_session")
        future = params.enum("setup_future_usage", ("off_session", "on_session"))
        statement = params.string("statement_descriptor", max_length=22)
        suffix = params.string("statement_descriptor_suffix", max_length=22)
        update = params.metadata()
        if confirm:
            if source is None:
                raise invalid("You cannot confirm this PaymentIntent because it's missing a "
                              "payment method. You can either update the PaymentIntent with a "
                              "payment method and then confirm it again, or confirm it again "
                              "directly with a payment method.", param="payment_method")
            if apm and apm["allow_redirects"] != "never" and return_url is None:
                raise invalid(REDIRECT_MESSAGE, param="return_url")
        metadata: dict[str, str] = {}
        apply_metadata(metadata, update)
        pi_id = self.ctx.new_id("pi")
        pi = obj.payment_intent(
            pi_id, self.ctx.now(), amount=amount, currency=currency,
            client_secret=f"{pi_id}_{self.ctx.new_id('secret')}",
            capture_method=capture_method, automatic_payment_methods=apm or None,
            payment_method_types=types or ["card"], customer=customer,
            description=params.string("description"), metadata=metadata,
            receipt_email=params.string("receipt_email"), statement_descriptor=statement,
            statement_descriptor_suffix=suffix, setup_future_usage=future,
            transfer_group=params.string("transfer_group"))
        ledger.intents[pi_id] = pi
        pm = source() if source is not None else None
        if pm is not None:
            pi["payment_method"] = pm["id"]
            pi["status"] = "requires_confirmation"
        ledger.emit("payment_intent.created", pi)
        if confirm and pm is not None:
            self._process(pi, pm)
        return pi

    def intent(self, pi_id: str) -> Obj:
        return self.ledger.get("pi", pi_id)

    def update(self, pi_id: str, params: Params) -> Obj:
        params.only(UPDATE_PARAMS)
        pi = self.ledger.get("pi", pi_id)
        if pi["status"] in ("succeeded", "canceled", "requires_capture", "processing"):
            late = [key for key in params.tree if key not in LATE_UPDATES]
            if late:
                raise unexpected_state(
                    f"You cannot update this PaymentIntent because it has a status of "
                    f"{pi['status']}. You may only update the following fields: description, "
                    f"metadata, receipt_email, shipping.", extra={"payment_intent": _snap(pi)})
        currency = self._currency(params, required=False) or pi["currency"]
        amount = self._amount(params, currency, required=False)
        customer = self._customer(params)
        capture_method = params.enum("capture_method", ("automatic", "automatic_async",
                                                        "manual"))
        apm, types = self._options(params)
        source = self._payment_method_source(params)
        update = params.metadata()
        merged = dict(pi["metadata"])
        apply_metadata(merged, update)
        strings = {key: params.string(key) for key in (
            "description", "receipt_email", "statement_descriptor", "statement_descriptor_suffix",
            "transfer_group") if params.has(key)}
        future = params.enum("setup_future_usage", ("off_session", "on_session"))
        pi.update(strings)
        pi["metadata"] = merged
        pi["currency"] = currency
        if amount is not None:
            pi["amount"] = amount
        if customer is not None:
            pi["customer"] = customer
        if capture_method is not None:
            pi["capture_method"] = capture_method
        if future is not None:
            pi["setup_future_usage"] = future
        if apm is not None:
            pi["automatic_payment_methods"] = apm or None
        if types is not None:
            pi["payment_method_types"] = types
            pi["automatic_payment_methods"] = None
        if source is not None:
            pi["payment_method"] = source()["id"]
            pi["status"] = "requires_confirmation"
        return pi

    def confirm(self, pi_id: str, params: Params) -> Obj:
        params.only(CONFIRM_PARAMS)
        pi = self.ledger.get("pi", pi_id)
        source = self._payment_method_source(params)
        return_url = params.string("return_url")
        capture_method = params.enum("capture_method", ("automatic", "automatic_async",
                                                        "manual"))
        for flag in ("error_on_requires_action", "use_stripe_sdk"):
            params.boolean(flag)
        future = params.enum("setup_future_usage", ("off_session", "on_session"))
        if pi["status"] not in CONFIRMABLE:
            detail = ("it has already succeeded after being previously confirmed"
                      if pi["status"] == "succeeded" else f"it has a status of {pi['status']}")
            raise unexpected_state(
                f"You cannot confirm this PaymentIntent because {detail}. Only a PaymentIntent "
                "with one of the following statuses may be confirmed: requires_confirmation, "
                "requires_payment_method, requires_action.", extra={"payment_intent": _snap(pi)})
        if source is None and pi["payment_method"] is None:
            raise invalid("You cannot confirm this PaymentIntent because it's missing a payment "
                          "method. You can either update the PaymentIntent with a payment "
                          "method and then confirm it again, or confirm it again directly "
                          "with a payment method.", param="payment_method",
                          extra={"payment_intent": _snap(pi)})
        apm = pi["automatic_payment_methods"]
        if apm and apm["allow_redirects"] != "never" and return_url is None:
            raise invalid(REDIRECT_MESSAGE, param="return_url")
        if capture_method is not None:
            pi["capture_method"] = capture_method
        if future is not None:
            pi["setup_future_usage"] = future
        receipt = params.string("receipt_email")
        if receipt is not None:
            pi["receipt_email"] = receipt
        pm = source() if source is not None else self.ledger.payment_methods[pi["payment_method"]]
        self._process(pi, pm)
        return pi

    def _process(self, pi: Obj, pm: Obj) -> None:
        """Charge ``pm`` for ``pi``: the card's fixed outcome decides.

        Raises:
            StripeError: 402 ``card_error`` for a declining card; the failed charge and the
                intent's ``last_payment_error`` are kept (the answer is replayable).
        """
        ledger = self.ledger
        card = ledger.cards[pm["id"]]
        manual = pi["capture_method"] == "manual"
        charge = obj.charge(self.ctx.new_id("ch"), self.ctx.now(), intent={
            **pi, "payment_method": pm["id"]}, pm=pm, decline=card.decline, captured=not manual)
        ledger.charges[charge["id"]] = charge
        pi["latest_charge"] = charge["id"]
        decline = card.decline
        if decline is not None:
            error = StripeError(402, "card_error", decline.message, code=decline.code,
                                decline_code=decline.decline_code)
            last = {key: value for key, value in error.body()["error"].items()}
            last["charge"] = charge["id"]
            last["payment_method"] = copy.deepcopy(pm)
            pi["last_payment_error"] = {key: last[key] for key in sorted(last)}
            pi["payment_method"] = None
            pi["status"] = "requires_payment_method"
            ledger.emit("charge.failed", charge)
            ledger.emit("payment_intent.payment_failed", pi)
            error.extra = {"charge": charge["id"], "payment_intent": _snap(pi),
                           "payment_method": copy.deepcopy(pm)}
            error.committed = True
            raise error
        pi["payment_method"] = pm["id"]
        pi["last_payment_error"] = None
        if pi["setup_future_usage"] and pi["customer"]:
            ledger._attach(pm, ledger.customers[pi["customer"]])
        ledger.emit("charge.succeeded", charge)
        if manual:
            pi["status"] = "requires_capture"
            pi["amount_capturable"] = pi["amount"]
            ledger.emit("payment_intent.amount_capturable_updated", pi)
        else:
            pi["status"] = "succeeded"
            pi["amount_received"] = pi["amount"]
            ledger.emit("payment_intent.succeeded", pi)

    def capture(self, pi_id: str, params: Params) -> Obj:
        params.only(("amount_to_capture", "application_fee_amount", "final_capture",
                     "metadata", "statement_descriptor", "statement_descriptor_suffix",
                     "transfer_data", "expand", "amount_details", "payment_details"))
        pi = self.ledger.get("pi", pi_id)
        wanted = params.integer("amount_to_capture", minimum=1)
        params.boolean("final_capture")
        update = params.metadata()
        if pi["status"] != "requires_capture":
            raise unexpected_state(
                f"This PaymentIntent could not be captured because it has a status of "
                f"{pi['status']}. Only a PaymentIntent with one of the following statuses may "
                "be captured: requires_capture.", extra={"payment_intent": _snap(pi)})
        capturable = pi["amount_capturable"]
        amount = capturable if wanted is None else wanted
        if amount > capturable:
            raise invalid(f"The amount to capture ({amount}) must be less than or equal to the "
                          f"amount capturable ({capturable}).", param="amount_to_capture",
                          code="amount_too_large")
        merged = dict(pi["metadata"])
        apply_metadata(merged, update)
        pi["metadata"] = merged
        charge = self.ledger.charges[pi["latest_charge"]]
        charge["captured"] = True
        charge["amount_captured"] = amount
        # The part not captured is released: Stripe shows it as refunded on the charge.
        charge["amount_refunded"] = charge["amount"] - amount
        pi["amount_capturable"] = 0
        pi["amount_received"] = amount
        pi["status"] = "succeeded"
        self.ledger.emit("charge.captured", charge)
        self.ledger.emit("payment_intent.succeeded", pi)
        return pi

    def cancel(self, pi_id: str, params: Params) -> Obj:
        params.only(("cancellation_reason", "expand"))
        pi = self.ledger.get("pi", pi_id)
        reason = params.enum("cancellation_reason", ("duplicate", "fraudulent",
                                                     "requested_by_customer", "abandoned"))
        if pi["status"] not in CANCELABLE:
            raise unexpected_state(
                f"You cannot cancel this PaymentIntent because it has a status of "
                f"{pi['status']}. Only a PaymentIntent with one of the following statuses may "
                f"be canceled: {', '.join(CANCELABLE)}.", extra={"payment_intent": _snap(pi)})
        if pi["status"] == "requires_capture":
            charge = self.ledger.charges[pi["latest_charge"]]
            charge["amount_refunded"] = charge["amount"]  # the authorization is released
            charge["refunded"] = True
        pi["status"] = "canceled"
        pi["canceled_at"] = self.ctx.now()
        pi["cancellation_reason"] = reason
        pi["amount_capturable"] = 0
        self.ledger.emit("payment_intent.canceled", pi)
        return pi

    def list_intents(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "customer", "created",
                     "customer_account", "expand"))
        customer = params.string("customer")
        items = [pi for pi in self.ledger.intents.values()
                 if customer is None or pi["customer"] == customer]
        return self.ledger.page(params, "/v1/payment_intents", items, "payment_intent")

    # -- charges -------------------------------------------------------------------------

    def list_charges(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "customer", "payment_intent",
                     "created", "transfer_group", "expand"))
        customer = params.string("customer")
        intent = params.string("payment_intent")
        items = [ch for ch in self.ledger.charges.values()
                 if (customer is None or ch["customer"] == customer)
                 and (intent is None or ch["payment_intent"] == intent)]
        return self.ledger.page(params, "/v1/charges", items, "charge")

    # -- refunds -------------------------------------------------------------------------

    def refund(self, params: Params) -> Obj:
        ledger = self.ledger
        params.only(("amount", "charge", "payment_intent", "reason", "metadata", "expand",
                     "instructions_email", "origin", "refund_application_fee",
                     "reverse_transfer", "currency", "customer"))
        pi_id = params.string("payment_intent")
        charge_id = params.string("charge")
        wanted = params.integer("amount", minimum=1)
        reason = params.enum("reason", ("duplicate", "fraudulent", "requested_by_customer"))
        metadata: dict[str, str] = {}
        apply_metadata(metadata, params.metadata())
        if pi_id is None and charge_id is None:
            raise invalid("One of the following params should be provided for this request: "
                          "payment_intent or charge.", param="payment_intent")
        if pi_id is not None:
            pi = ledger.get("pi", pi_id, param="payment_intent", status=400)
            if pi["status"] != "succeeded" or pi["latest_charge"] is None:
                raise invalid(f"This PaymentIntent ({pi_id}) does not have a successful charge "
                              "to refund.", param="payment_intent")
            if charge_id is not None and charge_id != pi["latest_charge"]:
                raise invalid(f"The charge {charge_id} does not belong to PaymentIntent "
                              f"{pi_id}.", param="charge")
            charge = ledger.charges[pi["latest_charge"]]
        else:
            assert charge_id is not None
            charge = ledger.get("ch", charge_id, param="charge", status=400)
            if charge["status"] != "succeeded":
                raise invalid(f"Charge {charge_id} has failed; there is nothing to refund.",
                              param="charge")
            if not charge["captured"]:
                raise invalid(f"Charge {charge_id} has not been captured: cancel its "
                              "PaymentIntent to release the authorization.", param="charge")
        refunded = sum(r["amount"] for r in ledger.refunds.values()
                       if r["charge"] == charge["id"])
        remaining = charge["amount_captured"] - refunded
        currency = charge["currency"]
        if remaining <= 0:
            raise invalid(f"Charge {charge['id']} has already been refunded.",
                          code="charge_already_refunded")
        amount = remaining if wanted is None else wanted
        if amount > remaining:
            what = (f"charge amount ({money(charge['amount_captured'], currency)})"
                    if refunded == 0 else
                    f"unrefunded amount on charge ({money(remaining, currency)})")
            raise invalid(f"Refund amount ({money(amount, currency)}) is greater than {what}",
                          param="amount", code="amount_too_large")
        refund = obj.refund(self.ctx.new_id("re"), self.ctx.now(), amount=amount,
                            charge=charge, reason=reason, metadata=metadata)
        ledger.refunds[refund["id"]] = refund
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        ledger.emit("refund.created", refund)
        ledger.emit("charge.refunded", charge)
        return refund

    def update_refund(self, refund_id: str, params: Params) -> Obj:
        params.only(("metadata", "expand"))
        refund = self.ledger.get("re", refund_id)
        merged = dict(refund["metadata"])
        apply_metadata(merged, params.metadata())
        refund["metadata"] = merged
        return refund

    def list_refunds(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "charge", "payment_intent",
                     "created", "expand"))
        charge = params.string("charge")
        intent = params.string("payment_intent")
        items = [r for r in self.ledger.refunds.values()
                 if (charge is None or r["charge"] == charge)
                 and (intent is None or r["payment_intent"] == intent)]
        return self.ledger.page(params, "/v1/refunds", items, "refund")


def _snap(pi: Obj) -> Obj:
    return copy.deepcopy(pi)
