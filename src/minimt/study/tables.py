"""The report's tables of what ran: the setup, the data regimes, one row per configuration, one
per run, parameters per tying level, training lengths; and the number formats every table uses."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from omegaconf import DictConfig

from minimt.study.results import ConfigResult, Report
from minimt.study.runs import SHARE_LEVELS, TIED, Run, setting


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- " * len(header) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(cells) + " |" for cells in rows)])


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mean_std_cell(row: dict, name: str, digits: int) -> str:
    mean, std = row[f"{name}_mean"], row[f"{name}_std"]
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def p_cell(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def interval_cell(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"


def configuration_table(rows: Sequence[dict]) -> str:
    """The markdown table of the configurations (also what the script prints)."""
    header = [
        "configuration",
        "seeds",
        "test BLEU",
        "test chrF",
        "best val BLEU",
        "final val loss",
        "steps",
        "best step",
        "minutes",
        "parameters",
        "verdict",
    ]
    cells = [
        [
            row["slug"],
            row["seeds"],
            mean_std_cell(row, "test_bleu", 2),
            mean_std_cell(row, "test_chrf", 2),
            mean_std_cell(row, "best_val_bleu", 2),
            mean_std_cell(row, "final_val_loss", 3),
            f"{row['steps_mean']:,.0f}",
            f"{row['best_step_mean']:,.0f}",
            f"{row['minutes_mean']:.1f}",
            f"{row['num_parameters']:,}",
            _verdict_cell(row),
        ]
        for row in rows
    ]
    return markdown_table(header, cells)


def _verdict_cell(row: dict) -> str:
    """Every verdict of the configuration on the headline test set; "baseline" or "-" without."""
    if not row["verdicts"]:
        return "baseline" if row["is_baseline"] else "-"
    cells = [f"{c.verdict.verdict} ({key}, vs {c.reference.slug})" for key, c in row["verdicts"]]
    return "; ".join(cells)


def setup_text(report: Report) -> str:
    """Model size and budget from the saved configs, one line per distinct setting."""
    setups: dict[str, list[str]] = defaultdict(list)
    for result in report.results:
        for run in result.runs:
            description = setup_description(run)
            if result.configuration.slug not in setups[description]:
                setups[description].append(result.configuration.slug)
    if len(setups) == 1:
        return f"Every run: {next(iter(setups))}."
    return "\n".join(f"- {text}: {', '.join(slugs)}" for text, slugs in setups.items())


def setup_description(run: Run) -> str:
    """A run's protocol, model size and training budget in one line."""
    cfg: DictConfig = run.config
    m, t, d = cfg.model, cfg.trainer, cfg.data
    stops = [f"{t.max_steps:,} steps", f"{t.max_minutes:g} minutes"]
    if setting(cfg, "trainer.patience") is not None:
        stops.insert(0, f"patience {t.patience} (min_delta {t.min_delta:g})")
    subset = (
        "" if d.max_train_pairs is None else f"the first {d.max_train_pairs:,} training pairs; "
    )
    protocol = run.configuration.protocol
    named = f"{protocol.title}: " if protocol.name else ""
    return (
        f"{named}model d_model {m.d_model}, {m.n_heads} heads, {m.n_encoder_layers}+"
        f"{m.n_decoder_layers} layers, d_ff {m.d_ff}, dropout {m.dropout:g}, "
        f"{cfg.tokenizer.vocab_size:,} BPE ({'joint' if cfg.tokenizer.joint else 'separate'}); "
        f"{subset}{t.batch_tokens:,} tokens x {t.accumulate} per update, lr {t.lr:g}, warmup "
        f"{t.warmup_steps:,}, validation every {t.val_every:,} steps, stop at " + " / ".join(stops)
    )


def regime_table(report: Report) -> str:
    cells = []
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        runs = [run for result in results for run in result.runs]
        pairs = sorted(
            {run.metrics["data"]["train_pairs"] for run in runs if "data" in run.metrics}
        )
        trained = ", ".join(f"{p:,}" for p in pairs) + " pairs" if pairs else "-"
        cells.append(
            [
                protocol.slug(regime.slug),
                f"{regime.label}; {trained}",
                str(len(results)),
                str(len(runs)),
            ]
        )
    return markdown_table(["data regime", "training", "configurations", "runs"], cells)


def run_table(report: Report) -> str:
    """Each run: why it stopped, its last and best step, its minutes, its test BLEU."""
    cells = [
        [
            result.configuration.slug,
            str(run.seed),
            stopped_by(run.metrics),
            f"{run.metrics['steps']:,}",
            f"{run.metrics['best_step']:,}",
            f"{run.metrics['train_seconds'] / 60:.1f}",
            f"{run.metrics['test'][report.test_set]['bleu']:.2f}",
        ]
        for result in report.results
        for run in result.runs
    ]
    header = ["configuration", "seed", "stopped by", "steps", "best step", "minutes", "test BLEU"]
    return markdown_table(header, cells)


def stopped_by(metrics: dict) -> str:
    """The config key of metrics.json "stop_reason" ('trainer.patience reached ...' -> patience)."""
    reason = metrics.get("stop_reason")
    if reason is None:
        return "-"
    return reason.split(" reached")[0].removeprefix("trainer.")


def parameter_table(report: Report) -> str:
    rows: dict[tuple[str, int], list[str]] = defaultdict(list)
    for result in report.results:
        share = result.configuration.embedding.share
        rows[(share, result.runs[0].metrics["num_parameters"])].append(result.configuration.slug)
    cells = [
        [share, TIED[share], f"{count:,}", ", ".join(slugs)]
        for (share, count), slugs in sorted(
            rows.items(), key=lambda i: (SHARE_LEVELS.index(i[0][0]), i[0][1])
        )
    ]
    table = markdown_table(["tying", "tied", "parameters", "configurations"], cells)
    return "metrics.json num_parameters (a shared matrix counted once).\n\n" + table


def training_lengths(report: Report) -> str:
    """The longest training sequence per data regime, and the learned position rows it leaves
    untrained."""
    cells = []
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        runs = [run for r in results for run in r.runs]
        src = _largest(runs, "train_max_src_tokens")
        tgt = _largest(runs, "train_max_tgt_tokens")
        untrained = [
            f"{r.configuration.slug}: {rows}"
            for r in results
            if (rows := untrained_rows(r, src, tgt)) is not None
        ]
        cells.append(
            [protocol.slug(regime.slug), _count(src), _count(tgt), "; ".join(untrained) or "-"]
        )
    header = ["data regime", "longest source", "longest target", "learned positions never trained"]
    return (
        'The longest kept training sequence in BPE tokens (metrics.json "data", without '
        "<bos>/<eos>; the longest of any run of the regime). A source of n tokens takes the "
        "positions 0 to n (with its <eos>), a target of n tokens 0 to n (after <bos>); one "
        "learned table serves both sides when both learn positions. Rows past those were never "
        "trained: every test sentence that reaches them is read with rows still at their "
        "initial values.\n\n" + markdown_table(header, cells)
    )


def untrained_rows(result: ConfigResult, src: int | None, tgt: int | None) -> str | None:
    """'rows a-b' of the learned position table that no training sequence reached (None for a
    configuration without learned positions or runs without the training lengths)."""
    e = result.configuration.embedding
    reached = [
        longest for side, longest in ((e.pe_encoder, src), (e.pe_decoder, tgt)) if side == "learned"
    ]
    if not reached or None in reached:
        return None
    first, last = max(reached) + 1, result.runs[0].config.model.max_seq_len - 1
    return f"rows {first}-{last}" if first <= last else "none"


def _largest(runs: Sequence[Run], key: str) -> int | None:
    values = [run.metrics["data"][key] for run in runs if key in run.metrics.get("data", {})]
    return max(values) if values else None


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
