"""Settings drawn against the real data and a trained checkpoint: each trains or decodes, or stops
in one line naming the key before the first update or before decoding."""

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minimt.translator import Translator
from tests.faults.inject import assert_one_error_line, output_of
from tests.helpers import (
    fuzz_settings,
    tiny_run_overrides,
)


@pytest.mark.slow
@fuzz_settings(examples=5)
@given(
    pe=st.sampled_from(["sinusoidal", "learned"]),
    max_seq_len=st.integers(4, 72),
    margin=st.integers(-2, 40),
    batch_tokens=st.one_of(st.integers(1, 96), st.just(1024)),
)
def test_table_lengths_and_batch_size_train_or_stop_in_one_line_before_the_first_update(
    multi30k_dir, trained, tmp_path_factory, capsys, pe, max_seq_len, margin, batch_tokens
):
    """data.max_train_len drawn `margin` positions inside the table (or past it)."""
    root = tmp_path_factory.mktemp("lengths")
    max_train_len = max(max_seq_len - 1 - margin, 1)
    overrides = tiny_run_overrides(multi30k_dir, trained / "data", "views=false")
    drawn = [f"pe={pe}", f"model.max_seq_len={max_seq_len}", f"data.max_train_len={max_train_len}"]
    argv = [*overrides, *drawn, f"trainer.batch_tokens={batch_tokens}", "trainer.max_steps=2"]
    argv += ["trainer.val_every=2", f"hydra.run.dir={root / 'run'}"]
    code, err = output_of("train", argv, capsys)
    if code is None:
        assert (root / "run" / "metrics.json").is_file() and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(code, err)
    assert any(key in line for key in ("model.max_seq_len", "trainer.batch_tokens")), line
    assert not list((root / "run").glob("checkpoints/step_*.pt")), "stopped after an update"


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.from_run(trained / "run", device="cpu")


@fuzz_settings(examples=8)
@given(
    script=st.sampled_from(["translate", "evaluate"]),
    beam=st.one_of(st.integers(1, 4), st.tuples(st.just("limit"), st.integers(-1, 1))),
    length_penalty=st.floats(-1, 4, allow_nan=False),
    batch_tokens=st.sampled_from(["null", "1", "3", "10000"]),
    checkpoint=st.sampled_from(["best", "last", "step_2.pt"]),
)
def test_decoding_arguments_against_the_checkpoint_decode_or_stop_in_one_line(
    trained,
    translator,
    tmp_path_factory,
    capsys,
    script,
    beam,
    length_penalty,
    batch_tokens,
    checkpoint,
):
    limit = translator.model.output_matrix.size(0) // 2
    beam = beam if isinstance(beam, int) else limit + beam[1]
    work = tmp_path_factory.mktemp("decode")
    shutil.copytree(trained / "run", work / "run")
    out = work / "out.en"
    argv = [f"run={work / 'run'}", f"checkpoint={checkpoint}", f"beam={beam}"]
    argv += [f"length_penalty={length_penalty}", f"batch_tokens={batch_tokens}"]
    if script == "translate":
        argv += [f"input={trained / 'src.de'}", f"output={out}"]
    else:
        argv += [f"src={trained / 'src.de'}", f"ref={trained / 'ref.en'}", f"out={out}"]
    code, err = output_of(script, argv, capsys)
    if code is None:
        assert len(out.read_text().splitlines()) == 2
        return
    line = assert_one_error_line(code, err)
    named = "length_penalty" if not length_penalty >= 0 else "beam"
    assert f"{named}=" in line and not out.exists(), line
    if named == "beam":
        assert f"has {2 * limit}: use beam <= {limit}" in line, line


@fuzz_settings(examples=6)
@given(
    max_len_a=st.floats(0, 50, allow_nan=False),
    max_len_b=st.integers(1, 500),
    beam=st.integers(1, 3),
    batch_tokens=st.integers(1, 64),
)
def test_output_length_settings_never_outgrow_the_position_table(
    trained, translator, max_len_a, max_len_b, beam, batch_tokens
):
    translator.max_len_a, translator.max_len_b = max_len_a, max_len_b
    translator.batch_tokens = batch_tokens
    hyps = translator.translate_ids(
        (trained / "src.de").read_text().splitlines() + ["ein " * 200], beam=beam
    )
    assert len(hyps) == 3
    assert all(len(ids) <= translator.model.max_seq_len - 1 for ids in hyps)
