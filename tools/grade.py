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
import sys
from pathlib import Path

from grading import nbgrader_cli

nbgrader_cli.skip_iri_grammars()  # before nbformat is imported (grading/nbgrader_cli.py)

# The grading itself is grading.private_course's (the course's validator grades the same way); this is the command.

from grading.course import ROOT, landed_parts  # noqa: E402
from grading.private_course import (STUDENT, autograde, failure_reason, feedback, grading_env,  # noqa: E402
                                    graded_notebook, nbgrader, part_of_notebook, prepare, release,
                                    released_notebook, saved_as_another_part, submit,
                                    unsandboxed_reason, verdicts)
from shared.lessons import lesson as find_lesson, lessons_of  # noqa: E402
from shared.progress import record_graded  # noqa: E402


def grade_parts(course: Path, notebooks: dict[str, Path], env: dict[str, str]) -> dict[str, bool] | None:
    """Release the parts of ``notebooks`` (part -> file), grade each and write its feedback page, all in one
    nbgrader process (each one takes about two seconds to start), then print each lesson's result; lesson
    code -> passed.  None when the release failed (the course's own problem, not the learner's: said on stderr)."""
    for slug, notebook in notebooks.items():
        submit(course, slug, notebook)
    run = nbgrader(course, *[release(slug) for slug in notebooks], *[autograde(slug) for slug in notebooks],
                   *[feedback(slug) for slug in notebooks], env=env)
    log = course / "nbgrader.log"
    log.write_text(run.stdout + run.stderr)
    if not all(released_notebook(course, slug).is_file() for slug in notebooks):
        releasing = run.stderr.split("[AutogradeApp |", 1)[0]  # what nbgrader said before it went on to grade
        print(f"the course's notebooks could not be released (log: {log}):\n{releasing[-2000:]}", file=sys.stderr)
        return None
    results = {}
    for slug in notebooks:
        path = graded_notebook(course, slug)
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


def print_if_another_part(notebook: Path, slug: str) -> None:
    """Say so when the notebook that is graded as part ``slug`` holds another part's lessons (one part saved
    under another's name): graded as ``slug`` it scores nothing, and the lessons' verdicts alone would not say
    why."""
    try:
        held = part_of_notebook(notebook)
    except ValueError:
        return  # not a notebook of one part: grading says what it is
    why = saved_as_another_part(notebook, held)
    if why:
        print(f"\nNOTE, part {slug}: {why}")


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
    course = args.course.resolve()
    unsandboxed = unsandboxed_reason()
    env = grading_env(course, unsandboxed)
    if unsandboxed:
        print(f"NOTE: grading WITHOUT a sandbox ({unsandboxed}): fine for your own notebooks")
    prepare(course, parts)
    notebooks = {}
    for slug in parts:
        notebook = args.notebooks / f"{slug}.ipynb"
        if notebook.is_file():
            notebooks[slug] = notebook
            print_if_another_part(notebook, slug)
        else:
            print(f"\nPart {slug}: no notebook at {notebook}")
    results = grade_parts(course, notebooks, env) if notebooks else {}
    if results is None:
        return 1
    record_graded(results)
    earned = sum(find_lesson(code).points for code, ok in results.items() if ok)
    possible = sum(lesson.points for slug in parts for lesson in lessons_of(slug))
    print(f"\ngraded: {earned}/{possible} XP in {len(parts)} part(s); `make progress` shows every lesson")
    if unsandboxed:
        print(f"NOTE: graded WITHOUT a sandbox ({unsandboxed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
