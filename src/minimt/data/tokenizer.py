"""Byte-level BPE tokenizers (HF `tokenizers`) that decode back to exactly the text they encoded.

Byte-level pre-tokenization maps every UTF-8 byte to a symbol of a fixed 256-symbol alphabet, so
any string, including characters never seen in training, leading or repeated spaces and tabs,
encodes without `<unk>` and decodes to itself (docs/performance.md says why not Metaspace).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from minimt.atomic import write_text
from minimt.data.corpus import DataError, ParallelFiles
from minimt.errors import NotFound

logger = logging.getLogger(__name__)

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")  # in id order
BYTE_ALPHABET_SIZE = 256
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE

JOINT_FILE = "tokenizer.json"
SRC_FILE = "tokenizer.src.json"
TGT_FILE = "tokenizer.tgt.json"

# Bump when training changes in a way that makes cached tokenizers stale.
_CACHE_FORMAT_VERSION = 1


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE tokenizer with the special tokens at ids 0-3."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"tokenizer.vocab_size must be at least {MIN_VOCAB_SIZE} ({len(SPECIAL_TOKENS)} "
            f"special tokens + {BYTE_ALPHABET_SIZE} byte symbols), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


@dataclass
class TokenizerPair:
    """Source and target BPE tokenizers; one shared object when the vocabulary is joint."""

    src: Tokenizer
    tgt: Tokenizer

    def __post_init__(self) -> None:
        # "<eos>" typed in a sentence is text, not the special id (not saved in tokenizer.json)
        for tokenizer in (self.src, self.tgt):
            tokenizer.encode_special_tokens = True

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_vocab_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_vocab_size()

    def encode_src(self, lines: Sequence[str]) -> list[list[int]]:
        """Source token ids for each line, without special tokens."""
        return _encode(self.src, lines)

    def encode_tgt(self, lines: Sequence[str]) -> list[list[int]]:
        """Target token ids for each line, without special tokens."""
        return _encode(self.tgt, lines)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Target text for each id sequence; special tokens (wherever they are) are skipped."""
        return self.tgt.decode_batch([list(seq) for seq in ids], skip_special_tokens=True)

    @property
    def fingerprint(self) -> str:
        """A digest of both tokenizers (vocabulary, merges, settings): equal digests, equal ids."""
        jsons = [self.src.to_str(), self.tgt.to_str(), self.src.encode_special_tokens]
        return hashlib.sha256(json.dumps(jsons).encode()).hexdigest()[:16]

    def save(self, run_dir: str | Path) -> None:
        """Write tokenizer.json (joint) or tokenizer.src.json and tokenizer.tgt.json (separate)."""
        run_dir = Path(run_dir)
        files = {JOINT_FILE: self.src} if self.joint else {SRC_FILE: self.src, TGT_FILE: self.tgt}
        for name, tokenizer in files.items():
            # what tokenizer.save writes, but a full disk raises OSError, not a bare Exception
            write_text(run_dir / name, tokenizer.to_str(pretty=True))
        # A tokenizer of the other layout left in the folder would be loaded instead of this one.
        for stale in {JOINT_FILE, SRC_FILE, TGT_FILE} - files.keys():
            (run_dir / stale).unlink(missing_ok=True)

    @classmethod
    def load(cls, run_dir: str | Path) -> TokenizerPair:
        """Read the tokenizers that `save` wrote to `run_dir`."""
        run_dir = Path(run_dir)
        joint, src, tgt = run_dir / JOINT_FILE, run_dir / SRC_FILE, run_dir / TGT_FILE
        if joint.is_file():
            shared = read_tokenizer(joint)
            return cls(shared, shared)
        if src.is_file() and tgt.is_file():
            return cls(read_tokenizer(src), read_tokenizer(tgt))
        raise NotFound(f"no tokenizer in {run_dir}: expected {joint}, or {src} and {tgt}")


def read_tokenizer(path: Path) -> Tokenizer:
    """The tokenizer saved at `path`; a file that does not parse is a DataError naming it."""
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception for any bad file
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DataError(
            f"{path} is damaged ({first}): copy it again from the run that trained it; the "
            "model's checkpoints only work with the tokenizer they were trained with"
        ) from error


def build_tokenizers(
    corpus: ParallelFiles, vocab_size: int, joint: bool, cache_dir: str | Path
) -> TokenizerPair:
    """Train (or load from cache) the BPE tokenizers for this corpus and settings.

    Training streams the lines from the files, so the corpus is never held in memory.
    """
    folder = Path(cache_dir) / "tokenizers" / _cache_key(corpus, vocab_size, joint)
    try:
        pair = TokenizerPair.load(folder)
    except FileNotFoundError:
        pass
    else:
        logger.info("loaded cached tokenizers from %s", folder)
        return pair

    logger.info(
        "training %s BPE (vocab_size=%d) on %d sentence pairs",
        "a joint" if joint else "separate source and target",
        vocab_size,
        corpus.num_pairs,
    )
    if joint:
        shared = train_bpe(chain(corpus.src_lines(), corpus.tgt_lines()), vocab_size)
        pair = TokenizerPair(shared, shared)
    else:
        pair = TokenizerPair(
            train_bpe(corpus.src_lines(), vocab_size), train_bpe(corpus.tgt_lines(), vocab_size)
        )
    pair.save(folder)
    logger.info("saved tokenizers to %s", folder)
    return pair


def _encode(tokenizer: Tokenizer, lines: Sequence[str]) -> list[list[int]]:
    return [
        encoding.ids for encoding in tokenizer.encode_batch(list(lines), add_special_tokens=False)
    ]


def _cache_key(corpus: ParallelFiles, vocab_size: int, joint: bool) -> str:
    """A digest of everything that determines the trained tokenizers."""
    settings = [corpus.fingerprint, vocab_size, joint, _CACHE_FORMAT_VERSION]
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
