"""The default recipe's selection from its runs (docs/results.md, "The plan of the recipe
selection"): the blocks, the candidates and the choice.

Each run gives two candidates: its best checkpoint, scored by the run's own greedy validations
(metrics.json `best_val_bleu`), and the average of its last step checkpoints, scored afterwards by
`scripts/evaluate.py run=RUN average=5 split=[val] beam=[1]` (the `eval` entry
"val.beam1.averaged"). One seed's runs form a block: they trained one after another on one
machine, so their arms are compared at one speed. The candidate with the highest mean over the
planned seeds is chosen, unless its mean is within `tie` BLEU of the incumbent's: then the
incumbent is kept. Only validation BLEU is read; the test sets decide nothing here.

A challenger chosen goes on to the confirmation (docs/results.md, "The plan of the
confirmation"), whose seed count comes from the chosen candidate's paired differences here: the
upper confidence limit of their sd, and the exact power of the paired t-test at the study's margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from minimt.checkpoint import step_of
from minimt.study.markdown import mean_std_cell, number, table
from minimt.study.runs import Run
from minimt.study.significance import (
    MAX_SEEDS,
    MIN_SEEDS,
    Rules,
    mean,
    mean_std,
    sd_upper_limit,
    seeds_for_difference,
)

AVERAGED = "val.beam1.averaged"  # the eval entry of the averaged candidate
CHECKPOINTS = {"best": "best checkpoint", "averaged": "average of the last 5"}


@dataclass(frozen=True)
class Candidate:
    """An arm (the setting its runs share: "model.dropout=0.2") with one of its checkpoints."""

    arm: str
    checkpoint: str  # a key of CHECKPOINTS

    @property
    def title(self) -> str:
        return f"{self.arm}, {CHECKPOINTS[self.checkpoint]}"


INCUMBENT = Candidate("model.dropout=0.1", "best")  # what `make train` reports today
TIE = 0.1  # BLEU: a challenger this close to the incumbent's mean does not replace it
SEEDS = (1, 2, 3)
SD_CONFIDENCE = 0.8  # the confirmation is powered at this upper confidence limit of the sd


def val_bleu(run: Run, checkpoint: str) -> float | None:
    """Greedy val BLEU of one of the run's checkpoints (a key of CHECKPOINTS): its best
    validation's, or its average's once scored (None before)."""
    if checkpoint == "best":
        return run.metrics["best_val_bleu"]
    averaged = run.metrics.get("eval", {}).get(AVERAGED)
    return None if averaged is None else averaged["bleu"]


def candidate_scores(run: Run) -> dict[Candidate, float]:
    """Greedy val BLEU of the run's candidates: its best checkpoint's, and its average's once
    scored (absent before)."""
    scores = {
        Candidate(run.name, checkpoint): val_bleu(run, checkpoint) for checkpoint in CHECKPOINTS
    }
    return {candidate: score for candidate, score in scores.items() if score is not None}


@dataclass
class Selection:
    """The runs' candidates scored by seed, and the choice once every planned seed has them all."""

    runs: list[Run]
    seeds: tuple[int, ...]  # the planned seeds
    incumbent: Candidate
    tie: float

    @cached_property
    def scores(self) -> dict[Candidate, dict[int, float]]:
        """candidate -> seed -> greedy val BLEU."""
        scores: dict[Candidate, dict[int, float]] = {}
        for run in self.runs:
            for candidate, score in candidate_scores(run).items():
                scores.setdefault(candidate, {})[run.seed] = score
        return scores

    def lacking(self, seed: int) -> list[Candidate]:
        """The candidates not scored on `seed` yet."""
        return [c for c in self.candidates if seed not in self.scores[c]]

    @property
    def missing(self) -> list[str]:
        """Each planned score not in yet, as "<candidate>, seed <k>"."""
        return [f"{c.title}, seed {seed}" for seed in self.seeds for c in self.lacking(seed)]

    @cached_property
    def candidates(self) -> list[Candidate]:
        return sorted(self.scores, key=lambda c: (c.arm, list(CHECKPOINTS).index(c.checkpoint)))

    def mean(self, candidate: Candidate) -> float | None:
        return mean([self.scores[candidate][s] for s in self.seeds if s in self.scores[candidate]])

    @property
    def leader(self) -> Candidate:
        """The candidate with the highest mean over the seeds it has so far."""
        return max(self.candidates, key=lambda c: self.mean(c))

    @property
    def chosen(self) -> Candidate | None:
        """The plan's choice; None until every planned score is in."""
        if self.missing or self.incumbent not in self.scores:
            return None
        leader = self.leader
        if self.mean(leader) - self.mean(self.incumbent) <= self.tie:
            return self.incumbent
        return leader

    def block_leader(self, seed: int) -> Candidate | None:
        """The best candidate of one seed's block, None where it has none scored."""
        scored = [c for c in self.candidates if seed in self.scores[c]]
        return max(scored, key=lambda c: self.scores[c][seed]) if scored else None

    def differences(self, candidate: Candidate) -> list[float]:
        """`candidate` minus the incumbent, seed by seed, where both are scored."""
        mine, theirs = self.scores[candidate], self.scores.get(self.incumbent, {})
        return [mine[s] - theirs[s] for s in self.seeds if s in mine and s in theirs]


@dataclass(frozen=True)
class ConfirmationSize:
    """The confirmation's seed pairs, powered for a true gain of `gain` BLEU by the two-sided paired
    t-test at `alpha`, at the upper confidence limit of the selection's spread."""

    sd: float  # of the chosen candidate's paired differences from today's, over the planned seeds
    sd_limit: float  # its one-sided SD_CONFIDENCE upper confidence limit
    gain: float
    alpha: float
    power: float
    seeds: int | None  # None: more than significance.MAX_SEEDS


def confirmation_size(selection: Selection) -> ConfirmationSize | None:
    """The seed pairs the confirmation plans for, at the study's alpha, power and margin (the
    gain); None where the selection keeps the incumbent or has not chosen. A 3-seed sd is an
    uncertain estimate: powering at its upper limit keeps the confirmation from resting on a
    spread that came out small by chance."""
    rules = Rules()
    chosen = selection.chosen
    if chosen is None or chosen == selection.incumbent:
        return None
    differences = selection.differences(chosen)
    sd = mean_std(differences)[1]
    sd_limit = sd_upper_limit(sd, len(differences) - 1, SD_CONFIDENCE)
    needed = (
        MIN_SEEDS
        if sd_limit == 0
        else seeds_for_difference(sd_limit, rules.margin, rules.alpha, rules.power)
    )
    seeds = None if needed is None else max(MIN_SEEDS, needed)
    return ConfirmationSize(sd, sd_limit, rules.margin, rules.alpha, rules.power, seeds)


def select(
    runs: Sequence[Run],
    seeds: Sequence[int] = SEEDS,
    incumbent: Candidate = INCUMBENT,
    tie: float = TIE,
) -> Selection:
    """The selection from `runs` (named by minimt.study.runs.load_sweep), by the plan's rule."""
    return Selection(list(runs), tuple(seeds), incumbent, tie)


def averaged_steps(run: Run) -> str:
    """The updates the averaged candidate covers ("2,700-3,100"), "-" before it is scored."""
    averaged = run.metrics.get("eval", {}).get(AVERAGED)
    if averaged is None or not averaged.get("averaged_from"):
        return "-"
    steps = [step_of(name) for name in averaged["averaged_from"]]
    return f"{min(steps):,}-{max(steps):,}"


def commit_of(run: Run) -> str:
    commit = run.provenance.get("commit")
    return "-" if not commit else commit[:7] + ("+dirty" if commit.endswith("+dirty") else "")


def blocks_table(selection: Selection) -> str:
    """One row per run, by seed: its machine, code, updates and both candidates' val BLEU."""
    rows = []
    for run in sorted(selection.runs, key=lambda r: (r.seed, r.name)):
        scores = candidate_scores(run)
        averaged = scores.get(Candidate(run.name, "averaged"))
        rows.append(
            f"{run.seed} | {run.name} | {run.machine} | {commit_of(run)} | {run.metrics['steps']:,}"
            f" | {run.stopped_by} | {number(scores[Candidate(run.name, 'best')])}"
            f" ({run.metrics['best_step']:,}) | {number(averaged)} ({averaged_steps(run)})"
        )
    header = (
        "seed | arm | machine | commit | updates | stopped by | best checkpoint (its update)"
        " | average of the last 5 (updates)"
    )
    return table(header, rows)


def candidates_table(selection: Selection) -> str:
    """Each candidate's val BLEU per planned seed, mean ± sd, and its paired difference from the
    incumbent."""
    rows = []
    for c in selection.candidates:
        cells = [number(selection.scores[c].get(seed)) for seed in selection.seeds]
        values = [selection.scores[c][s] for s in selection.seeds if s in selection.scores[c]]
        m, sd = mean_std(values)
        dm, dsd = mean_std(selection.differences(c))
        rows.append(
            " | ".join([c.title, *cells, mean_std_cell(m, sd)])
            + f" | {'-' if c == selection.incumbent else number(dm, sign='+')}"
            + f" | {'-' if c == selection.incumbent else number(dsd)}"
        )
    seeds = " | ".join(f"seed {s}" for s in selection.seeds)
    return table(f"candidate | {seeds} | mean ± sd | minus today's | sd of that", rows)


def missing_by_seed(selection: Selection) -> list[str]:
    """What the choice still waits for, seed by seed: "seed 2 (every candidate)", or the
    candidates a seed lacks; today's recipe named where no seed has it."""
    if selection.incumbent not in selection.scores:
        return [f"{selection.incumbent.title} (today's recipe)"]
    waiting = []
    for seed in selection.seeds:
        lacking = selection.lacking(seed)
        if len(lacking) == len(selection.candidates):
            waiting.append(f"seed {seed} (every candidate)")
        elif lacking:
            waiting.append(f"seed {seed} of {', '.join(c.title for c in lacking)}")
    return waiting


def choice_text(selection: Selection) -> str:
    """The plan's choice, or what it still waits for; and where the blocks' leaders differ."""
    leaders = {seed: selection.block_leader(seed) for seed in selection.seeds}
    lines = [
        "Block leaders: "
        + "; ".join(f"seed {s}: {c.title if c else '-'}" for s, c in leaders.items())
        + "."
    ]
    chosen = selection.chosen
    if chosen is None:
        lines.append(f"No choice yet: the plan needs {'; '.join(missing_by_seed(selection))}.")
    elif selection.leader == selection.incumbent:
        lines.append(f"**Chosen: today's recipe ({chosen.title})**: it has the best mean.")
    elif chosen == selection.incumbent:
        gain = selection.mean(selection.leader) - selection.mean(selection.incumbent)
        lines.append(
            f"**Chosen: today's recipe ({chosen.title})**: the best mean, "
            f"{selection.leader.title}, is {gain:+.2f} BLEU from it, within the plan's "
            f"{selection.tie} BLEU."
        )
    else:
        gain = selection.mean(chosen) - selection.mean(selection.incumbent)
        lines.append(
            f"**Chosen: {chosen.title}**, {gain:+.2f} BLEU over today's recipe "
            f"({selection.incumbent.title}) on the mean of seeds "
            f"{', '.join(map(str, selection.seeds))}; the confirmation decides whether the "
            "default changes."
        )
        lines.append(seed_pairs_text(confirmation_size(selection)))
    return "\n\n".join(lines)


def seed_pairs_text(size: ConfirmationSize) -> str:
    """The confirmation's seed count and the power calculation it comes from."""
    seeds = f"more than {MAX_SEEDS}" if size.seeds is None else str(size.seeds)
    return (
        f"**The confirmation's seed pairs: {seeds}** (docs/results.md, \"The plan of the "
        f"confirmation\"): the chosen candidate's differences from today's recipe have sd "
        f"{size.sd:.2f} BLEU over the selection's seeds, {size.sd_limit:.2f} at its "
        f"{SD_CONFIDENCE:.0%} upper confidence limit; at that sd, {seeds} pairs give the two-sided "
        f"paired t-test at alpha {size.alpha} {size.power:.0%} power for a true gain of "
        f"{size.gain} BLEU."
    )


def selection_text(selection: Selection, source: str) -> str:
    """The selection as markdown: blocks, candidates, choice."""
    return (
        "\n\n".join(
            [
                "# The recipe selection",
                f"Regenerated by `python scripts/select_recipe.py sweep={source}` from the runs' "
                'metrics.json under the plan in docs/results.md ("The plan of the recipe '
                'selection"). Every figure is greedy BLEU on the 1,014 validation pairs; the test '
                "sets are not read.",
                "## The blocks",
                blocks_table(selection),
                "## The candidates",
                candidates_table(selection),
                "## The choice",
                choice_text(selection),
            ]
        )
        + "\n"
    )
