"""What the hidden tests stand on: the reference solutions and the comparison loop.

A hidden test calls the learner's function on fresh random cases and compares
each answer with the reference solution's answer for the same inputs, checking
on the way that the inputs were not mutated and naming any recognised mistake.

The reference module of a part (``solutions/NN_slug.py``, generated from the
part's master) is loaded here by file path.  It is never copied into a release
or a feedback folder; the instructor's environment finds it through the
installed course (or ``MCT_SOLUTIONS_DIR``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .checking import CheckFailure, check_call, describe_args, snapshot
from .lessons import lesson as _lesson, part as _part
from .mistakes import mistakes_of

_loaded: dict[str, ModuleType] = {}


def solutions_dir() -> Path:
    """Where the reference modules live: ``$MCT_SOLUTIONS_DIR`` or the course's ``solutions/``."""
    configured = os.environ.get("MCT_SOLUTIONS_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / "solutions"


def reference(part_key: int | str) -> ModuleType:
    """The reference module of a part, e.g. ``reference("01_mlp_core")``."""
    slug = _part(part_key).slug
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
    answer.  The check also fails when an input is mutated and names the
    lesson's known mistakes.  Returns the learner's answer.
    """
    name = _lesson(lesson).function
    expected = reference_function(*snapshot(list(args.values())))
    try:
        return check_call(function, args, expected, mistakes=mistakes_of(name),
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


@contextlib.contextmanager
def reference_helpers(namespace: MutableMapping[str, Any], reference_module: ModuleType,
                      *names: str) -> Iterator[None]:
    """Temporarily put reference versions of earlier lessons' functions into ``namespace``.

    This grades a lesson on its own: a learner's ``mlp_forward`` that calls their
    own ``linear_forward`` is tested with the reference ``linear_forward``, so a
    bug in lesson 003 costs lesson 003's points and not lesson 005's too.
    """
    restore = _swap_in(namespace, reference_module, names)
    try:
        yield
    finally:
        restore()


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
        raise RuntimeError("isolate_lesson works inside a notebook cell; use reference_helpers elsewhere")

    def restore_after_cell(*_: Any) -> None:
        restore()
        shell.events.unregister("post_run_cell", restore_after_cell)
    shell.events.register("post_run_cell", restore_after_cell)


def expect_error(function: Callable[..., Any], args: Sequence[Any], names: Sequence[str],
                 error: type[BaseException], about: str) -> None:
    """The learner's function must reject bad input with ``error`` (e.g. ValueError)."""
    label = getattr(function, "__name__", "your function")
    try:
        function(*snapshot(args))
    except NotImplementedError:
        raise
    except error:
        return
    except Exception as other:
        raise CheckFailure(f"{label} should raise {error.__name__} when {about}, but it raised "
                           f"{type(other).__name__}: {other}") from other
    raise CheckFailure(f"{label} should raise {error.__name__} when {about} "
                       f"(called with {describe_args(names, args)}), but it returned normally")
