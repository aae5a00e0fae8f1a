"""The rules for graded code: what a lesson's code may reach, checked by reading it.

A lesson's function is plain computation: NumPy, ``math`` and a few standard
modules, and the helper package's library (the MLP, the data, the cluster, the
memory accounting, the earlier lessons' building blocks, the training loop's
configuration).  It never needs to run code from a string, to look inside the
interpreter, to reach the notebook's machinery or to touch raw memory: those are
the ways a notebook could forge what the grader measures.

So the rules are an **allow-list of objects** (:mod:`shared.allowlist`), applied
*statically*, on the code's syntax tree, never by running it.  Every name and every
attribute chain that can be resolved is resolved to the object it names, importing
only the allowed modules, and must be admitted:

1. **Imports** only from the allowed modules, and only admitted objects from them.
2. **Names**: a name the code binds itself (a parameter, a local, its own function) is
   the learner's; a name the course's cells imported resolves to that object; a
   built-in must be one of :data:`shared.allowlist.ALLOWED_BUILTINS`.  The notebook's
   machinery (``get_ipython``, ``display``, ``In``, ``Out``, the history) is not.
3. **Attributes**: of a resolved object (``np.linalg.norm``), the attribute must be
   an admitted object; of any other value (``x.sum``, ``cluster.ledger``), an
   admitted attribute name of the values graded code computes with (of a class, one the
   class itself has, not its metaclass's such as ``Mapping.register``).  No dunder and
   no private (``_x``) attribute; no string that spells a dunder name; ``np.ndarray``
   only to check a type.
4. **Nothing is rewired**: no attribute assigned or deleted, no name the course
   gives (``np``, ``Cluster``) or Python gives (``len``) rebound at the top level,
   no class made from computed names (``type`` only as ``type(x)`` compared or called with
   one value, no ``metaclass=``); ``getattr``/``hasattr`` only with a constant, public name (then they
   are a plain attribute read); ``.format`` only on a written string whose fields name
   arguments (``"{0.x}"`` would read an attribute the tree does not show).
5. **Every name in the tree is read** as what it is where the tree holds it
   (:data:`SYNTAX_NAMES`): a name bound, a keyword, the attributes a ``match`` class
   pattern reads.  A string in any other field is a construct the rules do not read,
   and breaks them.

The code is first read as IPython reads a cell (``x?``, ``%timeit``, ``!ls`` become
the calls they stand for), so a scratch cell is never "a syntax error"; those calls
reach the notebook's machinery, so such a cell does not keep the rules.

:func:`check_source` returns every :class:`Break` of a piece of code;
:func:`describe` turns them into the course's message.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import copy
import functools
import importlib
import re
import string
import symtable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import allowlist
from .allowlist import ALLOWED_BUILTINS, ALLOWED_MODULES

__all__ = ["ALLOWED_MODULES", "RULES_POINTER", "Break", "check_source", "course_imports", "describe",
           "ipython_to_python"]

#: Names the notebook (IPython) puts in the namespace: its machinery, not computation.
_OWN_CELL = "put it in a cell of its own: a scratch cell costs nothing"
NOTEBOOK_MACHINERY = {
    "get_ipython": f"IPython's shell: x?, %magics and !commands call it; {_OWN_CELL}",
    "display": f"IPython's display machinery; {_OWN_CELL}",
    "In": "IPython's input history", "Out": "IPython's output history", "_ih": "IPython's input history",
    "_oh": "IPython's output history", "_dh": "IPython's directory history",
    "exit": "ends the kernel", "quit": "ends the kernel",
}

#: What to write instead, for a module graded code may not import that honest code reaches for.
_MODULE_HINTS = {
    "warnings": "to silence NumPy's overflow warnings, `with np.errstate(over=\"ignore\"):`",
    "time": "time it in a cell of its own with %timeit or %%time",
    "operator": "np.add, np.multiply, or a lambda, for functools.reduce",
    "statistics": "np.mean, np.median, np.std",
    "random": "np.random.default_rng(seed)",
    "numpy.typing": "annotate with np.ndarray (dict[str, np.ndarray], np.ndarray | None)",
}
#: Built-ins for looking around, refused in graded code.
_LOOKING_AROUND = ("help", "dir", "vars", "id", "globals", "locals")

_DUNDER = re.compile(r"^__\w+__$")
#: Dunder attributes graded code may read (never assign, never by getattr): a function's or a class's name, a string
#: wherever it is defined (graded code may not define a dunder name itself), as messages use it: type(x).__name__.
_READABLE_DUNDERS = ("__name__",)
_HISTORY = re.compile(r"^_(i{1,3}|i\d+|\d+)$")  # IPython's _i, _ii, _i3, _3 ...
_NDARRAY = np.ndarray  # admitted for isinstance; called directly, it views a buffer of your choosing
_NDARRAY_WHY = ("np.ndarray is admitted only to check a type (isinstance(x, np.ndarray), type(x) is np.ndarray, a "
                "function's or a variable's annotation made of classes and typing's forms, not a class body's, which "
                "dataclasses.fields hands out): called, subclassed or held, it makes an array over a buffer of your "
                "choosing (raw memory)")
_UNKNOWN = object()  # a value whose object cannot be known by reading (a parameter, a call's result)
#: Admitted functions that are doors unless called at once with one value (``copy.deepcopy(params)``), with why.
_CALLED_WITH_ONE_VALUE = (
    (copy.deepcopy, "copy.deepcopy is admitted only called with one value (copy.deepcopy(x)): its memo, a dict of "
                    "yours, keeps every object it walked through, the originals, private ones included "
                    "(a cluster's own __dict__, its ledger's list of messages), to change as you please"),
)

#: Every field of Python's syntax tree that holds a name (a string), and what the name is there.  A string in
#: any other field (a construct of a newer Python: ``type X = ...``, ``def f[T]()``) breaks the rules: what the
#: rules do not read, they do not admit.
SYNTAX_NAMES = {
    **dict.fromkeys([("Name", "id"), ("Attribute", "attr")], "read where it is visited"),
    **dict.fromkeys([("Constant", "value"), ("Constant", "kind")], "text"),
    **dict.fromkeys([("alias", "name"), ("ImportFrom", "module")], "imported, read with the import"),
    **dict.fromkeys([("FunctionDef", "name"), ("AsyncFunctionDef", "name"), ("ClassDef", "name"), ("arg", "arg"),
                     ("alias", "asname"), ("ExceptHandler", "name"), ("Global", "names"), ("Nonlocal", "names"),
                     ("MatchAs", "name"), ("MatchStar", "name"), ("MatchMapping", "rest")], "binds"),
    ("keyword", "arg"): "keyword",
    ("MatchClass", "kwd_attrs"): "reads of the subject",  # case C(x=p) reads subject.x
}
#: The classes whose one positional pattern is the subject itself: ``case float(x)``.
_SELF_MATCHING = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


@dataclass(frozen=True)
class Break:
    """One place where code breaks the rules: its line (in the code checked) and what it uses."""

    line: int
    construct: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.construct} ({self.why})"


@dataclass(frozen=True)
class _Refused:
    """A name that resolves to something graded code may not use, and why."""

    why: str


#: The largest cell the rules read, in characters (the course's largest is a few thousand).  Reading code takes
#: about a gigabyte of the grader's memory for every megabyte of it (IPython's tokens, Python's syntax tree and its
#: symbol table), and a notebook may hold 16 MB: a larger cell is refused unread, as one nested too deeply is
#: (a scratch cell is skipped, a lesson's own cell costs that lesson).
MAX_CELL_CHARS = 200_000


def too_large(source: str) -> bool:
    """Whether ``source`` (a cell) is past :data:`MAX_CELL_CHARS`: then nothing reads it."""
    return len(source) > MAX_CELL_CHARS


def ipython_to_python(source: str) -> str:
    """The Python that IPython runs for a cell: ``x?``, ``%timeit f()``, ``!ls`` become the calls
    (``get_ipython().run_line_magic(...)``) that they stand for; plain Python is unchanged."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # outside a notebook's environment: the source is plain Python
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # IPython could not read it either: the parser will say why
        return source


#: What reading a cell raises when it cannot be read: it does not parse (SyntaxError, ValueError for a NUL), or it is
#: nested deeper than Python's parser or a walk of its tree can follow (a sum of a thousand terms, a hundred thousand
#: unary minuses: RecursionError, or MemoryError from the parser).  Such a cell cannot be checked, so it is refused.
UNREADABLE = (SyntaxError, ValueError, RecursionError, MemoryError)

# --------------------------------------------------------------------------
# What the course's own cells bind
# --------------------------------------------------------------------------

def course_imports(source: str) -> dict[str, str]:
    """``{name: dotted path}`` of every name that ``source`` (a cell of the course's own) binds by import:
    ``np`` -> ``"numpy"``, ``Cluster`` -> ``"shared.cluster.Cluster"``, ``check`` -> ``"shared.checking.check"``."""
    if too_large(source):
        return {}
    try:
        tree = ast.parse(source)
    except UNREADABLE:
        return {}
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def resolve_path(path: str) -> Any:
    """The object a dotted path names, importing only allowed modules; a :class:`_Refused` when the path
    leads through a module graded code may not use, or names nothing."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name in ALLOWED_MODULES:
            break
    else:
        return _Refused(f"comes from {path}, which graded code may not use")
    try:
        obj: Any = importlib.import_module(module_name)
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
    except (ImportError, AttributeError):
        return _Refused(f"{path} is not something graded code may use")
    return obj


# --------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def names_bound(source: str) -> frozenset[str]:
    """The names that ``source`` (a cell, read as IPython reads it) binds in the notebook's namespace; none when it
    does not parse or is too large to read."""
    if too_large(source):
        return frozenset()
    try:
        return frozenset(_top_level_bindings(ipython_to_python(source)))
    except UNREADABLE:
        return frozenset()


def _top_level_bindings(source: str) -> dict[str, str]:
    """``{name: how}`` for every name the code binds in the notebook's namespace: at its top level,
    or in a function through ``global``."""
    found: dict[str, str] = {}

    def walk(table: symtable.SymbolTable, top: bool) -> None:
        for symbol in table.get_symbols():
            if top and (symbol.is_assigned() or symbol.is_imported()) or \
                    not top and symbol.is_declared_global() and symbol.is_assigned():
                found.setdefault(symbol.get_name(), "imported" if symbol.is_imported() else "assigned")
        for child in table.get_children():
            walk(child, False)

    walk(symtable.symtable(source, "<graded code>", "exec"), True)
    return found


def _bound_names(tree: ast.AST) -> tuple[set[str], dict[str, list[ast.AST]]]:
    """(names the code binds other than by import, {name: the import nodes that bind it})."""
    other: set[str] = set()
    imported: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imported.setdefault(alias.asname or alias.name.split(".")[0], []).append(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            other.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(node.name)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            other.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            other.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            other.add(node.rest)
    return other, imported


class _Checker(ast.NodeVisitor):
    def __init__(self, course: Mapping[str, str], tree: ast.AST, top_level: dict[str, str]):
        self.course = course
        self.breaks: list[Break] = []
        self.parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        self.class_members = _class_members(tree)
        self.own, imported = _bound_names(tree)
        self.imported: dict[str, Any] = {}  # a name bound only by imports of one object: that object
        for name, nodes in imported.items():
            if name in self.own:
                continue
            objects = {id(o): o for o in (self._imported_object(node, name) for node in nodes)}
            self.imported[name] = next(iter(objects.values())) if len(objects) == 1 else _UNKNOWN
        for name, how in top_level.items():
            if name in course and isinstance(self._course_object(name), _Refused):
                continue  # (a name of the visible tests' or the notebook's, not one graded code reads)
            if name in course or name in ALLOWED_BUILTINS and name in vars(builtins):
                given = f"the course's `{name}`" if name in course else f"Python's `{name}`"
                if not (how == "imported" and name in course and self.imported.get(name) is self._course_object(name)):
                    self.flag_line(1, f"{name} = ...", f"rebinds {given} in the notebook (name yours differently)")

    # resolution -------------------------------------------------------------

    @staticmethod
    def _imported_object(node: ast.AST, name: str) -> Any:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    target = alias.name if alias.asname else alias.name.split(".")[0]
                    return resolve_path(target)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return resolve_path(f"{node.module}.{alias.name}")
        return _UNKNOWN

    def _course_object(self, name: str) -> Any:
        return resolve_path(self.course[name]) if name in self.course else _UNKNOWN

    def resolve(self, node: ast.AST) -> Any:
        """The object an expression names, :data:`_UNKNOWN` for a value, or a :class:`_Refused`."""
        if isinstance(node, ast.Name):
            return self.resolve_name(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is _UNKNOWN or isinstance(base, _Refused):
                return _UNKNOWN
            try:
                return getattr(base, node.attr)
            except AttributeError:
                return _UNKNOWN
        return _UNKNOWN

    def resolve_name(self, name: str) -> Any:
        if name in self.own:
            return _UNKNOWN
        if name in self.imported:
            return self.imported[name]
        if name in self.course:
            found = self._course_object(name)
            if isinstance(found, _Refused):
                return found
            if not isinstance(found, _Refused) and allowlist.why_not_admitted(found, self.course[name]) is not None:
                return _Refused(f"comes from {self.course[name]}, which graded code may not use")
            return found
        if name in ALLOWED_BUILTINS and name in vars(builtins):
            return vars(builtins)[name]
        return _UNKNOWN  # a name another cell of the notebook defines: the learner's

    def flag(self, node: ast.AST, construct: str, why: str) -> None:
        self.flag_line(getattr(node, "lineno", 0), construct, why)

    def flag_line(self, line: int, construct: str, why: str) -> None:
        self.breaks.append(Break(line, construct, why))

    # imports ---------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if alias.name not in ALLOWED_MODULES:
                self.flag(node, f"import {alias.name}", _not_a_module(alias.name))
            elif alias.asname is None and top not in ALLOWED_MODULES:  # `import shared.mlp` binds `shared`
                self.flag(node, f"import {alias.name}", f"binds the whole package `{top}`: write "
                                                        f"`from {top} import {alias.name.split('.', 1)[1]}`")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, f"from {'.' * node.level}{module} import ...", "a relative import")
            return
        for alias in node.names:
            construct = f"from {module} import {alias.name}"
            if alias.name == "*":
                self.flag(node, f"from {module} import *", "imports names nobody can see")
            elif module == "__future__":
                continue
            elif module == "shared" and f"shared.{alias.name}" in ALLOWED_MODULES:
                continue
            elif module not in ALLOWED_MODULES:
                self.flag(node, f"from {module} import ...", _not_a_module(module))
                return
            elif alias.name.startswith("_"):
                self.flag(node, construct, "a private name")
            else:
                found = resolve_path(f"{module}.{alias.name}")
                why = found.why if isinstance(found, _Refused) else allowlist.why_not_admitted(
                    found, f"{module}.{alias.name}")
                if why:
                    self.flag(node, construct, why)

    # names and attributes --------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        why = _always_forbidden(node.id)
        if why:
            self.flag(node, node.id, why)
            return
        if not isinstance(node.ctx, ast.Load) or node.id in self.own:
            return
        found = self.resolve_name(node.id)
        if isinstance(found, _Refused):
            if node.id not in self.imported:  # (an import of something refused is flagged at the import)
                self.flag(node, node.id, found.why)
        elif isinstance(found, type(allowlist)):
            self.module_only_named(node, found)
        elif found is _NDARRAY and not self.checks_a_type(node):
            self.flag(node, node.id, _NDARRAY_WHY)
        elif self.called_with_one_value_problem(node, found):
            self.flag(node, node.id, self.called_with_one_value_problem(node, found))
        elif found is type and not self.type_admitted(node):
            self.flag(node, "type", "type is admitted as type(x) compared (type(x) is float; ==, != or in only with "
                                    "classes such as float or np.float64) or called with one literal "
                                    "(type(x)(\"nan\")): a class's class makes classes from computed names")
        elif node.id in vars(builtins) and node.id not in ALLOWED_BUILTINS and node.id not in self.course \
                and node.id not in self.imported:
            self.flag(node, node.id, "a built-in that reaches code, files or the interpreter" + (
                f"; to look around, {_OWN_CELL}" if node.id in _LOOKING_AROUND else ""))

    def called_with_one_value_problem(self, node: ast.AST, found: Any) -> str | None:
        """Why ``node``, naming ``found``, is one of :data:`_CALLED_WITH_ONE_VALUE` used otherwise than called at
        once with one value (held, passed on, or given a second argument), or None."""
        why = next((why for function, why in _CALLED_WITH_ONE_VALUE if found is function), None)
        call = self.parents.get(id(node))
        if why is None or isinstance(call, ast.Call) and call.func is node and _one_plain_argument(call):
            return None
        return why

    def only_read(self, node: ast.Attribute) -> bool:
        """Whether ``node`` (``x.flags``) is read through at once, an attribute or an item loaded from it."""
        use = self.parents.get(id(node))
        return isinstance(use, (ast.Attribute, ast.Subscript)) and use.value is node and isinstance(use.ctx, ast.Load)

    def checks_a_type(self, node: ast.AST) -> bool:
        """Whether ``node`` (naming np.ndarray) only names the type to check against: ``isinstance(x, np.ndarray)``
        (alone or in a tuple there), an annotation, ``case np.ndarray(...)``, a comparison (``type(x) is ...``)."""
        child, parent = node, self.parents.get(id(node))
        while isinstance(parent, ast.Tuple):  # isinstance(x, (list, np.ndarray))
            child, parent = parent, self.parents.get(id(parent))
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id not in self.own \
                and parent.func.id in ("isinstance", "issubclass") and len(parent.args) == 2 \
                and parent.args[1] is child:
            return True  # (Python's own: a parameter or a local named isinstance would be handed np.ndarray)
        if self.in_annotation(node):
            return True
        return isinstance(parent, ast.MatchClass) and parent.cls is child or isinstance(parent, ast.Compare) \
            and self.plain_comparison(parent)

    def in_annotation(self, node: ast.AST) -> bool:
        """Whether ``node`` is an annotation (``x: np.ndarray``, ``-> np.ndarray``) or a part of one made only of
        subscripts, tuples, lists and ``|`` (``dict[str, np.ndarray]``, ``np.ndarray | None``,
        ``tuple[np.ndarray, ...]``): such an expression only builds a type hint, stored where graded code
        cannot read it (``__annotations__``); a call, a lambda or a ``:=`` on the way up is not a type hint.
        Not a class body's annotation: ``dataclasses.fields(C)[0].type`` hands that out as a value."""
        child, parent = node, self.parents.get(id(node))
        while isinstance(parent, (ast.Subscript, ast.Tuple, ast.List)) or \
                isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.BitOr):
            child, parent = parent, self.parents.get(id(parent))
        in_class = isinstance(parent, ast.AnnAssign) and isinstance(self.scope_of(parent), ast.ClassDef)
        annotation = isinstance(parent, ast.arg) and parent.annotation is child or isinstance(parent, ast.AnnAssign) \
            and parent.annotation is child and not in_class or isinstance(parent, (ast.FunctionDef,
                                                                                   ast.AsyncFunctionDef)) \
            and parent.returns is child
        # The whole hint, not only the way up: `K(...) | [np.ndarray]` hands the list to K's __or__ (a Set's calls
        # its _from_iterable, which a subclass of yours defines), d[np.ndarray] to a defaultdict
        return annotation and self.only_hint(child)

    def only_hint(self, node: ast.AST) -> bool:
        """Whether ``node`` is made only of what builds a type hint and runs no code of the learner's: classes and
        typing's forms the rules resolve (``dict``, ``np.ndarray``, ``Optional``), constants (``None``, a string),
        and their subscripts (of a class or a typing form), tuples, lists and ``|``.  A name of yours is not: it
        could be a value whose ``|`` or ``[...]`` is a method that keeps what it is given."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, (ast.Tuple, ast.List)):
            return all(self.only_hint(item) for item in node.elts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.only_hint(node.left) and self.only_hint(node.right)
        if isinstance(node, ast.Subscript):
            return _makes_type_hints(self.resolve(node.value)) and self.only_hint(node.value) \
                and self.only_hint(node.slice)
        if isinstance(node, (ast.Name, ast.Attribute)):
            found = self.resolve(node)
            return found is None or found is not _UNKNOWN and not isinstance(found, _Refused) \
                and _makes_type_hints(found)
        return False

    def plain_comparison(self, compare: ast.Compare) -> bool:
        """Whether ``compare`` hands its operands to no code of the learner's: ``is``/``is not`` compare
        identities; ``==``, ``!=``, ``in`` and ``not in`` only between classes the rules resolve (``float``,
        ``np.float64``, ``np.ndarray``), constants (``None``) and ``type(...)``, alone or in a tuple, list or set.
        Anything else's ``==`` or ``<`` is a method it may have from an admitted class, which calls a hook a
        subclass of yours defines (Fraction's ``_richcmp``, UserList's ``_UserList__cast``) with ``type`` itself
        or ``np.ndarray``."""
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in compare.ops):
            return True
        return all(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in compare.ops) \
            and all(self.known_class(operand) for operand in [compare.left, *compare.comparators])

    def known_class(self, node: ast.AST) -> bool:
        """A class the rules resolve, a constant, Python's ``type(x)``, or a tuple, list or set of these."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return all(self.known_class(item) for item in node.elts)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id == "type" and "type" not in self.own \
                and _one_plain_argument(node)
        found = self.resolve(node) if isinstance(node, (ast.Name, ast.Attribute)) else _UNKNOWN
        return isinstance(found, type)

    def scope_of(self, node: ast.AST) -> ast.AST | None:
        """The class, function or lambda whose body holds ``node`` (None: the module)."""
        scope = self.parents.get(id(node))
        while scope is not None and not isinstance(scope, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef,
                                                           ast.Lambda)):
            scope = self.parents.get(id(scope))
        return scope

    def type_admitted(self, node: ast.Name) -> bool:
        """Whether ``node`` (a name of ``type``) is ``type(x)`` compared with something (``type(x) is float``) or
        called at once with one literal (``type(x)("nan")``: a value of x's type; ``type(int)(int)`` would be
        ``type`` itself).  Anywhere else ``type`` hands
        out classes' classes, and a class's class called with three arguments makes a class from computed
        names (``type(name, bases, namespace)`` by any name): its dunder methods, named by strings, would run
        where the interpreter calls them."""
        call = self.parents.get(id(node))
        if not (isinstance(call, ast.Call) and call.func is node):
            return False
        if len(call.args) == 3:
            return True  # type(name, bases, namespace): flagged with the call
        if not _one_plain_argument(call):
            return False
        use = self.parents.get(id(call))
        # type(x)(v) with v a literal only: type(int)(int) is type(int) = type itself, and type(int)(np.zeros(1)) is
        # np.ndarray, each held as a value (a class made from computed names, an array over a buffer of your choosing)
        called = isinstance(use, ast.Call) and use.func is call and _one_plain_argument(use) \
            and _literal(use.args[0])
        # Its name or its text, in a message: type(x).__name__, f"got {type(x)}", print(type(x)) (a string either way)
        named = isinstance(use, ast.Attribute) and use.attr in _READABLE_DUNDERS and isinstance(use.ctx, ast.Load)
        shown = isinstance(use, ast.FormattedValue) or isinstance(use, ast.Call) and call in use.args \
            and isinstance(use.func, ast.Name) and use.func.id in ("print", "str", "repr") \
            and use.func.id not in self.own
        return isinstance(use, ast.Compare) and self.plain_comparison(use) or called or named or shown

    def module_only_named(self, node: ast.AST, module: Any) -> None:
        """A module is a namespace, never a value: ``np.linalg.norm(x)``, but not ``la = np.linalg`` nor
        ``f(np)`` (a module held as a value would escape what reading can know of it)."""
        parent = self.parents.get(id(node))
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.flag(node, module.__name__, "a module used as a value (name what you use from it: "
                                             "np.linalg.norm(x))")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.check_attribute(node, node.value, node.attr)
        if isinstance(node.ctx, ast.Load) and self.resolve(node) is _NDARRAY and not self.checks_a_type(node):
            self.flag(node, ".ndarray", _NDARRAY_WHY)
        if node.attr == "flags" and not self.only_read(node):
            self.flag(node, ".flags", "an array's flags are read (x.flags.writeable, x.flags['C_CONTIGUOUS']), never "
                                      "held or set: x.flags['WRITEABLE'] = True makes a read-only array writeable")
        found = self.resolve(node)
        why = self.called_with_one_value_problem(node, found) if isinstance(node.ctx, ast.Load) else None
        if why:
            self.flag(node, f".{node.attr}", why)
        if isinstance(found, type(allowlist)) and isinstance(node.ctx, ast.Load):
            self.module_only_named(node, found)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            verb = "assigns" if isinstance(node.ctx, ast.Store) else "deletes"
            self.flag(node, f".{node.attr} = ..." if verb == "assigns" else f"del .{node.attr}",
                      f"{verb} an attribute (graded code computes with objects, it does not change them)")
        self.visit(node.value)

    def check_attribute(self, node: ast.AST, base_node: ast.AST, attribute: str) -> None:
        if attribute in _READABLE_DUNDERS and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            return  # x.__name__, type(x).__name__: a string, for a message
        if attribute.startswith("_"):
            self.flag(node, f".{attribute}", "an attribute that begins with an underscore")
            return
        base = self.resolve(base_node)
        if isinstance(base, _Refused):
            return  # the name itself is flagged
        if isinstance(base_node, ast.Call) and isinstance(base_node.func, ast.Name) \
                and base_node.func.id == "get_ipython":
            return  # get_ipython().run_line_magic: get_ipython is flagged, with what to do
        why = attribute_problem(base, attribute)
        if why is not None and attribute in self.class_members and base is _UNKNOWN:
            why = (f"{why}: reading it by name, the rules cannot tell your own class's .{attribute} from another "
                   f"object's; keep such fields in a dict or a tuple, and helpers as functions")
        if why is None and attribute in _FORMATTING and not isinstance(base, type(allowlist)):
            why = _format_problem(base_node)  # however it is reached: x.format, getattr(x, "format")
        if why:
            self.flag(node, f".{attribute}", why)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _DUNDER.match(node.value.strip()):
            self.flag(node, repr(node.value), "a string that names a dunder attribute")

    # calls -----------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        name = function.id if isinstance(function, ast.Name) else None
        if name in ("getattr", "hasattr") and name not in self.own:
            attribute = node.args[1] if len(node.args) >= 2 else None
            if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str) and node.args:
                self.check_attribute(node, node.args[0], attribute.value)
                for argument in [node.args[0], *node.args[2:], *(k.value for k in node.keywords)]:
                    self.visit(argument)  # getattr(x, "dtype", None): a plain attribute read
                return
            self.flag(node, name, "reads an attribute by a computed name")
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                self.visit(argument)
            return
        if self.resolve(function) is _NDARRAY:
            self.flag(node, "ndarray(...)", "an array over a buffer of your choosing (use np.empty, np.zeros, ...)")
        if name == "type" and len(node.args) == 3:
            self.flag(node, "type(name, bases, namespace)", "makes a class from computed attributes")
        for keyword in node.keywords:  # (a dunder keyword is flagged with the tree's names)
            if keyword.arg == "refcheck":
                self.flag(node, "refcheck=...", "resizes an array under other arrays' feet (raw memory)")
        self.generic_visit(node)

    # definitions -----------------------------------------------------------

    def _definition(self, node: ast.AST, name: str) -> None:
        why = _always_forbidden(name)
        if why:
            self.flag(node, name, why)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for keyword in node.keywords:  # class A(B, metaclass=M, x=1): how the class is made, by code of your choosing
            self.flag(node, f"class {node.name}({keyword.arg or '**'}=...)",
                      "a class statement's keyword (metaclass=...) chooses how the class is made")
        hooks = _private_hooks() if node.bases else frozenset()
        for statement in node.body:  # class F(Fraction): def _richcmp(self, other, op): Fraction's < calls it
            for name in _names_defined(statement):
                if name in hooks:
                    self.flag(statement, f"{node.name}.{name}", "replaces a private method of an admitted class, "
                                                                "which that class's own methods call with what they "
                                                                "are given (name yours differently)")
        self.generic_visit(node)

    # match statements --------------------------------------------------------

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        """``case C(a, b, x=p)`` reads attributes of the subject: ``x`` by the name written (checked with the
        tree's other names, :meth:`check_names`), ``a`` and ``b`` by the names ``C.__match_args__`` lists."""
        if node.patterns:
            why = self.positional_pattern_problem(node.cls, len(node.patterns))
            if why:
                self.flag(node, "case C(...)", why)
        self.generic_visit(node)

    def positional_pattern_problem(self, cls_node: ast.AST, count: int) -> str | None:
        cls = self.resolve(cls_node)
        if isinstance(cls, _Refused):
            return None  # the class's name is flagged itself
        if cls is _UNKNOWN:
            return ("a class pattern's positional parts read the attributes its class names in __match_args__, "
                    "which reading cannot know (name them: case C(x=...))")
        if count == 1 and any(cls is kind for kind in _SELF_MATCHING):
            return None  # case float(x): x is the subject itself
        names = getattr(cls, "__match_args__", None)
        if not isinstance(names, tuple) or len(names) < count or not all(isinstance(n, str) for n in names):
            return f"{_name_of(cls)} does not name {count} attribute(s) for positional patterns"
        for name in names[:count]:
            why = attribute_problem(_UNKNOWN, name)
            if why:
                return f"reads .{name} ({why})"
        return None

    # the tree's names --------------------------------------------------------

    def check_names(self, tree: ast.AST) -> None:
        """Every string the tree holds, wherever it is: each field that holds one is in :data:`SYNTAX_NAMES`,
        which says what the string is there; a string anywhere else is a construct the rules do not read.

        Names used, attributes and constants are checked where they are visited (they need their context);
        here, the names the code binds, the keywords it passes and the attributes a class pattern reads."""
        for node in ast.walk(tree):
            for field, value in ast.iter_fields(node):
                strings = [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, str)]
                if not strings:
                    continue
                role = SYNTAX_NAMES.get((type(node).__name__, field))
                if role is None:
                    self.flag(node, f"{type(node).__name__}.{field} {strings[0]!r}",
                              "a construct whose names the rules do not read")
                for name in strings:
                    if role == "binds":
                        self._definition(node, name)
                    elif role == "keyword" and _DUNDER.match(name):
                        self.flag(node, f"{name}=...", "a dunder name")
                    elif role == "reads of the subject":
                        why = attribute_problem(_UNKNOWN, name) or (
                            "formats a string that is not written here (use an f-string)" if name in _FORMATTING
                            else None)
                        if why:
                            self.flag(node, f"case C({name}=...)", why)


def attribute_problem(base: Any, attribute: str) -> str | None:
    """Why graded code may not read ``base.attribute``, or None when it may.

    ``base`` is the object the code names (a module, a class, a function), or :data:`_UNKNOWN` for a
    value that reading cannot know (a parameter, a call's result): then the attribute is admitted by
    name, as an attribute of the values graded code computes with (:func:`shared.allowlist.value_attributes`).
    """
    if attribute.startswith("_"):
        return "an attribute that begins with an underscore"
    if base is _UNKNOWN:
        return allowlist.value_attribute_problem(attribute)
    if isinstance(base, type(allowlist)):  # a module's member: an admitted object
        try:
            found = getattr(base, attribute)
        except AttributeError:
            return f"not an attribute of {_name_of(base)}"
        return allowlist.why_not_admitted(found, f"{base.__name__}.{attribute}")
    if isinstance(base, type) and not any(attribute in vars(kind) for kind in base.__mro__):
        # Mapping.register, Fraction.register: ABCMeta's, not the class's: they change the class for every caller
        return f"a method of {_name_of(type(base))}, the class's class: it changes {_name_of(base)} for everyone"
    names = allowlist.value_attributes()  # a class's or an object's: a method or a field, as values' are
    if names.get(attribute):  # a door on some value type is one on every value
        return names[attribute]
    if attribute in names:
        return None
    try:
        found = getattr(base, attribute)
    except Exception:  # no such attribute (or reading it fails): nothing admitted is there
        return f"not an attribute of {_name_of(base)}"
    return None if allowlist.why_not_admitted(found, attribute) is None else allowlist.value_attribute_problem(attribute)


def _literal(node: ast.AST) -> bool:
    """A number, string or bytes written in the code (``"nan"``, ``0``, ``-1.5``): never a class."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, complex, str, bytes, bool)


def _makes_type_hints(obj: Any) -> bool:
    """Whether ``obj[...]`` only builds a type hint: ``obj`` is a class (``dict``, ``tuple``, ``np.ndarray``,
    ``collections.abc.Callable``: its ``__class_getitem__``) or one of ``typing``'s forms (``Optional``)."""
    return isinstance(obj, type) or getattr(type(obj), "__module__", None) == "typing"


def _not_a_module(name: str) -> str:
    hint = _MODULE_HINTS.get(name)
    return "not a module graded code may use" + (f" (instead: {hint})" if hint else "")


def _class_members(tree: ast.AST) -> set[str]:
    """The names the code's own classes define in their bodies (methods, fields): for a clearer message."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.add(statement.name)
                elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    found.add(statement.target.id)
                elif isinstance(statement, ast.Assign):
                    found.update(t.id for t in statement.targets if isinstance(t, ast.Name))
            found.update(n.attr for n in ast.walk(node)  # self.total = ...
                         if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store))
    return found


def _names_defined(statement: ast.AST) -> list[str]:
    """The names a statement of a class body defines there: a method, a field, a class attribute."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
    return [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]


@functools.lru_cache(maxsize=None)
def _private_hooks() -> frozenset[str]:
    """The private (``_x``, not dunder) names that the admitted classes and the classes they derive from define:
    their own methods call them on ``self`` (Fraction's ``_richcmp``, a Set's ``_from_iterable``, UserList's
    ``_UserList__cast``), so a subclass that defines one runs its code with what they were given."""
    classes = [value for value, _ in allowlist.admitted_objects().values() if isinstance(value, type)]
    return frozenset(name for cls in [*classes, *allowlist.value_types()] for kind in cls.__mro__
                     for name in vars(kind) if name.startswith("_") and not _DUNDER.match(name))


def _one_plain_argument(call: ast.Call) -> bool:
    """``f(x)``: one positional argument, not unpacked, and no keyword."""
    return len(call.args) == 1 and not isinstance(call.args[0], ast.Starred) and not call.keywords


_FORMATTING = ("format", "format_map")  # str.format: its fields ({0.x}, {0[k]}) read attributes and items


def _format_problem(template: ast.AST) -> str | None:
    """Why ``template.format(...)`` may read what the code does not name, or None: the template is a string
    written in the code whose fields name only arguments (``"{} of {n:.3f}"``), never an attribute or an item
    of one (``"{0.__class__}"``), which the rules would otherwise never see."""
    if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
        return "formats a string that is not written here: its fields could read any attribute (use an f-string)"
    pending = [template.value]
    while pending:
        try:
            fields = list(string.Formatter().parse(pending.pop()))
        except ValueError:
            return None  # not a valid template: .format raises before it reads anything
        for _, field, spec, _ in fields:
            if field and any(mark in field for mark in ".["):
                return f"the field {{{field}}} reads an attribute or an item of an argument (use an f-string)"
            if spec:
                pending.append(spec)  # "{0:{1}}": a field inside a field's format
    return None


def _name_of(obj: Any) -> str:
    return str(getattr(obj, "__name__", None) or type(obj).__name__)


def _always_forbidden(name: str) -> str | None:
    """Why ``name`` may appear nowhere in graded code (bound or used), or None."""
    if _DUNDER.match(name):
        return "a dunder name"
    if name in NOTEBOOK_MACHINERY:
        return NOTEBOOK_MACHINERY[name]
    if _HISTORY.match(name):
        return "IPython's history"
    return None


def check_source(source: str, *, course: Mapping[str, str] | None = None) -> list[Break]:
    """Every place where ``source`` breaks the rules, in order.

    ``source`` is read as IPython reads a cell first (:func:`ipython_to_python`).  ``course``:
    ``{name: dotted path}`` of the names the course's own cells bind by import
    (:func:`course_imports`): such a name resolves to that object wherever the code does not bind it
    itself, and may not be rebound.  Code that does not parse, or is nested too deeply to be read
    (:data:`UNREADABLE`), gives one break: it cannot be checked.
    """
    if too_large(source):
        return [Break(1, "a cell too large to read", f"a cell of more than {MAX_CELL_CHARS:,} characters cannot be "
                                                     f"checked: split it, or leave out what graded code does not need")]
    return _check_source(source, course)


def _check_source(source: str, course: Mapping[str, str] | None) -> list[Break]:
    """:func:`check_source` of a cell of any size (scratch_lines checks again what runs of a cell it read: its lines
    left out as comments, longer than the cell)."""
    source = ipython_to_python(source)
    try:
        tree = ast.parse(source)
        top_level = _top_level_bindings(source)
        checker = _Checker(dict(course or {}), tree, top_level)
        checker.check_names(tree)
        checker.visit(tree)
    except (SyntaxError, ValueError) as error:
        return [Break(getattr(error, "lineno", 0) or 0, "a syntax error", "code that does not parse cannot be checked")]
    except (RecursionError, MemoryError):
        return [Break(1, "code nested too deeply", "an expression nested deeper than the rules can follow cannot be "
                                                   "checked: write it in smaller steps")]
    unique = {(b.line, b.construct): b for b in checker.breaks}
    return sorted(unique.values(), key=lambda b: (b.line, b.construct))


@dataclass(frozen=True)
class ScratchLines:
    """A cell whose every break is in top-level statements that can be left out: what of it runs while grading.

    ``source``: the cell as IPython reads it, with those statements' lines made comments (so every line keeps
    its number), and it keeps the rules; ``breaks``: why they were left out; ``lines``: their lines (from 1);
    ``binds``: the names they would have bound in the notebook (``import os`` binds ``os``)."""

    source: str
    breaks: tuple[Break, ...]
    lines: tuple[int, ...]
    binds: frozenset[str]

    def note(self) -> str:
        """The one line the cell shows while grading: what was left out, and that it costs nothing."""
        first = min(self.breaks, key=lambda b: b.line)
        lines = ", ".join(str(line) for line in self.lines[:6]) + (", ..." if len(self.lines) > 6 else "")
        return (f"Line{'s' if len(self.lines) > 1 else ''} {lines} of this cell skipped while grading (line "
                f"{first.line} uses {first.construct}: {first.why}): it does not change your grade; the rest of the "
                f"cell ran, as only code that keeps the rules for graded code runs while grading.\n")


def scratch_lines(source: str, *, course: Mapping[str, str] | None = None) -> ScratchLines | None:
    """``source`` (a cell) without the top-level statements that break the rules: ``help(f)``, ``f?``,
    ``%timeit f(x)``, ``plt.plot(...)`` or ``import time`` beside a function that keeps them.

    A statement is left out whole (with any statement that shares a line with it), and the rest is checked again
    as it will run, until it keeps the rules: what runs is exactly what was checked, and leaving code out can
    only take away what a cell does.  Whether what was left out mattered (it bound a name a lesson needs) is the
    caller's to judge from ``binds``.  None when the cell keeps the rules, or when no such remainder exists: it
    does not parse or is too large to read, a break is not inside a top-level statement, or nothing would be left.

    A cell that begins with ``%%time`` (which runs its cell as it is, and prints how long it took) is read as its
    cell: that first line is left out, and the rest is read as any cell."""
    if too_large(source):
        return None
    timed = _TIMED_CELL.match(source)
    python = _LEFT_OUT + ipython_to_python(source[timed.end():]) if timed else ipython_to_python(source)
    try:
        body = ast.parse(python).body
    except UNREADABLE:
        return None
    spans = [(min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))]),
              statement.end_lineno or statement.lineno) for statement in body]
    lines = python.splitlines(keepends=True)
    starts = [first for first, _ in spans]  # in order: top-level statements follow one another

    def statements_at(line: int) -> set[int]:
        """The top-level statements whose lines hold ``line`` (several share a line: ``x = 1; help(x)``)."""
        found, j = set(), bisect.bisect_right(starts, line) - 1
        while j >= 0 and spans[j][1] >= line:
            found.add(j)
            j -= 1
        return found

    left_out: set[int] = set()  # indices of body's statements
    breaks = [Break(1, "%%time", "a cell magic; while grading, the cell below it runs once, as plain Python")] \
        if timed else []
    while True:
        kept = _blank(lines, {n for i in left_out for n in range(spans[i][0], spans[i][1] + 1)})
        found = _check_source(kept, course)
        if not found:
            break
        at = {b.line: statements_at(b.line) for b in found}
        if any(not held for held in at.values()):
            return None
        hit = set().union(*at.values()) - left_out
        if not hit:
            return None
        # a statement that shares a line with one left out goes too (``x = 1; help(x)``); the statements that share
        # a line with statement i stand next to it, in order (read outwards until one does not)
        pending = list(hit)
        while pending:
            i = pending.pop()
            for step in (-1, 1):
                j = i + step
                while 0 <= j < len(spans) and spans[j][0] <= spans[i][1] and spans[i][0] <= spans[j][1]:
                    if j not in hit and j not in left_out:
                        hit.add(j)
                        pending.append(j)
                    j += step
        breaks.extend(b for b in found if at[b.line] & hit)
        left_out |= hit
    if not (left_out or timed) or len(left_out) == len(body):
        return None
    numbers = sorted({n for i in left_out for n in range(spans[i][0], spans[i][1] + 1)} | ({1} if timed else set()))
    try:
        binds = _top_level_bindings(_blank(lines, set(range(1, len(lines) + 1)) - set(numbers)))
    except UNREADABLE:  # (``nonlocal x`` at the top level parses, and is refused only here)
        return None
    return ScratchLines(kept, tuple(breaks), tuple(numbers), frozenset(binds))


_LEFT_OUT = "# (left out while grading)\n"  # a comment, not an empty line: IPython drops a cell's leading empty lines
#: ``%%time`` as a cell's first line (after any empty lines): IPython runs the cell below it as it is.
_TIMED_CELL = re.compile(r"\A(?:[ \t]*\n)*%%time(?:[ \t][^\n]*)?(?:\n|\Z)")


def _blank(lines: list[str], numbers: set[int]) -> str:
    """``lines`` joined, each line whose number (from 1) is in ``numbers`` replaced by a comment (so that every
    line keeps its number)."""
    return "".join(_LEFT_OUT if number in numbers else line for number, line in enumerate(lines, start=1))


#: Where every rules message sends the learner for the whole list of what graded code may use (the README's section,
#: written from :mod:`shared.allowlist` by ``make build``): the list itself, some 600 characters, would bury the
#: construct, its line and why, which lead the message.
RULES_POINTER = ('Graded code is plain computation: NumPy, math, a few standard modules and the course\'s helpers '
                 '(everything it may use: the README, "Rules for graded code")')


def describe(breaks: list[Break], where: str, limit: int = 3) -> str:
    """The course's message for ``breaks`` found in ``where`` ("the cell that defines linear_forward"): each break's
    line, construct and why first, then one short pointer to the rules (:data:`RULES_POINTER`).  The visible tests
    (``shared.checking.check_rules``) and the grader (``grading/rules.py``) both say it, in the same words."""
    shown = "; ".join(str(b) for b in breaks[:limit])
    more = f"; and {len(breaks) - limit} more" if len(breaks) > limit else ""
    return f"{where} breaks the course's rules for graded code: {shown}{more}. {RULES_POINTER}"
