"""The sweep report on tiny fabricated run directories: statistics, p-values, files, errors."""

import csv
import json
import random
import statistics

import pytest
from torch.utils.tensorboard import SummaryWriter

from minimt.study.report import ReportError, build_report, write_report
from minimt.study.runs import BASELINE, Configuration, Run
from scripts.report import main

WORDS = "a dog man woman child runs sits on the in green red field street ball water".split()
LEARNED = Configuration("learned", scale=True, share=True)
# Test BLEU and chrF written into each fabricated metrics.json, by configuration and seed.
TEST_BLEU = {BASELINE: {1: 30.0, 2: 32.0}, LEARNED: {1: 20.0, 2: 26.0}}
TEST_CHRF = {BASELINE: {1: 50.0, 2: 54.0}, LEARNED: {1: 40.0, 2: 41.0}}


def write_corpus(root):
    """A parallel_text data config over fabricated files: 40 test pairs of 3 to 30 words."""
    rng = random.Random(0)
    files = {}
    for split, n in (("train", 20), ("val", 10), ("test", 40)):
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 30))) for _ in range(n)]
        for side in ("src", "tgt"):
            path = root / f"{split}.{side}"
            path.write_text("".join(line + "\n" for line in lines))
            files.setdefault(split, {})[side] = str(path)
    return {
        "name": "parallel_text",
        "dir": str(root / "cache"),
        **files,
        "max_train_len": 100,
        "max_train_pairs": None,
        "max_val_pairs": None,
    }


def write_run(run_dir, data, configuration, seed, hyps, events=True):
    """A finished run as the training side leaves it (metrics.json with "config", hyps, events)."""
    run_dir.mkdir(parents=True)
    (run_dir / ".hydra").mkdir()
    val_history = [{"step": s, "loss": 5.0 - s / 100, "bleu": s / 10 + seed} for s in (100, 200)]
    config = {
        "pe": {"name": configuration.pe},
        "embedding": {"scale": configuration.scale, "share": configuration.share},
        "trainer": {"seed": seed},
        "data": data,
    }
    metrics = {
        "config": config,
        "steps": 200 + seed,
        "train_seconds": 60.0 * seed,
        "num_parameters": 1234,
        "best_val_bleu": val_history[-1]["bleu"],
        "val_history": val_history,
        "test": {
            "test": {
                "bleu": TEST_BLEU[configuration][seed],
                "chrf": TEST_CHRF[configuration][seed],
                "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                "beam": 5,
            }
        },
        "long_inputs": {
            "test": {
                str(k): {"bleu": 30.0 - k, "chrf": 50.0, "mean_src_words": 16.0 * k} for k in (1, 2)
            }
        },
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    (run_dir / "hyps.test.txt").write_text("".join(h + "\n" for h in hyps))
    if events:
        with SummaryWriter(run_dir) as writer:
            for h in val_history:
                writer.add_scalar("val/bleu", h["bleu"], h["step"])


@pytest.fixture
def sweep(tmp_path):
    """Baseline and learned PE, seeds 1 and 2 each, plus one run that never finished."""
    data = write_corpus(tmp_path)
    refs = [line.rstrip("\n") for line in open(data["test"]["tgt"])]
    good = [" ".join(r.split()[:-1]) for r in refs]
    bad = [" ".join(r.split()[::2]) for r in refs]
    root = tmp_path / "sweep"
    for seed in (1, 2):
        write_run(root / f"pe=sinusoidal,seed={seed}", data, BASELINE, seed, good)
        write_run(root / f"pe=learned,seed={seed}", data, LEARNED, seed, bad, events=seed == 1)
    (root / "pe=learned,seed=3" / ".hydra").mkdir(parents=True)
    return root


def test_report_rows_are_configurations_with_means_and_stds_over_seeds(sweep):
    report = build_report(sweep, "test", resamples=200)
    rows = {row["configuration"]: row for row in report.rows}
    assert list(rows) == [BASELINE.label, LEARNED.label]  # the baseline first
    for configuration, row in ((BASELINE, rows[BASELINE.label]), (LEARNED, rows[LEARNED.label])):
        bleu, chrf = (
            list(TEST_BLEU[configuration].values()),
            list(TEST_CHRF[configuration].values()),
        )
        assert row["seeds"] == "1 2"
        assert row["test_bleu_mean"] == pytest.approx(statistics.mean(bleu))
        assert row["test_bleu_std"] == pytest.approx(statistics.stdev(bleu))
        assert row["test_chrf_mean"] == pytest.approx(statistics.mean(chrf))
        assert row["test_chrf_std"] == pytest.approx(statistics.stdev(chrf))
        assert row["best_val_bleu_mean"] == pytest.approx(21.5)  # 20 + seed, seeds 1 and 2
        assert row["final_val_loss_mean"] == pytest.approx(3.0)
        assert row["steps_mean"] == pytest.approx(201.5)
        assert row["train_seconds_mean"] == pytest.approx(90.0)
    assert rows[BASELINE.label]["p_value"] is None
    assert rows[LEARNED.label]["p_value"] < 0.05  # every other word vs one word short
    assert report.skipped == [
        (sweep / "pe=learned,seed=3", "no metrics.json (failed or unfinished)")
    ]


def test_length_buckets_and_long_inputs_are_averaged_per_configuration(sweep):
    report = build_report(sweep, "test", resamples=200)
    baseline, learned = report.results
    assert sum(bucket["n"] for bucket in baseline.by_length) == 40  # every test sentence once
    for ours, theirs in zip(baseline.by_length, learned.by_length, strict=True):
        if ours["n"]:
            assert ours["bleu"] > theirs["bleu"]
    assert baseline.long_inputs == {
        1: {"bleu": 29.0, "mean_src_words": 16.0},
        2: {"bleu": 28.0, "mean_src_words": 32.0},
    }


def test_val_curves_come_from_tensorboard_or_metrics_json(sweep):
    with_events, without = build_report(sweep, "test", resamples=200).results[1].runs
    from_events = Run(with_events.dir, {**with_events.metrics, "val_history": []})
    assert from_events.val_bleu_curve() == [(100, 11.0), (200, 21.0)]
    assert without.val_bleu_curve() == [(100, 12.0), (200, 22.0)]  # from metrics.json


def test_report_files_are_written_into_the_sweep(sweep, capsys):
    main([f"sweep={sweep}", "test_set=test", "bootstrap=200"])
    out = capsys.readouterr().out
    assert BASELINE.label in out and LEARNED.label in out
    with open(sweep / "report.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["configuration"] for row in rows] == [BASELINE.label, LEARNED.label]
    assert rows[0]["p_value"] == "" and float(rows[1]["p_value"]) < 0.05
    assert float(rows[1]["test_bleu_mean"]) == pytest.approx(23.0)
    text = (sweep / "report.md").read_text()
    for needle in ("How to read this", "paired bootstrap", "25+ words", "k=2", "val_bleu.png"):
        assert needle in text
    assert "pe=learned,seed=3" in text and "nrefs:1" in text and "bs:200" in text
    for name in ("val_bleu.png", "test_bleu.png", "bleu_by_length.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"


def test_without_the_baseline_p_values_are_left_empty(sweep):
    for seed in (1, 2):
        (sweep / f"pe=sinusoidal,seed={seed}" / "metrics.json").unlink()
    report = build_report(sweep, "test", resamples=200)
    assert [row["p_value"] for row in report.rows] == [None]
    write_report(report)
    assert "No run of the baseline" in (sweep / "report.md").read_text()


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_nothing_to_report_is_one_line_and_exit_1(tmp_path, capsys, where):
    if where == "empty":
        (tmp_path / "missing").mkdir()
    with pytest.raises(SystemExit) as stop:
        main([f"sweep={tmp_path / 'missing'}"])
    message = str(stop.value.code)
    assert message.startswith("error: ") and "\n" not in message
    with pytest.raises(ReportError):
        build_report(tmp_path / "missing", "test", resamples=200)
