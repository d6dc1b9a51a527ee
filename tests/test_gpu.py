"""The GPU path against the CPU one: a bf16 step with fused Adam, a step that never waits for
the GPU, fused attention kernels, decoding and exact resume on CUDA (`pytest -m gpu`; skipped
without a CUDA device).

The non-finite steps on CUDA are tested with the CPU ones (tests/test_resume.py)."""

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import pytest
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from minimt.data.batching import Batch
from minimt.model.search import beam_search, greedy_decode
from minimt.train.loop import train
from minimt.train.step import build_training, train_step
from tests.helpers import ON_CUDA, collate, compose_config
from tests.test_beam import SPECIALS, random_model
from tests.test_decoding import ENCODINGS, REVERSAL_SOURCES, SOURCES, pad_batch, reversal_model
from tests.test_resume import final_weights, tiny_run_config

pytestmark = ON_CUDA
CUDA = torch.device("cuda")


def random_batch(seed: int, vocab: int = 40, pairs: int = 8) -> Batch:
    """`pairs` random pairs of 3 to 11 ids each (ids >= 3: no special tokens)."""
    g = torch.Generator().manual_seed(seed)

    def sentence() -> list[int]:
        length = int(torch.randint(3, 12, (), generator=g))
        return torch.randint(3, vocab, (length,), generator=g).tolist()

    return collate([sentence() for _ in range(pairs)], [sentence() for _ in range(pairs)])


def per_token_losses(device: torch.device, precision: str, steps: int = 4) -> list[float]:
    """Mean loss of each of `steps` training steps, as train() takes them on `device`, of a
    small model (3+3 layers, d_model 32) from one seed; lr 1e-2 from the first update on.
    Asserts that the precision resolves to bf16 on CUDA, fp32 on the CPU."""
    cfg = compose_config(
        "model.d_model=32",
        "model.d_ff=64",
        "model.dropout=0.0",
        f"trainer.precision={precision}",
        "trainer.lr=1e-2",
        "trainer.warmup_steps=1",
    )
    torch.manual_seed(0)
    training = build_training(cfg, 40, 40, device)
    assert training.precision == ("bf16" if device.type == "cuda" else "fp32")
    losses = []
    for step in range(steps):
        batch = random_batch(step).to(device)
        tokens = batch.num_tgt_tokens
        loss_sum, _, applied = train_step(
            training.loss_fn,
            [batch],
            1 / tokens,
            training.optimizer,
            training.scheduler,
            cfg.trainer.clip_grad_norm,
            host_check=device.type != "cuda",
        )
        assert bool(applied)
        losses.append(float(loss_sum) / tokens)
    return losses


def test_bf16_steps_with_fused_adam_on_cuda_match_fp32_steps_on_cpu():
    # precision auto resolves to bf16 on a GPU; adam_impl is fused by default
    on_cuda = per_token_losses(CUDA, "auto")
    on_cpu = per_token_losses(torch.device("cpu"), "fp32")
    assert on_cuda[-1] < on_cuda[0] - 0.3  # the updates were applied (lr 1e-2: 4.5 -> 3.7)
    # bf16 keeps 8 bits of mantissa; bf16 vs fp32 on CPU differ by < 1e-3 here
    assert on_cuda == pytest.approx(on_cpu, rel=1e-2)


@contextmanager
def syncs_raise() -> Iterator[None]:
    """Any operation that makes the host wait for the GPU raises RuntimeError inside."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


class SyncFreeLoss(nn.Module):
    """A loss of one parameter with no waits of its own, so that only train_step's waits show
    and a skipped update is visible in Adam's step count."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, device=CUDA))

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        """(B, S) src -> scalar."""
        return (self.weight * src[:, :3]).square().sum()


def test_a_training_step_on_cuda_never_waits_for_the_gpu():
    loss_fn = SyncFreeLoss()
    optimizer = torch.optim.Adam(loss_fn.parameters(), lr=1e-2, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batch = random_batch(0).to(CUDA)
    applied = []
    with syncs_raise():
        for scale in (1.0, math.nan, 1.0):  # the NaN step is skipped on the device
            _, _, ok = train_step(loss_fn, [batch], scale, optimizer, scheduler, 1.0, False)
            applied.append(ok)
    assert [bool(ok) for ok in applied] == [True, False, True]
    assert optimizer.state[loss_fn.weight]["step"] == 2
    with syncs_raise(), pytest.raises(RuntimeError, match="synchroniz"):
        train_step(loss_fn, [batch], 1.0, optimizer, scheduler, 1.0, host_check=True)


@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "rope", "alibi"])
def test_the_configured_training_step_on_cuda_never_waits_for_the_gpu(pe):
    """The model's forward and backward, the label-smoothed loss on the real target positions
    (Batch.real), clipping and fused Adam: queued without a host sync (after one warm-up step,
    which may initialise kernels)."""
    cfg = compose_config(f"pe={pe}", "model.d_model=64", "model.d_ff=128")
    training = build_training(cfg, 40, 40, CUDA)
    results = []
    for seed in range(3):
        batch = random_batch(seed).to(CUDA)
        with syncs_raise() if seed else nullcontext():
            results.append(
                train_step(
                    training.loss_fn,
                    [batch],
                    1e-2,
                    training.optimizer,
                    training.scheduler,
                    1.0,
                    host_check=False,
                )
            )
    assert all(bool(applied) and torch.isfinite(loss) for loss, _, applied in results)


def test_compiled_steps_match_eager_steps():
    """trainer.compile: the loss compiled with dynamic shapes takes the steps of the eager loss
    on batches of differing shapes, up to bf16 rounding."""
    losses = {}
    for compiled in (False, True):
        cfg = compose_config(
            "model.d_model=32",
            "model.d_ff=64",
            "model.dropout=0.0",
            "trainer.lr=1e-2",
            "trainer.warmup_steps=1",
            f"trainer.compile={str(compiled).lower()}",
        )
        torch.manual_seed(0)
        training = build_training(cfg, 40, 40, CUDA)
        losses[compiled] = []
        for step in range(6):
            batch = random_batch(step % 3).to(CUDA)
            loss_sum, _, applied = train_step(
                training.loss_fn,
                [batch],
                1 / batch.num_tgt_tokens,
                training.optimizer,
                training.scheduler,
                1.0,
                host_check=False,
            )
            assert bool(applied)
            losses[compiled].append(float(loss_sum) / batch.num_tgt_tokens)
    assert losses[True][-1] < losses[True][0] - 0.3
    assert losses[True] == pytest.approx(losses[False], rel=2e-2)


@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "rope", "alibi"])
def test_attention_runs_on_fused_kernels_on_cuda(pe):
    """Training and cached decoding find a flash or memory-efficient SDPA kernel for every
    attention call (padding masks, causal, ALiBi's float bias): without one SDPA raises."""
    cfg = compose_config(f"pe={pe}", "model.d_model=64", "model.d_ff=128")
    training = build_training(cfg, 40, 40, CUDA)
    batch = random_batch(0).to(CUDA)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        loss_sum, _, applied = train_step(
            training.loss_fn, [batch], 1e-2, training.optimizer, training.scheduler, 1.0, False
        )
        model = training.model.eval()
        with training.autocast:
            hyps = greedy_decode(model, batch.src, **SPECIALS)
    assert bool(applied) and torch.isfinite(loss_sum) and len(hyps) == batch.src.size(0)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cached_greedy_equals_full_recomputation_on_cuda(encoding):
    model = random_model(0, **encoding).to(CUDA)
    src = pad_batch(SOURCES).to(CUDA)
    cached = greedy_decode(model, src, **SPECIALS)
    assert cached == greedy_decode(model, src, **SPECIALS, use_cache=False)


def test_cached_greedy_under_bf16_on_cuda_reverses_as_on_cpu():
    model = copy.deepcopy(reversal_model()).to(CUDA)  # the shared model stays on the CPU
    src = pad_batch(REVERSAL_SOURCES).to(CUDA)
    with torch.autocast("cuda", torch.bfloat16):
        cached = greedy_decode(model, src, **SPECIALS)
        full = greedy_decode(model, src, **SPECIALS, use_cache=False)
    assert cached == full == [list(reversed(s)) for s in REVERSAL_SOURCES]


@pytest.mark.parametrize(
    ("make_model", "sources"),
    [(lambda: random_model(0), SOURCES), (reversal_model, REVERSAL_SOURCES)],
    ids=["random", "reversal"],
)
def test_beam_search_on_cuda_finds_the_cpu_s_hypotheses(make_model, sources):
    # on the CPU the three hypotheses' scores lie >= 0.0078 apart: fp32 rounding cannot swap them
    model = make_model()
    on_cpu = beam_search(model, pad_batch(sources), beam=3, n_best=3, **SPECIALS)
    on_cuda = beam_search(
        copy.deepcopy(model).to(CUDA), pad_batch(sources).to(CUDA), beam=3, n_best=3, **SPECIALS
    )
    for cpu_hyps, cuda_hyps in zip(on_cpu, on_cuda, strict=True):
        assert [h.tokens for h in cuda_hyps] == [h.tokens for h in cpu_hyps]
        assert [h.score for h in cuda_hyps] == pytest.approx([h.score for h in cpu_hyps], abs=1e-4)


@pytest.mark.slow
def test_a_resumed_run_on_cuda_ends_with_the_parameters_of_an_uninterrupted_one(
    multi30k_dir, tmp_path
):
    """tests/test_resume.py's exact resume, on CUDA (fp32): equal up to rounding, since some
    CUDA kernels (memory-efficient attention's backward) sum in an order that varies by run."""
    data, cuda = tmp_path / "data", "trainer.device=cuda"
    straight = train(
        tiny_run_config(multi30k_dir, data, cuda, "trainer.max_steps=30"), tmp_path / "a"
    )
    train(tiny_run_config(multi30k_dir, data, cuda, "trainer.max_steps=15"), tmp_path / "b")
    resumed = train(
        tiny_run_config(
            multi30k_dir, data, cuda, "trainer.max_steps=30", f"resume={tmp_path / 'b'}"
        ),
        tmp_path / "b",
    )
    assert resumed["steps"] == straight["steps"] == 30
    assert resumed["device"] == torch.cuda.get_device_name() != "cuda"
    assert resumed["tgt_tokens"] == straight["tgt_tokens"]
    expected, got = final_weights(tmp_path / "a", 30), final_weights(tmp_path / "b", 30)
    for name, tensor in expected.items():
        if name.endswith("k_proj.bias"):
            continue  # exact gradient 0: Adam scales rounding noise up (tests/test_distributed.py)
        # a lost RNG state, data position or schedule moves weights by about lr (1e-3 to 2e-3
        # at steps 15-30) per step
        assert torch.allclose(tensor, got[name], atol=5e-4), name
