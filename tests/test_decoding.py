import pytest
import torch

from minimt.data.batching import source_tensor
from minimt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair
from minimt.model.search import beam_search, greedy_decode, max_output_lengths
from minimt.model.transformer import Transformer
from tests.helpers import (
    BOS,
    ENCODINGS,
    EOS,
    PAD,
    REVERSAL_SOURCES,
    SOURCES,
    TOY,
    make_model,
    pad_batch,
    reversal_model,
    script_project,
    toy_run_overrides,
)


def reference_decode(model: Transformer, src: list[int], max_len: int) -> list[int]:
    """One sentence alone: full forward over the prefix, argmax of the last position."""
    tgt = [BOS]
    while len(tgt) - 1 < max_len:
        logits = model(torch.tensor([src]), torch.tensor([tgt]))  # (1, len(tgt), V)
        token = int(logits[0, -1].argmax())
        if token == EOS:
            break
        tgt.append(token)
    return tgt[1:]


def test_max_output_lengths_formula_and_cap():
    lengths = torch.tensor([1, 4, 7, 20])
    out = max_output_lengths(lengths, a=1.5, b=10, cap=30)
    assert out.dtype == torch.long
    assert out.tolist() == [11, 16, 20, 30]  # floor(11.5), 16, floor(20.5), min(40, 30)
    assert max_output_lengths(lengths, a=1.0, b=0, cap=5).tolist() == [1, 4, 5, 5]


def test_batched_greedy_equals_each_sentence_decoded_alone():
    model = make_model()
    hyps = greedy_decode(model, pad_batch(SOURCES), bos_id=BOS, eos_id=EOS, pad_id=PAD)
    for src, hyp in zip(SOURCES, hyps, strict=True):
        max_len = int(len(src) * 1.5) + 10
        assert hyp == reference_decode(model, src, max_len)
        assert all(isinstance(token, int) for token in hyp)


@pytest.mark.parametrize("use_cache", [True, False])
def test_each_sentence_stops_at_its_own_eos(monkeypatch, use_cache):
    model = make_model()
    calls = script_project(model, monkeypatch, eos_steps=[2, 4, 0, 1])
    hyps = greedy_decode(
        model, pad_batch(SOURCES), bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=use_cache
    )
    assert hyps == [[3, 4], [3, 4, 5, 6], [], [3]]
    assert len(calls) == 5  # the loop ends once every sentence has finished
    assert calls == [4, 3, 2, 1, 1]  # finished sentences leave the batch


def test_output_length_follows_source_length(monkeypatch):
    model = make_model()
    script_project(model, monkeypatch, eos_steps=[99, 99, 99, 99])
    hyps = greedy_decode(
        model, pad_batch(SOURCES), bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len_a=1.0, max_len_b=2
    )
    assert [len(h) for h in hyps] == [len(s) + 2 for s in SOURCES]
    assert hyps[2] == [3, 4, 5]


@pytest.mark.parametrize("scripted", [True, False])
def test_output_never_exceeds_max_seq_len(monkeypatch, scripted):
    model = make_model(max_seq_len=8)
    if scripted:
        script_project(model, monkeypatch, eos_steps=[99, 99, 99, 99])
    hyps = greedy_decode(
        model, pad_batch(SOURCES), bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len_a=10.0
    )
    assert max(map(len, hyps)) <= 7  # <bos> + output fits in 8 positions
    if scripted:
        assert [len(h) for h in hyps] == [7, 7, 7, 7]


def test_cache_is_written_in_place_up_to_its_capacity():
    model = make_model(n_layers=2)
    src = pad_batch(SOURCES)
    cache = model.start_decoding(model.encode(src), src, capacity=3)
    buffers = [(layer.k_buffer, layer.v_buffer) for layer in cache.layers]
    for _ in range(3):
        model.decode_step(torch.full((len(SOURCES), 1), BOS), cache)
    for layer, (k_buffer, v_buffer) in zip(cache.layers, buffers, strict=True):
        assert layer.k_buffer is k_buffer and layer.v_buffer is v_buffer
        assert k_buffer.shape == (4, 2, 3, 8) and layer.self_k.shape == (4, 2, 3, 8)
    with pytest.raises(ValueError, match="capacity is 3"):
        model.decode_step(torch.full((len(SOURCES), 1), BOS), cache)


@pytest.mark.parametrize("use_cache", [True, False])
def test_overfit_model_reproduces_reversed_sources(use_cache):
    src = pad_batch(REVERSAL_SOURCES)
    hyps = greedy_decode(
        reversal_model(), src, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=use_cache
    )
    assert hyps == [list(reversed(s)) for s in REVERSAL_SOURCES]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cached_greedy_equals_full_recomputation(seed, encoding):
    model = make_model(n_layers=2, seed=seed, share_embeddings=False, **encoding)
    src = pad_batch(SOURCES)
    cached = greedy_decode(model, src, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    full = greedy_decode(model, src, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=False)
    assert cached == full


@pytest.fixture(scope="module", params=["sinusoidal", "learned", "rope", "alibi", "none"])
def toy_model(request, tmp_path_factory) -> tuple[Transformer, TokenizerPair]:
    """A tiny model trained for 80 steps on the toy corpus with pe=<param>: it ends most test
    sentences with <eos> at lengths of their own, neither at once nor at the cap."""
    from minimt.rundir import load_model
    from minimt.train.loop import train
    from tests.helpers import compose_config

    data_dir = tmp_path_factory.getbasetemp() / "toy_data"  # the tokenizer is trained once
    run_dir = tmp_path_factory.mktemp(f"toy_{request.param}")
    overrides = [f"pe={request.param}", "trainer.max_steps=80", "trainer.val_every=1000"]
    train(compose_config(*toy_run_overrides(data_dir, *overrides)), run_dir)
    model, tokenizers, _ = load_model(run_dir)
    return model, tokenizers


@pytest.mark.slow
def test_cached_search_equals_recomputation_and_each_sentence_alone_on_real_sentences(toy_model):
    """The in-place cache and the batch that drops finished sentences change nothing: the
    hypotheses equal those of the decoder re-run over the prefix, and each sentence's alone."""

    model, tokenizers = toy_model
    src_ids = tokenizers.encode_src((TOY / "test.de").read_text().splitlines())
    specials = dict(bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
    src = source_tensor(src_ids)
    greedy = greedy_decode(model, src, **specials)
    assert greedy == greedy_decode(model, src, **specials, use_cache=False)
    assert greedy == [greedy_decode(model, source_tensor([s]), **specials)[0] for s in src_ids]
    max_lens = max_output_lengths(
        torch.tensor([len(s) + 1 for s in src_ids]), 1.5, 10, model.max_seq_len - 1
    )
    ended = [0 < len(h) < n for h, n in zip(greedy, max_lens.tolist(), strict=True)]
    assert sum(ended) > len(src_ids) / 2  # sentences leave the batch at different steps

    beam = beam_search(model, src, beam=5, n_best=5, **specials)
    full = beam_search(model, src, beam=5, n_best=5, **specials, use_cache=False)
    for cached, reference in zip(beam, full, strict=True):
        assert [h.tokens for h in cached] == [h.tokens for h in reference]
        assert [h.score for h in cached] == pytest.approx([h.score for h in reference], abs=1e-5)
    for s, hyps in zip(src_ids, beam, strict=True):
        (alone,) = beam_search(model, source_tensor([s]), beam=5, n_best=5, **specials)
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
