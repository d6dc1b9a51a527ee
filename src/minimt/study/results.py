"""What a report holds: each configuration's runs and what is derived from them (one summary
row per configuration; the CSV's rows, one per comparison), the question families, and small
statistics over seeds that every section of the report uses."""

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

CONFIGURATION_COLUMNS = [
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
]
# One CSV row per comparison (the configuration is its system), and one for each configuration
# that is no comparison's system; ci95 is the unadjusted interval, alpha the family's.
COMPARISON_COLUMNS = [
    "question",
    "family_size",
    "alpha",
    "exploratory",
    "reference",
    "test_set",
    "paired_seeds",
    "difference",
    "ci95_low",
    "ci95_high",
    "p_value",
    "holm_p",
    "tost_holm_p",
    "detectable",
    "seeds_for_difference",
    "seeds_for_equivalence",
    "bootstrap_p",
    "verdict",
    "reason",
]
CSV_COLUMNS = CONFIGURATION_COLUMNS + COMPARISON_COLUMNS


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
        """One summary_row per configuration, in the order of `results`, with "verdicts": the
        (question, comparison) of each comparison on the headline test set it is the system of,
        and "is_baseline"."""
        verdicts: dict[Configuration, list[tuple[str, Comparison]]] = {}
        for family in self.families:
            for c in family.comparisons:
                if c.test_set == self.test_set:
                    verdicts.setdefault(c.system, []).append((family.question.key, c))
        return [
            summary_row(result, self.test_set)
            | {
                "verdicts": verdicts.get(result.configuration, []),
                "is_baseline": result.configuration.is_baseline,
            }
            for result in self.results
        ]

    @cached_property
    def csv_rows(self) -> list[dict]:
        """report.csv (CSV_COLUMNS): per configuration, in the order of `results`, one row per
        comparison it is the system of (every question and test set, in the families' order),
        or one row without a comparison ("baseline" for a regime's baseline)."""
        found: dict[Configuration, list[tuple[Family, Comparison]]] = {}
        for family in self.families:
            for c in family.comparisons:
                found.setdefault(c.system, []).append((family, c))
        rows = []
        for result in self.results:
            summary = summary_row(result, self.test_set)
            compared = found.get(result.configuration, [])
            rows += [summary | comparison_columns(f, c) for f, c in compared]
            if not compared:
                empty = dict.fromkeys(COMPARISON_COLUMNS)
                baseline = result.configuration.is_baseline
                rows.append(summary | empty | {"verdict": "baseline" if baseline else None})
        return rows

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


def summary_row(result: ConfigResult, test_set: str) -> dict:
    """One configuration's columns (CONFIGURATION_COLUMNS)."""
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
    return row


def comparison_columns(family: Family, comparison: Comparison) -> dict:
    """The CSV's comparison columns (COMPARISON_COLUMNS) of one comparison in its family."""
    d, v = comparison.difference, comparison.verdict
    low, high = d.ci95 or (None, None)
    return {
        "question": family.question.key,
        "family_size": family.size,
        "alpha": family.alpha,
        "exploratory": family.exploratory or None,
        "reference": comparison.reference.slug,
        "test_set": comparison.test_set,
        "paired_seeds": " ".join(map(str, comparison.seeds)),
        "difference": d.mean,
        "ci95_low": low,
        "ci95_high": high,
        "p_value": d.p_value,
        "holm_p": v.holm_p,
        "tost_holm_p": v.holm_tost_p,
        "detectable": v.detectable,
        "seeds_for_difference": v.seeds_for_difference,
        "seeds_for_equivalence": v.seeds_for_equivalence,
        "bootstrap_p": " ".join(f"{s}:{p:.4f}" for s, p in comparison.bootstrap.items()),
        "verdict": v.verdict,
        "reason": v.reason or None,
    }
