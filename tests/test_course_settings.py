"""Settings per course: the instructor's own settings for autograde/ never reach another course directory.

The default course's own settings live in ``autograde/instructor_config.py`` (untracked), loaded by
``autograde/nbgrader_config.py`` for autograde/ only; another COURSE_DIR keeps its own below the block of its
``nbgrader_config.py``.  A copy of the course's configuration stands in for autograde/ (so that nothing is
written into the checkout), and each configuration is loaded as nbgrader loads it (traitlets' loader, with
``load_subconfig``), in a process of its own: loading it sets up that process's grading environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course import ROOT

OWN = 'c.LateSubmissionPlugin.penalty_method = "zero"\n'
OTHER = 'c.LateSubmissionPlugin.penalty_method = "none"  # the other course\'s own\n'

LOAD = """
import json, sys
from pathlib import Path
from traitlets.config.loader import PyFileConfigLoader
import grading.course
grading.course.NBGRADER_CONFIG = Path(sys.argv[2])  # the stand-in for autograde/nbgrader_config.py
if sys.argv[3] == "write":
    grading.course.write_course_config(Path(sys.argv[1]))
config = PyFileConfigLoader("nbgrader_config.py", path=sys.argv[1]).load_config()
print(json.dumps({"penalty": config.LateSubmissionPlugin.get("penalty_method"),
                  "root": config.CourseDirectory.get("root")}))
"""


def load(folder: Path, default: Path, env: dict[str, str], write: bool = False) -> dict:
    run = subprocess.run([sys.executable, "-c", LOAD, str(folder), str(default / "nbgrader_config.py"),
                          "write" if write else "read"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.fixture
def courses(tmp_path):
    default, other = tmp_path / "autograde", tmp_path / "other"
    default.mkdir()
    other.mkdir()
    shutil.copy(ROOT / "autograde" / "nbgrader_config.py", default / "nbgrader_config.py")
    (default / "instructor_config.py").write_text(OWN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCT_")}
    return default, other, env


def test_the_default_course_s_own_settings_apply_to_it(courses):
    default, _, env = courses
    assert load(default, default, env) == {"penalty": "zero", "root": str(default)}


def test_they_never_reach_another_course_directory(courses):
    default, other, env = courses
    # as the instructor's tools set it up, and run nbgrader in it (MCT_COURSE_DIR names it)
    assert load(other, default, dict(env, MCT_COURSE_DIR=str(other)), write=True) == \
        {"penalty": None, "root": str(other)}
    # nbgrader typed in the other course directory by hand: no MCT_COURSE_DIR
    assert load(other, default, env) == {"penalty": None, "root": str(other)}
    # the other course's own settings, below its block, are its own
    with (other / "nbgrader_config.py").open("a") as config:
        config.write(OTHER)
    assert load(other, default, env)["penalty"] == "none"


def test_the_default_course_s_own_settings_are_not_tracked():
    ignored = subprocess.run(["git", "check-ignore", "-q", "autograde/instructor_config.py"], cwd=ROOT)
    assert ignored.returncode == 0, "autograde/instructor_config.py must be ignored by git"


PRIVATE = """
import os, sys
from traitlets.config.loader import PyFileConfigLoader
from grading.protocol import PRIVATE_DIR_ENV
for _ in range(2):  # nbgrader reads its configuration several times in one process
    PyFileConfigLoader("nbgrader_config.py", path=sys.argv[1]).load_config()
    print(os.environ[PRIVATE_DIR_ENV])
"""


def test_each_grading_process_has_a_private_folder_of_its_own(tmp_path):
    """A private folder named in an inherited environment is another process's (two grading runs side by side
    shared one, and one read the kernelspec while the other rewrote it): a process makes its own, once."""
    from grading.protocol import PRIVATE_DIR_ENV, PRIVATE_DIR_PID_ENV
    inherited = tmp_path / "the-parent-s"
    inherited.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCT_")},
           PRIVATE_DIR_ENV: str(inherited), PRIVATE_DIR_PID_ENV: "1"}
    run = subprocess.run([sys.executable, "-c", PRIVATE, str(ROOT / "autograde")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    first, second = run.stdout.split()[-2:]
    assert first == second != str(inherited)
    assert not list(inherited.iterdir()), "nothing written in the other process's folder"
