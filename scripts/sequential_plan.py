"""The figures of a group-sequential plan: its boundaries, and what it shows how often.

    python scripts/sequential_plan.py question=Q8 sd=0.9
    python scripts/sequential_plan.py plan=my_configs/plan/my_question.yaml question=Q1

For the group-sequential family of `question` in the plan file `plan` (default: the plan of
experiment=study_cpu, configs/plan/study_cpu.yaml) this prints, as markdown tables:
- the paired-t boundaries at each look for each level a hypothesis can hold under Holm's
  graphical procedure (alpha/m, ..., alpha): two-sided for a difference, each side of TOST for
  equivalence, with the z boundaries of the same spending for comparison;
- for a few true differences (the same for every arm, or mixed), at a paired-difference sd of
  `sd`: how often each claim is shown, how often a claim is shown falsely, and the expected
  number of runs, from `draws` simulated plans (minimt.study.sequential.simulate_plan).
"""

import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args
from minimt.errors import NotFound
from minimt.rules import positive_int, positive_number
from minimt.study.plan import Family, load_plan
from minimt.study.sequential import (
    DIFFERENCE,
    EQUIVALENCE,
    boundary,
    simulate_plan,
    z_boundaries,
)

PLAN = Path(__file__).resolve().parents[1] / "configs" / "plan" / "study_cpu.yaml"
DEFAULTS = {
    "plan": str(PLAN),
    "question": "Q8",
    "sd": 0.9,
    "margin": 1.0,
    "draws": 200_000,
    "seed": 1,
}
RULES = {"sd": positive_number, "margin": positive_number, "draws": positive_int}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
SCENARIOS = ((0.0, 0.0, 0.0), (0.5, 0.5, 0.5), (-1.0, -1.0, -1.0), (-1.5, -1.5, -1.5))


def sequential_family(plan: Path, question: str) -> Family:
    families = load_plan(plan).families
    found = [family for family in families if family.question == question and family.looks]
    if not found:
        with_looks = ", ".join(f.question for f in families if f.looks) or "none"
        raise NotFound(f"question={question}: no family of {plan} has looks ({with_looks})")
    return found[0]


def boundary_table(family: Family) -> str:
    looks, alpha, m = family.looks, family.alpha, len(family.tests)
    rows = [
        "| level | claim | "
        + " | ".join(f"look {k + 1} ({n} seeds)" for k, n in enumerate(looks))
        + " |",
        "| --- | --- |" + " --- |" * len(looks),
    ]
    for remaining in range(m, 0, -1):
        level = alpha / remaining
        for claim in (DIFFERENCE, EQUIVALENCE):
            cells = [f"{boundary(claim, level, looks, k):.3f}" for k in range(len(looks))]
            rows.append(f"| {alpha:g}/{remaining} | {claim} (t) | " + " | ".join(cells) + " |")
        z = z_boundaries(level, looks)
        rows.append(
            f"| {alpha:g}/{remaining} | one side (z) | " + " | ".join(f"{c:.3f}" for c in z) + " |"
        )
    return "\n".join(rows)


def power_table(family: Family, sd: float, margin: float, draws: int, seed: int) -> str:
    m = len(family.tests)
    scenarios = [s[:m] for s in SCENARIOS] + [tuple((-2.0, 2.0, 0.0)[i % 3] for i in range(m))]
    rows = [
        "| true differences | P(difference shown) | P(equivalence shown) | false difference |"
        " false equivalence | expected runs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for effects in scenarios:
        r = simulate_plan(effects, sd, family.looks, family.alpha, margin, draws, seed)
        cells = [
            " / ".join(f"{e:+g}" for e in effects),
            " / ".join(f"{p:.2f}" for p in r["shown_" + DIFFERENCE]),
            " / ".join(f"{p:.2f}" for p in r["shown_" + EQUIVALENCE]),
            f"{r['false_' + DIFFERENCE]:.3f}",
            f"{r['false_' + EQUIVALENCE]:.3f}",
            f"{r['expected_runs']:.1f} of {(m + 1) * family.looks[-1]}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    family = sequential_family(Path(args.plan), args.question)
    print(
        f"{family.question}: looks at {', '.join(map(str, family.looks))} seeds, "
        f"alpha {family.alpha} per claim type over {len(family.tests)} comparisons\n"
    )
    print(boundary_table(family), "\n")
    print(f"sd {args.sd}, margin ±{args.margin}, {args.draws} draws per row\n")
    print(power_table(family, args.sd, args.margin, args.draws, args.seed))


if __name__ == "__main__":
    main(sys.argv[1:])
