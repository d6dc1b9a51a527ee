"""A write that fails (a full disk, no permission, a read-only filesystem, a file where a folder
should be): one line naming the file, why, and what is intact or how to resume; no file is left
half-written and no temp file behind."""

import errno
import io
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

import minimt.data.multi30k as multi30k
from minimt import atomic
from minimt.atomic import WriteError, atomic_write, write_text
from minimt.checkpoint import (
    CheckpointWriteError,
    load_checkpoint,
    save_checkpoint,
    save_json,
)
from minimt.cli import one_line_errors
from minimt.data.corpus import DataError
from minimt.data.multi30k import fetch_multi30k_file
from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.errors import MinimtError
from minimt.train.progress import event_write_faults
from scripts import collect_runs
from tests.helpers import (
    QUICK_FINISH,
    REPO,
    error_line,
    run_in_process,
    run_script,
    temp_files,
    tiny_run_overrides,
)

NO_SPACE = "No space left on device"

# shutil.copyfile copies with os.sendfile on Linux and names its source in the error it raises
SENDFILE_COPIES = sys.platform.startswith("linux") and hasattr(os, "sendfile")


def no_space(*, filename: str, filename2: str | None = None) -> OSError:
    """The ENOSPC error shutil.copyfile raises: its source in `filename`."""
    return OSError(errno.ENOSPC, NO_SPACE, filename, None, filename2)


def user_sees(error: Exception) -> str:
    """What a script prints for `error`: its one `error: ...` line (minimt.cli)."""

    @one_line_errors
    def main() -> None:
        raise error

    with pytest.raises(SystemExit) as stopped:
        main()
    return str(stopped.value.code)


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


# A full disk while copying: the error names the source, the fault is the destination's


@pytest.mark.parametrize("copy_target", [None, "tmp"], ids=["source-only", "source-and-target"])
def test_a_full_disk_blamed_on_the_source_is_the_destinations_one_line(tmp_path, copy_target):
    source, path = tmp_path / "raw" / "train.de.gz", tmp_path / "data" / "train.de.gz"
    source.parent.mkdir()
    source.write_bytes(b"the raw file")
    path.parent.mkdir()
    path.write_bytes(b"the previous version")
    with pytest.raises(WriteError) as raised, atomic_write(path) as tmp:
        tmp.write_bytes(b"half a co")
        raise no_space(filename=str(source), filename2=str(tmp) if copy_target else None)
    line = user_sees(raised.value)
    assert re.fullmatch(
        rf"error: could not write {re.escape(str(path))}: {NO_SPACE} \([\d,.]+ MB free on the "
        rf"filesystem of {re.escape(str(path.parent))}\)",
        line,
    ), line
    assert path.read_bytes() == b"the previous version"
    assert temp_files(tmp_path) == []


def test_a_failed_rename_is_the_destinations_whatever_file_it_names(tmp_path, monkeypatch):
    def replace_fails(src, dst):
        raise OSError(errno.EIO, "Input/output error", "/some/other/file")

    monkeypatch.setattr(atomic.os, "replace", replace_fails)
    path = tmp_path / "metrics.json"
    with pytest.raises(WriteError, match=f"could not write {path}: Input/output error"):
        atomic.write_text(path, "{}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_source_that_cannot_be_read_stays_its_own_error(tmp_path):
    source = tmp_path / "train.de.gz"
    with pytest.raises(OSError) as raised, atomic_write(tmp_path / "out" / "train.de.gz"):
        raise OSError(errno.EIO, "Input/output error", str(source))
    assert not isinstance(raised.value, WriteError)
    assert temp_files(tmp_path) == []


def test_a_raw_file_that_cannot_be_read_is_a_data_error_naming_it(tmp_path, monkeypatch):
    source = copy_of_train_de(tmp_path)

    def unreadable(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied", str(src))

    monkeypatch.setattr(multi30k.shutil, "copyfile", unreadable)
    with pytest.raises(DataError, match=f"^cannot read {source}: Permission denied. Set data.url"):
        fetch_multi30k_file(str(source.parent), tmp_path / "data", "train", "de")
    assert list((tmp_path / "data").iterdir()) == []


def copy_of_train_de(tmp_path: Path) -> Path:
    """A folder of raw files holding train.de.gz, copied from the real corpus."""
    folder = Path(os.environ.get("MINIMT_DATA_URL") or REPO.parent / "shared/data/multi30k")
    if not (folder / "train.de.gz").is_file():
        pytest.skip(f"no Multi30k train.de.gz in {folder}")
    source = tmp_path / "raw" / "train.de.gz"
    source.parent.mkdir()
    source.write_bytes((folder / "train.de.gz").read_bytes())
    return source


# Through the real data preparation: os.sendfile fills the disk halfway through the copy


SENDFILE_FILLS_UP = """
import errno, os
real_sendfile = os.sendfile

def sendfile(out_fd, in_fd, offset, count):
    if offset:
        raise OSError(errno.ENOSPC, "No space left on device")
    return os.write(out_fd, os.pread(in_fd, os.fstat(in_fd).st_size // 2, 0))

os.sendfile = sendfile
"""


@pytest.mark.skipif(not SENDFILE_COPIES, reason="shutil.copyfile uses os.sendfile on Linux only")
def test_a_full_data_dir_mid_copy_is_one_line_and_leaves_no_temp(multi30k_dir, tmp_path):
    data = tmp_path / "data"
    args = [*tiny_run_overrides(multi30k_dir, data), f"hydra.run.dir={tmp_path / 'run'}"]
    stopped = run_script("train.py", *args, prelude=SENDFILE_FILLS_UP)
    line = error_line(stopped)
    assert re.fullmatch(
        rf"error: could not write {re.escape(str(data))}/train.de.gz: {NO_SPACE} \([\d,.]+ MB "
        rf"free on the filesystem of {re.escape(str(data))}\); train.de.gz was not cached, the "
        rf"files already in {re.escape(str(data))} \(data.dir\) are intact; no step checkpoint "
        r"was saved yet: free space, then start the run again",
        line,
    ), line
    assert list(data.iterdir()) == []


@pytest.mark.skipif(not SENDFILE_COPIES, reason="shutil.copyfile uses os.sendfile on Linux only")
def test_a_full_data_dir_mid_copy_keeps_the_files_cached_before(tmp_path, monkeypatch):
    source, data = copy_of_train_de(tmp_path), tmp_path / "data"
    data.mkdir()
    (data / "val.de.gz").write_bytes(b"cached before")
    real_sendfile = os.sendfile

    def fills_up(out_fd, in_fd, offset, count):
        if offset:
            raise OSError(errno.ENOSPC, NO_SPACE)
        return real_sendfile(out_fd, in_fd, offset, os.fstat(in_fd).st_size // 2)

    monkeypatch.setattr(os, "sendfile", fills_up)
    with pytest.raises(WriteError) as raised:
        fetch_multi30k_file(str(source.parent), data, "train", "de")
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith(f"could not write {data / 'train.de.gz'}: {NO_SPACE} (")
    assert [p.name for p in data.iterdir()] == ["val.de.gz"]


# Training into a disk that fills up: one line that says how to resume, and the resume finishes


FILLS_AT_STEP_20 = """
import errno, torch
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
"""


@pytest.mark.slow
def test_a_disk_that_fills_up_while_training_says_how_to_resume(multi30k_dir, tmp_path):
    run = tmp_path / "run"
    args = tiny_run_overrides(
        multi30k_dir,
        tmp_path / "data",
        "trainer.max_steps=30",
        *QUICK_FINISH,
    )
    args.append(f"hydra.run.dir={run}")
    stopped = run_script("train.py", *args, prelude=FILLS_AT_STEP_20)
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

    resumed = run_script("train.py", *shlex.split(command)[2:])
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert load_checkpoint(ckpts / "step_30.pt")["state"]["step"] == 30
    assert (run / "metrics.json").is_file()


def test_a_refused_event_file_write_is_one_line_naming_it_without_the_threads_traceback(
    tmp_path, monkeypatch, capfd
):
    real_open = io.open

    def refusing(file, mode="r", *args, **kwargs):
        if "tfevents" in str(file) and "a" in mode:
            raise OSError(errno.ENOSPC, NO_SPACE)
        return real_open(file, mode, *args, **kwargs)

    with pytest.raises(WriteError) as raised, event_write_faults(tmp_path):
        with SummaryWriter(tmp_path) as writer:
            monkeypatch.setattr(io, "open", refusing)
            writer.add_scalar("train/loss", 1.0, 1)
            writer.flush()
    assert str(raised.value).startswith(f"could not write {tmp_path}/events.out.tfevents.*: ")
    assert NO_SPACE in str(raised.value)
    assert "Traceback" not in capfd.readouterr().err


# The scripts' outputs: one line naming the file, what happened and what is intact


def fail_writing(monkeypatch, name: str, code: int) -> None:
    """The atomic write of a file called `name` fails with `code` (raised at its rename)."""
    commit = atomic._commit

    def failing(tmp: Path, path: Path) -> None:
        if path.name == name:
            raise OSError(code, os.strerror(code), str(tmp))
        commit(tmp, path)

    monkeypatch.setattr(atomic, "_commit", failing)


FAULTS = [errno.ENOSPC, errno.EACCES, errno.EROFS]


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_a_failed_translate_output_names_it_and_keeps_the_old_one(
    code, run, tmp_path, sources, monkeypatch, capsys
):
    out = tmp_path / "out.en"
    out.write_text("the previous translation\n")
    fail_writing(monkeypatch, "out.en", code)
    line = write_error("translate.py", [f"run={run}", f"input={sources}", f"output={out}"], capsys)
    assert line.startswith(f"error: could not write {out}: {os.strerror(code)}"), line
    assert line.endswith(f"; output={out} was not written (a file already there is intact)")
    assert out.read_text() == "the previous translation\n" and temp_files(tmp_path) == []


def test_a_full_disk_under_translate_output_is_one_line(run, tmp_path, sources, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    out = tmp_path / "out.en"
    with pytest.MonkeyPatch.context() as patch:  # its temp file is a link to /dev/full
        patch.setattr(atomic.secrets, "token_hex", lambda _: "feedbeef")
        (tmp_path / f".out.en.feedbeef{atomic.TEMP_SUFFIX}").symlink_to("/dev/full")
        line = write_error(
            "translate.py", [f"run={run}", f"input={sources}", f"output={out}"], capsys
        )
    assert re.fullmatch(
        rf"error: could not write {re.escape(str(out))}: No space left on device \([\d,.]+ MB "
        rf"free on the filesystem of {re.escape(str(tmp_path))}\); output=.* is intact\)",
        line,
    ), line
    assert not out.exists() and temp_files(tmp_path) == []


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
@pytest.mark.parametrize("name", ["report.csv", "test_bleu.png", "report.md"])
def test_a_failed_report_file_is_one_line_and_leaves_none_half_written(
    name, code, sweep, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    fail_writing(monkeypatch, name, code)
    line = write_error("report.py", [f"sweep={sweep}", f"out={out}"], capsys)
    assert line.startswith(f"error: could not write {out / name}: {os.strerror(code)}"), line
    assert line.endswith(
        f"each file in {out} is its previous version or its new one, none half-written"
    )
    assert not (out / name).exists() and temp_files(tmp_path) == []


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_a_failed_copy_of_collect_runs_leaves_the_run_uncollected(
    code, sweep, tmp_path, monkeypatch, capsys
):
    dest = tmp_path / "dest"
    fail_writing(monkeypatch, "metrics.json", code)
    line = write_error("collect_runs.py", [f"sweep={sweep}", f"dest={dest}"], capsys)
    target = next(dest.rglob("config.yaml")).parent
    assert line.startswith(
        f"error: could not write {target / 'metrics.json'}: {os.strerror(code)}"
    ), line
    assert line.endswith(
        f"{target} has no metrics.json until collect_runs.py runs again; the other runs in "
        f"{dest} are intact"
    )
    assert not list(dest.rglob("metrics.json")) and temp_files(tmp_path) == []


def test_collecting_again_after_a_failed_copy_completes_the_run(sweep, tmp_path, monkeypatch):
    dest = tmp_path / "dest"
    with pytest.MonkeyPatch.context() as patch:
        fail_writing(patch, "metrics.json", errno.ENOSPC)
        with pytest.raises(atomic.WriteError):
            collect_runs.collect_runs(sweep, dest)
    statuses = [status for _, status in collect_runs.collect_runs(sweep, dest)]
    assert statuses == ["replaced", "copied"] and len(list(dest.rglob("metrics.json"))) == 2


@pytest.mark.parametrize(
    "script, argv",
    [
        (
            "translate.py",
            lambda run, sources, blocked: [f"input={sources}", f"output={blocked}/o.en"],
        ),
        ("report.py", lambda run, sources, blocked: [f"out={blocked}"]),
        ("collect_runs.py", lambda run, sources, blocked: [f"dest={blocked}"]),
    ],
    ids=["translate", "report", "collect_runs"],
)
def test_a_file_where_the_output_folder_should_be_is_named(
    script, argv, run, sweep, sources, tmp_path, capsys
):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    first = f"run={run}" if script == "translate.py" else f"sweep={sweep}"
    line = write_error(script, [first, *argv(run, sources, blocked)], capsys)
    assert f"({blocked} is a file, not a folder)" in line, line
    assert blocked.read_text() == "not a folder" and temp_files(tmp_path) == []


def write_error(script: str, argv: list[str], capsys) -> str:
    """The one `error: ...` line scripts/<script> ends on, run in this process."""
    message, _, err = run_in_process(script, argv, capsys)
    assert isinstance(message, str) and message.startswith("error: "), (message, err)
    assert "\n" not in message and "Traceback" not in err, err
    return message
