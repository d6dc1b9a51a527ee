"""The study's answers: each family's seed-paired comparisons on each test set its runs share,
judged together (Holm) once its planned seeds are in; the arms no question covers against the
reference."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from minimt.data.length_split import LONG_PREFIX
from minimt.study.plan import NON_INFERIORITY, Contrast, Family, Interaction, Plans
from minimt.study.runs import Configuration, Protocol, Run, shared_test_sets
from minimt.study.sequential import DIFFERENCE, EQUIVALENCE, decide
from minimt.study.significance import (
    PairedDifference,
    Rules,
    Verdict,
    family_verdicts,
    non_inferiority_verdicts,
    paired_difference,
)

SECONDARY = "secondary: not tested"  # the verdict cell of a comparison on a secondary test set
OTHER_ARMS = "Other arms"  # the family of the arms no declared question covers
OTHER_ARMS_TITLE = "How does each arm that no declared question covers compare with the reference?"
REFERENCE = "full_sinusoidal"  # what such an arm is compared with unless the report names another


@dataclass
class Comparison:
    """One test of a family on one test set, seeds paired."""

    test: Contrast | Interaction
    system: Configuration  # its first arm's (an interaction's first system)
    reference: Configuration  # its second arm's
    test_set: str
    seeds: list[int]  # the test's seeds that every arm has run
    difference: PairedDifference | None  # test BLEU, as test.describe() says; None: no seed yet
    runs: list[Run]  # the paired runs of every arm
    verdict: Verdict | None = None  # set with its family's, once it is tested
    secondary: bool = False  # on a test set beside the headline: reported, never tested
    unpaired: dict[str, list[int]] = field(default_factory=dict)  # an arm's seeds the others lack

    def describe_unpaired(self) -> str:
        """'unpaired, left out: a (4-5)', or "" when every run has its pair."""
        left_out = [f"{arm} ({seed_list(seeds)})" for arm, seeds in self.unpaired.items()]
        return f"unpaired, left out: {', '.join(left_out)}" if left_out else ""

    @property
    def machines(self) -> dict[str, dict[str, list[int]]]:
        """Per configuration, the seeds of its runs that trained on each machine."""
        seeds: dict[str, dict[str, list[int]]] = {}
        for run in self.runs:
            on = seeds.setdefault(run.configuration.name, {}).setdefault(run.machine, [])
            on.append(run.seed)
        return seeds

    @property
    def mixes_machines(self) -> bool:
        return len({machine for on in self.machines.values() for machine in on}) > 1

    def describe_machines(self) -> str:
        """'a on AMD EPYC (1-5); b on AMD EPYC (1-3), Intel Xeon (4-5)'."""
        return "; ".join(
            f"{name} on " + ", ".join(f"{m} ({seed_list(seeds)})" for m, seeds in on.items())
            for name, on in self.machines.items()
        )


@dataclass
class Answer:
    """One family in one protocol: what Holm's correction runs over."""

    protocol: Protocol
    family: Family
    comparisons: list[Comparison]
    not_run: list[Contrast | Interaction]  # no runs of an arm, or no common seed
    alpha: float  # the report's, or the plan's share of it
    looks_analysed: int = 0  # a group-sequential family's looks with all their seeds in

    @property
    def exploratory(self) -> str:
        """Why its verdicts are exploratory; "" when its plan came before its runs."""
        return self.family.exploratory

    @property
    def look(self) -> int | None:
        """The look its verdicts are from: a group-sequential family's last look analysed (0
        before the first), a planned family's one look; None without a plan."""
        if not self.family.planned:
            return None
        return self.looks_analysed if self.family.looks else self.family.look

    @property
    def tested(self) -> list[Comparison]:
        """The comparisons its verdicts are about: on the headline test set (or, for long
        buckets, on each long_* set), not the secondary sets reported beside them."""
        return [c for c in self.comparisons if not c.secondary]

    def next_look(self) -> tuple[list[str], tuple[int, ...]] | None:
        """A group-sequential family's next look: the arms it runs (the reference, then each arm
        still undecided) and its seeds, from the first; None when no look is left."""
        looks, analysed = self.family.looks, self.looks_analysed
        undecided = [c.test.system for c in self.tested if not decided(c)]
        if not looks or analysed >= len(looks) or (analysed and not undecided):
            return None
        first = self.family.tests[0]
        systems = undecided if analysed else [test.system for test in self.family.tests]
        return [first.reference, *systems], first.seeds[: looks[analysed]]

    def next_look_command(self) -> str | None:
        """The command that runs a group-sequential family's next look: the seeds it adds, for
        the reference and every arm still undecided; None when no look is left."""
        if (look := self.next_look()) is None:
            return None
        arms, seeds = look
        first = seeds[self.family.looks[self.looks_analysed - 1] if self.looks_analysed else 0]
        return (
            f"python scripts/train.py -m {' '.join(self.family.overrides)} "
            f"'trainer.seed=range({first},{seeds[-1] + 1})' arm={','.join(arms)}"
        )

    @property
    def complete(self) -> bool:
        """Every planned test has all its seeds (always, for a family without a plan)."""
        seeds = {c.test: len(c.seeds) for c in self.tested}
        planned = [(t, len(t.seeds)) for t in self.family.tests if t.seeds is not None]
        return all(seeds.get(test) == n for test, n in planned)

    @property
    def size(self) -> int:
        """Holm's m: a planned family's tests, or the comparisons with a p-value (2+ seeds)."""
        if self.family.planned:
            return len(self.family.tests)
        return sum(c.difference.p_value is not None for c in self.tested)

    @property
    def runs(self) -> list[Run]:
        """The runs its comparisons rest on, each once, in order of first use."""
        return list({id(run): run for c in self.comparisons for run in c.runs}.values())

    def record(self, c: Comparison) -> dict:
        """One comparison's report.csv columns: its family, the difference over its paired seeds
        with the unadjusted 95% CI, and its verdict (or how many planned seeds are in)."""
        d, v, planned = c.difference, c.verdict, c.test.seeds
        low, high = (d and d.ci95) or (None, None)
        record = {"protocol": self.protocol.name, "question": self.family.question}
        record["look"] = self.look
        record |= {"family_size": self.size, "alpha": self.alpha}
        record |= {"exploratory": self.exploratory or None, "comparison": c.test.describe()}
        record |= {"test_set": c.test_set, "paired_seeds": " ".join(map(str, c.seeds))}
        record["machines"] = c.describe_machines()
        record["planned_seeds"] = None if planned is None else " ".join(map(str, planned))
        record |= {"difference": d and d.mean, "ci95_low": low, "ci95_high": high}
        record |= {"p_value": d and d.p_value, "holm_p": v and v.holm_p}
        record |= {"tost_holm_p": v and v.holm_tost_p, "detectable": v and v.detectable}
        record |= {"seeds_for_difference": v and v.seeds_for_difference}
        record |= {"seeds_for_equivalence": v and v.seeds_for_equivalence}
        n, of = len(c.seeds), len(planned or ())
        waiting = f"waiting: {n} of {of} planned seeds in" if n < of else "waiting for its family"
        waiting = SECONDARY if c.secondary else waiting
        return record | {"verdict": v.verdict if v else waiting, "reason": v and v.reason or None}


def other_arms(families: tuple[Family, ...], arms: list[str], reference: str) -> tuple[Family, ...]:
    """The arms of `arms` that no test of `families` names, each against `reference`, as one
    exploratory family (none where there is no such arm or no reference run)."""
    named = {arm for family in families for test in family.tests for arm in test.arms}
    others = [arm for arm in arms if arm not in named and arm != reference]
    if not others or reference not in arms:
        return ()
    why = "an arm no declared question covers, compared after its runs"
    tests = tuple(Contrast(arm, reference) for arm in others)
    return (Family(OTHER_ARMS, OTHER_ARMS_TITLE, tests, exploratory=why),)


def answer_questions(
    groups: dict[Configuration, list[Run]],
    headline: str,
    rules: Rules,
    *,
    plans: Plans,
    reference: str = REFERENCE,
) -> list[Answer]:
    """Every family of every protocol that has runs (its plans', then the arms none of them
    covers against `reference`), its comparisons judged together once it is complete."""
    by_arm = {(c.protocol, c.name): runs for c, runs in groups.items()}
    answers = []
    for protocol in dict.fromkeys(c.protocol for c in groups):
        families = plans.families_of(protocol.name)
        arms = [c.name for c in groups if c.protocol == protocol]
        for family in families + other_arms(families, arms, reference):
            alpha = min(rules.alpha, family.alpha or rules.alpha)
            answer = Answer(protocol, family, [], [], alpha)
            # the families written after a protocol's first seeds were analysed stay on them
            seen = family.on_seeds
            runs_of = {
                arm: [run for run in by_arm[(protocol, arm)] if run.seed in seen or not seen]
                for arm in arms
            }
            compare_tests(answer, runs_of, headline)
            if family.looks:
                judge_at_looks(answer, runs_of, headline, rules)
            elif answer.complete:
                judge = non_inferiority_verdicts if family.claims == NON_INFERIORITY else None
                verdicts = (judge or family_verdicts)(
                    [c.difference for c in answer.tested],
                    replace(rules, alpha=alpha, margin=family.margin or rules.margin),
                )
                for comparison, verdict in zip(answer.tested, verdicts, strict=True):
                    comparison.verdict = verdict
            answers.append(answer)
    return answers


def compare_tests(
    answer: Answer, runs_of: dict[str, list[Run]], headline: str, seeds: int | None = None
) -> None:
    """Set `answer`'s comparisons (and the tests with none) from the runs of each arm of its
    family's tests; with `seeds`, on each test's first `seeds` planned seeds only."""
    answer.comparisons, answer.not_run = [], []
    for test in answer.family.tests:
        kept = test.seeds[:seeds] if seeds else None
        sides = {
            arm: [run for run in runs_of.get(arm, []) if kept is None or run.seed in kept]
            for arm in test.arms
        }
        tested, secondary = test_sets_of(test, sides, headline, answer.family.planned)
        protocol = answer.protocol
        found = [compare(test, sides, protocol, name) for name in tested]
        found += [compare(test, sides, protocol, name, secondary=True) for name in secondary]
        answer.comparisons += [c for c in found if c]
        answer.not_run += [] if any(found) else [test]


def judge_at_looks(
    answer: Answer, runs_of: dict[str, list[Run]], headline: str, rules: Rules
) -> None:
    """A group-sequential family's verdicts at its last look analysed, every row on that look's
    seeds: the runs in since wait for the next look (before the first look, rows are estimates
    on the runs in)."""
    if analysed := sequential_verdicts(answer, rules):
        compare_tests(answer, runs_of, headline, answer.family.looks[analysed - 1])
        analysed = sequential_verdicts(answer, rules)
    answer.looks_analysed = analysed


def sequential_verdicts(answer: Answer, rules: Rules) -> int:
    """Judge a group-sequential family at each look whose seeds are in (minimt.study.sequential);
    return how many looks were analysed. A comparison decided at a look gets its verdict there
    (both claims tested), one still open gets "continue", or "inconclusive" after the last."""
    family = answer.family
    differences = [per_seed_differences(c) for c in answer.tested]
    margin = family.margin or rules.margin
    analysed, decisions = decide(differences, family.looks, family.alpha, margin)
    for c, d, seeds in zip(answer.tested, decisions, differences, strict=True):
        if not analysed:
            continue
        levels = "; ".join(
            f"{claim} at {d.levels[claim]:.4f} (t boundary {d.boundaries[claim]:.2f})"
            for claim in d.levels
        )
        if DIFFERENCE in d.shown:
            name = "better" if sum(seeds) > 0 else "worse"
            both = (
                "; different, by less than 1 BLEU: equivalence shown too"
                if EQUIVALENCE in d.shown
                else ""
            )
            reason = f"stopped at look {d.look}{both}"
        elif EQUIVALENCE in d.shown:
            name, reason = "equivalent", f"stopped at look {d.look}"
        elif analysed == len(family.looks):
            name, reason = "inconclusive", f"neither claim shown by look {analysed}, the last"
        else:
            name, reason = "continue", f"neither claim shown at look {analysed}"
        c.verdict = Verdict(name, None, None, None, None, None, f"{reason}; {levels}")
    return analysed


def per_seed_differences(c: Comparison) -> list[float]:
    """System minus reference BLEU on the comparison's test set, seed by seed in its plan's
    order, up to the first planned seed not yet run."""
    by_seed = {}
    for run in c.runs:
        by_seed.setdefault(run.seed, {})[run.configuration.name] = run.scores(c.test_set)["bleu"]
    found = []
    for seed in c.test.seeds:
        if seed not in by_seed or len(by_seed[seed]) < 2:
            break
        found.append(by_seed[seed][c.test.system] - by_seed[seed][c.test.reference])
    return found


def decided(c: Comparison) -> bool:
    return c.verdict is not None and c.verdict.verdict in ("better", "worse", "equivalent")


def test_sets_of(
    test: Contrast | Interaction, sides: dict[str, list[Run]], headline: str, planned: bool
) -> tuple[list[str], list[str]]:
    """The test sets `test` is tested on (each long_* set every run has, for long buckets; the
    plan's test set where it names one; else the headline) and, beside it, the other sets every
    run of its seeds was scored on (secondary: reported, never tested)."""
    seeds = set(test.seeds or ())
    runs = [run for side in sides.values() for run in side if not seeds or run.seed in seeds]
    sets = shared_test_sets(runs) if runs and all(sides.values()) else []
    if test.long_buckets:
        return [name for name in sets if name.startswith(LONG_PREFIX)], []
    if isinstance(test, Contrast) and test.test_set is not None:  # its plan's endpoint
        return [test.test_set], [name for name in sets if name != test.test_set]
    tested = [headline] if headline in sets or planned else []
    return tested, [name for name in sets if name != headline and not name.startswith(LONG_PREFIX)]


def seed_list(seeds: list[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    ranges: list[list[int]] = []
    for seed in seeds:
        if ranges and seed == ranges[-1][-1] + 1:
            ranges[-1].append(seed)
        else:
            ranges.append([seed])
    return ", ".join(
        f"{found[0]}-{found[-1]}" if len(found) > 1 else str(found[0]) for found in ranges
    )


def compare(
    test: Contrast | Interaction,
    sides: dict[str, list[Run]],
    protocol: Protocol,
    test_set: str,
    secondary: bool = False,
) -> Comparison | None:
    """The test on the seeds of its plan (or all) that every arm has run; None where no seed is
    common and the plan fixes none."""
    by_seed = {arm: {run.seed: run for run in runs} for arm, runs in sides.items()}
    common = set.intersection(*(set(runs) for runs in by_seed.values()))
    seeds = [s for s in (test.seeds or sorted(common)) if s in common]
    if not seeds and test.seeds is None:
        return None

    def bleu(arm: str) -> list[float]:
        return [by_seed[arm][s].scores(test_set)["bleu"] for s in seeds]

    def change(c: Contrast) -> list[float]:
        return [s - r for s, r in zip(bleu(c.system), bleu(c.reference), strict=True)]

    if isinstance(test, Interaction):
        sides_bleu = change(test.second), change(test.first)
    else:
        sides_bleu = bleu(test.reference), bleu(test.system)
    runs = [by_seed[arm][s] for s in seeds for arm in test.arms]
    difference = paired_difference(*sides_bleu) if seeds else None
    ends = (Configuration(protocol, arm) for arm in test.arms[:2])
    unpaired = (
        {}
        if test.seeds
        else {
            arm: sorted(set(runs) - common) for arm, runs in by_seed.items() if set(runs) - common
        }
    )
    return Comparison(
        test, *ends, test_set, seeds, difference, runs, secondary=secondary, unpaired=unpaired
    )
