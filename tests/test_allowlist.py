"""The allow-list of graded code is closed: no admitted attribute chain leads out of plain computation.

From every object the allow-list admits (the allowed modules and their admitted members) and from
a sample value of every value type graded code computes with (arrays, scalars, dtypes, generators,
the cluster, its ledger, a round, the configuration, ...), the search follows every attribute that
:func:`shared.policy.attribute_problem` admits, as the checker would, both as a named object and as a
value of unknown type, to depth 4, and asserts of everything it reaches:

1. it is in the allow-list's own world (an admitted object, a value of a value type, a method of one),
   so nothing reachable was left out of the reasoning; and
2. it is none of the doors out of plain computation, as this test knows them independently of the
   allow-list: a module not allowed, the built-ins module, a built-in that runs code or reaches the
   interpreter, a frame, code, a traceback, raw memory (ctypes, buffers, capsules), a file, a thread's lock,
   or NumPy's file and raw-memory functions.

Then it shows that the search fails when the allow-list admits a door.
"""

from __future__ import annotations

import builtins
import collections
import fractions
import functools
import io
import types
from collections import deque

import numpy as np
import pytest

from shared import allowlist, policy

DEPTH = 4
ALLOWED = frozenset(allowlist.ALLOWED_MODULES)  # as the course states them (a test below admits more)

#: What this test counts as a door, independently of the allow-list's own reasoning.
DOOR_BUILTINS = {"eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "globals",
                 "locals", "vars", "input", "breakpoint", "help", "memoryview", "exit", "quit", "dir"}
DOOR_NUMPY = {"frombuffer", "fromfile", "from_dlpack", "load", "save", "savez", "savez_compressed", "savetxt",
              "loadtxt", "genfromtxt", "fromregex", "memmap", "info", "show_config", "show_runtime", "test",
              "get_include"}
DOOR_ORIGINS = ("os", "posix", "sys", "io", "_io", "gc", "inspect", "importlib", "ctypes", "_ctypes", "pickle",
                "_pickle", "marshal", "tracemalloc", "_tracemalloc", "subprocess", "shutil", "socket", "signal",
                "resource", "_thread", "threading", "weakref", "_weakref", "code", "runpy", "pathlib",
                "IPython", "ipykernel", "grading", "shared.checking", "shared.progress", "shared.answers",
                "numpy.lib._npyio_impl", "numpy.lib.format", "numpy.ctypeslib", "numpy._core.memmap",
                "numpy.lib._utils_impl", "numpy._pytesttester", "numpy.testing", "numpy.f2py")


def door(obj) -> str | None:
    """Why ``obj`` is a door out of plain computation, or None."""
    if isinstance(obj, types.ModuleType):
        return None if obj.__name__ in ALLOWED else f"the module {obj.__name__}"
    if isinstance(obj, (types.FrameType, types.CodeType, types.TracebackType, types.CellType, memoryview,
                        io.IOBase)):
        return f"a {type(obj).__name__}"
    if type(obj).__name__ in ("PyCapsule", "_ctypes", "lock", "RLock", "mappingproxy") and \
            not isinstance(obj, types.MappingProxyType):
        return f"a {type(obj).__name__}"
    if isinstance(obj, types.MappingProxyType) and "__dict__" in obj:
        return "a class's namespace"
    for name in DOOR_BUILTINS:
        if obj is vars(builtins).get(name):
            return f"the built-in {name}"
    for name in DOOR_NUMPY:
        if obj is getattr(np, name, object()):
            return f"numpy.{name}"
    if obj is np.lib.stride_tricks.as_strided:
        return "as_strided"
    where = allowlist.origin(obj) if callable(obj) or isinstance(obj, type) else None
    where = where or type(obj).__module__
    if isinstance(where, str) and where.split(".")[0] != "numpy" and where.startswith(DOOR_ORIGINS) or \
            isinstance(where, str) and where.startswith(tuple(o for o in DOOR_ORIGINS if o.startswith("numpy"))):
        return f"implemented in {where}"
    return None


def in_the_allow_lists_world(obj) -> bool:
    """An admitted object, a value of a value type, or a method or field of one."""
    if allowlist.why_not_admitted(obj, "?") is None or isinstance(obj, allowlist.value_types()):
        return True
    owner = getattr(obj, "__self__", None) if not isinstance(obj, types.ModuleType) else None
    if owner is not None and (isinstance(owner, allowlist.value_types()) or allowlist.is_admitted(owner)
                              or isinstance(owner, type) and issubclass(owner, allowlist.value_types())):
        return True  # a bound method of a value (x.sum) or of an admitted class (dict.fromkeys)
    qualname = getattr(obj, "__qualname__", "") if isinstance(obj, types.BuiltinFunctionType) else ""
    if any(qualname.startswith(f"{kind.__qualname__}.") for kind in allowlist.value_types()):
        return True  # a static method of a value type (bytes.maketrans)
    objclass = getattr(obj, "__objclass__", None)
    if isinstance(objclass, type) and issubclass(objclass, allowlist.value_types()):
        return True  # a method as its class holds it (np.ndarray.sum)
    if isinstance(obj, (property, classmethod, staticmethod, functools.cached_property)):
        return True  # a descriptor of an admitted class: what it gives is reached (and checked) through values
    return False


def sample_values() -> list:
    """A value of every kind graded code computes with: what the lessons pass and what it can make."""
    from shared.cluster import Cluster
    from shared.training import TrainingConfig
    from shared import mlp
    cluster = Cluster(2)
    with cluster.round():
        cluster.send(0, 1, np.arange(3.0))
    received = cluster.receive(1, 0)
    values = [np.zeros((2, 3)), np.zeros(2, np.float16), np.float64(1.5), np.float16(1), np.int64(2), np.bool_(True),
              np.dtype("float32"), np.finfo(np.float16), np.iinfo(np.int32), np.zeros(3).flags, np.zeros(3).flat,
              np.random.default_rng(0), np.random.SeedSequence(0), np.add, 1, 1.5, 1j, True, "text", b"bytes", [1],
              (1,), {"a": 1}, {1}, frozenset({1}), range(3), slice(1, 2), None, deque([1]),
              collections.defaultdict(list), collections.OrderedDict(a=1), collections.Counter("ab"),
              fractions.Fraction(1, 3), functools.partial(max, 1), cluster, cluster.ledger, cluster.workers[0],
              cluster.ledger.messages[0], cluster.round(), received, TrainingConfig(),
              mlp.init_params([2, 3, 1], seed=0), np.errstate(all="ignore"), np.nditer(np.zeros(2)),
              np.broadcast(np.zeros(2), np.zeros(2)), np.ndenumerate(np.zeros(2)), iter([1]), zip([1], [2]),
              map(abs, [1]), enumerate([1]), reversed([1]), {"a": 1}.items(), {"a": 1}.keys(), {"a": 1}.values()]
    for value, _ in list(allowlist.admitted_objects().values()):  # what an admitted class makes with no arguments
        if isinstance(value, type) and value in allowlist.value_types() and not issubclass(value, BaseException):
            try:
                values.append(value())
            except Exception:
                pass
    return values


def followed_attributes(obj) -> list[str]:
    """The attributes of ``obj`` the checker admits: as a named object, and (but a module) as a value of
    unknown type."""
    names = {name for name in dir(obj) if policy.attribute_problem(obj, name) is None}
    if isinstance(obj, types.ModuleType):
        return sorted(names)  # a module is never a value (the checker refuses one used as a value)
    names |= {name for name in dir(obj) if allowlist.value_attributes().get(name, "") is None}
    return sorted(names)


def _kind(obj) -> object:
    """What the search expands once: an admitted object itself; a value, once per type (what an attribute
    of a value leads to depends on its type: its attributes are admitted by name); a method, once per
    method of a type."""
    if allowlist.is_admitted(obj) or isinstance(obj, (type, types.ModuleType)):
        return id(obj)
    owner = getattr(obj, "__self__", None)
    if owner is not None and callable(obj):
        return (type(owner), getattr(obj, "__name__", None))
    return type(obj)


def search(starts: list, depth: int = DEPTH) -> list[str]:
    """Every chain from ``starts`` that reaches something outside the allow-list's world or a door."""
    found: list[str] = []
    seen: dict[object, object] = {}
    frontier = list(starts)
    for _ in range(depth + 1):
        following = []
        for obj, chain in frontier:
            if _kind(obj) in seen:
                continue
            seen[_kind(obj)] = obj  # (kept alive, so that no id is reused during the search)
            why = door(obj)
            if why or not in_the_allow_lists_world(obj):
                found.append(f"{chain} -> {why or 'outside the allow-list: ' + type(obj).__name__}")
                continue
            for name in followed_attributes(obj):
                try:
                    following.append((getattr(obj, name), f"{chain}.{name}"))
                except Exception:
                    continue
        frontier = following
    return found


def starts() -> list[tuple[object, str]]:
    """(object, its name) for every admitted object and every sample value."""
    return [*allowlist.admitted_objects().values(), *((value, f"<a {type(value).__name__}>") for value in sample_values())]


def test_no_admitted_attribute_chain_leads_out_of_plain_computation():
    escapes = search(starts())
    assert escapes == [], "\n".join(escapes[:20])


def _reset_caches():
    for cached in (allowlist.admitted_objects, allowlist.value_types, allowlist.value_attributes):
        cached.cache_clear()


@pytest.mark.parametrize("door_admitted", [
    "an array's ctypes", "numpy.frombuffer", "the generator's bit generator", "a module's door (dataclasses.sys)"])
def test_the_search_fails_when_a_door_is_admitted(door_admitted, monkeypatch):
    if door_admitted == "an array's ctypes":
        for key in [k for k in allowlist.VALUE_DOORS if k[1] == "ctypes"]:
            monkeypatch.delitem(allowlist.VALUE_DOORS, key)
    elif door_admitted == "numpy.frombuffer":
        monkeypatch.delitem(allowlist.DOORS, "numpy.frombuffer")
    elif door_admitted == "the generator's bit generator":
        for key in [k for k in allowlist.VALUE_DOORS if k[0] in (np.random.Generator, np.random.BitGenerator)]:
            monkeypatch.delitem(allowlist.VALUE_DOORS, key)
    else:
        monkeypatch.setitem(allowlist.ALLOWED_MODULES, "sys", "a door admitted by mistake")
        monkeypatch.setattr(policy, "ALLOWED_MODULES", allowlist.ALLOWED_MODULES)
    _reset_caches()
    try:
        escapes = search(starts())
    finally:
        monkeypatch.undo()
        _reset_caches()
    assert escapes, f"admitting {door_admitted} went unnoticed"


# A function written in Python that runs code it is handed, read from its own source (one level: what it calls
# itself). Each one admitted here was read and runs only code it builds from checked identifiers.
RUNS_CODE = {"eval", "exec", "compile", "get_type_hints", "__import__", "import_module"}
READ_AND_SAFE = {
    "collections.namedtuple": "evaluates the __new__ it writes from field names it checks are identifiers "
                              "that do not begin with an underscore",
}


def _python_functions_of(obj):
    """(qualified name, function) of ``obj`` itself or, for a class, of every function in its own namespace."""
    import inspect
    members = vars(obj).items() if isinstance(obj, type) else [(None, obj)]
    for name, member in members:
        member = getattr(member, "__func__", member)
        member = member.fget if isinstance(member, property) else member
        if isinstance(member, types.FunctionType):
            where = getattr(obj, "__qualname__", "?") + (f".{name}" if name else "")
            yield f"{inspect.getmodule(obj).__name__ if inspect.getmodule(obj) else '?'}.{where}", member


def test_no_admitted_python_function_runs_code_it_is_handed():
    """functools.singledispatch ran a learner's string annotation as code (typing.get_type_hints, which calls
    eval) when a function was registered: a door no attribute chain shows. Every admitted object written in
    Python is read for a call of what runs code; each found is a door, or read and listed as safe here."""
    import ast
    import inspect
    import textwrap
    found = {}
    for obj, _ in allowlist.admitted_objects().values():
        for name, function in _python_functions_of(obj):
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
            except (OSError, TypeError, SyntaxError):
                continue
            calls = {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                     for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, (ast.Name, ast.Attribute))}
            if calls & RUNS_CODE and name not in READ_AND_SAFE:
                found[name] = sorted(calls & RUNS_CODE)
    assert found == {}, found


def test_the_code_search_finds_singledispatch_when_it_is_admitted(monkeypatch):
    monkeypatch.delitem(allowlist.DOORS, "functools.singledispatch")
    allowlist.admitted_objects.cache_clear() if hasattr(allowlist.admitted_objects, "cache_clear") else None
    try:
        with pytest.raises(AssertionError, match="singledispatch"):
            test_no_admitted_python_function_runs_code_it_is_handed()
    finally:
        monkeypatch.undo()
        allowlist.admitted_objects.cache_clear() if hasattr(allowlist.admitted_objects, "cache_clear") else None
