"""The rules for graded code: what a lesson's code may use, checked by reading it.

A lesson's function is plain computation: NumPy, ``math`` and a few standard
modules, and the helper package's library (the MLP, the data, the cluster, the
memory accounting, the earlier lessons' building blocks, the training loop's
configuration).  It never needs to run code from a string, to look inside the
interpreter, to reach the notebook's machinery or to touch raw memory, so the
course does not allow it: those are the ways a notebook could forge what the
grader measures.

The rules are checked *statically*, on the code's syntax tree, never by running
it: by the judge on every cell a learner wrote or changed (in nbgrader's own
process, where the notebook's code cannot reach), and by each lesson's visible
tests on the cell that defines the learner's function, so that a learner hears of
a break at once, in the same words.  The rules, in short:

1. **Imports** only from :data:`ALLOWED_MODULES` (and no private name from them).
2. **No dunder name and no attribute that begins with an underscore**
   (``__class__``, ``x._private``); a learner's own names may begin with one
   (``_check``).  No string that spells a dunder name.
3. **None of the doors out of plain computation**: the built-ins that run or
   reach code (:data:`FORBIDDEN_BUILTINS`; ``getattr`` and ``hasattr`` only with
   a constant, public attribute name), the notebook's machinery
   (:data:`NOTEBOOK_MACHINERY`), attributes that reach the interpreter, files or
   raw memory (:data:`FORBIDDEN_ATTRIBUTES`), ``np.ndarray(...)`` called
   directly, ``refcheck=``, and the three-argument ``type(...)``.
4. **No attribute is assigned or deleted** (``module.name = ...``): graded code
   computes with objects, it does not rewire them.
5. **Names the course imported from a module not on the list** (the visible
   tests' toolkit, the progress panel, the grading harness) are not for graded
   code either.

:func:`check_source` returns every :class:`Break` of a piece of code;
:func:`describe` turns them into the course's message.
"""

from __future__ import annotations

import ast
import re
import symtable
from collections.abc import Mapping
from dataclasses import dataclass

#: Modules graded code may import, with why.  ``shared`` itself only to name these submodules.
ALLOWED_MODULES = {
    "numpy": "arrays: the course's one numerical library",
    "numpy.linalg": "linear algebra",
    "numpy.random": "random generators (seeded)",
    "math": "scalar math (sqrt, ceil, isfinite, ...)",
    "functools": "reduce, partial, cache",
    "itertools": "accumulate, product, chain, ...",
    "collections": "deque, defaultdict, OrderedDict",
    "collections.abc": "abstract container types for isinstance",
    "copy": "copy and deepcopy",
    "dataclasses": "replace, to change a field of a (frozen) configuration",
    "fractions": "exact rational arithmetic",
    "__future__": "compiler directives (from __future__ import annotations)",
    "shared.mlp": "the helper MLP of any depth",
    "shared.data": "synthetic batches",
    "shared.cluster": "the simulated cluster",
    "shared.memory": "byte counts and dtypes of the memory lessons",
    "shared.dtypes": "the bytes of one number of each dtype, and the input checks of lessons 021, 022, 036, 037",
    "shared.lesson_blocks": "the helper's versions of earlier lessons",
    "shared.training": "lesson 040's configuration, 039's rows to compare and one worker's gradients",
}

#: Built-in functions that run code from strings, reach the interpreter or the outside world.
FORBIDDEN_BUILTINS = {
    "eval": "runs code from a string", "exec": "runs code from a string",
    "compile": "turns a string into code", "__import__": "imports by a computed name",
    "open": "reads and writes files", "input": "waits for a keyboard",
    "breakpoint": "starts a debugger", "help": "starts the help system (and a pager)",
    "globals": "reaches the notebook's namespace", "locals": "reaches a frame's namespace",
    "vars": "reaches an object's namespace", "setattr": "assigns an attribute by a computed name",
    "delattr": "deletes an attribute by a computed name",
    "getattr": "reads an attribute by a computed name", "hasattr": "reads an attribute by a computed name",
}

#: Names the notebook (IPython) puts in the namespace: its machinery, not computation.
NOTEBOOK_MACHINERY = {
    "get_ipython": "IPython's shell and its event hooks", "display": "IPython's display machinery",
    "In": "IPython's input history", "Out": "IPython's output history", "_ih": "IPython's input history",
    "_oh": "IPython's output history", "_dh": "IPython's directory history",
    "exit": "ends the kernel", "quit": "ends the kernel",
}

#: Attributes that reach the interpreter, the notebook, files or raw memory.
FORBIDDEN_ATTRIBUTES = {
    **{name: "reaches the interpreter or the operating system" for name in (
        "sys", "os", "gc", "inspect", "importlib", "builtins", "subprocess", "modules", "environ", "system",
        "popen", "tracemalloc")},
    **{name: "reaches raw memory" for name in (
        "ctypes", "ctypeslib", "cffi", "frombuffer", "as_strided", "stride_tricks", "lib", "core", "memmap",
        "f2py", "distutils", "testing", "extbuild")},
    **{name: "reads or writes files (or unpickles)" for name in (
        "load", "loads", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt", "fromfile",
        "fromregex", "tofile", "dump", "dumps", "DataSource")},
    **{name: "reaches a running frame" for name in (
        "f_globals", "f_locals", "f_back", "f_builtins", "f_code", "f_trace", "gi_frame", "gi_code",
        "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code", "co_consts")},
    **{name: "the notebook's machinery" for name in ("get_ipython", "display", "shell", "kernel", "comm")},
    **{name: "assigns attributes by computed names (setattr in disguise)" for name in (
        "update_wrapper", "wraps", "make_dataclass")},
}

_DUNDER = re.compile(r"^__\w+__$")
_HISTORY = re.compile(r"^_(i{1,3}|i\d+|\d+)$")  # IPython's _i, _ii, _i3, _3 ...


@dataclass(frozen=True)
class Break:
    """One place where code breaks the rules: its line (in the code checked) and what it uses."""

    line: int
    construct: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.construct} ({self.why})"


def _allowed_module(name: str) -> bool:
    return name in ALLOWED_MODULES


def course_imports(source: str) -> dict[str, str]:
    """{name: module} for every name that ``source`` (a cell of the course's own) binds by import."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = submodule if submodule in ALLOWED_MODULES else node.module
    return names


def _always_forbidden(name: str) -> str | None:
    """Why ``name`` may appear nowhere in graded code (bound or used), or None."""
    if _DUNDER.match(name):
        return "a dunder name"
    if name in FORBIDDEN_BUILTINS:
        return FORBIDDEN_BUILTINS[name]
    if name in NOTEBOOK_MACHINERY:
        return NOTEBOOK_MACHINERY[name]
    if _HISTORY.match(name):
        return "IPython's history"
    return None


def _global_uses(source: str, names: set[str]) -> set[str]:
    """Which of ``names`` the code uses where they resolve to the notebook's namespace.

    Python decides at compile time: in a function, a name bound anywhere in that function
    (or in an enclosing one) is local and never falls back to the notebook's; at the top level
    of a cell and in a class body, every use may.  :mod:`symtable` is the compiler's own answer.
    """
    found: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        in_function = table.get_type() == "function"
        for symbol in table.get_symbols():
            if symbol.get_name() in names and symbol.is_referenced():
                if not in_function or symbol.is_global():
                    found.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(symtable.symtable(source, "<graded code>", "exec"))
    return found


class _Checker(ast.NodeVisitor):
    def __init__(self, course: Mapping[str, str], course_uses: set[str]):
        self.course, self.course_uses = course, course_uses
        self.breaks: list[Break] = []

    def flag(self, node: ast.AST, construct: str, why: str) -> None:
        self.breaks.append(Break(getattr(node, "lineno", 0), construct, why))

    # imports ---------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if not _allowed_module(alias.name):
                self.flag(node, f"import {alias.name}", "not a module graded code may use")
            elif alias.asname is None and not _allowed_module(top):  # `import shared.mlp` binds `shared`
                self.flag(node, f"import {alias.name}", f"binds the whole package `{top}`: write "
                                                        f"`from {top} import {alias.name.split('.', 1)[1]}`")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, f"from {'.' * node.level}{module} import ...", "a relative import")
        elif module == "shared":
            for alias in node.names:
                if f"shared.{alias.name}" not in ALLOWED_MODULES:
                    self.flag(node, f"from shared import {alias.name}", "not a module graded code may use")
        elif not _allowed_module(module):
            self.flag(node, f"from {module} import ...", "not a module graded code may use")
        else:
            for alias in node.names:
                if alias.name == "*":
                    self.flag(node, f"from {module} import *", "imports names nobody can see")
                elif alias.name.startswith("_") and module != "__future__":
                    self.flag(node, f"from {module} import {alias.name}", "a private name")
                elif alias.name in FORBIDDEN_ATTRIBUTES:
                    self.flag(node, f"from {module} import {alias.name}", FORBIDDEN_ATTRIBUTES[alias.name])
        self.generic_visit(node)

    # names and attributes --------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        why = _always_forbidden(node.id)
        if why:
            self.flag(node, node.id, why)
        elif isinstance(node.ctx, ast.Load) and node.id in self.course_uses:
            self.flag(node, node.id, f"comes from {self.course[node.id]}, which graded code may not use")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attribute = node.attr
        if attribute.startswith("_"):
            self.flag(node, f".{attribute}", "an attribute that begins with an underscore")
        elif attribute in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f".{attribute}", FORBIDDEN_ATTRIBUTES[attribute])
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            verb = "assigns" if isinstance(node.ctx, ast.Store) else "deletes"
            self.flag(node, f".{attribute} = ..." if verb == "assigns" else f"del .{attribute}",
                      f"{verb} an attribute (graded code computes with objects, it does not change them)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _DUNDER.match(node.value.strip()):
            self.flag(node, repr(node.value), "a string that names a dunder attribute")

    # calls -----------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        name = function.id if isinstance(function, ast.Name) else None
        if name in ("getattr", "hasattr"):
            attribute = node.args[1] if len(node.args) >= 2 else None
            if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str) \
                    and not attribute.value.startswith("_") and attribute.value not in FORBIDDEN_ATTRIBUTES:
                for argument in [node.args[0], *node.args[2:], *(k.value for k in node.keywords)]:
                    self.visit(argument)  # getattr(x, "dtype", None): a plain attribute read
                return
        if name == "type" and len(node.args) == 3:
            self.flag(node, "type(name, bases, namespace)", "makes a class from computed attributes")
        if (name == "ndarray" or isinstance(function, ast.Attribute) and function.attr == "ndarray"):
            self.flag(node, "ndarray(...)", "an array over a buffer of your choosing (use np.empty, np.zeros, ...)")
        for keyword in node.keywords:
            if keyword.arg == "refcheck":
                self.flag(node, "refcheck=...", "resizes an array under other arrays' feet (raw memory)")
            elif keyword.arg and _DUNDER.match(keyword.arg):
                self.flag(node, f"{keyword.arg}=...", "a dunder name")
        self.generic_visit(node)

    # definitions -----------------------------------------------------------

    def _definition(self, node: ast.AST, name: str) -> None:
        why = _always_forbidden(name)
        if why:
            self.flag(node, name, why)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._definition(node, node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._definition(node, node.name)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._definition(node, node.arg)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._definition(node, name)

    visit_Nonlocal = visit_Global


def check_source(source: str, *, course: Mapping[str, str] | None = None) -> list[Break]:
    """Every place where ``source`` breaks the rules, in order.

    ``course``: names the course's own cells bind by import, ``{name: module}``
    (:func:`course_imports`): a name imported from a module not on the list may not be
    used where it resolves to the notebook's namespace (a function's own local of that
    name is the learner's).  Code that does not parse gives one break: it cannot be checked.
    """
    try:
        tree = ast.parse(source)
        course = dict(course or {})
        forbidden = {name for name, module in course.items() if not _allowed_module(module)}
        course_uses = _global_uses(source, forbidden) if forbidden else set()
    except (SyntaxError, ValueError) as error:
        return [Break(getattr(error, "lineno", 0) or 0, "a syntax error", "code that does not parse cannot be checked")]
    checker = _Checker(course, course_uses)
    checker.visit(tree)
    unique = {(b.line, b.construct): b for b in checker.breaks}
    return sorted(unique.values(), key=lambda b: (b.line, b.construct))


def describe(breaks: list[Break], where: str, limit: int = 3) -> str:
    """The course's message for ``breaks`` found in ``where`` ("the cell that defines linear_forward")."""
    shown = "; ".join(str(b) for b in breaks[:limit])
    more = f"; and {len(breaks) - limit} more" if len(breaks) > limit else ""
    return (f"{where} breaks the course's rules for graded code: {shown}{more}. Graded code may import only "
            f"{', '.join(m for m in ALLOWED_MODULES if m != '__future__')}, and may not use dunder names, "
            f"attributes that begin with an underscore, exec/eval/open/getattr-by-name, IPython's machinery "
            f"or raw memory, nor assign attributes (see the README, \"Rules for graded code\")")
