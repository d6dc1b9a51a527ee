"""A run directory damaged as users damage them, fed to every script that reads one.

Each example copies a small trained run, damages one of its files (cut short at a drawn offset,
drawn bytes flipped, swapped for the same file of a run with another vocabulary and d_model,
deleted, made a folder so it cannot be read as a file, or, for a checkpoint, saved again well
formed with one drawn weight or optimizer value made NaN or inf) and runs translate.py,
evaluate.py or average_checkpoints.py on it. The script either succeeds with the output the
undamaged run gives, or ends with one `error:` line that names the damaged file, and the run
directory is unchanged.
"""

import contextlib
import hashlib
import io
import itertools
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from minimt.checkpoint import load_checkpoint, tensors_in
from minimt.train.loop import train
from scripts import average_checkpoints, evaluate, translate
from tests.helpers import (
    compose_config,
    error_line,
    fuzz_settings,
    run_in_process,
    run_script,
    tiny_run_overrides,
)

SCRIPTS = {"translate": translate, "evaluate": evaluate, "average_checkpoints": average_checkpoints}
RUN_FILES = [
    ".hydra/config.yaml",
    "tokenizer.json",
    "checkpoints/best.pt",
    "checkpoints/step_20.pt",
    "checkpoints/step_10.pt",
    "metrics.json",
]
# What each command reads; damage to any other file must not change its output.
TOKENIZER, BEST, STEP_20, STEP_10 = RUN_FILES[1:5]
COMMANDS = {
    "translate best": ("translate", ["checkpoint=best"], {TOKENIZER, BEST}),
    "translate last": ("translate", ["checkpoint=last"], {TOKENIZER, STEP_20}),
    "evaluate": ("evaluate", ["beam=1"], {TOKENIZER, BEST, "metrics.json"}),
    "average": ("average_checkpoints", ["last=2"], {STEP_10, STEP_20}),
}
DAMAGES = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1, exclude_max=True)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1),
    ),
    st.sampled_from([("swap",), ("delete",), ("folder",)]),
)
CHECKPOINTS = [name for name in RUN_FILES if name.endswith(".pt")]
POISONS = st.tuples(
    st.just("poison"),
    st.sampled_from(["model", "optimizer"]),
    st.floats(0, 1, exclude_max=True),  # which tensor
    st.floats(0, 1, exclude_max=True),  # which of its values
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
DAMAGED_FILES = st.one_of(
    st.tuples(st.sampled_from(RUN_FILES), DAMAGES), st.tuples(st.sampled_from(CHECKPOINTS), POISONS)
)
GERMAN, ENGLISH = "Ein Hund rennt.\nZwei Männer spielen.\n", "A dog runs.\nTwo men play.\n"


@pytest.fixture(scope="module")
def runs(multi30k_dir, tmp_path_factory) -> tuple[Path, Path]:
    """A small trained run with step checkpoints at 10 and 20, and a run with another vocabulary
    and d_model whose files are swapped in."""
    root = tmp_path_factory.mktemp("fuzz_runs")

    def tiny_run(name: str, *extra: str) -> Path:
        overrides = tiny_run_overrides(multi30k_dir, root / "data", "views=false", *extra)
        cfg = compose_config(*overrides, "trainer.max_steps=20", "data.max_val_pairs=10")
        train(cfg, root / name)
        (root / name / ".hydra").mkdir()
        OmegaConf.save(cfg, root / name / ".hydra" / "config.yaml")  # as Hydra does
        return root / name

    other = tiny_run("other", "model.d_model=16", "model.d_ff=32", "tokenizer.vocab_size=600")
    return tiny_run("run"), other


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "in.de").write_text(GERMAN)
    (folder / "in.en").write_text(ENGLISH)
    return folder / "in.de", folder / "in.en"


def damage(run: Path, other: Path, name: str, how: tuple) -> None:
    path = run / name
    if how[0] == "cut":
        path.write_bytes(path.read_bytes()[: int(how[1] * path.stat().st_size)])
    elif how[0] == "flip":
        data = bytearray(path.read_bytes())
        for where, mask in how[1]:
            data[int(where * len(data))] ^= mask
        path.write_bytes(bytes(data))
    elif how[0] == "swap":
        shutil.copy(other / name.replace("step_20", "step_10"), path)
    elif how[0] == "delete":
        path.unlink()
    elif how[0] == "poison":
        poison(path, *how[1:])
    else:
        path.unlink()
        path.mkdir()


def poison(path: Path, part: str, which: float, where: float, value: float) -> None:
    """Save the checkpoint at `path` again with one value of one of its `part`'s floating-point
    tensors (the `which` fraction along their list, the `where` fraction into it) set to
    `value`: a well-formed file with non-finite weights, as a diverged run would leave. best.pt
    holds no optimizer state: its weights are poisoned instead."""
    checkpoint = torch.load(path, weights_only=True)
    tensors = [t for _, t in tensors_in(checkpoint.get(part, checkpoint["model"]), "")]
    tensor = tensors[int(which * len(tensors))]
    tensor.view(-1)[int(where * tensor.numel())] = value
    torch.save(checkpoint, path)


def snapshot(run: Path) -> dict[Path, bytes | None]:
    return {p: p.read_bytes() if p.is_file() else None for p in sorted(run.rglob("*"))}


def run_command(command: str, run: Path, inputs: tuple[Path, Path], out: Path) -> str | None:
    """Run `command` in this process: None if it succeeded, else the message it exited with."""
    script, args, _ = COMMANDS[command]
    files = {
        "translate": [f"input={inputs[0]}", f"output={out}", "device=cpu"],
        "evaluate": [f"src={inputs[0]}", f"ref={inputs[1]}", f"out={out}", "device=cpu"],
        "average_checkpoints": [],
    }[script]
    status, _, _ = run_in_process(f"{script}.py", [f"run={run}", *args, *files])
    return None if status is None else str(status)


def result_of(command: str, run: Path, out: Path) -> str:
    """A digest of what the command made: the translations, or the averaged weights."""
    if command != "average":
        return hashlib.sha256(out.read_bytes()).hexdigest()
    weights = load_checkpoint(run / "checkpoints" / "averaged.pt")["model"]
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in weights.values())).hexdigest()


@pytest.fixture(scope="module")
def undamaged(runs, inputs, tmp_path_factory) -> dict[tuple[str, str | None], str]:
    """What each command makes from the undamaged run, and from it without one of its step
    checkpoints (deleting one is no damage: `last` and the average take those left)."""
    results = {}
    for command, deleted in itertools.product(COMMANDS, (None, STEP_20, STEP_10)):
        work = tmp_path_factory.mktemp("undamaged")
        run, out = Path(shutil.copytree(runs[0], work / "run")), work / "out.txt"
        if deleted:
            (run / deleted).unlink()
        assert run_command(command, run, inputs, out) is None
        results[command, deleted] = result_of(command, run, out)
    return results


@fuzz_settings(examples=30)
@given(damaged=DAMAGED_FILES, command=st.sampled_from(list(COMMANDS)))
def test_a_damaged_run_gives_the_right_output_or_one_line_naming_the_file(
    runs, inputs, undamaged, tmp_path_factory, damaged, command
):
    name, how = damaged
    work = tmp_path_factory.mktemp("damaged")
    run, out = Path(shutil.copytree(runs[0], work / "run")), work / "out.txt"
    damage(run, runs[1], name, how)
    before = snapshot(run)
    with torch.no_grad():
        message = run_command(command, run, inputs, out)
    if message is None:
        deleted = name if how == ("delete",) and name in (STEP_20, STEP_10) else None
        assert result_of(command, run, out) == undamaged[command, deleted], (name, how)
        return
    assert message.startswith("error: ") and "\n" not in message, message
    assert name in COMMANDS[command][2], f"{command} failed on {name}, which it does not read"
    assert str(run / name) in message, message
    assert snapshot(run) == before, "a failed command changed the run directory"


ARGUMENTS = [(name, key) for name, module in SCRIPTS.items() for key in module.DEFAULTS]
BAD_ARGUMENTS = st.sampled_from(
    [
        "abc",
        "-1",
        "0",
        "1",
        "3",
        "1.5",
        "[]",
        "[1,2]",
        "[x]",
        "null",
        "",
        "true",
        "{a:1}",
        "/no/such",
    ]
)


@fuzz_settings(examples=25)
@given(argument=st.sampled_from(ARGUMENTS), value=BAD_ARGUMENTS)
def test_any_argument_value_runs_or_ends_in_one_line_naming_it(
    runs, inputs, tmp_path_factory, argument, value
):
    script, key = argument
    work = tmp_path_factory.mktemp("arguments")
    run = Path(shutil.copytree(runs[0], work / "run"))
    given = {
        "translate": {"input": inputs[0], "output": work / "out.txt", "device": "cpu"},
        "evaluate": {"src": inputs[0], "ref": inputs[1], "out": work / "out.txt", "beam": 1},
        "average_checkpoints": {"last": 2},
    }[script] | {"run": run, key: value}
    stdin = io.TextIOWrapper(io.BytesIO(GERMAN.encode()))
    stdout = io.TextIOWrapper(io.BytesIO())
    with contextlib.redirect_stdout(stdout), patched_stdin(stdin), inside(work):
        status, _, _ = run_in_process(f"{script}.py", [f"{k}={v}" for k, v in given.items()])
    if status is not None:
        message = str(status)
        assert message.startswith("error: ") and "\n" not in message, message
        assert key in message or str(value) in message, message


@contextlib.contextmanager
def patched_stdin(stream):
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def inside(folder: Path):
    """Run in `folder`: a relative path drawn as an argument (output=abc) is written there."""
    saved = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(saved)


@pytest.mark.slow
@fuzz_settings(examples=3)
@given(name=st.sampled_from(["tokenizer.json", "checkpoints/best.pt"]), how=DAMAGES)
def test_the_translate_script_prints_one_line_and_no_traceback(runs, tmp_path_factory, name, how):
    run = Path(shutil.copytree(runs[0], tmp_path_factory.mktemp("damaged") / "run"))
    damage(run, runs[1], name, how)
    result = run_script("translate.py", f"run={run}", stdin=GERMAN.encode())
    if result.returncode == 0:
        assert len(result.stdout.decode().splitlines()) == 2
    else:
        assert str(run / name) in error_line(result)
