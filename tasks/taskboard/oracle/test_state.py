"""State: what is written can be read back; timestamps, order, uniqueness, ids; deletes and the
project cascade; concurrent creates."""

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"), pytest.mark.level("mid")]
PARALLEL = 10


def parse_time(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def wait_past_second_of(stamp):
    """Wait until the clock is in a later whole second than `stamp`, so a timestamp taken now
    differs from it even on a service that keeps whole seconds only."""
    deadline = parse_time(stamp).replace(microsecond=0) + timedelta(seconds=1, milliseconds=20)
    while datetime.now(UTC) < deadline:
        time.sleep(0.02)


def delete(user, path):
    """Setup: DELETE `path` and require 204."""
    r = requests.delete(f"{BASE_URL}{path}", headers=user.headers, timeout=10)
    assert r.status_code == 204, f"setup: DELETE {path} -> {r.status_code} {r.text}"


def get_task(user, task_id):
    r = requests.get(f"{BASE_URL}/tasks/{task_id}", headers=user.headers, timeout=10)
    assert r.status_code == 200, f"GET task: {r.status_code} {r.text}"
    return r.json()


# ---------------------------------------------------------------- users


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-register-unique")
@pytest.mark.level("leaf")
def test_duplicate_username_is_409():
    """Registering a username that is already taken answers 409."""
    username = f"dup_{uuid.uuid4().hex[:16]}"
    r = requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "first-password"}, timeout=10
    )
    assert r.status_code == 201, r.text
    r = requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "second-password"}, timeout=10
    )
    assert r.status_code == 409, f"{r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-register-unique")
def test_duplicate_registration_keeps_the_original_account():
    """After a 409 registration the first password still logs in and the second does not."""
    username = f"dup_{uuid.uuid4().hex[:16]}"
    requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "first-password"}, timeout=10
    )
    requests.post(
        f"{BASE_URL}/auth/register", json={"username": username, "password": "second-password"}, timeout=10
    )
    r = requests.post(
        f"{BASE_URL}/auth/login", json={"username": username, "password": "first-password"}, timeout=10
    )
    assert r.status_code == 200, f"the original account must be intact: {r.status_code} {r.text}"
    r = requests.post(
        f"{BASE_URL}/auth/login", json={"username": username, "password": "second-password"}, timeout=10
    )
    assert r.status_code == 401, f"the rejected registration's password logs in: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-usernames-case-sensitive")
@pytest.mark.level("leaf")
def test_usernames_differing_in_case_are_different_users():
    """Usernames are case-sensitive: `Name_x` and `name_x` register as two users."""
    base = f"Case_{uuid.uuid4().hex[:12]}"
    upper, lower = (
        requests.post(
            f"{BASE_URL}/auth/register", json={"username": name, "password": "long-enough-pw"}, timeout=10
        )
        for name in (base, base.lower())
    )
    assert (upper.status_code, lower.status_code) == (201, 201), f"{upper.text} / {lower.text}"
    assert upper.json()["id"] != lower.json()["id"], f"{upper.text} / {lower.text}"


# ---------------------------------------------------------------- projects


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-read")
def test_project_reads_back_as_created(alice, make_project):
    """GET /projects/{id} answers exactly the object POST /projects returned."""
    project = make_project(alice, description="first")
    r = requests.get(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == project, f"GET differs from the creation response: {r.json()} vs {project}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-project-create")
def test_project_name_is_stored_exactly(alice, make_project):
    """A name with leading, inner and trailing spaces is stored without trimming."""
    project = make_project(alice, name="  Spaced  name ")
    r = requests.get(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.json()["name"] == "  Spaced  name ", f"names are stored exactly as given: {r.text}"


@pytest.mark.category("state")
@pytest.mark.requirement("R-project-update")
def test_project_patch_changes_only_given_fields(alice, make_project):
    """PATCH /projects/{id} with a description keeps the name, and the change persists."""
    project = make_project(alice, name="Stable", description="first")
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.patch(url, json={"description": "second"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {**project, "description": "second"}, r.text
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json() == {**project, "description": "second"}, f"PATCH not persisted: {r.text}"


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-update")
def test_project_patch_name_persists(alice, make_project):
    """PATCH /projects/{id} with a name changes the name and keeps the description."""
    project = make_project(alice, name="Before", description="kept")
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.patch(url, json={"name": "After"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert (r.json()["name"], r.json()["description"]) == ("After", "kept"), r.text


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-project-update")
@pytest.mark.level("leaf")
def test_project_empty_patch_changes_nothing(alice, make_project):
    """PATCH /projects/{id} with {} answers 200 with the project unchanged."""
    project = make_project(alice, description="same")
    r = requests.patch(f"{BASE_URL}/projects/{project['id']}", json={}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == project, f"an empty PATCH changed the project: {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-list-order")
def test_project_list_is_ordered_by_id(alice, make_project):
    """GET /projects lists the caller's projects by id ascending."""
    made = [make_project(alice)["id"] for _ in range(4)]
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert [p["id"] for p in r.json()] == sorted(made), r.text


# ---------------------------------------------------------------- tasks


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-task-read")
def test_task_reads_back_as_created(alice, make_project, make_task):
    """GET /tasks/{id} answers exactly the object the creation returned."""
    project = make_project(alice)
    task = make_task(alice, project["id"], description="details", priority="high")
    assert get_task(alice, task["id"]) == task


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-task-create")
def test_task_title_is_stored_exactly(alice, make_project, make_task):
    """A title with surrounding spaces is stored without trimming."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title=" padded title  ")
    assert get_task(alice, task["id"])["title"] == " padded title  "


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-task-update")
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
    t = get_task(alice, task["id"])
    assert (t["title"], t["description"], t["priority"], t["status"]) == ("After", "details", "high", "todo"), t


@pytest.mark.category("state")
@pytest.mark.requirement("R-task-update")
def test_task_patch_keeps_absent_fields(alice, make_project, make_task):
    """PATCH /tasks/{id} with only a priority keeps title, description and status."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Same", description="same too")
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={"priority": "low"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    t = get_task(alice, task["id"])
    assert (t["title"], t["description"], t["status"], t["priority"]) == ("Same", "same too", "todo", "low"), t


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-task-update")
def test_task_empty_patch_changes_no_field(alice, make_project, make_task):
    """PATCH /tasks/{id} with {} answers 200 and every field but updated_at stays."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    t = get_task(alice, task["id"])
    t.pop("updated_at")
    assert t == {k: v for k, v in task.items() if k != "updated_at"}, t


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-timestamps")
@pytest.mark.level("leaf")
def test_task_updated_at_equals_created_at_at_creation(alice, make_project, make_task):
    """A new task's updated_at equals its created_at."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    assert task["updated_at"] == task["created_at"], task


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-timestamps")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"title": "Edited"}, id="title"),
        pytest.param({"priority": "high"}, id="priority"),
        pytest.param({"status": "in_progress"}, id="transition"),
    ],
)
def test_task_patch_moves_updated_at(body, alice, make_project, make_task):
    """A successful PATCH sets updated_at to a later time than created_at, and created_at stays."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    wait_past_second_of(task["created_at"])
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    t = get_task(alice, task["id"])
    assert t["created_at"] == task["created_at"], f"created_at must not change: {t}"
    assert parse_time(t["updated_at"]) > parse_time(task["created_at"]), f"updated_at not moved: {t}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-timestamps")
def test_task_patch_response_carries_the_new_updated_at(alice, make_project, make_task):
    """The PATCH response's updated_at is the one GET /tasks/{id} then answers."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={"title": "Edited"}, headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert get_task(alice, task["id"])["updated_at"] == r.json()["updated_at"], r.text


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-timestamps")
def test_rejected_patch_keeps_updated_at(alice, make_project, make_task):
    """A PATCH rejected with 409 leaves updated_at as it was."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    requests.patch(f"{BASE_URL}/tasks/{task['id']}", json={"status": "done"}, headers=alice.headers, timeout=10)
    assert get_task(alice, task["id"])["updated_at"] == task["updated_at"]


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-list-order")
def test_task_list_is_ordered_by_id(alice, make_project, make_task):
    """GET /projects/{id}/tasks lists exactly the project's tasks by id ascending."""
    project = make_project(alice)
    other = make_project(alice)
    made = [make_task(alice, project["id"])["id"] for _ in range(3)]
    make_task(alice, other["id"])
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/tasks", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert [t["id"] for t in r.json()] == sorted(made), r.text


@pytest.mark.category("state")
@pytest.mark.requirement("R-task-list-filter")
@pytest.mark.parametrize("status", ["todo", "in_progress", "done"])
def test_task_list_filters_by_status(status, alice, make_project, make_task, set_status):
    """GET /projects/{id}/tasks?status=S lists only the tasks in S, by id ascending."""
    project = make_project(alice)
    todo = [make_task(alice, project["id"])["id"] for _ in range(2)]
    started = [make_task(alice, project["id"])["id"] for _ in range(2)]
    finished = make_task(alice, project["id"])["id"]
    set_status(alice, started[0], "in_progress")
    set_status(alice, started[1], "in_progress")
    set_status(alice, finished, "in_progress")
    set_status(alice, finished, "done")
    expected = {"todo": todo, "in_progress": started, "done": [finished]}[status]
    r = requests.get(
        f"{BASE_URL}/projects/{project['id']}/tasks", params={"status": status}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 200, r.text
    assert [t["id"] for t in r.json()] == expected, r.text


# ---------------------------------------------------------------- ids


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-ids-not-reused")
def test_task_ids_are_not_reused_after_delete(alice, make_project, make_task):
    """A task created after its project's tasks were deleted gets an id that no earlier task had."""
    project = make_project(alice)
    seen = [make_task(alice, project["id"])["id"] for _ in range(2)]
    # The newest first (a max(id) + 1 counter hands its id out again), then the older one.
    delete(alice, f"/tasks/{seen[1]}")
    delete(alice, f"/tasks/{seen[0]}")
    new = make_task(alice, project["id"])["id"]
    assert new not in seen, f"id {new} reused (earlier ids {seen})"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-ids-not-reused")
def test_project_ids_are_not_reused_after_delete(alice, make_project):
    """A project created after the caller's projects were deleted gets an id that no earlier project had."""
    seen = [make_project(alice)["id"] for _ in range(2)]
    # The newest first (a max(id) + 1 counter hands its id out again), then the older one.
    delete(alice, f"/projects/{seen[1]}")
    delete(alice, f"/projects/{seen[0]}")
    new = make_project(alice)["id"]
    assert new not in seen, f"id {new} reused (earlier ids {seen})"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-concurrency")
def test_parallel_task_creates_are_all_kept(alice, make_project):
    """10 tasks created at once in one project: 10 distinct ids, all listed, task_count 10."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}/tasks"

    def create(i):
        return requests.post(url, json={"title": f"parallel {i}"}, headers=alice.headers, timeout=10)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        responses = list(pool.map(create, range(PARALLEL)))
    assert [r.status_code for r in responses] == [201] * PARALLEL, [r.text for r in responses]
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == PARALLEL, f"ids not distinct: {ids}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert [t["id"] for t in r.json()] == sorted(ids), f"listed {r.text}, created {ids}"
    r = requests.get(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.json()["task_count"] == PARALLEL, r.text


# ---------------------------------------------------------------- deletes and the cascade


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-task-delete")
@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_deleted_task_is_404(method, alice, make_project, make_task):
    """After DELETE /tasks/{id} the task answers 404 on GET, PATCH and DELETE."""
    project = make_project(alice)
    gone = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{gone['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.request(
        method, f"{BASE_URL}/tasks/{gone['id']}", json={"title": "x"}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 404, f"{method} deleted task: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.requirement("R-task-delete")
def test_deleted_task_is_not_listed(alice, make_project, make_task):
    """After DELETE /tasks/{id} the project's task list no longer has it."""
    project = make_project(alice)
    keep = make_task(alice, project["id"])
    gone = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{gone['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/tasks", headers=alice.headers, timeout=10)
    assert [t["id"] for t in r.json()] == [keep["id"]], r.text


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-cascade")
@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_project_delete_cascades_to_tasks(method, alice, make_project, make_task, set_status):
    """After DELETE /projects/{id} every former task answers 404."""
    project = make_project(alice)
    tasks = [make_task(alice, project["id"]) for _ in range(3)]
    set_status(alice, tasks[1]["id"], "in_progress")
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    answers = [
        requests.request(
            method, f"{BASE_URL}/tasks/{task['id']}", json={"title": "zombie"}, headers=alice.headers, timeout=10
        )
        for task in tasks
    ]
    codes = [r.status_code for r in answers]
    assert codes == [404, 404, 404], f"{method} the tasks of a deleted project: {codes} {[r.text for r in answers]}"


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-delete")
@pytest.mark.parametrize("suffix", ["", "/tasks", "/activity"], ids=["project", "tasks", "activity"])
def test_deleted_project_is_404(suffix, alice, make_project, make_task):
    """After DELETE /projects/{id} the project, its task list and its feed answer 404."""
    project = make_project(alice)
    make_task(alice, project["id"])
    base = f"{BASE_URL}/projects/{project['id']}"
    r = requests.delete(base, headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{base}{suffix}", headers=alice.headers, timeout=10)
    assert r.status_code == 404, f"GET /projects/{project['id']}{suffix}: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.requirement("R-project-delete")
def test_deleted_project_is_not_listed(alice, make_project):
    """After DELETE /projects/{id} the project is not in GET /projects."""
    project = make_project(alice)
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert project["id"] not in [p["id"] for p in r.json()], r.text


@pytest.mark.category("state")
@pytest.mark.requirement("R-project-delete")
@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_deleted_project_cannot_be_changed(method, alice, make_project):
    """PATCH or a second DELETE of a deleted project answers 404."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.delete(url, headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.request(method, url, json={"name": "Back"}, headers=alice.headers, timeout=10)
    assert r.status_code == 404, f"{method} a deleted project: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.requirement("R-project-delete")
def test_deleted_project_accepts_no_new_task(alice, make_project):
    """POST /projects/{id}/tasks on a deleted project answers 404."""
    project = make_project(alice)
    r = requests.delete(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks", json={"title": "Orphan"}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 404, f"{r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-project-cascade")
def test_project_delete_leaves_other_projects_alone(alice, make_project, make_task):
    """Deleting one project keeps the caller's other projects and their tasks intact."""
    doomed = make_project(alice)
    kept = make_project(alice)
    make_task(alice, doomed["id"])
    survivor = make_task(alice, kept["id"], title="Survivor")
    r = requests.delete(f"{BASE_URL}/projects/{doomed['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 204, r.text
    assert get_task(alice, survivor["id"])["title"] == "Survivor"
    r = requests.get(f"{BASE_URL}/projects/{kept['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200 and r.json()["task_count"] == 1, r.text
