"""A run name re-used after its run was removed: the new run reads only its own files and its own
summary, never the removed run's (its folder, kept on disk by %npurm without --files, or a summary
or trace this kernel had cached)."""

from __future__ import annotations

import npumagic
from npumagic.history import HistoryStore
from npumagic.named_runs import NamedRuns

from ..conftest import CUDA, need, shared_summary

STEPS = "%npusteps --wait 0 --warmup 1 --steps {n} --no-plot --quiet --name again train_step()"


def test_a_new_run_under_a_removed_runs_name_reads_only_its_own_trace(trainer, tmp_path):
    # GIVEN a run of 3 steps named 'again', removed from the history with its folder kept
    assert trainer.run_cell(STEPS.format(n=3)).success
    old_dir = tmp_path / "runs" / "again"
    old_files = sorted(p.name for p in old_dir.iterdir())
    trainer.run_line_magic("npurm", "again")
    # WHEN a run of 2 steps takes the name
    ran = trainer.run_cell(STEPS.format(n=2))
    assert ran.success, ran.error_in_exec
    # THEN it writes and reads a folder of its own: 2 steps, not the old trace's 3 beside them
    run = HistoryStore(tmp_path / "runs").get("again")
    assert run.status == "ok" and run.run_dir != str(old_dir) and run.run_dir_owned
    assert len(npumagic.load(run.run_dir).steps) == 2
    assert sorted(p.name for p in old_dir.iterdir()) == old_files  # the kept folder is left as it was


def test_a_summary_cached_before_its_run_was_removed_elsewhere_is_not_the_new_runs(tmp_path):
    # GIVEN this kernel's cache holding run 'again' (one trace's summary)
    out = tmp_path / "runs"
    runs = NamedRuns(out)
    old, new = (shared_summary(need(CUDA / name).glob("*.json.gz").__next__()) for name in ("alexnet_sync",
                                                                                           "ns_resolution"))
    runs.store.reserve("again", backend="cuda")
    runs.store.finish("again", "ok", summary=old)
    runs.keep("again", summary=old)
    assert runs.summary("again") is old
    # WHEN another process (`npumagic rm again`, then a new run) re-uses the name
    other = HistoryStore(out)
    other.remove("again")
    other.reserve("again", backend="cuda")
    other.finish("again", "ok", summary=new)
    # THEN this kernel reads the new run's summary, not its cached one
    assert runs.summary("again").steps.equals(new.steps)
