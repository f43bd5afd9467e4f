"""The command line under issue 31's attack: a full disk, hostile notes and histories, Ctrl-C.
Each case runs the real ``npumagic`` in a subprocess, as the user meets it."""

from __future__ import annotations

import resource
import subprocess
import sys

from npumagic.history import HistoryStore


def _cli(*args, limit_bytes: int | None = None, **kwargs) -> subprocess.CompletedProcess:
    def small_disk():  # a full disk: writes past limit_bytes fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "npumagic.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, preexec_fn=small_disk if limit_bytes else None, **kwargs)


def _history(folder, notes: dict[str, str]) -> None:
    store = HistoryStore(folder)
    for name, note in notes.items():
        store.reserve(name, backend="cpu", device="cpu")
        store.finish(name, "ok")
        store.update(name, note=note)


def test_export_on_a_full_disk_leaves_the_existing_file_whole(tmp_path):
    # GIVEN a history whose log is larger than the disk has room for, and last week's export
    _history(tmp_path / "runs", {"big": "x" * 60_000})
    old = tmp_path / "log.csv"
    old.write_text("name,note\n" + "earlier,kept\n" * 8000)
    before = old.read_bytes()
    # WHEN the export runs out of space
    proc = _cli("export", tmp_path / "runs", "--csv", old, limit_bytes=40_000)
    # THEN one line names the file, exit 2, the old export is untouched and no temporary file is left
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"npumagic: error: cannot write {old}") and proc.stderr.count("\n") == 1
    assert old.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "runs"]
