import pytest
import torch
import torch.nn.functional as F

from minimt.model.loss import label_smoothed_cross_entropy


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
