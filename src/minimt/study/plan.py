"""A study's plans, read from YAML files (configs/plan; docs/plans.md gives the schema): per
protocol, the families of seed-paired comparisons fixed before their runs, each family's tests
judged together (Holm) at its alpha, at one look or at several (group-sequential).

A plan file is checked as it is read: anything wrong is a PlanError naming the file, the key and
what it takes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from minimt.data.length_split import POOLED_LONG
from minimt.errors import MinimtError

HEADLINE, LONG_BUCKETS = "headline", "long_buckets"  # endpoints beside a named test set
# A family's claims: a difference either way and equivalence within the margin, or that the
# system is worse than the reference by less than the margin (one-sided)
DIFFERENCE_AND_EQUIVALENCE, NON_INFERIORITY = "difference_and_equivalence", "non_inferiority"
WRITTEN_AFTER = "plan written after the data"


class PlanError(MinimtError):
    """A plan file that cannot be read as a plan; the message names the file and the key."""


@dataclass(frozen=True)
class Contrast:
    """Arm `system` against arm `reference` (configs/arm), seed-paired, on the headline test set,
    on `test_set` where the plan names one, or (long_buckets) on each long_* test set both have;
    on `seeds` where the plan fixes them."""

    system: str
    reference: str
    long_buckets: bool = False
    seeds: tuple[int, ...] | None = None
    test_set: str | None = None

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

    question: str  # Q1, Q2, ...
    title: str  # the question in words
    tests: tuple[Contrast | Interaction, ...]
    look: int = 1
    alpha: float | None = None
    exploratory: str = ""  # why its verdicts are exploratory whatever the protocol's plan
    # A group-sequential plan (minimt.study.sequential): the seeds in at each look, counted from
    # the first of each test's seeds; () for one look once every planned seed is in.
    looks: tuple[int, ...] = ()
    overrides: tuple[str, ...] = ()  # the train.py overrides that run its seeds
    on_seeds: tuple[int, ...] = ()  # the seeds its tests are restricted to; (): every seed
    claims: str = DIFFERENCE_AND_EQUIVALENCE
    margin: float | None = None  # BLEU, of equivalence or non-inferiority (None: the report's)

    @property
    def planned(self) -> bool:
        return any(test.seeds is not None for test in self.tests)


@dataclass(frozen=True)
class Plan:
    """One plan file: the families it fixes for `protocol` (None: for every protocol that no
    plan names), in the file's order."""

    name: str  # the file's path under its plan folder, without .yaml
    protocol: str | None
    families: tuple[Family, ...]
    # Runs from before plans were files, counted without the plan's hash (scripts/study.py)
    accepted_runs: Path | None = None


@dataclass(frozen=True)
class Plans:
    """The plans of a plan folder, in the order of their names."""

    plans: tuple[Plan, ...]

    def families_of(self, protocol: str) -> tuple[Family, ...]:
        """The families of the plans naming `protocol`, or (none does) of those naming none."""
        named = [plan for plan in self.plans if plan.protocol == protocol]
        found = named or [plan for plan in self.plans if plan.protocol is None]
        return tuple(family for plan in found for family in plan.families)

    @property
    def families(self) -> tuple[Family, ...]:
        return tuple(family for plan in self.plans for family in plan.families)


def load_plans(folder: Path) -> Plans:
    """Every plan file under `folder` (*.yaml, subfolders included), in the order of their
    paths."""
    if not folder.is_dir():
        raise PlanError(f"plans={folder} is not a folder; name the folder of your plan files")
    return Plans(tuple(load_plan(path, folder) for path in sorted(folder.rglob("*.yaml"))))


def load_plan(path: Path, folder: Path | None = None) -> Plan:
    """The plan file `path`, named by its path under `folder` (default: the file's own folder,
    where the plans it names are found)."""
    folder = folder or path.parent
    if not path.is_file():
        raise PlanError(f"plan {path} is not a file; name a plan file (configs/plan/*.yaml)")
    data = read_yaml(path)
    check_amendment(path, data.get("amends"))
    families = written_after(path, data, folder) + families_in(path, data)
    name = path.relative_to(folder).with_suffix("").as_posix()
    return Plan(name, data["protocol"], families, accepted_runs_of(path, data))


def accepted_runs_of(path: Path, data: dict) -> Path | None:
    """The folder of the runs a plan written before its file counts without its hash (relative
    to the plan file)."""
    accepted = data.get("accepted_runs")
    if accepted is None:
        return None
    if not isinstance(accepted, str) or not (path.parent / accepted).is_dir():
        raise PlanError(
            f"plan {path}: accepted_runs must be a folder of runs, relative to the plan"
        )
    return (path.parent / accepted).resolve()


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise PlanError(
            f"plan {path} is not valid YAML ({one_line(error)}); fix its syntax"
        ) from error
    if not isinstance(data, dict):
        raise PlanError(f"plan {path} holds no mapping; see docs/plans.md for a plan's keys")
    check_keys(path, "", data, PLAN_KEYS, required=("protocol", "questions", "families"))
    return data


PLAN_KEYS = ("protocol", "questions", "families", "written_after_the_data", "amends")
PLAN_KEYS += ("accepted_runs",)
FAMILY_KEYS = ("question", "look", "alpha", "seeds", "looks", "endpoint", "overrides")
FAMILY_KEYS += ("tests", "arms", "reference", "claims", "margin")
TEST_KEYS = ("test", "seeds")
RUNNER_KEYS = ("arm", "trainer.seed", "hydra.sweep.dir", "hydra.sweep.subdir")
CONTRAST = re.compile(r"^(\w+) vs (\w+)$")
INTERACTION = re.compile(r"^\((\w+) - (\w+)\) - \((\w+) - (\w+)\)$")


def families_in(path: Path, data: dict) -> tuple[Family, ...]:
    """The plan's own families, each checked."""
    protocol = data["protocol"]
    if protocol is not None and not isinstance(protocol, str):
        raise PlanError(f"plan {path}: protocol must be a protocol's name (e.g. study_cpu) or null")
    titles = data["questions"]
    if not isinstance(titles, dict) or not all(isinstance(t, str) and t for t in titles.values()):
        raise PlanError(f"plan {path}: questions must map each question (Q1) to its title")
    families = data["families"]
    if not isinstance(families, list) or not families:
        raise PlanError(f"plan {path}: families must be a non-empty list of families")
    return tuple(family_of(path, f"families[{i}]", f, titles) for i, f in enumerate(families))


def family_of(path: Path, where: str, data: object, titles: dict) -> Family:
    if not isinstance(data, dict):
        raise PlanError(f"plan {path}: {where} must be a mapping (question, tests, ...)")
    check_keys(path, where, data, FAMILY_KEYS, required=("question",))
    question = str(data["question"])
    if question not in titles:
        raise PlanError(f"plan {path}: {where}.question {question} has no title under questions")
    seeds = seed_list(path, f"{where}.seeds", data.get("seeds"))
    endpoint = data.get("endpoint", HEADLINE)
    if not isinstance(endpoint, str) or not endpoint:
        raise PlanError(
            f"plan {path}: {where}.endpoint must be {HEADLINE}, {LONG_BUCKETS}, "
            f"{POOLED_LONG} or a test set's name"
        )
    tests = tests_of(path, where, data, seeds, endpoint)
    alpha = data.get("alpha")
    if alpha is not None and not (isinstance(alpha, float) and 0 < alpha < 1):
        raise PlanError(f"plan {path}: {where}.alpha must be a number between 0 and 1")
    look = data.get("look", 1)
    if not isinstance(look, int) or look < 1:
        raise PlanError(f"plan {path}: {where}.look must be a positive integer (the look's number)")
    looks = looks_of(path, where, data.get("looks"), tests, alpha)
    overrides = data.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise PlanError(f"plan {path}: {where}.overrides must be a list of train.py overrides")
    if taken := [o for o in overrides if o.split("=")[0].lstrip("+~") in RUNNER_KEYS]:
        raise PlanError(
            f"plan {path}: {where}.overrides sets {taken[0]}: the plan's arms, seeds and "
            "folders set it"
        )
    claims, margin = claims_of(path, where, data, looks)
    return Family(
        question,
        titles[question],
        tests,
        look,
        alpha,
        looks=looks,
        overrides=tuple(overrides),
        claims=claims,
        margin=margin,
    )


def claims_of(path: Path, where: str, data: dict, looks: tuple) -> tuple[str, float | None]:
    """The family's claims and margin."""
    claims = data.get("claims", DIFFERENCE_AND_EQUIVALENCE)
    if claims not in (DIFFERENCE_AND_EQUIVALENCE, NON_INFERIORITY):
        raise PlanError(
            f"plan {path}: {where}.claims must be {DIFFERENCE_AND_EQUIVALENCE} or {NON_INFERIORITY}"
        )
    if claims == NON_INFERIORITY and looks:
        raise PlanError(f"plan {path}: {where}: a {NON_INFERIORITY} family has one look")
    margin = data.get("margin")
    if margin is not None and not (isinstance(margin, int | float) and margin > 0):
        raise PlanError(f"plan {path}: {where}.margin must be a positive number of BLEU")
    return claims, None if margin is None else float(margin)


def tests_of(
    path: Path, where: str, data: dict, seeds: tuple[int, ...] | None, endpoint: str
) -> tuple[Contrast | Interaction, ...]:
    """The family's tests: its `tests`, or each of its `arms` against its `reference`."""
    if ("tests" in data) == ("arms" in data or "reference" in data):
        raise PlanError(f"plan {path}: {where} needs either tests or arms with a reference")
    if "tests" in data:
        entries = data["tests"]
        if not isinstance(entries, list) or not entries:
            raise PlanError(f"plan {path}: {where}.tests must be a non-empty list")
    else:
        arms, reference = data.get("arms"), data.get("reference")
        if not isinstance(arms, list) or not arms or not isinstance(reference, str):
            raise PlanError(f"plan {path}: {where} needs arms (a list) and reference (an arm)")
        entries = [f"{arm} vs {reference}" for arm in arms]
    return tuple(
        test_of(path, f"{where}.tests[{i}]", entry, seeds, endpoint)
        for i, entry in enumerate(entries)
    )


def test_of(
    path: Path, where: str, entry: object, seeds: tuple[int, ...] | None, endpoint: str
) -> Contrast | Interaction:
    """'a vs b', '(a - b) - (c - d)', or a mapping with `test` and its own `seeds`."""
    if isinstance(entry, dict):
        check_keys(path, where, entry, TEST_KEYS, required=("test",))
        seeds = seed_list(path, f"{where}.seeds", entry.get("seeds", seeds))
        entry = entry["test"]
    text = entry if isinstance(entry, str) else ""
    options = {"long_buckets": endpoint == LONG_BUCKETS}
    options["test_set"] = None if endpoint in (HEADLINE, LONG_BUCKETS) else endpoint
    if match := CONTRAST.match(text):
        return Contrast(*match.groups(), seeds=seeds, **options)
    if match := INTERACTION.match(text):
        if endpoint != HEADLINE:
            raise PlanError(f"plan {path}: {where}: an interaction is tested on the headline only")
        first, second = Contrast(*match.groups()[:2]), Contrast(*match.groups()[2:])
        return Interaction(first, second, seeds=seeds)
    raise PlanError(
        f"plan {path}: {where} is {entry!r}; write 'system vs reference' or "
        "'(a - b) - (c - d)' with arm names"
    )


def seed_list(path: Path, where: str, seeds: object) -> tuple[int, ...] | None:
    if seeds is None:
        return None
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise PlanError(f"plan {path}: {where} must be a list of distinct seeds (integers >= 0)")
    return tuple(seeds)


def looks_of(
    path: Path,
    where: str,
    looks: object,
    tests: Sequence[Contrast | Interaction],
    alpha: float | None,
) -> tuple[int, ...]:
    """A group-sequential family's looks: increasing seed counts, the last one every seed of
    each test (which all have the same number of seeds)."""
    if looks is None:
        return ()
    sizes = {len(test.seeds or ()) for test in tests}
    if (
        not isinstance(looks, list)
        or not looks
        or not all(isinstance(n, int) and n >= 2 for n in looks)
        or looks != sorted(set(looks))
    ):
        raise PlanError(f"plan {path}: {where}.looks must be increasing seed counts (2 or more)")
    if len(sizes) != 1 or looks[-1] != sizes.pop():
        raise PlanError(f"plan {path}: {where}.looks must end at the seeds every test has")
    if len({getattr(test, "reference", None) for test in tests} - {None}) != 1 or not all(
        isinstance(test, Contrast) for test in tests
    ):
        raise PlanError(f"plan {path}: {where} has looks, so its tests are arms vs one reference")
    if alpha is None:
        raise PlanError(f"plan {path}: {where} has looks, so it needs its alpha")
    return tuple(looks)


def written_after(path: Path, data: dict, folder: Path) -> tuple[Family, ...]:
    """The families a plan takes from another plan written after this protocol's `seeds` had
    been analysed: on those seeds only, exploratory (written_after_the_data: {plan, seeds})."""
    after = data.get("written_after_the_data")
    if after is None:
        return ()
    if not isinstance(after, dict) or set(after) != {"plan", "seeds"}:
        raise PlanError(
            f"plan {path}: written_after_the_data must name a plan and the seeds analysed "
            "before it was written ({plan: questions, seeds: [1, 2, 3]})"
        )
    earlier = folder / f"{after['plan']}.yaml"
    if not earlier.is_file():
        raise PlanError(f"plan {path}: written_after_the_data.plan: no plan file {earlier}")
    seeds = seed_list(path, "written_after_the_data.seeds", after["seeds"])
    return tuple(
        replace(family, exploratory=WRITTEN_AFTER, on_seeds=seeds)
        for family in families_in(earlier, read_yaml(earlier))
    )


def check_amendment(path: Path, amends: object) -> None:
    """`amends`: the hash of the plan's version it changes, and why."""
    if amends is None:
        return
    if (
        not isinstance(amends, dict)
        or set(amends) != {"hash", "reason"}
        or not all(isinstance(value, str) and value for value in amends.values())
    ):
        raise PlanError(
            f"plan {path}: amends must give the hash of the version it changes and the reason "
            "({hash: <plan.json's last hash>, reason: ...})"
        )


def check_keys(
    path: Path, where: str, data: dict, known: Sequence[str], required: Sequence[str]
) -> None:
    prefix = f"{where}." if where else ""
    for key in data:
        if key not in known:
            raise PlanError(
                f"plan {path}: unknown key {prefix}{key}; a plan takes {', '.join(known)}"
            )
    for key in required:
        if key not in data:
            raise PlanError(f"plan {path}: {prefix}{key} is missing (docs/plans.md)")


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())
