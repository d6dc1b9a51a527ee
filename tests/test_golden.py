"""Golden runs: a few dozen fp32 updates of two configs must train exactly as recorded.

What this guards: the training numerics. A refactor of the model, the embeddings, the data
pipeline or the training loop that is meant to change nothing must leave every update's loss
and gradient norm as they were, bit for bit. That is also what lets a study grow: a seed added
to a study later must train as its first seeds did, so that its runs can be set beside theirs.
A change that moves one random draw (initial weights, dropout masks, batch shuffles) or
reorders one sum changes these numbers.

Each run drives the real training loop (minimt.train.loop.train) with the composed Hydra config
of an experiment (smoke, study_cpu): fp32 on one intra-op thread, trainer.seed=1, a small slice
of Multi30k. The loop's own train_step is wrapped to read each update's summed loss and
gradient norm.

The recorded values (tests/golden/golden_runs.json, float.hex strings) are keyed by the
machine's kernels: torch.backends.cpu.get_cpu_capability() (AVX512, AVX2, ...) and the CPU's
vendor, family and model, since the kernels sum in another order on each kernel set, and one
kernel set differs between CPUs too (an AMD EPYC's and an Intel Xeon's AVX512 values part in the
last bits). Where this machine's values were recorded with this torch version they must match
exactly; elsewhere they must match another machine's (the same capability's first) within a
relative tolerance, which a changed random draw or formula still exceeds. A failure says which
comparison applied. A CPU can also be held to another machine's values exactly, where it runs
the same kernels (an AVX512 CPU on its AVX2 kernels):
    ATEN_CPU_CAPABILITY=avx2 MINIMT_GOLDEN_AS="AVX2 AuthenticAMD 25/1" pytest tests/test_golden.py

Re-record, only after a change meant to change training (and say so in its commit), or to add
this machine's values (then check first that the tolerance comparison passes here):
    python tests/test_golden.py --record     # this machine's values; others are kept
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import minimt.train.loop as loop
from minimt.data.multi30k import local_path
from minimt.provenance import cpu_info

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden" / "golden_runs.json"
STEPS = 30

# Each config's overrides on top of its experiment: fp32 on one thread, a data slice and no
# validation before the end, no test sets and no study views (nothing after training counts).
COMMON = (
    "trainer.device=cpu",
    "trainer.precision=fp32",
    "trainer.seed=1",
    "trainer.num_threads=1",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every=100000",
    "trainer.save_every=100000",
    "trainer.log_every=100000",
    "data.max_val_pairs=4",
    "data.test_sets=[]",
    "views=false",
)
CONFIGS = {
    # the tiny model on 500 pairs: 14 updates an epoch, so 30 updates cross 2 reshuffles
    "smoke": ("experiment=smoke", *COMMON),
    # the tiny model with the encodings that draw from the RNG or act inside attention, untied
    "smoke_learned": ("experiment=smoke", "pe=learned", "pe.init_std=0.02", *COMMON),
    "smoke_rope_untied": ("experiment=smoke", "pe=rope", "embedding.share=none", *COMMON),
    "smoke_alibi": ("experiment=smoke", "pe=alibi", *COMMON),
    # the CPU study's model (d_model 128, 4 heads, 3+3 layers, dropout 0.1, ~2.4M parameters
    # with the joint 8k vocabulary) and optimizer settings on 3,000 pairs: 24 updates an epoch
    "study_cpu": ("experiment=study_cpu", "data.max_train_pairs=3000", *COMMON),
}

# Off this machine's recorded values (or torch version): other kernels sum in another order, so
# the values drift by float32 rounding, amplified over the updates. AVX2 kernels against AVX512
# values drifted by up to 4e-6 (loss) and 3e-4 (grad norm); one more random draw before
# training (dropout masks shifted) moved them by 2e-3 and 8e-3 or more. A reordered sum alone
# stays below these tolerances: only the exact comparison sees it.
LOSS_RTOL = 1e-4
GRAD_NORM_RTOL = 1e-3


def compose_config(*overrides: str) -> DictConfig:
    """The config `scripts/train.py` would see with these command-line overrides."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def golden_run(name: str, multi30k_dir: Path, work_dir: Path) -> dict[str, list[float]]:
    """Train config `name` for STEPS updates; each update's summed loss and gradient norm."""
    cfg = compose_config(
        *CONFIGS[name], f"data.url={multi30k_dir}", f"data.dir={work_dir / 'data'}"
    )
    losses, grad_norms = [], []
    real_step = loop.train_step

    def recording_step(*args, **kwargs):
        loss_sum, grad_norm, applied = real_step(*args, **kwargs)
        losses.append(float(loss_sum))
        grad_norms.append(float(grad_norm))
        return loss_sum, grad_norm, applied

    threads = torch.get_num_threads()
    loop.train_step = recording_step
    try:
        loop.train(cfg, work_dir / "run")
    finally:
        loop.train_step = real_step
        torch.set_num_threads(threads)  # the run set one thread for the whole process
    assert len(losses) == STEPS, f"{name}: the loop took {len(losses)} updates, not {STEPS}"
    return {"loss": losses, "grad_norm": grad_norms}


def load_golden() -> dict:
    """{machine: {"torch": version, config name: {"loss": [hex], "grad_norm": [hex]}}}"""
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


def machine() -> str:
    """The recorded values' key: the CPU capability, then the vendor and family/model that
    /proc/cpuinfo gives, where it gives them: `AVX512 GenuineIntel 6/143`."""
    info = cpu_info()
    vendor, family, model = (info.get(key) for key in ("vendor_id", "cpu family", "model"))
    cpu = f" {vendor} {family}/{model}" if vendor and family and model else ""
    return torch.backends.cpu.get_cpu_capability() + cpu


def expected_values(name: str) -> tuple[bool, str, dict[str, list[float]]]:
    """Whether to compare exactly, which comparison applies (in words) and the values recorded
    for config `name`: this machine's when recorded with this torch version, else those of this
    machine or, without them, of another one (of this capability first, then in name order), to
    compare with a tolerance. MINIMT_GOLDEN_AS names a recorded machine this one is meant to
    train exactly as (another CPU on the same kernels, ATEN_CPU_CAPABILITY=avx2)."""
    golden, this_machine = load_golden(), machine()
    here = os.environ.get("MINIMT_GOLDEN_AS") or this_machine
    if here != this_machine and here not in golden:
        pytest.fail(f"MINIMT_GOLDEN_AS={here!r} has no values; recorded: {', '.join(golden)}")
    capability = here.split()[0]
    others = sorted((k for k in golden if k != here), key=lambda k: (k.split()[0] != capability, k))
    candidates = [here, *others]
    recorded_on = next((cap for cap in candidates if name in golden.get(cap, {})), None)
    if recorded_on is None:
        pytest.fail(
            f"no golden values for {name}; record them: python tests/test_golden.py --record"
        )
    recorded = golden[recorded_on]
    values = {key: [float.fromhex(v) for v in vs] for key, vs in recorded[name].items()}
    where = f"recorded on {recorded_on} with torch {recorded['torch']}"
    if recorded_on == here and recorded["torch"] == torch.__version__:
        return True, f"exact comparison: {where}, as here", values
    how = (
        f"tolerance comparison (loss rel. {LOSS_RTOL:g}, grad norm rel. {GRAD_NORM_RTOL:g}): "
        f"{where}, this is {here} with torch {torch.__version__}"
    )
    return False, how, values


def mismatches(got: dict[str, list[float]], expected: dict[str, list[float]], exact: bool):
    """(quantity, update, got, expected) for each value that differs (beyond the tolerance)."""
    rtol = {"loss": LOSS_RTOL, "grad_norm": GRAD_NORM_RTOL}
    found = []
    for key, values in expected.items():
        if len(got[key]) != len(values):
            found.append((key, "count", len(got[key]), len(values)))
            continue
        for step, (a, b) in enumerate(zip(got[key], values, strict=True), start=1):
            same = a == b if exact else math.isclose(a, b, rel_tol=rtol[key])
            if not same:
                found.append((key, step, a, b))
    return found


def largest_differences(got: dict[str, list[float]], expected: dict[str, list[float]]) -> str:
    """The largest relative difference of each quantity, e.g. `loss 2.1e-06, grad_norm 0`."""
    parts = []
    for key, values in expected.items():
        pairs = list(zip(got[key], values, strict=False))  # as many as both have
        diff = max((abs(a - b) / abs(b) if b else abs(a) for a, b in pairs), default=math.nan)
        parts.append(f"{key} {diff:.2g}")
    return ", ".join(parts)


@pytest.fixture(scope="module")
def golden_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden")


def test_golden_as_names_the_recorded_machine_to_match_exactly(monkeypatch):
    recorded = {"loss": [(1.5).hex()], "grad_norm": [(0.25).hex()]}
    golden = {"AVX2 AuthenticAMD 25/1": {"torch": torch.__version__, "smoke": recorded}}
    monkeypatch.setattr(sys.modules[__name__], "load_golden", lambda: golden)
    monkeypatch.setenv("MINIMT_GOLDEN_AS", "AVX2 AuthenticAMD 25/1")
    exact, how, values = expected_values("smoke")
    assert exact and how.startswith("exact comparison: recorded on AVX2 AuthenticAMD 25/1")
    assert values == {"loss": [1.5], "grad_norm": [0.25]}
    monkeypatch.setenv("MINIMT_GOLDEN_AS", "AVX2 GenuineIntel 6/85")
    with pytest.raises(pytest.fail.Exception, match="MINIMT_GOLDEN_AS='AVX2 GenuineIntel 6/85'"):
        expected_values("smoke")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_training_matches_the_golden_run(name, multi30k_dir, golden_dir):
    exact, how, expected = expected_values(name)
    got = golden_run(name, multi30k_dir, golden_dir / name)
    wrong = mismatches(got, expected, exact)
    lines = [f"  {key} update {step}: got {a!r}, recorded {b!r}" for key, step, a, b in wrong]
    assert not wrong, (
        f"{name}: {len(wrong)} values differ from the golden run ({how}); largest relative "
        f"differences: {largest_differences(got, expected)}\n" + "\n".join(lines[:10])
    )


def record(multi30k_dir: Path, work_dir: Path) -> None:
    """(Re)write this machine's values of every config; other machines' are kept."""
    golden = load_golden()
    here = golden[machine()] = {"torch": torch.__version__}
    for name in CONFIGS:
        values = golden_run(name, multi30k_dir, work_dir / name)
        here[name] = {key: [v.hex() for v in vs] for key, vs in values.items()}
        print(f"{machine()} {name}: {STEPS} updates, last loss {values['loss'][-1]!r}")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_golden.py --record")
    # where the multi30k_dir fixture (conftest.py) looks: $MINIMT_DATA_URL, else ../shared/data
    configured = os.environ.get("MINIMT_DATA_URL")
    data = local_path(configured) if configured else REPO.parent / "shared" / "data" / "multi30k"
    if data is None or not data.is_dir():
        sys.exit(f"Multi30k raw files not found in {data}: set MINIMT_DATA_URL to their folder")
    with tempfile.TemporaryDirectory() as tmp:
        record(data, Path(tmp))
