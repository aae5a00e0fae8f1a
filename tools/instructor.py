"""The instructor's workflow: release, autograde, feedback, review, grades (``make release`` … ``make grades``).

    python tools/instructor.py release   [--course-dir DIR]
    python tools/instructor.py autograde [--course-dir DIR] [--students S ...] [--jobs N]
    python tools/instructor.py feedback  [--course-dir DIR] [--students S ...] [--jobs N]
    python tools/instructor.py review    [--course-dir DIR]
    python tools/instructor.py grades    [--course-dir DIR] [--output FILE]
    python tools/instructor.py formgrader [--course-dir DIR] [--port N] [--no-browser]

The course directory is ``autograde/`` unless ``--course-dir`` (``COURSE_DIR=``
in make) names another; the tool sets it up there (the parts' source notebooks
and an ``nbgrader_config.py`` that loads the course's own configuration).
Every landed part (a folder in ``autograde/parts/`` with a built source notebook) is
released and graded.

Grading runs one nbgrader process per batch of about thirty notebooks (a group
of students times a group of parts: many students and, in a small class, several
parts per process, since each process spends seconds starting), up to ``--jobs``
batches at a time, the largest first (:func:`plan`).  Students are added to the
gradebook first, so the parallel runs only update their own rows (SQLite
serialises those writes).  Every notebook runs in a sandboxed
kernel (``grading/sandbox.py``) and every point is decided by the judge in
nbgrader's process (``grading/judge.py``).  A broken submission (invalid
notebook, a kernel killed by its limits) fails alone; the tool carries on and
lists at the end what needs manual grading: notebooks that could not be graded,
and those the judge listed (a cell that breaks the rules for graded code, answers
refused, a kernel that died, a moved test cell).

nbgrader here never depends on the caller's current directory or home folder:
it runs in the course directory, reads no ``~/.jupyter`` configuration, and its
kernels get the private environment set up by ``autograde/nbgrader_config.py``.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from grading import formgrader_csp, nbgrader_cli, ungradable

nbgrader_cli.skip_iri_grammars()  # before anything imports nbformat (grading/nbgrader_cli.py)

from grading.judge import run_seed  # noqa: E402
from grading.course import landed_parts, source_notebook, write_course_config
from grading.cgroups import describe as describe_limits, probe as probe_limits
from grading.mathml import MATHML_TAGS, mathml_attribute_allowed
from grading.protocol import ANSWERS_MIME, COURSE_DIR_ENV, RUN_SEED_ENV, SANDBOX_ENV, printable
from grading.sandbox import bwrap_path, missing_sandbox_message, preflight, sandbox_wanted
from grading.review import waiting_grades
from grading.tampering import Change, notebook_changes
from shared.lessons import TOTAL_POINTS, lesson_of_grade_id, lessons_of

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COURSE = ROOT / "autograde"
BIN = Path(sys.executable).parent
# What feedback must never contain, besides the lines of the hidden tests themselves.
SECRETS_IN_FEEDBACK = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "answer_hidden_cases", ANSWERS_MIME)
NO_SANDBOX_NOTE = f"graded WITHOUT a sandbox ({SANDBOX_ENV}=off): the notebooks ran with the grader's rights"


# --------------------------------------------------------------------------
# The course directory and the environment nbgrader runs in
# --------------------------------------------------------------------------

def prepare_course(course: Path, parts: list[str]) -> None:
    """Make ``course`` an nbgrader course of the landed parts (nothing to do for autograde/)."""
    course.mkdir(parents=True, exist_ok=True)
    if course.resolve() == DEFAULT_COURSE.resolve():
        return
    for slug in parts:
        source = source_notebook(slug)
        target = course / "source" / slug / f"{slug}.ipynb"
        if not target.is_file() or target.read_bytes() != source.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    write_course_config(course)


_private: list[Path] = []
_private_lock = threading.Lock()


def private_config_dir() -> Path:
    """An empty Jupyter configuration folder for this run (removed at exit)."""
    with _private_lock:  # parallel grading threads ask for it at the same time
        if not _private:
            _private.append(Path(tempfile.mkdtemp(prefix="mct-instructor-")))
            atexit.register(shutil.rmtree, _private[0], True)
        return _private[0]


def nbgrader_env(course: Path) -> dict[str, str]:
    """The environment of every nbgrader run: the course's tools, no user configuration."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "IPYTHONDIR", "JUPYTER_CONFIG_DIR",
                        "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs `alembic` from PATH
    env[COURSE_DIR_ENV] = str(course.resolve())
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    env["JUPYTER_CONFIG_DIR"] = str(private_config_dir())  # no ~/.jupyter/nbgrader_config.py
    env["JUPYTER_DATA_DIR"] = str(private_config_dir() / "data")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    # The judge's NumPy works on one core, as the sandboxed kernels do: with --jobs runs side by side, a
    # second BLAS thread per process would only wait for a core (OpenBLAS's threads spin while they wait).
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def run_nbgrader(course: Path, *args: str, log: Path | None = None) -> subprocess.CompletedProcess:
    """One nbgrader command, run in the course directory; its output goes to ``log`` if given."""
    return run_nbgrader_commands(course, [list(args)], log=log)


def run_nbgrader_commands(course: Path, each: list[list[str]], log: Path | None = None,
                          seed: int | None = None) -> subprocess.CompletedProcess:
    """Several nbgrader commands, one after the other in one process (:mod:`grading.nbgrader_cli`); with
    ``seed``, the judge draws its hidden cases from that run seed."""
    env = nbgrader_env(course)
    if seed is not None:
        env[RUN_SEED_ENV] = str(seed)
    run = subprocess.run(nbgrader_cli.commands(*each), cwd=course, env=env, capture_output=True, text=True)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        shown = "\n".join(f"$ nbgrader {' '.join(args)}" for args in each)
        log.write_text(f"{shown}\n(exit {run.returncode})\n{run.stdout}\n{run.stderr}")
    return run


def log_dir(course: Path) -> Path:
    if course.resolve() == DEFAULT_COURSE.resolve():
        return ROOT / "build" / "grading-logs"  # autograde/ is in git; build/ is not
    return course / "logs"


def students_of(course: Path, wanted: list[str] | None) -> list[str]:
    submitted = course / "submitted"
    found = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
    if wanted:
        missing = [s for s in wanted if s not in found]
        if missing:
            print(f"no submissions for {', '.join(missing)} in {submitted}", file=sys.stderr)
        return [s for s in wanted if s in found]
    return found


def gradebook(course: Path):
    from nbgrader.api import Gradebook
    return Gradebook(f"sqlite:///{(course / 'gradebook.db').resolve()}")


# --------------------------------------------------------------------------
# release
# --------------------------------------------------------------------------

def release(course: Path, parts: list[str]) -> int:
    """nbgrader generate_assignment of ``parts``.  When they are every part in the course's source
    folder, one nbgrader run releases them all (its glob ``*``), as each run spends seconds
    starting nbgrader; otherwise one run each."""
    prepare_course(course, parts)
    in_source = sorted(p.name for p in (course / "source").iterdir() if p.is_dir())
    runs = {"*": parts} if sorted(parts) == in_source else {slug: [slug] for slug in parts}
    status = 0
    for pattern, slugs in runs.items():
        run = run_nbgrader(course, "generate_assignment", pattern, "--force",
                           log=log_dir(course) / f"release-{'all' if pattern == '*' else pattern}.log")
        for slug in slugs:
            status |= _check_release(course, slug, run)
    return status


def _check_release(course: Path, slug: str, run: subprocess.CompletedProcess) -> int:
    """0 when ``run`` released ``slug``'s notebook and nothing else beside it, else 1 (and why)."""
    released = course / "release" / slug
    extra = sorted(p.name for p in released.iterdir() if p.name != f"{slug}.ipynb") if released.is_dir() else []
    if run.returncode != 0 or not (released / f"{slug}.ipynb").is_file():
        print(f"release of {slug} FAILED:\n{run.stderr[-2000:]}", file=sys.stderr)
        return 1
    if extra:
        print(f"release of {slug} holds more than the notebook: {extra}", file=sys.stderr)
        return 1
    print(f"released {slug}: {released / f'{slug}.ipynb'}")
    return 0


# --------------------------------------------------------------------------
# autograde
# --------------------------------------------------------------------------

# Notebooks one nbgrader process grades: about a minute of work, so that its start (about two seconds,
# and a quarter of a second more for each part it grades) costs a few per cent, while a class still
# splits into enough batches to keep every job busy to the end.
NOTEBOOKS_PER_RUN = 40
# Feedback pages one nbgrader process writes: a page costs about a tenth of a graded notebook and the
# process's start about the same as grading's, so its runs are larger (a class of 200: two runs a part).
PAGES_PER_RUN = 200


@dataclass(frozen=True)
class Flag:
    """One reason a human should look at a notebook: where the judge said it (a cell's grade id, or
    "cell N" outside every lesson) and why."""
    where: str
    reason: str

    @property
    def lesson(self):
        """The lesson whose test or answer cell it is in (None for a cell outside every lesson)."""
        return lesson_of_grade_id(self.where)

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class Task:
    """One nbgrader process: the parts ``slugs``, one after the other, each for the students of ``students``
    who handed it in (``notebooks``: the (student, part) pairs it grades)."""
    slugs: list[str]
    students: list[str]
    notebooks: list[tuple[str, str]]
    returncode: int | None = None
    seconds: float = 0.0
    log: Path | None = None
    problems: dict[tuple[str, str], str] = field(default_factory=dict)  # (student, part) -> why grading failed
    flags: dict[tuple[str, str], list[Flag]] = field(default_factory=dict)  # (student, part) -> why a human should look
    tampering: dict[tuple[str, str], list[Change]] = field(default_factory=dict)  # the course's cells it changed


def split(items: list[str], weights: list[int], count: int) -> list[list[str]]:
    """``items`` in order, cut into at most ``count`` runs of near-equal total weight (none empty)."""
    total, groups, current, done = sum(weights), [], [], 0
    for item, weight in zip(items, weights):
        current.append(item)
        done += weight
        if done * count >= total * (len(groups) + 1) and len(groups) < count - 1:
            groups.append(current)
            current = []
    return groups + ([current] if current else [])


def plan(handed_in: dict[str, list[str]], jobs: int, per_run: int = NOTEBOOKS_PER_RUN) -> list[Task]:
    """The nbgrader runs that grade ``handed_in`` (part -> its students), ``jobs`` at a time: largest first.

    Each run is a group of parts times a group of students, at most about ``per_run`` notebooks.  The
    parts are cut first, into groups of at most ``per_run x jobs`` notebooks (in a large class each run draws
    one part's cases; a small class keeps every part in one group, so that each job starts nbgrader once),
    then each group's students, into a multiple of ``jobs`` runs, so that the jobs grade the same parts for
    about as many students.  Where the students cannot be cut that far (one student, or one
    who handed in far more parts than the others), the parts are cut into ``jobs`` groups instead, so that
    no job waits while another grades one student's every part.  Runs start largest first, each on the
    first free job (longest-processing-time first: the last run to finish is a small one)."""
    slugs = [slug for slug, students in handed_in.items() if students]
    notebooks = sum(len(handed_in[slug]) for slug in slugs)
    if not notebooks:
        return []
    sizes = [len(handed_in[slug]) for slug in slugs]
    groups = min(len(slugs), math.ceil(notebooks / (per_run * jobs)))  # each cut into runs for every job
    tasks = _runs(handed_in, split(slugs, sizes, groups), jobs, per_run)
    if len(tasks) < jobs and groups < len(slugs):
        tasks = _runs(handed_in, split(slugs, sizes, min(len(slugs), jobs)), jobs, per_run)
    return sorted(tasks, key=lambda task: -len(task.notebooks))


def _runs(handed_in: dict[str, list[str]], part_groups: list[list[str]], jobs: int, per_run: int) -> list[Task]:
    """Each group of parts cut by students into runs of at most about ``per_run`` notebooks, as many as a multiple
    of ``jobs`` (fewer where there are fewer students): 35 equal runs on two jobs would leave one job grading the
    last run alone, 36 end together."""
    tasks = []
    for group in part_groups:
        students = sorted({student for slug in group for student in handed_in[slug]})
        weights = [sum(student in handed_in[slug] for slug in group) for student in students]
        runs = jobs * math.ceil(sum(weights) / per_run / jobs)
        for batch in split(students, weights, runs):
            pairs = [(student, slug) for slug in group for student in batch if student in handed_in[slug]]
            tasks.append(Task([slug for slug in group if any(part == slug for _, part in pairs)], batch, pairs))
    return tasks


def run_task(course: Path, command: str, task: Task, everyone: list[str], log: Path,
             seed: int | None = None) -> subprocess.CompletedProcess:
    """nbgrader ``command`` (autograde, generate_feedback) of ``task``'s parts, each for its students, in one process."""
    each = []
    for slug in task.slugs:
        graded = [student for student, part in task.notebooks if part == slug]
        others = [s for s in everyone if s not in graded]
        selection = ["--student", graded[0]] if len(graded) == 1 else \
            ([f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else [])
        each.append([command, slug, *selection, "--force"])
    return run_nbgrader_commands(course, each, log=log, seed=seed)


def task_log_name(command: str, task: Task) -> str:
    parts = task.slugs[0] if len(task.slugs) == 1 else f"{task.slugs[0][:2]}-{task.slugs[-1][:2]}"
    students = task.students[0] if len(task.students) == 1 else f"{task.students[0]}-and-{len(task.students) - 1}"
    return f"{command}-{parts}-{students}.log"


def _flags(graded: Path) -> list[Flag]:
    """Why a human should look at a notebook: what the judge listed in it (every output that asks for a
    human look: a cell that breaks the rules for graded code, refused answers, a dead kernel, ...)."""
    flags = []
    try:
        cells = json.loads(graded.read_text()).get("cells", [])
    except (OSError, ValueError):
        cells = []
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and "human look" in output.get("evalue", ""):
                where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"
                flags.append(Flag(where, short_reason(output["evalue"])))
    return flags


REASON_CHARS = 240  # a flag's reason, as the listing, the CSV file and the formgrader's comment show it
NOT_RUN = "[not run: "  # how the grader's note on a cell it did not run begins (grading/preprocessors/)


def short_reason(text: str) -> str:
    """The first line of ``text``, cut after its last whole sentence within REASON_CHARS (or with "…"); a
    character a terminal would act on shown as its escape (:func:`grading.protocol.printable`)."""
    line = (printable(text).strip().splitlines() or [""])[0].strip()
    if line.startswith(NOT_RUN):  # "[not run: why] (...)": the bracket closes, or goes, with what it holds
        line = "not run: " + line[len(NOT_RUN):].replace("]", "", 1)
    line = re.sub(r"\s*\((?:this notebook needs a human look|listed for a human look)\)", "", line)
    if len(line) <= REASON_CHARS:
        return line
    cut = line[:REASON_CHARS]
    end = cut.rfind(". ")
    return cut[:end + 1] if end >= 40 else cut.rstrip() + "…"  # a sentence of a few words says too little


SEEDS_FILE = "grading-seeds.csv"  # beside grades.csv: the run seed of each notebook's last grading


def update_rows(path: Path, fields: list[str], rows: list[dict[str, str]], regraded: set[tuple[str, str]]) -> Path:
    """Write ``rows`` to the CSV file ``path`` (beside grades.csv), keeping its rows of the (student, part)
    pairs not in ``regraded``: a file about each notebook's last grading."""
    kept = []
    if path.is_file():
        with path.open(newline="") as handle:
            kept = [row for row in csv.DictReader(handle) if (row["student"], row["part"]) not in regraded]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(sorted(kept + rows, key=lambda row: tuple(row[field] for field in fields[:3])))
    return path


def record_seeds(course: Path, graded: list[tuple[str, str]], seed: int) -> Path:
    """Write ``seed`` as the run seed of every (student, part) in ``graded`` to COURSE/grading-seeds.csv,
    keeping the rows of the notebooks graded in earlier runs."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    rows = [{"student": student, "part": slug, "seed": str(seed), "graded_at": stamp} for student, slug in graded]
    return update_rows(course / SEEDS_FILE, ["student", "part", "seed", "graded_at"], rows, set(graded))


# Beside grades.csv: every reason the last grading of each notebook gave for a human look (the record, one row
# per lesson or notebook-wide reason, kept across runs), and the open review queue derived from it and the
# gradebook (one row per notebook still waiting for a human: :func:`review_queue`).
REASONS_FILE = "grading-flags.csv"
FLAGS_FILE = "needs-manual-grading.csv"
REASON_FIELDS = ["student", "part", "lesson", "reason"]
QUEUE_FIELDS = ["student", "part", "status", "lessons", "reasons"]


def flag_rows(tasks: list[Task]) -> list[dict[str, str]]:
    """One row per reason a notebook of ``tasks`` needs a human look: student, part, lesson (its grade id,
    or "" for the whole notebook) and the reason."""
    rows = []
    for task in tasks:
        for (student, slug), problem in task.problems.items():
            rows.append({"student": student, "part": slug, "lesson": "", "reason": f"autograding failed: {problem}"})
        for (student, slug), flags in task.flags.items():
            by_lesson: dict[str, str] = {}
            for flag in flags:
                lesson = flag.lesson
                if lesson is None:  # a cell outside every lesson: each reason is a row
                    rows.append({"student": student, "part": slug, "lesson": "", "reason": flag.reason})
                elif flag.where == lesson.grade_id or lesson.grade_id not in by_lesson:
                    # One row per lesson: its test cell's verdict says why, rather than its solution cell's note.
                    by_lesson[lesson.grade_id] = flag.reason
            rows += [{"student": student, "part": slug, "lesson": grade_id, "reason": reason}
                     for grade_id, reason in by_lesson.items()]
        for (student, slug), changes in task.tampering.items():  # a row each: the cell, and what changed
            for change in changes:
                lesson = lesson_of_grade_id(change.grade_id)
                rows.append({"student": student, "part": slug, "lesson": lesson.grade_id if lesson else "",
                             "reason": f"{change} (graded with the release's cell)"})
    return rows


def record_flags(course: Path, tasks: list[Task]) -> Path:
    """Keep every reason for a human look where the instructor's tools show it.

    In nbgrader's gradebook (formgrader's "Needs manual grade?" and "Flagged?"): the notebook is flagged, the
    flagged lesson's grade, or every grade of a notebook flagged as a whole, needs manual grading, and the
    lesson's solution cell gets the reason as its automatic comment (formgrader shows it in the comment box).  In
    COURSE/grading-flags.csv: every reason, the rows of the notebooks graded earlier kept (the review queue,
    :func:`review_queue`, reads it).  Returns that file."""
    from nbgrader.api import MissingEntry
    rows = flag_rows(tasks)
    regraded = {pair for task in tasks for pair in task.notebooks}
    flagged = {(row["student"], row["part"]) for row in rows}
    with gradebook(course) as gb:
        for student, slug in regraded:  # formgrader's "Flagged?": set by this grading, or cleared by it
            try:
                gb.find_submission_notebook(slug, slug, student).flagged = (student, slug) in flagged
            except MissingEntry:  # a notebook that could not be graded
                pass
        for row in rows:
            student, slug = row["student"], row["part"]
            lessons = [lesson_of_grade_id(row["lesson"])] if row["lesson"] else lessons_of(slug)
            for lesson in lessons:
                try:
                    gb.find_grade(lesson.grade_id, slug, slug, student).needs_manual_grade = True
                    comment = gb.find_comment(lesson.solution_grade_id, slug, slug, student)
                except MissingEntry:  # a notebook that could not be graded has no grades
                    continue
                comment.auto_comment = "\n".join(filter(None, [comment.auto_comment, f"Needs a human look: {row['reason']}"]))
        gb.db.commit()
    return update_rows(course / REASONS_FILE, REASON_FIELDS, rows, regraded)


def record_ungradable(course: Path, tasks: list[Task]) -> None:
    """Every notebook of ``tasks`` that could not be graded, recorded so that the formgrader lists it with its
    reason and no lesson of it has a score (grading/ungradable.py), before :func:`record_flags` keeps the reason."""
    with gradebook(course) as gb:
        for task in tasks:
            for (student, slug), problem in task.problems.items():
                try:
                    ungradable.record(gb, course, student, slug, f"autograding failed: {problem}")
                except Exception as error:  # (the class's grades and reasons are recorded all the same)
                    gb.db.rollback()
                    print(f"  note: {student} {slug} could not be listed in the formgrader: {error}", file=sys.stderr)


def autograde(course: Path, parts: list[str], wanted: list[str] | None, jobs: int, seed: int | None = None) -> int:
    """Grade every submission of ``parts`` (or of the ``wanted`` students), ``jobs`` nbgrader runs at a time.

    Every run of this call draws the hidden cases from one run seed (``seed``, else the judge's ``run_seed``),
    recorded per notebook in COURSE/grading-seeds.csv: ``--seed`` (``SEED=`` in make) grades again with it."""
    seed = run_seed() if seed is None else seed
    if sandbox_wanted() and bwrap_path() is None:
        print(missing_sandbox_message(), file=sys.stderr)
        return 2
    if not sandbox_wanted():
        print(f"NOTE: {NO_SANDBOX_NOTE}")
    else:
        how = probe_limits()  # (it forks: before the thread below starts)
    # The sandbox's check (Python started in it: about half a second) runs while the course is made ready;
    # nobody is graded before it passed.
    checking = ThreadPoolExecutor(max_workers=1)
    checked = checking.submit(preflight)
    checking.shutdown(wait=False)
    prepare_course(course, parts)
    students = students_of(course, wanted)
    everyone = students_of(course, None)
    handed_in, refused = {}, []
    for slug in parts:
        present = [s for s in students if (course / "submitted" / s / slug).is_dir()]
        for student in list(present):
            # nbgrader copies every file of a submission with shutil.copy, which follows links:
            # a link to the reference or to the course's sources would hand the kernel their text.
            links = [p for p in (course / "submitted" / student / slug).rglob("*")
                     if p.is_symlink() or not (p.is_file() or p.is_dir())]
            if links:
                present.remove(student)
                shutil.rmtree(course / "autograded" / student / slug, ignore_errors=True)
                refused.append(Task([slug], [student], [(student, slug)], problems={
                    (student, slug): f"not graded: the submission holds links or special files "
                                     f"({', '.join(p.name for p in links[:3])})"}))
        handed_in[slug] = present
    tasks = plan(handed_in, jobs)
    problem = checked.result()
    if problem:  # the grading machine's problem: nobody is graded, so nobody gets a 0 for it
        print(f"cannot grade on this machine: {problem}", file=sys.stderr)
        return 2
    if not (course / "gradebook.db").is_file():
        print("no gradebook: run `make release` first", file=sys.stderr)
        return 1
    if sandbox_wanted():
        limits = describe_limits(how)
        print(limits)
    if not tasks and not refused:
        print(f"nothing to grade in {course / 'submitted'}")
        return 0
    # Students first, one writer at a time; the parallel runs then only touch their own rows.
    with gradebook(course) as gb:
        for student in students:
            gb.update_or_create_student(student)
    logs = log_dir(course)

    def grade(task: Task) -> Task:
        started = time.perf_counter()
        for student, slug in task.notebooks:  # so that a failed run cannot leave an old result behind
            shutil.rmtree(course / "autograded" / student / slug, ignore_errors=True)
        task.log = logs / task_log_name("autograde", task)
        run = run_task(course, "autograde", task, everyone, task.log, seed=seed)
        task.returncode, task.seconds = run.returncode, time.perf_counter() - started
        for student, slug in task.notebooks:
            graded = course / "autograded" / student / slug / f"{slug}.ipynb"
            if not graded.is_file():
                task.problems[(student, slug)] = nbgrader_cli.failure_reason(run.stdout + "\n" + run.stderr, student, slug)
            else:
                task.flags[(student, slug)] = _flags(graded)
                task.tampering[(student, slug)] = notebook_changes(
                    course / "release" / slug / f"{slug}.ipynb", course / "submitted" / student / slug / f"{slug}.ipynb")
            problem = task.problems.get((student, slug))
            print(f"  {'FAILED' if problem else 'graded':6s} {student} {slug}" + (f": {problem}" if problem else ""),
                  flush=True)
        return task

    started = time.perf_counter()
    print(f"autograding {sum(len(t.notebooks) for t in tasks)} submission(s) of {len(students)} student(s) "
          f"in {len(tasks)} nbgrader run(s), {jobs} at a time, run seed {seed} (SEED={seed} grades the same cases)")
    for task in refused:
        for (student, slug), problem in task.problems.items():
            print(f"  FAILED {student} {slug}: {problem}", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = refused + list(pool.map(grade, tasks))
    print(f"done in {time.perf_counter() - started:.1f} s")
    graded = [pair for task in done if task.returncode is not None for pair in task.notebooks
              if pair not in task.problems]
    if graded:
        print(f"run seed {seed} recorded for {len(graded)} notebook(s) in {record_seeds(course, graded, seed)}")
    record_ungradable(course, done)
    print(f"reasons kept in nbgrader's gradebook (formgrader: needs manual grade) and {record_flags(course, done)}")
    print_scores(course, parts, students)
    print_manual_grading(course, parts, students, done)
    if not sandbox_wanted():
        print(f"\nNOTE: {NO_SANDBOX_NOTE}")
    elif limits.startswith("NOTE"):
        print(f"\n{limits}")
    return 0


def part_shown(row: dict, slug: str) -> str:
    """A part's score as the listing shows it: "30/50" (after the late penalty; "12.5 h late"), or its status."""
    status, late = row[f"status_{slug}"], row[f"late_{slug}"]
    if status == NOT_HANDED_IN:
        return "-"
    out_of = sum(lesson.points for lesson in lessons_of(slug))
    said = f"{shown(row[f'part_{slug}'])}/{out_of}" if status == GRADED else status
    return said + (f" ({late:g} h late)" if late else "")


def print_scores(course: Path, parts: list[str], students: list[str]) -> None:
    """Each student's parts (after nbgrader's late penalty); the total out of the course's points only when
    every part was graded in this run, and only when it is final."""
    table = score_table(course, parts, students)
    whole = parts == landed_parts(built=source_notebook)
    print("\nscores (a part's points are after the late penalty):")
    for student, row in table.items():
        total = f"  total {shown(row['total']) or 'not final'}/{TOTAL_POINTS}" if whole else ""
        print(f"  {student:24s} " + "  ".join(f"{slug}: {part_shown(row, slug)}" for slug in parts) + total)


def print_manual_grading(course: Path, parts: list[str], students: list[str], tasks: list[Task]) -> None:
    """The review queue of the students and parts just graded (:func:`review_queue`), with the logs of the
    notebooks that could not be graded."""
    logs = {pair: task.log for task in tasks for pair in task.problems if task.log}
    rows = [row for row in review_queue(course, parts) if row["student"] in students]
    if not rows:
        print("\nneeds manual grading: nothing")
        return
    print("\nneeds manual grading:")
    for row in rows:
        where = f"lesson(s) {', '.join(row['lessons'].split())}" if row["lessons"] else "the whole notebook"
        log = logs.get((row["student"], row["part"]))
        print(f"  {row['student']} {row['part']}: {row['status']}, {where}: {row['reasons']}"
              + (f"; log: {log}" if log else ""))
    print("(`make review` lists what is still open, as you grade them in the formgrader)")


# --------------------------------------------------------------------------
# feedback
# --------------------------------------------------------------------------

def feedback(course: Path, parts: list[str], wanted: list[str] | None, jobs: int) -> int:
    prepare_course(course, parts)
    autograded = course / "autograded"
    students = students_of(course, wanted)
    everyone = sorted(set(students_of(course, None))
                      | ({p.name for p in autograded.iterdir() if p.is_dir()} if autograded.is_dir() else set()))
    # A notebook that could not be graded has a stand-in there (grading/ungradable.py), and no feedback.
    states = class_state(course, parts, students) if (course / "gradebook.db").is_file() else {}
    handed_in = {slug: [s for s in students if (autograded / s / slug / f"{slug}.ipynb").is_file()
                        and s in states and states[s][slug].status != UNGRADABLE] for slug in parts}
    logs = log_dir(course)

    def generate(task: Task) -> tuple[Task, subprocess.CompletedProcess]:
        return task, run_task(course, "generate_feedback", task, everyone, logs / task_log_name("feedback", task))

    status = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for task, run in pool.map(generate, plan(handed_in, jobs, PAGES_PER_RUN)):
            for student, slug in task.notebooks:
                folder = course / "feedback" / student / slug
                problems = feedback_problems(folder, slug)
                if problems:
                    status = 1
                    print(f"  feedback for {student} {slug} FAILED: {problems}"
                          + (f" ({nbgrader_cli.failure_reason(run.stderr, student, slug)})" if run.returncode else ""),
                          file=sys.stderr)
                    if folder.is_dir() and any("contains" in p or "unexpected" in p for p in problems):
                        shutil.rmtree(folder)  # never hand out a page that leaks
                else:
                    print(f"  feedback {folder / f'{slug}.html'}")
    for slug in parts:
        for student in students:
            if (course / "submitted" / student / slug).is_dir() and student not in handed_in[slug]:
                print(f"  no feedback for {student} {slug}: it was not graded (`make review` lists why)")
    return status


def hidden_lines(slug: str) -> set[str]:
    """Lines of the part's hidden tests that appear nowhere in the learner's copy (to spot a leak)."""
    source = json.loads(source_notebook(slug).read_text())
    release = (ROOT / "notebooks" / f"{slug}.ipynb").read_text()
    found = set()
    for cell in source["cells"]:
        text = "".join(cell.get("source", ""))
        if "### BEGIN HIDDEN TESTS" not in text:
            continue
        hidden = text.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
        found.update(line.strip() for line in hidden.splitlines()
                     if len(line.strip()) > 25 and json.dumps(line.strip())[1:-1] not in release)
    return found


def feedback_problems(folder: Path, slug: str) -> list[str]:
    """What is wrong with a feedback folder: files other than the page (the reference module
    would be one), hidden-test lines or answer messages in the page, or active HTML."""
    if not folder.is_dir():
        return ["no feedback folder"]
    # nbgrader copies the submission's timestamp.txt (written by `nbgrader submit`/`collect`) beside the page:
    # the learner's own, a date, nothing of the course's.
    problems = [f"unexpected file {p.name}" for p in folder.iterdir()
                if p.name != f"{slug}.html" and not (p.name == "timestamp.txt" and p.is_file()
                                                     and not p.is_symlink() and p.stat().st_size <= 100)]
    page = folder / f"{slug}.html"
    if not page.is_file():
        return problems + ["no feedback page"]
    import html
    text = html.unescape(page.read_text())
    problems += [f"the page contains {secret!r}" for secret in SECRETS_IN_FEEDBACK if secret in text]
    problems += [f"the page contains the hidden test line {line!r}" for line in sorted(hidden_lines(slug))
                 if line in text]
    problems += [f"the page contains active HTML: {item}" for item in active_html(page.read_text())]
    return problems


# The elements a page's body is made of: nbconvert's page (cells, outputs, error tracebacks), the course's own text
# rendered from markdown, an output's image, and the MathML of the course's formulas (grading/feedback_math.py).
# Nothing else is admitted: not the raw-text, template and foreign elements where HTML parsers part ways (script,
# style, textarea, xmp, noscript, template, svg, annotation-xml, ...), frames, forms, objects, links or metas.
_BODY_ELEMENTS = frozenset({
    "body", "main", "div", "span", "p", "a", "img", "pre", "code", "em", "strong", "b", "i", "u", "s", "del",
    "sup", "sub", "kbd", "blockquote", "hr", "br", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "dl", "dt",
    "dd", "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption"}) | MATHML_TAGS


class _ActiveHTML(HTMLParser):
    """Every element in a page's <body> must be one the course's pages are made of (:data:`_BODY_ELEMENTS`), and
    every attribute one they use, with a value of the kind they use (nbconvert's own scripts and styles sit in
    <head>): anything else, from a notebook, is reported."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.in_body, self.found = False, []

    def handle_starttag(self, tag, attrs):
        self.in_body = self.in_body or tag == "body"
        if not self.in_body:
            return
        if tag not in _BODY_ELEMENTS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            why = _unsafe_mathml_attribute(tag, name, value or "") if tag in MATHML_TAGS \
                else _unsafe_attribute(tag, name, value or "")
            if why:
                self.found.append(f"<{tag} {name}={(value or '')[:30]!r}> ({why})")

    # Comments, declarations, CDATA sections and processing instructions: the course's pages have none in their
    # body, and they are where this parser and a browser part ways (see active_html), so each one is reported.
    def handle_comment(self, data):
        self._markup("a comment", data)

    def handle_decl(self, decl):
        self._markup("a declaration", decl)

    def unknown_decl(self, data):
        self._markup("a CDATA section or declaration", data)

    def handle_pi(self, data):
        self._markup("a processing instruction", data)

    def _markup(self, kind: str, data: str) -> None:
        if self.in_body:
            self.found.append(f"{kind} {data[:30]!r} (read otherwise by browsers)")

    def reading_state(self) -> tuple | None:
        """Everything that decides how the parser reads what comes next (what it has found and the line and
        column it counts do not), as a hashable tuple; None if some part of it cannot be hashed."""
        state = tuple(sorted((name, value) for name, value in vars(self).items() if name not in _NOT_READING))
        try:
            hash(state)
        except TypeError:
            return None
        return state

    def restore(self, state: tuple) -> None:
        for name, value in state:
            setattr(self, name, value)


_NOT_READING = frozenset({"found", "lineno", "offset"})


_PLAIN = {"class", "id", "name", "alt", "title", "lang", "dir", "colspan", "rowspan", "align", "role"}
_IMAGE_DATA = re.compile(r"\Adata:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*\Z")
_SIZE = re.compile(r"\A\d{1,5}(\.\d+)?(px)?\Z")
# The styles nbconvert itself writes in a page's body: a table cell's alignment, and the colours and weights of
# an error's traceback (ANSI colours turned into HTML).  Nothing else, so a notebook cannot cover the page.
_DECLARATION = (r"\s*(text-align:\s*(left|right|center)|(background-)?color:\s*rgb\(\d{1,3},\s*\d{1,3},\s*\d{1,3}\)"
                r"|font-weight:\s*bold|font-style:\s*italic|text-decoration:\s*underline)\s*")
_STYLE = re.compile(rf"\A{_DECLARATION}(;{_DECLARATION})*;?\s*\Z")


def _unsafe_mathml_attribute(tag: str, name: str, value: str) -> str | None:
    """Why an attribute of a formula's MathML is not one the page's math carries (None: it is)."""
    return None if mathml_attribute_allowed(tag, name, value) else "an attribute the page's math does not use"


def _unsafe_attribute(tag: str, name: str, value: str) -> str | None:
    """Why an attribute may run something or change the page's behaviour (None: it is one of the page's own)."""
    name = name.lower()
    if name.startswith("on"):
        return "an event handler"
    if name in _PLAIN or name.startswith("aria-") or name.startswith("data-"):
        return "a link outside the page" if name == "name" and "/" in value else None
    if name == "href":
        return None if value.startswith("#") else "a link"
    if name == "src":
        return None if tag == "img" and _IMAGE_DATA.match(value) else "a source that is not an embedded image"
    if name in ("width", "height"):
        return None if _SIZE.match(value) else "a size that is not a number"
    if name == "tabindex":
        return None if tag == "div" and value in ("-1", "0") else "focus order"
    if name == "style":
        return None if _STYLE.match(value) else "a style"
    return "an attribute the course's pages do not use"


def active_html(page: str) -> list[str]:
    """What in ``page``'s body could run or change the page: any tag or attribute the course's pages do not use
    (an allow-list, checked by parsing the page).

    It reads the page as Python's HTMLParser does, which is not always as a browser does: a browser ends
    ``<!-->``, ``<!--->``, ``--!>`` and ``<![CDATA[`` outside math at their first ``>``, HTMLParser reads on to
    a later ``-->`` or ``]]>``, so that a tag between the two would be hidden from it.  The course's pages have
    no comment, declaration, CDATA section or processing instruction in their body, so every one found there is
    reported, and so is markup left unfinished at the page's end (which HTMLParser would never read): what
    HTMLParser does not read as a tag or as text is not admitted either.  What keeps such markup out of a page
    in the first place is that a notebook's own markup reaches no page as markup (grading/inert.py); the
    browser tests check that with these forms among the hostile.

    The parser reads the page a line at a time, as it would read it whole (HTMLParser keeps an unfinished tag
    until the rest comes).  A class's pages repeat most of their lines (the lesson's text, its tests, their
    highlighting): a line is remembered with the parser's state before and after it and what was found in it,
    and read again from that same state it is not parsed again: the parser is put in the state after it, and
    what was found in it is found again."""
    parser = _ActiveHTML()
    for line in as_browsers_read(page).splitlines(keepends=True):
        before = parser.reading_state()
        known = _READ_LINES.get((before, line)) if before is not None else None
        if known is not None:
            parser.restore(known[0])
            parser.found.extend(known[1])
            continue
        found = len(parser.found)
        try:
            parser.feed(line)
        except Exception as error:  # noqa: BLE001  (HTMLParser asserts on some malformed declarations)
            return sorted({*parser.found, f"markup this check cannot read ({type(error).__name__}: {error})"[:200]})
        after = parser.reading_state()
        if before is not None and after is not None and len(line) <= READ_LINE_CHARS:
            if len(_READ_LINES) >= READ_LINES_KEPT:
                _READ_LINES.clear()
            _READ_LINES[(before, line)] = (after, tuple(parser.found[found:]))
    if parser.in_body and "<" in parser.rawdata:  # an unfinished tag or comment: HTMLParser keeps it unread
        parser.found.append(f"markup left unfinished at the page's end {parser.rawdata.strip()[:30]!r}")
    return sorted(set(parser.found))


def as_browsers_read(page: str) -> str:
    """``page``'s text as a browser's tokenizer reads it: line ends made ``\\n``, and NUL made U+FFFD (in a tag's or
    attribute's name a browser reads U+FFFD; HTMLParser would end the tag at NUL and miss the attributes after)."""
    return page.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")


# {(the parser's reading state before a line, the line): (its state after it, what was found in it)}
_READ_LINES: dict[tuple, tuple[tuple, tuple[str, ...]]] = {}
READ_LINES_KEPT = 100_000  # (a class's seven parts hold some tens of thousands of distinct lines)
READ_LINE_CHARS = 2_000  # longer lines (an image's data) are seldom repeated; at most 200 MB kept


# --------------------------------------------------------------------------
# grades
# --------------------------------------------------------------------------

# Where a student's part stands, as grades.csv's status_NN_slug column says it.
GRADED, NEEDS_REVIEW, UNGRADABLE, NOT_HANDED_IN = "graded", "needs review", "ungradable", "not handed in"
NO_RECORDED_REASON = "nbgrader marked grades for manual review"


@dataclass
class PartState:
    """One student's part as the gradebook has it now: manual scores given and flags cleared in the formgrader
    included.  Points that are not final (a lesson waiting for a human, a notebook that could not be graded)
    are None, so that grades.csv leaves them blank and an LMS never posts them as 0."""
    status: str
    lessons: dict[str, float | None]  # {lesson code: points, before the late penalty}
    points: float | None = None       # the part's points, after the late penalty (graded parts only)
    hours_late: float | None = None   # None when on time
    open_lessons: list[str] = field(default_factory=list)  # codes of the lessons still waiting for a manual score
    reasons: list[str] = field(default_factory=list)       # why a human should look at what is still open


def read_reasons(course: Path) -> dict[tuple[str, str], list[dict[str, str]]]:
    """{(student, part): the rows of COURSE/grading-flags.csv}: every reason the notebook's last grading gave.

    A course graded by an earlier version of this tool kept them in needs-manual-grading.csv, in the same
    columns: that file is read then."""
    path = course / REASONS_FILE
    if not path.is_file():
        path = course / FLAGS_FILE
    found: dict[tuple[str, str], list[dict[str, str]]] = {}
    if path.is_file():
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if set(REASON_FIELDS) <= set(reader.fieldnames or []):
                for row in reader:
                    found.setdefault((row["student"], row["part"]), []).append(row)
    return found


def hours_late(submission) -> float | None:
    """How late nbgrader says the submission came, in hours (None: on time, or no due date)."""
    seconds = float(submission.total_seconds_late or 0) if submission is not None else 0.0
    return round(seconds / 3600, 2) if seconds > 0 else None


def part_state(submission, course: Path, student: str, slug: str, reasons: list[dict[str, str]]) -> PartState:
    """Where ``student``'s part ``slug`` stands (``submission``: nbgrader's record of it, None when the gradebook
    has none; ``reasons``: the rows its last grading recorded)."""
    lessons = lessons_of(slug)
    if submission is None and not (course / "submitted" / student / slug).is_dir():
        return PartState(NOT_HANDED_IN, {lesson.code: None for lesson in lessons})
    late = hours_late(submission)
    recorded = {grade.name: grade for notebook in (submission.notebooks if submission is not None else [])
                if notebook.name == slug for grade in notebook.grades}
    grades = {lesson.code: recorded[lesson.grade_id] for lesson in lessons if lesson.grade_id in recorded}
    graded_file = course / "autograded" / student / slug / f"{slug}.ipynb"
    # No grade, no autograded notebook, or a lesson its last grading gave no score (grading/ungradable.py).
    if len(grades) < len(lessons) or not graded_file.is_file() or ungradable.is_ungradable(grades.values()):
        why = [row["reason"] for row in reasons] or ["it could not be graded: see `make autograde`'s listing"]
        return PartState(UNGRADABLE, {lesson.code: None for lesson in lessons}, hours_late=late, reasons=why)
    # Waiting for a human until each flagged grade has a manual score or the notebook's flag is cleared.
    waiting_ids = {name for notebook in submission.notebooks for name in waiting_grades(notebook)}
    waiting = [code for code, grade in grades.items() if grade.name in waiting_ids]
    points = {code: None if code in waiting else float(grade.score or 0) for code, grade in grades.items()}
    if waiting:
        open_ids = {lesson.grade_id for lesson in lessons if lesson.code in waiting}
        why = [row["reason"] for row in reasons if not row["lesson"] or row["lesson"] in open_ids]
        return PartState(NEEDS_REVIEW, points, hours_late=late, open_lessons=waiting,  # each reason once
                         reasons=list(dict.fromkeys(why)) or [NO_RECORDED_REASON])
    penalty = float(submission.late_submission_penalty or 0.0)  # the course directory's LateSubmissionPlugin
    return PartState(GRADED, points, points=max(0.0, sum(points.values()) - penalty), hours_late=late)


def class_state(course: Path, parts: list[str], students: list[str]) -> dict[str, dict[str, PartState]]:
    """{student: {part: its PartState}}, read from the gradebook and the recorded reasons."""
    reasons = read_reasons(course)
    with gradebook(course) as gb:
        submissions = submissions_of(gb, parts)
        return {student: {slug: part_state(submissions.get((student, slug)), course, student, slug,
                                           reasons.get((student, slug), []))
                          for slug in parts} for student in students}


def submissions_of(gb, parts: list[str]) -> dict[tuple[str, str], object]:
    """{(student, part): nbgrader's SubmittedAssignment} of every submission of ``parts``, with their notebooks,
    grades and grade cells, in a few queries: asked one part of one student at a time (a query for the
    submission and one per lesson), a class of 200 x 7 parts took 7.9 s (1.1 s this way), and each of
    `make autograde` (twice), `make grades`, `make review` and `make feedback` reads the whole class."""
    from nbgrader.api import Assignment, Grade, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy.orm import selectinload
    query = (gb.db.query(SubmittedAssignment).join(Assignment).filter(Assignment.name.in_(parts))
             .options(selectinload(SubmittedAssignment.assignment), selectinload(SubmittedAssignment.student),
                      selectinload(SubmittedAssignment.notebooks).selectinload(SubmittedNotebook.notebook),
                      selectinload(SubmittedAssignment.notebooks).selectinload(SubmittedNotebook.grades)
                      .selectinload(Grade.cell)))
    return {(submission.student.id, submission.assignment.name): submission for submission in query}


def score_table(course: Path, parts: list[str], students: list[str]) -> dict[str, dict[str, float | str | None]]:
    """{student: {"lesson_001": points, ..., "part_01_mlp_core": points, "status_01_mlp_core": status,
    "late_01_mlp_core": hours, ..., "total": points}}, as grades.csv has them.

    A lesson's points are before nbgrader's late penalty; a part's after it (its lessons' less the penalty).
    Whatever is not final is None (blank in grades.csv, so that an LMS tells it from a 0): a part not handed
    in, a part that could not be graded (its lessons too), a lesson waiting for a manual score and its part,
    and the total while any part handed in is not graded."""
    table: dict[str, dict[str, float | str | None]] = {}
    for student, states in class_state(course, parts, students).items():
        row: dict[str, float | str | None] = {}
        for slug, state in states.items():
            row.update({f"lesson_{code}": points for code, points in state.lessons.items()})
            row[f"part_{slug}"], row[f"status_{slug}"] = state.points, state.status
            row[f"late_{slug}"] = state.hours_late
        final = all(state.status in (GRADED, NOT_HANDED_IN) for state in states.values())
        row["total"] = sum(state.points or 0.0 for state in states.values()) if final else None
        table[student] = row
    return table


# --------------------------------------------------------------------------
# review: the notebooks still waiting for a human
# --------------------------------------------------------------------------

def review_queue(course: Path, parts: list[str] | None = None) -> list[dict[str, str]]:
    """The open review queue: one row per notebook (student, part, status, lessons, reasons) that needs a human
    and has not had one.  A flagged notebook leaves it once every lesson it flagged has a manual score in the
    gradebook, or once the instructor clears its flag in the formgrader; a notebook that could not be graded,
    once it is graded.  Also written to COURSE/needs-manual-grading.csv (the whole course's queue)."""
    every = landed_parts(built=source_notebook)
    rows = []
    for student, states in class_state(course, every, class_list(course)).items():
        for slug, state in states.items():
            if state.status in (NEEDS_REVIEW, UNGRADABLE):
                rows.append({"student": student, "part": slug, "status": state.status,
                             "lessons": " ".join(state.open_lessons), "reasons": " | ".join(state.reasons)})
    with (course / FLAGS_FILE).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=QUEUE_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return [row for row in rows if parts is None or row["part"] in parts]


def review(course: Path, parts: list[str]) -> int:
    """``make review``: print the open review queue (and write it to COURSE/needs-manual-grading.csv)."""
    if not (course / "gradebook.db").is_file():
        print("no gradebook: run `make release` and `make autograde` first", file=sys.stderr)
        return 1
    rows = review_queue(course, parts)
    if not rows:
        print(f"review queue: empty: every flagged lesson has a manual score or its flag was cleared "
              f"({course / FLAGS_FILE})")
        return 0
    print(f"review queue: {len(rows)} notebook(s) wait for a human ({course / FLAGS_FILE})")
    for row in rows:
        lessons = f"lesson(s) {', '.join(row['lessons'].split())}" if row["lessons"] else "the whole notebook"
        print(f"  {row['student']} {row['part']}: {row['status']}, {lessons}: {row['reasons']}")
    print("A flagged notebook leaves the queue when each of its listed lessons has a score in the formgrader "
          "(make formgrader: Manual Grading) or when its flag is cleared there; a notebook that could not be "
          "graded, when `make autograde STUDENTS=... PART=...` grades it.")
    return 0


def shown(value: float | str | None) -> str:
    """A value as grades.csv and the listing show it: blank when there is none (not handed in, not final, on
    time), a number without trailing zeros, a status as it is."""
    if value is None:
        return ""
    return value if isinstance(value, str) else f"{value:g}"


def contact_details(course: Path, students: list[str]) -> dict[str, dict[str, str]]:
    """{student: {"first_name", "last_name", "email"}} as the gradebook has them (empty when it has none)."""
    from nbgrader.api import MissingEntry
    found = {}
    with gradebook(course) as gb:
        for student in students:
            try:
                record = gb.find_student(student)
            except MissingEntry:
                continue
            found[student] = {"first_name": record.first_name or "", "last_name": record.last_name or "",
                              "email": record.email or ""}
    return found


def class_list(course: Path) -> list[str]:
    """Every student of the course: those in the gradebook and those with a submission folder."""
    with gradebook(course) as gb:
        in_db = {s.id for s in gb.students}
    return sorted(in_db | set(students_of(course, None)))


def grades(course: Path, parts: list[str], output: Path | None) -> int:
    prepare_course(course, parts)
    if not (course / "gradebook.db").is_file():
        print("no gradebook: run `make release` and `make autograde` first", file=sys.stderr)
        return 1
    students = class_list(course)
    table = score_table(course, parts, students)
    lesson_columns = [f"lesson_{lesson.code}" for slug in parts for lesson in lessons_of(slug)]
    details = contact_details(course, students)
    # Names and e-mails only when the gradebook holds some (`nbgrader db student import`): an LMS matches on them.
    contact = ["first_name", "last_name", "email"] if any(v for d in details.values() for v in d.values()) else []
    columns = ["student", *contact, *lesson_columns, *(f"{kind}_{slug}" for kind in ("part", "status", "late")
                                                         for slug in parts), "total", "out_of"]
    output = output or course / "grades.csv"
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for student, row in table.items():
            writer.writerow([student, *(details.get(student, {}).get(c, "") for c in contact),
                             *(shown(row[c]) for c in columns[1 + len(contact):-1]), TOTAL_POINTS])
    pending = sum(row[f"status_{slug}"] in (NEEDS_REVIEW, UNGRADABLE) for row in table.values() for slug in parts)
    print(f"wrote {output}: {len(table)} student(s), {len(lesson_columns)} lesson(s), "
          f"total out of {TOTAL_POINTS}" + (f"; {pending} part(s) not final (blank): `make review` lists them"
                                            if pending else ""))
    review_queue(course)  # needs-manual-grading.csv from the same state
    return 0


# --------------------------------------------------------------------------
# formgrader
# --------------------------------------------------------------------------

# The nbgrader parts of JupyterLab the instructor gets; the learner's `make lab` has none of them (the
# Makefile disables them in .venv, and nbgrader's formgrader server extension too).
FORMGRADER_LAB_EXTENSIONS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:menu")
FORMGRADER_SERVER_EXTENSION = "nbgrader.server_extensions.formgrader"


def formgrader_env(course: Path) -> dict[str, str]:
    """nbgrader's environment (:func:`nbgrader_env`) with a private Jupyter configuration in which the
    formgrader and its menu are on.  That folder is read before .venv's (``JUPYTER_PREFER_ENV_PATH=0``):
    JupyterLab takes the first folder's word for an extension, and .venv's says "disabled"."""
    env = nbgrader_env(course)
    labconfig = Path(env["JUPYTER_CONFIG_DIR"]) / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {name: False for name in FORMGRADER_LAB_EXTENSIONS}}))
    # A second wall around the submissions it shows: no event-handler attribute of theirs runs (grading/formgrader_csp.py).
    (Path(env["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json").write_text(json.dumps(formgrader_csp.server_config()))
    # nbgrader's exchange (release to and collect from students under JupyterHub) in a folder of the course's own,
    # which exists: without one, every formgrader page warns that /srv/nbgrader/exchange does not, and the server
    # logs it as CRITICAL.  The course directory's nbgrader_config.py is read after this file: a
    # `c.Exchange.root = ...` there (JupyterHub's shared exchange) wins.
    exchange = exchange_dir(course)
    exchange.mkdir(parents=True, exist_ok=True)
    (Path(env["JUPYTER_CONFIG_DIR"]) / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.Exchange.root = {str(exchange)!r}\n")
    env["JUPYTER_PREFER_ENV_PATH"] = "0"
    return env


def exchange_dir(course: Path) -> Path:
    """The formgrader's exchange folder: ``COURSE/exchange`` (``build/exchange`` for autograde/, which is in git)."""
    if course.resolve() == DEFAULT_COURSE.resolve():
        return ROOT / "build" / "exchange"
    return course / "exchange"


def formgrader_command(course: Path, port: int | None, open_browser: bool) -> list[str]:
    """``jupyter lab`` on the course directory, on this machine only, with the formgrader's server extension.

    No token on the command line (another user can read it in /proc): JupyterLab draws a random one, or
    takes ``JUPYTER_TOKEN`` from the environment, and prints the address with it."""
    command = [str(BIN / "jupyter"), "lab", f"--ServerApp.root_dir={course}", "--ServerApp.ip=127.0.0.1",
               "--ServerApp.jpserver_extensions", f"{FORMGRADER_SERVER_EXTENSION}=True",
               "--ServerApp.jpserver_extensions", "jupytext=False",
               "--ServerApp.jpserver_extensions", "jupyterlab_jupytext=False",
               # The Launcher offers the course's kernel, never the grading kernel (grading/instructor_lab.py).
               "--ServerApp.kernel_spec_manager_class=grading.instructor_lab.LauncherKernelSpecManager",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.getuid() == 0:
        command.append("--allow-root")
    if port is not None:
        command.append(f"--ServerApp.port={port}")
    if not open_browser:
        command.append("--no-browser")
    return command


def formgrader(course: Path, parts: list[str], port: int | None, open_browser: bool) -> int:
    """JupyterLab for the instructor on ``course``: nbgrader's formgrader (gradebook, manual grading, the
    flags of :func:`record_flags`) under its Nbgrader menu.  Its buttons grade through the course's
    configuration, as ``make autograde`` does (sandboxed kernels, the judge).  Runs until Ctrl-C."""
    prepare_course(course, parts)
    if not (course / "gradebook.db").is_file():
        print(f"note: {course} has no gradebook yet; `make release` and `make autograde` fill it")
    print(f"formgrader on {course}: open the Nbgrader menu > Formgrader (or /formgrader/ at the address below)")
    server = subprocess.Popen(formgrader_command(course, port, open_browser), cwd=course, env=formgrader_env(course))
    # Stopped by Ctrl-C or SIGTERM (`kill`, a test's server.stop()), JupyterLab gets SIGTERM, shuts its kernels
    # down and exits; this process then ends normally, so its private configuration folder
    # (private_config_dir) is removed at exit.
    signal.signal(signal.SIGTERM, lambda signum, frame: server.terminate())
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait()
        return 0


# --------------------------------------------------------------------------

def part_slugs(name: str) -> list[str]:
    """The landed part(s) ``name`` means: a slug, or a part's number ("5", "05")."""
    return [slug for slug in landed_parts(built=source_notebook)
            if name == slug or (name.isdigit() and slug[:2] == name.zfill(2))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course-dir", type=Path, default=None,
                        help="the nbgrader course directory (default: autograde/)")
    parser.add_argument("--parts", default="", help="parts, by slug or number, comma-separated (default: every landed part)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("release", help="nbgrader generate_assignment of every part")
    for name, text in (("autograde", "grade every submission (or --students)"),
                       ("feedback", "HTML feedback per student")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--students", nargs="*", help="student ids (default: every submission)")
        command.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                             help="submissions processed at once (default: the number of CPUs)")
        if name == "autograde":
            command.add_argument("--seed", type=int, default=None,
                                 help="the run seed of the hidden cases (default: a fresh one; each is recorded)")
    command = commands.add_parser("formgrader", help="JupyterLab with nbgrader's formgrader on the course")
    command.add_argument("--port", type=int, default=None, help="the server's port (default: 8888 or the next free)")
    command.add_argument("--no-browser", action="store_true", help="print the address instead of opening a browser")
    commands.add_parser("review", help="the notebooks still waiting for a human (the open review queue)")
    command = commands.add_parser("grades", help="a CSV of points per lesson, part and total")
    command.add_argument("--output", type=Path, default=None, help="CSV file (default: COURSE/grades.csv)")
    args = parser.parse_args(argv)

    course = (args.course_dir or Path(os.environ.get("COURSE_DIR") or DEFAULT_COURSE)).resolve()
    wanted_parts = [p for p in args.parts.replace(",", " ").split() if p]
    unknown = [p for p in wanted_parts if not part_slugs(p)]
    landed = landed_parts(built=source_notebook)
    if unknown:
        parser.error(f"unknown or unbuilt part(s): {unknown}; landed: {landed}")
    parts = [slug for slug in landed if any(slug in part_slugs(p) for p in wanted_parts)] or landed
    students = [s for item in (getattr(args, "students", None) or []) for s in item.split()] or None
    if args.command == "release":
        return release(course, parts)
    if args.command == "autograde":
        return autograde(course, parts, students, args.jobs, args.seed)
    if args.command == "feedback":
        return feedback(course, parts, students, args.jobs)
    if args.command == "review":
        return review(course, parts)
    if args.command == "formgrader":
        return formgrader(course, parts, args.port, not args.no_browser)
    return grades(course, parts, args.output)


if __name__ == "__main__":
    sys.exit(main())
