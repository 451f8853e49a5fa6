"""Side effects: project counters and the per-project activity feed."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def feed(user, project_id):
    r = requests.get(f"{BASE_URL}/projects/{project_id}/activity", headers=user.headers, timeout=10)
    assert r.status_code == 200, f"GET activity: {r.status_code} {r.text}"
    return r.json()


def counters(user, project_id):
    r = requests.get(f"{BASE_URL}/projects/{project_id}", headers=user.headers, timeout=10)
    assert r.status_code == 200, f"GET project: {r.status_code} {r.text}"
    return r.json()["task_count"], r.json()["done_count"]


def summary(events):
    return [(e["type"], e["task_id"], e["from_status"], e["to_status"]) for e in events]


@pytest.mark.category("side_effects")
def test_new_project_feed_has_project_created(alice, make_project):
    """A new project's feed holds exactly one project_created event with task_id null."""
    project = make_project(alice)
    events = feed(alice, project["id"])
    assert summary(events) == [("project_created", None, None, None)], events
    assert events[0]["project_id"] == project["id"], events


@pytest.mark.category("side_effects")
def test_task_lifecycle_events_in_order(alice, make_project, make_task, set_status):
    """Create, two transitions and delete record task_created, status_changed x2, task_deleted, oldest first."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    tid = task["id"]
    set_status(alice, tid, "in_progress")
    set_status(alice, tid, "done")
    r = requests.delete(f"{BASE_URL}/tasks/{tid}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    events = feed(alice, project["id"])
    assert summary(events) == [
        ("project_created", None, None, None),
        ("task_created", tid, None, None),
        ("status_changed", tid, "todo", "in_progress"),
        ("status_changed", tid, "in_progress", "done"),
        ("task_deleted", tid, None, None),
    ], events
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), f"event ids must increase: {ids}"


@pytest.mark.category("side_effects")
def test_edits_and_reads_record_no_event(alice, make_project, make_task):
    """Field edits, same-status PATCHes, project PATCHes and reads add nothing to the feed."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    before = feed(alice, project["id"])
    url = f"{BASE_URL}/tasks/{task['id']}"
    for body in ({"title": "Renamed"}, {"priority": "high", "description": "d"}, {"status": "todo"}):
        r = requests.patch(url, json=body, headers=alice.headers, timeout=10)
        assert r.status_code == 200, f"PATCH {body}: {r.status_code} {r.text}"
    r = requests.patch(
        f"{BASE_URL}/projects/{project['id']}", json={"name": "Renamed project"}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 200, r.text
    requests.get(url, headers=alice.headers, timeout=10)
    requests.get(f"{BASE_URL}/projects/{project['id']}/tasks", headers=alice.headers, timeout=10)
    after = feed(alice, project["id"])
    assert after == before, f"feed changed without a recorded operation:\nbefore={before}\nafter={after}"


@pytest.mark.category("side_effects")
def test_failed_requests_record_no_event(alice, make_project, make_task):
    """A rejected transition (409) or an invalid body (422) adds nothing to the feed."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    before = feed(alice, project["id"])
    url = f"{BASE_URL}/tasks/{task['id']}"
    r = requests.patch(url, json={"status": "done"}, headers=alice.headers, timeout=10)
    assert r.status_code == 409, f"todo -> done: {r.status_code} {r.text}"
    r = requests.patch(url, json={"status": "bogus"}, headers=alice.headers, timeout=10)
    assert r.status_code == 422, f"bogus status: {r.status_code} {r.text}"
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks", json={"title": ""}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 422, f"empty title: {r.status_code} {r.text}"
    after = feed(alice, project["id"])
    assert after == before, f"a failed request recorded activity:\nbefore={before}\nafter={after}"


@pytest.mark.category("side_effects")
def test_feed_keeps_events_of_deleted_task(alice, make_project, make_task):
    """Deleting a task keeps its task_created event and appends task_deleted; other tasks' events stay."""
    project = make_project(alice)
    gone = make_task(alice, project["id"])
    kept = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{gone['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert summary(feed(alice, project["id"])) == [
        ("project_created", None, None, None),
        ("task_created", gone["id"], None, None),
        ("task_created", kept["id"], None, None),
        ("task_deleted", gone["id"], None, None),
    ]


@pytest.mark.category("side_effects")
def test_counters_follow_creates_and_transitions(alice, make_project, make_task, set_status):
    """task_count counts tasks and done_count counts done tasks, as tasks are created and finished."""
    project = make_project(alice)
    pid = project["id"]
    tasks = [make_task(alice, pid) for _ in range(3)]
    assert counters(alice, pid) == (3, 0)
    set_status(alice, tasks[0]["id"], "in_progress")
    assert counters(alice, pid) == (3, 0), "in_progress is not done"
    set_status(alice, tasks[0]["id"], "done")
    set_status(alice, tasks[2]["id"], "in_progress")
    set_status(alice, tasks[2]["id"], "done")
    assert counters(alice, pid) == (3, 2)
    set_status(alice, tasks[1]["id"], "in_progress")
    set_status(alice, tasks[1]["id"], "todo")
    assert counters(alice, pid) == (3, 2)


@pytest.mark.category("side_effects")
def test_counters_follow_deletes(alice, make_project, make_task, set_status):
    """Deleting a done task lowers task_count and done_count; deleting a todo task lowers task_count only."""
    project = make_project(alice)
    pid = project["id"]
    done = make_task(alice, pid)
    todo = make_task(alice, pid)
    set_status(alice, done["id"], "in_progress")
    set_status(alice, done["id"], "done")
    assert counters(alice, pid) == (2, 1)
    r = requests.delete(f"{BASE_URL}/tasks/{done['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert counters(alice, pid) == (1, 0)
    r = requests.delete(f"{BASE_URL}/tasks/{todo['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert counters(alice, pid) == (0, 0)


@pytest.mark.category("side_effects")
def test_project_list_shows_current_counters(alice, make_project, make_task, set_status):
    """GET /projects carries the same current task_count and done_count as GET /projects/{id}."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "done")
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    listed = [p for p in r.json() if p["id"] == project["id"]]
    assert len(listed) == 1, r.text
    assert (listed[0]["task_count"], listed[0]["done_count"]) == (2, 1), listed[0]
