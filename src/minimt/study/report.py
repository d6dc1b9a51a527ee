"""A study's report: one row per configuration (mean and std over seeds), a verdict for every
configuration against its data regime's baseline and every length split against its control
(seed-paired t, Holm-corrected, with sacreBLEU's paired bootstrap per seed pair), the length
buckets; report.md, report.csv and PNGs. report.md depends only on the runs: regenerated from the
same runs it is the same file, byte for byte."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig

from minimt.study.compare import Comparison, Translations, compare_all, shared_test_sets
from minimt.study.lengths import DEFAULT_EDGES, bleu_by_bucket
from minimt.study.plots import save_bucket_curves, save_seed_curves, save_test_bleu
from minimt.study.runs import (
    LONG_PREFIX,
    SHARE_LEVELS,
    TIED,
    Configuration,
    DataRegime,
    Run,
    is_collected,
    load_sweep,
    setting,
)
from minimt.study.significance import (
    ALPHA,
    MARGIN,
)

CSV_COLUMNS = [
    "configuration",
    "slug",
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
    "baseline",
    "paired_seeds",
    "diff_vs_baseline",
    "ci95_low",
    "ci95_high",
    "p_value",
    "holm_p",
    "bootstrap_p",
    "verdict",
]


class ReportError(Exception):
    """Nothing to report (not a directory, no finished runs); the message says which."""


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
    results: list[ConfigResult]  # sorted: by regime, its baseline first
    comparisons: list[Comparison]
    bootstrap_signature: str | None
    skipped: list[tuple[Path, str]]

    @cached_property
    def rows(self) -> list[dict]:
        """One summary_row per configuration, in the order of `results`."""
        against = {
            c.system: c
            for c in self.comparisons
            if c.test_set == self.test_set and c.reference == c.system.baseline
        }
        return [
            summary_row(result, self.test_set, against.get(result.configuration))
            for result in self.results
        ]

    @property
    def regimes(self) -> list[DataRegime]:
        return list(dict.fromkeys(r.configuration.regime for r in self.results))

    def in_regime(self, regime: DataRegime) -> list[ConfigResult]:
        return [r for r in self.results if r.configuration.regime == regime]


def build_report(
    sweep_dir: str | Path, test_set: str | None, resamples: int, out_dir: str | Path | None = None
) -> Report:
    """Read every run under `sweep_dir` and compare its configurations on `test_set` (None:
    the first test set of the runs). The report goes to `out_dir`; None: into `sweep_dir`, or
    its parent when it holds collected runs (docs/study/runs -> docs/study)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory")
    sweep = load_sweep(sweep_dir, test_set)
    if not sweep.runs:
        raise ReportError(
            f"no finished runs{f' scored on {test_set}' if test_set else ''} under {sweep_dir} "
            f"(skipped: {len(sweep.skipped)} run directories)"
        )
    headline = test_set or headline_test_set(sweep.runs)
    runs = [run for run in sweep.runs if headline in run.test_sets]
    skipped = sweep.skipped + [
        (run.dir, f"metrics.json has no {headline} score") for run in sweep.runs if run not in runs
    ]
    if out_dir is None:
        out_dir = sweep_dir.parent if is_collected(sweep_dir, runs) else sweep_dir
    translations = Translations()
    groups = group_by_configuration(runs)
    results = [
        ConfigResult(
            configuration,
            group,
            bleu_by_length(group, headline, translations),
            long_input_bleu(group, headline),
        )
        for configuration, group in groups.items()
    ]
    comparisons, signature = compare_all(groups, headline, translations, resamples)
    return Report(
        sweep_dir,
        Path(out_dir),
        headline,
        resamples,
        results,
        comparisons,
        signature,
        sorted(skipped),
    )


def headline_test_set(runs: Sequence[Run]) -> str:
    """The first test set of the first run that is not a long_* bucket."""
    names = [name for name in runs[0].test_sets if not name.startswith(LONG_PREFIX)]
    return (names or runs[0].test_sets)[0]


def group_by_configuration(runs: Sequence[Run]) -> dict[Configuration, list[Run]]:
    """Runs by configuration, sorted (each regime's baseline first); seeds in order."""
    groups: dict[Configuration, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.configuration].append(run)
    order = sorted(groups, key=Configuration.sort_key)
    return {c: sorted(groups[c], key=lambda run: run.seed) for c in order}


def bleu_by_length(runs: Sequence[Run], test_set: str, translations: Translations) -> list[dict]:
    """BLEU per source-length bucket of a test set, averaged over the runs (empty when none can
    be scored)."""
    per_run = []
    for run in runs:
        found = translations.of(run, test_set)
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


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); None where there are too few values."""
    return _mean(values), statistics.stdev(values) if len(values) > 1 else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def scores_of(runs: Sequence[Run], test_set: str, key: str) -> list[float]:
    """metrics.json "test" -> test_set -> key of each run that has it."""
    scores = [run.metrics["test"][test_set].get(key) for run in runs]
    return [score for score in scores if score is not None]


def summary_row(result: ConfigResult, test_set: str, comparison: Comparison | None) -> dict:
    """The CSV row of one configuration (CSV_COLUMNS)."""
    c, runs = result.configuration, result.runs
    e = c.embedding
    row = {
        "configuration": c.label,
        "slug": c.slug,
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
    row.update(comparison_columns(comparison))
    if c.is_baseline:
        row["verdict"] = "baseline"
    return row


def comparison_columns(comparison: Comparison | None) -> dict:
    """The CSV's comparison columns (all None without a comparison)."""
    if comparison is None:
        return dict.fromkeys(CSV_COLUMNS[CSV_COLUMNS.index("baseline") :])
    d = comparison.difference
    low, high = d.ci95 or (None, None)
    return {
        "baseline": comparison.reference.slug,
        "paired_seeds": " ".join(map(str, comparison.seeds)),
        "diff_vs_baseline": d.mean,
        "ci95_low": low,
        "ci95_high": high,
        "p_value": d.p_value,
        "holm_p": comparison.holm_p,
        "bootstrap_p": " ".join(f"{s}:{p:.4f}" for s, p in comparison.bootstrap.items()),
        "verdict": comparison.verdict,
    }


# The files --------------------------------------------------------------------------------


def write_report(report: Report) -> list[Path]:
    """report.md, report.csv and the PNGs in the report's directory; returns their paths."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    with (out / "report.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in report.rows)
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    plots = plot_names(report)
    save_test_bleu(
        [{**row, "configuration": row["slug"]} for row in report.rows],
        out / plots[0],
        report.test_set,
    )
    for regime in report.regimes:
        results = report.in_regime(regime)
        groups = {r.configuration.embedding.slug: r.configuration.embedding.pe for r in results}
        save_seed_curves(
            {
                r.configuration.embedding.slug: [run.val_bleu_curve() for run in r.runs]
                for r in results
            },
            groups,
            out / f"val_bleu_{regime.slug}.png",
            regime.label,
        )
        save_bucket_curves(
            length_panels(report, results), groups, out / f"bleu_by_length_{regime.slug}.png"
        )
    return [out / "report.md", out / "report.csv", *(out / name for name in plots)]


def plot_names(report: Report) -> list[str]:
    """test_bleu.png, then per data regime its validation curves and BLEU by length."""
    names = ["test_bleu.png"]
    for regime in report.regimes:
        names += [f"val_bleu_{regime.slug}.png", f"bleu_by_length_{regime.slug}.png"]
    return names


def length_panels(report: Report, results: Sequence[ConfigResult]) -> dict[str, dict]:
    """The BLEU-by-length plot of one regime: the headline test set by source-length bucket
    (when its references could be read) and the long_* test sets (when the runs have them)."""
    panels, regime = {}, results[0].configuration.regime.label
    by_length = {
        r.configuration.embedding.slug: [(b["bucket"], b["bleu"]) for b in r.by_length]
        for r in results
        if r.by_length
    }
    if by_length:
        panels[f"{regime}: {report.test_set} by source length"] = by_length
    long = {
        r.configuration.embedding.slug: [
            (name.removeprefix(LONG_PREFIX), _mean(scores_of(r.runs, name, "bleu")))
            for name in long_test_sets(r)
        ]
        for r in results
        if long_test_sets(r)
    }
    if long:
        panels[f"{regime}: held-out long test sets"] = long
    return panels or {f"{regime}: no references and no long test sets": {}}


def long_test_sets(result: ConfigResult) -> list[str]:
    return [name for name in result.test_sets if name.startswith(LONG_PREFIX)]


# report.md --------------------------------------------------------------------------------


def configuration_table(rows: Sequence[dict]) -> str:
    """The markdown table of the configurations (also what the script prints)."""
    lines = [
        "| configuration | seeds | test BLEU | test chrF | best val BLEU | final val loss "
        "| steps | best step | minutes | parameters | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = [
            row["slug"],
            row["seeds"],
            _mean_std(row, "test_bleu", 2),
            _mean_std(row, "test_chrf", 2),
            _mean_std(row, "best_val_bleu", 2),
            _mean_std(row, "final_val_loss", 3),
            f"{row['steps_mean']:,.0f}",
            f"{row['best_step_mean']:,.0f}",
            f"{row['minutes_mean']:.1f}",
            f"{row['num_parameters']:,}",
            row["verdict"] or "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_std(row: dict, name: str, digits: int) -> str:
    mean, std = row[f"{name}_mean"], row[f"{name}_std"]
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown(report: Report) -> str:
    """The whole report.md."""
    first = report.results[0].runs[0].metrics["test"][report.test_set]
    n_runs = sum(len(result.runs) for result in report.results)
    parts = [
        "# Embedding study",
        f"{n_runs} runs of {len(report.results)} configurations in {len(report.regimes)} data "
        f"regimes (skipped: {len(report.skipped)} run directories). Headline test set "
        f"{report.test_set}, beam {first['beam']}; mean ± sample std (n - 1) over seeds.",
        "## What ran",
        _setup_text(report),
        _regime_table(report),
        configuration_table(report.rows),
        "Each run: why it stopped, its last and best step, its training minutes.",
        _run_table(report),
        "## Verdicts",
        _verdict_rules(report),
        _verdict_table([c for c in report.comparisons if not c.test_set.startswith(LONG_PREFIX)]),
        "## Length buckets",
        _bucket_text(report),
        "## Parameters per tying level",
        _parameter_table(report),
        "## Training lengths",
        _training_lengths(report),
    ]
    if any(r.by_length for r in report.results):
        parts += [f"## {report.test_set} by source length", _length_table(report)]
    if any(r.long_inputs for r in report.results):
        parts += ["## Joined inputs", _long_input_table(report)]
    parts += [
        "## Plots",
        "\n\n".join(f"![{name.removesuffix('.png')}]({name})" for name in plot_names(report)),
        f"BLEU signature: `{first['signature']}`",
    ]
    if report.skipped:
        skipped = "\n".join(
            f"- `{_relative(path, report.sweep_dir)}`: {why}" for path, why in report.skipped
        )
        parts += ["## Skipped runs", skipped]
    return "\n\n".join(parts) + "\n"


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _setup_text(report: Report) -> str:
    """Model size and budget from the saved configs, one line per distinct setting."""
    setups: dict[str, list[str]] = defaultdict(list)
    for result in report.results:
        for run in result.runs:
            description = setup_description(run.config)
            if result.configuration.slug not in setups[description]:
                setups[description].append(result.configuration.slug)
    if len(setups) == 1:
        return f"Every run: {next(iter(setups))}."
    return "\n".join(f"- {text}: {', '.join(slugs)}" for text, slugs in setups.items())


def setup_description(cfg: DictConfig) -> str:
    """A run's model size and training budget in one line."""
    m, t, d = cfg.model, cfg.trainer, cfg.data
    stops = [f"{t.max_steps:,} steps", f"{t.max_minutes:g} minutes"]
    if setting(cfg, "trainer.patience") is not None:
        stops.insert(0, f"patience {t.patience} (min_delta {t.min_delta:g})")
    subset = (
        "" if d.max_train_pairs is None else f"the first {d.max_train_pairs:,} training pairs; "
    )
    return (
        f"model d_model {m.d_model}, {m.n_heads} heads, {m.n_encoder_layers}+{m.n_decoder_layers} "
        f"layers, d_ff {m.d_ff}, dropout {m.dropout:g}, {cfg.tokenizer.vocab_size:,} BPE "
        f"({'joint' if cfg.tokenizer.joint else 'separate'}); {subset}{t.batch_tokens:,} "
        f"tokens x {t.accumulate} per update, lr {t.lr:g}, warmup "
        f"{t.warmup_steps:,}, validation every {t.val_every:,} steps, stop at " + " / ".join(stops)
    )


def _regime_table(report: Report) -> str:
    lines = ["| data regime | training | configurations | runs |", "| --- | --- | --- | --- |"]
    for regime in report.regimes:
        results = report.in_regime(regime)
        runs = [run for result in results for run in result.runs]
        pairs = sorted(
            {run.metrics["data"]["train_pairs"] for run in runs if "data" in run.metrics}
        )
        trained = ", ".join(f"{p:,}" for p in pairs) + " pairs" if pairs else "-"
        lines.append(
            f"| {regime.slug} | {regime.label}; {trained} | {len(results)} | {len(runs)} |"
        )
    return "\n".join(lines)


def _run_table(report: Report) -> str:
    lines = [
        "| configuration | seed | stopped by | steps | best step | minutes | test BLEU |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in report.results:
        for run in result.runs:
            m = run.metrics
            lines.append(
                f"| {result.configuration.slug} | {run.seed} | {_stopped_by(m)} | "
                f"{m['steps']:,} | {m['best_step']:,} | {m['train_seconds'] / 60:.1f} | "
                f"{m['test'][report.test_set]['bleu']:.2f} |"
            )
    return "\n".join(lines)


def _stopped_by(metrics: dict) -> str:
    """The config key of metrics.json "stop_reason" ('trainer.patience reached ...' -> patience)."""
    reason = metrics.get("stop_reason")
    if reason is None:
        return "-"
    return reason.split(" reached")[0].removeprefix("trainer.")


def _verdict_rules(report: Report) -> str:
    tested = sum(c.difference.p_value is not None for c in report.comparisons)
    untested = len(report.comparisons) - tested
    missing = sorted(
        {
            r.configuration.regime.slug
            for r in report.results
            if r.configuration.baseline not in {x.configuration for x in report.results}
        }
    )
    text = (
        "Every configuration is compared with its data regime's baseline (sinusoidal on both "
        "sides, scaled, tied all, default init) and every length split with its random control "
        "of the same size and embedding, on every test set both have. Seed s of one side is "
        "paired with seed s of the other; *difference* is the mean over the paired seeds of "
        "test BLEU (configuration minus the one it is compared against), with its 95% "
        "confidence interval (Student t, n - 1 degrees of freedom) and the two-sided paired "
        f"t-test's p. Holm's correction runs over all {tested} comparisons in this report "
        "that have a p-value (this table and the length buckets')"
        + (f"; {untested} more, on one seed, have none. " if untested else ". ")
        + f"**better / worse**: Holm p < {ALPHA:g} and the 95% interval excludes 0. "
        f"**equivalent**: the 90% interval lies inside ±{MARGIN:g} BLEU (two one-sided tests at "
        f"{ALPHA:g}). **inconclusive**: neither, or fewer than 2 paired seeds. A difference "
        "small but measured precisely enough for both is called better or worse. "
        "*bootstrap p* is sacreBLEU's paired bootstrap resampling of each seed pair's test "
        f"sentences (`sacrebleu --paired-bs`, {report.resamples} resamples): whether that one "
        "pair of runs differs beyond the choice of test sentences; it says nothing about seeds."
    )
    if report.bootstrap_signature:
        text += f"\n\nBootstrap signature: `{report.bootstrap_signature}`"
    if missing:
        text += (
            f"\n\nNo baseline runs in {', '.join(missing)}: its other configurations are not "
            "compared. Add runs of the baseline to compare them."
        )
    return text


def _verdict_table(comparisons: Sequence[Comparison]) -> str:
    if not comparisons:
        return "No comparison: no configuration has its reference's runs (with a common seed)."
    lines = [
        "| configuration | against | test set | seeds | difference | 95% CI | 90% CI | p "
        "| Holm p | bootstrap p per seed | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in comparisons:
        d = c.difference
        bootstrap = ", ".join(f"{s}: {p:.3f}" for s, p in c.bootstrap.items()) or "-"
        lines.append(
            f"| {c.system.slug} | {c.reference.slug} | {c.test_set} | "
            f"{d.seeds} ({' '.join(map(str, c.seeds))}) | {d.mean:+.2f} | {_interval(d.ci95)} | "
            f"{_interval(d.ci90)} | {_p(d.p_value)} | {_p(c.holm_p)} | {bootstrap} | "
            f"**{c.verdict}** |"
        )
    return "\n".join(lines)


def _interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _bucket_text(report: Report) -> str:
    """Per configuration with long test sets: its scores on the headline and each bucket, then
    the verdicts per bucket."""
    results = [r for r in report.results if long_test_sets(r)]
    if not results:
        return (
            "No run has long_* test sets (they come with data.train_max_words or "
            "data.long_tests_over)."
        )
    lines = [
        "| configuration | test set | BLEU | chrF | length ratio | early stops |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for name in [report.test_set, *long_test_sets(result)]:
            runs = result.runs
            bleu_mean, bleu_std = mean_std(scores_of(runs, name, "bleu"))
            bleu = {"bleu_mean": bleu_mean, "bleu_std": bleu_std}
            early = _mean(scores_of(runs, name, "early_stop_share"))
            cells = [
                result.configuration.slug,
                name,
                _mean_std(bleu, "bleu", 2),
                _number(_mean(scores_of(runs, name, "chrf"))),
                _number(_mean(scores_of(runs, name, "length_ratio")), 3),
                "-" if early is None else f"{100 * early:.1f}%",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    bucket_comparisons = [c for c in report.comparisons if c.test_set.startswith(LONG_PREFIX)]
    return (
        "Test scores of each held-out long test set (source length in words in its name) next "
        "to the headline set, mean over seeds: BLEU (± std), chrF, the length ratio "
        "(hypothesis / reference length, sacreBLEU's) and the share of hypotheses shorter than "
        "0.8 x their reference (early stops).\n\n"
        + "\n".join(lines)
        + "\n\nVerdicts per bucket (rules as above, in the same Holm family):\n\n"
        + _verdict_table(bucket_comparisons)
    )


def _parameter_table(report: Report) -> str:
    rows: dict[tuple[str, int], list[str]] = defaultdict(list)
    for result in report.results:
        share = result.configuration.embedding.share
        rows[(share, result.runs[0].metrics["num_parameters"])].append(result.configuration.slug)
    lines = [
        "| tying | tied | parameters | configurations |",
        "| --- | --- | --- | --- |",
    ]
    for (share, count), slugs in sorted(
        rows.items(), key=lambda i: (SHARE_LEVELS.index(i[0][0]), i[0][1])
    ):
        lines.append(f"| {share} | {TIED[share]} | {count:,} | {', '.join(slugs)} |")
    return "metrics.json num_parameters (a shared matrix counted once).\n\n" + "\n".join(lines)


def _training_lengths(report: Report) -> str:
    """The longest training sequence per data regime, and the learned position rows it leaves
    untrained."""
    lines = [
        "| data regime | longest source | longest target | learned positions never trained |",
        "| --- | --- | --- | --- |",
    ]
    for regime in report.regimes:
        results = report.in_regime(regime)
        runs = [run for r in results for run in r.runs]
        src = _largest(runs, "train_max_src_tokens")
        tgt = _largest(runs, "train_max_tgt_tokens")
        untrained = [
            f"{r.configuration.slug}: {rows}"
            for r in results
            if (rows := untrained_rows(r, src, tgt)) is not None
        ]
        lines.append(
            f"| {regime.slug} | {_count(src)} | {_count(tgt)} | {'; '.join(untrained) or '-'} |"
        )
    return (
        'The longest kept training sequence in BPE tokens (metrics.json "data", without '
        "<bos>/<eos>; the longest of any run of the regime). A source of n tokens takes the "
        "positions 0 to n (with its <eos>), a target of n tokens 0 to n (after <bos>); one "
        "learned table serves both sides when both learn positions. Rows past those were never "
        "trained: every test sentence that reaches them is read with rows still at their "
        "initial values.\n\n" + "\n".join(lines)
    )


def untrained_rows(result: ConfigResult, src: int | None, tgt: int | None) -> str | None:
    """'rows a-b' of the learned position table that no training sequence reached (None for a
    configuration without learned positions or runs without the training lengths)."""
    e = result.configuration.embedding
    reached = [
        longest for side, longest in ((e.pe_encoder, src), (e.pe_decoder, tgt)) if side == "learned"
    ]
    if not reached or None in reached:
        return None
    first, last = max(reached) + 1, result.runs[0].config.model.max_seq_len - 1
    return f"rows {first}-{last}" if first <= last else "none"


def _largest(runs: Sequence[Run], key: str) -> int | None:
    values = [run.metrics["data"][key] for run in runs if key in run.metrics.get("data", {})]
    return max(values) if values else None


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _length_table(report: Report) -> str:
    scored = [r for r in report.results if r.by_length]
    buckets = scored[0].by_length
    header = " | ".join(f"{b['bucket']} words (n={b['n']})" for b in buckets)
    lines = [f"| configuration | {header} |", "| --- " * (len(buckets) + 1) + "|"]
    for result in scored:
        cells = [_number(b["bleu"]) for b in result.by_length]
        lines.append(f"| {result.configuration.slug} | " + " | ".join(cells) + " |")
    return (
        f"Test BLEU of the {report.test_set} sentences in each source-length bucket (words), "
        "mean over seeds.\n\n" + "\n".join(lines)
    )


def _long_input_table(report: Report) -> str:
    ks = sorted({k for r in report.results for k in r.long_inputs})
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
        lines.append(f"| {result.configuration.slug} | " + " | ".join(cells) + " |")
    return (
        "Greedy BLEU when k consecutive test sentences are joined into one input (source and "
        "reference alike), mean over seeds, with the mean source length in words "
        "(decoding.long_inputs). It measures sentence splitting more than positions.\n\n"
        + "\n".join(lines)
    )


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
