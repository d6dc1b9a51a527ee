"""TensorBoard views of what each embedding choice does to a trained model.

HPARAMS (the study's settings against its scores), the target table in the Projector, the
positional table and its position-to-position similarity, token vs positional norms, and
cross-attention heatmaps. None changes the weights (cross_attention sets eval mode, as validation
does).
"""

import inspect
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from omegaconf import DictConfig
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from minimt.config import SHARE_LEVELS, tying_level
from minimt.data.tokenizer import EOS_ID, TokenizerPair
from minimt.model.embedding import POSITIONAL_ENCODINGS
from minimt.model.transformer import MultiHeadAttention, Transformer

FIGURE_DPI = 150  # pixels per inch of every figure: labels stay sharp when TensorBoard scales it


def hparam_domains() -> dict[str, list[str]]:
    """Every value each named hyperparameter can take (the encodings registered now):
    TensorBoard offers them as checkboxes."""
    encodings = list(POSITIONAL_ENCODINGS)
    return {
        "pe": encodings,
        "pe.encoder": encodings,
        "pe.decoder": encodings,
        "scale": ["false", "true"],
        "share": list(SHARE_LEVELS),
    }


def log_hparams(writer: SummaryWriter, cfg: DictConfig, metrics: dict) -> None:
    """One row of the HPARAMS tab: the embedding choices, data and optimiser settings -> scores.

    Booleans and names are strings with their discrete domain (hparam_domains): TensorBoard
    reads the columns and their filters from one run's declaration, so every run declares
    every possible value (a bool would show as 1.0000 with a numeric filter). Optional numbers
    are strings too ("all" for null), since a missing value would drop the column.

    metrics is what training writes to metrics.json: best_val_bleu, the validation loss at that
    step and the first test set's BLEU (left out when there is none; test_average's as well
    when there is one). Written into the writer's own folder, so TensorBoard pairs the row with
    the run's curves; the writer is flushed first because the row goes to a second event file
    there: call this last.
    """
    init_std = cfg.embedding.init_std
    hparams = {
        "pe": cfg.pe.name,
        "pe.encoder": cfg.pe.encoder,
        "pe.decoder": cfg.pe.decoder,
        "scale": str(cfg.embedding.scale).lower(),
        "share": tying_level(cfg.embedding.share),
        "init_std": "d_model^-0.5" if init_std is None else str(float(init_std)),
        "train_max_words": optional_number(cfg.data.train_max_words),
        "train_subsample": optional_number(cfg.data.train_subsample),
        "seed": cfg.trainer.seed,
        "lr": cfg.trainer.lr,
        "warmup_steps": cfg.trainer.warmup_steps,
        "d_model": cfg.model.d_model,
        "vocab_size": cfg.tokenizer.vocab_size,
        "langs": f"{cfg.data.src_lang}-{cfg.data.tgt_lang}",
    }
    best = [v for v in metrics["val_history"] if v["step"] == metrics["best_step"]]
    scores = {"hparam/best_val_bleu": metrics["best_val_bleu"]}
    if best:
        scores["hparam/val_loss"] = best[0]["loss"]
    for key in ("test", "test_average"):
        if metrics.get(key):
            scores[f"hparam/{key}_bleu"] = next(iter(metrics[key].values()))["bleu"]
    writer.flush()
    writer.add_hparams(
        hparams, scores, hparam_domains(), run_name=".", global_step=metrics["steps"]
    )


def optional_number(value: int | None) -> str:
    """An optional size as an HPARAMS string: "all" for null (no limit), else the number."""
    return "all" if value is None else str(value)


def token_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """One readable single-line label per id: its decoded text with spaces shown as '▁'.

    A byte-level token that is part of a multi-byte character decodes to U+FFFD: its BPE symbol
    is shown instead. Tabs, newlines and other control characters are escaped ('\\t').
    """
    texts = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    labels = []
    for i, text in zip(ids, texts, strict=True):
        text = tokenizer.id_to_token(i) if "\ufffd" in text else text.replace(" ", "▁")
        labels.append("".join(c if c.isprintable() else repr(c)[1:-1] for c in text))
    return labels


@torch.no_grad()
def log_embedding_projector(
    writer: SummaryWriter,
    model: Transformer,
    tokenizers: TokenizerPair,
    step: int,
    max_tokens: int = 10_000,
) -> None:
    """The target table's first max_tokens rows (N, d_model) in the Projector, BPE tokens as labels.

    With share_embeddings it is also the source table and the output projection. The Projector
    reads a text table: values are rounded to 4 decimals (in float64, so that they print short),
    which makes it 2.5x smaller.
    """
    table = model.embedding.tgt_token_weight[:max_tokens].detach().cpu().double()  # (N, d_model)
    table = table.round(decimals=4)
    labels = token_labels(tokenizers.tgt, range(table.size(0)))
    writer.add_embedding(table, metadata=labels, global_step=step, tag="tgt_tokens")


def positional_table(model: Transformer, side: str = "src") -> Tensor | None:
    """(max_seq_len, d_model): what the positional encoding of side "src" or "tgt" adds at each
    position, or None when it adds nothing (it acts on attention instead, or there is none)."""
    embedding = model.embedding
    encoding = embedding.side_positions(side)
    if not encoding.adds:
        return None
    weight = embedding.tgt_token_weight
    zeros = weight.new_zeros(1, embedding.max_seq_len, embedding.d_model)
    with torch.no_grad():
        return encoding.add(zeros, 0)[0]


def cosine_similarity_matrix(table: Tensor) -> Tensor:
    """(P, d) rows -> (P, P) cosine similarity of every pair of rows (ones on the diagonal)."""
    unit = F.normalize(table, dim=1)
    return unit @ unit.T


@torch.no_grad()
def log_positional_views(
    writer: SummaryWriter, model: Transformer, step: int, max_positions: int = 128
) -> None:
    """Images of the positional table (positions x dims) and of its (P, P) cosine similarity.

    Sinusoidal: fixed bands, similarity falling off with distance; learned: what training made
    of it (positions beyond the training lengths stay at their random init). Sides with one
    encoding share one module, drawn under positions/; sides that differ are drawn under
    positions/src/ and positions/tgt/. A side whose module adds no table (`none`, RoPE, ALiBi) is
    not drawn.
    """
    embedding = model.embedding
    shared = embedding.src_positions is embedding.tgt_positions
    sides = {"positions": "src"} if shared else {"positions/src": "src", "positions/tgt": "tgt"}
    for prefix, side in sides.items():
        table = positional_table(model, side)
        if table is None:
            continue
        table = table[:max_positions].float().cpu()  # (P, d_model)
        limit = table.abs().max().item()
        figure = heatmap(table, "positional table", "dimension", "position", -limit, limit)
        writer.add_figure(f"{prefix}/table", figure, step)
        similarity = cosine_similarity_matrix(table)  # (P, P)
        figure = heatmap(similarity, "cosine similarity", "position", "position", -1.0, 1.0)
        writer.add_figure(f"{prefix}/cosine_similarity", figure, step)


@torch.no_grad()
def log_embedding_norms(writer: SummaryWriter, model: Transformer, src: Tensor, step: int) -> None:
    """Mean L2 norm over the real tokens of src (B, S) of the embedding's two parts.

    embedding/token_norm: the lookup times the scale (sqrt(d_model) or 1);
    embedding/position_norm: what the source's positional module adds to it (0 for `none`, RoPE
    and ALiBi);
    embedding/token_to_position: their ratio, when the positional part is not 0. Scaling decides
    which part dominates the sum the first layer sees.
    """
    embedding = model.embedding
    src = src.to(embedding.tgt_token_weight.device)
    tokens = embedding.src_tokens(src) * embedding.scale  # (B, S, d_model)
    positional = embedding.src_positions.add(tokens, 0) - tokens  # (B, S, d_model)
    real = src != model.pad_id  # (B, S)
    token_norm = tokens.norm(dim=-1)[real].mean().item()
    position_norm = positional.norm(dim=-1)[real].mean().item()
    writer.add_scalar("embedding/token_norm", token_norm, step)
    writer.add_scalar("embedding/position_norm", position_norm, step)
    if position_norm > 0:
        writer.add_scalar("embedding/token_to_position", token_norm / position_norm, step)


@torch.no_grad()
def cross_attention(model: Transformer, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
    """Teacher-forced cross-attention weights of every decoder layer, each (B, h, T, S).

    SDPA returns no weights: forward hooks catch each cross_attn's inputs during model.decode
    and MultiHeadAttention.weights recomputes them. Puts the model in eval mode, as validation does.
    """
    model.eval()
    weights = []

    def hook(module: MultiHeadAttention, args: tuple, kwargs: dict, output: Tensor) -> None:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = bound.arguments
        weights.append(module.weights(inputs["x"], inputs["context"], inputs["mask"]))

    handles = [
        layer.cross_attn.register_forward_hook(hook, with_kwargs=True)
        for layer in model.decoder_layers
    ]
    try:
        model.decode(tgt_in, model.encode(src), src)
    finally:
        for handle in handles:
            handle.remove()
    return weights


def log_cross_attention(
    writer: SummaryWriter,
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    step: int,
    tokenizers: TokenizerPair,
    layer: int = -1,
) -> None:
    """A heatmap per sentence of src (B, S), tgt_in (B, T): decoder layer `layer`'s cross-attention,
    mean over heads; rows are the target tokens each query predicts, columns the source tokens."""
    device = model.embedding.tgt_token_weight.device
    probs = cross_attention(model, src.to(device), tgt_in.to(device))[layer]  # (B, h, T, S)
    probs = probs.mean(dim=1).float().cpu()  # (B, T, S)
    for i, (src_ids, tgt_ids) in enumerate(zip(src.tolist(), tgt_in.tolist(), strict=True)):
        s = sum(t != model.pad_id for t in src_ids)
        t = sum(t != model.pad_id for t in tgt_ids)
        predicted = [*tgt_ids[1:t], EOS_ID]  # query t predicts tgt_in[t + 1]
        figure = heatmap(
            probs[i, :t, :s],
            f"cross-attention, decoder layer {layer % len(model.decoder_layers)}",
            "source",
            "target",
            0.0,
            1.0,
            token_labels(tokenizers.src, src_ids[:s]),
            token_labels(tokenizers.tgt, predicted),
        )
        writer.add_figure(f"cross_attention/{i}", figure, step)


def heatmap(
    values: Tensor,
    title: str,
    xlabel: str,
    ylabel: str,
    vmin: float,
    vmax: float,
    xticklabels: list[str] | None = None,
    yticklabels: list[str] | None = None,
) -> Figure:
    """(H, W) values as a colour-mapped figure on [vmin, vmax] (a diverging map when vmin is
    negative); tick labels one per cell when given.

    Drawn for reading at FIGURE_DPI: a few inches wide with 9-10 pt text, so that the text stays
    legible when TensorBoard fits the image into its card; with token labels each cell gets
    0.2 inch, room for an 8 pt label (shown full size with the card's "actual size" button).
    """
    rows, cols = values.shape
    size = (2.2 + 0.2 * cols, 1.4 + 0.2 * rows) if xticklabels else (4.2, 3.2)
    figure = Figure(figsize=size, dpi=FIGURE_DPI, layout="constrained")
    ax = figure.add_subplot()
    image = ax.imshow(
        values.numpy(),
        cmap="RdBu_r" if vmin < 0 else "viridis",
        vmin=vmin,
        vmax=vmax,
        aspect="auto",
        interpolation="nearest",
    )
    colorbar = figure.colorbar(image, ax=ax)
    colorbar.ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=9)
    if xticklabels:
        ax.set_xticks(range(cols), xticklabels, rotation=90, fontsize=8)
    if yticklabels:
        ax.set_yticks(range(rows), yticklabels, fontsize=8)
    return figure
