"""Early stopping: when validation BLEU has stopped improving (trainer.patience, trainer.min_delta).

A pure function of the validation history that TrainState keeps and every checkpoint saves, so
a resumed run stops at the same validation as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence


def patience_reached(
    val_history: Sequence[dict], patience: int | None, min_delta: float
) -> str | None:
    """Why to stop now, or None: the last `patience` validations brought no val-BLEU gain of at
    least `min_delta` (and above 0) over the best validation before them.

    `val_history` holds one {"step", "bleu", ...} per validation, oldest first; patience=None
    never stops. The reason names the step of the best validation of the whole history (the
    step of best.pt: the first one to reach the highest BLEU).
    """
    if patience is None or len(val_history) <= patience:
        return None
    before, recent = val_history[:-patience], val_history[-patience:]
    reference = max(v["bleu"] for v in before)
    gain = max(v["bleu"] for v in recent) - reference
    if gain > 0 and gain >= min_delta:
        return None
    best = max(val_history, key=lambda v: v["bleu"])  # the first of equal ones
    return (
        f"trainer.patience reached: {patience} validations without a val-BLEU gain of at least "
        f"{min_delta} over {reference:.2f}; best val BLEU {best['bleu']:.2f} at step {best['step']}"
    )
