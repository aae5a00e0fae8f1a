"""The README's claims that drift when the code changes, held against the code.

- the course's size: every count of lessons, parts (notebooks) and XP the README states, and the
  parts table's lesson ranges, equal the lesson table (``shared/lessons.py``);
- every ``make <target>`` it names (in code, inline or in a block) is a target of the Makefile;
- every ``MCT_*`` environment variable it names is read by the course's code;
- the output of ``make train-distributed`` it quotes is notebook 07's quote, which
  ``tests/test_torch_distributed.py`` holds to what the command prints (with torch installed);
- every path it names in *What lives where* exists (``NN_slug`` standing for each landed part),
  and so does every module it names there of ``grading/`` and of the helper package ``shared/``.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from course import ROOT, student_path, tool
from grading.course import landed_parts
from shared.lessons import LESSONS, PARTS, POINTS_PER_LESSON, TOTAL_POINTS, lessons_of

README = (ROOT / "README.md").read_text()
FENCED = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)  # indented in a list too

# Number words as the build writes them (tools/course_table.number_words), read back.
NUMBER_WORDS = {tool("course_table").number_words(n): n for n in range(100)}
# A number the README states as a fact: "about thirty notebooks" (a batch) is an estimate, not a count.
NUMBER = r"(?<!about )(\d[\d,]*|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"


def number(text: str) -> int:
    """``"40"``, ``"forty"`` or ``"Seven"`` as an int."""
    text = text.lower().replace(",", "")
    return int(text) if text.isdigit() else NUMBER_WORDS[text]


def claims(pattern: str, flags: int = re.IGNORECASE) -> list[tuple[str, int]]:
    """Every match of ``pattern`` in the README, whose :data:`NUMBER` groups (one matches) hold the
    number: (the words, the number)."""
    return [(match.group(0), number(next(group for group in match.groups() if group)))
            for match in re.finditer(pattern, README, flags)]


def code_spans(text: str = README) -> list[str]:
    """The README's code: each fenced block's lines and each inline code span (line breaks as spaces)."""
    blocks = [line for block in FENCED.findall(text) for line in block.splitlines()]
    inline = [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", FENCED.sub("", text))]
    return blocks + inline


def section(heading: str) -> str:
    """The README's text under ``heading`` (a ``##``/``###`` line), to the next heading of any level."""
    start = README.index(f"\n{heading}\n")
    following = re.search(r"^#{2,3} ", README[start + len(heading) + 2:], re.MULTILINE)
    return README[start:start + len(heading) + 2 + (following.start() if following else len(README))]


# --------------------------------------------------------------------------
# The course's size
# --------------------------------------------------------------------------

def test_every_count_of_lessons_is_the_lesson_tables():
    counts = claims(rf"\b{NUMBER}\s+lessons\b(?!\s+of\s+[Pp]art)")
    assert counts, counts  # "forty lessons" (make build writes that sentence), ...
    for words, count in counts:
        assert count == len(LESSONS), f"the README says {words!r}; shared/lessons.py has {len(LESSONS)} lessons"


def test_every_count_of_parts_and_notebooks_is_the_lesson_tables():
    counts = claims(rf"\b{NUMBER}\s+notebooks\b|\b(?:the|all)\s+{NUMBER}\s+(?:landed\s+)?parts\b")
    assert len(counts) >= 3, counts  # "Seven notebooks", "all seven parts", "the seven landed parts", ...
    for words, count in counts:
        assert count == len(PARTS), f"the README says {words!r}; shared/lessons.py has {len(PARTS)} parts"


def test_every_statement_of_xp_and_points_is_the_lesson_tables():
    per_lesson = claims(rf"\b{NUMBER} XP each|\+{NUMBER} XP\b|\b{NUMBER}-point test cell", 0)
    totals = claims(rf"\b{NUMBER} XP in all|XP out of {NUMBER}|`out_of` \({NUMBER}\)", 0)
    assert per_lesson and totals, (per_lesson, totals)
    for words, points in per_lesson:
        assert points == POINTS_PER_LESSON, f"the README says {words!r}; a lesson is worth {POINTS_PER_LESSON}"
    for words, points in totals:
        assert points == TOTAL_POINTS, f"the README says {words!r}; the course is worth {TOTAL_POINTS}"


def test_the_parts_table_gives_each_part_its_notebook_and_lessons():
    rows = re.findall(r"^\| (\d+) \| `notebooks/(\w+)\.ipynb`[^|]*\| (\d{3})–(\d{3}) \|", README, re.MULTILINE)
    assert [int(row[0]) for row in rows] == [part.number for part in PARTS], rows
    for (_, slug, first, last), part in zip(rows, PARTS):
        lessons = lessons_of(part.number)
        assert (slug, first, last) == (part.slug, lessons[0].code, lessons[-1].code), part


# --------------------------------------------------------------------------
# Commands and settings
# --------------------------------------------------------------------------

def makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", (ROOT / "Makefile").read_text(), re.MULTILINE))


def test_every_make_target_the_readme_names_is_in_the_makefile():
    named = {target for span in code_spans() for target in re.findall(r"(?:^|[\s;(])make ([a-z][\w-]*)", span)}
    assert {"lab", "test", "build", "grade", "torch", "train-distributed"} <= named, named
    missing = named - makefile_targets()
    assert not missing, f"the README names `make {'`, `make '.join(sorted(missing))}`, which the Makefile lacks"


def test_every_mct_variable_the_readme_names_is_read_by_the_code():
    named = set(re.findall(r"\bMCT_[A-Z0-9_]+\b", README))
    assert len(named) >= 5, named
    # The course's code, not its tests: a variable is read where its name stands as a string in a
    # file that reads the environment (some files name it once, in a constant, and read that).
    paths = [path for folder in ("shared", "grading", "tools", "torch_extra", "autograde")
             for path in (ROOT / folder).rglob("*.py")] + [ROOT / "nbgrader_config.py"]
    # grading/protocol.py names each variable that crosses the sandbox once, as the constant its readers use
    # (tests/test_protocol.py holds every MCT_ name of grading/ and tools/ to it)
    readers = [path.read_text() for path in paths if path == ROOT / "grading" / "protocol.py"
               or "os.environ" in path.read_text() or "getenv" in path.read_text()]
    unread = sorted(name for name in named if not any(f'"{name}"' in text for text in readers))
    assert not unread, f"the README names {unread}, which no module of the course reads"


def test_the_quoted_output_of_make_train_distributed_is_notebook_07s():
    real = section("## Real processes and PyTorch (optional)")
    block = FENCED.search(real[real.index("make train-distributed WORKERS=4"):]).group(1)
    quoted = [line.removeprefix("  ") for line in block.splitlines() if line.strip() != "..."]
    notebook = nbformat.read(student_path("07_memory_accounting"), as_version=4)
    closing = next(cell.source for cell in notebook.cells
                   if cell.cell_type == "markdown" and cell.source.startswith("## Beyond the simulator"))
    printed = re.search(r"^```text\n(.*?)^```", closing, re.DOTALL | re.MULTILINE).group(1).splitlines()
    assert len(quoted) >= 5, quoted
    starts = [index for index, line in enumerate(printed) if line == quoted[0]]
    assert any(printed[start:start + len(quoted)] == quoted for start in starts), (
        "the README quotes another output of `make train-distributed` than notebook 07 does (which "
        "tests/test_torch_distributed.py holds to what it prints): copy the lines from notebook 07")


# --------------------------------------------------------------------------
# What lives where
# --------------------------------------------------------------------------

WHAT_LIVES_WHERE = section("### What lives where")
TABLE = [[cell.strip() for cell in row.strip("|").split(" | ")]
         for row in WHAT_LIVES_WHERE.splitlines() if row.startswith("| ") and not row.startswith("| path |")]
TABLE = [row for row in TABLE if not set(row[0]) <= {"-", " "}]


def existing(path: str) -> bool:
    """Whether ``path`` (from the root; ``NN_slug`` for every landed part) exists."""
    if "NN_slug" not in path:
        return (ROOT / path).exists()
    return all((ROOT / path.replace("NN_slug", slug)).exists() for slug in landed_parts())


def test_the_table_is_read():
    assert len(TABLE) >= 20 and all(len(row) == 3 for row in TABLE), TABLE
    assert {"`shared/`", "`torch_extra/`", "`tools/build.py`"} <= {row[0] for row in TABLE}


@pytest.mark.parametrize("row", TABLE, ids=[row[0].strip("`") for row in TABLE])
def test_every_path_in_what_lives_where_exists(row):
    where, what, _ = row
    assert where.startswith("`") and existing(where.strip("`")), f"{where} does not exist"
    folder = where.strip("`") if where.endswith("/`") else None
    for span in re.findall(r"`([^`]+)`", what):
        if span.startswith(("make ", "nbgrader ", "build/")) or " " in span:
            continue  # a command, or what a command writes (build/ is made, never committed)
        if "/" in span:
            assert existing(span), f"{where}: {span} does not exist"
        elif folder and re.fullmatch(r"\w+(\.py)?", span):
            module = span.removesuffix(".py")
            assert (ROOT / folder / f"{module}.py").is_file() or (ROOT / folder / module).is_dir(), (
                f"{where} names {span}, which is not a module of {folder}")


def test_every_module_named_in_the_helper_packages_paragraph_exists():
    paragraph = WHAT_LIVES_WHERE[WHAT_LIVES_WHERE.index("The helper package `shared/`:"):]
    modules = [name for pair in re.findall(r"`(\w+)`(?:\s+and\s+`(\w+)`)?\s+\(", paragraph)
               for name in pair if name]  # "`lessons` (the 40 lessons ...", "`mlp` and `data` (the MLP ..."
    assert len(modules) >= 10 and "data" in modules, modules
    for module in modules:
        assert (ROOT / "shared" / f"{module}.py").is_file() or (ROOT / "shared" / module).is_dir(), (
            f"the README describes shared's module `{module}`, which shared/ does not have")
