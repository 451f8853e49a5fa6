"""Workflow: the task status machine (todo -> in_progress -> done, in_progress -> todo) and an end-to-end journey."""

import os
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def patch(user, task_id, body):
    return requests.patch(f"{BASE_URL}/tasks/{task_id}", json=body, headers=user.headers, timeout=10)


def status_of(user, task_id):
    r = requests.get(f"{BASE_URL}/tasks/{task_id}", headers=user.headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["status"]


@pytest.mark.category("workflow")
def test_forward_path_todo_in_progress_done(alice, make_project, make_task):
    """todo -> in_progress -> done are allowed and each PATCH answers 200 with the new status."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = patch(alice, task["id"], {"status": "in_progress"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "in_progress", r.text
    r = patch(alice, task["id"], {"status": "done"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "done", r.text
    assert status_of(alice, task["id"]) == "done"


@pytest.mark.category("workflow")
def test_todo_cannot_jump_to_done(alice, make_project, make_task):
    """todo -> done answers 409 and the task stays todo."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = patch(alice, task["id"], {"status": "done"})
    assert r.status_code == 409, f"{r.status_code} {r.text}"
    assert status_of(alice, task["id"]) == "todo"


@pytest.mark.category("workflow")
def test_done_is_final(alice, make_project, make_task, set_status):
    """done -> todo and done -> in_progress answer 409 and the task stays done."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "done")
    for target in ("todo", "in_progress"):
        r = patch(alice, task["id"], {"status": target})
        assert r.status_code == 409, f"done -> {target}: {r.status_code} {r.text}"
    assert status_of(alice, task["id"]) == "done"


@pytest.mark.category("workflow")
def test_in_progress_can_go_back_to_todo(alice, make_project, make_task, set_status):
    """in_progress -> todo is allowed, and the task can be started again afterwards."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    r = patch(alice, task["id"], {"status": "todo"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "todo", r.text
    r = patch(alice, task["id"], {"status": "in_progress"})
    assert r.status_code == 200, r.text


@pytest.mark.category("workflow")
def test_same_status_is_not_a_transition(alice, make_project, make_task, set_status):
    """PATCH with the current status answers 200, also for done (no transition happens)."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = patch(alice, task["id"], {"status": "todo"})
    assert r.status_code == 200, f"todo -> todo: {r.status_code} {r.text}"
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "done")
    r = patch(alice, task["id"], {"status": "done", "title": "Still done"})
    assert r.status_code == 200, f"done -> done: {r.status_code} {r.text}"
    assert r.json()["title"] == "Still done" and r.json()["status"] == "done", r.text


@pytest.mark.category("workflow")
def test_rejected_transition_changes_no_other_field(alice, make_project, make_task):
    """A 409 transition in a PATCH that also sets title and priority leaves every field unchanged."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Untouched", priority="low")
    r = patch(alice, task["id"], {"title": "Changed", "priority": "high", "status": "done"})
    assert r.status_code == 409, f"{r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    t = r.json()
    assert (t["title"], t["priority"], t["status"]) == ("Untouched", "low", "todo"), f"partial update applied: {t}"


@pytest.mark.category("workflow")
def test_create_ignores_requested_status(alice, make_project):
    """POST a task with "status": "done" creates it in todo (status is not settable on creation)."""
    project = make_project(alice)
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks",
        json={"title": "Sneak past the workflow", "status": "done"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "todo", r.text
    r = requests.get(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.json()["done_count"] == 0, r.text


@pytest.mark.category("workflow")
def test_end_to_end_journey():
    """Register, log in, create a project and tasks, finish one, delete the project, log out."""
    username = f"e2e_{uuid.uuid4().hex[:16]}"
    creds = {"username": username, "password": "journey-pass"}
    r = requests.post(f"{BASE_URL}/auth/register", json=creds, timeout=10)
    assert r.status_code == 201, r.text
    r = requests.post(f"{BASE_URL}/auth/login", json=creds, timeout=10)
    assert r.status_code == 200, r.text
    h = {"Authorization": f"Bearer {r.json()['access_token']}"}

    r = requests.post(f"{BASE_URL}/projects", json={"name": "Launch"}, headers=h, timeout=10)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    titles = ["Design", "Build", "Ship"]
    tids = []
    for title in titles:
        r = requests.post(f"{BASE_URL}/projects/{pid}/tasks", json={"title": title}, headers=h, timeout=10)
        assert r.status_code == 201, r.text
        tids.append(r.json()["id"])
    for status in ("in_progress", "done"):
        r = requests.patch(f"{BASE_URL}/tasks/{tids[0]}", json={"status": status}, headers=h, timeout=10)
        assert r.status_code == 200, r.text
    r = requests.patch(f"{BASE_URL}/tasks/{tids[1]}", json={"status": "in_progress"}, headers=h, timeout=10)
    assert r.status_code == 200, r.text

    r = requests.get(f"{BASE_URL}/projects/{pid}", headers=h, timeout=10)
    assert (r.json()["task_count"], r.json()["done_count"]) == (3, 1), r.text
    r = requests.get(f"{BASE_URL}/projects/{pid}/activity", headers=h, timeout=10)
    assert [e["type"] for e in r.json()] == [
        "project_created", "task_created", "task_created", "task_created",
        "status_changed", "status_changed", "status_changed",
    ], r.text

    r = requests.delete(f"{BASE_URL}/projects/{pid}", headers=h, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/projects", headers=h, timeout=10)
    assert r.status_code == 200 and r.json() == [], r.text
    r = requests.post(f"{BASE_URL}/auth/logout", headers=h, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/projects", headers=h, timeout=10)
    assert r.status_code == 401, r.text
