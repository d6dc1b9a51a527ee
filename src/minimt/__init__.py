"""minimt: a minimal Transformer machine-translation project for studying embedding choices.

`from minimt import Seq2SeqEmbedding` loads torch only; Translator (tokenizers, decoding) is
imported when first used.
"""

from minimt.model.embedding import Seq2SeqEmbedding
from minimt.model.transformer import Transformer

__all__ = ["Seq2SeqEmbedding", "Transformer", "Translator"]


def __getattr__(name: str) -> object:
    if name == "Translator":
        from minimt.translator import Translator

        return Translator
    raise AttributeError(f"module 'minimt' has no attribute {name!r}")
