"""The sweep report's PNG plots (matplotlib's Agg canvas: no display, no global pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Curve = list[tuple[int, float]]  # (step, value)

DPI = 150  # pixels per inch of the saved PNGs


def mean_band(curves: Sequence[Curve]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, min, max) over the curves at the steps every curve has."""
    by_step = [dict(curve) for curve in curves]
    steps = sorted(set.intersection(*(set(values) for values in by_step)))
    values = np.array([[values[step] for step in steps] for values in by_step]).reshape(
        len(curves), len(steps)
    )
    return steps, values.mean(0), values.min(0), values.max(0)


def save_test_bleu(rows: Sequence[dict], path: Path, test_set: str) -> None:
    """Test BLEU per configuration: bars at the mean, error bars of one std over seeds."""
    figure, axes = _figure(1)
    x = np.arange(len(rows))
    errors = [row["test_bleu_std"] or 0.0 for row in rows]
    axes[0].bar(x, [row["test_bleu_mean"] for row in rows], yerr=errors, capsize=4)
    axes[0].set_xticks(x, [row["configuration"] for row in rows], rotation=20, ha="right")
    axes[0].set_ylabel(f"{test_set} BLEU")
    axes[0].set_title("mean ± std over seeds")
    _save(figure, path)


def _figure(columns: int) -> tuple[Figure, list[Axes]]:
    """Panels of 5 x 3.6 inches: at DPI, 750 pixels wide with 10 pt text, so a two-panel plot
    scaled to a page's width (~900 pixels) still has legible labels."""
    figure = Figure(figsize=(5.0 * columns, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, list(figure.subplots(1, columns, squeeze=False)[0])


def _finish(axes: Axes, xlabel: str, ylabel: str, title: str) -> None:
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if axes.lines:
        axes.legend(fontsize="small")
    axes.grid(alpha=0.3)


def _save(figure: Figure, path: Path) -> None:
    figure.savefig(path, dpi=DPI)


def save_time_to_bleu(curves: dict[str, list[tuple[float, float]]], path: Path) -> None:
    """Validation BLEU vs training minutes, one line per system; `curves` holds (seconds, BLEU)."""
    figure, axes = _figure(1)
    for name, points in curves.items():
        axes[0].plot([s / 60 for s, _ in points], [b for _, b in points], marker="o", label=name)
    _finish(axes[0], "training minutes", "validation BLEU (greedy)", "BLEU against wall-clock time")
    _save(figure, path)


def group_styles(groups: dict[str, str]) -> dict[str, dict]:
    """Plot keywords per line label: colour by its group (e.g. the encoding), line style by its
    rank within the group; `groups` maps label -> group in drawing order."""
    names = sorted(set(groups.values()))
    dashes = ["-", "--", ":", "-."]
    styles, seen = {}, {name: 0 for name in names}
    for label, group in groups.items():
        colour = names.index(group) % 10
        styles[label] = {
            "color": f"C{colour}",
            "linestyle": dashes[seen[group] % len(dashes)],
            "label": label,
        }
        seen[group] += 1
    return styles


def save_seed_curves(
    curves: dict[str, list[Curve]], groups: dict[str, str], path: Path, title: str
) -> None:
    """Validation BLEU vs step per labelled configuration: the mean over its seeds, shaded from
    the lowest seed to the highest."""
    figure, axes = _figure(1)
    styles = group_styles(groups)
    for label, seeds in curves.items():
        steps, mean, low, high = mean_band(seeds)
        axes[0].plot(steps, mean, **styles[label])
        axes[0].fill_between(steps, low, high, color=styles[label]["color"], alpha=0.15)
    _finish(axes[0], "step", "validation BLEU (greedy)", f"{title}: mean over seeds, min to max")
    _save(figure, path)


def save_bucket_curves(
    panels: dict[str, dict[str, list[tuple[str, float | None]]]],
    groups: dict[str, str],
    path: Path,
) -> None:
    """BLEU vs length bucket: one panel per title, in each a line per label through its
    (bucket, BLEU) points (None: no sentence in the bucket)."""
    figure, axes = _figure(len(panels))
    styles = group_styles(groups)
    for ax, (title, lines) in zip(axes, panels.items(), strict=True):
        for label, points in lines.items():
            bleu = [np.nan if b is None else b for _, b in points]
            ax.plot([bucket for bucket, _ in points], bleu, marker="o", **styles[label])
        _finish(ax, "source length (words)", "test BLEU (beam)", title)
    _save(figure, path)
