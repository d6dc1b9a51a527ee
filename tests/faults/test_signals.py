"""Stop signals (Ctrl-C, SIGTERM) and kill -9 at any moment: a training run keeps a loadable
checkpoint and resumes, a stopped sweep saves every run it started and leaves nothing running,
and a script ends in one line with exit status 130 or 143, no file half-written, no temp file."""

import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from minimt import allocator, atomic
from minimt.checkpoint import load_checkpoint, step_checkpoints
from minimt.cli import one_line_errors
from minimt.signals import StopRequest, Terminated, interrupted_line, stop_signals_raise
from minimt.sweep_signals import job_processes
from tests.faults.inject import STATUS
from tests.helpers import (
    ENV,
    QUICK_FINISH,
    run_in_process,
    script_command,
    start_sweep,
    temp_files,
    tiny_run_overrides,
)


def test_first_signal_is_a_request_and_a_second_ctrl_c_interrupts():
    previous = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_stop_that_came_before_the_request_stops_at_the_first_step_boundary():
    with StopRequest(signal.SIGTERM) as stop:
        assert stop.signal == "SIGTERM"
    with StopRequest() as stop:
        assert stop.signal is None


def test_a_signal_after_the_training_loop_stops_at_once():
    with pytest.raises(Terminated), StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # during the loop: noted, read at a step boundary
        assert stop.signal == "SIGTERM"
        stop.at_once()  # the loop is over: nothing reads it any more


def test_ctrl_c_while_train_py_picks_its_allocator_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(allocator, "mimalloc_library", interrupted)
    with pytest.raises(SystemExit) as stopped:
        one_line_errors(allocator.reexec_with_mimalloc)()
    assert stopped.value.code == 130
    assert capsys.readouterr().err.startswith("interrupted (SIGINT)")


# Training stopped, killed, and resumed


def train_command(multi30k_dir, tmp_path, *overrides):
    return script_command(
        "train.py",
        *tiny_run_overrides(
            multi30k_dir, tmp_path / "data", "trainer.save_every=5", "trainer.num_threads=1"
        ),
        *overrides,
    )


def wait_for(predicate, process, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process.poll() is None, "training ended early"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_then_kill_9_then_resume_finishes_the_run(multi30k_dir, tmp_path):
    run, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    endless = train_command(multi30k_dir, tmp_path, "trainer.max_steps=100000", *QUICK_FINISH)
    process = subprocess.Popen(
        [*endless, f"hydra.run.dir={run}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: step_checkpoints(ckpts), process)
    process.send_signal(signal.SIGTERM)
    log, _ = process.communicate(timeout=120)
    assert process.returncode == 0, log
    assert "python scripts/train.py experiment=smoke" in log and f"resume={run}" in log
    stopped_at = load_checkpoint(step_checkpoints(ckpts)[-1])["state"]["step"]
    assert stopped_at >= 5 and f"step_{stopped_at}.pt" in os.listdir(ckpts)

    # resume=RUN alone picks the run directory; kill -9 it once it has saved again
    process = subprocess.Popen([*endless, f"resume={run}"], stderr=subprocess.DEVNULL)
    wait_for(lambda: len(step_checkpoints(ckpts)) > 1 + (stopped_at % 5 != 0), process)
    process.kill()
    process.wait()
    newest = load_checkpoint(step_checkpoints(ckpts)[-1])
    assert newest["state"]["step"] > stopped_at

    finish = train_command(
        multi30k_dir, tmp_path, "trainer.max_steps=60", *QUICK_FINISH, f"resume={run}"
    )
    subprocess.run(finish, check=True, capture_output=True, timeout=300)
    assert load_checkpoint(run / "checkpoints" / "step_60.pt")["state"]["step"] == 60
    assert (run / "metrics.json").is_file()
    assert not list(ckpts.glob(".*.tmp"))  # leftovers of the killed save were cleared


SAVE_LOOP = textwrap.dedent(
    """
    import sys, torch
    from minimt.checkpoint import save_checkpoint
    weights = {"w": torch.randn(1_000_000)}
    for step in range(10**9):
        save_checkpoint(sys.argv[1], {"model": weights, "state": {"step": step}})
        print(step, flush=True)
    """
)


@pytest.mark.parametrize("trial", range(4))
def test_kill_9_during_saves_leaves_a_loadable_checkpoint(tmp_path, trial):
    path = tmp_path / "step.pt"
    process = subprocess.Popen(
        [sys.executable, "-c", SAVE_LOOP, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "0"  # one complete save exists
    time.sleep(random.Random(trial).uniform(0.0, 0.5))  # then kill at an arbitrary moment
    process.kill()
    process.wait()
    saved = load_checkpoint(path)
    assert saved["model"]["w"].shape == (1_000_000,) and isinstance(saved["state"]["step"], int)
    assert torch.isfinite(saved["model"]["w"]).all()


# Sweeps stopped, and resumed


@pytest.mark.slow
@pytest.mark.parametrize("to_the_group", [False, True], ids=["sigterm_to_launcher", "ctrl_c"])
def test_a_stopped_parallel_sweep_saves_every_run_leaves_nothing_running_and_resumes(
    multi30k_dir, tmp_path, to_the_group
):
    sweep = tmp_path / "sweep"
    python, script, *overrides = train_command(multi30k_dir, tmp_path, "trainer.max_steps=100000")
    command = [
        python,
        script,
        "-m",  # before the overrides, as argparse wants it
        *overrides,
        *QUICK_FINISH,
        "hydra/launcher=parallel",
        "trainer.seed=1,2,3",  # two at a time: the third must never start
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=seed${trainer.seed}",
    ]
    launcher = start_sweep(command)
    runs = [sweep / f"seed{seed}" / "checkpoints" for seed in (1, 2)]
    wait_for(lambda: all(step_checkpoints(run) for run in runs), launcher)
    workers = job_processes(launcher.pid)
    assert len(workers) == 2
    if to_the_group:
        os.killpg(launcher.pid, signal.SIGINT)
    else:
        launcher.send_signal(signal.SIGTERM)
    log, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, log[-3000:]
    assert "sweep stopped (SIG" in log and "run the same command again to resume it" in log
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}")]  # nothing left running
    assert not step_checkpoints(sweep / "seed3" / "checkpoints")  # Hydra made its folder only
    assert "not started: the sweep was stopped" in log
    saved = [step_checkpoints(run)[-1] for run in runs]
    assert log.count("stopped at step") == 2
    if to_the_group:  # resuming after a stop is the same whichever signal stopped it
        return

    # the same command, a step past the newest save, on the two stopped runs (seed 3 would start)
    last = max(int(path.stem.removeprefix("step_")) for path in saved)
    rerun = [o for o in command if o not in ("trainer.seed=1,2,3", "trainer.max_steps=100000")]
    rerun.append("trainer.seed=1,2")
    again = subprocess.run(
        [*rerun, f"trainer.max_steps={last + 1}"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:]
    for path in saved:
        assert f"resumed from {path}" in again.stdout
    assert again.stdout.count(f"training stopped at step {last + 1}") >= 1


@pytest.mark.slow
def test_a_ctrl_c_to_a_sweep_of_submitit_jobs_lets_every_run_save_and_resumes(
    multi30k_dir, tmp_path
):
    """hydra/launcher=submitit_local (the local stand-in for SLURM): a Ctrl-C to the process
    group reaches each run once its handlers are set, never submitit's controller processes,
    which would signal their run a second time (stopping it at once), print a traceback and
    kill it a second later."""
    sweep = tmp_path / "sweep"
    python, script, *overrides = train_command(multi30k_dir, tmp_path, "trainer.max_steps=100000")
    command = [python, script, "-m", *overrides, *QUICK_FINISH]
    command += ["hydra/launcher=submitit_local", "trainer.seed=1,2", f"hydra.sweep.dir={sweep}"]
    command.append("hydra.sweep.subdir=seed${trainer.seed}")
    launcher = start_sweep(command)
    runs = [sweep / f"seed{seed}" / "checkpoints" for seed in (1, 2)]
    wait_for(lambda: all(step_checkpoints(run) for run in runs), launcher)
    processes = job_processes(launcher.pid)
    os.killpg(launcher.pid, signal.SIGINT)
    log, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert "sweep stopped (SIGINT)" in log and "run the same command again to resume it" in log
    assert not [pid for pid in processes if os.path.exists(f"/proc/{pid}")]
    run_logs = "".join(path.read_text() for path in sweep.glob(".submitit/*/*_log.out"))
    assert run_logs.count("stopped at step") == 2 and "Traceback" not in run_logs, run_logs
    saved = [step_checkpoints(run)[-1] for run in runs]

    last = max(int(path.stem.removeprefix("step_")) for path in saved)
    rerun = [o for o in command if o != "trainer.max_steps=100000"]
    again = subprocess.run(
        [*rerun, f"trainer.max_steps={last + 1}"], capture_output=True, text=True, env=ENV
    )
    assert again.returncode == 0, again.stdout[-3000:]
    run_logs = "".join(path.read_text() for path in sweep.glob(".submitit/*/*_log.out"))
    for path in saved:
        assert f"resumed from {path}" in run_logs


# The key=value scripts stopped by a real signal at a write: the file it was writing is absent


def stop_at_write(monkeypatch, k: int, stop: Callable[[], None]) -> None:
    """Call `stop` at the k-th atomic write, once its temp file is written, before it is renamed."""
    commit, calls = atomic._commit, []

    def stopped(tmp: Path, path: Path) -> None:
        calls.append(path)
        if len(calls) == k:
            stop()
        commit(tmp, path)

    monkeypatch.setattr(atomic, "_commit", stopped)


def translate_case(run, tmp_path, sources):
    out = tmp_path / "out.en"
    return "translate.py", [f"run={run}", f"input={sources}", f"output={out}"], 1, [out]


def evaluate_case(run, tmp_path, sources):
    (tmp_path / "ref.en").write_text("A dog runs.\nTwo cats sleep.\n")
    args = [f"run={run}", f"src={sources}", f"ref={tmp_path / 'ref.en'}", "beam=1"]
    return "evaluate.py", [*args, f"out={tmp_path / 'hyp.en'}"], 2, []  # stopped at metrics.json


def average_case(run, tmp_path, sources):
    return (
        "average_checkpoints.py",
        [f"run={run}", "last=2"],
        1,
        [run / "checkpoints" / "averaged.pt"],
    )


def report_case(sweep, tmp_path):
    out = tmp_path / "out"
    return (
        "report.py",
        [f"sweep={sweep}", f"out={out}"],
        2,
        [out / "test_bleu.png", out / "report.md"],
    )


def collect_case(sweep, tmp_path):
    dest = tmp_path / "dest"
    return "collect_runs.py", [f"sweep={sweep}", f"dest={dest}"], 2, []  # at the first metrics.json


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", [translate_case, evaluate_case, average_case])
def test_a_signal_in_a_run_script_is_one_line_and_leaves_no_partial_file(
    case, signum, run, tmp_path, sources, monkeypatch, capsys
):
    metrics = (run / "metrics.json").read_bytes()
    script, argv, k, absent = case(run, tmp_path, sources)
    stop_at_write(monkeypatch, k, lambda: os.kill(os.getpid(), signum))
    status, _, err = run_in_process(script, argv, capsys)
    assert_interrupted(status, err, signum)
    assert not [path for path in absent if path.exists()]
    assert (run / "metrics.json").read_bytes() == metrics
    assert temp_files(run, tmp_path) == []


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", [report_case, collect_case])
def test_a_signal_in_a_study_script_is_one_line_and_leaves_no_partial_file(
    case, signum, sweep, tmp_path, monkeypatch, capsys
):
    drawing = tmp_path / "system_temp"  # where the report draws its plots
    drawing.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(drawing))
    script, argv, k, absent = case(sweep, tmp_path)
    stop_at_write(monkeypatch, k, lambda: os.kill(os.getpid(), signum))
    status, _, err = run_in_process(script, argv, capsys)
    assert_interrupted(status, err, signum)
    assert not [path for path in absent if path.exists()]
    assert not list((tmp_path / "dest").rglob("metrics.json"))  # no run half-collected
    assert temp_files(tmp_path) == [] and list(drawing.iterdir()) == []


def assert_interrupted(status, err: str, signum: signal.Signals) -> None:
    assert status == STATUS[signum], err
    assert "Traceback" not in err, err
    assert err.endswith(interrupted_line(signum) + "\n"), err
    assert err.count("interrupted") == 1, err


def test_a_second_signal_while_the_first_unwinds_is_ignored_until_it_is_done():
    before = signal.getsignal(signal.SIGTERM)
    cleaned = False
    with pytest.raises(Terminated), stop_signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a temp file is removed
            cleaned = True
    assert cleaned and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
def test_a_signal_from_outside_stops_translate_with_its_status(signum, run, tmp_path):
    fifo, out = tmp_path / "input.de", tmp_path / "out.en"
    os.mkfifo(fifo)
    command = script_command("translate.py", f"run={run}")
    process = subprocess.Popen(
        [*command, f"input={fifo}", f"output={out}"], stderr=subprocess.PIPE, env=ENV, text=True
    )
    writer = open_when_read(fifo, process)  # the model is loaded: it waits for its input
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    os.close(writer)
    assert_interrupted(process.returncode, err, signum)
    assert not out.exists() and temp_files(tmp_path) == []


def open_when_read(fifo: Path, process: subprocess.Popen, timeout: float = 60) -> int:
    """Open `fifo` for writing once `process` has opened it for reading."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            assert error.errno == errno.ENXIO and process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "translate.py never opened its input"
            time.sleep(0.05)
