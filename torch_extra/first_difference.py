"""The first place where a run on real processes leaves the simulated reference run, and what it likely means.

:func:`first_difference` reads what each real worker reported (its messages, its parameters after each
step where the technique keeps them, its losses and loss-scaler decisions, its final parameters) beside
the simulated run (:class:`torch_extra.real_training.SimulatedRun`), finds the earliest step at which
anything differs, and says it in a few lines: the technique, the step, the worker, the tensor and by how
much, the worker's traffic against the ledger's, and what such a difference most likely means.  A step
of a message is the step in which the ledger has it (every step of a run has as many rounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RTOL = 1e-10  # as the comparison of the final parameters (torch_extra.real_training.RTOL)

#: What a difference of the numbers (the messages being the ledger's) most likely means, per technique.
ARITHMETIC = {
    "data parallel": "the same messages carry other numbers: how the gradients are weighted and averaged (each "
                     "worker's gradient counts N n_r / B, lesson 026, before the ring takes the mean) or the SGD step",
    "ZeRO": "the same messages carry other numbers: the Adam update of each worker's shard (lesson 033: its step "
            "count, the bias correction) or which shard a worker updates",
    "full loop": "the same messages carry other numbers: the update of what each worker owns (its master weights, "
                 "kept from one step to the next), the unscaling, or the weighting of the gradients (026)",
}
MORE_TRAFFIC = ("more traffic than the ledger: a collective done the expensive way (whole vectors sent, or "
                "everything gathered at one worker, where the ring sends one chunk at a time)")
LESS_TRAFFIC = ("less traffic than the ledger: a collective left out or cut short (without the all-gather, for one, "
                "each worker keeps only its own shard up to date)")
OTHER_TRAFFIC = ("the ledger's bytes in other messages: a collective on another schedule (the ring's order of "
                 "chunks, or of neighbours)")
NO_TRAFFIC = ("no message crossed between the processes: the collectives ran on a cluster the function made for "
              "itself, not on the one it was given (its `cluster` argument)")
SCALER = ("the loss scaler decided otherwise: the overflow test (an inf or NaN in a new vector, which every worker "
          "sees alike) or the scale's halving on a skipped step and doubling after growth_interval clean ones")
LOSS = "only the loss differs: how the workers' losses are combined (each counts n_r / B of the batch)"
FINAL = ("the training matched step by step, the answer does not: what the function returns at the end (the "
         "master weights, joined in rank order)")


@dataclass
class Found:
    """One kind of difference at a step: what it is, in a line, and what it most likely means."""

    step: int  # the step; the number of steps for the final parameters
    kind: str  # "traffic", "scaler", "params", "loss" or "final"
    line: str
    meaning: str


def first_difference(technique: str, real: list[dict[str, Any]], simulated: Any) -> list[str]:
    """Lines saying where ``real`` (each worker's results, by rank) first leaves ``simulated``; empty if nowhere."""
    steps = len(simulated.losses)
    found = [item for item in (_traffic(real, simulated, steps), _scaler(real, simulated),
                               _step_params(technique, real, simulated), _loss(real, simulated)) if item]
    if not found:
        final = _final(technique, real, simulated, steps)
        found = [final] if final else []
    if not found:
        return []
    step = min(item.step for item in found)
    at_step = sorted((item for item in found if item.step == step),
                     key=lambda item: ["traffic", "scaler", "params", "loss", "final"].index(item.kind))
    when = "after the last step" if step >= steps else f"step {step}"
    lines = [f"FIRST DIFFERENCE ({technique}, {when}): {at_step[0].line}"]
    lines += [f"  also in that step: {item.line}" for item in at_step[1:]]
    meaning = at_step[0].meaning
    if at_step[0].kind == "loss" and simulated.step_params is None:
        # No parameters after each step to look at (040's loop is one call): a step's loss is computed before
        # its update, from what the earlier steps left, and the end shows how far it went.
        meaning = (f"the parameters that the earlier steps left differ (a step's loss is computed before its "
                   f"update): {ARITHMETIC.get(technique, 'the numbers differ')}")
        final = _final(technique, real, simulated, steps)
        if final:
            lines.append(f"  at the end: {final.line}")
    lines.append(f"  what it most likely means: {meaning}")
    return lines


def _step_of(round_number: int, simulated: Any, steps: int) -> int:
    rounds = simulated.traffic["rounds"]
    if not rounds or rounds % steps:
        return 0
    return min(round_number // (rounds // steps), steps - 1)


def _describe_message(rank: int, message: tuple[int, ...] | None) -> str:
    if message is None:
        return "no message"
    src, dst, nbytes = message[1:4]
    return f"sent {nbytes:,} bytes to worker {dst}" if src == rank else f"received {nbytes:,} bytes from worker {src}"


def _traffic(real: list[dict[str, Any]], simulated: Any, steps: int) -> Found | None:
    """The worker whose messages first leave the ledger's (the earliest step, then the lowest rank): step by step
    where the worker's messages say their step, else message by message."""
    if simulated.messages is None:
        return None
    found = []
    for rank, result in enumerate(real):
        got = result.get("messages")
        if got is None:
            continue
        expected = [m for m in simulated.messages if rank in (m[1], m[2])]
        # By step when the messages say their step (or, none sent, when the worker's run went step by step).
        stepped = bool(got) or result.get("step_params") is not None
        if stepped and all(len(m) > 4 and m[4] is not None for m in got):
            item = _traffic_by_step(rank, got, expected, simulated, steps)
        else:
            item = _traffic_by_message(rank, got, expected, simulated, steps)
        if item:
            found.append(item)
    return min(found, key=lambda item: item.step) if found else None


def _totals(rank: int, messages) -> str:
    sent = [m for m in messages if m[1] == rank]
    received = [m for m in messages if m[2] == rank]
    return (f"sent {len(sent):,} messages, {sum(m[3] for m in sent):,} bytes, and received {len(received):,}, "
            f"{sum(m[3] for m in received):,} bytes")


def _meaning(rank: int, got, expected) -> str:
    """More, less, or the same traffic in other messages, from what worker ``rank`` sent."""
    if not got:
        return NO_TRAFFIC
    sent, ledger_sent = sum(m[3] for m in got if m[1] == rank), sum(m[3] for m in expected if m[1] == rank)
    if sent > ledger_sent or len(got) > len(expected):
        return MORE_TRAFFIC
    if sent < ledger_sent or len(got) < len(expected):
        return LESS_TRAFFIC
    return OTHER_TRAFFIC


def _traffic_by_step(rank, got, expected, simulated, steps) -> Found | None:
    for step in range(steps):
        mine = [m for m in got if m[4] == step]
        theirs = [m for m in expected if _step_of(m[0], simulated, steps) == step]
        if [m[1:4] for m in mine] != [m[1:4] for m in theirs]:
            return Found(step, "traffic", f"worker {rank} {_totals(rank, mine)} in the step; the ledger says "
                                          f"{_totals(rank, theirs).replace('sent ', '', 1)}",
                         _meaning(rank, mine, theirs))
    return None


def _traffic_by_message(rank, got, expected, simulated, steps) -> Found | None:
    index = next((i for i, (mine, theirs) in enumerate(zip(got, expected)) if mine[1:4] != theirs[1:4]),
                 min(len(got), len(expected)))
    if index == len(got) == len(expected):
        return None
    step = _step_of(expected[index][0], simulated, steps) if index < len(expected) else steps - 1
    mine = got[index] if index < len(got) else None
    theirs = expected[index] if index < len(expected) else None
    line = (f"worker {rank}'s message {index + 1}: it {_describe_message(rank, mine)}, the ledger says it "
            f"{_describe_message(rank, theirs)} (in the whole run it {_totals(rank, got)}; the ledger says "
            f"{_totals(rank, expected).replace('sent ', '', 1)})")
    return Found(step, "traffic", line, _meaning(rank, got, expected))


def _scaler(real: list[dict[str, Any]], simulated: Any) -> Found | None:
    """The first step at which a worker's loss scaler decided otherwise than the simulated run's."""
    expected = simulated.history
    if not expected:
        return None
    best = None
    for rank, result in enumerate(real):
        history = result.get("history") or {}
        for step, (skipped, scale) in enumerate(zip(expected["skipped"], expected["loss_scale"])):
            mine = (history.get("skipped", [])[step:step + 1], history.get("loss_scale", [])[step:step + 1])
            if mine != ([skipped], [scale]):
                if best is None or step < best[0]:
                    shown = ("skipped" if mine[0][0] else "took", mine[1][0]) if mine[0] and mine[1] else None
                    said = (f"{shown[0]} the step with a loss scale of {shown[1]:g}" if shown
                            else "has no decision for it")
                    best = (step, f"worker {rank}'s loss scaler {said}; the reference "
                                  f"{'skipped' if skipped else 'took'} it with a scale of {scale:g}")
                break
    return Found(best[0], "scaler", best[1], SCALER) if best else None


def _tensor_difference(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> str | None:
    """The first tensor of ``expected`` that ``got`` does not hold to within RTOL, in words; None if none."""
    for key, value in expected.items():
        mine = got.get(key) if isinstance(got, dict) else None
        if not isinstance(mine, np.ndarray) or mine.shape != value.shape:
            what = "missing" if mine is None else f"of shape {getattr(mine, 'shape', None)}"
            return f"{key} is {what}; the reference's has shape {value.shape}"
        if mine.dtype != value.dtype:
            return f"{key} is {mine.dtype}; the reference's is {value.dtype}"
        if not np.allclose(mine, value, rtol=RTOL, atol=0.0, equal_nan=True):
            with np.errstate(invalid="ignore", over="ignore"):
                difference = np.abs(mine.astype(np.float64) - value.astype(np.float64))
            both_nan = np.isnan(mine.astype(np.float64)) & np.isnan(value.astype(np.float64))
            # A NaN on one side only is the largest difference; on both sides, none.
            difference = np.where(both_nan, 0.0, np.where(np.isnan(difference), np.inf, difference))
            where = np.unravel_index(int(np.argmax(difference)), value.shape)
            at = f"{key}[{', '.join(map(str, where))}]" if where else key
            return (f"{key} differs by up to {float(difference[where]):.3g} "
                    f"(at {at}: yours {float(mine[where]):.9g}, the reference's {float(value[where]):.9g})")
    return None


def _step_params(technique: str, real: list[dict[str, Any]], simulated: Any) -> Found | None:
    """The first step after which a worker's parameters differ from the reference's for that worker."""
    if simulated.step_params is None or any(result.get("step_params") is None for result in real):
        return None
    for step, expected in enumerate(simulated.step_params):
        for rank, result in enumerate(real):
            if step >= len(result["step_params"]):
                continue
            said = _tensor_difference(result["step_params"][step], expected[rank])
            if said:
                return Found(step, "params", f"worker {rank}'s parameters after the step: {said}",
                             ARITHMETIC.get(technique, "the numbers differ"))
    return None


def _loss(real: list[dict[str, Any]], simulated: Any) -> Found | None:
    """The first step whose loss (the mean of the workers' contributions) differs from the reference's."""
    for step, expected in enumerate(simulated.losses):
        contributions = [result["losses"][step] for result in real if step < len(result["losses"])]
        mine = sum(contributions) / len(real) if len(contributions) == len(real) else float("nan")
        if not np.isclose(mine, expected, rtol=RTOL, atol=1e-15):
            return Found(step, "loss", f"the step's loss is {mine:.9g}; the reference's {expected:.9g}", LOSS)
    return None


def _final(technique: str, real: list[dict[str, Any]], simulated: Any, steps: int) -> Found | None:
    """The final parameters of the first worker whose differ from the reference's (when no step said more)."""
    for rank, result in enumerate(real):
        said = _tensor_difference(result["params"], simulated.worker_params[rank])
        if said:
            return Found(steps, "final", f"worker {rank}'s final parameters: {said}",
                         FINAL if technique == "full loop" else ARITHMETIC.get(technique, "the numbers differ"))
    return None
