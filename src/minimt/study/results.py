"""What a report holds: each configuration's runs and what is derived from them (one summary
row per configuration, the CSV's columns), the question families, and small statistics over
seeds that every section of the report uses."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from minimt.study.compare import Comparison, Family, shared_test_sets
from minimt.study.protocol import Protocol
from minimt.study.runs import LONG_PREFIX, Configuration, DataRegime, Run
from minimt.study.verdicts import Rules

CSV_COLUMNS = [
    "configuration",
    "slug",
    "protocol",
    "regime",
    "pe",
    "pe_encoder",
    "pe_decoder",
    "scale",
    "share",
    "init_std",
    "seeds",
    "test_bleu_mean",
    "test_bleu_std",
    "test_chrf_mean",
    "test_chrf_std",
    "best_val_bleu_mean",
    "best_val_bleu_std",
    "final_val_loss_mean",
    "final_val_loss_std",
    "num_parameters",
    "steps_mean",
    "best_step_mean",
    "minutes_mean",
    "question",
    "baseline",
    "paired_seeds",
    "diff_vs_baseline",
    "ci95_low",
    "ci95_high",
    "p_value",
    "holm_p",
    "tost_holm_p",
    "detectable",
    "bootstrap_p",
    "verdict",
]


@dataclass
class ConfigResult:
    """One configuration's runs (sorted by seed) and what the report derives from them."""

    configuration: Configuration
    runs: list[Run]
    by_length: list[dict]  # headline BLEU by source-length bucket, mean over seeds
    long_inputs: dict[int, dict]  # k -> {"bleu", "mean_src_words"} averaged over seeds

    @property
    def test_sets(self) -> list[str]:
        """The test sets every run of it has, in metrics.json order."""
        return shared_test_sets(self.runs)


@dataclass
class Report:
    sweep_dir: Path
    out_dir: Path
    test_set: str  # the headline test set
    resamples: int
    rules: Rules
    results: list[ConfigResult]  # sorted: by protocol, regime, its baseline first
    families: list[Family]  # each question in each protocol that has its runs
    bootstrap_signature: str | None
    skipped: list[tuple[Path, str]]
    unread_references: list[str]  # test sets whose references could not be read

    @property
    def comparisons(self) -> list[Comparison]:
        return [c for family in self.families for c in family.comparisons]

    @cached_property
    def rows(self) -> list[dict]:
        """One summary_row per configuration, in the order of `results`: with its first
        comparison on the headline test set as the system."""
        first: dict[Configuration, tuple[str, Comparison]] = {}
        for family in self.families:
            for c in family.comparisons:
                if c.test_set == self.test_set:
                    first.setdefault(c.system, (family.question.key, c))
        return [
            summary_row(result, self.test_set, *first.get(result.configuration, (None, None)))
            for result in self.results
        ]

    @property
    def protocols(self) -> list[Protocol]:
        return list(dict.fromkeys(r.configuration.protocol for r in self.results))

    @property
    def regimes(self) -> list[tuple[Protocol, DataRegime]]:
        return list(
            dict.fromkeys((r.configuration.protocol, r.configuration.regime) for r in self.results)
        )

    def in_regime(self, protocol: Protocol, regime: DataRegime) -> list[ConfigResult]:
        return [
            r
            for r in self.results
            if (r.configuration.protocol, r.configuration.regime) == (protocol, regime)
        ]


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); None where there are too few values."""
    return mean(values), statistics.stdev(values) if len(values) > 1 else None


def scores_of(runs: Sequence[Run], test_set: str, key: str) -> list[float]:
    """metrics.json "test" -> test_set -> key of each run that has it."""
    scores = [run.metrics["test"][test_set].get(key) for run in runs]
    return [score for score in scores if score is not None]


def long_test_sets(result: ConfigResult) -> list[str]:
    return [name for name in result.test_sets if name.startswith(LONG_PREFIX)]


def summary_row(
    result: ConfigResult, test_set: str, question: str | None, comparison: Comparison | None
) -> dict:
    """The CSV row of one configuration (CSV_COLUMNS)."""
    c, runs = result.configuration, result.runs
    e = c.embedding
    row = {
        "configuration": c.label,
        "slug": c.slug,
        "protocol": c.protocol.name,
        "regime": c.regime.slug,
        "pe": e.pe,
        "pe_encoder": e.pe_encoder,
        "pe_decoder": e.pe_decoder,
        "scale": e.scale,
        "share": e.share,
        "init_std": e.init_std,
        "seeds": " ".join(str(run.seed) for run in runs),
    }
    series = {
        "test_bleu": scores_of(runs, test_set, "bleu"),
        "test_chrf": scores_of(runs, test_set, "chrf"),
        "best_val_bleu": [run.metrics["best_val_bleu"] for run in runs],
        "final_val_loss": [run.metrics["val_history"][-1]["loss"] for run in runs],
    }
    for name, values in series.items():
        row[f"{name}_mean"], row[f"{name}_std"] = mean_std(values)
    row["num_parameters"] = runs[0].metrics["num_parameters"]
    row["steps_mean"] = statistics.fmean(run.metrics["steps"] for run in runs)
    row["best_step_mean"] = statistics.fmean(run.metrics["best_step"] for run in runs)
    row["minutes_mean"] = statistics.fmean(run.metrics["train_seconds"] / 60 for run in runs)
    row.update(comparison_columns(question, comparison))
    if c.is_baseline and comparison is None:
        row["verdict"] = "baseline"
    return row


def comparison_columns(question: str | None, comparison: Comparison | None) -> dict:
    """The CSV's comparison columns (all None without a comparison)."""
    if comparison is None:
        return dict.fromkeys(CSV_COLUMNS[CSV_COLUMNS.index("question") :])
    d, v = comparison.difference, comparison.verdict
    low, high = d.ci95 or (None, None)
    return {
        "question": question,
        "baseline": comparison.reference.slug,
        "paired_seeds": " ".join(map(str, comparison.seeds)),
        "diff_vs_baseline": d.mean,
        "ci95_low": low,
        "ci95_high": high,
        "p_value": d.p_value,
        "holm_p": v.holm_p,
        "tost_holm_p": v.holm_tost_p,
        "detectable": v.detectable,
        "bootstrap_p": " ".join(f"{s}:{p:.4f}" for s, p in comparison.bootstrap.items()),
        "verdict": v.verdict,
    }
