"""A model exported to CTranslate2 is the same model: for every built-in configuration on a tiny
random model (every encoding, mixed sides, both norm placements, every tying level, scaling on
and off, sources near max_seq_len) its teacher-forced log-probabilities are minimt's within
1e-4, the check a wrong mapping cannot pass (greedy agreement alone can); the frozen runs of
every run format decode token for token as minimt decodes them (greedy, beam 2 and 5); an int8
export leaves the PyTorch weights as they were; what cannot export is one line."""

import importlib
import json
import shutil

import pytest
import torch

from minimt.config import build_model
from minimt.data.splits import load_held_out
from minimt.data.tokenizer import BOS_ID, EOS_ID, TokenizerPair, train_bpe
from minimt.export import RECORD, ExportError, ctranslate2, export_run, save_model, vocabulary
from minimt.exported import ExportedTranslator
from minimt.metrics import corpus_scores
from minimt.translator import Translator
from tests.helpers import REPO, TOY, compose_config, run_in_process

pytest.importorskip(
    "ctranslate2", reason='the export extra is not installed: pip install -e ".[export]"'
)

OLD_RUNS = sorted((REPO / "tests" / "data" / "old_runs").iterdir())
TINY = ("model.d_model=32", "model.n_heads=4", "model.n_encoder_layers=2")
TINY += ("model.n_decoder_layers=2", "model.d_ff=64", "model.max_seq_len=64", "model.dropout=0")
CONFIGURATIONS = {
    "default": (),  # sinusoidal, pre-LN, share=all, sqrt(d_model) scaling
    "learned": ("pe=learned",),
    "none": ("pe=none",),
    "rope": ("pe=rope",),
    "alibi": ("pe=alibi",),
    "sinusoidal_alibi": ("pe.decoder=alibi",),
    "rope_none": ("pe=rope", "pe.decoder=none"),
    "alibi_learned": ("pe=alibi", "pe.decoder=learned"),
    "post_ln": ("model.norm_first=false",),
    "share_decoder": ("embedding.share=decoder",),
    "share_none": ("embedding.share=none", "tokenizer.joint=false"),
    "unscaled": ("embedding.scale=false",),
    "post_ln_rope_untied_unscaled": (
        "model.norm_first=false",
        "pe=rope",
        "embedding.share=none",
        "tokenizer.joint=false",
        "embedding.scale=false",
    ),
}


@pytest.fixture(scope="module")
def tokenizers() -> TokenizerPair:
    lines = [
        *(TOY / "train.de").read_text().splitlines(),
        *(TOY / "train.en").read_text().splitlines(),
    ]
    tokenizer = train_bpe(lines, vocab_size=300)
    return TokenizerPair(tokenizer, tokenizer)


def tiny_model(tokenizers: TokenizerPair, *overrides: str):
    """A random model of the configuration, every weight moved off its init (LayerNorm gains and
    biases included) so that a tensor mapped to the wrong place shows."""
    torch.manual_seed(0)
    cfg = compose_config(*TINY, *overrides)
    model = build_model(cfg, tokenizers.src_vocab_size, tokenizers.tgt_vocab_size).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def pairs(tokenizers: TokenizerPair, limit: int) -> list[tuple[list[int], list[int]]]:
    """Toy test pairs as ids, then long ones: several pairs joined, cut to `limit` tokens."""
    src = tokenizers.encode_src((TOY / "test.de").read_text().splitlines())
    tgt = tokenizers.encode_tgt((TOY / "test.en").read_text().splitlines())
    joined = [
        (sum(src[i : i + 6], [])[:limit], sum(tgt[i : i + 6], [])[:limit]) for i in range(0, 36, 6)
    ]
    return list(zip(src[:20], tgt[:20], strict=True)) + joined


def minimt_log_probs(model, src: list[int], tgt: list[int]) -> torch.Tensor:
    """log p of each target token and <eos>, teacher-forced."""
    with torch.no_grad():
        logits = model(torch.tensor([src + [EOS_ID]]), torch.tensor([[BOS_ID] + tgt]))
    log_probs = logits.log_softmax(-1)[0]
    return log_probs[torch.arange(len(tgt) + 1), torch.tensor(tgt + [EOS_ID])]


@pytest.mark.parametrize("overrides", CONFIGURATIONS.values(), ids=CONFIGURATIONS)
def test_the_export_scores_every_token_as_minimt_does(tokenizers, tmp_path, overrides):
    model = tiny_model(tokenizers, *overrides)
    save_model(model, tokenizers, tmp_path / "export", "float32", {})
    engine = ctranslate2().Translator(str(tmp_path / "export"), device="cpu", intra_threads=1)
    tested = pairs(tokenizers, model.max_seq_len - 2)  # <eos> or <bos> makes max_seq_len - 1
    assert max(len(src) for src, _ in tested) == model.max_seq_len - 2
    src_tokens, tgt_tokens = vocabulary(tokenizers.src), vocabulary(tokenizers.tgt)
    scored = engine.score_batch(
        [[src_tokens[i] for i in src] for src, _ in tested],
        [[tgt_tokens[i] for i in tgt] for _, tgt in tested],
    )
    worst = max(
        (minimt_log_probs(model, src, tgt) - torch.tensor(result.log_probs)).abs().max().item()
        for (src, tgt), result in zip(tested, scored, strict=True)
    )
    assert worst < 1e-4


@pytest.mark.parametrize("run", OLD_RUNS, ids=lambda run: run.name)
def test_a_frozen_run_of_every_format_decodes_as_minimt_decodes_it(run, tmp_path):
    export_run(run, tmp_path / "export")
    lines = (TOY / "test.de").read_text().splitlines()
    ours = Translator.from_run(run, device="cpu")
    theirs = ExportedTranslator.from_export(tmp_path / "export", threads=1)
    for beam in (1, 2, 5):
        assert theirs.translate_ids(lines, beam) == ours.translate_ids(lines, beam), beam


def test_an_int8_export_leaves_the_pytorch_weights_as_they_were(tokenizers, tmp_path):
    model = tiny_model(tokenizers)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    save_model(model, tokenizers, tmp_path / "export", "int8", {})
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert (tmp_path / "export" / "model.bin").stat().st_size > 0


def test_the_export_holds_the_tokenizer_and_a_record_of_what_was_exported(tmp_path):
    run = OLD_RUNS[-1]
    status, out, _ = run_in_process(
        "export.py", [f"run={run}", f"out={tmp_path / 'export'}", "quantization=int8"]
    )
    assert status is None
    record = json.loads((tmp_path / "export" / RECORD).read_text())
    assert record["quantization"] == "int8" and record["checkpoint"].endswith("best.pt")
    assert record["tokenizer_digest"] == TokenizerPair.load(run).fingerprint
    assert record["ctranslate2"] == ctranslate2().__version__
    assert set(record["decoding"]) == {
        "max_len_a",
        "max_len_b",
        "test_beam",
        "length_penalty",
        "max_seq_len",
    }
    assert TokenizerPair.load(tmp_path / "export").fingerprint == record["tokenizer_digest"]


def test_translate_and_evaluate_decode_an_export_as_the_run_and_keep_both_scores(tmp_path, capsys):
    run = shutil.copytree(OLD_RUNS[-1], tmp_path / "run")
    export = tmp_path / "export"
    export_run(run, export)
    source = TOY / "test.de"
    runs_output, exports_output = (
        run_in_process("translate.py", [f"run={where}", f"input={source}", "beam=5"], capsys)[1]
        for where in (run, export)
    )
    assert exports_output == runs_output and runs_output.count("\n") == 40
    files = [f"src={source}", f"ref={TOY / 'test.en'}", "beam=5"]
    for extra in ([], [f"export={export}"]):
        status, _, _ = run_in_process("evaluate.py", [f"run={run}", *files, *extra], capsys)
        assert status is None
    scores = json.loads((run / "metrics.json").read_text())["eval"]
    ours, theirs = scores["test.de.beam5.best"], scores["test.de.beam5.best.ctranslate2-float32"]
    assert theirs["bleu"] == ours["bleu"] and theirs["chrf"] == ours["chrf"]


def test_what_cannot_export_is_one_line_naming_it(tokenizers, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests" / "plugins"))
    model = tiny_model(tokenizers, "pe.encoder=my_encodings.BinaryPositions")
    with pytest.raises(ExportError, match="source side's positional encoding my_encodings.Binary"):
        save_model(model, tokenizers, tmp_path / "export", "float32", {})
    assert not (tmp_path / "export").exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(ExportError, match="quantization=int4: use one of float32, int8"):
        save_model(tiny_model(tokenizers), tokenizers, tmp_path / "export", "int4", {})


def test_an_existing_export_is_replaced_only_when_asked(tmp_path):
    run, out = OLD_RUNS[-1], tmp_path / "export"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="overwrite=true"):
        export_run(run, out)
    assert (out / "notes.txt").read_text() == "mine"
    export_run(run, out, overwrite=True)
    assert not (out / "notes.txt").exists() and (out / RECORD).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no building folder left


def test_without_ctranslate2_an_export_says_how_to_install_it(monkeypatch):
    real = importlib.import_module

    def without(name, *args):
        if name.startswith("ctranslate2"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without)
    with pytest.raises(ExportError, match=r'pip install -e "\.\[export\]"'):
        ctranslate2()


def test_the_score_check_catches_a_wrong_mapping(tokenizers, tmp_path, monkeypatch):
    # without its table CTranslate2 adds its own, different sinusoid: greedy outputs can still
    # agree, scores cannot
    monkeypatch.setattr("minimt.export.set_positions", lambda *args: None)
    model = tiny_model(tokenizers)
    save_model(model, tokenizers, tmp_path / "export", "float32", {})
    engine = ctranslate2().Translator(str(tmp_path / "export"), device="cpu", intra_threads=1)
    src, tgt = pairs(tokenizers, model.max_seq_len - 2)[0]
    tokens = vocabulary(tokenizers.src)
    (result,) = engine.score_batch([[tokens[i] for i in src]], [[tokens[i] for i in tgt]])
    assert (minimt_log_probs(model, src, tgt) - torch.tensor(result.log_probs)).abs().max() > 1e-2


def test_the_export_benchmark_decodes_with_each_engine_side_by_side(tmp_path, capsys):
    files = [f"src={TOY / 'test.de'}", f"ref={TOY / 'test.en'}", "repeats=1", "beam=2"]
    out = tmp_path / "bench.json"
    status, printed, _ = run_in_process(
        "bench/export.py", [f"run={OLD_RUNS[-1]}", *files, f"out={out}"], capsys
    )
    assert status is None, printed
    report = json.loads(out.read_text())
    engines = report["engines"]
    assert list(engines) == [
        "minimt fp32",
        "minimt bf16",
        "ctranslate2 float32",
        "ctranslate2 int8",
    ]
    assert engines["ctranslate2 float32"]["identical_to_minimt_fp32"] == 1.0
    assert engines["ctranslate2 float32"]["bleu"] == engines["minimt fp32"]["bleu"]
    assert report["sentences"] == 40 and report["machine"] in printed


@pytest.mark.slow  # decodes test_2016_flickr twice
def test_a_trained_runs_export_gives_its_beam_5_translations_and_bleu(smoke_run, tmp_path):
    run, _ = smoke_run
    ours = Translator.from_run(run, device="cpu")
    ours.precision = "fp32"  # the export's float32, whatever the run trained in
    sources, references = load_held_out(ours.config.data, ["test_2016_flickr"])["test_2016_flickr"]
    theirs = ExportedTranslator.from_export(export_run(run, tmp_path / "export"), threads=1)
    expected, found = (t.translate(sources, beam=5) for t in (ours, theirs))
    assert found == expected
    assert corpus_scores(found, references).bleu == corpus_scores(expected, references).bleu
