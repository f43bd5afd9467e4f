"""schema.coerce: any frame in, exactly the schema's columns, order and dtypes out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npumagic.analysis import schema


def test_a_frame_already_in_schema_keeps_its_values_with_a_fresh_index():
    frame = schema.coerce(pd.DataFrame({"rank": [0, 0], "step": [3, 4], "start_ns": [10, 20], "end_ns": [20, 30]}),
                          schema.STEP_COLUMNS).set_axis([7, 9])
    out = schema.coerce(frame, schema.STEP_COLUMNS)
    assert list(out.index) == [0, 1] and out["step"].tolist() == [3, 4]
    out["step"] = -1
    assert frame["step"].tolist() == [3, 4]  # the caller's frame is not changed through the result


def test_wrong_dtypes_or_order_or_missing_columns_are_put_right():
    columns = {"a": "int64", "b": "float64", "c": "category", "d": "object"}
    for frame in (pd.DataFrame({"a": ["1", "2"], "b": [1, 2], "c": ["x", "y"], "d": ["p", "q"]}),  # dtypes
                  pd.DataFrame({"b": [1.0, 2.0], "a": [1, 2], "d": ["p", "q"], "c": ["x", "y"]}),  # order
                  pd.DataFrame({"a": [1, 2], "c": ["x", "y"]})):  # missing
        out = schema.coerce(frame, columns)
        assert list(out.columns) == list(columns)
        assert [str(t) for t in out.dtypes] == list(columns.values())
        assert out["a"].tolist() == [1, 2]
    assert np.isnan(out["b"]).all() and out["d"].tolist() == ["", ""]


def test_text_values_read_as_astype_str_without_a_string_per_row():
    # GIVEN a categorical column with a missing value, and the same values as plain objects
    values = pd.Series(pd.Categorical(["b", None, "a", "b"], categories=["a", "b", "unused"]))
    plain = pd.Series(["b", None, "a", "b"], dtype=object)
    # WHEN read as text THEN both read as pandas' astype(str) does, missing as "nan"
    assert list(schema.text_values(values)) == ["b", "nan", "a", "b"]
    assert list(schema.text_values(plain)) == list(plain.astype(str))
    # and the categorical's rows share their category's one string object
    out = schema.text_values(values)
    assert out[0] is out[3]


def test_same_keys_match_equal_values_across_two_columns():
    one = pd.Categorical(["x", "y", "z", "x"])
    # GIVEN two slices of one categorical column, then two columns of different categories
    a, b = pd.Series(one[:2]), pd.Series(one[2:])
    other = pd.Series(pd.Categorical(["z", "x"], categories=["z", "x"]))
    for left, right in ((a, b), (a, other), (a.astype(object), other)):
        ka, kb = schema.same_keys(left, right)
        # THEN equal values get equal keys, different ones different keys
        text_a, text_b = schema.text_values(left), schema.text_values(right)
        for i in range(len(left)):
            for j in range(len(right)):
                assert (ka[i] == kb[j]) == (text_a[i] == text_b[j])
