"""Mutation score of the hidden tests (``make mutation``).

Each reference solution of each landed part (the functions of
``solutions/NN_slug.py``, which the build writes from the part's master) is
changed by one small mechanical mutation at a time: ``+`` for ``-``, ``*`` for
``/``, a numeric constant nudged, a ``.T`` dropped, ``axis=0`` for ``axis=1``, a
term dropped, a comparison flipped (``>`` for ``>=``), a dict key or function
swapped, ... (see ``Mutator``).  Every mutant is defined in a copy of the
reference module's namespace, in place of the lesson's function, and graded by
:func:`grading.judge.grade_in_process`: the lesson's declared cases
(``autograde/parts/NN_slug/cases.py``), the grading harness (a forked child
under the lesson's time limit) and the judge, exactly as in real grading (first
on a few quick cases, see :func:`grade`).  The mutant is *killed* when the
verdict fails.  A mutant that fails to define, that
crashes the process or that runs past the time limit is killed too.

Some mutants cannot be told from the reference by any test (they compute the
same thing).  Each lesson lists them in the ``equivalent_mutants`` field of its
``LessonSpec``, one ``("MUTATION | LINE FRAGMENT", why)`` per entry: the
mutation as this report names it and a fragment of the reference's line it is
on.  The score leaves them out; every other survivor is a hole in the hidden
tests, listed in the report (``build/mutation-report.md``).

    python tools/mutation.py [--parts SLUG ...] [--functions NAME ...] [--seed N] [--jobs N]
    python tools/mutation.py --check 0.9     # exit 1 when a part's kill rate is below 90 %
    python tools/mutation.py --grade-equivalent   # grade the declared equivalents too
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grading.course import ROOT, landed_parts, reference_module
from grading.judge import Verdict, grade_in_process, lesson_spec, reference_function
from grading.protocol import PROGRESS_FILE_ENV
from shared.lessons import Lesson, lesson as find_lesson, lessons_of

SEPARATOR = " | "  # between the mutation and the line fragment in an equivalent_mutants entry


# --------------------------------------------------------------------------
# Grading a function as the grader would
# --------------------------------------------------------------------------

NOT_GRADED = "declared equivalent: not graded"


def grade(code: str, namespace: dict[str, Any], run_seed: int = 0, time_limit: float | None = None) -> Verdict:
    """Lesson ``code``'s verdict for the functions in ``namespace``: the real cases and judge, with the
    quick passes of ``grade_in_process(pass_only=True)`` (a mutant is killed when it fails any case)."""
    return grade_in_process(code, namespace, run_seed, time_limit, pass_only=True, name_mistakes=False)


def reference_namespace(lesson: Lesson) -> dict[str, Any]:
    """A fresh copy of the reference module's namespace (its imports and every reference function)."""
    return dict(reference_function(lesson).__globals__)


def function_source(lesson: Lesson, name: str | None = None) -> str:
    """The source of the lesson's reference function (or of ``name``, a helper its cell defines), with the
    blank lines before it kept, so that line numbers are those of ``solutions/NN_slug.py``."""
    name = name or lesson.function
    text = reference_module(lesson.part.slug).read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            lines = text.splitlines(keepends=True)
            return "\n" * (first - 1) + "".join(lines[first - 1:node.end_lineno])
    raise ValueError(f"solutions/{lesson.part.slug}.py has no def {name}")


def define(lesson: Lesson, source: str, before: str = "") -> dict[str, Any]:
    """The reference namespace with ``before`` (e.g. a cell of helpers), then ``source`` (a ``def`` of
    the lesson's function) executed into it."""
    namespace = reference_namespace(lesson)
    if before:
        exec(compile(before, f"<before {lesson.function}>", "exec"), namespace)
    exec(compile(source, f"<mutant of {lesson.function}>", "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------

@dataclass
class Mutant:
    function: str
    number: int
    description: str
    line: int
    text: str  # the line of the reference that the change is on (stripped)
    source: str  # the function's source with this one change (what `define` executes)


_BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
                ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.MatMult: ast.Mult}
_COMPARE_SWAPS = {ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
                  ast.NotIn: ast.In}
_CALL_SWAPS = {"maximum": "minimum", "minimum": "maximum", "max": "min", "min": "max", "sum": "mean",
               "mean": "sum", "zeros": "ones", "ones": "zeros", "zeros_like": "ones_like",
               "ones_like": "zeros_like", "sqrt": "square", "exp": "log", "log": "exp",
               "any": "all", "all": "any", "copy": "view", "astype": "view"}
_OP_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
              ast.Pow: "**", ast.MatMult: "@", ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=",
              ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
              ast.NotIn: "not in", ast.And: "and", ast.Or: "or"}


class Mutator:
    """Enumerates one-point mutations of the graded function's body.

    ``sites(tree)`` lists (node, kind) pairs inside the function; ``apply`` makes
    the k-th change to a fresh copy of the tree.  Docstrings and the ``def`` line
    are left alone; so are string constants other than dict keys and error messages.
    """

    def __init__(self, source: str, function: str):
        self.source = source
        self.function = function
        self.tree = ast.parse(source)

    def _target(self, tree: ast.Module) -> ast.FunctionDef:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == self.function:
                return node
        raise ValueError(f"no def {self.function} in the solution cell")

    def _walk(self, tree: ast.Module):
        target = self._target(tree)
        body = target.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        pending = list(reversed(body))
        while pending:  # depth first, in source order; the text of f-strings (messages) is left alone
            node = pending.pop()
            yield node
            if not isinstance(node, ast.JoinedStr):
                pending.extend(reversed(list(ast.iter_child_nodes(node))))

    def _keys(self, tree: ast.Module) -> list[str]:
        """String keys used in subscripts and dict displays of the function (for key swaps)."""
        keys = []
        for node in self._walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, str):
                keys.append(node.slice.value)
            if isinstance(node, ast.Dict):
                keys += [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        return sorted(set(keys))

    def changes(self, tree: ast.Module) -> list[tuple]:
        """[(path to the node, what to do, description)] for every mutation site, in a stable order."""
        found = []
        keys = self._keys(tree)
        nodes = list(self._walk(tree))
        parents = {}
        for node in ast.walk(self._target(tree)):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        for index, node in enumerate(nodes):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAPS:
                new = _BINOP_SWAPS[type(node.op)]
                found.append((index, "binop", new, line,
                              f"`{_OP_SYMBOL[type(node.op)]}` -> `{_OP_SYMBOL[new]}`"))
                found.append((index, "left", None, line, f"drop the right operand of `{_OP_SYMBOL[type(node.op)]}`"))
                found.append((index, "right", None, line, f"drop the left operand of `{_OP_SYMBOL[type(node.op)]}`"))
            elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
                new = _BINOP_SWAPS[type(node.op)]
                found.append((index, "augop", new, line,
                              f"`{_OP_SYMBOL[type(node.op)]}=` -> `{_OP_SYMBOL[new]}=`"))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
                found.append((index, "unary", None, line, f"drop `{'-' if isinstance(node.op, ast.USub) else 'not'}`"))
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_SWAPS:
                new = _COMPARE_SWAPS[type(node.ops[0])]
                found.append((index, "compare", new, line,
                              f"`{_OP_SYMBOL[type(node.ops[0])]}` -> `{_OP_SYMBOL[new]}`"))
            elif isinstance(node, ast.BoolOp):
                found.append((index, "boolop", None, line,
                              f"`{_OP_SYMBOL[type(node.op)]}` -> `{'or' if isinstance(node.op, ast.And) else 'and'}`"))
            elif isinstance(node, ast.Constant) and type(node.value) in (int, float) \
                    and not isinstance(node.value, bool):
                parent = parents.get(id(node))
                if isinstance(parent, ast.keyword) and parent.arg == "axis":
                    continue  # handled as an axis change
                for delta, text in ((1, "+ 1"), (-1, "- 1")):
                    found.append((index, "number", delta, line, f"constant {node.value!r} {text}"))
                if node.value not in (0, 0.0):
                    found.append((index, "zero", None, line, f"constant {node.value!r} -> 0"))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys:
                parent = parents.get(id(node))
                if isinstance(parent, (ast.Subscript, ast.Dict)):
                    for other in keys:
                        if other != node.value:
                            found.append((index, "key", other, line, f"key {node.value!r} -> {other!r}"))
            elif isinstance(node, ast.Attribute) and node.attr == "T":
                found.append((index, "dropT", None, line, "drop `.T`"))
            elif isinstance(node, ast.keyword) and node.arg == "axis" and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, int):
                value = node.value.value
                found.append((index, "axis", 1 if value == 0 else 0, line, f"axis={value} -> axis={1 if value == 0 else 0}"))
                found.append((index, "noaxis", None, line, f"drop axis={value}"))
            elif isinstance(node, ast.keyword) and node.arg in ("keepdims", "copy") \
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
                found.append((index, "flipkw", None, line, f"{node.arg}={node.value.value} -> {not node.value.value}"))
            elif isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    node.func.id if isinstance(node.func, ast.Name) else None
                if name in _CALL_SWAPS:
                    found.append((index, "call", _CALL_SWAPS[name], line, f"`{name}(` -> `{_CALL_SWAPS[name]}(`"))
                if len(node.args) >= 2:
                    found.append((index, "swapargs", None, line, f"swap the first two arguments of `{name}`"))
                if len(node.args) == 1 and not node.keywords and isinstance(node.func, ast.Name) \
                        and not node.func.id.endswith(("Error", "Exception")):
                    found.append((index, "unwrap", None, line, f"`{name}(x)` -> `x`"))
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and type(node.slice.value) is int:
                found.append((index, "index", node.slice.value + 1, line,
                              f"index [{node.slice.value}] -> [{node.slice.value + 1}]"))
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) >= 2:
                found.append((index, "swapreturn", None, line, "swap the first two returned values"))
            elif isinstance(node, ast.Raise):
                found.append((index, "noraise", None, line, "drop the `raise`"))
            elif isinstance(node, (ast.If, ast.While)):
                found.append((index, "negate", None, line, f"negate the `{type(node).__name__.lower()}` condition"))
        return found

    def mutants(self) -> list[Mutant]:
        result = []
        original = ast.unparse(self.tree)
        for number, change in enumerate(self.changes(self.tree)):
            tree = ast.parse(self.source)  # a fresh tree to change: parsing is far quicker than a deepcopy
            if not self._apply(tree, list(self._walk(tree)), change):
                continue
            try:
                source = ast.unparse(ast.fix_missing_locations(tree))
                compile(source, "<mutant>", "exec")
            except Exception:  # an unrepresentable change: skip it
                continue
            if source != original:
                lines = self.source.splitlines()
                text = lines[change[3] - 1].strip() if 0 < change[3] <= len(lines) else ""
                result.append(Mutant(self.function, number, change[4], change[3], text, source))
        return result

    @staticmethod
    def _replace(tree: ast.AST, old: ast.AST, new: ast.AST | None) -> bool:
        """Put ``new`` where ``old`` is (``None``: remove it from its list)."""
        for parent in ast.walk(tree):
            for name, value in ast.iter_fields(parent):
                if value is old:
                    setattr(parent, name, new)
                    return True
                if isinstance(value, list) and any(item is old for item in value):
                    position = next(i for i, item in enumerate(value) if item is old)
                    if new is None:
                        del value[position]
                    else:
                        value[position] = new
                    return True
        return False

    @classmethod
    def _apply(cls, tree: ast.Module, nodes: list, change: tuple) -> bool:
        index, kind, value, _, _ = change
        node = nodes[index]
        if kind in ("binop", "augop"):
            node.op = value()
        elif kind == "left":
            return cls._replace(tree, node, node.left)
        elif kind == "right":
            return cls._replace(tree, node, node.right)
        elif kind == "unary":
            return cls._replace(tree, node, node.operand)
        elif kind == "compare":
            node.ops = [value()]
        elif kind == "boolop":
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif kind == "number":
            node.value = node.value + value
        elif kind == "zero":
            node.value = type(node.value)(0)
        elif kind == "key":
            node.value = value
        elif kind == "dropT":
            return cls._replace(tree, node, node.value)
        elif kind == "axis":
            node.value = ast.Constant(value)
        elif kind == "noaxis":
            return cls._replace(tree, node, None)
        elif kind == "flipkw":
            node.value = ast.Constant(not node.value.value)
        elif kind == "call":
            if isinstance(node.func, ast.Attribute):
                node.func.attr = value
            else:
                node.func.id = value
        elif kind == "unwrap":
            return cls._replace(tree, node, node.args[0])
        elif kind == "swapargs":
            node.args[0], node.args[1] = node.args[1], node.args[0]
        elif kind == "index":
            node.slice = ast.Constant(value)
        elif kind == "swapreturn":
            elts = node.value.elts
            elts[0], elts[1] = elts[1], elts[0]
        elif kind == "noraise":
            return cls._replace(tree, node, ast.Pass())
        elif kind == "negate":
            node.test = ast.UnaryOp(ast.Not(), node.test)
        else:
            return False
        return True



# --------------------------------------------------------------------------
# Equivalent mutants: declared per lesson, with the reason
# --------------------------------------------------------------------------

def mutant_key(mutant: Mutant) -> str:
    """How an ``equivalent_mutants`` entry names ``mutant``: the mutation and the reference's line."""
    return f"{mutant.description}{SEPARATOR}{mutant.text}"


def split_key(key: str) -> tuple[str, str]:
    description, _, fragment = key.partition(SEPARATOR)
    return description.strip(), fragment.strip()


def matches(key: str, mutant: Mutant) -> bool:
    """Whether the ``equivalent_mutants`` entry ``key`` names ``mutant``: the same mutation, on a line
    of the reference that contains the entry's fragment."""
    description, fragment = split_key(key)
    return bool(fragment) and description == mutant.description and fragment in mutant.text


def equivalent_reason(code: str, mutant: Mutant) -> str | None:
    """Why ``mutant`` computes the same function as the reference (from lesson ``code``'s declaration)."""
    return next((why for key, why in lesson_spec(code).equivalent_mutants if matches(key, mutant)), None)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

@dataclass
class Result:
    code: str
    mutant: Mutant
    passed: bool  # the mutant passed the hidden tests: it survived
    message: str
    seconds: float
    equivalent: str | None = None

    @property
    def killed(self) -> bool:
        return not self.passed


@dataclass
class PartScore:
    slug: str
    results: list[Result] = field(default_factory=list)
    reference_ok: dict[str, Verdict] = field(default_factory=dict)
    stale: list[tuple[str, str]] = field(default_factory=list)  # (lesson code, entry) matching no mutant

    def counted(self) -> list[Result]:
        return [r for r in self.results if not r.equivalent]

    @property
    def killed(self) -> int:
        return sum(r.killed for r in self.counted())

    @property
    def rate(self) -> float:
        counted = self.counted()
        return self.killed / max(1, len(counted))

    def survivors(self) -> list[Result]:
        return [r for r in self.results if r.passed]

    def holes(self) -> list[Result]:
        return [r for r in self.survivors() if not r.equivalent]


def grade_mutant(code: str, function: str, source: str, run_seed: int = 0,
                 time_limit: float | None = None, before: str = "") -> tuple[bool, str]:
    """(passed, message) of the function defined by ``source`` as lesson ``code``'s answer."""
    try:
        namespace = define(find_lesson(code), source, before)
    except Exception as error:  # a mutant that cannot even be defined is killed
        return False, f"the definition failed: {type(error).__name__}: {error}"
    if not callable(namespace.get(function)):
        return False, f"the source defines no function {function}"
    verdict = grade(code, namespace, run_seed, time_limit)
    return verdict.passed, verdict.message


def _grade_job(job: tuple[str, str, str, int, float | None, str]) -> tuple[bool, str, float]:
    started = time.perf_counter()
    passed, message = grade_mutant(*job)
    return passed, message, time.perf_counter() - started


def _run_jobs(jobs: list[tuple], workers: int) -> Iterable[tuple[bool, str, float]]:
    if workers <= 1 or len(jobs) < 2:
        return map(_grade_job, jobs)
    import multiprocessing
    pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        return pool.map(_grade_job, jobs, chunksize=4)
    finally:
        pool.close()
        pool.join()


def mutate_part(slug: str, functions: list[str] | None = None, run_seed: int = 0, workers: int = 1,
                time_limit: float | None = None, log: Callable[[str], None] | None = None,
                grade_equivalent: bool = False) -> PartScore:
    """Grade every mutant of every reference function of part ``slug`` (``workers`` processes).

    A mutant declared equivalent is left out of the score whatever its verdict, so it is not graded
    unless ``grade_equivalent`` (``--grade-equivalent``: to look again at the declarations; such a
    mutant passes every case, so it costs the most to grade)."""
    score = PartScore(slug)
    planned: list[tuple[Lesson, Mutant]] = []
    for lesson in lessons_of(slug):
        if functions and lesson.function not in functions:
            continue
        source = function_source(lesson)
        verdict = grade(lesson.code, define(lesson, source), run_seed, time_limit)
        score.reference_ok[lesson.code] = verdict
        # The lesson's function, and the helpers its cell defines for it (LessonSpec.helpers): a helper's mutant is
        # graded through the lesson's function, defined again after it so that it calls the mutant.
        mutants = Mutator(source, lesson.function).mutants()
        for helper in lesson_spec(lesson.code).helpers:
            mutants += Mutator(function_source(lesson, helper), helper).mutants()
        planned += [(lesson, mutant) for mutant in mutants]
        score.stale += [(lesson.code, key) for key, _ in lesson_spec(lesson.code).equivalent_mutants
                        if not any(matches(key, mutant) for mutant in mutants)]
    declared = [equivalent_reason(lesson.code, mutant) for lesson, mutant in planned]
    graded = [i for i, why in enumerate(declared) if grade_equivalent or why is None]
    jobs = []
    for i in graded:
        lesson, mutant = planned[i]
        if mutant.function == lesson.function:
            jobs.append((lesson.code, lesson.function, mutant.source, run_seed, time_limit, ""))
        else:
            jobs.append((lesson.code, lesson.function, function_source(lesson), run_seed, time_limit, mutant.source))
    outcomes = dict(zip(graded, _run_jobs(jobs, workers)))
    for i, (lesson, mutant) in enumerate(planned):
        passed, message, seconds = outcomes.get(i, (True, NOT_GRADED, 0.0))
        score.results.append(Result(lesson.code, mutant, passed, message, seconds, declared[i]))
    if log:
        for lesson in lessons_of(slug):
            mine = [r for r in score.results if r.code == lesson.code]
            if mine:
                log(f"  {lesson.code} {lesson.function}: {len(mine)} mutants, "
                    f"{sum(r.killed for r in mine)} killed, {sum(bool(r.equivalent) for r in mine)} equivalent")
    return score


def report(scores: list[PartScore], run_seed: int = 0) -> str:
    lines = ["# Mutation score of the hidden tests", "",
             "Generated by `make mutation` (tools/mutation.py). A mutant is one small change to a reference "
             "solution (`solutions/NN_slug.py`); it is graded as a learner's function would be, with the "
             f"lesson's declared hidden cases (run seed {run_seed}) and the judge, and it is *killed* when "
             "the verdict fails. Equivalent mutants (no test can tell them from the reference) are declared "
             "in `equivalent_mutants` of the lesson's `LessonSpec` (`autograde/parts/NN_slug/cases.py`) "
             "with the reason, and left out of the score (so they are graded only with `--grade-equivalent`).", "",
             "| part | mutants | equivalent | killed | score |",
             "| --- | --- | --- | --- | --- |"]
    for score in scores:
        counted = score.counted()
        lines.append(f"| {score.slug} | {len(score.results)} | {len(score.results) - len(counted)} | "
                     f"{score.killed}/{len(counted)} | {score.rate:.1%} |")
    stale = [(code, key) for score in scores for code, key in score.stale]
    if stale:
        lines += ["", "Entries of `equivalent_mutants` that match no mutant any more (their line was edited; "
                  "look again):", ""] + [f"- lesson {code}: `` {key} ``" for code, key in stale]
    for score in scores:
        broken = {code: v for code, v in score.reference_ok.items() if not v.passed}
        if broken:
            lines += ["", f"**The reference itself fails in {score.slug}:** "
                      + "; ".join(f"{c}: {v.message}" for c, v in broken.items())]
        survivors = score.survivors()
        lines += ["", f"## {score.slug}: survivors ({len(survivors)})", ""]
        if not survivors:
            lines.append("None.")
        for result in survivors:
            verdict = (f"equivalent{' (not graded)' if result.message == NOT_GRADED else ''}: {result.equivalent}"
                       if result.equivalent else "**not killed: a hole in the hidden tests**")
            lines.append(f"- {result.code} `{result.mutant.function}` line {result.mutant.line}: "
                         f"`` {mutant_key(result.mutant)} `` — {verdict}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="*", help="part slugs (default: every landed part)")
    parser.add_argument("--functions", nargs="*", help="only these lessons' functions")
    parser.add_argument("--seed", type=int, default=0, help="the run seed the cases are drawn with")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="grading processes (default: 2, or 1 on one core)")
    parser.add_argument("--report", type=Path, default=ROOT / "build" / "mutation-report.md")
    parser.add_argument("--check", type=float, default=None,
                        help="exit 1 when a part's kill rate (equivalents left out) is below this")
    parser.add_argument("--grade-equivalent", action="store_true",
                        help="grade the mutants declared equivalent too (to look again at the declarations)")
    args = parser.parse_args(argv)
    os.environ.setdefault(PROGRESS_FILE_ENV, os.devnull)
    scores = []
    started = time.perf_counter()
    for slug in args.parts or landed_parts(built=reference_module):
        print(f"{slug}:", flush=True)
        scores.append(mutate_part(slug, args.functions, args.seed, args.jobs,
                                  log=lambda text: print(text, flush=True), grade_equivalent=args.grade_equivalent))
    text = report(scores, args.seed)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print()
    print(text)
    print(f"({time.perf_counter() - started:.1f} s; report written to {args.report})")
    if args.check is not None and any(s.rate < args.check for s in scores):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
