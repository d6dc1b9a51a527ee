"""A stop signal at the k-th call of a hook point, through train.py and each key=value script, and
to a parallel sweep's launcher or its process group at the k-th line it prints: one
`interrupted (...)` line with exit status 130 / 143 (train.py inside its loop, or a stopped sweep:
a checkpoint and the resume command, exit status 0), no temp file left, no process of a sweep
living on."""

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minimt.checkpoint import is_loadable, step_checkpoints
from tests.faults.inject import (
    SCRIPTS,
    STATUS,
    assert_ends_interrupted,
    at_kth_call,
    leftovers,
    output_of,
    run_with_fault,
    send,
    train_argv,
)
from tests.helpers import (
    QUICK_FINISH,
    fuzz_settings,
    script_command,
    start_sweep,
    tiny_run_overrides,
)


@pytest.mark.slow
@fuzz_settings(examples=5)
@given(
    point=st.sampled_from(["open", "replace", "copyfile", "bpe_line"]),
    k=st.one_of(st.integers(1, 12), st.integers(13, 80)),
    signum=st.sampled_from(list(STATUS)),
)
def test_train_with_a_signal_at_a_hook_point_stops_in_one_line(
    multi30k_dir, tmp_path_factory, capsys, point, k, signum
):
    root = tmp_path_factory.mktemp("signalled")
    argv = train_argv(multi30k_dir, root)
    with at_kth_call(point, k, send(signum)) as calls:
        status, err = output_of("train", argv, capsys)
    assert "Traceback" not in err, err[-3000:]
    if len(calls) < k:
        assert status is None, err[-3000:]
    elif status == 0:  # inside the training loop: a checkpoint, then how to resume
        assert "resume=" in err and not (root / "run" / "metrics.json").exists(), err[-3000:]
    else:
        assert_ends_interrupted(status, err, signum)
    assert leftovers(root) == []


@fuzz_settings(examples=8)
@given(
    script=st.sampled_from(SCRIPTS),
    point=st.sampled_from(["open", "replace"]),
    k=st.integers(1, 12),
    signum=st.sampled_from(list(STATUS)),
)
def test_a_script_with_a_signal_at_a_hook_point_stops_in_one_line(
    trained, tmp_path_factory, capsys, script, point, k, signum
):
    work = tmp_path_factory.mktemp("signalled")
    reached, status, err = run_with_fault(script, trained, work, point, k, send(signum), capsys)
    assert "Traceback" not in err, err[-3000:]
    if not reached:
        assert status is None, err[-3000:]
    else:
        assert_ends_interrupted(status, err, signum)
    assert leftovers(work) == [] and leftovers(trained) == []


@pytest.mark.slow
@fuzz_settings(examples=2)
@given(
    line=st.integers(1, 40),
    signum=st.sampled_from(list(STATUS)),
    to_the_group=st.booleans(),
    launcher=st.sampled_from(["parallel", "submitit_local"]),
)
def test_a_parallel_sweep_stopped_at_any_line_it_prints_leaves_nothing_running(
    multi30k_dir, trained, tmp_path_factory, line, signum, to_the_group, launcher
):
    """The signal lands when the sweep has printed `line` lines (or printed nothing for 10
    seconds: submitit's runs write to their own logs): while Hydra sets up, while a run prepares
    or trains, or between runs (joblib's workers run two at a time, submitit's
    local executor all three at once). The launcher exits 0 saying how to resume, each run
    it started keeps a checkpoint that loads (or none, if stopped before its first save), and no
    process of the sweep is left."""
    sweep = tmp_path_factory.mktemp("stopped_sweep")
    overrides = tiny_run_overrides(multi30k_dir, trained / "data", *QUICK_FINISH)
    command = script_command("train.py", "-m", *overrides)
    command += ["trainer.max_steps=100000", "trainer.num_threads=1"]
    command += [f"hydra/launcher={launcher}", "trainer.seed=1,2,3", f"hydra.sweep.dir={sweep}"]
    command.append("hydra.sweep.subdir=seed${trainer.seed}")
    launcher = start_sweep(command)
    output: list[str] = []
    reader = read_lines(launcher, output)
    wait_for_lines(output, line)
    if to_the_group:
        os.killpg(launcher.pid, signum)
    else:
        launcher.send_signal(signum)
    launcher.wait(timeout=120)
    reader.join(timeout=10)
    log = "".join(output)
    assert launcher.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert f"sweep stopped ({signum.name})" in log, log[-3000:]
    assert wait_until_gone(launcher.pid) == [], "processes of the stopped sweep still run"
    for run in sweep.glob("*/checkpoints"):
        assert all(is_loadable(path) for path in step_checkpoints(run)), run
    assert leftovers(sweep) == []


def read_lines(process: subprocess.Popen, into: list[str]) -> threading.Thread:
    """A thread that appends each line of the process's output to `into` as it comes."""

    def read() -> None:
        for line in process.stdout:
            into.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def wait_for_lines(lines: list[str], count: int, quiet: float = 10) -> None:
    """Until `lines` holds `count` lines, or none came for `quiet` seconds."""
    seen, since = len(lines), time.monotonic()
    while len(lines) < count and time.monotonic() - since < quiet:
        if len(lines) != seen:
            seen, since = len(lines), time.monotonic()
        time.sleep(0.01)


def wait_until_gone(session: int, timeout: float = 10) -> list[int]:
    """The processes of `session` still running after up to `timeout` seconds (a worker's
    resource tracker ends a moment after the process that started it)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in session_members(session) if pid != os.getpid()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def session_members(session: int) -> list[int]:
    """The running processes whose session is `session` (Linux /proc); zombies are not running."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == session:
                members.append(int(stat.parent.name))
    return members
