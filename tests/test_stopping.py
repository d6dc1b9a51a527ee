"""Early stopping on fabricated validation histories, and the config rules of its keys."""

import pytest

from minimt.config import ConfigError, validate_config
from minimt.train.state import patience_reached
from tests.helpers import compose_config


def history(*bleus: float, every: int = 100) -> list[dict]:
    return [{"step": every * (i + 1), "bleu": b, "loss": 1.0} for i, b in enumerate(bleus)]


def first_stop(bleus: list[float], patience: int | None, min_delta: float) -> int | None:
    """The number of validations after which a run would stop (None: it never stops)."""
    for n in range(1, len(bleus) + 1):
        if patience_reached(history(*bleus[:n]), patience, min_delta):
            return n
    return None


def test_stops_exactly_after_patience_validations_without_a_gain():
    bleus = [10.0, 12.0, 11.0, 11.5, 12.0, 9.0]
    assert first_stop(bleus, patience=3, min_delta=0.0) == 5  # 11, 11.5, 12 never beat 12
    assert first_stop(bleus, patience=4, min_delta=0.0) == 6
    reason = patience_reached(history(*bleus[:5]), 3, 0.0)
    assert reason.startswith("trainer.patience reached") and "at step 200" in reason


def test_min_delta_decides_what_counts_as_a_gain():
    bleus = [10.0, 10.5, 11.0, 11.5]  # +0.5 per validation
    assert first_stop(bleus, patience=1, min_delta=0.5) is None  # a gain of exactly min_delta
    assert first_stop(bleus, patience=1, min_delta=0.75) == 2
    assert first_stop(bleus, patience=2, min_delta=0.75) is None  # 11.0 is 1.0 over 10.0
    assert first_stop([10.0, 10.0, 10.0], patience=2, min_delta=0.0) == 3  # a tie is no gain


def test_a_later_improvement_resets_the_count():
    bleus = [10.0, 9.0, 11.0, 10.0, 10.5, 10.9, 11.0]
    assert first_stop(bleus, patience=2, min_delta=0.0) == 5  # counted from 11.0 at validation 3
    assert first_stop(bleus[:3], patience=2, min_delta=0.0) is None


def test_the_reason_names_the_step_of_the_best_checkpoint():
    # 10.05 beats 10.0 by less than min_delta: no gain for patience, but best.pt is step 200
    reason = patience_reached(history(10.0, 10.05, 9.0), patience=2, min_delta=0.1)
    assert "best val BLEU 10.05 at step 200" in reason
    tie = patience_reached(history(10.0, 10.0, 10.0), patience=2, min_delta=0.0)
    assert "at step 100" in tie  # best.pt is written only on a strict gain: the first of equals


def test_null_patience_never_stops():
    assert first_stop([10.0] + [0.0] * 50, patience=None, min_delta=0.0) is None
    assert patience_reached([], 1, 0.0) is None


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.patience=0", "trainer.patience"),
        ("trainer.min_delta=-0.1", "trainer.min_delta"),
        ("trainer.average_last=1", "trainer.average_last"),
    ],
)
def test_bad_stopping_and_averaging_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        validate_config(compose_config(override))


def test_average_last_needs_as_many_kept_checkpoints():
    validate_config(compose_config("trainer.average_last=5", "trainer.keep_checkpoints=5"))
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config("trainer.average_last=6", "trainer.keep_checkpoints=5"))
    assert "trainer.keep_checkpoints to 6" in str(error.value)
