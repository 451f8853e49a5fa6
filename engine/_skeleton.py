"""``anvil tasks new``: a task package skeleton that ``anvil tasks check`` passes as written.

The skeleton is a tiny owner-scoped resource API (items with a status workflow
and per-owner counters) so that every oracle category has a real example item:
api_surface, authorization, validation, state, side_effects, workflow. Its
reference is a stdlib-only service, so checking it needs no package index.
Replace the API with the task's own; keep the shape.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._errors import InputError
from ._task import ID_PATTERN

CATEGORIES = ("api_surface", "authorization", "validation", "state", "side_effects", "workflow")

_TASK_TOML = '''\
id = "{{id}}"
title = "{{title}}"
domain = "example"

[service]
port = 8000              # the port the service listens on inside its container
health_path = "/health"  # omit: any HTTP answer on /health or / counts
build_timeout = 300      # seconds, for each phase
startup_timeout = 20
health_timeout = 10
teardown_timeout = 10

[oracle]
timeout = 120            # the whole oracle run
item_timeout = 10        # one item (a hanging request fails that item only)

# A mock the service must call, one [[mocks]] table each (needs the mock fabric):
# [[mocks]]
# kind = "payment"          # which mock (its name in the anvil.mocks entry points)
# env = "PAYMENT_URL"       # the variable that gives the service the mock's base URL
# scenario = "default"      # the state the mock is seeded with for each evaluation
'''

_SPEC = '''\
# {{title}}

Build an HTTP service that keeps a list of **items** for each owner. Items have a
name and a status that follows a small workflow; each owner can read counters of
their items. Requests and responses are JSON. The contract is `openapi.yaml`.

## Running

The service listens on port 8000 (on all interfaces) and answers
`GET /health` with `200 {"status": "ok"}` once it is ready.

## Owners and authorization

Every endpoint except `/health` needs an `Authorization: Bearer <token>` header.
Any non-empty token is accepted and names its owner: two requests with the same
token act for the same owner. A missing or malformed header is answered
`401 {"detail": "..."}`. An owner sees only their own items: another owner's
item is answered `404`, exactly as an item that does not exist.

## Items

An item is `{"id": integer, "name": string, "status": "open" | "done" | "archived"}`.

- `POST /items` with `{"name": string}` creates an item in status `open` and
  answers `201` with it. `name` is required, a string of 1 to 100 characters;
  anything else (no body, not an object, a missing, empty, too long or
  non-string name) is answered `422 {"detail": "..."}`.
- `GET /items` answers `200` with the owner's items, oldest first.
- `GET /items/{id}` answers `200` with the item, or `404`.
- `PATCH /items/{id}` with `{"status": ...}` moves the item through the workflow
  and answers `200` with it. A status that is not one of the three is `422`.
- `DELETE /items/{id}` answers `204`; the item is gone from then on (`404`).

## Workflow

`open -> done`, `done -> open` and `done -> archived` are the only moves.
`archived` is final. Any other move (including to the current status) is
answered `409 {"detail": "..."}` and changes nothing.

## Counters

`GET /stats` answers `200 {"total": n, "open": n, "done": n, "archived": n}`:
the owner's items by status. Creating, moving and deleting items update it.
'''

_OPENAPI = '''\
openapi: 3.0.3
info:
  title: "{{title}}"
  version: "1.0.0"
components:
  securitySchemes:
    bearer:
      type: http
      scheme: bearer
  schemas:
    Status:
      type: string
      enum: [open, done, archived]
    Item:
      type: object
      required: [id, name, status]
      properties:
        id: {type: integer}
        name: {type: string, minLength: 1, maxLength: 100}
        status: {$ref: "#/components/schemas/Status"}
    NewItem:
      type: object
      required: [name]
      properties:
        name: {type: string, minLength: 1, maxLength: 100}
    StatusChange:
      type: object
      required: [status]
      properties:
        status: {$ref: "#/components/schemas/Status"}
    Stats:
      type: object
      required: [total, open, done, archived]
      properties:
        total: {type: integer}
        open: {type: integer}
        done: {type: integer}
        archived: {type: integer}
    Error:
      type: object
      required: [detail]
      properties:
        detail: {type: string}
  responses:
    Unauthorized:
      description: no or malformed bearer token
      content:
        application/json:
          schema: {$ref: "#/components/schemas/Error"}
    NotFound:
      description: no such item for this owner
      content:
        application/json:
          schema: {$ref: "#/components/schemas/Error"}
    Invalid:
      description: the request body is not valid
      content:
        application/json:
          schema: {$ref: "#/components/schemas/Error"}
  parameters:
    ItemId:
      name: id
      in: path
      required: true
      schema: {type: integer}
security:
  - bearer: []
paths:
  /health:
    get:
      operationId: health
      security: []
      responses:
        "200":
          description: the service is ready
          content:
            application/json:
              schema:
                type: object
                required: [status]
                properties:
                  status: {type: string, enum: [ok]}
  /items:
    get:
      operationId: listItems
      responses:
        "200":
          description: the owner's items, oldest first
          content:
            application/json:
              schema:
                type: array
                items: {$ref: "#/components/schemas/Item"}
        "401": {$ref: "#/components/responses/Unauthorized"}
    post:
      operationId: createItem
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewItem"}
      responses:
        "201":
          description: the new item, status open
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Item"}
        "401": {$ref: "#/components/responses/Unauthorized"}
        "422": {$ref: "#/components/responses/Invalid"}
  /items/{id}:
    parameters:
      - {$ref: "#/components/parameters/ItemId"}
    get:
      operationId: getItem
      responses:
        "200":
          description: the item
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Item"}
        "401": {$ref: "#/components/responses/Unauthorized"}
        "404": {$ref: "#/components/responses/NotFound"}
    patch:
      operationId: changeStatus
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/StatusChange"}
      responses:
        "200":
          description: the item in its new status
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Item"}
        "401": {$ref: "#/components/responses/Unauthorized"}
        "404": {$ref: "#/components/responses/NotFound"}
        "409":
          description: the workflow does not allow this move
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Error"}
        "422": {$ref: "#/components/responses/Invalid"}
    delete:
      operationId: deleteItem
      responses:
        "204": {description: deleted}
        "401": {$ref: "#/components/responses/Unauthorized"}
        "404": {$ref: "#/components/responses/NotFound"}
  /stats:
    get:
      operationId: stats
      responses:
        "200":
          description: the owner's items by status
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Stats"}
        "401": {$ref: "#/components/responses/Unauthorized"}
'''

_CONFTEST = '''\
"""Shared fixtures of the oracle.

Items run in any order against one service instance: each makes its own owner
(a fresh token) and its own items, so none depends on another.
"""

import os
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def pytest_configure(config):
    # anvil registers it too; this keeps `pytest oracle/` working on its own.
    config.addinivalue_line("markers", "category(name): the oracle item's category")


@pytest.fixture
def owner():
    """Headers of a fresh owner."""
    return {"Authorization": f"Bearer owner-{uuid.uuid4().hex}"}


@pytest.fixture
def make_item():
    """Factory: create an item for `headers`, require 201, return its JSON."""

    def make(headers, name=None):
        body = {"name": name or f"item-{uuid.uuid4().hex[:8]}"}
        r = requests.post(f"{BASE_URL}/items", json=body, headers=headers, timeout=10)
        assert r.status_code == 201, f"setup: POST /items -> {r.status_code} {r.text}"
        return r.json()

    return make
'''

_ITEMS = {
    "api_surface": '''\
"""API surface: routes, status codes and response shapes."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("api_surface")
def test_create_answers_201_with_the_item(owner):
    """POST /items answers 201 with {id, name, status: "open"}."""
    r = requests.post(f"{BASE_URL}/items", json={"name": "milk"}, headers=owner, timeout=10)
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body.get("id"), int) and not isinstance(body["id"], bool), body
    assert body.get("name") == "milk", body
    assert body.get("status") == "open", body
''',
    "authorization": '''\
"""Authorization: a bearer token is required, and owners see only their own items."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("authorization")
def test_no_token_is_401_and_another_owners_item_is_404(owner, make_item):
    """Without a token: 401. With another owner's token: 404, as if the item did not exist."""
    item = make_item(owner)
    r = requests.get(f"{BASE_URL}/items/{item['id']}", timeout=10)
    assert r.status_code == 401, f"no token: {r.status_code} {r.text}"
    stranger = {"Authorization": "Bearer someone-else-" + owner["Authorization"][-8:]}
    r = requests.get(f"{BASE_URL}/items/{item['id']}", headers=stranger, timeout=10)
    assert r.status_code == 404, f"another owner: {r.status_code} {r.text}"
''',
    "validation": '''\
"""Validation: bodies that break the contract are 422 and create nothing."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("validation")
@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": 7}, {"name": "x" * 101}, ["milk"]],
                         ids=["no-name", "empty", "not-a-string", "too-long", "not-an-object"])
def test_invalid_item_is_422_and_creates_nothing(owner, body):
    """A missing, empty, non-string or too long name (or no object at all) is 422.

    One case per item: the first failure does not hide the rest."""
    r = requests.post(f"{BASE_URL}/items", json=body, headers=owner, timeout=10)
    assert r.status_code == 422, f"{body!r}: {r.status_code} {r.text}"
    assert requests.get(f"{BASE_URL}/items", headers=owner, timeout=10).json() == []
''',
    "state": '''\
"""State: what is written is read back, and what is deleted is gone."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("state")
def test_deleted_item_is_gone(owner, make_item):
    """After DELETE /items/{id} (204) the item is 404 and no longer listed."""
    keep, drop = make_item(owner), make_item(owner)
    r = requests.delete(f"{BASE_URL}/items/{drop['id']}", headers=owner, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/items/{drop['id']}", headers=owner, timeout=10)
    assert r.status_code == 404, r.text
    listed = requests.get(f"{BASE_URL}/items", headers=owner, timeout=10).json()
    assert [i["id"] for i in listed] == [keep["id"]], listed
''',
    "side_effects": '''\
"""Side effects: counters follow every change of the owner's items."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def stats(headers):
    r = requests.get(f"{BASE_URL}/stats", headers=headers, timeout=10)
    assert r.status_code == 200, f"GET /stats: {r.status_code} {r.text}"
    return r.json()


@pytest.mark.category("side_effects")
def test_stats_follow_create_and_done(owner, make_item):
    """Creating items and finishing one updates GET /stats."""
    assert stats(owner) == {"total": 0, "open": 0, "done": 0, "archived": 0}
    first, _second = make_item(owner), make_item(owner)
    r = requests.patch(f"{BASE_URL}/items/{first['id']}", json={"status": "done"},
                       headers=owner, timeout=10)
    assert r.status_code == 200, r.text
    assert stats(owner) == {"total": 2, "open": 1, "done": 1, "archived": 0}
''',
    "workflow": '''\
"""Workflow: only the allowed status moves succeed; archived is final."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def move(headers, item_id, status):
    return requests.patch(f"{BASE_URL}/items/{item_id}", json={"status": status},
                          headers=headers, timeout=10)


@pytest.mark.category("workflow")
def test_archive_only_after_done_and_archived_is_final(owner, make_item):
    """open -> archived is 409; open -> done -> archived works; archived -> open is 409."""
    item = make_item(owner)
    r = move(owner, item["id"], "archived")
    assert r.status_code == 409, f"open -> archived: {r.status_code} {r.text}"
    assert move(owner, item["id"], "done").status_code == 200
    r = move(owner, item["id"], "archived")
    assert r.status_code == 200 and r.json()["status"] == "archived", r.text
    r = move(owner, item["id"], "open")
    assert r.status_code == 409, f"archived -> open: {r.status_code} {r.text}"
''',
}

_DOCKERFILE = '''\
FROM python:3.11-slim
WORKDIR /app
COPY server.py .
EXPOSE 8000
CMD ["python", "server.py"]
'''

_SERVER = '''\
"""Reference service: the standard library only, state in memory."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MOVES = {("open", "done"), ("done", "open"), ("done", "archived")}
STATUSES = ("open", "done", "archived")

lock = threading.Lock()
items = {}  # id -> {"id", "name", "status", "owner"}
next_id = 1


def public(item):
    return {k: item[k] for k in ("id", "name", "status")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None

    def owner(self):
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return token.strip() if scheme == "Bearer" and token.strip() else None

    def route(self, method):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        if path == "/health" and method == "GET":
            return self.send(200, {"status": "ok"})
        body = self.body()  # read whatever was sent: the connection stays usable
        parts = path.strip("/").split("/")
        if parts[0] not in ("items", "stats"):
            return self.send(404, {"detail": "no such route"})
        owner = self.owner()
        if owner is None:
            return self.send(401, {"detail": "a bearer token is required"})
        with lock:
            if parts == ["stats"] and method == "GET":
                return self.send(200, self.stats(owner))
            if parts == ["items"]:
                return self.collection(method, owner, body)
            if len(parts) == 2 and parts[1].isdigit():
                return self.member(method, owner, int(parts[1]), body)
        return self.send(404, {"detail": "no such route"})

    def stats(self, owner):
        mine = [i["status"] for i in items.values() if i["owner"] == owner]
        return {"total": len(mine), **{s: mine.count(s) for s in STATUSES}}

    def collection(self, method, owner, body):
        global next_id
        if method == "GET":
            return self.send(200, [public(i) for i in items.values() if i["owner"] == owner])
        if method != "POST":
            return self.send(405, {"detail": "method not allowed"})
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            return self.send(422, {"detail": "name: a string of 1 to 100 characters"})
        item = {"id": next_id, "name": name, "status": "open", "owner": owner}
        items[next_id] = item
        next_id += 1
        return self.send(201, public(item))

    def member(self, method, owner, item_id, body):
        item = items.get(item_id)
        if item is None or item["owner"] != owner:
            return self.send(404, {"detail": "no such item"})
        if method == "GET":
            return self.send(200, public(item))
        if method == "DELETE":
            del items[item_id]
            return self.send(204)
        if method != "PATCH":
            return self.send(405, {"detail": "method not allowed"})
        status = body.get("status") if isinstance(body, dict) else None
        if status not in STATUSES:
            return self.send(422, {"detail": "status: one of open, done, archived"})
        if (item["status"], status) not in MOVES:
            return self.send(409, {"detail": f"cannot move from {item['status']} to {status}"})
        item["status"] = status
        return self.send(200, public(item))

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PATCH(self):
        self.route("PATCH")

    def do_DELETE(self):
        self.route("DELETE")


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8000"))
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
'''


def skeleton_files(task_id: str) -> dict[str, str]:
    """The skeleton's files by relative path (the task's id and a title filled in)."""
    title = re.sub(r"[-_.]+", " ", task_id).strip().capitalize() or task_id
    files = {
        "task.toml": _TASK_TOML,
        "spec.md": _SPEC,
        "openapi.yaml": _OPENAPI,
        "oracle/conftest.py": _CONFTEST,
        **{f"oracle/test_{category}.py": _ITEMS[category] for category in CATEGORIES},
        "reference/Dockerfile": _DOCKERFILE,
        "reference/server.py": _SERVER,
    }
    return {path: text.replace("{{id}}", task_id).replace("{{title}}", title)
            for path, text in files.items()}


def write_skeleton(root: Path, task_id: str) -> Path:
    """Write a new task package ``root/task_id`` and return its folder.

    Raises:
        InputError: ``task_id`` is not a valid task id, or the folder exists.
    """
    if not re.fullmatch(ID_PATTERN, task_id):
        raise InputError(task_id, "not a valid task id (letters, digits, '_', '.', '-'; "
                                  "starting with a letter or digit)")
    folder = root / task_id
    root.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise InputError(folder, "already exists (anvil tasks new never overwrites)") from None
    for relative, text in skeleton_files(task_id).items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return folder
