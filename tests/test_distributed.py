"""Data-parallel training: disjoint shards, DDP keeps tied weights tied, 2 processes = 1."""

import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minimt.checkpoint import load_checkpoint
from minimt.train.loop import train
from minimt.train.state import epoch_steps
from minimt.train.step import SummedLoss, train_step
from tests.helpers import REPO, collate, compose_config, tiny_run_overrides, tiny_transformer


def test_ranks_take_disjoint_equal_shares_of_each_step():
    batches = [[i] for i in range(23)]
    world, accumulate = 2, 3
    shards = [epoch_steps(batches, 0, rank, world, accumulate) for rank in range(world)]
    assert len(shards[0]) == len(shards[1]) == 3  # 23 // 6; the 5 left over are dropped
    for step in range(3):
        taken = [b for rank in range(world) for b in shards[rank][step]]
        assert taken == batches[6 * step : 6 * step + 6]  # one step = 6 consecutive batches
    resumed = epoch_steps(batches, consumed=6, rank=1, world_size=world, accumulate=accumulate)
    assert resumed == shards[1][1:]


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_tied_weights_stay_tied_and_train_as_without_ddp(process_group):
    plain, wrapped = tiny_transformer(40, seed=3), tiny_transformer(40, seed=3)
    ddp = DistributedDataParallel(SummedLoss(wrapped, 0.1, torch.autocast("cpu", enabled=False)))
    batch = collate([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14, 15]])
    for model, loss_fn in ((plain, SummedLoss(plain, 0.1, ddp.module.autocast)), (wrapped, ddp)):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        for _ in range(3):
            train_step(
                loss_fn,
                [batch],
                scale=1 / 6,
                optimizer=optimizer,
                scheduler=scheduler,
                clip_grad_norm=1.0,
            )
    emb = wrapped.embedding
    assert emb.src_tokens.weight is emb.tgt_tokens.weight is emb.tgt_token_weight
    trained = wrapped.state_dict()
    for name, tensor in plain.state_dict().items():
        assert torch.allclose(tensor, trained[name], atol=1e-6), name


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_same_global_batch(multi30k_dir, tmp_path):
    overrides = ("trainer.max_steps=8", "trainer.save_every=8", "model.dropout=0.0")
    data = tmp_path / "data"
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, data, *overrides, "trainer.accumulate=2")
    )
    single = train(cfg, tmp_path / "one")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [
        *torchrun,
        str(REPO / "scripts" / "train.py"),
        *tiny_run_overrides(multi30k_dir, data, *overrides),
        f"hydra.run.dir={tmp_path / 'two'}",
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    one = load_checkpoint(tmp_path / "one" / "checkpoints" / "step_8.pt")
    two = load_checkpoint(tmp_path / "two" / "checkpoints" / "step_8.pt")
    assert two["state"]["tgt_tokens"] == one["state"]["tgt_tokens"] == single["tgt_tokens"]
    for name, tensor in one["model"].items():
        if name.endswith("k_proj.bias"):
            # its exact gradient is 0 (softmax ignores a shift shared by all keys): Adam scales
            # the rounding noise, which differs with the summation order, up to full-size steps
            continue
        # Adam moves every weight by about lr (3e-3) per step, so a wrong shard or scale shows
        # as 1e-3 differences; summation-order rounding, which Adam amplifies for entries whose
        # gradient is near 0 (rare tokens' rows), reaches 1e-5 to 4e-5 after 8 steps
        assert torch.allclose(tensor, two["model"][name], atol=1e-4), name
    shared = ("embedding.src_tokens.weight", "embedding.tgt_tokens.weight")
    assert torch.equal(two["model"][shared[0]], two["model"][shared[1]])
