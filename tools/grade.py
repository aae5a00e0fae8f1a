"""``make grade``: the real hidden tests on your own notebooks, as the instructor would grade them.

    python tools/grade.py [--part 02] [--notebooks DIR]

Your notebooks in ``notebooks/`` are copied (never changed) into a private
nbgrader course under ``build/grade/``, graded there by the same pipeline as
the instructor's ``make autograde`` (the notebook runs in a sandboxed kernel
when bubblewrap is installed, otherwise in an ordinary one, and says so; the
judge compares your answers with the reference solutions on fresh random
cases), and then:

- each lesson's result and message is printed;
- the HTML feedback page goes to ``build/grade/feedback/me/NN_slug/NN_slug.html``;
- the graded XP is recorded, so the progress panel and ``make progress`` show
  it beside the XP of the visible tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from grading import nbgrader_cli

nbgrader_cli.skip_iri_grammars()  # before nbformat is imported (grading/nbgrader_cli.py)

import nbformat  # noqa: E402
from grading.judge import landed_parts
from grading.sandbox import bwrap_path, preflight, sandbox_wanted
from shared.lessons import lesson as find_lesson, lesson_of_grade_id, lessons_of
from shared.progress import record_graded

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STUDENT = "me"


def nbgrader(course: Path, *each: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The nbgrader commands ``each`` (an argv each), one after the other in one process (it takes seconds to start)."""
    return subprocess.run(nbgrader_cli.commands(*each), cwd=course, env=env, capture_output=True, text=True)


def prepare(course: Path, parts: list[str]) -> None:
    if course.exists():
        shutil.rmtree(course)
    for slug in parts:
        target = course / "source" / slug
        target.mkdir(parents=True)
        shutil.copy(ROOT / "autograde" / "source" / slug / f"{slug}.ipynb", target)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(ROOT / 'autograde' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n")


def verdicts(graded: Path) -> list[tuple[str, bool, str]]:
    """(lesson code, passed, message) of every test cell of an autograded notebook."""
    results = []
    for cell in nbformat.read(graded, as_version=4).cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        lesson = lesson_of_grade_id(grade_id)
        if lesson is None or grade_id != lesson.grade_id:
            continue
        outputs = cell.get("outputs", [])
        error = next((o for o in outputs if o.get("output_type") == "error"), None)
        if error is None:
            text = "".join(o.get("text", "") for o in outputs).strip()
            results.append((lesson.code, True, text))
        else:
            results.append((lesson.code, False, error.get("evalue", "")))
    return results


def failure_reason(log: str, slug: str) -> str:
    """The telling line of why nbgrader could not grade part ``slug``: the last error of its traceback in ``log``."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if "There was an error" in line and line.rstrip().endswith(f"/submitted/{STUDENT}/{slug}")), None)
    section = lines if start is None else lines[start + 1:]
    end = next((i for i, line in enumerate(section) if line.startswith("[AutogradeApp |")), len(section))
    return next((line.strip()[:200] for line in reversed(section[:end])
                 if "Error" in line and "Traceback" not in line), "see the log")


def grade_parts(course: Path, notebooks: dict[str, Path], env: dict[str, str]) -> dict[str, bool]:
    """Autograde the notebooks (part -> file) in one nbgrader process, write their feedback pages in a second,
    and print each lesson's result; lesson code -> passed."""
    for slug, notebook in notebooks.items():
        submitted = course / "submitted" / STUDENT / slug
        submitted.mkdir(parents=True)
        shutil.copy(notebook, submitted / f"{slug}.ipynb")
    run = nbgrader(course, *[["autograde", slug, "--student", STUDENT, "--force"] for slug in notebooks], env=env)
    log = course / "autograde.log"
    log.write_text(run.stdout + run.stderr)
    graded = {slug: course / "autograded" / STUDENT / slug / f"{slug}.ipynb" for slug in notebooks}
    if any(path.is_file() for path in graded.values()):
        nbgrader(course, *[["generate_feedback", slug, "--student", STUDENT, "--force"]
                           for slug, path in graded.items() if path.is_file()], env=env)
    results = {}
    for slug, path in graded.items():
        if not path.is_file():
            print(f"\nPart {slug}: could not be graded ({failure_reason(run.stdout + run.stderr, slug)}); log: {log}")
            continue
        print(f"\nPart {slug}")
        for code, passed, message in verdicts(path):
            lesson = find_lesson(code)
            head = f"  {'✓' if passed else '✗'} {code} · {lesson.title}: {lesson.points if passed else 0}/{lesson.points}"
            print(head if passed else head + "\n      " + message.replace("\n", "\n      "))
            results[code] = passed
        page = course / "feedback" / STUDENT / slug / f"{slug}.html"
        if page.is_file():
            print(f"  feedback page: {page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default=os.environ.get("PART", ""),
                        help="a part number or slug, or several separated by commas (default: all)")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--course", type=Path, default=ROOT / "build" / "grade")
    args = parser.parse_args(argv)
    wanted = [p.strip() for p in str(args.part).split(",") if p.strip()]
    parts = [s for s in landed_parts() if not wanted or any(s.startswith(w.zfill(2)) or s == w for w in wanted)]
    if not parts:
        parser.error(f"no landed part matches {args.part!r}; parts: {landed_parts()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "PYTHONPATH"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", MCT_COURSE_DIR=str(args.course.resolve()))
    unsandboxed = None
    if not sandbox_wanted():
        unsandboxed = "MCT_SANDBOX=off"
    elif bwrap_path() is None:
        unsandboxed = "bubblewrap is not installed"
    else:
        problem = preflight()
        unsandboxed = f"the sandbox cannot run here: {problem}" if problem else None
    if unsandboxed:
        env["MCT_SANDBOX"] = "off"
        print(f"NOTE: grading WITHOUT a sandbox ({unsandboxed}): fine for your own notebooks")
    course = args.course.resolve()
    prepare(course, parts)
    made = nbgrader(course, *[["generate_assignment", slug, "--force"] for slug in parts], env=env)
    if made.returncode != 0:
        print(made.stderr[-2000:], file=sys.stderr)
        return 1
    notebooks = {}
    for slug in parts:
        notebook = args.notebooks / f"{slug}.ipynb"
        if notebook.is_file():
            notebooks[slug] = notebook
        else:
            print(f"\nPart {slug}: no notebook at {notebook}")
    results = grade_parts(course, notebooks, env) if notebooks else {}
    record_graded(results)
    earned = sum(find_lesson(code).points for code, ok in results.items() if ok)
    possible = sum(lesson.points for slug in parts for lesson in lessons_of(slug))
    print(f"\ngraded: {earned}/{possible} XP in {len(parts)} part(s); `make progress` shows every lesson")
    if unsandboxed:
        print(f"NOTE: graded WITHOUT a sandbox ({unsandboxed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
