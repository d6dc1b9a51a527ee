"""A plan run look by look (scripts/study.py). Its first call freezes the plan in the study
folder's plan.json: the plan's hash, the code's commit and the time. Each call trains what the
current look still needs through train.py's sweeps, every run carrying the plan's hash in its
provenance, then analyses the look once all its runs are in. A run the plan did not start, or
that trained from another commit or under another protocol, is listed and not counted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from minimt.atomic import write_text
from minimt.errors import MinimtError
from minimt.provenance import PLAN_VARIABLE, source_commit, utc_now
from minimt.study.answers import Answer, seed_list
from minimt.study.plan import Family, Plan, PlanError, Plans, read_yaml
from minimt.study.report import Report, report_of, write_report
from minimt.study.runs import Run, load_sweep
from minimt.study.significance import Rules

RECORD = "plan.json"
RUN_DIR = "${hydra.runtime.choices.arm}/seed${trainer.seed}"  # a run's folder in its sweep


class StudyError(MinimtError):
    """A plan that cannot go on as it stands (edited, dirty code, a run in a planned place that
    the plan did not start, a failed sweep); the message says what to do."""


def plan_hash(data: dict) -> str:
    """The plan's canonical hash: its mapping as sorted, compact JSON (comments, layout and key
    order do not count)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def freeze(path: Path, study_dir: Path, allow_dirty: bool) -> dict:
    """study_dir/plan.json: written at the plan's first call; at a later one, the plan file must
    hash as its last version did, or name that version in `amends` with its reason (a new
    version)."""
    data = read_yaml(path)
    current, record_path = plan_hash(data), study_dir / RECORD
    if not record_path.is_file():
        commit = source_commit()
        if commit and commit.endswith("+dirty") and not allow_dirty:
            raise StudyError(
                f"the code has uncommitted changes ({commit}): commit them before the plan's "
                f"first run, or pass allow_dirty=true (recorded in {record_path})"
            )
        record = {"plan": str(path), "commit": commit, "allow_dirty": allow_dirty, "versions": []}
    else:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        last = record["versions"][-1]
        if current == last["hash"]:
            return record
        if (data.get("amends") or {}).get("hash") != last["hash"]:
            raise StudyError(
                f"plan {path} changed since it was frozen ({last['frozen_utc']}, hash "
                f"{last['hash'][:12]}, now {current[:12]}): restore it, or make the change an "
                f"amendment: amends: {{hash: {last['hash']}, reason: ...}}"
            )
    reason = (data.get("amends") or {}).get("reason", "")
    record["versions"].append({"hash": current, "frozen_utc": utc_now(), "reason": reason})
    study_dir.mkdir(parents=True, exist_ok=True)
    write_text(record_path, json.dumps(record, indent=2) + "\n")
    return record


def why_not_counted(run: Run, record: dict, protocol: str | None) -> str:
    """ "" for a run this plan started, from the plan's commit, under its protocol; else why the
    run is not counted."""
    provenance = run.provenance
    sessions = provenance.get("sessions") or [provenance]
    hashes = {version["hash"] for version in record["versions"]}
    if any(session.get("plan") not in hashes for session in sessions):
        return "not started by this plan (its provenance has no hash of the plan)"
    commits = {session.get("commit") for session in sessions} - {record["commit"]}
    if commits:
        return f"trained from commit {', '.join(map(str, commits))}, not {record['commit']}"
    if protocol is not None and run.configuration.protocol.name != protocol:
        return f"protocol {run.configuration.protocol.name}, not the plan's {protocol}"
    return ""


def deviations(run: Run, record: dict) -> list[str]:
    """What a counted run did that its plan did not foresee: a restart from update 0 of its
    seed, or a start under an earlier version of the plan."""
    provenance = run.provenance
    found = []
    if discarded := provenance.get("discarded_starts"):
        found.append(f"restarted from update 0 ({len(discarded)} earlier start(s) discarded)")
    versions = [version["hash"] for version in record["versions"]]
    started = {session.get("plan") for session in provenance.get("sessions") or []}
    started &= set(versions)  # none, for a run the plan accepts from before its file
    if earlier := sorted(versions.index(h) + 1 for h in started if h != versions[-1]):
        found.append(f"started under plan version {', '.join(map(str, earlier))}")
    return found


@dataclass
class Look:
    """The families of a plan that train with one set of train.py overrides, their runs in one
    folder, and where the current look stands."""

    overrides: tuple[str, ...]
    folder: Path
    counted: list[Run]
    not_counted: list[tuple[Path, str]]
    answers: dict[Family, Answer | None]
    report: Report | None

    def needed(self) -> dict[str, list[int]]:
        """Per arm, the seeds the current look needs that no counted run has."""
        have = {(run.configuration.name, run.seed) for run in self.counted}
        missing: dict[str, list[int]] = defaultdict(list)
        for family, answer in self.answers.items():
            for arm, seed in look_runs(family, answer):
                if (arm, seed) not in have and seed not in missing[arm]:
                    missing[arm].append(seed)
        return {arm: sorted(seeds) for arm, seeds in missing.items() if seeds}


def look_runs(family: Family, answer: Answer | None) -> list[tuple[str, int]]:
    """(arm, seed) of each run the family's current look needs: every planned run for a family
    of one look; for a group-sequential one, its next look's (the reference and the arms still
    undecided, on the seeds up to that look)."""
    if not family.planned:  # written after the data: answered on the runs there are
        return []
    if not family.looks:
        return [(arm, seed) for test in family.tests for arm in test.arms for seed in test.seeds]
    if answer is None:
        first = family.tests[0]
        arms, seeds = [first.reference, *(t.system for t in family.tests)], first.seeds
        seeds = seeds[: family.looks[0]]
    elif (look := answer.next_look()) is None:
        return []
    else:
        arms, seeds = look
    return [(arm, seed) for arm in arms for seed in seeds]


def survey(plan: Plan, record: dict, study_dir: Path, rules: Rules) -> list[Look]:
    """Each set of overrides of the plan: its counted runs and its families' answers."""
    by_overrides: dict[tuple[str, ...], list[Family]] = defaultdict(list)
    for family in plan.families:
        if not family.planned and not family.exploratory:
            raise PlanError(
                f"plan {plan.name}: {family.question} has no seeds: a plan run needs them"
            )
        by_overrides[family.overrides].append(family)
    accepted = load_sweep(plan.accepted_runs)[0] if plan.accepted_runs else []
    looks = []
    for overrides, families in by_overrides.items():
        key = hashlib.sha256(" ".join(overrides).encode("utf-8")).hexdigest()[:8]
        folder = study_dir / "runs" / key
        found, skipped = load_sweep(folder) if folder.is_dir() else ([], [])
        reasons = [(run, why_not_counted(run, record, plan.protocol)) for run in found]
        counted = [run for run, why in reasons if not why]
        named = {arm for family in families for test in family.tests for arm in test.arms}
        counted += [
            run
            for run in accepted
            if run.configuration.name in named and run.configuration.protocol.name == plan.protocol
        ]
        not_counted = sorted(skipped + [(run.dir, why) for run, why in reasons if why])
        report, answers = None, dict.fromkeys(families)
        if counted:
            own = Plans((Plan(plan.name, plan.protocol, tuple(families)),))
            report = report_of(counted, not_counted, folder, None, folder, rules, own)
            answers |= {a.family: a for a in report.answers if a.family in answers}
        looks.append(Look(overrides, folder, counted, not_counted, answers, report))
    return looks


def train(look: Look, train_script: Path, plan_hash: str) -> signal.Signals | None:
    """Train the runs the look needs: one train.py sweep per set of arms that need the same
    seeds, each run carrying `plan_hash`. Returns the signal that stopped it (forwarded to the
    sweep, which lets its runs save), or None."""
    by_seeds: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for arm, seeds in look.needed().items():
        by_seeds[tuple(seeds)].append(arm)
    for seeds, arms in by_seeds.items():
        blocking = [
            (run_dir, why)
            for run_dir, why in look.not_counted
            if run_dir.parent.name in arms
            and run_dir.name in {f"seed{s}" for s in seeds}
            and (run_dir / "metrics.json").is_file()
        ]
        if blocking:
            run_dir, why = blocking[0]
            raise StudyError(
                f"{run_dir} holds a run the plan needs but cannot count ({why}): move it out "
                f"of {look.folder}, then run the same command again"
            )
        command = [sys.executable, str(train_script), "-m", *look.overrides]
        command += [f"arm={','.join(arms)}", f"trainer.seed={','.join(map(str, seeds))}"]
        command += [f"hydra.sweep.dir={look.folder}", f"hydra.sweep.subdir={RUN_DIR}"]
        status, stopped_by = run_sweep(command, {**os.environ, PLAN_VARIABLE: plan_hash})
        if stopped_by is not None:
            return stopped_by
        if status != 0:
            raise StudyError(
                f"the sweep of {', '.join(arms)} at seeds {seed_list(list(seeds))} ended with "
                f"status {status} (its output is above): fix the cause, then run the same "
                "command again"
            )
    return None


def run_sweep(command: list[str], env: dict[str, str]) -> tuple[int, signal.Signals | None]:
    """Run `command` in its own process group; a Ctrl-C or SIGTERM to this process goes on to
    it once, as to a sweep's launcher. Its exit status, and the signal that stopped it."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    received: list[signal.Signals] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum))
        process.send_signal(signum)

    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, forward) for signum in stops}
    try:
        status = process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return status, received[0] if received else None


def plan_deviations(look: Look, record: dict) -> list[str]:
    """The plan's amendments (each version after the first, with its reason) and what each
    counted run did that the plan did not foresee."""
    found = [
        f"plan version {number} (hash {version['hash'][:12]}, {version['frozen_utc']}): "
        f"{version['reason']}"
        for number, version in enumerate(record["versions"][1:], start=2)
    ]
    root = look.folder
    for run in look.counted:
        name = run.dir.relative_to(root) if run.dir.is_relative_to(root) else run.dir
        found += [f"{name}: {deviation}" for deviation in deviations(run, record)]
    return found


def write_reports(looks: list[Look], record: dict) -> list[Path]:
    """Each look's report (report.md, report.csv, plots) in its runs' folder, the plan's
    deviations listed in report.md."""
    return [
        write_report(replace(look.report, deviations=plan_deviations(look, record)))[0]
        for look in looks
        if look.report is not None
    ]
