"""Which plots a report draws and from what: test BLEU per configuration, then per data regime
its validation curves and BLEU by length (drawn by plots.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from minimt.study.plots import save_bucket_curves, save_seed_curves, save_test_bleu
from minimt.study.results import ConfigResult, Report, long_test_sets, mean, scores_of
from minimt.study.runs import LONG_PREFIX


def plot_names(report: Report) -> list[str]:
    """test_bleu.png, then per data regime its validation curves and BLEU by length."""
    names = ["test_bleu.png"]
    for protocol, regime in report.regimes:
        slug = protocol.slug(regime.slug)
        names += [f"val_bleu_{slug}.png", f"bleu_by_length_{slug}.png"]
    return names


def save_plots(report: Report) -> list[Path]:
    out = report.out_dir
    rows = [{**row, "configuration": row["slug"]} for row in report.rows]
    save_test_bleu(rows, out / "test_bleu.png", report.test_set)
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        slug = protocol.slug(regime.slug)
        groups = {r.configuration.embedding.slug: r.configuration.embedding.pe for r in results}
        curves = {
            r.configuration.embedding.slug: [run.val_bleu_curve() for run in r.runs]
            for r in results
        }
        title = f"{protocol.title}: {regime.label}" if protocol.name else regime.label
        save_seed_curves(curves, groups, out / f"val_bleu_{slug}.png", title)
        panels = length_panels(report, results, title)
        save_bucket_curves(panels, groups, out / f"bleu_by_length_{slug}.png")
    return [out / name for name in plot_names(report)]


def length_panels(report: Report, results: Sequence[ConfigResult], title: str) -> dict[str, dict]:
    """The BLEU-by-length plot of one regime: the headline test set by source-length bucket
    (when its references could be read) and the long_* test sets (when the runs have them)."""
    panels = {}
    by_length = {
        r.configuration.embedding.slug: [(b["bucket"], b["bleu"]) for b in r.by_length]
        for r in results
        if r.by_length
    }
    if by_length:
        panels[f"{title}: {report.test_set} by source length"] = by_length
    long = {
        r.configuration.embedding.slug: [
            (name.removeprefix(LONG_PREFIX), mean(scores_of(r.runs, name, "bleu")))
            for name in long_test_sets(r)
        ]
        for r in results
        if long_test_sets(r)
    }
    if long:
        panels[f"{title}: held-out long test sets"] = long
    return panels or {f"{title}: no references and no long test sets": {}}
