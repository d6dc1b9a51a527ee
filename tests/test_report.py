"""The study report on fabricated run directories: rows, the declared questions' verdicts with
Holm within each question, protocols never paired, length buckets, files that regenerate byte
for byte, collected runs."""

import csv
import json
import random
import statistics

import pytest

import minimt.study.runs
import minimt.study.significance
from minimt.study.report import ConfigResult, ReportError, build_report, write_report
from minimt.study.runs import AS_CONFIGURED, PROTOCOLS, Protocol, Run, collect_runs
from minimt.study.sections import untrained_rows
from minimt.study.significance import holm
from scripts.report import main

WORDS = "a dog man woman child runs sits on the in green red field street ball water".split()
LONG_SETS = ("long_16-20", "long_21-25")
# Test BLEU written into each fabricated metrics.json: slug -> seed -> BLEU (on every test set).
TEST_BLEU = {
    "full-sinusoidal": {1: 30.0, 2: 32.0, 3: 31.0},
    "full-learned": {1: 20.0, 2: 22.5, 3: 20.5},  # 10 +- 0.5 below: worse
    "full-rope": {1: 30.1, 2: 31.9, 3: 31.0},  # 0 +- 0.1: equivalent
    "full-sinusoidal-share_none": {1: 35.0},  # one seed: inconclusive
    "length15-sinusoidal": {1: 25.0, 2: 27.0},
    "length15-learned": {1: 24.0, 2: 27.5},
    "control15-sinusoidal": {1: 26.0, 2: 26.5},
}
TEST_CHRF = {1: 50.0, 2: 54.0, 3: 52.0}


def sentences(n: int, seed: int, words: tuple[int, int]) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(*words))) for _ in range(n)]


def write_corpus(root) -> dict:
    """A parallel_text data config over fabricated files: 40 test pairs of 3 to 30 words."""
    files = {}
    for i, (split, n) in enumerate((("train", 20), ("val", 10), ("test", 40))):
        lines = sentences(n, i, (3, 30))
        for side in ("src", "tgt"):
            path = root / f"{split}.{side}"
            path.write_text("".join(line + "\n" for line in lines))
            files.setdefault(split, {})[side] = str(path)
    return {"name": "parallel_text", "dir": str(root / "cache"), **files, "max_train_len": 100}


LONG_PAIRS = {
    name: (sentences(12, 10 + i, (16, 25)),) * 2 for i, name in enumerate(LONG_SETS)
}  # (sources, references): the same lines, as references are all the report reads of them


@pytest.fixture(autouse=True)
def long_references(monkeypatch):
    """The long_* test sets' references, fabricated (the others are read from the data files)."""
    read = minimt.study.significance.read_test_pairs

    def fake(data, name):
        return LONG_PAIRS[name] if name in LONG_PAIRS else read(data, name)

    monkeypatch.setattr(minimt.study.significance, "read_test_pairs", fake)


def saved_config(slug: str, seed: int, data: dict) -> dict:
    """The resolved config of a run of configuration `slug` (regime-pe[-share_none])."""
    regime, pe, *share = slug.split("-")
    words = {
        "full": {},
        "length15": {"train_max_words": 15, "long_tests_over": 15},
        "control15": {"long_tests_over": 15, "train_subsample": 900},
    }[regime]
    return {
        "pe": {"name": pe, "encoder": pe, "decoder": pe},
        "embedding": {"scale": True, "share": "none" if share else "all", "init_std": None},
        "data": {
            **data,
            "max_train_pairs": None,
            "train_max_words": None,
            "long_tests_over": None,
            "train_subsample": None,
            **words,
        },
        "tokenizer": {"vocab_size": 1000, "joint": True},
        "model": {
            "d_model": 64,
            "n_heads": 2,
            "n_encoder_layers": 2,
            "n_decoder_layers": 2,
            "d_ff": 128,
            "dropout": 0.1,
            "max_seq_len": 128,
        },
        "trainer": {
            "seed": seed,
            "batch_tokens": 1024,
            "accumulate": 1,
            "lr": 3e-3,
            "warmup_steps": 50,
            "val_every": 100,
            "max_steps": 5000,
            "max_minutes": 10.0,
            "patience": 3,
            "min_delta": 0.0,
        },
    }


def write_run(run_dir, slug: str, seed: int, data: dict, hyps: dict[str, list[str]]) -> None:
    """A finished run as the training side leaves it (metrics.json with "config", hyps)."""
    run_dir.mkdir(parents=True)
    (run_dir / ".hydra").mkdir()
    val_history = [{"step": s, "loss": 5.0 - s / 100, "bleu": s / 10 + seed} for s in (100, 200)]
    bleu = TEST_BLEU[slug][seed]
    scores = {"bleu": bleu, "chrf": TEST_CHRF[seed], "beam": 5, "signature": "nrefs:1|tok:13a"}
    metrics = {
        "config": saved_config(slug, seed, data),
        "steps": 200 + seed,
        "best_step": 200,
        "stop_reason": "trainer.patience reached (3 validations without a gain)",
        "train_seconds": 60.0 * seed,
        "num_parameters": 2000 if "share_none" in slug else 1234,
        "best_val_bleu": val_history[-1]["bleu"],
        "val_history": val_history,
        "data": {"train_pairs": 900, "train_max_src_tokens": 30, "train_max_tgt_tokens": 33},
        "test": {
            name: {**scores, "length_ratio": 0.9, "early_stop_share": 0.25}
            for name in ("test", *(LONG_SETS if "full" not in slug else ()))
        },
    }
    if slug == "full-sinusoidal":
        metrics["long_inputs"] = {
            "test": {str(k): {"bleu": 30.0 - k, "mean_src_words": 16.0 * k} for k in (1, 2)}
        }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    for name in metrics["test"]:
        (run_dir / f"hyps.{name}.txt").write_text("".join(h + "\n" for h in hyps[name]))


def degraded(refs: list[str], worse: bool) -> list[str]:
    """Hypotheses one word short, or (worse) every other word."""
    return [" ".join(r.split()[::2] if worse else r.split()[:-1]) for r in refs]


@pytest.fixture
def sweep(tmp_path):
    """Seven configurations in three data regimes, and one run that never finished."""
    data = write_corpus(tmp_path)
    refs = {"test": [line.rstrip("\n") for line in open(data["test"]["tgt"])]}
    refs |= {name: pairs[1] for name, pairs in LONG_PAIRS.items()}
    root = tmp_path / "sweep"
    for slug, seeds in TEST_BLEU.items():
        hyps = {name: degraded(lines, "learned" in slug) for name, lines in refs.items()}
        for seed in seeds:
            write_run(root / slug.split("-")[0] / f"{slug},seed={seed}", slug, seed, data, hyps)
    (root / "full" / "full-learned,seed=4" / ".hydra").mkdir(parents=True)
    return root


def by_slug(report) -> dict[str, dict]:
    return {row["slug"]: row for row in report.rows}


def test_rows_are_configurations_with_means_and_stds_over_seeds(sweep):
    report = build_report(sweep, None, resamples=200)
    rows = by_slug(report)
    assert list(rows) == list(TEST_BLEU)  # each regime's baseline first
    assert report.test_set == "test"
    for slug, row in rows.items():
        bleu = list(TEST_BLEU[slug].values())
        chrf = [TEST_CHRF[seed] for seed in TEST_BLEU[slug]]
        assert row["seeds"] == " ".join(map(str, TEST_BLEU[slug]))
        assert row["test_bleu_mean"] == pytest.approx(statistics.mean(bleu))
        assert row["test_chrf_mean"] == pytest.approx(statistics.mean(chrf))
        if len(bleu) > 1:
            assert row["test_bleu_std"] == pytest.approx(statistics.stdev(bleu))
            assert row["test_chrf_std"] == pytest.approx(statistics.stdev(chrf))
        else:
            assert row["test_bleu_std"] is None
        assert row["minutes_mean"] == pytest.approx(statistics.mean(TEST_BLEU[slug]))
        assert row["final_val_loss_mean"] == pytest.approx(3.0)
    learned = rows["full-learned"]
    assert (learned["regime"], learned["pe"], learned["share"]) == ("full", "learned", "all")
    assert learned["best_val_bleu_mean"] == pytest.approx(22.0)  # 20 + seed, seeds 1 to 3
    assert learned["steps_mean"] == pytest.approx(202.0)
    assert rows["full-sinusoidal-share_none"]["num_parameters"] == 2000
    assert report.skipped == [
        (sweep / "full" / "full-learned,seed=4", "no metrics.json (failed or unfinished)")
    ]


def csv_rows(report, slug: str) -> list[dict]:
    return [row for row in report.csv_rows if row["slug"] == slug]


def test_verdicts_of_the_declared_questions(sweep):
    report = build_report(sweep, None, resamples=200)
    [baseline] = csv_rows(report, "full-sinusoidal")
    assert baseline["verdict"] == "baseline" and baseline["difference"] is None
    [learned] = csv_rows(report, "full-learned")
    assert learned["reference"] == "full-sinusoidal" and learned["paired_seeds"] == "1 2 3"
    assert (learned["question"], learned["test_set"], learned["family_size"]) == ("Q1", "test", 2)
    assert learned["difference"] == pytest.approx(-10.0)
    assert learned["ci95_low"] < -10.0 < learned["ci95_high"] < 0
    assert learned["verdict"] == "worse" and learned["seeds_for_difference"] == 2
    [rope] = csv_rows(report, "full-rope")
    assert rope["verdict"] == "equivalent" and rope["reason"] is None
    [one_seed] = csv_rows(report, "full-sinusoidal-share_none")
    assert one_seed["verdict"] == "inconclusive" and one_seed["p_value"] is None
    assert one_seed["question"] == "Q3" and one_seed["reason"] == "one seed: no interval"
    # Q5 compares it on the long buckets only: one row each, none on the headline set
    length = csv_rows(report, "length15-learned")
    assert [(r["question"], r["test_set"]) for r in length] == [("Q5", n) for n in LONG_SETS]
    assert by_slug(report)["length15-learned"]["verdicts"] == []


def test_holm_runs_within_each_question(sweep):
    report = build_report(sweep, None, resamples=200)
    pairs = {(c.system.slug, c.reference.slug, c.test_set) for c in report.comparisons}
    split_vs_control = {("length15-sinusoidal", "control15-sinusoidal", n) for n in LONG_SETS}
    learned_by_bucket = {("length15-learned", "length15-sinusoidal", n) for n in LONG_SETS}
    in_range = {
        ("full-learned", "full-sinusoidal", "test"),
        ("full-rope", "full-sinusoidal", "test"),
    }
    assert pairs == split_vs_control | learned_by_bucket | in_range | {
        ("full-sinusoidal-share_none", "full-sinusoidal", "test")
    }
    families = {f.question.key: f for f in report.families}
    assert {key: f.size for key, f in families.items()} == {
        "Q1": 2,
        "Q2": 0,
        "Q3": 0,
        "Q4": 0,
        "Q5": 4,
    }
    for family in families.values():
        tested = [c for c in family.comparisons if c.difference.p_value is not None]
        assert [c.verdict.holm_p for c in tested] == pytest.approx(
            holm([c.difference.p_value for c in tested])
        )
    text = build_markdown(report)
    assert "### Q1: Holm over 2 comparisons" in text and "### Q5: Holm over 4 comparisons" in text
    q2 = "**Q2. What does sqrt(d_model) scaling do, with the token table's init?** Not run: no "
    assert q2 + "runs of full-sinusoidal-unscaled, full-sinusoidal-init1," in text


def build_markdown(report) -> str:
    write_report(report)
    return (report.out_dir / "report.md").read_text()


def test_paired_bootstrap_per_seed_pair(sweep):
    report = build_report(sweep, None, resamples=200)
    learned = next(c for c in report.comparisons if c.system.slug == "full-learned")
    assert sorted(learned.bootstrap) == [1, 2, 3]
    assert all(p < 0.05 for p in learned.bootstrap.values())  # every other word vs one short
    rope = next(c for c in report.comparisons if c.system.slug == "full-rope")
    assert rope.bootstrap == {1: 1.0, 2: 1.0, 3: 1.0}  # the same hypotheses
    assert "bs:200" in report.bootstrap_signature
    assert not any(c.bootstrap for c in build_report(sweep, None, resamples=0).comparisons)


def test_length_buckets_training_lengths_and_parameters_are_reported(sweep):
    text = build_markdown(build_report(sweep, None, resamples=200))
    assert "| length15-learned | long_21-25 | 25.75 ± 2.47 | 52.00 | 0.900 | 25.0% |" in text
    assert "### Q5" in text and "| length15-learned | length15-sinusoidal | long_21-25 |" in text
    assert "| full | 30 | 33 | full-learned: rows 34-127 |" in text  # past the longer side
    assert "| none | no table shared | 2,000 | full-sinusoidal-share_none |" in text
    assert "| control15-sinusoidal | 1 | patience | 201 | 200 | 1.0 | 26.00 |" in text
    assert "patience 3 (min_delta 0)" in text
    assert "25+ words" in text  # the headline set by source length, from its references
    assert "## Joined inputs" in text and "k=2" in text
    length_only = build_markdown(build_report(sweep / "length15", None, resamples=0))
    assert "## Joined inputs" not in length_only


@pytest.mark.parametrize(
    ("encoder", "decoder", "rows"),
    [
        ("learned", "learned", "rows 34-127"),  # one table: the longer side reaches further
        ("learned", "sinusoidal", "rows 31-127"),
        ("sinusoidal", "learned", "rows 34-127"),
        ("sinusoidal", "sinusoidal", None),
    ],
)
def test_untrained_learned_rows_follow_the_sides_that_learn(encoder, decoder, rows):
    config = saved_config("full-sinusoidal", 1, {})
    config["pe"] |= {"encoder": encoder, "decoder": decoder}
    run = Run(None, {"config": config})
    result = ConfigResult(run.configuration, [run], by_length=[], long_inputs={})
    assert untrained_rows(result, src=30, tgt=33) == rows
    assert untrained_rows(result, src=None, tgt=None) is None


def test_the_report_regenerates_byte_for_byte(sweep, capsys):
    main([f"sweep={sweep}", "bootstrap=200"])
    first = {name: (sweep / name).read_bytes() for name in ("report.md", "report.csv")}
    main([f"sweep={sweep}", "bootstrap=200"])
    assert {name: (sweep / name).read_bytes() for name in first} == first
    text = first["report.md"].decode()
    assert str(sweep.parent) not in text and "full/full-learned,seed=4" in text
    for word in ("**worse**", "**equivalent**", "**inconclusive**"):
        assert word in text
    out = capsys.readouterr().out
    assert "full-learned" in out and "wrote" in out


def test_report_csv_has_a_row_per_comparison_and_per_uncompared_configuration(sweep):
    main([f"sweep={sweep}", "test_set=test", "bootstrap=200"])
    with open(sweep / "report.csv") as file:
        rows = list(csv.DictReader(file))
    report = build_report(sweep, "test", resamples=0)
    assert len(rows) == len(report.comparisons) + 2 >= len(TEST_BLEU)
    pairs = [(row["slug"], row["reference"], row["test_set"]) for row in rows]
    assert pairs == [
        ("full-sinusoidal", "", ""),  # the baseline, compared with nothing
        ("full-learned", "full-sinusoidal", "test"),
        ("full-rope", "full-sinusoidal", "test"),
        ("full-sinusoidal-share_none", "full-sinusoidal", "test"),
        *(("length15-sinusoidal", "control15-sinusoidal", n) for n in LONG_SETS),
        *(("length15-learned", "length15-sinusoidal", n) for n in LONG_SETS),
        ("control15-sinusoidal", "", ""),
    ]
    assert rows[0]["p_value"] == "" and rows[0]["verdict"] == "baseline"
    assert float(rows[1]["p_value"]) < 0.05 and rows[1]["verdict"] == "worse"
    assert float(rows[1]["test_bleu_mean"]) == pytest.approx(21.0)
    assert {row["question"] for row in rows[4:8]} == {"Q5"} and rows[4]["family_size"] == "4"
    assert all(float(row["alpha"]) == 0.05 for row in rows[1:8])
    pngs = ["test_bleu.png"] + [
        f"{kind}_{regime}.png"
        for regime in ("full", "length15", "control15")
        for kind in ("val_bleu", "bleu_by_length")
    ]
    for name in pngs:
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"
        assert f"({name})" in (sweep / "report.md").read_text()


def test_collected_runs_give_the_same_table_one_directory_up(sweep, tmp_path):
    main([f"sweep={sweep}", "bootstrap=0"])
    runs = tmp_path / "docs" / "study" / "runs"
    collect_runs(sweep, runs)
    main([f"sweep={runs}", "bootstrap=0"])
    assert (runs.parent / "report.csv").read_bytes() == (sweep / "report.csv").read_bytes()
    assert not (runs / "report.md").exists()


def test_without_the_baseline_there_is_no_verdict(sweep):
    for seed in (1, 2, 3):
        (sweep / "full" / f"full-sinusoidal,seed={seed}" / "metrics.json").unlink()
    report = build_report(sweep / "full", None, resamples=200)
    assert [row["verdict"] for row in report.csv_rows] == [None, None, None]
    assert [row["verdicts"] for row in report.rows] == [[], [], []]
    text = build_markdown(report)
    assert "test_2016_flickr)?** Not run: no runs of full-sinusoidal." in text
    assert "No declared comparison has runs of both sides yet." in text


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


def add_cpu_protocol_runs(sweep, root, monkeypatch, seeds: tuple[int, ...]) -> None:
    """Runs of full-sinusoidal and full-learned in a second protocol (d_model 32) beside the
    sweep's runs."""
    cpu = Protocol("study_cpu", "study_cpu", "fp32", "cpu", "a 2-core CPU", "cpu")
    monkeypatch.setattr(
        minimt.study.runs,
        "protocol_of",
        lambda cfg, precision, device: cpu if cfg.model.d_model == 32 else AS_CONFIGURED,
    )
    (root / "cpu_data").mkdir()
    data = write_corpus(root / "cpu_data")
    refs = [line.rstrip("\n") for line in open(data["test"]["tgt"])]
    for slug in ("full-sinusoidal", "full-learned"):
        for seed in seeds:
            run_dir = sweep / "cpu" / f"{slug},seed={seed}"
            write_run(run_dir, slug, seed, data, {"test": degraded(refs, False)})
            metrics = json.loads((run_dir / "metrics.json").read_text())
            metrics["config"]["model"]["d_model"] = 32
            (run_dir / "metrics.json").write_text(json.dumps(metrics))


def test_runs_of_two_protocols_are_never_paired(sweep, tmp_path, monkeypatch):
    add_cpu_protocol_runs(sweep, tmp_path, monkeypatch, seeds=(1, 2, 3))
    report = build_report(sweep, None, resamples=0)
    for c in report.comparisons:
        assert c.system.protocol == c.reference.protocol
    [cpu_learned] = csv_rows(report, "cpu-full-learned")
    assert cpu_learned["reference"] == "cpu-full-sinusoidal"
    assert csv_rows(report, "full-learned")[0]["reference"] == "full-sinusoidal"
    q1 = [f for f in report.families if f.question.key == "Q1"]
    assert [(f.protocol.name, f.size) for f in q1] == [("study_cpu", 1), ("", 2)]
    # the plan spends 0.025 on Q1 of study_cpu at each look; the other protocol keeps 0.05
    assert [f.alpha for f in q1] == [0.025, 0.05] and cpu_learned["alpha"] == 0.025
    text = build_markdown(report)
    heading = "### Q1, experiment=study_cpu, fp32 on a 2-core CPU: Holm over 1 comparisons"
    assert heading + " at 0.025 (the plan's share per look)" in text
    assert "Holm over 1 at 0.025" in text and "Q1 of experiment=study_cpu" in text
    assert text.count("**Q4. Where do positions matter") == 1  # not run: said for the first only


def test_a_protocol_names_its_missing_runs_and_its_untested_family(sweep, tmp_path, monkeypatch):
    add_cpu_protocol_runs(sweep, tmp_path, monkeypatch, seeds=(1,))
    text = build_markdown(build_report(sweep, None, resamples=0))
    cpu_q1 = next(line for line in text.splitlines() if "experiment=study_cpu" in line)
    assert "fp32 on a 2-core CPU; 1 seed; no comparison with 2 seeds yet, so no test)" in cpu_q1
    assert "Not run yet: cpu-full-rope vs cpu-full-sinusoidal, cpu-full-alibi vs" in cpu_q1
    assert "### Q1, experiment=study_cpu, fp32 on a 2-core CPU: no comparison with 2" in text


def test_unread_references_are_said_once_and_keep_their_columns(sweep, monkeypatch):
    def unreadable(data, name):
        raise minimt.study.significance.DataError(f"no {name} here")

    monkeypatch.setattr(minimt.study.significance, "read_test_pairs", unreadable)
    report = build_report(sweep, None, resamples=200)
    text = build_markdown(report)
    assert report.unread_references == [(n, f"no {n} here") for n in sorted(("test", *LONG_SETS))]
    assert text.count("**References not read**") == 1
    assert "bootstrap p per seed" in text and "Not computed: the test references" in text


def test_each_answer_says_how_many_of_its_runs_stopped_at_a_cap(sweep):
    for seed, cap in ((1, "max_minutes"), (2, "max_minutes"), (1, "max_steps")):
        slug = "length15-learned" if cap == "max_minutes" else "control15-sinusoidal"
        path = sweep / slug.split("-")[0] / f"{slug},seed={seed}" / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["stop_reason"] = f"trainer.{cap} reached"
        path.write_text(json.dumps(metrics))
    text = build_markdown(build_report(sweep, None, resamples=0))
    q1 = next(line for line in text.splitlines() if line.startswith("**Q1."))
    assert q1.endswith("None of the 9 runs this family rests on stopped at a cap.")
    q5 = next(line for line in text.splitlines() if line.startswith("**Q5."))
    assert q5.endswith(
        "2 of the 6 runs this family rests on stopped at trainer.max_minutes and 1 at "
        "trainer.max_steps, not by patience."
    )


def test_a_protocol_planned_after_its_data_has_exploratory_verdicts(sweep, monkeypatch):
    study = PROTOCOLS[0]
    monkeypatch.setattr(minimt.study.runs, "protocol_of", lambda cfg, precision, device: study)
    report = build_report(sweep, None, resamples=0)
    assert {f.exploratory for f in report.families} == {"plan written after the data"}
    text = build_markdown(report)
    assert "Holm over 2 comparisons at 0.05; exploratory (plan written after the data)" in text
    q1 = next(line for line in text.splitlines() if line.startswith("**Q1."))
    assert "Holm over 2 at 0.05; exploratory (plan written after the data))" in q1
    assert "**Exploratory**: experiment=study, bf16 on one NVIDIA H100" in text
    assert "unadjusted 95% CI" in text and "family-wise" not in text
    assert "Each claim type (differences; equivalence) is held at the family's alpha" in text
