"""Turning a trained Transformer into translations: batched greedy decoding and beam search."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from minimt.model.transformer import Transformer


def max_output_lengths(src_lengths: Tensor, a: float, b: int, cap: int) -> Tensor:
    """(B,) source lengths -> (B,) long: min(floor(a * len + b), cap), counting <eos>."""
    return torch.floor(src_lengths.double() * a + b).long().clamp(max=cap)


def length_penalty_of(n: int, alpha: float) -> float:
    """GNMT length penalty lp(n) = ((5 + n) / 6) ** alpha; n counts the tokens generated."""
    return ((5 + n) / 6) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """One beam-search output: ids without <bos>/<eos>, summed log-probability, normalised score.

    log_prob includes the <eos> token's term when the hypothesis ended with <eos>;
    score = log_prob / length_penalty_of(n, alpha) with n = len(tokens) + 1 for those, and
    n = len(tokens) for a hypothesis cut at its maximum length.
    """

    tokens: list[int]
    score: float
    log_prob: float


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    use_cache: bool = True,
) -> list[list[int]]:
    """Batched greedy decoding: (B, S) padded source -> per sentence its ids, <bos>/<eos> stripped.

    Each sentence may emit at most max_output_lengths(len, max_len_a, max_len_b) tokens, capped so
    that <bos> + output fits in model.max_seq_len. Dropout is the caller's business (model.eval()).
    use_cache=False reruns the decoder over the whole prefix at every step (the reference path).
    """
    src_lengths = (src != pad_id).sum(dim=1)  # (B,)
    max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b, cap=model.max_seq_len - 1)
    memory = model.encode(src)  # (B, S, d_model)
    cache = model.start_decoding(memory, src) if use_cache else None
    tgt = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = max_lens <= 0  # (B,)
    out_lengths = torch.zeros_like(max_lens)  # (B,) tokens kept, <eos> excluded
    for step in range(int(max_lens.max())):
        if cache is not None:
            hidden = model.decode_step(tgt[:, -1:], cache)  # (B, 1, d_model)
        else:
            hidden = model.decode(tgt, memory, src)[:, -1:]  # (B, 1, d_model)
        next_token = model.project(hidden)[:, -1].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad_id)
        tgt = torch.cat([tgt, next_token[:, None]], dim=1)  # (B, step + 2)
        is_eos = next_token == eos_id
        out_lengths += (~finished & ~is_eos).long()
        finished |= is_eos | (step + 1 >= max_lens)
        if finished.all():
            break
    rows = tgt[:, 1:].tolist()
    return [row[:n] for row, n in zip(rows, out_lengths.tolist(), strict=True)]


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    *,
    beam: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    length_penalty: float = 1.0,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Batched beam search: (B, S) padded source -> per sentence its n_best hypotheses, best first.

    All B * beam live hypotheses advance together through one cached decoder step. At each step
    the best 2 * beam extensions of a sentence are ranked by summed log-probability; those ending
    in <eos> among the first beam are finished (set aside, never extended again), and the best
    beam extensions without <eos> stay live. A hypothesis reaching the sentence's maximum length
    (max_output_lengths, as in greedy_decode, counting <eos>) is finished as it is.

    Stopping rule: a sentence is done once it holds beam finished hypotheses, or at its maximum
    length; a live hypothesis that might still have scored better after length normalisation is
    not waited for. Finished hypotheses are ranked by score = log_prob / lp(n), with
    lp(n) = ((5 + n) / 6) ** length_penalty and n the number of generated tokens including
    <eos>. With beam=1 this is exactly greedy_decode.
    """
    if beam < 1 or not 1 <= n_best <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= n_best <= beam, got beam={beam}, {n_best=}")
    batch, device = src.size(0), src.device
    src_lengths = (src != pad_id).sum(dim=1)  # (B,)
    max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b, cap=model.max_seq_len - 1)
    max_lens_list = max_lens.tolist()

    cache = model.start_decoding(model.encode(src), src)
    cache.reorder(torch.arange(batch, device=device).repeat_interleave(beam))  # B -> B * beam
    first_row = torch.arange(batch, device=device)[:, None] * beam  # (B, 1) row of beam 0
    # Only beam 0 is live at first, so the first step's beam best tokens come from one beam.
    log_probs = torch.full((batch, beam), float("-inf"), device=device)  # (B, beam)
    log_probs[:, 0] = 0.0
    tokens = torch.full((batch * beam, 1), bos_id, dtype=torch.long, device=device)
    history = tokens[:, :0]  # (B * beam, t) generated ids of the live hypotheses

    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [n <= 0 for n in max_lens_list]
    for b in range(batch):
        if done[b]:
            finished[b].append(Hypothesis([], 0.0, 0.0))
    log_probs[torch.tensor(done, device=device)] = float("-inf")

    for step in range(max(max_lens_list)):
        hidden = model.decode_step(tokens, cache)  # (B * beam, 1, d_model)
        step_log_probs = F.log_softmax(model.project(hidden)[:, -1].float(), dim=-1)
        vocab = step_log_probs.size(-1)
        totals = (log_probs.view(-1, 1) + step_log_probs).view(batch, beam * vocab)
        cand_log_probs, cand = totals.topk(2 * beam, dim=1)  # (B, 2 * beam), best first
        cand_beam, cand_token = cand // vocab, cand % vocab  # (B, 2 * beam)
        cand_is_eos = cand_token == eos_id
        # Each beam yields at most one <eos> candidate, so beam of the 2 * beam are not <eos>.
        live_rank = torch.arange(2 * beam, device=device) + cand_is_eos.long() * 2 * beam
        live = live_rank.topk(beam, dim=1, largest=False).indices  # (B, beam), best first
        rows = (first_row + cand_beam.gather(1, live)).view(-1)  # (B * beam,) parent rows
        tokens = cand_token.gather(1, live).view(-1, 1)  # (B * beam, 1)

        ending = cand_is_eos[:, :beam] & cand_log_probs[:, :beam].isfinite()  # (B, beam)
        at_max = [not done[b] and step + 1 >= max_lens_list[b] for b in range(batch)]
        if ending.any():
            eos_rows = first_row + cand_beam[:, :beam]  # (B, beam)
            for b, j in ending.nonzero().tolist():  # done sentences are all -inf: never here
                ids = history[eos_rows[b, j]].tolist()
                lp = float(cand_log_probs[b, j])
                score = lp / length_penalty_of(len(ids) + 1, length_penalty)
                finished[b].append(Hypothesis(ids, score, lp))

        cache.reorder(rows)
        history = torch.cat([history[rows], tokens], dim=1)  # (B * beam, step + 1)
        log_probs = cand_log_probs.gather(1, live)  # (B, beam)

        if any(at_max):
            cut_log_probs = log_probs.tolist()
            for b in (b for b in range(batch) if at_max[b]):
                for j in range(beam):
                    lp = cut_log_probs[b][j]
                    if lp != float("-inf"):
                        ids = history[b * beam + j].tolist()
                        score = lp / length_penalty_of(len(ids), length_penalty)
                        finished[b].append(Hypothesis(ids, score, lp))
        done = [d or m or len(f) >= beam for d, m, f in zip(done, at_max, finished, strict=True)]
        if all(done):
            break
        log_probs[torch.tensor(done, device=device)] = float("-inf")  # done beams stop competing

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:n_best] for hyps in finished]
