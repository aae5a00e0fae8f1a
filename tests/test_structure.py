"""The structural gate: every lesson holds to DESIGN.md's fixed names and anatomy.

Checked on each landed part's nbgrader source notebook (built from its master)
and on the learner's copy, so that a lesson cannot quietly lose a section, its
hidden tests, its points or its stub.
"""

import re

import pytest

from course import master_headings, read, solved_path, source_path, student_path, tagged
from grading.course import landed_parts
from shared.lessons import TOTAL_POINTS, lessons_of

SECTIONS = ["Intuition", "Concepts", "Math", "Implementation", "Tests", "Common mistakes", "Checkpoint"]
LESSON_HEADING = re.compile(r"^## (\d{3}) · (.+)$", re.MULTILINE)
SECTION_HEADING = re.compile(r"^### (.+)$", re.MULTILINE)
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.DOTALL)


def lesson_cells(notebook, lesson):
    """The cells from the lesson's heading up to the next ``## `` heading."""
    cells, inside = [], False
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and re.search(r"^## ", cell.source, re.MULTILINE):
            inside = cell.source.lstrip().startswith(f"## {lesson.code} ·")
        if inside:
            cells.append(cell)
    return cells


def nbgrader(cell):
    return cell.metadata.get("nbgrader", {})


PARTS = landed_parts()
LESSONS = [tagged(lesson, slug, lesson) for slug in PARTS for lesson in lessons_of(slug)]


def test_at_least_part_one_has_landed():
    assert "01_mlp_core" in PARTS


@pytest.mark.parametrize("slug", PARTS)
def test_lessons_appear_in_catalogue_order_with_exact_headings(slug):
    notebook = read(source_path(slug))
    headings = [m.group(0) for cell in notebook.cells if cell.cell_type == "markdown"
                for m in LESSON_HEADING.finditer(cell.source)]
    assert headings == [lesson.heading for lesson in lessons_of(slug)]


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_lesson_has_the_seven_sections_in_order(slug, lesson):
    cells = lesson_cells(read(source_path(slug)), lesson)
    sections = [m.group(1).strip() for cell in cells if cell.cell_type == "markdown"
                for m in SECTION_HEADING.finditer(cell.source)]
    assert sections == SECTIONS


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_lesson_has_math_mistakes_and_a_self_check(slug, lesson):
    text = "\n".join(c.source for c in lesson_cells(read(source_path(slug)), lesson) if c.cell_type == "markdown")
    math = text.split("### Math", 1)[1].split("### Implementation", 1)[0]
    assert "$" in math, "the Math section has no MathJax"
    mistakes = text.split("### Common mistakes", 1)[1].split("### Checkpoint", 1)[0]
    assert mistakes.count("\n- **") >= 2, "fewer than two named common mistakes"
    checkpoint = text.split("### Checkpoint", 1)[1]
    assert "Self-check" in checkpoint
    recap = checkpoint.split("*Self-check:*", 1)[0].strip()
    assert len(recap.split()) >= 4, "the Checkpoint has no recap before its self-check (DESIGN: a recap and a question)"


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_lesson_has_one_stub_and_one_five_point_test_cell(slug, lesson):
    cells = lesson_cells(read(source_path(slug)), lesson)
    solutions = [c for c in cells if nbgrader(c).get("solution")]
    tests = [c for c in cells if nbgrader(c).get("grade")]
    assert len(solutions) == 1 and len(tests) == 1
    solution, test = solutions[0], tests[0]
    assert re.search(rf"^def {lesson.function}\(", solution.source, re.MULTILINE)
    assert '"""' in solution.source and "Returns" in solution.source, "docstring with shapes missing"
    assert "### BEGIN SOLUTION" in solution.source and "### END SOLUTION" in solution.source
    meta = nbgrader(test)
    assert meta["grade_id"] == lesson.grade_id and meta["points"] == 5 and meta["locked"]
    # the implementation comes before its tests
    assert cells.index(solution) < cells.index(test)


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_test_cell_has_visible_and_hidden_tests_of_its_own_function(slug, lesson):
    test = next(c for c in lesson_cells(read(source_path(slug)), lesson) if nbgrader(c).get("grade"))
    hidden = "".join(HIDDEN.findall(test.source))
    assert hidden, "no hidden-test region"
    visible = HIDDEN.sub("", test.source)
    assert re.search(rf"\b{lesson.function}\b", visible), "the visible tests never call the function"
    assert f'answer_hidden_cases("{lesson.code}", globals())' in hidden
    assert test.source.startswith("### BEGIN HIDDEN TESTS"), "the hidden cases are answered first"
    assert "assert True" not in test.source and "except" not in visible
    assert test.source.rstrip().endswith(f'lesson_passed("{lesson.code}")')


@pytest.mark.parametrize("slug", PARTS)
def test_notebook_opens_with_goals_locked_setup_and_progress_panel(slug):
    notebook = read(source_path(slug))
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# Part ")
    assert "Goals" in notebook.cells[0].source
    setup = notebook.cells[1]
    assert nbgrader(setup).get("locked") and nbgrader(setup).get("grade_id") == "setup"
    assert f'show_progress("{slug}")' in notebook.cells[2].source
    assert "summary" in notebook.cells[-1].source.lower()
    points = sum(nbgrader(c).get("points", 0) for c in notebook.cells)
    assert points == 5 * len(lessons_of(slug))
    assert notebook.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("slug", PARTS)
def test_student_copy_has_stubs_and_no_solutions_or_hidden_tests(slug):
    student = read(student_path(slug))
    source = read(source_path(slug))
    assert [nbgrader(c).get("grade_id") for c in student.cells] == [nbgrader(c).get("grade_id") for c in source.cells]
    for cell in student.cells:
        assert "BEGIN HIDDEN TESTS" not in cell.source and "BEGIN SOLUTION" not in cell.source
        assert "reference(" not in cell.source and "answer_hidden_cases" not in cell.source
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None
        if nbgrader(cell).get("solution"):
            assert cell.source.rstrip().endswith(
                'raise NotImplementedError("Not implemented yet: replace this line with your code.")')


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_student_stub_is_the_solution_cell_with_one_stub_per_region(slug, lesson):
    """Each ### BEGIN/END SOLUTION region becomes one stub; every other line (the def, the docstring, the
    comments that name the steps of a skeleton) reaches the learner as written."""
    def solution(path):
        return next(c.source for c in lesson_cells(read(path), lesson) if nbgrader(c).get("solution"))
    def stub(region):
        indent = region.group(1)
        return (f'{indent}# YOUR CODE HERE\n'
                f'{indent}raise NotImplementedError("Not implemented yet: replace this line with your code.")')
    expected = re.sub(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", stub, solution(source_path(slug)),
                      flags=re.MULTILINE | re.DOTALL)
    assert solution(student_path(slug)) == expected


@pytest.mark.parametrize("slug", PARTS)
def test_nothing_but_the_master_notebook_sits_in_the_nbgrader_source_folder(slug):
    # autograde copies every other file of source/<a>/ into the feedback students receive
    assert sorted(p.name for p in source_path(slug).parent.iterdir()) == [f"{slug}.ipynb"]


@pytest.mark.parametrize("slug", PARTS)
def test_solved_notebook_has_no_hidden_tests_and_every_lesson_passed(slug):
    solved = read(solved_path(slug))
    text = "".join(o.get("text", "") for c in solved.cells if c.cell_type == "code" for o in c.outputs)
    assert all("BEGIN HIDDEN TESTS" not in c.source for c in solved.cells)
    assert not any(o.output_type == "error" for c in solved.cells if c.cell_type == "code" for o in c.outputs)
    for lesson in lessons_of(slug):
        assert f"✓ Lesson {lesson.code}" in text


@pytest.mark.parametrize("slug", PARTS)
def test_markdown_math_delimiters_are_balanced(slug):
    for cell in read(source_path(slug)).cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"`[^`]*`", "", cell.source)       # code spans hold no math
        text = re.sub(r"\$\$.+?\$\$", "", text, flags=re.DOTALL)
        assert text.count("$") % 2 == 0, f"unbalanced $ in:\n{cell.source[:300]}"


def test_every_lesson_the_masters_write_is_worth_five_xp():
    assert TOTAL_POINTS == 5 * sum(len(codes) for codes in master_headings().values())


@pytest.mark.parametrize("slug, lesson", LESSONS)
def test_every_lesson_declares_hidden_cases_of_every_kind_its_contract_has(slug, lesson):
    """Each lesson's declaration draws cases, the same for the same seed, and at least 5 of them."""
    from grading.judge import lesson_spec
    from grading.spec import draw_cases
    spec = lesson_spec(lesson.code)
    first, again = draw_cases(spec, 7), draw_cases(spec, 7)
    assert len(first) >= 5
    assert [sorted(c.args) for c in first] == [sorted(c.args) for c in again]
    other = draw_cases(spec, 8)
    assert len(other) == len(first), "the number of cases must not depend on the seed"


NAMED_MODULE = re.compile(r"`shared\.(\w+)")


@pytest.mark.parametrize("slug", PARTS)
def test_no_helper_module_a_part_sends_the_learner_to_holds_a_later_lessons_answer(slug):
    """A module the text names (`shared.x`) may answer only lessons taught before the part.

    A helper marked ``@answers(...)`` computes a lesson's answer (shared.answers); its first code is
    the lesson that teaches it (later codes only lock it against delegation, as ``mlp.backward``
    for 017's checkpointed gradients). Read before that lesson, it gives the answer away.
    """
    import importlib
    first = lessons_of(slug)[0].code
    named = {module for cell in read(student_path(slug)).cells if cell.cell_type == "markdown"
             for module in NAMED_MODULE.findall(cell.source)}
    early = []
    for module_name in sorted(named):
        module = importlib.import_module(f"shared.{module_name}")
        for name, value in vars(module).items():
            codes = getattr(value, "answers_lessons", ())
            if codes and getattr(value, "__module__", "") == module.__name__ and min(codes) >= first:
                early.append(f"shared.{module_name}.{name} (lesson {min(codes)})")
    assert not early, f"{slug}'s text names modules holding answers of lessons not yet taught: {early}"
