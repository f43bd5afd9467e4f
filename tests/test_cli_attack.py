"""The command line under issue 31's attack: a full disk, hostile notes and histories, Ctrl-C.
Each case runs the real ``npumagic`` in a subprocess, as the user meets it."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

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


ESCAPES = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\x1b[2J\x9b31m\r\u202e"


def test_runs_and_export_print_no_escape_sequence_from_a_note(tmp_path):
    # GIVEN a note holding OSC 52 (clipboard), OSC 8 (a hidden link), a screen clear and a bidi override
    _history(tmp_path / "runs", {"r1": f"before{ESCAPES}after"})
    for command in (["runs", tmp_path / "runs"], ["export", tmp_path / "runs"]):
        # WHEN it is listed on a terminal
        proc = _cli(*command)
        # THEN the text is there, its control characters are not
        assert proc.returncode == 0, proc.stderr
        assert "before" in proc.stdout
        assert not any(c in proc.stdout for c in "\x1b\x07\x9b\r\u202e"), (command, proc.stdout)
    # nor in a Markdown log, which `cat log.md` shows on a terminal
    assert _cli("export", tmp_path / "runs", "--md", tmp_path / "log.md").returncode == 0
    text = (tmp_path / "log.md").read_text()
    assert "before" in text and not any(c in text for c in "\x1b\x07\x9b\r\u202e")


def test_analyze_prints_no_escape_sequence_from_a_trace(tmp_path):
    # GIVEN a genuine CUDA trace whose kernel and device names were given escape sequences
    import gzip
    import json

    from .conftest import CUDA, need

    source = next(need(CUDA / "alexnet_sync").glob("*.json.gz"))
    trace = json.loads(gzip.decompress(source.read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = ESCAPES + event["name"]
    for props in trace.get("deviceProperties", []):
        props["name"] = ESCAPES + str(props.get("name"))
    path = tmp_path / "hostile.pt.trace.json"
    path.write_text(json.dumps(trace))
    proc = _cli("analyze", path)
    assert proc.returncode == 0, proc.stderr
    assert not any(c in proc.stdout + proc.stderr for c in "\x1b\x07\x9b\r\u202e"), proc.stdout


@pytest.mark.parametrize("prefix", ["=", "+", "-", "@", "\t", "\r"], ids=["eq", "plus", "minus", "at", "tab", "cr"])
def test_export_csv_writes_formula_prefixes_as_text(tmp_path, prefix):
    # GIVEN a note and a device name a spreadsheet would run as a formula
    import csv

    payload = f'{prefix}HYPERLINK("http://evil","x")'
    store = HistoryStore(tmp_path / "runs")
    store.reserve("r1", backend="cpu", device=payload)
    store.finish("r1", "ok")
    store.update("r1", note=payload)
    # WHEN the log is exported as CSV
    proc = _cli("export", tmp_path / "runs", "--csv", tmp_path / "log.csv")
    assert proc.returncode == 0, proc.stderr
    # THEN each cell reads as text (a leading quote), nothing else changed
    row = next(csv.DictReader((tmp_path / "log.csv").open(newline="")))
    assert row["note"] == row["device"] == "'" + payload
    assert row["name"] == "r1" and row["status"] == "ok"


# a Dask 2024 scheduler's first message, as read from a real one: a frame of 58 bytes holding one
# msgpack frame {compression: None, python: (3, 11, 7), pickle-protocol: 5}
DASK_HANDSHAKE = (b"\x3a" + bytes(7) + b"\x01" + bytes(7) + b"*" + bytes(7) + b"\x83\xabcompression\xc0\xa6python"
                  b"\x93\x03\x0b\x07\xafpickle-protocol\x05")
ONE_BYTE_FRAME = (1).to_bytes(8, "little") + b"x"


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n", (3 * 2**29).to_bytes(8, "little"),
                                    ONE_BYTE_FRAME, DASK_HANDSHAKE + ONE_BYTE_FRAME],
                         ids=["silent", "garbage", "huge-frame", "one-garbage-byte", "handshake-then-garbage"])
def test_a_scheduler_port_that_is_no_scheduler_is_one_clear_error(answer):
    # GIVEN a port that accepts and then says nothing, garbage, a 1.5 GiB frame length, a frame of
    # one garbage byte (Dask's decoder raised struct.error), or a handshake followed by one
    import socket
    import threading

    from .conftest import ASCEND, need

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held = []

    def serve():  # every connection (npumagic's probe, then Dask's own) gets the same answer
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        # WHEN a two-rank job is sent to it
        proc = _cli("analyze", need(ASCEND / "level0"), "--scheduler", f"tcp://127.0.0.1:{port}")
    finally:
        server.close()
        for conn in held:
            conn.close()
    # THEN one line names the address and what went wrong, exit 2
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"npumagic: error: the Dask scheduler tcp://127.0.0.1:{port} ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def _hostile_copy(tmp_path, change) -> str:
    """A genuine CUDA trace (alexnet_sync) with ``change(trace)`` applied, as a file."""
    import gzip
    import json

    from .conftest import CUDA, need

    trace = json.loads(gzip.decompress(next(need(CUDA / "alexnet_sync").glob("*.json.gz")).read_bytes()))
    change(trace)
    path = tmp_path / "hostile.pt.trace.json"
    path.write_text(json.dumps(trace))
    return str(path)


def _every_kernel_minus_zero(trace):
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            event["dur"] = -0.0


def _device_properties(**values):
    def change(trace):
        for props in trace["deviceProperties"]:
            props.update(values)
    return change


@pytest.mark.parametrize("change", [_every_kernel_minus_zero, _device_properties(name=5),
                                    _device_properties(name=["x"]), _device_properties(computeMajor="seven"),
                                    _device_properties(totalGlobalMem="lots")],
                         ids=["dur-minus-zero", "name-int", "name-list", "compute-major-text", "memory-text"])
@pytest.mark.parametrize("command", ["analyze", "advise"])
def test_odd_values_in_a_trace_are_read_not_a_traceback(tmp_path, change, command):
    proc = _cli(command, _hostile_copy(tmp_path, change))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_is_one_line_and_exit_130():
    # GIVEN the CLI waiting inside a command (on a scheduler port that says nothing)
    import signal
    import socket

    from .conftest import ASCEND, need

    server = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "analyze", str(need(ASCEND / "level0")),
                             "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        conn, _ = server.accept()  # it is inside main() now
        # WHEN the user presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        conn.close()
    finally:
        server.close()
        proc.kill()
    # THEN one line, exit 130, no KeyboardInterrupt traceback
    assert proc.returncode == 130, err
    assert err == "npumagic: interrupted\n"


def test_show_with_an_empty_output_name_is_one_clear_error():
    from .conftest import CUDA, need

    proc = _cli("show", need(CUDA / "alexnet_sync"), "-o", "")
    assert proc.returncode == 2 and proc.stderr.startswith("npumagic: error: -o/--output is empty"), proc.stderr


HOSTILE = {"status": 5, "created": "yesterday", "name": b"\xff", "kind": 7,
           "headline": '{"steps": "x", "step_median_us": "y", "device_util": [1]}',
           "verdict": '{"bottleneck": 5, "findings": [1, "x", {"severity": 1}], "steps": [5, [1]]}',
           "note": b"\x00\xff", "source": b"\xff", "run_dir": 5, "steps_seen": "many", "dataloaders": '[1, "x"]'}


@pytest.mark.parametrize("column", sorted(HOSTILE))
def test_a_hostile_history_row_does_not_stop_the_others_from_listing(tmp_path, column):
    # GIVEN a history where one run's row holds a value of the wrong type (edited by another tool)
    import sqlite3

    runs = tmp_path / "runs"
    store = HistoryStore(runs)
    for name in ("good1", "bad", "good2"):
        store.reserve(name, backend="cpu")
        store.finish(name, "ok", headline={"steps": 3, "step_median_us": 1000.0})
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE runs SET {column} = ? WHERE name = 'bad'", (HOSTILE[column],))
    db.close()
    # WHEN it is listed and exported THEN every run is there, no traceback
    for command in (["runs"], ["runs", "--json"], ["export"], ["export", "--csv", tmp_path / "log.csv"]):
        proc = _cli(command[0], runs, *command[1:])
        assert proc.returncode == 0, (command, proc.stderr)
        shown = proc.stdout if len(command) == 1 or command[1] == "--json" else (tmp_path / "log.csv").read_text()
        assert "good1" in shown and "good2" in shown, command


def test_a_note_that_is_no_utf8_text_does_not_stop_the_listing(tmp_path):
    import sqlite3

    store = HistoryStore(tmp_path / "runs")
    for name in ("good1", "bad"):
        store.reserve(name)
        store.finish(name, "ok")
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET note = CAST(x'41ff42' AS TEXT) WHERE name = 'bad'")
    db.close()
    proc = _cli("runs", tmp_path / "runs")
    assert proc.returncode == 0 and "good1" in proc.stdout and "bad" in proc.stdout, proc.stderr


def test_show_matrix_of_thousands_of_rank_pairs_draws_a_bounded_figure(tmp_path):
    # GIVEN a genuine torch_npu rank whose communication_matrix.json lists 3000 rank pairs
    import json
    import shutil

    from .conftest import ASCEND, need

    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), rank)
    rank.chmod(0o755)
    matrix = rank / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    matrix.chmod(0o644)
    pairs = {f"{i}-{10**9 + i}": {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.1}
             for i in range(3000)}
    matrix.write_text(json.dumps({"step50": {"collective": {"allreduce-middle@1": pairs}, "p2p": {}}}))
    # WHEN its matrix is drawn THEN a figure of screen size is written (the first 256 ranks each way)
    proc = _cli("show", rank, "--matrix", "-o", tmp_path / "matrix.png")
    assert proc.returncode == 0, proc.stderr[-2000:]
    from PIL import Image

    assert max(Image.open(tmp_path / "matrix.png").size) <= 11 * 600
