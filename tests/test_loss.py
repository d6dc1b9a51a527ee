import pytest
import torch
import torch.nn.functional as F

from minimt.data.batching import fixed_shape
from minimt.data.tokenizer import PAD_ID
from minimt.model.loss import label_smoothed_cross_entropy, projected_label_smoothed_cross_entropy
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


@pytest.mark.parametrize("chunk", [1, 4, 37, 100])
def test_projected_loss_in_chunks_equals_the_whole_loss_and_gradients(chunk):
    torch.manual_seed(0)
    hidden = torch.randn(37, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 6, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (37,))
    ours = projected_label_smoothed_cross_entropy(hidden, weight, target, 0.1, chunk)
    grads_ours = torch.autograd.grad(ours * 0.7, (hidden, weight))
    ref = F.cross_entropy(hidden @ weight.T, target, label_smoothing=0.1, reduction="sum")
    grads_ref = torch.autograd.grad(ref * 0.7, (hidden, weight))
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    for found, expected in zip(grads_ours, grads_ref, strict=True):
        torch.testing.assert_close(found, expected, rtol=1e-12, atol=1e-12)


def test_projected_loss_under_bf16_autocast_matches_the_autocast_projection():
    """Same bf16 products as F.linear under autocast; the gradients differ by bf16 rounding
    (the reference rounds the output matrix's whole gradient to bf16, ours sums chunks in fp32):
    within 1% of the largest entry."""
    torch.manual_seed(0)
    hidden = torch.randn(64, 32, requires_grad=True)
    weight = (torch.randn(200, 32) * 0.1).requires_grad_()
    target = torch.randint(0, 200, (64,))
    with torch.autocast("cpu", torch.bfloat16):
        ours = projected_label_smoothed_cross_entropy(hidden, weight, target, 0.1, 16)
        ref = label_smoothed_cross_entropy(F.linear(hidden, weight), target, 0.1)
    grads_ours = torch.autograd.grad(ours, (hidden, weight))
    grads_ref = torch.autograd.grad(ref, (hidden, weight))
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)
    for found, expected in zip(grads_ours, grads_ref, strict=True):
        assert found.dtype == torch.float32
        torch.testing.assert_close(found, expected, rtol=0, atol=1e-2 * expected.abs().max())


def test_projected_loss_without_gradients_gives_the_same_value():
    torch.manual_seed(0)
    hidden, weight = torch.randn(9, 4), torch.randn(7, 4)
    target = torch.randint(0, 7, (9,))
    with torch.no_grad():
        found = projected_label_smoothed_cross_entropy(hidden, weight, target, 0.1, 4)
    expected = F.cross_entropy(hidden @ weight.T, target, label_smoothing=0.1, reduction="sum")
    assert found.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_summed_loss_in_chunks_equals_the_whole_loss_and_gradients(precision):
    """The training loss with trainer.loss_chunk_rows: same value and parameter gradients as
    without, within a share of each gradient's largest entry (fp32: summation order only, 1e-5;
    bf16: bf16 rounding of the products, 2%) plus 1e-7 for the key biases, whose gradient is
    zero up to rounding."""
    autocast = torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16")
    batch = collate([[5, 6, 7], [8, 9], [3, 4, 5, 6]], [[10, 11], [12, 13, 14, 15], [7]])
    found = {}
    for chunk in (None, 3):
        model = tiny_transformer(40, seed=3)
        loss = SummedLoss(model, 0.1, autocast, chunk)(
            batch.src, batch.tgt_in, batch.tgt_out, batch.real
        )
        loss.backward()
        found[chunk] = loss.item(), {n: p.grad for n, p in model.named_parameters()}
    (whole, whole_grads), (chunked, chunked_grads) = found[None], found[3]
    tolerance = 1e-5 if precision == "fp32" else 2e-2
    assert chunked == pytest.approx(whole, rel=tolerance)
    for name, grad in whole_grads.items():
        torch.testing.assert_close(
            chunked_grads[name], grad, rtol=0, atol=tolerance * grad.abs().max() + 1e-7, msg=name
        )


def test_summed_loss_scores_the_real_target_positions_only():
    """SummedLoss = torch's label-smoothed cross-entropy of the model's logits at tgt_out's
    non-pad positions (a boolean mask), summed."""
    batch = collate([[5, 6, 7], [8, 9], [3, 4, 5, 6]], [[10, 11], [12, 13, 14, 15], [7]])
    model = tiny_transformer(40, seed=3).eval()
    loss = SummedLoss(model, 0.1, torch.autocast("cpu", enabled=False))(
        batch.src, batch.tgt_in, batch.tgt_out, batch.real
    )
    logits = model.project(model.decode(batch.tgt_in, model.encode(batch.src), batch.src))
    real = batch.tgt_out != PAD_ID
    expected = F.cross_entropy(
        logits[real], batch.tgt_out[real], label_smoothing=0.1, reduction="sum"
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("chunk", [None, 4])
def test_ignored_targets_add_nothing_to_the_loss_or_its_gradient(chunk):
    """With ignore_index the loss and gradients are torch's cross-entropy over the other rows
    (F.cross_entropy's ignore_index), whole or projected in chunks."""
    torch.manual_seed(0)
    hidden = torch.randn(37, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 6, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (37,))
    target[::3] = PAD_ID
    if chunk is None:
        ours = label_smoothed_cross_entropy(hidden @ weight.T, target, 0.1, PAD_ID)
    else:
        ours = projected_label_smoothed_cross_entropy(hidden, weight, target, 0.1, chunk, PAD_ID)
    grads_ours = torch.autograd.grad(ours * 0.7, (hidden, weight))
    ref = F.cross_entropy(
        hidden @ weight.T, target, ignore_index=PAD_ID, label_smoothing=0.1, reduction="sum"
    )
    grads_ref = torch.autograd.grad(ref * 0.7, (hidden, weight))
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    for found, expected in zip(grads_ours, grads_ref, strict=True):
        torch.testing.assert_close(found, expected, rtol=1e-12, atol=1e-12)
    assert grads_ours[0][::3].abs().max() == 0  # the pad rows' hidden states get no gradient


@pytest.mark.parametrize("chunk", [None, 5])
def test_a_fixed_shape_batch_gives_the_loss_and_gradients_of_the_plain_batch(chunk):
    """trainer.shape_buckets changes the shapes, not the training: the same pairs padded to
    (6, 8) with filler rows give the same summed loss and parameter gradients (fp32, up to
    summation order)."""
    plain = collate([[5, 6, 7], [8, 9], [3, 4, 5, 6]], [[10, 11], [12, 13, 14, 15], [7]])
    fixed = fixed_shape(plain, rows=6, length=8)
    found = []
    for batch, is_fixed in ((plain, False), (fixed, True)):
        model = tiny_transformer(40, seed=3)
        autocast = torch.autocast("cpu", enabled=False)
        loss = SummedLoss(model, 0.1, autocast, chunk, fixed_shapes=is_fixed)(
            batch.src, batch.tgt_in, batch.tgt_out, batch.real
        )
        loss.backward()
        found.append((loss.item(), {n: p.grad for n, p in model.named_parameters()}))
    (plain_loss, plain_grads), (fixed_loss, fixed_grads) = found
    assert fixed_loss == pytest.approx(plain_loss, rel=1e-5)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(
            fixed_grads[name], grad, rtol=0, atol=1e-5 * grad.abs().max() + 1e-7, msg=name
        )
