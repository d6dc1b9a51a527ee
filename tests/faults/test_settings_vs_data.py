"""Settings the data or the checkpoint cannot hold: validation pairs longer than the position
table (skipped by the loss, counted in metrics.json, refused when none fits), a batch smaller than
the longest training pair, a beam wider than the vocabulary; each refused before any work."""

import json
import re
from pathlib import Path

import pytest

from minimt.config import ConfigError, validate_config
from minimt.data.corpus import DataError
from minimt.data.splits import prepare_data
from minimt.study.views import study_hooks
from minimt.train.loop import train
from minimt.translator import Translator
from tests.helpers import (
    compose_config,
    tiny_run_overrides,
    tiny_transformer,
)


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
    overrides = tiny_run_overrides(multi30k_dir, tmp_path / "data", "data.max_val_pairs=100")
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
