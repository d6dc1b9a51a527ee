"""The length split (data.train_max_words), its long test sets and its random control
(data.long_tests_over + data.train_subsample), on word counts and on the toy corpus."""

from collections import Counter

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU

import minimt.data.tokenizer
from minimt.config import ConfigError, validate_config
from minimt.data import splits as run_splits
from minimt.data.corpus import DataError, read_parallel
from minimt.data.length_split import (
    POOLED_LONG,
    TRAIN,
    UNUSED,
    source_word_counts,
    split_by_length,
    subsample,
)
from minimt.data.splits import load_held_out, load_text_splits, prepare_data
from minimt.metrics import corpus_scores
from minimt.train.loop import train
from tests.helpers import TOY, compose_config

N = 6  # toy: 167 sources of <= 6 words, 233 longer (172 of 7 words, 61 of 8)


def toy_config(tmp_path, *overrides: str):
    files = [
        f"data.{split}.{side}={TOY / f'{split}.{lang}'}"
        for split in ("train", "val", "test")
        for side, lang in (("src", "de"), ("tgt", "en"))
    ]
    return compose_config(
        "experiment=smoke",
        "data=parallel_text",
        *files,
        f"data.dir={tmp_path / 'data'}",
        "tokenizer.vocab_size=400",
        "data.long_bucket_edges=[8]",
        *overrides,
    )


def split_config(tmp_path, seed=1):
    return toy_config(tmp_path, f"data.train_max_words={N}", f"trainer.seed={seed}")


def control_config(tmp_path, size, seed=1):
    return toy_config(
        tmp_path,
        f"data.long_tests_over={N}",
        f"data.train_subsample={size}",
        f"trainer.seed={seed}",
    )


def test_every_line_has_one_role_and_buckets_follow_the_word_counts():
    words = np.random.default_rng(0).integers(0, 40, size=5000)
    split = split_by_length(words, train_max_words=15, long_tests_over=15, bucket_edges=[21, 26])
    assert split.bucket_names == ("long_16-20", "long_21-25", "long_26+")
    roles = split.roles
    long = words > 15
    assert np.all(roles[~long] == TRAIN)  # every short line trains
    assert set(np.unique(roles[long])) == {UNUSED, 1, 2, 3}  # a long line: unused or a test
    assert (roles > 0).sum() == long.sum() // 2  # a half of the long lines is held out
    for k, (lo, hi) in enumerate([(16, 20), (21, 25), (26, 39)], start=1):
        assert np.all((words[roles == k] >= lo) & (words[roles == k] <= hi))


def test_the_control_sees_the_same_held_out_lines_and_trains_on_the_unused_ones():
    words = np.random.default_rng(1).integers(1, 30, size=2000)
    length = split_by_length(words, 15, 15, [21, 26])
    control = split_by_length(words, None, 15, [21, 26])
    assert np.array_equal(length.held_out_lines, control.held_out_lines)
    assert np.array_equal(length.roles[length.roles > 0], control.roles[control.roles > 0])
    assert np.array_equal(control.train_lines, np.flatnonzero(length.roles <= TRAIN))


def test_only_train_max_words_leaves_the_long_lines_unused_and_holds_none_out():
    words = np.array([3, 16, 15, 40])
    split = split_by_length(words, 15, None, [21, 26])
    assert split.roles.tolist() == [TRAIN, UNUSED, TRAIN, UNUSED] and split.test_names == []


def test_bucket_edges_must_lie_above_the_first_bucket():
    with pytest.raises(DataError, match=r"data.long_bucket_edges=\[16, 21\] must all be above"):
        split_by_length(np.arange(30), 15, 15, [16, 21])


def test_subsample_is_deterministic_for_a_seed_and_differs_across_seeds():
    first = subsample(1000, 300, seed=1)
    assert np.array_equal(first, subsample(1000, 300, seed=1))
    assert not np.array_equal(first, subsample(1000, 300, seed=2))
    assert len(set(first.tolist())) == 300 and np.all(np.diff(first) > 0) and first.max() < 1000


def test_a_subsample_larger_than_its_pool_is_an_error_naming_the_key_and_the_pool():
    with pytest.raises(DataError, match=r"data.train_subsample=11 .* than the 10 it draws from"):
        subsample(10, 11, seed=0)


def test_toy_split_roles_follow_the_source_files(tmp_path):
    splits = load_text_splits(split_config(tmp_path).data)
    words = source_word_counts(splits.train)
    assert Counter(words.tolist()) == {5: 65, 6: 102, 7: 172, 8: 61}
    roles = splits.lengths.roles
    assert len(roles) == 400 and np.all(roles[words <= N] == TRAIN)
    assert len(splits.lengths.held_out_lines) == 233 // 2
    assert list(splits.tests) == ["test", "long_7-7", "long_8+"]
    src, tgt = read_parallel(TOY / "train.de", TOY / "train.en")
    for k, name in enumerate(["long_7-7", "long_8+"], start=1):
        lines = np.flatnonzero(roles == k)
        assert splits.tests[name] == ([src[i] for i in lines], [tgt[i] for i in lines])


def test_long_test_sets_are_named_after_the_tests_and_loaded_by_name(tmp_path):
    data = split_config(tmp_path).data
    assert run_splits.test_set_names(data) == ["test", "long_7-7", "long_8+"]
    sources, references = load_held_out(data, ["long_8+"])["long_8+"]
    assert len(sources) == len(references) > 0
    assert all(len(line.split()) == 8 for line in sources)
    data.long_bucket_edges = [21]  # long_7-20 holds every long pair, long_21+ none: left out
    assert run_splits.test_set_names(data) == ["test", "long_7-20"]
    with pytest.raises(DataError, match="no long test set long_21[+]: this run's are long_7-20"):
        load_held_out(data, ["long_21+"])
    plain = toy_config(tmp_path).data
    assert run_splits.test_set_names(plain) == ["test"]
    with pytest.raises(DataError, match="long_7-7: .* none [(]data.long_tests_over is null"):
        load_held_out(plain, ["long_7-7"])


def test_split_and_control_share_the_long_tests_and_train_on_as_many_pairs(tmp_path):
    length = prepare_data(split_config(tmp_path, seed=1))
    size = length.summary["train_pairs"]
    assert size == len(length.train_batches.pairs) == 167  # nothing over data.max_train_len
    controls = [prepare_data(control_config(tmp_path, size, seed)) for seed in (1, 2)]
    src, tgt = read_parallel(TOY / "train.de", TOY / "train.en")
    held = set(length.splits.lengths.held_out_lines.tolist())
    pool = Counter((s, t) for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if i not in held)
    trained = [trained_pairs(run) for run in (length, *controls)]
    for run, pairs in zip((length, *controls), trained, strict=True):
        assert run.splits.tests == length.splits.tests  # the same long tests, whatever the seed
        assert len(pairs) == run.summary["train_pairs"] == size
        assert not Counter(pairs) - pool  # never a held-out pair
    assert all(len(s.split()) <= N for s, _ in trained[0])
    assert any(len(s.split()) > N for s, _ in trained[1])  # the control draws long pairs too
    assert Counter(trained[1]) != Counter(trained[2])  # trainer.seed draws the sample
    as_split = prepare_data(control_config(tmp_path, "length_split", seed=3))
    assert as_split.summary["train_pairs"] == size


def test_the_tokenizers_never_see_the_long_tests_and_each_split_has_its_own_caches(
    tmp_path, monkeypatch
):
    fed = []
    train_bpe = minimt.data.tokenizer.train_bpe

    def recording(texts, vocab_size):
        texts = list(texts)
        fed.append(len(texts))
        return train_bpe(texts, vocab_size)

    monkeypatch.setattr(minimt.data.tokenizer, "train_bpe", recording)
    run = prepare_data(split_config(tmp_path))
    prepare_data(toy_config(tmp_path))
    assert fed == [2 * (400 - 233 // 2), 2 * 400]  # joint: source and target lines
    assert len(list((tmp_path / "data" / "tokenizers").iterdir())) == 2
    assert len(list((tmp_path / "data" / "token_ids").iterdir())) == 2
    src_ids = run.tokenizers.encode_src([s for s, _ in trained_pairs(run)])
    tgt_ids = run.tokenizers.encode_tgt([t for _, t in trained_pairs(run)])
    training = {key: run.summary[key] for key in ("train_pairs", "train_max_src_tokens")}
    training["train_max_tgt_tokens"] = run.summary["train_max_tgt_tokens"]
    assert training == {
        "train_pairs": 167,
        "train_max_src_tokens": max(map(len, src_ids)),
        "train_max_tgt_tokens": max(map(len, tgt_ids)),
    }


def trained_pairs(run) -> list[tuple[str, str]]:
    """The (source, target) text of every pair a run trains on, decoded from its token ids."""
    pairs = run.train_batches.pairs
    sources = run.tokenizers.src.decode_batch(pairs["src_ids"])
    return list(zip(sources, run.tokenizers.decode_tgt(pairs["tgt_ids"]), strict=True))


@pytest.mark.parametrize(
    "override",
    [
        "data.train_max_words=0",
        "data.long_tests_over=-1",
        "data.long_bucket_edges=[26,21]",
        "data.long_bucket_edges=[21,21]",
        "data.train_subsample=0",
    ],
)
def test_bad_length_split_values_are_config_errors_naming_the_key(override):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        validate_config(compose_config(override))


def test_a_run_scores_its_long_test_sets_pooled_as_one_corpus(tmp_path):
    cfg = split_config(tmp_path)
    for override in ("trainer.max_steps=2", "decoding.test_beam=1", "views=false"):
        key, value = override.split("=")
        OmegaConf.update(cfg, key, yaml.safe_load(value))
    metrics = train(cfg, tmp_path / "run")
    pooled = metrics["test"][POOLED_LONG]
    names = ["long_7-7", "long_8+"]
    assert pooled["pooled"] == names
    run = tmp_path / "run"
    hyps = [h for name in names for h in (run / f"hyps.{name}.txt").read_text().splitlines()]
    refs = [r for name in names for r in load_held_out(cfg.data, [name])[name][1]]
    assert len(hyps) == len(refs) == 233 // 2
    assert pooled["bleu"] == corpus_scores(hyps, refs).bleu
    assert pooled["bleu"] == BLEU().corpus_score(hyps, [refs]).score  # sacreBLEU's, of the union
