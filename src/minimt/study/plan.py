"""The plan of experiment=study_cpu (questions.PLAN) answered from its runs: each look's family
tested once its planned seeds are in, and test BLEU against the token : position magnitude
ratio at the input."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from minimt.model.embedding import sinusoidal_table
from minimt.study.questions import PLAN, PLAN_PROTOCOL, Interaction, Look, PlannedTest
from minimt.study.runs import LEARNED_INIT_STD, SINUSOID_SCALE, Run
from minimt.study.significance import PairedDifference, holm, paired_difference
from minimt.study.tables import interval_cell, markdown_table, p_cell

RATIO_PLOT = "bleu_vs_ratio_cpu.png"


@dataclass
class PlannedResult:
    """One planned test: the seeds it has so far, its difference over them, and once its whole
    family has every planned seed, the Holm-adjusted p and the verdict."""

    look: Look
    test: PlannedTest
    seeds: list[int]
    difference: PairedDifference | None
    holm_p: float | None = None

    @property
    def verdict(self) -> str:
        if self.holm_p is None:
            return f"waiting: {len(self.seeds)} of {len(self.test.seeds)} planned seeds in"
        if self.holm_p < self.look.alpha:
            return "**better**" if self.difference.mean > 0 else "**worse**"
        return "no difference shown at this look"


def plan_runs(runs: Sequence[Run]) -> dict[str, dict[int, float]]:
    """arm -> seed -> headline test BLEU of the plan's protocol's runs that record their arm."""
    scores: dict[str, dict[int, float]] = {}
    for run in runs:
        arm = run.metrics.get("choices", {}).get("arm")
        if arm and run.configuration.protocol.name == PLAN_PROTOCOL:
            scores.setdefault(arm, {})[run.seed] = run.metrics["test"][run.test_sets[0]]["bleu"]
    return scores


def side_scores(test: PlannedTest, scores: dict, seeds: list[int]) -> tuple[list, list]:
    """(reference, system) per seed; for an interaction, each side's own seed-paired
    difference (second setting's, first setting's)."""
    comparison = test.comparison

    def change(contrast, seed):
        return scores[contrast.system][seed] - scores[contrast.reference][seed]

    if isinstance(comparison, Interaction):
        return (
            [change(comparison.second, s) for s in seeds],
            [change(comparison.first, s) for s in seeds],
        )
    return (
        [scores[comparison.reference][s] for s in seeds],
        [scores[comparison.system][s] for s in seeds],
    )


def arms_of(test: PlannedTest) -> list[str]:
    comparison = test.comparison
    contrasts = (
        (comparison.first, comparison.second)
        if isinstance(comparison, Interaction)
        else (comparison,)
    )
    return [arm for c in contrasts for arm in (c.system, c.reference)]


def answer_plan(runs: Sequence[Run]) -> list[PlannedResult]:
    """Every planned test with what has run; a family (look) is tested, Holm over all its
    tests at its alpha, only when every test has all its planned seeds."""
    scores = plan_runs(runs)
    results = []
    for look in PLAN:
        family = []
        for test in look.tests:
            seeds = [s for s in test.seeds if all(s in scores.get(a, {}) for a in arms_of(test))]
            difference = paired_difference(*side_scores(test, scores, seeds)) if seeds else None
            family.append(PlannedResult(look, test, seeds, difference))
        if all(len(r.seeds) == len(r.test.seeds) for r in family):
            for result, p in zip(family, holm([r.difference.p_value for r in family]), strict=True):
                result.holm_p = p
        results += family
    return results


def describe(test: PlannedTest) -> str:
    comparison = test.comparison
    if isinstance(comparison, Interaction):
        first, second = comparison.first, comparison.second
        return f"({first.system} - {first.reference}) - ({second.system} - {second.reference})"
    return f"{comparison.system} vs {comparison.reference}"


def plan_table(results: Sequence[PlannedResult]) -> str:
    """The plan's tests, look by look, as a markdown table."""
    header = [
        "question", "look", "alpha (Holm over m)", "comparison", "seeds planned", "seeds in",
        "difference", "unadjusted 95% CI", "p", "Holm p", "verdict",
    ]  # fmt: skip
    rows = []
    for r in results:
        d = r.difference
        rows.append(
            [
                r.look.question,
                str(r.look.look),
                f"{r.look.alpha:g} (m {len(r.look.tests)})",
                describe(r.test),
                _seeds(r.test.seeds),
                _seeds(r.seeds) or "-",
                "-" if d is None else f"{d.mean:+.2f}",
                interval_cell(None if d is None else d.ci95),
                p_cell(None if d is None else d.p_value),
                p_cell(r.holm_p),
                r.verdict,
            ]
        )
    return markdown_table(header, rows)


def _seeds(seeds: Sequence[int]) -> str:
    return " ".join(str(s) for s in seeds)


def init_ratio(run: Run) -> float | None:
    """Token : position RMS at the input at initialisation (source side): recorded in
    metrics.json, or for runs that predate the record the value their config gives (token RMS
    = scale x init std; the sinusoid's exact RMS over the training positions, or the learned
    table's init std); None where nothing is added to the input."""
    recorded = run.metrics.get("input_magnitudes", {}).get("init", {}).get("src")
    if recorded:
        return recorded["ratio"]
    cfg = run.config
    d_model = cfg.model.d_model
    std = cfg.embedding.init_std or d_model**-0.5
    token = std * (math.sqrt(d_model) if cfg.embedding.scale else 1.0)
    if cfg.pe.encoder == "sinusoidal":
        table = sinusoidal_table(cfg.data.max_train_len + 1, d_model)
        position = cfg.pe.get("scale", SINUSOID_SCALE) * table.pow(2).mean().sqrt().item()
    elif cfg.pe.encoder == "learned":
        position = cfg.pe.get("init_std", LEARNED_INIT_STD)
    else:
        return None
    return token / position


def save_ratio_plot(runs: Sequence[Run], path: Path) -> bool:
    """Test BLEU against the init ratio (log scale), one point per run of the plan's protocol on
    full data, colour by encoding; False (nothing written) without such runs."""
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        configuration = run.configuration
        if configuration.protocol.name != PLAN_PROTOCOL or configuration.regime.slug != "full":
            continue
        ratio = init_ratio(run)
        if ratio is not None:
            bleu = run.metrics["test"][run.test_sets[0]]["bleu"]
            points.setdefault(configuration.embedding.pe, []).append((ratio, bleu))
    if not points:
        return False
    figure = Figure(figsize=(6.0, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for pe, xy in sorted(points.items()):
        axes.scatter(*zip(*xy, strict=True), label=pe, alpha=0.8)
    axes.set_xscale("log")
    axes.set_xlabel("token : position RMS at the input, at init (source side)")
    axes.set_ylabel("test BLEU")
    axes.set_title("experiment=study_cpu, full data: one point per run (exploratory)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=150)
    return True
