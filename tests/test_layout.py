"""The architecture: imports point one way, public names load light, hooks are optional."""

import ast
import json
import subprocess
import sys

import pytest

from minimt.encoding_choice import SidePositions
from minimt.train.loop import train
from tests.helpers import REPO, compose_config, tiny_run_overrides

PACKAGE = REPO / "src" / "minimt"


def minimt_imports(folder: str) -> set[str]:
    """Every minimt module imported by the files of src/minimt/<folder>."""
    found = set()
    for path in (PACKAGE / folder).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minimt"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("minimt")}
    return found


def test_the_model_imports_only_the_model_and_training_never_the_study():
    assert all(m.startswith("minimt.model") for m in minimt_imports("model"))
    assert not any(m.startswith("minimt.study") for m in minimt_imports("train"))
    assert not any(m.startswith(("minimt.train", "minimt.study")) for m in minimt_imports("data"))


def test_the_model_takes_positions_built_elsewhere_and_never_imports_a_class_by_name():
    modules = set()
    for path in (PACKAGE / "model").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                modules.add(node.module or "")
    assert not modules & {"importlib", "inspect", "typing"}


def test_the_training_core_takes_its_signals_from_the_module_it_shares_with_the_scripts():
    assert "minimt.cli" not in minimt_imports("train")
    assert "minimt.signals" in minimt_imports("train")


def test_the_stop_protocol_knows_nothing_of_sweeps_and_only_train_py_plumbs_them():
    protocol = ast.parse((PACKAGE / "signals.py").read_text())
    imported = {n.module for n in ast.walk(protocol) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith("minimt")}
    assert not [n for n in ast.walk(protocol) if isinstance(n, ast.Global)]
    users = {
        path.relative_to(REPO).as_posix()
        for path in [*PACKAGE.rglob("*.py"), *(REPO / "scripts").rglob("*.py")]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "minimt.sweep_signals"
    }
    assert users == {"scripts/train.py"}


def test_every_script_has_one_main_block_and_its_imports_at_the_top():
    for path in (REPO / "scripts").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n)]
        assert len(mains) <= 1, path
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        kinds = [isinstance(n, ast.Import | ast.ImportFrom) for n in body]
        first_other = kinds.index(False) if False in kinds else len(kinds)
        assert not any(kinds[first_other:]), f"{path}: a module-level import below other code"


def test_side_positions_are_read_by_name():
    assert SidePositions._fields == ("encoder", "decoder")


def test_the_package_never_imports_a_script():
    scripts = {"scripts"} | {path.stem for path in (REPO / "scripts").rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not {name.split(".")[0] for name in names} & scripts, path


def test_the_embedding_loads_without_datasets_or_pyarrow():
    code = (
        "import sys; from minimt import Seq2SeqEmbedding; "
        "print('datasets' in sys.modules, 'pyarrow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_training_and_its_study_hooks_load_without_matplotlib():
    code = "import sys, minimt.train.loop, minimt.study.views; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]  # it loads when a view is first drawn


@pytest.mark.slow
def test_a_run_without_hooks_has_no_study_outputs(multi30k_dir, tmp_path):
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.max_steps=10")
    )
    metrics = train(cfg, tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["steps"] == metrics["steps"] == 10
    assert not (tmp_path / "run" / "projector_config.pbtxt").exists()


def test_the_tests_readme_names_every_test_file_and_the_data_docs_every_config_group_option():
    readme = (REPO / "tests" / "README.md").read_text()
    files = sorted({path.name for path in (REPO / "tests").rglob("test_*.py")})
    assert [name for name in files if name not in readme] == []
    groups = (REPO / "docs" / "data.md").read_text()
    for group in ("sweep", "experiment", "pe", "data"):
        row = next(line for line in groups.splitlines() if line.startswith(f"| `{group}` |"))
        options = sorted(path.stem for path in (REPO / "configs" / group).glob("*.yaml"))
        assert [name for name in options if f"`{name}`" not in row] == [], group


READING_PATH = ("model", "data", "train", "translator.py")


def test_the_readme_states_the_length_of_its_reading_path():
    files = [
        path
        for part in READING_PATH
        for path in sorted(
            (REPO / "src" / "minimt").glob(part if part.endswith(".py") else f"{part}/*.py")
        )
    ]
    lines = sum(len(path.read_text().splitlines()) for path in files)
    assert (
        f"The translation system itself is {lines / 1000:.1f}k lines"
        in (REPO / "README.md").read_text()
    ), lines
