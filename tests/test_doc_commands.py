"""Every training command the README and docs/ show composes and passes the config rules, so a
renamed key or option cannot leave a documented command behind. Commands are read from code
blocks and inline code; a sweep's values are each checked; a command with a placeholder (ARM,
DIR, ...) or with an option the docs have the reader write first is left out."""

import re
import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from minimt.config import validate_config
from tests.helpers import REPO, compose_config

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TRAIN = "scripts/train.py"
PLACEHOLDER = re.compile(r"\b[A-Z]{1,4}\b|\$")
# docs/encodings.md has the reader write configs/pe/penalty.yaml before this command
WRITTEN_BY_THE_READER = {"pe=penalty"}


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
    in `text` (comments and `-m` dropped)."""
    commands = []
    for line in shell_lines(text):
        if TRAIN not in line or not line.lstrip().startswith(("python", "torchrun")):
            continue
        words = shlex.split(line.split(TRAIN, 1)[1], comments=True)
        commands.append([word for word in words if word not in ("-m", "--multirun")])
    return commands


def documented_commands() -> list[tuple[str, list[str]]]:
    return [
        (f"{doc.relative_to(REPO)}: {' '.join(overrides)}", overrides)
        for doc in DOCS
        for overrides in train_commands(doc.read_text())
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
def test_a_documented_training_command_composes_and_passes_the_rules(overrides):
    if PLACEHOLDER.search(" ".join(overrides)) or WRITTEN_BY_THE_READER & set(overrides):
        pytest.skip("needs the reader's own values")
    for job in one_value_per_job(overrides):
        validate_config(compose_config(*job))
