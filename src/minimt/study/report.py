"""A study's report from its runs: each configuration summarised over seeds, the questions and the
plan answered, BLEU by source length; written as report.md (its sections in sections.py),
report.csv and PNG plots (views.py). The same runs give the same files, byte for byte."""

from __future__ import annotations

import csv
import math
import statistics
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from pathlib import Path

from minimt.data.length_split import LONG_PREFIX
from minimt.errors import MinimtError
from minimt.metrics import corpus_scores
from minimt.study import sections
from minimt.study.questions import (
    Comparison,
    Family,
    answer_questions,
    ratio_points,
    shared_test_sets,
)
from minimt.study.runs import (
    Configuration,
    DataRegime,
    Protocol,
    Run,
    collected_dir,
    load_sweep,
    scores_of,
)
from minimt.study.significance import Rules, Translations, mean, mean_std
from minimt.study.views import save_bucket_curves, save_ratio_plot, save_seed_curves, save_test_bleu

COMPARISON_COLUMNS = (  # report.csv's columns after the configuration's
    "question family_size alpha exploratory reference test_set paired_seeds difference ci95_low "
    "ci95_high p_value holm_p tost_holm_p detectable seeds_for_difference seeds_for_equivalence "
    "bootstrap_p verdict reason"
).split()
DEFAULT_EDGES = (0, 10, 15, 20, 25, math.inf)  # source-length buckets in words: [0, 10), ...


class ReportError(MinimtError):
    """Nothing to report (not a directory, no finished runs); the message says which."""


@dataclass
class ConfigResult:
    """One configuration's runs (sorted by seed) and what the report derives from them."""

    configuration: Configuration
    runs: list[Run]
    by_length: list[dict]  # headline BLEU by source-length bucket, mean over seeds
    long_inputs: dict[int, dict]  # k -> {"bleu", "mean_src_words"} averaged over seeds

    @property
    def long_test_sets(self) -> list[str]:
        """The long_* test sets every run of it has."""
        return [name for name in shared_test_sets(self.runs) if name.startswith(LONG_PREFIX)]


@dataclass
class Report:
    sweep_dir: Path
    out_dir: Path
    test_set: str  # the headline test set
    resamples: int
    rules: Rules
    results: list[ConfigResult]  # by protocol, regime, its baseline first
    families: list[Family]  # each question in each protocol that has its runs
    bootstrap_signature: str | None
    skipped: list[tuple[Path, str]]
    unread_references: list[tuple[str, str]]  # (test set, why its references could not be read)

    @property
    def comparisons(self) -> list[Comparison]:
        return [c for family in self.families for c in family.comparisons]

    @property
    def runs(self) -> list[Run]:
        return [run for result in self.results for run in result.runs]

    @cached_property
    def rows(self) -> list[dict]:
        """summary_row of each configuration, with "verdicts" (question, comparison) of the
        comparisons on the headline set it is the system of, and "is_baseline"."""
        verdicts = defaultdict(list)
        for family in self.families:
            for c in family.comparisons:
                if c.test_set == self.test_set:
                    verdicts[c.system].append((family.question.key, c))
        return [
            summary_row(r, self.test_set)
            | {"verdicts": verdicts[r.configuration], "is_baseline": r.configuration.is_baseline}
            for r in self.results
        ]

    @cached_property
    def csv_rows(self) -> list[dict]:
        """report.csv: per configuration, a row per comparison it is the system of (in the
        families' order), or one without ("baseline" for a regime's baseline)."""
        found = defaultdict(list)
        for family in self.families:
            for c in family.comparisons:
                found[c.system].append(comparison_columns(family, c))
        rows = []
        for result in self.results:
            baseline = "baseline" if result.configuration.is_baseline else None
            empty = dict.fromkeys(COMPARISON_COLUMNS) | {"verdict": baseline}
            summary = summary_row(result, self.test_set)
            rows += [summary | columns for columns in found[result.configuration] or [empty]]
        return rows

    @property
    def protocols(self) -> list[Protocol]:
        return list(dict.fromkeys(r.configuration.protocol for r in self.results))

    @property
    def regimes(self) -> list[tuple[Protocol, DataRegime]]:
        return list(dict.fromkeys(regime_of(r) for r in self.results))

    def in_regime(self, protocol: Protocol, regime: DataRegime) -> list[ConfigResult]:
        return [r for r in self.results if regime_of(r) == (protocol, regime)]


def regime_of(result: ConfigResult) -> tuple[Protocol, DataRegime]:
    return result.configuration.protocol, result.configuration.regime


def build_report(
    sweep_dir: str | Path,
    test_set: str | None,
    resamples: int,
    out_dir: str | Path | None = None,
    rules: Rules | None = None,
) -> Report:
    """Every run under `sweep_dir`, the questions answered on `test_set` (None: the first run's
    first that is not a long_* set) with `resamples` bootstrap resamples and `rules` (None:
    Rules()). The report goes to `out_dir`; None: `sweep_dir`, or its parent for collected runs."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory")
    sweep = load_sweep(sweep_dir, test_set)
    if not sweep.runs:
        raise ReportError(
            f"no finished runs{f' scored on {test_set}' if test_set else ''} under {sweep_dir} "
            f"(skipped: {len(sweep.skipped)} run directories)"
        )
    first = sweep.runs[0].test_sets
    headline = test_set or ([n for n in first if not n.startswith(LONG_PREFIX)] or first)[0]
    runs = [run for run in sweep.runs if headline in run.test_sets]
    skipped = sweep.skipped + [
        (run.dir, f"metrics.json has no {headline} score") for run in sweep.runs if run not in runs
    ]
    if out_dir is None:
        collected = all(run.dir == collected_dir(sweep_dir, run) for run in runs)
        out_dir = sweep_dir.parent if collected else sweep_dir
    out = Path(out_dir)
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda run: run.seed):
        groups[run.configuration].append(run)
    groups = {c: groups[c] for c in sorted(groups, key=Configuration.sort_key)}
    translations, rules = Translations(), rules or Rules()
    results = [
        ConfigResult(
            c, group, bleu_by_length(group, headline, translations), long_inputs(group, headline)
        )
        for c, group in groups.items()
    ]
    families, signature = answer_questions(groups, headline, translations, resamples, rules)
    skipped, unread = sorted(skipped), sorted(translations.unread.items())
    return Report(
        sweep_dir, out, headline, resamples, rules, results, families, signature, skipped, unread
    )


def length_buckets(lengths: Sequence[int], edges: Sequence[float] = DEFAULT_EDGES) -> list[int]:
    """The bucket of each length: i where edges[i] <= length < edges[i + 1]."""
    if edges[0] != 0 or edges[-1] != math.inf or any(a >= b for a, b in pairwise(edges)):
        raise ValueError(f"bucket edges must rise strictly from 0 to inf, got {tuple(edges)}")
    return [bisect_right(edges, length) - 1 for length in lengths]


def bleu_by_bucket(
    hyps: Sequence[str],
    refs: Sequence[str],
    srcs: Sequence[str],
    edges: Sequence[float] = DEFAULT_EDGES,
) -> list[dict]:
    """Corpus BLEU of the sentences in each source-length bucket (words split on whitespace):
    [{"bucket": "10-14", "n": sentences, "bleu": BLEU or None when empty}] in bucket order."""
    if not len(hyps) == len(refs) == len(srcs):
        raise ValueError(
            f"{len(hyps)} hypotheses, {len(refs)} references and {len(srcs)} sources: "
            "they must align"
        )
    buckets = length_buckets([len(s.split()) for s in srcs], edges)
    rows = []
    for i, (lower, upper) in enumerate(pairwise(edges)):
        members = [j for j, b in enumerate(buckets) if b == i]
        pairs = [hyps[j] for j in members], [refs[j] for j in members]
        bleu = corpus_scores(*pairs).bleu if members else None
        label = f"{lower:g}+" if upper == math.inf else f"{lower:g}-{upper - 1:g}"
        rows.append({"bucket": label, "n": len(members), "bleu": bleu})
    return rows


def bleu_by_length(runs: Sequence[Run], test_set: str, translations: Translations) -> list[dict]:
    """bleu_by_bucket of a test set, averaged over the runs whose hypotheses can be scored."""
    found = [f for run in runs if (f := translations.of(run, test_set)) is not None]
    per_run = [bleu_by_bucket(hyps, refs, srcs) for hyps, (srcs, refs) in found]
    return [
        {**rows[0], "bleu": mean([row["bleu"] for row in rows if row["bleu"] is not None])}
        for rows in zip(*per_run, strict=True)
    ]


def long_inputs(runs: Sequence[Run], test_set: str) -> dict[int, dict]:
    """metrics.json "long_inputs" of `test_set` averaged over the runs: k -> bleu, words."""
    per_k = defaultdict(list)
    for run in runs:
        for k, scores in run.metrics.get("long_inputs", {}).get(test_set, {}).items():
            per_k[int(k)].append(scores)
    return {
        k: {key: mean([s[key] for s in scores]) for key in ("bleu", "mean_src_words")}
        for k, scores in sorted(per_k.items())
    }


def summary_row(result: ConfigResult, test_set: str) -> dict:
    """One configuration's columns of report.csv."""
    c, e, runs = result.configuration, result.configuration.embedding, result.runs
    row = {"configuration": c.label, "slug": c.slug, "protocol": c.protocol.name}
    row |= {"regime": c.regime.slug, "pe": e.pe, "pe_encoder": e.pe_encoder}
    row |= {"pe_decoder": e.pe_decoder, "scale": e.scale, "share": e.share, "init_std": e.init_std}
    row["seeds"] = " ".join(str(run.seed) for run in runs)
    series = {
        "test_bleu": scores_of(runs, test_set, "bleu"),
        "test_chrf": scores_of(runs, test_set, "chrf"),
        "best_val_bleu": [run.metrics["best_val_bleu"] for run in runs],
        "final_val_loss": [run.metrics["val_history"][-1]["loss"] for run in runs],
    }
    for name, values in series.items():
        row[f"{name}_mean"], row[f"{name}_std"] = mean_std(values)
    row["num_parameters"] = runs[0].metrics["num_parameters"]
    for key in ("steps", "best_step"):
        row[f"{key}_mean"] = statistics.fmean(run.metrics[key] for run in runs)
    row["minutes_mean"] = statistics.fmean(run.metrics["train_seconds"] / 60 for run in runs)
    return row


def comparison_columns(family: Family, c: Comparison) -> dict:
    """A comparison's COMPARISON_COLUMNS: ci95 is its unadjusted interval, alpha the family's."""
    d, v = c.difference, c.verdict
    seeds = " ".join(map(str, c.seeds))
    bootstrap = " ".join(f"{s}:{p:.4f}" for s, p in c.bootstrap.items())
    values = [family.question.key, family.size, family.alpha, family.exploratory or None]
    values += [c.reference.slug, c.test_set, seeds, d.mean, *(d.ci95 or (None, None)), d.p_value]
    values += [v.holm_p, v.holm_tost_p, v.detectable, v.seeds_for_difference]
    values += [v.seeds_for_equivalence, bootstrap, v.verdict, v.reason or None]
    return dict(zip(COMPARISON_COLUMNS, values, strict=True))


def write_report(report: Report) -> list[Path]:
    """report.md, report.csv and the PNGs in the report's directory; returns their paths."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    with (out / "report.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, list(report.csv_rows[0]))
        writer.writeheader()
        writer.writerows(
            {k: "" if v is None else v for k, v in row.items()} for row in report.csv_rows
        )
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    return [out / "report.md", out / "report.csv", *save_plots(report)]


def markdown(report: Report) -> str:
    """The whole report.md: its opening, sections.py's sections, the plots."""
    first = report.results[0].runs[0].scores(report.test_set)
    shown = [f for f in report.families if f.comparisons or f.protocol == report.protocols[0]]
    parts = [
        "# Embedding study",
        f"{len(report.runs)} runs of {len(report.results)} configurations in "
        f"{len(report.regimes)} data regimes (skipped: {len(report.skipped)} run directories). "
        f"Headline test set {report.test_set}, beam {first['beam']}; mean ± sample std (n - 1) "
        "over seeds.",
    ]
    if report.unread_references:
        sets = "; ".join(f"{name} ({why})" for name, why in report.unread_references)
        parts.append(
            f"**References not read**: {sets}. For these test sets the bootstrap p column is '-' "
            "and BLEU by source length is not computed; set MINIMT_DATA_URL to the data's "
            "location and run the report again."
        )
    parts += ["## Answers", "\n\n".join(sections.answer(f, report.rules.margin) for f in shown)]
    parts += ["## What ran", sections.setup_text(report), sections.regime_table(report)]
    parts += [
        sections.configuration_table(report.rows),
        "Each run: why it stopped, its last and best step, its training minutes.",
        sections.run_table(report),
    ]
    verdicts = [sections.verdict_rules(report), sections.verdict_tables(report)]
    parts += ["## Verdicts", *verdicts, *sections.plan_section(report)]
    parts += ["## Length buckets", sections.bucket_text(report)]
    parts += ["## Parameters per tying level", sections.parameter_table(report)]
    parts += ["## Training lengths", sections.training_lengths(report)]
    parts += [f"## {report.test_set} by source length", sections.length_table(report)]
    if any(r.long_inputs for r in report.results):
        parts += ["## Joined inputs", sections.long_input_table(report)]
    plots = "\n\n".join(f"![{name.removesuffix('.png')}]({name})" for name in plot_names(report))
    parts += ["## Plots", plots, f"BLEU signature: `{first['signature']}`"]
    if report.skipped:
        root = report.sweep_dir
        runs = [f"- `{p.relative_to(root).as_posix()}`: {why}" for p, why in report.skipped]
        parts += ["## Skipped runs", "\n".join(runs)]
    return "\n\n".join(parts) + "\n"


def plot_names(report: Report) -> list[str]:
    """test_bleu.png, then per data regime its validation curves and BLEU by length."""
    slugs = [protocol.slug(regime.slug) for protocol, regime in report.regimes]
    return ["test_bleu.png"] + [
        f"{k}_{s}.png" for s in slugs for k in ("val_bleu", "bleu_by_length")
    ]


def save_plots(report: Report) -> list[Path]:
    """Every plot of plot_names, and the ratio plot where there are runs for it; their paths."""
    out = report.out_dir
    save_test_bleu(report.rows, out / "test_bleu.png", report.test_set)
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        slug = protocol.slug(regime.slug)
        groups = {r.configuration.embedding.slug: r.configuration.embedding.pe for r in results}
        curves = {
            r.configuration.embedding.slug: [
                [(h["step"], h["bleu"]) for h in run.metrics["val_history"]] for run in r.runs
            ]
            for r in results
        }
        title = f"{protocol.title}: {regime.label}" if protocol.name else regime.label
        save_seed_curves(curves, groups, out / f"val_bleu_{slug}.png", title)
        panels = length_panels(report.test_set, results, title)
        save_bucket_curves(panels, groups, out / f"bleu_by_length_{slug}.png")
    if points := ratio_points(report.runs):
        save_ratio_plot(points, out / sections.RATIO_PLOT)
    ratio = [out / sections.RATIO_PLOT] if points else []
    return [out / name for name in plot_names(report)] + ratio


def length_panels(test_set: str, results: Sequence[ConfigResult], title: str) -> dict[str, dict]:
    """One regime's BLEU-by-length panels: the headline test set by source-length bucket (when
    its references could be read), the long_* test sets (when the runs have them)."""
    panels = {}
    by_length = {
        r.configuration.embedding.slug: [(b["bucket"], b["bleu"]) for b in r.by_length]
        for r in results
        if r.by_length
    }
    if by_length:
        panels[f"{title}: {test_set} by source length"] = by_length
    long = {
        r.configuration.embedding.slug: [
            (name.removeprefix(LONG_PREFIX), mean(scores_of(r.runs, name, "bleu")))
            for name in r.long_test_sets
        ]
        for r in results
        if r.long_test_sets
    }
    if long:
        panels[f"{title}: held-out long test sets"] = long
    return panels or {f"{title}: no references and no long test sets": {}}
