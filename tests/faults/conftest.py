"""What the fault tests share: a tiny trained run to stop or fail scripts on, a sweep of two
finished runs, a source file. Each module trains its own run, so no test reads a run another
process is writing into."""

from pathlib import Path

import pytest

from minimt.train.loop import train
from tests.helpers import compose_config, tiny_run_overrides, write_run

SOURCES, REFERENCES = "Ein Hund rennt.\nZwei Männer spielen.\n", "A dog runs.\nTwo men play.\n"


@pytest.fixture(scope="module")
def run(multi30k_dir, tmp_path_factory) -> Path:
    """A run of 10 steps with step_5.pt and step_10.pt, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("tiny")
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, root / "data", "trainer.max_steps=10", "views=false"),
        "trainer.save_every=5",
    )
    train(cfg, root / "run", [])
    return root / "run"


@pytest.fixture(scope="module")
def trained(multi30k_dir, tmp_path_factory) -> Path:
    """A tiny run (step_2.pt, step_4.pt, best.pt) and a sweep of two finished runs beside it."""
    root = tmp_path_factory.mktemp("faults")
    overrides = tiny_run_overrides(multi30k_dir, root / "data", "views=false")
    cfg = compose_config(*overrides, "trainer.max_steps=4", "trainer.save_every=2")
    train(cfg, root / "run", [])
    (root / "src.de").write_text(SOURCES)
    (root / "ref.en").write_text(REFERENCES)
    for seed in (1, 2):
        write_run(root / "sweep" / f"seed{seed}", "full_sinusoidal", seed)
    return root


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two finished runs of one configuration, as training leaves them."""
    for seed in (1, 2):
        write_run(tmp_path / "sweep" / f"seed{seed}", "full_sinusoidal", seed)
    return tmp_path / "sweep"


@pytest.fixture
def sources(tmp_path) -> Path:
    path = tmp_path / "src.de"
    path.write_text("Ein Hund rennt.\nZwei Katzen schlafen.\n")
    return path
