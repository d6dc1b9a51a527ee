"""Signals and kill -9: a run stopped at any moment keeps a loadable checkpoint and resumes."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from minimt.checkpoint import load_checkpoint, step_checkpoints
from minimt.signals import StopRequest, job_processes
from tests.helpers import REPO, start_sweep, sweep_env, tiny_run_overrides


def test_first_signal_is_a_request_and_a_second_ctrl_c_interrupts():
    previous = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is previous


def train_command(multi30k_dir, tmp_path, *overrides):
    return [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        *tiny_run_overrides(
            multi30k_dir, tmp_path / "data", "trainer.save_every=5", "trainer.num_threads=1"
        ),
        *overrides,
    ]


def wait_for(predicate, process, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process.poll() is None, "training ended early"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_then_kill_9_then_resume_finishes_the_run(multi30k_dir, tmp_path):
    run, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    endless = train_command(multi30k_dir, tmp_path, "trainer.max_steps=100000")
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

    finish = train_command(multi30k_dir, tmp_path, "trainer.max_steps=60", f"resume={run}")
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
        "views=false",
        "data.max_val_pairs=10",  # the final validation of each run: kept short
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
        env=sweep_env(),
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
    command = [python, script, "-m", *overrides, "views=false", "data.max_val_pairs=10"]
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
        [*rerun, f"trainer.max_steps={last + 1}"], capture_output=True, text=True, env=sweep_env()
    )
    assert again.returncode == 0, again.stdout[-3000:]
    run_logs = "".join(path.read_text() for path in sweep.glob(".submitit/*/*_log.out"))
    for path in saved:
        assert f"resumed from {path}" in run_logs
