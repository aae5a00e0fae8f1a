"""``make bench-grading``: seconds per notebook, the course's grading beside plain nbgrader.

    python tools/bench_grading.py [--students 6] [--parts 01_mlp_core ...]

N students each hand in the solved notebook of every landed part.  The same
submissions are graded four ways, one after the other on this machine:

- the course's grading (``tools/instructor.py autograde``: sandboxed kernels,
  the judge) with JOBS=1 and JOBS=2;
- plain nbgrader (its default preprocessors and the ordinary ``python3``
  kernel, one ``nbgrader autograde PART`` per part for all students, or two
  processes with half of the students each for JOBS=2).

It prints a table of seconds per notebook and the machine's load average, and
stops if any submission could not be graded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grading.judge import landed_parts

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
INSTRUCTOR = [sys.executable, str(ROOT / "tools" / "instructor.py")]


def environment(course: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "MCT_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", MCT_COURSE_DIR=str(course),
               JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"))
    return env


def submit_all(course: Path, parts: list[str], students: list[str]) -> None:
    for student in students:
        for slug in parts:
            target = course / "submitted" / student / slug
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "solutions" / f"{slug}.ipynb", target / f"{slug}.ipynb")


def course_grading(base: Path, parts: list[str], students: list[str], jobs: int) -> float:
    course = base / f"course-jobs{jobs}"
    submit_all(course, parts, students)
    env = environment(course)
    args = ["--course-dir", str(course), "--parts", ",".join(parts)]
    subprocess.run([*INSTRUCTOR, *args, "release"], env=env, check=True, capture_output=True)
    started = time.perf_counter()
    run = subprocess.run([*INSTRUCTOR, *args, "autograde", "--jobs", str(jobs)], env=env,
                         capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode != 0 or "FAILED" in run.stdout:
        raise SystemExit(f"course grading failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return seconds


def plain_nbgrader(base: Path, parts: list[str], students: list[str], jobs: int) -> float:
    course = base / f"plain-jobs{jobs}"
    for slug in parts:
        (course / "source" / slug).mkdir(parents=True)
        shutil.copy(ROOT / "autograde" / "source" / slug / f"{slug}.ipynb", course / "source" / slug)
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.root = {str(course)!r}\n")
    submit_all(course, parts, students)
    env = environment(course)
    nbgrader = str(BIN / "nbgrader")
    for slug in parts:
        subprocess.run([nbgrader, "generate_assignment", slug, "--force"], cwd=course, env=env,
                       check=True, capture_output=True)
    subprocess.run([nbgrader, "db", "student", "import", "/dev/null"], cwd=course, env=env, capture_output=True)
    groups = [students[i::jobs] for i in range(jobs) if students[i::jobs]]

    def run(task: tuple[str, list[str]]) -> None:
        slug, group = task
        others = [s for s in students if s not in group]
        selection = [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []
        subprocess.run([nbgrader, "autograde", slug, *selection, "--force"], cwd=course, env=env,
                       capture_output=True)

    # students first, so that parallel runs only write their own rows
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            gb.update_or_create_student(student)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, [(slug, group) for slug in parts for group in groups]))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=int(os.environ.get("STUDENTS_N", 6)))
    parser.add_argument("--parts", nargs="*", default=None)
    args = parser.parse_args(argv)
    parts = args.parts or landed_parts()
    students = [f"student{i:03d}" for i in range(args.students)]
    notebooks = len(parts) * len(students)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mct-bench-") as folder:
        base = Path(folder)
        for name, function in (("plain nbgrader", plain_nbgrader), ("course grading", course_grading)):
            for jobs in (1, 2):
                load_before = os.getloadavg()[0]
                seconds = function(base, parts, students, jobs)
                rows.append((name, jobs, seconds, load_before, os.getloadavg()[0]))
                print(f"  {name}, JOBS={jobs}: {seconds:.1f} s", flush=True)
    print(f"\n{notebooks} notebooks ({len(students)} students x {len(parts)} parts), {os.cpu_count()} CPUs\n")
    print("| grading | JOBS | seconds | s / notebook | load avg before -> after |")
    print("| --- | --- | --- | --- | --- |")
    for name, jobs, seconds, before, after in rows:
        print(f"| {name} | {jobs} | {seconds:.1f} | {seconds / notebooks:.2f} | {before:.2f} -> {after:.2f} |")
    per = {(name, jobs): seconds / notebooks for name, jobs, seconds, _, _ in rows}
    for jobs in (1, 2):
        print(f"course / plain at JOBS={jobs}: {per[('course grading', jobs)] / per[('plain nbgrader', jobs)]:.2f}x")
    for name in ("plain nbgrader", "course grading"):
        print(f"{name}: JOBS=2 is {per[(name, 1)] / per[(name, 2)]:.2f}x faster than JOBS=1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
