"""``make bench-grading``: a class graded the course's way beside plain nbgrader, and what 200 students would take.

    python tools/bench_grading.py [--students 6] [--parts 01_mlp_core ...]

N students each hand in the solved notebook of every landed part.  The same
submissions are graded, one way after the other, on this machine:

- plain nbgrader (its default preprocessors and the ordinary ``python3``
  kernel, one ``nbgrader autograde PART`` per part for all students, or two
  processes with half of the students each for JOBS=2), then its feedback;
- the course's grading (``tools/instructor.py autograde``: sandboxed kernels,
  the judge) with JOBS=1 and JOBS=2, then its feedback (``feedback``).

It prints a table of seconds per notebook with how busy the machine's CPUs were
while each step ran (all processes, from /proc/stat: another program running
beside the benchmark shows there) and the load average, the speed-up of JOBS=2
(with the most it could be for the CPU time JOBS=1 used: :func:`speedup_bound`, and its
spread over ``--pairs`` pairs of the course's runs, JOBS=1 then JOBS=2: :func:`speedup_spread`),
and the time 200 students would take at JOBS=2, autograde and feedback, two ways:

- an upper bound: the seconds per notebook measured here times 1,400 notebooks.
  They include each run's fixed costs (starting nbgrader, drawing the cases,
  building the kernel's tree, once per part of a run), which the class's runs
  spread over more notebooks of one part each;
- an estimate from the course's runs as :func:`tools.instructor.plan` would make
  them for the class, each costing ``fixed + notebooks x marginal``.  Both figures
  are fitted to two measurements at each JOBS: the class above and one student a
  run (the same parts, so one run's fixed cost is measured for seven parts, more
  than a class's run of one part pays).

``--whole-class 200`` (``make bench-class``) measures instead of projecting: the course grades a class of that
many students, every part, at JOBS=2, then writes its feedback pages, and prints the minutes each step took
(about twenty for 200 students on two cores).

It stops if any submission could not be graded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grading.course import landed_parts
from grading.protocol import COURSE_DIR_ENV, ENV_PREFIX

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
INSTRUCTOR = [sys.executable, str(ROOT / "tools" / "instructor.py")]


def environment(course: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", ENV_PREFIX))}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", COURSE_DIR_ENV: str(course),
                "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")})
    return env


def submit_all(course: Path, parts: list[str], students: list[str]) -> None:
    for student in students:
        for slug in parts:
            target = course / "submitted" / student / slug
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "solutions" / f"{slug}.ipynb", target / f"{slug}.ipynb")


def course_grading(base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[float, float]:
    """(seconds, share of the CPUs busy) of ``tools/instructor.py autograde --jobs JOBS``, after its release."""
    course = base / f"course-jobs{jobs}"
    submit_all(course, parts, students)
    env = environment(course)
    args = ["--course-dir", str(course), "--parts", ",".join(parts)]
    subprocess.run([*INSTRUCTOR, *args, "release"], env=env, check=True, capture_output=True)
    seconds, busy, run = timed(lambda: subprocess.run([*INSTRUCTOR, *args, "autograde", "--jobs", str(jobs)],
                                                      env=env, capture_output=True, text=True))
    if run.returncode != 0 or "FAILED" in run.stdout:
        raise SystemExit(f"course grading failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return seconds, busy


def course_feedback(base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[float, float]:
    """(seconds, share of the CPUs busy) of the feedback pages of the course graded with ``jobs`` jobs
    (course_grading first)."""
    course = base / f"course-jobs{jobs}"
    seconds, busy, run = timed(lambda: subprocess.run(
        [*INSTRUCTOR, "--course-dir", str(course), "--parts", ",".join(parts), "feedback", "--jobs", str(jobs)],
        env=environment(course), capture_output=True, text=True))
    pages = list((course / "feedback").glob("*/*/*.html"))
    if run.returncode != 0 or len(pages) != len(parts) * len(students):
        raise SystemExit(f"course feedback failed ({len(pages)} pages):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return seconds, busy


def plain_course(base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[Path, dict[str, str]]:
    course = base / f"plain-jobs{jobs}"
    if not (course / "nbgrader_config.py").is_file():
        for slug in parts:
            (course / "source" / slug).mkdir(parents=True)
            shutil.copy(ROOT / "autograde" / "source" / slug / f"{slug}.ipynb", course / "source" / slug)
        (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.root = {str(course)!r}\n")
        submit_all(course, parts, students)
    return course, environment(course)


def plain_runs(course: Path, env: dict[str, str], command: str, parts: list[str], students: list[str],
               jobs: int) -> tuple[float, float]:
    """(seconds, share of the CPUs busy) of ``nbgrader COMMAND PART`` for every part, half of the students per
    process for JOBS=2."""
    nbgrader = str(BIN / "nbgrader")
    groups = [students[i::jobs] for i in range(jobs) if students[i::jobs]]

    def run(task: tuple[str, list[str]]) -> None:
        slug, group = task
        others = [s for s in students if s not in group]
        selection = [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []
        subprocess.run([nbgrader, command, slug, *selection, "--force"], cwd=course, env=env, capture_output=True)

    def all_runs() -> None:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(run, [(slug, group) for slug in parts for group in groups]))

    seconds, busy, _ = timed(all_runs)
    return seconds, busy


def plain_nbgrader(base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[float, float]:
    course, env = plain_course(base, parts, students, jobs)
    nbgrader = str(BIN / "nbgrader")
    for slug in parts:
        subprocess.run([nbgrader, "generate_assignment", slug, "--force"], cwd=course, env=env,
                       check=True, capture_output=True)
    # students first, so that parallel runs only write their own rows
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            gb.update_or_create_student(student)
    return plain_runs(course, env, "autograde", parts, students, jobs)


def plain_feedback(base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[float, float]:
    course, env = plain_course(base, parts, students, jobs)
    return plain_runs(course, env, "generate_feedback", parts, students, jobs)


def cpu_times() -> tuple[int, int]:
    """(busy, all) jiffies of every CPU since boot, from /proc/stat (idle and waiting for I/O are not busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def timed(run):
    """(seconds, share of the CPUs busy, what it returned) of ``run()``: the CPU time is read over exactly the
    seconds measured, so that a step's set-up (a release, the submissions copied) counts in neither."""
    cpu_before, started = cpu_times(), time.perf_counter()
    result = run()
    seconds, cpu_after = time.perf_counter() - started, cpu_times()
    return seconds, (cpu_after[0] - cpu_before[0]) / max(1, cpu_after[1] - cpu_before[1]), result


STEPS = (("plain nbgrader", "autograde", plain_nbgrader, (1, 2)), ("plain nbgrader", "feedback", plain_feedback, (2,)),
         ("course grading", "autograde", course_grading, (1, 2)), ("course grading", "feedback", course_feedback, (1, 2)))
CLASS = 200  # students of the projected class


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=int(os.environ.get("STUDENTS_N", 6)))
    parser.add_argument("--parts", nargs="*", default=None)
    parser.add_argument("--pairs", type=int, default=3, metavar="N",
                        help="the course's autograde at JOBS=1 then JOBS=2, N times in all (the speed-up's spread)")
    parser.add_argument("--whole-class", type=int, default=None, metavar="N",
                        help="grade a class of N students at JOBS=2 and give feedback, measured (no comparison)")
    args = parser.parse_args(argv)
    parts = args.parts or landed_parts()
    if args.whole_class:
        return whole_class(parts, args.whole_class, jobs=2)
    students = [f"student{i:03d}" for i in range(args.students)]
    notebooks = len(parts) * len(students)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mct-bench-") as folder:
        base = Path(folder)
        for name, step, function, jobs_tried in STEPS:
            for jobs in jobs_tried:
                rows.append((name, step, jobs, *measured(function, base, parts, students, jobs)))
                print(f"  {name}, {step}, JOBS={jobs}: {rows[-1][3]:.1f} s", flush=True)
        fits = {}
        if len(students) > 2:  # one student a run, for the fit: the same parts, JOBS runs at a time
            for jobs in (1, 2):
                small = Path(folder) / f"one-student-a-run-{jobs}"
                for step, function in (("autograde", course_grading), ("feedback", course_feedback)):
                    seconds, _ = function(small, parts, students[:jobs], jobs)
                    print(f"  course grading, {step}, JOBS={jobs}, one student a run: {seconds:.1f} s", flush=True)
                    big = next(row[3] for row in rows if row[:3] == ("course grading", step, jobs))
                    fits[(step, jobs)] = fit_runs(jobs, (big, runs_of(parts, len(students), jobs, step)),
                                                  (seconds, runs_of(parts, jobs, jobs, step)))
        first = {row[2]: tuple(row[3:5]) for row in rows if row[:2] == ("course grading", "autograde")}
        pairs = [(first[1], first[2])]
        for k in range(1, args.pairs):  # more pairs, each JOBS=1 then JOBS=2, in courses of their own
            pairs.append(tuple(measured(course_grading, base / f"pair-{k}", parts, students, jobs)[:2]
                               for jobs in (1, 2)))
            print(f"  course grading, autograde, pair {k + 1}: JOBS=1 {pairs[-1][0][0]:.1f} s, "
                  f"JOBS=2 {pairs[-1][1][0]:.1f} s", flush=True)
    print(f"\n{notebooks} notebooks ({len(students)} students x {len(parts)} parts), {os.cpu_count()} CPUs\n")
    print("| grading | step | JOBS | seconds | s / notebook | CPUs busy | load avg before -> after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, step, jobs, seconds, busy, before, after in rows:
        print(f"| {name} | {step} | {jobs} | {seconds:.1f} | {seconds / notebooks:.2f} | {busy:.0%} | "
              f"{before:.2f} -> {after:.2f} |")
    per = {(name, step, jobs): seconds / notebooks for name, step, jobs, seconds, *_ in rows}
    print()
    for jobs in (1, 2):
        print(f"autograde, course / plain at JOBS={jobs}: "
              f"{per[('course grading', 'autograde', jobs)] / per[('plain nbgrader', 'autograde', jobs)]:.2f}x the time")
    for name, step in (("plain nbgrader", "autograde"), ("course grading", "autograde"), ("course grading", "feedback")):
        print(f"{name}, {step}: JOBS=2 is {per[(name, step, 1)] / per[(name, step, 2)]:.2f}x faster than JOBS=1")
    print(speedup_bound(rows, "course grading", "autograde"))
    print(speedup_spread(pairs))
    print(f"\nprojected for {CLASS} students x {len(parts)} parts at JOBS=2, an upper bound (see above):")
    for name in ("plain nbgrader", "course grading"):
        grading, feedback = (per[(name, step, 2)] * CLASS * len(parts) / 60 for step in ("autograde", "feedback"))
        print(f"  {name}: autograde {grading:.1f} min + feedback {feedback:.1f} min = {grading + feedback:.1f} min")
    if fits:
        print("\nthe course's runs, fitted (seconds: a run's fixed cost + notebooks x marginal, JOBS runs at a time):")
        minutes = {}
        for step, jobs in sorted(fits):
            fixed, marginal = fits[(step, jobs)]
            runs = runs_of(parts, CLASS, jobs, step)
            minutes[(step, jobs)] = wall_seconds(runs, fixed, marginal, jobs) / 60
            print(f"  {step}, JOBS={jobs}: fixed {fixed:.1f} s, marginal {marginal:.2f} s; {CLASS} x {len(parts)} in "
                  f"{len(runs)} runs: {minutes[(step, jobs)]:.1f} min")
        if ("autograde", 2) in minutes and ("feedback", 2) in minutes:
            total = minutes[("autograde", 2)] + minutes[("feedback", 2)]
            print(f"projected for {CLASS} students x {len(parts)} parts at JOBS=2, estimated from the runs: "
                  f"autograde {minutes[('autograde', 2)]:.1f} min + feedback {minutes[('feedback', 2)]:.1f} min = "
                  f"{total:.1f} min")
    print(f"\nmeasured instead of projected: make bench-class (a class of {CLASS}, about twenty minutes)")
    return 0


def speedup_bound(rows: list[tuple], name: str, step: str) -> str:
    """What limits ``name``'s ``step`` at JOBS=2, from the CPU time both JOBS used (CPUs busy x seconds).

    With the same work, JOBS=2 on C CPUs takes at least JOBS=1's CPU-seconds / min(2, C): it can be no more than
    min(2, C) / (CPUs JOBS=1 kept busy) times faster.  JOBS=1 keeps more than one CPU busy where a run overlaps its
    own steps (the course starts the next notebook's kernel while one runs), and JOBS=2 does more work where its
    runs repeat a set-up that one run does once (each run draws the cases of its parts)."""
    cpus = os.cpu_count() or 1
    found = {jobs: (seconds, busy * cpus) for row_name, row_step, jobs, seconds, busy, *_ in rows
             if (row_name, row_step) == (name, step)}
    (one, busy_one), (two, busy_two) = found[1], found[2]
    bound = min(2, cpus) / busy_one
    return (f"{name}, {step}: JOBS=1 kept {busy_one:.2f} CPUs busy, so with the same work JOBS=2 could be at most "
            f"{bound:.2f}x faster on {cpus} CPUs; it did {two * busy_two / (one * busy_one):.2f}x JOBS=1's CPU work, "
            f"with {busy_two:.2f} CPUs busy, and is {one / two:.2f}x faster")


def speedup_spread(pairs: list[tuple[tuple[float, float], tuple[float, float]]]) -> str:
    """The course's autograde speed-up in each pair of runs (JOBS=1 then JOBS=2, each (seconds, share of the CPUs
    busy)), the most each could have been (:func:`speedup_bound`) and their median: one pair alone says little
    on a machine whose speed drifts by a tenth from one minute to the next."""
    cpus = os.cpu_count() or 1
    speedups = [one / two for (one, _), (two, _) in pairs]
    bounds = [min(2, cpus) / (busy * cpus) for (_, busy), _ in pairs]
    each = ", ".join(f"{speedup:.2f}x (at most {bound:.2f}x)" for speedup, bound in zip(speedups, bounds))
    return (f"course grading, autograde: JOBS=2 / JOBS=1 in {len(pairs)} pair(s) of runs, one after the other: "
            f"{each}; median {statistics.median(speedups):.2f}x (at most {statistics.median(bounds):.2f}x)")


def measured(function, base: Path, parts: list[str], students: list[str], jobs: int) -> tuple[float, ...]:
    """(seconds, share of the CPUs busy, load average before, after) of one step of the benchmark."""
    load_before = os.getloadavg()[0]
    seconds, busy = function(base, parts, students, jobs)
    return seconds, busy, load_before, os.getloadavg()[0]


def whole_class(parts: list[str], size: int, jobs: int) -> int:
    """Grade ``size`` students x ``parts`` the course's way, then their feedback, and print the minutes each took:
    the projection's test, paid in full (about twenty minutes for 200 students on two cores)."""
    students = [f"student{i:03d}" for i in range(size)]
    notebooks = size * len(parts)
    print(f"a class of {size} x {len(parts)} parts = {notebooks} notebooks, JOBS={jobs}, "
          f"{os.cpu_count()} CPUs", flush=True)
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="mct-bench-class-") as folder:
        for step, function in (("autograde", course_grading), ("feedback", course_feedback)):
            seconds, busy, before, after = measured(function, Path(folder), parts, students, jobs)
            total += seconds
            print(f"  {step}: {seconds / 60:.1f} min ({seconds / notebooks:.2f} s / notebook, CPUs busy {busy:.0%}, "
                  f"load average {before:.2f} -> {after:.2f})", flush=True)
    print(f"measured: a class of {size} x {len(parts)} parts graded with feedback at JOBS={jobs} "
          f"in {total / 60:.1f} min")
    return 0


def runs_of(parts: list[str], students: int, jobs: int, step: str = "autograde") -> list[int]:
    """The notebooks of each nbgrader run of ``step`` (autograde, feedback) for ``students`` students who handed
    in every part (``tools/instructor.py``'s plan, with its run size for that step)."""
    from instructor import NOTEBOOKS_PER_RUN, PAGES_PER_RUN, plan
    handed_in = {slug: [f"student{i:03d}" for i in range(students)] for slug in parts}
    per_run = PAGES_PER_RUN if step == "feedback" else NOTEBOOKS_PER_RUN
    return [len(task.notebooks) for task in plan(handed_in, jobs, per_run)]


def wall_seconds(runs: list[int], fixed: float, marginal: float, jobs: int) -> float:
    """The model of fit_runs: runs of these many notebooks, ``jobs`` at a time, each ``fixed + notebooks x
    marginal`` seconds."""
    return (len(runs) * fixed + sum(runs) * marginal) / jobs


def fit_runs(jobs: int, *steps: tuple[float, list[int]]) -> tuple[float, float]:
    """(fixed, marginal) seconds of one run, from two steps (seconds, notebooks of each run), ``jobs`` runs at a
    time: ``seconds x jobs = runs x fixed + notebooks x marginal`` for both, solved."""
    (t1, r1), (t2, r2) = steps
    a, b, c, d = len(r1), sum(r1), len(r2), sum(r2)
    fixed = (t1 * jobs * d - t2 * jobs * b) / (a * d - b * c)
    marginal = (t2 * jobs * a - t1 * jobs * c) / (a * d - b * c)
    return fixed, marginal


if __name__ == "__main__":
    sys.exit(main())
