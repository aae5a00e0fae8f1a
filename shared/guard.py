"""The grading guard: a notebook that is being graded cannot grade itself.

nbgrader runs a learner's notebook in a kernel and gives a test cell its points
when the cell shows no error.  Everything in that kernel is Python that the
learner's own cells can change: ``np.allclose``, the checking helpers, the
names ``check`` or ``np`` in the notebook, IPython itself.  The guard makes
such changes worthless.  It is installed once per grading kernel, before the
first cell runs (``autograde/nbgrader_config.py`` gives every grading kernel an
IPython profile whose ``exec_lines`` call :func:`install`), as a CPython audit
hook, which nothing in the process can remove.  It then

- **restores** the grading environment before every statement of a test cell
  and around every call of the learner's function: the modules of NumPy and of
  ``shared`` (and the few standard modules the checks rely on), the names the
  set-up cell and the hidden tests import, the builtins, NumPy's error state,
  signal handlers and GC callbacks.  A notebook that rebinds ``check`` or
  monkeypatches ``np.allclose`` is graded as if it had not;
- **sanitises** what the learner's function returns: objects that could lie
  when compared (array subclasses, custom containers, float subclasses) are
  replaced by plain data or by an opaque placeholder before any check sees them;
- **keeps the reference solutions private**: hidden tests get a fresh copy of
  the reference module per call whose functions run out of reach of the
  notebook; a notebook that reads ``solutions/``, the course's sources or the
  gradebook, or calls ``shared.grading.reference`` itself, is refused, and
  every test cell after that fails with a message that says why; the learner's
  function may not call the reference of the lesson being graded;
- **refuses** what grading never needs from a notebook: writing into the
  course, the environment or the grading profile, subprocesses, threads,
  ctypes, trace hooks, GC and frame introspection;
- **proves each pass**: when a test cell's statements have all run, in order,
  through IPython's own machinery and the cell's last line ``lesson_passed``
  is reached, the guard prints a keyed proof line.  nbgrader's side
  (``VerifyGradingProofs`` in the config) gives points only to test cells with
  a valid proof, so a notebook that takes over the kernel (skips or silences
  test cells) earns nothing.  The proofs are removed before anyone sees them.

What the hook uses is bound when it is created, in closures that nothing in the
notebook can reach (frame and GC introspection are refused), and it talks to
the course's code only through ``sys.audit("mct.…")`` events.

Outside grading (``make lab``, ``make test``, the build) nothing here runs.
"""

from __future__ import annotations

import sys

#: First words of the line that proves a passed test cell (see :func:`proof_line`).
PROOF_PREFIX = "[mct-grading-proof "


def proof_line(secret: bytes, code: str) -> str:
    """The line the guard prints when lesson ``code``'s test cell passed, keyed by ``secret``."""
    import hashlib
    import hmac
    digest = hmac.new(secret, f"lesson {code}".encode(), hashlib.sha256).hexdigest()
    return f"{PROOF_PREFIX}{code} {digest}]"


def active() -> bool:
    """True when a grading guard watches this process."""
    box: list = []
    sys.audit("mct.ping", box)
    return bool(box)


def install() -> bool:
    """Install the guard in this process (a grading kernel); False if it already was.

    Reads its settings from the environment that ``autograde/nbgrader_config.py``
    gives grading kernels: ``MCT_GRADING_SECRET`` (removed from the environment
    at once), ``MCT_GRADING_SOURCE_DIR`` (the course's source notebooks, for the
    test cells), ``MCT_SOLUTIONS_DIR``, ``MCT_GRADING_PROTECTED`` and
    ``MCT_GRADING_SECRET_DIRS`` (``os.pathsep``-separated folders).
    """
    if active():
        return False
    settings = _collect_settings()
    sys.addaudithook(_make_hook(settings))
    return True


# --------------------------------------------------------------------------
# Settings: gathered before the hook exists, while only course code has run
# --------------------------------------------------------------------------

def _collect_settings() -> dict:
    import importlib
    import json
    import os
    import pkgutil
    import sqlite3
    import sysconfig
    from pathlib import Path

    import numpy
    import matplotlib
    matplotlib.use(os.environ.get("MPLBACKEND") or "Agg")  # build the font cache before the hook
    import matplotlib.pyplot  # noqa: F401

    import shared
    for info in pkgutil.walk_packages(shared.__path__, "shared."):
        importlib.import_module(info.name)
    from shared import checking, lessons, progress

    secret = os.environ.pop("MCT_GRADING_SECRET", "")
    here = Path(shared.__file__).resolve().parent
    repo = here.parent
    solutions = Path(os.environ.get("MCT_SOLUTIONS_DIR") or repo / "solutions").resolve()
    source_dir = os.environ.get("MCT_GRADING_SOURCE_DIR")
    cwd = os.getcwd()

    # The parts' test cells and set-up cells, from the course's source notebooks.
    notebooks = {}
    if source_dir and Path(source_dir).is_dir():
        for path in sorted(Path(source_dir).glob("*/*.ipynb")):
            try:
                notebooks[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
    tests: dict[str, str] = {}  # lesson code -> test cell source
    setups: dict[str, str] = {}  # part slug -> set-up cell source
    for slug, notebook in notebooks.items():
        for cell in notebook.get("cells", []):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            source = "".join(cell.get("source", ""))
            if cell.get("cell_type") != "code":
                continue
            grade_id = str(meta.get("grade_id", ""))
            if meta.get("grade") and grade_id.startswith("lesson_"):
                tests[grade_id.split("_")[1]] = source
            elif grade_id == "setup":
                setups[slug] = source
    # What nbgrader really puts back into the notebook are the locked cells it saved in the
    # gradebook at release time; they win over the source folder (which may have been rebuilt since).
    course = os.environ.get("MCT_COURSE_DIR") or (str(Path(cwd).parent.parent.parent)
                                                  if Path(cwd).parent.parent.name == "autograded" else "")
    gradebook = Path(course) / "gradebook.db" if course else None
    if gradebook is not None and gradebook.is_file():
        try:
            with sqlite3.connect(f"file:{gradebook}?mode=ro", uri=True, timeout=30) as db:
                rows = db.execute("SELECT n.name, s.name, s.source FROM source_cell s "
                                  "JOIN notebook n ON s.notebook_id = n.id WHERE s.cell_type = 'code'").fetchall()
            for slug, name, source in rows:
                if name.startswith("lesson_"):
                    tests[name.split("_")[1]] = source or ""
                elif name == "setup":
                    setups[slug] = source or ""
        except sqlite3.Error:
            pass

    # Names the set-up cells and the hidden tests import, with their pristine values.
    slug_here = Path(cwd).name
    setup_sources = [setups[slug_here]] if slug_here in setups else list(setups.values())
    bindings = _import_bindings(setup_sources + list(tests.values()))
    setup_names = frozenset(_import_bindings(setup_sources))
    bindings_conflicting = {name for name, value in bindings.items() if value is _CONFLICT}
    bindings = {name: value for name, value in bindings.items() if name not in bindings_conflicting}

    # Reference modules, compiled now (reading them later is refused).
    references = {}
    for path in sorted(solutions.glob("[0-9][0-9]_*.py")):
        references[path.stem] = (str(path), compile(path.read_text(), str(path), "exec"))

    # The learner-facing functions per lesson, for the rule "not the lesson's own reference".
    functions = {item.code: item.function for item in lessons.LESSONS}

    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            roots.update({value, os.path.realpath(value)})
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry):
            roots.update({entry, os.path.realpath(entry)})
    roots.update({str(here), str(solutions)})
    trusted_roots = tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots)) + ("<frozen ",)

    def split(name: str) -> list[str]:
        return [p for p in os.environ.get(name, "").split(os.pathsep) if p]

    protected = {str(repo), sys.prefix, sys.base_prefix, sys.exec_prefix, *split("MCT_GRADING_PROTECTED")}
    secret_dirs = {str(solutions), str(repo / "autograde"), str(repo / ".git"), "/proc",
                   *split("MCT_GRADING_SECRET_DIRS")}
    if Path(cwd).parent.parent.name == "autograded":  # nbgrader grades in <course>/autograded/<student>/<part>
        course = str(Path(cwd).parent.parent.parent)
        protected.add(course)
        secret_dirs.add(course)
    readable = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(here), cwd}
    import tempfile
    scratch = {tempfile.gettempdir()}  # where a notebook may write, besides its own folder

    shell = None
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        pass

    modules = sorted(name for name in sys.modules
                     if name.split(".")[0] in ("numpy", "shared") or name in _STDLIB_GUARDED)
    return {
        "secret": secret.encode(), "tests": tests, "bindings": bindings, "setup_names": setup_names,
        "references": references, "functions": functions, "trusted_roots": trusted_roots,
        "protected": protected, "secret_dirs": secret_dirs, "readable": readable, "cwd": cwd,
        "scratch": scratch,
        "modules": modules, "shell": shell, "numpy": numpy, "checking": checking,
        "lesson_passed_code": progress.lesson_passed.__code__,
    }


_STDLIB_GUARDED = ("builtins", "copy", "copyreg", "math", "cmath", "operator", "functools", "itertools",
                   "collections", "collections.abc", "warnings", "contextlib", "types", "numbers",
                   "dataclasses", "posixpath", "genericpath", "os", "os.path", "json", "hmac", "hashlib")
_CONFLICT = object()


def _import_bindings(sources: list[str]) -> dict:
    """{name: object} for every top-level ``import`` in the given cells (resolved now)."""
    import ast
    import importlib
    bindings: dict = {}

    def bind(name, value):
        if name in bindings and bindings[name] is not value:
            bindings[name] = _CONFLICT
        else:
            bindings[name] = value

    for source in sources:
        try:
            tree = ast.parse(_transformed(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            try:
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        module = importlib.import_module(alias.name)
                        if alias.asname:
                            bind(alias.asname, module)
                        else:
                            top = alias.name.split(".")[0]
                            bind(top, sys.modules[top])
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    module = importlib.import_module(node.module)
                    for alias in node.names:
                        if alias.name == "*":
                            continue
                        value = getattr(module, alias.name, None)
                        if value is None:
                            value = importlib.import_module(f"{node.module}.{alias.name}")
                        bind(alias.asname or alias.name, value)
            except Exception:  # an import the course does not have: nothing to protect
                continue
    return bindings


def _transformed(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def statement_codes(source: str) -> list:
    """The code objects IPython runs for a cell: one per top-level statement.

    Mirrors ``InteractiveShell.run_ast_nodes`` with ``ast_node_interactivity =
    "last_expr"``: every statement in ``exec`` mode except a final expression,
    which runs in ``single`` mode.
    """
    import ast
    tree = ast.parse(_transformed(source))
    nodes = tree.body
    codes = []
    for index, node in enumerate(nodes):
        if index == len(nodes) - 1 and isinstance(node, ast.Expr):
            codes.append(compile(ast.Interactive([node]), "<mct-test-cell>", "single"))
        else:
            codes.append(compile(ast.Module([node], []), "<mct-test-cell>", "exec"))
    return codes


def _make_fingerprint():
    code_type = type(_make_fingerprint.__code__)
    repr_, tuple_, type_ = repr, tuple, type

    def fingerprint(code) -> str:
        """What a code object does, independent of its file name, flags and line numbers."""
        parts = []
        stack = [code]
        while stack:
            current = stack.pop()
            consts = []
            for const in current.co_consts:
                if type_(const) is code_type:
                    stack.append(const)
                    consts.append("<code>")
                else:
                    consts.append(repr_(const))
            parts.append((current.co_code, tuple_(consts), current.co_names, current.co_varnames,
                          current.co_freevars, current.co_cellvars, current.co_argcount,
                          current.co_kwonlyargcount, current.co_posonlyargcount, current.co_name))
        return repr_(parts)
    return fingerprint


fingerprint = _make_fingerprint()


# --------------------------------------------------------------------------
# Sanitising learner results
# --------------------------------------------------------------------------

def make_sanitizer(numpy):
    """A function that turns a learner's value into plain data that cannot lie when compared.

    Exact built-in types (and NumPy's own arrays and scalars) pass unchanged, so
    identities and memory sharing are kept; an array subclass becomes a plain
    view of the same memory; tuple, list and dict subclasses become plain
    copies of what they really hold; anything else (an object whose comparisons
    could run the notebook's code) becomes an opaque placeholder (see
    :func:`unverifiable`) that equals nothing expected.  Containers are read through the base types' own methods,
    so no method of the learner's objects runs.
    """
    ndarray = numpy.ndarray
    view = numpy.ndarray.view
    object_dtype = numpy.dtype(object)
    scalar_types = set()
    for candidate in numpy.sctypeDict.values():
        if isinstance(candidate, type):
            scalar_types.add(candidate)
    scalar_types = frozenset(scalar_types)
    plain = frozenset({int, float, complex, bool, str, bytes, type(None), type(Ellipsis), slice, range})
    tuple_len, tuple_item = tuple.__len__, tuple.__getitem__
    list_len, list_item = list.__len__, list.__getitem__
    dict_items = dict.items
    type_name = type.__dict__["__name__"].__get__
    type_module = type.__dict__["__module__"].__get__
    type_qualname = type.__dict__["__qualname__"].__get__
    object_getattribute = object.__getattribute__
    type_, issubclass_, enumerate_, all_ = type, issubclass, enumerate, all
    range_, tuple_, list_, dict_, str_ = range, tuple, list, dict, str
    modules = sys.modules
    import types as _types
    namespace_type = _types.SimpleNamespace
    Exception_ = Exception
    trusted_prefixes = ("shared.", "numpy")

    def foreign(value):
        try:
            name = type_name(type_(value))
        except Exception_:
            name = "object"
        return namespace_type(mct_unverifiable=name)

    def plain_key(key):
        cls = type_(key)
        if cls in plain:
            return True
        if cls is tuple_:
            return all_(type_(tuple_item(key, i)) in plain for i in range_(tuple_len(key)))
        return False

    def trusted_class(cls):
        try:
            module, qualname = type_module(cls), type_qualname(cls)
        except Exception_:
            return False
        if type_(module) is not str_ or not module.startswith(trusted_prefixes):
            return False
        owner = modules.get(module)
        return owner is not None and object_getattribute(owner, "__dict__").get(qualname) is cls

    def sanitize(value, depth=0):
        if depth > 40:
            return foreign(value)
        cls = type_(value)
        if cls in plain or cls in scalar_types:
            return value
        if cls is ndarray:
            return value if value.dtype != object_dtype else foreign(value)
        if issubclass_(cls, ndarray):
            array = view(value, ndarray)
            return array if array.dtype != object_dtype else foreign(value)
        if issubclass_(cls, tuple_):
            items = [sanitize(tuple_item(value, i), depth + 1) for i in range_(tuple_len(value))]
            if cls is tuple_ and all_(a is tuple_item(value, i) for i, a in enumerate_(items)):
                return value
            return tuple_(items)
        if issubclass_(cls, list_):
            items = [sanitize(list_item(value, i), depth + 1) for i in range_(list_len(value))]
            if cls is list_ and all_(a is list_item(value, i) for i, a in enumerate_(items)):
                return value
            return items
        if issubclass_(cls, dict_):
            clean = {}
            same = cls is dict_
            for key, item in list_(dict_items(value)):
                if not plain_key(key):
                    return foreign(value)
                safe = sanitize(item, depth + 1)
                same = same and safe is item
                clean[key] = safe
            return value if same else clean
        if trusted_class(cls):
            try:
                state = object_getattribute(value, "__dict__")
            except Exception_:
                return value
            if type_(state) is dict_:
                for key, item in list_(dict_items(state)):
                    safe = sanitize(item, depth + 1)
                    if safe is not item:
                        state[key] = safe
            return value
        return foreign(value)

    return sanitize


def unverifiable(type_name: str):
    """What grading compares instead of an object it cannot compare safely: equal to nothing expected.

    A ``types.SimpleNamespace`` (a built-in type the notebook cannot change) whose
    only attribute names the original type, so that messages can say what it was.
    """
    import types
    return types.SimpleNamespace(mct_unverifiable=type_name)


def is_unverifiable(value) -> bool:
    import types
    return type(value) is types.SimpleNamespace and "mct_unverifiable" in vars(value)


# --------------------------------------------------------------------------
# The hook
# --------------------------------------------------------------------------

def _code_tree(code) -> list:
    found, pending = [], [code]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(c for c in current.co_consts if isinstance(c, type(code)))
    return found


def _make_hook(settings: dict):  # noqa: C901  (one closure on purpose: see the module docstring)
    """Build the audit hook.  Everything it uses is bound here, in its closure.

    No code inside reads a module global or a builtin by name (a test checks the
    bytecode): the notebook could have replaced those.
    """
    import _hashlib
    import _thread
    import builtins
    import copy as copy_module
    import copyreg as copyreg_module
    import gc
    import posix
    import signal
    import stat as stat_module
    import threading
    import types

    # ---- bound primitives: C functions and immutable types ----
    getframe = sys._getframe
    get_ident = _thread.get_ident
    p_stat, p_lstat, p_getcwd, p_readlink, p_fspath = posix.stat, posix.lstat, posix.getcwd, posix.readlink, \
        posix.fspath
    S_ISLNK = stat_module.S_ISLNK
    hmac_digest = _hashlib.hmac_digest
    signal_signal, signal_getsignal = signal.signal, signal.getsignal
    setitimer, getitimer = signal.setitimer, signal.getitimer
    itimers = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    valid_signals = tuple(signal.valid_signals())
    gc_callbacks = gc.callbacks
    gc_enable, gc_disable = gc.enable, gc.disable
    current_frames = sys._current_frames
    threads_active = threading._active  # ident -> Thread (the dict object itself, bound now)
    kernel_threads = frozenset(current_frames())  # the threads that run before any notebook code
    sys_module = sys
    sys_dict = sys.__dict__
    audit = sys.audit
    CodeType, FunctionType, ModuleType, MethodType = (types.CodeType, types.FunctionType, types.ModuleType,
                                                      types.MethodType)
    isinstance_, type_, len_, str_, int_, bytes_, id_ = isinstance, type, len, str, int, bytes, id
    list_, dict_, set_, tuple_, frozenset_, bool_ = list, dict, set, tuple, frozenset, bool
    fingerprint_ = _make_fingerprint()
    enumerate_, sorted_, any_, all_, zip_, range_ = enumerate, sorted, any, all, zip, range
    setattr_, exec_, hasattr_ = setattr, exec, hasattr
    object_getattribute = object.__getattribute__
    PermissionError_, RuntimeError_, Exception_ = PermissionError, RuntimeError, Exception
    type_setattr, type_delattr = type.__setattr__, type.__delattr__
    type_flags = type.__dict__["__flags__"].__get__
    type_module = type.__dict__["__module__"].__get__
    type_qualname = type.__dict__["__qualname__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    function_code = FunctionType.__dict__["__code__"].__get__
    str_startswith = str.startswith
    builtins_module = builtins
    builtins_dict = builtins.__dict__
    MISSING = object()
    heap_flag = 1 << 9
    # The hook's own code objects (alive as long as this module is: constants of _make_hook).
    internal = frozenset_(id_(c) for c in _code_tree(_make_hook.__code__))
    proof_prefix = PROOF_PREFIX

    numpy = settings["numpy"]
    CheckFailure = settings["checking"].CheckFailure
    np_geterr, np_seterr = numpy.geterr, numpy.seterr
    np_geterrcall, np_seterrcall = numpy.geterrcall, numpy.seterrcall
    sanitize = make_sanitizer(numpy)

    secret = settings["secret"]
    trusted_roots = settings["trusted_roots"]
    functions = settings["functions"]
    references = settings["references"]
    lesson_passed_code = settings["lesson_passed_code"]
    shell = settings["shell"]
    cwd = settings["cwd"]
    tmp = " or ".join(sorted(settings["scratch"]))
    main_thread = get_ident()

    def identity(path):
        try:
            st = p_stat(path)
        except Exception_:
            return None
        return (st.st_dev, st.st_ino)

    def identities(paths):
        return frozenset_(key for key in (identity(p) for p in paths) if key is not None)

    protected_dirs = identities(settings["protected"])
    secret_dirs = identities(settings["secret_dirs"])
    readable_dirs = identities(settings["readable"])
    scratch_dirs = identities(settings["scratch"])
    cwd_only = identities([cwd])

    def is_heap_class(value):
        return isinstance_(value, type_) and bool_(type_flags(value) & heap_flag)

    # ---- the pristine environment ----
    loaded = sys_module.modules
    module_objects = {name: loaded[name] for name in settings["modules"] if name in loaded}
    module_dicts = {name: (module.__dict__, dict_(module.__dict__)) for name, module in module_objects.items()}
    # What IPython and ipykernel themselves swap in and out of builtins around each cell.
    for key in ("input", "raw_input", "_", "__", "___", "exit", "quit", "get_ipython", "display",
                "__IPYTHON__", "help", "copyright", "credits", "license"):
        module_dicts["builtins"][1].pop(key, None)
    classes = {}
    for name, (namespace, _) in module_dicts.items():
        top = name.split(".")[0]
        if top not in ("numpy", "shared"):
            continue
        for value in list_(namespace.values()):
            if is_heap_class(value) and str_(type_module(value)).split(".")[0] == top:
                classes[id_(value)] = (value, dict_(type_dict(value)))
    if shell is not None:
        for cls in type_(shell).__mro__:
            if is_heap_class(cls):
                classes[id_(cls)] = (cls, dict_(type_dict(cls)))
    class_snapshots = list_(classes.values())
    map_ = map
    import _operator
    is_ = _operator.is_

    def unchanged(mapping, keys, values):
        """True iff ``mapping`` holds exactly ``values`` (by identity) under ``keys``.

        Lazy C iterators: no object's own comparison runs, and nothing is allocated per entry
        (allocating would wake the garbage collector, which is slow in a large process)."""
        return all_(map_(is_, map_(mapping.get, keys), values))

    module_entries = {name: (tuple_(snapshot), tuple_(snapshot.values()))
                      for name, (_, snapshot) in module_dicts.items()}
    class_entries = [(tuple_(snapshot), tuple_(snapshot.values()), len_(snapshot))
                     for _, snapshot in class_snapshots]
    containers = [(c, dict_(c)) for c in (copy_module._deepcopy_dispatch, copyreg_module.dispatch_table)]
    sys_snapshot = {key: sys_dict.get(key, MISSING) for key in ("stdout", "stderr", "audit", "modules")}
    list_snapshots = [(sys.meta_path, list_(sys.meta_path)), (sys.path_hooks, list_(sys.path_hooks)),
                      (gc_callbacks, list_(gc_callbacks))]
    bindings = settings["bindings"]
    setup_names = settings["setup_names"]
    user_ns = shell.user_ns if shell is not None else None
    shell_instance = object_getattribute(shell, "__dict__") if shell is not None else {}
    shell_keys = frozenset_(shell_instance)
    stdout = sys.stdout
    signal_snapshot = {}
    for signum in valid_signals:
        try:
            signal_snapshot[signum] = signal_getsignal(signum)
        except Exception_:
            pass
    errstate = np_geterr()
    run_code_code = run_ast_code = user_global_ns_getter = user_ns_getter = None
    if shell is not None:
        from IPython.core.interactiveshell import InteractiveShell
        run_code_code = InteractiveShell.run_code.__code__
        run_ast_code = InteractiveShell.run_ast_nodes.__code__
        user_global_ns_getter = InteractiveShell.user_global_ns.fget
        user_ns_getter = InteractiveShell.user_ns.fget

    # ---- the test cells, statement by statement ----
    test_statements = {}  # fingerprint -> set of lesson codes
    sequences = {}  # lesson code -> [fingerprints]
    for lesson_code, source in settings["tests"].items():
        try:
            prints = [fingerprint_(c) for c in statement_codes(source)]
        except SyntaxError:
            continue
        sequences[lesson_code] = prints
        for fp in prints:
            test_statements.setdefault(fp, set_()).add(lesson_code)

    # ---- what only the hook changes ----
    state = {
        "taint": None,  # why the tests that follow give no points (the notebook reached for a secret)
        "current": frozenset_(),  # lessons of the test statement that runs now
        "calls": [],  # graded calls in progress: their violations
        "running": {},  # lesson -> [run_ast_nodes frame, statements run, last code]
        # What restoring and sanitising replaced: kept alive until the next statement or call starts,
        # so that no finaliser or weakref callback of the notebook's runs while a check is under way.
        "graveyard": [],
    }
    trusted_codes = {}  # id -> code: test statements and the code they contain
    trust_cache = {}  # id -> (code, trusted?)
    busy = set_()  # threads inside the hook's own introspection
    wrappers = {}  # event -> (wrapper, original, slug, name, ((cell, value), ...))
    counter = [0]

    # ---- who is asking: the notebook, or the course and its libraries? ----
    def trusted(code):
        key = id_(code)
        entry = trust_cache.get(key)
        if entry is not None and entry[0] is code:
            return entry[1]
        if key in trusted_codes:
            result = True
        else:
            filename = code.co_filename
            result = type_(filename) is str_ and str_startswith(filename, trusted_roots)
        trust_cache[key] = (code, result)
        return result

    def frames():
        """[(frame, code)] of the code that raised the event, innermost first (the guard's own skipped)."""
        tid = get_ident()
        busy.add(tid)
        try:
            frame = getframe(1)
            found = []
            while frame is not None:
                code = frame.f_code
                if found or id_(code) not in internal:
                    found.append((frame, code))
                frame = frame.f_back
            return found
        except Exception_:
            return []
        finally:
            busy.discard(tid)

    def foreign_thread():
        """Why a thread the notebook started is running now, or None.

        Python 3.11 has no audit event for starting a thread, so the guard looks at the threads
        alive at each check instead: a thread that was not there when the kernel started and that
        runs the notebook's code, or a target that is not the course's Python code (a C loop
        started from a cell), could change what a check computes while it runs."""
        tid = get_ident()
        busy.add(tid)
        try:
            for ident, frame in list_(current_frames().items()):
                if ident == tid or ident in kernel_threads:
                    continue
                thread = threads_active.get(ident)
                if thread is None:
                    return "a thread started outside the threading module"
                target = object_getattribute(thread, "__dict__").get("_target")
                if target is not None:
                    function = target.__func__ if type_(target) is MethodType else target
                    if type_(function) is not FunctionType or not trusted(function_code(function)):
                        return "a thread running code of the notebook's"
                elif not trusted_class(type_(thread)):
                    return "a thread of a class defined in the notebook"
                while frame is not None:
                    if not trusted(frame.f_code):
                        return f"a thread running line {frame.f_lineno} of a notebook cell"
                    frame = frame.f_back
            return None
        except Exception_:
            return None
        finally:
            busy.discard(tid)

    def check_threads():
        reason = foreign_thread()
        if reason is not None:
            if state["taint"] is None:
                state["taint"] = (f"Grading guard: {reason} is not allowed while a notebook is graded (it "
                                  f"could change the checks while they run). The tests that follow give "
                                  f"no points.")
            violation(state["taint"])
            raise CheckFailure(state["taint"])

    def learner_on_stack(stack):
        return any_(not trusted(code) for _, code in stack)

    def direct_learner(stack):
        return bool_(stack) and not trusted(stack[0][1])

    def where(stack):
        for frame, code in stack:
            if not trusted(code):
                return f"line {frame.f_lineno} of a notebook cell"
        return "the notebook"

    # ---- paths ----
    def absolute(path):
        if type_(path) is bytes_:
            path = path.decode("utf-8", "surrogateescape")
        if type_(path) is not str_:
            return None
        if not str_startswith(path, "/"):
            try:
                path = p_getcwd() + "/" + path
            except Exception_:
                return None
        return path

    def resolve_links(path):
        for _ in range_(40):
            try:
                st = p_lstat(path)
            except Exception_:
                return path
            if not S_ISLNK(st.st_mode):
                return path
            target = p_readlink(path)
            if not str_startswith(target, "/"):
                target = path.rpartition("/")[0] + "/" + target
            path = target
        return path

    def containing(path, *groups):
        """Index of the first group holding a folder that contains ``path`` (walking up), else None."""
        directory = path.rpartition("/")[0] or "/"
        while directory and identity(directory) is None:
            directory = directory.rpartition("/")[0]
        directory = directory or "/"
        last = None
        for _ in range_(64):
            key = identity(directory)
            if key is None or key == last:
                return None
            for index, group in enumerate_(groups):
                if key in group:
                    return index
            last = key
            directory = directory + "/.."
        return None

    # ---- restoring the environment ----
    def untrusted_value(value):
        if type_(value) is MethodType:
            value = value.__func__
        if type_(value) is FunctionType:
            return not trusted(function_code(value))
        if is_heap_class(value):
            return not trusted_class(value)
        return False

    def trusted_class(cls):
        module = type_module(cls)
        if type_(module) is not str_ or module.split(".")[0] not in ("numpy", "shared"):
            return any_(not untrusted_value(v) for v in type_dict(cls).values()
                        if type_(v) is FunctionType) or not any_(type_(v) is FunctionType
                                                                 for v in type_dict(cls).values())
        owner = module_objects.get(module)
        return owner is not None and owner.__dict__.get(type_qualname(cls)) is cls

    def restore():
        """Put the pristine environment back; return what the notebook had changed (for a note)."""
        changed = []
        graveyard = state["graveyard"]
        if get_ident() == main_thread:  # first, so that no handler of the notebook's runs in the middle
            for signum, handler in signal_snapshot.items():
                try:
                    current = signal_getsignal(signum)
                    if current is not handler and untrusted_value(current):
                        graveyard.append(current)
                        signal_signal(signum, handler)
                        changed.append(f"the handler of signal {signum}")
                except Exception_:
                    pass
            for timer in itimers:
                try:
                    if getitimer(timer)[0]:
                        setitimer(timer, 0)
                        changed.append("an interval timer")
                except Exception_:
                    pass
        modules = sys_dict["modules"] if type_(sys_dict.get("modules")) is dict_ else None
        if sys_snapshot["modules"] is not MISSING and modules is not sys_snapshot["modules"]:
            sys_dict["modules"] = modules = sys_snapshot["modules"]
            changed.append("sys.modules")
        for name, module in module_objects.items():
            if modules.get(name) is not module:
                graveyard.append(modules.get(name))
                modules[name] = module
                changed.append(f"sys.modules[{name!r}]")
        for name, (namespace, snapshot) in module_dicts.items():
            keys, values = module_entries[name]
            if unchanged(namespace, keys, values):
                continue  # (keys the notebook added shadow nothing that the course's code uses)
            for key, value in snapshot.items():
                current = namespace.get(key, MISSING)
                if current is not value:
                    graveyard.append(current)
                    namespace[key] = value
                    if current is MISSING or key[:1] != "_" or untrusted_value(current):
                        changed.append(f"{name}.{key}")
        for index, (cls, snapshot) in enumerate_(class_snapshots):
            current = type_dict(cls)
            keys, values, size = class_entries[index]
            if len_(current) == size and unchanged(current, keys, values):
                continue
            for key, value in snapshot.items():
                if key not in ("__dict__", "__weakref__") and current.get(key, MISSING) is not value:
                    try:
                        graveyard.append(current.get(key))
                        type_setattr(cls, key, value)
                        changed.append(f"{type_qualname(cls)}.{key}")
                    except Exception_:
                        pass
            if len_(current) != len_(snapshot):
                for key in list_(current):
                    if key not in snapshot and untrusted_value(current[key]):
                        try:
                            graveyard.append(current[key])
                            type_delattr(cls, key)
                            changed.append(f"{type_qualname(cls)}.{key}")
                        except Exception_:
                            pass
        for container, snapshot in containers:
            if len_(container) != len_(snapshot) or any_(container.get(k, MISSING) is not v
                                                         for k, v in snapshot.items()):
                graveyard.append(dict_(container))
                container.clear()
                container.update(snapshot)
                changed.append("copy's dispatch tables")
        for container, snapshot in list_snapshots:
            if len_(container) != len_(snapshot) or any_(a is not b for a, b in zip_(container, snapshot)):
                graveyard.append(list_(container))
                container[:] = snapshot
                changed.append("import hooks or gc.callbacks")
        for key, value in sys_snapshot.items():
            if value is not MISSING and sys_dict.get(key, MISSING) is not value:
                graveyard.append(sys_dict.get(key))
                sys_dict[key] = value
                changed.append(f"sys.{key}")
        if user_ns is not None:
            for name, value in bindings.items():
                current = user_ns.get(name, MISSING)
                if current is not value and (current is not MISSING or name in setup_names):
                    graveyard.append(current)
                    user_ns[name] = value
                    changed.append(name)
            if user_ns.get("__builtins__") is not builtins_module:
                user_ns["__builtins__"] = builtins_module
                changed.append("__builtins__")
        try:
            if np_geterr() != errstate:
                np_seterr(**errstate)
            if np_geterrcall() is not None:
                np_seterrcall(None)
                changed.append("numpy.seterrcall")
        except Exception_:
            pass
        if shell is not None:
            for key in list_(shell_instance):  # the notebook's own versions of IPython's methods
                if key not in shell_keys and hasattr_(type_(shell), key) and untrusted_value(shell_instance[key]):
                    graveyard.append(shell_instance.pop(key))
                    changed.append(f"IPython's {key}")
            try:
                if shell.InteractiveTB.mode != "Minimal":
                    shell.InteractiveTB.set_mode("Minimal")
                if shell.custom_exceptions:
                    shell.custom_exceptions = ()
                    changed.append("IPython's custom exception handler")
            except Exception_:
                pass
        for entry in list_(wrappers.values()):
            for cell, value in entry[4]:
                if cell.cell_contents is not value:
                    graveyard.append(cell.cell_contents)
                    cell.cell_contents = value
                    changed.append("a reference function")
        return changed

    def fresh_start():
        """Release what the last check kept alive, then restore: what ran meanwhile is undone."""
        gc_enable()
        graveyard = state["graveyard"]
        if graveyard:
            state["graveyard"] = []
            del graveyard[:]
        changed = restore()
        if changed:
            changed += restore()
        return changed

    def namespace_intact():
        if shell is None:
            return True
        try:
            return user_global_ns_getter(shell) is user_ns and user_ns_getter(shell) is user_ns
        except Exception_:
            return False

    def note(changed):
        shown = sorted_(set_(changed))
        if shown:
            try:
                stdout.write("Grading guard: restored " + ", ".join(shown[:6])
                             + (f" and {len_(shown) - 6} more" if len_(shown) > 6 else "")
                             + ", changed by the notebook.\n")
            except Exception_:
                pass

    # ---- refusing, and remembering ----
    def violation(message):
        if state["calls"]:
            state["calls"][-1].append(message)

    def refuse(what, stack, taints=False):
        message = f"Grading guard: {what} ({where(stack)}) is not allowed while a notebook is graded."
        if taints:
            if state["taint"] is None:
                state["taint"] = message + " The tests that follow give no points."
        violation(message)
        raise PermissionError_(message)

    # ---- the events ----
    write_chars = ("w", "a", "x", "+")
    write_flags = posix.O_WRONLY | posix.O_RDWR | posix.O_CREAT | posix.O_TRUNC | posix.O_APPEND

    def on_open(args):
        path = args[0]
        mode = args[1] if len_(args) > 1 else None
        flags = args[2] if len_(args) > 2 else 0
        if type_(path) is int_:
            return
        stack = frames()
        if not learner_on_stack(stack):
            return
        full = absolute(path)
        if full is None:
            if type_module(type_(path)) != "pathlib":
                refuse("opening a file through a " + str_(type_qualname(type_(path))), stack)
            try:
                full = absolute(p_fspath(path))
            except Exception_:
                full = None
            if full is None:
                refuse("opening this file", stack)
        writing = (type_(mode) is str_ and any_(c in mode for c in write_chars)) \
            or (type_(flags) is int_ and bool_(flags & write_flags))
        target = resolve_links(full)
        if writing:
            if containing(target, cwd_only, protected_dirs, scratch_dirs) not in (0, 2):
                refuse(f"writing {full} (a notebook may write in its own folder and in {tmp})", stack)
        elif containing(target, readable_dirs, secret_dirs) == 1:
            refuse(f"reading {full}", stack, True)

    def on_path_event(event, args):
        stack = frames()
        if not learner_on_stack(stack):
            return
        if event in ("os.symlink", "os.link"):
            refuse("making a link", stack)
        for value in args:
            full = absolute(value) if type_(value) in (str_, bytes_) else None
            if full is not None and containing(resolve_links(full), cwd_only, protected_dirs,
                                               scratch_dirs) not in (0, 2):
                refuse(f"{event} on {full}", stack)

    def on_forbidden(event, taints):
        stack = frames()
        if learner_on_stack(stack):
            refuse(event, stack, taints)

    def on_direct(event):
        stack = frames()
        if direct_learner(stack):
            refuse(event, stack, True)

    def on_compile(args):
        filename = args[1] if len_(args) > 1 else None
        if type_(filename) is bytes_:
            filename = filename.decode("utf-8", "surrogateescape")
        if type_(filename) is str_ and str_startswith(filename, trusted_roots):
            stack = frames()
            if direct_learner(stack):
                refuse(f"compiling code that claims to come from {filename}", stack, True)

    frame_attributes = frozenset_({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code", "gi_code",
                                   "cr_code", "ag_code"})

    def on_getattr(args):
        if len_(args) > 1 and args[1] in frame_attributes:
            stack = frames()
            if direct_learner(stack):
                refuse(f"reading .{args[1]} (frame introspection)", stack, True)

    def on_setattr(args):
        if len_(args) < 2 or args[1] not in ("__code__", "__defaults__", "__kwdefaults__"):
            return
        target = args[0]
        if type_(target) is not FunctionType or not trusted(function_code(target)):
            return
        stack = frames()
        if learner_on_stack(stack):
            refuse(f"changing {args[1]} of a course function", stack, True)

    def on_sqlite(args):
        database = args[0] if args else None
        if database not in (":memory:", b":memory:", "", None):
            on_forbidden("opening an SQLite database", False)

    def on_exec(args):
        code = args[0] if args else None
        if type_(code) is not CodeType or code.co_name != "<module>":
            return
        fp = fingerprint_(code)
        lessons = test_statements.get(fp)
        stack = frames()
        genuine = len_(stack) >= 2 and stack[0][1] is run_code_code and stack[1][1] is run_ast_code
        if lessons is None:
            if genuine:
                state["current"] = frozenset_()
                state["running"].clear()
            return
        mark_trusted(code)
        changed = fresh_start()
        check_threads()
        if genuine:
            if not namespace_intact() and state["taint"] is None:
                state["taint"] = ("Grading guard: the notebook replaced IPython's namespace; the tests "
                                  "that follow give no points.")
            state["current"] = frozenset_(lessons)
            track(stack[1][0], fp, code)
        if state["taint"] is not None:
            raise CheckFailure(state["taint"])
        if changed:
            note(changed)  # may run the notebook's code (a replaced stream): restore once more after it
            restore()

    def mark_trusted(code):
        pending = [code]
        while pending:
            current = pending.pop()
            if id_(current) in trusted_codes:
                continue
            trusted_codes[id_(current)] = current
            trust_cache.pop(id_(current), None)
            for const in current.co_consts:
                if type_(const) is CodeType:
                    pending.append(const)

    def track(ast_frame, fp, code):
        running = state["running"]
        for lesson in list_(running):
            frame, index, _ = running[lesson]
            sequence = sequences[lesson]
            if frame is ast_frame and index < len_(sequence) and sequence[index] == fp:
                running[lesson] = [frame, index + 1, code]
            else:
                del running[lesson]
        for lesson, sequence in sequences.items():
            if lesson not in running and sequence and sequence[0] == fp:
                running[lesson] = [ast_frame, 1, code]

    def on_lesson_passed(args):
        code = args[0] if args else None
        entry = state["running"].get(code)
        if entry is None or entry[1] != len_(sequences.get(code, ())) or state["taint"] is not None:
            return
        stack = frames()
        if len_(stack) < 2 or stack[0][1] is not lesson_passed_code or stack[1][1] is not entry[2] \
                or stack[1][0].f_globals is not user_ns:
            return
        del state["running"][code]
        digest = hmac_digest(secret, f"lesson {code}".encode(), "sha256").hex()
        try:
            stdout.write(f"{proof_prefix}{code} {digest}]\n")
            stdout.flush()
        except Exception_:
            pass

    def check_namespace(stack):
        for frame, code in stack:
            if id_(code) in trusted_codes and code.co_name == "<module>":
                if user_ns is not None and frame.f_globals is not user_ns:
                    if state["taint"] is None:
                        state["taint"] = ("Grading guard: a test ran in a namespace the notebook made up; "
                                          "the tests that follow give no points.")
                    raise CheckFailure(state["taint"])
                return

    def on_call_begin(args):
        check_namespace(frames())
        state["calls"].append([])
        fresh_start()
        check_threads()
        if state["taint"] is not None:
            raise CheckFailure(state["taint"])

    def on_call_end(args):
        label, box, arguments = args[0], args[1], args[2]
        violations = state["calls"].pop() if state["calls"] else []
        gc_disable()  # until the next statement or call: no finaliser of the notebook's runs meanwhile
        restore()
        if foreign_thread() is not None:
            violations.append("Grading guard: a thread of the notebook's is running")
        graveyard = state["graveyard"]
        if type_(box) is list_ and box:
            graveyard.append(box[0])
            box[0] = sanitize(box[0])
        if type_(arguments) is list_:
            for index in range_(len_(arguments)):
                graveyard.append(arguments[index])
                arguments[index] = sanitize(arguments[index])
        if violations:
            raise CheckFailure(f"{label}: {violations[0]}")

    def on_reference(args):
        slug, box = args[0], args[1]
        stack = frames()
        if learner_on_stack(stack):
            refuse(f"loading the reference solutions of {slug}", stack, True)
        check_namespace(stack)
        if slug not in references:
            return
        path, code = references[slug]
        private = {"__name__": f"_mct_reference_{slug}", "__file__": path, "__builtins__": builtins_dict}
        exec_(code, private)
        public = ModuleType(f"_mct_reference_{slug}", f"Reference solutions of {slug} (grading copy).")
        public.__file__ = path
        for name, value in list_(private.items()):
            if name[:2] == "__":
                continue
            if type_(value) is FunctionType and function_code(value).co_filename == path:
                value = make_wrapper(value, slug, name)
            setattr_(public, name, value)
        box.append(public)

    def make_wrapper(original, slug, name):
        counter[0] += 1
        event = f"mct.refcall.{counter[0]}"

        def wrapper(*args, **kwargs):
            box = []
            audit(event, args, kwargs, box)
            if not box:
                raise RuntimeError_("the grading guard did not answer")
            return box[0]
        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = original.__doc__
        cells = tuple_((cell, cell.cell_contents) for cell in wrapper.__closure__)
        wrappers[event] = (wrapper, original, slug, name, cells)
        return wrapper

    def on_refcall(event, args):
        entry = wrappers.get(event)
        if entry is None:
            return
        original, name = entry[1], entry[3]
        call_args, call_kwargs, box = args
        if any_(functions.get(code) == name for code in state["current"]):
            stack = frames()
            if learner_on_stack(stack):
                message = (f"Grading guard: the notebook's code called the reference solution `{name}` "
                           f"while lesson {', '.join(sorted_(state['current']))} was graded "
                           f"({where(stack)}); that earns no points.")
                violation(message)
                raise CheckFailure(message)
        box.append(original(*call_args, **call_kwargs))

    def on_refcheck(args):
        """Is ``function`` one of the guard's reference functions, intact, and the one named ``wanted``?"""
        function, box = args[0], args[1]
        wanted = args[2] if len_(args) > 2 else None
        for entry in wrappers.values():
            if entry[0] is function:
                box.append(all_(cell.cell_contents is value for cell, value in entry[4])
                           and (wanted is None or entry[3] == wanted))
                return
        box.append(False)

    forbidden_taint = frozenset_({"sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers",
                                  "gc.get_referents", "sys._current_frames", "code.__new__",
                                  "_thread.start_new_thread"})
    forbidden = frozenset_({"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn",
                            "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
                            "signal.pthread_kill", "os.startfile", "socket.connect", "socket.bind",
                            "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"})
    path_events = frozenset_({"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.chown",
                              "os.utime", "os.truncate", "os.link", "os.symlink", "shutil.rmtree",
                              "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
                              "shutil.move", "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr",
                              "os.mkfifo", "os.mknod"})
    direct_events = frozenset_({"sys._getframe", "marshal.loads", "marshal.load"})

    def hook(event, args):
        if get_ident() in busy:
            return
        if event == "object.__getattr__":
            on_getattr(args)
        elif event == "open":
            on_open(args)
        elif event == "exec":
            on_exec(args)
        elif event[:4] == "mct.":
            if event == "mct.ping":
                args[0].append(True)
            elif event[:12] == "mct.refcall.":
                on_refcall(event, args)
            elif direct_learner(frames()):
                return  # the course's events come from the course's code, not from a notebook cell
            elif event == "mct.call.begin":
                on_call_begin(args)
            elif event == "mct.call.end":
                on_call_end(args)
            elif event == "mct.reference":
                on_reference(args)
            elif event == "mct.refcheck":
                on_refcheck(args)
            elif event == "mct.lesson_passed":
                on_lesson_passed(args)
            elif event == "mct.restore":  # diagnostics: restore now and say what had changed
                args[0].extend(restore())
        elif event == "compile":
            on_compile(args)
        elif event in direct_events:
            on_direct(event)
        elif event in forbidden_taint or event[:7] == "ctypes.":
            on_forbidden(event, True)
        elif event in forbidden:
            on_forbidden(event, False)
        elif event in path_events:
            on_path_event(event, args)
        elif event == "object.__setattr__":
            on_setattr(args)
        elif event == "sqlite3.connect":
            on_sqlite(args)

    return hook
