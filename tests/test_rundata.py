"""A run's data: streamed training text, cached Arrow token ids, batches that match the text."""

import datasets
import pytest
import torch

import minimt.data.tokenizer
from minimt.data.batching import source_tensor
from minimt.data.corpus import DataError, read_parallel
from minimt.data.splits import load_text_splits, prepare_data
from tests.helpers import compose_config

TRAIN_PAIRS = 300


@pytest.fixture
def cfg(multi30k_dir, tmp_path):
    """The smoke config on the first few hundred Multi30k pairs, caching under tmp_path."""
    return compose_config(
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={tmp_path / 'data'}",
        f"data.max_train_pairs={TRAIN_PAIRS}",
    )


def test_training_pairs_are_the_tokenized_lines(cfg, multi30k_dir, tmp_path):
    data = prepare_data(cfg)
    src, tgt = read_parallel(multi30k_dir / "train.de.gz", multi30k_dir / "train.en.gz")
    assert data.splits.train.num_pairs == len(data.train_batches.pairs) == TRAIN_PAIRS
    batch = data.train_batches.collate([0, 7, 299])
    lines = [src[0], src[7], src[299]]
    assert torch.equal(batch.src, source_tensor(data.tokenizers.encode_src(lines)))
    assert data.tokenizers.decode_tgt(batch.tgt_out) == [tgt[0], tgt[7], tgt[299]]
    assert len(data.splits.val[0]) == 100 and list(data.splits.tests) == ["test_2016_flickr"]


def test_second_run_reuses_the_cached_token_ids(cfg, tmp_path, monkeypatch):
    first = prepare_data(cfg).train_batches
    (cached,) = (tmp_path / "data" / "token_ids").iterdir()
    assert first.pairs.cache_files == [{"filename": str(cached)}]  # memory-mapped from the cache

    def fail(*args, **kwargs):
        raise AssertionError("tokenizer trained or text streamed although both are cached")

    monkeypatch.setattr(minimt.data.tokenizer, "train_bpe", fail)
    monkeypatch.setattr(datasets.Dataset, "from_generator", fail)
    second = prepare_data(cfg).train_batches
    assert second.pairs.cache_files == first.pairs.cache_files
    assert second.batches(epoch=3) == first.batches(epoch=3)


def test_other_settings_get_their_own_token_ids(cfg, tmp_path):
    prepare_data(cfg)
    cfg.tokenizer.vocab_size = 1001
    prepare_data(cfg)
    cfg.data.max_train_pairs = TRAIN_PAIRS - 1
    assert len(prepare_data(cfg).train_batches.pairs) == TRAIN_PAIRS - 1
    assert len(list((tmp_path / "data" / "token_ids").iterdir())) == 3


def write_lines(path, count):
    path.write_text("".join(f"{path.name} {i}\n" for i in range(count)), encoding="utf-8")
    return path


def parallel_text_config(tmp_path, n_train_src, n_train_tgt):
    """data=parallel_text on files of "<split>.<side> <i>" lines; val and test have 3 pairs."""
    counts = {"train.src": n_train_src, "train.tgt": n_train_tgt}
    overrides = [
        f"data.{name}={write_lines(tmp_path / name, counts.get(name, 3))}"
        for name in ("train.src", "train.tgt", "val.src", "val.tgt", "test.src", "test.tgt")
    ]
    return compose_config(
        "experiment=smoke", "data=parallel_text", f"data.dir={tmp_path / 'data'}", *overrides
    )


def test_parallel_text_training_files_are_streamed(tmp_path):
    splits = load_text_splits(parallel_text_config(tmp_path, 40, 40).data)
    assert splits.train.src == tmp_path / "train.src" and splits.train.num_pairs == 40
    assert next(splits.train.rows()) == {"src": "train.src 0", "tgt": "train.tgt 0"}
    assert splits.val == (
        ["val.src 0", "val.src 1", "val.src 2"],
        ["val.tgt 0", "val.tgt 1", "val.tgt 2"],
    )


def test_line_count_mismatch_stops_before_any_tokenizer_or_token_ids(tmp_path):
    cfg = parallel_text_config(tmp_path, 40, 39)
    with pytest.raises(DataError) as error:
        prepare_data(cfg)
    message = str(error.value)
    assert f"{tmp_path / 'train.src'} has 40 lines" in message
    assert f"{tmp_path / 'train.tgt'} has 39 lines" in message
    assert not (tmp_path / "data").exists()
