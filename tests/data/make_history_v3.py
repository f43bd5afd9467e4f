"""How history_v3.sqlite was written: npumagic as of commit 66b9da5 (schema version 3, whose
recorder kept a capture's step times and device neighbours inside the stored Summary's meta),
two real CPU runs of 12 steps each (4 profiled, 7 timed after the window) and a note. Run with
that commit's package first on the path:

    git archive 66b9da5 | tar -x -C /tmp/v3 && PYTHONPATH=/tmp/v3 python make_history_v3.py OUT_DIR history_v3.sqlite
"""
import sqlite3, sys
from IPython.core.interactiveshell import InteractiveShell
out = sys.argv[1]
ip = InteractiveShell.instance(colors="NoColor")
ip.run_line_magic("load_ext", "npumagic")
ip.run_line_magic("config", f"NpuMagics.output_dir = {out!r}")
ip.run_cell("import torch, time; m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "def step(delay):\n    time.sleep(delay); m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()")
for name, delay in (("baseline", 0.003), ("fixed", 0.0)):
    r = ip.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps 4 --no-plot --quiet --name {name}\n"
                    f"for _ in range(12):\n    step({delay})")
    assert r.success, r.error_in_exec
ip.run_line_magic("npunote", 'baseline "written by npumagic 66b9da5"')
db = sqlite3.connect(f"{out}/history.sqlite")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
dst = sqlite3.connect(sys.argv[2]); db.backup(dst); dst.execute("PRAGMA journal_mode=DELETE"); dst.close()
print(ip.run_line_magic("npuruns", ""))
