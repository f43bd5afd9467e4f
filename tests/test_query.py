"""SQL over the stored tables of every run (npumagic query, %npuquery, the MCP tool query), on
real shared profiler output analysed into stores."""

from __future__ import annotations

import json
import sys
import warnings

import pandas as pd
import pytest

from npumagic.analysis import store
from npumagic.cli import main

from .test_store import KINETO, LEVEL1, analyze, store_on, writable_copy  # noqa: F401 - store_on: autouse


def stored_jobs(tmp_path):
    """Two real jobs analysed, each with its store: a torch_npu job of 2 ranks and a Kineto trace."""
    npu, kineto = writable_copy(LEVEL1, tmp_path / "npu"), writable_copy(KINETO, tmp_path / "kineto")
    analyze(npu)
    analyze(kineto)
    return npu, kineto


def test_query_reads_every_stored_run_of_two_histories(tmp_path, capsys):
    npu, kineto = stored_jobs(tmp_path)
    expected = {("npu", r): len(s.steps) for r, s in analyze(npu).per_rank.items()}
    expected[("kineto", 0)] = len(analyze(kineto).steps)
    capsys.readouterr()
    assert main(["query", "SELECT run, rank, count(*) AS steps, sum(wall_us) AS wall FROM steps GROUP BY ALL "
                 "ORDER BY run, rank", "--history", str(npu), "--history", str(kineto), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "query" and sorted(doc["runs"]) == ["kineto", "npu"]
    assert {(r["run"], r["rank"]): r["steps"] for r in doc["rows"]} == expected
    assert all(r["wall"] > 0 for r in doc["rows"])
    # the job's own links hold every rank's: one row per rank and link type
    assert main(["query", "SELECT DISTINCT rank FROM links WHERE run = 'npu' ORDER BY rank", "--history", str(npu),
                 "--json"]) == 0
    assert [r["rank"] for r in json.loads(capsys.readouterr().out)["rows"]] == [0, 1]


@pytest.mark.parametrize("sql", ["DROP VIEW steps", "SELECT 1; DELETE FROM steps",
                                 "COPY (SELECT * FROM steps) TO 'out.csv'", "ATTACH 'x.db'"])
def test_a_writing_statement_is_refused(sql, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    npu = writable_copy(KINETO, tmp_path / "job")
    analyze(npu)
    assert main(["query", sql, "--history", str(npu)]) == 2
    err = capsys.readouterr().err
    assert "only reading statements run here" in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("reads", ["read_text('{secret}')", "read_csv('{secret}')", "read_blob('{secret}')",
                                   "glob('{folder}/*')", "sniff_csv('{secret}')",
                                   "read_parquet('{folder}/other/*.parquet')"])
def test_a_reading_statement_opens_no_file_but_the_stores(reads, tmp_path, capsys):
    # GIVEN a file beside the history that is not a stored table (an assistant's SQL runs here too)
    npu = writable_copy(KINETO, tmp_path / "job")
    analyze(npu)
    secret = tmp_path / "secret.txt"
    secret.write_text("token=hunter2\n")
    (tmp_path / "other").mkdir()
    pd.DataFrame({"token": ["hunter2"]}).to_parquet(tmp_path / "other" / "t.parquet")
    sql = f"SELECT * FROM {reads.format(secret=secret, folder=tmp_path)}"
    # WHEN a query names it THEN DuckDB refuses to open it, and the stored tables still answer
    assert main(["query", sql, "--history", str(npu)]) == 2
    said = capsys.readouterr()
    assert "hunter2" not in said.out + said.err and "a query reads the stored tables only (" in said.err and "Traceback" not in said.err
    assert main(["query", "SELECT count(*) AS n FROM steps", "--history", str(npu), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["n"] > 0


def test_an_sql_error_is_its_message(tmp_path, capsys):
    npu = writable_copy(KINETO, tmp_path / "job")
    analyze(npu)
    assert main(["query", "SELECT nothing_here FROM steps", "--history", str(npu)]) == 2
    err = capsys.readouterr().err
    assert "SQL error" in err and "nothing_here" in err and "Traceback" not in err


def test_without_duckdb_the_command_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # `import duckdb` raises ImportError
    assert main(["query", "SELECT 1", "--history", str(tmp_path)]) == 2
    assert "pip install 'npumagic[query]'" in capsys.readouterr().err


def test_npuquery_stores_the_loaded_runs_once_and_reads_the_history(shell, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(store, "WORTH_S", 1e9)  # a load quicker than a store is worth: none written by it
    path = writable_copy(LEVEL1, tmp_path / "job")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shell.run_line_magic("npuload", f"{path} --name level1 --no-plot")
    # a quick load leaves the user's folder as it was: the first query writes the store, from the history
    assert not store.location(path).exists()
    result = shell.run_line_magic("npuquery", "SELECT run, rank, count(*) AS n FROM kernels GROUP BY ALL ORDER BY rank")
    assert (store.location(path) / store.MANIFEST).is_file() and "for queries (once)" in capsys.readouterr().err
    assert [(r, k) for r, k, _ in result.rows] == [("level1", 0), ("level1", 1)]
    assert all(n > 0 for *_, n in result.rows)
    assert isinstance(result.table, pd.DataFrame) and list(result.table.columns) == ["run", "rank", "n"]
    capsys.readouterr()
    with warnings.catch_warnings():  # the same job loaded again (a restarted notebook): from its store
        warnings.simplefilter("ignore")
        shell.run_line_magic("npuload", f"{path} --name again --no-plot")
    assert "read from its store" in capsys.readouterr().err
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="only reading statements"):
        shell.run_line_magic("npuquery", "CREATE TABLE t AS SELECT 1")


def test_a_captured_run_is_stored_by_the_first_query_not_by_the_capture(shell, tmp_path, capsys):
    shell.run_cell("layer = torch.nn.Linear(16, 16)\nopt = torch.optim.SGD(layer.parameters(), lr=0.1)\n"
                   "x = torch.randn(8, 16)")
    shell.run_cell_magic("npuprofile", "--steps 2 --no-plot --quiet --name cap",
                         "for _ in range(6):\n    layer(x).sum().backward()\n    opt.step()\n")
    from npumagic.history import HistoryStore

    (run,) = [r for r in HistoryStore(tmp_path / "runs", create=False).runs() if r.name == "cap"]
    assert run.run_dir and not store.location(run.run_dir).exists()
    capsys.readouterr()
    result = shell.run_line_magic("npuquery", "SELECT run, count(*) AS steps FROM steps GROUP BY run")
    assert [tuple(r) for r in result.rows] == [("cap", 2)]
    assert "storing the tables of 1 run" in capsys.readouterr().err
    shell.run_line_magic("npuquery", "SELECT 1")  # stored once: nothing to write the second time
    assert "storing" not in capsys.readouterr().err


def test_the_mcp_tool_query_reads_histories_below_its_roots_only(tmp_path):
    pytest.importorskip("mcp", reason="need the MCP SDK (the extra npumagic[mcp], in [test])")
    from npumagic.mcp_server import build_server

    from .test_command_core import mcp_call

    inside, outside = writable_copy(KINETO, tmp_path / "root" / "job"), writable_copy(KINETO, tmp_path / "elsewhere")
    analyze(inside)
    analyze(outside)
    server = build_server(tmp_path / "root" / "runs", roots=[str(tmp_path / "root")])
    error, doc = mcp_call(server, "query", {"sql": "SELECT run, count(*) AS n FROM kernels GROUP BY run",
                                            "histories": [str(inside)]})
    assert not error and doc["kind"] == "query" and doc["rows"][0]["run"] == "job" and doc["rows"][0]["n"] > 0
    error, text = mcp_call(server, "query", {"sql": "SELECT 1", "histories": [str(outside)]})
    assert error and "elsewhere" in str(text)
