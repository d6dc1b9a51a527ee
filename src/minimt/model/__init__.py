"""The model: embedding, Transformer, decoding search, loss. Torch only: no config, no files."""
