"""Adversarial submissions, generated for every lesson of every landed part.

Each :class:`Adversary` is one student's notebook for one part with, per lesson,
the score it must get and what its feedback must say.  tests/test_nbgrader_loop.py
grades them all through the real nbgrader loop (tools/instructor.py, in parallel).

Kinds (``KINDS`` lists them with their descriptions):

- the honest baselines: the reference (full marks) and the untouched stubs (0);
- wrong answers: hard-coded for the visible tests, each catalogued mistake, NaN
  in the result, a wrong dtype, a wrong shape, a correct result computed by
  changing an input in place (each lesson loses its points and the feedback
  says why);
- damaged notebooks: an endless loop, a loop that swallows KeyboardInterrupt
  (the submission fails and is flagged; the others are graded), edited, deleted
  and markdown-turned test cells (restored and graded as the original), a
  corrupted file (flagged);
- cheats that try to turn a wrong answer into points: monkeypatching NumPy or
  the course's helpers (at definition or while being tested), redefining the
  assert-style helpers, faking modules, returning lying objects, writing the
  progress file, the gradebook or the reference, subprocesses, IPython's
  traceback and exception hooks, calling the hidden test's own reference, and
  taking over the kernel so that test cells do not run.  A different cheat in
  each lesson (lessons are graded independently), rotating so that every cheat
  meets several lessons and parts;
- reaching for secrets (the reference solutions, the hidden tests) or for the
  interpreter's internals (frames, trace hooks, the GC, ctypes, threads): each
  in its own submission, in one lesson; the lessons before keep their points,
  that lesson and every later one get none, whatever their answers.

Expected scores of the wrong-answer kinds come from running the lesson's test
cell in-process (tools/mutation.py's runner) with the same code: a probe that
also records whether the change applied at all (a lesson whose result holds no
float array cannot return NaN).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import nbformat

from course import (ROOT, grade_id_of, hard_coded_answer, make_submission, reference_code,
                    visible_test_answers)
from shared.lessons import Lesson, lessons_of
from shared.mistakes import mistakes_of

sys.path.insert(0, str(ROOT / "tools"))
from mutation import PartNotebook  # noqa: E402


@dataclass(frozen=True)
class Expect:
    """What one lesson must get: its score and words its feedback must contain."""
    score: float
    says: tuple[str, ...] = ()
    note: str = ""  # e.g. which cheat this lesson carries


@dataclass
class Adversary:
    kind: str
    slug: str
    notebook: nbformat.NotebookNode | str
    expected: dict[str, Expect]  # lesson code -> expectation
    fails: bool = False  # autograding this submission fails: listed for manual grading
    description: str = ""
    links: dict[str, str] | None = None  # file name -> what it links to, next to the notebook

    @property
    def student(self) -> str:
        return self.kind.replace("_", "-")


# --------------------------------------------------------------------------
# Code put into the notebooks
# --------------------------------------------------------------------------

HELPERS = r'''
# Helpers of the adversarial tests (tests/adversarial.py): turn a right answer into a wrong one.
import numpy as _adv_np
_adv_applied = []


def _adv_first(value, change):
    """``change`` applied to the first array or number (in tuples, lists, dicts) it changes."""
    new = change(value)
    if new is not None:
        return new, True
    if isinstance(value, (tuple, list)):
        items = list(value)
        for index, item in enumerate(items):
            new, done = _adv_first(item, change)
            if done:
                items[index] = new
                return (tuple(items) if isinstance(value, tuple) else items), True
    elif isinstance(value, dict):
        items = dict(value)
        for key, item in items.items():
            new, done = _adv_first(item, change)
            if done:
                items[key] = new
                return items, True
    return value, False


def _adv_is_float_array(x):
    return isinstance(x, _adv_np.ndarray) and _adv_np.issubdtype(x.dtype, _adv_np.floating)


def _adv_nan(x):
    if _adv_is_float_array(x) and x.size:
        y = x.copy()
        y.flat[0] = _adv_np.nan
        return y
    if isinstance(x, (float, _adv_np.floating)):
        return type(x)("nan")
    return None


def _adv_dtype(x):
    if _adv_is_float_array(x):
        return x.astype(_adv_np.float32 if x.dtype == _adv_np.float64 else _adv_np.float64)
    return None


def _adv_shape(x):
    return x[_adv_np.newaxis] if isinstance(x, _adv_np.ndarray) else None


_ADV_CHANGES = {"nan": _adv_nan, "dtype": _adv_dtype, "shape": _adv_shape}


def _adv_apply(kind, value):
    new, done = _adv_first(value, _ADV_CHANGES[kind])
    if done:
        _adv_applied.append(kind)
    return new


def _adv_mutate(args, kwargs):
    """Change the first non-empty array among the arguments in place."""
    def bump(x):
        if isinstance(x, _adv_np.ndarray) and x.size and x.flags.writeable:
            if x.dtype == bool:
                x.flat[0] = not x.flat[0]
            else:
                x.flat[0] += 1
            return x
        return None
    _, done = _adv_first([list(args), dict(kwargs)], bump)
    if done:
        _adv_applied.append("mutate")


def _adv_wrong(value):
    """Every number in the answer off by one: wrong, but well formed."""
    if isinstance(value, _adv_np.ndarray):
        if value.dtype == bool:
            return ~value
        return value + 1 if _adv_np.issubdtype(value.dtype, _adv_np.number) else value
    if isinstance(value, (bool, _adv_np.bool_)):
        return not value
    if isinstance(value, (int, float, _adv_np.number)):
        return value + 1
    if isinstance(value, tuple):
        return tuple(_adv_wrong(v) for v in value)
    if isinstance(value, list):
        return [_adv_wrong(v) for v in value]
    if isinstance(value, dict):
        return {k: _adv_wrong(v) for k, v in value.items()}
    return value
'''


def renamed_reference(slug: str, function: str) -> str:
    """The lesson's reference code with the function renamed ``_adv_reference_<function>``."""
    code = reference_code(slug, function)
    renamed, count = re.subn(rf"\bdef {function}\(", f"def _adv_reference_{function}(", code, count=1)
    assert count == 1, function
    return renamed


def wrapped(slug: str, function: str, body: str, preamble: str = "") -> str:
    """A solution cell: the renamed reference, ``preamble``, then ``def function(*args, **kwargs): body``."""
    indented = "\n".join("    " + line if line else line for line in body.strip("\n").splitlines())
    return (f"{renamed_reference(slug, function)}\n\n{preamble.strip()}\n\n"
            f"def {function}(*args, **kwargs):\n{indented}\n")


def call_reference(function: str) -> str:
    return f"_adv_reference_{function}(*args, **kwargs)"


def wrong(function: str) -> str:
    return f"return _adv_wrong({call_reference(function)})"


def with_helpers(notebook: nbformat.NotebookNode, extra: str = "") -> nbformat.NotebookNode:
    """Insert a learner cell with the helpers (and ``extra``) right after the set-up cell."""
    index = next(i for i, cell in enumerate(notebook.cells) if grade_id_of(cell) == "setup")
    cell = nbformat.v4.new_code_cell(HELPERS + ("\n" + extra if extra else ""))
    cell.id = "adversarial-helpers"
    notebook.cells.insert(index + 1, cell)
    return notebook


def submission(slug: str, answers: dict[str, str], default: str = "reference", extra: str = ""):
    return with_helpers(make_submission(slug, answers, default=default), extra)


# --------------------------------------------------------------------------
# Probing lessons in-process (for the wrong-answer kinds)
# --------------------------------------------------------------------------

_notebooks: dict[str, PartNotebook] = {}


def probe(slug: str, lesson: Lesson, solution: str) -> tuple[bool, list[str]]:
    """(does the lesson's test cell pass?, what the helpers applied) with ``solution`` in-process."""
    notebook = _notebooks.setdefault(slug, PartNotebook(slug))
    namespace = notebook.namespace({lesson.function: solution}, before=HELPERS)
    outcome = notebook.run_test(lesson.code, namespace)
    return outcome.passed, list(namespace.get("_adv_applied", []))


# --------------------------------------------------------------------------
# The kinds
# --------------------------------------------------------------------------

def all_lessons(slug: str, score: float, *says: str, note: str = "") -> dict[str, Expect]:
    return {lesson.code: Expect(score, says, note) for lesson in lessons_of(slug)}


def baselines(slug: str) -> list[Adversary]:
    lessons = lessons_of(slug)
    answers = visible_test_answers(slug)
    found = [
        Adversary("reference", slug, make_submission(slug, default="reference"), all_lessons(slug, 5),
                  description="the reference solutions"),
        Adversary("stubs", slug, make_submission(slug, default="stub"),
                  all_lessons(slug, 0, "Not implemented yet"), description="the release, untouched"),
        Adversary("hardcoded", slug,
                  make_submission(slug, {f: hard_coded_answer(f, a) for f, a in answers.items()},
                                  default="reference"),
                  all_lessons(slug, 0), description="answers hard-coded for the visible tests "
                                                     "(nbgrader validate passes them)"),
    ]
    most = max(len(mistakes_of(lesson.function)) for lesson in lessons)
    for k in range(most):
        chosen = {lesson.function: mistakes_of(lesson.function)[k] for lesson in lessons
                  if len(mistakes_of(lesson.function)) > k}
        answers_k = {f: (f"def {f}(*args, **kwargs):\n    from shared.mistakes import mistakes_of\n"
                         f"    return mistakes_of({f!r})[{k}].compute(*args, **kwargs)\n") for f in chosen}
        expected = {lesson.code: (Expect(0, (f"common mistake: {chosen[lesson.function].name}",),
                                         chosen[lesson.function].name)
                                  if lesson.function in chosen else Expect(5)) for lesson in lessons}
        found.append(Adversary(f"mistake_{k + 1}", slug, make_submission(slug, answers_k, default="reference"),
                               expected, description=f"the {k + 1}th catalogued mistake of every lesson"))
    return found


WRONG_OUTPUTS = {
    # kind: (what the wrapper does, words the feedback must contain, description)
    "returns_nan": ('return _adv_apply("nan", {call})', ("NaN",), "a NaN in the result"),
    "wrong_dtype": ('return _adv_apply("dtype", {call})', ("dtype",), "float32 for float64 (or back)"),
    "wrong_shape": ('return _adv_apply("shape", {call})', ("shape",), "an extra leading axis"),
    "mutates_input": ("result = {call}\n_adv_mutate(args, kwargs)\nreturn result", ("changed its input",),
                      "the right result, computed by changing an input in place"),
}


def wrong_outputs(slug: str) -> list[Adversary]:
    found = []
    for kind, (template, says, description) in WRONG_OUTPUTS.items():
        answers, expected = {}, {}
        for lesson in lessons_of(slug):
            body = template.format(call=call_reference(lesson.function))
            answers[lesson.function] = wrapped(slug, lesson.function, body)
            passed, applied = probe(slug, lesson, answers[lesson.function])
            assert not (applied and passed), f"{slug} {lesson.code} {kind}: the hidden tests miss it"
            expected[lesson.code] = Expect(0, says) if applied else \
                Expect(5 if passed else 0, note="does not apply: nothing to change")
        found.append(Adversary(kind, slug, submission(slug, answers), expected, description=description))
    return found


def damaged(slug: str) -> list[Adversary]:
    lessons = lessons_of(slug)
    first = lessons[0]
    found = [
        Adversary("endless_loop", slug,
                  make_submission(slug, {first.function: wrapped(slug, first.function, "while True:\n    pass")},
                                  default="reference"),
                  {**all_lessons(slug, 5), first.code: Expect(0, ("CellTimeoutError",), "while True: pass")},
                  description="`while True: pass` in the first lesson: interrupted, the rest graded"),
        Adversary("swallows_interrupt", slug,
                  make_submission(slug, {first.function: wrapped(
                      slug, first.function,
                      "while True:\n    try:\n        while True:\n            pass\n"
                      "    except KeyboardInterrupt:\n        pass")}, default="reference"),
                  all_lessons(slug, 0), fails=True,
                  description="a loop that swallows KeyboardInterrupt: the submission fails and is "
                              "flagged; the others are graded"),
        Adversary("corrupt_notebook", slug, nbformat.writes(make_submission(slug, default="reference"))[:2000],
                  all_lessons(slug, 0), fails=True, description="a truncated notebook file"),
        Adversary("linked_secrets", slug, make_submission(slug, default="stub"), all_lessons(slug, 0), fails=True,
                  links={"reference.py": str(ROOT / "solutions" / f"{slug}.py"),
                         "tests.ipynb": str(ROOT / "autograde" / "source" / slug / f"{slug}.ipynb")},
                  description="links to the reference and the hidden tests next to the notebook "
                              "(nbgrader would copy their text in): not graded, flagged"),
    ]
    # Odd lessons keep the stub, even ones the reference: a restored test cell grades them apart.
    def alternate(lesson_index: int) -> Expect:
        return Expect(5) if lesson_index % 2 == 0 else Expect(0, ("Not implemented yet",))
    even = {lesson.function: reference_code(slug, lesson.function) for i, lesson in enumerate(lessons) if i % 2 == 0}
    for kind, description in (("edited_test_cells", "every test cell replaced by its last line"),
                              ("deleted_test_cells", "every test cell deleted"),
                              ("markdown_test_cells", "every test cell turned into markdown")):
        notebook = make_submission(slug, even, default="stub")
        tests = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]
        for cell in tests:
            code = grade_id_of(cell).split("_")[1]
            if kind == "edited_test_cells":
                cell.source = f'lesson_passed("{code}")'
            elif kind == "markdown_test_cells":
                cell.cell_type = "markdown"
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
        if kind == "deleted_test_cells":
            notebook.cells = [cell for cell in notebook.cells if cell not in tests]
        found.append(Adversary(kind, slug, notebook, {l.code: alternate(i) for i, l in enumerate(lessons)},
                               description=description + "; odd lessons left as stubs"))
    return found


# Cheats that try to turn a wrong answer into points, one per lesson.  Each is
# (name, preamble at definition time, body of the function); {f} is the function, {slug} the part.
CHEATS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("numpy_patched", """
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.isfinite = lambda x, *a, **k: np.ones(np.shape(x), dtype=bool)
np.abs = np.absolute = lambda x, *a, **k: np.zeros(np.shape(x))
np.testing.assert_allclose = lambda *a, **k: None
np.testing.assert_array_equal = lambda *a, **k: None
""", "{wrong}", ("Grading guard: restored",)),
    ("numpy_patched_while_tested", "", """
import numpy
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
numpy.isfinite = lambda x, *a, **k: numpy.ones(numpy.shape(x), dtype=bool)
numpy.subtract = lambda a, b, *r, **k: numpy.zeros(numpy.broadcast(a, b).shape)
{wrong}""", ()),
    ("checking_patched", """
import shared.checking as _c
_c.difference = lambda *a, **k: None
_c.array_difference = lambda *a, **k: None
_c.check_equal = lambda *a, **k: None
_c.check_not_mutated = lambda *a, **k: None
_c.check_call = lambda function, args, expected, **k: function(*args.values())
""", "{wrong}", ()),
    ("checking_patched_while_tested", "", """
import shared.checking as _c
_c.difference = lambda *a, **k: None
_c.check_equal = lambda *a, **k: None
_c.check_not_mutated = lambda *a, **k: None
{wrong}""", ()),
    ("grading_patched", """
import shared.grading as _g
_g.check_matches_reference = lambda function, reference, args, **k: function(*args.values())
_g.expect_error = lambda *a, **k: None
_g.isolate_lesson = lambda *a, **k: None
""", "{wrong}", ()),
    ("helpers_redefined", """
def check(*args, **kwargs):
    pass
def check_call(function, args, expected, **kwargs):
    return expected
def check_equal(*args, **kwargs):
    pass
def check_shape(*args, **kwargs):
    pass
""", "{wrong}", ()),
    ("helpers_redefined_while_tested", "", """
globals().update(check=lambda *a, **k: None, check_equal=lambda *a, **k: None,
                 check_call=lambda function, args, expected, **k: expected,
                 check_matches_reference=lambda function, reference, args, **k: function(*args.values()),
                 expect_error=lambda *a, **k: None)
{wrong}""", ()),
    ("fake_modules", """
import builtins as _b, sys as _s, types as _t
_fake = _t.ModuleType("shared.grading")
_fake.check_matches_reference = lambda function, reference, args, **k: function(*args.values())
_fake.expect_error = _fake.isolate_lesson = lambda *a, **k: None
_fake.reference = lambda *a, **k: _t.SimpleNamespace()
_s.modules["shared.grading"] = _fake
_real_import = _b.__import__
_b.__import__ = lambda name, *a, **k: _fake if name == "shared.grading" else _real_import(name, *a, **k)
""", "{wrong}", ()),
    ("lying_array", """
class _AdvLiar(np.ndarray):
    def astype(self, *args, **kwargs):
        return self
    def __eq__(self, other):
        return np.ones(np.broadcast(np.asarray(self), other).shape, dtype=bool)
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, np.ndarray) else x for x in inputs]
        result = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc in (np.isfinite, np.equal, np.less_equal):
            return np.ones(np.shape(result), dtype=bool)
        if ufunc in (np.isnan, np.not_equal):
            return np.zeros(np.shape(result), dtype=bool)
        if ufunc in (np.subtract, np.absolute):
            return np.zeros(np.shape(result))
        return result
def _adv_lie(value):
    if isinstance(value, np.ndarray):
        return value.view(_AdvLiar)
    if isinstance(value, tuple):
        return tuple(_adv_lie(v) for v in value)
    if isinstance(value, list):
        return [_adv_lie(v) for v in value]
    if isinstance(value, dict):
        return {k: _adv_lie(v) for k, v in value.items()}
    return value
""", "return _adv_lie(_adv_wrong({call}))", ()),
    ("lying_object", """
class _AdvLiarObject:
    shape, dtype, ndim = (), np.dtype(float), 0
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __len__(self):
        return 0
""", "return _AdvLiarObject()", ("cannot compare",)),
    ("progress_forged", """
import json as _json
from shared.progress import progress_file as _progress_file
from shared.lessons import LESSONS as _LESSONS
try:
    _progress_file().write_text(_json.dumps({"passed": [l.code for l in _LESSONS]}))
except Exception:
    pass
""", "{wrong}", ()),
    ("gradebook_written", """
import sqlite3 as _sqlite3
try:
    _db = _sqlite3.connect("../../../gradebook.db")
    _db.execute("UPDATE grade SET manual_score = 5")
    _db.commit()
except Exception:
    pass
""", "{wrong}", ()),
    ("reference_overwritten", """
from shared.grading import solutions_dir as _solutions_dir
try:
    with open(_solutions_dir() / "{slug}.py", "a") as _handle:
        _handle.write("\\n{f} = lambda *a, **k: None  # the cheat's own reference\\n")
except Exception:
    pass
""", "{wrong}", ()),
    ("subprocess", """
import subprocess as _sp, sys as _s
try:
    _sp.run([_s.executable, "-c", "import pathlib; pathlib.Path('cheat-was-here').touch()"], check=True)
except Exception:
    pass
""", "{wrong}", ()),
    ("hidden_reference_used", "", 'return getattr(globals()["_ref"], "{f}")(*args, **kwargs)',
     ("called the reference solution",)),
    ("hidden_reference_replaced", """
def _adv_same_as_mine_{f}(*args, **kwargs):
    return _adv_wrong(_adv_reference_{f}(*args, **kwargs))
""", """
if "_ref" in globals():  # the hidden test's reference: make it agree with this answer from now on
    setattr(globals()["_ref"], "{f}", _adv_same_as_mine_{f})
{wrong}""", ()),
    ("traceback_silenced", """
get_ipython().showtraceback = lambda *a, **k: None
get_ipython()._showtraceback = lambda *a, **k: None
""", "{wrong}", ()),
    ("custom_exception_handler", """
get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)
""", "{wrong}", ()),
]

# Reaching for secrets or for the interpreter's internals: the lessons from there on earn nothing.
SECRETS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("reference_loaded_while_tested", "",
     'from shared.grading import reference\nreturn getattr(reference("{slug}"), "{f}")(*args, **kwargs)',
     ("loading the reference solutions",)),
    ("reference_imported", """
import importlib.util as _iu
from shared.grading import solutions_dir as _solutions_dir
try:
    _spec = _iu.spec_from_file_location("_adv_cheat", _solutions_dir() / "{slug}.py")
    _R = _iu.module_from_spec(_spec)
    _spec.loader.exec_module(_R)
except Exception:
    _R = None
""", 'return getattr(_R, "{f}", _adv_reference_{f})(*args, **kwargs)', ("reading",)),
    ("reference_read", """
from shared.grading import solutions_dir as _solutions_dir
_R = {}
try:
    exec(open(_solutions_dir() / "{slug}.py").read(), _R)
except Exception:
    pass
""", 'return _R.get("{f}", _adv_reference_{f})(*args, **kwargs)', ("reading",)),
    ("hidden_tests_read", """
import glob as _glob, shared as _shared
from pathlib import Path as _Path
_found = []
_masters = _Path(_shared.__file__).resolve().parent.parent / "autograde" / "masters"
for _path in _glob.glob("../../../source/*/*.ipynb") + sorted(map(str, _masters.glob("*.py"))):
    try:
        _found.append(open(_path).read())
    except Exception:
        pass
""", "return {call}", ("reading",)),
    ("frames_peeked", "", """
import sys as _s
_caller = _s._getframe(1)
return {call}""", ("frame",)),
    ("trace_hook", """
import sys as _s
try:
    _s.settrace(lambda *a: None)
except Exception:
    pass
""", "return {call}", ("settrace",)),
    ("gc_searched", """
import gc as _gc
try:
    _gc.get_objects()
except Exception:
    pass
""", "return {call}", ("gc.get_objects",)),
    ("ctypes_used", """
import ctypes as _ct
try:
    _ct.CDLL(None)
except Exception:
    pass
""", "return {call}", ("ctypes",)),
    ("thread_started", """
import threading as _th, time as _time, shared.checking as _c
def _adv_meddle():
    while True:  # keeps switching the comparisons off while the checks run
        _c.difference = lambda *a, **k: None
        _time.sleep(0.001)
_th.Thread(target=_adv_meddle, daemon=True).start()
""", "return {call}", ("thread",)),
]


def cheat_cell(slug: str, function: str, preamble: str, body: str) -> str:
    fill = {"{f}": function, "{slug}": slug, "{wrong}": wrong(function), "{call}": call_reference(function)}

    def filled(text: str) -> str:
        for key, value in fill.items():
            text = text.replace(key, value)
        return text
    return wrapped(slug, function, filled(body), filled(preamble))


def _offset(slug: str) -> int:
    """Where a part's rotation starts, so that the parts together meet every cheat several times."""
    from course import built_parts
    offset = 0
    for other in built_parts():
        if other == slug:
            return offset
        offset += 2 * len(lessons_of(other))
    return offset


def cheats(slug: str) -> list[Adversary]:
    lessons = lessons_of(slug)
    found = []
    for round_ in range(2):
        answers, expected = {}, {}
        for index, lesson in enumerate(lessons):
            name, preamble, body, says = CHEATS[(_offset(slug) + round_ * len(lessons) + index) % len(CHEATS)]
            answers[lesson.function] = cheat_cell(slug, lesson.function, preamble, body)
            if name != "hidden_reference_used":
                passed, _ = probe(slug, lesson, wrapped(slug, lesson.function, wrong(lesson.function)))
                assert not passed, f"{slug} {lesson.code}: the wrong answer is not wrong"
            expected[lesson.code] = Expect(0, says, name)
        found.append(Adversary(f"cheats_{'ab'[round_]}", slug, submission(slug, answers), expected,
                               description="a different cheat in each lesson, each with a wrong answer"))
    takeover = """
import IPython.core.interactiveshell as _adv_shell
_adv_ip = get_ipython()
_adv_run_cell = _adv_ip.run_cell
def _adv_fake(raw_cell, *args, **kwargs):
    return _adv_run_cell("pass" if "lesson_passed" in raw_cell else raw_cell, *args, **kwargs)
async def _adv_fake_async(raw_cell, *args, **kwargs):
    raw_cell = "pass" if "lesson_passed" in raw_cell else raw_cell
    return await _adv_shell.InteractiveShell.run_cell_async(_adv_ip, raw_cell, *args, **kwargs)
_adv_ip.run_cell, _adv_ip.run_cell_async = _adv_fake, _adv_fake_async
"""
    found.append(Adversary("kernel_takeover", slug, submission(slug, {}, default="stub", extra=takeover),
                           all_lessons(slug, 0, "GradingError"),
                           description="IPython's run_cell replaced so that test cells never run "
                                       "(stubs everywhere)"))
    return found


def secrets(slug: str, first_part: bool) -> list[Adversary]:
    """In the first landed part every secret kind; in the others one, in rotation."""
    lessons = lessons_of(slug)
    at = min(len(lessons) // 2, len(lessons) - 1)  # lessons before keep their points
    chosen = SECRETS if first_part else [SECRETS[_offset(slug) % len(SECRETS)]]
    found = []
    for name, preamble, body, says in chosen:
        target = lessons[at]
        notebook = submission(slug, {target.function: cheat_cell(slug, target.function, preamble, body)})
        expected = {lesson.code: Expect(5) if i < at else
                    Expect(0, ("Grading guard",) + (says if i == at else ()), name if i == at else "after it")
                    for i, lesson in enumerate(lessons)}
        found.append(Adversary(name, slug, notebook, expected,
                               description=f"in lesson {target.code}: {name.replace('_', ' ')}"))
    return found


def adversaries(slug: str, first_part: bool = False) -> list[Adversary]:
    """Every adversarial submission of a part."""
    return baselines(slug) + wrong_outputs(slug) + damaged(slug) + cheats(slug) + secrets(slug, first_part)


KINDS = {
    "reference": "the reference solutions",
    "stubs": "the release, untouched",
    "hardcoded": "answers hard-coded for the visible tests",
    "mistake_k": "the k-th catalogued mistake of every lesson",
    **{kind: text for kind, (_, _, text) in WRONG_OUTPUTS.items()},
    "endless_loop": "while True: pass",
    "swallows_interrupt": "a loop that swallows KeyboardInterrupt",
    "corrupt_notebook": "a truncated notebook file",
    "linked_secrets": "links to the reference and the hidden tests in the submission folder",
    "edited_test_cells": "test cells edited", "deleted_test_cells": "test cells deleted",
    "markdown_test_cells": "test cells turned into markdown",
    "cheats_a/b": "one cheat per lesson: " + ", ".join(name for name, *_ in CHEATS),
    "kernel_takeover": "test cells never run",
    **{name: "a secret or the interpreter's internals" for name, *_ in SECRETS},
}
