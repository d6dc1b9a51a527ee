"""Turning a trained Transformer into translations: batched greedy decoding and beam search."""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from minimt.model.cache import DecoderCache
from minimt.model.transformer import Transformer


def max_output_lengths(src_lengths: Tensor, a: float, b: int, cap: int) -> Tensor:
    """(B,) source lengths -> (B,) long: min(floor(a * len + b), cap), counting <eos>."""
    return torch.floor(src_lengths.double() * a + b).long().clamp(max=cap)


def output_length_bounds(lengths: Sequence[int], a: float, b: int, cap: int) -> tuple[int, int]:
    """The least and greatest max_output_lengths of sources of these lengths, from the host's
    own numbers (no length is read back from the device)."""
    ends = [min(math.floor(length * a + b), cap) for length in lengths]
    return min(ends), max(ends)


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
    re-runs the decoder over the whole prefix at every step (the reference path).

    Nothing here reads a value back from the device: from the sources' lengths where the caller
    knows them (src_lengths, <eos> included), else from the padded width, the host knows the
    first step at which a sentence may reach its maximum length (min_steps) and the most steps
    any may take (max_steps); the decoders read which sentences are done once per step."""

    def __init__(
        self,
        model: Transformer,
        src: Tensor,
        *,
        max_len_a: float,
        max_len_b: int,
        bos_id: int,
        pad_id: int,
        use_cache: bool,
        src_lengths: Sequence[int] | None = None,
    ):
        """src (B, S) padded source; a sentence generates at most max_output_lengths tokens."""
        batch, device = src.size(0), src.device
        cap = model.max_seq_len - 1
        real = (src != pad_id).sum(dim=1)  # (B,) each source's length, on the device
        self.max_lens = max_output_lengths(real, max_len_a, max_len_b, cap)  # (B',)
        lengths = (0, src.size(1)) if src_lengths is None else src_lengths
        self.min_steps, self.max_steps = output_length_bounds(lengths, max_len_a, max_len_b, cap)
        memory = model.encode(src)  # (B, S, d_model)
        self.model = model
        self.sentence = torch.arange(batch, device=device)  # (B',) index of each live sentence
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

    def append(self, tokens: Tensor, parent_beams: Tensor | None = None) -> None:
        """Extends every row by tokens (B', k'); with parent_beams (B', k') row (b, j) first
        becomes a copy of its sentence's row parent_beams[b, j] (beam reordering), k' of them."""
        if parent_beams is not None:
            parents = self.rows_of(parent_beams).view(-1)  # (B' * k',)
            self.ids = self.ids.index_select(0, parents)
            if self.cache is not None:
                self.cache.reorder_beams(parents)
            self.k = parent_beams.size(1)
        self.ids[:, self.length] = tokens.view(-1)
        self.length += 1

    def rows_of(self, beams: Tensor) -> Tensor:
        """beams (B', m) of each live sentence (0..k-1) -> (B', m) their rows (0..N-1)."""
        first_row = torch.arange(beams.size(0), device=beams.device) * self.k
        return first_row[:, None] + beams

    def drop(self, done: Tensor, n_live: int) -> Tensor:
        """Removes the sentences where done (B',) is True, n_live staying -> keep (n_live,)
        indices of the others, in order. The caller read done, so no size is read back here."""
        keep = done.to(torch.uint8).argsort(stable=True)[:n_live]  # the False ones, in order
        self.ids = self.ids.index_select(0, DecoderCache.sentence_rows(keep, self.k))
        if self.cache is not None:
            self.cache.reorder(keep)
        else:
            self.encoded = tuple(t.index_select(0, keep) for t in self.encoded)
        self.sentence, self.max_lens = self.sentence[keep], self.max_lens[keep]
        return keep


class FinishedHypotheses:
    """Beam search's finished hypotheses, kept on the device until the search ends: per sentence
    up to `slots` of them in the order found, each its row of LiveRows.ids (<bos>, the tokens,
    padding), its summed log-probability and a code: 2 x its number of tokens, + 1 when it ended
    with <eos>; -1 marks an empty slot. One transfer brings them to the host."""

    def __init__(self, batch: int, slots: int, width: int, device: torch.device):
        # Slot `slots` of each sentence takes the writes of the candidates that did not finish.
        self.trash, self.slots_per_sentence = slots, slots + 1
        rows = batch * self.slots_per_sentence
        self.ids = torch.zeros(rows, width, dtype=torch.long, device=device)  # (rows, 1 + T)
        self.log_prob = torch.zeros(rows, dtype=torch.float64, device=device)
        self.code = torch.full((rows,), -1.0, dtype=torch.float64, device=device)
        self.count = torch.zeros(batch, dtype=torch.long, device=device)  # (B',) slots filled

    def keep(self, keep: Tensor) -> None:
        """The live sentences are now keep (B'',) of the B' before (LiveRows.drop)."""
        self.count = self.count[keep]

    def add(
        self,
        rows: LiveRows,
        where: Tensor,
        parents: Tensor,
        log_probs: Tensor,
        *,
        with_eos: bool,
    ) -> None:
        """Finishes a hypothesis for each (b, j) where `where` (B', m) is True: the live row
        parents[b, j] (0..N-1) as generated so far, summed log-probability log_probs[b, j];
        with_eos when it ended with <eos>, which then counts in the length penalty. Every
        candidate is written (to its sentence's trash slot where it does not finish), so that
        nothing is read back to find which finished."""
        slot = torch.where(where, self.count[:, None] + where.cumsum(dim=1) - 1, self.trash)
        target = (rows.sentence[:, None] * self.slots_per_sentence + slot).view(-1)  # (B' * m,)
        self.ids.index_copy_(0, target, rows.ids.index_select(0, parents.view(-1)))
        self.log_prob.index_copy_(0, target, log_probs.reshape(-1).double())
        self.code.index_fill_(0, target, 2 * (rows.length - 1) + int(with_eos))
        self.count += where.sum(dim=1)

    def best(self, n_best: int, alpha: float, *, width: int) -> list[list[Hypothesis]]:
        """Each sentence's n_best hypotheses, best first by log_prob / length_penalty_of(n,
        alpha), n counting <eos> when it ended with one; ties stay in the order found. `width`:
        the columns of LiveRows.ids that the search filled (<bos> and the longest output)."""
        # float64 holds the ids, the codes and the float32 log-probabilities exactly.
        ids = self.ids[:, :width].double()
        found = torch.cat([self.log_prob[:, None], self.code[:, None], ids], -1)
        found = found.view(-1, self.slots_per_sentence, found.size(-1))  # (B, slots + 1, 3 + T)
        return [
            sorted(self._hypotheses(slots, alpha), key=lambda h: h.score, reverse=True)[:n_best]
            for slots in found[:, : self.trash].tolist()  # the one host read
        ]

    @staticmethod
    def _hypotheses(slots: list[list[float]], alpha: float) -> list[Hypothesis]:
        """One sentence's filled slots, each [log_prob, code, <bos>, *tokens], as hypotheses."""
        found = []
        for log_prob, code, _bos, *tokens in slots:
            if code < 0:
                break
            n, eos = divmod(int(code), 2)
            penalty = length_penalty_of(n + eos, alpha)
            found.append(Hypothesis([int(t) for t in tokens[:n]], log_prob / penalty, log_prob))
        return found


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
    src_lengths: Sequence[int] | None = None,
) -> list[list[int]]:
    """Batched greedy decoding: (B, S) padded source -> per sentence its ids, <bos>/<eos> stripped.
    Each sentence may emit at most max_output_lengths(len, max_len_a, max_len_b) tokens, capped so
    that <bos> + output fits in model.max_seq_len; dropout is the caller's business (model.eval).
    The host reads the device once per step: that step's tokens and which sentences are done."""
    rows = LiveRows(
        model,
        src,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        bos_id=bos_id,
        pad_id=pad_id,
        use_cache=use_cache,
        src_lengths=src_lengths,
    )
    outputs: list[list[int]] = [[] for _ in range(src.size(0))]
    live = list(range(src.size(0)))  # the sentence of each row
    done = rows.max_lens <= 0  # (B',)
    flags = done.tolist() if rows.min_steps <= 0 else [False] * len(live)
    for step in itertools.count():  # every sentence is done at its maximum length at the latest
        n_live = len(flags) - sum(flags)
        if n_live == 0:
            break
        if n_live < len(live):
            live = [sentence for sentence, d in zip(live, flags, strict=True) if not d]
            rows.drop(done, n_live)
        next_token = rows.logits().argmax(dim=-1)  # (B',)
        rows.append(next_token[:, None])
        done = (next_token == eos_id) | (step + 1 >= rows.max_lens)
        tokens, flags = torch.stack([next_token, done.long()]).tolist()
        for sentence, token in zip(live, tokens, strict=True):
            if token != eos_id:
                outputs[sentence].append(token)
    return outputs


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
    src_lengths: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: (B, S) padded source -> per sentence its n_best hypotheses, best first.

    At each step a sentence's best 2 * beam extensions are ranked by summed log-probability; those
    ending in <eos> among the first beam are finished, the best beam without <eos> stay live, and
    a hypothesis at the maximum length (as in greedy_decode) is finished as it is. A sentence is
    done with beam finished hypotheses or at its maximum length (a live one that might still score
    better after length normalisation is not waited for). Finished ones are ranked by
    log_prob / length_penalty_of(n, length_penalty). With beam=1 this is exactly greedy_decode.
    The host reads the device at most once per step (how many sentences are done), and once at
    the end (the finished hypotheses).
    """
    if beam < 1 or not 1 <= n_best <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= n_best <= beam, got beam={beam}, {n_best=}")
    if model.output_matrix.size(0) < 2 * beam:
        raise ValueError(f"beam={beam} needs a target vocabulary of at least {2 * beam} tokens")
    batch, device = src.size(0), src.device
    rows = LiveRows(
        model,
        src,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        bos_id=bos_id,
        pad_id=pad_id,
        use_cache=use_cache,
        src_lengths=src_lengths,
    )
    log_probs = torch.zeros(batch, 1, device=device)  # (B', k): <bos> alone at first
    n_finished = torch.zeros_like(rows.max_lens)  # (B',) hypotheses ended with <eos>
    # A live sentence holds at most 2 * beam - 1 of those, then up to beam cut at its maximum.
    finished = FinishedHypotheses(batch, 3 * beam, 1 + rows.max_steps, device)
    most_finished = 0  # the host's bound on any sentence's n_finished
    for step in itertools.count():  # every sentence is done at its maximum length at the latest
        may_reach_max = step >= rows.min_steps
        done = n_finished >= beam  # (B',)
        if may_reach_max:
            at_max = step >= rows.max_lens  # (B',)
            cut = at_max[:, None] & (log_probs != float("-inf"))  # (B', k)
            every_row = torch.arange(cut.numel(), device=device).view_as(cut)  # (B', k)
            finished.add(rows, cut, every_row, log_probs, with_eos=False)
            done |= at_max
        if may_reach_max or most_finished >= beam:  # else no sentence can be done yet
            n_live = done.size(0) - int(done.sum())  # the step's host read
            if n_live == 0:
                break
            if n_live < done.size(0):
                keep = rows.drop(done, n_live)
                log_probs, n_finished = log_probs[keep], n_finished[keep]
                finished.keep(keep)
        step_log_probs = F.log_softmax(rows.logits().float(), dim=-1)  # (N, V)
        cand_log_probs, cand_beam, cand_token = best_extensions(log_probs, step_log_probs, beam)
        cand_is_eos = cand_token == eos_id
        # Each beam yields at most one <eos> candidate, so beam of the 2 * beam are not <eos>;
        # a stable sort puts them first, best first.
        live = cand_is_eos.sort(dim=1, stable=True).indices[:, :beam]  # (B', beam)
        # > -inf is isfinite here: log-probabilities are never +inf, and NaN compares False
        ending = cand_is_eos[:, :beam] & (cand_log_probs[:, :beam] > float("-inf"))  # (B', beam)
        parents = rows.rows_of(cand_beam[:, :beam])  # (B', beam)
        finished.add(rows, ending, parents, cand_log_probs[:, :beam], with_eos=True)
        n_finished += ending.sum(dim=1)
        most_finished += min(rows.k, beam)  # each row ends at most one of the first beam
        rows.append(cand_token.gather(1, live), parent_beams=cand_beam.gather(1, live))
        log_probs = cand_log_probs.gather(1, live)  # (B', beam)
    return finished.best(n_best, length_penalty, width=rows.length)


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
