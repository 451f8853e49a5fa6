"""State: what is written can be read back; uniqueness; deletes and the project cascade."""

import os
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("state")
def test_duplicate_username_is_409():
    """Registering a username that is already taken answers 409; the first password still works."""
    username = f"dup_{uuid.uuid4().hex[:16]}"
    r = requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "first-password"}, timeout=10
    )
    assert r.status_code == 201, r.text
    r = requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "second-password"}, timeout=10
    )
    assert r.status_code == 409, f"{r.status_code} {r.text}"
    r = requests.post(
        f"{BASE_URL}/auth/login", json={"username": username, "password": "first-password"}, timeout=10
    )
    assert r.status_code == 200, f"the original account must be intact: {r.status_code} {r.text}"


@pytest.mark.category("state")
def test_project_roundtrip_and_patch(alice, make_project):
    """A created project reads back unchanged; PATCH changes only the given fields."""
    project = make_project(alice, name="  Spaced  name ", description="first")
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == project, f"GET differs from the creation response: {r.json()} vs {project}"
    assert r.json()["name"] == "  Spaced  name ", "names are stored exactly as given"
    r = requests.patch(url, json={"description": "second"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["description"] == "second", r.text
    assert r.json()["name"] == "  Spaced  name ", f"absent fields must stay unchanged: {r.text}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json()["description"] == "second", f"PATCH not persisted: {r.text}"


@pytest.mark.category("state")
def test_task_patch_persists_fields(alice, make_project, make_task):
    """PATCH /tasks/{id} of title, description and priority persists and leaves status alone."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Before", priority="low")
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}",
        json={"title": "After", "description": "details", "priority": "high"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    t = r.json()
    assert (t["title"], t["description"], t["priority"], t["status"]) == ("After", "details", "high", "todo"), t
    assert t["created_at"] == task["created_at"], f"created_at must not change: {t}"


@pytest.mark.category("state")
def test_task_list_is_ordered_and_filterable(alice, make_project, make_task, set_status):
    """GET /projects/{id}/tasks lists the project's tasks by id ascending and filters by status."""
    project = make_project(alice)
    other = make_project(alice)
    first = make_task(alice, project["id"])
    second = make_task(alice, project["id"])
    third = make_task(alice, project["id"])
    make_task(alice, other["id"])
    set_status(alice, second["id"], "in_progress")
    url = f"{BASE_URL}/projects/{project['id']}/tasks"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert [t["id"] for t in r.json()] == [first["id"], second["id"], third["id"]], r.text
    r = requests.get(url, params={"status": "in_progress"}, headers=alice.headers, timeout=10)
    assert [t["id"] for t in r.json()] == [second["id"]], r.text
    r = requests.get(url, params={"status": "todo"}, headers=alice.headers, timeout=10)
    assert [t["id"] for t in r.json()] == [first["id"], third["id"]], r.text
    r = requests.get(url, params={"status": "done"}, headers=alice.headers, timeout=10)
    assert r.json() == [], r.text


@pytest.mark.category("state")
def test_deleted_task_is_gone(alice, make_project, make_task):
    """After DELETE /tasks/{id} the task answers 404 everywhere and is not listed."""
    project = make_project(alice)
    keep = make_task(alice, project["id"])
    gone = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{gone['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    for method in ("GET", "PATCH", "DELETE"):
        r = requests.request(
            method, f"{BASE_URL}/tasks/{gone['id']}", json={"title": "x"}, headers=alice.headers, timeout=10
        )
        assert r.status_code == 404, f"{method} deleted task: {r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/tasks", headers=alice.headers, timeout=10)
    assert [t["id"] for t in r.json()] == [keep["id"]], r.text


@pytest.mark.category("state")
def test_project_delete_cascades_to_tasks(alice, make_project, make_task, set_status):
    """After DELETE /projects/{id} every former task answers 404 on GET, PATCH and DELETE."""
    project = make_project(alice)
    tasks = [make_task(alice, project["id"]) for _ in range(3)]
    set_status(alice, tasks[1]["id"], "in_progress")
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    for task in tasks:
        url = f"{BASE_URL}/tasks/{task['id']}"
        r = requests.get(url, headers=alice.headers, timeout=10)
        assert r.status_code == 404, f"GET task {task['id']} of a deleted project: {r.status_code} {r.text}"
        r = requests.patch(url, json={"title": "zombie"}, headers=alice.headers, timeout=10)
        assert r.status_code == 404, f"PATCH task {task['id']} of a deleted project: {r.status_code} {r.text}"
        r = requests.delete(url, headers=alice.headers, timeout=10)
        assert r.status_code == 404, f"DELETE task {task['id']} of a deleted project: {r.status_code} {r.text}"


@pytest.mark.category("state")
def test_project_delete_removes_project_and_feed(alice, make_project, make_task):
    """After DELETE /projects/{id} the project, its task list and its feed answer 404 and it is not listed."""
    project = make_project(alice)
    make_task(alice, project["id"])
    base = f"{BASE_URL}/projects/{project['id']}"
    r = requests.delete(base, headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    for path in ("", "/tasks", "/activity"):
        r = requests.get(f"{base}{path}", headers=alice.headers, timeout=10)
        assert r.status_code == 404, f"GET /projects/{project['id']}{path}: {r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert project["id"] not in [p["id"] for p in r.json()], r.text
    r = requests.delete(base, headers=alice.headers, timeout=10)
    assert r.status_code == 404, f"second DELETE: {r.status_code} {r.text}"


@pytest.mark.category("state")
def test_project_delete_leaves_other_projects_alone(alice, make_project, make_task):
    """Deleting one project keeps the caller's other projects and their tasks intact."""
    doomed = make_project(alice)
    kept = make_project(alice)
    make_task(alice, doomed["id"])
    survivor = make_task(alice, kept["id"], title="Survivor")
    r = requests.delete(f"{BASE_URL}/projects/{doomed['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/tasks/{survivor['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200 and r.json()["title"] == "Survivor", r.text
    r = requests.get(f"{BASE_URL}/projects/{kept['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200 and r.json()["task_count"] == 1, r.text
