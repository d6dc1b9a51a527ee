"""The report's PNG plots (matplotlib's Agg): test BLEU per configuration, BLEU on the held-out
long test sets, BLEU against the token : position ratio."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

FIGURE_DPI = 150  # pixels per inch of every figure: labels stay sharp when scaled to fit


def figure(size: tuple[float, float] = (5.0, 3.6)) -> tuple[Figure, Axes]:
    """One panel, by default 5 x 3.6 inches: at FIGURE_DPI, 750 pixels wide with 10 pt text."""
    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def save(figure: Figure, axes: Axes, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=FIGURE_DPI)


def save_test_bleu(rows: Sequence[dict], path: Path, test_set: str) -> None:
    """Test BLEU per configuration, a bar each (top down, as the rows come) at the mean with an
    error bar of one std over seeds."""
    fig, axes = figure((6.0, 1.0 + 0.22 * len(rows)))
    errors = [row["test_bleu_std"] or 0.0 for row in rows]
    y = np.arange(len(rows))
    axes.barh(y, [row["test_bleu_mean"] for row in rows], xerr=errors, capsize=3)
    axes.set_yticks(y, [f"{row['protocol']}: {row['configuration']}" for row in rows])
    axes.invert_yaxis()
    save(fig, axes, path, f"{test_set} BLEU", "", "mean ± std over seeds")


def save_long_tests(lines: dict[str, list[tuple[str, float]]], path: Path, title: str) -> None:
    """Test BLEU on each held-out long test set: a line per configuration through its (test
    set, BLEU) points."""
    fig, axes = figure()
    for label, points in lines.items():
        axes.plot(*zip(*points, strict=True), marker="o", label=label)
    save(fig, axes, path, "source length (words)", "test BLEU (beam)", title)


def save_ratio_plot(points: dict[str, dict[str, list]], path: Path, title: str) -> None:
    """Test BLEU against the init ratio (log scale): `points` holds each encoding's configurations'
    (ratio, BLEU) per run; each configuration is named at its mean, lower where names overlap."""
    fig, axes = figure((6.5, 4.5))
    for pe, configurations in sorted(points.items()):
        axes.scatter(*zip(*sum(configurations.values(), []), strict=True), label=pe, alpha=0.8)
    axes.set(xscale="log", xmargin=0.25)
    means = [(*np.mean(xy, axis=0), name) for c in points.values() for name, xy in c.items()]
    placed, height = [], np.ptp(axes.get_ylim()) / 30  # of a name at fontsize 6
    for x, y, name in sorted(means, key=lambda mean: -mean[1]):  # just right of x (log x)
        while any(abs(np.log10(x / px)) < 0.6 and abs(y - py) < height for px, py in placed):
            y -= height / 4
        placed.append((x, y))
        axes.text(x * 1.1, y, name, fontsize=6, va="center")
    xlabel = "token : position RMS at the input, at init (source side)"
    save(fig, axes, path, xlabel, "test BLEU", f"{title}:\none point per run (exploratory)")
