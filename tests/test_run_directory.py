"""What the fuzz suites found in the run directory's files, one named test per finding."""

import runpy
import shutil
from pathlib import Path

import pytest
import torch

from minimt.checkpoint import (
    CheckpointMismatch,
    DamagedCheckpoint,
    NonFiniteCheckpoint,
    average_last_checkpoints,
    is_loadable,
    load_checkpoint,
    save_checkpoint,
)
from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.rundir import DamagedRecord, check_tokenizers, read_metrics, tokenizer_digest
from tests.helpers import REPO, error_line, run_script, todays_frozen_run

GERMAN = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball."] * 5


def weights(width: int) -> dict:
    return {"model": {"w": torch.arange(float(width)), "b": torch.ones(3)}, "state": {}}


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


@pytest.mark.parametrize(
    ("script", "argument", "named"),
    [
        ("translate", "run=-1", "run=-1 must be a path"),
        ("translate", "checkpoint=0", "checkpoint=0 must be a path"),
        ("translate", "input=1.5", "input=1.5 must be a path"),
        ("translate", "beam=0", "beam=0 must be an integer >= 1"),
        ("evaluate", "beam={a:1}", "beam={a:1}: arguments are key=value"),
        ("evaluate", "beam=[1,", "beam=[1,: arguments are key=value"),  # YAML cut short
        ("evaluate", "split=3", "split=3 must be a list of split names"),
        ("average_checkpoints", "last=abc", "last='abc' must be an integer >= 1"),
    ],
)
def test_a_script_argument_of_the_wrong_type_is_one_line_naming_it(script, argument, named):
    main = runpy.run_path(str(REPO / "scripts" / f"{script}.py"))["main"]
    run = [] if argument.startswith("run=") else ["run=outputs/some-run"]
    with pytest.raises(SystemExit) as exit:
        main([*run, argument])
    assert str(exit.value).startswith(f"error: {named}") and "\n" not in str(exit.value)


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
