"""The study's questions, the plans of experiment=study_cpu and experiment=study declared before
their runs, and their answers: each family's seed-paired comparisons, judged together (Holm)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from minimt.data.length_split import LONG_PREFIX
from minimt.study.runs import Configuration, Protocol, Run, shared_test_sets
from minimt.study.significance import (
    PairedDifference,
    Rules,
    Verdict,
    family_verdicts,
    paired_difference,
)

ENCODINGS_IN_RANGE = ("learned", "rope", "alibi", "none")
SECONDARY = "secondary: not tested"  # the verdict cell of a comparison on a secondary test set
SPLIT_WORDS = 15  # the length split trains on sources of at most this many words


@dataclass(frozen=True)
class Contrast:
    """Arm `system` against arm `reference` (configs/arm), seed-paired, on the headline test set
    or (long_buckets) on each long_* test set both have; on `seeds` where the plan fixes them."""

    system: str
    reference: str
    long_buckets: bool = False
    seeds: tuple[int, ...] | None = None

    @property
    def arms(self) -> tuple[str, ...]:
        return self.system, self.reference

    def describe(self) -> str:
        return f"{self.system} vs {self.reference}"


@dataclass(frozen=True)
class Interaction:
    """Does a change act the same in two settings: per seed, (first.system - first.reference)
    minus (second.system - second.reference), tested against 0."""

    first: Contrast
    second: Contrast
    seeds: tuple[int, ...] | None = None
    long_buckets = False

    @property
    def arms(self) -> tuple[str, ...]:
        return self.first.arms + self.second.arms

    def describe(self) -> str:
        return " - ".join(f"({c.system} - {c.reference})" for c in (self.first, self.second))


@dataclass(frozen=True)
class Family:
    """A question's tests judged together, Holm's correction over them at `alpha` (None: the
    report's). Where the plan fixes each test's seeds, the family's size is its tests, whatever
    has run, and it is tested once every test has all its seeds."""

    question: str  # Q1, Q2, ... (TITLES)
    tests: tuple[Contrast | Interaction, ...]
    look: int = 1
    alpha: float | None = None
    exploratory: str = ""  # why its verdicts are exploratory whatever the protocol's plan

    @property
    def planned(self) -> bool:
        return any(test.seeds is not None for test in self.tests)


def against(reference: str, *systems: str, **options) -> tuple[Contrast, ...]:
    return tuple(Contrast(system, reference, **options) for system in systems)


def scaling_contrasts(pe: str) -> tuple[Contrast, ...]:
    """The 2x2 of sqrt(d_model) scaling x the token table's init: each factor at each level of
    the other, and both at once (unscaled with init std 1 keeps the scaled token norm)."""
    base, unscaled, init1, both = (
        f"{a}{pe}" for a in ("full_", "unscaled_", "init1_", "unscaled_init1_")
    )
    return against(base, unscaled, init1, both) + against(unscaled, both) + against(init1, both)


OTHER_ARMS = "Other arms"  # the family of the arms no declared question covers
REFERENCE = "full_sinusoidal"  # what such an arm is compared with unless the report names another
TITLES = {
    "Q1": "Which positional encoding, in range (full data, test_2016_flickr)?",
    "Q2": "What does sqrt(d_model) scaling do, with the token table's init?",
    "Q2x": "Does scaling act differently on learned and sinusoidal positions?",
    "Q3": "How far should the tables be tied?",
    "Q4": "Where do positions matter: encoder, decoder or both?",
    "Q5": f"Which encoding generalises to sentences longer than it trained on (<= {SPLIT_WORDS} "
    "words), and is the loss length or data size?",
    "Q6": "Is what matters the ratio of token to position magnitude at the input?",
    OTHER_ARMS: "How does each arm that no declared question covers compare with the reference?",
    "Q7": "Are learned positions at the sinusoid's RMS (std 0.7071) equal to sinusoidal, on "
    "fresh seeds (Vaswani et al. 2017, Table 3, row E)?",
}
LENGTH_SPLIT = against(
    "length_sinusoidal", *(f"length_{pe}" for pe in ENCODINGS_IN_RANGE), long_buckets=True
)
CONTROLS = tuple(
    Contrast(f"length_{pe}", f"control_{pe}", True) for pe in ("sinusoidal", *ENCODINGS_IN_RANGE)
)
QUESTIONS = (  # of every protocol without a plan
    Family("Q1", against("full_sinusoidal", *(f"full_{pe}" for pe in ENCODINGS_IN_RANGE))),
    Family(
        "Q2", tuple(c for pe in ("sinusoidal", "learned", "rope") for c in scaling_contrasts(pe))
    ),
    Family("Q3", against("full_sinusoidal", "share_decoder", "share_none")),
    Family("Q4", against("full_sinusoidal", "encoder_only", "decoder_only")),
    Family("Q5", LENGTH_SPLIT + CONTROLS),
)


def planned(seeds: tuple[int, ...] | None, *contrasts: str) -> tuple[Contrast, ...]:
    """A Contrast on `seeds` of each "system vs reference"."""
    return tuple(Contrast(*c.split(" vs "), seeds=seeds) for c in contrasts)


# The plan for experiment=study_cpu from its second round on, fixed before its runs. Each Family is
# one look: Holm's m is the number of tests listed, whatever has run. The family-wise 0.05 of Q1
# and Q2 is split over two looks (0.025 each); Q2x and Q6 are new families with one look each at
# 0.05. Seeds per test come from the protocol's pooled seed spread (paired-difference sd 0.92 BLEU
# at seeds 1-3), for 80% power at the observed difference.
PLAN_PROTOCOL = "study_cpu"
FIRST, NEW, Q6_SEEDS = (1, 2, 3), (4, 5, 6, 7, 8), (1, 2, 3, 4, 5)
Q7_SEEDS = tuple(range(9, 21))  # fresh: seeds 1-8 never enter Q7
Q6_ARMS = ("fairseq_learned", "sinusoid_rms_learned", "unscaled_small_sinusoidal")
Q1_TESTS = ("full_learned vs full_sinusoidal", "full_rope vs full_sinusoidal")
Q6_REFERENCES = ("full_sinusoidal", "full_learned")
PLAN = (
    # Look 1 (done): the comparisons that had run at seeds 1-3, restated at 0.025.
    Family("Q1", planned(FIRST, *Q1_TESTS), 1, 0.025),
    Family("Q2", planned(
        FIRST, "unscaled_sinusoidal vs full_sinusoidal", "init1_sinusoidal vs full_sinusoidal",
        "unscaled_init1_sinusoidal vs full_sinusoidal",
        "unscaled_init1_sinusoidal vs unscaled_sinusoidal",
        "unscaled_init1_sinusoidal vs init1_sinusoidal",
        "unscaled_learned vs full_learned", "unscaled_rope vs full_rope",
    ), 1, 0.025),
    # Look 2: what look 1 left open and new seeds can settle. Q1 has nothing left to test there
    # (learned was called at look 1; rope gets no new seeds, it needs about 7).
    Family("Q2", planned(
        (*FIRST, *NEW), "unscaled_sinusoidal vs full_sinusoidal", "unscaled_learned vs full_learned"
    ) + planned(Q6_SEEDS, "unscaled_init1_sinusoidal vs full_sinusoidal"), 2, 0.025),
    # The interaction seeds 1-3 suggested, tested on new seeds only.
    Family("Q2x", (Interaction(*planned(
        None, "unscaled_learned vs full_learned", "unscaled_sinusoidal vs full_sinusoidal"
    ), NEW),), 1, 0.05),
    # Magnitude balance: each new arm against the default and against today's learned arm.
    Family("Q6", planned(
        Q6_SEEDS, *(f"{a} vs {r}" for a in Q6_ARMS for r in Q6_REFERENCES)
    ), 1, 0.05),
    # The third round (docs/study.md): the learned default against sinusoidal on seeds that none
    # of the earlier looks saw, one look at 0.05 per claim type (difference; TOST within the
    # margin), test_2016_flickr; the 2017 test sets are reported beside it, not tested.
    Family(
        question="Q7",
        tests=planned(Q7_SEEDS, "sinusoid_rms_learned vs full_sinusoidal"),
        look=1,
        alpha=0.05,
    ),
)  # fmt: skip
# experiment=study's families and margin were written after its first 48 runs (seeds 1-3) had been
# analysed: its families stay exploratory, on those seeds. From seed 4 on, a plan fixed before its
# runs confirms Q1 there and asks Q6's question of the learned default (one look each at 0.05).
WRITTEN_AFTER_THE_DATA = {"study": FIRST}
GPU_PLAN = (
    Family("Q1", planned(NEW, *Q1_TESTS), 2, 0.05),
    Family("Q6", planned(NEW, *(f"sinusoid_rms_learned vs {r}" for r in Q6_REFERENCES)), 1, 0.05),
    # Added once those had run, before any unscaled run of this protocol: scaling where it is fast.
    Family("Q2", planned(
        NEW, "unscaled_learned vs full_learned", "unscaled_rope vs full_rope"
    ), 1, 0.05),
)  # fmt: skip
PLANS = {PLAN_PROTOCOL: PLAN, "study": QUESTIONS + GPU_PLAN}


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

    @property
    def exploratory(self) -> str:
        """Why its verdicts are exploratory; "" when its plan came before its runs."""
        if self.family.exploratory:
            return self.family.exploratory
        after = self.protocol.name in WRITTEN_AFTER_THE_DATA and not self.family.planned
        return "plan written after the data" if after else ""

    @property
    def tested(self) -> list[Comparison]:
        """The comparisons its verdicts are about: on the headline test set (or, for long
        buckets, on each long_* set), not the secondary sets reported beside them."""
        return [c for c in self.comparisons if not c.secondary]

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
        look = self.family.look if self.family.planned else None
        record = {"protocol": self.protocol.name, "question": self.family.question, "look": look}
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
    return (Family(OTHER_ARMS, against(reference, *others), exploratory=why),)


def answer_questions(
    groups: dict[Configuration, list[Run]],
    headline: str,
    rules: Rules,
    *,
    reference: str = REFERENCE,
) -> list[Answer]:
    """Every family of every protocol that has runs (its plan's, or QUESTIONS, then the arms none
    of them covers against `reference`), its comparisons judged together once it is complete."""
    by_arm = {(c.protocol, c.name): runs for c, runs in groups.items()}
    answers = []
    for protocol in dict.fromkeys(c.protocol for c in groups):
        families = PLANS.get(protocol.name, QUESTIONS)
        arms = [c.name for c in groups if c.protocol == protocol]
        for family in families + other_arms(families, arms, reference):
            alpha = min(rules.alpha, family.alpha or rules.alpha)
            answer = Answer(protocol, family, [], [], alpha)
            seen = () if family.planned else WRITTEN_AFTER_THE_DATA.get(protocol.name, ())
            for test in family.tests:
                sides = {arm: by_arm.get((protocol, arm), []) for arm in test.arms}
                sides = {a: [r for r in s if r.seed in seen or not seen] for a, s in sides.items()}
                tested, secondary = test_sets_of(test, sides, headline, family.planned)
                found = [compare(test, sides, protocol, name) for name in tested]
                found += [compare(test, sides, protocol, name, True) for name in secondary]
                answer.comparisons += [c for c in found if c]
                answer.not_run += [] if any(found) else [test]
            if answer.complete:
                verdicts = family_verdicts(
                    [c.difference for c in answer.tested], replace(rules, alpha=alpha)
                )
                for comparison, verdict in zip(answer.tested, verdicts, strict=True):
                    comparison.verdict = verdict
            answers.append(answer)
    return answers


def test_sets_of(
    test: Contrast | Interaction, sides: dict[str, list[Run]], headline: str, planned: bool
) -> tuple[list[str], list[str]]:
    """The test sets `test` is tested on (each long_* set every run has, for long buckets; else
    the headline) and, beside the headline, the other sets every run of its seeds was scored on
    (secondary: reported, never tested)."""
    seeds = set(test.seeds or ())
    runs = [run for side in sides.values() for run in side if not seeds or run.seed in seeds]
    sets = shared_test_sets(runs) if runs and all(sides.values()) else []
    if test.long_buckets:
        return [name for name in sets if name.startswith(LONG_PREFIX)], []
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
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges)


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
    return Comparison(test, *ends, test_set, seeds, difference, runs, secondary=secondary)
