"""A sweep's report: one row per embedding configuration (mean and std over seeds), a paired
bootstrap p-value against the baseline, and BLEU by input length; report.md, report.csv, PNGs."""

from __future__ import annotations

import csv
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.data.corpus import DataError, Pairs
from minimt.data.splits import load_text_splits
from minimt.study.lengths import DEFAULT_EDGES, bleu_by_bucket
from minimt.study.plots import save_bleu_by_length, save_test_bleu, save_val_bleu
from minimt.study.runs import BASELINE, Configuration, Run, load_sweep
from minimt.study.significance import PairedResult, paired_bootstrap

log = logging.getLogger(__name__)

CSV_COLUMNS = [
    "configuration",
    "pe",
    "scale",
    "share",
    "seeds",
    "test_bleu_mean",
    "test_bleu_std",
    "test_chrf_mean",
    "test_chrf_std",
    "best_val_bleu_mean",
    "best_val_bleu_std",
    "final_val_loss_mean",
    "final_val_loss_std",
    "steps_mean",
    "train_seconds_mean",
    "num_parameters",
    "p_value",
]
PLOTS = ("val_bleu.png", "test_bleu.png", "bleu_by_length.png")


class ReportError(Exception):
    """Nothing to report (not a directory, no finished runs); the message says which."""


@dataclass
class ConfigResult:
    """One configuration's runs (sorted by seed) and what the report derives from them."""

    configuration: Configuration
    runs: list[Run]
    paired: PairedResult | None  # None for the baseline itself, or with no seed to pair
    by_length: list[dict]  # bleu_by_bucket rows, BLEU averaged over seeds
    long_inputs: dict[int, dict]  # k -> {"bleu", "mean_src_words"} averaged over seeds


@dataclass
class Report:
    sweep_dir: Path
    test_set: str
    resamples: int
    results: list[ConfigResult]  # the baseline first
    skipped: list[tuple[Path, str]]

    @property
    def has_baseline(self) -> bool:
        return self.results[0].configuration == BASELINE

    @cached_property
    def rows(self) -> list[dict]:
        """One summary_row per configuration, in the order of `results`."""
        return [summary_row(result, self.test_set) for result in self.results]


class TestTranslations:
    """Each run's saved hypotheses of a test set, with the (sources, references) they translate.

    The test pairs come from the run's own data config (cached under data.dir, so offline),
    read once per distinct data config.
    """

    def __init__(self, test_set: str):
        self.test_set = test_set
        self._pairs: dict[str, Pairs | None] = {}
        self._found: dict[Path, tuple[list[str], Pairs] | None] = {}

    def of(self, run: Run) -> tuple[list[str], Pairs] | None:
        """(hypotheses, test pairs), or None (with a warning) when either is missing or they
        do not align; read once per run."""
        if run.dir not in self._found:
            self._found[run.dir] = self._read(run)
        return self._found[run.dir]

    def _read(self, run: Run) -> tuple[list[str], Pairs] | None:
        hyps, pairs = run.hyps(self.test_set), self._pairs_for(run.config.data)
        if hyps is None or pairs is None:
            log.warning("%s: no hyps.%s.txt or no test data", run.dir, self.test_set)
            return None
        if len(hyps) != len(pairs[0]):
            log.warning(
                "%s: %d hypotheses for %d test sentences", run.dir, len(hyps), len(pairs[0])
            )
            return None
        return hyps, pairs

    def _pairs_for(self, data: DictConfig) -> Pairs | None:
        key = json.dumps(OmegaConf.to_container(data, resolve=True), sort_keys=True)
        if key not in self._pairs:
            try:
                self._pairs[key] = load_text_splits(data).tests[self.test_set]
            except (DataError, KeyError) as error:
                log.warning("cannot read the %s pairs: %s", self.test_set, error)
                self._pairs[key] = None
        return self._pairs[key]


def build_report(sweep_dir: str | Path, test_set: str, resamples: int) -> Report:
    """Read every run under `sweep_dir` and compare its configurations."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory")
    sweep = load_sweep(sweep_dir, test_set)
    if not sweep.runs:
        raise ReportError(
            f"no finished runs scored on {test_set} under {sweep_dir} "
            f"({len(sweep.skipped)} run directories skipped)"
        )
    groups = group_by_configuration(sweep.runs)
    translations = TestTranslations(test_set)
    baseline_runs = groups.get(BASELINE)
    results = [
        ConfigResult(
            configuration=configuration,
            runs=runs,
            paired=None
            if baseline_runs is None or configuration == BASELINE
            else paired_against(baseline_runs, runs, translations, resamples),
            by_length=bleu_by_length(runs, translations),
            long_inputs=long_input_bleu(runs, test_set),
        )
        for configuration, runs in groups.items()
    ]
    return Report(sweep_dir, test_set, resamples, results, sweep.skipped)


def group_by_configuration(runs: Sequence[Run]) -> dict[Configuration, list[Run]]:
    """Runs by configuration, the baseline first then the others sorted; seeds in order."""
    groups: dict[Configuration, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.configuration].append(run)
    order = sorted(groups, key=lambda c: (c != BASELINE, c))
    return {c: sorted(groups[c], key=lambda run: run.seed) for c in order}


def paired_against(
    baseline: Sequence[Run],
    runs: Sequence[Run],
    translations: TestTranslations,
    resamples: int,
) -> PairedResult | None:
    """One paired bootstrap over the seeds both sides have: seed s of `runs` is paired with
    seed s of `baseline`, and their hypotheses (and references) concatenated into one corpus."""
    partners = {run.seed: run for run in baseline}
    base_hyps, sys_hyps, refs = [], [], []
    for run in runs:
        partner = partners.get(run.seed)
        mine = translations.of(run)
        theirs = translations.of(partner) if partner else None
        if mine is None or theirs is None:
            continue
        base_hyps += theirs[0]
        sys_hyps += mine[0]
        refs += mine[1][1]
    return paired_bootstrap(base_hyps, sys_hyps, refs, resamples) if refs else None


def bleu_by_length(runs: Sequence[Run], translations: TestTranslations) -> list[dict]:
    """BLEU per source-length bucket, averaged over the runs (empty when none can be scored)."""
    per_run = []
    for run in runs:
        found = translations.of(run)
        if found is not None:
            hyps, (srcs, refs) = found
            per_run.append(bleu_by_bucket(hyps, refs, srcs, DEFAULT_EDGES))
    return [
        {**rows[0], "bleu": _mean([row["bleu"] for row in rows if row["bleu"] is not None])}
        for rows in zip(*per_run, strict=True)
    ]


def long_input_bleu(runs: Sequence[Run], test_set: str) -> dict[int, dict]:
    """metrics.json "long_inputs" of `test_set` averaged over the runs: k -> bleu, words."""
    per_k: dict[int, list[dict]] = defaultdict(list)
    for run in runs:
        for k, scores in run.metrics.get("long_inputs", {}).get(test_set, {}).items():
            per_k[int(k)].append(scores)
    return {
        k: {key: _mean([s[key] for s in scores]) for key in ("bleu", "mean_src_words")}
        for k, scores in sorted(per_k.items())
    }


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1); the std is None for a single value."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summary_row(result: ConfigResult, test_set: str) -> dict:
    """The CSV row of one configuration (CSV_COLUMNS)."""
    c, runs = result.configuration, result.runs
    row = {
        "configuration": c.label,
        "pe": c.pe,
        "scale": c.scale,
        "share": c.share,
        "seeds": " ".join(str(run.seed) for run in runs),
    }
    tests = [run.metrics["test"][test_set] for run in runs]
    series = {
        "test_bleu": [t["bleu"] for t in tests],
        "test_chrf": [t["chrf"] for t in tests],
        "best_val_bleu": [run.metrics["best_val_bleu"] for run in runs],
        "final_val_loss": [run.metrics["val_history"][-1]["loss"] for run in runs],
    }
    for name, values in series.items():
        row[f"{name}_mean"], row[f"{name}_std"] = mean_std(values)
    row["steps_mean"] = statistics.fmean(run.metrics["steps"] for run in runs)
    row["train_seconds_mean"] = statistics.fmean(run.metrics["train_seconds"] for run in runs)
    row["num_parameters"] = runs[0].metrics["num_parameters"]
    row["p_value"] = result.paired.p_value if result.paired else None
    return row


def write_report(report: Report) -> list[Path]:
    """report.md, report.csv and the PNGs in the sweep directory; returns their paths."""
    out, rows = report.sweep_dir, report.rows
    with (out / "report.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    by_config = {result.configuration: result for result in report.results}
    save_val_bleu(
        {c: [run.val_bleu_curve() for run in r.runs] for c, r in by_config.items()},
        out / PLOTS[0],
    )
    save_test_bleu(rows, out / PLOTS[1], report.test_set)
    save_bleu_by_length(
        {c: r.by_length for c, r in by_config.items()},
        {c: r.long_inputs for c, r in by_config.items()},
        out / PLOTS[2],
    )
    return [out / "report.md", out / "report.csv", *(out / name for name in PLOTS)]


def configuration_table(rows: Sequence[dict]) -> str:
    """The markdown table of the configurations (also what the script prints)."""
    lines = [
        "| configuration | seeds | test BLEU | test chrF | best val BLEU | final val loss "
        "| steps | train min | parameters | p vs baseline |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = [
            row["configuration"],
            row["seeds"],
            _mean_std(row, "test_bleu", 2),
            _mean_std(row, "test_chrf", 2),
            _mean_std(row, "best_val_bleu", 2),
            _mean_std(row, "final_val_loss", 3),
            f"{row['steps_mean']:,.0f}",
            f"{row['train_seconds_mean'] / 60:.1f}",
            f"{row['num_parameters']:,}",
            "-" if row["p_value"] is None else f"{row['p_value']:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_std(row: dict, name: str, digits: int) -> str:
    mean, std = row[f"{name}_mean"], row[f"{name}_std"]
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown(report: Report) -> str:
    """The whole report.md."""
    first = report.results[0].runs[0].metrics["test"][report.test_set]
    n_runs = sum(len(result.runs) for result in report.results)
    parts = [
        f"# Embedding study: {report.sweep_dir}",
        f"{n_runs} runs in {len(report.results)} configurations ({len(report.skipped)} skipped). "
        f"Test set {report.test_set}, beam {first['beam']}; mean ± sample std (n - 1) "
        "over seeds.",
        "**How to read this:** a difference smaller than the std over seeds, or with p >= 0.05, "
        "is noise: it says nothing about the embedding choice.",
        "## Configurations",
        configuration_table(report.rows),
        "## Significance against the baseline",
        _significance_text(report),
        "## BLEU by source length",
        _length_table(report),
        "## Longer inputs than in training",
        _long_input_table(report),
        "## Plots",
        "![validation BLEU](val_bleu.png)\n\n![test BLEU](test_bleu.png)\n\n"
        "![BLEU by input length](bleu_by_length.png)",
        f"BLEU signature: `{first['signature']}`",
    ]
    if report.skipped:
        skipped = "\n".join(f"- `{path}`: {why}" for path, why in report.skipped)
        parts += ["## Skipped runs", skipped]
    return "\n\n".join(parts) + "\n"


def _significance_text(report: Report) -> str:
    if not report.has_baseline:
        return (
            f"No run of the baseline ({BASELINE.label}) was found: no p-values. "
            "Add its runs to the sweep to compare against it."
        )
    signature = next((r.paired.signature for r in report.results if r.paired), None)
    return (
        f"Baseline: {BASELINE.label}. p is sacreBLEU's paired bootstrap resampling "
        f"(`sacrebleu --paired-bs`, {report.resamples} resamples, fixed seed) of the test BLEU "
        "difference. With several seeds, seed s of a configuration is paired with seed s of the "
        "baseline, the seeds' hypotheses are concatenated into one corpus per side (references "
        "repeated), and one test is run per configuration; seeds the baseline lacks are left "
        "out. p < 0.05: the difference is unlikely to come from which sentences happen to be "
        "in the test set (it says nothing about the variation between seeds: see the std)."
        + (f"\n\nSignature: `{signature}`" if signature else "")
    )


def _length_table(report: Report) -> str:
    scored = [r for r in report.results if r.by_length]
    if not scored:
        return "No run's hypotheses and test data could be read: no length buckets."
    buckets = scored[0].by_length
    header = " | ".join(f"{b['bucket']} words (n={b['n']})" for b in buckets)
    lines = [f"| configuration | {header} |", "| --- " * (len(buckets) + 1) + "|"]
    for result in scored:
        cells = [_number(b["bleu"]) for b in result.by_length]
        lines.append(f"| {result.configuration.label} | " + " | ".join(cells) + " |")
    return (
        "Test BLEU of the sentences in each source-length bucket (words), mean over seeds.\n\n"
        + "\n".join(lines)
    )


def _long_input_table(report: Report) -> str:
    ks = sorted({k for r in report.results for k in r.long_inputs})
    if not ks:
        return 'No run has "long_inputs" in its metrics.json.'
    lines = [
        "| configuration | " + " | ".join(f"k={k}" for k in ks) + " |",
        "| --- " * (len(ks) + 1) + "|",
    ]
    for result in report.results:
        cells = []
        for k in ks:
            scores = result.long_inputs.get(k)
            cells.append(
                "-"
                if scores is None
                else f"{_number(scores['bleu'])} ({scores['mean_src_words']:.0f} words)"
            )
        lines.append(f"| {result.configuration.label} | " + " | ".join(cells) + " |")
    return (
        "Greedy BLEU when k consecutive test sentences are joined into one input (source and "
        "reference alike), mean over seeds, with the mean source length in words: longer than "
        "anything seen in training (data.max_train_len caps the training pairs).\n\n"
        + "\n".join(lines)
    )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
