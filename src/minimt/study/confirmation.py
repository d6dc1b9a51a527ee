"""The confirmation of the recipe selection's choice (docs/results.md, "The plan of the
confirmation"): the chosen candidate against today's recipe on fresh seeds, one pair of runs per
seed on one machine, one look at test_2016_flickr once every planned pair is in, and the plan's
two gates on speed.

Until every planned pair, the slow pair and the chosen averages' validation scores are in, only
what trained is shown (machines, updates), never a test figure: the plan has one look, and nothing
is looked at before it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from minimt.errors import MinimtError
from minimt.study.markdown import interval_cell, mean_std_cell, number, p_cell, table
from minimt.study.recipe import (
    CHECKPOINTS,
    Candidate,
    ConfirmationSize,
    Selection,
    commit_of,
    confirmation_size,
    val_bleu,
)
from minimt.study.runs import Run, settings
from minimt.study.significance import (
    PairedDifference,
    holm,
    mean,
    mean_std,
    paired_difference,
)

FIRST_SEED = 11  # the planned seeds are FIRST_SEED, FIRST_SEED + 1, ...
SLOW_STEPS = 850  # trainer.max_steps of the slow pair: a machine a quarter as fast
HEADLINE = "test_2016_flickr"
SECONDARY = ("test_2017_flickr", "test_2017_mscoco")
KEEPS_UP = -0.2  # BLEU: least mean of (reported checkpoint's val BLEU - the run's best validation)
SLOW_MARGIN = -1.0  # BLEU: the least slow pair's difference (no more than 1 BLEU below today's)


class NoConfirmation(MinimtError):
    """The selection has nothing to confirm: no choice yet, or today's recipe kept."""


def trained(run: Run, arm: str) -> bool:
    """Whether `run` trained the arm "model.dropout=0.2" (each key's value as its name gives it)."""
    values = settings(run)
    return all(values.get(k) == v for k, v in (part.split("=", 1) for part in arm.split()))


def figure(run: Run, candidate: Candidate, test_set: str) -> float | None:
    """The candidate's beam BLEU on `test_set` in `run`: its best checkpoint's (metrics.json
    "test") or its average's ("test_average", scored where trainer.average_last is set)."""
    key = "test_average" if candidate.checkpoint == "averaged" else "test"
    return run.metrics.get(key, {}).get(test_set, {}).get("bleu")


@dataclass(frozen=True)
class Pair:
    """One seed's run of today's recipe and run of the chosen one (the same run where both
    candidates come from one), on one machine."""

    seed: int
    today: Run
    chosen: Run

    @property
    def runs(self) -> list[Run]:
        return [self.today] if self.today is self.chosen else [self.today, self.chosen]


def pair_runs(
    runs: Sequence[Run],
    incumbent: Candidate,
    chosen: Candidate,
    seeds: Sequence[int],
    slow: bool,
) -> tuple[dict[int, Pair], list[str]]:
    """The pairs of `seeds` whose two runs have finished, and the runs not counted, each with why
    and what to do. `slow`: these are the slow pair's runs (trainer.max_steps=SLOW_STEPS)."""
    by_seed: dict[int, list[Run]] = defaultdict(list)
    pairs, refused = {}, []
    for run in runs:
        why = unfit(run, seeds, slow)
        if why:
            refused.append(f"{run.dir}: {why}")
        else:
            by_seed[run.seed].append(run)
    for seed, group in sorted(by_seed.items()):
        today = next((r for r in group if trained(r, incumbent.arm)), None)
        mine = next((r for r in group if trained(r, chosen.arm)), None)
        if today is None or mine is None:
            continue
        if figure(mine, chosen, HEADLINE) is None:
            refused.append(
                f"seed {seed}: its {chosen.arm} run scored no average on the test sets: "
                "train it again with trainer.average_last=5"
            )
            continue
        if today.machine != mine.machine:
            refused.append(
                f"seed {seed}: its runs trained on two machines ({today.machine}; "
                f"{mine.machine}): train the pair again, one run after the other on one machine"
            )
            continue
        pairs[seed] = Pair(seed, today, mine)
    return pairs, refused


def unfit(run: Run, seeds: Sequence[int], slow: bool) -> str:
    """Why `run` cannot count among the pairs of `seeds` ("" where it can)."""
    if run.seed not in seeds:
        return f"not a planned seed ({seeds_text(seeds)})"
    if (run.setting("trainer.max_steps") == SLOW_STEPS) != slow:
        where = "the slow pair's" if slow else "the pairs'"
        return f"trainer.max_steps={run.setting('trainer.max_steps')} is not {where} budget"
    lacking = [name for name in (HEADLINE, *SECONDARY) if name not in run.metrics["test"]]
    if lacking:
        return f"not scored on {', '.join(lacking)}: train it with the confirm sweep's test sets"
    return ""


def seeds_text(seeds: Sequence[int]) -> str:
    return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"


@dataclass
class Confirmation:
    """The confirmation's runs read by the plan: the planned pairs, the slow pair, the verdict."""

    incumbent: Candidate
    chosen: Candidate
    size: ConfirmationSize  # the planned pairs and the test's alpha
    pairs: dict[int, Pair]  # the planned seeds' finished pairs
    slow: Pair | None  # seed FIRST_SEED at trainer.max_steps=SLOW_STEPS
    refused: list[str]  # runs not counted, with why

    @property
    def seeds(self) -> tuple[int, ...]:
        """The planned seeds."""
        return planned_seeds(self.size)

    @property
    def waiting(self) -> list[str]:
        """What the one look still waits for."""
        missing = [seed for seed in self.seeds if seed not in self.pairs]
        waits = [f"the pair of seed {seed}" for seed in missing]
        if self.slow is None:
            waits.append(f"the slow pair (seed {FIRST_SEED}, trainer.max_steps={SLOW_STEPS})")
        if not missing and self.keeps_up is None:
            waits.append("the chosen runs' averages scored on validation")
        return waits

    def difference(self, test_set: str) -> PairedDifference:
        """Chosen minus today's on `test_set` over the planned pairs, paired by seed."""
        pairs = [self.pairs[seed] for seed in self.seeds]
        today = [figure(p.today, self.incumbent, test_set) for p in pairs]
        return paired_difference(today, [figure(p.chosen, self.chosen, test_set) for p in pairs])

    @property
    def better(self) -> bool:
        primary = self.difference(HEADLINE)
        return (
            primary.mean > 0 and primary.p_value is not None and primary.p_value < self.size.alpha
        )

    @property
    def keeps_up(self) -> float | None:
        """Mean over the chosen runs of (reported checkpoint's val BLEU - the run's best
        validation); None while an average's val BLEU is unscored."""
        chosen = [p.chosen for p in self.pairs.values()]
        reported = [val_bleu(run, self.chosen.checkpoint) for run in chosen]
        if not chosen or None in reported:
            return None
        return mean(
            [r - run.metrics["best_val_bleu"] for r, run in zip(reported, chosen, strict=True)]
        )

    @property
    def slow_difference(self) -> float | None:
        if self.slow is None:
            return None
        today = figure(self.slow.today, self.incumbent, HEADLINE)
        return figure(self.slow.chosen, self.chosen, HEADLINE) - today

    @property
    def decision(self) -> bool | None:
        """Whether the default changes; None until the look."""
        if self.waiting:
            return None
        return self.better and self.keeps_up >= KEEPS_UP and self.slow_difference >= SLOW_MARGIN


def confirm(selection: Selection, runs: Sequence[Run], slow_runs: Sequence[Run]) -> Confirmation:
    """The confirmation of `selection`'s choice from its runs and the slow pair's."""
    size = confirmation_size(selection)
    if size is None:
        raise NoConfirmation(
            "the selection keeps today's recipe: nothing to confirm"
            if selection.chosen
            else "the selection has not chosen yet: train its seeds first (selection.md)"
        )
    if size.seeds is None:
        raise NoConfirmation("the selection's spread needs more pairs than any plan can train")
    seeds = planned_seeds(size)
    incumbent, chosen = selection.incumbent, selection.chosen
    pairs, refused = pair_runs(runs, incumbent, chosen, seeds, slow=False)
    slow_pairs, slow_refused = pair_runs(slow_runs, incumbent, chosen, seeds[:1], slow=True)
    slow = slow_pairs.get(FIRST_SEED)
    return Confirmation(incumbent, chosen, size, pairs, slow, refused + slow_refused)


def planned_seeds(size: ConfirmationSize) -> tuple[int, ...]:
    return tuple(range(FIRST_SEED, FIRST_SEED + size.seeds))


def updates_cell(pair: Pair) -> str:
    """Each run's updates: "2,431 / 2,388", one figure where one run gives both candidates."""
    return " / ".join(f"{run.metrics['steps']:,}" for run in pair.runs)


def pairs_table(c: Confirmation, pairs: Sequence[Pair], looked: bool) -> str:
    """One row per pair: its machine, code and updates; its test_2016_flickr figures at the look."""
    rows = []
    for p in pairs:
        cells = [
            str(p.seed),
            p.today.machine,
            " / ".join(dict.fromkeys(commit_of(r) for r in p.runs)),
            updates_cell(p),
            " / ".join(r.stopped_by for r in p.runs),
        ]
        if looked:
            today, chosen = (
                figure(p.today, c.incumbent, HEADLINE),
                figure(p.chosen, c.chosen, HEADLINE),
            )
            cells += [number(today), number(chosen), number(chosen - today, sign="+")]
        rows.append(" | ".join(cells))
    if not rows:
        return "None finished yet."
    header = "seed | machine | commit | updates (today's / chosen) | stopped by"
    if looked:
        header += f" | today's {HEADLINE} | chosen's | difference"
    return table(header, rows)


def interval(d: PairedDifference) -> str:
    return interval_cell(*(d.ci95 or (None, None)))


def primary_text(c: Confirmation) -> str:
    d = c.difference(HEADLINE)
    verdict = "**better**" if c.better else "not shown better"
    return (
        f"**{HEADLINE}** (beam 5): {c.chosen.title} minus today's recipe {d.mean:+.2f} BLEU, 95% "
        f"interval {interval(d)}, paired t-test p {p_cell(d.p_value)}, {d.seeds} seeds: {verdict} "
        f"(the plan's test: two-sided, alpha {c.size.alpha})."
    )


def secondary_table(c: Confirmation) -> str:
    """The 2017 test sets' differences, p Holm-adjusted over the two: they decide nothing."""
    differences = [c.difference(name) for name in SECONDARY]
    adjusted = holm([d.p_value for d in differences])
    rows = [
        f"{name} | {d.mean:+.2f} | {interval(d)} | {p_cell(d.p_value)} | {p_cell(p)}"
        for name, d, p in zip(SECONDARY, differences, adjusted, strict=True)
    ]
    return table("secondary test set | chosen minus today's | 95% interval | p | Holm p", rows)


def gates_text(c: Confirmation) -> str:
    keeps_up, slow = c.keeps_up, c.slow_difference
    return "\n".join(
        [
            f"1. The reported checkpoint keeps up: its val BLEU minus the run's best validation, "
            f"mean over the chosen runs {keeps_up:+.2f} (at least {KEEPS_UP}): "
            f"{'passed' if keeps_up >= KEEPS_UP else 'failed'}.",
            f"2. A machine a quarter as fast (trainer.max_steps={SLOW_STEPS}, seed {FIRST_SEED}): "
            f"chosen minus today's {slow:+.2f} on {HEADLINE} (at least {SLOW_MARGIN}): "
            f"{'passed' if slow >= SLOW_MARGIN else 'failed'}.",
        ]
    )


def machines_table(c: Confirmation) -> str:
    """Each arm's headline figure per kind of machine with the seeds it rests on (the README's
    row), and the pairs' mean difference there (exploratory where the pairs span kinds)."""
    kinds: dict[str, list[Pair]] = defaultdict(list)
    for seed in c.seeds:
        kinds[c.pairs[seed].today.machine].append(c.pairs[seed])
    rows = []
    for kind, pairs in kinds.items():
        today = [figure(p.today, c.incumbent, HEADLINE) for p in pairs]
        chosen = [figure(p.chosen, c.chosen, HEADLINE) for p in pairs]
        seeds = ", ".join(str(p.seed) for p in pairs)
        rows.append(
            f"{kind} | {len(pairs)} ({seeds}) | {mean_std_cell(*mean_std(today))}"
            f" | {mean_std_cell(*mean_std(chosen))}"
            f" | {number(mean(chosen) - mean(today), sign='+')}"
        )
    return table("machine | seeds | today's recipe | the chosen | mean difference", rows)


def decision_text(c: Confirmation) -> str:
    if c.decision:
        return f"**The default changes to {c.chosen.title}.**"
    reasons = [
        *([] if c.better else ["it is not shown better"]),
        *([] if c.keeps_up >= KEEPS_UP else ["its reported checkpoint falls behind"]),
        *([] if c.slow_difference >= SLOW_MARGIN else ["it falls behind on a slow machine"]),
    ]
    return f"**The default stays** ({today_title(c)}): {'; '.join(reasons)}."


def today_title(c: Confirmation) -> str:
    return f"today's recipe, {c.incumbent.title}"


def verdict_text(c: Confirmation) -> str:
    if c.waiting:
        return (
            f"No look yet: the plan's one look waits for {'; '.join(c.waiting)}. The test "
            "figures stay unread until then."
        )
    parts = [primary_text(c), secondary_table(c), "The plan's gates on speed:", gates_text(c)]
    kinds = "" if len({p.today.machine for p in c.pairs.values()}) == 1 else " (exploratory)"
    parts += [f"By kind of machine{kinds}:", machines_table(c), decision_text(c)]
    return "\n\n".join(parts)


def run_of(c: Confirmation, pair: Pair, candidate: Candidate) -> Run:
    """The run of `pair` that trained `candidate`'s arm."""
    return pair.today if candidate.arm == c.incumbent.arm else pair.chosen


def headline_figures(
    c: Confirmation, pairs: Sequence[Pair], candidate: Candidate
) -> list[float | None]:
    """`candidate`'s test_2016_flickr figure in each pair (None where its run did not score it)."""
    return [figure(run_of(c, p, candidate), candidate, HEADLINE) for p in pairs]


def apart_text(c: Confirmation) -> str | None:
    """Exploratory, after the look: the chosen candidate's two changes (its arm's setting, its
    checkpoint) apart, where every run of both arms scored its best checkpoint and its average;
    None where they did not, or where both candidates come from one arm."""
    arms = (c.incumbent.arm, c.chosen.arm)
    candidates = [Candidate(arm, checkpoint) for arm in arms for checkpoint in CHECKPOINTS]
    pairs = [c.pairs[seed] for seed in c.seeds]
    if arms[0] == arms[1] or any(
        None in headline_figures(c, [*pairs, c.slow], k) for k in candidates
    ):
        return None
    means = [
        f"{k.title} | {number(mean(headline_figures(c, pairs, k)))}"
        f" | {number(headline_figures(c, [c.slow], k)[0])}"
        for k in candidates
    ]
    changes = [(Candidate(arm, "best"), Candidate(arm, "averaged")) for arm in arms]
    changes.append((Candidate(arms[0], "best"), Candidate(arms[1], "best")))
    differences = []
    for before, after in changes:
        d = paired_difference(headline_figures(c, pairs, before), headline_figures(c, pairs, after))
        slow = headline_figures(c, [c.slow], after)[0] - headline_figures(c, [c.slow], before)[0]
        differences.append(
            f"{after.title} minus {before.title} | {d.mean:+.2f} | {interval(d)}"
            f" | {number(slow, sign='+')}"
        )
    return "\n\n".join(
        [
            "## The two changes apart (exploratory)",
            "Chosen after the look: every run of both arms also scored the average of its last 5 "
            f"checkpoints, so the pairs separate the arm's setting from the averaging. {HEADLINE}, "
            f"beam 5; the slow pair is one seed (trainer.max_steps={SLOW_STEPS}).",
            table(f"candidate | mean over the {len(pairs)} pairs | the slow pair", means),
            table("change | mean difference | 95% interval | the slow pair", differences),
        ]
    )


def confirmation_text(c: Confirmation, source: str, slow_source: str) -> str:
    """The confirmation as markdown: what it compares, the pairs, the slow pair, the verdict."""
    looked = not c.waiting
    planned = [c.pairs[seed] for seed in c.seeds if seed in c.pairs]
    parts = [
        "# The recipe confirmation",
        f"Regenerated by `python scripts/confirm_recipe.py sweep={source} slow={slow_source}` "
        'under the plan in docs/results.md ("The plan of the confirmation"): '
        f"{c.chosen.title} against {today_title(c)}, on {seeds_text(c.seeds)} ({len(c.seeds)} "
        "pairs, from the power calculation in selection.md), each pair's runs alone on one "
        "machine, one look. Test figures are detokenized cased sacreBLEU, beam 5.",
        "## The pairs",
        pairs_table(c, planned, looked),
        f"## The slow pair (trainer.max_steps={SLOW_STEPS})",
        pairs_table(c, [c.slow] if c.slow else [], looked),
        "## The verdict",
        verdict_text(c),
    ]
    apart = apart_text(c) if looked else None
    if apart:
        parts.append(apart)
    if c.refused:
        parts += ["## Runs not counted", "\n".join(f"- {why}" for why in c.refused)]
    return "\n\n".join(parts) + "\n"
