"""The rules for graded code (shared/policy.py) and how the judge applies them (grading/rules.py).

Every honest answer keeps them: every solved notebook's cells, every reference solution, every
right answer and plausible answer of the catalogue (tests/plausible.py). Every door out of plain
computation that an attack used breaks them, with the construct and its line named. In a notebook,
a cell that breaks them is placed in its lesson's region or outside every lesson.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import nbformat
import pytest

from course import read, solved_path, source_path, student_path
from grading.course import landed_parts
from grading import rules
from shared.policy import ALLOWED_MODULES, RULES_POINTER, Break, check_source, course_imports, describe

PARTS = landed_parts()
COURSE = course_imports("import numpy as np\nimport matplotlib.pyplot as plt\nfrom shared import mlp\n"
                        "from shared.checking import check, call\nfrom shared.cluster import Cluster\n"
                        "from grading.harness import answer_hidden_cases\n")


def constructs(source: str, course: dict[str, str] | None = COURSE) -> list[str]:
    return [b.construct for b in check_source(textwrap.dedent(source), course=course)]


# --------------------------------------------------------------------------
# Honest code keeps the rules
# --------------------------------------------------------------------------

HONEST = {
    "numpy and the helper": """
        import numpy as np
        from shared import mlp
        def f(X, params):
            out, cache = mlp.forward(X, params)
            return np.maximum(out, 0), {key: value.copy() for key, value in cache.items()}
    """,
    "a cluster passed in": """
        def f(arrays, cluster=None):
            with cluster.round():
                cluster.send(0, 1, arrays[0])
            return [cluster.receive(1, 0)], cluster.ledger.summary()
    """,
    "a learner's own private helper and getattr with a constant": """
        def _check(x):
            return getattr(x, "dtype", None)
        def f(x):
            return _check(x)
    """,
    "a local that shadows a course name": """
        def f(calls):
            return [call(2) for call in calls]
    """,
    "math, itertools, functools, dataclasses.replace": """
        import math, itertools, functools
        from dataclasses import replace
        def f(config, xs):
            return replace(config, steps=math.ceil(2.5)), list(itertools.accumulate(xs)), functools.reduce(max, xs)
    """,
    "match with literal, sequence, mapping and self-matching class patterns": """
        def f(x):
            match x:
                case 0 | 1:
                    return "bit"
                case [first, *rest]:
                    return first, rest
                case {"steps": steps, **others}:
                    return steps, others
                case float(value) if value > 0:
                    return value
                case np.ndarray(shape=(n,), dtype=dtype):
                    return n, dtype
                case _:
                    return None
    """,
    "type(x) compared, a format string with plain fields": """
        def f(x, n):
            if type(x) is float or type(x) == int:
                return "{} of {n:.3f}".format(x, n=n), type(x)("nan")
            return f"{x!r:>10}"
    """,
    "from __future__ import annotations and type hints": """
        from __future__ import annotations
        import numpy as np
        def f(x: np.ndarray) -> np.ndarray:
            assert isinstance(x, (list, np.ndarray)) or type(x) is np.ndarray
            return x * 2
    """,
    # Session 16 (honest learners): type hints of every kind, without from __future__ import annotations.
    "comparisons of types and hints of classes and typing's forms": """
        import typing
        def f(x: typing.Annotated[np.ndarray, "shape (n,)"], y: "np.ndarray | None" = None,
              z: typing.Union[np.ndarray, float, None] = None) -> tuple[np.ndarray, ...]:
            if type(x) in (int, float) or type(x) != type(y) or type(x) == np.ndarray or type(x) not in {bool}:
                raise TypeError(f"got {type(x).__name__}")
            return (x,)
    """,
    "np.ndarray inside a type hint": """
        def f(x: np.ndarray | None, grads: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
            shards: list[np.ndarray] = []
            return [(x, x)] if x is not None else []
    """,
    "typing's hints and numbers' types": """
        import numbers
        from typing import Optional, Sequence, Callable, Any
        import typing
        def f(x: Optional[np.ndarray], sizes: Sequence[int], g: Callable[[float], float] = abs,
              k: typing.Union[int, float] = 1) -> typing.Tuple[Any, ...]:
            if not isinstance(k, numbers.Real):
                raise TypeError(f"k must be a number, got {type(k).__name__}")
            return tuple(sizes)
    """,
    "the type of a value in a message": """
        def f(x):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"expected an array, got {type(x)} ({type(x).__name__}, {f.__name__})")
            print(type(x), repr(type(x)))
            return np.finfo(np.float16).smallest_normal, np.finfo(x.dtype).bits, np.finfo(np.float32).precision
    """,
}


@pytest.mark.parametrize("name", HONEST)
def test_honest_code_keeps_the_rules(name):
    assert constructs(HONEST[name]) == []


@pytest.mark.parametrize("slug", PARTS)
def test_every_solution_and_the_learners_copy_keep_the_rules(slug):
    """Every code cell of the solved notebook and of the learner's copy that the learner may change."""
    imports = rules.course_cells(slug).imports
    for path in (solved_path(slug), student_path(slug)):
        for cell in read(path).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("solution"):
                assert check_source(cell.source, course=imports) == [], (path.name, cell.source[:200])


def _honest_catalogue():
    from plausible import PLAUSIBLE, RIGHT
    for table in (RIGHT, PLAUSIBLE):
        for code, entries in table.items():
            for name, function in entries:
                yield pytest.param(code, function, id=f"{code}-{name}")


@pytest.mark.parametrize("code, function", list(_honest_catalogue()))
def test_every_right_and_plausible_answer_of_the_catalogue_keeps_the_rules(code, function):
    """A learner's answer, right or wrong in its values, is written in plain code: the rules never
    stand between it and its verdict (tests/plausible.py, as the visible tests read it, in its part's
    notebook: the names its set-up cell imports are the course's)."""
    import plausible
    from shared.lessons import lesson
    source = plausible.source_of(function)
    # The modules the catalogue's answers use as globals, as a learner imports them in a cell of their own.
    own = {name: path for name, path in course_imports(Path(plausible.__file__).read_text()).items()
           if path.split(".")[0] in ("math", "numpy")}
    course = {**rules.course_cells(lesson(code).part.slug).imports, **own}
    assert check_source(source, course=course) == [], source


# --------------------------------------------------------------------------
# The doors out of plain computation break them
# --------------------------------------------------------------------------

ATTACKS = {  # what the attacks of tests/adversarial.py (and the issue that found them) used
    "exec of base64": ("import base64\nexec(base64.b64decode('aW1wb3J0IG9z'))", {"import base64", "exec"}),
    "__import__ of a string": ("__import__('os').system('id')", {"__import__"}),
    "ctypes": ("import ctypes", {"import ctypes"}),
    "subprocess": ("from subprocess import run", {"from subprocess import ..."}),
    "importlib": ("import importlib\nimportlib.import_module('os')", {"import importlib"}),
    "the grading harness": ("import grading.harness as h\nh.collect_answers = None",
                            {"import grading.harness", ".collect_answers = ..."}),
    "the harness's name from the test cell": ("answer_hidden_cases('005', {})", {"answer_hidden_cases"}),
    "get_ipython hooks": ("get_ipython().events.register('post_run_cell', print)", {"get_ipython"}),
    "get_ipython bound first": ("if False:\n    get_ipython = None\nget_ipython()", {"get_ipython"}),
    "display with a display id": ("display({'x': 1}, raw=True, display_id='a', update=True)", {"display"}),
    "IPython.display": ("from IPython.display import display", {"from IPython.display import ..."}),
    "tracemalloc": ("import tracemalloc\ntracemalloc.stop()", {"import tracemalloc"}),
    "tracemalloc through the helper": ("import shared.memory as m\nm.tracemalloc.stop()", {".tracemalloc"}),
    "gc": ("import gc\ngc.get_objects()", {"import gc"}),
    "/proc through open": ("open('/proc/self/environ').read()", {"open"}),
    "dunder attribute": ("().__class__.__base__.__subclasses__()", {".__class__", ".__base__", ".__subclasses__"}),
    "private attribute": ("cluster._ledger._record_round([])", {"._ledger", "._record_round"}),
    "getattr with a computed name": ("getattr(x, '__cl' + 'ass__')", {"getattr"}),
    "getattr with a private name": ("getattr(x, '_ledger')", {"._ledger"}),
    "getattr passed around": ("f = getattr\nf(x, 'y')", {"getattr"}),
    "setattr": ("setattr(np, 'shares_memory', None)", {"setattr"}),
    "attribute assignment": ("import numpy as np\nnp.shares_memory = lambda a, b: False", {".shares_memory = ..."}),
    "attribute deletion": ("del cluster.ledger", {"del .ledger"}),
    "vars and globals": ("vars(np)['x'] = 1\nglobals()['y'] = 2", {"vars", "globals"}),
    "a dunder string": ("X = type('X', (), {'__array_interface__': {}})",
                        {"'__array_interface__'", "type(name, bases, namespace)"}),
    "a dunder keyword": ("dict(__array_interface__=1)", {"__array_interface__=..."}),
    "raw memory through numpy": ("import numpy as np\nnp.lib.stride_tricks.as_strided(x, (9,), (0,))",
                                 {".lib", ".stride_tricks", ".as_strided"}),
    "an array over a buffer": ("np.ndarray((4,), buffer=b)", {"ndarray(...)"}),
    "resize under other arrays": ("x.resize((10,), refcheck=False)", {"refcheck=..."}),
    "frombuffer and ctypes of an array": ("np.frombuffer(x.ctypes)", {".frombuffer", ".ctypes"}),
    "pickle through numpy": ("np.load('x.npy', allow_pickle=True)", {".load"}),
    "a frame's globals": ("def g():\n    yield 1\ng().gi_frame.f_globals", {".gi_frame", ".f_globals"}),
    "setattr in disguise": ("import functools\nfunctools.update_wrapper(np, f)", {".update_wrapper"}),
    "the whole helper package": ("import shared.mlp\nshared.answers.unlock()", {"import shared.mlp"}),
    "the mistake catalogue's private copies": ("from shared.mistakes.part1 import _mlp_forward as mlp_forward",
                                               {"from shared.mistakes.part1 import ..."}),
    "a private helper": ("from shared.mlp import _sum_over_batch", {"from shared.mlp import _sum_over_batch"}),
    "the visible tests' toolkit": ("def f(x):\n    return check(x, 'ok')", {"check"}),
    "matplotlib from the set-up cell": ("plt.plot([1, 2])", {"plt"}),
    "a global of the course's": ("def f():\n    global check\n    return check(1, 'x')", {"check"}),
    "IPython's history": ("x = Out[3]\ny = _i2", {"Out", "_i2"}),
    "exit": ("exit()", {"exit"}),
    # Attribute chains from allowed modules and values (issue 40): each resolved to its object.
    "the builtins through an allowed module": ("import dataclasses\ndataclasses.builtins.eval('1')", {".builtins"}),
    "sys through an allowed module": ("import dataclasses\ndataclasses.sys.modules", {".sys"}),
    "a module held as a value": ("import dataclasses\nm = [dataclasses][0]\nm.sys", {"dataclasses"}),
    "a module passed as a value": ("import numpy as np\ndef f(m):\n    return m.lib\nf(np)", {"numpy", ".lib"}),
    "the tracer through the helper": ("from shared import memory\nmemory.tracemalloc.stop()", {".tracemalloc"}),
    "gc imported from the helper": ("from shared.memory import gc", {"from shared.memory import gc"}),
    "a generator's raw state": ("np.random.default_rng(0).bit_generator.ctypes", {".bit_generator", ".ctypes"}),
    "a round's frame": ("cluster.round().gen.gi_frame.f_globals", {".gen", ".gi_frame", ".f_globals"}),
    "numpy's file reader by an admitted-looking name": ("from numpy import load", {"from numpy import load"}),
    "numpy's test runner": ("np.test()", {".test"}),
    "a writeable flag": ("received.setflags(write=True)", {".setflags"}),
    "an array's base": ("received.base", {".base"}),
    "the lesson lock": ("from shared.answers import unlock", {"from shared.answers import ..."}),
    # Names the tree holds outside Name and Attribute nodes (the red team of session 15): each read as what it is.
    "a class pattern's keyword reads a dunder": ("def f(g):\n    match f:\n        case object(__globals__=g):\n"
                                                "            return g", {"case C(__globals__=...)"}),
    "a class pattern's keyword reads a private name": ("match x:\n    case object(_getframe=g):\n        pass",
                                                       {"case C(_getframe=...)"}),
    "a class pattern's keyword reads a door": ("match x:\n    case object(gi_frame=g):\n        pass",
                                               {"case C(gi_frame=...)"}),
    "a class pattern of the learner's class reads what __match_args__ names": (
        "match f:\n    case C(g):\n        pass", {"case C(...)"}),
    "a match binding a dunder name": ("match x:\n    case {'a': __builtins__}:\n        pass", {"__builtins__"}),
    "an exception bound to a dunder name": ("try:\n    pass\nexcept Exception as __builtins__:\n    pass",
                                            {"__builtins__"}),
    "an import bound to a dunder name": ("import numpy as __builtins__", {"__builtins__"}),
    "three-argument type by another name": ("T = type\nT('A', (), {'_' * 2 + 'eq' + '_' * 2: f})", {"type"}),
    "a class's class called": ("type(B)('A', (), {})", {"type"}),
    "a metaclass keyword": ("class A(metaclass=M):\n    pass", {"class A(metaclass=...)"}),
    "a format string reading attributes": ("'{0.__class__.__init__.__globals__}'.format(f)", {".format"}),
    "a computed format string": ("('{0.' + '_' * 2 + 'class' + '_' * 2 + '}').format(f)", {".format"}),
    "str.format by its class": ("str.format('{0.__class__}', f)", {".format"}),
    "format_map reading items": ("'{d[__builtins__]}'.format_map(m)", {".format_map"}),
    # The second red team of session 15.
    "np.ndarray subclassed: an array over a buffer by another name": (
        "class Raw(np.ndarray):\n    pass\nRaw((1,), dtype=object, buffer=b)", {".ndarray"}),
    "np.ndarray held": ("make = np.ndarray\nmake((1,), dtype=object, buffer=b)", {".ndarray"}),
    "np.ndarray as a default argument": ("def at(p, make=np.ndarray):\n    return make((1,), buffer=p)",
                                         {".ndarray"}),
    "np.ndarray imported by name": ("from numpy import ndarray as R\nR((1,), buffer=b)", {"R"}),
    "singledispatch runs a string annotation": ("from functools import singledispatch",
                                                {"from functools import singledispatch"}),
    "format by getattr": ("getattr('{0.__globals__}', 'format')(f)", {".format"}),
    "format by a class pattern": ("match '{0.__globals__}':\n    case str(format=fm):\n        fm(f)",
                                  {"case C(format=...)"}),
    "a read-only array made writeable through its flags": ("x.flags['WRITEABLE'] = True", {".flags"}),
    "an abstract class's register (its metaclass's)": ("import collections.abc\ncollections.abc.Mapping.register(F)",
                                                      {".register"}),
    # Session 16's red team: type(x)(v) with a class for x is type(v), any object's class held as a value.
    "type itself as type(int)(int), then a class from computed names (a dataclass's field names run as code)": (
        "meta = type(int)(int)\nK = meta('K', (), {'_' * 2 + 'annotations' + '_' * 2: {'a,exec(s),self.a': int}})",
        {"type"}),
    "np.ndarray as type(int)(np.zeros(1))": ("R = type(int)(np.zeros(1))\nR((1,), buffer=b)", {"type"}),
    "a class's class called with a name": ("def f(x, v):\n    return type(x)(v)", {"type"}),
    "copy.deepcopy's memo keeps the originals (a cluster's __dict__: its ledger forged)": (
        "import copy\nmemo = {}\ncopy.deepcopy(cluster, memo)", {".deepcopy"}),
    "copy.deepcopy imported, with its memo as a keyword": (
        "from copy import deepcopy\ndeepcopy(cluster, memo=m)", {"deepcopy"}),
    "copy.deepcopy held, then given a memo": ("import copy\nf = copy.deepcopy\nf(cluster, m)", {".deepcopy"}),
    "np.ndarray as a dataclass field's annotation, handed out by dataclasses.fields": (
        "import dataclasses\n@dataclasses.dataclass\nclass H:\n    kind: np.ndarray\n"
        "R = dataclasses.fields(H)[0].type\nR((1,), dtype=object, buffer=b)", {".ndarray"}),
    "np.ndarray as a class body's annotation under an if": (
        "class H:\n    if True:\n        kind: np.ndarray", {".ndarray"}),
    "copy.deepcopy given a memo through functools.partial": (
        "import copy, functools\nfunctools.partial(copy.deepcopy, memo=m)(cluster)", {".deepcopy"}),
    # Session 16: what admitting type hints (typing, np.ndarray in a hint, type(x).__name__) must not open.
    "a dataclass made of a class whose annotations carry computed names (written into code dataclass runs)": (
        "import typing, dataclasses\nT = typing.TypedDict('T', {'a=exec(s)': int})\ndataclasses.dataclass(T)",
        {".dataclass"}),
    "a dataclass as a decorator": ("from dataclasses import dataclass\n@dataclass\nclass C:\n    a: int",
                                   {"from dataclasses import dataclass"}),
    "get_type_hints runs a string annotation": ("from typing import get_type_hints",
                                                {"from typing import get_type_hints"}),
    "typing.Type called: a class's class by another name": ("import typing\ntyping.Type('A', (), d)", {".Type"}),
    "a hint's origin read back: np.ndarray as a value": ("import typing\ntyping.get_origin(h)", {".get_origin"}),
    "np.ndarray kept by a defaultdict in a hint": ("def f(x: d[np.ndarray]):\n    pass", {".ndarray"}),
    "np.ndarray called in a hint": ("def f(x: np.ndarray((1,), buffer=b)):\n    pass", {".ndarray"}),
    "np.ndarray bound in a hint": ("def f(x: (R := np.ndarray)):\n    pass", {".ndarray"}),
    "np.ndarray subscripted outside a hint": ("R = list[np.ndarray]", {".ndarray"}),
    "a dunder other than __name__ read": ("type(x).__dict__", {".__dict__", "type"}),
    "__name__ assigned": ("f.__name__ = 'g'", {".__name__ = ..."}),
    "__name__ by getattr": ("getattr(f, '__name__')", {".__name__"}),
    "type(x) handed to a function": ("g(type(x))", {"type"}),
    # Session 16's fourth red team: a comparison or a hint hands np.ndarray and type to a hook the learner defines.
    "type itself through Fraction's <, which calls a subclass's _richcmp (then __deepcopy__ gets a memo: the ledger)": (
        "import fractions\nclass F(fractions.Fraction):\n    def _richcmp(self, other, op):\n"
        "        box.append(other)\ntype(int) < F(1)", {"F._richcmp", "type"}),
    "np.ndarray through Fraction's <": ("np.ndarray < f", {".ndarray"}),
    "type itself through UserList's ==, which calls a subclass's _UserList__cast": (
        "import collections\nclass U(collections.UserList):\n    def _UserList__cast(self, other):\n"
        "        return box.append(other)\ntype(int) == U()", {"U._UserList__cast", "type"}),
    "np.ndarray in a tuple compared with a value of yours": ("type(x) in (np.ndarray, u)", {".ndarray", "type"}),
    "np.ndarray in a hint beside a Set of yours, whose | calls its _from_iterable": (
        "import collections.abc\nclass K(collections.abc.KeysView):\n    def _from_iterable(self, it):\n"
        "        box.extend(it)\ndef f(x: K({}) | [np.ndarray]):\n    pass", {"K._from_iterable", ".ndarray"}),
    "np.ndarray in a hint beside a name of yours": ("def f(x: k | [np.ndarray]):\n    pass", {".ndarray"}),
    "np.ndarray handed to a parameter named isinstance": ("def f(isinstance):\n    isinstance(0, np.ndarray)",
                                                          {".ndarray"}),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_every_door_out_of_plain_computation_breaks_the_rules(name):
    source, expected = ATTACKS[name]
    found = set(constructs(source))
    assert expected <= found, (found, expected)


def _syntax_fields():
    """Every (node class, field) of this Python's syntax tree."""
    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)
    # (ast.Str, ast.Num, ... of old Pythons make Constant nodes: a parser never makes one of theirs)
    classes = {cls for cls in below(ast.AST) if cls.__module__ == "ast" and cls._fields and type(cls()) is cls}
    return [(cls, field) for cls in sorted(classes, key=lambda c: c.__name__) for field in cls._fields]


# Where a field's names are read by the visitor of their node (they need its context): code that puts a
# dunder name there.
READ_WHERE_VISITED = {("Name", "id"): "__globals__", ("Attribute", "attr"): "f.__globals__",
                      ("Constant", "value"): "'__globals__'", ("alias", "name"): "import __globals__",
                      ("ImportFrom", "module"): "from __globals__ import x"}


@pytest.mark.parametrize("cls, field", _syntax_fields(), ids=lambda v: getattr(v, "__name__", v))
def test_a_name_in_any_field_of_the_syntax_tree_is_read_by_the_rules(cls, field):
    """The search for escapes through syntax: every field of every node of Python's syntax tree, holding a
    dunder name, is flagged, whatever the field is (a name bound, a keyword, an attribute a class pattern reads,
    a field of a construct the rules do not know). Names are the only way code names what it reaches, so no
    name in a tree goes unread."""
    from shared.policy import SYNTAX_NAMES, _Checker
    key = (cls.__name__, field)
    if key in READ_WHERE_VISITED:
        assert constructs(READ_WHERE_VISITED[key], course={}), key
        return
    if key == ("Constant", "kind"):  # "u" of u"text": not a name, and source can put nothing else there
        assert SYNTAX_NAMES[key] == "text"
        return
    for value in ("__globals__", ["__globals__"]):
        node = cls()
        setattr(node, field, value)
        checker = _Checker({}, ast.Module(body=[], type_ignores=[]), {})
        checker.check_names(node)
        assert checker.breaks, (key, value)


def test_the_tree_s_name_fields_that_the_rules_read_are_all_fields_of_this_python():
    """SYNTAX_NAMES names no field that does not exist (a typo there would leave the real field unread)."""
    from shared.policy import SYNTAX_NAMES
    fields = {(cls.__name__, field) for cls, field in _syntax_fields()}
    assert set(SYNTAX_NAMES) <= fields, set(SYNTAX_NAMES) - fields


def test_a_break_names_the_construct_and_its_line_and_the_message_points_to_the_rules():
    """The message leads with the construct, its line and why; the list of what graded code may use (some 600
    characters) would bury them, so the message points to the README's section, which make build writes from
    the allow-list, instead of repeating it."""
    breaks = check_source("import numpy as np\n\n\ndef f(x):\n    import os\n    return os.getpid()\n")
    assert breaks == [Break(5, "import os", "not a module graded code may use")]
    message = describe(breaks, "the cell that defines f")
    assert message == ("the cell that defines f breaks the course's rules for graded code: line 5: import os (not a "
                       f"module graded code may use). {RULES_POINTER}")
    assert not [module for module in ALLOWED_MODULES if module.startswith(("numpy.", "shared.")) and module in message]
    assert len(RULES_POINTER) < 160
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = RULES_POINTER.split('"')[1]
    assert f"### {section}\n" in readme  # the section it names, which lists every module
    rules_text = readme.split(f"### {section}\n", 1)[1]
    assert all(f"`{module}`" in rules_text for module in ALLOWED_MODULES if module != "__future__")


def test_code_that_does_not_parse_is_one_break():
    assert constructs("def f(:\n    pass") == ["a syntax error"]


# Deeper than Python's parser (RecursionError, or MemoryError for unary minuses) or a walk of the tree can follow.
TOO_DEEP = {"a sum of a thousand terms": "x = " + "1 + " * 1000 + "1\n",
            "inside a function": "def f(x):\n    return " + "x + " * 3000 + "x\n",
            "a sum of two hundred thousand terms": "x = " + "1+" * 200_000 + "1\n",
            "a hundred thousand unary minuses": "x = " + "-" * 100_000 + "1\n",
            "beside a scratch line": "help(len)\nx = " + "1 + " * 1000 + "1\n"}


@pytest.mark.parametrize("source", TOO_DEEP.values(), ids=TOO_DEEP)
def test_code_nested_too_deeply_to_read_is_one_break_and_nothing_else_reads_it(source):
    """Reading it raised RecursionError out of the checker, and a notebook holding such a cell could not be
    graded at all: it is code that cannot be checked, so it is refused (and binds nothing the rules can see)."""
    from shared.policy import MAX_CELL_CHARS, names_bound, scratch_lines
    found = check_source(source)
    if len(source) > MAX_CELL_CHARS:  # (too large to read at all: refused unread, the same way)
        assert [(b.line, b.construct) for b in found] == [(1, "a cell too large to read")]
    else:
        assert found == [Break(1, "code nested too deeply", "an expression nested deeper than the rules "
                                                            "can follow cannot be checked: write it in "
                                                            "smaller steps")]
    assert scratch_lines(source) is None  # nothing of it runs
    # What reads a cell's names reads them, or nothing where Python cannot (the checker walks deeper than symtable)
    assert names_bound(source) <= {"x", "f"} and set(course_imports(source)) == set()
    assert rules.cell_names(source).defines <= {"x", "f"}


# --------------------------------------------------------------------------
# A notebook: which cells are the learner's, and whose region holds them
# --------------------------------------------------------------------------

def test_the_course_cells_are_not_checked_and_a_cell_is_graded_code_or_scratch():
    """A cell that breaks the rules costs the lessons whose graded code it is (the lesson's own cell, or the only
    definition of a name the lesson's function needs); any other is a scratch cell, wherever it stands."""
    slug = PARTS[0]
    notebook = read(student_path(slug))
    cells = [dict(c) for c in json.loads(json.dumps(notebook))["cells"]]
    assert rules.check_notebook(cells, slug).cells == []  # the release itself
    solution = next(i for i, c in enumerate(cells) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    grade_id = cells[solution]["metadata"]["nbgrader"]["grade_id"]
    lesson, function = grade_id.split("_")[1], grade_id.split("_", 2)[2]
    cells[solution]["source"] = f"def {function}(*args):\n    return _helper(*args)\n"
    cells.insert(solution + 1, {"cell_type": "code", "metadata": {}, "outputs": [],
                                "source": "import os\ndef _helper(*args):\n    return os.getcwd()\n"})
    cells.insert(solution + 1, {"cell_type": "code", "metadata": {}, "source": "help(len)\n", "outputs": []})
    cells.insert(1, {"cell_type": "code", "metadata": {}, "source": "x = 1\nimport sys\n", "outputs": []})
    findings = rules.check_notebook(cells, slug)
    assert [(f.index, f.lesson, f.needed) for f in findings.cells] == [
        (solution + 2, None, ()), (solution + 3, lesson, ("_helper", "os"))]
    assert findings.of_lesson(lesson) and len(findings.scratch) == 1
    assert list(findings.trimmed) == [1] and findings.trimmed[1].binds == {"sys"}  # x = 1 runs, import sys does not


# --------------------------------------------------------------------------
# A cell's scratch lines: left out, and what is left keeps the rules
# --------------------------------------------------------------------------

SCRATCH_LINES = ["help(f)", "f?", "f??", "%timeit -n 1 -r 1 f(2)", "!ls", "import os",
                 "print(sorted(os.listdir('.')))", "plt.plot([1.0, 0.5])\nplt.show()", "display(f)",
                 "import matplotlib.pyplot as plt", "x = 1; help(x)", "globals()['g'] = f"]
FUNCTION = "def f(x):\n    \"\"\"Twice x.\"\"\"\n    return 2 * x\n"


@pytest.mark.parametrize("scratch", SCRATCH_LINES)
def test_a_scratch_line_beside_a_function_is_left_out_and_the_function_runs(scratch):
    """What a learner writes to look around, in the cell of the function itself (above or below it): the
    statement is left out, its lines stay as comments (every line keeps its number), and what is left keeps
    the rules."""
    from shared.policy import scratch_lines
    for cell in (f"{FUNCTION}{scratch}\n", f"{scratch}\n{FUNCTION}"):
        trimmed = scratch_lines(cell, course=COURSE)
        assert trimmed is not None, cell
        assert check_source(trimmed.source, course=COURSE) == [] and trimmed.breaks
        assert FUNCTION in trimmed.source and not set(trimmed.lines) & {
            n for n, line in enumerate(trimmed.source.splitlines(), 1) if not line.startswith("# (left out")}
        assert len(trimmed.source.splitlines()) == len(cell.splitlines())
        assert "it does not change your grade" in trimmed.note()


def test_a_timed_cell_runs_as_its_cell():
    """``%%time`` above a lesson's function (to time it): while grading the cell runs once, as plain Python, without
    that line; what else it holds is read as any cell's."""
    from shared.policy import scratch_lines
    trimmed = scratch_lines(f"%%time\n{FUNCTION}help(f)\n", course=COURSE)
    assert trimmed.lines == (1, 5) and FUNCTION in trimmed.source and not trimmed.binds
    assert trimmed.breaks[0].construct == "%%time" and check_source(trimmed.source, course=COURSE) == []
    assert scratch_lines("\n%%time\n" + FUNCTION, course=COURSE).source.endswith(FUNCTION)  # after empty lines too
    for not_timed in ("%%timeit\n" + FUNCTION, "%%capture\n" + FUNCTION, "%%time\n", "%%timer\n" + FUNCTION):
        assert scratch_lines(not_timed, course=COURSE) is None, not_timed  # the whole cell is one magic: left out


def test_what_a_left_out_statement_binds_is_known_and_a_break_inside_the_function_is_not_cured():
    from shared.policy import scratch_lines
    trimmed = scratch_lines(f"import os\nx = 1; help(x)\n{FUNCTION}", course=COURSE)
    assert trimmed.binds == {"os", "x"} and trimmed.lines == (1, 2)
    inside = "def f(x):\n    import os\n    return os.getcwd()\nhelp(f)\n"
    assert check_source(inside) and scratch_lines(inside) is None  # the function itself breaks them
    uses = "import os\ndef f(x):\n    return os.getcwd()\n"  # os left out: then os.getcwd breaks them in f
    assert scratch_lines(uses, course=COURSE) is None
    for nothing_left in ("help(len)\n", "%%timeit\ntotal = 1\n", "import os\nprint(os.getcwd())\n"):
        assert scratch_lines(nothing_left, course=COURSE) is None
    assert scratch_lines(FUNCTION, course=COURSE) is None  # it keeps the rules: nothing to leave out


def _statements():
    """Top-level statements to build cells from: honest code, every attack of ATTACKS, and scratch lines."""
    from hypothesis import strategies as st
    pieces = [textwrap.dedent(source).strip() for source in HONEST.values()]
    pieces += [source for source, _ in ATTACKS.values()] + SCRATCH_LINES + [FUNCTION.strip()]
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=6)


def test_whatever_is_left_of_a_cell_keeps_the_rules_and_is_the_cell_s_own_lines():
    """The property the grader stands on: for any cell made of honest code, attacks and scratch lines, what
    ``scratch_lines`` leaves to run keeps the rules, and each of its lines is the cell's own line at the same
    place or a comment; the lines it names as left out are exactly the commented ones."""
    from hypothesis import given, settings, strategies as st

    from shared.policy import ipython_to_python, scratch_lines

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(_statements(), st.booleans())
    def check(pieces, timed):
        cell = "\n".join(pieces) + "\n"
        trimmed = scratch_lines(("%%time\n" if timed else "") + cell, course=COURSE)
        if trimmed is None:
            return
        assert check_source(trimmed.source, course=COURSE) == [], cell
        original = ["%%time"] * timed + ipython_to_python(cell).splitlines()
        kept = trimmed.source.splitlines()
        assert len(kept) == len(original)
        commented = {n for n, (was, now) in enumerate(zip(original, kept), 1) if was != now}
        assert commented == set(trimmed.lines) and all(kept[n - 1].startswith("# (left out") for n in commented)

    check()


def test_a_lesson_s_own_cell_runs_without_its_scratch_lines_unless_the_lesson_needs_them():
    """``help(f)``, ``%timeit`` or an ``import os`` to look around in a lesson's own cell cost the lesson
    nothing: the cell runs without them.  Where the function needs what a left-out line binds, those lines are
    graded code that breaks the rules, and cost the lesson (the rest of the cell still runs)."""
    from course import make_submission, reference_code
    from shared.lessons import lessons_of
    slug = PARTS[0]
    lesson = lessons_of(slug)[0]
    reference = reference_code(slug, lesson.function)
    looking = f"import os\nhelp({lesson.function})\n{reference}\n%timeit -n 1 -r 1 sum(range(3))\n"
    findings = rules.check_notebook(make_submission(slug, {lesson.function: looking}, default="reference").cells, slug)
    assert findings.cells == [] and len(findings.trimmed) == 1
    (trimmed,) = findings.trimmed.values()
    assert trimmed.lines[:2] == (1, 2) and trimmed.binds == {"os"} and reference.strip() in trimmed.source
    rebound = f"{reference}\n{lesson.function} = vars()[{lesson.function!r}]\n"  # left out, and it binds the function
    findings = rules.check_notebook(make_submission(slug, {lesson.function: rebound}, default="reference").cells, slug)
    assert [(f.lesson, f.needed, f.trimmed) for f in findings.cells] == [(lesson.code, (lesson.function,), True)]
    assert "so those lines were not run, and the lesson gets no points" in findings.cells[0].lesson_message(
        lesson.function)
    calls = f"def {lesson.function}(*args):\n    return _helper(*args)\n"
    notebook = make_submission(slug, {lesson.function: calls}, default="reference")
    at = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    helper = "import os\nBASE = os.sep\n\ndef _helper(*args):\n    return BASE\n"  # BASE, left out, is needed
    notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(helper))
    findings = rules.check_notebook(notebook.cells, slug)
    assert [(f.index, f.lesson, f.needed) for f in findings.cells] == [(at + 1, lesson.code, ("BASE",))]
    assert list(findings.trimmed) == [at + 1] and findings.skipped == set()  # the rest of the cell still runs


def test_a_cell_too_deep_to_read_is_scratch_or_costs_its_lesson_and_the_notebook_is_still_read():
    """Such a cell beside the lessons is skipped; in a lesson's own cell it costs that lesson, as any cell that
    breaks the rules does; the other lessons are graded."""
    from course import make_submission, reference_code
    from shared.lessons import lessons_of
    slug = PARTS[0]
    first, second = lessons_of(slug)[:2]
    deep = reference_code(slug, first.function) + "\nCHECK = " + "1 + " * 1000 + "1\n"
    notebook = make_submission(slug, {first.function: deep}, default="reference")
    at = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(TOO_DEEP["a sum of two hundred thousand terms"]))
    findings = rules.check_notebook(notebook.cells, slug)
    assert [(f.index, f.lesson) for f in findings.cells] == [(at, first.code), (at + 1, None)]
    assert findings.cells[0].breaks[0].construct == "code nested too deeply"
    assert not findings.of_lesson(second.code) and findings.skipped == {at, at + 1}  # neither runs


def test_the_test_cells_hidden_region_is_the_course_s_own(tmp_path):
    """The hidden region imports the harness: the source notebook's test cells are course cells."""
    slug = PARTS[0]
    source = json.loads(source_path(slug).read_text())
    assert any("answer_hidden_cases" in "".join(c["source"]) for c in source["cells"])
    assert rules.check_notebook(source["cells"], slug).cells == []
    assert rules.course_cells(slug).imports["answer_hidden_cases"] == "grading.harness.answer_hidden_cases"


# --------------------------------------------------------------------------
# A composite lesson: the visible tests hold against it the cells the grader holds against it
# --------------------------------------------------------------------------

def _composites() -> list:
    """(part, composite lesson's function, an earlier function of the same part that it is graded with) for
    every lesson whose spec isolates one (its ``isolate``: the grader binds it to the helper's version)."""
    from grading.course import lesson_spec
    from shared.lessons import lesson as find_lesson, lessons_of
    return [pytest.param(slug, lesson.function, name, id=f"{lesson.code}-{name}")
            for slug in PARTS for lesson in lessons_of(slug) for name in lesson_spec(lesson.code).isolate
            if find_lesson(name).part.slug == slug]


def _shell_with_reference(slug: str):
    """An IPython shell (which keeps each cell's text, as the kernel does, for check_rules to read) that has run
    part ``slug``'s set-up cell and every reference solution cell."""
    from IPython.core.interactiveshell import InteractiveShell

    from course import reference_solutions
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    setup = next(c.source for c in read(student_path(slug)).cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    for source in (setup, *reference_solutions(slug).values()):
        assert shell.run_cell(source).success, source[:200]
    return shell


@pytest.mark.parametrize("slug, function, earlier", _composites())
def test_a_composite_lesson_s_visible_check_does_not_blame_the_earlier_cell_the_grader_replaces(
        slug, function, earlier, capsys, monkeypatch, tmp_path):
    """An earlier lesson's cell that breaks the rules costs that lesson only: the grader grades the composite
    lesson with the helper's version of that function (``needed_names`` with ``given``).  Its visible check,
    ``check_rules(function)``, says the same: it passes, with a note naming the cell; the earlier lesson's own
    check fails, in the grader's words."""
    from IPython.core.interactiveshell import InteractiveShell

    from course import make_submission, reference_code, with_import_inside
    from shared.checking import CheckFailure
    from shared.lessons import lesson as find_lesson
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    broken, line = with_import_inside(reference_code(slug, earlier), earlier)
    findings = rules.check_notebook(make_submission(slug, {earlier: broken}, default="reference").cells, slug)
    composite, own = find_lesson(function).code, find_lesson(earlier).code
    assert findings.of_lesson(own) and not findings.of_lesson(composite)  # the grader's view
    shell = _shell_with_reference(slug)
    try:
        assert shell.run_cell(broken).success
        capsys.readouterr()
        result = shell.run_cell(f"check_rules({function})")
        assert result.success, result.error_in_exec
        note = capsys.readouterr().out
        if earlier in rules.cell_names(reference_code(slug, function)).needs[function]:  # the reference calls it
            assert note.startswith("Note: the cell that defines ") and f"(line {line}: import os)" in note, note
            assert f"costs lesson {own} only" in note and f"the course's own {earlier}" in note, note
        else:
            assert note == ""
        result = shell.run_cell(f"check_rules({earlier})")
        assert isinstance(result.error_in_exec, CheckFailure)
        said, graded = str(result.error_in_exec), findings.of_lesson(own)[0].message()
        assert said.startswith(f"the cell that defines {earlier} breaks the course's rules for graded code: line "
                               f"{line}: import os (not a module graded code may use)"), said
        assert said.split(" breaks ", 1)[1] == graded.split(" breaks ", 1)[1]  # the same words but the cell's name
    finally:
        InteractiveShell.clear_instance()


def test_a_value_that_graded_code_reads_is_graded_code_for_the_visible_check_as_for_the_grader(monkeypatch, tmp_path):
    """``SCALE = os.cpu_count()`` in a cell of its own, read by a lesson's function: the grader costs the lesson
    (the only cell that binds SCALE breaks the rules), and ``check_rules`` says so first, naming that cell; an
    ``import os`` beside a value that keeps the rules is a scratch line for both, and costs nothing."""
    from IPython.core.interactiveshell import InteractiveShell

    from course import make_submission, reference_code
    from shared.checking import CheckFailure
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    slug, function = PARTS[0], "linear_forward"
    reads = reference_code(slug, function).replace("return x @ W + b", "return (x @ W + b) * (SCALE / SCALE)")
    assert "SCALE" in reads
    for value, costs in (("import os\nSCALE = float(os.cpu_count())\n", True), ("import os\nSCALE = 2.0\n", False)):
        notebook = make_submission(slug, {function: reads}, default="reference")
        at = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("solution"))
        notebook.cells.insert(at, nbformat.v4.new_code_cell(value))
        graded = rules.check_notebook(notebook.cells, slug).of_lesson("003")  # the grader's view
        assert bool(graded) is costs
        shell = _shell_with_reference(slug)
        try:
            for source in (value, reads):  # (kept in the input history, as a kernel keeps each cell)
                assert shell.run_cell(source, store_history=True).success
            error = shell.run_cell(f"check_rules({function})").error_in_exec
            if costs:
                assert isinstance(error, CheckFailure), error
                assert str(error).startswith("the cell that defines SCALE breaks the course's rules for graded code: "
                                             "line 1: import os"), error
                assert str(error).split(" breaks ", 1)[1] == graded[0].message().split(" breaks ", 1)[1]
            else:
                assert error is None, error
        finally:
            InteractiveShell.clear_instance()


def test_a_helper_cell_of_an_earlier_lesson_is_not_held_against_the_composite(capsys, monkeypatch, tmp_path):
    """A cell of the learner's own that only lesson 004's relu_forward calls is graded code of 004, not of 005
    (graded with the helper's relu_forward), for the grader and for the visible check alike; a function of the
    notebook that the composite lesson calls itself is still its graded code, for both."""
    from IPython.core.interactiveshell import InteractiveShell

    from course import make_submission, reference_code
    from shared.checking import CheckFailure
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    slug = PARTS[0]
    helper = "def positive_part(z):\n    import os  # to look around\n    return np.maximum(z, 0)\n"
    relu = reference_code(slug, "relu_forward").replace("return np.maximum(z, 0)", "return positive_part(z)")
    assert "positive_part" in relu
    notebook = make_submission(slug, {"relu_forward": relu}, default="reference")
    at = next(i for i, c in enumerate(notebook.cells)
              if c.metadata.get("nbgrader", {}).get("grade_id") == "solution_004_relu_forward")
    notebook.cells.insert(at, nbformat.v4.new_code_cell(helper))
    findings = rules.check_notebook(notebook.cells, slug)
    assert findings.of_lesson("004") and not findings.of_lesson("005")
    shell = _shell_with_reference(slug)
    try:
        for source in (helper, relu):
            assert shell.run_cell(source).success
        capsys.readouterr()
        assert shell.run_cell("check_rules(mlp_forward)").success
        assert "Note: the cell that defines positive_part breaks" in capsys.readouterr().out
        assert isinstance(shell.run_cell("check_rules(relu_forward)").error_in_exec, CheckFailure)
        # mlp_forward calling positive_part itself: graded code of 005 then, for both
        forward = reference_code(slug, "mlp_forward").replace("A1 = relu_forward(Z1)", "A1 = positive_part(Z1)")
        assert "positive_part(Z1)" in forward
        assert shell.run_cell(forward).success
        error = shell.run_cell("check_rules(mlp_forward)").error_in_exec
        assert isinstance(error, CheckFailure) and str(error).startswith("the cell that defines positive_part")
        notebook = make_submission(slug, {"relu_forward": relu, "mlp_forward": forward}, default="reference")
        notebook.cells.insert(at, nbformat.v4.new_code_cell(helper))
        assert rules.check_notebook(notebook.cells, slug).of_lesson("005")
    finally:
        InteractiveShell.clear_instance()


def test_a_cell_too_large_to_read_is_one_break_and_nothing_else_reads_it():
    """A cell of megabytes took the grader a gigabyte of memory a megabyte to read (Python's syntax tree): it is
    refused unread, as code nested too deeply is."""
    from shared.policy import MAX_CELL_CHARS, names_bound, scratch_lines
    source = "import os\n" + "x = 1\n" * (MAX_CELL_CHARS // 6 + 1)
    assert [(b.line, b.construct) for b in check_source(source)] == [(1, "a cell too large to read")]
    assert scratch_lines(source) is None and names_bound(source) == frozenset() and course_imports(source) == {}
    assert rules.cell_names(source).defines == frozenset()
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert f"a cell of more than {MAX_CELL_CHARS:,}\ncharacters" in readme  # the limit the README states


def test_a_cell_of_many_scratch_lines_is_read_in_time_that_grows_with_its_length():
    """scratch_lines matched every break against every statement: 4,000 scratch lines took 5 s, a cell of
    a few hundred kilobytes minutes.  Sixteen times the lines now take about sixteen times the CPU (it was 250)."""
    import time
    from shared.policy import scratch_lines

    def cpu_seconds(pairs: int) -> float:
        started = time.process_time()  # this process's CPU: other work on the machine does not count
        trimmed = scratch_lines("import os\nx = 1\n" * pairs)
        assert trimmed is not None and len(trimmed.lines) == pairs
        return time.process_time() - started

    small = min(cpu_seconds(500) for _ in range(3))
    assert cpu_seconds(8000) < 48 * small


def test_a_notebook_of_many_cells_that_break_the_rules_follows_each_lesson_s_names_once(monkeypatch):
    """check_notebook followed the names each lesson needs again for every cell that breaks the rules (through
    every cell of the notebook, for every name): 9,000 scratch cells of ``import os`` beside a function reading
    300 globals kept the grader busy past ten minutes.  It is followed once a lesson."""
    from shared.lessons import lessons_of
    slug = PARTS[0]
    calls = []
    followed = rules.needed_names
    monkeypatch.setattr(rules, "needed_names", lambda *args: calls.append(args[0]) or followed(*args))
    notebook = read(solved_path(slug))
    notebook.cells[3:3] = [nbformat.v4.new_code_cell(f"import os  # {i}") for i in range(300)]
    findings = rules.check_notebook(notebook.cells, slug)
    assert len(findings.scratch) == 300 and findings.cells == findings.scratch
    assert sorted(calls) == sorted(lesson.function for lesson in lessons_of(slug))
