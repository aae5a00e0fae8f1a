"""Plotting helpers with one look across the course."""

from __future__ import annotations

from collections.abc import Sequence

COLORS = {"learner": "#1f77b4", "reference": "#ff7f0e", "measured": "#2ca02c",
          "estimated": "#9467bd", "baseline": "#7f7f7f"}

STYLE = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 80,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "svg.hashsalt": "mct",  # deterministic output
}


def _pyplot():
    """matplotlib's pyplot, imported when something is drawn: importing it takes about a second, and
    the grader reads this module's names (for the stand-ins of grading.kernel_tree) without drawing."""
    import matplotlib.pyplot as plt
    return plt


def use_course_style() -> None:
    """Apply the course's matplotlib style (called by the notebooks' set-up cell)."""
    _pyplot().rcParams.update(STYLE)


def plot_loss_curve(losses: Sequence[float], *, title: str = "Training loss",
                    label: str = "your MLP", log_scale: bool = True, ax=None):
    """Loss against step; returns the Axes."""
    if ax is None:
        _, ax = _pyplot().subplots()
    ax.plot(range(len(losses)), losses, color=COLORS["learner"], label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if log_scale:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    return ax


def plot_worker_chunks(ax, frames: Sequence[tuple[str, Sequence[Sequence[str]], Sequence[int] | None]], *,
                       worker_titles: Sequence[str], left_margin: float, box: float = 1.6, gap: float = 0.9):
    """A ring collective frame by frame (lesson 028's all-reduce, lesson 035's ZeRO step): one row a frame, top
    to bottom; in each row, each worker's N chunks side by side, worker 0 on the left. Returns the Axes.

    Args:
        ax: the Axes to draw on (its axes are turned off).
        frames: one (title, holds, sends) a row: ``holds[r][c]`` what worker r's chunk c holds, a label
            (below); ``sends[r]`` the chunk worker r sends next, outlined, or None (nothing sent next).
        worker_titles: worker r's heading above its chunks at index r.
        left_margin: how far left of worker 0's chunks the axes start, in chunk widths of 1: room for the
            row titles, which stand to its left.
        box, gap: the width of a chunk, and the space between two workers' chunks.

    A label is the sum a chunk holds, ``"2+0"`` (worker 2's numbers plus worker 0's: the more workers, the
    darker), a finished mean, ``"(1+2+0)/3"`` (drawn as "1+2+0" over "÷ 3", darkest), or a parameter shard,
    ``"old"`` or ``"new"`` (drawn as "p{c}", and "new" below it when updated, in another colour).
    """
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle
    n = len(frames[0][1])
    for row, (title, holds, sends) in enumerate(frames):
        for r in range(n):
            for c in range(n):
                label = holds[r][c]
                if label in ("old", "new"):
                    share, color = (1.0 if label == "new" else 0.0), COLORS["learner"]
                    shown = f"p{c}\nnew" if label == "new" else f"p{c}"
                else:  # of the N workers' contributions, the share added so far
                    share = 1.0 if label.startswith("(") else (label.count("+") + 1) / n
                    color = COLORS["measured"]
                    shown = label[1:].replace(")/", "\n÷ ") if label.startswith("(") else label
                outline = sends is not None and sends[r] == c
                x = r * (n * box + gap) + c * box
                ax.add_patch(Rectangle((x, -row - 0.4), box - 0.08, 0.8, edgecolor="black",
                                       facecolor=to_rgba(color, 0.12 + 0.6 * share),
                                       linewidth=2.4 if outline else 0.4))
                ax.text(x + (box - 0.08) / 2, -row, shown, ha="center", va="center", fontsize=7.5, linespacing=1.0)
        ax.text(-0.2, -row, title, ha="right", va="center", fontsize=8.5)
    for r in range(n):
        ax.text(r * (n * box + gap) + n * box / 2, 0.6, worker_titles[r], ha="center", fontsize=9)
    ax.set_xlim(-left_margin, n * (n * box + gap) - gap)
    ax.set_ylim(-len(frames) + 0.5, 0.9)
    ax.axis("off")
    return ax
