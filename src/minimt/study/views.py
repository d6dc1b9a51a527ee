"""The study's TensorBoard views: what each embedding choice does to the model (none changes the
weights), drawn by the training hook that scripts/train.py installs unless `views: false`.

Every view's tag starts with views/: TensorBoard opens only the first two tag groups (the text
before a tag's first "/") in character-code order, and views/ sorts after a run's own test/,
train/ and val/, so a run opens on its loss and BLEU."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from minimt.config import SHARE_LEVELS
from minimt.data.tokenizer import EOS_ID, TokenizerPair
from minimt.encoding_choice import EncodingChoice
from minimt.model.positions import BUILT_IN_ENCODINGS
from minimt.model.transformer import MultiHeadAttention, Transformer
from minimt.pe_section import encoding_choices
from minimt.train.evaluation import Hook, RunContext

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ATTENTION_SENTENCES = 4  # fixed validation sentences whose cross-attention each validation draws


class StudyViews:
    """At each validation: the positional views, the embedding norms and the cross-attention of
    the first validation sentences. At the end: the Projector table."""

    def on_validation(self, run: RunContext, step: int) -> None:
        val, writer, model = run.data.val_batches, run.writer, run.model
        batch = val.collate(range(min(ATTENTION_SENTENCES, len(val.pairs))))
        log_positional_views(writer, model, step)
        log_embedding_norms(writer, model, batch.src.to(run.device), step)
        log_cross_attention(writer, model, batch.src, batch.tgt_in, step, run.data.tokenizers)

    def on_finish(self, run: RunContext, metrics: dict) -> None:
        log_embedding_projector(run.writer, run.model, run.data.tokenizers, metrics["steps"])


class HParams:
    """At the end: the run's HPARAMS entry, one event, so that every run of a sweep, `views:
    false` included, is a row of TensorBoard's HPARAMS tab."""

    def on_validation(self, run: RunContext, step: int) -> None:
        pass

    def on_finish(self, run: RunContext, metrics: dict) -> None:
        log_hparams(run.writer, run.cfg, metrics)


def study_hooks(cfg: DictConfig) -> list[Hook]:
    """The hooks scripts/train.py installs: the HPARAMS entry, and the study's views unless
    `views: false`."""
    return [StudyViews(), HParams()] if cfg.views else [HParams()]


# The study's variables: marked `differs` in the HPARAMS entry, so that TensorBoard (2.21) lists
# them first (its backend sorts by differs, then name) and the front end ticks the first five:
# embedding.scale, embedding.share, pe.decoder, pe.encoder, pe.init_std. trainer.seed sorts sixth,
# unticked: it tells replicates of one configuration apart, not configurations.
STUDY_VARIABLES = (
    "pe.encoder",
    "pe.decoder",
    "pe.init_std",
    "embedding.scale",
    "embedding.share",
    "trainer.seed",
)
NOT_APPLICABLE = "n/a"  # an encoding option where neither side's encoding takes it


def log_hparams(writer: SummaryWriter, cfg: DictConfig, metrics: dict) -> None:
    """The run's HPARAMS entry, in the writer's own event file (its folder is the session):
    hparams_row's settings, STUDY_VARIABLES marked `differs`, and as metrics the last value of
    scalar tags in the run: val/best_bleu and val/loss_at_best (the val loss at that step),
    written here at the final step, then test/bleu and test_average/bleu where the run has them."""
    step = metrics["steps"]
    scores = {"val/best_bleu": metrics["best_val_bleu"]}
    best = [v for v in metrics["val_history"] if v["step"] == metrics["best_step"]]
    if best:
        scores["val/loss_at_best"] = best[0]["loss"]
    for tag, value in scores.items():
        writer.add_scalar(tag, value, step)
    for key in ("test", "test_average"):  # scored and logged by train.evaluation.finish
        if metrics.get(key):
            scores[f"{key}/bleu"] = next(iter(metrics[key].values()))["bleu"]
    row = hparams_row(cfg)
    # the built-in names, and a class's import path where a side names one
    encodings = list(dict.fromkeys([*BUILT_IN_ENCODINGS, row["pe.encoder"], row["pe.decoder"]]))
    domains = {"pe.encoder": encodings, "pe.decoder": encodings}
    domains |= {"embedding.scale": ["false", "true"], "embedding.share": list(SHARE_LEVELS)}
    experiment, start, end = hparams(row, scores, domains)
    content = experiment.value[0].metadata.plugin_data
    data = HParamsPluginData.FromString(content.content)
    for info in data.experiment.hparam_infos:
        info.differs = info.name in STUDY_VARIABLES
    content.content = data.SerializeToString()
    for summary in (experiment, start, end):
        writer.file_writer.add_summary(summary, step)


def hparams_row(cfg: DictConfig) -> dict[str, str | float]:
    """The settings an HPARAMS row shows, each named by its config key. Names and booleans are
    strings with every value declared, as TensorBoard reads a column's filter from one run;
    optional numbers too ("d_model^-0.5" or "all" for null: a missing value drops the column),
    and the encodings' options (NOT_APPLICABLE where neither side takes one)."""
    positions = encoding_choices(cfg.pe)
    init_std = cfg.embedding.init_std
    return {
        "pe.encoder": cfg.pe.encoder,
        "pe.decoder": cfg.pe.decoder,
        "pe.init_std": encoding_option(positions, "init_std"),
        "pe.scale": encoding_option(positions, "scale"),
        "embedding.scale": str(cfg.embedding.scale).lower(),
        "embedding.share": cfg.embedding.share,
        "embedding.init_std": "d_model^-0.5" if init_std is None else str(float(init_std)),
        "trainer.seed": cfg.trainer.seed,
        "trainer.lr": cfg.trainer.lr,
        "trainer.warmup_steps": cfg.trainer.warmup_steps,
        "model.d_model": cfg.model.d_model,
        "tokenizer.vocab_size": cfg.tokenizer.vocab_size,
        "data.src_lang": cfg.data.src_lang,
        "data.tgt_lang": cfg.data.tgt_lang,
        **{
            f"data.{key}": str(cfg.data[key] or "all")
            for key in ("train_max_words", "train_subsample")
        },
    }


def encoding_option(choices: Sequence[EncodingChoice], option: str) -> str:
    """The value of an encoding's option as the model used it (the config's, else the class's
    default), for the sides whose class takes it: one value, or "encoder X, decoder Y" where the
    sides differ; NOT_APPLICABLE where neither does."""
    values = {}
    for side, choice in zip(("encoder", "decoder"), choices, strict=True):
        parameter = inspect.signature(choice.cls.__init__).parameters.get(option)
        if parameter is not None:
            value = dict(choice.options).get(option, parameter.default)
            values[side] = str(float(value)) if isinstance(value, int | float) else str(value)
    if not values:
        return NOT_APPLICABLE
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return ", ".join(f"{side} {value}" for side, value in values.items())


def token_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """A readable one-line label per id: its text, spaces as '▁', control characters escaped
    ('\\t'), or its BPE symbol where it is part of a multi-byte character (U+FFFD)."""
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
    """The target table's first max_tokens rows in the Projector, BPE tokens as labels; rounded
    (in float64, to print short) as the Projector reads a text table."""
    table = model.embedding.tgt_token_weight[:max_tokens].detach().cpu().double()  # (N, d_model)
    labels = token_labels(tokenizers.tgt, range(table.size(0)))
    writer.add_embedding(table.round(decimals=4), labels, global_step=step, tag="tgt_tokens")


def positional_table(model: Transformer, side: str = "src") -> Tensor | None:
    """(max_seq_len, d_model): what side "src" or "tgt"'s positional encoding adds at each
    position; None when it adds nothing (it acts on attention, or there is none)."""
    embedding = model.embedding
    encoding = embedding.side_positions(side)
    if not encoding.adds:
        return None
    zeros = embedding.tgt_token_weight.new_zeros(1, embedding.max_seq_len, embedding.d_model)
    with torch.no_grad():
        return encoding.add(zeros, 0)[0]


def cosine_similarity_matrix(table: Tensor) -> Tensor:
    """(P, d) rows -> (P, P) cosine similarity of every pair of rows."""
    unit = F.normalize(table, dim=1)
    return unit @ unit.T


@torch.no_grad()
def log_positional_views(
    writer: SummaryWriter, model: Transformer, step: int, max_positions: int = 128
) -> None:
    """The positional table (positions x dims) and its cosine similarity, as images: under
    views/positions/, or views/positions/src/ and views/positions/tgt/ when the sides differ;
    none for a side whose encoding adds no table."""
    embedding = model.embedding
    shared = embedding.src_positions is embedding.tgt_positions
    separate = {"views/positions/src": "src", "views/positions/tgt": "tgt"}
    sides = {"views/positions": "src"} if shared else separate
    for prefix, side in sides.items():
        table = positional_table(model, side)
        if table is None:
            continue
        table = table[:max_positions].float().cpu()  # (P, d_model)
        limit = table.abs().max().item()
        figure = heatmap(table, "positional table", ("dimension", "position"), (-limit, limit))
        writer.add_figure(f"{prefix}/table", figure, step)
        similarity = cosine_similarity_matrix(table)  # (P, P)
        figure = heatmap(similarity, "cosine similarity", ("position", "position"), (-1.0, 1.0))
        writer.add_figure(f"{prefix}/cosine_similarity", figure, step)


@torch.no_grad()
def log_embedding_norms(writer: SummaryWriter, model: Transformer, src: Tensor, step: int) -> None:
    """Mean L2 norm over the real tokens of src (B, S) of the token part (lookup x scale) and the
    positional part of the embedding, and their ratio when the positional part is not 0."""
    embedding = model.embedding
    src = src.to(embedding.tgt_token_weight.device)
    tokens = embedding.src_tokens(src) * embedding.scale  # (B, S, d_model)
    positional = embedding.src_positions.add(tokens, 0) - tokens  # (B, S, d_model)
    real = src != model.pad_id  # (B, S)
    token_norm = tokens.norm(dim=-1)[real].mean().item()
    position_norm = positional.norm(dim=-1)[real].mean().item()
    writer.add_scalar("views/embedding/token_norm", token_norm, step)
    writer.add_scalar("views/embedding/position_norm", position_norm, step)
    if position_norm > 0:
        writer.add_scalar("views/embedding/token_to_position", token_norm / position_norm, step)


@torch.no_grad()
def cross_attention(model: Transformer, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
    """Teacher-forced cross-attention weights of every decoder layer, each (B, h, T, S), in eval
    mode. SDPA returns no weights: forward hooks catch each cross_attn's inputs and
    MultiHeadAttention.weights recomputes them."""
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
    """A heatmap per sentence i of src (B, S), tgt_in (B, T), as views/cross_attention/<i>: decoder
    layer `layer`'s cross-attention (by default the last) with the reference fed in, mean over
    heads; rows are the target tokens each query predicts, columns the source tokens. The title
    counts layers from 1, as "layer L of N" reads."""
    device = model.embedding.tgt_token_weight.device
    probs = cross_attention(model, src.to(device), tgt_in.to(device))[layer]  # (B, h, T, S)
    n_heads, n_layers = probs.size(1), len(model.decoder_layers)
    probs = probs.mean(dim=1).float().cpu()  # (B, T, S)
    for i, (src_ids, tgt_ids) in enumerate(zip(src.tolist(), tgt_in.tolist(), strict=True)):
        title = (
            f"sentence {i}: cross-attention of decoder layer {layer % n_layers + 1} of {n_layers}"
            f"\nmean over {n_heads} heads, reference fed in (teacher forcing)"
        )
        s = sum(t != model.pad_id for t in src_ids)
        t = sum(t != model.pad_id for t in tgt_ids)
        predicted = [*tgt_ids[1:t], EOS_ID]  # query t predicts tgt_in[t + 1]
        labels = token_labels(tokenizers.src, src_ids[:s]), token_labels(tokenizers.tgt, predicted)
        figure = heatmap(probs[i, :t, :s], title, ("source", "target"), (0.0, 1.0), labels)
        writer.add_figure(f"views/cross_attention/{i}", figure, step)


def heatmap(
    values: Tensor,
    title: str,
    labels: tuple[str, str],
    limits: tuple[float, float],
    ticks: tuple[list[str], list[str]] | None = None,
) -> Figure:
    """(H, W) values as a colour-mapped figure on `limits` (diverging below 0), x and y `labels`,
    a tick label per cell with `ticks`: a few inches wide with 9-10 pt text, legible when
    TensorBoard fits it into its card; with ticks 0.2 inch per cell, room for an 8 pt label, and
    at least 4.6 inches: room for a title line of about 60 characters."""
    # matplotlib loads here, when a view is first drawn: a run without views never waits for it
    from matplotlib.figure import Figure

    from minimt.study.plots import FIGURE_DPI

    rows, cols = values.shape
    size = (max(4.6, 2.2 + 0.2 * cols), 1.4 + 0.2 * rows) if ticks else (4.2, 3.2)
    figure = Figure(figsize=size, dpi=FIGURE_DPI, layout="constrained")
    ax = figure.add_subplot()
    cmap = "RdBu_r" if limits[0] < 0 else "viridis"
    image = ax.imshow(values.numpy(), cmap, vmin=limits[0], vmax=limits[1], interpolation="nearest")
    ax.set_aspect("auto")
    figure.colorbar(image, ax=ax).ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(labels[0], fontsize=9)
    ax.set_ylabel(labels[1], fontsize=9)
    ax.tick_params(labelsize=9)
    if ticks:
        ax.set_xticks(range(cols), ticks[0], rotation=90, fontsize=8)
        ax.set_yticks(range(rows), ticks[1], fontsize=8)
    return figure
