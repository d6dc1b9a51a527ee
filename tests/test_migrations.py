"""minimt.migrations: each step of the run-format chain on its own, dating a run by its keys, and
the committed schema of today's format (tests/data/run_format.json) against a fresh composition.

After an intended change to a saved key: add its step to minimt/migrations.py (RUN_FORMAT goes up
by one), build a frozen run of the new format (tests/frozen_runs.py), then write the schema
again: `python -m tests.test_migrations`."""

import json
import re
import sys
from dataclasses import fields

import pytest
from omegaconf import OmegaConf

import minimt.migrations as m
from minimt.train.state import TrainState
from tests.helpers import REPO, compose_config

SCHEMA = REPO / "tests" / "data" / "run_format.json"
RUN_DIRECTORY = REPO / "docs" / "run-directory.md"
# The compositions whose saved keys the schema pins: the default, and each group that brings
# keys of its own.
COMPOSITIONS = ("", "pe=learned", "data=parallel_text")


def test_each_step_migrates_one_format_to_the_next():
    assert [step.source for step in m.MIGRATIONS] == list(range(1, m.RUN_FORMAT))
    for step in m.MIGRATIONS:
        assert step.changed and not step.changed.startswith(f"{step.source} ->"), step


# (step, a config of its source format, what it becomes)
STEPS = [
    (
        m.attention_dropout_split_from_dropout,
        {"model": {"dropout": 0.3}},
        {"model": {"dropout": 0.3, "attention_dropout": 0.3}},
    ),
    (
        m.beam_search_at_test_and_step_checkpoints,
        {"decoding": {}, "trainer": {}},
        {
            "decoding": {"test_beam": 1, "length_penalty": 1.0},
            "trainer": {"save_every": 100, "keep_checkpoints": 5},
        },
    ),
    (
        m.resumable_runs,
        {"trainer": {}},
        {"trainer": {"accumulate": 1, "max_nonfinite_steps": 10}, "resume": None},
    ),
    (m.long_input_scores, {"decoding": {}}, {"decoding": {"long_inputs": []}}),
    (
        m.optimizer_and_loader_choices,
        {"trainer": {"device": "cuda"}},
        {
            "trainer": {
                "device": "cuda",
                "adam_impl": "foreach",
                "compile": False,
                "prefetch": 0,
                "trim_memory_every": 0,
            }
        },
    ),
    (
        m.no_memory_trimming,
        {"trainer": {"trim_memory_every": 0, "lr": 1e-3}},
        {"trainer": {"lr": 1e-3}},
    ),
    (
        m.study_views_switch,
        {"data": {"name": "parallel_text"}},
        {"data": {"name": "parallel_text", "src_lang": "src", "tgt_lang": "tgt"}, "views": True},
    ),
    (
        m.per_side_encodings_and_tying_levels,
        {"pe": {"name": "rope"}, "embedding": {"share": False}, "data": {}, "trainer": {}},
        {
            "pe": {"name": "rope", "encoder": "rope", "decoder": "rope"},
            "embedding": {"share": "decoder", "init_std": None},
            "data": {
                "train_max_words": None,
                "long_tests_over": None,
                "train_subsample": None,
                "long_bucket_edges": [19, 23],
            },
            "trainer": {"patience": None, "min_delta": 0.0, "average_last": None},
        },
    ),
    (m.chunked_loss, {"trainer": {}}, {"trainer": {"loss_chunk_rows": None}}),
    (m.shape_buckets, {"trainer": {}}, {"trainer": {"shape_buckets": None}}),
    (
        m.encoding_options,
        {"pe": {"name": "sinusoidal", "encoder": "learned", "decoder": "sinusoidal"}},
        {
            "pe": {
                "name": "sinusoidal",
                "encoder": "learned",
                "decoder": "sinusoidal",
                "scale": 1.0,
                "init_std": 0.02,  # the learned table's std then: never today's 0.7071
            }
        },
    ),
    (
        m.no_loss_chunks_or_shape_buckets,
        {"trainer": {"loss_chunk_rows": None, "shape_buckets": None, "lr": 2e-3}},
        {"trainer": {"lr": 2e-3}},
    ),
    (
        m.no_long_input_scores,
        {"decoding": {"long_inputs": [1, 2], "test_beam": 5}},
        {"decoding": {"test_beam": 5}},
    ),
    (
        m.encoder_and_decoder_only,
        {"pe": {"name": "learned", "encoder": "learned", "decoder": "none", "init_std": 0.02}},
        {"pe": {"encoder": "learned", "decoder": "none", "init_std": 0.02}},
    ),
    (
        m.encodings_by_import_path,
        {"pe": {"encoder": "sinusoidal", "decoder": "sinusoidal", "scale": 1.0}},
        {"pe": {"encoder": "sinusoidal", "decoder": "sinusoidal", "scale": 1.0}},
    ),
    (
        m.runs_tied_to_their_data,
        {"resume": None, "embedding": {"share": False}},
        {"resume": None, "resume_new_data": False, "embedding": {"share": "decoder"}},
    ),
    (
        m.recipe_following_the_budget,
        {"trainer": {"average_last": 5}},
        {
            "trainer": {
                "average_last": 5,
                "adapt": False,
                "adapt_min_updates": 1400,
                "adapt_dropout": 0.2,
                "adapt_average": 0.2,
            }
        },
    ),
]


@pytest.mark.parametrize(("step", "before", "after"), STEPS, ids=[s[0].__name__ for s in STEPS])
def test_a_step_fills_what_the_code_of_its_time_did_and_keeps_todays_spelling(step, before, after):
    config = json.loads(json.dumps(before))
    step(config)
    assert config == after
    step(config)  # a run dated a little too early comes out the same
    assert config == after


@pytest.mark.parametrize(("saved", "level"), [(True, "all"), (False, "decoder"), ("none", "none")])
def test_a_boolean_share_saved_before_format_17_reads_as_its_level(saved, level):
    config = {"embedding": {"share": saved}}
    migrated = m.migrate_config(config, 16)
    assert migrated["embedding"] == {"share": level} and migrated["resume_new_data"] is False


def test_every_step_is_in_the_chain_once():
    assert [s.upgrade for s in m.MIGRATIONS] == [step for step, _, _ in STEPS]


def test_a_run_without_a_recorded_format_is_dated_by_its_keys():
    first = {"model": {"dropout": 0.1}, "pe": {"name": "sinusoidal"}, "decoding": {}}
    assert m.format_of(first) == 1
    versions = [1]
    config = json.loads(json.dumps(first))
    for step in m.MIGRATIONS:
        step.upgrade(config)
        versions.append(m.format_of(config))
    # formats 12 and 13 read as earlier ones whose steps leave them unchanged
    assert versions == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11, 9, 14, 15, 15, 15, 15]


def test_a_recorded_format_is_trusted_and_a_newer_one_refused():
    assert m.format_of({}, 3) == 3
    with pytest.raises(m.UnknownFormat, match=f"newer than this minimt's \\({m.RUN_FORMAT}\\)"):
        m.format_of({}, m.RUN_FORMAT + 1)
    with pytest.raises(m.UnknownFormat, match="not a format number"):
        m.format_of({}, "16")


def test_an_upgraded_record_names_the_format_it_was_saved_in():
    saved = {"config": {"model": {"dropout": 0.1}, "pe": {"name": "sinusoidal"}}, "steps": 3}
    record = m.upgraded(saved)
    assert record["format"] == m.RUN_FORMAT and record["saved_format"] == 1
    assert record["config"]["pe"] == {
        "encoder": "sinusoidal",
        "decoder": "sinusoidal",
        "scale": 1.0,
    }
    assert saved["config"]["pe"] == {"name": "sinusoidal"}  # what was read is left as it was
    today = {"config": compose_leaves(""), "format": m.RUN_FORMAT}
    assert m.upgraded(today) is today
    assert len(m.changes_since(1)) == m.RUN_FORMAT - 1


def test_a_record_saved_before_finishing_was_recorded_is_finished_when_training_wrote_it():
    config = compose_leaves("")
    trained = {"config": config, "format": 16, "steps": 300, "best_val_bleu": 12.0}
    evaluated = {"eval": {"test.beam5.last": {"bleu": 3.0}}}  # an interrupted run evaluated
    assert m.upgraded_metrics(trained)["finished"] is True
    assert m.upgraded_metrics({"best_val_bleu": 1.0})["finished"] is True  # formats 1-4
    assert m.upgraded_metrics(evaluated)["finished"] is False
    assert m.upgraded_metrics(evaluated | {"format": 16, "config": config})["finished"] is False
    today = {"config": config, "format": m.RUN_FORMAT, "eval": {}}
    assert m.upgraded_metrics(today)["finished"] is False
    assert m.upgraded_metrics(today | {"finished": True})["finished"] is True


def compose_leaves(overrides: str) -> dict:
    cfg = compose_config(*overrides.split())
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def current_schema() -> dict:
    """Today's saved keys: each composition's resolved config, and TrainState's fields."""
    compositions = {
        overrides or "(defaults)": compose_leaves(overrides) for overrides in COMPOSITIONS
    }
    for config in compositions.values():
        config["data"].pop("url", None)  # where the corpus is fetched from: a machine's setting
    return {
        "format": m.RUN_FORMAT,
        "compositions": compositions,
        "train_state": [field.name for field in fields(TrainState)],
    }


def test_the_saved_keys_are_the_committed_schema_of_todays_format():
    committed = json.loads(SCHEMA.read_text())
    assert committed["format"] == m.RUN_FORMAT, (
        f"{SCHEMA} is the schema of run format {committed['format']}, today's is {m.RUN_FORMAT}: "
        "write it again (python -m tests.test_migrations)"
    )
    assert current_schema() == committed, (
        f"a saved key changed against {SCHEMA}: a change to a saved key's name, meaning or "
        "default needs its step in minimt/migrations.py (RUN_FORMAT one higher), a frozen run of "
        "the new format (tests/frozen_runs.py), then the schema written again "
        "(python -m tests.test_migrations)"
    )


FORMATS_TABLE = re.compile(r"^\| format \| first commit .*?(?=\n\n)", re.M | re.S)


def run_directory_with_todays_table() -> str:
    """docs/run-directory.md with its table of run formats written from the steps."""
    text = RUN_DIRECTORY.read_text()
    return FORMATS_TABLE.sub(lambda _: m.format_table(), text, count=1)


def test_the_docs_table_of_run_formats_is_the_one_the_steps_give():
    assert FORMATS_TABLE.search(RUN_DIRECTORY.read_text()), RUN_DIRECTORY
    assert run_directory_with_todays_table() == RUN_DIRECTORY.read_text(), (
        f"{RUN_DIRECTORY}'s table of run formats differs from the steps' (minimt/migrations.py): "
        "write it again (python -m tests.test_migrations)"
    )


if __name__ == "__main__":
    SCHEMA.write_text(json.dumps(current_schema(), indent=2) + "\n")
    RUN_DIRECTORY.write_text(run_directory_with_todays_table())
    print(
        f"wrote {SCHEMA} (run format {m.RUN_FORMAT}) and {RUN_DIRECTORY}'s table", file=sys.stderr
    )
