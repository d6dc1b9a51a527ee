"""Translate sentences with a trained model: batch by length, decode, detokenize.

from minimt import Translator
t = Translator.from_run("outputs/2026-11-21/10-00-00", checkpoint="best")
t.translate(["Ein Hund rennt über die Wiese."], beam=5)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from minimt.config import ConfigError
from minimt.data.batching import source_tensor, token_batches
from minimt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair
from minimt.model.search import beam_search, greedy_decode
from minimt.model.transformer import Transformer
from minimt.rundir import checkpoint_path, load_model
from minimt.runtime import pick_device, precision_autocast, resolve_precision

log = logging.getLogger(__name__)

# Every character str.splitlines() breaks at: an output with one would span several lines of a
# hypothesis file. Byte-level BPE can emit them (the model is free to produce a b"\n" token).
_LINE_BREAKS_TO_SPACES = str.maketrans(dict.fromkeys("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029", " "))


def fit_to_model(src_ids: list[list[int]], limit: int) -> list[list[int]]:
    """Cut sources longer than `limit` tokens to their first `limit`, with a warning naming them."""
    too_long = [i for i, ids in enumerate(src_ids) if len(ids) > limit]
    if too_long:
        more = " ..." if len(too_long) > 10 else ""
        shown = ", ".join(str(i + 1) for i in too_long[:10]) + more
        log.warning(
            "%d source line(s) exceed the model's %d source tokens and are cut to that length "
            "(lines %s); train with a larger model.max_seq_len to translate them whole",
            len(too_long),
            limit,
            shown,
        )
    return [ids[:limit] for ids in src_ids]


class Translator:
    """A model, its tokenizers and decoding settings: text in, text out, input order kept."""

    def __init__(
        self,
        model: Transformer,
        tokenizers: TokenizerPair,
        *,
        max_len_a: float,
        max_len_b: int,
        batch_tokens: int,
        precision: str = "fp32",
        use_cache: bool = True,
    ):
        self.model = model
        self.tokenizers = tokenizers
        self.max_len_a = max_len_a
        self.max_len_b = max_len_b
        self.batch_tokens = batch_tokens
        self.precision = precision
        self.use_cache = use_cache  # False re-runs the decoder over the prefix (for benchmarks)
        self.config: DictConfig | None = None  # the run's config, when built from one
        self.model_name = "the model"  # what errors call it: the checkpoint, when built from one

    @classmethod
    def from_config(
        cls,
        model: Transformer,
        tokenizers: TokenizerPair,
        cfg: DictConfig,
        precision: str,
        batch_tokens: int | None = None,
    ) -> Translator:
        """The decoding settings of a run's config (kept as `translator.config`); batches sized
        by `batch_tokens` as translate_ids says (None: the run's trainer.batch_tokens)."""
        translator = cls(
            model,
            tokenizers,
            max_len_a=cfg.decoding.max_len_a,
            max_len_b=cfg.decoding.max_len_b,
            batch_tokens=batch_tokens or cfg.trainer.batch_tokens,
            precision=precision,
        )
        translator.config = cfg
        return translator

    @classmethod
    def from_run(
        cls,
        run_dir: str | Path,
        checkpoint: str = "best",
        device: str = "auto",
        batch_tokens: int | None = None,
    ) -> Translator:
        """Rebuild from a run directory; checkpoint is best, last, averaged, a file name in its
        checkpoints/ (step_800.pt) or a path;
        `batch_tokens` only changes speed (None: the run's trainer.batch_tokens)."""
        model, tokenizers, cfg = load_model(run_dir, checkpoint)
        torch_device = pick_device(device)
        precision = resolve_precision(cfg.trainer.precision, torch_device)
        translator = cls.from_config(
            model.to(torch_device), tokenizers, cfg, precision, batch_tokens
        )
        translator.model_name = str(checkpoint_path(run_dir, checkpoint))
        return translator

    @property
    def target_vocab_size(self) -> int:
        """Rows of the model's output projection: the tokens a beam can rank."""
        return self.model.output_matrix.size(0)

    def check_beams(self, beams: Sequence[int], *, key: str = "beam") -> None:
        """A ConfigError naming `key` for the first beam size this model cannot decode with: beam
        search ranks 2 * beam extensions a step, so the target vocabulary needs 2 * beam tokens.
        Callers check every beam they will use before decoding any sentence."""
        vocab = self.target_vocab_size
        for beam in beams:
            if 2 * beam > vocab:
                raise ConfigError(
                    f"{key}={beam} needs a target vocabulary of at least {2 * beam} tokens (beam "
                    f"search ranks 2 x beam extensions a step); {self.model_name} has {vocab}: "
                    f"use {key} <= {vocab // 2}"
                )

    def translate(
        self, lines: Sequence[str], beam: int = 1, length_penalty: float = 1.0
    ) -> list[str]:
        """Translations of `lines` in input order, each one line (line breaks become spaces, so a
        file of translations stays aligned with its source); blank lines give empty ones."""
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        self.check_beams([beam])
        outputs = [""] * len(lines)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        hyps = self.translate_ids([lines[i] for i in todo], beam, length_penalty)
        for i, text in zip(todo, self.tokenizers.decode_tgt(hyps), strict=True):
            outputs[i] = text.translate(_LINE_BREAKS_TO_SPACES)
        return outputs

    def translate_ids(
        self, lines: Sequence[str], beam: int = 1, length_penalty: float = 1.0
    ) -> list[list[int]]:
        """Best target ids per line (no specials), decoding batches of similar source length,
        each of at most 2 * batch_tokens / beam padded source tokens."""
        device = next(self.model.parameters()).device
        src_ids = fit_to_model(self.tokenizers.encode_src(lines), self.model.max_seq_len - 1)
        outputs: list[list[int]] = [[] for _ in lines]
        self.model.eval()
        autocast = precision_autocast(self.precision, device)
        # Twice batch_tokens: finished sentences leave a batch, which shrinks as it decodes.
        # Beam search holds beam rows per sentence, so its batches hold 1/beam the sentences.
        budget = max(2 * self.batch_tokens // beam, 1)
        for indices in token_batches([len(ids) + 1 for ids in src_ids], budget):
            src = source_tensor([src_ids[i] for i in indices]).to(device)
            lengths = [len(src_ids[i]) + 1 for i in indices]  # with <eos>, as src holds them
            with autocast:
                best = self._decode(src, lengths, beam, length_penalty)
            for i, hyp in zip(indices, best, strict=True):
                outputs[i] = hyp
        return outputs

    def _decode(
        self, src: torch.Tensor, lengths: list[int], beam: int, length_penalty: float
    ) -> list[list[int]]:
        """src (B, S) padded sources of these lengths -> each one's best target ids."""
        specials = {"bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": PAD_ID}
        options = dict(max_len_a=self.max_len_a, max_len_b=self.max_len_b, use_cache=self.use_cache)
        options["src_lengths"] = lengths
        if beam == 1:
            return greedy_decode(self.model, src, **specials, **options)
        nbest = beam_search(
            self.model, src, beam=beam, length_penalty=length_penalty, **specials, **options
        )
        return [hyps[0].tokens for hyps in nbest]
