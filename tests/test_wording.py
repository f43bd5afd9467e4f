"""The core's messages name the next step in the words of the user's shell: a magic in a
notebook, a command in a terminal."""

from __future__ import annotations

import pytest

from npumagic.wording import SHELL
from npumagic.errors import NpumagicError
from npumagic.history import HistoryStore, RunNameTaken
from npumagic.session import Session


@pytest.fixture
def cli_words():
    token = SHELL.set("cli")
    yield
    SHELL.reset(token)


def _taken(tmp_path) -> str:
    store = HistoryStore(tmp_path)
    store.reserve("base", kind="profile")
    with pytest.raises(RunNameTaken) as taken:
        store.reserve("base", kind="profile")
    return str(taken.value)


def test_a_notebook_is_told_the_magic(tmp_path):
    assert _taken(tmp_path).endswith("choose another --name or remove it with %npurm base")
    with pytest.raises(NpumagicError, match="profile a cell with %%npuprofile first"):
        Session(tmp_path / "empty").runs.resolve(None)


def test_a_terminal_is_told_the_command(tmp_path, cli_words):
    said = _taken(tmp_path)
    assert said.endswith("choose another --name") and "%npu" not in said
    with pytest.raises(NpumagicError, match="record one with `npumagic run -- CMD` first"):
        Session(tmp_path / "empty").runs.resolve(None)


def test_a_notebook_run_says_how_to_add_a_conclusion(trainer):
    report = trainer.run_line_magic("npusteps", "--wait 0 --warmup 1 --steps 2 --no-plot --quiet --name base train_step()")
    assert 'add your conclusion with %npunote base "..."' in " ".join(str(report).split())
