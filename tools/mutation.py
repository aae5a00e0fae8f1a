"""Mutation score of the hidden tests (``make mutation``).

Each reference solution of each landed part (the solution cells of
``autograde/source/NN_slug/NN_slug.ipynb``, markers removed) is changed by one
small mechanical mutation at a time: ``+`` for ``-``, ``*`` for ``/``, a numeric
constant nudged, a ``.T`` dropped, ``axis=0`` for ``axis=1``, a term dropped, a
comparison flipped (``>`` for ``>=``), a dict key or function swapped, ...
(see ``Mutator``).  For every mutant, the lesson's test cell runs in-process in
a namespace prepared like the notebook's (set-up cell, then every reference
solution, then the mutant in place of the lesson's function).  The mutant is
*killed* when the cell fails; ``hidden`` counts the mutants that the hidden
region alone kills (it runs first, as when grading).  A mutant that fails to
define, or runs longer than the time limit, counts as killed.

Some mutants cannot be told from the reference by any test (they compute the
same thing); ``EQUIVALENT`` lists them, each with the reason, and the score
leaves them out.  Every other survivor is listed: a hole in the hidden tests.

    python tools/mutation.py [--parts SLUG ...] [--report build/mutation-report.md]
    python tools/mutation.py --check 0.9     # exit 1 when a part's hidden kill rate is below 90 %
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import os
import re
import signal
import sys
import time
import warnings
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.pop("MCT_GRADING", None)

import nbformat  # noqa: E402

from shared.lessons import Lesson, lessons_of  # noqa: E402

MASTERS = ROOT / "autograde" / "masters"
SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)
HIDDEN_END = "### END HIDDEN TESTS"
TIME_LIMIT = 5.0  # seconds per mutant (the reference takes a small fraction of that)


def landed_parts() -> list[str]:
    return [p.stem for p in sorted(MASTERS.glob("[0-9][0-9]_*.py"))
            if (ROOT / "autograde" / "source" / p.stem / f"{p.stem}.ipynb").is_file()]


# --------------------------------------------------------------------------
# Running a lesson's test cell in-process
# --------------------------------------------------------------------------

class Timeout(BaseException):
    """Raised in the running code when the time limit is reached (not an Exception: nothing may catch it)."""


@contextmanager
def time_limit(seconds: float | None):
    if not seconds or threading_is_not_main():
        yield
        return

    def expire(signum, frame):
        raise Timeout(f"ran longer than {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def threading_is_not_main() -> bool:
    import threading
    return threading.current_thread() is not threading.main_thread()


@dataclass
class Outcome:
    passed: bool
    stage: str = ""  # "definition", "hidden", "visible" or "" when it passed
    message: str = ""

    @property
    def killed_by_hidden(self) -> bool:
        return self.stage in ("definition", "hidden")


class PartNotebook:
    """A part's source notebook, ready to run lessons' test cells in fresh namespaces."""

    def __init__(self, slug: str):
        self.slug = slug
        path = ROOT / "autograde" / "source" / slug / f"{slug}.ipynb"
        notebook = nbformat.read(path, as_version=4)
        self.setup = ""
        self.solutions: dict[str, str] = {}  # function -> reference code (markers removed)
        self.tests: dict[str, str] = {}  # lesson code -> test cell source
        for cell in notebook.cells:
            meta = cell.metadata.get("nbgrader", {})
            grade_id = meta.get("grade_id", "")
            if grade_id == "setup":
                self.setup = cell.source
            elif meta.get("solution"):
                self.solutions[grade_id.split("_", 2)[2]] = SOLUTION_MARKERS.sub("", cell.source)
            elif meta.get("grade") and grade_id.startswith("lesson_"):
                self.tests[grade_id.split("_")[1]] = cell.source
        self._base: dict | None = None

    def lessons(self) -> tuple[Lesson, ...]:
        return lessons_of(self.slug)

    def namespace(self, replace: dict[str, str] | None = None, before: str = "") -> dict:
        """A fresh notebook namespace: set-up cell, ``before``, then each solution (or its replacement).

        ``lesson_passed`` is a no-op here: progress is nobody's business in a throwaway namespace.
        """
        replace = replace or {}
        namespace: dict = {"__name__": "__main__"}
        with redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(self.setup, f"<{self.slug} set-up>", "exec"), namespace)
            namespace["lesson_passed"] = lambda *_: None
            if before:
                exec(compile(before, f"<{self.slug} extra cell>", "exec"), namespace)
            for function, code in self.solutions.items():
                exec(compile(replace.get(function, code), f"<{self.slug} solution {function}>", "exec"),
                     namespace)
        return namespace

    def split_test(self, code: str) -> tuple[str, str]:
        source = self.tests[code]
        if HIDDEN_END not in source:
            return "", source
        hidden, visible = source.split(HIDDEN_END, 1)
        return hidden, visible

    def run_test(self, code: str, namespace: dict, time_limit_s: float | None = TIME_LIMIT) -> Outcome:
        """Run lesson ``code``'s test cell (hidden region first) in ``namespace``."""
        hidden, visible = self.split_test(code)
        for stage, source in (("hidden", hidden), ("visible", visible)):
            if not source.strip():
                continue
            try:
                with time_limit(time_limit_s), redirect_stdout(io.StringIO()), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(compile(source, f"<{self.slug} test {code} {stage}>", "exec"), namespace)
            except Timeout as error:
                return Outcome(False, stage, str(error))
            except Exception as error:  # any failure of the cell kills the mutant
                return Outcome(False, stage, f"{type(error).__name__}: {error}")
        return Outcome(True)

    def run_with(self, code: str, function: str, source: str, before: str = "",
                 time_limit_s: float | None = TIME_LIMIT) -> Outcome:
        """Run lesson ``code``'s test cell with ``source`` as the solution cell of ``function``."""
        try:
            with time_limit(time_limit_s):
                namespace = self.namespace({function: source}, before)
        except Timeout as error:
            return Outcome(False, "definition", str(error))
        except Exception as error:
            return Outcome(False, "definition", f"{type(error).__name__}: {error}")
        return self.run_test(code, namespace, time_limit_s)


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
    source: str  # the whole solution cell with this one change


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
            tree = copy.deepcopy(self.tree)
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
# Equivalent mutants: changes that no test can see, with the reason
# --------------------------------------------------------------------------

_COMMUTATIVE = "the function is symmetric in its two arguments (and keeps the array's dtype either way)"

#: (function, mutation, the reference's line) -> why no test can tell the mutant from the reference.
#: Keyed by the line's text, so that an edited line drops out of this list and is examined again.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    # Part 1
    ("relu_forward", "swap the first two arguments of `maximum`", "return np.maximum(z, 0)"): _COMMUTATIVE,
    ("mlp_backward", "key 'Z1' -> 'A1'", 'dZ1 = relu_backward(dA1, cache["Z1"])'):
        "A1 = relu(Z1) is positive exactly where Z1 is, so both give relu_backward the same mask "
        "(for every cache that mlp_forward makes, which is the function's contract)",
    **{("mlp_backward", f"key 'W1' -> {other!r}", 'dW1, db1 = first_linear_backward(dZ1, cache["A0"], params["W1"])'):
       "first_linear_backward does not use its third argument (it is there so that its signature "
       "matches linear_backward's)" for other in ("W2", "b1", "b2")},
    # Part 2
    **{("split_into_micro_batches", mutation, "or num_micro_batches < 1:"):
       "only num_micro_batches = 0 is let through, and np.array_split then raises the same ValueError"
       for mutation in ("constant 1 - 1", "constant 1 -> 0")},
    ("split_into_micro_batches", "`int(x)` -> `x`", "k = int(num_micro_batches)"):
        "once validated, num_micro_batches is a whole number, and np.array_split splits alike for 3 and 3.0",
    ("scale_accumulated_gradients", "`list(x)` -> `x`", "sizes = list(micro_batch_sizes)"):
        "the contract takes a sequence of sizes, which min() and sum() can both read as it is "
        "(only a one-shot iterator, which the docstring does not allow, would differ)",
    ("grad_accumulation_step", "`float(x)` -> `x`", "return new_params, float(loss_sum / sum(sizes))"):
        "the quotient is already a Python float (or a float64 NumPy scalar, which is one)",
    # Part 3
    ("mlp_forward_checkpointed", "`<` -> `<=`", "if i < num_layers:"):
        "it only adds a ReLU after the last layer, whose result `a` is never used again (z is returned)",
    ("mlp_forward_checkpointed", "swap the first two arguments of `maximum`", "a = np.maximum(z, 0)"): _COMMUTATIVE,
    ("recompute_block_activations", "swap the first two arguments of `min`",
     "last_hidden = min(end_layer, mlp.num_layers(params) - 1)"): _COMMUTATIVE,
    ("recompute_block_activations", "swap the first two arguments of `maximum`", "a = np.maximum(z, 0)"):
        _COMMUTATIVE,
    ("mlp_backward_checkpointed", "swap the first two arguments of `min`",
     "end = min(start + segment_size, num_layers)"): _COMMUTATIVE,
    **{("mlp_backward_checkpointed", mutation, "if i > 1:"):
       "it only adds the gradient for layer 0's input at the very end, which nothing uses"
       for mutation in ("`>` -> `>=`", "constant 1 - 1", "constant 1 -> 0")},
    ("estimate_checkpointing_memory_savings", "swap the first two arguments of `min`",
     "recomputed = 2 * min(segment_size, num_layers - 1)"): _COMMUTATIVE,
    ("estimate_checkpointing_memory_savings", "`int(x)` -> `x`",
     'return {"standard_bytes": int(standard), "checkpointed_bytes": int(checkpointed),'):
        "standard and checkpointed are already ints (products and sums of ints)",
}


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

@dataclass
class Result:
    mutant: Mutant
    outcome: Outcome
    seconds: float

    @property
    def equivalent(self) -> str | None:
        return EQUIVALENT.get((self.mutant.function, self.mutant.description, self.mutant.text))


@dataclass
class PartScore:
    slug: str
    results: list[Result] = field(default_factory=list)
    reference_ok: dict[str, Outcome] = field(default_factory=dict)

    def counted(self) -> list[Result]:
        return [r for r in self.results if not r.equivalent]

    @property
    def hidden_rate(self) -> float:
        counted = self.counted()
        return sum(r.outcome.killed_by_hidden for r in counted) / max(1, len(counted))

    @property
    def cell_rate(self) -> float:
        counted = self.counted()
        return sum(not r.outcome.passed for r in counted) / max(1, len(counted))

    def survivors(self) -> list[Result]:
        return [r for r in self.results if not r.outcome.killed_by_hidden]


def mutate_part(slug: str, functions: list[str] | None = None, log=None) -> PartScore:
    notebook = PartNotebook(slug)
    score = PartScore(slug)
    for item in notebook.lessons():
        if functions and item.function not in functions:
            continue
        code = notebook.solutions[item.function]
        score.reference_ok[item.code] = notebook.run_with(item.code, item.function, code)
        for mutant in Mutator(code, item.function).mutants():
            started = time.perf_counter()
            outcome = notebook.run_with(item.code, item.function, mutant.source)
            score.results.append(Result(mutant, outcome, time.perf_counter() - started))
        if log:
            mine = [r for r in score.results if r.mutant.function == item.function]
            log(f"  {item.code} {item.function}: {len(mine)} mutants, "
                f"{sum(r.outcome.killed_by_hidden for r in mine)} killed by the hidden tests")
    return score


def report(scores: list[PartScore]) -> str:
    lines = ["# Mutation score of the hidden tests", "",
             "Generated by `make mutation` (tools/mutation.py). A mutant is one small change to a reference "
             "solution; it is *killed* when the lesson's test cell fails. `hidden` counts what the hidden "
             "region alone kills (it runs first when grading); equivalent mutants (no test can tell them "
             "from the reference) are listed with the reason and left out of the score.", "",
             "| part | mutants | equivalent | killed by hidden tests | killed by the whole cell |",
             "| --- | --- | --- | --- | --- |"]
    for score in scores:
        counted = score.counted()
        lines.append(f"| {score.slug} | {len(score.results)} | {len(score.results) - len(counted)} | "
                     f"{sum(r.outcome.killed_by_hidden for r in counted)}/{len(counted)} "
                     f"({score.hidden_rate:.1%}) | {score.cell_rate:.1%} |")
    seen = {(r.mutant.function, r.mutant.description, r.mutant.text) for s in scores for r in s.results}
    functions = {r.mutant.function for s in scores for r in s.results}
    stale = [key for key in EQUIVALENT if key[0] in functions and key not in seen]
    if stale:
        lines += ["", "Entries of `EQUIVALENT` that match no mutant any more (their line was edited; look again):",
                  ""] + [f"- `{f}`: {d} on `{t}`" for f, d, t in stale]
    for score in scores:
        broken = {code: o for code, o in score.reference_ok.items() if not o.passed}
        if broken:
            lines += ["", f"**The reference itself fails in {score.slug}:** "
                      + "; ".join(f"{c}: {o.message}" for c, o in broken.items())]
        survivors = score.survivors()
        lines += ["", f"## {score.slug}: survivors ({len(survivors)})", ""]
        if not survivors:
            lines.append("None.")
        for result in survivors:
            verdict = (f"equivalent: {result.equivalent}" if result.equivalent else
                       "**not killed: a hole in the hidden tests**" if result.outcome.passed else
                       f"killed only by the visible tests ({result.outcome.message[:100]})")
            lines.append(f"- `{result.mutant.function}` line {result.mutant.line}: {result.mutant.description}"
                         f" — {verdict}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="*", help="part slugs (default: every landed part)")
    parser.add_argument("--functions", nargs="*", help="only these lessons' functions")
    parser.add_argument("--report", type=Path, default=ROOT / "build" / "mutation-report.md")
    parser.add_argument("--check", type=float, default=None,
                        help="exit 1 when a part's hidden kill rate (equivalents left out) is below this")
    args = parser.parse_args(argv)
    os.environ.setdefault("MCT_PROGRESS_FILE", os.devnull)
    scores = []
    started = time.perf_counter()
    for slug in args.parts or landed_parts():
        print(f"{slug}:", flush=True)
        scores.append(mutate_part(slug, args.functions, log=lambda text: print(text, flush=True)))
    text = report(scores)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print()
    print(text)
    print(f"({time.perf_counter() - started:.1f} s; report written to {args.report})")
    if args.check is not None and any(s.hidden_rate < args.check for s in scores):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
