"""The fix read from what changed: ``%npucompare A B`` (and ``npumagic compare``) without
``--fix`` names A's finding whose fix B evidently applied (a DataLoader's workers, a variable a
fix names, A's syncs halved) and sets its prediction against the achieved saving, shown and never
kept; ``--fix`` wins and keeps it. Real CPU runs in a real InteractiveShell; bookkeeping only,
no timing asserted."""

from __future__ import annotations

import json

from npumagic.analysis.changed import applied_fix
from npumagic.history import HistoryStore

LOADER_SETUP = """
import time
torch.set_num_threads(1)
class Batches(torch.utils.data.Dataset):
    def __init__(self, n=12):
        self.x, self.y = torch.randn(n, 16, 32), torch.randn(n, 16, 1)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        time.sleep(0.03)
        return self.x[i], self.y[i]
def train(workers):
    for x, y in torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=workers):
        torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
"""


def _profile(shell, name, workers):
    result = shell.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name}\n"
                            f"train({workers})")
    assert result.success, result.error_in_exec
    return result.result


def _session(shell):
    return shell.magics_manager.registry["NpuMagics"].session


def test_a_num_workers_change_names_the_dataloader_fix_unasked_shown_not_kept(trainer, capsys):
    from npumagic.cli import main

    assert trainer.run_cell(LOADER_SETUP).success
    slow = _profile(trainer, "w0", 0)
    _profile(trainer, "w2", 2)
    told = next(f for f in slow.verdict.advice.findings if f.category == "dataloader")
    report = trainer.run_line_magic("npucompare", "w0 w2 --no-plot")
    checked = report.verification
    assert (checked.rule, checked.predicted_ms, (checked.low_ms, checked.high_ms)) == \
        (told.rule, told.predicted_saving_ms, told.predicted_interval)
    assert report.read_from == "the DataLoader's num_workers went 0 -> 2" and not report.kept
    assert (f"fix read from what changed (the DataLoader's num_workers went 0 -> 2): {checked.sentence()}; "
            f"shown, not kept in the history (--fix {checked.rule} keeps it)") in str(report)
    store = _session(trainer).store
    assert HistoryStore(store.directory).fixes() == []  # the guess is shown, never kept
    # the CLI reads the same guess from the same history, unkept
    capsys.readouterr()
    assert main(["compare", "w0", "w2", "--history", str(store.directory), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["verification"]
    assert (doc["rule"], doc["kept"], doc["read_from"]) == (told.rule, False, "the DataLoader's num_workers went 0 -> 2")
    # --fix given wins over the guess: verified and kept, not said to be read from the change
    named = trainer.run_line_magic("npucompare", f"w0 w2 --no-plot --fix {told.rule}")
    assert named.kept and not named.read_from and "fix verified: " in str(named)
    assert [f["rule"] for f in HistoryStore(store.directory).fixes()] == [told.rule]


def test_an_unchanged_pair_guesses_nothing_and_an_environment_change_names_only_a_finding_a_has(trainer,
                                                                                               monkeypatch):
    assert trainer.run_cell(LOADER_SETUP).success
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "0")
    _profile(trainer, "same1", 0)
    _profile(trainer, "same2", 0)
    assert not hasattr(trainer.run_line_magic("npucompare", "same1 same2 --no-plot"), "verification")
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "2")  # set between the two cells
    _profile(trainer, "queued", 0)
    report = trainer.run_line_magic("npucompare", "same2 queued --no-plot")
    assert "env TASK_QUEUE_ENABLE: '0' -> '2'" in report.comparison.changed
    assert not hasattr(report, "verification")  # a CPU run has no finding whose fix names the variable
    # the same two records, with A's finding of the NPU environment rule (its real fix text): named
    from npumagic.analysis.rules.npu_env import environment_variables

    runs, session = _session(trainer).runs, _session(trainer)
    summary_a, summary_b = runs.summary("same2"), runs.summary("queued")
    mine = session.advise("same2").findings
    from dataclasses import replace

    [env] = environment_variables(summary_a, runs.facts("same2"))
    env = replace(env, rule="environment")  # the id the registry stamps on it
    contexts = runs.context("same2"), runs.context("queued")
    assert applied_fix(*contexts, summary_a, summary_b, mine) is None
    guessed = applied_fix(*contexts, summary_a, summary_b, [*mine, env])
    assert guessed.finding is env and guessed.rule == env.rule == "environment"
    assert guessed.evidence == "TASK_QUEUE_ENABLE went '0' -> '2'"
    # two findings that fit the same change: no guess between them
    assert applied_fix(*contexts, summary_a, summary_b, [*mine, env, replace(env, rule="other")]) is None


def test_the_syncs_per_step_gone_name_the_sync_finding(trainer):
    trainer.run_cell("def step_with_item():\n    x = torch.randn(16, 32)\n    value = model(x).sum().item()\n"
                     "    train_step()")
    for name, body in (("item", "step_with_item()"), ("noitem", "train_step()")):
        result = trainer.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name}\n"
                                  f"for _ in range(6):\n    {body}")
        assert result.success, result.error_in_exec
    session = _session(trainer)
    runs = session.runs
    told = next(f for f in session.advise("item").findings if f.category == "sync")
    args = runs.context("item"), runs.context("noitem"), runs.summary("item"), runs.summary("noitem")
    guessed = applied_fix(*args, session.advise("item").findings)
    assert guessed.finding == told
    assert guessed.evidence == f"the blocking syncs per step went {told.evidence['syncs_per_step']:.0f} -> 0"
    # the other way round the syncs grew: nothing is read as a fix
    back = runs.context("noitem"), runs.context("item"), runs.summary("noitem"), runs.summary("item")
    assert applied_fix(*back, session.advise("noitem").findings) is None
