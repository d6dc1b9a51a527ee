"""Faults a user meets while the data is prepared and scored: a full disk under data.dir (one
line, no temp file), and validation pairs longer than the position table (skipped by the loss,
counted in metrics.json, refused when none fits)."""

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

import minimt.data.multi30k as multi30k
from minimt import allocator, atomic
from minimt.atomic import WriteError, atomic_write
from minimt.cli import one_line_errors
from minimt.config import ConfigError, validate_config
from minimt.data.corpus import DataError
from minimt.data.multi30k import fetch_multi30k_file
from minimt.data.splits import prepare_data
from minimt.signals import StopRequest, Terminated
from minimt.study.views import study_hooks
from minimt.train.loop import train
from minimt.train.progress import event_write_faults
from minimt.translator import Translator
from tests.helpers import (
    ENV,
    REPO,
    compose_config,
    error_line,
    tiny_run_overrides,
    tiny_transformer,
)

NO_SPACE = "No space left on device"

# shutil.copyfile copies with os.sendfile on Linux and names its source in the error it raises
SENDFILE_COPIES = sys.platform.startswith("linux") and hasattr(os, "sendfile")


def no_space(*, filename: str, filename2: str | None = None) -> OSError:
    """The ENOSPC error shutil.copyfile raises: its source in `filename`."""
    return OSError(errno.ENOSPC, NO_SPACE, filename, None, filename2)


def temp_files(folder: Path) -> list[Path]:
    return list(folder.rglob(f"*{atomic.TEMP_SUFFIX}"))


def user_sees(error: Exception) -> str:
    """What a script prints for `error`: its one `error: ...` line (minimt.cli)."""

    @one_line_errors
    def main() -> None:
        raise error

    with pytest.raises(SystemExit) as stopped:
        main()
    return str(stopped.value.code)


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
import errno, os, runpy, sys
real_sendfile = os.sendfile

def sendfile(out_fd, in_fd, offset, count):
    if offset:
        raise OSError(errno.ENOSPC, "No space left on device")
    return os.write(out_fd, os.pread(in_fd, os.fstat(in_fd).st_size // 2, 0))

os.sendfile = sendfile
sys.argv = ["scripts/train.py", *sys.argv[1:]]
runpy.run_path("scripts/train.py", run_name="__main__")
"""


@pytest.mark.skipif(not SENDFILE_COPIES, reason="shutil.copyfile uses os.sendfile on Linux only")
def test_a_full_data_dir_mid_copy_is_one_line_and_leaves_no_temp(multi30k_dir, tmp_path):
    data = tmp_path / "data"
    args = [*tiny_run_overrides(multi30k_dir, data), f"hydra.run.dir={tmp_path / 'run'}"]
    stopped = subprocess.run(
        [sys.executable, "-c", SENDFILE_FILLS_UP, *args], capture_output=True, env=ENV, cwd=REPO
    )
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


# Validation pairs longer than the position table


def short_table(multi30k_dir, tmp_path: Path, *extra: str):
    """The failing config: learned positions, a 32-position table, training pairs of <= 30."""
    overrides = tiny_run_overrides(multi30k_dir, tmp_path / "data", "pe=learned", *extra)
    return compose_config(*overrides, "model.max_seq_len=32", "data.max_train_len=30")


def test_validation_pairs_longer_than_the_table_are_skipped_and_counted(
    multi30k_dir, tmp_path, caplog
):
    cfg = short_table(multi30k_dir, tmp_path, "data.test_sets=[test_2016_flickr]")
    run = prepare_data(cfg)
    (val_src, val_tgt), (test_src, _) = run.splits.val, run.splits.tests["test_2016_flickr"]
    src_len = [len(ids) for ids in run.tokenizers.encode_src(val_src)]
    tgt_len = [len(ids) for ids in run.tokenizers.encode_tgt(val_tgt)]
    too_long = sum(max(s, t) + 1 > 32 for s, t in zip(src_len, tgt_len, strict=True))
    assert 0 < too_long < len(val_src)
    assert run.summary["val_pairs_skipped_by_loss"] == too_long
    assert len(run.val_batches.pairs) == len(val_src) - too_long
    assert run.val_batches.lengths.max() <= 32
    assert f"the validation loss skips {too_long} of {len(val_src)} validation pairs" in caplog.text
    test_cut = sum(len(ids) > 31 for ids in run.tokenizers.encode_src(test_src))
    expected_cut = {"val": sum(n > 31 for n in src_len), "test_2016_flickr": test_cut}
    assert run.summary["sources_cut"] == expected_cut


@pytest.mark.slow
def test_a_table_shorter_than_some_validation_pairs_trains_and_records_them(
    multi30k_dir, tmp_path, caplog
):
    cfg = short_table(multi30k_dir, tmp_path, "trainer.max_steps=4", "trainer.val_every=2")
    metrics = train(cfg, tmp_path / "run", study_hooks(cfg))
    assert [entry["step"] for entry in metrics["val_history"]] == [2, 4]
    recorded = json.loads((tmp_path / "run" / "metrics.json").read_text())["data"]
    assert recorded["val_pairs_skipped_by_loss"] > 0
    assert recorded["sources_cut"]["val"] > 0
    assert "are cut to that length" in caplog.text  # greedy BLEU: through fit_to_model


def test_a_table_no_validation_pair_fits_is_refused_before_training(multi30k_dir, tmp_path):
    overrides = tiny_run_overrides(multi30k_dir, tmp_path / "data")
    cfg = compose_config(*overrides, "model.max_seq_len=4", "data.max_train_len=3")
    with pytest.raises(DataError) as raised:
        train(cfg, tmp_path / "run")
    assert re.fullmatch(
        r"none of the 100 validation pairs fits model.max_seq_len=4 positions \(counting "
        r"<bos>/<eos>\): the longest needs (\d+), the shortest \d+; raise model.max_seq_len to "
        r"\1 to score every one",
        str(raised.value),
    ), raised.value
    assert not (tmp_path / "run" / "checkpoints").exists()


# Found by tests/test_fuzz_faults.py


def test_a_batch_smaller_than_the_longest_training_pair_is_refused_before_training(
    multi30k_dir, tmp_path
):
    overrides = tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.batch_tokens=5")
    with pytest.raises(DataError) as raised:
        train(compose_config(*overrides, "data.max_train_len=18"), tmp_path / "run")
    assert re.fullmatch(
        r"trainer.batch_tokens=5 is smaller than the (\d+) positions the longest training pair "
        r"needs \(counting <bos>/<eos>; data.max_train_len=18 keeps pairs of up to 18 tokens a "
        r"side\): raise trainer.batch_tokens to at least \1, or lower data.max_train_len to 4",
        str(raised.value),
    ), raised.value
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_test_beam_the_vocabulary_cannot_hold_is_a_config_error():
    cfg = compose_config("experiment=smoke", "decoding.test_beam=501")
    with pytest.raises(
        ConfigError,
        match=r"decoding.test_beam=501 needs a target vocabulary of "
        r"at least 1002 tokens .* tokenizer.vocab_size=1000: lower "
        r"decoding.test_beam to 500",
    ):
        validate_config(cfg)


def test_a_beam_the_checkpoints_vocabulary_cannot_hold_is_refused_before_decoding():
    model = tiny_transformer(40)
    translator = Translator(model, None, max_len_a=1.5, max_len_b=10, batch_tokens=100)
    translator.model_name = "run/checkpoints/best.pt"
    translator.check_beams([1, 20])
    with pytest.raises(ConfigError) as raised:
        translator.check_beams([1, 21, 30])
    assert str(raised.value) == (
        "beam=21 needs a target vocabulary of at least 42 tokens (beam search ranks 2 x beam "
        "extensions a step); run/checkpoints/best.pt has 40: use beam <= 20"
    )


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
