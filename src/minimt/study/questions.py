"""The study's questions, declared before the runs: each names the comparisons that answer it
and is its own family for the multiple-comparison correction. A comparison names configurations
by their slug within a protocol (Configuration.local_slug); it is made in every protocol that
has runs of both, never across protocols."""

from __future__ import annotations

from dataclasses import dataclass

ENCODINGS_IN_RANGE = ("learned", "rope", "alibi", "none")
SCALED_ENCODINGS = ("sinusoidal", "learned", "rope")
SPLIT_WORDS = 15  # the length split trains on sources of at most this many words


@dataclass(frozen=True)
class Contrast:
    """`system` against `reference`, seed-paired, on the headline test set or, with
    `long_buckets`, on each held-out long_* test set both have."""

    system: str
    reference: str
    long_buckets: bool = False


@dataclass(frozen=True)
class Question:
    key: str  # Q1, Q2, ...
    title: str
    contrasts: tuple[Contrast, ...]


def scaling_contrasts(pe: str) -> tuple[Contrast, ...]:
    """The 2x2 of sqrt(d_model) scaling x the token table's init for one encoding: each factor
    at each level of the other, and both changed at once (unscaled with init std 1 keeps the
    scaled default's token norm, sqrt(d_model), in another parametrisation)."""
    base = f"full-{pe}"
    return (
        Contrast(f"{base}-unscaled", base),
        Contrast(f"{base}-init1", base),
        Contrast(f"{base}-unscaled-init1", base),
        Contrast(f"{base}-unscaled-init1", f"{base}-unscaled"),
        Contrast(f"{base}-unscaled-init1", f"{base}-init1"),
    )


def length_contrasts() -> tuple[Contrast, ...]:
    split, control = f"length{SPLIT_WORDS}", f"control{SPLIT_WORDS}"
    in_split = tuple(
        Contrast(f"{split}-{pe}", f"{split}-sinusoidal", long_buckets=True)
        for pe in ENCODINGS_IN_RANGE
    )
    against_control = tuple(
        Contrast(f"{split}-{pe}", f"{control}-{pe}", long_buckets=True)
        for pe in ("sinusoidal", *ENCODINGS_IN_RANGE)
    )
    return in_split + against_control


QUESTIONS = (
    Question(
        "Q1",
        "Which positional encoding, in range (full data, test_2016_flickr)?",
        tuple(Contrast(f"full-{pe}", "full-sinusoidal") for pe in ENCODINGS_IN_RANGE),
    ),
    Question(
        "Q2",
        "What does sqrt(d_model) scaling do, with the token table's init?",
        tuple(c for pe in SCALED_ENCODINGS for c in scaling_contrasts(pe)),
    ),
    Question(
        "Q3",
        "How far should the tables be tied?",
        (
            Contrast("full-sinusoidal-share_decoder", "full-sinusoidal"),
            Contrast("full-sinusoidal-share_none", "full-sinusoidal"),
        ),
    ),
    Question(
        "Q4",
        "Where do positions matter: encoder, decoder or both?",
        (
            Contrast("full-enc_sinusoidal-dec_none", "full-sinusoidal"),
            Contrast("full-enc_none-dec_sinusoidal", "full-sinusoidal"),
        ),
    ),
    Question(
        "Q5",
        f"Which encoding generalises to sentences longer than it trained on (<= {SPLIT_WORDS} "
        "words), and is the loss length or data size?",
        length_contrasts(),
    ),
)


# The plan for experiment=study_cpu from its second round on, fixed before its runs. It names
# arms as configs/arm does (a run records its arm in metrics.json "choices"). Each Look is one
# family: Holm's m is the number of tests listed, whatever has run. The family-wise 0.05 of Q1
# and Q2 is split over two looks (0.025 at seeds 1-3, 0.025 at the second look); Q2x and Q6 are
# new families with one look each at 0.05. Seeds per test come from the protocol's pooled seed
# spread (paired-difference sd 0.92 BLEU at seeds 1-3), 80% power at the observed difference.
PLAN_PROTOCOL = "study_cpu"
FIRST_SEEDS = (1, 2, 3)
NEW_SEEDS = (4, 5, 6, 7, 8)
Q6_SEEDS = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class Interaction:
    """Does a change act the same in two settings: per seed, (first.system - first.reference)
    minus (second.system - second.reference), tested against 0."""

    first: Contrast
    second: Contrast


@dataclass(frozen=True)
class PlannedTest:
    """A contrast or interaction of arms and the seeds it pairs."""

    comparison: Contrast | Interaction
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Look:
    """One family tested once: a question's tests at one look, Holm over all of them at alpha."""

    question: str
    look: int
    alpha: float
    tests: tuple[PlannedTest, ...]


def _tests(seeds: tuple[int, ...], *pairs: tuple[str, str]) -> tuple[PlannedTest, ...]:
    return tuple(PlannedTest(Contrast(system, reference), seeds) for system, reference in pairs)


UNSCALED_MINUS_SCALED = Interaction(
    Contrast("unscaled_learned", "full_learned"),
    Contrast("unscaled_sinusoidal", "full_sinusoidal"),
)
Q6_ARMS = ("fairseq_learned", "sinusoid_rms_learned", "unscaled_small_sinusoidal")

PLAN = (
    # Look 1 (done): the comparisons that had run at seeds 1-3, restated at 0.025.
    Look(
        "Q1",
        1,
        0.025,
        _tests(FIRST_SEEDS, ("full_learned", "full_sinusoidal"), ("full_rope", "full_sinusoidal")),
    ),
    Look(
        "Q2",
        1,
        0.025,
        _tests(
            FIRST_SEEDS,
            ("unscaled_sinusoidal", "full_sinusoidal"),
            ("init1_sinusoidal", "full_sinusoidal"),
            ("unscaled_init1_sinusoidal", "full_sinusoidal"),
            ("unscaled_init1_sinusoidal", "unscaled_sinusoidal"),
            ("unscaled_init1_sinusoidal", "init1_sinusoidal"),
            ("unscaled_learned", "full_learned"),
            ("unscaled_rope", "full_rope"),
        ),
    ),
    # Look 2: what look 1 left open and new seeds can settle. Q1 has nothing left to test there
    # (learned was called at look 1; rope gets no new seeds, it needs about 7).
    Look(
        "Q2",
        2,
        0.025,
        _tests(
            (*FIRST_SEEDS, *NEW_SEEDS),
            ("unscaled_sinusoidal", "full_sinusoidal"),
            ("unscaled_learned", "full_learned"),
        )
        + _tests(Q6_SEEDS, ("unscaled_init1_sinusoidal", "full_sinusoidal")),
    ),
    # The interaction seeds 1-3 suggested, tested on new seeds only.
    Look("Q2x", 1, 0.05, (PlannedTest(UNSCALED_MINUS_SCALED, NEW_SEEDS),)),
    # Magnitude balance: each new arm against the default and against today's learned arm.
    Look(
        "Q6",
        1,
        0.05,
        tuple(
            PlannedTest(Contrast(arm, reference), Q6_SEEDS)
            for arm in Q6_ARMS
            for reference in ("full_sinusoidal", "full_learned")
        ),
    ),
)


def planned_alpha(protocol: str, question: str) -> float | None:
    """The alpha the plan spends on `question` at each of its looks in `protocol` (Q1 and Q2 of
    study_cpu: 0.025, half of the family-wise 0.05), None where the plan does not cover it."""
    alphas = {look.alpha for look in PLAN if look.question == question}
    return min(alphas) if protocol == PLAN_PROTOCOL and alphas else None


# The protocols whose families and margin were written after their runs had been analysed (the
# 48 runs of experiment=study were first analysed under an earlier plan: Holm over all 36
# comparisons, equivalence at +-0.5): their verdicts are exploratory until new seeds, under a
# plan written first, confirm them.
WRITTEN_AFTER_THE_DATA = ("study",)


def exploratory(protocol: str) -> str:
    """Why a protocol's verdicts are exploratory; "" when its plan came before its runs."""
    return "plan written after the data" if protocol in WRITTEN_AFTER_THE_DATA else ""
