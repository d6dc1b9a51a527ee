"""Run a plan look by look, from its file to its verdicts (docs/plans.md).

    python scripts/study.py plan=my_configs/plan/mine.yaml     # then again, at each look
    python scripts/study.py plan=study_cpu power=true sd=0.9    # boundaries, power, runs

`plan` is a plan file, or the name of one in configs/plan. The first call freezes the plan in
`dir` (default outputs/studies/<plan's name>/plan.json): its hash, the code's commit (uncommitted
changes are refused unless allow_dirty=true, then recorded) and the time. Each call trains what
the current look still needs, the reference and the arms still open, through train.py's sweeps
(a family's `overrides` pick the launcher: hydra/launcher=parallel, submitit_local, ...), each
run with the plan's hash in its provenance; Ctrl-C or SIGTERM stops it as it stops a sweep, and
the same command resumes. Once the look's runs are in, it writes the report (report.md,
report.csv, plots in the runs' folder), prints each comparison's decision and the next step:
this command again for the next look, or "done". Runs the plan did not start, or from another
commit, are listed and not counted; a restart of a seed from update 0 counts and is listed as a
deviation. A plan edited after its first call is refused, unless it `amends` the frozen version
with a reason.

power=true prints, for each family with looks (or of arms against one reference), the paired-t
boundaries at each look for each level Holm's graphical procedure can give a hypothesis, with the
z boundaries of the same spending, and from `draws` simulated plans at a paired-difference sd of
`sd`: how often each claim is shown, how often falsely, and the expected number of runs.
"""

import sys
from dataclasses import replace
from pathlib import Path

from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.rules import positive_int, positive_number
from minimt.study.answers import Answer, seed_list
from minimt.study.markdown import interval_cell, number
from minimt.study.plan import Family, load_plan
from minimt.study.runner import Look, freeze, plan_deviations, survey, train, write_reports
from minimt.study.sequential import (
    DIFFERENCE,
    EQUIVALENCE,
    boundary,
    simulate_plan,
    z_boundaries,
)
from minimt.study.significance import Rules

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "scripts" / "train.py"
RULES = Rules()
DEFAULTS = {"plan": "???", "dir": None, "allow_dirty": False, "margin": RULES.margin}
DEFAULTS |= {"power": False, "sd": 0.9, "draws": 200_000, "seed": 1}
CHECKS = {"margin": positive_number, "sd": positive_number, "draws": positive_int}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
SCENARIOS = ((0.0, 0.0, 0.0), (0.5, 0.5, 0.5), (-1.0, -1.0, -1.0), (-1.5, -1.5, -1.5))


def plan_file(plan: str) -> Path:
    """A plan file's path, or the file of that name in configs/plan."""
    named = REPO / "configs" / "plan" / f"{plan}.yaml"
    return Path(plan) if plan.endswith((".yaml", ".yml")) or "/" in plan else named


def decision_lines(looks: list[Look]) -> list[str]:
    """Each family's look and each comparison's difference and decision."""
    lines = []
    for look in looks:
        for family, answer in look.answers.items():
            lines.append(f"{family.question}, {look_words(family, answer)}: {family.title}")
            for c in answer.tested if answer else []:
                d, v = c.difference, c.verdict
                reason = f" ({v.reason})" if v and v.reason else ""
                difference = number(d and d.mean, sign="+")
                cells = f"{difference} {interval_cell(*(d and d.ci95 or (None, None)))}"
                verdict = v.verdict if v else "waiting for its family"
                lines.append(f"  {c.test.describe()} on {c.test_set}: {cells}: {verdict}{reason}")
    return lines


def look_words(family: Family, answer: Answer) -> str:
    if family.looks:
        return f"look {answer.looks_analysed} of {len(family.looks)}"
    seeds = sorted({seed for test in family.tests for seed in test.seeds})
    return f"look {family.look} (seeds {seed_list(seeds)})"


def run_plan(args, argv: list[str]) -> None:
    path = plan_file(args.plan)
    plan = load_plan(path)
    study_dir = Path(args.dir or REPO / "outputs" / "studies" / plan.name)
    record = freeze(path, study_dir, args.allow_dirty)
    version = record["versions"][-1]
    print(
        f"plan {path}, version {len(record['versions'])} (hash {version['hash'][:12]}, frozen "
        f"{version['frozen_utc']} with the code at {record['commit']}); runs in {study_dir}/runs"
    )
    rules = Rules(margin=args.margin)
    looks = survey(plan, record, study_dir, rules)
    needed = [(look.folder, look.needed()) for look in looks]  # the look in progress
    for look in looks:
        if look.needed() and (stopped := train(look, TRAIN, version["hash"])):
            print(
                f"study stopped ({stopped.name}): each run saved its checkpoint; run the same "
                "command again to resume",
                file=sys.stderr,
            )
            return
    looks = survey(plan, record, study_dir, rules)
    list_runs(looks, record)
    counted = {
        (look.folder, run.configuration.name, run.seed) for look in looks for run in look.counted
    }
    missing = [
        (folder, arm, [seed for seed in seeds if (folder, arm, seed) not in counted])
        for folder, arms in needed
        for arm, seeds in arms.items()
    ]
    if missing := [(folder, arm, seeds) for folder, arm, seeds in missing if seeds]:
        for folder, arm, seeds in missing:
            print(f"missing: {arm} at seeds {seed_list(seeds)} in {folder}")
        print("the look is not complete, nothing analysed: run the same command again")
        return
    for report in write_reports(looks, record):
        print(f"wrote {report}")
    print("\n".join(decision_lines(looks)))
    going_on = any(look.needed() for look in looks)
    print(f"next: python scripts/study.py {' '.join(argv)}" if going_on else "next: done")


def list_runs(looks: list[Look], record: dict) -> None:
    """Every run not counted, with why, and every deviation from the plan."""
    for look in looks:
        for run_dir, why in look.not_counted:
            print(f"not counted: {run_dir}: {why}")
        for deviation in plan_deviations(look, record):
            print(f"deviation: {deviation}")


def power_families(families: tuple[Family, ...]) -> list[Family]:
    """The families the power tables cover: with looks, or one look of arms against one
    reference (its seeds the look)."""
    covered = []
    for family in families:
        references = {getattr(test, "reference", None) for test in family.tests}
        if family.looks:
            covered.append(family)
        elif family.planned and len(references) == 1 and None not in references:
            covered.append(replace(family, looks=(len(family.tests[0].seeds),)))
    return covered


def boundary_table(family: Family) -> str:
    looks, alpha, m = family.looks, family.alpha or RULES.alpha, len(family.tests)
    header = " | ".join(f"look {k + 1} ({n} seeds)" for k, n in enumerate(looks))
    rows = [f"| level | claim | {header} |", "| --- | --- |" + " --- |" * len(looks)]
    for remaining in range(m, 0, -1):
        level = alpha / remaining
        for claim in (DIFFERENCE, EQUIVALENCE):
            cells = [f"{boundary(claim, level, looks, k):.3f}" for k in range(len(looks))]
            rows.append(f"| {alpha:g}/{remaining} | {claim} (t) | " + " | ".join(cells) + " |")
        z = " | ".join(f"{c:.3f}" for c in z_boundaries(level, looks))
        rows.append(f"| {alpha:g}/{remaining} | one side (z) | {z} |")
    return "\n".join(rows)


def power_table(family: Family, sd: float, margin: float, draws: int, seed: int) -> str:
    m, looks, alpha = len(family.tests), family.looks, family.alpha or RULES.alpha
    scenarios = [s[:m] + (s[0],) * (m - 3) for s in SCENARIOS]
    scenarios += [tuple((-2.0, 2.0, 0.0)[i % 3] for i in range(m))]
    rows = [
        "| true differences | P(difference shown) | P(equivalence shown) | false difference |"
        " false equivalence | expected runs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for effects in scenarios:
        r = simulate_plan(effects, sd, looks, alpha, margin, draws, seed)
        cells = [
            " / ".join(f"{e:+g}" for e in effects),
            " / ".join(f"{p:.2f}" for p in r["shown_" + DIFFERENCE]),
            " / ".join(f"{p:.2f}" for p in r["shown_" + EQUIVALENCE]),
            f"{r['false_' + DIFFERENCE]:.3f}",
            f"{r['false_' + EQUIVALENCE]:.3f}",
            f"{r['expected_runs']:.1f} of {(m + 1) * looks[-1]}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def print_power(args) -> None:
    for family in power_families(load_plan(plan_file(args.plan)).families):
        looks = ", ".join(map(str, family.looks))
        print(
            f"{family.question} (look {family.look}): looks at {looks} seeds, alpha "
            f"{family.alpha or RULES.alpha} per claim type over {len(family.tests)} comparisons\n"
        )
        print(boundary_table(family), "\n")
        print(f"sd {args.sd}, margin ±{args.margin}, {args.draws} draws per row\n")
        print(power_table(family, args.sd, args.margin, args.draws, args.seed), "\n")


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, CHECKS)
    setup_logging()
    if args.power:
        print_power(args)
    else:
        run_plan(args, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
