"""The sweep report's PNG plots (matplotlib's Agg canvas: no display, no global pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from minimt.study.runs import Configuration

Curve = list[tuple[int, float]]  # (step, value)

# Colour by positional encoding, line style by (scale, share).
LINE_STYLES = {(True, True): "-", (False, True): "--", (True, False): ":", (False, False): "-."}


def line_style(configuration: Configuration, pes: Sequence[str]) -> dict:
    """Plot keywords for one configuration's line: colour from its PE among `pes`."""
    return {
        "color": f"C{sorted(pes).index(configuration.pe) % 10}",
        "linestyle": LINE_STYLES[(configuration.scale, configuration.share)],
        "label": configuration.label,
    }


def mean_band(curves: Sequence[Curve]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, min, max) over the curves at the steps every curve has."""
    by_step = [dict(curve) for curve in curves]
    steps = sorted(set.intersection(*(set(values) for values in by_step)))
    values = np.array([[values[step] for step in steps] for values in by_step]).reshape(
        len(curves), len(steps)
    )
    return steps, values.mean(0), values.min(0), values.max(0)


def save_val_bleu(curves: dict[Configuration, list[Curve]], path: Path) -> None:
    """Validation BLEU vs step: the mean over seeds, shaded from the lowest seed to the highest."""
    figure, axes = _figure(1)
    pes = sorted({c.pe for c in curves})
    for configuration, seeds in curves.items():
        style = line_style(configuration, pes)
        steps, mean, low, high = mean_band(seeds)
        axes[0].plot(steps, mean, **style)
        axes[0].fill_between(steps, low, high, color=style["color"], alpha=0.15)
    _finish(axes[0], "step", "validation BLEU (greedy)", "mean over seeds, band: min to max")
    _save(figure, path)


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


def save_bleu_by_length(
    by_length: dict[Configuration, list[dict]],
    long_inputs: dict[Configuration, dict[int, dict]],
    path: Path,
) -> None:
    """BLEU vs source-length bucket (left) and vs joined inputs of k sentences (right)."""
    figure, (buckets, joined) = _figure(2)
    pes = sorted({c.pe for c in by_length})
    for configuration, rows in by_length.items():
        style = line_style(configuration, pes)
        if rows:
            bleu = [np.nan if r["bleu"] is None else r["bleu"] for r in rows]
            buckets.plot([r["bucket"] for r in rows], bleu, marker="o", **style)
        scores = long_inputs[configuration]
        if scores:
            words = [s["mean_src_words"] for s in scores.values()]
            joined.plot(words, [s["bleu"] for s in scores.values()], marker="o", **style)
    _finish(buckets, "source length (words)", "test BLEU (beam)", "by source-length bucket")
    _finish(joined, "mean source length (words)", "test BLEU (greedy)", "k sentences joined")
    _save(figure, path)


def _figure(columns: int) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(6.5 * columns, 4.5), layout="constrained")
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
    figure.savefig(path, dpi=120)


def save_time_to_bleu(curves: dict[str, list[tuple[float, float]]], path: Path) -> None:
    """Validation BLEU vs training minutes, one line per system; `curves` holds (seconds, BLEU)."""
    figure, axes = _figure(1)
    for name, points in curves.items():
        axes[0].plot([s / 60 for s, _ in points], [b for _, b in points], marker="o", label=name)
    _finish(axes[0], "training minutes", "validation BLEU (greedy)", "BLEU against wall-clock time")
    _save(figure, path)
