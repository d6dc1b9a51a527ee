import pytest
import torch
import torch.nn.functional as F

from minimt.data.tokenizer import PAD_ID
from minimt.model.loss import label_smoothed_cross_entropy
from minimt.train.step import SummedLoss
from tests.helpers import collate, tiny_transformer


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_torch_cross_entropy_value_and_gradient(eps):
    torch.manual_seed(0)
    logits = torch.randn(37, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (37,))
    ours = label_smoothed_cross_entropy(logits, target, eps)
    (grad_ours,) = torch.autograd.grad(ours * 0.7, logits)
    ref = F.cross_entropy(logits, target, label_smoothing=eps, reduction="sum")
    (grad_ref,) = torch.autograd.grad(ref * 0.7, logits)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    torch.testing.assert_close(grad_ours, grad_ref)


def test_bf16_logits_get_a_bf16_gradient_computed_in_fp32():
    torch.manual_seed(0)
    logits = torch.randn(8, 50).bfloat16().requires_grad_()
    target = torch.randint(0, 50, (8,))
    label_smoothed_cross_entropy(logits, target, 0.1).backward()
    ref = F.cross_entropy(
        logits.detach().float().requires_grad_(), target, label_smoothing=0.1, reduction="sum"
    )
    assert logits.grad.dtype == torch.bfloat16
    assert torch.isfinite(logits.grad).all() and torch.isfinite(ref)


def test_gradcheck():
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 7, (5,))
    assert torch.autograd.gradcheck(lambda x: label_smoothed_cross_entropy(x, target, 0.1), logits)


def test_summed_loss_scores_the_real_target_positions_only():
    """SummedLoss = torch's label-smoothed cross-entropy of the model's logits at tgt_out's
    non-pad positions (a boolean mask), summed."""
    batch = collate([[5, 6, 7], [8, 9], [3, 4, 5, 6]], [[10, 11], [12, 13, 14, 15], [7]])
    model = tiny_transformer(40, seed=3).eval()
    loss = SummedLoss(model, 0.1, torch.autocast("cpu", enabled=False))(
        batch.src, batch.tgt_in, batch.tgt_out, batch.nonpad_index
    )
    logits = model.project(model.decode(batch.tgt_in, model.encode(batch.src), batch.src))
    real = batch.tgt_out != PAD_ID
    expected = F.cross_entropy(
        logits[real], batch.tgt_out[real], label_smoothing=0.1, reduction="sum"
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
