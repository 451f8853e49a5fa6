"""notify, a second correct candidate: stdlib only, other choices than the reference
(validation before authentication on POST /customers, X-Api-Key, its own key format)."""
import http.client
import itertools
import json
import os
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

BASE = urlsplit(os.environ["DELIVERY_URL"])
WAREHOUSE = {"name": "Anvil Goods", "street1": "500 Forge Way", "city": "Portland",
             "state": "OR", "zip": "97201", "country": "US"}
ids = itertools.count(1)
lock = threading.RLock()
SHOPS, CUSTOMERS, ORDERS, KEYS = {}, {}, {}, {}


class Fail(Exception):
    def __init__(self, status, detail="error"):
        self.status, self.detail = status, detail


def call(method, path, body=None, key=None):
    headers = {"X-Api-Key": "dk_test_alt", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    payload = None if body is None else json.dumps(body)
    for _ in range(3):
        conn = http.client.HTTPConnection(BASE.hostname, BASE.port, timeout=5)
        try:
            conn.request(method, path, payload, headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status >= 500:
                continue
            return resp.status, json.loads(raw)
        except (OSError, http.client.HTTPException, ValueError):
            continue
        finally:
            conn.close()
    return None, None


def nonblank(v, n):
    return isinstance(v, str) and v.strip() != "" and len(v) <= n


def valid_customer(b):
    if not nonblank(b.get("name"), 100):
        return False
    a = b.get("address")
    if not isinstance(a, dict) or not all(nonblank(a.get(k), 1000)
                                          for k in ("street1", "city", "zip")):
        return False
    if not (isinstance(a.get("country"), str) and re.fullmatch(r"[A-Z]{2}", a["country"])):
        return False
    if any(k in a and not isinstance(a[k], str) for k in ("street2", "state")):
        return False
    c = b.get("contacts")
    if not isinstance(c, list) or not 1 <= len(c) <= 10:
        return False
    pairs = [(x.get("channel"), x.get("to")) if isinstance(x, dict) else (None, None) for x in c]
    return (all(ch in ("email", "sms", "push") and nonblank(to, 10**6) for ch, to in pairs)
            and len(set(pairs)) == len(pairs))


def send_all(oid, customer, subject, text, tag):
    out = {}
    channels = list(dict.fromkeys(x["channel"] for x in customer["contacts"]))
    for ch in channels:
        to = [x["to"] for x in customer["contacts"] if x["channel"] == ch]
        msg = {"channel": ch, "to": to, "body": text, "reference": f"order-{oid}"}
        if ch == "email":
            msg["subject"] = subject
        key = f"{tag}:{oid}:{ch}:{uuid.uuid5(uuid.NAMESPACE_URL, str(oid))}"
        status, m = call("POST", "/v1/messages", msg, key)
        for t in to:
            out[(ch, t)] = (None, "failed")
        if status == 201:
            for r in m["recipients"]:
                out[(ch, r["to"])] = (m["id"], r["status"])
    return out


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            b = json.loads(raw or b"null")
        except ValueError:
            raise Fail(422) from None
        if not isinstance(b, dict):
            raise Fail(422)
        return b

    def shop(self):
        h = self.headers.get("Authorization") or ""
        m = re.fullmatch(r"Bearer (\S+)", h)
        if not m or m.group(1) not in SHOPS:
            raise Fail(401)
        return SHOPS[m.group(1)]

    def handle_any(self, method):
        try:
            self.route(method, self.path.split("?")[0].rstrip("/"))
        except Fail as f:
            self.reply(f.status, {"detail": f.detail})

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def route(self, method, path):
        if method == "GET" and path == "/health":
            return self.reply(200, {"status": "ok"})
        if method == "POST" and path == "/shops":
            b = self.body()
            if not nonblank(b.get("name"), 100):
                raise Fail(422)
            with lock:
                s = {"id": next(ids), "name": b["name"], "api_key": uuid.uuid4().hex}
                SHOPS[s["api_key"]] = s
            return self.reply(201, s)
        if method == "POST" and path == "/customers":
            b = self.body()  # validation before authentication, on purpose
            shop = self.shop()
            if not valid_customer(b):
                raise Fail(422)
            c = {"id": next(ids), "name": b["name"], "address": b["address"],
                 "contacts": [{"channel": x["channel"], "to": x["to"]} for x in b["contacts"]]}
            CUSTOMERS[c["id"]] = (shop["id"], c)
            return self.reply(201, c)
        m = re.fullmatch(r"/customers/(\d+)", path)
        if method == "GET" and m:
            shop = self.shop()
            owner, c = CUSTOMERS.get(int(m.group(1)), (None, None))
            if owner != shop["id"]:
                raise Fail(404)
            return self.reply(200, c)
        if method == "POST" and path == "/orders":
            shop = self.shop()
            return self.new_order(shop, self.body())
        m = re.fullmatch(r"/orders/(\d+)(/tracking)?", path)
        if method == "GET" and m:
            shop = self.shop()
            rec = ORDERS.get(int(m.group(1)))
            if not rec or rec["shop"] != shop["id"]:
                raise Fail(404)
            if not m.group(2):
                return self.reply(200, rec["order"])
            return self.tracking(rec)
        raise Fail(404)

    def new_order(self, shop, b):
        cid, w, ref = b.get("customer_id"), b.get("weight_oz"), b.get("reference")
        if type(cid) is not int or type(w) not in (int, float) or not 0 < w <= 1120:
            raise Fail(422)
        if ref is not None and not (isinstance(ref, str) and len(ref) <= 64):
            raise Fail(422)
        owner, cust = CUSTOMERS.get(cid, (None, None))
        if owner != shop["id"]:
            raise Fail(404)
        ikey = self.headers.get("Idempotency-Key")
        if ikey and (shop["id"], ikey) in KEYS:
            return self.reply(201, ORDERS[KEYS[(shop["id"], ikey)]]["order"])
        oid = next(ids)
        status, shp = call("POST", "/v1/shipments", {
            "reference": f"order-{oid}", "parcel": {"weight_oz": w}, "from_address": WAREHOUSE,
            "to_address": dict(cust["address"], name=cust["name"])}, f"ship:{oid}")
        if status != 201:
            raise Fail(502)
        best = sorted(shp["rates"], key=lambda r: (r["amount"], r["delivery_days"]))[0]
        status, shp = call("POST", f"/v1/shipments/{shp['id']}/buy", {"rate": best["id"]},
                           f"buy:{oid}")
        if status != 200:
            raise Fail(502)
        got = send_all(oid, cust, "Your order has shipped",
                       f"Shipped! Track it with {shp['tracking_code']}.", "shipped")
        notes = [{"channel": x["channel"], "to": x["to"],
                  "status": got[(x["channel"], x["to"])][1],
                  "message_id": got[(x["channel"], x["to"])][0]} for x in cust["contacts"]]
        ok = [n["status"] == "delivered" for n in notes]
        order = {"id": oid, "customer_id": cid, "reference": ref, "weight_oz": w,
                 "status": "label_purchased",
                 "shipment": {"id": shp["id"], "carrier": best["carrier"],
                              "service": best["service"], "amount": best["amount"],
                              "tracking_code": shp["tracking_code"],
                              "tracker_id": shp["tracker_id"]},
                 "notifications": notes,
                 "notification_status": "all_delivered" if all(ok) else
                 "partial" if any(ok) else "none_delivered"}
        with lock:
            ORDERS[oid] = {"shop": shop["id"], "order": order, "customer": cust, "told": False}
            if ikey:
                KEYS[(shop["id"], ikey)] = oid
        return self.reply(201, order)

    def tracking(self, rec):
        order = rec["order"]
        status, t = call("GET", f"/v1/trackers/{order['shipment']['tracker_id']}")
        if status != 200:
            raise Fail(502)
        order["status"] = t["status"]
        with lock:
            tell = t["status"] == "delivered" and not rec["told"]
            rec["told"] = rec["told"] or tell
        if tell:
            send_all(order["id"], rec["customer"], "Your order was delivered",
                     "Your parcel was delivered.", "delivered")
        return self.reply(200, {"order_id": order["id"], "tracking_code": t["tracking_code"],
                                "status": t["status"],
                                "events": [{"status": d["status"], "at": d["datetime"]}
                                           for d in t["tracking_details"]]})


ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
