"""Validation: malformed or out-of-range input answers 422 and changes nothing."""

import os
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def fresh_name(prefix="val"):
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@pytest.mark.category("validation")
def test_register_rejects_bad_username():
    """Usernames that are too short, too long or use other characters answer 422."""
    for username in ["ab", "x" * 33, "has space_" + uuid.uuid4().hex[:6], "dash-" + uuid.uuid4().hex[:6], ""]:
        r = requests.post(
            f"{BASE_URL}/auth/register",
            json={"username": username, "password": "long-enough-pw"},
            timeout=10,
        )
        assert r.status_code == 422, f"username {username!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_register_rejects_short_password():
    """A password shorter than 8 characters answers 422 and registers nobody."""
    username = fresh_name()
    r = requests.post(
        f"{BASE_URL}/auth/register",
        json={"username": username, "password": "short7c"},
        timeout=10,
    )
    assert r.status_code == 422, r.text
    r = requests.post(
        f"{BASE_URL}/auth/register",
        json={"username": username, "password": "now-long-enough"},
        timeout=10,
    )
    assert r.status_code == 201, f"a rejected registration must not reserve the name: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_register_rejects_missing_fields_and_wrong_types():
    """Missing fields, wrong types and a non-JSON body answer 422."""
    for body in [
        {"username": fresh_name()},
        {"password": "long-enough-pw"},
        {"username": 12345, "password": "long-enough-pw"},
        {"username": fresh_name(), "password": None},
    ]:
        r = requests.post(f"{BASE_URL}/auth/register", json=body, timeout=10)
        assert r.status_code == 422, f"body {body!r}: {r.status_code} {r.text}"
    r = requests.post(
        f"{BASE_URL}/auth/register",
        data="{not json",
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 422, f"malformed JSON: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_project_name_blank_or_too_long_is_422(alice):
    """Project names that are empty, whitespace-only, over 100 characters or missing answer 422."""
    for body in [{"name": ""}, {"name": "   \t "}, {"name": "n" * 101}, {"description": "no name"}, {"name": None}]:
        r = requests.post(f"{BASE_URL}/projects", json=body, headers=alice.headers, timeout=10)
        assert r.status_code == 422, f"body {body!r}: {r.status_code} {r.text}"
    r = requests.post(f"{BASE_URL}/projects", json={"name": "n" * 100}, headers=alice.headers, timeout=10)
    assert r.status_code == 201, f"a 100-character name is valid: {r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/projects", headers=alice.headers, timeout=10)
    assert len(r.json()) == 1, f"only the valid project may exist: {r.text}"


@pytest.mark.category("validation")
def test_project_patch_blank_name_is_422(alice, make_project):
    """PATCH /projects/{id} with a whitespace-only name answers 422 and keeps the name."""
    project = make_project(alice, name="Keep me")
    r = requests.patch(
        f"{BASE_URL}/projects/{project['id']}", json={"name": "  "}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 422, r.text
    r = requests.get(f"{BASE_URL}/projects/{project['id']}", headers=alice.headers, timeout=10)
    assert r.json()["name"] == "Keep me", r.text


@pytest.mark.category("validation")
def test_task_title_blank_is_422(alice, make_project):
    """Task titles that are missing, empty or whitespace-only answer 422 and create nothing."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}/tasks"
    for body in [{}, {"title": ""}, {"title": "   "}, {"title": "\n\t"}]:
        r = requests.post(url, json=body, headers=alice.headers, timeout=10)
        assert r.status_code == 422, f"body {body!r}: {r.status_code} {r.text}"
    r = requests.get(url, headers=alice.headers, timeout=10)
    assert r.json() == [], f"no task may have been created: {r.text}"


@pytest.mark.category("validation")
def test_task_title_too_long_or_wrong_type_is_422(alice, make_project):
    """Task titles over 200 characters or not strings answer 422; 200 characters is valid."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}/tasks"
    for body in [{"title": "t" * 201}, {"title": 42}, {"title": ["a"]}]:
        r = requests.post(url, json=body, headers=alice.headers, timeout=10)
        assert r.status_code == 422, f"body {str(body)[:60]!r}: {r.status_code} {r.text}"
    r = requests.post(url, json={"title": "t" * 200}, headers=alice.headers, timeout=10)
    assert r.status_code == 201, f"a 200-character title is valid: {r.status_code} {r.text}"


@pytest.mark.category("validation")
def test_task_priority_must_be_known(alice, make_project):
    """An unknown priority answers 422; low/medium/high are accepted."""
    project = make_project(alice)
    url = f"{BASE_URL}/projects/{project['id']}/tasks"
    for priority in ["urgent", "HIGH", "", 1]:
        r = requests.post(url, json={"title": "p", "priority": priority}, headers=alice.headers, timeout=10)
        assert r.status_code == 422, f"priority {priority!r}: {r.status_code} {r.text}"
    for priority in ["low", "medium", "high"]:
        r = requests.post(url, json={"title": "p", "priority": priority}, headers=alice.headers, timeout=10)
        assert r.status_code == 201, f"priority {priority!r}: {r.status_code} {r.text}"
        assert r.json()["priority"] == priority, r.text


@pytest.mark.category("validation")
def test_patch_unknown_status_is_422_not_409(alice, make_project, make_task):
    """PATCH with a status outside todo/in_progress/done answers 422 and changes nothing."""
    project = make_project(alice)
    task = make_task(alice, project["id"])
    for status in ["finished", "DONE", "in progress", None]:
        r = requests.patch(
            f"{BASE_URL}/tasks/{task['id']}",
            json={"status": status},
            headers=alice.headers,
            timeout=10,
        )
        assert r.status_code == 422, f"status {status!r}: {r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.json()["status"] == "todo", r.text


@pytest.mark.category("validation")
def test_patch_blank_title_is_422(alice, make_project, make_task):
    """PATCH /tasks/{id} with a whitespace-only title answers 422 and keeps the title."""
    project = make_project(alice)
    task = make_task(alice, project["id"], title="Stays")
    r = requests.patch(
        f"{BASE_URL}/tasks/{task['id']}", json={"title": "    "}, headers=alice.headers, timeout=10
    )
    assert r.status_code == 422, f"{r.status_code} {r.text}"
    r = requests.get(f"{BASE_URL}/tasks/{task['id']}", headers=alice.headers, timeout=10)
    assert r.json()["title"] == "Stays", r.text


@pytest.mark.category("validation")
def test_task_list_unknown_status_filter_is_422(alice, make_project):
    """GET /projects/{id}/tasks?status=<unknown> answers 422."""
    project = make_project(alice)
    r = requests.get(
        f"{BASE_URL}/projects/{project['id']}/tasks",
        params={"status": "archived"},
        headers=alice.headers,
        timeout=10,
    )
    assert r.status_code == 422, f"{r.status_code} {r.text}"
