"""Grading works wherever the course and its Python live: the location matrix.

A grading sandbox that hid a list of folders broke where the course was not where the tests put
it (a clone nested below a folder of mode 0700, a home folder, Python under /root).  Here a copy
of this checkout (its tracked files, as a clone has them) with a virtual environment of its own
(hard links to this one's files) is graded from places like that, each time by
``tools/instructor.py`` of the copy, on the smallest part: one honest notebook (the reference: full
marks) and one broken one (a truncated file: listed as not graded, the honest one unaffected).

- as root (as ``sudo make autograde`` runs), the copy two folders below a ``mktemp -d`` folder (0700);
- as an ordinary user (a uid with no account), the copy in that user's home folder (0700, its own),
  grading with bubblewrap in an unprivileged user namespace.  Where this machine's Python lives in a
  folder that user may not enter (pyenv under /root), the test first gives the user a view of the
  machine in which that folder is enterable (a private mount namespace: an empty folder over it,
  with only Python put back), as an instructor's own Python would be;
- in that same copy, as that user, the warm kernels' own tests (tests/test_warm_kernels.py: a kernel forked
  from the zygote into bubblewrap's user namespaces is bounded as a cold one) and those of a kernel launched
  ahead (tests/test_grader_bounds.py);
- and a sandbox in which Python cannot start (here: its memory limit set to 1 MB) is an error on
  the grader's side that says why: nobody is graded, so no student gets a 0 for it.

The last case runs on any machine; the others need root (they skip otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from course import ROOT
from shared.lessons import lessons_of

pytestmark = pytest.mark.slow
PART = min(("02_gradient_accumulation", "03_activation_checkpointing"), key=lambda s: len(lessons_of(s)))
LEARNER_UID = 64_123  # an ordinary user with no account (nothing on this machine is theirs)
as_root = pytest.mark.skipif(os.getuid() != 0, reason="making another user's home folder needs root")


def copy_checkout(target: Path) -> Path:
    """The checkout's tracked files (as ``git clone`` gives them, but as they are now) at ``target``, with a
    virtual environment of its own: hard links to this one's files (a copy where links cannot be made),
    its editable install pointing at the copy, and its scripts' ``#!`` lines at the copy's Python (this
    checkout may be in a folder that another user cannot enter: a clone made in ``mktemp -d``)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    venv = Path(sys.prefix)
    try:
        subprocess.run(["cp", "-al", str(venv), str(target / ".venv")], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        shutil.copytree(venv, target / ".venv", symlinks=True)
    for finder in (target / ".venv").glob("lib/python*/site-packages/__editable__*"):
        text = finder.read_text().replace(str(ROOT), str(target))
        finder.unlink()  # a hard link to this checkout's file: replaced, never written through
        finder.write_text(text)
    for script in (target / ".venv" / "bin").iterdir():  # `#!/.../this checkout/.venv/bin/python`: the copy's own
        if script.is_file() and not script.is_symlink() and script.read_bytes()[:2] == b"#!":
            text = script.read_bytes()
            first, _, rest = text.partition(b"\n")
            if str(ROOT).encode() in first:
                mode = script.stat().st_mode
                script.unlink()
                script.write_bytes(first.replace(str(ROOT).encode(), str(target).encode()) + b"\n" + rest)
                script.chmod(mode)
    return target


def submit(course: Path, student: str, text: str) -> None:
    folder = course / "submitted" / student / PART
    folder.mkdir(parents=True)
    (folder / f"{PART}.ipynb").write_text(text)


def grading_script(checkout: Path, course: Path) -> list[str]:
    python = str(checkout / ".venv" / "bin" / "python")
    tool = [python, str(checkout / "tools" / "instructor.py"), "--course-dir", str(course), "--parts", PART]
    return [*tool, "release"], [*tool, "autograde", "--jobs", "1"]


#: What of the caller's environment a grading run of the copy keeps: the machine's locale and its OpenBLAS quirks.
KEPT_ENV = ("LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def environment(home: Path, checkout: Path, **extra: str) -> dict[str, str]:
    """An environment of the grader's own, as a user who runs the copy has it: their home, the copy's virtual
    environment first on PATH, then the system's; never the caller's PATH (whose first folder, this checkout's
    .venv/bin, another user may not enter) nor its Jupyter or Python settings."""
    env = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    path = f"{checkout / '.venv' / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {**env, "PATH": path, "HOME": str(home), "MCT_CELL_TIMEOUT": "20", **extra}


def check_graded(output: str, course: Path) -> None:
    points = sum(lesson.points for lesson in lessons_of(PART))
    assert "WITHOUT a sandbox" not in output and ("limits per notebook" in output or "no control group" in output)
    assert "FAILED corrupt" in output, output[-3000:]
    assert "graded honest" in output, output[-3000:]
    graded = json.loads((course / "autograded" / "honest" / PART / f"{PART}.ipynb").read_text())
    shown = "\n".join("".join(o.get("text", "")) for c in graded["cells"] for o in c.get("outputs", []))
    assert shown.count("✓ Lesson") == len(lessons_of(PART)), shown[-3000:]
    # one part graded: that part's points out of its own, and no course total (it would read "20/200")
    line = next(line for line in output.splitlines() if line.strip().startswith("honest"))
    assert f"{PART}: {points}/{points}" in line and "total" not in line, line


def grade_in(checkout: Path, course: Path, home: Path, wrap: list[str] | None = None, **extra: str) -> str:
    release, autograde = grading_script(checkout, course)
    env = environment(home, checkout, **extra)
    wrap = wrap or []
    made = subprocess.run([*wrap, *release], env=env, cwd=home, capture_output=True, text=True)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    solved = (ROOT / "solutions" / f"{PART}.ipynb").read_text()
    submit(course, "honest", solved)
    submit(course, "corrupt", solved[: len(solved) // 2])
    if wrap:  # the ordinary user's course: theirs
        subprocess.run(["chown", "-R", f"{LEARNER_UID}:{LEARNER_UID}", str(course)], check=True)
    run = subprocess.run([*wrap, *autograde], env=env, cwd=home, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


@as_root
def test_a_copy_nested_below_a_private_folder_grades_as_root(tmp_path_factory):
    hidden = Path(tempfile.mkdtemp(prefix="mct-hidden-"))  # 0700, root's, as `mktemp -d` makes it
    try:
        assert stat.S_IMODE(hidden.stat().st_mode) == 0o700
        checkout = copy_checkout(hidden / "a" / "b" / "course")
        home = tmp_path_factory.mktemp("home")
        course = hidden / "a" / "class"
        check_graded(grade_in(checkout, course, home), course)
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def _outermost_closed_folder(path: Path) -> Path | None:
    """The outermost folder above ``path`` that others may not enter (mode without o+x), if any."""
    for folder in reversed(path.parents):
        if folder != Path("/") and not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def as_learner(python_home: Path) -> list[str]:
    """The command prefix that runs a command as the ordinary user, in a view of the machine where the
    folder holding this machine's Python (if the user may not enter it) is enterable, Python alone in it."""
    user = ["setpriv", f"--reuid={LEARNER_UID}", f"--regid={LEARNER_UID}", "--clear-groups", "--"]
    closed = _outermost_closed_folder(python_home)
    if closed is None:
        return user
    inner = python_home.relative_to(closed)
    script = (f"set -e; mount --make-rprivate /; keep=$(mktemp -d); mount --bind '{python_home}' \"$keep\"; "
              f"mount -t tmpfs -o mode=0755 tmpfs '{closed}'; mkdir -p '{closed / inner}'; "
              f"mount --bind \"$keep\" '{closed / inner}'; exec \"$@\"")
    return ["unshare", "--mount", "sh", "-c", script, "sh", *user]


@pytest.fixture(scope="module")
def learners_copy():
    """A copy of the checkout in an ordinary user's home folder (0700, theirs), and the command prefix that runs a
    command as that user: (home, checkout, wrap)."""
    if os.getuid() != 0:
        pytest.skip("making another user's home folder needs root")
    base = Path(tempfile.mkdtemp(prefix="mct-users-"))  # stands for /home
    try:
        base.chmod(0o755)
        home = base / "learner"
        home.mkdir(mode=0o700)
        checkout = copy_checkout(home / "course")
        subprocess.run(["chown", "-R", f"{LEARNER_UID}:{LEARNER_UID}", str(home)], check=True)
        home.chmod(0o700)
        yield home, checkout, as_learner(Path(sys.base_prefix).resolve())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_copy_in_an_ordinary_users_home_grades_as_that_user(learners_copy):
    home, checkout, wrap = learners_copy
    course = home / "class"
    check_graded(grade_in(checkout, course, home, wrap), course)


KERNELS_LAUNCHED_AHEAD = [f"tests/test_grader_bounds.py::{name}" for name in (
    "test_a_kernel_launched_ahead_is_taken_by_the_next_notebook_and_is_a_new_kernel_of_its_own",
    "test_a_kernel_launched_ahead_is_not_taken_once_it_differs_aged_or_died_and_nothing_of_it_is_left",
    "test_a_sandbox_that_ends_while_its_kernel_is_forked_ahead_leaves_warm_kernels_on",
    "test_no_kernel_launched_ahead_is_left_when_the_grader_ends")]


def test_warm_kernels_are_bounded_as_cold_ones_where_the_grader_is_an_ordinary_user(learners_copy):
    """Warm kernels (grading/zygote.py) where the grader is not root enter bubblewrap's user namespaces too: the
    copy's own tests/test_warm_kernels.py, run as that user (the probe of a warm kernel against a cold one, the
    zygote's contents, two kernels apart, its memory, its end), and its tests of a kernel launched (and forked)
    while the notebook before runs, all pass there and none is skipped."""
    home, checkout, wrap = learners_copy
    python = str(checkout / ".venv" / "bin" / "python")
    run = subprocess.run([*wrap, python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--basetemp",
                          str(home / "pytest"), "tests/test_warm_kernels.py", *KERNELS_LAUNCHED_AHEAD],
                         cwd=checkout, env=environment(home, checkout), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and " passed" in run.stdout and "skipped" not in run.stdout, \
        run.stdout[-3000:] + run.stderr[-3000:]


def test_a_sandbox_where_python_cannot_start_is_the_graders_error_not_a_zero(tmp_path):
    from grading.sandbox import bwrap_path
    if bwrap_path() is None:
        pytest.skip("needs bubblewrap")
    course = tmp_path / "class"
    _, autograde = grading_script(ROOT, course)
    env = environment(tmp_path, ROOT, MCT_KERNEL_ADDRESS_SPACE=str(2**20))
    submit(course, "honest", (ROOT / "solutions" / f"{PART}.ipynb").read_text())
    run = subprocess.run(autograde, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2, run.stdout[-2000:]
    assert "Python does not start in the grading sandbox" in run.stderr, run.stderr[-2000:]
    assert not (course / "autograded").exists()
