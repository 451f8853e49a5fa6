"""Validation: 422 for bodies that break the rules, and nothing reaches the provider."""

import pytest
from conftest import HOME, api, email, make_customer, order, service_calls


@pytest.mark.category("validation")
def test_shop_and_customer_names_must_be_non_empty(shop):
    """A missing, empty, blank or over-long name answers 422 on POST /shops and
    POST /customers."""
    contacts = [{"channel": "email", "to": email()}]
    for name in [None, "", "   ", "x" * 101, 7]:
        body = {} if name is None else {"name": name}
        r = api("POST", "/shops", json=body)
        assert r.status_code == 422, f"POST /shops name={name!r}: {r.status_code}"
        r = api("POST", "/customers", shop, json={**body, "address": HOME, "contacts": contacts})
        assert r.status_code == 422, f"POST /customers name={name!r}: {r.status_code}"


@pytest.mark.category("validation")
def test_contacts_must_be_a_non_empty_list_of_known_channels(shop):
    """contacts missing, empty, over 10, with an unknown channel, an empty `to` or a
    repeated (channel, to) answer 422."""
    one = {"channel": "email", "to": email()}
    for contacts in [None, [], [one] * 2, [{"channel": "fax", "to": "123"}],
                     [{"channel": "sms", "to": ""}], [{"channel": "sms"}], "ada@example.com",
                     [{"channel": "push", "to": f"device-{i:08d}"} for i in range(11)]]:
        body = {"name": "Ada", "address": HOME}
        if contacts is not None:
            body["contacts"] = contacts
        r = api("POST", "/customers", shop, json=body)
        assert r.status_code == 422, f"contacts={contacts!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_address_needs_street_city_zip_and_a_two_letter_country(shop):
    """An address missing street1, city or zip, or with a country that is not two upper-case
    letters, answers 422."""
    contacts = [{"channel": "email", "to": email()}]
    bad = [None, "12 Byron St", {**HOME, "street1": ""}, {k: v for k, v in HOME.items()
                                                          if k != "city"},
           {**HOME, "zip": None}, {**HOME, "country": "gb"}, {**HOME, "country": "GBR"}]
    for address in bad:
        body = {"name": "Ada", "contacts": contacts}
        if address is not None:
            body["address"] = address
        r = api("POST", "/customers", shop, json=body)
        assert r.status_code == 422, f"address={address!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_order_weight_must_be_a_number_within_the_carrier_limit(shop, delivery):
    """weight_oz missing, 0, negative, above 1120, a string or a boolean answers 422 and
    calls nothing on the provider."""
    customer = make_customer(shop)
    for weight in [None, 0, -3, 1120.5, "12", True]:
        body = {"customer_id": customer["id"]}
        if weight is not None:
            body["weight_oz"] = weight
        r = api("POST", "/orders", shop, json=body)
        assert r.status_code == 422, f"weight_oz={weight!r}: {r.status_code} {r.text}"
    assert service_calls(delivery) == [], "an invalid order must not reach the provider"


@pytest.mark.category("validation")
def test_order_customer_and_reference_are_checked(shop, delivery):
    """customer_id that is not an integer, or a reference that is not a string of at most
    64 characters, answers 422; an unknown customer answers 404; none reaches the provider."""
    customer = make_customer(shop)
    for body in [{"weight_oz": 5}, {"customer_id": str(customer["id"]), "weight_oz": 5},
                 {"customer_id": customer["id"], "weight_oz": 5, "reference": "r" * 65},
                 {"customer_id": customer["id"], "weight_oz": 5, "reference": 12}]:
        r = api("POST", "/orders", shop, json=body)
        assert r.status_code == 422, f"{body}: {r.status_code} {r.text}"
    r = order(shop, {"id": 10**9})
    assert r.status_code == 404, r.text
    assert service_calls(delivery) == [], "a refused order must not reach the provider"
