"""What graded code may reach: an allow-list of objects, computed from the allowed modules.

Graded code (a lesson's function, what it calls from the notebook, and every cell that
runs while a notebook is graded) is plain computation.  :mod:`shared.policy` reads it
and resolves every name and attribute chain it can to an *object*; this module says
which objects are admitted.  It is an allow-list built in three steps, each positive:

1. **Modules**: :data:`ALLOWED_MODULES`, nothing else.  A module reached through an
   attribute (``dataclasses.sys``, ``numpy.lib``) is admitted only if it is on that list.
2. **Objects**: the public members of the allowed modules whose *origin* (the module
   that really implements them, not the one that re-exports them) is on
   :data:`ALLOWED_ORIGINS`: NumPy's computational modules (not its file, pickle, test or
   raw-memory modules, which are simply not listed), ``math``, ``itertools`` and the
   other allowed standard modules, the helper package's library, and the built-ins of
   :data:`ALLOWED_BUILTINS`; and plain constants (numbers, strings, dtypes).  A few members
   of allowed origins are still doors (:data:`DOORS`: a buffer of your choosing, a file,
   attributes set by computed names), each with why.
3. **Values**: graded code computes with values it did not import: arrays, numbers,
   lists, dicts, the cluster it is handed.  An attribute of such a value is admitted by
   *name*: the public attributes of :func:`value_types` (the standard value types and
   every admitted class), but for :data:`VALUE_DOORS` (an array's raw memory, its file
   methods, a generator's bit generator, ...), and a name that is a door on any value type
   is refused on every value.

The test ``tests/test_allowlist.py`` proves the list closed: from every admitted object
and a sample value of every value type it walks every admitted attribute chain (depth 4)
and fails on anything reached that is not itself admitted: a module not on the list, the
built-ins, a frame, code, a file, raw memory.  It fails when a door is admitted.
"""

from __future__ import annotations

import abc
import builtins
import collections
import functools
import importlib
import inspect
import sys
import types
from functools import lru_cache
from typing import Any

import numpy as np

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
    "numbers": "abstract number types for isinstance (numbers.Integral, numbers.Real)",
    "typing": "type hints (Optional, Union, Sequence, ...); get_type_hints, which runs strings, is not admitted",
    "__future__": "compiler directives (from __future__ import annotations)",
    "shared.mlp": "the helper MLP of any depth",
    "shared.data": "synthetic batches",
    "shared.cluster": "the simulated cluster",
    "shared.memory": "byte counts and dtypes of the memory lessons",
    "shared.dtypes": "the bytes of one number of each dtype, and the input checks of lessons 021, 022, 036, 037",
    "shared.lesson_blocks": "the helper's versions of earlier lessons",
    "shared.training": "lesson 040's configuration, 039's rows to compare and one worker's gradients",
}

#: Where an admitted function or class may be implemented: the allowed modules themselves and
#: NumPy's computational modules (arrays, math, shapes, sets, statistics, linear algebra, random).
#: Not listed, so never admitted: NumPy's file and pickle I/O, its test runner, its C-extension
#: helpers, its memory-mapped and record arrays, its stride tricks.
ALLOWED_ORIGINS = frozenset({
    *ALLOWED_MODULES,
    "_collections_abc", "_functools", "_collections", "itertools", "math", "fractions", "numbers",
    "numpy._core.fromnumeric", "numpy._core.numeric", "numpy._core.function_base", "numpy._core.shape_base",
    "numpy._core._multiarray_umath", "numpy._core.multiarray", "numpy.lib._stride_tricks_impl",
    "numpy._core.einsumfunc", "numpy._core.numerictypes", "numpy._core._asarray", "numpy._core.arrayprint",
    "numpy._core._ufunc_config", "numpy._core.getlimits", "numpy._core._exceptions", "numpy.exceptions",
    "numpy.lib._arraypad_impl", "numpy.lib._arraysetops_impl", "numpy.lib._function_base_impl",
    "numpy.lib._histograms_impl", "numpy.lib._index_tricks_impl", "numpy.lib._nanfunctions_impl",
    "numpy.lib._polynomial_impl", "numpy.lib._shape_base_impl", "numpy.lib._twodim_base_impl",
    "numpy.lib._type_check_impl", "numpy.lib._ufunclike_impl", "numpy.lib._scimath_impl",
    "numpy.linalg._linalg", "numpy.random._generator", "numpy.random.mtrand", "numpy.random.bit_generator",
    "numpy.random._pcg64", "numpy.random._mt19937", "numpy.random._philox", "numpy.random._sfc64",
    "typing",
})

#: The built-in functions and types graded code may use (everything else of ``builtins`` is not admitted:
#: ``eval``, ``exec``, ``open``, ``getattr`` by a computed name, ``globals``, ``help``, ``memoryview``, ...).
ALLOWED_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "classmethod", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
    "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "print",
    "property", "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum",
    "super", "tuple", "type", "zip", "NotImplemented", "Ellipsis", "None", "True", "False",
    *(name for name, value in vars(builtins).items()
      if isinstance(value, type) and issubclass(value, BaseException)),  # raising and catching errors
})

#: Members of allowed origins that are doors all the same, each with why.
DOORS = {
    "numpy.frombuffer": "an array over a buffer of your choosing (raw memory)",
    "numpy.from_dlpack": "an array over another library's memory (raw memory)",
    "numpy.fromfile": "reads files",
    "numpy.lib.stride_tricks.as_strided": "a view with strides of your choosing, past the array's memory",
    "functools.update_wrapper": "sets attributes by computed names",
    "functools.wraps": "sets attributes by computed names",
    "dataclasses.make_dataclass": "makes a class with attributes named by computed strings",
    "functools.singledispatch": "runs a string annotation as code when a function is registered (get_type_hints)",
    "functools.singledispatchmethod": "runs a string annotation as code when a function is registered "
                                      "(get_type_hints)",
    "dataclasses.dataclass": "writes a class's methods as source text from the names its annotations hold and runs "
                             "it (exec): given a class whose annotations carry computed names, it runs them as code",
    "typing.get_type_hints": "runs the strings of annotations as code (eval)",
    "typing.ForwardRef": "a string to be run as code as a type hint (get_type_hints evaluates it)",
    "typing.NamedTupleMeta": "a class's class: makes classes",
    "typing.IO": "the interface of a file", "typing.TextIO": "the interface of a file",
    "typing.BinaryIO": "the interface of a file", "typing.io": "the interfaces of files",
    "typing.re": "regular expressions' types", "typing.Pattern": "a regular expression's type",
    "typing.Match": "a regular expression's type",
    "typing.final": "sets an attribute of the object it is given", "typing.no_type_check": "sets an attribute of the "
    "object it is given, and of its class's functions", "typing.no_type_check_decorator": "sets attributes",
    "typing.dataclass_transform": "sets an attribute of the object it is given",
    "typing.Type": "calls type: a class's class makes classes from computed names",
    "typing.get_origin": "reads a hint's __origin__ (np.ndarray as a value)",
    "typing.get_args": "reads a hint's __args__ (np.ndarray as a value)",
}

#: Attributes of values that are doors, by the type that has them, each with why.
VALUE_DOORS = {
    (np.ndarray, "ctypes"): "reaches raw memory", (np.ndarray, "data"): "the array's raw memory buffer",
    (np.ndarray, "base"): "the object whose memory a view shares (the harness's, another worker's)",
    (np.ndarray, "setflags"): "makes a read-only array writeable",
    (np.ndarray, "resize"): "reallocates memory under other arrays' feet",
    (np.ndarray, "tofile"): "writes files", (np.ndarray, "dump"): "writes a pickle file",
    (np.ndarray, "dumps"): "makes a pickle",
    (np.random.Generator, "bit_generator"): "the generator's raw state (ctypes, cffi, capsules)",
    (np.random.BitGenerator, "ctypes"): "reaches raw memory", (np.random.BitGenerator, "cffi"): "reaches raw memory",
    (np.random.BitGenerator, "capsule"): "a raw pointer", (np.random.BitGenerator, "lock"): "the interpreter's threads",
}

CONSTANT_TYPES = (int, float, complex, bool, str, bytes, type(None), np.generic, np.dtype)


def origin(obj: Any) -> str | None:
    """The module that implements ``obj`` (a function, a class, a ufunc), or None when there is none.

    NumPy re-exports most of its functions under ``numpy`` (``np.load.__module__`` is ``"numpy"``);
    a Python function's code says where it really is, so that is asked first.
    """
    function = inspect.unwrap(obj) if callable(obj) and not isinstance(obj, type) else obj
    function = getattr(function, "_implementation", function)  # NumPy's array-function dispatchers
    code = getattr(function, "__code__", None)
    if code is not None:
        where = _module_of_file(code.co_filename)
        if where == "shared.answers" and hasattr(function, "answers_lessons"):
            return function.__module__  # a helper behind the lesson lock: the lock only refuses to run
        if where is None and isinstance(getattr(function, "__module__", None), str):
            return function.__module__  # compiled by Cython: its code names a .pyx file, its module is right
        return where
    if isinstance(obj, type):
        return _class_origin(obj)
    if isinstance(obj, np.ufunc):
        return "numpy"
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, types.ModuleType):  # a built-in function: its module is its __self__
        return owner.__name__
    if owner is not None and not isinstance(owner, type):  # a method of a module-level object (np.random.normal)
        return origin(type(owner))
    if not isinstance(obj, (types.BuiltinFunctionType, types.FunctionType)):
        return _class_origin(type(obj))  # an object that can be called (NumPy's test runner): its class's
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else None


@lru_cache(maxsize=None)
def _class_origin(kind: type) -> str | None:
    """Where a class is implemented: the file of the code of its own methods (a class's ``__module__`` can be
    set to any module, and NumPy sets it to ``numpy``), else, for a class compiled in C, its ``__module__``."""
    for member in vars(kind).values():
        member = getattr(member, "__func__", getattr(member, "fget", member))
        code = getattr(inspect.unwrap(member) if callable(member) else member, "__code__", None)
        where = _module_of_file(code.co_filename) if code is not None else None
        if where is not None:  # (code made by dataclasses or compiled by Cython names no module's file)
            return where
    return kind.__module__


@lru_cache(maxsize=None)
def _files() -> dict[str, str | None]:
    return {}


def _module_of_file(filename: str) -> str | None:
    found = _files()
    if filename not in found:
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if path:
                found.setdefault(path, name)
        found.setdefault(filename, None)  # no module's file ("<string>", a .pyx): asked once
    return found[filename]


def _import_allowed() -> dict[str, types.ModuleType]:
    return {name: importlib.import_module(name) for name in ALLOWED_MODULES if name != "__future__"}


def _is_constant(obj: Any) -> bool:
    if isinstance(obj, CONSTANT_TYPES):
        return True
    if isinstance(obj, (tuple, frozenset)):
        return all(_is_constant(item) or _admissible_class(item) for item in obj)
    return False


def _admissible_class(obj: Any) -> bool:
    return isinstance(obj, type) and (issubclass(obj, np.generic) or origin(obj) in ALLOWED_ORIGINS)


def why_not_admitted(obj: Any, name: str) -> str | None:
    """Why ``obj``, reached as ``name`` (``"numpy.load"``), is not admitted, or None when it is."""
    if isinstance(obj, types.ModuleType):
        return None if obj.__name__ in ALLOWED_MODULES else f"the module {obj.__name__}, which graded code may not use"
    if name in DOORS:
        return DOORS[name]
    for door, why in DOORS.items():
        module, _, attribute = door.rpartition(".")
        if obj is getattr(sys.modules.get(module), attribute, object()):
            return why
    hinted = getattr(obj, "__origin__", None) if getattr(type(obj), "__module__", None) == "typing" else None
    if hinted is type or hinted is not None and why_not_admitted(hinted, name) is not None:
        return "a type hint that calls what it names, which is not admitted"  # typing.ContextManager()
    if _is_constant(obj):
        return None
    if isinstance(obj, dict) and all(_is_constant(k) and (_is_constant(v) or _admissible_class(v))
                                     for k, v in obj.items()):
        return None  # NumPy's tables of types (np.sctypeDict, np.typecodes)
    if isinstance(obj, np.ufunc):
        return None
    if isinstance(obj, types.GenericAlias):  # a type hint such as dict[str, np.ndarray]
        parts = (obj.__origin__, *obj.__args__)
        return None if all(why_not_admitted(part, name) is None for part in parts) else "a type hint of other types"
    if getattr(obj, "__module__", None) == "builtins" or obj is builtins:
        return None if any(obj is vars(builtins).get(b) for b in ALLOWED_BUILTINS) else \
            "a built-in that reaches code, files or the interpreter"
    where = origin(obj)
    if where in ALLOWED_ORIGINS:
        return None
    return f"implemented in {where or 'an unknown place'}, which is not plain computation"


@lru_cache(maxsize=None)
def admitted_objects() -> dict[int, tuple[Any, str]]:
    """Every admitted object, ``{id: (object, where it is reached)}``: the allowed modules, their
    admitted public members, and the allowed built-ins."""
    found: dict[int, tuple[Any, str]] = {}
    for module_name, module in _import_allowed().items():
        found[id(module)] = (module, module_name)
        for attribute in dir(module):
            if attribute.startswith("_"):
                continue
            value = getattr(module, attribute)
            where = f"{module_name}.{attribute}"
            if why_not_admitted(value, where) is None:
                found.setdefault(id(value), (value, where))
    for name in ALLOWED_BUILTINS:
        if name in vars(builtins):
            value = vars(builtins)[name]
            found.setdefault(id(value), (value, name))
    return found


def is_admitted(obj: Any) -> bool:
    return id(obj) in admitted_objects()


# Admitted classes that are not kinds of value: every object is an ``object``, and the others make classes.
_NOT_VALUE_TYPES = (object, type, super, classmethod, staticmethod, property)


@lru_cache(maxsize=None)
def value_types() -> tuple[type, ...]:
    """The types of the values graded code computes with: the standard ones, NumPy's arrays,
    scalars and their companions, and every admitted class (the cluster, the configuration, ...)."""
    standard = [int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range, slice,
                type(None), types.MappingProxyType, collections.deque, collections.defaultdict,
                collections.OrderedDict, collections.Counter, functools.partial, np.ufunc,
                np.ndarray, np.dtype, np.flatiter, type(np.zeros(1).flags), np.finfo, np.iinfo,
                np.random.Generator, np.random.BitGenerator, np.random.SeedSequence,
                type(NotImplemented), type(Ellipsis), zip, map, filter, enumerate, reversed,
                *{type(iterator) for iterator in (iter([]), iter(()), iter(range(0)), iter(""), iter({}), iter(set()),
                                                  reversed([]), {}.keys(), {}.values(), {}.items())}]
    admitted = [value for value, _ in admitted_objects().values()  # (an abstract class such as Iterable is
                if isinstance(value, type) and not issubclass(value, BaseException)  # everything's, by its shape)
                and not isinstance(value, abc.ABCMeta) and value not in _NOT_VALUE_TYPES
                and value.__module__ != "typing"]  # (typing's classes are hints: Any, Protocol, TypedDict)
    return tuple(dict.fromkeys(standard + admitted))


def _door_attribute(kind: type, attribute: str) -> str | None:
    for (owner, name), why in VALUE_DOORS.items():
        if name == attribute and issubclass(kind, owner):
            return why
    return None


@lru_cache(maxsize=None)
def value_attributes() -> dict[str, str | None]:
    """``{attribute name: None if admitted on values, else why not}``: the public attributes of every
    value type; a name that is a door on any value type is refused on every value."""
    names: dict[str, str | None] = {}
    for kind in value_types():
        for attribute in dir(kind):
            if attribute.startswith("_"):
                continue
            why = _door_attribute(kind, attribute)
            try:
                member = inspect.getattr_static(kind, attribute)
            except AttributeError:
                member = None
            if why is None and isinstance(member, types.ModuleType):
                why = "a module reached through a value"
            if why is not None or attribute not in names:
                names[attribute] = why if why is not None else names.get(attribute)
    sample = np.finfo(np.float16)  # its fields are set on each instance, not on the class: numbers and dtypes
    for attribute in dir(sample):  # (np.finfo(np.float16).smallest_normal, .bits, .precision)
        if not attribute.startswith("_") and _is_constant(getattr(sample, attribute)):
            names.setdefault(attribute, None)
    return names


def value_attribute_problem(attribute: str) -> str | None:
    """Why ``x.attribute`` on a value of unknown type is not admitted, or None when it is."""
    names = value_attributes()
    if attribute not in names:
        return "not an attribute of any value graded code computes with"
    return names[attribute]


def rules_markdown() -> str:
    """The allow-list in the README's words (``make build`` writes it between the README's markers)."""
    modules = "\n".join(f"  - `{name}`: {why}" for name, why in ALLOWED_MODULES.items() if name != "__future__")
    names = sorted(ALLOWED_BUILTINS - {name for name, value in vars(builtins).items()
                                       if isinstance(value, type) and issubclass(value, BaseException)})
    doors = "\n".join(f"  - `{name}`: {why}" for name, why in DOORS.items())
    value_doors = "\n".join(f"  - `{owner.__name__}.{name}`: {why}" for (owner, name), why in VALUE_DOORS.items())
    return (f"- **Modules** (and `from __future__ import annotations`):\n{modules}\n"
            f"- **Their public functions, classes and constants** whose implementation lives in an allowed module "
            f"or one of NumPy's computational modules ({len(ALLOWED_ORIGINS)} in all, `shared/allowlist.py`: "
            f"`ALLOWED_ORIGINS`); NumPy's file, pickle, test, memory-map and record modules are not among them. "
            f"Not these, though they live there:\n{doors}\n"
            f"- **Built-ins**: {', '.join(f'`{name}`' for name in names)}, and every exception class.\n"
            f"- **On values** (arrays, numbers, lists, dicts, the cluster, the configuration): their public methods "
            f"and fields, but:\n{value_doors}\n")
