"""Every training command the README, docs/ and `train.py --help` show composes and passes the
config rules, so a renamed key or option cannot leave a documented command behind. Commands are
read from code blocks, inline code and the help text's header; a sweep's values are each checked.
A command that puts the reader's own encodings on PYTHONPATH and their config folder on Hydra's
search path runs with tests/plugins in both places (the docs' my_encodings module and
my_configs); a command with another placeholder (ARM, DATE, ...) is left out."""

import re
import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from minimt.config import validate_config
from tests.helpers import REPO, compose_config

DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "docs" / "study" / "rounds").glob("*.md")),
]
TRAIN = "scripts/train.py"
PLACEHOLDER = re.compile(r"\b[A-Z]{1,4}\b|\$")
PLUGINS = REPO / "tests" / "plugins"
# The reader's config folder, as the docs (my_configs) and the help text (DIR) name it
READERS_CONFIGS = re.compile(r"file://(my_configs|DIR)\b")


def shell_lines(text: str) -> list[str]:
    """The lines of `text`'s code blocks and inline code spans, continuations joined and
    `$NAME` replaced by an assignment `NAME="..."` made earlier in the same text."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.DOTALL)
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    spans = [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
    joined = "\n".join([*blocks, *spans]).replace("\\\n", " ")
    variables: dict[str, str] = {}
    lines = []
    for line in joined.splitlines():
        assignment = re.fullmatch(r'\s*([A-Z]+)="([^"]*)"\s*', line)
        if assignment:
            variables[assignment[1]] = assignment[2]
            continue
        lines.append(re.sub(r"\$([A-Z]+)\b", lambda m: variables.get(m[1], m[0]), line))
    return lines


def train_commands(text: str) -> list[list[str]]:
    """The overrides of each `python scripts/train.py ...` / `torchrun ... scripts/train.py ...`
    in `text`, after any environment assignments (comments and `-m` dropped)."""
    commands = []
    for line in shell_lines(text):
        # the environment it names (ATEN_CPU_CAPABILITY=avx2, the reader's PYTHONPATH: PLUGINS)
        command = re.sub(r"^\s*(?:[A-Z_]+=\S+\s+)+", "", line)
        if TRAIN not in command or not command.lstrip().startswith(("python", "torchrun")):
            continue
        command = READERS_CONFIGS.sub(f"file://{PLUGINS / 'configs'}", command)
        words = shlex.split(command.split(TRAIN, 1)[1], comments=True)
        commands.append([word for word in words if word not in ("-m", "--multirun")])
    return commands


def help_header() -> str:
    """The header of `python scripts/train.py --help` (configs/config.yaml's hydra.help.header)."""
    return OmegaConf.load(REPO / "configs" / "config.yaml").hydra.help.header


def documented_commands() -> list[tuple[str, list[str]]]:
    texts = {str(doc.relative_to(REPO)): doc.read_text() for doc in DOCS}
    texts["train.py --help"] = "```\n" + help_header() + "```\n"
    return [
        (f"{name}: {' '.join(overrides)}", overrides)
        for name, text in texts.items()
        for overrides in train_commands(text)
    ]


def one_value_per_job(overrides: list[str]) -> list[list[str]]:
    """A sweep's command lines, one per value of each swept key with the other sweeps at their
    first value (every value checked without the full product)."""
    options = [
        [f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in OverridesParser.create().parse_overrides(overrides)
    ]
    firsts = [values[0] for values in options]
    return [firsts] + [
        firsts[:i] + [value] + firsts[i + 1 :]
        for i, values in enumerate(options)
        for value in values[1:]
    ]


def test_the_docs_show_training_commands_of_every_kind():
    named = [name for name, _ in documented_commands()]
    assert len(named) >= 30
    assert "docs/operations.md: trainer.accumulate=1" in named  # torchrun
    assert any("data=parallel_text data.train.src=train.de" in name for name in named)  # continued
    expanded = "sweep=scaling_cpu hydra/launcher=parallel arm=unscaled_small_sinusoidal"  # $A
    assert any(expanded in name for name in named)
    own = "pe.encoder=my_encodings.DistancePenalty pe.decoder=my_encodings.DistancePenalty"
    assert f"docs/encodings.md: {own}" in named and f"train.py --help: {own}" in named


def test_a_sweep_is_checked_one_value_at_a_time():
    jobs = one_value_per_job(["sweep=scaling_cpu", "arm=a,b", "trainer.seed=range(4,6)"])
    assert jobs == [
        ["sweep=scaling_cpu", "arm=a", "trainer.seed=4"],
        ["sweep=scaling_cpu", "arm=b", "trainer.seed=4"],
        ["sweep=scaling_cpu", "arm=a", "trainer.seed=5"],
    ]


@pytest.mark.parametrize(
    "overrides", [pytest.param(overrides, id=name) for name, overrides in documented_commands()]
)
def test_a_documented_training_command_composes_and_passes_the_rules(overrides, monkeypatch):
    if PLACEHOLDER.search(" ".join(overrides)):
        pytest.skip("needs the reader's own values")
    monkeypatch.syspath_prepend(str(PLUGINS))  # the docs' my_encodings
    for job in one_value_per_job(overrides):
        validate_config(compose_config(*job))
