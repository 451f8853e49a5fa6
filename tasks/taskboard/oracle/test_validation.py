"""Validation: malformed or out-of-range input answers 422 and changes nothing.

Every limit the spec names is checked on both sides: the last valid value is accepted and
the first invalid one answers 422.
"""

import os
import secrets
import string
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"), pytest.mark.level("leaf")]
MISSING = 987654321  # an id no item creates
JSON = {"Content-Type": "application/json"}


def fresh_name(prefix="val"):
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def name_of_length(n):
    """A random valid username of exactly n characters."""
    alphabet = string.ascii_letters + string.digits + "_"
    return "".join(secrets.choice(alphabet) for _ in range(n))


def register(body):
    return requests.post(f"{BASE_URL}/auth/register", json=body, timeout=10)


# ---------------------------------------------------------------- registration


@pytest.mark.category("validation")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.parametrize(
    "username",
    [
        pytest.param("ab", id="2-chars"),
        pytest.param("x" * 33, id="33-chars"),
        pytest.param("has space_" + uuid.uuid4().hex[:6], id="space"),
        pytest.param("dash-" + uuid.uuid4().hex[:6], id="dash"),
        pytest.param("caf\u00e9_" + uuid.uuid4().hex[:6], id="non-ascii"),
        pytest.param("", id="empty"),
    ],
)
def test_register_rejects_bad_username(username):
    """Usernames outside ^[A-Za-z0-9_]{3,32}$ answer 422."""
    r = register({"username": username, "password": "long-enough-pw"})
    assert r.status_code == 422, f"username {username!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.parametrize("length", [3, 32], ids=["3-chars", "32-chars"])
def test_register_accepts_username_length_limits(length):
    """Usernames of exactly 3 and exactly 32 allowed characters are valid."""
    username = name_of_length(length)
    r = register({"username": username, "password": "long-enough-pw"})
    assert r.status_code == 201, f"username {username!r}: {r.status_code} {r.text}"
    assert r.json()["username"] == username, r.text


@pytest.mark.category("validation")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.parametrize("length", [7, 129], ids=["7-chars", "129-chars"])
def test_register_rejects_password_length(length):
    """Passwords shorter than 8 or longer than 128 characters answer 422."""
    r = register({"username": fresh_name(), "password": "p" * length})
    assert r.status_code == 422, f"{length}-character password: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.level("mid")
@pytest.mark.parametrize("length", [8, 128], ids=["8-chars", "128-chars"])
def test_register_accepts_password_length_limits(length):
    """Passwords of exactly 8 and exactly 128 characters are valid and log in."""
    username = fresh_name()
    password = "p" * length
    r = register({"username": username, "password": password})
    assert r.status_code == 201, f"{length}-character password: {r.status_code} {r.text}"
    r = requests.post(f"{BASE_URL}/auth/login", json={"username": username, "password": password}, timeout=10)
    assert r.status_code == 200, f"login with the {length}-character password: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"password": "long-enough-pw"}, id="no-username"),
        pytest.param({"username": "USER"}, id="no-password"),
        pytest.param({"username": 12345, "password": "long-enough-pw"}, id="username-int"),
        pytest.param({"username": "USER", "password": 123456789}, id="password-int"),
        pytest.param({"username": None, "password": "long-enough-pw"}, id="username-null"),
        pytest.param({"username": "USER", "password": None}, id="password-null"),
        pytest.param(["USER", "long-enough-pw"], id="array-body"),
    ],
)
def test_register_rejects_missing_fields_and_wrong_types(body):
    """Missing fields, wrong types and null answer 422."""
    username = fresh_name()
    if isinstance(body, dict):
        body = {k: (username if v == "USER" else v) for k, v in body.items()}
    else:
        body = [username if v == "USER" else v for v in body]
    r = register(body)
    assert r.status_code == 422, f"body {body!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-malformed-json")
def test_register_rejects_malformed_json():
    """A body that is not JSON answers 422."""
    r = requests.post(f"{BASE_URL}/auth/register", data="{not json", headers=JSON, timeout=10)
    assert r.status_code == 422, f"malformed JSON: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-auth-register-validation")
@pytest.mark.level("mid")
def test_rejected_registration_does_not_reserve_the_name():
    """A registration rejected with 422 registers nobody: the name is still free afterwards."""
    username = fresh_name()
    r = register({"username": username, "password": "short7c"})
    assert r.status_code == 422, r.text
    r = register({"username": username, "password": "now-long-enough"})
    assert r.status_code == 201, f"a rejected registration must not reserve the name: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence-422")
def test_register_with_taken_name_and_bad_password_is_422_not_409(alice):
    """A taken username with a too-short password answers 422 (422 wins over 409)."""
    r = register({"username": alice.username, "password": "short"})
    assert r.status_code == 422, f"{r.status_code} {r.text}"


# ---------------------------------------------------------------- login


@pytest.mark.category("validation")
@pytest.mark.requirement("R-auth-login-validation")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"password": "long-enough-pw"}, id="no-username"),
        pytest.param({"username": "someone"}, id="no-password"),
        pytest.param({"username": 12345, "password": "long-enough-pw"}, id="username-int"),
        pytest.param({"username": "someone", "password": None}, id="password-null"),
    ],
)
def test_login_rejects_missing_fields_and_wrong_types(body):
    """POST /auth/login with a missing or non-string field answers 422."""
    r = requests.post(f"{BASE_URL}/auth/login", json=body, timeout=10)
    assert r.status_code == 422, f"body {body!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-malformed-json")
def test_login_rejects_malformed_json():
    """POST /auth/login with a body that is not JSON answers 422."""
    r = requests.post(f"{BASE_URL}/auth/login", data="{not json", headers=JSON, timeout=10)
    assert r.status_code == 422, f"malformed JSON: {r.status_code} {r.text}"


# ---------------------------------------------------------------- projects

BAD_PROJECT_BODIES = [
    pytest.param({"name": ""}, id="name-empty"),
    pytest.param({"name": "   \t "}, id="name-whitespace"),
    pytest.param({"name": "n" * 101}, id="name-101-chars"),
    pytest.param({"name": None}, id="name-null"),
    pytest.param({"name": 42}, id="name-int"),
    pytest.param({"name": "ok", "description": "d" * 2001}, id="description-2001-chars"),
    pytest.param({"name": "ok", "description": None}, id="description-null"),
    pytest.param({"name": "ok", "description": 5}, id="description-int"),
]


@pytest.mark.category("validation")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-validation")
@pytest.mark.parametrize(
    "body", [pytest.param({"description": "no name"}, id="name-missing"), *BAD_PROJECT_BODIES]
)
def test_create_project_rejects_bad_body(body, alice):
    """POST /projects with a missing, blank, too long, null or mistyped field answers 422."""
    r = requests.post(f"{BASE_URL}/projects", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 422, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-project-validation")
@pytest.mark.level("mid")
def test_rejected_project_create_creates_nothing(alice):
    """After POST /projects answers 422 the caller still has no project."""
    r = requests.post(f"{BASE_URL}/projects", json={"name": "n" * 101}, headers=alice.headers, timeout=10)
    assert r.status_code == 422, r.text
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert r.json() == [], f"no project may have been created: {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-project-limits")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"name": "n" * 100}, id="name-100-chars"),
        pytest.param({"name": "n"}, id="name-1-char"),
        pytest.param({"name": "ok", "description": "d" * 2000}, id="description-2000-chars"),
        pytest.param({"name": "ok", "description": ""}, id="description-empty"),
    ],
)
def test_create_project_accepts_limits(body, alice):
    """Values at the limits (100-character name, 2000-character or empty description) are valid."""
    r = requests.post(f"{BASE_URL}/projects", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 201, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"
    assert {k: r.json().get(k) for k in body} == body, f"not stored as given: {r.text[:200]}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-project-validation")
@pytest.mark.level("mid")
@pytest.mark.parametrize("body", BAD_PROJECT_BODIES)
def test_patch_project_rejects_bad_value(body, alice, make_project):
    """PATCH /projects/{id} with a blank, too long, null or mistyped field answers 422 and keeps the project."""
    project = make_project(alice, name="Keep me", description="as is")
    body = {k: v for k, v in body.items() if v != "ok"}
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.patch(url, json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 422, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json() == project, f"a rejected PATCH changed the project: {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-project-limits")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"name": "n" * 100}, id="name-100-chars"),
        pytest.param({"description": "d" * 2000}, id="description-2000-chars"),
    ],
)
def test_patch_project_accepts_limits(body, alice, make_project):
    """PATCH /projects/{id} accepts a 100-character name and a 2000-character description."""
    project = make_project(alice)
    r = requests.patch(f"{BASE_URL}/projects/{project['id']}", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"


# ---------------------------------------------------------------- tasks

BAD_TASK_VALUES = [
    pytest.param({"title": ""}, id="title-empty"),
    pytest.param({"title": "   "}, id="title-spaces"),
    pytest.param({"title": "\n\t"}, id="title-newline-tab"),
    pytest.param({"title": "t" * 201}, id="title-201-chars"),
    pytest.param({"title": 42}, id="title-int"),
    pytest.param({"title": ["a"]}, id="title-list"),
    pytest.param({"title": None}, id="title-null"),
    pytest.param({"description": "d" * 2001}, id="description-2001-chars"),
    pytest.param({"description": None}, id="description-null"),
    pytest.param({"priority": "urgent"}, id="priority-unknown"),
    pytest.param({"priority": "HIGH"}, id="priority-uppercase"),
    pytest.param({"priority": ""}, id="priority-empty"),
    pytest.param({"priority": 1}, id="priority-int"),
    pytest.param({"priority": None}, id="priority-null"),
]


@pytest.mark.category("validation")
@pytest.mark.requirement("R-task-validation")
@pytest.mark.parametrize("body", [pytest.param({}, id="title-missing"), *BAD_TASK_VALUES])
def test_create_task_rejects_bad_body(body, alice, make_project):
    """POST /projects/{id}/tasks with a missing, blank, too long, null or mistyped field answers 422."""
    project = make_project(alice)
    body = {"title": "ok", **body} if "title" not in body and body else body
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks", json=body, headers=alice.headers, timeout=10
    )
    assert r.status_code == 422, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-task-validation")
@pytest.mark.level("mid")
def test_rejected_task_create_creates_nothing(alice, make_project):
    """After POST /projects/{id}/tasks answers 422 the project still has no task."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}/tasks"
    r = requests.post(url, json={"title": "t" * 201}, headers=alice.headers, timeout=10)
    assert r.status_code == 422, r.text
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json() == [], f"no task may have been created: {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-task-limits")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"title": "t" * 200}, id="title-200-chars"),
        pytest.param({"title": "t"}, id="title-1-char"),
        pytest.param({"title": "ok", "description": "d" * 2000}, id="description-2000-chars"),
        pytest.param({"title": "ok", "description": ""}, id="description-empty"),
        pytest.param({"title": "ok", "priority": "low"}, id="priority-low"),
        pytest.param({"title": "ok", "priority": "medium"}, id="priority-medium"),
        pytest.param({"title": "ok", "priority": "high"}, id="priority-high"),
    ],
)
def test_create_task_accepts_limits_and_known_values(body, alice, make_project):
    """Values at the limits and every known priority are valid and stored as given."""
    project = make_project(alice)
    r = requests.post(
        f"{BASE_URL}/projects/{project['id']}/tasks", json=body, headers=alice.headers, timeout=10
    )
    assert r.status_code == 201, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"
    assert {k: r.json().get(k) for k in body} == body, f"not stored as given: {r.text[:200]}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-task-validation")
@pytest.mark.level("mid")
@pytest.mark.parametrize(
    "body",
    [
        *BAD_TASK_VALUES,
        pytest.param({"status": "finished"}, id="status-unknown"),
        pytest.param({"status": "DONE"}, id="status-uppercase"),
        pytest.param({"status": "in progress"}, id="status-space"),
        pytest.param({"status": ""}, id="status-empty"),
        pytest.param({"status": None}, id="status-null"),
    ],
)
def test_patch_task_rejects_bad_value(body, alice, make_project, make_task):
    """PATCH /tasks/{id} with a blank, too long, null, mistyped or unknown value answers 422 and keeps the task."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Stays")
    url = f"{BASE_URL}/tasks/{task['id']}"
    r = requests.patch(url, json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 422, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json() == task, f"a rejected PATCH changed the task: {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-task-limits")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"title": "t" * 200}, id="title-200-chars"),
        pytest.param({"description": "d" * 2000}, id="description-2000-chars"),
    ],
)
def test_patch_task_accepts_limits(body, alice, make_project, make_task):
    """PATCH /tasks/{id} accepts a 200-character title and a 2000-character description."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(f"{BASE_URL}/tasks/{task['id']}", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"body {str(body)[:80]!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-task-list-filter")
@pytest.mark.parametrize("status", ["archived", "DONE", ""])
def test_task_list_unknown_status_filter_is_422(status, alice, make_project):
    """GET /projects/{id}/tasks?status=<not todo/in_progress/done> answers 422."""
    project = make_project(alice)
    r = requests.get(
        f"{BASE_URL}/projects/{project['id']}/tasks",
        params={"status": status},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 422, f"status={status!r}: {r.status_code} {r.text}"


# ---------------------------------------------------------------- malformed JSON, extra fields


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-malformed-json")
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/projects"),
        ("PATCH", "/projects/{project}"),
        ("POST", "/projects/{project}/tasks"),
        ("PATCH", "/tasks/{task}"),
    ],
    ids=["POST-projects", "PATCH-project", "POST-project-tasks", "PATCH-task"],
)
def test_malformed_json_is_422(method, path, alice, make_project, make_task):
    """An authenticated request whose body is not JSON answers 422."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    url = BASE_URL + path.format(project=project["id"], task=task["id"])
    r = requests.request(method, url, data='{"title": ', headers={**alice.headers, **JSON}, timeout=10)
    assert r.status_code == 422, f"{method} {path} with malformed JSON: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-unknown-fields")
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/projects", {"name": "Extra", "color": "red"}),
        ("/projects/{project}/tasks", {"title": "Extra", "assignee": "bob"}),
    ],
    ids=["POST-projects", "POST-project-tasks"],
)
def test_unknown_fields_are_ignored(path, body, alice, make_project):
    """Unknown extra fields in a creation body are ignored: the request answers 201."""
    project = make_project(alice)
    r = requests.post(
        BASE_URL + path.format(project=project["id"]), json=body, headers=alice.headers, timeout=10
    )
    assert r.status_code == 201, f"{r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-unknown-fields")
def test_register_ignores_unknown_fields():
    """POST /auth/register with an extra field answers 201."""
    username = fresh_name()
    r = register({"username": username, "password": "long-enough-pw", "is_admin": True})
    assert r.status_code == 201, f"{r.status_code} {r.text}"


# ---------------------------------------------------------------- 422 before 404 and 409


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence-422")
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", f"/projects/{MISSING}", {"name": ""}),
        ("POST", f"/projects/{MISSING}/tasks", {"title": ""}),
        ("PATCH", f"/tasks/{MISSING}", {"title": ""}),
        ("PATCH", f"/tasks/{MISSING}", {"status": "finished"}),
        ("GET", f"/projects/{MISSING}/tasks?status=archived", None),
    ],
    ids=["PATCH-project", "POST-project-tasks", "PATCH-task-title", "PATCH-task-status", "GET-project-tasks-status"],
)
def test_422_wins_over_404(method, path, body, alice):
    """An invalid request on an unknown id answers 422, not 404."""
    r = requests.request(method, f"{BASE_URL}{path}", json=body, headers=alice.headers, timeout=10)
    assert r.status_code == 422, f"{method} {path} {body}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence-422")
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", "/projects/{project}", {"name": ""}),
        ("POST", "/projects/{project}/tasks", {"title": ""}),
        ("PATCH", "/tasks/{task}", {"title": ""}),
        ("PATCH", "/tasks/{task}", {"status": "finished"}),
        ("GET", "/projects/{project}/tasks?status=archived", None),
    ],
    ids=["PATCH-project", "POST-project-tasks", "PATCH-task-title", "PATCH-task-status", "GET-project-tasks-status"],
)
def test_422_wins_over_404_on_other_users_resource(method, path, body, alice, bob, make_project, make_task):
    """An invalid request on another user's project or task answers 422: it counts as unknown (404), and 422 wins."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    url = BASE_URL + path.format(project=project["id"], task=task["id"])
    r = requests.request(method, url, json=body, headers=bob.headers, timeout=10)
    assert r.status_code == 422, f"{method} another user's {path} {body}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence-422")
def test_forbidden_transition_with_invalid_field_is_422_not_409(alice, make_project, make_task):
    """todo -> done together with a too long title answers 422 (422 wins over 409)."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}",
        json={"status": "done", "title": "t" * 201},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 422, f"{r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence-422")
def test_transition_out_of_done_with_invalid_priority_is_422_not_409(alice, make_project, make_task, set_status):
    """done -> todo together with an unknown priority answers 422 (422 wins over 409)."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    set_status(alice, task["id"], "in_progress")
    set_status(alice, task["id"], "done")
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}",
        json={"status": "todo", "priority": "urgent"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 422, f"{r.status_code} {r.text}"
