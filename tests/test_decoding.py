from functools import cache

import pytest
import torch
import torch.nn.functional as F

from minimt.model.search import greedy_decode, max_output_lengths
from minimt.model.transformer import Transformer

PAD, BOS, EOS = 0, 1, 2
VOCAB = 20


def make_model(
    max_seq_len: int = 32, d_model: int = 16, n_layers: int = 1, seed: int = 0, **overrides
) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(
        VOCAB,
        VOCAB,
        d_model=d_model,
        n_heads=2,
        n_encoder_layers=n_layers,
        n_decoder_layers=n_layers,
        d_ff=2 * d_model,
        dropout=0.0,
        max_seq_len=max_seq_len,
        pad_id=PAD,
        **({"share_embeddings": True} | overrides),
    ).eval()


def pad_batch(sentences: list[list[int]]) -> torch.Tensor:
    """Right-pads token lists into a (B, S) tensor."""
    width = max(map(len, sentences))
    return torch.tensor([s + [PAD] * (width - len(s)) for s in sentences])


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


def script_project(model: Transformer, monkeypatch, eos_steps: list[int]) -> list[int]:
    """Make step k emit token 3 + k, or <eos> for sentence b once k == eos_steps[b]."""
    calls: list[int] = []

    def project(hidden: torch.Tensor) -> torch.Tensor:  # (B, 1, d_model) -> (B, 1, V)
        step = len(calls)
        calls.append(step)
        tokens = torch.where(torch.tensor(eos_steps) == step, EOS, 3 + step)
        return F.one_hot(tokens, VOCAB).float()[:, None, :]

    monkeypatch.setattr(model, "project", project)
    return calls


SOURCES = [[5, 6, 7, 8, 9], [10, 11, 12], [3], [4, 13, 14, 15, 16, 17, 18]]


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


REVERSAL_SOURCES = [[3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 3], [17, 5, 9, 12]]


@cache
def reversal_model() -> Transformer:
    """A tiny model overfit to reversing REVERSAL_SOURCES (trained once, shared: do not modify)."""
    targets = [[BOS, *reversed(s), EOS] for s in REVERSAL_SOURCES]
    src, tgt = pad_batch(REVERSAL_SOURCES), pad_batch(targets)
    model = make_model(d_model=32).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):  # greedy output is right from about step 20 on
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.mark.parametrize("use_cache", [True, False])
def test_overfit_model_reproduces_reversed_sources(use_cache):
    src = pad_batch(REVERSAL_SOURCES)
    hyps = greedy_decode(
        reversal_model(), src, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=use_cache
    )
    assert hyps == [list(reversed(s)) for s in REVERSAL_SOURCES]


# Every positional encoding, and one side's differing from the other's.
ENCODINGS = [
    *(dict(pos_encoding=name) for name in ["sinusoidal", "learned", "none", "rope", "alibi"]),
    dict(src_pos_encoding="none"),
    dict(tgt_pos_encoding="none"),
    dict(src_pos_encoding="rope", tgt_pos_encoding="alibi"),
    dict(src_pos_encoding="alibi", tgt_pos_encoding="learned"),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cached_greedy_equals_full_recomputation(seed, encoding):
    model = make_model(n_layers=2, seed=seed, share_embeddings=False, **encoding)
    src = pad_batch(SOURCES)
    cached = greedy_decode(model, src, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    full = greedy_decode(model, src, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=False)
    assert cached == full
