"""Authorization: bearer tokens (401) and ownership (another user's resources are 404)."""

import os
import re

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
# What most items here are; an item's own marks override these (the closest wins).
pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"), pytest.mark.level("leaf")]

# Every route that needs a token, with a body that would be valid for it. The ids are filled
# in with a real project and task of the token's owner, so a 401 cannot hide behind a 404.
PROTECTED = [
    ("GET", "/me", None),
    ("POST", "/auth/logout", None),
    ("POST", "/projects", {"name": "Denied"}),
    ("GET", "/projects", None),
    ("GET", "/projects/{project}", None),
    ("PATCH", "/projects/{project}", {"name": "Denied"}),
    ("DELETE", "/projects/{project}", None),
    ("POST", "/projects/{project}/tasks", {"title": "Denied"}),
    ("GET", "/projects/{project}/tasks", None),
    ("GET", "/projects/{project}/activity", None),
    ("GET", "/tasks/{task}", None),
    ("PATCH", "/tasks/{task}", {"title": "Denied"}),
    ("DELETE", "/tasks/{task}", None),
]


def route_id(method, path):
    """A node-id friendly name: `PATCH /projects/{project}` -> `PATCH-projects-project`."""
    return "-".join([method, *re.findall(r"[a-z_]+", path.split("?")[0])])


ROUTE_IDS = [route_id(method, path) for method, path, _ in PROTECTED]


def call(method, path, body, headers, project, task):
    url = BASE_URL + path.format(project=project["id"], task=task["id"])
    return requests.request(method, url, json=body, headers=headers, timeout=10)


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-bearer")
@pytest.mark.parametrize(("method", "path", "body"), PROTECTED, ids=ROUTE_IDS)
def test_missing_token_is_401(method, path, body, alice, make_project, make_task):
    """Every protected route answers 401 without an Authorization header."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = call(method, path, body, {}, project, task)
    assert r.status_code == 401, f"{method} {path} without token: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-auth-logout")
@pytest.mark.level("mid")
@pytest.mark.parametrize(("method", "path", "body"), PROTECTED, ids=ROUTE_IDS)
def test_logged_out_token_is_401(method, path, body, alice, make_project, make_task, log_out):
    """Every protected route answers 401 to a token that was logged out."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    log_out(alice.headers)
    r = call(method, path, body, alice.headers, project, task)
    assert r.status_code == 401, f"{method} {path} with a logged-out token: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-bearer")
@pytest.mark.parametrize(
    "form",
    ["unknown-token", "other-scheme", "bare-token", "empty-bearer", "basic"],
)
def test_malformed_authorization_header_is_401(form, alice):
    """An unknown token, or a header that is not `Bearer <token>` around a valid one, answers 401."""
    header = {
        "unknown-token": f"Bearer {alice.token}x",
        "other-scheme": f"Token {alice.token}",
        "bare-token": alice.token,
        "empty-bearer": "Bearer ",
        "basic": "Basic dXNlcjpwYXNzd29yZA==",
    }[form]
    r = requests.get(f"{BASE_URL}/projects", headers={"Authorization": header}, timeout=10)
    assert r.status_code == 401, f"Authorization {header!r}: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-login")
def test_wrong_password_is_401(alice):
    """POST /auth/login with a wrong password answers 401."""
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": alice.username, "password": alice.password + "x"},
        timeout=10,
    )
    assert r.status_code == 401, r.text


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-login")
def test_unknown_username_is_401(alice):
    """POST /auth/login with an unknown username answers 401."""
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": alice.username + "_nobody", "password": alice.password},
        timeout=10,
    )
    assert r.status_code == 401, r.text


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-auth-login")
def test_login_username_is_case_sensitive(alice):
    """Logging in with the username in another case answers 401 (usernames are case-sensitive)."""
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": alice.username.upper(), "password": alice.password},
        timeout=10,
    )
    assert r.status_code == 401, f"{alice.username.upper()!r} logged in as {alice.username!r}: {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-auth-logout")
@pytest.mark.level("mid")
def test_logout_invalidates_the_token(alice, log_out):
    """After POST /auth/logout the token used for it gets 401."""
    log_out(alice.headers)
    r = requests.get(f"{BASE_URL}/me", headers=alice.headers, timeout=10)
    assert r.status_code == 401, f"logged-out token still accepted: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-auth-logout")
@pytest.mark.level("mid")
def test_logout_keeps_other_tokens_of_the_user(alice, login_again, log_out):
    """Logging one token out leaves another token of the same user valid."""
    second = login_again(alice)
    log_out(alice.headers)
    r = requests.get(f"{BASE_URL}/me", headers=second, timeout=10)
    assert r.status_code == 200, f"other token of the same user must stay valid: {r.text}"
    assert r.json()["id"] == alice.id, r.text


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-login")
@pytest.mark.level("mid")
def test_each_login_issues_a_new_token(alice, login_again):
    """A second login returns a different token; both work."""
    second = login_again(alice)
    assert second != alice.headers, "each login must issue a new token"
    codes = [requests.get(f"{BASE_URL}/me", headers=h, timeout=10).status_code for h in (alice.headers, second)]
    assert codes == [200, 200], f"GET /me with the first and the second token: {codes}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence-401")
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/projects", {"name": ""}),
        ("PATCH", "/projects/{project}", {"name": 7}),
        ("POST", "/projects/{project}/tasks", {"title": ""}),
        ("PATCH", "/tasks/{task}", {"status": "finished"}),
        ("GET", "/projects/{project}/tasks?status=archived", None),
    ],
    ids=["POST-projects", "PATCH-project", "POST-project-tasks", "PATCH-task", "GET-project-tasks-status"],
)
def test_401_wins_over_422(method, path, body, alice, make_project, make_task):
    """An invalid request without a token answers 401, not 422."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = call(method, path, body, {}, project, task)
    assert r.status_code == 401, f"{method} {path} invalid and unauthenticated: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence-401")
@pytest.mark.parametrize("path", ["/projects/987654321", "/tasks/987654321"], ids=["project", "task"])
def test_401_wins_over_404(path):
    """An unknown id requested without a token answers 401, not 404."""
    r = requests.get(f"{BASE_URL}{path}", timeout=10)
    assert r.status_code == 401, f"GET {path} unauthenticated: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-ownership")
def test_project_list_shows_only_own_projects(alice, bob, make_project):
    """GET /projects lists the caller's projects and none of another user's."""
    mine = make_project(alice)
    theirs = make_project(bob)
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    ids = [p["id"] for p in r.json()]
    assert mine["id"] in ids, f"own project missing from {ids}"
    assert theirs["id"] not in ids, f"another user's project {theirs['id']} listed: {ids}"
    assert all(p["owner_id"] == alice.id for p in r.json()), r.text


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-ownership")
@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("GET", "", None),
        ("PATCH", "", {"name": "Hijacked"}),
        ("DELETE", "", None),
        ("GET", "/tasks", None),
        ("POST", "/tasks", {"title": "Sneaky"}),
        ("GET", "/activity", None),
    ],
    ids=["GET", "PATCH", "DELETE", "GET-tasks", "POST-tasks", "GET-activity"],
)
def test_other_users_project_is_404(method, suffix, body, alice, bob, make_project, make_task):
    """Another user's project, its task list and its feed answer 404 on every route."""
    project = make_project(alice)
    make_task(alice, project["id"])
    url = f"{BASE_URL}/projects/{project['id']}{suffix}"
    r = requests.request(method, url, json=body, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"{method} another user's /projects/{{id}}{suffix}: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-ownership")
@pytest.mark.level("mid")
@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("PATCH", "", {"name": "Hijacked"}),
        ("DELETE", "", None),
        ("POST", "/tasks", {"title": "Sneaky"}),
    ],
    ids=["PATCH", "DELETE", "POST-tasks"],
)
def test_other_users_failed_project_write_changes_nothing(
    method, suffix, body, alice, bob, make_project, make_task
):
    """Another user's PATCH, DELETE or task create on a project leaves the project as it was."""
    project = make_project(alice, name="Alice only")
    make_task(alice, project["id"])
    url = f"{BASE_URL}/projects/{project['id']}"
    before = requests.get(url, headers=alice.headers, timeout=10).json()
    requests.request(method, f"{url}{suffix}", json=body, headers=bob.headers, timeout=10)
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"owner lost the project: {r.status_code} {r.text}"
    assert r.json() == before, f"another user's {method} changed the project: {before} -> {r.json()}"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-ownership")
@pytest.mark.parametrize(
    ("method", "body"),
    [("GET", None), ("PATCH", {"title": "Defaced"}), ("DELETE", None)],
    ids=["GET", "PATCH", "DELETE"],
)
def test_other_users_task_is_404(method, body, alice, bob, make_project, make_task):
    """GET, PATCH and DELETE of another user's task answer 404."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Private")
    r = requests.request(method, f"{BASE_URL}/tasks/{task['id']}", json=body, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"{method} another user's task: {r.status_code} {r.text}"
    assert "Private" not in r.text, "another user's task leaked"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-ownership")
@pytest.mark.level("mid")
def test_other_users_task_patch_changes_nothing(alice, bob, make_project, make_task):
    """A PATCH of another user's task leaves every field and the feed unchanged."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Original")
    requests.patch(
        f"{BASE_URL}/tasks/{task['id']}",
        json={"title": "Defaced", "status": "in_progress"},
        headers=bob.headers,
        timeout=10,
    )
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == task, f"task changed by another user: {task} -> {r.json()}"
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/activity", headers=alice.headers, timeout=10)
    assert "status_changed" not in [e["type"] for e in r.json()], f"another user's PATCH recorded activity: {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-ownership")
@pytest.mark.level("mid")
def test_other_users_task_delete_keeps_task(alice, bob, make_project, make_task):
    """A DELETE of another user's task leaves the task in place."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    requests.delete(f"{BASE_URL}/tasks/{task['id']}", headers=bob.headers, timeout=10)
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"task deleted by another user: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence-404")
def test_other_users_task_with_forbidden_transition_is_404_not_409(alice, bob, make_project, make_task):
    """A disallowed transition on another user's task answers 404 (404 wins over 409)."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}", json={"status": "done"}, headers=bob.headers, timeout=10
    )
    assert r.status_code == 404, f"{r.status_code} {r.text}"
