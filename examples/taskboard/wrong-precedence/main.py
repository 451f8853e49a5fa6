"""taskboard reference service: users, projects, tasks, workflow, activity feed.

State lives in memory behind one lock; handlers are plain (threadpool) functions.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
from datetime import datetime, timezone
from typing import Literal, Optional

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError, field_validator

Status = Literal["todo", "in_progress", "done"]
Priority = Literal["low", "medium", "high"]

ALLOWED_TRANSITIONS: dict[str, set[str]] = {
    "todo": {"in_progress"},
    "in_progress": {"done", "todo"},
    "done": set(),
}

app = FastAPI(title="taskboard")
lock = threading.RLock()
ids = itertools.count(1)

users: dict[int, dict] = {}
user_ids_by_name: dict[str, int] = {}
tokens: dict[str, int] = {}
projects: dict[int, dict] = {}
tasks: dict[int, dict] = {}
activity: dict[int, list[dict]] = {}


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def hash_password(password: str, salt: str) -> str:
    return hashlib.sha256((salt + password).encode()).hexdigest()


def not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must contain a non-whitespace character")
    return value


# ---------------------------------------------------------------- bodies
# Optional fields are typed `str = None`: absent means "unchanged", while an
# explicit null fails validation (pydantic does not validate defaults).


class RegisterIn(BaseModel):
    username: str = Field(pattern=r"^[A-Za-z0-9_]{3,32}$")
    password: str = Field(min_length=8, max_length=128)


class LoginIn(BaseModel):
    username: str
    password: str


class ProjectIn(BaseModel):
    name: str = Field(max_length=100)
    description: str = Field(default="", max_length=2000)

    _name = field_validator("name")(not_blank)


class ProjectPatch(BaseModel):
    name: str = Field(default=None, max_length=100)
    description: str = Field(default=None, max_length=2000)

    _name = field_validator("name")(not_blank)


class TaskIn(BaseModel):
    title: str = Field(max_length=200)
    description: str = Field(default="", max_length=2000)
    priority: Priority = "medium"

    _title = field_validator("title")(not_blank)


class TaskPatch(BaseModel):
    title: str = Field(default=None, max_length=200)
    description: str = Field(default=None, max_length=2000)
    priority: Priority = None
    status: Status = None

    _title = field_validator("title")(not_blank)


# ---------------------------------------------------------------- auth


def unauthorized() -> HTTPException:
    return HTTPException(401, "not authenticated", headers={"WWW-Authenticate": "Bearer"})


def session(authorization: Optional[str] = Header(default=None)) -> tuple[dict, str]:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized()
    with lock:
        user_id = tokens.get(token)
        if user_id is None:
            raise unauthorized()
        return users[user_id], token


def current_user(auth: tuple[dict, str] = Depends(session)) -> dict:
    return auth[0]


# ---------------------------------------------------------------- helpers


def public_user(user: dict) -> dict:
    return {"id": user["id"], "username": user["username"]}


def project_out(project: dict) -> dict:
    statuses = [tasks[t]["status"] for t in project["task_ids"]]
    return {
        "id": project["id"],
        "name": project["name"],
        "description": project["description"],
        "owner_id": project["owner_id"],
        "task_count": len(statuses),
        "done_count": statuses.count("done"),
        "created_at": project["created_at"],
    }


def project_for(user: dict, project_id: int) -> dict:
    project = projects.get(project_id)
    if project is None or project["owner_id"] != user["id"]:
        raise HTTPException(404, "project not found")
    return project


def task_for(user: dict, task_id: int) -> dict:
    task = tasks.get(task_id)
    if task is None or task["owner_id"] != user["id"]:
        raise HTTPException(404, "task not found")
    return task


def task_out(task: dict) -> dict:
    return {k: v for k, v in task.items() if k != "owner_id"}


def record(project_id: int, type_: str, task_id: Optional[int] = None,
           from_status: Optional[str] = None, to_status: Optional[str] = None) -> None:
    activity[project_id].append({
        "id": next(ids),
        "project_id": project_id,
        "type": type_,
        "task_id": task_id,
        "from_status": from_status,
        "to_status": to_status,
        "created_at": now(),
    })


# ---------------------------------------------------------------- routes


@app.get("/health")
def health() -> dict:
    return {"status": "ok"}


@app.post("/auth/register", status_code=201)
def register(body: RegisterIn) -> dict:
    with lock:
        if body.username in user_ids_by_name:
            raise HTTPException(409, "username already taken")
        salt = secrets.token_hex(8)
        user = {
            "id": next(ids),
            "username": body.username,
            "salt": salt,
            "password_hash": hash_password(body.password, salt),
        }
        users[user["id"]] = user
        user_ids_by_name[body.username] = user["id"]
        return public_user(user)


@app.post("/auth/login")
def login(body: LoginIn) -> dict:
    with lock:
        user = users.get(user_ids_by_name.get(body.username, -1))
        if user is None or not secrets.compare_digest(
            hash_password(body.password, user["salt"]), user["password_hash"]
        ):
            raise HTTPException(401, "invalid credentials")
        token = secrets.token_urlsafe(32)
        tokens[token] = user["id"]
        return {"access_token": token, "token_type": "bearer"}


@app.post("/auth/logout", status_code=204)
def logout(auth: tuple[dict, str] = Depends(session)) -> Response:
    with lock:
        tokens.pop(auth[1], None)
    return Response(status_code=204)


@app.get("/me")
def me(user: dict = Depends(current_user)) -> dict:
    return public_user(user)


@app.post("/projects", status_code=201)
def create_project(body: ProjectIn, user: dict = Depends(current_user)) -> dict:
    with lock:
        project = {
            "id": next(ids),
            "name": body.name,
            "description": body.description,
            "owner_id": user["id"],
            "created_at": now(),
            "task_ids": [],
        }
        projects[project["id"]] = project
        activity[project["id"]] = []
        record(project["id"], "project_created")
        return project_out(project)


@app.get("/projects")
def list_projects(user: dict = Depends(current_user)) -> list:
    with lock:
        mine = [p for p in projects.values() if p["owner_id"] == user["id"]]
        return [project_out(p) for p in sorted(mine, key=lambda p: p["id"])]


@app.get("/projects/{project_id}")
def get_project(project_id: int, user: dict = Depends(current_user)) -> dict:
    with lock:
        return project_out(project_for(user, project_id))


@app.patch("/projects/{project_id}")
def update_project(project_id: int, body: ProjectPatch,
                   user: dict = Depends(current_user)) -> dict:
    with lock:
        project = project_for(user, project_id)
        project.update(body.model_dump(exclude_unset=True))
        return project_out(project)


@app.delete("/projects/{project_id}", status_code=204)
def delete_project(project_id: int, user: dict = Depends(current_user)) -> Response:
    with lock:
        project = project_for(user, project_id)
        for task_id in project["task_ids"]:
            del tasks[task_id]
        del projects[project_id]
        del activity[project_id]
    return Response(status_code=204)


@app.post("/projects/{project_id}/tasks", status_code=201)
def create_task(project_id: int, body: TaskIn, user: dict = Depends(current_user)) -> dict:
    with lock:
        project = project_for(user, project_id)
        stamp = now()
        task = {
            "id": next(ids),
            "project_id": project_id,
            "title": body.title,
            "description": body.description,
            "status": "todo",
            "priority": body.priority,
            "created_at": stamp,
            "updated_at": stamp,
            "owner_id": user["id"],
        }
        tasks[task["id"]] = task
        project["task_ids"].append(task["id"])
        record(project_id, "task_created", task_id=task["id"])
        return task_out(task)


@app.get("/projects/{project_id}/tasks")
def list_tasks(project_id: int, status: Optional[Status] = Query(default=None),
               user: dict = Depends(current_user)) -> list:
    with lock:
        project = project_for(user, project_id)
        found = [tasks[t] for t in sorted(project["task_ids"])]
        return [task_out(t) for t in found if status is None or t["status"] == status]


@app.get("/projects/{project_id}/activity")
def list_activity(project_id: int, user: dict = Depends(current_user)) -> list:
    with lock:
        project_for(user, project_id)
        return list(activity[project_id])


@app.get("/tasks/{task_id}")
def get_task(task_id: int, user: dict = Depends(current_user)) -> dict:
    with lock:
        return task_out(task_for(user, task_id))


@app.patch("/tasks/{task_id}")
def update_task(task_id: int, payload: dict = Body(...),
                user: dict = Depends(current_user)) -> dict:
    with lock:
        task = task_for(user, task_id)
        # Look the task up first: the transition rules below need its current status.
        try:
            body = TaskPatch.model_validate(payload)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from exc
        changes = body.model_dump(exclude_unset=True)
        old_status = task["status"]
        new_status = changes.pop("status", old_status)
        if new_status != old_status and new_status not in ALLOWED_TRANSITIONS[old_status]:
            raise HTTPException(409, f"transition {old_status} -> {new_status} not allowed")
        task.update(changes)
        task["status"] = new_status
        task["updated_at"] = now()
        if new_status != old_status:
            record(task["project_id"], "status_changed", task_id=task_id,
                   from_status=old_status, to_status=new_status)
        return task_out(task)


@app.delete("/tasks/{task_id}", status_code=204)
def delete_task(task_id: int, user: dict = Depends(current_user)) -> Response:
    with lock:
        task = task_for(user, task_id)
        del tasks[task_id]
        projects[task["project_id"]]["task_ids"].remove(task_id)
        record(task["project_id"], "task_deleted", task_id=task_id)
    return Response(status_code=204)
