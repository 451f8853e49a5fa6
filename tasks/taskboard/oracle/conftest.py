"""Shared fixtures for the taskboard oracle.

Every item makes its own users, projects and tasks with unique names, so the
items are independent of each other, of their order and of the state left in
the one service instance they all run against.
"""

import os
import uuid
from dataclasses import dataclass

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass
class User:
    id: int
    username: str
    password: str
    token: str

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}


def register_and_login() -> User:
    username = unique("u")
    password = "pw-" + uuid.uuid4().hex
    r = requests.post(
        f"{BASE_URL}/auth/register",
        json={"username": username, "password": password},
        timeout=10,
    )
    assert r.status_code == 201, f"setup: POST /auth/register -> {r.status_code} {r.text}"
    user_id = r.json()["id"]
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": username, "password": password},
        timeout=10,
    )
    assert r.status_code == 200, f"setup: POST /auth/login -> {r.status_code} {r.text}"
    return User(id=user_id, username=username, password=password, token=r.json()["access_token"])


def login_headers(user: User) -> dict:
    """Log `user` in once more and return the headers of the new token."""
    r = requests.post(
        f"{BASE_URL}/auth/login",
        json={"username": user.username, "password": user.password},
        timeout=10,
    )
    assert r.status_code == 200, f"setup: POST /auth/login -> {r.status_code} {r.text}"
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def logout(headers: dict) -> None:
    """Log the token in `headers` out, requiring 204."""
    r = requests.post(f"{BASE_URL}/auth/logout", headers=headers, timeout=10)
    assert r.status_code == 204, f"setup: POST /auth/logout -> {r.status_code} {r.text}"


@pytest.fixture
def login_again():
    """Helper: log a user in once more, return the new token's headers."""
    return login_headers


@pytest.fixture
def log_out():
    """Helper: log the token in the given headers out (requires 204)."""
    return logout


@pytest.fixture
def make_user():
    """Factory: register a fresh user, log in, return it (with .headers)."""
    return register_and_login


@pytest.fixture
def alice() -> User:
    return register_and_login()


@pytest.fixture
def bob() -> User:
    return register_and_login()


@pytest.fixture
def make_project():
    """Factory: create a project owned by `user`, return its JSON."""

    def _make(user: User, **fields) -> dict:
        body = {"name": unique("project")}
        body.update(fields)
        r = requests.post(f"{BASE_URL}/projects", json=body, headers=user.headers, timeout=10)
        assert r.status_code == 201, f"setup: POST /projects -> {r.status_code} {r.text}"
        return r.json()

    return _make


@pytest.fixture
def make_task():
    """Factory: create a task in project `project_id` owned by `user`, return its JSON."""

    def _make(user: User, project_id: int, **fields) -> dict:
        body = {"title": unique("task")}
        body.update(fields)
        r = requests.post(
            f"{BASE_URL}/projects/{project_id}/tasks",
            json=body,
            headers=user.headers,
            timeout=10,
        )
        assert r.status_code == 201, f"setup: POST /projects/{project_id}/tasks -> {r.status_code} {r.text}"
        return r.json()

    return _make


@pytest.fixture
def set_status():
    """Helper: PATCH a task's status and require 200 (for walking the workflow in setup)."""

    def _set(user: User, task_id: int, status: str) -> dict:
        r = requests.patch(
            f"{BASE_URL}/tasks/{task_id}",
            json={"status": status},
            headers=user.headers,
            timeout=10,
        )
        assert r.status_code == 200, f"setup: PATCH /tasks/{task_id} status={status} -> {r.status_code} {r.text}"
        return r.json()

    return _set
