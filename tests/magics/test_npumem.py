"""%npumem in a real shell: after a cell that creates a model and a batch on the CPU it lists both
variables with their bytes (the parameters' and the batch's storages, computed from the shapes)
and the cell that made them; after ``del`` they are gone; an optimizer keeps a deleted model's
parameters, and says so in its bytes."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError


def _rows(shell) -> dict:
    report = shell.run_line_magic("npumem", "")
    return {r.variable: r for r in report.data.itertuples(index=False)}, report


def test_the_ledger_lists_a_model_and_a_batch_then_forgets_them_after_del(shell):
    cell = shell.run_cell("model = torch.nn.Linear(256, 128)\nbatch = torch.randn(64, 256)", store_history=True)
    assert cell.success
    made = shell.execution_count - 1
    rows, report = _rows(shell)
    assert rows["model"].bytes == (256 * 128 + 128) * 4 and rows["model"].kind == "module"
    assert rows["batch"].bytes == 64 * 256 * 4 and rows["batch"].device == "cpu"
    assert rows["model"].cell == rows["batch"].cell == made
    assert f"In[{made}]" in report.text()
    shell.run_cell("del model, batch", store_history=True)
    rows, _ = _rows(shell)
    assert "model" not in rows and "batch" not in rows


def test_an_optimizer_keeps_a_deleted_models_parameters_and_a_kept_loss_is_flagged(shell):
    shell.run_cell("net = torch.nn.Linear(64, 64)\nopt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)\n"
                   "losses = []\nfor _ in range(2):\n    loss = net(torch.randn(8, 64)).sum()\n"
                   "    loss.backward(); opt.step()\n    losses.append(loss)", store_history=True)
    rows, _ = _rows(shell)
    params = (64 * 64 + 64) * 4
    assert rows["net"].bytes == 2 * params  # the parameters and their gradients, counted once: under net
    assert rows["opt"].bytes == params  # the momentum buffers
    assert rows["losses"].graph and rows["losses"].kind == "list of tensors"
    shell.run_cell("del net", store_history=True)
    rows, _ = _rows(shell)
    assert rows["opt"].bytes == 3 * params  # still holding what net held


def test_npumem_takes_no_arguments(shell):
    with pytest.raises(UsageError, match="takes no arguments"):
        shell.run_line_magic("npumem", "x")
    assert isinstance(shell.run_cell("%npumem x").error_in_exec, UsageError)


def test_a_variable_made_in_a_profiled_cell_is_named_with_its_run(shell):
    profiled = ("%%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 1 --name making --no-plot\n"
                "made = torch.nn.Linear(32, 32); out = made(torch.randn(4, 32)).sum()")
    assert shell.run_cell(profiled, store_history=True).success
    rows, report = _rows(shell)
    cell = shell.execution_count - 1
    assert rows["made"].run == "making" and rows["made"].cell == cell
    assert f"In[{cell}] (run making)" in report.text()
