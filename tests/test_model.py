import math

import pytest
import torch
import torch.nn.functional as F

from minimt.model.positions import AlibiBias, alibi_slopes
from minimt.model.transformer import (
    DecoderLayer,
    EncoderLayer,
    Transformer,
    attention,
    padding_mask,
)
from tests.helpers import causal_mask, model_arguments, tiny_transformer

PAD = 0
VOCAB = 24
MAX_SEQ_LEN = 72


def make_model(seed: int = 0, **overrides) -> Transformer:
    return tiny_transformer(VOCAB, seed, **({"max_seq_len": MAX_SEQ_LEN} | overrides)).eval()


def random_ids(shape: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """src (2, 7), tgt_in (2, 6), tgt_out (2, 6); the second sentence of each is right-padded."""
    src = random_ids((2, 7), seed=1)
    src[1, 4:] = PAD
    tgt = random_ids((2, 7), seed=2)
    tgt[1, 5:] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def loss_of(model: Transformer, src, tgt_in, tgt_out) -> torch.Tensor:
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)


def assert_tied(model: Transformer) -> None:
    embedding = model.embedding
    assert embedding.tgt_tokens is embedding.src_tokens
    shared = embedding.src_tokens.weight
    assert embedding.tgt_token_weight is shared
    assert sum(p is shared for p in model.parameters()) == 1


CONFIGS = [
    dict(),
    dict(norm_first=False),
    dict(positions="learned"),
    dict(positions="none"),
    dict(positions="rope"),
    dict(positions="alibi"),
    dict(positions="alibi", norm_first=False),
    dict(src_positions="none"),
    dict(tgt_positions="none"),
    dict(src_positions="rope", tgt_positions="alibi"),
    dict(src_positions="alibi", tgt_positions="learned"),
    dict(scale_embedding=False, share_embeddings=False),
    dict(share_embeddings=False, tie_output=False, init_std=1.0),
]


def test_padding_mask_polarity():
    mask = padding_mask(torch.tensor([[5, 6, 0], [0, 7, 0]]), pad_id=0)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [False, True, False]]


def test_causal_mask_polarity_and_is_causal_agree():
    mask = causal_mask(3)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
    assert torch.allclose(attention(q, k, v, causal_mask(5)), attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_builds_and_gives_finite_logits(config):
    model = make_model(**config)
    src, tgt_in, _ = padded_batch()
    logits = model(src, tgt_in)
    assert logits.shape == (2, 6, VOCAB)
    assert torch.isfinite(logits).all()


def test_post_ln_has_no_final_norm_and_differs_from_pre_ln():
    src, tgt_in, _ = padded_batch()
    pre, post = make_model(), make_model(norm_first=False)
    assert not isinstance(post.encoder_norm, torch.nn.LayerNorm)
    assert not torch.allclose(pre(src, tgt_in), post(src, tgt_in))


def test_output_projection_is_the_target_embedding():
    model = make_model(share_embeddings=False)
    hidden = torch.randn(2, 3, 16)
    assert torch.equal(model.project(hidden), hidden @ model.embedding.tgt_tokens.weight.T)
    assert model.embedding.tgt_token_weight is not model.embedding.src_tokens.weight


def test_three_way_tying_is_one_parameter_counted_once():
    tied = make_model()
    assert_tied(tied)
    untied = make_model(share_embeddings=False)
    assert untied.num_parameters() - tied.num_parameters() == VOCAB * 16
    unique = {p.data_ptr(): p.numel() for p in tied.state_dict().values()}
    assert tied.num_parameters() == sum(unique.values())


def test_tying_survives_to():
    model = make_model()
    model.to("cpu")
    assert_tied(model)
    model.to(torch.float64)
    assert_tied(model)
    assert model.embedding.src_tokens.weight.dtype == torch.float64
    src, tgt_in, _ = padded_batch()
    assert model(src, tgt_in).dtype == torch.float64


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "none", "alibi"])
@pytest.mark.parametrize("assign", [False, True])
def test_save_and_reload_keeps_tying_and_loss_bit_identical(tmp_path, assign, positions):
    model = make_model(positions=positions)
    batch = padded_batch()
    with torch.no_grad():
        loss_before = loss_of(model, *batch)
    torch.save(model.state_dict(), tmp_path / "model.pt")

    fresh = make_model(seed=123, positions=positions)
    with torch.no_grad():
        assert not torch.equal(loss_of(fresh, *batch), loss_before)
        fresh.load_state_dict(torch.load(tmp_path / "model.pt"), assign=assign)
        assert_tied(fresh)
        assert torch.equal(loss_of(fresh, *batch), loss_before)


@pytest.mark.parametrize("positions", ["rope", "none", "alibi"])
def test_no_positional_entries_in_state_dict_or_parameters(positions):
    model = make_model(positions=positions)
    sinusoidal = make_model()
    assert set(model.state_dict()) == set(sinusoidal.state_dict())
    assert model.num_parameters() == sinusoidal.num_parameters()


def test_rope_rotates_self_attention_only_with_one_shared_module():
    model = make_model(positions="rope")
    rotary = model.encoder_layers[0].self_attn.rotary
    assert rotary is not None and rotary.cos.shape == (MAX_SEQ_LEN, 8 // 2)  # d_k = 16 / 2
    self_attns = [layer.self_attn for layer in [*model.encoder_layers, *model.decoder_layers]]
    assert all(attn.rotary is rotary for attn in self_attns)
    assert all(layer.cross_attn.rotary is None for layer in model.decoder_layers)
    assert all(layer.self_attn.rotary is None for layer in make_model().encoder_layers)


def test_rope_self_attention_sees_relative_positions_only():
    attn = make_model(positions="rope").encoder_layers[0].self_attn
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(0))  # (B, L, d_model)

    def attend_at(query_offset: int, key_offset: int) -> torch.Tensor:
        return attn.attend(x, *attn.keys_values(x, key_offset), offset=query_offset)

    assert torch.allclose(attend_at(0, 0), attend_at(30, 30), atol=1e-5)
    assert not torch.allclose(attend_at(0, 0), attend_at(3, 0), atol=1e-3)
    assert not torch.allclose(attend_at(0, 0), attend_at(0, 3), atol=1e-3)


def test_rope_needs_an_even_head_size():
    with pytest.raises(ValueError, match="d_head=3 is odd"):
        make_model(positions="rope", d_model=12, n_heads=4)


def permuted_encoding(model: Transformer) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder outputs of a source without padding, its rows permuted afterwards and before."""
    src = random_ids((2, 9))
    perm = torch.tensor([4, 0, 8, 2, 7, 1, 3, 6, 5])
    return model.encode(src)[:, perm], model.encode(src[:, perm])


def test_encoder_without_positions_is_permutation_equivariant():
    permuted_after, permuted_before = permuted_encoding(make_model(positions="none"))
    assert torch.allclose(permuted_before, permuted_after, atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rope", "alibi"])
def test_encoder_with_positions_is_not_permutation_equivariant(positions):
    permuted_after, permuted_before = permuted_encoding(make_model(positions=positions))
    assert not torch.allclose(permuted_before, permuted_after, atol=1e-3)


def test_positions_on_the_decoder_only_leave_the_encoder_permutation_equivariant():
    permuted_after, permuted_before = permuted_encoding(make_model(src_positions="none"))
    assert torch.allclose(permuted_before, permuted_after, atol=1e-5)
    permuted_after, permuted_before = permuted_encoding(make_model(tgt_positions="none"))
    assert not torch.allclose(permuted_before, permuted_after, atol=1e-3)


@pytest.mark.parametrize(("positions", "equivariant"), [("alibi", True), ("sinusoidal", False)])
def test_alibi_encoder_sees_only_distances(positions, equivariant):
    """|i - j| is unchanged when the sentence is reversed: so are ALiBi's encoder outputs."""
    model = make_model(positions=positions)
    src = random_ids((2, 9))
    reversed_after, reversed_before = model.encode(src).flip(1), model.encode(src.flip(1))
    assert torch.allclose(reversed_before, reversed_after, atol=1e-5) == equivariant


def captured_masks(model: Transformer, src, tgt_in) -> tuple[list, list]:
    """The attention mask each encoder layer and the self-attention mask each decoder layer got."""
    encoder, decoder = [], []
    for layer in model.modules():
        if isinstance(layer, EncoderLayer):
            layer.register_forward_pre_hook(lambda m, args: encoder.append(args[1]))
        if isinstance(layer, DecoderLayer):
            layer.register_forward_pre_hook(lambda m, args: decoder.append(args[3]))
    model(src, tgt_in)
    return encoder, decoder


def test_alibi_masks_are_the_closed_form_plus_padding_and_built_once():
    model = make_model(positions="alibi")
    src, tgt_in, _ = padded_batch()  # src (2, 7), sentence 2 padded after 4 tokens
    encoder, decoder = captured_masks(model, src, tgt_in)
    slopes = alibi_slopes(2).tolist()  # 2 heads: 1/16, 1/256
    assert all(mask is encoder[0] for mask in encoder)  # one mask shared by the layers
    assert all(mask is decoder[0] for mask in decoder)
    mask, self_mask = encoder[0], decoder[0]
    assert mask.shape == (2, 2, 7, 7) and self_mask.shape == (2, 6, 6)
    for h in range(2):
        for i in range(7):
            for j in range(7):
                padded = j >= 4
                assert mask[0, h, i, j].item() == -slopes[h] * abs(i - j)
                expected = -math.inf if padded else -slopes[h] * abs(i - j)
                assert mask[1, h, i, j].item() == expected
                if i < 6 and j < 6:
                    expected = -slopes[h] * (i - j) if j <= i else -math.inf
                    assert self_mask[h, i, j].item() == expected


def test_no_alibi_no_float_masks():
    encoder, decoder = captured_masks(make_model(), *padded_batch()[:2])
    assert encoder[0].dtype == torch.bool and decoder[0] is None  # padding mask; is_causal


def test_alibi_biases_self_attention_only_with_one_shared_module():
    model = make_model(positions="alibi")
    assert isinstance(model.encoder_bias, AlibiBias) and model.encoder_bias is model.decoder_bias
    assert all(layer.self_attn.rotary is None for layer in model.encoder_layers)
    one_side = make_model(src_positions="alibi", tgt_positions="rope")
    assert isinstance(one_side.encoder_bias, AlibiBias) and one_side.decoder_bias is None
    assert all(layer.self_attn.rotary is None for layer in one_side.encoder_layers)
    assert all(layer.self_attn.rotary is not None for layer in one_side.decoder_layers)
    assert make_model().encoder_bias is None and make_model().decoder_bias is None


def test_optimizer_step_keeps_tables_tied():
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_of(model, *padded_batch()).backward()
    optimizer.step()
    assert_tied(model)


def test_shared_matrix_gets_gradient_from_embedding_and_projection():
    model = make_model()
    shared = model.embedding.tgt_token_weight
    src = torch.tensor([[3, 4, 5]])  # rows used only by the source lookup
    tgt_in = torch.tensor([[6, 7]])  # rows used only by the target lookup
    tgt_out = torch.tensor([[8, 9]])

    def shared_grad(logits: torch.Tensor) -> torch.Tensor:
        shared.grad = None
        F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten()).backward()
        return shared.grad.clone()

    def hidden() -> torch.Tensor:
        return model.decode(tgt_in, model.encode(src), src)

    full = shared_grad(model(src, tgt_in))
    from_lookups = shared_grad(F.linear(hidden(), shared.detach()))
    from_projection = shared_grad(F.linear(hidden().detach(), shared))
    assert torch.allclose(full, from_lookups + from_projection, atol=1e-6)

    used_as_input = [3, 4, 5, 6, 7]
    unused = [i for i in range(VOCAB) if i not in used_as_input]
    assert (from_lookups[used_as_input].abs().sum(dim=1) > 0).all()
    assert torch.equal(from_lookups[unused], torch.zeros(len(unused), 16))
    assert (from_projection.abs().sum(dim=1) > 0).all()  # every row is an output class


@pytest.mark.parametrize("config", CONFIGS)
def test_decoder_is_causal(config):
    model = make_model(**config)
    src, tgt_in, _ = padded_batch()
    logits = model(src, tgt_in)
    for t in range(tgt_in.size(1) - 1):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] % (VOCAB - 1)) + 1
        assert torch.equal(model(src, changed)[:, : t + 1], logits[:, : t + 1]), t


@pytest.mark.parametrize("config", CONFIGS)
def test_appending_padding_leaves_real_logits_unchanged(config):
    model = make_model(**config)
    src, tgt_in, _ = padded_batch()
    logits = model(src, tgt_in)
    src_padded = F.pad(src, (0, 5), value=PAD)
    tgt_padded = F.pad(tgt_in, (0, 4), value=PAD)
    assert torch.allclose(model(src_padded, tgt_in), logits, atol=1e-5)
    assert torch.allclose(model(src_padded, tgt_padded)[:, :6], logits, atol=1e-5)


def test_content_at_padded_source_positions_is_ignored():
    model = make_model()
    src, tgt_in, _ = padded_batch()
    logits = model(src, tgt_in)
    memory = model.encode(src)
    # Cross-attention: garbage in memory at padded positions never reaches the decoder.
    garbage_memory = memory.clone()
    garbage_memory[1, 4:] = torch.randn(3, 16) * 100
    assert torch.equal(model.project(model.decode(tgt_in, garbage_memory, src)), logits)
    # Encoder self-attention: whatever vector the pad id embeds to, real positions ignore it.
    with torch.no_grad():
        model.embedding.src_tokens.weight[PAD] = torch.randn(16) * 100
    new_memory = model.encode(src)
    assert not torch.equal(new_memory[1, 4:], memory[1, 4:])
    assert torch.equal(new_memory[1, :4], memory[1, :4])
    # Tied, the pad row also embeds target pads and weighs the pad logit: compare the rest.
    real = tgt_in != PAD
    assert torch.equal(model(src, tgt_in)[real][:, PAD + 1 :], logits[real][:, PAD + 1 :])


def test_one_token_sentence_padded_to_64_is_finite_with_finite_gradients():
    model = make_model().train()
    src = F.pad(torch.tensor([[5]]), (0, 63), value=PAD)
    tgt = F.pad(torch.tensor([[1, 5, 2]]), (0, 61), value=PAD)
    loss = loss_of(model, src, tgt[:, :-1], tgt[:, 1:])
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("config", CONFIGS)
def test_train_mode_without_dropout_equals_eval_mode(config):
    model = make_model(**config)
    src, tgt_in, _ = padded_batch()
    eval_logits = model(src, tgt_in)
    assert torch.equal(model.train()(src, tgt_in), eval_logits)


def test_dropout_makes_train_mode_stochastic():
    model = make_model(dropout=0.3).train()
    src, tgt_in, _ = padded_batch()
    assert not torch.equal(model(src, tgt_in), model(src, tgt_in))
    model.eval()
    assert torch.equal(model(src, tgt_in), model(src, tgt_in))


@pytest.mark.parametrize("positions", ["sinusoidal", "alibi"])
def test_bf16_autocast_forward_on_padded_batch_is_finite(positions):
    model = make_model(positions=positions)
    src, tgt_in, _ = padded_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt_in)
    assert logits.dtype == torch.bfloat16
    assert torch.isfinite(logits).all()


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="n_heads=3"):
        make_model(n_heads=3)


def test_max_seq_len_is_the_embedding_limit():
    model = make_model(max_seq_len=8)
    assert model.max_seq_len == 8
    with pytest.raises(ValueError, match="max_seq_len=8"):
        model.encode(random_ids((1, 9)))


def decode_step_by_step(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor):
    """Hidden states (B, T, d_model) of feeding tgt_in one token at a time through the cache."""
    cache = model.start_decoding(model.encode(src), src)
    steps = [model.decode_step(tgt_in[:, t : t + 1], cache) for t in range(tgt_in.size(1))]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("config", CONFIGS)
def test_decode_step_reproduces_full_decode_at_every_position(config):
    model = make_model(**config)
    src, tgt_in, _ = padded_batch()
    full = model.decode(tgt_in, model.encode(src), src)  # (2, 6, 16)
    assert torch.allclose(decode_step_by_step(model, src, tgt_in), full, atol=1e-5)


def test_cache_holds_cross_attention_keys_values_computed_once():
    model = make_model()
    src, tgt_in, _ = padded_batch()
    calls = []
    for layer in model.decoder_layers:
        for proj in (layer.cross_attn.k_proj, layer.cross_attn.v_proj):
            proj.register_forward_hook(lambda module, args, out: calls.append(module))
    cache = model.start_decoding(model.encode(src), src)
    assert len(calls) == 2 * len(model.decoder_layers)
    for t in range(tgt_in.size(1)):
        model.decode_step(tgt_in[:, t : t + 1], cache)
    assert len(calls) == 2 * len(model.decoder_layers)
    assert cache.position == 6
    for layer_cache in cache.layers:
        assert layer_cache.cross_k.shape == layer_cache.cross_v.shape == (2, 2, 7, 8)
        assert layer_cache.self_k.shape == layer_cache.self_v.shape == (2, 2, 6, 8)


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi"])
def test_reordered_cache_continues_the_gathered_rows(positions):
    model = make_model(positions=positions)
    src, tgt_in, _ = padded_batch()
    cache = model.start_decoding(model.encode(src), src)
    for t in range(3):
        model.decode_step(tgt_in[:, t : t + 1], cache)
    rows = torch.tensor([1, 1, 0])
    cache.reorder(rows)
    hidden = model.decode_step(tgt_in[rows, 3:4], cache)  # (3, 1, d_model)
    full = model.decode(tgt_in[rows, :4], model.encode(src[rows]), src[rows])[:, -1:]
    assert torch.allclose(hidden, full, atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi"])
def test_decode_step_under_bf16_autocast_is_finite_and_close(positions):
    model = make_model(positions=positions)
    src, tgt_in, _ = padded_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stepped = decode_step_by_step(model, src, tgt_in)
        full = model.decode(tgt_in, model.encode(src), src)
    assert torch.isfinite(stepped).all()
    assert torch.allclose(stepped.float(), full.float(), atol=0.1)


def test_decode_step_past_max_seq_len_is_a_clear_error():
    model = make_model(max_seq_len=4)
    src = random_ids((1, 3))
    cache = model.start_decoding(model.encode(src), src)
    for _ in range(4):
        model.decode_step(torch.tensor([[5]]), cache)
    with pytest.raises(ValueError, match="max_seq_len=4"):
        model.decode_step(torch.tensor([[5]]), cache)


def body_parameters(d: int, d_ff: int, n_encoder: int, n_decoder: int) -> int:
    """Parameters besides token tables and output matrix: attention, FFN, pre-LN norms."""
    attn, ffn, norm = 4 * (d * d + d), d * d_ff + d_ff + d_ff * d + d, 2 * d
    encoder_layer = attn + ffn + 2 * norm
    decoder_layer = 2 * attn + ffn + 3 * norm
    return n_encoder * encoder_layer + n_decoder * decoder_layer + 2 * norm


# embedding.share level -> Transformer arguments (config.SHARE_LEVELS) and the number of
# (VOCAB, d_model) matrices the model holds.
TYING_LEVELS = {
    "none": (dict(share_embeddings=False, tie_output=False), 3),
    "decoder": (dict(share_embeddings=False, tie_output=True), 2),
    "all": (dict(share_embeddings=True, tie_output=True), 1),
}


@pytest.mark.parametrize("level", TYING_LEVELS)
def test_tying_levels_have_closed_form_parameter_counts(level):
    arguments, matrices = TYING_LEVELS[level]
    model = make_model(**arguments)
    assert model.num_parameters() == body_parameters(16, 32, 2, 2) + matrices * VOCAB * 16
    unique = {p.data_ptr() for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))


def test_tying_levels_are_parameter_identities():
    embedding_of = {level: make_model(**TYING_LEVELS[level][0]) for level in TYING_LEVELS}
    none, decoder, all_ = embedding_of["none"], embedding_of["decoder"], embedding_of["all"]
    assert_tied(all_)
    assert all_.output_matrix is all_.embedding.src_tokens.weight
    assert decoder.output_matrix is decoder.embedding.tgt_tokens.weight
    assert decoder.embedding.src_tokens.weight is not decoder.embedding.tgt_tokens.weight
    assert none.output_matrix is none.output_weight
    matrices = [
        none.embedding.src_tokens.weight,
        none.embedding.tgt_tokens.weight,
        none.output_weight,
    ]
    assert len({id(m) for m in matrices}) == 3
    assert "output_weight" in none.state_dict() and "output_weight" not in all_.state_dict()


def test_untied_output_matrix_is_the_projection_with_fairseq_s_init():
    torch.manual_seed(0)
    model = Transformer(
        2000,
        2000,
        d_model=64,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=8,
        max_seq_len=8,
        **model_arguments(tie_output=False),
    )
    assert model.output_weight.shape == (2000, 64)
    assert model.output_weight.std().item() == pytest.approx(64**-0.5, rel=0.03)
    hidden = torch.randn(2, 3, 64)
    assert torch.equal(model.project(hidden), hidden @ model.output_weight.T)


def test_untied_output_matrix_survives_save_and_reload(tmp_path):
    model = make_model(share_embeddings=False, tie_output=False)
    batch = padded_batch()
    with torch.no_grad():
        loss_before = loss_of(model, *batch)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    fresh = make_model(seed=5, share_embeddings=False, tie_output=False)
    fresh.load_state_dict(torch.load(tmp_path / "model.pt"))
    with torch.no_grad():
        assert torch.equal(loss_of(fresh, *batch), loss_before)
