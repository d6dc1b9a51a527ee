"""Faults fuzzed through the real scripts: settings drawn against the real data and a trained
checkpoint, a filesystem that refuses the k-th write, a signal at the k-th call of a hook point,
a stop signal to a parallel sweep's launcher or its process group at the k-th line it prints.

Every case ends in the script's normal output or in one line, never a traceback: `error: ...`
naming the key or the path (exit status 1), or `interrupted (...)` with exit status 130 / 143
(train.py inside its loop, or a stopped sweep: a checkpoint and the resume command, exit status
0); no temp file is left, no cached file is half-written, and no process of a sweep lives on.
"""

import builtins
import contextlib
import errno
import hashlib
import io
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import minimt
import minimt.data.tokenizer as tokenizer_module
from minimt import atomic
from minimt.checkpoint import is_loadable, step_checkpoints
from minimt.data.multi30k import MULTI30K_SHA256
from minimt.train.loop import train
from minimt.translator import Translator
from tests.helpers import (
    REPO,
    compose_config,
    fuzz_settings,
    start_sweep,
    tiny_run_overrides,
    write_run,
)

SCRIPTS = ("translate", "evaluate", "average_checkpoints", "report", "collect_runs")
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
WRITE_FAULTS = (errno.ENOSPC, errno.EACCES)
MINIMT_CODE = (str(Path(minimt.__file__).parent) + os.sep, str(REPO / "scripts") + os.sep)
SOURCES, REFERENCES = "Ein Hund rennt.\nZwei Männer spielen.\n", "A dog runs.\nTwo men play.\n"


@pytest.fixture(scope="module")
def trained(multi30k_dir, tmp_path_factory) -> Path:
    """A tiny run (step_2.pt, step_4.pt, best.pt) and a sweep of two finished runs beside it."""
    root = tmp_path_factory.mktemp("faults")
    overrides = tiny_run_overrides(multi30k_dir, root / "data", "views=false")
    cfg = compose_config(*overrides, "trainer.max_steps=4", "trainer.save_every=2")
    train(cfg, root / "run", [])
    (root / "src.de").write_text(SOURCES)
    (root / "ref.en").write_text(REFERENCES)
    for seed in (1, 2):
        write_run(root / "sweep" / f"seed{seed}", "full_sinusoidal", seed)
    return root


def script_argv(name: str, root: Path, work: Path) -> list[str]:
    """The arguments of one run of `name` on the trained run copied to work/run."""
    run = work / "run"
    return {
        "translate": [f"run={run}", f"input={root / 'src.de'}", f"output={work / 'out.en'}"],
        "evaluate": [f"run={run}", f"src={root / 'src.de'}", f"ref={root / 'ref.en'}", "beam=1"],
        "average_checkpoints": [f"run={run}", "last=2"],
        "report": [f"sweep={root / 'sweep'}", f"out={work / 'report'}"],
        "collect_runs": [f"sweep={root / 'sweep'}", f"dest={work / 'collected'}"],
    }[name]


def run_script(name: str, argv: list[str], capsys) -> tuple[int | str | None, str]:
    """(exit status or message, stdout + stderr) of scripts/<name>.py run as __main__ in this
    process (train.py logs to stdout); an exception that escapes the script is returned as
    `uncaught ...`, never an `error:` line."""
    path = REPO / "scripts" / f"{name}.py"
    saved, sys.argv = sys.argv, [str(path), *argv]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MINIMT_ALLOCATOR", "system")  # no re-exec of this process
            runpy.run_path(str(path), run_name="__main__")
        code = None
    except SystemExit as exit:
        code = exit.code
    except (Exception, KeyboardInterrupt) as error:  # a bug: the traceback a user would see
        code = f"uncaught {type(error).__name__}: {error}"
    finally:
        sys.argv = saved
    out, err = capsys.readouterr()
    return code, out + err


def assert_one_error_line(code, err: str) -> str:
    """The `error: ...` message a script exited with: one line, no traceback."""
    assert isinstance(code, str) and code.startswith("error: "), (code, err[-3000:])
    assert "\n" not in code and "Traceback" not in err, err[-3000:]
    return code


def assert_interrupted(status, err: str, signum: signal.Signals) -> None:
    """One `interrupted (SIG...)` line, last on stderr, and the signal's exit status."""
    assert status == STATUS[signum], (status, err[-3000:])
    assert err.splitlines()[-1].startswith(f"interrupted ({signum.name})"), err[-3000:]


def leftovers(folder: Path) -> list[Path]:
    """Temp files of atomic writes, and the data cache's files that are not whole."""
    found = list(folder.rglob(f"*{atomic.TEMP_SUFFIX}"))
    found += list(folder.rglob("token_ids/tmp*"))  # tokenizing's temporary folders
    for raw in folder.rglob("*.gz"):
        if raw.name in MULTI30K_SHA256:
            digest = hashlib.sha256(raw.read_bytes()).hexdigest()
            found += [raw] if digest != MULTI30K_SHA256[raw.name] else []
    return found


@contextlib.contextmanager
def at_kth_call(point: str, k: int, act: Callable[..., None]):
    """Call act(*paths) at the k-th call of a hook point: os.replace (source, destination), open
    for writing (`write`), any open, os.sendfile (shutil.copyfile's copy, which names its files
    in the error itself), shutil.copyfile (destination), or a line the BPE trainer reads
    (`bpe_line`). Only calls made while a script's signal handlers are installed count:
    Hydra's own files are not minimt's, and a signal there would stop pytest itself."""
    calls = []

    def count(*paths: object) -> None:
        if not called_by_minimt() or not handled(act):
            return
        calls.append(paths)
        if len(calls) == k:
            act(
                *(os.fsdecode(p) if isinstance(p, str | bytes | os.PathLike) else "" for p in paths)
            )

    with pytest.MonkeyPatch.context() as patch:
        if point == "replace":
            real_replace = os.replace

            def replace(src, dst, **kwargs):
                count(src, dst)
                return real_replace(src, dst, **kwargs)

            patch.setattr(os, "replace", replace)
        elif point in ("write", "open"):
            real_open = builtins.open

            def opened(file, mode="r", *args, **kwargs):
                if point == "open" or set(str(mode)) & set("wax+"):
                    count(file)
                return real_open(file, mode, *args, **kwargs)

            patch.setattr(builtins, "open", opened)
            patch.setattr(io, "open", opened)
        elif point == "sendfile":  # how shutil.copyfile writes on Linux; it names the files
            real_sendfile = os.sendfile

            def sendfile(out_fd, in_fd, offset, count_bytes):
                count()
                return real_sendfile(out_fd, in_fd, offset, count_bytes)

            patch.setattr(os, "sendfile", sendfile)
        elif point == "copyfile":
            real_copy = shutil.copyfile

            def copyfile(src, dst, **kwargs):
                count(dst)
                return real_copy(src, dst, **kwargs)

            patch.setattr(shutil, "copyfile", copyfile)
        else:
            real_train = tokenizer_module.train_bpe

            def train_bpe(lines, *args, **kwargs):
                return real_train((count(line) or line for line in lines), *args, **kwargs)

            patch.setattr(tokenizer_module, "train_bpe", train_bpe)
        yield calls


def called_by_minimt() -> bool:
    """Whether a function of the minimt package or of a script is on the caller's stack."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(MINIMT_CODE) and code.co_name != "<module>":
            return True
        frame = frame.f_back
    return False


def handled(act: Callable[..., None]) -> bool:
    signum = getattr(act, "signum", None)
    return signum is None or callable(signal.getsignal(signum))


def refuse(code: int) -> Callable[..., None]:
    """Raise the OSError of a refused write, naming the file(s) as the real call would."""

    def raise_it(path: str | None = None, other: str | None = None) -> None:
        raise OSError(code, os.strerror(code), path, None, other)

    return raise_it


def send(signum: signal.Signals) -> Callable[..., None]:
    def kill(*paths: str) -> None:
        os.kill(os.getpid(), signum)

    kill.signum = signum
    return kill


# (i) settings against the data and the checkpoint


@fuzz_settings(examples=5)
@given(
    pe=st.sampled_from(["sinusoidal", "learned"]),
    max_seq_len=st.integers(4, 72),
    margin=st.integers(-2, 40),
    batch_tokens=st.one_of(st.integers(1, 96), st.just(1024)),
)
def test_table_lengths_and_batch_size_train_or_stop_in_one_line_before_the_first_update(
    multi30k_dir, trained, tmp_path_factory, capsys, pe, max_seq_len, margin, batch_tokens
):
    """data.max_train_len drawn `margin` positions inside the table (or past it)."""
    root = tmp_path_factory.mktemp("lengths")
    max_train_len = max(max_seq_len - 1 - margin, 1)
    overrides = tiny_run_overrides(multi30k_dir, trained / "data", "views=false")
    drawn = [f"pe={pe}", f"model.max_seq_len={max_seq_len}", f"data.max_train_len={max_train_len}"]
    argv = [*overrides, *drawn, f"trainer.batch_tokens={batch_tokens}", "trainer.max_steps=2"]
    argv += ["trainer.val_every=2", f"hydra.run.dir={root / 'run'}"]
    code, err = run_script("train", argv, capsys)
    if code is None:
        assert (root / "run" / "metrics.json").is_file() and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(code, err)
    assert any(key in line for key in ("model.max_seq_len", "trainer.batch_tokens")), line
    assert not list((root / "run").glob("checkpoints/step_*.pt")), "stopped after an update"


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.from_run(trained / "run", device="cpu")


@fuzz_settings(examples=8)
@given(
    script=st.sampled_from(["translate", "evaluate"]),
    beam=st.one_of(st.integers(1, 4), st.tuples(st.just("limit"), st.integers(-1, 1))),
    length_penalty=st.floats(-1, 4, allow_nan=False),
    batch_tokens=st.sampled_from(["null", "1", "3", "10000"]),
    checkpoint=st.sampled_from(["best", "last", "step_2.pt"]),
)
def test_decoding_arguments_against_the_checkpoint_decode_or_stop_in_one_line(
    trained,
    translator,
    tmp_path_factory,
    capsys,
    script,
    beam,
    length_penalty,
    batch_tokens,
    checkpoint,
):
    limit = translator.model.output_matrix.size(0) // 2
    beam = beam if isinstance(beam, int) else limit + beam[1]
    work = tmp_path_factory.mktemp("decode")
    shutil.copytree(trained / "run", work / "run")
    out = work / "out.en"
    argv = [f"run={work / 'run'}", f"checkpoint={checkpoint}", f"beam={beam}"]
    argv += [f"length_penalty={length_penalty}", f"batch_tokens={batch_tokens}"]
    if script == "translate":
        argv += [f"input={trained / 'src.de'}", f"output={out}"]
    else:
        argv += [f"src={trained / 'src.de'}", f"ref={trained / 'ref.en'}", f"out={out}"]
    code, err = run_script(script, argv, capsys)
    if code is None:
        assert len(out.read_text().splitlines()) == 2
        return
    line = assert_one_error_line(code, err)
    named = "length_penalty" if not length_penalty >= 0 else "beam"
    assert f"{named}=" in line and not out.exists(), line
    if named == "beam":
        assert f"has {2 * limit}: use beam <= {limit}" in line, line


@fuzz_settings(examples=6)
@given(
    max_len_a=st.floats(0, 50, allow_nan=False),
    max_len_b=st.integers(1, 500),
    beam=st.integers(1, 3),
    batch_tokens=st.integers(1, 64),
)
def test_output_length_settings_never_outgrow_the_position_table(
    translator, max_len_a, max_len_b, beam, batch_tokens
):
    translator.max_len_a, translator.max_len_b = max_len_a, max_len_b
    translator.batch_tokens = batch_tokens
    hyps = translator.translate_ids(SOURCES.splitlines() + ["ein " * 200], beam=beam)
    assert len(hyps) == 3
    assert all(len(ids) <= translator.model.max_seq_len - 1 for ids in hyps)


# (ii) a filesystem that refuses the k-th write; (iii) a signal at the k-th call


@fuzz_settings(examples=5)
@given(
    point=st.sampled_from(["sendfile", "replace", "write"]),
    k=st.one_of(st.integers(1, 12), st.integers(13, 80)),  # data preparation, then the run
    code=st.sampled_from(WRITE_FAULTS),
)
def test_train_with_a_refused_write_stops_in_one_line_naming_the_path(
    multi30k_dir, tmp_path_factory, capsys, point, k, code
):
    root = tmp_path_factory.mktemp("refused")
    argv = train_argv(multi30k_dir, root)
    with at_kth_call(point, k, refuse(code)) as calls:
        status, err = run_script("train", argv, capsys)
    if len(calls) < k:
        assert status is None and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(status, err)
    assert f"could not write {root}" in line and os.strerror(code) in line, line
    assert leftovers(root) == []


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
        status, err = run_script("train", argv, capsys)
    assert "Traceback" not in err, err[-3000:]
    if len(calls) < k:
        assert status is None, err[-3000:]
    elif status == 0:  # inside the training loop: a checkpoint, then how to resume
        assert "resume=" in err and not (root / "run" / "metrics.json").exists(), err[-3000:]
    else:
        assert_interrupted(status, err, signum)
    assert leftovers(root) == []


def train_argv(multi30k_dir: Path, root: Path) -> list[str]:
    """A tiny run with its own data.dir (so that data preparation writes) in root/run."""
    overrides = tiny_run_overrides(multi30k_dir, root / "data", "views=false")
    return [*overrides, "trainer.max_steps=2", "trainer.val_every=2", "data.max_val_pairs=5"] + [
        f"hydra.run.dir={root / 'run'}"
    ]


@fuzz_settings(examples=8)
@given(
    script=st.sampled_from(SCRIPTS),
    point=st.sampled_from(["replace", "write"]),
    k=st.integers(1, 8),
    code=st.sampled_from(WRITE_FAULTS),
)
def test_a_script_with_a_refused_write_stops_in_one_line_naming_the_path(
    trained, tmp_path_factory, capsys, script, point, k, code
):
    work = tmp_path_factory.mktemp("refused")
    shutil.copytree(trained / "run", work / "run")
    with at_kth_call(point, k, refuse(code)) as calls:
        status, err = run_script(script, script_argv(script, trained, work), capsys)
    if len(calls) < k:
        assert status is None and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(status, err)
    assert "could not write /" in line and os.strerror(code) in line, line
    assert leftovers(work) == [] and leftovers(trained) == []


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
    shutil.copytree(trained / "run", work / "run")
    with at_kth_call(point, k, send(signum)) as calls:
        status, err = run_script(script, script_argv(script, trained, work), capsys)
    assert "Traceback" not in err, err[-3000:]
    if len(calls) < k:
        assert status is None, err[-3000:]
    else:
        assert_interrupted(status, err, signum)
    assert leftovers(work) == [] and leftovers(trained) == []


# (iv) a stop signal to a parallel sweep's launcher, or to its process group


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
    overrides = tiny_run_overrides(multi30k_dir, trained / "data", "views=false")
    command = [sys.executable, str(REPO / "scripts" / "train.py"), "-m", *overrides]
    command += ["trainer.max_steps=100000", "data.max_val_pairs=10", "trainer.num_threads=1"]
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
