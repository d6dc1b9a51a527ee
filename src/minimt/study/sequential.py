"""Group-sequential boundaries: a test looked at after several groups of seeds, stopping at the
first look whose statistic crosses its boundary, with the error rate spent over the looks by a
spending function, so that the chance of a false verdict at any look stays at most alpha.

The spending function is Lan and DeMets' O'Brien-Fleming type, alpha(t) = 2 - 2 Phi(z_{1-alpha/2}
/ sqrt(t)) at information fraction t (seeds so far / planned maximum): almost nothing is spent at
an early look, nearly the whole alpha at the last.

Boundaries come in two scales:
- `z_boundaries`: for a statistic with known variance, the joint normal of the looks (correlation
  sqrt(t_j / t_k)) integrated look by look on a grid (Armitage, McPherson and Rowe's recursion).
- `t_boundaries`: for the paired t statistic, whose variance is estimated from the seeds in
  (n - 1 degrees of freedom at a look of n seeds): the first look's boundary is the exact t
  quantile, each later one the quantile, among simulated paths that have not crossed yet, that
  spends that look's share. The paths are drawn with a fixed seed: the boundaries are the same on
  every machine and every run of the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import stats
from scipy.optimize import brentq

CALIBRATION_PATHS = 400_000  # simulated paths behind each t boundary after the first look
CALIBRATION_SEED = 20_261_128


def obrien_fleming_spent(alpha: float, fraction: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spent by information fraction `fraction` (0, 1]."""
    return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(fraction)))


def spent_at_each_look(alpha: float, looks: Sequence[int]) -> list[float]:
    """The alpha each look spends (summing to alpha), looks given as cumulative seed counts."""
    spent = [obrien_fleming_spent(alpha, n / looks[-1]) for n in looks]
    return [b - a for a, b in zip([0.0, *spent], spent, strict=False)]


def z_boundaries(alpha: float, looks: Sequence[int], grid: int = 4001) -> list[float]:
    """One-sided boundaries c_k for the standardized cumulative statistic Z_k: under the null,
    P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) is look k's share of `alpha`.

    The running sum S_k = Z_k sqrt(n_k) has independent normal increments of variance n_k -
    n_{k-1}; the density of S_k on the paths that have not stopped is carried from look to look
    on a grid and integrated with the trapezoid rule."""
    shares = spent_at_each_look(alpha, looks)
    boundaries: list[float] = []
    points: np.ndarray | None = None
    density: np.ndarray | None = None
    previous = 0
    for n, share in zip(looks, shares, strict=True):
        step = n - previous
        if points is None:
            boundary = float(stats.norm.isf(share))
            points = np.linspace(-10 * np.sqrt(n), boundary * np.sqrt(n), grid)
            density = stats.norm.pdf(points, scale=np.sqrt(n))
        else:
            crossing = (share, n, step, points, density)
            boundary = float(brentq(excess_crossing, 0.0, 10.0, args=crossing, xtol=1e-10))
            below = np.linspace(-10 * np.sqrt(n), boundary * np.sqrt(n), grid)
            kernel = stats.norm.pdf((below[:, None] - points[None, :]) / np.sqrt(step))
            density = np.trapezoid(kernel * density[None, :], points, axis=1) / np.sqrt(step)
            points = below
        boundaries.append(boundary)
        previous = n
    return boundaries


def excess_crossing(
    c: float, share: float, n: int, step: int, points: np.ndarray, density: np.ndarray
) -> float:
    """P(the running sum, at `density` over `points` after the last look, is at least c sqrt(n)
    after `step` more seeds), less `share`: 0 at the boundary that spends `share`."""
    tail = stats.norm.sf((c * np.sqrt(n) - points) / np.sqrt(step))
    return float(np.trapezoid(density * tail, points)) - share


@cache
def t_boundaries(alpha: float, looks: tuple[int, ...]) -> tuple[float, ...]:
    """One-sided boundaries for the paired t statistic (mean / (sd / sqrt(n)), n - 1 degrees of
    freedom) at looks after `looks` seeds (cumulative): under the null, the chance that it first
    reaches its boundary at look k is look k's share of `alpha`, for any true sd."""
    shares = spent_at_each_look(alpha, looks)
    boundaries = [float(stats.t.isf(shares[0], looks[0] - 1))]
    paths = null_t_paths(looks)
    going = paths[:, 0] < boundaries[0]
    for k, share in enumerate(shares[1:], start=1):
        statistic = paths[going, k]
        # look k's share of all paths, taken from the top of those still going
        crossing = int(round(share * len(paths)))
        boundary = float(np.sort(statistic)[len(statistic) - crossing])
        boundaries.append(boundary)
        going &= paths[:, k] < boundary
    return tuple(boundaries)


@cache
def null_t_paths(looks: tuple[int, ...]) -> np.ndarray:
    """(CALIBRATION_PATHS, len(looks)) paired t statistics at each look of seeds drawn under the
    null (mean 0; the t statistic does not depend on the sd)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    draws = rng.standard_normal((CALIBRATION_PATHS, looks[-1]))
    return np.stack([t_statistics(draws[:, :n]) for n in looks], axis=1)


def t_statistics(differences: np.ndarray) -> np.ndarray:
    """(P,) paired t statistics of (P, n) per-seed differences against 0."""
    n = differences.shape[1]
    return differences.mean(axis=1) / (differences.std(axis=1, ddof=1) / np.sqrt(n))


def nominal_p(alpha: float, looks: tuple[int, ...]) -> list[float]:
    """Each look's t boundary as the one-sided p-value it stands for at that look's df."""
    return [
        float(stats.t.sf(c, n - 1)) for c, n in zip(t_boundaries(alpha, looks), looks, strict=True)
    ]


# A family of such tests: Holm's procedure in Maurer and Bretz's graphical form. Each open
# hypothesis is tested at level alpha / (hypotheses not yet rejected) against the boundary of
# that level; a rejection passes its level on to the others, which are tested again at the same
# look against their new boundary. A hypothesis whose arm stopped for another reason keeps its
# share (it is no longer tested): the family-wise error stays at most alpha.
DIFFERENCE, EQUIVALENCE = "difference", "equivalence"


def boundary(claim: str, alpha: float, looks: tuple[int, ...], look: int) -> float:
    """The boundary of `claim`'s statistic at `look` (0-based) for a hypothesis at level alpha:
    two-sided for a difference (|t|, alpha / 2 a side), each side of TOST for equivalence."""
    side_alpha = alpha / 2 if claim == DIFFERENCE else alpha
    return t_boundaries(side_alpha, looks)[look]


def claim_statistics(differences: np.ndarray, margin: float) -> dict[str, np.ndarray]:
    """(...,) statistics of (..., n) per-seed differences: |t| against 0, and the smaller of the
    two TOST t statistics against -margin and +margin."""
    n = differences.shape[-1]
    mean = differences.mean(axis=-1)
    se = differences.std(axis=-1, ddof=1) / np.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            DIFFERENCE: np.abs(mean) / se,
            EQUIVALENCE: np.minimum((mean + margin) / se, (margin - mean) / se),
        }


def graphical_holm_look(
    statistics: np.ndarray,
    tested: np.ndarray,
    rejected: np.ndarray,
    claim: str,
    alpha: float,
    looks: tuple[int, ...],
    look: int,
) -> np.ndarray:
    """(P, m) rejections after `look` (0-based), from (P, m) statistics at that look, which
    hypotheses are `tested` there (their arm still runs) and which were `rejected` before."""
    rejected = rejected.copy()
    m = statistics.shape[1]
    for _ in range(m):
        levels = alpha / np.maximum(m - rejected.sum(axis=1), 1)
        new = np.zeros_like(rejected)
        for remaining in range(1, m + 1):
            at_level = levels == alpha / remaining
            if not at_level.any():
                continue
            crossing = statistics >= boundary(claim, alpha / remaining, looks, look)
            new |= at_level[:, None] & crossing & tested & ~rejected
        if not new.any():
            break
        rejected |= new
    return rejected


def simulate_plan(
    effects: Sequence[float],
    sd: float,
    looks: tuple[int, ...],
    alpha: float,
    margin: float,
    draws: int,
    seed: int,
) -> dict[str, np.ndarray | float]:
    """Run a plan `draws` times on simulated seeds: m = len(effects) arms against one reference,
    per-seed differences normal with mean `effects[i]` and sd `sd`, the arms' differences
    correlated 0.5 (they share the reference's run). An arm stops at the first look that
    decides either claim for it; the reference runs while any arm does.

    Returns the share of draws that rejected each hypothesis of each claim (P(claim shown) per
    arm), the share with a false rejection of each claim (a difference shown where the effect is
    0; equivalence shown where |effect| >= margin), and the expected number of runs."""
    rng = np.random.default_rng(seed)
    m = len(effects)
    # per seed: each arm's BLEU and the reference's, each sd / sqrt(2): differences have sd `sd`
    arm = rng.standard_normal((draws, m, looks[-1])) * sd / np.sqrt(2)
    reference = rng.standard_normal((draws, 1, looks[-1])) * sd / np.sqrt(2)
    differences = arm - reference + np.asarray(effects)[None, :, None]
    rejected = {claim: np.zeros((draws, m), bool) for claim in (DIFFERENCE, EQUIVALENCE)}
    running = np.ones((draws, m), bool)
    runs = np.zeros(draws)
    previous = 0
    for k, n in enumerate(looks):
        runs += (running.sum(axis=1) + running.any(axis=1)) * (n - previous)
        statistics = claim_statistics(differences[:, :, :n], margin)
        for claim in rejected:
            rejected[claim] = graphical_holm_look(
                statistics[claim], running, rejected[claim], claim, alpha, looks, k
            )
        running &= ~(rejected[DIFFERENCE] | rejected[EQUIVALENCE])
        previous = n
    true = np.asarray(effects)
    false = {
        DIFFERENCE: (rejected[DIFFERENCE] & (true == 0)).any(axis=1).mean(),
        EQUIVALENCE: (rejected[EQUIVALENCE] & (np.abs(true) >= margin)).any(axis=1).mean(),
    }
    return (
        {"shown_" + claim: rejected[claim].mean(axis=0) for claim in rejected}
        | {"false_" + claim: float(false[claim]) for claim in false}
        | {"expected_runs": float(runs.mean())}
    )


CLAIMS = (DIFFERENCE, EQUIVALENCE)


@dataclass(frozen=True)
class Decision:
    """One comparison of a group-sequential family after the looks analysed so far."""

    shown: tuple[str, ...]  # the claims shown (DIFFERENCE, EQUIVALENCE); () while undecided
    look: int | None  # the look (1-based) that decided it; None while undecided
    levels: dict[str, float]  # each claim's level at the last look it was tested
    boundaries: dict[str, float]  # the t boundary of that level at that look


def decide(
    differences: Sequence[Sequence[float]], looks: tuple[int, ...], alpha: float, margin: float
) -> tuple[int, list[Decision]]:
    """(looks analysed, each comparison's decision) from each comparison's per-seed differences
    in its plan's seed order. A look is analysed once every comparison still running has its
    seeds; a comparison stops at the look that shows either claim (both are tested there)."""
    m = len(differences)
    rejected = {claim: np.zeros((1, m), bool) for claim in CLAIMS}
    running = np.ones((1, m), bool)
    decided: list[int | None] = [None] * m
    levels: list[dict[str, float]] = [{} for _ in range(m)]
    bounds: list[dict[str, float]] = [{} for _ in range(m)]
    analysed = 0
    for k, n in enumerate(looks):
        if any(running[0, i] and len(differences[i]) < n for i in range(m)):
            break
        statistics = {claim: np.full((1, m), -np.inf) for claim in CLAIMS}
        for i in np.flatnonzero(running[0]):
            found = claim_statistics(np.asarray(differences[i][:n], float)[None, :], margin)
            for claim in CLAIMS:
                statistics[claim][0, i] = found[claim][0]
        tested = running.copy()
        for claim in CLAIMS:
            rejected[claim] = graphical_holm_look(
                statistics[claim], tested, rejected[claim], claim, alpha, looks, k
            )
            for i in np.flatnonzero(tested[0]):
                level = level_used(
                    statistics[claim][0, i], rejected[claim][0], i, claim, alpha, looks, k
                )
                levels[i][claim], bounds[i][claim] = level, boundary(claim, level, looks, k)
        newly = tested[0] & (rejected[DIFFERENCE][0] | rejected[EQUIVALENCE][0])
        for i in np.flatnonzero(newly):
            decided[i] = k + 1
        running[0] &= ~newly
        analysed = k + 1
        if not running.any():
            break
    decisions = [
        Decision(
            tuple(claim for claim in CLAIMS if rejected[claim][0, i]),
            decided[i],
            levels[i],
            bounds[i],
        )
        for i in range(m)
    ]
    return analysed, decisions


def level_used(
    statistic: float,
    rejected: np.ndarray,
    i: int,
    claim: str,
    alpha: float,
    looks: tuple[int, ...],
    look: int,
) -> float:
    """The level hypothesis i was tested at, at `look`: the one it holds once the others'
    rejections are passed on (open), or the smallest level up to that whose boundary its
    statistic reached (rejected there)."""
    m = len(rejected)
    held = alpha / max(m - int(rejected.sum()) + int(rejected[i]), 1)
    if not rejected[i]:
        return held
    levels = [alpha / r for r in range(m, 0, -1) if alpha / r <= held]
    return next(a for a in levels if statistic >= boundary(claim, a, looks, look))
