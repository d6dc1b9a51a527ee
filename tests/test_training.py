"""The training run end to end on a few hundred real sentences, and its schedule."""

import contextlib
import json
import math
import re
import subprocess

import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugin_util import markdown_to_safe_html

from minimt.config import register_resolvers
from minimt.data.corpus import DataError
from minimt.data.splits import load_text_splits
from minimt.rundir import load_model
from minimt.study.views import study_hooks
from minimt.train.evaluation import score
from minimt.train.loop import train
from minimt.train.progress import samples_table
from minimt.train.step import SummedLoss, inverse_sqrt_lr, train_step
from minimt.translator import Translator
from tests.helpers import (
    TOY,
    collate,
    compose_config,
    run_script,
    tiny_transformer,
    toy_run_overrides,
)


def test_inverse_sqrt_schedule_closed_form():
    warmup = 100
    factors = [inverse_sqrt_lr(step, warmup) for step in range(1000)]
    assert factors[0] == pytest.approx(1 / warmup)
    assert factors[49] == pytest.approx(0.5)
    assert factors[99] == pytest.approx(1.0) and max(factors) == pytest.approx(1.0)
    assert factors[399] == pytest.approx(0.5)  # sqrt(100 / 400)
    assert all(a < b for a, b in zip(factors[:99], factors[1:100], strict=True))
    assert all(a > b for a, b in zip(factors[99:-1], factors[100:], strict=True))


def test_a_non_finite_update_is_skipped_on_the_device_as_on_the_host():
    """host_check=False (what training on CUDA runs), here on CPU tensors: fused Adam's
    found_inf skips an update exactly as the host check does; only the LR schedule counts it."""
    batch = collate([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14, 15]])
    runs = {}
    for host_check in (True, False):
        model = tiny_transformer(40, seed=3)
        loss_fn = SummedLoss(model, 0.1, torch.autocast("cpu", enabled=False))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        applied = []
        for scale in (math.nan, 1 / 6, math.nan, 1 / 6):  # NaN gradients, the first step too
            _, grad_norm, ok = train_step(
                loss_fn,
                [batch],
                scale=scale,
                optimizer=optimizer,
                scheduler=scheduler,
                clip_grad_norm=1.0,
                host_check=host_check,
            )
            assert ok.shape == () and bool(ok) == grad_norm.isfinite().item()
            applied.append(bool(ok))
        runs[host_check] = model, optimizer, scheduler, applied
    host_model, host_adam, host_lr, host_applied = runs[True]
    model, adam, lr, applied = runs[False]
    assert applied == host_applied == [False, True, False, True]
    for (name, expected), got in zip(
        host_model.named_parameters(), model.parameters(), strict=True
    ):
        assert torch.equal(expected, got), name
        for key in ("step", "exp_avg", "exp_avg_sq"):  # Adam took 2 steps, not 4
            assert torch.equal(host_adam.state[expected][key], adam.state[got][key]), name
    assert host_adam.state[next(host_model.parameters())]["step"] == 2
    assert (host_lr.last_epoch, lr.last_epoch) == (2, 4)  # the documented difference
    assert not hasattr(adam, "found_inf")


def scalars(run_dir):
    events = {}
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            events[tag] = [e.value for e in acc.Scalars(tag)]
    return events


def texts(run_dir, tag):
    """(step, text) of every writer.add_text(tag, ...) entry in the run's event files."""
    found, stored_as = [], f"{tag}/text_summary"  # the tag torch's add_text writes
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        if stored_as in acc.Tags()["tensors"]:
            events = acc.Tensors(stored_as)
            found += [(e.step, e.tensor_proto.string_val[0].decode()) for e in events]
    return found


def table_rows(markdown):
    """The body rows of a markdown table, each a list of its cells (escaped bars kept whole)."""
    lines = markdown.splitlines()[2:]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_samples_table_is_a_markdown_table_of_literal_text():
    table = samples_table(["Ein | Hund"], ["A *dog*"], ["a_dog [1]"])
    html = markdown_to_safe_html(table)
    assert html.count("<tr>") == 2 and "<th>hypothesis</th>" in html  # header + one row
    for text in ("Ein | Hund", "A *dog*", "a_dog [1]"):
        assert f"<td>{text}</td>" in html


@pytest.mark.slow
def test_patience_stops_a_run_that_also_scores_the_average(tmp_path):
    overrides = toy_run_overrides(
        tmp_path / "data",
        "trainer.max_steps=100",
        "trainer.val_every=5",
        "trainer.save_every=5",
        "trainer.patience=1",
        "trainer.min_delta=100",  # no gain is ever enough: stop at the second validation
        "trainer.average_last=2",
    )
    run_dir = tmp_path / "run"
    metrics = train(compose_config(*overrides), run_dir)

    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk["steps"] == 10 and [v["step"] for v in on_disk["val_history"]] == [5, 10]
    assert on_disk["device"] == "cpu"
    assert on_disk["stop_reason"] == metrics["stop_reason"]
    assert on_disk["stop_reason"].startswith("trainer.patience reached")
    assert f"at step {on_disk['best_step']}" in on_disk["stop_reason"]
    assert on_disk["averaged_from"] == ["step_5.pt", "step_10.pt"]
    average, best = on_disk["test_average"]["test"], on_disk["test"]["test"]
    assert average["checkpoint"] == "averaged" and best["checkpoint"] == "best"
    assert set(average) == set(best) and 0 <= average["bleu"] <= 100
    hyps = (run_dir / "hyps.test.average.txt").read_text().splitlines()
    assert len(hyps) == len((run_dir / "hyps.test.txt").read_text().splitlines()) == 40

    samples = texts(run_dir, "val/samples")
    assert [step for step, _ in samples] == [5, 10]
    rows = table_rows(samples[-1][1])
    val_src = (TOY / "val.de").read_text().splitlines()[:3]
    val_ref = (TOY / "val.en").read_text().splitlines()[:3]
    assert all(len(row) == 4 for row in rows)
    assert [row[1] for row in rows] == val_src and [row[2] for row in rows] == val_ref


@pytest.mark.slow
def test_smoke_run_writes_metrics_json(smoke_run):
    run_dir, metrics = smoke_run
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert {key: on_disk[key] for key in metrics} == json.loads(json.dumps(metrics))
    assert on_disk["steps"] == 120 and on_disk["train_seconds"] > 0
    assert on_disk["stop_reason"] == "trainer.max_steps reached"
    assert "test_average" not in on_disk  # off by default
    test = on_disk["test"]["test_2016_flickr"]
    assert 0 <= test["bleu"] <= 100 and "nrefs:1" in test["signature"]
    assert on_disk["best_val_bleu"] == max(v["bleu"] for v in on_disk["val_history"])
    assert len((run_dir / "hyps.test_2016_flickr.txt").read_text().splitlines()) == 1000
    memory = on_disk["memory"]  # the run's RSS, sampled every second
    assert 100 < memory["peak_rss_mb"] < 8000
    assert memory["peak_phase"] in ("setup", "training", "test decoding")
    assert max(memory["peak_rss_mb_by_phase"].values()) == memory["peak_rss_mb"]
    assert 0 <= memory["peak_at_seconds"] <= on_disk["train_seconds"] + 600


@pytest.mark.slow
def test_smoke_run_logs_the_tensorboard_tags_and_the_loss_falls(smoke_run):
    run_dir, _ = smoke_run
    tags = scalars(run_dir)
    need = {
        "train/loss",
        "train/lr",
        "train/grad_norm",
        "train/tokens_per_sec",
        "val/loss",
        "val/ppl",
        "val/bleu",
        "val/chrf",
        "test/bleu",
        "test/chrf",
    }
    assert need <= set(tags)
    losses = tags["train/loss"]
    assert losses[-1] < losses[0] - 1.0, losses
    assert all(math.isfinite(x) for x in losses)
    validations = [
        v["step"] for v in json.loads((run_dir / "metrics.json").read_text())["val_history"]
    ]
    assert [step for step, _ in texts(run_dir, "val/samples")] == validations


@pytest.mark.slow
def test_tensorboard_opens_on_bleu_and_loss(smoke_run):
    """TensorBoard's Time Series and Scalars tabs open their first two tag groups (the text
    before a tag's first "/"), in character-code order, scalars and images together: a finished
    run opens on test/ (BLEU) and train/ (loss), a run in training on train/ and val/ (BLEU)."""
    run_dir, _ = smoke_run
    tags = set()
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"]) | set(acc.Tags()["images"])
    groups = sorted({tag.split("/")[0] for tag in tags})
    assert groups == ["test", "train", "val", "views"]
    assert {"test/bleu", "train/loss", "val/loss", "val/bleu"} <= tags


@pytest.mark.slow
def test_smoke_run_writes_the_embedding_views(smoke_run):
    run_dir, _ = smoke_run
    images, hparams = set(), False
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        images |= set(acc.Tags()["images"])
        with contextlib.suppress(KeyError):  # raised by the event files without hparams
            hparams |= bool(acc.PluginTagToContent("hparams"))
    assert {"views/positions/table", "views/positions/cosine_similarity"} <= images
    assert any(tag.startswith("views/cross_attention/") for tag in images) and hparams
    assert (run_dir / "projector_config.pbtxt").is_file()
    assert {"views/embedding/token_norm", "views/embedding/position_norm"} <= set(scalars(run_dir))


@pytest.mark.slow
def test_run_directory_rebuilds_the_model(smoke_run):
    run_dir, _ = smoke_run
    assert (run_dir / "tokenizer.json").is_file()
    model, tokenizers, _ = load_model(run_dir, "best")
    saved = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["model"][name]), name
    emb = model.embedding
    assert emb.src_tokens.weight is emb.tgt_tokens.weight  # tying survives the reload
    assert tokenizers.src_vocab_size == model.embedding.src_tokens.num_embeddings


@pytest.mark.slow
def test_translator_from_the_run_directory_scores_what_the_log_says(smoke_run):
    run_dir, metrics = smoke_run
    result = metrics["test"]["test_2016_flickr"]
    translator = Translator.from_run(run_dir, "best")
    _, _, cfg = load_model(run_dir, "best")
    test_pairs = load_text_splits(cfg.data).tests["test_2016_flickr"]
    scores, hyps = score(translator, test_pairs, result["beam"], result["length_penalty"])
    assert scores.bleu == pytest.approx(result["bleu"])
    assert hyps == (run_dir / "hyps.test_2016_flickr.txt").read_text().splitlines()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_parallel_text_reads_any_line_aligned_files(tmp_path):
    files = {
        f"{split}.{side}": write_lines(
            tmp_path / f"{split}.{side}", [f"{split} {side} {i}" for i in range(3)]
        )
        for split in ("train", "val", "test")
        for side in ("src", "tgt")
    }
    cfg = compose_config(
        "data=parallel_text", *(f"data.{name}={path}" for name, path in files.items())
    )
    splits = load_text_splits(cfg.data)
    assert list(splits.train.src_lines()) == ["train src 0", "train src 1", "train src 2"]
    assert list(splits.train.tgt_lines()) == ["train tgt 0", "train tgt 1", "train tgt 2"]
    assert list(splits.tests) == ["test"] and splits.tests["test"][1][2] == "test tgt 2"


def test_mismatched_line_counts_stop_before_training(tmp_path):
    src = write_lines(tmp_path / "train.de", ["a"] * 300)
    tgt = write_lines(tmp_path / "train.en", ["b"] * 299)
    paths = [
        f"data.{split}.{side}={path}"
        for split in ("train", "val", "test")
        for side, path in (("src", src), ("tgt", tgt))
    ]
    cfg = compose_config("experiment=smoke", "data=parallel_text", *paths)
    with pytest.raises(DataError) as error:
        train(cfg, tmp_path / "run")
    assert all(text in str(error.value) for text in ("300", "299", "train.de", "train.en"))
    assert not (tmp_path / "run" / "checkpoints").exists()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_script("train.py", *args, stdin="", timeout=120)


def test_cli_rejects_an_unknown_positional_encoding_naming_the_choices(tmp_path):
    result = run_cli("pe=rotary", f"hydra.run.dir={tmp_path}")
    assert result.returncode != 0
    assert "sinusoidal" in result.stderr and "learned" in result.stderr


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("embedding.scale=maybe", "embedding.scale"),
        ("trainer.batch_tokens=-1", "trainer.batch_tokens"),
    ],
)
def test_cli_rejects_bad_values_before_any_work(tmp_path, override, key):
    result = run_cli(override, f"hydra.run.dir={tmp_path}/run", f"data.dir={tmp_path}/data")
    assert result.returncode != 0
    assert key in result.stdout + result.stderr
    assert not (tmp_path / "data").exists()  # stopped before fetching anything


def test_cli_names_a_missing_data_place(tmp_path):
    result = run_cli(
        "experiment=smoke",
        "data.url=/nonexistent/place",
        f"data.dir={tmp_path}/data",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert result.returncode != 0
    assert "/nonexistent/place" in result.stdout + result.stderr


def test_train_resolves_the_configs_own_interpolations_without_the_script(tmp_path):
    # fairseq_learned's pe.init_std is ${minimt.inverse_sqrt:${model.d_model}}: a config composed
    # in Python, with no resolver registered yet, trains as under scripts/train.py
    overrides = "arm=fairseq_learned", "trainer.max_steps=2", "views=false"
    cfg = compose_config(*toy_run_overrides(tmp_path / "data", *overrides))
    OmegaConf.clear_resolver("minimt.inverse_sqrt")
    try:
        metrics = train(cfg, tmp_path / "run")
    finally:
        register_resolvers()
    assert metrics["config"]["pe"]["init_std"] == 32**-0.5


def test_a_run_without_the_study_views_still_has_its_hparams_row(tmp_path):
    overrides = toy_run_overrides(tmp_path / "data", "trainer.max_steps=2", "views=false")
    cfg = compose_config(*overrides)
    train(cfg, tmp_path / "run", study_hooks(cfg))
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    hparams = events.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= hparams.keys()
    assert not (tmp_path / "run" / "projector_config.pbtxt").exists()  # the views stay off


def test_a_run_started_again_from_update_0_records_the_start_it_replaced(tmp_path):
    cfg = compose_config(
        *toy_run_overrides(tmp_path / "data", "trainer.max_steps=2", "views=false")
    )
    first = train(cfg, tmp_path / "run")
    again = train(cfg, tmp_path / "run")  # the same directory, no resume=
    (replaced,) = first["provenance"]["sessions"]
    assert again["provenance"]["discarded_starts"] == [replaced]
    assert again["provenance"]["sessions"][0]["from_step"] == 0
    assert json.loads((tmp_path / "run" / "starts.json").read_text()) == [
        replaced,
        *again["provenance"]["sessions"],
    ]


@pytest.mark.slow
def test_a_resumed_run_stops_at_the_validation_an_uninterrupted_one_does(tmp_path):
    def config(*extra):
        patience = ["trainer.val_every=5", "trainer.save_every=5", "trainer.patience=2"]
        return compose_config(*toy_run_overrides(tmp_path / "data", *patience, *extra))

    never_enough = "trainer.min_delta=100"
    straight = train(config(never_enough, "trainer.max_steps=100"), tmp_path / "a")
    train(config(never_enough, "trainer.max_steps=10"), tmp_path / "b")  # 2 validations kept
    resumed = train(
        config(never_enough, "trainer.max_steps=100", f"resume={tmp_path / 'b'}"), tmp_path / "b"
    )
    assert straight["steps"] == resumed["steps"] == 15
    assert len(straight["provenance"]["sessions"]) == 1
    first, second = resumed["provenance"]["sessions"]  # the run, then its resume
    assert first["started_utc"] <= second["started_utc"] <= resumed["provenance"]["ended_utc"]
    assert resumed["provenance"]["started_utc"] == first["started_utc"]
    assert resumed["stop_reason"] == straight["stop_reason"]
    assert resumed["stop_reason"].startswith("trainer.patience reached: 2 validations")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("budget", "reason", "steps"),
    [
        ("trainer.max_steps=3", "trainer.max_steps reached", 3),
        ("trainer.max_epochs=1", "trainer.max_epochs reached", None),
        ("trainer.max_minutes=1e-9", "trainer.max_minutes reached", 0),
    ],
)
def test_metrics_json_says_which_budget_ended_the_run(tmp_path, budget, reason, steps):
    overrides = toy_run_overrides(tmp_path / "data", budget)
    metrics = train(compose_config(*overrides), tmp_path / "run")
    assert metrics["stop_reason"] == reason
    if steps is not None:
        assert metrics["steps"] == steps
    else:
        assert metrics["epochs_completed"] == 1 and metrics["steps"] > 0
