"""A damaged run directory (a checkpoint cut short, changed, holding code or non-finite weights;
a tokenizer damaged or of another run; a broken metrics.json; a folder that is no run): one line
naming the file and what still loads, and nothing written."""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minimt.checkpoint import (
    CheckpointMismatch,
    CheckpointWithCode,
    DamagedCheckpoint,
    NonFiniteCheckpoint,
    average_last_checkpoints,
    is_loadable,
    load_checkpoint,
    save_checkpoint,
)
from minimt.data.corpus import DataError
from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.errors import NotFound
from minimt.rundir import (
    DamagedRecord,
    check_tokenizers,
    checkpoint_dir,
    read_metrics,
    tokenizer_digest,
)
from tests.helpers import REPO, error_line, run_script, todays_frozen_run

TOKENIZER = train_bpe(["Ein Hund rennt.", "A dog runs.", "Zwei Katzen schlafen."] * 5, 300)


GERMAN = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball."] * 5


def weights(width: int) -> dict:
    return {"model": {"w": torch.arange(float(width)), "b": torch.ones(3)}, "state": {}}


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


def test_a_folder_without_checkpoints_is_not_a_run_directory(tmp_path):
    with pytest.raises(NotFound, match=f"no run directory at {re.escape(str(tmp_path))}:"):
        checkpoint_dir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    assert checkpoint_dir(tmp_path) == tmp_path / "checkpoints"


# Checkpoints


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


def test_a_changed_byte_in_a_checkpoint_is_damage_not_a_wrong_weight(tmp_path):
    path = tmp_path / "best.pt"
    save_checkpoint(path, weights(4000))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the tensor data: torch.load alone would load it
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedCheckpoint, match=r"best\.pt: it is damaged .*fails its checksum"):
        load_checkpoint(path)
    assert not is_loadable(path)


@pytest.mark.parametrize("size", [0, 1, 30, 100])
def test_a_checkpoint_cut_to_a_few_bytes_is_damage_not_an_os_error(tmp_path, size):
    path = tmp_path / "step_5.pt"
    save_checkpoint(path, weights(10))
    path.write_bytes(path.read_bytes()[:size])
    with pytest.raises(DamagedCheckpoint, match=r"step_5\.pt: it is damaged \(cut short"):
        load_checkpoint(path)


def test_averaging_a_step_checkpoint_of_another_run_names_it(tmp_path):
    save_checkpoint(tmp_path / "step_10.pt", weights(8))
    save_checkpoint(tmp_path / "step_20.pt", weights(6))
    with pytest.raises(CheckpointMismatch, match=r"step_10\.pt with .*step_20\.pt: they hold"):
        average_last_checkpoints(tmp_path, 2)
    assert not (tmp_path / "averaged.pt").exists()


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


def poisoned_copy(tmp_path: Path, *checkpoints: str) -> Path:
    """A copy of today's frozen run whose `checkpoints` hold one weight of NaNs each: well-formed
    files that torch loads."""
    run = Path(shutil.copytree(todays_frozen_run(), tmp_path / "run"))
    for name in checkpoints:
        path = run / "checkpoints" / name
        saved = torch.load(path, weights_only=True)
        saved["model"]["decoder_layers.0.ffn.w1.weight"].fill_(float("nan"))
        torch.save(saved, path)
    return run


def test_a_checkpoint_with_non_finite_weights_is_refused_naming_the_tensor_and_what_loads(
    tmp_path,
):
    run = poisoned_copy(tmp_path, "best.pt")
    assert not is_loadable(run / "checkpoints" / "best.pt")
    line = error_line(run_script("translate.py", f"run={run}", stdin=b"Ein Hund rennt.\n"))
    assert f"cannot use checkpoint {run / 'checkpoints' / 'best.pt'}" in line
    assert "weight decoder_layers.0.ffn.w1.weight holds 128 NaN or inf values of 128" in line
    assert "these load: checkpoint=last (step_300.pt), checkpoint=step_200.pt" in line
    with pytest.raises(NonFiniteCheckpoint, match="step_300.pt: its weight"):
        average_last_checkpoints(poisoned_copy(tmp_path / "b", "step_300.pt") / "checkpoints", 2)


def test_non_finite_weights_are_never_saved(tmp_path):
    weights = {"w": torch.tensor([1.0, float("inf")])}
    with pytest.raises(
        NonFiniteCheckpoint, match=r"not saving checkpoint .*step_9\.pt: its weight w"
    ):
        save_checkpoint(tmp_path / "step_9.pt", {"model": weights})
    assert not (tmp_path / "step_9.pt").exists()
    optimizer = {"state": {0: {"exp_avg": torch.tensor([float("nan")])}}}
    with pytest.raises(NonFiniteCheckpoint, match="optimizer state state.0.exp_avg holds 1 NaN"):
        save_checkpoint(tmp_path / "step_9.pt", {"model": {}, "optimizer": optimizer})


# Tokenizers


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


@pytest.fixture(scope="module")
def tokenizers() -> TokenizerPair:
    tokenizer = train_bpe(GERMAN, vocab_size=300)
    return TokenizerPair(tokenizer, tokenizer)


def trained_with(run: Path, tokenizers: TokenizerPair, vocab_size: int) -> dict:
    """A checkpoint, as training saves it, of a model trained beside the tokenizers in `run`."""
    tokenizers.save(run)
    table = torch.zeros(vocab_size, 4)
    model = {"embedding.src_tokens.weight": table, "embedding.tgt_tokens.weight": table}
    return {"model": model, "state": {"tokenizer_digest": tokenizer_digest(run)}}


def test_a_tokenizer_of_another_vocabulary_gives_both_sizes(tmp_path, tokenizers):
    checkpoint = tmp_path / "checkpoints" / "best.pt"
    saved = trained_with(tmp_path, tokenizers, tokenizers.src_vocab_size + 200)
    with pytest.raises(CheckpointMismatch) as error:
        check_tokenizers(tokenizers, saved, checkpoint)
    size = tokenizers.src_vocab_size
    assert str(error.value) == (
        f"{tmp_path / 'tokenizer.json'} and {checkpoint} come from different runs: the tokenizer "
        f"has a source vocabulary of {size} tokens, the checkpoint was trained with {size + 200}; "
        "copy the tokenizer of the run that wrote the checkpoint"
    )


def test_an_edited_tokenizer_of_the_same_size_is_refused(tmp_path, tokenizers):
    saved = trained_with(tmp_path, tokenizers, tokenizers.src_vocab_size)
    check_tokenizers(tokenizers, saved, tmp_path / "checkpoints" / "best.pt")  # its own: fine
    path = tmp_path / "tokenizer.json"
    text = path.read_text()
    merges = text.index('"merges"')  # swap the first two merge rules: the vocabulary stays
    first, second = '"i",\n        "e"', '"e",\n        "n"'
    swapped = text[merges:].replace(first, "FIRST", 1).replace(second, first, 1)
    path.write_text(text[:merges] + swapped.replace("FIRST", second, 1))
    edited = TokenizerPair.load(tmp_path)
    assert edited.src_vocab_size == tokenizers.src_vocab_size
    with pytest.raises(CheckpointMismatch, match="is not the tokenizer .* trained with"):
        check_tokenizers(edited, saved, tmp_path / "checkpoints" / "best.pt")


def test_a_checkpoint_without_a_recorded_tokenizer_is_checked_by_size_only(tmp_path, tokenizers):
    saved = trained_with(tmp_path, tokenizers, tokenizers.src_vocab_size)
    del saved["state"]["tokenizer_digest"]
    (tmp_path / "tokenizer.json").write_text((tmp_path / "tokenizer.json").read_text() + "\n")
    check_tokenizers(tokenizers, saved, tmp_path / "checkpoints" / "best.pt")


# metrics.json


@pytest.mark.parametrize("content", [b"", b'{"steps": 5', b"\xff\xfe", b"[1, 2]"])
def test_a_damaged_metrics_file_names_itself(tmp_path, content):
    (tmp_path / "metrics.json").write_bytes(content)
    with pytest.raises(DamagedRecord, match=f"{tmp_path / 'metrics.json'}"):
        read_metrics(tmp_path)


def test_a_folder_in_place_of_metrics_is_damage(tmp_path):
    (tmp_path / "metrics.json").mkdir()
    with pytest.raises(DamagedRecord, match="metrics.json is damaged"):
        read_metrics(tmp_path)


@pytest.mark.slow
def test_evaluate_stops_on_a_damaged_metrics_file_before_writing_anything(run_copy, tmp_path):
    run = run_copy
    (run / "metrics.json").write_text('{"steps": ')
    (tmp_path / "in.de").write_text("Ein Hund.\n")
    (tmp_path / "in.en").write_text("A dog.\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = run_script(
        "evaluate.py", f"run={run}", f"src={tmp_path / 'in.de'}", f"ref={tmp_path / 'in.en'}"
    )
    assert error_line(result).startswith(f"error: {run / 'metrics.json'} is damaged (not the JSON")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
