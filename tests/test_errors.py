"""Errors as a user meets them: one line on stderr, a non-zero exit, no traceback; a full disk
that says what could not be written, why, and how to resume."""

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minimt import atomic
from minimt.atomic import WriteError, atomic_write, write_text
from minimt.checkpoint import (
    CheckpointWithCode,
    CheckpointWriteError,
    DamagedCheckpoint,
    load_checkpoint,
    save_checkpoint,
    save_json,
)
from minimt.cli import one_line, one_line_errors
from minimt.data.corpus import DataError
from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.errors import MinimtError, NotFound
from minimt.rundir import checkpoint_dir
from tests.helpers import ENV, REPO, error_line, run_script, tiny_run_overrides

TOKENIZER = train_bpe(["Ein Hund rennt.", "A dog runs.", "Zwei Katzen schlafen."] * 5, 300)


# The wrapper every script's main goes through


def test_a_project_error_ends_the_script_as_one_line(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @one_line_errors
    def main():
        raise NotFound("bad things:\n  a.pt: missing\n  b.pt: cut short")

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == "error: bad things: a.pt: missing; b.pt: cut short"


def test_the_full_error_switch_keeps_the_traceback(monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")

    @one_line_errors
    def main():
        raise NotFound("bad things")

    with pytest.raises(NotFound, match="bad things"):
        main()


def test_a_bug_is_not_dressed_up_as_a_user_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(ZeroDivisionError):
        one_line_errors(lambda: 1 / 0)()


def test_one_line_keeps_a_plain_message():
    assert one_line("no run directory at x") == "no run directory at x"


# Run directories and checkpoints, through translate.py and friends


@pytest.mark.slow
@pytest.mark.parametrize("script", ["translate.py", "evaluate.py", "average_checkpoints.py"])
def test_a_missing_run_directory_says_so(script, tmp_path):
    missing = tmp_path / "outputs" / "typo"
    line = error_line(run_script(script, f"run={missing}"))
    assert line == (
        f"error: no run directory at {missing}: expected {missing}/.hydra/config.yaml and "
        f"{missing}/checkpoints/ (give the directory a training run wrote, e.g. "
        "outputs/2026-11-21/10-00-00)"
    )


@pytest.mark.slow
def test_a_truncated_checkpoint_names_the_file_and_the_checkpoints_that_load(run_copy):
    best = run_copy / "checkpoints" / "best.pt"
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])
    line = error_line(run_script("translate.py", f"run={run_copy}", stdin=b"Ein Hund.\n"))
    steps = sorted(p.name for p in (run_copy / "checkpoints").glob("step_*.pt"))
    newest = max(steps, key=lambda name: int(name[5:-3]))
    assert line.startswith(f"error: cannot load checkpoint {best}: it is damaged (cut short")
    assert f"these load: checkpoint=last ({newest})" in line
    older = [name for name in steps if name != newest]
    assert all(f"checkpoint={name}" in line for name in older)
    # ... and the name it suggests works
    done = run_script("translate.py", f"run={run_copy}", f"checkpoint={older[0]}", stdin=b"Ein\n")
    assert done.returncode == 0 and done.stdout.strip(), done.stderr.decode()


@pytest.mark.slow
def test_a_truncated_tokenizer_names_the_file_and_what_to_do(run_copy):
    tokenizer = run_copy / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:400])
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    line = error_line(run_script("translate.py", f"run={run_copy}", stdin=b"Ein Hund.\n"))
    assert line.startswith(f"error: {tokenizer} is damaged (")
    assert "copy it again from the run that trained it" in line
    assert {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()} == before


@settings(max_examples=25, deadline=None, derandomize=True)
@given(cut=st.floats(0.0, 0.999), flips=st.lists(st.integers(0, 10**6), max_size=3))
def test_any_damage_to_a_tokenizer_file_is_one_named_error_or_a_working_tokenizer(cut, flips):
    with tempfile.TemporaryDirectory() as tmp:
        TokenizerPair(TOKENIZER, TOKENIZER).save(tmp)
        path = Path(tmp) / "tokenizer.json"
        data = bytearray(path.read_bytes())
        for flip in flips:
            data[flip % len(data)] ^= 0x5A
        path.write_bytes(bytes(data[: max(1, int(len(data) * cut))]))
        try:
            pair = TokenizerPair.load(tmp)
        except DataError as error:
            assert str(path) in str(error) and "\n" not in str(error)
        else:
            assert pair.src.get_vocab_size() > 0


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch ran-code-from-a-checkpoint",))


@pytest.mark.slow
def test_a_checkpoint_with_code_is_refused_without_suggesting_to_run_it(run_copy, tmp_path):
    best = run_copy / "checkpoints" / "best.pt"
    torch.save(load_checkpoint(best) | {"payload": RunsCode()}, best)
    result = run_script("translate.py", f"run={run_copy}", stdin=b"Ein Hund.\n")
    line = error_line(result)
    assert line == (
        f"error: refusing checkpoint {best}: it holds code (posix.system) and minimt refuses "
        "to run code from a file (checkpoints load weights only); use a checkpoint that "
        "minimt's training wrote"
    )
    assert b"weights_only=False" not in result.stderr
    assert not (REPO / "ran-code-from-a-checkpoint").exists()


@pytest.mark.slow
def test_full_error_shows_the_traceback_in_every_script(tmp_path):
    result = run_script("translate.py", f"run={tmp_path}", HYDRA_FULL_ERROR="1")
    assert result.returncode == 1 and b"Traceback" in result.stderr
    assert b"minimt.errors.NotFound: no run directory at" in result.stderr


@pytest.mark.slow
def test_train_script_reports_a_data_error_as_one_line(tmp_path):
    args = ["experiment=smoke", "data.url=/nonexistent/place", f"data.dir={tmp_path / 'data'}"]
    args.append(f"hydra.run.dir={tmp_path / 'run'}")
    line = error_line(run_script("train.py", *args))
    assert line.startswith("error: /nonexistent/place/") and "data.url" in line
    full = run_script("train.py", *args, HYDRA_FULL_ERROR="1")
    assert full.returncode == 1 and b"Traceback" in full.stderr


def test_loading_tells_damage_from_code(tmp_path):
    path = tmp_path / "step_5.pt"
    save_checkpoint(path, {"model": {"w": torch.zeros(1000)}})
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DamagedCheckpoint, match=r"step_5\.pt: it is damaged \(cut short"):
        load_checkpoint(path)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(DamagedCheckpoint, match=r"step_5\.pt: it is damaged"):
        load_checkpoint(path)
    torch.save({"x": RunsCode()}, path)
    with pytest.raises(CheckpointWithCode, match=r"step_5\.pt: it holds code") as error:
        load_checkpoint(path)
    assert error.value.__cause__ is None  # torch's advice to load with weights_only=False


def test_a_folder_without_checkpoints_is_not_a_run_directory(tmp_path):
    with pytest.raises(NotFound, match=f"no run directory at {re.escape(str(tmp_path))}:"):
        checkpoint_dir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    assert checkpoint_dir(tmp_path) == tmp_path / "checkpoints"


# A full disk: /dev/full fails every write with ENOSPC, as a full filesystem does


@pytest.fixture
def disk_full(monkeypatch):
    """Make the next atomic write of a path go to /dev/full (its temp file links there)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda _: "feedbeef")

    def fill(path: Path) -> None:
        tmp = path.with_name(f".{path.name}.feedbeef{atomic.TEMP_SUFFIX}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.symlink_to("/dev/full")

    return fill


def write_tokenizer(path: Path) -> None:
    tokenizer = train_bpe(["ein Hund", "a dog"] * 5, vocab_size=300)
    TokenizerPair(tokenizer, tokenizer).save(path.parent)


WRITERS = {
    "checkpoints/step_20.pt": lambda path: save_checkpoint(path, {"w": torch.zeros(10_000)}),
    "metrics.json": lambda path: save_json(path, {"steps": 20}),
    "tokenizer.json": write_tokenizer,
    "hyps.test_2016_flickr.txt": lambda path: write_text(path, "a dog\n" * 1000),
}


@pytest.mark.parametrize("name", WRITERS)
def test_a_full_disk_names_the_file_and_the_free_space_and_keeps_the_old_one(
    name, disk_full, tmp_path
):
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"the previous version")
    disk_full(path)
    with pytest.raises(WriteError) as error:
        WRITERS[name](path)
    assert re.fullmatch(
        rf"could not write {re.escape(str(path))}: No space left on device \([\d,.]+ MB free on "
        rf"the filesystem of {re.escape(str(path.parent))}\)(; the checkpoints .* intact)?",
        str(error.value),
    ), error.value
    assert path.read_bytes() == b"the previous version"
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_torch_reporting_a_full_disk_as_runtime_error_is_a_write_error(tmp_path, monkeypatch):
    def save_stopped_by_torch(obj, file):  # what torch.save into a full disk raises
        file.write(b"PK\x03\x04")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1237248")

    monkeypatch.setattr(torch, "save", save_stopped_by_torch)
    with pytest.raises(CheckpointWriteError, match=r"step_20\.pt: torch.save stopped \(\[enf.*"):
        save_checkpoint(tmp_path / "step_20.pt", {})
    assert list(tmp_path.iterdir()) == []


def test_a_read_failing_inside_an_atomic_write_stays_a_read_error(tmp_path):
    with pytest.raises(FileNotFoundError) as error, atomic_write(tmp_path / "out.txt"):
        (tmp_path / "missing.txt").read_text()
    assert not isinstance(error.value, MinimtError)


def test_a_folder_that_cannot_be_created_is_a_write_error_naming_the_file(tmp_path):
    (tmp_path / "a_file").write_text("")  # data.dir=a_file/data: its parent is no folder
    target = tmp_path / "a_file" / "data" / "train.de.gz"
    with pytest.raises(WriteError, match=f"could not write {target}: "):
        write_text(target, "Ein Hund.\n")


# Training into a disk that fills up: one line that says how to resume, and the resume finishes

FILLS_AT_STEP_20 = """
import errno, runpy, sys, torch
real_save = torch.save

class DiskFillsUp:
    def __init__(self, file):
        self.file, self.room = file, 4096
    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)
    def flush(self):
        self.file.flush()

def save(obj, file):
    real_save(obj, DiskFillsUp(file) if ".step_20.pt." in str(file.name) else file)

torch.save = save
sys.argv = ["scripts/train.py", *sys.argv[1:]]
runpy.run_path("scripts/train.py", run_name="__main__")
"""


@pytest.mark.slow
def test_a_disk_that_fills_up_while_training_says_how_to_resume(multi30k_dir, tmp_path):
    run = tmp_path / "run"
    args = tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.max_steps=30")
    args.append(f"hydra.run.dir={run}")
    stopped = subprocess.run(
        [sys.executable, "-c", FILLS_AT_STEP_20, *args], capture_output=True, env=ENV, cwd=REPO
    )
    line = error_line(stopped)
    ckpts = run / "checkpoints"
    assert line.startswith(
        f"error: could not write {ckpts}/step_20.pt: No space left on device ("
    ), line
    assert f"MB free on the filesystem of {ckpts}); the checkpoints already in" in line
    assert (
        f"the newest complete checkpoint is {ckpts}/step_10.pt: free space, then resume: " in line
    )
    command = line.split("then resume: ")[1]
    assert command.startswith("python scripts/train.py experiment=smoke ")
    assert command.endswith(f" resume={run}") and "hydra.run.dir" not in command
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_10.pt"]

    resumed = subprocess.run(
        [sys.executable, *shlex.split(command)[1:]], capture_output=True, env=ENV, cwd=REPO
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert load_checkpoint(ckpts / "step_30.pt")["state"]["step"] == 30
    assert (run / "metrics.json").is_file()
