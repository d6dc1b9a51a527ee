import inspect
import math
import re

import pytest
import torch

from minimt.model.embedding import Seq2SeqEmbedding
from minimt.model.positions import (
    BUILT_IN_ENCODINGS,
    AlibiBias,
    LearnedPositions,
    RotaryPositions,
    SinusoidalPositions,
    alibi_slopes,
    rotary_tables,
    sinusoidal_table,
)
from tests.helpers import REPO


def make_embedding(**overrides) -> Seq2SeqEmbedding:
    torch.manual_seed(0)
    args = dict(src_vocab_size=30, tgt_vocab_size=40, d_model=16, max_seq_len=32, dropout=0.0)
    both = overrides.pop("positions", None)
    if both is not None:
        args |= {"src_positions": both, "tgt_positions": both}
    return Seq2SeqEmbedding(**(args | overrides)).eval()


def random_ids(vocab_size: int, shape: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    return torch.randint(1, vocab_size, shape, generator=torch.Generator().manual_seed(seed))


def closed_form_pe(pos: int, dim: int, d_model: int) -> float:
    angle = pos / 10000 ** ((dim - dim % 2) / d_model)
    return math.sin(angle) if dim % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [16, 7])
def test_sinusoidal_table_matches_closed_form(d_model):
    table = sinusoidal_table(60, d_model)
    assert table.shape == (60, d_model)
    for pos in [0, 1, 2, 7, 59]:
        for dim in sorted({0, 1, 2, 3, 5, d_model - 2, d_model - 1}):
            expected = closed_form_pe(pos, dim, d_model)
            assert table[pos, dim].item() == pytest.approx(expected, abs=1e-6), (pos, dim)


def test_sinusoidal_table_layout_and_base():
    table = sinusoidal_table(10, 8)
    assert torch.equal(table[0, 0::2], torch.zeros(4))  # sin(0)
    assert torch.equal(table[0, 1::2], torch.ones(4))  # cos(0)
    # Base 10000, not 1000: dims (2, 3) of position 1 use 1 / 10000^(2/8) = 0.1.
    assert table[1, 2].item() == pytest.approx(math.sin(0.1), abs=1e-7)
    assert table[1, 3].item() == pytest.approx(math.cos(0.1), abs=1e-7)
    assert table[1:].abs().sum() > 1.0


def test_odd_d_model_last_column_is_sine():
    d_model = 5
    table = sinusoidal_table(20, d_model)
    angle = 13 / 10000 ** (4 / d_model)
    assert table[13, 4].item() == pytest.approx(math.sin(angle), abs=1e-6)
    embedding = make_embedding(d_model=d_model)
    assert embedding.encode_source(random_ids(30, (2, 6))).shape == (2, 6, d_model)


@pytest.mark.parametrize("side", ["source", "target"])
def test_output_is_scaled_lookup_plus_pe_exactly(side):
    embedding = make_embedding()
    tokens = embedding.src_tokens if side == "source" else embedding.tgt_tokens
    encode = embedding.encode_source if side == "source" else embedding.encode_target
    ids = random_ids(30, (3, 9))
    scaled_lookup = tokens.weight[ids] * math.sqrt(16)
    pe = sinusoidal_table(32, 16)[:9]
    out = encode(ids)
    assert torch.equal(out, scaled_lookup + pe)
    assert torch.allclose(out - pe, scaled_lookup, atol=1e-6)


def test_scale_off_adds_pe_to_plain_lookup():
    embedding = make_embedding(scale_embedding=False)
    ids = random_ids(30, (2, 5))
    out = embedding.encode_source(ids)
    assert torch.allclose(out - sinusoidal_table(32, 16)[:5], embedding.src_tokens.weight[ids])


def test_learned_positions_are_added_after_scaling():
    embedding = make_embedding(positions="learned")
    ids = random_ids(30, (2, 5))
    scaled_lookup = embedding.src_tokens.weight[ids] * 4.0
    positions = embedding.encode_source(ids) - scaled_lookup  # (B, S, d_model)
    assert torch.allclose(positions[0], positions[1], atol=1e-6)  # the same rows for every sentence
    assert 0.5 < positions[0].std() < 1.0  # init N(0, 0.7071), not times sqrt(d_model) = 4


def test_dropout_is_applied_last_to_the_sum():
    embedding = make_embedding(dropout=0.5).train()
    ids = random_ids(30, (4, 10))
    expected = embedding.src_tokens.weight[ids] * 4.0 + sinusoidal_table(32, 16)[:10]
    out = embedding.encode_source(ids)
    kept = out != 0
    assert 0 < kept.sum() < out.numel()
    assert torch.allclose(out[kept], expected[kept] * 2.0, atol=1e-6)


def test_padding_rows_zero_at_init_and_get_no_gradient():
    embedding = make_embedding(src_padding_idx=0, tgt_padding_idx=1)
    assert torch.equal(embedding.src_tokens.weight[0], torch.zeros(16))
    assert torch.equal(embedding.tgt_tokens.weight[1], torch.zeros(16))
    src = torch.tensor([[3, 4, 0, 0]])
    tgt = torch.tensor([[5, 6, 1, 1]])
    (embedding.encode_source(src).sum() + embedding.encode_target(tgt).pow(2).sum()).backward()
    assert torch.equal(embedding.src_tokens.weight.grad[0], torch.zeros(16))
    assert torch.equal(embedding.tgt_tokens.weight.grad[1], torch.zeros(16))
    assert embedding.src_tokens.weight.grad[3].abs().sum() > 0


def test_parameter_counts_and_state_dict():
    tables = 30 * 16 + 40 * 16
    sinusoidal = make_embedding()
    assert sum(p.numel() for p in sinusoidal.parameters()) == tables
    assert set(sinusoidal.state_dict()) == {"src_tokens.weight", "tgt_tokens.weight"}
    learned = make_embedding(positions="learned")
    assert sum(p.numel() for p in learned.parameters()) == tables + 32 * 16


def test_sinusoidal_checkpoint_loads_with_another_max_seq_len():
    short = make_embedding(max_seq_len=16)
    long = make_embedding(max_seq_len=64)
    long.load_state_dict(short.state_dict())
    assert long.encode_source(random_ids(30, (1, 40))).shape == (1, 40, 16)


@pytest.mark.parametrize("positions", ["none", "rope", "alibi"])
def test_no_table_added_output_is_the_scaled_lookup(positions):
    embedding = make_embedding(positions=positions)
    ids = random_ids(30, (3, 9))
    assert torch.equal(embedding.encode_source(ids), embedding.src_tokens.weight[ids] * 4.0)
    tgt = random_ids(40, (3, 5))
    assert torch.equal(
        embedding.encode_target(tgt, offset=20), embedding.tgt_tokens.weight[tgt] * 4.0
    )
    assert set(embedding.state_dict()) == {"src_tokens.weight", "tgt_tokens.weight"}
    assert sum(p.numel() for p in embedding.parameters()) == 30 * 16 + 40 * 16


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none", "rope", "alibi"])
def test_too_long_sequence_is_a_readable_error(positions):
    embedding = make_embedding(max_seq_len=10, positions=positions)
    with pytest.raises(ValueError, match=r"13 positions.*max_seq_len=10"):
        embedding.encode_source(random_ids(30, (1, 13)))
    with pytest.raises(ValueError, match=r"13 positions.*max_seq_len=10"):
        embedding.encode_target(random_ids(40, (1, 4)), offset=9)
    assert embedding.encode_target(random_ids(40, (1, 4)), offset=6).shape == (1, 4, 16)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none", "rope", "alibi"])
def test_offset_embeds_a_token_at_its_true_position(positions):
    embedding = make_embedding(positions=positions)
    ids = random_ids(40, (2, 7))
    full = embedding.encode_target(ids)
    for t in range(7):
        assert torch.equal(embedding.encode_target(ids[:, t : t + 1], offset=t)[:, 0], full[:, t])


def test_share_embeddings_ties_by_identity():
    embedding = make_embedding(tgt_vocab_size=30, share_embeddings=True)
    assert embedding.tgt_tokens is embedding.src_tokens
    assert embedding.tgt_token_weight is embedding.src_tokens.weight
    assert sum(p.numel() for p in embedding.parameters()) == 30 * 16


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match="joint vocabulary"):
        make_embedding(src_vocab_size=30, tgt_vocab_size=40, share_embeddings=True)
    with pytest.raises(ValueError, match="joint vocabulary"):
        make_embedding(tgt_vocab_size=30, tgt_padding_idx=1, share_embeddings=True)


def test_untied_tables_are_distinct():
    embedding = make_embedding()
    assert embedding.tgt_tokens is not embedding.src_tokens
    assert embedding.tgt_token_weight is embedding.tgt_tokens.weight


def test_unknown_pos_encoding_names_the_choices():
    with pytest.raises(ValueError, match=r"'rotary' is neither a built-in encoding \(sinusoidal"):
        make_embedding(positions="rotary")


def test_scaled_output_has_unit_scale():
    embedding = make_embedding(src_vocab_size=500, d_model=64, max_seq_len=64)
    ids = random_ids(500, (16, 64))
    out = embedding.encode_source(ids)
    token_part = out - sinusoidal_table(64, 64)
    assert 0.9 < token_part.std() < 1.1
    assert 0.9 < out.std() < 1.5  # PE adds variance 1/2 per element on average

    unscaled = make_embedding(src_vocab_size=500, d_model=64, scale_embedding=False)
    assert 0.1 < unscaled.encode_source(ids[:, :32]).sub(sinusoidal_table(32, 64)).std() < 0.15


MAX_LEN, D_HEADS_MODEL = 64, 48  # an AlibiBias's sizes: its bias depends on the heads only


def rotated_dot(q: torch.Tensor, k: torch.Tensor, m: int, n: int) -> float:
    """q (d_head,) turned as at position m, dotted with k (d_head,) turned as at position n."""
    rotary = RotaryPositions(64, q.numel())
    return (rotary.rotate(q[None, None, None], m) @ rotary.rotate(k[None, None, None], n).mT).item()


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rotary_tables_match_closed_form(base):
    d_head = 8
    cos, sin = rotary_tables(60, d_head, base)
    assert cos.shape == sin.shape == (60, d_head // 2)
    for pos in [0, 1, 5, 59]:
        for i in range(d_head // 2):
            angle = pos * base ** (-2 * i / d_head)
            assert cos[pos, i].item() == pytest.approx(math.cos(angle), abs=1e-6), (pos, i)
            assert sin[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6), (pos, i)


def test_rotary_turns_half_split_pairs_by_the_closed_form_angle():
    d_head = 8
    rotary = RotaryPositions(64, d_head)
    x = torch.randn(2, 3, 5, d_head, generator=torch.Generator().manual_seed(0))  # (B, h, L, d)
    offset = 11
    out = rotary.rotate(x, offset)
    assert out.shape == x.shape
    for t in [0, 2, 4]:
        for i in range(d_head // 2):
            angle = (offset + t) * 10000 ** (-2 * i / d_head)  # pair (i, i + d_head/2)
            a, b = x[1, 2, t, i].item(), x[1, 2, t, i + d_head // 2].item()
            expected_a = a * math.cos(angle) - b * math.sin(angle)
            expected_b = a * math.sin(angle) + b * math.cos(angle)
            assert out[1, 2, t, i].item() == pytest.approx(expected_a, abs=1e-5), (t, i)
            assert out[1, 2, t, i + d_head // 2].item() == pytest.approx(expected_b, abs=1e-5)
    assert torch.equal(rotary.rotate(x, 0)[:, :, :1], x[:, :, :1])  # position 0: no turn


def test_rotary_preserves_norms():
    x = torch.randn(2, 3, 20, 8, generator=torch.Generator().manual_seed(0))
    out = RotaryPositions(64, 8).rotate(x, 7)
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert not torch.allclose(out, x)


def test_rotated_dot_product_depends_only_on_relative_offset():
    q, k = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    dot = rotated_dot(q, k, 3, 1)
    for shift in [10, 37]:
        assert rotated_dot(q, k, 3 + shift, 1 + shift) == pytest.approx(dot, abs=1e-5), shift
    assert rotated_dot(q, k, 3, 0) != pytest.approx(dot, abs=1e-3)  # another offset
    assert rotated_dot(q, k, 5, 5) == pytest.approx((q @ k).item(), abs=1e-5)  # offset 0


def test_rotary_needs_an_even_head_size_and_stores_nothing():
    with pytest.raises(ValueError, match="d_head=5 is odd"):
        RotaryPositions(16, 5)
    rotary = RotaryPositions(16, 8)
    assert list(rotary.parameters()) == [] and rotary.state_dict() == {}


# Press et al. (2021), section 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256; for 4 heads
# 1/4, 1/16, 1/64, 1/256; for 6 heads (not a power of 2) the 4-head slopes, then every other
# 8-head slope: 1/2, 1/8.
@pytest.mark.parametrize(
    ("n_heads", "exponents"),
    [
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),
        (4, [2, 4, 6, 8]),
        (6, [2, 4, 6, 8, 1, 3]),
        (1, [8]),
    ],
)
def test_alibi_slopes_are_the_paper_s(n_heads, exponents):
    slopes = alibi_slopes(n_heads)
    assert slopes.dtype == torch.float32
    assert slopes.tolist() == [2.0**-e for e in exponents]


def test_alibi_bias_is_minus_slope_times_distance():
    alibi = AlibiBias(MAX_LEN, D_HEADS_MODEL, n_heads=4)
    slopes = alibi_slopes(4).tolist()
    symmetric = alibi.bias(5, 7)
    causal = alibi.bias(5, 5, causal=True)
    assert symmetric.shape == (4, 5, 7) and causal.shape == (4, 5, 5)
    assert symmetric.dtype == causal.dtype == torch.float32
    for h in range(4):
        for i in range(5):
            for j in range(7):
                assert symmetric[h, i, j].item() == -slopes[h] * abs(i - j), (h, i, j)
                if j < 5:
                    expected = -slopes[h] * (i - j) if j <= i else -math.inf
                    assert causal[h, i, j].item() == expected, (h, i, j)


def test_alibi_bias_of_one_query_at_an_offset_is_that_row_of_the_full_bias():
    alibi = AlibiBias(MAX_LEN, D_HEADS_MODEL, n_heads=6)
    full = alibi.bias(9, 9, causal=True)  # (h, 9, 9)
    for position in range(9):
        row = alibi.bias(1, position + 1, offset=position, causal=True)  # (h, 1, position + 1)
        assert torch.equal(row[:, 0], full[:, position, : position + 1])


def test_alibi_bias_is_exact_at_long_distances_and_in_any_model_dtype():
    alibi = AlibiBias(MAX_LEN, D_HEADS_MODEL, n_heads=8).to(
        torch.bfloat16
    )  # a bf16 model: the slopes (powers of 2) stay exact
    bias = alibi.bias(1, 1001, offset=1000)  # distances up to 1000, not integers in bf16
    assert bias.dtype == torch.float32
    assert bias[0, 0, 1].item() == -0.5 * 999
    assert bias[7, 0, 0].item() == -1000 / 256


def test_alibi_has_nothing_in_the_state_dict():
    assert AlibiBias(MAX_LEN, D_HEADS_MODEL, n_heads=4).state_dict() == {}


def test_each_side_gets_its_own_encoding():
    embedding = make_embedding(src_positions="learned", tgt_positions="sinusoidal")
    ids = random_ids(30, (2, 6))
    scaled = embedding.src_tokens.weight[ids] * 4.0
    learned = embedding.positions["src"].table.weight[:6]
    assert torch.equal(embedding.encode_source(ids), scaled + learned)
    tgt = random_ids(40, (2, 6))
    assert torch.equal(
        embedding.encode_target(tgt),
        embedding.tgt_tokens.weight[tgt] * 4.0 + sinusoidal_table(32, 16)[:6],
    )
    assert set(embedding.state_dict()) == {
        "src_tokens.weight",
        "tgt_tokens.weight",
        "positions.src.table.weight",
    }


def test_target_side_without_positions_ignores_the_offset():
    embedding = make_embedding(tgt_positions="none")  # source sinusoidal
    tgt = random_ids(40, (2, 5))
    lookup = embedding.tgt_tokens.weight[tgt] * 4.0
    for offset in (0, 1, 7, 27):
        assert torch.equal(embedding.encode_target(tgt, offset=offset), lookup)
    src = random_ids(30, (2, 5))
    assert not torch.allclose(embedding.encode_source(src), embedding.encode_source(src, offset=3))


def test_one_encoding_keeps_one_module_and_today_s_state_dict_keys():
    embedding = make_embedding(positions="learned", src_positions="learned")
    assert embedding.src_positions is embedding.tgt_positions is embedding.positions
    assert set(embedding.state_dict()) == {
        "src_tokens.weight",
        "tgt_tokens.weight",
        "positions.table.weight",
    }
    ids = random_ids(30, (1, 4))
    source_positions = embedding.encode_source(ids) - embedding.src_tokens.weight[ids] * 4.0
    target_positions = embedding.encode_target(ids) - embedding.tgt_tokens.weight[ids] * 4.0
    assert torch.allclose(source_positions, target_positions, atol=1e-6)  # one shared table


def test_unknown_side_encoding_names_the_choices():
    with pytest.raises(ValueError, match=r"'rotary' is neither a built-in encoding"):
        make_embedding(tgt_positions="rotary")


@pytest.mark.parametrize(("init_std", "expected"), [(None, 64**-0.5), (1.0, 1.0), (0.3, 0.3)])
def test_init_std_sets_the_token_tables_std(init_std, expected):
    embedding = make_embedding(
        src_vocab_size=500, tgt_vocab_size=400, d_model=64, init_std=init_std
    )
    for table in (embedding.src_tokens.weight, embedding.tgt_tokens.weight):
        rows = table[1:]  # the padding row is zero
        # std of ~25,000 normal draws: relative standard error below 0.5%
        assert rows.std().item() == pytest.approx(expected, rel=0.03)
        assert abs(rows.mean().item()) < 0.03 * expected
        assert torch.equal(table[0], torch.zeros(64))


def test_init_std_must_be_positive():
    with pytest.raises(ValueError, match="init_std must be positive"):
        make_embedding(init_std=0.0)


def test_input_magnitudes_are_the_rms_of_scaled_tokens_and_of_the_added_positions():
    embedding = make_embedding(positions="sinusoidal", share_embeddings=False)
    n = 20
    got = embedding.input_magnitudes(n)
    position_rms = sinusoidal_table(n, 16).pow(2).mean().sqrt().item()
    for side, table in (("src", embedding.src_tokens), ("tgt", embedding.tgt_tokens)):
        tokens = table.weight[1:] * math.sqrt(16)  # padding row 0 left out
        token_rms = tokens.pow(2).mean().sqrt().item()
        assert got[side]["token_rms"] == pytest.approx(token_rms, rel=1e-6)
        assert got[side]["position_rms"] == pytest.approx(position_rms, rel=1e-6)
        assert got[side]["ratio"] == pytest.approx(token_rms / position_rms, rel=1e-6)
    # the sinusoid's RMS tends to 1/sqrt(2); init std d_model^-0.5 gives scaled tokens RMS ~1
    long = make_embedding(max_seq_len=4000).input_magnitudes(4000)["src"]
    assert long["position_rms"] == pytest.approx(0.5**0.5, rel=1e-3)
    assert long["token_rms"] == pytest.approx(1.0, rel=0.2)


@pytest.mark.parametrize("positions", ["none", "rope", "alibi"])
def test_input_magnitudes_without_an_added_table_have_no_ratio(positions):
    got = make_embedding(positions=positions).input_magnitudes(10)["tgt"]
    assert got["position_rms"] == 0.0 and got["ratio"] is None


# The tutorial minimt started from: its constructor's keywords, positional order and defaults are
# public API, called here exactly as the tutorial calls them.
TUTORIAL_PARAMETERS = [
    ("src_vocab_size", inspect.Parameter.empty),
    ("tgt_vocab_size", inspect.Parameter.empty),
    ("d_model", inspect.Parameter.empty),
    ("max_seq_len", 5000),
    ("dropout", 0.1),
    ("src_padding_idx", 0),
    ("tgt_padding_idx", 0),
    ("share_embeddings", False),
    ("pos_encoding", "sinusoidal"),
]


def test_constructor_keeps_the_tutorials_positional_order_and_defaults():
    parameters = list(inspect.signature(Seq2SeqEmbedding).parameters.values())
    positional = [p for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == TUTORIAL_PARAMETERS


def test_tutorials_final_call_embeds_both_sides():
    torch.manual_seed(0)
    emb = Seq2SeqEmbedding(
        src_vocab_size=8000, tgt_vocab_size=10000, d_model=512, max_seq_len=128, dropout=0.1
    ).eval()
    src, tgt = random_ids(8000, (4, 30)), random_ids(10000, (4, 25), seed=2)
    src_emb, tgt_emb = emb.encode_source(src), emb.encode_target(tgt)
    assert src_emb.shape == (4, 30, 512) and tgt_emb.shape == (4, 25, 512)
    expected = emb.src_tokens(src) * math.sqrt(512) + sinusoidal_table(30, 512)
    torch.testing.assert_close(src_emb, expected)
    assert emb.src_tokens.weight.std().item() == pytest.approx(512**-0.5, rel=0.02)
    assert emb.tgt_tokens.weight[0].abs().sum() == 0  # padding row zero


@pytest.mark.parametrize("share_embeddings", [False, True])
def test_tutorials_learned_call_shares_one_table_of_positions(share_embeddings):
    torch.manual_seed(0)
    emb = Seq2SeqEmbedding(
        src_vocab_size=300,
        tgt_vocab_size=300,
        d_model=32,
        max_seq_len=64,
        dropout=0.0,
        src_padding_idx=0,
        tgt_padding_idx=0,
        share_embeddings=share_embeddings,
        pos_encoding="learned",
    )
    assert isinstance(emb.positions, LearnedPositions)
    assert emb.src_positions is emb.tgt_positions
    assert (emb.tgt_tokens is emb.src_tokens) == share_embeddings
    ids = random_ids(300, (2, 10))
    table = emb.positions.table.weight[:10]
    torch.testing.assert_close(emb.encode_target(ids), emb.tgt_tokens(ids) * math.sqrt(32) + table)


@pytest.mark.parametrize("name", list(BUILT_IN_ENCODINGS))
def test_tutorials_positional_call_takes_every_built_in_name(name):
    emb = Seq2SeqEmbedding(100, 120, 16, 64, 0.0, 0, 0, False, name, n_heads=2)
    assert type(emb.src_positions) is BUILT_IN_ENCODINGS[name]
    assert type(emb.tgt_positions) is BUILT_IN_ENCODINGS[name]
    assert emb.encode_target(random_ids(120, (2, 7))).shape == (2, 7, 16)


def test_a_side_of_its_own_takes_precedence_over_pos_encoding():
    emb = Seq2SeqEmbedding(50, 50, 16, 32, pos_encoding="learned", tgt_positions="sinusoidal")
    assert isinstance(emb.src_positions, LearnedPositions)
    assert isinstance(emb.tgt_positions, SinusoidalPositions)


def test_tutorials_shared_call_needs_one_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings ties source and target tables"):
        Seq2SeqEmbedding(8000, 10000, 64, share_embeddings=True)


def test_readmes_example_runs_as_shown():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    (example,) = [block for block in blocks if "Seq2SeqEmbedding(" in block]
    namespace: dict = {}
    exec(example, namespace)  # the README's own code
    assert namespace["emb"].encode_source(torch.randint(1, 8000, (4, 30))).shape == (4, 30, 512)
