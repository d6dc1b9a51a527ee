"""The run format: one integer saved at the top of every checkpoint and of metrics.json
("format"), and the one chain of migrations that brings a saved config of any earlier format to
today's, step by step (k -> k+1), each step named after what changed and saying it once
(`Migration.changed`, from which docs/run-directory.md's table is written).

A run saved before the format was recorded is dated by its keys (`format_of`). Every step fills a
key that did not exist yet with what the code of that time did (not with today's default), and
leaves a key already in today's spelling alone, so that a run dated a little too early comes out
the same. Readers migrate what they load; nothing rewrites the user's files.

A change to a saved key (its name, meaning or default) lands with its step here, RUN_FORMAT one
higher, a frozen run of the new format (tests/frozen_runs.py) and the committed schema
(tests/data/run_format.json): docs/run-directory.md "Versions".
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from minimt.errors import MinimtError

FORMAT_KEY = "format"  # top-level in checkpoints and metrics.json: never a config key


def _section(config: dict, name: str) -> dict:
    return config.setdefault(name, {})


def _sections(config: dict, *names: str) -> list[dict]:
    """The named sections of `config`, {} for one that is missing or no mapping."""
    return [section if isinstance(section := config.get(name), dict) else {} for name in names]


def attention_dropout_split_from_dropout(config: dict) -> None:
    """Attention weights got their own dropout; before, `model.dropout` applied there."""
    model = _section(config, "model")
    model.setdefault("attention_dropout", model.get("dropout", 0.1))


def beam_search_at_test_and_step_checkpoints(config: dict) -> None:
    """Test sets decoded by beam search (before: greedily) and step checkpoints kept."""
    _section(config, "decoding").setdefault("test_beam", 1)
    _section(config, "decoding").setdefault("length_penalty", 1.0)
    _section(config, "trainer").setdefault("save_every", 100)
    _section(config, "trainer").setdefault("keep_checkpoints", 5)


def resumable_runs(config: dict) -> None:
    """3 -> 4: `resume`, gradient accumulation and the non-finite step budget."""
    config.setdefault("resume", None)
    _section(config, "trainer").setdefault("accumulate", 1)
    _section(config, "trainer").setdefault("max_nonfinite_steps", 10)


def long_input_scores(config: dict) -> None:
    """4 -> 5: `decoding.long_inputs`, joined test sentences scored (none before)."""
    _section(config, "decoding").setdefault("long_inputs", [])


def optimizer_and_loader_choices(config: dict) -> None:
    """Adam's implementation (torch's default then: for_loop on a CPU, foreach on CUDA),
    torch.compile, batches prepared ahead (none then) and memory trimming (off)."""
    trainer = _section(config, "trainer")
    trainer.setdefault("adam_impl", "foreach" if trainer.get("device") == "cuda" else "for_loop")
    trainer.setdefault("compile", False)
    trainer.setdefault("prefetch", 0)
    trainer.setdefault("trim_memory_every", 0)


def no_memory_trimming(config: dict) -> None:
    """6 -> 7: `trainer.trim_memory_every` gone (a better allocator instead)."""
    _section(config, "trainer").pop("trim_memory_every", None)


def study_views_switch(config: dict) -> None:
    """7 -> 8: `views` (the study's TensorBoard views, always drawn then); a parallel_text corpus
    names its languages."""
    config.setdefault("views", True)
    data = _section(config, "data")
    if data.get("name") == "parallel_text":
        data.setdefault("src_lang", "src")
        data.setdefault("tgt_lang", "tgt")


def per_side_encodings_and_tying_levels(config: dict) -> None:
    """8 -> 9: `pe.encoder` / `pe.decoder` beside `pe.name`; `embedding.share` true / false becomes
    all / decoder (the output matrix was always the target table); the token tables' init std;
    the length split's keys; early stopping and checkpoint averaging (all off then)."""
    pe = _section(config, "pe")
    pe.setdefault("encoder", pe.get("name"))
    pe.setdefault("decoder", pe.get("name"))
    embedding = _section(config, "embedding")
    share = embedding.get("share", True)
    embedding["share"] = {True: "all", False: "decoder"}.get(share, share)
    embedding.setdefault("init_std", None)
    data = _section(config, "data")
    for key in ("train_max_words", "long_tests_over", "train_subsample"):
        data.setdefault(key, None)
    edges = [21, 26] if data.get("name") == "parallel_text" else [19, 23]
    data.setdefault("long_bucket_edges", edges)
    trainer = _section(config, "trainer")
    trainer.setdefault("patience", None)
    trainer.setdefault("min_delta", 0.0)
    trainer.setdefault("average_last", None)


def chunked_loss(config: dict) -> None:
    """9 -> 10: `trainer.loss_chunk_rows` (null: the loss in one piece, as before)."""
    _section(config, "trainer").setdefault("loss_chunk_rows", None)


def shape_buckets(config: dict) -> None:
    """10 -> 11: `trainer.shape_buckets` (null: batches as before)."""
    _section(config, "trainer").setdefault("shape_buckets", None)


def encoding_options(config: dict) -> None:
    """The encodings' options in `pe`: the sinusoid's `scale` (1.0 then) and the learned
    table's `init_std` (0.02, fixed in the code then)."""
    pe = _section(config, "pe")
    sides = {pe.get("name"), pe.get("encoder"), pe.get("decoder")}
    if pe.get("name") == "sinusoidal":
        pe.setdefault("scale", 1.0)
    if "learned" in sides:
        pe.setdefault("init_std", 0.02)


def no_loss_chunks_or_shape_buckets(config: dict) -> None:
    """12 -> 13: `trainer.loss_chunk_rows` and `trainer.shape_buckets` gone (same loss, same
    batches)."""
    _section(config, "trainer").pop("loss_chunk_rows", None)
    _section(config, "trainer").pop("shape_buckets", None)


def no_long_input_scores(config: dict) -> None:
    """13 -> 14: `decoding.long_inputs` gone (the length split's long test sets instead)."""
    _section(config, "decoding").pop("long_inputs", None)


def encoder_and_decoder_only(config: dict) -> None:
    """14 -> 15: `pe.name` gone: `pe.encoder` and `pe.decoder` choose, and each option reaches
    the sides whose class takes it (before: the sides that ran `pe.name`'s encoding, which for
    the built-in encodings comes to the same)."""
    _section(config, "pe").pop("name", None)


def encodings_by_import_path(config: dict) -> None:
    """15 -> 16: `pe.encoder` / `pe.decoder` also take `module.Class` import paths; every saved
    spelling means what it meant."""


def runs_tied_to_their_data(config: dict) -> None:
    """16 -> 17: `resume_new_data` (false: a resume on changed training files is refused; before,
    one trained on a tokenizer made again from them); step checkpoints record the training
    files' digests, metrics.json whether training finished; `embedding.share` true / false,
    accepted on the command line until then, saved as its level all / decoder."""
    config.setdefault("resume_new_data", False)
    (embedding,) = _sections(config, "embedding")
    if isinstance(embedding.get("share"), bool):
        embedding["share"] = "all" if embedding["share"] else "decoder"


def recipe_following_the_budget(config: dict) -> None:
    """17 -> 18: `trainer.adapt` and its settings (the recipe was static: adapt off)."""
    trainer = _section(config, "trainer")
    trainer.setdefault("adapt", False)
    trainer.setdefault("adapt_min_updates", 1400)
    trainer.setdefault("adapt_dropout", 0.2)
    trainer.setdefault("adapt_average", 0.2)


@dataclass(frozen=True)
class Migration:
    """One step of the chain: a config of format `source` becomes one of format `source + 1`."""

    source: int
    upgrade: Callable[[dict], None]
    first_commit: str  # the first commit that saved format source + 1
    changed: str  # what changed in a saved run, in words: docs/run-directory.md's table


# format 1: its first commit, what it saved
FIRST_FORMAT = (
    "d67395c",
    "the first that trained: `pe.name`, `embedding.share: true`, greedy test scores, `last.pt`",
)
STEPS = (  # each step, the first commit of the format it makes, what that format changed
    (
        attention_dropout_split_from_dropout,
        "a7d25cc",
        "`model.attention_dropout` (before: `model.dropout` there too)",
    ),
    (
        beam_search_at_test_and_step_checkpoints,
        "0a7c28f",
        "`decoding.test_beam`, `length_penalty`; `trainer.save_every`, `keep_checkpoints` "
        "(weights-only step files)",
    ),
    (
        resumable_runs,
        "55be712",
        "`resume`, `trainer.accumulate`, `max_nonfinite_steps`; step files resume, no `last.pt`",
    ),
    (
        long_input_scores,
        "4cbb6bc",
        "`decoding.long_inputs`; metrics.json holds the config",
    ),
    (
        optimizer_and_loader_choices,
        "99373c9",
        "`trainer.adam_impl`, `compile`, `prefetch`, `trim_memory_every`",
    ),
    (
        no_memory_trimming,
        "ed0d1ef",
        "`trainer.trim_memory_every` gone",
    ),
    (
        study_views_switch,
        "ccbdcdb",
        "`views`",
    ),
    (
        per_side_encodings_and_tying_levels,
        "ab132a3",
        "`pe.encoder` / `pe.decoder`; `embedding.share` none / decoder / all; "
        "`embedding.init_std`; the length split's keys; `trainer.patience`, `min_delta`, "
        "`average_last`",
    ),
    (
        chunked_loss,
        "5f8b04c",
        "`trainer.loss_chunk_rows`",
    ),
    (
        shape_buckets,
        "181c5e3",
        "`trainer.shape_buckets`",
    ),
    (
        encoding_options,
        "14a93b5",
        "`pe.scale`, `pe.init_std` (0.02)",
    ),
    (
        no_loss_chunks_or_shape_buckets,
        "7d0c442",
        "`trainer.loss_chunk_rows`, `shape_buckets` gone",
    ),
    (
        no_long_input_scores,
        "5d41845",
        "`decoding.long_inputs` gone",
    ),
    (
        encoder_and_decoder_only,
        "76ff0d1",
        "`pe.name` gone",
    ),
    (
        encodings_by_import_path,
        "1f4a1af",
        "`pe.encoder` / `pe.decoder` take import paths; checkpoints and metrics.json record "
        '`"format"`',
    ),
    (
        runs_tied_to_their_data,
        "af4fb28",
        "`resume_new_data`; step checkpoints record the training files' digests (`corpus`); "
        'metrics.json says `"finished"` (before: a record with training\'s keys was a finished '
        "run's); `embedding.share` true / false saved as all / decoder",
    ),
    (
        recipe_following_the_budget,
        "b93150b",
        "`trainer.adapt`, `adapt_min_updates`, `adapt_dropout`, `adapt_average`; step "
        'checkpoints record the recipe\'s decision (`recipe`), metrics.json `"recipe"` where '
        "`trainer.adapt` is on",
    ),
)
MIGRATIONS = tuple(Migration(source, *step) for source, step in enumerate(STEPS, start=1))
RUN_FORMAT = len(MIGRATIONS) + 1  # today's
LAST_UNRECORDED = 15  # the newest format whose runs did not record it
FINISHED_KEY = "finished"  # metrics.json: true once training's end wrote its record
TRAINING_KEYS = ("steps", "best_val_bleu")  # what only training's end wrote, before format 17


class UnknownFormat(MinimtError, ValueError):
    """A run saved by a newer minimt than this one."""


def format_of(config: dict, recorded: object = None) -> int:
    """The run format of a saved config: `recorded` (the saved "format") where there is one, else
    the earliest format whose keys it has (runs saved before the format was recorded)."""
    if recorded is not None:
        if not isinstance(recorded, int) or not 1 <= recorded:
            raise UnknownFormat(f"run format {recorded!r} is not a format number")
        if recorded > RUN_FORMAT:
            raise UnknownFormat(
                f"run format {recorded} is newer than this minimt's ({RUN_FORMAT}): update minimt"
            )
        return recorded
    model, pe, trainer, decoding = _sections(config, "model", "pe", "trainer", "decoding")
    dated_by = (  # (format, what only runs of that format or earlier lack or have)
        (1, "attention_dropout" not in model),
        (2, "test_beam" not in decoding),
        (3, "accumulate" not in trainer),
        (4, "adam_impl" not in trainer and "long_inputs" not in decoding),
        (5, "adam_impl" not in trainer),
        (6, "trim_memory_every" in trainer),
        (7, "views" not in config),
        (8, "encoder" not in pe),
        (9, "name" in pe and "loss_chunk_rows" not in trainer and "long_inputs" in decoding),
        (10, "loss_chunk_rows" in trainer and "shape_buckets" not in trainer),
        (11, "shape_buckets" in trainer),
        (14, "name" in pe),
    )
    return next((version for version, dated in dated_by if dated), LAST_UNRECORDED)


def migrate_config(config: dict, source: int) -> dict:
    """A copy of a config saved in format `source`, in today's format."""
    migrated = copy.deepcopy(config)
    for step in MIGRATIONS[source - 1 :]:
        step.upgrade(migrated)
    return migrated


def format_table() -> str:
    """docs/run-directory.md's table of the run formats, from FIRST_FORMAT and the steps."""
    rows = [f"| 1 | {FIRST_FORMAT[0]} | {FIRST_FORMAT[1]} |"]
    rows += [f"| {m.source + 1} | {m.first_commit} | {m.changed} |" for m in MIGRATIONS]
    header = ["| format | first commit | what changed in a saved run |", "|---|---|---|"]
    return "\n".join([*header, *rows])


def changes_since(source: int) -> list[str]:
    """What changed in the saved config since format `source`, one entry per step."""
    return [
        f"{step.source} -> {step.source + 1}: {step.changed}" for step in MIGRATIONS[source - 1 :]
    ]


def upgraded(saved: dict) -> dict:
    """A checkpoint or metrics.json record (a dict holding "config") in today's format: its
    config migrated, its "format" set and "saved_format" naming the one it was saved in."""
    if not isinstance(saved.get("config"), dict):  # metrics.json before it held the config
        return saved
    source = format_of(saved["config"], saved.get(FORMAT_KEY))
    if source == RUN_FORMAT:
        return saved
    try:
        config = migrate_config(saved["config"], source)
    except (AttributeError, TypeError):  # a section that is no mapping: validation names it
        return saved
    return saved | {"config": config, FORMAT_KEY: RUN_FORMAT, "saved_format": source}


def upgraded_metrics(record: dict) -> dict:
    """A metrics.json record in today's format (`upgraded`), saying whether training finished:
    before format 17 recorded it, a record that holds training's keys was training's, and one
    without them only evaluate.py's entries (an interrupted run evaluated)."""
    upgraded_record = upgraded(record)
    if FINISHED_KEY in upgraded_record:
        return upgraded_record
    return upgraded_record | {FINISHED_KEY: any(key in record for key in TRAINING_KEYS)}
