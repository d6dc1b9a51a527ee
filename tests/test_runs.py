"""A run's configuration from its saved config (old configs included), and runs kept as data."""

import json
import logging

import pytest
from omegaconf import OmegaConf

from minimt.study.runs import (
    Configuration,
    DataRegime,
    Embedding,
    collect_runs,
    configuration_of,
    load_sweep,
)
from scripts.collect_runs import main


def saved_config(pe="sinusoidal", share="all", data=None, **keys) -> dict:
    """A resolved config as metrics.json keeps it; `keys` are dotted overrides."""
    cfg = OmegaConf.create(
        {
            "pe": {"name": pe, "encoder": pe, "decoder": pe},
            "embedding": {"scale": True, "share": share, "init_std": None},
            "data": {"train_max_words": None, "long_tests_over": None, "train_subsample": None}
            | (data or {}),
            "trainer": {"seed": 1},
        }
    )
    for key, value in keys.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return OmegaConf.to_container(cfg)


def slug(**kwargs) -> str:
    return configuration_of(OmegaConf.create(saved_config(**kwargs))).slug


def test_slugs_name_the_regime_and_what_differs_from_the_baseline():
    assert slug() == "full-sinusoidal"
    words = {"train_max_words": 15, "long_tests_over": 15}
    assert slug(pe="alibi", data=words) == "length15-alibi"
    assert slug(embedding__scale=False, embedding__init_std=1.0) == "full-sinusoidal-unscaled-init1"
    assert slug(share="none") == "full-sinusoidal-share_none"
    assert slug(pe__decoder="none") == "full-enc_sinusoidal-dec_none"
    control = {"long_tests_over": 15, "train_subsample": 12000}
    assert slug(pe="learned", data=control) == "control15-learned"
    assert slug(data={"train_subsample": 500}) == "subsample500-sinusoidal"


def test_share_true_and_false_read_as_their_tying_levels():
    for share, level in ((True, "all"), (False, "decoder")):
        pe = {"name": "rope", "encoder": "rope", "decoder": "rope"}
        saved = {"pe": pe, "embedding": {"scale": False, "share": share, "init_std": None}}
        configuration = configuration_of(OmegaConf.create(saved))
        assert configuration == Configuration(
            DataRegime(None, None, None), Embedding("rope", "rope", False, level, None)
        )
    assert configuration.regime.slug == "full"
    assert configuration.slug == "full-rope-unscaled-share_decoder"


def test_each_regime_has_its_own_baseline_sorted_first():
    words = {"train_max_words": 15, "long_tests_over": 15}
    control = {"long_tests_over": 15, "train_subsample": 12000}
    configs = [
        configuration_of(OmegaConf.create(saved_config(pe=pe, data=data)))
        for data in (control, words, None)
        for pe in ("learned", "sinusoidal")
    ]
    ordered = sorted(configs, key=Configuration.sort_key)
    assert [c.slug for c in ordered] == [
        "full-sinusoidal",
        "full-learned",
        "length15-sinusoidal",
        "length15-learned",
        "control15-sinusoidal",
        "control15-learned",
    ]
    assert all(c.baseline.is_baseline and c.baseline.regime == c.regime for c in configs)
    assert ordered[3].baseline == ordered[2]
    assert "length split (<= 15 words)" in ordered[2].label
    assert "12,000 random pairs" in ordered[4].label


def write_run(run_dir, seed: int, pe: str = "sinusoidal", bleu: float = 30.0) -> None:
    run_dir.mkdir(parents=True)
    metrics = {
        "config": saved_config(pe=pe, trainer__seed=seed),
        "test": {"test": {"bleu": bleu}},
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
        write_run(root / f"pe=learned,seed={seed}", seed, "learned")
        write_run(root / f"pe=sinusoidal,seed={seed}", seed)
    (root / "pe=sinusoidal,seed=3" / ".hydra").mkdir(parents=True)  # never finished
    return root


def test_collect_runs_copies_metrics_config_and_hypotheses(sweep, tmp_path):
    dest = tmp_path / "runs"
    done = collect_runs(sweep, dest)
    assert sorted((p.relative_to(dest).as_posix(), s) for p, s in done) == [
        ("full-learned/seed1", "copied"),
        ("full-learned/seed2", "copied"),
        ("full-sinusoidal/seed1", "copied"),
        ("full-sinusoidal/seed2", "copied"),
    ]
    kept = dest / "full-learned" / "seed2"
    assert sorted(p.name for p in kept.iterdir()) == [
        "config.yaml",
        "hyps.test.txt",
        "metrics.json",
    ]
    assert (kept / "metrics.json").read_bytes() == (
        sweep / "pe=learned,seed=2" / "metrics.json"
    ).read_bytes()
    config = OmegaConf.load(kept / "config.yaml")
    assert config.pe.name == "learned" and config.trainer.seed == 2
    assert [(r.configuration.slug, r.seed) for r in load_sweep(dest).runs] == [
        ("full-learned", 1),
        ("full-learned", 2),
        ("full-sinusoidal", 1),
        ("full-sinusoidal", 2),
    ]


def test_collect_runs_is_idempotent_and_replaces_a_run_that_differs(sweep, tmp_path, caplog):
    dest = tmp_path / "runs"
    collect_runs(sweep, dest)
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert {s for _, s in collect_runs(sweep, dest)} == {"unchanged"}
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    (sweep / "pe=learned,seed=1" / "hyps.test.txt").write_text("a cat\nthe dog\n")
    with caplog.at_level(logging.WARNING):
        statuses = dict(collect_runs(sweep, dest))
    assert statuses[dest / "full-learned" / "seed1"] == "replaced"
    assert "differs" in caplog.text
    assert (dest / "full-learned" / "seed1" / "hyps.test.txt").read_text() == "a cat\nthe dog\n"


def test_two_runs_of_one_configuration_and_seed_keep_the_first(sweep):
    write_run(sweep / "z_again", 1, "learned")
    loaded = load_sweep(sweep)
    assert len(loaded.runs) == 4
    assert (sweep / "z_again", "same configuration and seed as pe=learned,seed=1") in loaded.skipped


def test_the_script_prints_each_run_and_refuses_a_missing_sweep(sweep, tmp_path, capsys):
    main([f"sweep={sweep}", f"dest={tmp_path / 'runs'}"])
    assert capsys.readouterr().out.count("copied") == 4
    with pytest.raises(SystemExit, match="is not a directory"):
        main([f"sweep={tmp_path / 'missing'}"])
