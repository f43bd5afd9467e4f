"""The memory command in its three shells: ``npumagic memory PATH [--json]`` on the shared torch_npu
and Kineto samples (the JSON's peak is the vendor file's own maximum), the MCP tool answering the
same document, ``%npu memory -1`` on a run the real CPU profiler recorded with ``--memory`` (a
loop keeping its losses is found growing), and a clear refusal for output without memory."""

from __future__ import annotations

import csv
import json

import pytest
from IPython.core.error import UsageError

from npumagic.cli import main

from .conftest import ASCEND, CUDA, need

RANK = ASCEND / "level1" / "rank0_ascend_pt"


def test_the_cli_answers_the_peak_memory_records_csv_holds(capsys):
    rank = need(RANK)
    with (rank / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv").open(newline="") as fh:
        pta = [r for r in csv.DictReader(fh) if r["Component"] == "PTA"]
    assert main(["memory", str(rank), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "memory" and doc["device"] == "NPU:0"
    assert doc["peak_allocated_bytes"] == max(float(r["Total Allocated(MB)"]) for r in pta) * 2**20
    assert {"name", "allocations", "bytes", "live_at_step_end_bytes"} <= set(doc["operators"][0])
    assert doc["components"]["HCCL"] > 0 and doc["churn"]["count"] > 0 and doc["growth_bytes_per_step"] is None
    assert main(["memory", str(rank), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "peak allocated 1.16 GiB" in text and "at the peak: aten::_foreach_add" in text
    assert "HCCL 404.06 MiB" in text and "... 55 more" in text


def test_a_trace_without_memory_is_refused_saying_how_to_record_it(capsys):
    trace = need(CUDA / "alexnet_sync")
    assert main(["memory", str(trace)]) == 2
    said = capsys.readouterr().err
    assert "recorded no memory" in said and "profile_memory=True" in said and "%%npuprofile --memory" in said


def test_the_mcp_tool_answers_the_clis_document(capsys):
    pytest.importorskip("mcp", reason="need the MCP SDK (the extra npumagic[mcp], in [test])")
    anyio = pytest.importorskip("anyio")
    from npumagic.mcp_server import build_server

    folder = need(CUDA / "tracelens" / "mi300_bert")
    assert main(["memory", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    server = build_server(str(folder), roots=[str(CUDA)])
    answer = anyio.run(server.call_tool, "memory", {"target": str(folder)})
    assert not answer.is_error and answer.structured_content == doc
    assert doc["peak_operator"] == "aten::addmm" and doc["peak_allocated_bytes"] == 146394112


KEEPING = """
losses = []
for _ in range(8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward(retain_graph=True)
    opt.step(); opt.zero_grad()
    losses.append(loss)
"""


def test_the_magic_finds_a_profiled_loop_keeping_its_losses_growing(shell, tmp_path, capsys):
    setup = ("model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\nx, y = torch.randn(128, 256), torch.randn(128, 1)")
    assert shell.run_cell(setup).success
    assert shell.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 6 --memory --name keeping --no-plot"
                          + KEEPING).success
    report = shell.run_line_magic("npu", "memory -1")
    doc = report.to_dict()
    assert doc["path"] == "keeping" and doc["device"] == "cpu" and doc["growth"]["growing"]
    assert doc["growth"]["operators"][0]["operator"] == "aten::clamp_min"
    assert "GROWING" in report.text()
    # the CLI reads the same run from the history's output directory
    capsys.readouterr()  # what the magics printed
    assert main(["memory", "keeping", "--history", str(tmp_path / "runs"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    # the same loop, profiled without --memory: said, as a UsageError
    assert shell.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 6 --name bare --no-plot" + KEEPING).success
    with pytest.raises(UsageError, match="bare recorded no memory"):
        shell.run_line_magic("npu", "memory bare")


def test_memfit_takes_a_runs_batch_size_from_its_dataloader(shell):
    setup = ("model = torch.nn.Sequential(torch.nn.Linear(4, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
             "data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))")
    assert shell.run_cell(setup).success
    loop = ("\nfor x, y in torch.utils.data.DataLoader(data, batch_size={b}):\n"
            "    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()")
    for b in (8, 16):
        assert shell.run_cell(f"%%npuprofile --wait 1 --warmup 1 --steps 3 --memory --name b{b} --no-plot"
                              + loop.format(b=b)).success
    doc = shell.run_line_magic("npu", "memfit b8,b16 --at 32").to_dict()
    assert [(r["size"], r["path"]) for r in doc["runs"]] == [(8, "b8"), (16, "b16")]
    assert doc["per_item_bytes"] > 0 and doc["at_size"] == 32
    with pytest.raises(UsageError, match="give each run as SIZE=PATH_OR_RUN"):
        shell.run_line_magic("npu", "memfit x=b8,b16 --at 32")
