"""Which user frames take the host's time outside operators: the innermost user frame gets each
moment of a step in which the step's thread runs no operator."""

from __future__ import annotations

import pandas as pd

from npumagic.analysis.python_frames import python_self_time


def _events(rows):
    return pd.DataFrame(rows, columns=["name", "kind", "lane", "ts_ns", "dur_ns"]).assign(device=-1)


def test_each_moment_outside_operators_goes_to_the_innermost_user_frame():
    ev = _events([
        ("train.py(1): outer", "python", "main", 0, 100),
        ("train.py(5): inner", "python", "main", 10, 40),
        ("aten::mm", "host_op", "main", 20, 10),           # inside inner: nobody's Python time
        ("<built-in method sleep>", "python", "main", 60, 15),  # a library frame: its caller's time
        ("pathlib.py(1036): open", "python", "main", 80, 5),    # the standard library's, too
        ("train.py(9): later", "python", "main", 85, 30),  # runs past the step's end (100)
        ("decorator.py(235): fun", "python", "pseudo", 0, 120),  # a thread that runs no operator
    ])
    got = {f["frame"]: f["us_per_step"] * 1000 for f in python_self_time(ev, pd.DataFrame({"start_ns": [0],
                                                                                          "end_ns": [100]}))}
    assert got == {"train.py(1): outer": 10 + 10 + 15 + 5 + 5, "train.py(5): inner": 30, "train.py(9): later": 15}


def test_a_trace_without_python_frames_names_none():
    ev = _events([("aten::mm", "host_op", "main", 0, 10)])
    assert python_self_time(ev, pd.DataFrame({"start_ns": [0], "end_ns": [100]})) == []
