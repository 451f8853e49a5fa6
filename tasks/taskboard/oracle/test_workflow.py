"""Workflow: the task status machine (todo -> in_progress -> done, in_progress -> todo) and an end-to-end journey."""

import os
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("evolved-r1"), pytest.mark.visibility("private"), pytest.mark.level("mid")]


def patch(user, task_id, body):
    return requests.patch(f"{BASE_URL}/tasks/{task_id}", json=body, headers=user.headers, timeout=10)


def status_of(user, task_id):
    r = requests.get(f"{BASE_URL}/tasks/{task_id}", headers=user.headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["status"]


WALK = {"todo": [], "in_progress": ["in_progress"], "done": ["in_progress", "done"]}


def task_in(status, alice, make_project, make_task, set_status):
    """A fresh task of alice's, walked along the workflow into `status`."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    for step in WALK[status]:
        set_status(alice, task["id"], step)
    return task


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-workflow-transitions")
@pytest.mark.parametrize(
    ("start", "target"),
    [("todo", "in_progress"), ("in_progress", "done"), ("in_progress", "todo")],
    ids=["todo->in_progress", "in_progress->done", "in_progress->todo"],
)
def test_allowed_transition(start, target, alice, make_project, make_task, set_status):
    """An allowed transition answers 200 with the new status, and the task keeps it."""
    task = task_in(start, alice, make_project, make_task, set_status)
    r = patch(alice, task["id"], {"status": target})
    assert r.status_code == 200, f"{start} -> {target}: {r.status_code} {r.text}"
    assert r.json()["status"] == target, r.text
    assert status_of(alice, task["id"]) == target


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-workflow-transitions")
@pytest.mark.parametrize(
    ("start", "target"),
    [("todo", "done"), ("done", "todo"), ("done", "in_progress")],
    ids=["todo->done", "done->todo", "done->in_progress"],
)
def test_forbidden_transition_is_409(start, target, alice, make_project, make_task, set_status):
    """A transition outside the workflow answers 409 and the task keeps its status."""
    task = task_in(start, alice, make_project, make_task, set_status)
    r = patch(alice, task["id"], {"status": target})
    assert r.status_code == 409, f"{start} -> {target}: {r.status_code} {r.text}"
    assert status_of(alice, task["id"]) == start


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-workflow-same-status")
@pytest.mark.parametrize("status", ["todo", "in_progress", "done"])
def test_same_status_is_not_a_transition(status, alice, make_project, make_task, set_status):
    """PATCH with the current status answers 200 and applies the other fields, also for done."""
    task = task_in(status, alice, make_project, make_task, set_status)
    r = patch(alice, task["id"], {"status": status, "title": "Same status"})
    assert r.status_code == 200, f"{status} -> {status}: {r.status_code} {r.text}"
    assert (r.json()["status"], r.json()["title"]) == (status, "Same status"), r.text


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-workflow-transitions")
def test_full_forward_path(alice, make_project, make_task):
    """todo -> in_progress -> done walks the whole workflow in two PATCHes."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    codes = [patch(alice, task["id"], {"status": target}).status_code for target in ("in_progress", "done")]
    assert codes == [200, 200], f"todo -> in_progress -> done: {codes}"
    assert status_of(alice, task["id"]) == "done"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-workflow-transitions")
@pytest.mark.level("root")
def test_task_can_be_restarted_after_going_back(alice, make_project, make_task, set_status):
    """After in_progress -> todo the task can be started and finished again."""
    task = task_in("in_progress", alice, make_project, make_task, set_status)
    set_status(alice, task["id"], "todo")
    codes = [patch(alice, task["id"], {"status": target}).status_code for target in ("in_progress", "done")]
    assert codes == [200, 200], f"todo -> in_progress -> done after going back: {codes}"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-precedence-404")
def test_transition_of_deleted_task_is_404_not_409(alice, make_project, make_task):
    """A forbidden transition on a deleted task answers 404 (404 wins over 409)."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = patch(alice, task["id"], {"status": "done"})
    assert r.status_code == 404, f"{r.status_code} {r.text}"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-workflow-atomic")
def test_transition_and_field_edit_apply_together(alice, make_project, make_task):
    """An allowed transition in a PATCH that also sets the title applies both."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = patch(alice, task["id"], {"status": "in_progress", "title": "Started"})
    assert r.status_code == 200, r.text
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert (r.json()["status"], r.json()["title"]) == ("in_progress", "Started"), r.text


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-workflow-atomic")
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
@pytest.mark.requirement("R-workflow-create-todo")
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
@pytest.mark.tier("base")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-journey")
@pytest.mark.level("root")
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
