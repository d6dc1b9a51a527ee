"""The training scripts' allocator: mimalloc preloaded by re-executing the process once."""

import os
import subprocess
import sys

from minimt.allocator import mimalloc_library
from tests.helpers import REPO

SHOW_ALLOCATOR = (
    "from minimt.allocator import reexec_with_mimalloc\n"
    "reexec_with_mimalloc()\n"
    "import os\n"
    "maps = open('/proc/self/maps').read()\n"
    "print(os.environ.get('LD_PRELOAD', ''), 'libmimalloc' in maps)\n"
)


def fresh_environment(allocator: str | None) -> dict[str, str]:
    """This process's environment with nothing preloaded and MINIMT_ALLOCATOR=allocator (None:
    unset, the default choice)."""
    environment = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MINIMT_ALLOCATOR")
    }
    return environment | ({} if allocator is None else {"MINIMT_ALLOCATOR": allocator})


def run_python(allocator: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SHOW_ALLOCATOR],
        env=fresh_environment(allocator),
        capture_output=True,
        text=True,
    )


def test_mimalloc_is_installed_on_linux():
    library = mimalloc_library()
    assert library is not None and library.name == "libmimalloc.so" and library.is_file()


def test_the_process_runs_again_with_mimalloc_loaded():
    done = run_python(None)
    preload, loaded = done.stdout.split()
    assert preload == str(mimalloc_library()) and loaded == "True"


def test_minimt_allocator_system_keeps_the_c_library_malloc():
    assert run_python("system").stdout.split() == ["False"]


def test_an_unknown_allocator_is_an_error_naming_the_choices():
    done = run_python("jemalloc")
    assert done.returncode != 0 and "MINIMT_ALLOCATOR='jemalloc'" in done.stderr
    assert "mimalloc, system" in done.stderr


def test_train_py_picks_its_allocator_before_torch_loads():
    """The first process re-executes itself before its other imports: torch loads once, in the
    process that trains (each process writes one `-X importtime` line per module it imports)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO / "scripts" / "train.py"), "--help"],
        env=fresh_environment(None),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines()]
    assert imported.count("minimt.allocator") == 2  # the first process, then the re-executed one
    assert imported.count("torch") == 1
