"""A CTranslate2 export (scripts/export.py) decoded as minimt decodes: the run's tokenizer, its
per-sentence length caps and minimt's GNMT length penalty, so its outputs and scores compare
with minimt's directly.

CTranslate2 caps a whole call at one length and ranks beam hypotheses by log p / n^alpha; here
sentences are grouped by their cap, one call per group, and its k hypotheses (ranked by raw
log-probability) are ranked again by log p / ((5 + n) / 6)^alpha, n counting <eos>."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch

from minimt.data.tokenizer import TokenizerPair
from minimt.errors import NotFound
from minimt.export import EOS, RECORD, ExportError, ctranslate2, vocabulary
from minimt.model.search import length_penalty_of
from minimt.translator import Translator, fit_to_model

ENGINE = "ctranslate2"
BATCH_SENTENCES = 32  # CTranslate2's max_batch_size: it sorts by length and batches inside a call
RAW_LOG_PROB = 1e-30  # a length penalty under which n^alpha is 1.0 in float32, without early exit


class ExportedTranslator(Translator):
    """Translator's interface over a CTranslate2 model directory."""

    def __init__(
        self,
        export_dir: str | Path,
        *,
        max_len_a: float,
        max_len_b: int,
        max_seq_len: int,
        threads: int | None = None,
    ):
        export_dir = Path(export_dir)
        self.engine = ctranslate2().Translator(
            str(export_dir), device="cpu", intra_threads=threads or torch.get_num_threads()
        )
        self.tokenizers = TokenizerPair.load(export_dir)
        self.max_len_a, self.max_len_b, self.max_seq_len = max_len_a, max_len_b, max_seq_len
        self.config = None
        self.model_name = str(export_dir)
        self.src_tokens = vocabulary(self.tokenizers.src)
        self.tgt_ids = {token: i for i, token in enumerate(vocabulary(self.tokenizers.tgt))}
        self.record = json.loads((export_dir / RECORD).read_text(encoding="utf-8"))

    @classmethod
    def from_export(cls, export_dir: str | Path, threads: int | None = None) -> ExportedTranslator:
        """The export with the decoding settings its run had (its minimt_export.json)."""
        record_path = Path(export_dir) / RECORD
        if not record_path.is_file():
            raise NotFound(
                f"no {RECORD} in {export_dir}: name a folder written by scripts/export.py"
            )
        decoding = json.loads(record_path.read_text(encoding="utf-8"))["decoding"]
        return cls(
            export_dir,
            max_len_a=decoding["max_len_a"],
            max_len_b=decoding["max_len_b"],
            max_seq_len=decoding["max_seq_len"],
            threads=threads,
        )

    @property
    def target_vocab_size(self) -> int:
        """The exported target vocabulary (the run's tokenizer)."""
        return self.tokenizers.tgt_vocab_size

    @property
    def checkpoint_label(self) -> str:
        """How evaluations name what it decodes: best.ctranslate2-float32, ..., never the name of
        a checkpoint minimt decodes, so an export's scores never overwrite minimt's."""
        checkpoint = Path(self.record["checkpoint"]).stem
        return f"{checkpoint}.{ENGINE}-{self.record['quantization']}"

    def check_run(self, run_dir: Path) -> None:
        """An ExportError unless the export was made from the run in `run_dir` (its tokenizer)."""
        if TokenizerPair.load(run_dir).fingerprint != self.record["tokenizer_digest"]:
            raise ExportError(
                f"{self.model_name} was exported from {self.record['run']}, not from {run_dir} "
                "(their tokenizers differ): evaluate it with the run it came from"
            )

    def translate_ids(
        self, lines: Sequence[str], beam: int = 1, length_penalty: float = 1.0
    ) -> list[list[int]]:
        """Best target ids per line (no specials), one CTranslate2 call per output length cap."""
        src_ids = fit_to_model(self.tokenizers.encode_src(lines), self.max_seq_len - 1)
        by_cap: dict[int, list[int]] = defaultdict(list)
        for i, ids in enumerate(src_ids):
            # as minimt.model.search.max_output_lengths, the source counted with its <eos>
            cap = min(
                math.floor((len(ids) + 1) * self.max_len_a + self.max_len_b), self.max_seq_len - 1
            )
            by_cap[cap].append(i)
        outputs: list[list[int]] = [[] for _ in lines]
        for cap, indices in by_cap.items():
            if cap <= 0:
                continue  # no token allowed: an empty translation, as minimt gives
            sources = [[self.src_tokens[t] for t in src_ids[i]] for i in indices]
            best = self._decode_tokens(sources, cap, beam, length_penalty)
            for i, ids in zip(indices, best, strict=True):
                outputs[i] = ids
        return outputs

    def _decode_tokens(
        self, sources: list[list[str]], cap: int, beam: int, length_penalty: float
    ) -> list[list[int]]:
        results = self.engine.translate_batch(
            sources,
            beam_size=beam,
            num_hypotheses=beam,
            length_penalty=RAW_LOG_PROB,
            max_decoding_length=cap,
            min_decoding_length=0,
            max_input_length=0,  # cut by fit_to_model already
            return_scores=True,
            return_end_token=True,
            max_batch_size=BATCH_SENTENCES,
        )
        return [self._best(result, length_penalty) for result in results]

    def _best(self, result, alpha: float) -> list[int]:
        """The hypothesis with the best GNMT score, as ids without <eos>."""
        ranked = sorted(
            zip(result.hypotheses, result.scores, strict=True),
            key=lambda found: -found[1] / length_penalty_of(len(found[0]), alpha),
        )
        tokens = ranked[0][0]
        return [self.tgt_ids[token] for token in tokens if token != EOS]


def open_translator(
    path: str | Path,
    checkpoint: str = "best",
    device: str = "auto",
    batch_tokens: int | None = None,
) -> Translator:
    """The Translator of a run directory, or of a CTranslate2 export where `path` holds one
    (`checkpoint`, `device` and `batch_tokens` are then the export's own)."""
    if (Path(path) / RECORD).is_file():
        return ExportedTranslator.from_export(path)
    return Translator.from_run(path, checkpoint, device, batch_tokens)
