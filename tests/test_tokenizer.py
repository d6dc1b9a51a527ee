"""Byte-level BPE: exact round trips, special tokens, joint or separate, save/load, cache."""

import re

import pytest

import minimt.data.tokenizer
from minimt.data.corpus import parallel_files, read_parallel
from minimt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    TokenizerPair,
    build_tokenizers,
    train_bpe,
)

TRAIN_PAIRS = 2_000
VOCAB_SIZE = 800


@pytest.fixture(scope="module")
def train_files(multi30k_dir):
    """The first training pairs (German, English): enough for a small BPE, quick to train on."""
    de, en = multi30k_dir / "train.de.gz", multi30k_dir / "train.en.gz"
    return parallel_files(de, en, limit=TRAIN_PAIRS)


@pytest.fixture(scope="module")
def train(train_files):
    return list(train_files.src_lines()), list(train_files.tgt_lines())


@pytest.fixture(scope="module")
def joint_pair(train_files, tmp_path_factory):
    cache = tmp_path_factory.mktemp("c")
    return build_tokenizers(train_files, VOCAB_SIZE, joint=True, cache_dir=cache)


@pytest.fixture(scope="module")
def separate_pair(train_files, tmp_path_factory):
    cache = tmp_path_factory.mktemp("c")
    return build_tokenizers(train_files, VOCAB_SIZE, joint=False, cache_dir=cache)


@pytest.fixture(scope="module")
def eval_lines(multi30k_dir):
    """Every val and test_2016_flickr line, German and English (none of them seen in training)."""
    lines = []
    for split in ("val", "test_2016_flickr"):
        src, tgt = read_parallel(multi30k_dir / f"{split}.de.gz", multi30k_dir / f"{split}.en.gz")
        lines += src + tgt
    return lines


def test_special_token_ids(joint_pair):
    ids = [joint_pair.src.token_to_id(token) for token in SPECIAL_TOKENS]
    assert ids == [PAD_ID, UNK_ID, BOS_ID, EOS_ID] == [0, 1, 2, 3]


def test_every_val_and_test_line_round_trips(joint_pair, eval_lines):
    assert len(eval_lines) == 2 * (1_014 + 1_000)
    decoded = joint_pair.decode_tgt(joint_pair.encode_tgt(eval_lines))
    mismatches = [(line, out) for line, out in zip(eval_lines, decoded, strict=True) if line != out]
    assert mismatches == []


def test_unseen_characters_and_odd_spacing_round_trip_without_unk(joint_pair):
    lines = [
        " leading space",
        "trailing space ",
        "two  spaces\tand a tab",
        "Zoë ☃ 😀 120\xa0cm",
        "",
    ]
    ids = joint_pair.encode_tgt(lines)
    assert all(UNK_ID not in seq for seq in ids)
    assert joint_pair.decode_tgt(ids) == lines


def test_encoding_adds_no_special_tokens(joint_pair, eval_lines):
    for seq in joint_pair.encode_src(eval_lines):
        assert seq and min(seq) >= len(SPECIAL_TOKENS)


def test_decoding_skips_special_tokens(joint_pair):
    text = "Ein Hund rennt durch den Schnee."
    (ids,) = joint_pair.encode_tgt([text])
    padded = [BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]
    assert joint_pair.decode_tgt([padded, (BOS_ID, EOS_ID)]) == [text, ""]


def test_joint_vocabulary_is_one_tokenizer(joint_pair):
    assert joint_pair.joint and joint_pair.src is joint_pair.tgt
    assert joint_pair.src_vocab_size == joint_pair.tgt_vocab_size == VOCAB_SIZE


def test_separate_vocabularies_are_trained_per_language(separate_pair, train):
    assert not separate_pair.joint
    assert separate_pair.src.get_vocab() != separate_pair.tgt.get_vocab()
    src, tgt = train
    assert separate_pair.decode_tgt(separate_pair.encode_tgt(tgt[:50])) == tgt[:50]
    assert separate_pair.src.decode(separate_pair.encode_src(src[:1])[0]) == src[0]


@pytest.mark.parametrize("layout", ["joint", "separate"])
def test_save_and_load_give_the_same_ids(request, tmp_path, eval_lines, layout):
    pair = request.getfixturevalue(f"{layout}_pair")
    pair.save(tmp_path)
    loaded = TokenizerPair.load(tmp_path)
    names = (
        ["tokenizer.json"] if layout == "joint" else ["tokenizer.src.json", "tokenizer.tgt.json"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    assert loaded.joint == pair.joint
    assert loaded.encode_src(eval_lines) == pair.encode_src(eval_lines)
    assert loaded.encode_tgt(eval_lines) == pair.encode_tgt(eval_lines)


def test_saving_another_layout_replaces_the_old_one(tmp_path, joint_pair, separate_pair):
    separate_pair.save(tmp_path)
    joint_pair.save(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]
    separate_pair.save(tmp_path)
    assert not TokenizerPair.load(tmp_path).joint


def test_load_from_an_empty_folder_names_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "tokenizer.json"))):
        TokenizerPair.load(tmp_path)


def write_pairs(folder, src, tgt):
    folder.mkdir()
    (folder / "src.txt").write_text("".join(line + "\n" for line in src), encoding="utf-8")
    (folder / "tgt.txt").write_text("".join(line + "\n" for line in tgt), encoding="utf-8")
    return folder / "src.txt", folder / "tgt.txt"


def test_second_build_loads_from_cache(tmp_path, train, monkeypatch):
    src, tgt = train[0][:200], train[1][:200]
    corpus = parallel_files(*write_pairs(tmp_path / "a", src, tgt))
    cache = tmp_path / "cache"
    first = build_tokenizers(corpus, 300, joint=False, cache_dir=cache)
    (cached,) = (cache / "tokenizers").iterdir()
    assert sorted(p.name for p in cached.iterdir()) == ["tokenizer.src.json", "tokenizer.tgt.json"]

    def no_training(texts, vocab_size):
        raise AssertionError("trained although a cached tokenizer exists")

    monkeypatch.setattr(minimt.data.tokenizer, "train_bpe", no_training)
    same_text = parallel_files(*write_pairs(tmp_path / "copy", src, tgt))
    second = build_tokenizers(same_text, 300, joint=False, cache_dir=cache)
    assert second.encode_tgt(tgt) == first.encode_tgt(tgt)
    other_text = parallel_files(*write_pairs(tmp_path / "b", src[1:], tgt[1:]))
    fewer = parallel_files(corpus.src, corpus.tgt, limit=199)
    for changed in [
        (corpus, 301, False),
        (corpus, 300, True),
        (other_text, 300, False),
        (fewer, 300, False),
    ]:
        with pytest.raises(AssertionError, match="trained"):
            build_tokenizers(*changed, cache_dir=cache)


def test_training_streams_only_the_first_pairs(tmp_path, train):
    src, tgt = train[0][:200], train[1][:200]
    corpus = parallel_files(*write_pairs(tmp_path / "a", src, tgt), limit=150)
    pair = build_tokenizers(corpus, 300, joint=True, cache_dir=tmp_path / "cache")
    trained = train_bpe(src[:150] + tgt[:150], 300)
    assert pair.src.get_vocab() == trained.get_vocab()


@pytest.mark.parametrize("vocab_size", [4, 259])
def test_too_small_vocabulary_is_rejected(vocab_size):
    with pytest.raises(ValueError, match="tokenizer.vocab_size"):
        train_bpe(["a b c"], vocab_size)
