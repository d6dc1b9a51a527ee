"""A study's report from its runs: each configuration summarised over seeds and the questions
answered, written as report.md (markdown.py), report.csv (one row per comparison, or per
configuration compared with nothing) and PNG plots (plots.py). The same runs give the same files,
byte for byte."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from tempfile import TemporaryDirectory

from minimt.atomic import atomic_write, write_bytes, write_text
from minimt.data.length_split import LONG_PREFIX
from minimt.errors import MinimtError
from minimt.study import markdown, plots
from minimt.study.answers import REFERENCE, Answer, answer_questions
from minimt.study.plan import Plans
from minimt.study.runs import (
    Configuration,
    Run,
    findings_dir,
    init_ratio,
    load_sweep,
    long_test_sets,
    scores_of,
)
from minimt.study.significance import Rules, mean, mean_std


class ReportError(MinimtError):
    """Nothing to report (not a directory, no finished runs); the message says which."""


def arm_order(plans: Plans) -> dict[str, int]:
    """Each arm the plans name, numbered in the order they first name it (a test's reference,
    then its system)."""
    named = (arm for f in plans.families for t in f.tests for arm in t.arms[1::-1])
    return {arm: rank for rank, arm in enumerate(dict.fromkeys(named))}


def arm_rank(name: str, order: dict[str, int]) -> tuple:
    """Arms in the order the plans first name them; others after, by name."""
    return (order[name], "") if name in order else (len(order), name)


@dataclass
class Report:
    sweep_dir: Path
    out_dir: Path
    test_set: str  # the headline test set
    rules: Rules
    groups: dict[Configuration, list[Run]]  # by protocol, then arm; runs by seed
    answers: list[Answer]  # each family in each protocol that has runs
    skipped: list[tuple[Path, str]]
    plans: Plans
    deviations: list[str] = field(default_factory=list)  # from its plan: amendments, restarts

    @property
    def runs(self) -> list[Run]:
        return [run for runs in self.groups.values() for run in runs]

    @cached_property
    def rows(self) -> list[dict]:
        """summary_row of each configuration."""
        return [summary_row(c, runs, self.test_set) for c, runs in self.groups.items()]

    @cached_property
    def csv_rows(self) -> list[dict]:
        """report.csv: per configuration, a row per comparison it is the system of (in the
        families' order), or one without; then the comparisons of systems without runs."""
        found = defaultdict(list)
        for answer in self.answers:
            for c in answer.comparisons:
                found[c.system].append(answer.record(c))
        rows = zip(self.rows, self.groups, strict=True)
        unrun = [
            record for c, records in found.items() if c not in self.groups for record in records
        ]
        return [row | record for row, c in rows for record in found[c] or [{}]] + unrun


def build_report(
    sweep_dir: str | Path,
    test_set: str | None,
    out_dir: str | Path | None = None,
    rules: Rules | None = None,
    *,
    plans: Plans,
    reference: str = REFERENCE,
) -> Report:
    """Every run under `sweep_dir`, the questions of `plans` answered on `test_set` (None: the
    first run's first that is not a long_* set) by `rules` (None: Rules()). The report goes to
    `out_dir`; None: `sweep_dir`, or its parent for collected runs."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory")
    found, skipped = load_sweep(sweep_dir, test_set)
    return report_of(found, skipped, sweep_dir, test_set, out_dir, rules, plans, reference)


def report_of(
    found: list[Run],
    skipped: list[tuple[Path, str]],
    sweep_dir: Path,
    test_set: str | None,
    out_dir: str | Path | None,
    rules: Rules | None,
    plans: Plans,
    reference: str = REFERENCE,
) -> Report:
    """build_report's report of the runs `found` under `sweep_dir` (`skipped`: the others)."""
    if not found:
        raise ReportError(
            f"no finished runs{f' scored on {test_set}' if test_set else ''} under {sweep_dir} "
            f"(skipped: {len(skipped)} run directories)"
        )
    first = found[0].test_sets
    headline = test_set or ([n for n in first if not n.startswith(LONG_PREFIX)] or first)[0]
    runs = [run for run in found if headline in run.test_sets]
    skipped = skipped + [
        (run.dir, f"metrics.json has no {headline} score") for run in found if run not in runs
    ]
    if out_dir is None:
        out_dir = findings_dir(sweep_dir, runs)
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda run: run.seed):
        groups[run.configuration].append(run)
    arms = arm_order(plans)
    order = sorted(groups, key=lambda c: (c.protocol.rank, arm_rank(c.name, arms)))
    groups = {c: groups[c] for c in order}
    rules = rules or Rules()
    answers = answer_questions(groups, headline, rules, plans=plans, reference=reference)
    return Report(
        sweep_dir, Path(out_dir), headline, rules, groups, answers, sorted(skipped), plans
    )


def summary_row(c: Configuration, runs: Sequence[Run], test_set: str) -> dict:
    """One configuration's columns of report.csv."""
    row = {"configuration": c.name, "protocol": c.protocol.name}
    row |= {"seeds": " ".join(str(run.seed) for run in runs)}
    row["test_bleu_by_seed"] = " ".join(f"{run.scores(test_set)['bleu']:.2f}" for run in runs)
    stops = Counter(run.stopped_by for run in runs)
    row["stopped_by"] = ", ".join(f"{reason} x{n}" for reason, n in sorted(stops.items()))
    series = {
        "test_bleu": scores_of(runs, test_set, "bleu"),
        "test_chrf": scores_of(runs, test_set, "chrf"),
        "best_val_bleu": [run.metrics["best_val_bleu"] for run in runs],
        "final_val_loss": [run.metrics["val_history"][-1]["loss"] for run in runs],
    }
    for name, values in series.items():
        row[f"{name}_mean"], row[f"{name}_std"] = mean_std(values)
    row["train_pairs"] = runs[0].metrics.get("data", {}).get("train_pairs")
    row["num_parameters"] = runs[0].metrics["num_parameters"]
    for key in ("steps", "best_step"):
        row[f"{key}_mean"] = mean([run.metrics[key] for run in runs])
    row["minutes_mean"] = mean([run.metrics["train_seconds"] / 60 for run in runs])
    return row


def write_report(report: Report) -> list[Path]:
    """report.md, report.csv and the PNGs in the report's directory; returns their paths.

    Each file is written to a temp file and renamed (minimt.atomic), so each is its new version
    or its previous one, never half-written. The plots are drawn in the system's temp folder
    first: matplotlib takes their format from their names."""
    out = report.out_dir
    with (
        atomic_write(out / "report.csv") as tmp,
        tmp.open("w", newline="", encoding="utf-8") as file,
    ):
        fields = dict.fromkeys(key for row in report.csv_rows for key in row)
        writer = csv.DictWriter(file, list(fields), restval="")
        writer.writeheader()
        writer.writerows(
            {k: "" if v is None else v for k, v in row.items()} for row in report.csv_rows
        )
    with TemporaryDirectory(prefix="minimt-plots-") as drawn:
        plots = [out / plot.name for plot in save_plots(replace(report, out_dir=Path(drawn)))]
        for plot in plots:
            write_bytes(plot, (Path(drawn) / plot.name).read_bytes())
    write_text(out / "report.md", report_markdown(report, plots))
    return [out / "report.md", out / "report.csv", *plots]


def report_markdown(report: Report, plots: Sequence[Path]) -> str:
    """The whole report.md."""
    first = report.runs[0].scores(report.test_set)
    protocols = list(dict.fromkeys(c.protocol for c in report.groups))
    shown = [a for a in report.answers if a.comparisons or a.protocol == protocols[0]]
    parts = [
        "# Embedding study",
        f"{len(report.runs)} runs of {len(report.groups)} configurations in {len(protocols)} "
        f"protocols (skipped: {len(report.skipped)} run directories). Headline test set "
        f"{report.test_set}, beam {first['beam']}; mean ± sample std (n - 1) over seeds.",
        "## Answers",
        "\n\n".join(markdown.answer(a, report.rules.margin) for a in shown),
        "## What ran",
        markdown.setup_text(report.groups),
        markdown.configuration_table(report.rows),
        "## Verdicts",
        markdown.rules_text(report.rules, report.answers),
        markdown.verdict_tables(report.answers),
    ]
    names = {c.protocol.name for c in report.groups}
    if planned := [plan.name for plan in report.plans.plans if plan.protocol in names]:
        parts += ["## The plans", markdown.plan_text(planned)]
    parts += ["## Long test sets", markdown.long_test_text(report.groups, report.test_set)]
    parts += ["## Plots", "\n\n".join(f"![{p.stem}]({p.name})" for p in plots)]
    parts += [f"BLEU signature: `{first['signature']}`"]
    if report.skipped:
        root = report.sweep_dir
        runs = [f"- `{p.relative_to(root).as_posix()}`: {why}" for p, why in report.skipped]
        parts += ["## Skipped runs", "\n".join(runs)]
    if report.deviations:
        parts += ["## Deviations from the plan", "\n".join(f"- {d}" for d in report.deviations)]
    return "\n\n".join(parts) + "\n"


def save_plots(report: Report) -> list[Path]:
    """test_bleu.png; per protocol, test BLEU against the init ratio of its full-data runs and,
    where runs have long_* test sets, their BLEU on each. Their paths."""
    out, paths = report.out_dir, [report.out_dir / "test_bleu.png"]
    plots.save_test_bleu(report.rows, paths[0], report.test_set)
    for protocol in dict.fromkeys(c.protocol for c in report.groups):
        groups = {c.name: runs for c, runs in report.groups.items() if c.protocol == protocol}
        if points := ratio_points(groups, report.test_set):
            paths.append(out / f"bleu_vs_ratio_{protocol.name}.png")
            plots.save_ratio_plot(points, paths[-1], protocol.title)
        bleu = {
            name: [(s.removeprefix(LONG_PREFIX), mean(scores_of(runs, s, "bleu"))) for s in sets]
            for name, runs in groups.items()
            if (sets := long_test_sets(runs))
        }
        if bleu:
            paths.append(out / f"long_tests_{protocol.name}.png")
            plots.save_long_tests(bleu, paths[-1], f"{protocol.title}:\nheld-out long test sets")
    return paths


def ratio_points(groups: dict[str, Sequence[Run]], test_set: str) -> dict[str, dict[str, list]]:
    """(init ratio, test BLEU on test_set) per run of each full-data configuration, by encoding."""
    points = defaultdict(dict)
    for name, runs in groups.items():
        config = runs[0].config  # the same data and encoding for all runs of a configuration
        full = not (config.data.get("train_max_words") or config.data.get("train_subsample"))
        xy = [(init_ratio(run), run.scores(test_set)["bleu"]) for run in runs]
        if full and xy[0][0] is not None:
            points[config.pe.encoder][name] = xy
    return points
