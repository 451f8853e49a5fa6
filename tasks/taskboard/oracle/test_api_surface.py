"""API surface: routes, status codes, response shapes and field formats."""

import os
import uuid
from datetime import datetime

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def assert_datetime(value, what):
    assert isinstance(value, str), f"{what} must be a string, got {value!r}"
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        pytest.fail(f"{what} is not an ISO 8601 date-time: {value!r}")
    assert parsed.tzinfo is not None, f"{what} must carry a UTC offset: {value!r}"


@pytest.mark.category("api_surface")
def test_health_returns_ok():
    """GET /health answers 200 {"status": "ok"} without authentication."""
    r = requests.get(f"{BASE_URL}/health", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok"}, r.text


@pytest.mark.category("api_surface")
def test_register_returns_user_without_password():
    """POST /auth/register answers 201 with {id, username} and no password field."""
    username = f"reg_{uuid.uuid4().hex[:16]}"
    r = requests.post(
        f"{BASE_URL}/auth/register",
        json={"username": username, "password": "correct-horse"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body.get("id"), int), f"id must be an integer: {body}"
    assert body.get("username") == username, body
    assert not [k for k in body if "password" in k.lower()], f"password leaked in {body}"
    assert "correct-horse" not in r.text, "the plain password must not be echoed"
    assert "access_token" not in body, f"registering must not log in: {body}"


@pytest.mark.category("api_surface")
def test_login_returns_bearer_token():
    """POST /auth/login answers 200 with a non-empty access_token and token_type bearer."""
    username = f"log_{uuid.uuid4().hex[:16]}"
    r = requests.post(
        f"{BASE_URL}/auth/register",
        json={"username": username, "password": "s3cret-pass"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": username, "password": "s3cret-pass"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body.get("access_token"), str) and body["access_token"], body
    assert body.get("token_type") == "bearer", body


@pytest.mark.category("api_surface")
def test_me_returns_caller(alice):
    """GET /me answers 200 with the caller's id and username."""
    r = requests.get(f"{BASE_URL}/me", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"id": alice.id, "username": alice.username}, r.text


@pytest.mark.category("api_surface")
def test_create_project_shape(alice):
    """POST /projects answers 201 with a full Project object and zero counters."""
    name = f"Surface {uuid.uuid4().hex[:8]}"
    r = requests.post(
        f"{BASE_URL}/projects",
        json={"name": name, "description": "shape check"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 201, r.text
    p = r.json()
    assert isinstance(p.get("id"), int), p
    assert p.get("name") == name, p
    assert p.get("description") == "shape check", p
    assert p.get("owner_id") == alice.id, p
    assert p.get("task_count") == 0, p
    assert p.get("done_count") == 0, p
    assert_datetime(p.get("created_at"), "project.created_at")


@pytest.mark.category("api_surface")
def test_create_task_shape_and_defaults(alice, make_project):
    """POST /projects/{id}/tasks answers 201 with a Task: status todo, priority medium, description ""."""
    project = make_project(alice)
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks",
        json={"title": "Write the spec"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 201, r.text
    t = r.json()
    assert isinstance(t.get("id"), int), t
    assert t.get("project_id") == project["id"], t
    assert t.get("title") == "Write the spec", t
    assert t.get("description") == "", t
    assert t.get("status") == "todo", t
    assert t.get("priority") == "medium", t
    assert_datetime(t.get("created_at"), "task.created_at")
    assert_datetime(t.get("updated_at"), "task.updated_at")


@pytest.mark.category("api_surface")
def test_activity_event_shape(alice, make_project, make_task):
    """GET /projects/{id}/activity answers 200 with Event objects carrying every field."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/activity", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    events = r.json()
    assert isinstance(events, list) and len(events) == 2, events
    created = events[1]
    for field in ("id", "project_id", "type", "task_id", "from_status", "to_status", "created_at"):
        assert field in created, f"event lacks {field!r}: {created}"
    assert isinstance(created["id"], int), created
    assert created["project_id"] == project["id"], created
    assert created["type"] == "task_created", created
    assert created["task_id"] == task["id"], created
    assert created["from_status"] is None and created["to_status"] is None, created
    assert_datetime(created["created_at"], "event.created_at")


@pytest.mark.category("api_surface")
def test_deletes_answer_204_with_empty_body(alice, make_project, make_task):
    """DELETE /tasks/{id} and DELETE /projects/{id} answer 204 with no body."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert r.content == b"", f"204 must have an empty body, got {r.content!r}"
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert r.content == b"", f"204 must have an empty body, got {r.content!r}"


@pytest.mark.category("api_surface")
def test_unknown_ids_answer_404(alice):
    """Unknown project and task ids answer 404."""
    missing = 987654321
    for method, path in [
        ("GET", f"/projects/{missing}"),
        ("GET", f"/projects/{missing}/tasks"),
        ("GET", f"/projects/{missing}/activity"),
        ("GET", f"/tasks/{missing}"),
        ("DELETE", f"/tasks/{missing}"),
    ]:
        r = requests.request(method, f"{BASE_URL}{path}", headers=alice.headers, timeout=10)
        assert r.status_code == 404, f"{method} {path}: {r.status_code} {r.text}"
