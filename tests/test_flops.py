"""The FLOP formula against PyTorch's own count of the matmuls a forward pass runs."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.helpers import load_script, tiny_transformer

benchmark = load_script("scripts/bench/benchmark.py")
Shape, forward_flops, training_flops = (
    benchmark.Shape,
    benchmark.forward_flops,
    benchmark.training_flops,
)


@pytest.mark.parametrize(("src_len", "tgt_len"), [(7, 5), (3, 11)])
def test_forward_flops_equal_the_counted_matmuls(src_len, tgt_len):
    model = tiny_transformer(50).eval()
    src = torch.randint(4, 50, (1, src_len))
    tgt_in = torch.randint(4, 50, (1, tgt_len))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(src, tgt_in)
    assert forward_flops(Shape.of(model), src_len, tgt_len) == counter.get_total_flops()


def test_hand_count_of_a_one_layer_model():
    shape = Shape(d_model=2, d_ff=3, n_encoder_layers=1, n_decoder_layers=1, tgt_vocab_size=5)
    # encoder: 1 * (8*4 + 4*2*3) + 4*1*2 = 64; decoder: 56 + 8 + 16 + 16 + 8 = 104; output: 20
    assert forward_flops(shape, src_len=1, tgt_len=1) == 64 + 104 + 20
    assert training_flops(shape, [1, 1], [1, 1]) == 2 * 3 * 188
