"""The study report on fabricated run directories: rows, the declared questions' verdicts with
Holm within each question, protocols never paired, the plan's families, files that regenerate
byte for byte, collected runs."""

import csv
import json
import statistics
from pathlib import Path

import pytest

from minimt.study.report import ReportError, build_report, ratio_points, write_report
from minimt.study.significance import holm
from scripts.collect_runs import collect_runs
from scripts.report import main
from tests.helpers import LONG_SETS, PLANS, TEST_BLEU, TEST_CHRF, write_run

TOY_TITLE = "experiment=toy, fp32 on cpu"


@pytest.fixture
def sweep(tmp_path):
    """Seven arms of one protocol, and one run that never finished."""
    root = tmp_path / "sweep"
    for arm, seeds in TEST_BLEU.items():
        for seed in seeds:
            write_run(root / arm / f"seed{seed}", arm, seed)
    (root / "full_learned" / "seed4" / ".hydra").mkdir(parents=True)
    return root


def by_name(report) -> dict[str, dict]:
    return {row["configuration"]: row for row in report.rows}


def csv_rows(report, name: str) -> list[dict]:
    return [row for row in report.csv_rows if row.get("configuration") == name]


def build_markdown(report) -> str:
    write_report(report)
    return (report.out_dir / "report.md").read_text()


def test_rows_are_configurations_with_means_and_stds_over_seeds(sweep):
    report = build_report(sweep, None, plans=PLANS)
    rows = by_name(report)
    assert list(rows) == list(TEST_BLEU)  # in the order the questions name the arms
    assert report.test_set == "test"
    for arm, row in rows.items():
        bleu = list(TEST_BLEU[arm].values())
        chrf = [TEST_CHRF[seed] for seed in TEST_BLEU[arm]]
        assert row["protocol"] == "toy_fp32_cpu"
        assert row["seeds"] == " ".join(map(str, TEST_BLEU[arm]))
        assert row["test_bleu_by_seed"] == " ".join(f"{b:.2f}" for b in bleu)
        assert row["test_bleu_mean"] == pytest.approx(statistics.mean(bleu))
        assert row["test_chrf_mean"] == pytest.approx(statistics.mean(chrf))
        if len(bleu) > 1:
            assert row["test_bleu_std"] == pytest.approx(statistics.stdev(bleu))
            assert row["test_chrf_std"] == pytest.approx(statistics.stdev(chrf))
        else:
            assert row["test_bleu_std"] is None
        assert row["minutes_mean"] == pytest.approx(statistics.mean(TEST_BLEU[arm]))
        assert row["final_val_loss_mean"] == pytest.approx(3.0)
        assert row["stopped_by"] == f"patience x{len(bleu)}"
    learned = rows["full_learned"]
    assert learned["best_val_bleu_mean"] == pytest.approx(22.0)  # 20 + seed, seeds 1 to 3
    assert learned["steps_mean"] == pytest.approx(202.0)
    assert rows["share_none"]["num_parameters"] == 2000
    assert report.skipped == [
        (sweep / "full_learned" / "seed4", "no metrics.json (failed or unfinished)")
    ]


def test_verdicts_of_the_declared_questions(sweep):
    report = build_report(sweep, None, plans=PLANS)
    [baseline] = csv_rows(report, "full_sinusoidal")
    assert baseline.get("verdict") is None and baseline.get("difference") is None
    [learned] = csv_rows(report, "full_learned")
    assert learned["comparison"] == "full_learned vs full_sinusoidal"
    assert learned["paired_seeds"] == "1 2 3" and learned["planned_seeds"] is None
    assert (learned["question"], learned["test_set"], learned["family_size"]) == ("Q1", "test", 2)
    assert learned["difference"] == pytest.approx(-10.0)
    assert learned["ci95_low"] < -10.0 < learned["ci95_high"] < 0
    assert learned["verdict"] == "worse" and learned["seeds_for_difference"] == 2
    [rope] = csv_rows(report, "full_rope")
    assert rope["verdict"] == "equivalent" and rope["reason"] is None
    [one_seed] = csv_rows(report, "share_none")
    assert one_seed["verdict"] == "inconclusive" and one_seed["p_value"] is None
    assert one_seed["question"] == "Q3" and one_seed["reason"] == "one seed: no interval"
    # Q5 compares it on the long buckets only: one row each, none on the headline set
    length = csv_rows(report, "length_learned")
    assert [(r["question"], r["test_set"]) for r in length] == [("Q5", n) for n in LONG_SETS]


def test_holm_runs_within_each_question(sweep):
    report = build_report(sweep, None, plans=PLANS)
    comparisons = [c for a in report.answers for c in a.comparisons]
    pairs = {(c.system.name, c.reference.name, c.test_set) for c in comparisons}
    split_vs_control = {("length_sinusoidal", "control_sinusoidal", n) for n in LONG_SETS}
    learned_by_bucket = {("length_learned", "length_sinusoidal", n) for n in LONG_SETS}
    in_range = {
        ("full_learned", "full_sinusoidal", "test"),
        ("full_rope", "full_sinusoidal", "test"),
    }
    assert pairs == split_vs_control | learned_by_bucket | in_range | {
        ("share_none", "full_sinusoidal", "test")
    }
    answers = {a.family.question: a for a in report.answers}
    assert {key: a.size for key, a in answers.items()} == {
        "Q1": 2,
        "Q2": 0,
        "Q3": 0,
        "Q4": 0,
        "Q5": 4,
    }
    for answer in answers.values():
        tested = [c for c in answer.comparisons if c.difference.p_value is not None]
        assert [c.verdict.holm_p for c in tested] == pytest.approx(
            holm([c.difference.p_value for c in tested])
        )
    text = build_markdown(report)
    assert "| 2 / - | **worse** |" in text  # seeds needed: for a difference / for equivalence
    assert f"### Q1, {TOY_TITLE}: Holm over 2 comparisons" in text
    assert f"### Q5, {TOY_TITLE}: Holm over 4 comparisons" in text
    q2 = "**Q2. What does sqrt(d_model) scaling do, with the token table's init?**"
    assert f"{q2} ({TOY_TITLE}) Not run." in text
    assert "Not run yet: full_alibi vs full_sinusoidal, full_none vs full_sinusoidal." in text


def test_long_test_sets_and_settings_are_reported(sweep):
    text = build_markdown(build_report(sweep, None, plans=PLANS))
    assert "| length_learned | long_21-25 | 25.75 ± 2.47 | 52.00 | 0.900 | 25.0% |" in text
    assert "| length_learned vs length_sinusoidal | long_21-25 |" in text
    assert "| toy_fp32_cpu | control_sinusoidal | 1 2 | 26.00 26.50 |" in text
    assert "trainer.patience=3 trainer.min_delta=0.0" in text
    assert "(bleu_vs_ratio_toy_fp32_cpu.png)" in text and "(long_tests_toy_fp32_cpu.png)" in text


def test_the_ratio_plot_has_each_full_data_configuration_by_encoding(sweep):
    report = build_report(sweep, None, plans=PLANS)
    points = ratio_points({c.name: runs for c, runs in report.groups.items()}, "test")
    # scaled tokens (RMS 1) over the learned table's std 0.02; rope adds nothing; the length split
    # and its control train on other data
    assert {pe: list(names) for pe, names in points.items()} == {
        "sinusoidal": ["full_sinusoidal", "share_none"],
        "learned": ["full_learned"],
    }
    assert points["learned"]["full_learned"] == [
        (pytest.approx(50.0), bleu) for bleu in TEST_BLEU["full_learned"].values()
    ]


def test_the_report_regenerates_byte_for_byte(sweep, capsys):
    main([f"sweep={sweep}"])
    first = {name: (sweep / name).read_bytes() for name in ("report.md", "report.csv")}
    main([f"sweep={sweep}"])
    assert {name: (sweep / name).read_bytes() for name in first} == first
    text = first["report.md"].decode()
    assert str(sweep.parent) not in text and "full_learned/seed4" in text
    for word in ("**worse**", "**equivalent**", "**inconclusive**"):
        assert word in text
    out = capsys.readouterr().out
    assert "full_learned" in out and "wrote" in out


def test_report_csv_has_a_row_per_comparison_and_per_uncompared_configuration(sweep):
    main([f"sweep={sweep}", "test_set=test"])
    with open(sweep / "report.csv") as file:
        rows = list(csv.DictReader(file))
    report = build_report(sweep, "test", plans=PLANS)
    comparisons = [c for a in report.answers for c in a.comparisons]
    assert len(rows) == len(comparisons) + 2 >= len(TEST_BLEU)
    pairs = [(row["configuration"], row["comparison"], row["test_set"]) for row in rows]
    assert pairs == [
        ("full_sinusoidal", "", ""),  # compared with nothing
        ("full_learned", "full_learned vs full_sinusoidal", "test"),
        ("full_rope", "full_rope vs full_sinusoidal", "test"),
        ("share_none", "share_none vs full_sinusoidal", "test"),
        *(("length_sinusoidal", "length_sinusoidal vs control_sinusoidal", n) for n in LONG_SETS),
        *(("length_learned", "length_learned vs length_sinusoidal", n) for n in LONG_SETS),
        ("control_sinusoidal", "", ""),
    ]
    assert rows[0]["p_value"] == "" and rows[0]["verdict"] == ""
    assert float(rows[1]["p_value"]) < 0.05 and rows[1]["verdict"] == "worse"
    assert float(rows[1]["test_bleu_mean"]) == pytest.approx(21.0)
    assert {row["question"] for row in rows[4:8]} == {"Q5"} and rows[4]["family_size"] == "4"
    assert all(float(row["alpha"]) == 0.05 for row in rows[1:8])
    for name in ("test_bleu.png", "bleu_vs_ratio_toy_fp32_cpu.png", "long_tests_toy_fp32_cpu.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"
        assert f"({name})" in (sweep / "report.md").read_text()


def test_collected_runs_give_the_same_table_one_directory_up(sweep, tmp_path):
    main([f"sweep={sweep}"])
    runs = tmp_path / "docs" / "study" / "runs"
    collect_runs(sweep, runs)
    assert (runs / "toy_fp32_cpu" / "full_learned" / "seed2" / "metrics.json").is_file()
    main([f"sweep={runs}"])
    assert (runs.parent / "report.csv").read_bytes() == (sweep / "report.csv").read_bytes()
    assert not (runs / "report.md").exists()


def test_without_the_reference_there_is_no_verdict(sweep):
    for seed in (1, 2, 3):
        (sweep / "full_sinusoidal" / f"seed{seed}" / "metrics.json").unlink()
    report = build_report(sweep / "full_learned", None, plans=PLANS)
    assert [row.get("verdict") for row in report.csv_rows] == [None]
    text = build_markdown(report)
    assert "test_2016_flickr)?** (experiment=toy, fp32 on cpu) Not run." in text
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
        build_report(tmp_path / "missing", "test", plans=PLANS)


CPU = {"experiment": "study_cpu", "precision": "fp32", "device": "cpu"}  # the planned protocol


def add_cpu_runs(sweep, arms: tuple[str, ...], seeds: tuple[int, ...]) -> None:
    """Runs of `arms` in experiment=study_cpu beside the sweep's runs, 1 BLEU apart per arm."""
    for i, arm in enumerate(arms):
        for seed in seeds:
            bleu = 30.0 - 3 * i + seed / 10
            write_run(sweep / "cpu" / arm / f"seed{seed}", arm, seed, CPU, bleu)


def test_runs_of_two_protocols_are_never_paired(sweep):
    add_cpu_runs(sweep, ("full_sinusoidal", "full_learned", "full_rope"), seeds=(1, 2, 3))
    report = build_report(sweep, None, plans=PLANS)
    for answer in report.answers:
        for c in answer.comparisons:
            assert c.system.protocol == c.reference.protocol == answer.protocol
    q1 = [a for a in report.answers if a.family.question == "Q1"]
    assert [(a.protocol.name, a.size, a.alpha) for a in q1] == [
        ("study_cpu", 2, 0.025),  # the plan's look 1: its m and its alpha
        ("toy_fp32_cpu", 2, 0.05),
    ]
    [cpu_learned] = [r for r in csv_rows(report, "full_learned") if r["protocol"] == "study_cpu"]
    assert cpu_learned["difference"] == pytest.approx(-3.0)
    assert cpu_learned["planned_seeds"] == "1 2 3" and cpu_learned["alpha"] == 0.025
    text = build_markdown(report)
    heading = "### Q1 (look 1), experiment=study_cpu, fp32 on a 2-core CPU: Holm over 2 comparisons"
    assert heading + " at 0.025 (as planned)" in text
    assert "(Q1 and Q2 of experiment=study_cpu, fp32 on a 2-core CPU at 0.025 as planned)" in text
    # a family without runs is said "not run" for the first protocol only (here study_cpu's plan)
    assert "**Q4. Where do positions matter" not in text


def test_a_planned_family_waits_for_all_its_seeds(sweep):
    add_cpu_runs(sweep, ("full_sinusoidal", "full_learned"), seeds=(1, 2))
    report = build_report(sweep, None, plans=PLANS)
    [q1] = [
        a for a in report.answers if a.protocol.name == "study_cpu" and a.family.question == "Q1"
    ]
    assert not q1.complete and all(c.verdict is None for c in q1.comparisons)
    records = [q1.record(c) for c in q1.comparisons]
    assert [r["verdict"] for r in records] == [
        "waiting: 2 of 3 planned seeds in",
        "waiting: 0 of 3 planned seeds in",
    ]
    rope = [r for r in report.csv_rows if r.get("comparison") == "full_rope vs full_sinusoidal"]
    assert [(r["protocol"], r["verdict"]) for r in rope] == [
        ("toy_fp32_cpu", "equivalent"),
        ("study_cpu", "waiting: 0 of 3 planned seeds in"),  # a row though full_rope has no runs
    ]
    text = build_markdown(report)
    line = next(line for line in text.splitlines() if line.startswith("**Q1, look 1."))
    assert "to be tested: Holm over 2 at 0.025 (as planned)" in line
    assert "Waiting for planned seeds, as estimates: full_learned vs full_sinusoidal -3.00" in line


def test_each_answer_says_how_many_of_its_runs_stopped_at_a_cap(sweep):
    for seed, cap in ((1, "max_minutes"), (2, "max_minutes"), (1, "max_steps")):
        arm = "length_learned" if cap == "max_minutes" else "control_sinusoidal"
        path = sweep / arm / f"seed{seed}" / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["stop_reason"] = f"trainer.{cap} reached"
        path.write_text(json.dumps(metrics))
    text = build_markdown(build_report(sweep, None, plans=PLANS))
    q1 = next(line for line in text.splitlines() if line.startswith("**Q1."))
    assert q1.endswith("None of the 9 runs this family rests on stopped at a cap.")
    q5 = next(line for line in text.splitlines() if line.startswith("**Q5."))
    assert q5.endswith(
        "2 of the 6 runs this family rests on stopped at trainer.max_minutes and 1 at "
        "trainer.max_steps, not by patience."
    )


def test_a_protocol_planned_after_its_data_has_exploratory_verdicts(tmp_path):
    study = {"experiment": "study", "precision": "bf16", "device": "cuda"}
    for arm in ("full_sinusoidal", "full_learned", "full_rope"):
        for seed in (1, 2, 3):
            write_run(tmp_path / "sweep" / arm / f"seed{seed}", arm, seed, study)
    report = build_report(tmp_path / "sweep", None, plans=PLANS)
    unplanned = {a.exploratory for a in report.answers if not a.family.planned}
    assert unplanned == {"plan written after the data"}
    assert not any(a.exploratory for a in report.answers if a.family.planned)
    text = build_markdown(report)
    assert "Holm over 2 comparisons at 0.05; exploratory (plan written after the data)" in text
    q1 = next(line for line in text.splitlines() if line.startswith("**Q1."))
    assert "Holm over 2 at 0.05; exploratory (plan written after the data))" in q1
    assert "**Exploratory**: experiment=study, bf16 on one NVIDIA H100" in text
    assert "unadjusted 95% CI" in text and "one chain per claim type" in text


def test_an_arm_no_question_covers_is_compared_on_all_its_paired_seeds_naming_the_unpaired(
    tmp_path,
):
    study = {"experiment": "study", "precision": "bf16", "device": "cuda"}
    bleu = {"full_sinusoidal": [30.0, 32.0, 31.0, 30.5], "fairseq_learned": [29, 31, 30, 29, 30]}
    for arm, scores in bleu.items():
        for seed, score in enumerate(scores, start=1):
            write_run(tmp_path / "sweep" / arm / f"seed{seed}", arm, seed, study, score)
    report = build_report(tmp_path / "sweep", None, plans=PLANS)
    (other,) = [a for a in report.answers if a.family.question == "Other arms"]
    (comparison,) = other.tested
    assert comparison.seeds == [1, 2, 3, 4]  # not only the seeds the study's questions saw (1-3)
    assert comparison.unpaired == {"fairseq_learned": [5]}
    assert "unpaired, left out: fairseq_learned (5)" in build_markdown(report)


NOISE = [0.3, -0.4, 0.1, 0.5, -0.2, 0.4, -0.5, 0.2]  # a seed's BLEU noise, arms offset in it


def write_q8_runs(sweep: Path, bleu: dict[tuple[str, int], float]) -> None:
    """Runs of experiment=study_cpu scoring bleu[arm, seed] on Q8's endpoint (pooled_long)."""
    protocol = {"experiment": "study_cpu", "precision": "fp32", "device": "cpu"}
    for (arm, seed), score in bleu.items():
        run = sweep / arm / f"seed{seed}"
        write_run(run, arm, seed, protocol, score)
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["test"]["pooled_long"] = metrics["test"]["test"]
        (run / "metrics.json").write_text(json.dumps(metrics))


Q8_ARMS = {"length_sinusoidal": 0.0, "length_rms_learned": 0.2, "length_rope": 0.5}
Q8_ARMS["length_alibi"] = -0.3  # each arm's shift from 25 BLEU, before a seed's noise


def q8_bleu(seeds_of: dict[str, range]) -> dict[tuple[str, int], float]:
    return {
        (arm, seed): 25.0 + Q8_ARMS[arm] + NOISE[(seed + len(arm)) % 8]
        for arm, seeds in seeds_of.items()
        for seed in seeds
    }


def test_a_group_sequential_family_stops_arms_at_their_look_and_gives_the_next_command(tmp_path):
    """Q8 of experiment=study_cpu at 8 seeds (looks at 4, 8, 12): rope far ahead stops at look
    2, learned level with sinusoidal but noisy continues, and the next look runs
    seeds 29-32 of the reference and the arms still open."""
    shift = {"length_sinusoidal": 0.0, "length_rms_learned": 0.0, "length_rope": 3.0}
    shift["length_alibi"] = 0.4
    bleu = {}
    for arm, delta in shift.items():
        for k, seed in enumerate(range(21, 29)):
            spread = {"length_sinusoidal": 0.0, "length_rms_learned": 3.0}.get(arm, 1.0)
            bleu[arm, seed] = 25.0 + delta + spread * NOISE[(k + len(arm)) % 8]
    write_q8_runs(tmp_path / "sweep", bleu)
    report = build_report(tmp_path / "sweep", None, plans=PLANS)
    (q8,) = [a for a in report.answers if a.family.question == "Q8"]
    assert q8.looks_analysed == 2
    verdicts = {c.test.system: c.verdict for c in q8.tested}
    assert verdicts["length_rope"].verdict == "better"
    assert verdicts["length_rope"].reason.startswith("stopped at look 2")
    assert "difference at 0.0167 (t boundary 4.65)" in verdicts["length_rope"].reason
    assert verdicts["length_rms_learned"].verdict == "continue"
    command = q8.next_look_command()
    assert "'trainer.seed=range(29,33)'" in command and "sweep=length_split" in command
    assert "arm=length_sinusoidal,length_rms_learned" in command and "length_rope" not in command
    text = build_markdown(report)
    assert "Looks analysed: 2 of 3." in text and command in text
    assert "**Q8, look 2. " in text and "### Q8 (look 2), " in text


def test_a_group_sequential_family_between_looks_reports_its_last_look_on_that_looks_seeds(
    tmp_path,
):
    """Look 1 (seeds 21-24) in, and half of look 2's runs: the verdicts and every row stay on
    seeds 21-24, the runs in since wait for look 2."""
    seeds_of = {arm: range(21, 25) for arm in Q8_ARMS}
    seeds_of |= {"length_sinusoidal": range(21, 29), "length_rms_learned": range(21, 29)}
    write_q8_runs(tmp_path / "sweep", q8_bleu(seeds_of))
    report = build_report(tmp_path / "sweep", None, plans=PLANS)
    (q8,) = [a for a in report.answers if a.family.question == "Q8"]
    assert q8.looks_analysed == 1 and q8.look == 1
    assert {c.verdict.verdict for c in q8.tested} == {"continue"}
    assert all(c.seeds == [21, 22, 23, 24] for c in q8.comparisons)
    text = build_markdown(report)
    assert "**Q8, look 1. " in text and "; 4 seeds; group-sequential" in text
    assert "'trainer.seed=range(25,29)'" in q8.next_look_command()


def test_a_group_sequential_family_before_its_first_look_gives_estimates(tmp_path):
    write_q8_runs(tmp_path / "sweep", q8_bleu({arm: range(21, 24) for arm in Q8_ARMS}))
    report = build_report(tmp_path / "sweep", None, plans=PLANS)
    (q8,) = [a for a in report.answers if a.family.question == "Q8"]
    assert q8.looks_analysed == 0 and q8.look == 0
    assert all(c.verdict is None and c.seeds == [21, 22, 23] for c in q8.comparisons)
    text = build_markdown(report)
    assert "**Q8, before its first look. " in text and "Looks analysed: 0 of 3." in text
