import math

import pytest
import torch
import torch.nn.functional as F

from minimt.model.search import (
    Hypothesis,
    LiveRows,
    beam_search,
    best_extensions,
    greedy_decode,
    length_penalty_of,
    max_output_lengths,
    output_length_bounds,
)
from minimt.model.transformer import Transformer
from tests.helpers import (
    BOS,
    ENCODINGS,
    EOS,
    PAD,
    REVERSAL_SOURCES,
    SOURCES,
    SPECIALS,
    VOCAB,
    make_model,
    pad_batch,
    random_model,
    reversal_model,
    script_project,
    tiny_transformer,
)
from tests.host_reads import HostReads


def script_bigram(model: Transformer, monkeypatch, transitions: dict[int, dict[int, float]]):
    """Make the model a bigram chain, P(next | last token fed) = transitions (1e-9 elsewhere).

    Returns the list of (B * beam, 1) token tensors fed to the decoder, one per step.
    """
    probs = torch.full((VOCAB, VOCAB), 1e-9)
    for prev, nexts in transitions.items():
        for token, p in nexts.items():
            probs[prev, token] = p
    log_table = (probs / probs.sum(dim=1, keepdim=True)).log()  # (V, V) rows sum to 1
    fed: list[torch.Tensor] = []

    def decode_step(tokens: torch.Tensor, cache) -> torch.Tensor:  # (N, 1) -> (N, 1, V)
        fed.append(tokens)
        return F.one_hot(tokens, VOCAB).float()

    monkeypatch.setattr(model, "decode_step", decode_step)
    monkeypatch.setattr(model, "project", lambda hidden: hidden @ log_table)
    return fed


@torch.no_grad()
def teacher_forced_log_prob(model: Transformer, src: list[int], tgt: list[int]) -> float:
    """Sum over tgt of log P(token | <bos> + earlier tokens), from one full forward."""
    tgt_in = torch.tensor([[BOS, *tgt[:-1]]])
    log_probs = F.log_softmax(model(torch.tensor([src]), tgt_in)[0], dim=-1)  # (T, V)
    return float(log_probs.gather(1, torch.tensor(tgt)[:, None]).sum())


@pytest.mark.parametrize("k", [1, 3])
def test_best_extensions_are_the_best_of_all_hypothesis_token_sums(k):
    beam, sentences, vocab = 3, 4, 50
    generator = torch.Generator().manual_seed(k)
    log_probs = torch.randn(sentences, k, generator=generator) * 3  # (B', k)
    step_log_probs = F.log_softmax(torch.randn(sentences * k, vocab, generator=generator), dim=-1)
    cand_log_probs, cand_beam, cand_token = best_extensions(log_probs, step_log_probs, beam)
    sums = (log_probs[:, :, None] + step_log_probs.view(sentences, k, vocab)).view(sentences, -1)
    expected, flat = sums.sort(dim=1, descending=True)  # all k * V sums of each sentence
    torch.testing.assert_close(cand_log_probs, expected[:, : 2 * beam], rtol=0, atol=0)
    assert torch.equal(cand_beam, flat[:, : 2 * beam] // vocab)
    assert torch.equal(cand_token, flat[:, : 2 * beam] % vocab)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_beam_one_is_greedy(seed, encoding, length_penalty):
    model = random_model(seed, **encoding)
    src = pad_batch(SOURCES)
    nbest = beam_search(model, src, beam=1, length_penalty=length_penalty, **SPECIALS)
    assert [hyps[0].tokens for hyps in nbest] == greedy_decode(model, src, **SPECIALS)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_one_is_greedy_when_sentences_end_at_different_steps(monkeypatch, length_penalty):
    model = make_model()
    script_project(model, monkeypatch, eos_steps=[2, 4, 0, 1])
    nbest = beam_search(
        model, pad_batch(SOURCES), beam=1, length_penalty=length_penalty, **SPECIALS
    )
    assert [hyps[0].tokens for hyps in nbest] == [[3, 4], [3, 4, 5, 6], [], [3]]
    src = pad_batch(REVERSAL_SOURCES)
    nbest = beam_search(reversal_model(), src, beam=1, length_penalty=length_penalty, **SPECIALS)
    assert [hyps[0].tokens for hyps in nbest] == greedy_decode(reversal_model(), src, **SPECIALS)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("trained", [True, False])
def test_scores_are_the_models_log_probabilities_over_the_length_penalty(trained, length_penalty):
    model, sources = (reversal_model(), REVERSAL_SOURCES) if trained else (random_model(), SOURCES)
    nbest = beam_search(
        model, pad_batch(sources), beam=3, n_best=3, length_penalty=length_penalty, **SPECIALS
    )
    ended_with_eos = 0
    for src, hyps in zip(sources, nbest, strict=True):
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        max_len = int(len(src) * 1.5) + 10
        for hyp in hyps:
            assert len(hyp.tokens) <= max_len
            with_eos = len(hyp.tokens) < max_len  # only a hypothesis cut at max_len lacks <eos>
            ended_with_eos += with_eos
            tgt = hyp.tokens + [EOS] * with_eos
            assert hyp.log_prob == pytest.approx(teacher_forced_log_prob(model, src, tgt), abs=1e-4)
            lp = ((5 + len(tgt)) / 6) ** length_penalty
            assert hyp.score == pytest.approx(hyp.log_prob / lp, abs=1e-6)
    assert ended_with_eos > 0 if trained else ended_with_eos == 0  # both endings covered


@pytest.mark.parametrize("model_kind", ["random", "trained"])
def test_batch_decoded_together_equals_each_sentence_alone(model_kind):
    model, sources = (
        (reversal_model(), REVERSAL_SOURCES)
        if model_kind == "trained"
        else (random_model(), SOURCES)
    )
    together = beam_search(model, pad_batch(sources), beam=3, n_best=3, **SPECIALS)
    for src, hyps in zip(sources, together, strict=True):
        (alone,) = beam_search(model, pad_batch([src]), beam=3, n_best=3, **SPECIALS)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_finished_hypotheses_are_frozen(monkeypatch):
    model = make_model()
    fed = script_bigram(
        model,
        monkeypatch,
        {
            BOS: {3: 0.6, 4: 0.4},
            3: {EOS: 0.9, 5: 0.1},
            4: {6: 1.0},
            5: {5: 1.0},
            6: {EOS: 0.7, 7: 0.3},
        },
    )
    # Step 1 finishes [3] (0.6 * 0.9); [4, 6] and [3, 5] stay live; step 2 finishes [4, 6].
    (hyps,) = beam_search(
        model, pad_batch([[5, 6]]), beam=2, n_best=2, length_penalty=0.0, **SPECIALS
    )
    assert [h.tokens for h in hyps] == [[3], [4, 6]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.54), math.log(0.28)], rel=1e-4)
    assert len(fed) == 3  # the sentence is done once it holds beam finished hypotheses
    assert all((tokens != EOS).all() for tokens in fed)  # a finished hypothesis is never extended
    assert fed[2].flatten().tolist() == [6, 5]


def test_length_penalty_reranks_finished_hypotheses(monkeypatch):
    model = make_model()
    # [3] ends at once with P = 0.55; [4, 6, 7] ends later with P = 0.45 * 1 * 1.
    transitions = {BOS: {3: 0.55, 4: 0.45}, 3: {EOS: 1.0}, 4: {6: 1.0}, 6: {7: 1.0}, 7: {EOS: 1.0}}
    script_bigram(model, monkeypatch, transitions)
    src = pad_batch([[5, 6]])
    (short,) = beam_search(model, src, beam=2, n_best=2, length_penalty=0.0, **SPECIALS)
    (long,) = beam_search(model, src, beam=2, n_best=2, length_penalty=2.0, **SPECIALS)
    assert [h.tokens for h in short] == [[3], [4, 6, 7]]
    assert [h.tokens for h in long] == [[4, 6, 7], [3]]
    assert long[0].score == pytest.approx(math.log(0.45) / length_penalty_of(4, 2.0), rel=1e-4)


def test_hypotheses_stop_at_the_source_dependent_max_length(monkeypatch):
    model = make_model()
    script_bigram(model, monkeypatch, {BOS: {5: 1.0}, 5: {5: 1.0}})
    nbest = beam_search(
        model,
        pad_batch(SOURCES),
        beam=2,
        max_len_a=1.0,
        max_len_b=2,
        length_penalty=0.0,
        **SPECIALS,
    )
    for src, (best,) in zip(SOURCES, nbest, strict=True):
        assert best.tokens == [5] * (len(src) + 2)
        assert best.log_prob == pytest.approx(0.0, abs=1e-5)  # no <eos> term, log(1e-9)


def test_one_row_per_sentence_at_first_and_done_sentences_leave_the_batch(monkeypatch):
    model = make_model()
    fed = script_bigram(model, monkeypatch, {BOS: {5: 1.0}, 5: {5: 1.0}})
    src = pad_batch([[5, 6], [7, 8, 9, 10, 11]])
    nbest = beam_search(model, src, beam=2, max_len_a=1.0, max_len_b=0, **SPECIALS)
    assert [hyps[0].tokens for hyps in nbest] == [[5] * 2, [5] * 5]
    assert [len(tokens) for tokens in fed] == [2, 4, 2, 2, 2]


def test_vocabulary_must_hold_two_candidates_per_beam():
    with pytest.raises(ValueError, match="vocabulary of at least 22"):
        beam_search(make_model(), pad_batch(SOURCES), beam=11, **SPECIALS)


@pytest.mark.parametrize("scripted", [True, False])
def test_output_never_exceeds_max_seq_len(monkeypatch, scripted):
    model = random_model(max_seq_len=8)
    if scripted:
        script_bigram(model, monkeypatch, {BOS: {5: 1.0}, 5: {5: 1.0}})
    nbest = beam_search(model, pad_batch(SOURCES), beam=3, n_best=3, max_len_a=10.0, **SPECIALS)
    lengths = [len(h.tokens) for hyps in nbest for h in hyps]
    assert max(lengths) <= 7  # <bos> + output fits in 8 positions
    if scripted:
        assert [hyps[0].tokens for hyps in nbest] == [[5] * 7] * len(SOURCES)


def test_overfit_model_reproduces_reversed_sources_with_beam():
    nbest = beam_search(reversal_model(), pad_batch(REVERSAL_SOURCES), beam=3, **SPECIALS)
    assert [hyps[0].tokens for hyps in nbest] == [list(reversed(s)) for s in REVERSAL_SOURCES]
    assert all(isinstance(hyps[0], Hypothesis) and len(hyps) == 1 for hyps in nbest)


def test_n_best_cannot_exceed_beam():
    with pytest.raises(ValueError, match="n_best"):
        beam_search(make_model(), pad_batch(SOURCES), beam=2, n_best=3, **SPECIALS)


def calls_of(model: Transformer, method: str, monkeypatch) -> list[tuple]:
    """Records the arguments of every call of model.<method> in the list returned."""
    calls, original = [], getattr(model, method)

    def recorded(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(model, method, recorded)
    return calls


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("beam", [1, 2, 5])
@pytest.mark.parametrize("trained", [True, False])
def test_decoding_reads_the_device_at_most_once_per_step(monkeypatch, trained, beam, use_cache):
    """On a GPU every read waits for the queued steps: one per step decides which sentences are
    done (and in greedy decoding brings the step's tokens), beam search's last brings its
    hypotheses."""
    model, sources = (
        (reversal_model(), REVERSAL_SOURCES) if trained else (tiny_transformer(VOCAB), SOURCES)
    )
    model.eval()
    steps = calls_of(model, "decode_step" if use_cache else "decode", monkeypatch)
    src = pad_batch(sources)
    with HostReads() as reads:
        if beam == 1:
            greedy_decode(model, src, use_cache=use_cache, **SPECIALS)
        else:
            beam_search(model, src, beam=beam, use_cache=use_cache, **SPECIALS)
    assert len(steps) > 5 and reads.count <= len(steps), reads.calls


def test_output_length_bounds_hold_every_source_length_of_the_width():
    for width, a, b, cap in [(7, 1.5, 10, 30), (7, 1.5, 10, 12), (5, 0.0, 0, 9), (3, -1.0, 2, 9)]:
        lengths = max_output_lengths(torch.arange(width + 1), a, b, cap).tolist()
        assert output_length_bounds((0, width), a, b, cap) == (min(lengths), max(lengths))
        two = sorted(lengths[2:4])
        assert output_length_bounds((2, 3), a, b, cap) == (two[0], two[1])


def test_live_rows_take_their_numbers_by_keyword():
    with pytest.raises(TypeError):
        LiveRows(make_model(), pad_batch(SOURCES), 1.5, 10, BOS, PAD, True)
