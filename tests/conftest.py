"""Shared fixtures: the real Multi30k corpus and one smoke run trained on it."""

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from minimt.config import register_resolvers
from minimt.data.multi30k import local_path

register_resolvers()  # as scripts/train.py does: the configs use ${minimt.inverse_sqrt:...}

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `pytest -n`: the workers share the cores, so each, and each script a test starts, takes one
    # torch thread instead of all of them
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

# Tests send SIGINT to this process and to the scripts they start, which must see it as Ctrl-C
# does. A shell starts a background job (`make test &`) with SIGINT ignored, which Python keeps
# and the scripts would inherit: restore Python's own handler (a script started from here then
# begins with the default action).
signal.signal(signal.SIGINT, signal.default_int_handler)

DEFAULT_MULTI30K_DIR = Path(__file__).parents[1].parent / "shared" / "data" / "multi30k"


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The folder holding the real Multi30k raw files: $MINIMT_DATA_URL, else ../shared/data."""
    configured = os.environ.get("MINIMT_DATA_URL")
    folder = local_path(configured) if configured else DEFAULT_MULTI30K_DIR
    if folder is not None and folder.is_dir():
        return folder
    message = (
        f"Multi30k raw files not found (MINIMT_DATA_URL={configured!r}, default "
        f"{DEFAULT_MULTI30K_DIR}); set MINIMT_DATA_URL to a local folder or file:// URL "
        "holding them"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def smoke_run(multi30k_dir, tmp_path_factory, worker_id) -> tuple[Path, dict]:
    """One `experiment=smoke` training run on the real corpus and the metrics `train` returned,
    trained once per `pytest` run: the first pytest-xdist worker to ask trains it, the others
    wait for it. Read it only; a test that writes into a run takes `run_copy`."""
    from minimt.study.views import study_hooks
    from minimt.train.loop import train
    from tests.helpers import compose_config

    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent  # one folder for all the workers of this pytest run
    root = shared / "smoke"
    returned = root / "returned.json"
    with FileLock(shared / "smoke.lock"):
        if not returned.exists():
            cfg = compose_config(
                "experiment=smoke",
                f"data.url={multi30k_dir}",
                f"data.dir={root / 'data'}",
                "trainer.max_steps=120",
                "decoding.test_beam=2",  # a beam search all the same, at 2/5 of beam 5's cost
            )
            metrics = train(cfg, root / "run", study_hooks(cfg))
            returned.write_text(json.dumps(metrics))
    return root / "run", json.loads(returned.read_text())


@pytest.fixture
def run_copy(smoke_run, tmp_path) -> Path:
    """A copy of the smoke run that a test may write into or damage."""
    return Path(shutil.copytree(smoke_run[0], tmp_path / "run"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold real training runs (@pytest.mark.slow) first. `make test` gives each
    file to one worker (pytest-xdist's loadfile, without its reordering by test count, which put
    the long files of few tests last): many quick files at the end even out the workers' ends."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
