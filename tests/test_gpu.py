"""The GPU path against the CPU one: a bf16 step with fused Adam, a step that never waits for
the GPU, fused attention kernels, compiled steps and decoding on CUDA.

Every test runs on the CPU too, in `make test`: the same calls on the same code path, with the
CPU reference's own assertions; a step's waits for a GPU are seen there as host reads
(tests/host_reads.py). What only a GPU shows (syncs made in C++, fused attention kernels, bf16
numerics) is checked in the `cuda` cases, marked `gpu`: `pytest -m gpu` on a GPU, skipped
without a CUDA device. Exact resume and the non-finite steps on CUDA are tested with the CPU
ones (tests/test_resume.py)."""

import copy
import functools
import inspect
import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from itertools import pairwise

import pytest
import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from minimt.data.batching import Batch
from minimt.model.search import beam_search, greedy_decode
from minimt.train.step import SummedLoss, build_training, checks_on_host, train_step
from tests.helpers import (
    DEVICES,
    ENCODINGS,
    REVERSAL_SOURCES,
    SOURCES,
    SPECIALS,
    collate,
    compose_config,
    pad_batch,
    random_model,
    reversal_model,
)
from tests.host_reads import HostReads

CPU = torch.device("cpu")


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
    Asserts that the precision resolves to bf16 on CUDA, fp32 on the CPU, and that Adam is
    the fused kernel (trainer.adam_impl's default)."""
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
    assert training.optimizer.defaults["fused"]
    losses = []
    for step in range(steps):
        batch = random_batch(step).to(device)
        tokens = batch.num_tgt_tokens
        loss_sum, _, applied = train_step(
            training.loss_fn,
            [batch],
            scale=1 / tokens,
            optimizer=training.optimizer,
            scheduler=training.scheduler,
            clip_grad_norm=cfg.trainer.clip_grad_norm,
            host_check=checks_on_host(device),
        )
        assert bool(applied)
        losses.append(float(loss_sum) / tokens)
    return losses


@DEVICES
def test_fp32_steps_with_fused_adam_learn_on_cpu_and_bf16_ones_on_cuda_match_them(device):
    # precision auto resolves to bf16 on a GPU; the CPU runs the fp32 reference
    device = torch.device(device)
    losses = per_token_losses(device, "auto" if device.type == "cuda" else "fp32")
    assert losses[-1] < losses[0] - 0.3  # the updates were applied (lr 1e-2: 4.5 -> 3.7)
    if device.type == "cuda":
        # bf16 keeps 8 bits of mantissa; bf16 vs fp32 on CPU differ by < 1e-3 here
        assert losses == pytest.approx(per_token_losses(CPU, "fp32"), rel=1e-2)


@contextmanager
def no_host_waits(device: torch.device) -> Iterator[None]:
    """Raises RuntimeError ("...synchronize...") when anything inside makes the host wait for
    the GPU: on CUDA torch's sync debug mode sees every sync, those made in C++ included; on the
    CPU HostReads sees the calls from Python that would wait on a GPU."""
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return
    with HostReads() as reads:
        yield
    if reads.count:
        raise RuntimeError(f"host reads that would synchronize with a GPU: {dict(reads.calls)}")


class SyncFreeLoss(nn.Module):
    """A loss of one parameter with no waits of its own, so that only train_step's waits show
    and a skipped update is visible in Adam's step count. It takes its arguments by
    SummedLoss.forward's signature, so that it cannot drift from the loss train_step calls."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, device=device))

    def forward(self, *args: Tensor, **kwargs: Tensor) -> Tensor:
        """SummedLoss's arguments -> scalar, of (B, S) src alone."""
        src = inspect.signature(SummedLoss.forward).bind(self, *args, **kwargs).arguments["src"]
        return (self.weight * src[:, :3]).square().sum()


def sync_free_training(
    device: torch.device,
) -> tuple[SyncFreeLoss, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, Batch]:
    """SyncFreeLoss with fused Adam, a constant LR and one batch, on `device`."""
    loss_fn = SyncFreeLoss(device)
    optimizer = torch.optim.Adam(loss_fn.parameters(), lr=1e-2, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return loss_fn, optimizer, scheduler, random_batch(0).to(device)


@DEVICES
def test_a_training_step_skips_a_non_finite_update_without_waiting_for_the_gpu(device):
    device = torch.device(device)
    loss_fn, optimizer, scheduler, batch = sync_free_training(device)
    applied = []
    with no_host_waits(device):
        for scale in (1.0, math.nan, 1.0):  # the NaN step is skipped on the device
            _, _, ok = train_step(
                loss_fn,
                [batch],
                scale=scale,
                optimizer=optimizer,
                scheduler=scheduler,
                clip_grad_norm=1.0,
                host_check=False,
            )
            applied.append(ok)
    assert [bool(ok) for ok in applied] == [True, False, True]
    assert optimizer.state[loss_fn.weight]["step"] == 2


@DEVICES
def test_the_wait_check_catches_a_step_checked_on_the_host(device):
    """The check above is not vacuous: a step that reads its outcome on the host fails it."""
    device = torch.device(device)
    loss_fn, optimizer, scheduler, batch = sync_free_training(device)
    with pytest.raises(RuntimeError, match="synchroniz"), no_host_waits(device):
        train_step(
            loss_fn,
            [batch],
            scale=1.0,
            optimizer=optimizer,
            scheduler=scheduler,
            clip_grad_norm=1.0,
            host_check=True,
        )


@DEVICES
@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "rope", "alibi"])
def test_the_configured_training_step_never_waits_for_the_gpu(pe, device):
    """The model's forward and backward, the label-smoothed loss on the real target positions
    (Batch.nonpad_index), clipping and fused Adam with the check on the device: queued without a
    host sync (after one warm-up step, which may initialise kernels)."""
    device = torch.device(device)
    cfg = compose_config(f"pe={pe}", "model.d_model=64", "model.d_ff=128")
    training = build_training(cfg, 40, 40, device)
    results = []
    for seed in range(3):
        batch = random_batch(seed).to(device)
        with no_host_waits(device) if seed else nullcontext():
            results.append(
                train_step(
                    training.loss_fn,
                    [batch],
                    scale=1e-2,
                    optimizer=training.optimizer,
                    scheduler=training.scheduler,
                    clip_grad_norm=1.0,
                    host_check=False,
                )
            )
    assert all(bool(applied) and torch.isfinite(loss) for loss, _, applied in results)


@pytest.mark.slow
@DEVICES
def test_compiled_steps_match_eager_steps(device, monkeypatch):
    """trainer.compile: the loss compiled with dynamic shapes takes the steps of the eager loss
    on batches of differing shapes, up to bf16 rounding. On CUDA inductor compiles it; on the
    CPU TorchDynamo captures the same graph with its shape guards and runs it eagerly
    (inductor's C++ build of forward and backward takes minutes on a small CPU)."""
    device = torch.device(device)
    if device.type == "cpu":
        monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    losses = {}
    for compiled in (False, True):
        cfg = compose_config(
            "model.d_model=32",
            "model.d_ff=64",
            "model.n_encoder_layers=1",
            "model.n_decoder_layers=1",
            "model.dropout=0.0",
            "trainer.lr=1e-2",
            "trainer.warmup_steps=1",
            f"trainer.compile={str(compiled).lower()}",
        )
        torch.manual_seed(0)
        training = build_training(cfg, 40, 40, device)
        losses[compiled] = []
        # widths (src, tgt) 12 and 11, then 12 and 12 twice: the target width and the number
        # of real tokens vary (a first batch of two equal widths would compile twice)
        for step in range(6):
            batch = random_batch((2, 0, 1)[step % 3]).to(device)
            loss_sum, _, applied = train_step(
                training.loss_fn,
                [batch],
                scale=1 / batch.num_tgt_tokens,
                optimizer=training.optimizer,
                scheduler=training.scheduler,
                clip_grad_norm=1.0,
                host_check=False,
            )
            assert bool(applied)
            losses[compiled].append(float(loss_sum) / batch.num_tgt_tokens)
    assert losses[True][-1] < losses[True][0] - 0.3
    assert losses[True] == pytest.approx(losses[False], rel=2e-2)


@contextmanager
def sdpa_kernels() -> Iterator[Counter[str]]:
    """Counts, once the block ends, the SDPA kernels its attention calls ran on
    (aten::_scaled_dot_product_flash_attention, ..._attention_math); asserts one per call."""
    kernels: Counter[str] = Counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield kernels
    sdpa = "aten::scaled_dot_product_attention"
    # under autocast a call shows twice, the cast one inside: its kernel is the inner one's
    calls = [
        event
        for event in prof.events()
        if event.name == sdpa and all(child.name != sdpa for child in event.cpu_children)
    ]
    kernels.update(
        child.name
        for call in calls
        for child in call.cpu_children
        if child.name.startswith("aten::_scaled_dot_product_")
    )
    assert kernels.total() == len(calls) > 0, kernels


@DEVICES
@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "rope", "alibi"])
def test_attention_runs_and_on_cuda_never_falls_back_to_the_math_kernel(pe, device):
    """Training and cached decoding (padding masks, causal, ALiBi's float bias) run; on CUDA
    every attention call finds a fused SDPA kernel (flash, memory-efficient or cuDNN: PyTorch
    picks one by GPU and shapes), none falls back to the math one."""
    device = torch.device(device)
    cfg = compose_config(f"pe={pe}", "model.d_model=64", "model.d_ff=128")
    training = build_training(cfg, 40, 40, device)
    batch = random_batch(0).to(device)
    with sdpa_kernels() as kernels:
        loss_sum, _, applied = train_step(
            training.loss_fn,
            [batch],
            scale=1e-2,
            optimizer=training.optimizer,
            scheduler=training.scheduler,
            clip_grad_norm=1.0,
            host_check=False,
        )
        model = training.model.eval()
        with training.autocast:
            # three tokens: the first step and cached ones (each profiled op costs time)
            hyps = greedy_decode(model, batch.src, **SPECIALS, max_len_a=0, max_len_b=3)
    assert bool(applied) and torch.isfinite(loss_sum) and len(hyps) == batch.src.size(0)
    if device.type != "cuda":
        pytest.skip(
            "fused kernels are a GPU's: on the CPU minimt.model.transformer.attention picks "
            f"SDPA's math kernel on purpose (ran: {dict(kernels)})"
        )
    assert not [name for name in kernels if "math" in name], kernels


@DEVICES
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cached_greedy_equals_full_recomputation_on_each_device(encoding, device):
    model = random_model(0, **encoding).to(device)
    src = pad_batch(SOURCES).to(device)
    cached = greedy_decode(model, src, **SPECIALS)
    assert cached == greedy_decode(model, src, **SPECIALS, use_cache=False)


@DEVICES
def test_cached_greedy_reverses_in_fp32_on_cpu_and_under_bf16_on_cuda(device):
    model = copy.deepcopy(reversal_model()).to(device)  # the shared model stays on the CPU
    src = pad_batch(REVERSAL_SOURCES).to(device)
    with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
        cached = greedy_decode(model, src, **SPECIALS)
        full = greedy_decode(model, src, **SPECIALS, use_cache=False)
    assert cached == full == [list(reversed(s)) for s in REVERSAL_SOURCES]


@DEVICES
@pytest.mark.parametrize(
    ("make_model", "sources"),
    [(lambda: random_model(0), SOURCES), (reversal_model, REVERSAL_SOURCES)],
    ids=["random", "reversal"],
)
def test_beam_search_s_hypotheses_lie_apart_on_cpu_and_on_cuda_are_the_cpu_s(
    make_model, sources, device
):
    model = make_model()
    on_cpu = beam_search(model, pad_batch(sources), beam=3, n_best=3, **SPECIALS)
    for cpu_hyps in on_cpu:
        # the three hypotheses' scores lie >= 0.011 apart here, far beyond fp32 rounding and
        # the tolerance below: a device's rounding cannot swap them
        scores = [h.score for h in cpu_hyps]
        assert len(scores) == 3
        assert all(a - b > 1e-3 for a, b in pairwise(scores)), scores
    if device == "cuda":
        on_cuda = beam_search(
            copy.deepcopy(model).to(device),
            pad_batch(sources).to(device),
            beam=3,
            n_best=3,
            **SPECIALS,
        )
        for cpu_hyps, cuda_hyps in zip(on_cpu, on_cuda, strict=True):
            assert [h.tokens for h in cuda_hyps] == [h.tokens for h in cpu_hyps]
            assert [h.score for h in cuda_hyps] == pytest.approx(
                [h.score for h in cpu_hyps], abs=1e-4
            )
