import logging
import random
import threading

import datasets
import numpy as np
import pytest
import torch

from minimt.data.batching import flat, padded, prefetched, token_batches
from minimt.data.tokenized import BatchedPairs, filter_training_pairs
from minimt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import collate


def id_pairs(src_ids, tgt_ids):
    return datasets.Dataset.from_dict({"src_ids": src_ids, "tgt_ids": tgt_ids})


def test_collate_adds_specials_and_right_pads():
    batch = collate([[5, 6, 7], [8]], [[9], [10, 11]])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert batch.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert batch.num_tgt_tokens == 5 and int((batch.src != PAD_ID).sum()) == 6
    assert batch.nonpad_index.tolist() == [
        0,
        1,
        3,
        4,
        5,
    ]  # row * 3 + column of tgt_out's non-pad tokens


def test_token_batches_cover_every_example_once_within_the_budget():
    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(2000)]
    batches = token_batches(lengths, batch_tokens=512, rng=random.Random(1))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= 512
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert 1 - sum(lengths) / padded < 0.05  # length-sorted buckets waste little on padding


def test_unsorted_batches_keep_the_budget_and_pad_more():
    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(2000)]
    batches = token_batches(lengths, batch_tokens=512, rng=random.Random(1), by_length=False)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= 512
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert 1 - sum(lengths) / padded > 0.3  # random lengths side by side: much padding


def test_pad_matches_a_row_by_row_reference():
    rng = random.Random(2)
    seqs = [[rng.randint(4, 99) for _ in range(rng.randint(0, 9))] for _ in range(50)]
    expected = torch.full((50, max(map(len, seqs))), PAD_ID)
    for row, seq in enumerate(seqs):
        expected[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    assert torch.equal(padded(*flat(seqs)), expected)
    assert padded(*flat([[], []])).shape == (2, 0)


def test_prefetched_yields_every_item_in_order_and_passes_errors_on():
    assert list(prefetched(iter(range(100)), depth=3)) == list(range(100))
    assert list(prefetched(iter(range(5)), depth=0)) == list(range(5))

    def failing():
        yield 1
        raise ValueError("collate failed")

    items = prefetched(failing(), depth=2)
    assert next(items) == 1
    with pytest.raises(ValueError, match="collate failed"):
        next(items)


def test_closing_a_prefetched_stream_stops_its_thread():
    items = prefetched(iter(range(10**9)), depth=2)
    next(items)
    items.close()
    assert not any(t.name == "prefetch" for t in threading.enumerate())


def test_an_example_longer_than_the_budget_gets_its_own_batch():
    assert [b for b in token_batches([3, 100, 3], batch_tokens=10) if 1 in b] == [[1]]


def test_shuffle_is_seeded_and_changes_with_the_epoch():
    pairs = id_pairs(
        [[1] * (i % 17 + 1) for i in range(500)], [[2] * (i % 13 + 1) for i in range(500)]
    )
    batched = BatchedPairs(pairs, batch_tokens=64, seed=3)
    assert batched.batches(epoch=0) == BatchedPairs(pairs, 64, seed=3).batches(epoch=0)
    assert batched.batches(epoch=0) != batched.batches(epoch=1)
    unshuffled = BatchedPairs(pairs, batch_tokens=64)
    assert unshuffled.batches() == unshuffled.batches()


def test_batches_hold_tensors_matching_the_examples():
    pairs = id_pairs([[4, 5], [6], [7, 8, 9]], [[10], [11, 12], [13]])
    batches = list(BatchedPairs(pairs, batch_tokens=1000).iterate())
    assert len(batches) == 1 and batches[0].src.dtype == torch.long
    assert sorted(batches[0].src[:, 0].tolist()) == [4, 6, 7]


def test_filter_drops_empty_and_long_pairs_and_logs_counts(caplog):
    pairs = id_pairs([[1, 2], [], [3] * 9, [4]], [[5], [6], [7], [8] * 9])
    with caplog.at_level(logging.INFO, logger="minimt.data"):
        kept = filter_training_pairs(pairs, max_len=8)
    assert kept["src_ids"] == [[1, 2]]
    assert "kept 1 of 4" in caplog.text and "1 with an empty side" in caplog.text
    assert "2 longer than 8" in caplog.text


def test_filter_keeps_only_the_given_rows_in_their_order():
    pairs = id_pairs([[1], [], [3], [4], [5] * 9], [[6], [7], [8], [9], [10]])
    kept = filter_training_pairs(pairs, max_len=8, rows=np.array([0, 1, 3, 4]))
    assert kept["src_ids"] == [[1], [4]]


@pytest.mark.parametrize("max_len", [1, 2])
def test_filter_keeps_pairs_at_the_limit(max_len):
    kept = filter_training_pairs(id_pairs([[1] * max_len], [[2] * max_len]), max_len=max_len)
    assert len(kept) == 1


def reference_batches(src_ids, tgt_ids, batch_tokens, seed, epoch):
    """Batches as BatchedPairs made them from Python lists, before it read from Arrow."""
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids, strict=True)]
    return token_batches(lengths, batch_tokens, random.Random(seed * 100_003 + epoch))


def test_batches_from_a_filtered_arrow_file_match_the_list_reference(tmp_path):
    rng = random.Random(0)
    src = [[rng.randint(4, 99) for _ in range(rng.randint(0, 12))] for _ in range(3000)]
    tgt = [[rng.randint(4, 99) for _ in range(rng.randint(0, 12))] for _ in range(3000)]
    on_disk = datasets.Dataset.from_generator(
        lambda: ({"src_ids": s, "tgt_ids": t} for s, t in zip(src, tgt, strict=True)),
        cache_dir=str(tmp_path),
    )
    assert on_disk.cache_files  # memory-mapped, not in memory
    kept = [(s, t) for s, t in zip(src, tgt, strict=True) if s and t and max(len(s), len(t)) <= 10]
    kept_src, kept_tgt = map(list, zip(*kept, strict=True))

    batched = BatchedPairs(filter_training_pairs(on_disk, max_len=10), batch_tokens=64, seed=5)

    for epoch in (0, 1):
        batches = batched.batches(epoch)
        assert batches == reference_batches(kept_src, kept_tgt, 64, seed=5, epoch=epoch)
    for indices in batches[:20]:
        expected = collate([kept_src[i] for i in indices], [kept_tgt[i] for i in indices])
        got = batched.collate(indices)
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(got, name), getattr(expected, name))


def test_lengths_of_an_empty_dataset():
    assert len(BatchedPairs(id_pairs([], []), batch_tokens=64).lengths) == 0
