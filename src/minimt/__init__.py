"""minimt: a minimal Transformer machine-translation project for studying embedding choices."""

from minimt.embedding import Seq2SeqEmbedding
from minimt.model import Transformer
from minimt.translator import Translator

__all__ = ["Seq2SeqEmbedding", "Transformer", "Translator"]
