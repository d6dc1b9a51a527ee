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
