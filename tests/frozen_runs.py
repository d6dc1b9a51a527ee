"""Build the frozen runs: one tiny real training run per run format, each made by its own commit's
code, so that the tests can check that today's code still loads, translates, evaluates, averages
and resumes every earlier format.

    python -m tests.frozen_runs                          # every format in BUILT_FROM
    python -m tests.frozen_runs formats=[1,9] scratch=/tmp/frozen
    python -m tests.frozen_runs commit=HEAD format=16    # today's run of format 16, beside the old

Each commit is checked out as a git worktree in `scratch` (null: a temporary folder) and trains
there, with this interpreter and the worktree's own package (PYTHONPATH first, one thread, no
MINIMT_DATA_URL), on this checkout's tests/data/toy copied into it, so that the run's relative data
paths also resolve from this repository's root. The overrides turn the smoke experiment into a
300-step run of a tiny model; the optional ones whose key the commit's configs lack are left out.
The first two sentences of the toy test set are then translated with that commit's
scripts/translate.py (beam 1 and 2) or, before that script existed, with its package's greedy
translate_lines. The run is kept in <out>/format_<NN>_<commit>/ without this machine's paths, large
event files or TensorBoard projector files, beside a built.json saying how it was made. Running it
again replaces that folder whole: the new one is made beside it and renamed into place.
"""

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, ListConfig, OmegaConf

from minimt.checkpoint import json_text
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.errors import MinimtError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
TOY = Path("tests/data/toy")
RUN = "run"  # the run directory, relative to the worktree
SPLITS = ("train", "val", "test")

# The commit each format's frozen run is built from: one that saves that format, not always the
# format's first (minimt.migrations says what each format changed, and its first commit).
# commit=X format=N builds X's run of format N. 16's first commit, 1f4a1af, trains, but its
# scripts/train.py fails to import (POSITIONAL_ENCODINGS had moved): a87c6ce follows it.
BUILT_FROM = {
    1: "d67395c",
    2: "7dec623",
    3: "401f370",
    4: "aa7678e",
    5: "f775d2d",
    6: "0b0b91b",
    7: "f2f403b",
    8: "2cbd629",
    9: "ab132a3",
    10: "d365d34",
    11: "7a1aef8",
    12: "14a93b5",
    13: "d258298",
    14: "79bcc6b",
    15: "76ff0d1",
    16: "a87c6ce",
    17: "732f5d8",
    18: "b93150b",
}

# The tiny run, which every commit's configs accept: small enough that all the formats' runs
# stay near 4 MB (a step checkpoint with its optimizer state is about 110 KB), and trained at a
# high learning rate long enough (about 20 s) to write words ("A cat waits in the morning.").
TRAIN_OVERRIDES = [
    "experiment=smoke",
    "data=parallel_text",
    *(
        f"data.{split}.{side}={TOY}/{split}.{lang}"
        for split in SPLITS
        for side, lang in (("src", "de"), ("tgt", "en"))
    ),
    "trainer.device=cpu",
    "trainer.precision=fp32",
    "trainer.num_threads=1",
    "model.d_model=8",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.d_ff=16",
    "model.max_seq_len=64",
    "data.max_train_len=48",  # below model.max_seq_len, with room for <bos>/<eos>
    "tokenizer.vocab_size=300",
    "trainer.lr=2.0e-2",
    "trainer.warmup_steps=30",
    "trainer.max_steps=300",
    "trainer.val_every=100",
    "trainer.log_every=100",
]
# Passed where the commit's configs have the key.
OPTIONAL_OVERRIDES = [
    "trainer.save_every=100",
    "trainer.keep_checkpoints=2",
    "views=false",
    "decoding.test_beam=2",
]

# Before scripts/translate.py: the package's greedy decoding, as training wrote hyps.*.txt.
GREEDY_TRANSLATE = """
import sys
from pathlib import Path
from minimt.checkpoint import load_checkpoint
from minimt.training import load_model
from minimt.translator import translate_lines
run = Path(sys.argv[1])
cfg = load_checkpoint(run / "checkpoints" / "best.pt")["config"]
model, tokenizers = load_model(run, "best")
lines = sys.stdin.read().splitlines()
for line in translate_lines(
    model, tokenizers, lines, batch_tokens=cfg["trainer"]["batch_tokens"],
    max_len_a=cfg["decoding"]["max_len_a"], max_len_b=cfg["decoding"]["max_len_b"],
):
    print(line)
"""
GREEDY_API = "the package API: minimt.training.load_model + minimt.translator.translate_lines"

# d67395c's parallel_text.yaml writes `train: {src: ???, tgt: ???}`, which YAML cannot parse (`?`
# opens a key in a flow mapping): quoted, the same missing values.
FLOW_MISSING = re.compile(r"(?<=: )\?\?\?(?=[,}])")
PARALLEL_TEXT = Path("configs/data/parallel_text.yaml")

# From a53a4ec until ccbdcdb, every run ended by logging data.src_lang/tgt_lang, which only
# multi30k's config had: a parallel_text run failed there, before writing metrics.json. These
# formats' runs are given the two keys as ccbdcdb's parallel_text.yaml has them.
LANGUAGE_KEYS = ["+data.src_lang=src", "+data.tgt_lang=tgt"]
NEED_LANGUAGE_KEYS = {5, 6, 7}

EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception|Interrupt)\b")
MAX_EVENT_BYTES = 50_000
DEFAULTS = {
    "formats": "all",
    "commit": None,
    "format": None,
    "out": "tests/data/old_runs",
    "scratch": None,
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


class BuildError(MinimtError):
    """A format whose run could not be made; the message says which step failed and why."""


def git(*args: str, cwd: Path = REPO) -> str:
    """The output of `git args` in `cwd`, stripped; a failure is a BuildError with git's line."""
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def worktree(commit: str, scratch: Path) -> Iterator[Path]:
    """A detached worktree of `commit` at scratch/<commit>, removed (and unregistered) after."""
    root = scratch / commit
    if root.exists():  # left by a build that was stopped
        shutil.rmtree(root)
        git("worktree", "prune")
    git("worktree", "add", "--detach", str(root), commit)
    try:
        yield root
    finally:
        git("worktree", "remove", "--force", str(root))


def commit_env(root: Path) -> dict[str, str]:
    """The environment of the commit's scripts: its package first, one thread, no download."""
    env = {key: value for key, value in os.environ.items() if key != "MINIMT_DATA_URL"}
    return env | {
        "PYTHONPATH": str(root / "src"),
        "OMP_NUM_THREADS": "1",
        "MINIMT_ALLOCATOR": "system",
    }


def run_commit(root: Path, what: str, args: list[str], stdin: str = "") -> str:
    """Run this interpreter with `args` in the worktree `root`; return its stdout. A failure is a
    BuildError naming `what`, with the line that says why (all of its output logged)."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=commit_env(root),
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr  # Hydra logs to stdout
        log.error("%s failed (exit status %d):\n%s", what, done.returncode, output)
        raise BuildError(f"{what} failed with exit status {done.returncode}: {why(output)}")
    return done.stdout


def why(output: str) -> str:
    """The line of a failed script's `output` that says why: its exception, else its last."""
    lines = output.strip().splitlines() or ["no output"]
    return next((line for line in reversed(lines) if EXCEPTION_LINE.match(line)), lines[-1])


def quote_flow_missing(root: Path) -> list[str]:
    """Quote the `???` values of flow mappings in the worktree's parallel_text.yaml; returns the
    change made, as one line, or nothing."""
    path = root / PARALLEL_TEXT
    text = path.read_text(encoding="utf-8")
    quoted = FLOW_MISSING.sub("'???'", text)
    if quoted == text:
        return []
    path.write_text(quoted, encoding="utf-8")
    return [f"{PARALLEL_TEXT}: ??? quoted in flow mappings, which YAML cannot parse bare"]


def has_key(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted `key` is in `cfg` (a `???` value counts)."""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and name in node.keys()


def train_overrides(root: Path, number: int) -> list[str]:
    """Format `number`'s overrides at `root`: the tiny run's, the optional ones whose key the
    configs have, and LANGUAGE_KEYS where it needs them; a key of TRAIN_OVERRIDES that the configs
    lack is a BuildError."""
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=TRAIN_OVERRIDES[:2])
    keys = [override.split("=")[0] for override in TRAIN_OVERRIDES[2:]]
    missing = [key for key in keys if not has_key(cfg, key)]
    if missing:
        raise BuildError(f"the configs have no {', '.join(missing)}")
    optional = [o for o in OPTIONAL_OVERRIDES if has_key(cfg, o.split("=")[0])]
    languages = LANGUAGE_KEYS if number in NEED_LANGUAGE_KEYS else []
    return [*TRAIN_OVERRIDES, *optional, *languages, f"hydra.run.dir={RUN}"]


def translations(root: Path, lines: list[str]) -> tuple[dict[str, list[str]], str]:
    """`lines` translated by the commit's own code in its finished run: {beam: translations}, and
    what translated them."""
    text = "".join(line + "\n" for line in lines)
    if not (root / "scripts" / "translate.py").is_file():
        out = run_commit(root, "translation", ["-c", GREEDY_TRANSLATE, RUN], text)
        return {"1": out.splitlines()}, GREEDY_API
    return {
        beam: run_commit(
            root,
            f"scripts/translate.py beam={beam}",
            ["scripts/translate.py", f"run={RUN}", f"beam={beam}", "device=cpu"],
            text,
        ).splitlines()
        for beam in ("1", "2")
    }, "scripts/translate.py"


def strip_paths(folder: Path, root: Path) -> None:
    """Write the worktree `root` as `.` in the run's Hydra records and logs."""
    for path in [*folder.glob(".hydra/*.yaml"), *folder.glob("*.log")]:
        path.write_text(path.read_text(encoding="utf-8").replace(str(root), "."), encoding="utf-8")


def drop_views(folder: Path) -> None:
    """Remove the TensorBoard projector files and event files over MAX_EVENT_BYTES."""
    (folder / "projector_config.pbtxt").unlink(missing_ok=True)
    projected = {tsv.relative_to(folder).parts[0] for tsv in folder.rglob("*.tsv")}  # <step>/
    for name in projected:
        shutil.rmtree(folder / name)
    for events in folder.rglob("events.out.tfevents.*"):
        if events.stat().st_size > MAX_EVENT_BYTES:
            log.info("dropping %s (%d bytes)", events.name, events.stat().st_size)
            events.unlink()


def machine_paths(folder: Path, paths: list[Path]) -> list[str]:
    """The files under `folder` that hold one of `paths`, as `file: path`."""
    needles = [str(path).encode() for path in paths]
    return [
        f"{file.relative_to(folder)}: {needle.decode()}"
        for file in sorted(folder.rglob("*"))
        if file.is_file()
        for needle in needles
        if needle in file.read_bytes()
    ]


def utc(moment: datetime) -> str:
    """`moment` in UTC, to the second, as ISO 8601."""
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def build_record(
    number: int, commit: str, changes: list[str], overrides: list[str], lines: list[str], root: Path
) -> dict:
    """built.json of the run in `root`: how it was made, and its translations of `lines`."""
    beams, how = translations(root, lines)
    return {
        "format": number,
        "commit": commit,
        "committed_utc": utc(datetime.fromisoformat(git("show", "-s", "--format=%cI", commit))),
        "worktree_changes": changes,
        "train_overrides": overrides,
        "sentences": lines,
        "translations": beams,
        "translated_with": how,
        "torch": version("torch"),
        "built_utc": utc(datetime.now(timezone.utc)),
    }


def build(number: int, commit: str, scratch: Path) -> Path:
    """Train format `number`'s run at `commit` and keep it in a folder under `scratch`, cleaned,
    with its built.json; returns that folder."""
    full = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    lines = (REPO / TOY / "test.de").read_text(encoding="utf-8").splitlines()[:2]
    kept = scratch / f"format_{number:02d}_{full[:7]}"
    shutil.rmtree(kept, ignore_errors=True)
    with worktree(full, scratch) as root:
        shutil.copytree(REPO / TOY, root / TOY, dirs_exist_ok=True)
        changes = quote_flow_missing(root)
        overrides = train_overrides(root, number)
        log.info("format %d: training at %s: %s", number, full[:7], " ".join(overrides))
        run_commit(root, "training", ["scripts/train.py", *overrides])
        record = build_record(number, full, changes, overrides, lines, root)
        shutil.copytree(root / RUN, kept)
        strip_paths(kept, root)
        drop_views(kept)
        (kept / "built.json").write_text(json_text(record), encoding="utf-8")
        found = machine_paths(kept, [root, scratch, REPO, Path.home()])
    if found:
        raise BuildError(f"format {number} keeps this machine's paths: {'; '.join(found)}")
    return kept


def replace_folder(built: Path, target: Path) -> None:
    """Put `built` at `target`: copied beside it, then renamed into place; the old one is renamed
    aside first and removed last."""
    incoming = target.with_name(f".{target.name}.incoming")
    outgoing = target.with_name(f".{target.name}.outgoing")
    for leftover in (incoming, outgoing):
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(built, incoming)
    if target.exists():
        target.rename(outgoing)
    incoming.rename(target)
    shutil.rmtree(outgoing, ignore_errors=True)


def chosen(args: DictConfig) -> dict[int, str]:
    """The formats to build, {number: commit}, from formats= or commit= and format=."""
    if args.commit is not None:
        if args.format is None:
            sys.exit("error: commit= needs format=, the number of the format it makes")
        return {int(args.format): str(args.commit)}
    if args.formats == "all":
        return BUILT_FROM
    numbers = list(args.formats) if isinstance(args.formats, ListConfig) else [args.formats]
    unknown = sorted(set(numbers) - BUILT_FROM.keys(), key=str)
    if unknown:
        sys.exit(
            f"error: formats={unknown} are not in BUILT_FROM ({min(BUILT_FROM)}-{max(BUILT_FROM)})"
        )
    return {number: BUILT_FROM[number] for number in numbers}


def build_all(formats: dict[int, str], out: Path, scratch: Path) -> list[str]:
    """Build each format into `out`; returns the failures, as `format N: why`."""
    failed = []
    for number, commit in formats.items():
        try:
            built = build(number, commit, scratch)
        except BuildError as error:
            log.error("format %d (%s) not built: %s", number, commit, error)
            failed.append(f"format {number}: {error}")
            continue
        replace_folder(built, out / built.name)
        print(f"built {out / built.name}")
    return failed


@contextmanager
def scratch_folder(given: str | None) -> Iterator[Path]:
    """`given` (made if missing, kept after), or a temporary folder removed after."""
    if given is not None:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="frozen_runs-") as folder:
        yield Path(folder)


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    formats = chosen(args)
    with scratch_folder(args.scratch) as scratch:
        failed = build_all(formats, Path(args.out), scratch)
    if failed:
        raise BuildError(f"{len(failed)} format(s) not built: {'; '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
