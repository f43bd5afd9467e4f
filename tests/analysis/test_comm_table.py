"""The collectives' table (collectives.comm_table) on what torch_npu's exports leave missing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npumagic.analysis.collectives import comm_table


def test_an_op_whose_links_are_all_missing_gets_no_link():
    """A db export's rows can lack the link type; pandas 3 keeps it missing through astype(str)."""
    comm = pd.DataFrame({"op": ["hcom_allReduce__1_0_1", "hcom_allReduce__2_0_1", "hcom_broadcast__3_0_1"],
                         "elapsed_us": [10.0, 30.0, 5.0], "wait_us": [1.0, 2.0, 0.0], "sync_us": [0.0, 1.0, 0.0],
                         "transit_mb": [1.0, 1.0, 0.5], "bandwidth_gbps": np.nan,
                         "link": pd.Series([None, None, "HCCS"], dtype=object)})
    table = comm_table(comm, pd.DataFrame({"kind": pd.Series([], dtype=object)})).set_index("op")
    assert table.loc["allReduce", ["count", "elapsed_us", "link"]].tolist() == [2, 40.0, ""]
    assert table.loc["broadcast", "link"] == "HCCS"
