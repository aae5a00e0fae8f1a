"""What the hidden tests stand on: the reference solutions and the comparison loop.

A hidden test calls the learner's function on fresh random cases and compares
each answer with the reference solution's answer for the same inputs, checking
on the way that the inputs were not mutated and naming any recognised mistake.

The reference module of a part (``solutions/NN_slug.py``, generated from the
part's master) is loaded here by file path.  It is never copied into a release
or a feedback folder; the instructor's environment finds it through the
installed course (or ``MCT_SOLUTIONS_DIR``).

While a notebook is graded, the grading guard (``shared/guard.py``) holds the
reference solutions instead: :func:`reference` then returns a fresh copy whose
functions run out of the notebook's reach, the learner's answer is checked
before the reference's answer exists, and the notebook's own code can neither
load the reference nor call the reference function of the lesson under test.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .checking import CheckFailure, Deferred, check_call, describe_args, snapshot
from .lessons import lesson as _lesson, part as _part
from .mistakes import mistakes_of

_loaded: dict[str, ModuleType] = {}
_audit = sys.audit  # heard by the grading guard while a notebook is graded (see shared.guard)


def _guarded() -> bool:
    """True in a grading kernel whose guard is active."""
    box: list[bool] = []
    _audit("mct.ping", box)
    return bool(box)


def solutions_dir() -> Path:
    """Where the reference modules live: ``$MCT_SOLUTIONS_DIR`` or the course's ``solutions/``."""
    configured = os.environ.get("MCT_SOLUTIONS_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / "solutions"


def reference(part_key: int | str) -> ModuleType:
    """The reference module of a part, e.g. ``reference("01_mlp_core")``."""
    slug = _part(part_key).slug
    if _guarded():
        box: list[ModuleType] = []
        _audit("mct.reference", slug, box)
        if not box:
            raise RuntimeError(f"The grading guard holds no reference solutions for {slug}.")
        return box[0]
    if slug not in _loaded:
        path = solutions_dir() / f"{slug}.py"
        if not path.is_file():
            raise RuntimeError(
                f"The reference solutions for {slug} are not at {path}. Hidden tests run only in the "
                f"instructor's grading environment (install the course with `make lab` or set "
                f"MCT_SOLUTIONS_DIR).")
        spec = importlib.util.spec_from_file_location(f"_mct_reference_{slug}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[slug] = module
    return _loaded[slug]


def check_matches_reference(function: Callable[..., Any], reference_function: Callable[..., Any],
                            args: Mapping[str, Any], *, lesson: int | str,
                            output: str | None = None, **tolerances: Any) -> Any:
    """One hidden case: the learner's answer equals the reference's for the same inputs.

    ``args`` maps argument names to values.  The reference runs on its own deep
    copy, so nothing the learner's function does can change the expected
    answer, and only after the learner's function has returned, so the answer
    exists nowhere while the learner's code runs.  The check also fails when an
    input is mutated and names the lesson's known mistakes.  Returns the
    learner's answer.
    """
    name = _lesson(lesson).function
    values = list(args.values())

    def expected_answer() -> Any:
        genuine: list[bool] = []
        _audit("mct.refcheck", reference_function, genuine, name)
        if genuine and not genuine[0]:
            raise CheckFailure(f"Grading guard: the reference solution this hidden test compares {name} "
                               f"with is not the course's (the notebook replaced it); no points.")
        return reference_function(*snapshot(values))

    try:
        return check_call(function, args, Deferred(expected_answer), mistakes=mistakes_of(name),
                          output=output or f"the result of {name}", **tolerances)
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}\n  (hidden test case: "
                           f"{describe_args(list(args), list(args.values()))})") from None


def _swap_in(namespace: MutableMapping[str, Any], module: ModuleType,
             names: Sequence[str]) -> Callable[[], None]:
    """Put ``module``'s versions of ``names`` into ``namespace``; return the undo."""
    missing = object()
    saved = {name: namespace.get(name, missing) for name in names}
    for name in names:
        namespace[name] = getattr(module, name)

    def restore() -> None:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value
    return restore


def isolate_lesson(namespace: MutableMapping[str, Any], part_key: int | str, *names: str) -> None:
    """For the rest of the current notebook cell, use reference versions of ``names``.

    Called from a hidden region at the top of a test cell, so that while grading,
    the *visible* tests of a lesson that builds on earlier lessons also run with
    the reference helpers.  The learner's own functions come back when the cell
    ends, whether it passed or failed (an IPython ``post_run_cell`` callback).
    """
    restore = _swap_in(namespace, reference(part_key), names)
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:
        # Outside IPython (e.g. tools/mutation.py running a test cell in a throwaway namespace)
        # there is no "end of the cell": the reference versions simply stay in that namespace.
        return

    def restore_after_cell(*_: Any) -> None:
        restore()
        shell.events.unregister("post_run_cell", restore_after_cell)
    shell.events.register("post_run_cell", restore_after_cell)


def expect_error(function: Callable[..., Any], args: Sequence[Any], names: Sequence[str],
                 error: type[BaseException], about: str, _guard: Callable[..., None] = _audit) -> None:
    """The learner's function must reject bad input with ``error`` (e.g. ValueError).

    While a notebook is graded the call is bracketed by the grading guard, as in
    ``shared.checking.call_learner`` (``_guard`` is bound at import for the same reason).
    """
    label = getattr(function, "__name__", None)
    label = label if type(label) is str else "your function"
    _guard("mct.call.begin", label)
    try:
        function(*snapshot(args))
    except NotImplementedError:
        raise
    except error:
        return
    except Exception as other:
        raise CheckFailure(f"{label} should raise {error.__name__} when {about}, but it raised "
                           f"{type(other).__name__}: {other}") from other
    finally:
        _guard("mct.call.end", label, [None], None)
    raise CheckFailure(f"{label} should raise {error.__name__} when {about} "
                       f"(called with {describe_args(names, args)}), but it returned normally")
