"""Plotting helpers with one look across the course."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

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


def use_course_style() -> None:
    """Apply the course's matplotlib style (called by the notebooks' set-up cell)."""
    plt.rcParams.update(STYLE)


def plot_loss_curve(losses: Sequence[float], *, title: str = "Training loss",
                    label: str = "your MLP", log_scale: bool = True, ax=None):
    """Loss against step; returns the Axes."""
    if ax is None:
        _, ax = plt.subplots()
    ax.plot(range(len(losses)), losses, color=COLORS["learner"], label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if log_scale:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    return ax
