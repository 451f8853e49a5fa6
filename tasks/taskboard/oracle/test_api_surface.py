"""API surface: routes, status codes, response shapes and field formats."""

import os
import uuid
from datetime import datetime

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"), pytest.mark.level("leaf")]


def assert_datetime(value, what):
    assert isinstance(value, str), f"{what} must be a string, got {value!r}"
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        pytest.fail(f"{what} is not an ISO 8601 date-time: {value!r}")
    assert parsed.tzinfo is not None, f"{what} must carry a UTC offset: {value!r}"


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-health")
def test_health_returns_ok():
    """GET /health answers 200 {"status": "ok"} without authentication."""
    r = requests.get(f"{BASE_URL}/health", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok"}, r.text


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-register")
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
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-login")
@pytest.mark.level("mid")
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
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-me")
def test_me_returns_caller(alice):
    """GET /me answers 200 with the caller's id and username."""
    r = requests.get(f"{BASE_URL}/me", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"id": alice.id, "username": alice.username}, r.text


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-create")
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
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-task-create")
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
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.level("mid")
def test_activity_event_shape(alice, make_project, make_task):
    """GET /projects/{id}/activity answers 200 with Event objects carrying every field."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/activity", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    events = r.json()
    assert isinstance(events, list) and len(events) == 2, events
    created = events[1]
    fields = {"id", "project_id", "type", "task_id", "from_status", "to_status", "created_at"}
    assert fields <= set(created), f"event lacks {sorted(fields - set(created))}: {created}"
    assert isinstance(created["id"], int), created
    assert created["project_id"] == project["id"], created
    assert created["type"] == "task_created", created
    assert created["task_id"] == task["id"], created
    assert created["from_status"] is None and created["to_status"] is None, created
    assert_datetime(created["created_at"], "event.created_at")


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-project-create")
def test_create_project_description_defaults_to_empty(alice):
    """POST /projects without a description answers a Project whose description is ""."""
    r = requests.post(f"{BASE_URL}/projects", json={"name": "No description"}, headers=alice.headers, timeout=10)
    assert r.status_code == 201, r.text
    assert r.json().get("description") == "", r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-project-list")
@pytest.mark.level("mid")
def test_list_projects_returns_project_objects(alice, make_project):
    """GET /projects answers 200 with a JSON array of Project objects."""
    project = make_project(alice)
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == [project], r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-task-list")
@pytest.mark.level("mid")
def test_list_tasks_returns_task_objects(alice, make_project, make_task):
    """GET /projects/{id}/tasks answers 200 with a JSON array of Task objects."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/tasks", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == [task], r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-project-update")
def test_patch_project_returns_the_project(alice, make_project):
    """PATCH /projects/{id} answers 200 with the whole updated Project."""
    project = make_project(alice)
    r = requests.patch(
        f"{BASE_URL}/projects/{project['id']}", json={"name": "Renamed"}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 200, r.text
    assert r.json() == {**project, "name": "Renamed"}, r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-task-update")
def test_patch_task_returns_the_task(alice, make_project, make_task):
    """PATCH /tasks/{id} answers 200 with the whole updated Task."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={"priority": "low"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == set(task), f"fields differ from the Task object: {sorted(body)}"
    assert body["priority"] == "low" and body["id"] == task["id"], body
    assert_datetime(body.get("updated_at"), "task.updated_at")


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.level("mid")
def test_status_changed_event_shape(alice, make_project, make_task):
    """A status_changed event names the task and carries from_status and to_status."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}", json={"status": "in_progress"}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 200, r.text
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/activity", headers=alice.headers, timeout=10)
    event = r.json()[-1]
    assert event["type"] == "status_changed", event
    assert (event["task_id"], event["from_status"], event["to_status"]) == (task["id"], "todo", "in_progress"), event
    assert_datetime(event["created_at"], "event.created_at")


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-json-responses")
def test_responses_are_json(alice):
    """Responses with a body are application/json."""
    r = requests.get(f"{BASE_URL}/me", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-task-delete")
def test_delete_task_answers_204_with_empty_body(alice, make_project, make_task):
    """DELETE /tasks/{id} answers 204 with no body."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert r.content == b"", f"204 must have an empty body, got {r.content!r}"


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-project-delete")
def test_delete_project_answers_204_with_empty_body(alice, make_project):
    """DELETE /projects/{id} answers 204 with no body."""
    project = make_project(alice)
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert r.content == b"", f"204 must have an empty body, got {r.content!r}"


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-auth-logout")
def test_logout_answers_204_with_empty_body(alice):
    """POST /auth/logout answers 204 with no body."""
    r = requests.post(f"{BASE_URL}/auth/logout", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert r.content == b"", f"204 must have an empty body, got {r.content!r}"


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-unknown-id-404")
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/projects/{missing}", None),
        ("PATCH", "/projects/{missing}", {"name": "x"}),
        ("DELETE", "/projects/{missing}", None),
        ("GET", "/projects/{missing}/tasks", None),
        ("POST", "/projects/{missing}/tasks", {"title": "x"}),
        ("GET", "/projects/{missing}/activity", None),
        ("GET", "/tasks/{missing}", None),
        ("PATCH", "/tasks/{missing}", {"title": "x"}),
        ("DELETE", "/tasks/{missing}", None),
    ],
    ids=["GET-project", "PATCH-project", "DELETE-project", "GET-project-tasks", "POST-project-tasks",
         "GET-project-activity", "GET-task", "PATCH-task", "DELETE-task"],
)
def test_unknown_id_is_404(method, path, body, alice):
    """Unknown project and task ids answer 404 on every route that takes one."""
    url = BASE_URL + path.format(missing=987654321)
    r = requests.request(method, url, json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 404, f"{method} {path}: {r.status_code} {r.text}"


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-unknown-route")
def test_unknown_route_is_404(alice):
    """A route the API does not have answers 404."""
    r = requests.get(f"{BASE_URL}/no-such-route", headers=alice.headers, timeout=10)
    assert r.status_code == 404, f"{r.status_code} {r.text}"
