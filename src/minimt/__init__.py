"""minimt: a minimal Transformer machine-translation project for studying embedding choices.

`from minimt import Seq2SeqEmbedding` loads torch only; Translator (tokenizers, decoding) is
imported when first used. Importing a submodule loads only what it imports: `minimt.allocator`
picks a script's allocator before torch loads.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minimt.model.embedding import Seq2SeqEmbedding
    from minimt.model.transformer import Transformer
    from minimt.translator import Translator

__all__ = ["Seq2SeqEmbedding", "Transformer", "Translator", "__version__"]
__version__ = metadata.version("minimt")  # pyproject.toml's; CHANGELOG.md says what each changed

HOMES = {
    "Seq2SeqEmbedding": "minimt.model.embedding",
    "Transformer": "minimt.model.transformer",
    "Translator": "minimt.translator",
}


def __getattr__(name: str) -> object:
    if name not in HOMES:
        raise AttributeError(f"module 'minimt' has no attribute {name!r}")
    return getattr(importlib.import_module(HOMES[name]), name)
