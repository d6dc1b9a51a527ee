"""Data: corpora, BPE tokenizers, token-id tables, batches; where a config picks a corpus."""
