"""Validation: 422 for bodies that break the rules, and nothing reaches the provider.

Every limit the spec names is checked on both sides: the last valid value is accepted and
the first invalid one answers 422.
"""

import pytest
from conftest import (
    HOME,
    MISSING,
    api,
    email,
    make_customer,
    make_shop,
    order,
    service_calls,
)

pytestmark = [pytest.mark.visibility("private"), pytest.mark.level("leaf")]

R1 = pytest.mark.tier("evolved-r1")
NAMES = [
    pytest.param(None, id="missing"),
    pytest.param("", id="empty"),
    pytest.param("   ", id="blank"),
    pytest.param("x" * 101, id="101-chars"),
    pytest.param(7, id="number"),
    pytest.param(["Ada"], id="list", marks=R1),
]
ABSENT = object()  # the field is left out of the body (None sends JSON null)


def _customer_body(**fields):
    body = {"name": "Ada", "address": HOME, "contacts": [{"channel": "email", "to": email()}]}
    for name, value in fields.items():
        if value is ABSENT:
            body.pop(name)
        else:
            body[name] = value
    return body


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shop-name")
@pytest.mark.visibility("public")
@pytest.mark.parametrize("name", NAMES)
def test_shop_name_must_be_a_short_non_blank_string(name):
    """A missing, empty, blank, over-long or non-string name answers 422 on POST /shops."""
    r = api("POST", "/shops", json={} if name is None else {"name": name})
    assert r.status_code == 422, f"POST /shops name={name!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-customer-name")
@pytest.mark.parametrize("name", NAMES)
def test_customer_name_must_be_a_short_non_blank_string(shop, name):
    """A missing, empty, blank, over-long or non-string name answers 422 on POST
    /customers."""
    r = api("POST", "/customers", shop,
            json=_customer_body(name=ABSENT if name is None else name))
    assert r.status_code == 422, f"POST /customers name={name!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-customer-name")
@pytest.mark.parametrize("what", ["shop", "customer"])
def test_a_name_of_100_characters_is_accepted(shop, what):
    """A name of exactly 100 characters is valid (101 is not) and reads back as given."""
    name = "N" * 100
    if what == "shop":
        r = api("POST", "/shops", json={"name": name})
    else:
        r = api("POST", "/customers", shop, json=_customer_body(name=name))
    assert r.status_code == 201, f"{what} name of 100 characters: {r.status_code} {r.text}"
    assert r.json()["name"] == name


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-customer-contacts")
@pytest.mark.parametrize("contacts", [
    pytest.param(ABSENT, id="missing"),
    pytest.param([], id="empty-list"),
    pytest.param("twice", id="repeated-pair"),
    pytest.param([{"channel": "fax", "to": "123"}], id="unknown-channel"),
    pytest.param([{"channel": "sms", "to": ""}], id="empty-to"),
    pytest.param([{"channel": "sms"}], id="no-to"),
    pytest.param("ada@example.com", id="not-a-list"),
    pytest.param([{"channel": "push", "to": f"device-{i:08d}"} for i in range(11)],
                 id="11-contacts"),
    pytest.param([{"channel": "Email", "to": "ada@example.com"}], id="channel-case", marks=R1),
    pytest.param(["ada@example.com"], id="contact-not-an-object", marks=R1),
    pytest.param([{"channel": "sms", "to": 15551230001}], id="to-a-number", marks=R1),
])
def test_contacts_must_be_a_list_of_1_to_10_known_channels(shop, contacts):
    """contacts missing, empty, over 10, with an unknown channel, an empty or non-string
    `to`, a contact that is not an object or a repeated (channel, to) answer 422."""
    if contacts == "twice":
        one = {"channel": "email", "to": email()}
        contacts = [one, dict(one)]
    r = api("POST", "/customers", shop, json=_customer_body(contacts=contacts))
    assert r.status_code == 422, f"contacts={contacts!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-customer-contacts")
def test_ten_contacts_are_accepted_in_order(shop):
    """Exactly 10 contacts are valid (11 are not), and they read back in the order given."""
    contacts = [{"channel": "push", "to": f"device-{i:08d}"} for i in range(10)]
    r = api("POST", "/customers", shop, json=_customer_body(contacts=contacts))
    assert r.status_code == 201, r.text
    assert r.json()["contacts"] == contacts


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-customer-contacts")
def test_one_address_on_two_channels_is_not_a_repeat(shop):
    """The same `to` on two channels is two different (channel, to) pairs: accepted."""
    contacts = [{"channel": "sms", "to": "+15551230009"}, {"channel": "push", "to": "+15551230009"}]
    r = api("POST", "/customers", shop, json=_customer_body(contacts=contacts))
    assert r.status_code == 201, r.text
    assert r.json()["contacts"] == contacts


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-customer-address")
@pytest.mark.parametrize("address", [
    pytest.param(ABSENT, id="missing"),
    pytest.param("12 Byron St", id="a-string"),
    pytest.param({**HOME, "street1": ""}, id="empty-street1"),
    pytest.param({k: v for k, v in HOME.items() if k != "city"}, id="no-city"),
    pytest.param({**HOME, "zip": None}, id="null-zip"),
    pytest.param({**HOME, "country": "gb"}, id="lower-case-country"),
    pytest.param({**HOME, "country": "GBR"}, id="three-letter-country"),
    pytest.param({**HOME, "country": "G"}, id="one-letter-country", marks=R1),
    pytest.param({**HOME, "street2": 5}, id="street2-a-number", marks=R1),
    pytest.param([HOME], id="a-list", marks=R1),
])
def test_address_needs_street_city_zip_and_a_two_letter_country(shop, address):
    """An address missing street1, city or zip, with a country that is not two upper-case
    letters, or with a non-string optional field answers 422."""
    r = api("POST", "/customers", shop, json=_customer_body(address=address))
    assert r.status_code == 422, f"address={address!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-customer-address")
def test_an_address_with_only_the_required_fields_is_accepted(shop):
    """street2 and state are optional: an address without them is valid and reads back as
    given."""
    address = {"street1": "9 Quay Rd", "city": "Dublin", "zip": "D02", "country": "IE"}
    r = api("POST", "/customers", shop, json=_customer_body(address=address))
    assert r.status_code == 201, r.text
    assert r.json()["address"] == address


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-weight")
@pytest.mark.visibility("public")
@pytest.mark.parametrize("weight", [
    pytest.param(ABSENT, id="missing"),
    pytest.param(0, id="zero"),
    pytest.param(-3, id="negative"),
    pytest.param(1120.5, id="over-1120"),
    pytest.param("12", id="a-string"),
    pytest.param(True, id="a-boolean"),
    pytest.param(None, id="null", marks=R1),
    pytest.param(-0.01, id="just-below-zero", marks=R1),
    pytest.param([12], id="a-list", marks=R1),
])
def test_order_weight_must_be_a_number_within_the_carrier_limit(shop, delivery, weight):
    """weight_oz missing, null, 0 or less, above 1120, a string, a boolean or a list answers
    422 and calls nothing on the provider."""
    customer = make_customer(shop)
    body = {"customer_id": customer["id"]}
    if weight is not ABSENT:
        body["weight_oz"] = weight
    r = api("POST", "/orders", shop, json=body)
    assert r.status_code == 422, f"weight_oz={weight!r}: {r.status_code} {r.text}"
    assert service_calls(delivery) == [], "an invalid order must not reach the provider"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-order-weight")
@pytest.mark.parametrize("weight", [1120, 0.1], ids=["1120", "0.1"])
def test_weights_at_the_limits_are_accepted(shop, weight):
    """weight_oz of exactly 1120 (the carrier's limit) or a small fraction of an ounce is
    valid: the order is 201 with the weight given."""
    r = order(shop, make_customer(shop), weight=weight)
    assert r.status_code == 201, f"weight_oz={weight}: {r.status_code} {r.text}"
    assert r.json()["weight_oz"] == weight


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-body")
@pytest.mark.parametrize("change", [
    pytest.param({"customer_id": ABSENT}, id="no-customer-id"),
    pytest.param({"customer_id": "own-as-string"}, id="customer-id-a-string"),
    pytest.param({"reference": "r" * 65}, id="reference-65-chars"),
    pytest.param({"reference": 12}, id="reference-a-number"),
    pytest.param({"customer_id": "own-as-float"}, id="customer-id-a-float", marks=R1),
    pytest.param({"customer_id": True}, id="customer-id-a-boolean", marks=R1),
    pytest.param({"reference": ["A-1"]}, id="reference-a-list", marks=R1),
])
def test_order_customer_and_reference_are_checked(shop, delivery, change):
    """customer_id that is not an integer, or a reference that is not a string of at most
    64 characters, answers 422 and reaches nothing on the provider."""
    customer = make_customer(shop)
    body = {"customer_id": customer["id"], "weight_oz": 5}
    for name, value in change.items():
        if value == "own-as-string":
            value = str(customer["id"])
        elif value == "own-as-float":
            value = float(customer["id"])
        if value is ABSENT:
            body.pop(name)
        else:
            body[name] = value
    r = api("POST", "/orders", shop, json=body)
    assert r.status_code == 422, f"{body}: {r.status_code} {r.text}"
    assert service_calls(delivery) == [], "a refused order must not reach the provider"


@pytest.mark.category("validation")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-customer")
def test_an_unknown_customer_is_404(shop, delivery):
    """An order for a customer id that does not exist answers 404 and reaches nothing on the
    provider."""
    r = order(shop, {"id": MISSING})
    assert r.status_code == 404, r.text
    assert service_calls(delivery) == [], "a refused order must not reach the provider"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-order-body")
@pytest.mark.parametrize("reference", ["r" * 64, None], ids=["64-chars", "null"])
def test_a_reference_of_64_characters_or_null_is_accepted(shop, reference):
    """reference is optional: a string of exactly 64 characters is kept, and an explicit
    null is the same as none (the order's reference is null)."""
    customer = make_customer(shop)
    r = api("POST", "/orders", shop, json={"customer_id": customer["id"], "weight_oz": 5,
                                           "reference": reference})
    assert r.status_code == 201, r.text
    assert r.json()["reference"] == reference


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-json-body")
@pytest.mark.parametrize("path, data", [
    pytest.param("/shops", '{"name": "Forge', id="shops-truncated"),
    pytest.param("/customers", '{"name": "Ada", "address": ', id="customers-truncated"),
    pytest.param("/orders", "customer_id=3&weight_oz=5", id="orders-form-encoded"),
    pytest.param("/customers", "[]", id="customers-an-array"),
    pytest.param("/orders", '[{"customer_id": 3, "weight_oz": 5}]', id="orders-an-array"),
])
def test_a_body_that_is_not_a_json_object_is_422(shop, delivery, path, data):
    """A body that is not JSON, or JSON that is not an object, answers 422 (with a valid key
    on the authenticated routes) and reaches nothing on the provider."""
    r = api("POST", path, shop, data=data, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, f"POST {path} {data!r}: {r.status_code} {r.text}"
    assert service_calls(delivery) == []


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-order-precedence")
def test_an_invalid_order_for_another_shops_customer_is_422(shop, delivery):
    """The body is checked before the customer: an invalid weight for another shop's
    customer answers 422, not 404."""
    theirs = make_customer(make_shop())
    r = api("POST", "/orders", shop, json={"customer_id": theirs["id"], "weight_oz": 0})
    assert r.status_code == 422, r.text
    assert service_calls(delivery) == []
