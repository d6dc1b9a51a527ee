"""A study's report: the answer to each question, one row per configuration (mean and std over
seeds), the verdicts of each question's comparisons within its family, the length section and
the plots; report.md, report.csv and PNGs. report.md depends only on the runs: regenerated from
the same runs it is the same file, byte for byte."""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from minimt.errors import MinimtError
from minimt.study.answers import answer_paragraphs, verdict_rules, verdict_tables
from minimt.study.collect import is_collected
from minimt.study.compare import Translations, answer_questions
from minimt.study.figures import plot_names, save_plots
from minimt.study.length_section import (
    bleu_by_length,
    bucket_text,
    length_table,
    long_input_bleu,
    long_input_table,
)
from minimt.study.plan import RATIO_PLOT, answer_plan, plan_runs, plan_table, save_ratio_plot
from minimt.study.results import CSV_COLUMNS, ConfigResult, Report
from minimt.study.runs import LONG_PREFIX, Configuration, Run, load_sweep
from minimt.study.tables import (
    configuration_table,
    parameter_table,
    regime_table,
    run_table,
    setup_text,
    training_lengths,
)
from minimt.study.verdicts import Rules


class ReportError(MinimtError):
    """Nothing to report (not a directory, no finished runs); the message says which."""


def build_report(
    sweep_dir: str | Path,
    test_set: str | None,
    resamples: int,
    out_dir: str | Path | None = None,
    rules: Rules | None = None,
) -> Report:
    """Read every run under `sweep_dir` and answer the study's questions on `test_set` (None:
    the first test set of the runs). The report goes to `out_dir`; None: into `sweep_dir`, or
    its parent when it holds collected runs (docs/study/runs -> docs/study). `rules`: the
    verdict protocol (None: Rules' defaults)."""
    rules = rules or Rules()
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
    families, signature = answer_questions(groups, headline, translations, resamples, rules)
    return Report(
        sweep_dir,
        Path(out_dir),
        headline,
        resamples,
        rules,
        results,
        families,
        signature,
        sorted(skipped),
        sorted(translations.unread.items()),
    )


def headline_test_set(runs: Sequence[Run]) -> str:
    """The first test set of the first run that is not a long_* bucket."""
    names = [name for name in runs[0].test_sets if not name.startswith(LONG_PREFIX)]
    return (names or runs[0].test_sets)[0]


def group_by_configuration(runs: Sequence[Run]) -> dict[Configuration, list[Run]]:
    """Runs by configuration, sorted (by protocol, each regime's baseline first); seeds in
    order."""
    groups: dict[Configuration, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.configuration].append(run)
    order = sorted(groups, key=Configuration.sort_key)
    return {c: sorted(groups[c], key=lambda run: run.seed) for c in order}


def write_report(report: Report) -> list[Path]:
    """report.md, report.csv and the PNGs in the report's directory; returns their paths."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    with (out / "report.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(
            {k: "" if v is None else v for k, v in row.items()} for row in report.csv_rows
        )
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    ratio_plot = [out / RATIO_PLOT] if save_ratio_plot(all_runs(report), out / RATIO_PLOT) else []
    return [out / "report.md", out / "report.csv", *save_plots(report), *ratio_plot]


def all_runs(report: Report) -> list[Run]:
    return [run for result in report.results for run in result.runs]


def plan_section(report: Report) -> list[str]:
    """The plan's looks (questions.PLAN) with what has run, and the magnitude plot; nothing when
    no run of the plan's protocol records its arm."""
    runs = all_runs(report)
    if not plan_runs(runs):
        return []
    text = (
        "The plan of experiment=study_cpu (`minimt.study.questions.PLAN`, docs/study.md), fixed "
        "before its runs. Each look is one family: Holm over all its m tests at its alpha, "
        "tested once every test has all its planned seeds; until then each row shows the "
        "difference over the seeds in so far, as an estimate. An interaction row is the "
        "per-seed difference of the two seed-paired differences, tested against 0. The plot "
        "puts test BLEU against the token : position RMS ratio at the input at init "
        "(metrics.json input_magnitudes, or the value the config gives for runs that predate "
        "that record); it is exploratory."
    )
    return [
        "## The plan (experiment=study_cpu)",
        text,
        plan_table(answer_plan(runs)),
        f"![bleu against the magnitude ratio]({RATIO_PLOT})",
    ]


def markdown(report: Report) -> str:
    """The whole report.md."""
    first = report.results[0].runs[0].metrics["test"][report.test_set]
    n_runs = sum(len(result.runs) for result in report.results)
    parts = [
        "# Embedding study",
        f"{n_runs} runs of {len(report.results)} configurations in {len(report.regimes)} data "
        f"regimes (skipped: {len(report.skipped)} run directories). Headline test set "
        f"{report.test_set}, beam {first['beam']}; mean ± sample std (n - 1) over seeds.",
    ]
    if report.unread_references:
        parts.append(_unread_note(report))
    parts += [
        "## Answers",
        answer_paragraphs(report),
        "## What ran",
        setup_text(report),
        regime_table(report),
        configuration_table(report.rows),
        "Each run: why it stopped, its last and best step, its training minutes.",
        run_table(report),
        "## Verdicts",
        verdict_rules(report),
        verdict_tables(report),
        *plan_section(report),
        "## Length buckets",
        bucket_text(report),
        "## Parameters per tying level",
        parameter_table(report),
        "## Training lengths",
        training_lengths(report),
        f"## {report.test_set} by source length",
        length_table(report),
    ]
    if any(r.long_inputs for r in report.results):
        parts += ["## Joined inputs", long_input_table(report)]
    parts += [
        "## Plots",
        "\n\n".join(f"![{name.removesuffix('.png')}]({name})" for name in plot_names(report)),
        f"BLEU signature: `{first['signature']}`",
    ]
    if report.skipped:
        skipped = "\n".join(
            f"- `{path.relative_to(report.sweep_dir).as_posix()}`: {why}"
            for path, why in report.skipped
        )
        parts += ["## Skipped runs", skipped]
    return "\n\n".join(parts) + "\n"


def _unread_note(report: Report) -> str:
    sets = "; ".join(f"{name} ({why})" for name, why in report.unread_references)
    return (
        f"**References not read**: {sets}. For these test sets the bootstrap p column is '-' "
        "and BLEU by source length is not computed; set MINIMT_DATA_URL to the data's location "
        "and run the report again."
    )
