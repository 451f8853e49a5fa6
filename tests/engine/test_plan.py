"""Planning a run: which evaluations, and what is refused before any starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine import InputError, plan
from tests.conftest import FIXTURES, MakeSubmission


def test_two_task_folders_with_one_id_are_refused(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    copy = tmp_path / "copy-of-tiny"
    shutil.copytree(FIXTURES / "tiny_task", copy)
    sub = make_submission("ok")
    with pytest.raises(InputError, match="task id 'tiny' is also the id of"):
        plan([FIXTURES / "tiny_task", copy], sub)


def test_one_task_folder_named_twice_is_planned_once(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    sub = make_submission("ok")
    found = plan([FIXTURES / "tiny_task", FIXTURES / "tiny_task" / ".." / "tiny_task"], sub)
    assert len(found.evaluations) == 1
