"""Shared test helpers: the real Hydra config, tiny models (for decoding too), a script run in a
subprocess or in this process, GPU marks, the jobs a sweep launches, fabricated finished study
runs."""

import copy
import importlib
import json
import locale
import os
import runpy
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import HealthCheck, settings
from omegaconf import DictConfig

from minimt import atomic
from minimt.data.batching import Batch, flat, flat_batch
from minimt.model.positions import as_factory
from minimt.model.transformer import Transformer
from minimt.study.plan import load_plans
from tests.warm_python import Client

REPO = Path(__file__).resolve().parents[1]
PLANS = load_plans(REPO / "configs" / "plan")  # the study's plan files
OLD_RUNS = REPO / "tests" / "data" / "old_runs"  # a frozen run of every run format


def todays_frozen_run() -> Path:
    """The frozen run that today's code saved (the newest with a starts.json)."""
    return [p for p in sorted(OLD_RUNS.glob("format_*")) if (p / "starts.json").is_file()][-1]


# The marks of a test that needs a GPU: `pytest -m gpu` selects it, no CUDA device skips it.
ON_CUDA = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


ENV = os.environ | {"OMP_NUM_THREADS": "1", "MINIMT_ALLOCATOR": "system"}
ENV.pop("HYDRA_FULL_ERROR", None)
WARM_PYTHON = Client(ENV, REPO)  # started at the first script run of this pytest process

# A script run as __main__ by `python -c PRELUDE + RUN_AS_MAIN <script> <args>`
RUN_AS_MAIN = """
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Tests run a script one of two ways: end to end in a process of its own (`run_script`, forked
# from a warm Python; `script_command` for a fresh process that a test signals while it runs), or
# in this process (`run_in_process`), where a test can patch what the script calls.


def script_command(script: str, *args: str) -> list[str]:
    """The command line running REPO/scripts/<script> (e.g. `translate.py`) with `args`."""
    return [sys.executable, str(REPO / "scripts" / script), *args]


def run_script(
    script: str,
    *args: str,
    stdin: bytes | str = b"",
    prelude: str = "",
    timeout: float = 600,
    **env: str,
) -> subprocess.CompletedProcess:
    """Run REPO/scripts/<script> in a process of its own with one torch thread and the system
    allocator, `env` added to the environment; stdout and stderr captured, as text when `stdin`
    is text. `prelude`: Python run first in that process, to patch what the script will call.
    The process is forked from this pytest process's warm Python (tests/warm_python.py) where
    the environment allows, else started fresh."""
    command = script_command(script, *args)
    text = isinstance(stdin, str)
    stdin_bytes = stdin.encode(locale.getpreferredencoding(False)) if text else stdin
    if warm := WARM_PYTHON.run(command[1:], ENV | env, stdin_bytes, prelude, timeout):
        returncode, out, err = warm
        if text:
            out, err = (text_of(data) for data in (out, err))
        return subprocess.CompletedProcess(command, returncode, out, err)
    if prelude:
        command = [sys.executable, "-c", prelude + RUN_AS_MAIN, *command[1:]]
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=text,
        env=ENV | env,
        cwd=REPO,
        timeout=timeout,
    )


def text_of(data: bytes) -> str:
    """`data` as subprocess.run(text=True) gives a child's output."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run_in_process(script: str, argv: list[str], capsys=None) -> tuple[int | str | None, str, str]:
    """(exit status or message, stdout, stderr) of REPO/scripts/<script> run as __main__ in this
    process with `argv`, without its allocator re-exec; stdout and stderr as `capsys` captured
    them (empty without it). The status is None when the script returns; an exception escaping
    it comes back as `uncaught <type>: <message>` (the traceback a user would see), never as an
    `error: ...` line."""
    path = REPO / "scripts" / script
    saved, sys.argv = sys.argv, [str(path), *argv]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MINIMT_ALLOCATOR", "system")
            runpy.run_path(str(path), run_name="__main__")
        status = None
    except SystemExit as exit:
        status = exit.code
    except (Exception, KeyboardInterrupt) as error:
        status = f"uncaught {type(error).__name__}: {error}"
    finally:
        sys.argv = saved
    out, err = capsys.readouterr() if capsys else ("", "")
    return status, out, err


def temp_files(*folders: Path) -> list[Path]:
    """The temp files of atomic writes left under `folders`."""
    return [path for folder in folders for path in folder.rglob(f"*{atomic.TEMP_SUFFIX}")]


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error: ...` line a failed script printed on stderr (progress bars aside)."""
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and stderr.endswith(errors[0] + "\n"), stderr
    return errors[0]


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings of a fuzz test: `examples` cases, the same on every run, in `make test`;
    20 times as many, freshly drawn, under `make fuzz` (MINIMT_FUZZ=long)."""
    long = os.environ.get("MINIMT_FUZZ") == "long"
    return settings(
        max_examples=examples * (20 if long else 1),
        derandomize=not long,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def compose_config(*overrides: str) -> DictConfig:
    """The config `scripts/train.py` would see with these command-line overrides: a copy of
    the one composed for them first in this process (composing takes 60 times as long as a
    copy), so a test may change it. Interpolations (`${oc.env:...}`) resolve when read."""
    return copy.deepcopy(composed(overrides))


@cache
def composed(overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def load_script(path: str) -> ModuleType:
    """The script at REPO/path imported by its file name, its folder on sys.path: how the
    scripts of one folder import each other (`from benchmark import ...`)."""
    file = REPO / path
    if str(file.parent) not in sys.path:
        sys.path.append(str(file.parent))
    module = importlib.import_module(file.stem)
    assert Path(module.__file__) == file, f"{file.stem} was imported from {module.__file__}"
    return module


def tiny_run_overrides(multi30k_dir, data_dir, *extra: str) -> list[str]:
    """experiment=smoke shrunk further: 300 pairs, d_model 32, fp32, no test sets, no validation
    before the end and that one on 10 pairs (an untrained model decodes to the length cap: the
    whole validation set took most of a tiny run's time), a checkpoint every 10 steps."""
    return [
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={data_dir}",
        "data.max_train_pairs=300",
        "data.max_val_pairs=10",
        "data.test_sets=[]",
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.precision=fp32",
        "trainer.val_every=1000",
        "trainer.log_every=5",
        "trainer.save_every=10",
        *extra,
    ]


# For a run whose test reads neither its TensorBoard views nor its final validation's BLEU:
# no views, and a final validation of 10 pairs.
QUICK_FINISH = ("views=false", "data.max_val_pairs=10")


TOY = REPO / "tests" / "data" / "toy"


def toy_run_overrides(data_dir, *extra: str) -> list[str]:
    """The committed toy corpus (400 training pairs, 40 val and 40 test) on a tiny model."""
    files = [
        f"data.{split}.{side}={TOY / f'{split}.{lang}'}"
        for split in ("train", "val", "test")
        for side, lang in (("src", "de"), ("tgt", "en"))
    ]
    return [
        "experiment=smoke",
        "data=parallel_text",
        *files,
        f"data.dir={data_dir}",
        "tokenizer.vocab_size=400",
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.precision=fp32",
        *extra,
    ]


def model_arguments(**overrides) -> dict:
    """Transformer keyword arguments beside the sizes, as the default config sets them but untied
    source and target tables; `positions` sets both sides' encoding, and a side's encoding may be
    a built-in name."""
    both = overrides.pop("positions", "sinusoidal")
    args = dict(
        dropout=0.1,
        attention_dropout=0.0,
        pad_id=0,
        norm_first=True,
        tie_output=True,
        src_positions=both,
        tgt_positions=both,
        scale_embedding=True,
        share_embeddings=False,
        init_std=None,
    )
    args |= overrides
    return args | {side: as_factory(args[side]) for side in ("src_positions", "tgt_positions")}


def tiny_transformer(vocab_size: int, seed: int = 0, **overrides) -> Transformer:
    """A seeded Transformer small enough for unit tests (d_model 16, 2+2 layers, no dropout)."""
    torch.manual_seed(seed)
    args = dict(
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_seq_len=72,
        pad_id=0,
        share_embeddings=True,
    )
    return Transformer(vocab_size, vocab_size, **model_arguments(**(args | overrides)))


def collate(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    """Add <eos>/<bos> and pad one batch of id lists (what BatchedPairs.collate does from Arrow)."""
    return flat_batch(flat(src_ids), flat(tgt_ids))


def causal_mask(n: int) -> torch.Tensor:
    """(n, n) bool, True on and below the diagonal: query i may attend to keys 0..i."""
    return torch.ones(n, n, dtype=torch.bool).tril()


def start_sweep(command: list[str]) -> subprocess.Popen:
    """Start a sweep's launcher in a session of its own (a signal to its group reaches only the
    sweep), its output and errors in one text stream. OMP_NUM_THREADS unset, as in a user's
    shell: torch's OpenMP runtime then starts a thread as torch loads, which a stop signal to
    the launcher must not reach (the runs set their own thread count)."""
    environment = {k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        start_new_session=True,
    )


# Tiny models for decoding: a vocabulary of 20, specials 0-2.

PAD, BOS, EOS = 0, 1, 2


VOCAB = 20


def make_model(
    max_seq_len: int = 32, d_model: int = 16, n_layers: int = 1, seed: int = 0, **overrides
) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(
        VOCAB,
        VOCAB,
        d_model=d_model,
        n_heads=2,
        n_encoder_layers=n_layers,
        n_decoder_layers=n_layers,
        d_ff=2 * d_model,
        max_seq_len=max_seq_len,
        **model_arguments(
            **({"dropout": 0.0, "pad_id": PAD, "share_embeddings": True} | overrides)
        ),
    ).eval()


def pad_batch(sentences: list[list[int]]) -> torch.Tensor:
    """Right-pads token lists into a (B, S) tensor."""
    width = max(map(len, sentences))
    return torch.tensor([s + [PAD] * (width - len(s)) for s in sentences])


def script_project(model: Transformer, monkeypatch, eos_steps: list[int]) -> list[int]:
    """Make step k emit token 3 + k, or <eos> for sentence b once k == eos_steps[b]; returns
    the number of rows projected at each step.

    The rows are the sentences still decoding, in batch order: those that emitted <eos> have
    left the batch. So have those at their maximum length, which only the scripts without <eos>
    (every row the same) reach: they take the first rows.
    """
    calls: list[int] = []

    def project(hidden: torch.Tensor) -> torch.Tensor:  # (B', 1, d_model) -> (B', 1, V)
        step = len(calls)
        calls.append(hidden.size(0))
        live_eos_steps = [end for end in eos_steps if end >= step][: hidden.size(0)]
        tokens = torch.where(torch.tensor(live_eos_steps) == step, EOS, 3 + step)
        return F.one_hot(tokens, VOCAB).float()[:, None, :]

    monkeypatch.setattr(model, "project", project)
    return calls


SOURCES = [[5, 6, 7, 8, 9], [10, 11, 12], [3], [4, 13, 14, 15, 16, 17, 18]]


REVERSAL_SOURCES = [[3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 3], [17, 5, 9, 12]]


@cache
def reversal_model() -> Transformer:
    """A tiny model overfit to reversing REVERSAL_SOURCES (trained once, shared: do not modify)."""
    targets = [[BOS, *reversed(s), EOS] for s in REVERSAL_SOURCES]
    src, tgt = pad_batch(REVERSAL_SOURCES), pad_batch(targets)
    model = make_model(d_model=32).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):  # greedy output is right from about step 20 on
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


# Every positional encoding, and one side's differing from the other's.
ENCODINGS = [
    *(dict(positions=name) for name in ["sinusoidal", "learned", "none", "rope", "alibi"]),
    dict(src_positions="none"),
    dict(tgt_positions="none"),
    dict(src_positions="rope", tgt_positions="alibi"),
    dict(src_positions="alibi", tgt_positions="learned"),
]


SPECIALS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def random_model(seed: int = 0, **overrides) -> Transformer:
    return make_model(n_layers=2, seed=seed, share_embeddings=False, **overrides)


# On CUDA the skipped updates are counted at log, validation and checkpoint steps (loop.settle).
DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_CUDA)])


def sweep_jobs(*command_line: str) -> list[list[str]]:
    """The override list of every job `train.py -m` would launch (as Hydra's BasicSweeper does)."""
    parser = OverridesParser.create()
    fixed = [
        o.input_line for o in parser.parse_overrides(command_line) if not o.is_sweep_override()
    ]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    overrides = parser.parse_overrides([*params, *command_line])
    return BasicSweeper.split_arguments(overrides, max_batch_size=None)[0]


# Fabricated finished study runs, as the training side leaves them (metrics.json with "config"
# and "choices"), for the report's tests and the study scripts' fault tests.

LONG_SETS = ("long_16-20", "long_21-25")
# Test BLEU written into each fabricated metrics.json: arm -> seed -> BLEU (on every test set).
TEST_BLEU = {
    "full_sinusoidal": {1: 30.0, 2: 32.0, 3: 31.0},
    "full_learned": {1: 20.0, 2: 22.5, 3: 20.5},  # 10 +- 0.5 below: worse
    "full_rope": {1: 30.1, 2: 31.9, 3: 31.0},  # 0 +- 0.1: equivalent
    "share_none": {1: 35.0},  # one seed: inconclusive
    "length_sinusoidal": {1: 25.0, 2: 27.0},
    "length_learned": {1: 24.0, 2: 27.5},
    "control_sinusoidal": {1: 26.0, 2: 26.5},
}
TEST_CHRF = {1: 50.0, 2: 54.0, 3: 52.0}
TOY_PROTOCOL = {
    "experiment": "toy",
    "precision": "fp32",
    "device": "cpu",
}  # a protocol with no plan


def saved_config(arm: str, seed: int) -> dict:
    """The resolved config of a run of `arm`."""
    pe = arm.split("_")[-1] if arm != "share_none" else "sinusoidal"
    words = {
        "full": {},
        "fairseq": {},
        "share": {},
        "length": {"train_max_words": 15, "long_tests_over": 15},
        "control": {"long_tests_over": 15, "train_subsample": 900},
    }[arm.split("_")[0]]
    return {
        "pe": {"encoder": pe, "decoder": pe, "scale": 1.0, "init_std": 0.02},
        "embedding": {"scale": True, "share": "none" if arm == "share_none" else "all"}
        | {"init_std": None},
        "data": {"max_train_len": 100, "train_max_words": None, "train_subsample": None} | words,
        "tokenizer": {"vocab_size": 1000, "joint": True},
        "model": {"d_model": 64, "n_heads": 2, "n_encoder_layers": 2, "n_decoder_layers": 2}
        | {"d_ff": 128, "dropout": 0.1, "max_seq_len": 128},
        "trainer": {"seed": seed, "batch_tokens": 1024, "accumulate": 1, "lr": 3e-3}
        | {"warmup_steps": 50, "val_every": 100, "max_steps": 5000, "max_minutes": 10.0}
        | {"patience": 3, "min_delta": 0.0},
    }


def write_run(
    run_dir, arm: str, seed: int, protocol: dict = TOY_PROTOCOL, bleu: float | None = None
):
    """A finished run as the training side leaves it (metrics.json with "config", "choices")."""
    run_dir.mkdir(parents=True)
    (run_dir / ".hydra").mkdir()
    val_history = [{"step": s, "loss": 5.0 - s / 100, "bleu": s / 10 + seed} for s in (100, 200)]
    bleu = TEST_BLEU[arm][seed] if bleu is None else bleu
    scores = {
        "bleu": bleu,
        "chrf": TEST_CHRF.get(seed, 50.0),
        "beam": 5,
        "signature": "nrefs:1|tok:13a",
    }
    metrics = {
        "config": saved_config(arm, seed),
        "choices": {"experiment": protocol["experiment"], "arm": arm},
        "precision": protocol["precision"],
        "steps": 200 + seed,
        "best_step": 200,
        "stop_reason": "trainer.patience reached (3 validations without a gain)",
        "train_seconds": 60.0 * seed,
        "num_parameters": 2000 if arm == "share_none" else 1234,
        "best_val_bleu": val_history[-1]["bleu"],
        "val_history": val_history,
        "data": {"train_pairs": 900},
        "test": {
            name: {**scores, "length_ratio": 0.9, "early_stop_share": 0.25}
            for name in ("test", *(() if arm.startswith(("full", "share")) else LONG_SETS))
        },
    }
    if protocol.get("device"):
        metrics["device"] = protocol["device"]
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
