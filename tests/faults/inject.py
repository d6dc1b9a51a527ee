"""Faults injected into a script run in this process, as the fuzz suites draw them: a write
refused or a signal sent at the k-th call of a hook point; what a stopped script may leave
behind."""

import builtins
import contextlib
import errno
import hashlib
import io
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import minimt
import minimt.data.tokenizer as tokenizer_module
from minimt import atomic
from minimt.data.multi30k import MULTI30K_SHA256
from tests.helpers import REPO, run_in_process, tiny_run_overrides

SCRIPTS = ("translate", "evaluate", "average_checkpoints", "report", "collect_runs")
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
WRITE_FAULTS = (errno.ENOSPC, errno.EACCES)
MINIMT_CODE = (str(Path(minimt.__file__).parent) + os.sep, str(REPO / "scripts") + os.sep)


def script_argv(name: str, root: Path, work: Path) -> list[str]:
    """The arguments of one run of `name` on the trained run copied to work/run."""
    run = work / "run"
    return {
        "translate": [f"run={run}", f"input={root / 'src.de'}", f"output={work / 'out.en'}"],
        "evaluate": [f"run={run}", f"src={root / 'src.de'}", f"ref={root / 'ref.en'}", "beam=1"],
        "average_checkpoints": [f"run={run}", "last=2"],
        "report": [f"sweep={root / 'sweep'}", f"out={work / 'report'}"],
        "collect_runs": [f"sweep={root / 'sweep'}", f"dest={work / 'collected'}"],
    }[name]


def train_argv(multi30k_dir: Path, root: Path) -> list[str]:
    """A tiny run with its own data.dir (so that data preparation writes) in root/run."""
    overrides = tiny_run_overrides(multi30k_dir, root / "data", "views=false")
    return [*overrides, "trainer.max_steps=2", "trainer.val_every=2", "data.max_val_pairs=5"] + [
        f"hydra.run.dir={root / 'run'}"
    ]


def output_of(script: str, argv: list[str], capsys) -> tuple[int | str | None, str]:
    """`run_in_process`'s status of scripts/<script>.py and its stdout and stderr as one text
    (train.py logs to stdout)."""
    status, out, err = run_in_process(f"{script}.py", argv, capsys)
    return status, out + err


def run_with_fault(
    script: str, trained: Path, work: Path, point: str, k: int, act: Callable[..., None], capsys
) -> tuple[bool, int | str | None, str]:
    """scripts/<script>.py run in this process on a copy of the trained run in work/run
    (script_argv), `act` done at the k-th call of the hook point: whether the k-th call came,
    the script's status, and its stdout and stderr as one text."""
    shutil.copytree(trained / "run", work / "run")
    with at_kth_call(point, k, act) as calls:
        status, output = output_of(script, script_argv(script, trained, work), capsys)
    return len(calls) >= k, status, output


def assert_one_error_line(code, err: str) -> str:
    """The `error: ...` message a script exited with: one line, no traceback."""
    assert isinstance(code, str) and code.startswith("error: "), (code, err[-3000:])
    assert "\n" not in code and "Traceback" not in err, err[-3000:]
    return code


def assert_ends_interrupted(status, err: str, signum: signal.Signals) -> None:
    """One `interrupted (SIG...)` line, last in the output, and the signal's exit status."""
    assert status == STATUS[signum], (status, err[-3000:])
    assert err.splitlines()[-1].startswith(f"interrupted ({signum.name})"), err[-3000:]


def leftovers(folder: Path) -> list[Path]:
    """Temp files of atomic writes, and the data cache's files that are not whole."""
    found = list(folder.rglob(f"*{atomic.TEMP_SUFFIX}"))
    found += list(folder.rglob("token_ids/tmp*"))  # tokenizing's temporary folders
    for raw in folder.rglob("*.gz"):
        if raw.name in MULTI30K_SHA256:
            digest = hashlib.sha256(raw.read_bytes()).hexdigest()
            found += [raw] if digest != MULTI30K_SHA256[raw.name] else []
    return found


@contextlib.contextmanager
def at_kth_call(point: str, k: int, act: Callable[..., None]):
    """Call act(*paths) at the k-th call of a hook point: os.replace (source, destination), open
    for writing (`write`), any open, os.sendfile (shutil.copyfile's copy, which names its files
    in the error itself), shutil.copyfile (destination), or a line the BPE trainer reads
    (`bpe_line`). Only calls made while a script's signal handlers are installed count:
    Hydra's own files are not minimt's, and a signal there would stop pytest itself."""
    calls = []

    def count(*paths: object) -> None:
        if not called_by_minimt() or not handled(act):
            return
        calls.append(paths)
        if len(calls) == k:
            act(
                *(os.fsdecode(p) if isinstance(p, str | bytes | os.PathLike) else "" for p in paths)
            )

    with pytest.MonkeyPatch.context() as patch:
        if point == "replace":
            real_replace = os.replace

            def replace(src, dst, **kwargs):
                count(src, dst)
                return real_replace(src, dst, **kwargs)

            patch.setattr(os, "replace", replace)
        elif point in ("write", "open"):
            real_open = builtins.open

            def opened(file, mode="r", *args, **kwargs):
                if point == "open" or set(str(mode)) & set("wax+"):
                    count(file)
                return real_open(file, mode, *args, **kwargs)

            patch.setattr(builtins, "open", opened)
            patch.setattr(io, "open", opened)
        elif point == "sendfile":  # how shutil.copyfile writes on Linux; it names the files
            real_sendfile = os.sendfile

            def sendfile(out_fd, in_fd, offset, count_bytes):
                count()
                return real_sendfile(out_fd, in_fd, offset, count_bytes)

            patch.setattr(os, "sendfile", sendfile)
        elif point == "copyfile":
            real_copy = shutil.copyfile

            def copyfile(src, dst, **kwargs):
                count(dst)
                return real_copy(src, dst, **kwargs)

            patch.setattr(shutil, "copyfile", copyfile)
        else:
            real_train = tokenizer_module.train_bpe

            def train_bpe(lines, *args, **kwargs):
                return real_train((count(line) or line for line in lines), *args, **kwargs)

            patch.setattr(tokenizer_module, "train_bpe", train_bpe)
        yield calls


def called_by_minimt() -> bool:
    """Whether a function of the minimt package or of a script is on the caller's stack."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(MINIMT_CODE) and code.co_name != "<module>":
            return True
        frame = frame.f_back
    return False


def handled(act: Callable[..., None]) -> bool:
    signum = getattr(act, "signum", None)
    return signum is None or callable(signal.getsignal(signum))


def refuse(code: int) -> Callable[..., None]:
    """Raise the OSError of a refused write, naming the file(s) as the real call would."""

    def raise_it(path: str | None = None, other: str | None = None) -> None:
        raise OSError(code, os.strerror(code), path, None, other)

    return raise_it


def send(signum: signal.Signals) -> Callable[..., None]:
    def kill(*paths: str) -> None:
        os.kill(os.getpid(), signum)

    kill.signum = signum
    return kill
