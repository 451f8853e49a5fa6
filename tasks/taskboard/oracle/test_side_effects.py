"""Side effects: project counters and the per-project activity feed.

Items here send a request and check its effect on the feed or the counters; the status code
of a rejected request belongs to the validation, workflow and authorization items.
"""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"), pytest.mark.level("mid")]


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


def delete_task(user, task_id):
    r = requests.delete(f"{BASE_URL}/tasks/{task_id}", headers=user.headers, timeout=10)
    assert r.status_code == 204, f"DELETE task: {r.status_code} {r.text}"


# The setup PATCHes that bring a fresh (todo) task into each status.
WALK = {"todo": [], "in_progress": ["in_progress"], "done": ["in_progress", "done"]}


def walk_to(status, user, task_id, set_status):
    """Setup: move a fresh task along the workflow into `status` (every step must answer 200)."""
    for step in WALK[status]:
        set_status(user, task_id, step)


# ---------------------------------------------------------------- the feed


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-activity-feed")
def test_new_project_feed_has_project_created(alice, make_project):
    """A new project's feed holds exactly one project_created event with task_id null."""
    project = make_project(alice)
    events = feed(alice, project["id"])
    assert summary(events) == [("project_created", None, None, None)], events
    assert events[0]["project_id"] == project["id"], events


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-activity-feed")
def test_task_create_records_task_created(alice, make_project, make_task):
    """Creating a task appends one task_created event naming the task."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    assert summary(feed(alice, project["id"]))[1:] == [("task_created", task["id"], None, None)]


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.parametrize(
    ("start", "target"),
    [("todo", "in_progress"), ("in_progress", "done"), ("in_progress", "todo")],
    ids=["todo->in_progress", "in_progress->done", "in_progress->todo"],
)
def test_transition_records_status_changed(start, target, alice, make_project, make_task, set_status):
    """Each allowed transition appends one status_changed event with from_status and to_status."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    walk_to(start, alice, task["id"], set_status)
    before = summary(feed(alice, project["id"]))
    set_status(alice, task["id"], target)
    events = summary(feed(alice, project["id"]))
    assert events == [*before, ("status_changed", task["id"], start, target)], events


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-activity-feed")
def test_task_delete_records_task_deleted(alice, make_project, make_task):
    """Deleting a task appends one task_deleted event naming the task."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    delete_task(alice, task["id"])
    assert summary(feed(alice, project["id"]))[1:] == [
        ("task_created", task["id"], None, None),
        ("task_deleted", task["id"], None, None),
    ]


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-activity-order")
@pytest.mark.level("root")
def test_task_lifecycle_events_in_order(alice, make_project, make_task, set_status):
    """Create, two transitions and delete record task_created, status_changed x2, task_deleted, oldest first."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    tid = task["id"]
    set_status(alice, tid, "in_progress")
    set_status(alice, tid, "done")
    delete_task(alice, tid)
    events = feed(alice, project["id"])
    assert summary(events) == [
        ("project_created", None, None, None),
        ("task_created", tid, None, None),
        ("status_changed", tid, "todo", "in_progress"),
        ("status_changed", tid, "in_progress", "done"),
        ("task_deleted", tid, None, None),
    ], events


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-activity-order")
def test_event_ids_increase(alice, make_project, make_task, set_status):
    """Event ids are distinct and increase in feed order."""
    project = make_project(alice)
    first = make_task(alice, project["id"])
    make_task(alice, project["id"])
    set_status(alice, first["id"], "in_progress")
    ids = [e["id"] for e in feed(alice, project["id"])]
    assert len(ids) == 4 and ids == sorted(ids) and len(set(ids)) == len(ids), f"event ids must increase: {ids}"


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-activity-feed")
def test_feed_holds_only_its_projects_events(alice, make_project, make_task):
    """Events of one project do not appear in another project's feed."""
    mine = make_project(alice)
    other = make_project(alice)
    make_task(alice, other["id"])
    events = feed(alice, mine["id"])
    assert summary(events) == [("project_created", None, None, None)], events
    assert all(e["project_id"] == mine["id"] for e in events), events


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-activity-feed")
def test_feed_keeps_events_of_deleted_task(alice, make_project, make_task):
    """Deleting a task keeps its task_created event and appends task_deleted; other tasks' events stay."""
    project = make_project(alice)
    gone = make_task(alice, project["id"])
    kept = make_task(alice, project["id"])
    delete_task(alice, gone["id"])
    assert summary(feed(alice, project["id"])) == [
        ("project_created", None, None, None),
        ("task_created", gone["id"], None, None),
        ("task_created", kept["id"], None, None),
        ("task_deleted", gone["id"], None, None),
    ]


# ---------------------------------------------------------------- what records no event


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tasks/{task}", {"title": "Renamed"}),
        ("/tasks/{task}", {"priority": "high", "description": "d"}),
        ("/tasks/{task}", {"status": "todo"}),
        ("/tasks/{task}", {}),
        ("/projects/{project}", {"name": "Renamed project"}),
    ],
    ids=["task-title", "task-priority-description", "same-status", "task-empty", "project-name"],
)
def test_edit_records_no_event(path, body, alice, make_project, make_task):
    """Field edits, same-status PATCHes and project PATCHes add nothing to the feed."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    before = feed(alice, project["id"])
    url = BASE_URL + path.format(task=task["id"], project=project["id"])
    requests.patch(url, json=body, headers=alice.headers, timeout=10)
    after = feed(alice, project["id"])
    assert after == before, f"PATCH {body} recorded activity:\nbefore={before}\nafter={after}"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.parametrize(
    "path",
    ["/projects/{project}", "/projects/{project}/tasks", "/tasks/{task}", "/projects", "/projects/{project}/activity"],
    ids=["GET-project", "GET-project-tasks", "GET-task", "GET-projects", "GET-project-activity"],
)
def test_reads_record_no_event(path, alice, make_project, make_task):
    """Reading the project, its tasks, a task, the project list or the feed adds nothing to the feed."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    before = feed(alice, project["id"])
    url = BASE_URL + path.format(project=project["id"], task=task["id"])
    requests.get(url, headers=alice.headers, timeout=10)
    after = feed(alice, project["id"])
    assert after == before, f"GET {path} recorded activity:\nbefore={before}\nafter={after}"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-activity-feed")
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", "/tasks/{task}", {"status": "done"}),
        ("PATCH", "/tasks/{task}", {"status": "bogus"}),
        ("POST", "/projects/{project}/tasks", {"title": ""}),
        ("POST", "/projects/{project}/tasks", {"title": "ok", "priority": "urgent"}),
    ],
    ids=["forbidden-transition", "unknown-status", "empty-title", "unknown-priority"],
)
def test_failed_request_records_no_event(method, path, body, alice, make_project, make_task):
    """A rejected transition or an invalid body adds nothing to the feed."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    before = feed(alice, project["id"])
    url = BASE_URL + path.format(task=task["id"], project=project["id"])
    requests.request(method, url, json=body, headers=alice.headers, timeout=10)
    after = feed(alice, project["id"])
    assert after == before, f"{method} {path} {body} recorded activity:\nbefore={before}\nafter={after}"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-activity-feed")
def test_other_users_task_create_records_no_event(alice, bob, make_project):
    """Another user's attempt to create a task in the project adds nothing to its feed."""
    project = make_project(alice)
    before = feed(alice, project["id"])
    requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks", json={"title": "Sneaky"}, headers=bob.headers, timeout=10
    )
    assert feed(alice, project["id"]) == before


# ---------------------------------------------------------------- counters


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-counters")
def test_task_create_raises_task_count(alice, make_project, make_task):
    """Each created task adds 1 to task_count and nothing to done_count."""
    project = make_project(alice)
    seen = []
    for _ in range(3):
        make_task(alice, project["id"])
        seen.append(counters(alice, project["id"]))
    assert seen == [(1, 0), (2, 0), (3, 0)], f"(task_count, done_count) after each create: {seen}"


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-counters")
def test_in_progress_is_not_counted_done(alice, make_project, make_task, set_status):
    """Moving a task to in_progress leaves done_count at 0."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    assert counters(alice, project["id"]) == (1, 0)


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-counters")
def test_finishing_a_task_raises_done_count(alice, make_project, make_task, set_status):
    """Moving a task into done adds 1 to done_count; task_count stays."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "done")
    assert counters(alice, project["id"]) == (2, 1)


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-counters")
def test_back_to_todo_keeps_counters(alice, make_project, make_task, set_status):
    """in_progress -> todo changes neither counter."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "todo")
    assert counters(alice, project["id"]) == (1, 0)


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-counters")
def test_deleting_a_done_task_lowers_both_counters(alice, make_project, make_task, set_status):
    """Deleting a done task subtracts 1 from task_count and from done_count."""
    project = make_project(alice)
    done = make_task(alice, project["id"])
    make_task(alice, project["id"])
    set_status(alice, done["id"], "in_progress")
    set_status(alice, done["id"], "done")
    delete_task(alice, done["id"])
    assert counters(alice, project["id"]) == (1, 0)


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-counters")
def test_deleting_an_open_task_lowers_task_count_only(alice, make_project, make_task, set_status):
    """Deleting a task that is not done subtracts 1 from task_count only."""
    project = make_project(alice)
    done = make_task(alice, project["id"])
    todo = make_task(alice, project["id"])
    set_status(alice, done["id"], "in_progress")
    set_status(alice, done["id"], "done")
    delete_task(alice, todo["id"])
    assert counters(alice, project["id"]) == (1, 1)


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-counters")
def test_rejected_transition_keeps_counters(alice, make_project, make_task):
    """A todo -> done attempt (not allowed) leaves done_count at 0."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={"status": "done"}, headers=alice.headers, timeout=10)
    assert counters(alice, project["id"]) == (1, 0)


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-counters")
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
