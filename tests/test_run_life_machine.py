"""A run's life as a user lives it, in any order: training, a stop (Ctrl-C, SIGTERM, kill -9),
a resume, the same command again, evaluations (two at once), translations, averages, an edited
training file and a moved run directory, each a command in a fresh process. After every one the
run keeps its promises (docs/run-directory.md, docs/operations.md): its checkpoints load with its
tokenizer, no reported evaluation is lost, it is finished only by a training that reached its
budget, a refused command changed nothing, no traceback, no temp file but a kill -9's."""

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from minimt.atomic import TEMP_SUFFIX
from minimt.checkpoint import load_checkpoint, step_checkpoints, step_of
from minimt.data.corpus import parallel_files
from minimt.locks import LOCK_FILE
from minimt.rundir import is_finished, load_model, read_metrics
from tests.helpers import (
    ENV,
    REPO,
    TOY,
    fuzz_settings,
    run_script,
    script_command,
    toy_run_overrides,
)

SIDES = (("src", "de"), ("tgt", "en"))
KEEP = 3  # trainer.keep_checkpoints
SOURCES = "Ein Hund rennt über die Wiese.\nZwei Männer spielen Fußball.\n"
STOPS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "kill -9": signal.SIGKILL}
# What a training command's log says of how it ended
AT_BUDGET = "training stopped at step "  # + "N: trainer.max_steps reached"
STOPPED_IN_LOOP = "resume with the same settings plus resume="
SKIPPED = "skipped: "
DONE = "run directory: "


@dataclass
class Ended:
    """A command that ended: its exit status and output."""

    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        """Everything it printed (Hydra logs a training to stdout)."""
        return self.stdout + self.stderr

    def error_line(self) -> str | None:
        """The one `error: ...` line a refused command printed last, None if it printed none."""
        errors = [line for line in self.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) <= 1, self.log[-3000:]
        if errors:
            assert self.stderr.endswith(errors[0] + "\n"), self.log[-3000:]
        return errors[0] if errors else None

    def budget_step(self) -> int | None:
        """The step at which a training's loop ended at trainer.max_steps, if it did."""
        for line in self.log.splitlines():
            if AT_BUDGET in line and line.endswith("trainer.max_steps reached"):
                return int(line.split(AT_BUDGET)[1].split(":")[0])
        return None


class Started:
    """A command started in a process of its own, its output read as it comes."""

    def __init__(self, script: str, *args: str):
        self.script, self.out, self.err = script, [], []
        self.process = subprocess.Popen(
            script_command(script, *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            cwd=REPO,
        )
        self.readers = [
            threading.Thread(target=lines.extend, args=(stream,), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    def done(self) -> bool:
        """Whether the training printed the line that ends its work."""
        return any(DONE in line or SKIPPED in line for line in self.out + self.err)

    def ended(self) -> Ended:
        self.process.wait(timeout=300)
        for reader in self.readers:
            reader.join(timeout=10)
        return Ended(self.script, self.process.returncode, "".join(self.out), "".join(self.err))


class RunLife(RuleBasedStateMachine):
    def __init__(self, root: Path):
        super().__init__()
        self.root = root
        self.corpus = root / "corpus"
        self.corpus.mkdir(parents=True)
        for _, lang in SIDES:
            shutil.copy(TOY / f"train.{lang}", self.corpus / f"train.{lang}")
        self.run = root / "run"
        self.moves = 0
        self.budget = 0  # the highest trainer.max_steps asked for
        self.last_training: tuple[int, bool, bool] | None = None  # max_steps, resume, new data
        self.reported: dict[str, str] = {}  # eval entry -> the BLEU evaluate.py printed for it
        self.budget_ends: set[int] = set()  # the steps where a training reached its budget
        self.kill_leftovers: set[str] = set()  # temp files a kill -9 may have left (in the run)
        self.tokenizer: str | None = None  # its digest, once the run has a checkpoint

    def teardown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    # What the run holds

    def steps(self) -> list[int]:
        return [step_of(path) for path in step_checkpoints(self.run / "checkpoints")]

    def checkpoints(self) -> set[str]:
        return {path.name for path in (self.run / "checkpoints").glob("*.pt")}

    def listing(self, leave_out: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
        """Every file of the run (but run.lock and `leave_out`): its size and mtime."""
        if not self.run.is_dir():
            return {}
        listing = {}
        for path in self.run.rglob("*"):
            name = path.relative_to(self.run).as_posix()
            if path.is_file() and name != LOCK_FILE and not name.startswith(leave_out):
                stat = path.stat()
                listing[name] = (stat.st_size, stat.st_mtime_ns)
        return listing

    def temp_files(self) -> set[str]:
        if not self.run.is_dir():
            return set()
        return {p.relative_to(self.run).as_posix() for p in self.run.rglob(f"*{TEMP_SUFFIX}")}

    def corpus_changed(self) -> bool:
        """Whether the training files differ from those the newest step checkpoint recorded."""
        newest = step_checkpoints(self.run / "checkpoints")[-1]
        recorded = load_checkpoint(newest)["state"]["corpus"]
        files = parallel_files(self.corpus / "train.de", self.corpus / "train.en")
        return recorded != files.digests

    # Commands

    def training(self, max_steps: int, resume: bool, new_data: bool) -> list[str]:
        toy = [o for o in toy_run_overrides(self.root / "data") if not o.startswith("data.train.")]
        files = [f"data.train.{side}={self.corpus / f'train.{lang}'}" for side, lang in SIDES]
        quick = ["views=false", "data.max_val_pairs=10", "trainer.val_every=1000"]
        quick += ["trainer.save_every=2", f"trainer.keep_checkpoints={KEEP}"]
        quick += ["decoding.test_beam=1", f"trainer.max_steps={max_steps}"]
        where = f"resume={self.run}" if resume else f"hydra.run.dir={self.run}"
        extra = ["resume_new_data=true"] if new_data else []
        return [*toy, *files, *quick, where, *extra]

    def ended(self, started: "Started") -> Ended:
        return self.check_output(started.ended())

    def command(self, script: str, *args: str, stdin: str = "") -> Ended:
        result = run_script(script, *args, stdin=stdin, timeout=300)
        return self.check_output(Ended(script, result.returncode, result.stdout, result.stderr))

    def check_output(self, ended: Ended) -> Ended:
        assert "Traceback" not in ended.log, ended.log[-3000:]
        return ended

    def train(self, max_steps: int, resume: bool, new_data: bool, stop=None) -> None:
        """A training command, stopped by `stop` (signal name, when) where given: when is
        "checkpoint" (once it saved a step checkpoint) or a delay in seconds from its start."""
        self.last_training = (max_steps, resume, new_data)
        self.budget = max(self.budget, max_steps)
        steps, finished = self.steps(), self.run.is_dir() and is_finished(self.run)
        refused = bool(steps) and (resume or not finished) and not new_data
        refused = refused and self.corpus_changed()
        before, checkpoints = self.listing(leave_out=(".hydra/", "train.log")), self.checkpoints()
        started = Started("train.py", *self.training(max_steps, resume, new_data))
        signum = None
        if stop is not None:
            signum = STOPS[stop[0]]
            self.stop_when(started, stop[1], max(steps, default=-1))
            if started.process.poll() is None and not started.done():
                started.process.send_signal(signum)
        ended = started.ended()
        if signum not in (None, signal.SIGKILL) and ended.returncode == -signum:
            # It landed after the command's last line, as Python exited: the default action.
            assert started.done(), ended.log[-3000:]
            ended.returncode = 0
        else:
            self.check_output(ended)
        if ended.returncode == -signal.SIGKILL:
            self.kill_leftovers |= self.temp_files()
        elif ended.returncode in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            assert signum is not None and ended.returncode == 128 + signum, ended.log[-3000:]
            last = ended.stderr.splitlines()[-1]
            assert last.startswith(f"interrupted ({signum.name}): "), ended.log[-3000:]
        line = ended.error_line()
        if refused:
            assert ended.returncode != 0, f"a resume on changed files went on: {ended.stderr}"
        if ended.returncode == 1:
            assert refused, f"refused: {line}"
            assert "cannot resume: the training files changed" in line, line
            assert str(self.corpus / "train.de") in line, line
            assert self.listing(leave_out=(".hydra/", "train.log")) == before
        if ended.returncode != 0:
            if (at := ended.budget_step()) is not None:
                self.budget_ends.add(at)
            self.check_rotation(checkpoints)
            return
        assert self.run.is_dir()
        assert not list((self.run / "checkpoints").glob(f".*{TEMP_SUFFIX}"))  # cleared on start
        self.kill_leftovers = {f for f in self.kill_leftovers if not f.startswith("checkpoints/")}
        if SKIPPED in ended.log:
            assert finished, ended.log[-3000:]
        elif STOPPED_IN_LOOP in ended.log:
            assert signum is not None and not is_finished(self.run), ended.log[-3000:]
        else:
            at = ended.budget_step()
            assert at is not None and at == max(max_steps, max(steps, default=0)), ended.log
            self.budget_ends.add(at)
            assert is_finished(self.run) and read_metrics(self.run)["steps"] == at
        self.check_rotation(checkpoints)

    def stop_when(self, started: Started, when, newest: int) -> None:
        """Wait until the training `started` saved a step checkpoint newer than `newest`, or for
        `when` seconds from its first line of output (once its imports are done)."""
        process = started.process
        while process.poll() is None and not (started.out or started.err):
            time.sleep(0.005)
        deadline = time.monotonic() + (60 if when == "checkpoint" else when)
        while process.poll() is None and time.monotonic() < deadline:
            if when == "checkpoint" and max(self.steps(), default=-1) > newest:
                return
            time.sleep(0.005)

    def check_rotation(self, before: set[str]) -> None:
        """A checkpoint gone since `before` is a step checkpoint rotated out: trainer.
        keep_checkpoints newer ones are there."""
        steps = self.steps()
        for name in before - self.checkpoints():
            assert name.startswith("step_"), f"{name} is gone"
            newer = [s for s in steps if s > step_of(name)]
            assert len(newer) >= KEEP, f"{name} is gone, only {newer} are newer"

    def evaluated(self, ended: Ended, checkpoint: str) -> None:
        """Remember the scores an evaluation printed (split, beam, checkpoint, BLEU, ...)."""
        assert ended.returncode == 0, ended.log[-3000:]
        for line in ended.stdout.splitlines():
            fields = line.split()
            if len(fields) == 6 and fields[2] == checkpoint and fields[1].isdigit():
                self.reported[f"{fields[0]}.beam{fields[1]}.{checkpoint}"] = fields[3]

    # Rules

    @initialize(max_steps=st.integers(2, 6))
    def first_training(self, max_steps):
        self.train(max_steps, resume=False, new_data=False)

    @rule(more=st.integers(1, 4), resume=st.booleans(), new_data=st.booleans())
    def training_command(self, more, resume, new_data):
        self.train(self.budget + more, resume, new_data and resume)

    @precondition(lambda self: self.last_training is not None)
    @rule()
    def the_same_training_again(self):
        self.train(*self.last_training)

    @rule(
        stop=st.tuples(
            st.sampled_from(list(STOPS)),
            st.one_of(st.just("checkpoint"), st.floats(0.0, 5.0).map(lambda s: round(s, 2))),
        ),
        more=st.integers(3, 8),
        resume=st.booleans(),
    )
    def stopped_training(self, stop, more, resume):
        self.train(self.budget + more, resume, new_data=False, stop=stop)

    @precondition(lambda self: self.run.is_dir() and self.steps())
    @rule(
        split=st.sampled_from(["val", "test"]),
        beam=st.integers(1, 2),
        checkpoint=st.sampled_from(["last", "best", "averaged"]),
    )
    def evaluate(self, split, beam, checkpoint):
        before = self.listing()
        exists = checkpoint == "last" or f"{checkpoint}.pt" in self.checkpoints()
        args = [f"run={self.run}", f"checkpoint={checkpoint}", f"split={split}", f"beam={beam}"]
        ended = self.command("evaluate.py", *args)
        if not exists:
            assert ended.returncode == 1 and f"{checkpoint}.pt" in ended.error_line()
            assert self.listing() == before
            return
        self.evaluated(ended, checkpoint)
        assert f"{split}.beam{beam}.{checkpoint}" in self.reported, ended.stdout

    @precondition(lambda self: self.run.is_dir() and self.steps())
    @rule(
        beams=st.tuples(st.integers(1, 2), st.integers(1, 2)),
        same_split=st.booleans(),
        delay=st.floats(0.0, 1.5).map(lambda s: round(s, 2)),
    )
    def two_evaluations_at_once(self, beams, same_split, delay):
        splits = ("val", "val" if same_split and beams[0] != beams[1] else "test")
        processes = []
        for split, beam in zip(splits, beams, strict=True):
            args = [f"run={self.run}", "checkpoint=last", f"split={split}", f"beam={beam}"]
            processes.append(Started("evaluate.py", *args))
            time.sleep(delay)
        for process in processes:
            ended = self.ended(process)
            if ended.returncode == 1:
                assert f"{self.run} is in use by " in ended.error_line(), ended.stderr
            else:
                self.evaluated(ended, "last")

    @precondition(lambda self: self.run.is_dir() and self.steps())
    @rule(checkpoint=st.sampled_from(["last", "best"]))
    def translate(self, checkpoint):
        before = self.listing()
        ended = self.command(
            "translate.py", f"run={self.run}", f"checkpoint={checkpoint}", stdin=SOURCES
        )
        if checkpoint == "last" or "best.pt" in self.checkpoints():
            assert ended.returncode == 0, ended.log[-3000:]
            assert len(ended.stdout.splitlines()) == len(SOURCES.splitlines())
        else:
            assert ended.returncode == 1 and "best.pt" in ended.error_line()
        assert self.listing() == before  # translate.py only reads a run

    @precondition(lambda self: self.run.is_dir() and len(self.steps()) >= 2)
    @rule(last=st.integers(2, KEEP))
    def average(self, last):
        steps = self.steps()[-last:]
        ended = self.command("average_checkpoints.py", f"run={self.run}", f"last={last}")
        assert ended.returncode == 0, ended.log[-3000:]
        averaged = load_checkpoint(self.run / "checkpoints" / "averaged.pt")
        assert averaged["averaged_from"] == [f"step_{s}.pt" for s in steps]

    @precondition(lambda self: len((self.corpus / "train.de").read_text().splitlines()) > 300)
    @rule(at=st.integers(0, 299), count=st.integers(1, 5))
    def edit_the_training_files(self, at, count):
        for _, lang in SIDES:
            path = self.corpus / f"train.{lang}"
            lines = path.read_text().splitlines(keepends=True)
            path.write_text("".join(lines[:at] + lines[at + count :]))

    @precondition(lambda self: self.run.is_dir())
    @rule()
    def move_the_run(self):
        self.moves += 1
        self.run = Path(shutil.move(self.run, self.root / f"moved{self.moves}"))

    # Invariants

    @invariant()
    def checkpoints_load_with_the_runs_tokenizer(self):
        checkpoints = self.checkpoints() if self.run.is_dir() else set()
        for name in sorted(checkpoints):
            load_model(self.run, name)
        if checkpoints:
            digest = hashlib.sha256((self.run / "tokenizer.json").read_bytes()).hexdigest()
            assert self.tokenizer in (None, digest), "tokenizer.json was written again"
            self.tokenizer = digest

    @invariant()
    def no_reported_evaluation_is_lost(self):
        if not self.reported:
            return
        entries = read_metrics(self.run)["eval"]
        for key, bleu in self.reported.items():
            assert key in entries and f"{entries[key]['bleu']:.2f}" == bleu, key

    @invariant()
    def finished_only_by_a_training_at_its_budget(self):
        if not self.run.is_dir() or not is_finished(self.run):
            return
        steps = read_metrics(self.run)["steps"]
        assert steps in self.budget_ends, (steps, self.budget_ends)
        assert steps == max(self.steps()), f"finished at {steps}, checkpoints {self.steps()}"

    @invariant()
    def no_temp_file_but_a_kill_9s(self):
        assert self.temp_files() <= self.kill_leftovers
        self.kill_leftovers &= self.temp_files()

    @invariant()
    def no_command_holds_the_run(self):
        lock = self.run / LOCK_FILE
        if lock.exists():
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)


@pytest.mark.slow
def test_a_runs_life_keeps_its_promises_whatever_the_order_of_its_commands(tmp_path_factory):
    run_state_machine_as_test(
        lambda: RunLife(tmp_path_factory.mktemp("life")),
        settings=settings(fuzz_settings(examples=2), stateful_step_count=4),
    )


# Sequences the machine found, replayed


@pytest.mark.slow
def test_a_finished_run_resumed_and_stopped_part_way_is_no_finished_run(tmp_path):
    """Its record said "finished" at the old budget, so train.py skipped the interrupted run."""
    life = RunLife(tmp_path)
    life.first_training(max_steps=4)
    life.stopped_training(more=5, resume=True, stop=("SIGINT", "checkpoint"))
    life.finished_only_by_a_training_at_its_budget()
    assert not is_finished(life.run) and max(life.steps()) > 4
    life.training_command(more=0, resume=False, new_data=False)  # resumed, not skipped
    assert read_metrics(life.run)["steps"] == 9
