"""Turning a trained Transformer into translations: batched greedy decoding and beam search."""

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from minimt.model.cache import DecoderCache
from minimt.model.transformer import Transformer


def max_output_lengths(src_lengths: Tensor, a: float, b: int, cap: int) -> Tensor:
    """(B,) source lengths -> (B,) long: min(floor(a * len + b), cap), counting <eos>."""
    return torch.floor(src_lengths.double() * a + b).long().clamp(max=cap)


def length_penalty_of(n: int, alpha: float) -> float:
    """GNMT length penalty lp(n) = ((5 + n) / 6) ** alpha; n counts the tokens generated."""
    return ((5 + n) / 6) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """One beam-search output: ids without <bos>/<eos>, summed log-probability (with <eos>'s term
    if it ended with one) and score = log_prob / length_penalty_of(n, alpha), n counting <eos>."""

    tokens: list[int]
    score: float
    log_prob: float


class LiveRows:
    """The hypotheses still being extended, as one decoder batch: k rows (beams) for each of the
    B' unfinished sentences, N = B' * k. Finished sentences leave it (drop); use_cache=False
    re-runs the decoder over the whole prefix at every step (the reference path)."""

    def __init__(
        self,
        model: Transformer,
        src: Tensor,
        max_len_a: float,
        max_len_b: int,
        bos_id: int,
        pad_id: int,
        use_cache: bool,
    ):
        """src (B, S) padded source; a sentence generates at most max_output_lengths tokens."""
        batch, device = src.size(0), src.device
        src_lengths = (src != pad_id).sum(dim=1)  # (B,)
        max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b, model.max_seq_len - 1)
        memory = model.encode(src)  # (B, S, d_model)
        self.model = model
        self.max_steps = int(max_lens.max())
        self.sentence = torch.arange(batch, device=device)  # (B',) index of each live sentence
        self.max_lens = max_lens  # (B',)
        self.k = 1
        self.ids = torch.full((batch, 1 + self.max_steps), pad_id, device=device)  # (N, 1 + T)
        self.ids[:, 0] = bos_id
        self.length = 1  # filled columns of ids: <bos> and the tokens generated so far
        self.cache = model.start_decoding(memory, src, self.max_steps) if use_cache else None
        self.encoded = None if use_cache else (memory, src)  # (B', ...) what decode re-reads

    def logits(self) -> Tensor:
        """(N, tgt_vocab) next-token logits of every row."""
        if self.cache is None:
            memory, src = (t.repeat_interleave(self.k, dim=0) for t in self.encoded)
            hidden = self.model.decode(self.ids[:, : self.length], memory, src)[:, -1:]
        else:
            newest = self.ids[:, self.length - 1 : self.length]  # (N, 1)
            hidden = self.model.decode_step(newest, self.cache)  # (N, 1, d_model)
        return self.model.project(hidden)[:, -1]

    def generated(self, rows: Tensor) -> list[list[int]]:
        """The tokens generated so far by rows (R,), without <bos>."""
        return self.ids[rows, 1 : self.length].tolist()

    def append(self, tokens: Tensor, parent_beams: Tensor | None = None) -> None:
        """Extends every row by tokens (B', k'); with parent_beams (B', k') row (b, j) first
        becomes a copy of its sentence's row parent_beams[b, j] (beam reordering), k' of them."""
        if parent_beams is not None:
            first_row = torch.arange(parent_beams.size(0), device=self.ids.device) * self.k
            parents = (first_row[:, None] + parent_beams).view(-1)  # (B' * k',)
            self.ids = self.ids.index_select(0, parents)
            if self.cache is not None:
                self.cache.reorder_beams(parents)
            self.k = parent_beams.size(1)
        self.ids[:, self.length] = tokens.view(-1)
        self.length += 1

    def drop(self, done: Tensor) -> Tensor:
        """Removes the sentences where done (B',) is True -> keep (B'',) indices of the others."""
        keep = (~done).nonzero()[:, 0]
        self.ids = self.ids.index_select(0, DecoderCache.sentence_rows(keep, self.k))
        if self.cache is not None:
            self.cache.reorder(keep)
        else:
            self.encoded = tuple(t.index_select(0, keep) for t in self.encoded)
        self.sentence, self.max_lens = self.sentence[keep], self.max_lens[keep]
        return keep


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
    that <bos> + output fits in model.max_seq_len; dropout is the caller's business (model.eval)."""
    rows = LiveRows(model, src, max_len_a, max_len_b, bos_id, pad_id, use_cache)
    outputs = torch.full((src.size(0), rows.max_steps), pad_id, device=src.device)  # (B, T)
    out_lengths = torch.zeros_like(rows.max_lens)  # (B,) tokens kept, <eos> excluded
    is_eos = torch.zeros_like(rows.max_lens, dtype=torch.bool)  # (B',)
    for step in itertools.count():  # every sentence is done at its maximum length at the latest
        done = is_eos | (step >= rows.max_lens)  # (B',)
        if done.any():
            if done.all():
                break
            rows.drop(done)
        next_token = rows.logits().argmax(dim=-1)  # (B',)
        rows.append(next_token[:, None])
        outputs[rows.sentence, step] = next_token
        is_eos = next_token == eos_id
        out_lengths[rows.sentence] = step + 1 - is_eos.long()
    return [row[:n] for row, n in zip(outputs.tolist(), out_lengths.tolist(), strict=True)]


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
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Batched beam search: (B, S) padded source -> per sentence its n_best hypotheses, best first.

    At each step a sentence's best 2 * beam extensions are ranked by summed log-probability; those
    ending in <eos> among the first beam are finished, the best beam without <eos> stay live, and
    a hypothesis at the maximum length (as in greedy_decode) is finished as it is. A sentence is
    done with beam finished hypotheses or at its maximum length (a live one that might still score
    better after length normalisation is not waited for). Finished ones are ranked by
    log_prob / length_penalty_of(n, length_penalty). With beam=1 this is exactly greedy_decode.
    """
    if beam < 1 or not 1 <= n_best <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= n_best <= beam, got beam={beam}, {n_best=}")
    if model.output_matrix.size(0) < 2 * beam:
        raise ValueError(f"beam={beam} needs a target vocabulary of at least {2 * beam} tokens")
    batch, device = src.size(0), src.device
    rows = LiveRows(model, src, max_len_a, max_len_b, bos_id, pad_id, use_cache)
    log_probs = torch.zeros(batch, 1, device=device)  # (B', k): <bos> alone at first
    n_finished = torch.zeros_like(rows.max_lens)  # (B',) hypotheses ended with <eos>
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for step in itertools.count():  # every sentence is done at its maximum length at the latest
        at_max = step >= rows.max_lens  # (B',)
        if at_max.any():
            cut = at_max[:, None] & (log_probs != float("-inf"))  # (B', k)
            beams = torch.arange(rows.k, device=device).expand_as(cut)
            set_aside(finished, rows, cut, beams, log_probs, False, length_penalty)
        done = at_max | (n_finished >= beam)
        if done.any():
            if done.all():
                break
            keep = rows.drop(done)
            log_probs, n_finished = log_probs[keep], n_finished[keep]
        step_log_probs = F.log_softmax(rows.logits().float(), dim=-1)  # (N, V)
        cand_log_probs, cand_beam, cand_token = best_extensions(log_probs, step_log_probs, beam)
        cand_is_eos = cand_token == eos_id
        # Each beam yields at most one <eos> candidate, so beam of the 2 * beam are not <eos>;
        # a stable sort puts them first, best first.
        live = cand_is_eos.sort(dim=1, stable=True).indices[:, :beam]  # (B', beam)
        # > -inf is isfinite here: log-probabilities are never +inf, and NaN compares False
        ending = cand_is_eos[:, :beam] & (cand_log_probs[:, :beam] > float("-inf"))  # (B', beam)
        if ending.any():
            set_aside(finished, rows, ending, cand_beam, cand_log_probs, True, length_penalty)
            n_finished += ending.sum(dim=1)
        rows.append(cand_token.gather(1, live), parent_beams=cand_beam.gather(1, live))
        log_probs = cand_log_probs.gather(1, live)  # (B', beam)
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:n_best] for hyps in finished]


def best_extensions(
    log_probs: Tensor, step_log_probs: Tensor, beam: int
) -> tuple[Tensor, Tensor, Tensor]:
    """log_probs (B', k) of the live hypotheses, step_log_probs (B' * k, V) of their next token
    -> each sentence's 2 * beam best extensions, best first: summed log-probabilities, the
    hypothesis extended (0..k-1) and the token, each (B', 2 * beam)."""
    vocab = step_log_probs.size(-1)
    totals = (log_probs.view(-1, 1) + step_log_probs).view(log_probs.size(0), -1)  # (B', k * V)
    cand_log_probs, cand = totals.topk(2 * beam, dim=1)
    return cand_log_probs, cand // vocab, cand % vocab


def set_aside(
    finished: list[list[Hypothesis]],
    rows: LiveRows,
    where: Tensor,
    parent_beams: Tensor,
    log_probs: Tensor,
    with_eos: bool,
    alpha: float,
) -> None:
    """Finishes a hypothesis for each (b, j) where `where` (B', k) is True: live sentence b's
    row parent_beams[b, j] as generated so far, summed log-probability log_probs[b, j]; with_eos
    when it ended with <eos>, which then counts in the length penalty."""
    b, j = where.nonzero().unbind(1)  # row-major: sentence by sentence, best first
    tokens = rows.generated(b * rows.k + parent_beams[b, j])
    sentences, lps = rows.sentence[b].tolist(), log_probs[b, j].tolist()
    for sentence, ids, lp in zip(sentences, tokens, lps, strict=True):
        n = len(ids) + 1 if with_eos else len(ids)
        finished[sentence].append(Hypothesis(ids, lp / length_penalty_of(n, alpha), lp))
