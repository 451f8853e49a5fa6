"""Authorization: bearer tokens (401) and ownership (another user's resources are 404)."""

import os

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


@pytest.mark.category("authorization")
def test_missing_token_is_401():
    """Protected endpoints answer 401 without an Authorization header."""
    for method, path in [
        ("GET", "/me"),
        ("GET", "/projects"),
        ("POST", "/projects"),
        ("GET", "/tasks/1"),
        ("POST", "/auth/logout"),
    ]:
        r = requests.request(method, f"{BASE_URL}{path}", json={"name": "x"}, timeout=10)
        assert r.status_code == 401, f"{method} {path} without token: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
def test_bad_or_malformed_token_is_401(alice):
    """An unknown token, a non-Bearer scheme or a bare token answer 401."""
    for header in [
        "Bearer not-a-real-token",
        f"Token {alice.token}",
        alice.token,
        "Bearer ",
    ]:
        r = requests.get(f"{BASE_URL}/projects", headers={"Authorization": header}, timeout=10)
        assert r.status_code == 401, f"Authorization {header!r}: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
def test_wrong_password_is_401(alice):
    """POST /auth/login with a wrong password or an unknown username answers 401."""
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": alice.username, "password": alice.password + "x"},
        timeout=10,
    )
    assert r.status_code == 401, r.text
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": alice.username + "_nobody", "password": alice.password},
        timeout=10,
    )
    assert r.status_code == 401, r.text


@pytest.mark.category("authorization")
def test_logout_invalidates_only_that_token(make_user):
    """After POST /auth/logout the token gets 401; another token of the same user still works."""
    user = make_user()
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": user.username, "password": user.password},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    second = {"Authorization": f"Bearer {r.json()['access_token']}"}
    r = requests.post(f"{BASE_URL}/auth/logout", headers=user.headers, timeout=10)
    assert r.status_code == 204, r.text
    r = requests.get(f"{BASE_URL}/me", headers=user.headers, timeout=10)
    assert r.status_code == 401, f"logged-out token still accepted: {r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/me", headers=second, timeout=10)
    assert r.status_code == 200, f"other token of the same user must stay valid: {r.text}"


@pytest.mark.category("authorization")
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
def test_other_users_project_is_404(alice, bob, make_project):
    """GET, PATCH and DELETE of another user's project answer 404 and change nothing."""
    project = make_project(alice, name="Alice only")
    url = f"{BASE_URL}/projects/{project['id']}"
    r = requests.get(url, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"GET: {r.status_code} {r.text}"
    r = requests.patch(url, json={"name": "Hijacked"}, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"PATCH: {r.status_code} {r.text}"
    r = requests.delete(url, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"DELETE: {r.status_code} {r.text}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"owner lost the project: {r.status_code} {r.text}"
    assert r.json()["name"] == "Alice only", r.text


@pytest.mark.category("authorization")
def test_other_users_project_tasks_and_activity_are_404(alice, bob, make_project, make_task):
    """Listing or creating tasks in, or reading the activity of, another user's project answers 404."""
    project = make_project(alice)
    make_task(alice, project["id"])
    base = f"{BASE_URL}/projects/{project['id']}"
    r = requests.get(f"{base}/tasks", headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"GET tasks: {r.status_code} {r.text}"
    r = requests.post(f"{base}/tasks", json={"title": "Sneaky"}, headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"POST tasks: {r.status_code} {r.text}"
    r = requests.get(f"{base}/activity", headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"GET activity: {r.status_code} {r.text}"
    r = requests.get(base, headers=alice.headers, timeout=10)
    assert r.json()["task_count"] == 1, f"another user's create must not add a task: {r.text}"


@pytest.mark.category("authorization")
def test_other_users_task_get_is_404(alice, bob, make_project, make_task):
    """GET /tasks/{id} of another user's task answers 404."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Private")
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"{r.status_code} {r.text}"
    assert "Private" not in r.text, "another user's task leaked"


@pytest.mark.category("authorization")
def test_other_users_task_patch_is_404_and_changes_nothing(alice, bob, make_project, make_task):
    """PATCH /tasks/{id} of another user's task answers 404 and leaves the task unchanged."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Original")
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}",
        json={"title": "Defaced", "status": "in_progress"},
        headers=bob.headers,
        timeout=10,
    )
    assert r.status_code == 404, f"{r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["title"] == "Original", f"task changed by another user: {r.text}"
    assert r.json()["status"] == "todo", f"task changed by another user: {r.text}"
    r = requests.get(f"{BASE_URL}/projects/{project['id']}/activity", headers=alice.headers, timeout=10)
    assert "status_changed" not in [e["type"] for e in r.json()], f"another user's PATCH recorded activity: {r.text}"


@pytest.mark.category("authorization")
def test_other_users_task_delete_is_404_and_keeps_task(alice, bob, make_project, make_task):
    """DELETE /tasks/{id} of another user's task answers 404 and the task survives."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    r = requests.delete(f"{BASE_URL}/tasks/{task['id']}", headers=bob.headers, timeout=10)
    assert r.status_code == 404, f"{r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.status_code == 200, f"task deleted by another user: {r.status_code} {r.text}"
