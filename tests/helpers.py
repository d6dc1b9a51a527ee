"""Shared test helpers: the real Hydra config, a tiny model, a script as a module, GPU marks."""

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, settings
from omegaconf import DictConfig

from minimt.data.batching import Batch, flat, flat_batch
from minimt.model.positions import as_factory
from minimt.model.transformer import Transformer

REPO = Path(__file__).resolve().parents[1]
OLD_RUNS = REPO / "tests" / "data" / "old_runs"  # a frozen run of every run format


def todays_frozen_run() -> Path:
    """The frozen run that today's code saved (the one with a starts.json)."""
    (run,) = [p for p in sorted(OLD_RUNS.glob("format_*")) if (p / "starts.json").is_file()]
    return run


# The marks of a test that needs a GPU: `pytest -m gpu` selects it, no CUDA device skips it.
ON_CUDA = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


ENV = os.environ | {"OMP_NUM_THREADS": "1", "MINIMT_ALLOCATOR": "system"}
ENV.pop("HYDRA_FULL_ERROR", None)


def run_script(script: str, *args: str, stdin: bytes = b"", **env: str):
    """Run REPO/scripts/<script> in a subprocess, one thread, stdin given, output captured."""
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args],
        input=stdin,
        capture_output=True,
        env=ENV | env,
        cwd=REPO,
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error: ...` line a failed script printed on stderr (progress bars aside)."""
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and stderr.endswith(errors[0] + "\n"), stderr
    return errors[0]


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings of a fuzz test: `examples` cases, the same on every run, in `make test`;
    20 times as many, freshly drawn, under `make fuzz` (MINIMT_FUZZ=long)."""
    long = os.environ.get("MINIMT_FUZZ") == "long"
    return settings(
        max_examples=examples * (20 if long else 1),
        derandomize=not long,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def compose_config(*overrides: str) -> DictConfig:
    """The config `scripts/train.py` would see with these command-line overrides."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def load_script(path: str) -> ModuleType:
    """The script at REPO/path imported by its file name, its folder on sys.path: how the
    scripts of one folder import each other (`from benchmark import ...`)."""
    file = REPO / path
    if str(file.parent) not in sys.path:
        sys.path.append(str(file.parent))
    module = importlib.import_module(file.stem)
    assert Path(module.__file__) == file, f"{file.stem} was imported from {module.__file__}"
    return module


def tiny_run_overrides(multi30k_dir, data_dir, *extra: str) -> list[str]:
    """experiment=smoke shrunk further: 300 pairs, d_model 32, fp32, no test sets, no validation
    before the end, a checkpoint every 10 steps."""
    return [
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={data_dir}",
        "data.max_train_pairs=300",
        "data.test_sets=[]",
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.precision=fp32",
        "trainer.val_every=1000",
        "trainer.log_every=5",
        "trainer.save_every=10",
        *extra,
    ]


def model_arguments(**overrides) -> dict:
    """Transformer keyword arguments beside the sizes, as the default config sets them but untied
    source and target tables; `positions` sets both sides' encoding, and a side's encoding may be
    a built-in name."""
    both = overrides.pop("positions", "sinusoidal")
    args = dict(
        dropout=0.1,
        attention_dropout=0.0,
        pad_id=0,
        norm_first=True,
        tie_output=True,
        src_positions=both,
        tgt_positions=both,
        scale_embedding=True,
        share_embeddings=False,
        init_std=None,
    )
    args |= overrides
    return args | {side: as_factory(args[side]) for side in ("src_positions", "tgt_positions")}


def tiny_transformer(vocab_size: int, seed: int = 0, **overrides) -> Transformer:
    """A seeded Transformer small enough for unit tests (d_model 16, 2+2 layers, no dropout)."""
    torch.manual_seed(seed)
    args = dict(
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_seq_len=72,
        pad_id=0,
        share_embeddings=True,
    )
    return Transformer(vocab_size, vocab_size, **model_arguments(**(args | overrides)))


def collate(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    """Add <eos>/<bos> and pad one batch of id lists (what BatchedPairs.collate does from Arrow)."""
    return flat_batch(flat(src_ids), flat(tgt_ids))


def causal_mask(n: int) -> torch.Tensor:
    """(n, n) bool, True on and below the diagonal: query i may attend to keys 0..i."""
    return torch.ones(n, n, dtype=torch.bool).tril()


def sweep_env() -> dict[str, str]:
    """The environment of a sweep started by a test: one thread per run, no allocator re-exec."""
    return os.environ | {"OMP_NUM_THREADS": "1", "MINIMT_ALLOCATOR": "system"}


def start_sweep(command: list[str]) -> subprocess.Popen:
    """Start a sweep's launcher in a session of its own (a signal to its group reaches only the
    sweep), its output and errors in one text stream."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=sweep_env(),
        start_new_session=True,
    )
