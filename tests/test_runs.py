"""A run's configuration is the arm it recorded, split by any other setting its runs differ in;
collected runs are kept as data."""

import hashlib
import json
import logging

import pytest
from omegaconf import OmegaConf

from minimt.data.multi30k import MULTI30K_URL
from minimt.study.evidence import PINS, archive_of, read_archive
from minimt.study.runs import load_sweep
from scripts.collect_runs import collect_runs, main


def saved_config(pe: str = "sinusoidal", seed: int = 1, lr: float = 1e-3) -> dict:
    return {
        "pe": {"encoder": pe, "decoder": pe},
        "embedding": {"scale": True, "share": "all", "init_std": None},
        "trainer": {"seed": seed, "lr": lr, "max_minutes": 10.0 * seed},
        "data": {"dir": f"data{seed}"},
    }


def write_run(run_dir, seed: int, pe: str = "sinusoidal", arm: str | None = None, **config):
    run_dir.mkdir(parents=True)
    choices = {"experiment": "toy", "pe": pe} | ({"arm": arm} if arm else {})
    metrics = {
        "config": saved_config(pe, seed, **config),
        "choices": choices,
        "precision": "fp32",
        "device": "cpu",
        "test": {"test": {"bleu": 30.0}},
        "val_history": [{"step": 10, "bleu": 1.0, "loss": 5.0}],
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    (run_dir / "hyps.test.txt").write_text("a dog\nthe cat\n")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"weights")


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    for seed in (1, 2):
        write_run(root / f"learned/seed{seed}", seed, "learned", arm="full_learned")
        write_run(root / f"sinusoidal/seed{seed}", seed, arm="full_sinusoidal")
    (root / "sinusoidal/seed3" / ".hydra").mkdir(parents=True)  # never finished
    return root


def names(runs) -> list[tuple[str, int]]:
    return [(run.configuration.name, run.seed) for run in runs]


def test_a_run_is_named_by_its_arm_whatever_its_seed_caps_and_data_folder(sweep):
    runs, skipped = load_sweep(sweep)
    assert names(runs) == [
        ("full_learned", 1),
        ("full_learned", 2),
        ("full_sinusoidal", 1),
        ("full_sinusoidal", 2),
    ]
    assert skipped == [(sweep / "sinusoidal/seed3", "no metrics.json (failed or unfinished)")]
    assert {run.configuration.protocol.name for run in runs} == {"toy_fp32_cpu"}


def test_runs_without_an_arm_are_named_by_the_settings_that_tell_them_apart(tmp_path):
    for seed in (1, 2):
        for pe in ("sinusoidal", "learned"):
            write_run(tmp_path / f"{pe}-{seed}", seed, pe)  # choices.pe, pe.encoder, pe.decoder
        write_run(tmp_path / f"lr-{seed}", seed, lr=3e-3)
    runs, _ = load_sweep(tmp_path)
    assert sorted(set(run.configuration.name for run in runs)) == [
        "pe=learned trainer.lr=0.001",
        "pe=sinusoidal trainer.lr=0.001",
        "pe=sinusoidal trainer.lr=0.003",
    ]


def test_an_arm_run_with_another_setting_is_a_configuration_of_its_own(tmp_path):
    write_run(tmp_path / "a", 1, arm="full_sinusoidal")
    write_run(tmp_path / "b", 1, arm="full_sinusoidal", lr=3e-3)
    runs, skipped = load_sweep(tmp_path)
    assert sorted(names(runs)) == [
        ("full_sinusoidal trainer.lr=0.001", 1),
        ("full_sinusoidal trainer.lr=0.003", 1),
    ]
    assert skipped == []


def test_a_key_set_to_null_and_a_key_not_there_are_the_same_setting(tmp_path):
    write_run(tmp_path / "a", 1, arm="full_sinusoidal")
    write_run(tmp_path / "b", 2, arm="full_sinusoidal")
    path = tmp_path / "b" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["config"]["trainer"]["retired_option"] = None  # a later commit's extra null key
    path.write_text(json.dumps(metrics))
    runs, _ = load_sweep(tmp_path)
    assert names(runs) == [("full_sinusoidal", 1), ("full_sinusoidal", 2)]


def test_runs_scored_on_more_test_sets_are_runs_of_the_same_configuration(tmp_path):
    write_run(tmp_path / "a", 1, arm="full_sinusoidal")
    write_run(tmp_path / "b", 2, arm="full_sinusoidal")
    path = tmp_path / "b" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["config"]["data"]["test_sets"] = ["test_2016_flickr", "test_2017_flickr"]
    path.write_text(json.dumps(metrics))
    runs, _ = load_sweep(tmp_path)
    assert names(runs) == [("full_sinusoidal", 1), ("full_sinusoidal", 2)]


def test_collect_runs_copies_metrics_config_and_hypotheses(sweep, tmp_path):
    dest = tmp_path / "runs"
    done = collect_runs(sweep, dest)
    assert sorted((p.relative_to(dest).as_posix(), s) for p, s in done) == [
        ("toy_fp32_cpu/full_learned/seed1", "copied"),
        ("toy_fp32_cpu/full_learned/seed2", "copied"),
        ("toy_fp32_cpu/full_sinusoidal/seed1", "copied"),
        ("toy_fp32_cpu/full_sinusoidal/seed2", "copied"),
    ]
    kept = dest / "toy_fp32_cpu/full_learned/seed2"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "metrics.json"]
    hyps = (sweep / "learned/seed2" / "hyps.test.txt").read_bytes()
    archive = read_archive(archive_of(kept))
    assert archive == {"seed1/hyps.test.txt": b"a dog\nthe cat\n", "seed2/hyps.test.txt": hyps}
    source = json.loads((sweep / "learned/seed2" / "metrics.json").read_text())
    assert json.loads((kept / "metrics.json").read_text()) == source | {
        PINS: {"hyps.test.txt": hashlib.sha256(hyps).hexdigest()}
    }
    config = OmegaConf.load(kept / "config.yaml")
    assert config.pe.encoder == "learned" and config.trainer.seed == 2
    assert names(load_sweep(dest)[0]) == names(load_sweep(sweep)[0])


def test_collect_runs_is_idempotent_and_replaces_a_run_that_differs(sweep, tmp_path, caplog):
    dest = tmp_path / "runs"
    collect_runs(sweep, dest)
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert {s for _, s in collect_runs(sweep, dest)} == {"unchanged"}
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    (sweep / "learned/seed1" / "hyps.test.txt").write_text("a cat\nthe dog\n")
    with caplog.at_level(logging.WARNING):
        statuses = dict(collect_runs(sweep, dest))
    kept = dest / "toy_fp32_cpu/full_learned/seed1"
    assert statuses[kept] == "replaced" and "differs" in caplog.text
    assert read_archive(archive_of(kept))["seed1/hyps.test.txt"] == b"a cat\nthe dog\n"
    recorded = json.loads((kept / "metrics.json").read_text())
    assert recorded[PINS] == {"hyps.test.txt": hashlib.sha256(b"a cat\nthe dog\n").hexdigest()}


def test_collecting_into_runs_kept_before_the_archive_moves_their_hypotheses_into_it(
    sweep, tmp_path
):
    dest = tmp_path / "runs"
    collect_runs(sweep, dest)
    kept = dest / "toy_fp32_cpu/full_learned/seed1"
    (kept / "hyps.test.txt").write_text("a dog\nthe cat\n")  # the layout before the archive
    archive_of(kept).unlink()
    assert dict(collect_runs(sweep, dest))[kept] == "replaced"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "metrics.json"]
    assert read_archive(archive_of(kept))["seed1/hyps.test.txt"] == b"a dog\nthe cat\n"
    assert {s for _, s in collect_runs(sweep, dest)} == {"unchanged"}


def test_collected_records_name_no_machines_paths(tmp_path):
    project = tmp_path / "checkout"
    project.mkdir()
    (project / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    run_dir = project / "multirun/study/toy/seed1"
    write_run(run_dir, 1, arm="full_sinusoidal")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["config"]["data"] = {"name": "multi30k", "url": "/mnt/corpora/multi30k", "dir": "/x/d"}
    metrics["config"]["resume"] = str(run_dir)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")

    dest = tmp_path / "runs"
    ((kept, status),) = collect_runs(project / "multirun", dest)
    recorded = json.loads((kept / "metrics.json").read_text())
    assert status == "copied" and recorded["config"]["data"] == {
        "name": "multi30k",
        "url": MULTI30K_URL,  # pinned by SHA-256: the folder it was read from says nothing
        "dir": "/x/d",  # outside the project: as it was
    }
    assert recorded["config"]["resume"] == "multirun/study/toy/seed1"
    pinned = {PINS: {"hyps.test.txt": hashlib.sha256(b"a dog\nthe cat\n").hexdigest()}}
    assert recorded | {"config": metrics["config"]} == metrics | pinned  # nothing else changed
    assert OmegaConf.to_container(OmegaConf.load(kept / "config.yaml")) == recorded["config"]
    assert collect_runs(project / "multirun", dest) == [(kept, "unchanged")]


def test_two_runs_of_one_configuration_and_seed_keep_the_first(sweep):
    write_run(sweep / "z_again", 1, "learned", arm="full_learned")
    runs, skipped = load_sweep(sweep)
    assert len(runs) == 4
    assert (sweep / "z_again", "same configuration and seed as learned/seed1") in skipped


def test_the_script_prints_each_run_and_refuses_a_missing_sweep(sweep, tmp_path, capsys):
    main([f"sweep={sweep}", f"dest={tmp_path / 'runs'}"])
    assert capsys.readouterr().out.count("copied") == 4
    with pytest.raises(SystemExit, match="is not a directory"):
        main([f"sweep={tmp_path / 'missing'}"])
